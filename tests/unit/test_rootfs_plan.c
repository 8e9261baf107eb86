/* The rootfs plan: text parsing and the mount plan built from it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/embedded.h"
#include "ns/ns.h"
#include "suites.h"

static void expect_error(const char *text, enum moat_error_type type, const char *needle)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_plan_check_text(text, &err), -1);
	ck_assert_int_eq(err.type, type);
	ck_assert_msg(err.message && strstr(err.message, needle), "message \"%s\" lacks \"%s\"",
		      err.message, needle);
	moat_error_clear(&err);
}

START_TEST(embedded_plan_is_valid)
{
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_plan_check_text((const char *)moat_embedded_rootfs_plan, &err), 0);
	ck_assert_ptr_null(err.message);
}
END_TEST

START_TEST(bad_plan_lines)
{
	expect_error("ro-bind usr\n", MOAT_ERR_CONFIG, "line 1");
	expect_error("# c\n\nro-bind /usr/../etc\n", MOAT_ERR_CONFIG, "line 3");
	expect_error("frobnicate /usr\n", MOAT_ERR_CONFIG, "unknown directive");
	expect_error("usr-link a/b\n", MOAT_ERR_CONFIG, "usr-link");
	expect_error("generate /etc/shadow shadow\n", MOAT_ERR_CONFIG, "shadow");
	expect_error("ro-bind /a /b /c /d\n", MOAT_ERR_CONFIG, "too many");
}
END_TEST

static struct moat_mount_plan *build(const char *text, const struct moat_request *req,
				     struct moat_error *err)
{
	struct moat_plan_input in = { .plan_text = text, .req = req, .code_name = "main.py" };
	struct moat_mount_plan *p = NULL;
	if (moat_plan_build(&in, &p, err) < 0)
		return NULL;
	return p;
}

/* Every operation that creates or mounts something targets the new root,
 * never a host path; pivot comes after all of them. */
START_TEST(plan_never_touches_host_paths)
{
	struct moat_request *req = moat_request_new();
	req->code = strdup("print(1)");
	req->code_len = 8;
	struct moat_error err = { 0 };
	struct moat_mount_plan *p = build(NULL, req, &err);
	ck_assert_msg(p, "%s", err.message);
	size_t bl = strlen(p->base);
	bool pivoted = false, saw_code = false;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *op = &p->ops[i];
		if (op->kind == MOAT_OP_PIVOT) {
			pivoted = true;
			continue;
		}
		if (op->kind == MOAT_OP_SANDBOX_FILE) {
			ck_assert(!pivoted);
			saw_code |= !strcmp(op->dst, "main.py");
			continue;
		}
		if (pivoted || op->kind == MOAT_OP_CHDIR)
			continue;
		ck_assert_msg(!strncmp(op->dst, p->base, bl) && (op->dst[bl] == '/' || !op->dst[bl]),
			      "op %zu targets %s outside %s", i, op->dst, p->base);
	}
	ck_assert(pivoted);
	ck_assert(saw_code);
	/* the root and every bind of the plan are made read-only, nosuid, nodev
	 * by one recursive setattr on the base, after every bind and before the
	 * first writable mount (/dev, /proc, /tmp, /sandbox) */
	size_t ro = p->count, first_rw = p->count;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *op = &p->ops[i];
		if (op->kind == MOAT_OP_SETATTR && !strcmp(op->dst, p->base) && op->recursive &&
		    (op->attr_set & MOUNT_ATTR_RDONLY) && (op->attr_set & MOUNT_ATTR_NOSUID) &&
		    (op->attr_set & MOUNT_ATTR_NODEV) && ro == p->count)
			ro = i;
		if (op->kind == MOAT_OP_TMPFS && strcmp(op->dst, p->base) && first_rw == p->count)
			first_rw = i;
	}
	ck_assert_msg(ro < p->count, "no recursive read-only setattr on the base");
	ck_assert_msg(ro < first_rw, "setattr %zu comes after a writable mount %zu", ro, first_rw);
	/* host binds after it are only the device nodes, which get their own */
	for (size_t i = ro + 1; i < p->count; i++)
		if (p->ops[i].kind == MOAT_OP_BIND && strncmp(p->ops[i].src, p->base, bl))
			ck_assert_msg(!strncmp(p->ops[i].src, "/dev/", 5), "bind of %s after the setattr",
				      p->ops[i].src);

	moat_plan_free(p);
	moat_request_free(req);
}
END_TEST

/* /dev/pts is a new devpts instance of the sandbox's own, never a bind of
 * the host's; /dev/ptmx points into it; mounted nosuid, noexec but not
 * nodev (its nodes must open), with the pty cap. */
START_TEST(devpts_is_a_private_instance)
{
	struct moat_error err = { 0 };
	struct moat_mount_plan *p = build(NULL, NULL, &err);
	ck_assert_msg(p, "%s", err.message);
	char pts[256], ptmx[256], dev[256], max[32];
	snprintf(pts, sizeof pts, "%s/dev/pts", p->base);
	snprintf(ptmx, sizeof ptmx, "%s/dev/ptmx", p->base);
	snprintf(dev, sizeof dev, "%s/dev", p->base);
	snprintf(max, sizeof max, "max=%d", MOAT_MAX_PTYS);
	int devpts = 0, links = 0;
	size_t dev_tmpfs = p->count, dev_ro = p->count, at = p->count, shm = p->count;
	size_t last_node = 0, last_dev_op = 0;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *op = &p->ops[i];
		if (op->kind == MOAT_OP_BIND)
			ck_assert_msg(strncmp(op->src, "/dev/pts", 8) && strcmp(op->src, "/dev/ptmx") &&
					      strncmp(op->src, "/dev/tty", 8) && strcmp(op->src, "/dev/console"),
				      "bind of the host's %s", op->src);
		if (op->kind == MOAT_OP_TMPFS && !strcmp(op->dst, dev))
			dev_tmpfs = i;
		if (op->kind == MOAT_OP_SETATTR && !strcmp(op->dst, dev)) {
			dev_ro = i;
			/* one call for /dev and its nodes: recursive, and never
			 * nodev (the nodes must open; the tmpfs is nodev itself) */
			ck_assert(op->recursive);
			ck_assert(op->attr_set & MOUNT_ATTR_RDONLY);
			ck_assert(op->attr_set & MOUNT_ATTR_NOSUID);
			ck_assert(op->attr_set & MOUNT_ATTR_NOEXEC);
			ck_assert(!(op->attr_set & MOUNT_ATTR_NODEV));
		}
		if (op->kind == MOAT_OP_BIND && !strncmp(op->src, "/dev/", 5))
			last_node = i;
		/* everything made on the /dev tmpfs itself */
		if ((op->kind == MOAT_OP_MKFILE || op->kind == MOAT_OP_MKDIR ||
		     op->kind == MOAT_OP_SYMLINK) &&
		    !strncmp(op->dst, dev, strlen(dev)) && op->dst[strlen(dev)] == '/')
			last_dev_op = i;
		if (op->kind == MOAT_OP_TMPFS && !strncmp(op->dst, dev, strlen(dev)) &&
		    !strcmp(op->dst + strlen(dev), "/shm"))
			shm = i;
		if (op->kind == MOAT_OP_DEVPTS) {
			devpts++;
			at = i;
			ck_assert_str_eq(op->dst, pts);
			ck_assert_ptr_nonnull(strstr(op->src, "newinstance"));
			ck_assert_ptr_nonnull(strstr(op->src, "ptmxmode=0666"));
			ck_assert_ptr_nonnull(strstr(op->src, "gid=65534"));
			ck_assert_ptr_nonnull(strstr(op->src, max));
			ck_assert(op->flags & MS_NOSUID);
			ck_assert(op->flags & MS_NOEXEC);
			ck_assert(!(op->flags & MS_NODEV));
		}
		if (op->kind == MOAT_OP_SYMLINK && !strcmp(op->dst, ptmx)) {
			links++;
			ck_assert_str_eq(op->src, "pts/ptmx");
		}
	}
	ck_assert_int_eq(devpts, 1);
	ck_assert_int_eq(links, 1);
	/* every mount point, link and node bind on the /dev tmpfs before the
	 * recursive read-only setattr; devpts and /dev/shm after it, or they
	 * would be read-only too */
	ck_assert(dev_tmpfs < last_dev_op && last_dev_op < dev_ro);
	ck_assert(last_node < dev_ro && dev_ro < at && dev_ro < shm && shm < p->count);
	char what[256];
	moat_plan_describe(p, at, what, sizeof what);
	ck_assert_str_eq(what, "mount devpts on /dev/pts");
	moat_plan_free(p);
}
END_TEST

/* The runtime shims: held first, then copied into a tmpfs of their own at
 * MOAT_RUNTIME_MOUNT (never bound: a bind's mountinfo root names the host
 * path), before the root's recursive read-only setattr; a host
 * /etc/localtime linking into /usr is the same link, not a bind (issue 31). */
START_TEST(runtime_copied_not_bound)
{
	struct moat_plan_input in = { .runtime_dir = "/usr" };
	struct moat_mount_plan *p = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_plan_build(&in, &p, &err) == 0, "%s", err.message);
	char mnt[256], lt[256];
	snprintf(mnt, sizeof mnt, "%s" MOAT_RUNTIME_MOUNT, p->base);
	snprintf(lt, sizeof lt, "%s/etc/localtime", p->base);
	size_t hold = p->count, copy = p->count, ro = p->count, link = p->count;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *op = &p->ops[i];
		ck_assert_msg(op->kind != MOAT_OP_BIND_HELD, "a held directory is bound: %s", op->dst);
		if (op->kind == MOAT_OP_HOLD && !strcmp(op->src, "/usr"))
			hold = i;
		if (op->kind == MOAT_OP_COPY_HELD) {
			ck_assert_str_eq(op->dst, mnt);
			ck_assert_uint_eq(op->slot, MOAT_HELD_RUNTIME);
			ck_assert(strstr(op->src, "size=16777216"));
			copy = i;
		}
		if (op->kind == MOAT_OP_SETATTR && !strcmp(op->dst, p->base) && ro == p->count)
			ro = i;
		if (op->dst && !strcmp(op->dst, lt)) {
			ck_assert_msg(op->kind == MOAT_OP_SYMLINK || op->kind == MOAT_OP_MKFILE ||
					      op->kind == MOAT_OP_BIND,
				      "op %d on /etc/localtime", (int)op->kind);
			if (op->kind == MOAT_OP_SYMLINK)
				link = i;
		}
	}
	ck_assert(hold < copy && copy < ro && ro < p->count);
	char real[4096];
	struct stat st;
	if (lstat("/etc/localtime", &st) == 0 && S_ISLNK(st.st_mode) &&
	    realpath("/etc/localtime", real) && !strncmp(real, "/usr/", 5))
		ck_assert_msg(link < p->count, "/etc/localtime links into /usr: not linked");
	moat_plan_free(p);
}
END_TEST

/* --workdir: held before anything is mounted, bound after the /sandbox
 * tmpfs, then read-only, nosuid, nodev (not noexec) recursively, and the
 * working directory; no code file for an argv request. */
START_TEST(workdir_bound_read_only)
{
	const char *args[] = { "ls", NULL };
	struct moat_request *req = moat_request_new();
	req->argv = calloc(2, sizeof *req->argv);
	req->argv[0] = strdup(args[0]);
	req->argc = 1;
	struct moat_plan_input in = { .req = req, .workdir = "/work-dir-under-test" };
	struct moat_mount_plan *p = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_plan_build(&in, &p, &err) == 0, "%s", err.message);
	char mnt[256], sandbox[256];
	snprintf(mnt, sizeof mnt, "%s" MOAT_WORK_MOUNT, p->base);
	snprintf(sandbox, sizeof sandbox, "%s" MOAT_SANDBOX_DIR, p->base);
	size_t hold = p->count, tmpfs = p->count, mkdir_at = p->count, bind = p->count,
	       ro = p->count, chdir_at = p->count, pivot = p->count, first_mount = p->count;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *op = &p->ops[i];
		if (op->kind == MOAT_OP_SANDBOX_FILE)
			ck_abort_msg("an argv request wrote %s", op->dst);
		if ((op->kind == MOAT_OP_TMPFS || op->kind == MOAT_OP_BIND) && first_mount == p->count)
			first_mount = i;
		if (op->kind == MOAT_OP_HOLD && !strcmp(op->src, "/work-dir-under-test")) {
			hold = i;
			ck_assert_uint_eq(op->slot, MOAT_HELD_WORK);
			ck_assert(op->no_symlinks);
		}
		if (op->kind == MOAT_OP_TMPFS && !strcmp(op->dst, sandbox))
			tmpfs = i;
		if (op->kind == MOAT_OP_MKDIR && !strcmp(op->dst, mnt))
			mkdir_at = i;
		if (op->kind == MOAT_OP_BIND_HELD && !strcmp(op->dst, mnt)) {
			bind = i;
			ck_assert_uint_eq(op->slot, MOAT_HELD_WORK);
			ck_assert(op->recursive);
		}
		if (op->kind == MOAT_OP_SETATTR && !strcmp(op->dst, mnt)) {
			ro = i;
			ck_assert(op->recursive);
			ck_assert(op->attr_set & MOUNT_ATTR_RDONLY);
			ck_assert(op->attr_set & MOUNT_ATTR_NOSUID);
			ck_assert(op->attr_set & MOUNT_ATTR_NODEV);
			ck_assert(!(op->attr_set & MOUNT_ATTR_NOEXEC));
		}
		if (op->kind == MOAT_OP_CHDIR) {
			chdir_at = i;
			ck_assert_str_eq(op->dst, MOAT_WORK_MOUNT);
		}
		if (op->kind == MOAT_OP_PIVOT)
			pivot = i;
	}
	ck_assert_msg(hold < first_mount, "held at %zu, first mount %zu", hold, first_mount);
	ck_assert(tmpfs < mkdir_at && mkdir_at < bind && bind < ro && ro < pivot &&
		  pivot < chdir_at && chdir_at < p->count);
	moat_plan_free(p);

	/* a relative path is refused (the supervisor resolves it first) */
	in.workdir = "relative/dir";
	ck_assert_int_eq(moat_plan_build(&in, &p, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	/* without one, the working directory stays /sandbox */
	in.workdir = NULL;
	ck_assert_int_eq(moat_plan_build(&in, &p, &err), 0);
	for (size_t i = 0; i < p->count; i++) {
		ck_assert(p->ops[i].kind != MOAT_OP_HOLD && p->ops[i].kind != MOAT_OP_BIND_HELD);
		if (p->ops[i].kind == MOAT_OP_CHDIR)
			ck_assert_str_eq(p->ops[i].dst, MOAT_SANDBOX_DIR);
	}
	moat_plan_free(p);
	moat_request_free(req);
}
END_TEST

/* The work directory's HOLD is opened without following a symlink: its path
 * was resolved by the supervisor, so a symlink in it now is a swap. Applied
 * here in the test process: a plan of one HOLD mounts nothing. */
START_TEST(workdir_hold_refuses_symlinks)
{
	char dir[] = "/tmp/moat-unit-hold-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char real[64], link[64];
	snprintf(real, sizeof real, "%s/real", dir);
	snprintf(link, sizeof link, "%s/link", dir);
	ck_assert_int_eq(mkdir(real, 0755), 0);
	ck_assert_int_eq(symlink("real", link), 0);
	struct moat_mount_op op = { .kind = MOAT_OP_HOLD, .src = link, .slot = MOAT_HELD_WORK,
				    .no_symlinks = true };
	struct moat_mount_plan plan = { .ops = &op, .count = 1, .cap = 1, .base = dir };
	size_t failed = 99;
	errno = 0;
	ck_assert_int_eq(moat_plan_apply(&plan, &failed), -1);
	ck_assert_int_eq(errno, ELOOP);
	ck_assert_uint_eq(failed, 0);
	/* the resolved path opens; without the flag the link is followed */
	op.src = real;
	ck_assert_int_eq(moat_plan_apply(&plan, &failed), 0);
	op.src = link;
	op.no_symlinks = false;
	ck_assert_int_eq(moat_plan_apply(&plan, &failed), 0);
	unlink(link);
	rmdir(real);
	rmdir(dir);
}
END_TEST

START_TEST(missing_paths)
{
	struct moat_error err = { 0 };
	/* optional: skipped, no bind emitted */
	struct moat_mount_plan *p = build("ro-bind-try /nonexistent-moat-path\n", NULL, &err);
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < p->count; i++)
		ck_assert(!(p->ops[i].src && strstr(p->ops[i].src, "nonexistent-moat-path")));
	moat_plan_free(p);
	/* required: the run cannot be built */
	ck_assert_ptr_null(build("ro-bind /nonexistent-moat-path\n", NULL, &err));
	ck_assert_int_eq(err.type, MOAT_ERR_UNAVAILABLE);
	ck_assert(strstr(err.message, "/nonexistent-moat-path"));
	moat_error_clear(&err);
}
END_TEST

START_TEST(rootfs_dir_needs_mount_points)
{
	char dir[] = "/tmp/moat-unit-rootfs-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct moat_plan_input in = { .rootfs_dir = dir, .code_name = "main.py" };
	struct moat_mount_plan *p = NULL;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_plan_build(&in, &p, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert(strstr(err.message, "/proc"));
	const char *subs[] = { "proc", "dev", "tmp", "sandbox" };
	char path[256];
	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
		ck_assert_int_eq(mkdir(path, 0755), 0);
	}
	ck_assert_int_eq(moat_plan_build(&in, &p, &err), 0);
	ck_assert_int_eq(p->ops[0].kind, MOAT_OP_BIND);
	ck_assert_int_eq(p->ops[1].kind, MOAT_OP_SETATTR);
	ck_assert(p->ops[1].recursive);
	moat_plan_free(p);
	in.rootfs_dir = "relative/dir";
	ck_assert_int_eq(moat_plan_build(&in, &p, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
		rmdir(path);
	}
	rmdir(dir);
}
END_TEST

/* A zygote's tree as /proc/self/mountinfo shows it inside moat's sandbox
 * (moat serve's zygote), one line per mount point. */
#define ZTREE_HEAD                                                                              \
	"69 46 0:41 / / ro,nosuid,nodev,relatime - tmpfs tmpfs rw,size=4096k\n"                 \
	"70 69 254:0 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw\n"                   \
	"83 69 254:0 /srv/rt /opt/moat/runtime ro,nosuid,nodev,relatime - ext4 /dev/vda rw\n"   \
	"84 69 0:42 / /dev ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=1024k\n"        \
	"85 84 0:6 /null /dev/null ro,nosuid,noexec,relatime - devtmpfs devtmpfs rw\n"
#define ZTREE_FRESH                                                                             \
	"90 84 0:43 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,max=64\n"            \
	"91 84 0:44 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw\n"               \
	"92 69 0:45 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"                    \
	"93 69 0:46 / /tmp rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw\n"                   \
	"94 69 0:47 / /sandbox rw,nosuid,nodev,relatime - tmpfs tmpfs rw"

static void expect_unfit(const char *text, bool runtime, const char *needle)
{
	char why[256] = "";
	ck_assert_int_eq(moat_tree_check_own(text, runtime, why, sizeof why), -1);
	ck_assert_msg(strstr(why, needle), "reason \"%s\" lacks \"%s\"", why, needle);
}

/* A zygote's children keep its tree only where everything they could write
 * to (or the zygote's /proc) is mounted anew over: each other mount is
 * read-only. */
START_TEST(own_tree_check)
{
	char why[256] = "";
	ck_assert_int_eq(moat_tree_check_own(ZTREE_HEAD ZTREE_FRESH, true, why, sizeof why), 0);
	ck_assert_int_eq(moat_tree_check_own(ZTREE_HEAD ZTREE_FRESH "\n", false, why, sizeof why), 0);
	/* below a fresh mount point: hidden by the new mount */
	ck_assert_int_eq(moat_tree_check_own(ZTREE_HEAD ZTREE_FRESH
		"\n95 92 0:45 /sys /proc/sys rw,nosuid - proc proc rw\n"
		"96 93 0:48 / /tmp/a rw - tmpfs tmpfs rw\n", true, why, sizeof why), 0);
	/* the host's tree (a zygote run outside moat's sandbox) */
	expect_unfit("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n" ZTREE_FRESH, false,
		     "/ is not mounted read-only");
	expect_unfit(ZTREE_FRESH "\n", false, "/ is not mounted read-only");
	/* one writable mount the children would share */
	expect_unfit(ZTREE_HEAD "88 69 254:0 /work /work rw,nosuid - ext4 /dev/vda rw\n" ZTREE_FRESH,
		     true, "/work is mounted writable");
	expect_unfit(ZTREE_HEAD "88 84 0:49 / /dev/mqueue rw - mqueue mqueue rw\n" ZTREE_FRESH,
		     true, "/dev/mqueue is mounted writable");
	/* a name that only starts like a fresh one */
	expect_unfit(ZTREE_HEAD "88 69 0:49 / /tmpx rw - tmpfs tmpfs rw\n" ZTREE_FRESH, true,
		     "/tmpx is mounted writable");
	/* "rw" is the first option when writable; "ro" must be a whole option */
	expect_unfit(ZTREE_HEAD "88 69 0:49 / /x rom - tmpfs tmpfs rw\n" ZTREE_FRESH, true,
		     "/x is mounted writable");
	/* each fresh one a mount point (else nothing would be over it) */
	expect_unfit(ZTREE_HEAD
		"91 84 0:44 / /dev/shm rw - tmpfs tmpfs rw\n"
		"92 69 0:45 / /proc rw - proc proc rw\n"
		"93 69 0:46 / /tmp rw - tmpfs tmpfs rw\n"
		"94 69 0:47 / /sandbox rw - tmpfs tmpfs rw\n", true, "/dev/pts is not a mount point");
	expect_unfit("69 46 0:41 / / ro - tmpfs tmpfs rw\n" ZTREE_FRESH, true,
		     "the runtime (/opt/moat/runtime) is not mounted");
	expect_unfit("69 46 0:41 / /\n", false, "without its fields");
}
END_TEST

/* The plan of a child on its zygote's tree: a new devpts, /dev/shm, /proc
 * (masked), /tmp and /sandbox, the code file, chdir; nothing else mounted
 * and no pivot. */
START_TEST(own_tree_plan)
{
	struct moat_request req = { .code = (char *)"pass", .code_len = 4 };
	struct moat_plan_input in = { .req = &req, .code_name = "main.py", .own_tree = true,
				      .runtime_dir = "/opt/moat/runtime" };
	struct moat_mount_plan *p = NULL;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_plan_build(&in, &p, &err), 0);
	const char *want[] = { "/dev/pts", "/dev/shm", "/proc", "/tmp", "/sandbox" };
	size_t mounts = 0, w = 0;
	bool chdir_last = false, masked = false;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *op = &p->ops[i];
		ck_assert_msg(op->kind != MOAT_OP_PIVOT && op->kind != MOAT_OP_MKDIR &&
				      op->kind != MOAT_OP_HOLD,
			      "op %zu (kind %d) on the zygote's tree", i, op->kind);
		if (op->kind == MOAT_OP_TMPFS || op->kind == MOAT_OP_PROC || op->kind == MOAT_OP_DEVPTS) {
			ck_assert_msg(w < 5 && !strcmp(op->dst, want[w]), "mount %zu on %s", mounts,
				      op->dst);
			w++;
			mounts++;
		}
		if (op->kind == MOAT_OP_BIND) {
			ck_assert_msg(!strncmp(op->dst, "/proc/", 6), "a bind on %s", op->dst);
			masked |= !strcmp(op->src, "/dev/null") && !strcmp(op->dst, "/proc/kcore");
		}
		if (op->kind == MOAT_OP_DEVPTS)
			ck_assert_ptr_nonnull(strstr(op->src, "newinstance"));
		chdir_last = op->kind == MOAT_OP_CHDIR && !strcmp(op->dst, "/sandbox");
	}
	ck_assert_uint_eq(w, 5);
	ck_assert(masked && chdir_last);
	moat_plan_free(p);
	/* what the zygote's tree cannot give */
	struct moat_plan_input bad[] = {
		{ .own_tree = true, .workdir = "/w" },
		{ .own_tree = true, .rootfs_dir = "/r" },
		{ .own_tree = true, .resolv_conf = "nameserver 10.0.0.1\n" },
		{ .own_tree = true, .runtime_dir = "/srv/rt" },
		{ .own_tree = true, .proc_unmasked = true },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		p = NULL;
		ck_assert_int_eq(moat_plan_build(&bad[i], &p, &err), -1);
		ck_assert_ptr_null(p);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		moat_error_clear(&err);
	}
}
END_TEST

/* The copy pid 1 reads after clone3 (moat_plan_flatten): every op and
 * string equal to the plan's and inside the buffer, data pointers kept (the
 * request's own memory), and a buffer too small refused, never overrun. */
START_TEST(flattened_plan_is_self_contained)
{
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->code = strdup("print(1)");
	req->code_len = strlen(req->code);
	struct moat_error err = { 0 };
	struct moat_mount_plan *p = build((const char *)moat_embedded_rootfs_plan, req, &err);
	ck_assert_msg(p, "%s", err.message);
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	memset(buf, 0x5a, cap);
	struct moat_mount_plan *f = moat_plan_flatten(p, buf, cap);
	ck_assert_ptr_eq(f, (void *)buf);
#define INSIDE(ptr) ((const char *)(ptr) >= buf && (const char *)(ptr) < buf + cap)
	ck_assert_uint_eq(f->count, p->count);
	ck_assert(INSIDE(f->ops) && INSIDE(f->base));
	ck_assert_str_eq(f->base, p->base);
	bool saw_code = false;
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *a = &p->ops[i], *b = &f->ops[i];
		ck_assert_int_eq(a->kind, b->kind);
		ck_assert(!a->src == !b->src && !a->dst == !b->dst);
		ck_assert(!b->src || (INSIDE(b->src) && !strcmp(a->src, b->src)));
		ck_assert(!b->dst || (INSIDE(b->dst) && !strcmp(a->dst, b->dst)));
		ck_assert_ptr_eq(a->data, b->data);
		ck_assert_uint_eq(a->data_len, b->data_len);
		ck_assert(a->flags == b->flags && a->attr_set == b->attr_set && a->mode == b->mode &&
			  a->slot == b->slot && a->optional == b->optional);
		saw_code |= b->data == req->code;
	}
	ck_assert(saw_code);
	/* every size below what it used: NULL, and nothing written past cap */
	size_t used = 0;
	for (size_t i = 0; i < cap; i++)
		if (buf[i] != 0x5a)
			used = i + 1;
	ck_assert_uint_gt(used, sizeof *p);
	for (size_t small = 0; small < used; small += 1 + small / 8) {
		memset(buf, 0x5a, used + 64);
		ck_assert_ptr_null(moat_plan_flatten(p, buf, small));
		size_t i = small;
		while (i < used + 64 && buf[i] == 0x5a)
			i++;
		ck_assert_msg(i == used + 64, "cap %zu: byte %zu written", small, i);
	}
	/* what the supervisor sends pid 1: exactly moat_plan_flat_size bytes */
	size_t need = moat_plan_flat_size(p);
	ck_assert_uint_ge(need, used);
	ck_assert_uint_le(need, used + _Alignof(max_align_t));
	ck_assert_ptr_null(moat_plan_flatten(p, buf, need - 1));
	ck_assert_ptr_nonnull(moat_plan_flatten(p, buf, need));
	/* pid 1's copy of it (another address): every pointer moved into the
	 * copy, data pointers kept; one pointing out of it, or a string cut
	 * off by the copy's end, refused */
	char *copy = malloc(need);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, buf, need);
	uint64_t was = (uint64_t)(uintptr_t)buf;
	struct moat_mount_plan *g = moat_plan_rebase(copy, need, was);
	ck_assert_ptr_eq(g, (void *)copy);
#define IN_COPY(ptr) ((const char *)(ptr) >= copy && (const char *)(ptr) < copy + need)
	ck_assert(IN_COPY(g->ops) && IN_COPY(g->base));
	ck_assert_str_eq(g->base, p->base);
	for (size_t i = 0; i < p->count; i++) {
		const struct moat_mount_op *a = &p->ops[i], *b = &g->ops[i];
		ck_assert(!b->src || (IN_COPY(b->src) && !strcmp(a->src, b->src)));
		ck_assert(!b->dst || (IN_COPY(b->dst) && !strcmp(a->dst, b->dst)));
		ck_assert_ptr_eq(a->data, b->data);
	}
	memcpy(copy, buf, need);
	((struct moat_mount_plan *)(void *)copy)->ops = (void *)(buf + need);
	ck_assert_ptr_null(moat_plan_rebase(copy, need, was));
	memcpy(copy, buf, need);
	((struct moat_mount_plan *)(void *)copy)->base = buf - 1;
	ck_assert_ptr_null(moat_plan_rebase(copy, need, was));
	memcpy(copy, buf, need);
	copy[need - 1] = 'x'; /* the last string's NUL */
	ck_assert_ptr_null(moat_plan_rebase(copy, need, was));
	memcpy(copy, buf, need);
	ck_assert_ptr_null(moat_plan_rebase(copy, sizeof *p - 1, was));
#undef IN_COPY
	free(copy);
#undef INSIDE
	free(buf);
	moat_plan_free(p);
	moat_request_free(req);
}
END_TEST

Suite *rootfs_plan_suite(void)
{
	Suite *s = suite_create("rootfs_plan");
	TCase *tc = tcase_create("plan");
	tcase_add_test(tc, embedded_plan_is_valid);
	tcase_add_test(tc, bad_plan_lines);
	tcase_add_test(tc, plan_never_touches_host_paths);
	tcase_add_test(tc, devpts_is_a_private_instance);
	tcase_add_test(tc, missing_paths);
	tcase_add_test(tc, runtime_copied_not_bound);
	tcase_add_test(tc, workdir_bound_read_only);
	tcase_add_test(tc, workdir_hold_refuses_symlinks);
	tcase_add_test(tc, rootfs_dir_needs_mount_points);
	tcase_add_test(tc, own_tree_check);
	tcase_add_test(tc, own_tree_plan);
	tcase_add_test(tc, flattened_plan_is_self_contained);
	suite_add_tcase(s, tc);
	return s;
}
