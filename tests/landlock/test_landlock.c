/* Landlock alone (SECURITY.md row 41): libmoat built with the test-only
 * MOAT_TEST_NO_MOUNT_WALL (src/ns/plan.c), whose root and binds stay
 * writable, runs programs in-process as root and as uid 65534. The mount
 * wall being off is checked first (the root is "rw" in mountinfo), then
 * every write the mounts would normally refuse must be refused by Landlock:
 * a file at the root (tmpfs: nothing of the host is at risk), a write to
 * /proc. Signals out of the domain (pid 1) are refused where the ABI has
 * scopes (6). Not run when the kernel has no Landlock. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <check.h>

#include "moat.h"
#include "../skip.h"

#define ROOTLESS_ID 65534

static int landlock_abi(void)
{
	long abi = syscall(444 /* landlock_create_ruleset */, NULL, 0, 1u);
	return abi < 0 ? 0 : (int)abi;
}

static char home[] = "/tmp/moat-landlock-XXXXXX";

static bool enter_mode(int mode)
{
	if (mode == 0 && geteuid() != 0) {
		harness_skip("landlock: root mode needs root");
		return false;
	}
	if (mode == 1 && geteuid() == 0) {
		ck_assert_ptr_nonnull(mkdtemp(home));
		ck_assert_int_eq(chown(home, ROOTLESS_ID, ROOTLESS_ID), 0);
		ck_assert_int_eq(setenv("HOME", home, 1), 0);
		ck_assert_int_eq(setgroups(0, NULL), 0);
		ck_assert_int_eq(setresgid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID), 0);
		ck_assert_int_eq(setresuid(ROOTLESS_ID, ROOTLESS_ID, ROOTLESS_ID), 0);
		ck_assert_int_eq(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 0);
	}
	return true;
}

static struct moat_result *run_py(const char *code)
{
	struct moat_request *req = moat_request_new();
	req->language = MOAT_LANG_PYTHON;
	req->code = strdup(code);
	req->code_len = strlen(code);
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_run(req, NULL, &res, &err) == 0, "run failed: %s", err.message);
	moat_request_free(req);
	return res;
}

static const char PROBE[] =
	"import errno, os\n"
	"root = [l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/'][0]\n"
	"print('root', 'rw' if 'rw' in root.split(',') else 'ro')\n"
	"def attempt(what, f):\n"
	"    try:\n"
	"        f(); print(what, 'ALLOWED')\n"
	"    except OSError as e:\n"
	"        print(what, errno.errorcode[e.errno])\n"
	"attempt('create /landlock-probe', lambda: open('/landlock-probe', 'w').write('x'))\n"
	"attempt('mkdir /landlock-dir', lambda: os.mkdir('/landlock-dir'))\n"
	"attempt('write /proc/self/comm', lambda: open('/proc/self/comm', 'w').write('x'))\n"
	"attempt('create /sandbox/ok', lambda: open('/sandbox/ok', 'w').write('x'))\n"
	"attempt('create /tmp/ok', lambda: open('/tmp/ok', 'w').write('x'))\n"
	"attempt('signal pid 1', lambda: os.kill(1, 0))\n";

START_TEST(landlock_alone_refuses)
{
	int abi = landlock_abi();
	if (abi < 1) {
		harness_skip("landlock_alone_refuses: this kernel has no Landlock");
		return;
	}
	if (!enter_mode(_i))
		return;
	struct moat_result *res = run_py(PROBE);
	char *out = strndup(res->stdout_buf ? res->stdout_buf : "", res->stdout_len);
	ck_assert_msg(res->exited && res->exit_code == 0, "probe failed: %.*s", (int)res->stderr_len,
		      res->stderr_buf);
	/* the outer wall is really off in this build: otherwise the refusals
	 * below would prove nothing about Landlock */
	ck_assert_msg(strstr(out, "root rw\n"), "the root is not writable here: %s", out);
	ck_assert_msg(strstr(out, "create /landlock-probe EACCES\n"), "%s", out);
	ck_assert_msg(strstr(out, "mkdir /landlock-dir EACCES\n"), "%s", out);
	ck_assert_msg(strstr(out, "write /proc/self/comm EACCES\n"), "%s", out);
	/* what the plan allows stays allowed */
	ck_assert_msg(strstr(out, "create /sandbox/ok ALLOWED\n"), "%s", out);
	ck_assert_msg(strstr(out, "create /tmp/ok ALLOWED\n"), "%s", out);
	if (abi >= 6)
		ck_assert_msg(strstr(out, "signal pid 1 EPERM\n"), "%s", out);
	for (size_t i = 0; i < res->warnings_count; i++)
		ck_assert_msg(!strstr(res->warnings[i], "Landlock"), "warning: %s", res->warnings[i]);
	free(out);
	moat_result_free(res);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("landlock");
	TCase *tc = tcase_create("alone");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, landlock_alone_refuses, 0, 2);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, CK_TAP_LOG_FILE_NAME (tools/check.sh) */
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
