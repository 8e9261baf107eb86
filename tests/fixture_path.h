/* tests/fixture_path.c: linked into the unit and the integration binaries. */
#ifndef MOAT_TESTS_FIXTURE_PATH_H
#define MOAT_TESTS_FIXTURE_PATH_H

/* Path of tests/fixtures/<rel> in this checkout: from its top (where make
 * check runs the tests), else beside the test binary (build/../tests/...);
 * a static buffer, NULL when neither is readable. */
const char *fixture_path(const char *rel);

#endif
