/* Unit tests: what a run does about a missing Landlock (priv/landlock.c):
 * a warning by default, a refusal with strict isolation. The kernels moat
 * is tested on have Landlock, so the decision is tested here, pure. */
#include <string.h>

#include <check.h>

#include "priv/priv.h"
#include "suites.h"

START_TEST(landlock_missing_warns_or_refuses)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_landlock_decide(4, false, &err), 0);
	ck_assert_int_eq(moat_landlock_decide(1, true, &err), 0);
	ck_assert_ptr_null(err.message);
	/* no Landlock: a warning to add, the run goes on */
	ck_assert_int_eq(moat_landlock_decide(0, false, &err), 1);
	ck_assert_ptr_null(err.message);
	ck_assert_ptr_nonnull(strstr(MOAT_LANDLOCK_MISSING, "Landlock is not available"));
	/* strict: refused, unavailable (exit 3), saying why */
	ck_assert_int_eq(moat_landlock_decide(0, true, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(err.message, "strict isolation"));
	moat_error_clear(&err);
	ck_assert_int_eq(moat_landlock_decide(-1, true, &err), -1); /* an error probing: same */
	moat_error_clear(&err);
}
END_TEST

Suite *priv_suite(void)
{
	Suite *s = suite_create("priv");
	TCase *tc = tcase_create("landlock");
	tcase_add_test(tc, landlock_missing_warns_or_refuses);
	suite_add_tcase(s, tc);
	return s;
}
