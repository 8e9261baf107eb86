/* Test vectors and fixtures under tests/fixtures/, read by the unit tests. */
#ifndef MOAT_TESTS_UNIT_FIXTURE_H
#define MOAT_TESTS_UNIT_FIXTURE_H
#include <cjson/cJSON.h>

/* tests/fixtures/<rel> parsed as JSON (the test fails when it cannot be):
 * from the checkout's top, where make check runs the tests, or beside the
 * test binary (build/). cJSON_Delete it. */
cJSON *fixture_json(const char *rel);

/* fixture_path: tests/fixture_path.h */
#include "../fixture_path.h"

#endif
