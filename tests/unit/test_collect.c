/* Unit tests: how a run's end is decoded into the result (run_decode in
 * src/runner/collect.c), from what the supervisor knows when pid 1 ended. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <check.h>

#include "suites.h"
#include "runner/run.h"

/* A wait status as the kernel encodes it. */
#define EXITED(code) (((code) & 0xff) << 8)
#define KILLED(sig) ((sig) & 0x7f)

static struct moat_result decode(struct run_end e, bool *unreported)
{
	struct moat_result res;
	memset(&res, 0, sizeof res);
	*unreported = run_decode(&e, &res);
	return res;
}

START_TEST(exit_codes_are_kept)
{
	int codes[] = { 0, 1, 3, 127, 255 };
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		bool un;
		struct moat_result r = decode((struct run_end){ .have_status = true,
								 .status = EXITED(codes[i]) }, &un);
		ck_assert(r.exited);
		ck_assert_int_eq(r.exit_code, codes[i]);
		ck_assert_int_eq(r.signal, 0);
		ck_assert_ptr_null(r.killed_by);
		ck_assert(!r.timed_out);
		ck_assert(!un);
	}
}
END_TEST

START_TEST(a_signal_names_its_cause)
{
	bool un;
	struct moat_result r = decode((struct run_end){ .have_status = true,
							 .status = KILLED(SIGKILL) }, &un);
	ck_assert(!r.exited);
	ck_assert_int_eq(r.signal, SIGKILL);
	ck_assert_str_eq(r.killed_by, "signal");
	ck_assert(!un);
	r = decode((struct run_end){ .have_status = true, .status = KILLED(SIGSEGV) }, &un);
	ck_assert_int_eq(r.signal, SIGSEGV);
	ck_assert_str_eq(r.killed_by, "signal");
	/* the filter's kill (and a program's own SIGSYS, SECURITY.md) */
	r = decode((struct run_end){ .have_status = true, .status = KILLED(SIGSYS) }, &un);
	ck_assert_int_eq(r.signal, SIGSYS);
	ck_assert_str_eq(r.killed_by, "seccomp");
	ck_assert(!un);
}
END_TEST

START_TEST(timeout_wins_over_a_status)
{
	bool un;
	/* killed by the timer before pid 1 could report */
	struct moat_result r = decode((struct run_end){ .timed_out = true, .init_code = CLD_KILLED,
							 .init_status = SIGKILL }, &un);
	ck_assert(r.timed_out);
	ck_assert(!r.exited);
	ck_assert_int_eq(r.signal, SIGKILL);
	ck_assert_str_eq(r.killed_by, "timeout");
	ck_assert(!un);
	/* a status that raced the timer: the timeout is what the caller asked about */
	r = decode((struct run_end){ .have_status = true, .status = EXITED(0), .timed_out = true },
		   &un);
	ck_assert(r.timed_out);
	ck_assert(!r.exited);
	ck_assert_str_eq(r.killed_by, "timeout");
}
END_TEST

START_TEST(init_ending_unreported_is_flagged)
{
	bool un;
	/* the host's OOM killer or an admin killed pid 1 */
	struct moat_result r = decode((struct run_end){ .init_code = CLD_KILLED,
							 .init_status = SIGTERM }, &un);
	ck_assert(un);
	ck_assert(!r.exited);
	ck_assert_int_eq(r.signal, SIGTERM);
	ck_assert_str_eq(r.killed_by, "signal");
	r = decode((struct run_end){ .init_code = CLD_DUMPED, .init_status = SIGABRT }, &un);
	ck_assert(un);
	ck_assert_int_eq(r.signal, SIGABRT);
	/* pid 1 exited on its own without a report (it should not): as a kill */
	r = decode((struct run_end){ .init_code = CLD_EXITED, .init_status = 125 }, &un);
	ck_assert(un);
	ck_assert_int_eq(r.signal, SIGKILL);
	ck_assert_str_eq(r.killed_by, "signal");
}
END_TEST

Suite *collect_suite(void)
{
	Suite *s = suite_create("collect");
	TCase *tc = tcase_create("decode");
	tcase_add_test(tc, exit_codes_are_kept);
	tcase_add_test(tc, a_signal_names_its_cause);
	tcase_add_test(tc, timeout_wins_over_a_status);
	tcase_add_test(tc, init_ending_unreported_is_flagged);
	suite_add_tcase(s, tc);
	return s;
}
