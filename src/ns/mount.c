/* Child side: apply a mount plan. System calls only — no allocation, no
 * stdio — because this runs right after clone3 in a copy of a process that
 * may have had other threads. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/stamp.h"
#include "core/sys.h"
#include "ns/ns.h"

#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

static int sys_mount_setattr(const char *path, bool recursive, uint64_t attr_set)
{
	struct mount_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.attr_set = attr_set;
	unsigned int flags = AT_SYMLINK_NOFOLLOW | (recursive ? AT_RECURSIVE : 0);
	return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, flags, &attr, sizeof attr);
}

static int write_new_file(int dirfd, const char *name, const char *data, size_t len, mode_t mode)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -1;
	int rc = moat_write_all(fd, data, len);
	int saved = errno;
	close(fd);
	errno = saved;
	return rc;
}

/* Creates rel (already validated: relative, no ./.., no empty components)
 * below the directory fd sandbox, making parents, never following symlinks. */
static int write_sandbox_file(int sandbox, const char *rel, const char *data, size_t len,
			      mode_t mode)
{
	char comp[256];
	int dirfd = sandbox;
	const char *p = rel;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || n >= sizeof comp) {
			errno = ENAMETOOLONG;
			goto fail;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (!slash) {
			int rc = write_new_file(dirfd, comp, data, len, mode);
			int saved = errno;
			if (dirfd != sandbox)
				close(dirfd);
			errno = saved;
			return rc;
		}
		if (mkdirat(dirfd, comp, 0755) < 0 && errno != EEXIST)
			goto fail;
		int next = openat(dirfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0)
			goto fail;
		if (dirfd != sandbox)
			close(dirfd);
		dirfd = next;
		p = slash + 1;
	}
fail:;
	int saved = errno;
	if (dirfd != sandbox)
		close(dirfd);
	errno = saved;
	return -1;
}

struct dirent64_raw {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* Copies what directory fd src holds into directory fd dst: regular files
 * (their bytes and permission bits, without set-id or sticky bits),
 * directories (at most MOAT_RUNTIME_COPY_DEPTH deep) and symlinks (their
 * text); anything else is left out. A stack buffer for the names only: the
 * bytes go by sendfile. */
static int copy_tree(int src, int dst, int depth, const char *skip)
{
	char buf[2048] __attribute__((aligned(8)));
	if (depth > MOAT_RUNTIME_COPY_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	for (;;) {
		long n = syscall(SYS_getdents64, src, buf, sizeof buf);
		if (n <= 0)
			return (int)n;
		for (long off = 0; off < n;) {
			const struct dirent64_raw *d = (const void *)(buf + off);
			off += d->d_reclen;
			const char *name = d->d_name;
			if (!strcmp(name, ".") || !strcmp(name, "..") || (skip && !strcmp(name, skip)))
				continue;
			struct stat st;
			if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				return -1;
			mode_t mode = st.st_mode & 0777;
			int rc = 0, in = -1, out = -1;
			if (S_ISDIR(st.st_mode)) {
				if (mkdirat(dst, name, mode | 0700) < 0 ||
				    (in = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
							       O_CLOEXEC)) < 0 ||
				    (out = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
								 O_CLOEXEC)) < 0)
					rc = -1;
				else
					rc = copy_tree(in, out, depth + 1, NULL);
				if (rc == 0 && fchmod(out, mode) < 0)
					rc = -1;
			} else if (S_ISREG(st.st_mode)) {
				if ((in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
				    (out = openat(dst, name,
						  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
						  mode)) < 0) {
					rc = -1;
				} else {
					for (off_t left = st.st_size; left > 0 && rc == 0;) {
						ssize_t w = sendfile(out, in, NULL, (size_t)left);
						if (w < 0 && errno == EINTR)
							continue;
						if (w <= 0)
							rc = -1;
						else
							left -= w;
					}
				}
			} else if (S_ISLNK(st.st_mode)) {
				char target[4096];
				ssize_t t = readlinkat(src, name, target, sizeof target - 1);
				if (t < 0)
					rc = -1;
				else {
					target[t] = '\0';
					rc = symlinkat(target, dst, name);
				}
			}
			int saved = errno;
			if (in >= 0)
				close(in);
			if (out >= 0)
				close(out);
			errno = saved;
			if (rc < 0)
				return -1;
		}
	}
}

static int apply_one(const struct moat_mount_op *op, int *sandbox_fd, int *held_fds)
{
	switch (op->kind) {
	case MOAT_OP_HOLD: {
		if (op->slot >= MOAT_PLAN_HELD) {
			errno = EINVAL;
			return -1;
		}
		int *held = &held_fds[op->slot];
		if (*held >= 0)
			close(*held);
		if (op->no_symlinks) {
			struct open_how how;
			memset(&how, 0, sizeof how);
			how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
			how.resolve = RESOLVE_NO_SYMLINKS;
			*held = (int)syscall(SYS_openat2, AT_FDCWD, op->src, &how, sizeof how);
		} else {
			*held = open(op->src, O_PATH | O_DIRECTORY | O_CLOEXEC);
		}
		return *held < 0 ? -1 : 0;
	}
	case MOAT_OP_BIND_HELD: {
		char path[64];
		if (op->slot >= MOAT_PLAN_HELD || held_fds[op->slot] < 0) {
			errno = EBADF;
			return -1;
		}
		int *held = &held_fds[op->slot];
		snprintf(path, sizeof path, "/proc/self/fd/%d", *held);
		int rc = mount(path, op->dst, NULL, MS_BIND | MS_REC, NULL);
		int saved = errno;
		close(*held);
		*held = -1;
		errno = saved;
		return rc;
	}
	case MOAT_OP_COPY_HELD: {
		if (op->slot >= MOAT_PLAN_HELD || held_fds[op->slot] < 0) {
			errno = EBADF;
			return -1;
		}
		int *held = &held_fds[op->slot];
		int rc = mount("tmpfs", op->dst, "tmpfs", op->flags, op->src), in = -1, out = -1;
		if (rc == 0 && ((in = openat(*held, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
				(out = open(op->dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0))
			rc = -1;
		if (rc == 0)
			rc = copy_tree(in, out, 0, op->skip);
		int saved = errno;
		if (in >= 0)
			close(in);
		if (out >= 0)
			close(out);
		close(*held);
		*held = -1;
		errno = saved;
		return rc;
	}
	case MOAT_OP_MKDIR:
		if (mkdir(op->dst, op->mode) < 0 && errno != EEXIST)
			return -1;
		return 0;
	case MOAT_OP_TMPFS:
		return mount("tmpfs", op->dst, "tmpfs", op->flags, op->src);
	case MOAT_OP_BIND:
		return mount(op->src, op->dst, NULL, MS_BIND | (op->recursive ? MS_REC : 0), NULL);
	case MOAT_OP_SETATTR:
		return sys_mount_setattr(op->dst, op->recursive, op->attr_set);
	case MOAT_OP_MKFILE: {
		/* one call where the file is new (always, on moat's own tmpfs);
		 * open as before when it exists or mknod is refused (a container
		 * runtime's filter may refuse it whatever the file type) */
		if (mknod(op->dst, S_IFREG | 0444, 0) == 0)
			return 0;
		int fd = open(op->dst, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
		if (fd < 0)
			return -1;
		close(fd);
		return 0;
	}
	case MOAT_OP_SYMLINK:
		return symlink(op->src, op->dst);
	case MOAT_OP_WRITE: {
		int rc = write_new_file(AT_FDCWD, op->dst, op->data, op->data_len, op->mode);
		return rc;
	}
	case MOAT_OP_PROC:
		return mount("proc", op->dst, "proc", op->flags, NULL);
	case MOAT_OP_DEVPTS:
		return mount("devpts", op->dst, "devpts", op->flags, op->src);
	case MOAT_OP_SANDBOX_FILE: /* moat_plan_apply opened the sandbox dir */
		return write_sandbox_file(*sandbox_fd, op->dst, op->data, op->data_len, op->mode);
	case MOAT_OP_PIVOT:
		if (chdir(op->dst) < 0)
			return -1;
		moat_stamp("init: pivot_root");
		if (syscall(SYS_pivot_root, ".", ".") < 0)
			return -1;
		/* the old root is now stacked on top of the new one: detach it */
		if (umount2(".", MNT_DETACH) < 0)
			return -1;
		moat_stamp("init: old root detached");
		return chdir("/");
	case MOAT_OP_CHDIR:
		return chdir(op->dst);
	}
	errno = EINVAL;
	return -1;
}

/* *s, a string of the flat plan laid out at was, moved into buf (len
 * bytes); false when it does not lie inside it, NUL-terminated. */
static bool rebase_str(char **s, char *buf, size_t len, uint64_t was)
{
	if (!*s)
		return true;
	uint64_t off = (uint64_t)(uintptr_t)*s - was;
	if (off >= len || !memchr(buf + off, '\0', len - off))
		return false;
	*s = buf + off;
	return true;
}

struct moat_mount_plan *moat_plan_rebase(void *buf, size_t len, uint64_t was)
{
	char *b = buf;
	struct moat_mount_plan *p = buf;
	if (len < sizeof *p)
		goto bad;
	uint64_t off = (uint64_t)(uintptr_t)p->ops - was;
	if (p->count) {
		if (off >= len || off % _Alignof(struct moat_mount_op) ||
		    p->count > (len - off) / sizeof *p->ops)
			goto bad;
		p->ops = (struct moat_mount_op *)(void *)(b + off);
	} else {
		p->ops = NULL;
	}
	p->cap = p->count;
	p->owned_text = NULL;
	if (!p->base || !rebase_str(&p->base, b, len, was))
		goto bad;
	for (size_t i = 0; i < p->count; i++)
		if (!rebase_str(&p->ops[i].src, b, len, was) ||
		    !rebase_str(&p->ops[i].dst, b, len, was))
			goto bad;
	return p;
bad:
	errno = EINVAL;
	return NULL;
}

int moat_plan_apply(const struct moat_mount_plan *plan, size_t *failed_op)
{
	int sandbox_fd = -1, held[MOAT_PLAN_HELD];
	for (size_t i = 0; i < MOAT_PLAN_HELD; i++)
		held[i] = -1;
	size_t base_len = strlen(plan->base);
	const char *skipped = NULL; /* dst of the optional op skipped last */
	for (size_t i = 0; i < plan->count; i++) {
		const struct moat_mount_op *op = &plan->ops[i];
		if (op->kind == MOAT_OP_SANDBOX_FILE && sandbox_fd < 0) {
			/* open <base>/sandbox once, when the first file is written */
			char path[4096];
			if (base_len + sizeof MOAT_SANDBOX_DIR >= sizeof path) {
				*failed_op = i;
				errno = ENAMETOOLONG;
				return -1;
			}
			memcpy(path, plan->base, base_len);
			memcpy(path + base_len, MOAT_SANDBOX_DIR, sizeof MOAT_SANDBOX_DIR);
			sandbox_fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sandbox_fd < 0) {
				*failed_op = i;
				return -1;
			}
		}
		if (op->kind == MOAT_OP_PIVOT && sandbox_fd >= 0) {
			close(sandbox_fd);
			sandbox_fd = -1;
		}
		/* the read-only setattr of an optional bind that was skipped
		 * (its path is absent) would fail the same way: not tried */
		if (op->kind == MOAT_OP_SETATTR && op->optional && skipped &&
		    !strcmp(skipped, op->dst))
			continue;
		skipped = NULL;
		if (apply_one(op, &sandbox_fd, held) < 0) {
			if (op->optional && (errno == ENOENT || errno == ENOTDIR)) {
				skipped = op->dst;
				continue;
			}
			*failed_op = i;
			int saved = errno;
			if (sandbox_fd >= 0)
				close(sandbox_fd);
			for (size_t k = 0; k < MOAT_PLAN_HELD; k++)
				if (held[k] >= 0)
					close(held[k]);
			errno = saved;
			return -1;
		}
	}
	if (sandbox_fd >= 0)
		close(sandbox_fd);
	for (size_t k = 0; k < MOAT_PLAN_HELD; k++)
		if (held[k] >= 0)
			close(held[k]);
	return 0;
}
