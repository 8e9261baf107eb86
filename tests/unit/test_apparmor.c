/* Unit tests: AppArmor's user-namespace restriction (ns/diag.c). The kernels
 * moat is tested on have no AppArmor, so the parsers of what the kernel
 * shows (/proc/self/attr/current, /sys/kernel/security/apparmor/profiles)
 * and the fix moat prints for each state are tested here, pure. */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "moat_admin.h"
#include "ns/ns.h"
#include "suites.h"

static int parse(const char *text, char *profile, char *mode)
{
	return moat_aa_label_parse(text, strlen(text), profile, 64, mode, 32);
}

START_TEST(label_is_parsed)
{
	char p[64], m[32];
	ck_assert_int_eq(parse("unconfined\n", p, m), 0);
	ck_assert_str_eq(p, "unconfined");
	ck_assert_str_eq(m, "");
	ck_assert(!moat_aa_label_is_moat(p));
	ck_assert_int_eq(parse("moat (unconfined)\n", p, m), 0);
	ck_assert_str_eq(p, "moat");
	ck_assert_str_eq(m, "unconfined");
	ck_assert(moat_aa_label_is_moat(p));
	/* some kernels end it with a NUL as well */
	ck_assert_int_eq(moat_aa_label_parse("moat (enforce)\n", 16, p, 64, m, 32), 0);
	ck_assert_str_eq(p, "moat");
	ck_assert_str_eq(m, "enforce");
	ck_assert_int_eq(parse("/usr/bin/man (enforce)", p, m), 0);
	ck_assert_str_eq(p, "/usr/bin/man");
	/* a stack or a namespace is another label, not moat's profile */
	ck_assert_int_eq(parse("moat//&docker-default (enforce)\n", p, m), 0);
	ck_assert_str_eq(p, "moat//&docker-default");
	ck_assert(!moat_aa_label_is_moat(p));
	ck_assert_int_eq(parse(":ns:moat (enforce)\n", p, m), 0);
	ck_assert(!moat_aa_label_is_moat(p));
	ck_assert(!moat_aa_label_is_moat("moatx"));
	ck_assert(!moat_aa_label_is_moat("unprivileged_userns"));
	/* nothing, two lines, or a label that does not fit: refused */
	ck_assert_int_eq(parse("", p, m), -1);
	ck_assert_int_eq(parse("\n", p, m), -1);
	ck_assert_int_eq(parse("a\nb\n", p, m), -1);
	ck_assert_int_eq(parse(" (enforce)", p, m), -1);
	char big[100];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	ck_assert_int_eq(parse(big, p, m), -1);
	ck_assert_int_eq(parse("p (a-mode-name-longer-than-thirty-two-bytes)", p, m), -1);
}
END_TEST

START_TEST(profiles_list_is_searched)
{
	const char *list = "unprivileged_userns (enforce)\n"
			   "moat-helper (complain)\n"
			   "/usr/bin/moat (enforce)\n"
			   "moat (unconfined)\n";
	ck_assert(moat_aa_profiles_has(list, strlen(list), "moat"));
	ck_assert(moat_aa_profiles_has(list, strlen(list), "unprivileged_userns"));
	/* a prefix, or the binary's path, is another profile */
	const char *other = "moat-helper (complain)\nmoa (enforce)\n/usr/bin/moat (enforce)\n";
	ck_assert(!moat_aa_profiles_has(other, strlen(other), "moat"));
	/* the last line without its newline, and an empty list */
	const char *last = "a (enforce)\nmoat (unconfined)";
	ck_assert(moat_aa_profiles_has(last, strlen(last), "moat"));
	ck_assert(!moat_aa_profiles_has("", 0, "moat"));
	/* the length is respected: the match past it does not count */
	ck_assert(!moat_aa_profiles_has(list, 10, "moat"));
}
END_TEST

START_TEST(exe_paths_the_profile_attaches_to)
{
	ck_assert(moat_aa_exe_attached("/usr/bin/moat"));
	ck_assert(moat_aa_exe_attached("/usr/local/bin/moat"));
	ck_assert(!moat_aa_exe_attached("/home/u/moat/build/moat"));
	ck_assert(!moat_aa_exe_attached("/usr/bin/moat (deleted)"));
	ck_assert(!moat_aa_exe_attached("/bin/moat"));
	ck_assert(!moat_aa_exe_attached(""));
}
END_TEST

/* an unprivileged, unconfined moat on an Ubuntu host with the restriction */
static struct moat_apparmor *restricted(const char *exe)
{
	struct moat_apparmor *aa = calloc(1, sizeof *aa);
	ck_assert_ptr_nonnull(aa);
	aa->enabled = true;
	aa->restrict_userns = 1;
	aa->profile_loaded = -1;
	strcpy(aa->label, "unconfined");
	strcpy(aa->exe, exe);
	aa->exe_attached = moat_aa_exe_attached(exe);
	return aa;
}

START_TEST(fix_names_the_exact_commands)
{
	struct moat_apparmor *aa = restricted("/usr/local/bin/moat");
	strcpy(aa->profile_src, "/usr/local/share/moat/apparmor/moat");
	char *fix = moat_apparmor_fix(aa);
	ck_assert_ptr_nonnull(fix);
	ck_assert_ptr_nonnull(strstr(fix, "'sudo install -m 0644 /usr/local/share/moat/apparmor/moat "
				     "/etc/apparmor.d/moat && sudo apparmor_parser -r "
				     "/etc/apparmor.d/moat'"));
	ck_assert_ptr_nonnull(strstr(fix, "'sudo sysctl -w "
				     "kernel.apparmor_restrict_unprivileged_userns=0'"));
	free(fix);

	/* already in /etc/apparmor.d (make install, the package): only the load */
	aa->etc_profile = true;
	fix = moat_apparmor_fix(aa);
	ck_assert_ptr_nonnull(strstr(fix, "'sudo apparmor_parser -r /etc/apparmor.d/moat'"));
	ck_assert_ptr_null(strstr(fix, "install -m"));
	free(fix);

	/* loaded, yet this process is not under it: started before the load */
	aa->profile_loaded = 1;
	fix = moat_apparmor_fix(aa);
	ck_assert_ptr_nonnull(strstr(fix, "is loaded but this process is not under it"));
	ck_assert_ptr_nonnull(strstr(fix, "/usr/local/bin/moat again"));
	free(fix);
	free(aa);
}
END_TEST

START_TEST(fix_for_a_binary_the_profile_does_not_cover)
{
	struct moat_apparmor *aa = restricted("/home/u/moat/build/moat");
	strcpy(aa->profile_src, "/home/u/moat/apparmor/moat");
	char *fix = moat_apparmor_fix(aa);
	ck_assert_ptr_nonnull(fix);
	/* loading the profile alone would not help: it says so, and where */
	ck_assert_ptr_nonnull(strstr(fix, "attaches to /usr/bin/moat and /usr/local/bin/moat only"));
	ck_assert_ptr_nonnull(strstr(fix, "this binary is /home/u/moat/build/moat"));
	ck_assert_ptr_nonnull(strstr(fix, "sudo make install"));
	ck_assert_ptr_nonnull(strstr(fix, "sudo install -m 0644 /home/u/moat/apparmor/moat "
				     "/etc/apparmor.d/moat"));
	free(fix);
	/* no profile file found beside the binary: the source tree's is named */
	aa->profile_src[0] = '\0';
	fix = moat_apparmor_fix(aa);
	ck_assert_ptr_nonnull(strstr(fix, "install -m 0644 apparmor/moat /etc/apparmor.d/moat"));
	ck_assert_ptr_nonnull(strstr(fix, "moat's source tree"));
	free(fix);
	free(aa);
}
END_TEST

START_TEST(no_fix_when_nothing_restricts)
{
	struct moat_apparmor *aa = restricted("/usr/bin/moat");
	char *fix = moat_apparmor_fix(aa);
	ck_assert_ptr_nonnull(fix);
	free(fix);
	aa->covered = true; /* label "moat": the profile applies */
	ck_assert_ptr_null(moat_apparmor_fix(aa));
	aa->covered = false;
	aa->as_root = true; /* the restriction is for unprivileged users */
	ck_assert_ptr_null(moat_apparmor_fix(aa));
	aa->as_root = false;
	aa->restrict_userns = 0;
	ck_assert_ptr_null(moat_apparmor_fix(aa));
	aa->restrict_userns = -1; /* a kernel without the sysctl */
	ck_assert_ptr_null(moat_apparmor_fix(aa));
	aa->restrict_userns = 1;
	aa->enabled = false; /* AppArmor built in but not the active LSM */
	ck_assert_ptr_null(moat_apparmor_fix(aa));
	free(aa);
}
END_TEST

/* A container runtime's masked paths under /proc, from mountinfo lines:
 * binfmt_misc (on a directory proc keeps empty) and /proc itself do not
 * count; a file or directory mounted over does. */
START_TEST(proc_overmounts_are_listed)
{
	static const char clean[] =
		"22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
		"30 22 0:27 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - binfmt_misc "
		"binfmt_misc rw\n"
		"31 1 0:28 / /tmp rw shared:14 - tmpfs tmpfs rw\n";
	char *out = (char *)"unset";
	ck_assert_int_eq(moat_proc_overmounts_parse(clean, &out), 0);
	ck_assert_ptr_null(out);
	static const char masked[] =
		"600 590 0:60 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
		"601 600 0:60 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw\n"
		"602 600 0:60 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw\n"
		"603 600 0:5 /null /proc/kcore rw,nosuid master:2 - devtmpfs udev rw\n"
		"604 600 0:61 / /proc/acpi ro,relatime - tmpfs tmpfs ro\n"
		"605 1 0:62 / /processes rw - tmpfs tmpfs rw"; /* no newline at the end */
	ck_assert_int_eq(moat_proc_overmounts_parse(masked, &out), 0);
	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, "/proc/bus, /proc/sys, /proc/kcore, /proc/acpi");
	free(out);
	ck_assert_int_eq(moat_proc_overmounts_parse("", &out), 0);
	ck_assert_ptr_null(out);
	/* a line cut short has no mount point: not an entry, not a crash */
	ck_assert_int_eq(moat_proc_overmounts_parse("1 2 3:4 /\n", &out), 0);
	ck_assert_ptr_null(out);
}
END_TEST

/* AppArmor's userns restriction spares only root of the initial user
 * namespace: uid 0 of a pod's user namespace gets the hint too. */
START_TEST(initial_uid_map_is_told_apart)
{
	ck_assert(moat_uid_map_is_initial("         0          0 4294967295\n"));
	ck_assert(!moat_uid_map_is_initial("         0     100000      65536\n")); /* a pod */
	ck_assert(!moat_uid_map_is_initial("         0       1000          1\n")); /* unshare -r */
	ck_assert(!moat_uid_map_is_initial("0 0 4294967295\n1 1 1\n"));          /* not one line */
	ck_assert(!moat_uid_map_is_initial(""));
	ck_assert(!moat_uid_map_is_initial(NULL));
}
END_TEST

Suite *apparmor_suite(void)
{
	Suite *s = suite_create("apparmor");
	TCase *tc = tcase_create("apparmor");
	tcase_add_test(tc, label_is_parsed);
	tcase_add_test(tc, profiles_list_is_searched);
	tcase_add_test(tc, exe_paths_the_profile_attaches_to);
	tcase_add_test(tc, fix_names_the_exact_commands);
	tcase_add_test(tc, fix_for_a_binary_the_profile_does_not_cover);
	tcase_add_test(tc, no_fix_when_nothing_restricts);
	tcase_add_test(tc, proc_overmounts_are_listed);
	tcase_add_test(tc, initial_uid_map_is_told_apart);
	suite_add_tcase(s, tc);
	return s;
}
