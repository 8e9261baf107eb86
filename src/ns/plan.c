/* Supervisor side: turn the rootfs plan text and the request into a flat list
 * of mount operations. All host lookups (lstat, readlink) happen here. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/embedded.h"
#include "ns/ns.h"

#define RO_ATTRS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
/* The test-only build behind tests/landlock (make check builds it as
 * build/test-landlock, never as moat) leaves the root writable, to prove that
 * Landlock alone refuses what the read-only mounts normally refuse first. */
#ifdef MOAT_TEST_NO_MOUNT_WALL
#define WALL_ATTRS 0
#else
#define WALL_ATTRS RO_ATTRS
#endif

static const char PASSWD[] =
	"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
	"nobody:x:65534:65534:nobody:/sandbox:/usr/sbin/nologin\n";
static const char GROUP[] = "root:x:0:\nnogroup:x:65534:\n";
static const char HOSTS[] = "127.0.0.1\tlocalhost " MOAT_HOSTNAME "\n::1\tlocalhost ip6-localhost ip6-loopback\n";
static const char HOSTNAME_TEXT[] = MOAT_HOSTNAME "\n";

/* device nodes bound from the host; a nodev-free bind is needed to use them */
static const char *const DEVICES[] = { "null", "zero", "full", "random", "urandom" };
/* procfs entries made read-only (bound over themselves) */
static const char *const PROC_RO[] = { "sys", "sysrq-trigger", "irq", "bus", "fs" };
/* procfs files hidden behind /dev/null */
static const char *const PROC_MASK[] = { "kcore", "keys", "timer_list", "sched_debug",
					 "latency_stats", "kallsyms", "kmsg" };

static struct moat_mount_op *add_op(struct moat_mount_plan *p, enum moat_op_kind kind,
				    const char *src, const char *dst)
{
	if (p->count == p->cap) {
		size_t ncap = p->cap ? p->cap * 2 : 64;
		struct moat_mount_op *n = realloc(p->ops, ncap * sizeof *n);
		if (!n)
			return NULL;
		p->ops = n;
		p->cap = ncap;
	}
	struct moat_mount_op *op = &p->ops[p->count];
	memset(op, 0, sizeof *op);
	op->kind = kind;
	op->src = src ? strdup(src) : NULL;
	op->dst = dst ? strdup(dst) : NULL;
	if ((src && !op->src) || (dst && !op->dst)) {
		free(op->src);
		free(op->dst);
		return NULL;
	}
	p->count++;
	return op;
}

static char *join(const char *a, const char *b)
{
	char *s = NULL;
	if (asprintf(&s, "%s%s%s", a, (b[0] == '/' || !b[0]) ? "" : "/", b) < 0)
		return NULL;
	return s;
}

/* mkdir -p of every parent of rel (a path starting with '/') below base, then
 * of rel itself when self is true. */
static int add_mkdirs(struct moat_mount_plan *p, const char *rel, bool self)
{
	size_t len = strlen(rel);
	char *tmp = strdup(rel);
	if (!tmp)
		return -1;
	for (size_t i = 1; i <= len; i++) {
		if (i == len && !self)
			break;
		if (tmp[i] != '/' && tmp[i] != '\0')
			continue;
		char c = tmp[i];
		tmp[i] = '\0';
		char *dst = join(p->base, tmp);
		bool have = false;
		for (size_t k = 0; dst && k < p->count && !have; k++)
			have = p->ops[k].kind == MOAT_OP_MKDIR && !strcmp(p->ops[k].dst, dst);
		struct moat_mount_op *op = !dst ? NULL : have ? &p->ops[0] : add_op(p, MOAT_OP_MKDIR, NULL, dst);
		free(dst);
		if (!op) {
			free(tmp);
			return -1;
		}
		if (!have)
			op->mode = 0755;
		tmp[i] = c;
	}
	free(tmp);
	return 0;
}

static int add_setattr(struct moat_mount_plan *p, const char *dst, uint64_t attrs, bool rec)
{
	struct moat_mount_op *op = add_op(p, MOAT_OP_SETATTR, NULL, dst);
	if (!op)
		return -1;
	op->attr_set = attrs;
	op->recursive = rec;
	return 0;
}

/* The service's runtime shims (opts.runtime_dir): a host directory bound
 * at MOAT_RUNTIME_MOUNT. In a prepared root the mount point must exist: the
 * root is bound read-only and nothing can be created in it. */
static int add_runtime_bind(struct moat_mount_plan *p, const char *src, bool prepared, bool bin,
			    struct moat_error *err)
{
	struct stat st;
	if (src[0] != '/')
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the runtime directory must be an absolute path: %s", src);
	if (stat(src, &st) < 0 || !S_ISDIR(st.st_mode))
		return moat_error_set(err, MOAT_ERR_CONFIG, errno,
				      "the runtime directory %s is not a directory", src);
	char *dst = join(p->base, MOAT_RUNTIME_MOUNT);
	if (!dst)
		return moat_error_oom(err);
	int rc = 0;
	if (!prepared && add_mkdirs(p, MOAT_RUNTIME_MOUNT, true) < 0)
		rc = -1;
	/* the source was held (opened) by the plan's first op; copied into a
	 * tmpfs of its own rather than bound, so that the sandbox's mountinfo
	 * does not show where it lies on the host (a bind's "root" field is its
	 * path in the source filesystem) */
	struct moat_mount_op *op = rc < 0 ? NULL : add_op(p, MOAT_OP_COPY_HELD, NULL, dst);
	if (!op || asprintf(&op->src, "size=%llu,nr_inodes=%u,mode=0755",
			    (unsigned long long)MOAT_RUNTIME_COPY_BYTES,
			    (unsigned)MOAT_RUNTIME_COPY_INODES) < 0) {
		if (op)
			op->src = NULL;
		rc = -1;
	} else {
		op->flags = MS_NOSUID | MS_NODEV;
		/* bin/ holds the live sandboxes' agent alone: a one-shot run
		 * neither needs nor pays for its copy */
		op->skip = bin ? NULL : "bin";
	}
	free(dst);
	if (rc < 0)
		return moat_error_oom(err);
	return 0;
}

/* The caller's work directory (held by the plan's first ops): a mount point
 * made in the fresh /sandbox tmpfs, the bind (recursive: a non-recursive
 * bind of a tree with locked submounts is refused in a user namespace), then
 * read-only, nosuid, nodev over it and everything beneath. Not noexec: a
 * build step runs the checkout's scripts. Before the request's files, which
 * may not lie under it (run_prepare refuses them). */
static int add_work_bind(struct moat_mount_plan *p, const char *src)
{
	char *dst = join(p->base, MOAT_WORK_MOUNT);
	int rc = -1;
	struct moat_mount_op *op;
	if (!dst || add_mkdirs(p, MOAT_WORK_MOUNT, true) < 0 ||
	    !(op = add_op(p, MOAT_OP_BIND_HELD, src, dst)))
		goto out;
	op->slot = MOAT_HELD_WORK;
	op->recursive = true;
	rc = add_setattr(p, dst, RO_ATTRS, true);
out:
	free(dst);
	return rc;
}

/* Host path src is a symlink into /usr, which the plan bound already (as
 * /etc/localtime is): the same link inside, instead of a bind whose
 * mountinfo root field would name the target's host path. 1: made; 0: not
 * such a link; -1: out of memory. */
static int add_usr_symlink(struct moat_mount_plan *p, const char *src)
{
	struct stat st;
	char target[PATH_MAX], real[PATH_MAX];
	ssize_t n;
	if (lstat(src, &st) < 0 || !S_ISLNK(st.st_mode) || !realpath(src, real) ||
	    strncmp(real, "/usr/", 5) || (n = readlink(src, target, sizeof target - 1)) <= 0)
		return 0;
	target[n] = '\0';
	char *usr = join(p->base, "/usr");
	bool bound = false;
	for (size_t i = 0; usr && i < p->count && !bound; i++)
		bound = p->ops[i].kind == MOAT_OP_BIND && !strcmp(p->ops[i].src, "/usr") &&
			!strcmp(p->ops[i].dst, usr);
	free(usr);
	if (!bound)
		return 0;
	char *dst = join(p->base, src);
	int rc = dst && add_mkdirs(p, src, false) == 0 && add_op(p, MOAT_OP_SYMLINK, target, dst)
			 ? 1
			 : -1;
	free(dst);
	return rc;
}

/* A read-only bind of host path src at the same path inside (a symlink into
 * the bound /usr: the same symlink). */
static int add_ro_bind(struct moat_mount_plan *p, const char *src, bool optional,
		       struct moat_error *err)
{
	int link = add_usr_symlink(p, src);
	if (link != 0)
		return link > 0 ? 0
				: moat_error_oom(err);
	struct stat st;
	if (stat(src, &st) < 0) {
		if (optional && (errno == ENOENT || errno == ENOTDIR))
			return 0;
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "rootfs plan: cannot use host path %s: %s", src, strerror(errno));
	}
	bool dir = S_ISDIR(st.st_mode);
	if (!dir && !S_ISREG(st.st_mode))
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "rootfs plan: host path %s is neither a file nor a directory", src);
	char *dst = join(p->base, src);
	int rc = -1;
	if (!dst || add_mkdirs(p, src, dir) < 0)
		goto out;
	if (!dir && !add_op(p, MOAT_OP_MKFILE, NULL, dst))
		goto out;
	struct moat_mount_op *op = add_op(p, MOAT_OP_BIND, src, dst);
	if (!op)
		goto out;
	op->recursive = true;
	op->optional = optional;
	/* made read-only, nosuid, nodev together with the root (one recursive
	 * mount_setattr in moat_plan_build, before anything writable is mounted) */
	rc = 0;
out:
	free(dst);
	if (rc < 0)
		moat_error_oom(err);
	return rc;
}

static int add_usr_link(struct moat_mount_plan *p, const char *name, struct moat_error *err)
{
	char *host = join("", name);
	if (!host)
		return moat_error_oom(err);
	if (host[0] != '/') {
		char *h2 = join("/", name);
		free(host);
		host = h2;
		if (!host)
			return moat_error_oom(err);
	}
	struct stat st;
	int rc = 0;
	if (lstat(host, &st) < 0) {
		rc = 0; /* the host has no such entry: neither has the sandbox */
	} else if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlink(host, target, sizeof target - 1);
		if (n < 0) {
			rc = moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "readlink %s: %s",
					    host, strerror(errno));
		} else {
			target[n] = '\0';
			char *dst = join(p->base, host);
			if (!dst || !add_op(p, MOAT_OP_SYMLINK, target, dst))
				rc = moat_error_oom(err);
			free(dst);
		}
	} else if (S_ISDIR(st.st_mode)) {
		rc = add_ro_bind(p, host, true, err);
	}
	free(host);
	return rc;
}

static int add_generated(struct moat_mount_plan *p, const char *path, const char *kind,
			 int lineno, struct moat_error *err)
{
	const char *text;
	if (!strcmp(kind, "passwd"))
		text = PASSWD;
	else if (!strcmp(kind, "group"))
		text = GROUP;
	else if (!strcmp(kind, "hosts"))
		text = HOSTS;
	else if (!strcmp(kind, "hostname"))
		text = HOSTNAME_TEXT;
	else
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "rootfs plan line %d: unknown generated file kind \"%s\"", lineno, kind);
	char *dst = join(p->base, path);
	struct moat_mount_op *op = NULL;
	if (dst && add_mkdirs(p, path, false) == 0)
		op = add_op(p, MOAT_OP_WRITE, NULL, dst);
	free(dst);
	if (!op)
		return moat_error_oom(err);
	op->data = text;
	op->data_len = strlen(text);
	op->mode = 0644;
	return 0;
}

/* A generated file of the default root (text not owned: must outlive the plan). */
static int add_text_file(struct moat_mount_plan *p, const char *path, const char *text)
{
	char *dst = join(p->base, path);
	struct moat_mount_op *op = NULL;
	if (dst && add_mkdirs(p, path, false) == 0)
		op = add_op(p, MOAT_OP_WRITE, NULL, dst);
	free(dst);
	if (!op)
		return -1;
	op->data = text;
	op->data_len = strlen(text);
	op->mode = 0644;
	return 0;
}

/* Splits the plan text into lines and either checks (p NULL) or builds. */
static int run_plan_text(struct moat_mount_plan *p, const char *text, struct moat_error *err)
{
	const char *line = text;
	int lineno = 0;
	while (*line) {
		lineno++;
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char *copy = strndup(line, len);
		if (!copy)
			return moat_error_oom(err);
		char *hash = strchr(copy, '#');
		if (hash)
			*hash = '\0';
		char *save = NULL;
		char *words[4] = { 0 };
		int n = 0;
		for (char *w = strtok_r(copy, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
			if (n == 4) {
				n++;
				break;
			}
			words[n++] = w;
		}
		int rc = 0;
		if (n == 0) {
			rc = 0;
		} else if (n > 3) {
			rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
					    "rootfs plan line %d: too many words", lineno);
		} else if (!strcmp(words[0], "ro-bind") || !strcmp(words[0], "ro-bind-try")) {
			if (n != 2 || words[1][0] != '/' || strstr(words[1], ".."))
				rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
						    "rootfs plan line %d: %s takes one absolute path without ..",
						    lineno, words[0]);
			else if (p)
				rc = add_ro_bind(p, words[1], !strcmp(words[0], "ro-bind-try"), err);
		} else if (!strcmp(words[0], "usr-link")) {
			if (n != 2 || strchr(words[1], '/') || !strcmp(words[1], "..") || !strcmp(words[1], "."))
				rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
						    "rootfs plan line %d: usr-link takes one top-level name", lineno);
			else if (p)
				rc = add_usr_link(p, words[1], err);
		} else if (!strcmp(words[0], "generate")) {
			if (n != 3 || words[1][0] != '/' || strstr(words[1], ".."))
				rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
						    "rootfs plan line %d: generate takes an absolute path and a kind",
						    lineno);
			else if (p)
				rc = add_generated(p, words[1], words[2], lineno, err);
			else if (strcmp(words[2], "passwd") && strcmp(words[2], "group") &&
				 strcmp(words[2], "hosts") && strcmp(words[2], "hostname"))
				rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
						    "rootfs plan line %d: unknown generated file kind \"%s\"",
						    lineno, words[2]);
		} else {
			rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
					    "rootfs plan line %d: unknown directive \"%s\"", lineno, words[0]);
		}
		free(copy);
		if (rc < 0)
			return -1;
		if (!end)
			break;
		line = end + 1;
	}
	return 0;
}

int moat_plan_check_text(const char *text, struct moat_error *err)
{
	return run_plan_text(NULL, text, err);
}

static int add_tmpfs(struct moat_mount_plan *p, const char *rel, unsigned long flags,
		     mode_t mode, uint64_t bytes)
{
	char *dst = join(p->base, rel);
	if (!dst)
		return -1;
	struct moat_mount_op *op = add_op(p, MOAT_OP_TMPFS, NULL, dst);
	free(dst);
	if (!op)
		return -1;
	op->flags = flags;
	op->mode = mode;
	/* the options string lives in src (owned), "size=N,mode=OOOO" */
	if (asprintf(&op->src, "size=%llu,mode=%04o", (unsigned long long)bytes, (unsigned)mode) < 0) {
		op->src = NULL;
		return -1;
	}
	return 0;
}

/* The sandbox's own pseudo-terminals: a new devpts instance (the host's
 * ptys are in another and stay invisible); a cold run's /dev/ptmx links to its
 * multiplexer (add_dev makes the link and the mount point). Not nodev, or no
 * pty could be opened; the kernel allows its device nodes in a user
 * namespace. New ptys belong to the opener (65534) with group 65534, mapped in
 * both modes; at most MOAT_MAX_PTYS at once, so a sandbox cannot drain the
 * host's shared pty count (kernel.pty.max). */
static int add_devpts(struct moat_mount_plan *p)
{
	char *pts = join(p->base, "/dev/pts");
	struct moat_mount_op *op = pts ? add_op(p, MOAT_OP_DEVPTS, NULL, pts) : NULL;
	if (op) {
		op->flags = MS_NOSUID | MS_NOEXEC;
		if (asprintf(&op->src, "newinstance,ptmxmode=0666,mode=0620,gid=%u,max=%u",
			     (unsigned)MOAT_SANDBOX_GID, (unsigned)MOAT_MAX_PTYS) < 0) {
			op->src = NULL;
			op = NULL;
		}
	}
	free(pts);
	return op ? 0 : -1;
}

static int add_shm(struct moat_mount_plan *p, uint64_t bytes)
{
	return add_tmpfs(p, "/dev/shm", MS_NOSUID | MS_NODEV | MS_NOEXEC, 01777, bytes);
}

/* /dev: a tmpfs with the host's five harmless device nodes bound in, the
 * /proc/self/fd links, a devpts of its own and /dev/shm. Every mount point and
 * link first (the tmpfs is writable), then the five binds, then one recursive
 * setattr makes /dev and the nodes read-only, nosuid, noexec (/dev is nodev
 * from its mount; the nodes must not be), one call instead of one per node;
 * devpts and /dev/shm are mounted after it, so they stay writable. */
static int add_dev(struct moat_mount_plan *p, uint64_t shm_bytes)
{
	char *dev = join(p->base, "/dev");
	if (!dev)
		return -1;
	int rc = -1;
	if (add_mkdirs(p, "/dev", true) < 0 ||
	    add_tmpfs(p, "/dev", MS_NOSUID | MS_NOEXEC | MS_NODEV, 0755, 1024 * 1024) < 0)
		goto out;
	for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++) {
		char *dst = join(dev, DEVICES[i]);
		struct moat_mount_op *op = dst ? add_op(p, MOAT_OP_MKFILE, NULL, dst) : NULL;
		free(dst);
		if (!op)
			goto out;
	}
	static const char *const links[][2] = {
		{ "/proc/self/fd", "fd" }, { "/proc/self/fd/0", "stdin" },
		{ "/proc/self/fd/1", "stdout" }, { "/proc/self/fd/2", "stderr" },
		{ "pts/ptmx", "ptmx" },
	};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		char *dst = join(dev, links[i][1]);
		struct moat_mount_op *op = dst ? add_op(p, MOAT_OP_SYMLINK, links[i][0], dst) : NULL;
		free(dst);
		if (!op)
			goto out;
	}
	if (add_mkdirs(p, "/dev/pts", true) < 0 || add_mkdirs(p, "/dev/shm", true) < 0)
		goto out;
	for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++) {
		char *host = join("/dev", DEVICES[i]);
		char *dst = join(dev, DEVICES[i]);
		struct moat_mount_op *op = host && dst ? add_op(p, MOAT_OP_BIND, host, dst) : NULL;
		free(host);
		free(dst);
		if (!op)
			goto out;
	}
	if (add_setattr(p, dev, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, true) < 0 ||
	    add_devpts(p) < 0 || add_shm(p, shm_bytes) < 0)
		goto out;
	rc = 0;
out:
	free(dev);
	return rc;
}

static int add_proc(struct moat_mount_plan *p, bool unmasked, bool mkdir)
{
	char *proc = join(p->base, "/proc");
	char *devnull = join(p->base, "/dev/null");
	int rc = -1;
	if (!proc || !devnull || (mkdir && add_mkdirs(p, "/proc", true) < 0))
		goto out;
	struct moat_mount_op *op = add_op(p, MOAT_OP_PROC, NULL, proc);
	if (!op)
		goto out;
	op->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	for (size_t i = 0; !unmasked && i < sizeof PROC_RO / sizeof PROC_RO[0]; i++) {
		char *path = join(proc, PROC_RO[i]);
		op = path ? add_op(p, MOAT_OP_BIND, path, path) : NULL;
		if (op) {
			op->recursive = true;
			op->optional = true;
			op = add_op(p, MOAT_OP_SETATTR, NULL, path);
		}
		if (op) {
			op->attr_set = RO_ATTRS | MOUNT_ATTR_NOEXEC;
			op->recursive = true;
			op->optional = true;
		}
		free(path);
		if (!op)
			goto out;
	}
	for (size_t i = 0; !unmasked && i < sizeof PROC_MASK / sizeof PROC_MASK[0]; i++) {
		char *path = join(proc, PROC_MASK[i]);
		op = path ? add_op(p, MOAT_OP_BIND, devnull, path) : NULL;
		if (op)
			op->optional = true;
		free(path);
		if (!op)
			goto out;
	}
	rc = 0;
out:
	free(proc);
	free(devnull);
	return rc;
}

static int add_sandbox_file(struct moat_mount_plan *p, const char *rel, const char *data,
			    size_t len, mode_t mode)
{
	struct moat_mount_op *op = add_op(p, MOAT_OP_SANDBOX_FILE, NULL, rel);
	if (!op)
		return -1;
	op->data = data;
	op->data_len = len;
	op->mode = mode;
	op->user_data = true;
	return 0;
}

/* The directory the new root is assembled on, inside the child's private
 * mount namespace (the host never sees it): the first existing of these. */
static const char *pick_base(void)
{
	static const char *const candidates[] = { "/tmp", "/mnt", "/var/tmp", "/run" };
	for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
		struct stat st;
		if (lstat(candidates[i], &st) == 0 && S_ISDIR(st.st_mode))
			return candidates[i];
	}
	return NULL;
}

static int check_rootfs_dir(const char *dir, struct moat_error *err)
{
	static const char *const need[] = { "proc", "dev", "tmp", "sandbox" };
	struct stat st;
	if (dir[0] != '/')
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "--rootfs must be an absolute path: %s", dir);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return moat_error_set(err, MOAT_ERR_CONFIG, errno,
				      "--rootfs %s is not a directory", dir);
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		char *path = join(dir, need[i]);
		if (!path)
			return moat_error_oom(err);
		int ok = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
		free(path);
		if (!ok)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--rootfs %s has no /%s directory (a prepared root needs "
					      "empty proc, dev, tmp and sandbox directories)", dir, need[i]);
	}
	return 0;
}

/* What a zygote's child mounts anew on the zygote's tree (own_tree): every
 * mount a run can write to, and /proc, which names a pid namespace. */
static const char *const OWN_TREE_FRESH[] = { "/dev/pts", "/dev/shm", "/proc", "/tmp", "/sandbox" };

/* Mount point mp (as mountinfo escapes it) is fresh, or below one. */
static bool own_tree_fresh(const char *mp, size_t n)
{
	for (size_t i = 0; i < sizeof OWN_TREE_FRESH / sizeof OWN_TREE_FRESH[0]; i++) {
		size_t k = strlen(OWN_TREE_FRESH[i]);
		if (n >= k && !memcmp(mp, OWN_TREE_FRESH[i], k) && (n == k || mp[k] == '/'))
			return true;
	}
	return false;
}

int moat_tree_check_own(const char *mountinfo, bool runtime, char *why, size_t len)
{
	bool have_runtime = false, root_ro = false, seen[sizeof OWN_TREE_FRESH / sizeof OWN_TREE_FRESH[0]] = { false };
	for (const char *line = mountinfo; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line) : strlen(line);
		/* id parent major:minor root mount-point options ... */
		const char *f = line, *mp = NULL, *opts = NULL;
		size_t mp_len = 0;
		for (int field = 0; field < 6 && f < line + n; field++) {
			const char *sp = memchr(f, ' ', (size_t)(line + n - f));
			size_t flen = sp ? (size_t)(sp - f) : (size_t)(line + n - f);
			if (field == 4) {
				mp = f;
				mp_len = flen;
			} else if (field == 5) {
				opts = f;
			}
			f = sp ? sp + 1 : line + n;
		}
		if (!mp || !opts) {
			snprintf(why, len, "a mountinfo line without its fields");
			return -1;
		}
		bool ro = !strncmp(opts, "ro", 2) && (opts[2] == ',' || opts[2] == ' ' ||
						     opts + 2 == line + n);
		if (mp_len == 1 && mp[0] == '/')
			root_ro = ro;
		else if (!ro && !own_tree_fresh(mp, mp_len)) {
			snprintf(why, len, "%.*s is mounted writable", (int)mp_len, mp);
			return -1;
		}
		if (mp_len == strlen(MOAT_RUNTIME_MOUNT) && !memcmp(mp, MOAT_RUNTIME_MOUNT, mp_len))
			have_runtime = true;
		for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++)
			if (strlen(OWN_TREE_FRESH[i]) == mp_len &&
			    !memcmp(mp, OWN_TREE_FRESH[i], mp_len))
				seen[i] = true;
		line = end ? end + 1 : NULL;
	}
	if (!root_ro) {
		snprintf(why, len, "/ is not mounted read-only");
		return -1;
	}
	for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++)
		if (!seen[i]) {
			snprintf(why, len, "%s is not a mount point", OWN_TREE_FRESH[i]);
			return -1;
		}
	if (runtime && !have_runtime) {
		snprintf(why, len, "the runtime (%s) is not mounted", MOAT_RUNTIME_MOUNT);
		return -1;
	}
	return 0;
}

static int plan_oom(struct moat_error *err)
{
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOMEM,
			      "out of memory building the mount plan");
}

/* A zygote's child (moat_plan_input.own_tree): the zygote's tree is the
 * sandbox's, as its clone3 copied it; the same plan made it and
 * moat_tree_check_own checked it. What a run can write to and /proc are
 * mounted anew on it (OWN_TREE_FRESH, as a cold run's plan mounts them);
 * no pivot_root, the working directory the new /sandbox. */
static int build_on_own_tree(const struct moat_plan_input *in, struct moat_mount_plan **out,
			     struct moat_error *err)
{
	if (in->rootfs_dir || in->workdir || in->resolv_conf || in->proc_unmasked ||
	    (in->runtime_dir && strcmp(in->runtime_dir, MOAT_RUNTIME_MOUNT)))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a sandbox on its zygote's tree has no root, work directory, "
				      "network or runtime of its own");
	struct moat_mount_plan *p = calloc(1, sizeof *p);
	if (!p || !(p->base = strdup("")))
		goto oom;
	uint64_t tmpfs = in->tmpfs_bytes ? in->tmpfs_bytes : MOAT_DEFAULT_TMPFS_BYTES;
	if (add_devpts(p) < 0 || add_shm(p, tmpfs) < 0 || add_proc(p, false, false) < 0 ||
	    add_tmpfs(p, "/tmp", MS_NOSUID | MS_NODEV | MS_NOEXEC, 01777, tmpfs) < 0 ||
	    add_tmpfs(p, "/sandbox", MS_NOSUID | MS_NODEV, 0755, tmpfs) < 0)
		goto oom;
	const struct moat_request *req = in->req;
	if (req && in->code_name &&
	    add_sandbox_file(p, in->code_name, req->code, req->code_len, 0644) < 0)
		goto oom;
	for (size_t i = 0; req && i < req->files_count; i++)
		if (add_sandbox_file(p, req->files[i].key, req->files[i].value,
				     req->files[i].value_len, 0644) < 0)
			goto oom;
	if (!add_op(p, MOAT_OP_CHDIR, NULL, MOAT_SANDBOX_DIR))
		goto oom;
	*out = p;
	return 0;
oom:
	moat_plan_free(p);
	return plan_oom(err);
}

int moat_plan_build(const struct moat_plan_input *in, struct moat_mount_plan **out,
		    struct moat_error *err)
{
	if (in->own_tree)
		return build_on_own_tree(in, out, err);
	struct moat_mount_plan *p = calloc(1, sizeof *p);
	if (!p)
		return moat_error_oom(err);
	const char *base = pick_base();
	if (!base) {
		free(p);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "no directory to assemble the sandbox root on (/tmp, /mnt, /var/tmp, /run)");
	}
	p->base = strdup(base);
	uint64_t tmpfs = in->tmpfs_bytes ? in->tmpfs_bytes : MOAT_DEFAULT_TMPFS_BYTES;
	if (!p->base)
		goto oom;
	/* first, while every host path is still visible */
	if (in->runtime_dir && in->runtime_dir[0] == '/' &&
	    !add_op(p, MOAT_OP_HOLD, in->runtime_dir, NULL))
		goto oom;
	if (in->workdir) {
		if (in->workdir[0] != '/') {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "the work directory must be an absolute path: %s", in->workdir);
			goto fail;
		}
		struct moat_mount_op *op = add_op(p, MOAT_OP_HOLD, in->workdir, NULL);
		if (!op)
			goto oom;
		op->slot = MOAT_HELD_WORK;
		op->no_symlinks = true; /* the supervisor resolved them (realpath) */
	}

	if (in->rootfs_dir) {
		if (check_rootfs_dir(in->rootfs_dir, err) < 0)
			goto fail;
		struct moat_mount_op *op = add_op(p, MOAT_OP_BIND, in->rootfs_dir, p->base);
		if (!op)
			goto oom;
		op->recursive = true;
		if (in->runtime_dir) {
			char *mp = join(in->rootfs_dir, MOAT_RUNTIME_MOUNT);
			struct stat st;
			bool ok = mp && lstat(mp, &st) == 0 && S_ISDIR(st.st_mode);
			free(mp);
			if (!ok) {
				moat_error_set(err, MOAT_ERR_CONFIG, 0,
					       "--rootfs %s has no %s directory (the mount point of the "
					       "service's runtime; rootfs/build-rootfs.sh creates it)",
					       in->rootfs_dir, MOAT_RUNTIME_MOUNT);
				goto fail;
			}
			if (add_runtime_bind(p, in->runtime_dir, true, in->runtime_bin, err) < 0)
				goto fail;
		}
		if (WALL_ATTRS && add_setattr(p, p->base, WALL_ATTRS, true) < 0)
			goto oom;
	} else {
		if (add_tmpfs(p, "", MS_NOSUID | MS_NODEV, 0755, 4 * 1024 * 1024) < 0)
			goto oom;
		const char *text = in->plan_text ? in->plan_text
						 : (const char *)moat_embedded_rootfs_plan;
		if (run_plan_text(p, text, err) < 0)
			goto fail;
		if (add_mkdirs(p, "/tmp", true) < 0 || add_mkdirs(p, "/sandbox", true) < 0)
			goto oom;
		if (in->resolv_conf && add_text_file(p, "/etc/resolv.conf", in->resolv_conf) < 0)
			goto oom;
		if (in->runtime_dir && add_runtime_bind(p, in->runtime_dir, false, in->runtime_bin, err) < 0)
			goto fail;
		if (add_mkdirs(p, "/dev", true) < 0 || add_mkdirs(p, "/proc", true) < 0)
			goto oom;
		/* the root and every bind of the plan: read-only, nosuid, nodev,
		 * recursively, before anything writable is mounted on top */
		if (WALL_ATTRS && add_setattr(p, p->base, WALL_ATTRS, true) < 0)
			goto oom;
	}
	if (add_dev(p, tmpfs) < 0 || add_proc(p, in->proc_unmasked, true) < 0 ||
	    add_tmpfs(p, "/tmp", MS_NOSUID | MS_NODEV | MS_NOEXEC, 01777, tmpfs) < 0 ||
	    add_tmpfs(p, "/sandbox", MS_NOSUID | MS_NODEV, 0755, tmpfs) < 0)
		goto oom;
	if (in->workdir && add_work_bind(p, in->workdir) < 0)
		goto oom;

	const struct moat_request *req = in->req;
	if (req) {
		/* an argv request has no code file */
		if (in->code_name &&
		    add_sandbox_file(p, in->code_name, req->code, req->code_len, 0644) < 0)
			goto oom;
		for (size_t i = 0; i < req->files_count; i++)
			if (add_sandbox_file(p, req->files[i].key, req->files[i].value,
					     req->files[i].value_len, 0644) < 0)
				goto oom;
	}
	if (!add_op(p, MOAT_OP_PIVOT, NULL, p->base))
		goto oom;
	if (!add_op(p, MOAT_OP_CHDIR, NULL, in->workdir ? MOAT_WORK_MOUNT : MOAT_SANDBOX_DIR))
		goto oom;
	*out = p;
	return 0;
oom:
	plan_oom(err);
fail:
	moat_plan_free(p);
	return -1;
}

void moat_plan_free(struct moat_mount_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->count; i++) {
		free(p->ops[i].src);
		free(p->ops[i].dst);
	}
	free(p->ops);
	free(p->base);
	free(p->owned_text);
	free(p);
}

/* A bump allocation of n bytes (aligned for any op) from buf's cap, or NULL. */
static void *flat_take(char *buf, size_t cap, size_t *used, size_t n)
{
	size_t at = (*used + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
	if (at > cap || n > cap - at)
		return NULL;
	*used = at + n;
	return buf + at;
}

static bool flat_str(char *buf, size_t cap, size_t *used, char **s)
{
	if (!*s)
		return true;
	size_t n = strlen(*s) + 1;
	char *c = flat_take(buf, cap, used, n);
	if (!c)
		return false;
	memcpy(c, *s, n);
	*s = c;
	return true;
}

/* What flat_take and flat_str take of a plan's flat copy, counted alike. */
static void flat_count(size_t *used, size_t n)
{
	*used = ((*used + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1)) + n;
}

size_t moat_plan_flat_size(const struct moat_mount_plan *p)
{
	size_t used = 0;
	flat_count(&used, sizeof *p);
	if (p->count)
		flat_count(&used, p->count * sizeof *p->ops);
	if (p->base)
		flat_count(&used, strlen(p->base) + 1);
	for (size_t i = 0; i < p->count; i++) {
		if (p->ops[i].src)
			flat_count(&used, strlen(p->ops[i].src) + 1);
		if (p->ops[i].dst)
			flat_count(&used, strlen(p->ops[i].dst) + 1);
	}
	return used;
}

struct moat_mount_plan *moat_plan_flatten(const struct moat_mount_plan *p, void *buf, size_t cap)
{
	size_t used = 0;
	struct moat_mount_plan *f = flat_take(buf, cap, &used, sizeof *f);
	if (!f || p->count > (cap - used) / sizeof *p->ops)
		return NULL;
	*f = (struct moat_mount_plan){ .count = p->count, .cap = p->count, .base = p->base };
	if (p->count && !(f->ops = flat_take(buf, cap, &used, p->count * sizeof *p->ops)))
		return NULL;
	if (p->count)
		memcpy(f->ops, p->ops, p->count * sizeof *p->ops);
	if (!flat_str(buf, cap, &used, &f->base))
		return NULL;
	for (size_t i = 0; i < f->count; i++)
		if (!flat_str(buf, cap, &used, &f->ops[i].src) ||
		    !flat_str(buf, cap, &used, &f->ops[i].dst))
			return NULL;
	return f;
}

int moat_plan_describe(const struct moat_mount_plan *p, size_t i, char *buf, size_t len)
{
	if (i >= p->count)
		return snprintf(buf, len, "step %zu", i);
	const struct moat_mount_op *op = &p->ops[i];
	const char *dst = op->dst ? op->dst : "";
	size_t bl = strlen(p->base);
	/* show paths as the sandbox sees them */
	if (op->kind != MOAT_OP_SANDBOX_FILE && !strncmp(dst, p->base, bl) &&
	    (dst[bl] == '/' || dst[bl] == '\0'))
		dst = dst[bl] ? dst + bl : "/";
	switch (op->kind) {
	case MOAT_OP_MKDIR: return snprintf(buf, len, "create directory %s", dst);
	case MOAT_OP_TMPFS: return snprintf(buf, len, "mount tmpfs on %s", dst);
	case MOAT_OP_BIND: return snprintf(buf, len, "bind %s on %s", op->src, dst);
	case MOAT_OP_SETATTR: return snprintf(buf, len, "make %s read-only", dst);
	case MOAT_OP_MKFILE: return snprintf(buf, len, "create mount point %s", dst);
	case MOAT_OP_SYMLINK: return snprintf(buf, len, "symlink %s -> %s", dst, op->src);
	case MOAT_OP_WRITE: return snprintf(buf, len, "write %s", dst);
	case MOAT_OP_PROC: return snprintf(buf, len, "mount proc on %s", dst);
	case MOAT_OP_DEVPTS: return snprintf(buf, len, "mount devpts on %s", dst);
	case MOAT_OP_SANDBOX_FILE: return snprintf(buf, len, "write file /sandbox/%s", dst);
	case MOAT_OP_PIVOT: return snprintf(buf, len, "pivot_root into the new root");
	case MOAT_OP_CHDIR: return snprintf(buf, len, "chdir %s", dst);
	case MOAT_OP_HOLD: return snprintf(buf, len, "open %s", op->src);
	case MOAT_OP_BIND_HELD: return snprintf(buf, len, "bind %s on %s", op->src, dst);
	case MOAT_OP_COPY_HELD:
		return snprintf(buf, len, "copy the runtime directory (at most %llu MiB) to %s",
				(unsigned long long)(MOAT_RUNTIME_COPY_BYTES >> 20), dst);
	}
	return snprintf(buf, len, "step %zu", i);
}
