/* A C test that cannot run here reports itself skipped (every test binary:
 * unit, threads, Landlock, integration).
 *
 * harness_skip("why %s", ...) says "note: <why>; not run" on stderr and makes
 * <why> the test's last location, which Check's TAP output prints first:
 * "ok N - # SKIP <why>:<tcase>:<test>: Passed", a skip to any TAP reader
 * (tools/tap.sh counts it so). Call it last, just before the test returns:
 * a later passing ck_assert would move the location on. */
#ifndef MOAT_TESTS_SKIP_H
#define MOAT_TESTS_SKIP_H
#include <check.h>
#include <stdarg.h>
#include <stdio.h>

__attribute__((format(printf, 1, 2), unused)) static void harness_skip(const char *fmt, ...)
{
	char why[512], mark[sizeof why + 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "note: %s; not run\n", why);
	snprintf(mark, sizeof mark, "# SKIP %s", why);
	_mark_point(mark, 0);
}

#endif
