/* moat-agent: the program of a live sandbox (docs/SANDBOXES.md, "The
 * agent"). Runs inside the sandbox as its pid 2, with the sandbox's
 * identity, filter and Landlock, built static (runtime/bin/moat-agent, bound
 * read-only at /opt/moat/runtime). One poll loop: requests on fd 3 (each
 * with the operation's own socket, proto.h), and SIGCHLD. Every path is
 * resolved here, component by component from a directory fd of /sandbox or
 * /tmp, never following a symlink (O_NOFOLLOW at every step): the host never
 * resolves a sandbox path. Bulk bytes never pass through here: the host gets
 * the fds (a regular file, a process's pipes) and streams them itself.
 *
 * Once tenant code runs (same uid) this process is not trusted by the
 * host: everything it sends is checked there (src/live/live.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

#include "agent/proto.h"

#define CTL_FD 3

extern char **environ;

struct proc {
	pid_t pid;
	int sock; /* the exec request's socket: the exit goes there */
};

static struct proc procs[AGENT_MAX_PROCS];
static int roots[2] = { -1, -1 };
static char msgbuf[AGENT_MAX_MSG + 1];
static struct agent_msg msg;

/* An answer on the operation's socket, fds attached (nfds may be 0). */
static int answer_fds(int sock, const char *text, size_t len, const int *fds, size_t nfds)
{
	struct iovec iov = { .iov_base = (void *)text, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ssize_t n;
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -1 : 0;
}

/* An answer's text, and room after it for a metadata block. */
static char line[AGENT_MAX_PATH + 256 + AGENT_MAX_META + 8];

static int answerf(int sock, const int *fds, size_t nfds, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int answerf(int sock, const int *fds, size_t nfds, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, AGENT_MAX_PATH + 256, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= AGENT_MAX_PATH + 256)
		return -1;
	return answer_fds(sock, line, (size_t)n, fds, nfds);
}

/* ---- file metadata: user.e2b.<key> extended attributes (proto.h) ---- */

static char xnames[65536]; /* a file's xattr names (XATTR_LIST_MAX) */
static char metabuf[AGENT_MAX_META + 8]; /* an answer's metadata block */

/* The metadata of name in dir (st: its fstatat) as an answer's block in
 * metabuf: its length, 0 when it has none and nothing was left out. Only a
 * regular file's or a directory's (nothing else is opened: a device, a
 * fifo); opened without following a symlink, non-blocking, and checked to
 * be the inode st saw. Left out, and said ("1"): what is not printable, a
 * key past AGENT_MAX_META_KEY, pairs past AGENT_MAX_META, a file the agent
 * may not open or whose names do not fit xnames. */
static size_t meta_block(int dir, const char *name, const struct stat *st)
{
	if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode))
		return 0;
	bool inc = false;
	size_t len = 2, total = 0;
	struct stat fst;
	int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd >= 0 && (fstat(fd, &fst) < 0 || fst.st_ino != st->st_ino || fst.st_dev != st->st_dev)) {
		close(fd);
		fd = -1;
	}
	ssize_t n = fd < 0 ? -1 : flistxattr(fd, xnames, sizeof xnames);
	if (n < 0)
		inc = fd < 0 || errno != EOPNOTSUPP; /* a filesystem without: none */
	for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(xnames + off) + 1) {
		const char *xn = xnames + off;
		if (strncmp(xn, AGENT_META_PREFIX, AGENT_META_PREFIX_LEN))
			continue;
		const char *key = xn + AGENT_META_PREFIX_LEN;
		size_t kl = strlen(key);
		if (!agent_meta_key_ok(key, kl) ||
		    total + AGENT_META_PREFIX_LEN + kl > AGENT_MAX_META) {
			inc = true;
			continue;
		}
		size_t room = AGENT_MAX_META - total - AGENT_META_PREFIX_LEN - kl;
		char *k = metabuf + len, *v = k + kl + 1;
		ssize_t vl = fgetxattr(fd, xn, v, room);
		if (vl < 0) {
			if (errno != ENODATA) /* ERANGE: past the bound */
				inc = true;
			continue;
		}
		if (!agent_meta_value_ok(v, (size_t)vl)) {
			inc = true;
			continue;
		}
		memcpy(k, key, kl + 1);
		v[vl] = '\0';
		len += kl + 1 + (size_t)vl + 1;
		total += AGENT_META_PREFIX_LEN + kl + (size_t)vl;
	}
	if (fd >= 0)
		close(fd);
	if (len == 2 && !inc)
		return 0;
	metabuf[0] = inc ? '1' : '0';
	metabuf[1] = '\0';
	return len;
}

/* The text, then (blen > 0) a NUL and metabuf's blen bytes. */
static int answer_meta(int sock, size_t blen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int answer_meta(int sock, size_t blen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, AGENT_MAX_PATH + 256, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= AGENT_MAX_PATH + 256 || blen > AGENT_MAX_META + 4)
		return -1;
	size_t len = (size_t)n;
	if (blen) {
		line[len++] = '\0';
		memcpy(line + len, metabuf, blen);
		len += blen;
	}
	return answer_fds(sock, line, len, NULL, 0);
}

struct xsnap {
	char name[AGENT_META_PREFIX_LEN + AGENT_MAX_META_KEY + 1];
	char *val;
	size_t len;
};

static void snap_free(struct xsnap *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(s[i].val);
	free(s);
}

/* The file's user.e2b.* attributes and their values: *out (*n of them). */
static int snap_take(int fd, struct xsnap **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	ssize_t len = flistxattr(fd, xnames, sizeof xnames);
	if (len < 0)
		return -1;
	size_t cnt = 0;
	for (ssize_t off = 0; off < len; off += (ssize_t)strlen(xnames + off) + 1)
		cnt += !strncmp(xnames + off, AGENT_META_PREFIX, AGENT_META_PREFIX_LEN);
	struct xsnap *s = calloc(cnt ? cnt : 1, sizeof *s);
	if (!s) {
		errno = ENOMEM;
		return -1;
	}
	size_t k = 0;
	for (ssize_t off = 0; off < len && k < cnt; off += (ssize_t)strlen(xnames + off) + 1) {
		const char *xn = xnames + off;
		if (strncmp(xn, AGENT_META_PREFIX, AGENT_META_PREFIX_LEN) ||
		    strlen(xn) >= sizeof s[k].name)
			continue;
		ssize_t vl = fgetxattr(fd, xn, NULL, 0);
		char *v = vl >= 0 ? malloc((size_t)vl + 1) : NULL;
		if (vl >= 0 && v)
			vl = fgetxattr(fd, xn, v, (size_t)vl);
		if (vl < 0 || !v) {
			int e = vl < 0 ? errno : ENOMEM;
			free(v);
			if (e == ENODATA) /* gone meanwhile */
				continue;
			snap_free(s, k);
			errno = e == ERANGE ? EAGAIN : e; /* it grew meanwhile */
			return -1;
		}
		strcpy(s[k].name, xn);
		s[k].val = v;
		s[k].len = (size_t)vl;
		k++;
	}
	*out = s;
	*n = k;
	return 0;
}

/* The attributes back as snapshot s had them: the new keys removed. */
static void snap_restore(int fd, const struct xsnap *s, size_t n, const char *const *kv,
			 size_t npairs)
{
	char xn[AGENT_META_PREFIX_LEN + AGENT_MAX_META_KEY + 1];
	for (size_t i = 0; i < npairs; i++) {
		snprintf(xn, sizeof xn, "%s%s", AGENT_META_PREFIX, kv[2 * i]);
		fremovexattr(fd, xn);
	}
	for (size_t i = 0; i < n; i++)
		fsetxattr(fd, s[i].name, s[i].val, s[i].len, 0);
}

/* The file's metadata replaced by the request's pairs (msg.field[3..]):
 * each set, then every other user.e2b.* attribute removed; on a failure
 * what was there before is put back. 0, or -1 with errno (EOPNOTSUPP: a
 * filesystem without user xattrs, where an empty set is a success: there
 * is nothing to clear). */
static int meta_replace(int fd)
{
	const char *const *kv = msg.field + 3;
	size_t npairs = (msg.nfields - 3) / 2;
	struct xsnap *s;
	size_t n;
	if (snap_take(fd, &s, &n) < 0)
		return errno == EOPNOTSUPP && npairs == 0 ? 0 : -1;
	char xn[AGENT_META_PREFIX_LEN + AGENT_MAX_META_KEY + 1];
	int rc = 0;
	for (size_t i = 0; i < npairs && rc == 0; i++) {
		snprintf(xn, sizeof xn, "%s%s", AGENT_META_PREFIX, kv[2 * i]);
		rc = fsetxattr(fd, xn, kv[2 * i + 1], strlen(kv[2 * i + 1]), 0);
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		bool kept = false;
		for (size_t j = 0; j < npairs && !kept; j++)
			kept = !strcmp(s[i].name + AGENT_META_PREFIX_LEN, kv[2 * j]);
		if (!kept && fremovexattr(fd, s[i].name) < 0 && errno != ENODATA)
			rc = -1;
	}
	if (rc < 0) {
		int e = errno;
		snap_restore(fd, s, n, kv, npairs);
		errno = e;
	}
	snap_free(s, n);
	return rc;
}

static void fail(int sock, int e)
{
	answerf(sock, NULL, 0, "%d ", e ? e : EIO);
}

/* The directory holding path's last component, opened without following a
 * symlink anywhere (mkdirs: the missing ones made); *last its name ("."
 * for a root itself). -1 with errno. */
static int walk(const char *path, bool mkdirs, int *parent, char *last)
{
	int root;
	const char *rel;
	if (agent_path(path, &root, &rel) < 0) {
		errno = EINVAL;
		return -1;
	}
	int cur = dup(roots[root]);
	if (cur < 0)
		return -1;
	char comp[AGENT_MAX_PATH + 1];
	strcpy(last, ".");
	for (const char *c = rel; *c;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);
		memcpy(comp, c, n);
		comp[n] = '\0';
		c += n;
		while (*c == '/')
			c++;
		if (!*c) { /* the last component */
			strcpy(last, comp);
			break;
		}
		if (mkdirs && mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
			int e = errno;
			close(cur);
			errno = e;
			return -1;
		}
		int next = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(cur);
		if (next < 0) {
			errno = e;
			return -1;
		}
		cur = next;
	}
	*parent = cur;
	return 0;
}

/* The file or directory itself (O_PATH less: a real open). */
static int open_at(const char *path, int flags, mode_t mode, bool mkdirs)
{
	int parent;
	char last[AGENT_MAX_PATH + 1];
	if (walk(path, mkdirs, &parent, last) < 0)
		return -1;
	int fd = openat(parent, last, flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode);
	int e = errno;
	close(parent);
	errno = e;
	return fd;
}

static void op_read(int sock)
{
	int fd = open_at(msg.field[0], O_RDONLY | O_NONBLOCK, 0, false);
	struct stat st;
	if (fd < 0)
		return fail(sock, errno);
	if (fstat(fd, &st) < 0)
		st.st_mode = 0;
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return fail(sock, S_ISDIR(st.st_mode) ? EISDIR : ENXIO);
	}
	answerf(sock, &fd, 1, "0 %lld", (long long)st.st_size);
	close(fd);
}

/* A regular file opened for writing, emptied. With metadata (field 2
 * "1"), its metadata is replaced first, and a failure there leaves nothing
 * changed: a file this made is removed again, an existing one untouched. */
static void op_write(int sock)
{
	bool meta = msg.field[2][0] == '1';
	int parent;
	char last[AGENT_MAX_PATH + 1];
	if (walk(msg.field[0], msg.field[1][0] == '1', &parent, last) < 0)
		return fail(sock, errno);
	const int fl = O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
	bool created = false;
	int fd;
	if (meta) {
		fd = openat(parent, last, fl | O_CREAT | O_EXCL, 0644);
		created = fd >= 0;
		if (fd < 0 && errno == EEXIST)
			fd = openat(parent, last, fl, 0);
	} else {
		fd = openat(parent, last, fl | O_CREAT, 0644);
	}
	int e = errno;
	struct stat st = { 0 };
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))
		e = ENXIO;
	else if (fd >= 0 && meta && meta_replace(fd) < 0)
		e = errno;
	else if (fd >= 0 && ftruncate(fd, 0) < 0)
		e = errno;
	else if (fd >= 0)
		e = 0;
	if (e && created) { /* the file this made, if it is still the one */
		struct stat now;
		if (fstatat(parent, last, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino &&
		    now.st_dev == st.st_dev)
			unlinkat(parent, last, 0);
	}
	close(parent);
	if (e) {
		if (fd >= 0)
			close(fd);
		return fail(sock, e);
	}
	answerf(sock, &fd, 1, "0 ");
	close(fd);
}

static const char *type_of(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink"
	       : S_ISFIFO(m) ? "fifo" : S_ISSOCK(m) ? "socket" : S_ISCHR(m) ? "char"
	       : S_ISBLK(m) ? "block" : "other";
}

static long long mtime_ms(const struct stat *st)
{
	return (long long)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

/* The bytes used of each tmpfs (/sandbox, /tmp): its blocks less its free
 * ones, from the directory fds the agent keeps. */
static void op_disk(int sock)
{
	unsigned long long used[2];
	for (int i = 0; i < 2; i++) {
		struct statfs sf;
		if (fstatfs(roots[i], &sf) < 0)
			return fail(sock, errno);
		used[i] = (unsigned long long)(sf.f_blocks - sf.f_bfree) * (unsigned long long)sf.f_bsize;
	}
	answerf(sock, NULL, 0, "0 %llu %llu", used[0], used[1]);
}

static void op_stat(int sock)
{
	int parent;
	char last[AGENT_MAX_PATH + 1];
	struct stat st;
	if (walk(msg.field[0], false, &parent, last) < 0)
		return fail(sock, errno);
	int rc = fstatat(parent, last, &st, AT_SYMLINK_NOFOLLOW);
	int e = errno;
	size_t blen = rc == 0 ? meta_block(parent, last, &st) : 0;
	close(parent);
	if (rc < 0)
		return fail(sock, e);
	answer_meta(sock, blen, "0 %s %lld %o %lld", type_of(st.st_mode), (long long)st.st_size,
		    (unsigned)(st.st_mode & 07777), mtime_ms(&st));
}

struct listing {
	int sock;
	uint64_t max, count;
	bool truncated;
	char path[AGENT_MAX_PATH + 1];
};

static int list_dir(struct listing *l, int dirfd, size_t plen, unsigned depth)
{
	DIR *d = fdopendir(dirfd);
	if (!d) {
		close(dirfd);
		return -1;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (l->count >= l->max) {
			l->truncated = true;
			break;
		}
		size_t n = strlen(de->d_name);
		if (plen + n + 1 > AGENT_MAX_PATH) {
			l->truncated = true;
			continue;
		}
		struct stat st;
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		memcpy(l->path + plen, de->d_name, n + 1);
		size_t blen = meta_block(dirfd, de->d_name, &st);
		if (answer_meta(l->sock, blen, "e %s %lld %o %lld %s", type_of(st.st_mode),
				(long long)st.st_size, (unsigned)(st.st_mode & 07777), mtime_ms(&st),
				l->path) < 0) {
			closedir(d);
			return -1;
		}
		l->count++;
		if (S_ISDIR(st.st_mode)) {
			if (depth <= 1) {
				continue;
			}
			int sub = openat(dirfd, de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0)
				continue;
			l->path[plen + n] = '/';
			l->path[plen + n + 1] = '\0';
			if (list_dir(l, sub, plen + n + 1, depth - 1) < 0) {
				closedir(d);
				return -1;
			}
		}
	}
	closedir(d);
	return 0;
}

static void op_list(int sock)
{
	uint64_t depth, max;
	agent_num(msg.field[1], AGENT_MAX_DEPTH, &depth);
	agent_num(msg.field[2], AGENT_MAX_ENTRIES, &max);
	int fd = open_at(msg.field[0], O_RDONLY | O_DIRECTORY, 0, false);
	if (fd < 0)
		return fail(sock, errno);
	struct listing l = { .sock = sock, .max = max };
	l.path[0] = '\0';
	if (list_dir(&l, fd, 0, (unsigned)depth) < 0)
		return;
	answerf(sock, NULL, 0, "0 %llu %d", (unsigned long long)l.count, l.truncated ? 1 : 0);
}

static void op_mkdir(int sock)
{
	int parent;
	char last[AGENT_MAX_PATH + 1];
	bool parents = msg.field[1][0] == '1';
	if (walk(msg.field[0], parents, &parent, last) < 0)
		return fail(sock, errno);
	int rc = strcmp(last, ".") ? mkdirat(parent, last, 0755) : (errno = EEXIST, -1);
	int e = errno;
	struct stat st;
	if (rc < 0 && e == EEXIST && parents &&
	    fstatat(parent, last, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
		rc = 0;
	close(parent);
	if (rc < 0)
		return fail(sock, e);
	answerf(sock, NULL, 0, "0 ");
}

static void op_rename(int sock)
{
	int p1, p2;
	char l1[AGENT_MAX_PATH + 1], l2[AGENT_MAX_PATH + 1];
	if (walk(msg.field[0], false, &p1, l1) < 0)
		return fail(sock, errno);
	if (walk(msg.field[1], false, &p2, l2) < 0) {
		int e = errno;
		close(p1);
		return fail(sock, e);
	}
	int rc = strcmp(l1, ".") && strcmp(l2, ".") ? renameat(p1, l1, p2, l2) : (errno = EBUSY, -1);
	int e = errno;
	close(p1);
	close(p2);
	if (rc < 0)
		return fail(sock, e);
	answerf(sock, NULL, 0, "0 ");
}

/* Everything in directory fd dir (closed), never following a symlink. */
static int rm_tree(int dir, unsigned depth)
{
	if (depth > AGENT_MAX_DEPTH) {
		close(dir);
		errno = EMLINK; /* deeper than the bound (not ELOOP: no symlink here) */
		return -1;
	}
	DIR *d = fdopendir(dir);
	if (!d) {
		close(dir);
		return -1;
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		struct stat st;
		if (fstatat(dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dir, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || rm_tree(sub, depth + 1) < 0 ||
			    unlinkat(dir, de->d_name, AT_REMOVEDIR) < 0)
				rc = -1;
		} else if (unlinkat(dir, de->d_name, 0) < 0) {
			rc = -1;
		}
		if (rc == 0)
			rewinddir(d);
	}
	int e = errno;
	closedir(d);
	errno = e;
	return rc;
}

static void op_remove(int sock)
{
	int parent;
	char last[AGENT_MAX_PATH + 1];
	struct stat st;
	if (walk(msg.field[0], false, &parent, last) < 0)
		return fail(sock, errno);
	int rc = -1;
	if (!strcmp(last, "."))
		errno = EBUSY;
	else if (fstatat(parent, last, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISDIR(st.st_mode))
			rc = unlinkat(parent, last, 0);
		else if (msg.field[1][0] != '1')
			rc = unlinkat(parent, last, AT_REMOVEDIR);
		else {
			int sub = openat(parent, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0 && rm_tree(sub, 1) == 0)
				rc = unlinkat(parent, last, AT_REMOVEDIR);
		}
	}
	int e = errno;
	close(parent);
	if (rc < 0)
		return fail(sock, e);
	answerf(sock, NULL, 0, "0 ");
}

static struct proc *proc_slot(pid_t pid)
{
	for (size_t i = 0; i < AGENT_MAX_PROCS; i++)
		if (procs[i].pid == pid)
			return &procs[i];
	return NULL;
}

/* A new pty of the sandbox's own devpts instance (/dev/ptmx links to its
 * ptmx): *master, and its peer opened through the master (TIOCGPTPEER: no
 * path is resolved, so no /dev/pts/N the tenant could swap), O_NOCTTY so
 * the agent never takes it as its own terminal. -1 with errno. */
static int pty_open(unsigned rows, unsigned cols, int *master, int *peer)
{
	int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -1;
	int unlock = 0;
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
	int p = -1;
	if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0 ||
	    (p = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
		int e = errno;
		close(m);
		errno = e;
		return -1;
	}
	*master = m;
	*peer = p;
	return 0;
}

/* Returns true when the operation's socket is kept (a process's). */
static bool op_exec(int sock)
{
	struct proc *slot = proc_slot(0);
	if (!slot) {
		fail(sock, EAGAIN);
		return false;
	}
	const char *const *f = msg.field;
	bool pty = msg.op == AGENT_EXEC_PTY;
	bool want_stdin = !pty && f[1][0] == '1';
	bool want_ctl = !pty && f[1][0] == '2'; /* fd 3 a control socket (docs/CONTEXTS.md) */
	const char *const *av = f + msg.argv0, *const *en = f + msg.argv0 + msg.argc;
	int cwd = open_at(f[0], O_RDONLY | O_DIRECTORY, 0, false);
	if (cwd < 0) {
		fail(sock, errno);
		return false;
	}
	size_t nenv = 0;
	for (char **e = environ; e && *e; e++)
		nenv++;
	char **argv = calloc(msg.argc + 1, sizeof *argv);
	char **envp = calloc(nenv + msg.envc + 1, sizeof *envp);
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, errp[2] = { -1, -1 }, st[2] = { -1, -1 };
	int ctl[2] = { -1, -1 };
	int e = 0;
	if (!argv || !envp) {
		e = ENOMEM;
	} else if (pty) {
		uint64_t rows, cols;
		agent_num(f[1], AGENT_MAX_WINSIZE, &rows);
		agent_num(f[2], AGENT_MAX_WINSIZE, &cols);
		/* out[0] the master (the host's), out[1] the terminal */
		if (pty_open((unsigned)rows, (unsigned)cols, &out[0], &out[1]) < 0 ||
		    pipe2(st, O_CLOEXEC) < 0)
			e = errno;
	} else if ((want_stdin && pipe2(in, O_CLOEXEC) < 0) || pipe2(out, O_CLOEXEC) < 0 ||
		   pipe2(errp, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0 ||
		   (want_ctl && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0)) {
		e = errno;
	}
	pid_t pid = -1;
	if (!e) {
		for (size_t i = 0; i < msg.argc; i++)
			argv[i] = (char *)av[i];
		size_t k = 0;
		/* the request's env over the sandbox's */
		for (char **p = environ; p && *p; p++) {
			const char *eq = strchr(*p, '=');
			size_t n = eq ? (size_t)(eq - *p) : strlen(*p);
			bool over = false;
			for (size_t i = 0; i < msg.envc && !over; i++)
				over = !strncmp(en[i], *p, n) && en[i][n] == '=';
			if (!over)
				envp[k++] = *p;
		}
		for (size_t i = 0; i < msg.envc; i++)
			envp[k++] = (char *)en[i];
		pid = fork();
		if (pid < 0)
			e = errno;
	}
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		if (pty) {
			/* the terminal: the new session's controlling tty, and
			 * fds 0, 1 and 2 */
			if (ioctl(out[1], TIOCSCTTY, 0) < 0 || dup2(out[1], 0) < 0 ||
			    dup2(out[1], 1) < 0 || dup2(out[1], 2) < 0 || fchdir(cwd) < 0)
				goto child_fail;
		} else {
			int nul = want_stdin ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (dup2(want_stdin ? in[0] : nul, 0) < 0 || dup2(out[1], 1) < 0 ||
			    dup2(errp[1], 2) < 0 || (want_ctl && dup2(ctl[1], 3) < 0) ||
			    fchdir(cwd) < 0)
				goto child_fail;
		}
		environ = envp;
		execvp(argv[0], argv);
child_fail:;
		int ce = errno;
		ssize_t w = write(st[1], &ce, sizeof ce);
		(void)w;
		_exit(127);
	}
	close(cwd);
	if (pid > 0) {
		close(st[1]);
		st[1] = -1;
		int ce = 0;
		ssize_t r;
		do
			r = read(st[0], &ce, sizeof ce);
		while (r < 0 && errno == EINTR);
		if (r == (ssize_t)sizeof ce) {
			e = ce ? ce : ENOEXEC;
			waitpid(pid, NULL, 0);
		}
	}
	free(argv);
	free(envp);
	int pass[3], n = 0;
	if (want_stdin)
		pass[n++] = in[1];
	if (want_ctl)
		pass[n++] = ctl[0];
	pass[n++] = out[0];
	if (!pty)
		pass[n++] = errp[0];
	bool kept = false;
	if (!e) {
		if (answerf(sock, pass, (size_t)n, "0 %d", (int)pid) == 0) {
			slot->pid = pid;
			slot->sock = sock;
			kept = true;
		} else {
			kill(-pid, SIGKILL);
		}
	} else {
		fail(sock, e);
	}
	int all[] = { in[0], in[1], out[0], out[1], errp[0], errp[1], st[0], st[1], ctl[0], ctl[1] };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i] >= 0)
			close(all[i]);
	return kept;
}

/* ---- watches: inotify here, each event forwarded as one message ---- */

#define WATCH_MASK                                                                        \
	(IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | \
	 IN_MOVE_SELF | IN_EXCL_UNLINK | IN_ONLYDIR | IN_DONT_FOLLOW)

struct wdir {
	int wd;
	char *path; /* absolute, as the host asked it, then each name */
};

struct watch {
	int ifd, sock; /* -1: a free slot */
	bool recursive;
	bool lost;     /* an event could not be sent: an overflow is owed */
	struct wdir *dirs; /* dirs[0] the root */
	size_t ndirs;
	uint32_t cookie; /* a move's first half, its path in from */
	char *from;
	bool from_dir;
};

static struct watch watches[AGENT_MAX_WATCHES];

static void watch_end(struct watch *w)
{
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	free(w->from);
	if (w->ifd >= 0)
		close(w->ifd);
	if (w->sock >= 0)
		close(w->sock);
	memset(w, 0, sizeof *w);
	w->ifd = w->sock = -1;
}

/* One event to the host (kind 0: none, only an overflow owed), never
 * blocking the agent: a full socket (a host not reading) loses it, and the
 * host is told (overflow) once there is room. -1 when the host is gone. */
static int watch_send(struct watch *w, char kind, const char *a, const char *b)
{
	if (w->lost) {
		char o = AGENT_EV_OVERFLOW;
		if (send(w->sock, &o, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			return errno == EAGAIN ? 0 : -1;
		w->lost = false;
	}
	if (!kind) /* only the overflow owed */
		return 0;
	char buf[2 * (AGENT_MAX_PATH + 1) + 1];
	size_t n = 0;
	buf[n++] = kind;
	for (const char *p = a; p; p = p == a ? b : NULL) {
		size_t l = strlen(p) + 1;
		memcpy(buf + n, p, l);
		n += l;
	}
	if (send(w->sock, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		if (errno != EAGAIN)
			return -1;
		w->lost = true;
	}
	return 0;
}

static int wdir_find(const struct watch *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return (int)i;
	return -1;
}

static void wdir_drop(struct watch *w, size_t i)
{
	free(w->dirs[i].path);
	w->dirs[i] = w->dirs[--w->ndirs];
}

/* dir/name within AGENT_MAX_PATH, or NULL */
static char *path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	if (a + 1 + b > AGENT_MAX_PATH)
		return NULL;
	char *p = malloc(a + b + 2);
	if (p) {
		memcpy(p, dir, a);
		p[a] = '/';
		memcpy(p + a + 1, name, b + 1);
	}
	return p;
}

/* Watches the directory fd (taking path) and, recursively, those under it
 * (never through a symlink: each opened O_NOFOLLOW from its parent). -1 with
 * errno: E2BIG past AGENT_MAX_WATCH_DIRS. */
static int watch_tree(struct watch *w, int fd, char *path, unsigned depth)
{
	int wd = -1;
	if (w->ndirs == AGENT_MAX_WATCH_DIRS) {
		errno = E2BIG;
	} else if (fchdir(fd) == 0) {
		/* "." : the fd's directory itself, no path of the tenant's; the
		 * agent's working directory back to / at once (one held there
		 * would keep a removed directory's inode, and its
		 * IN_DELETE_SELF, until the next watch) */
		wd = inotify_add_watch(w->ifd, ".", WATCH_MASK);
		int e = errno;
		if (chdir("/") < 0 && wd >= 0) {
			inotify_rm_watch(w->ifd, wd);
			wd = -1;
		} else {
			errno = e;
		}
	}
	if (wd < 0) {
		int e = errno;
		free(path);
		close(fd);
		errno = e;
		return -1;
	}
	if (wdir_find(w, wd) < 0) { /* the same directory twice (a bind): once */
		struct wdir *d = realloc(w->dirs, (w->ndirs + 1) * sizeof *d);
		if (!d) {
			free(path);
			close(fd);
			errno = ENOMEM;
			return -1;
		}
		w->dirs = d;
		d[w->ndirs++] = (struct wdir){ .wd = wd, .path = path };
	} else {
		free(path);
	}
	const char *base = w->dirs[wdir_find(w, wd)].path;
	int rc = 0;
	DIR *dir = NULL;
	if (w->recursive) {
		int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0 && !(dir = fdopendir(dfd)))
			close(dfd);
	}
	for (struct dirent *de; dir && rc == 0 && (de = readdir(dir));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		int sub = openat(fd, de->d_name,
				 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		if (sub < 0)
			continue; /* not a directory (a symlink), or gone */
		if (depth + 1 >= AGENT_MAX_DEPTH) { /* deeper than the bound: said */
			close(sub);
			errno = E2BIG;
			rc = -1;
			break;
		}
		char *sp = path_join(base, de->d_name);
		if (!sp) {
			close(sub);
			errno = ENAMETOOLONG;
			rc = -1;
			break;
		}
		rc = watch_tree(w, sub, sp, depth + 1);
		base = w->dirs[wdir_find(w, wd)].path; /* dirs may have moved */
	}
	if (dir)
		closedir(dir);
	close(fd);
	return rc;
}

/* A directory and what is under it no longer watched (moved out, or its
 * watch ended): every entry whose path is p or under it. */
static void watch_forget(struct watch *w, const char *p)
{
	size_t n = strlen(p);
	for (size_t i = w->ndirs; i-- > 1;)
		if (!strncmp(w->dirs[i].path, p, n) &&
		    (!w->dirs[i].path[n] || w->dirs[i].path[n] == '/')) {
			inotify_rm_watch(w->ifd, w->dirs[i].wd);
			wdir_drop(w, i);
		}
}

/* A directory moved within the tree: its entries' paths follow it. */
static void watch_moved(struct watch *w, const char *from, const char *to)
{
	size_t n = strlen(from);
	for (size_t i = 1; i < w->ndirs; i++) {
		char *p = w->dirs[i].path;
		if (strncmp(p, from, n) || (p[n] && p[n] != '/'))
			continue;
		char *np = path_join(to, p[n] ? p + n + 1 : "");
		if (np && !p[n])
			np[strlen(to)] = '\0'; /* to itself, no trailing slash */
		if (!np) {
			inotify_rm_watch(w->ifd, w->dirs[i].wd);
			wdir_drop(w, i--);
			w->lost = true;
			continue;
		}
		free(p);
		w->dirs[i].path = np;
	}
}

/* A new directory (created or moved in) of a recursive watch. */
static void watch_add_sub(struct watch *w, const char *path)
{
	int parent = -1;
	char last[AGENT_MAX_PATH + 1];
	if (walk(path, false, &parent, last) < 0) {
		w->lost = true;
		return;
	}
	int fd = openat(parent, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	close(parent);
	char *p = fd >= 0 ? strdup(path) : NULL;
	if (fd >= 0 && !p)
		close(fd);
	/* past a bound (or gone already): what it holds is not seen, said */
	unsigned depth = 0;
	for (const char *c = path; *c; c++)
		depth += *c == '/';
	if (!p || watch_tree(w, fd, p, depth) < 0)
		w->lost = true;
}

/* The first half of a move not followed by its second: moved out. */
static int watch_flush_move(struct watch *w)
{
	if (!w->from)
		return 0;
	int rc = watch_send(w, AGENT_EV_REMOVE, w->from, NULL);
	if (w->from_dir)
		watch_forget(w, w->from);
	free(w->from);
	w->from = NULL;
	return rc;
}

/* One inotify event: -1 ends the watch. */
static int watch_event(struct watch *w, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		w->lost = false;
		return watch_send(w, AGENT_EV_OVERFLOW, NULL, NULL);
	}
	int i = wdir_find(w, ev->wd);
	if (i < 0)
		return 0;
	if (ev->mask & IN_IGNORED) {
		if (i == 0)
			return -1;
		wdir_drop(w, (size_t)i);
		return 0;
	}
	if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
		if (i != 0)
			return 0; /* its parent said it */
		if (watch_flush_move(w) < 0)
			return -1;
		watch_send(w, AGENT_EV_END, NULL, NULL);
		return -1;
	}
	if (!ev->len)
		return 0;
	char *p = path_join(w->dirs[i].path, ev->name);
	if (!p) {
		w->lost = true;
		return 0;
	}
	bool dir = ev->mask & IN_ISDIR;
	int rc = 0;
	if ((ev->mask & IN_MOVED_TO) && w->from && w->cookie == ev->cookie) {
		rc = watch_send(w, AGENT_EV_RENAME, w->from, p);
		if (w->from_dir)
			watch_moved(w, w->from, p);
		free(w->from);
		w->from = NULL;
		free(p);
		return rc;
	}
	if (watch_flush_move(w) < 0) {
		free(p);
		return -1;
	}
	if (ev->mask & IN_MOVED_FROM) {
		w->from = p;
		w->from_dir = dir;
		w->cookie = ev->cookie;
		return 0;
	}
	if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
		rc = watch_send(w, AGENT_EV_CREATE, p, NULL);
		if (dir && w->recursive)
			watch_add_sub(w, p);
	} else if (ev->mask & IN_MODIFY) {
		rc = watch_send(w, AGENT_EV_WRITE, p, NULL);
	} else if (ev->mask & IN_DELETE) {
		rc = watch_send(w, AGENT_EV_REMOVE, p, NULL);
	}
	free(p);
	return rc;
}

/* The watch's pending events, at most 16 reads of them (a tenant making
 * events without end does not keep the agent from its other requests; the
 * rest waits for the next round of the poll loop): -1 ends it. */
static int watch_read(struct watch *w)
{
	_Alignas(struct inotify_event) char buf[16384];
	for (int round = 0; round < 16; round++) {
		ssize_t n = read(w->ifd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* nothing more: a move's first half alone moved out */
			if (n < 0 && errno == EAGAIN)
				return watch_flush_move(w);
			return -1;
		}
		for (ssize_t off = 0; off < n;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			off += (ssize_t)(sizeof *ev + ev->len);
			if (watch_event(w, ev) < 0)
				return -1;
		}
	}
	return 0;
}

/* Returns true when the socket is kept (the watch's). */
static bool op_watch(int sock)
{
	struct watch *w = NULL;
	for (size_t i = 0; i < AGENT_MAX_WATCHES && !w; i++)
		if (watches[i].sock < 0)
			w = &watches[i];
	if (!w) {
		fail(sock, EMFILE);
		return false;
	}
	int fd = open_at(msg.field[0], O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0, false);
	if (fd < 0) {
		fail(sock, errno);
		return false;
	}
	char *path = strdup(msg.field[0]);
	w->recursive = msg.field[1][0] == '1';
	w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (!path || w->ifd < 0) {
		int e = path ? errno : ENOMEM;
		free(path);
		close(fd);
		watch_end(w);
		fail(sock, e);
		return false;
	}
	/* its trailing slashes off: events name path/name */
	for (size_t n = strlen(path); n > 1 && path[n - 1] == '/'; n--)
		path[n - 1] = '\0';
	if (watch_tree(w, fd, path, 0) < 0) {
		int e = errno;
		watch_end(w);
		fail(sock, e);
		return false;
	}
	if (answerf(sock, NULL, 0, "0 %zu", w->ndirs) < 0) {
		watch_end(w);
		return false;
	}
	w->sock = sock;
	return true;
}

/* A TCP socket to the sandbox's own loopback (this network namespace's):
 * its connect begun without waiting (a server whose backlog is full would
 * stall every other request here), the socket handed over at once; the
 * host waits for the connect and reads its error itself. */
static void op_connect(int sock)
{
	uint64_t port;
	agent_num(msg.field[0], AGENT_MAX_PORT, &port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail(sock, errno);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return fail(sock, e);
	}
	answerf(sock, &fd, 1, "0 ");
	close(fd);
}

static void op_signal(int sock)
{
	uint64_t pid, sig;
	agent_num(msg.field[0], 4194304, &pid);
	agent_num(msg.field[1], 64, &sig);
	if (!proc_slot((pid_t)pid))
		return fail(sock, ESRCH);
	/* its process group (it is a session leader), else itself */
	if (kill(-(pid_t)pid, (int)sig) < 0 && kill((pid_t)pid, (int)sig) < 0)
		return fail(sock, errno);
	answerf(sock, NULL, 0, "0 ");
}

static void reap(void)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct proc *p = proc_slot(pid);
		if (!p)
			continue;
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
		answerf(p->sock, NULL, 0, "X %d %d", code, sig);
		close(p->sock);
		p->pid = 0;
		p->sock = -1;
	}
}

/* One request from fd 3: 0, or -1 when the host is gone. */
static int take_request(void)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = msgbuf, .iov_len = AGENT_MAX_MSG };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof u.buf };
	ssize_t n = recvmsg(CTL_FD, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	int sock = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
			if (sock < 0)
				sock = fd;
			else
				close(fd);
		}
	}
	if (sock < 0)
		return 0; /* nowhere to answer */
	/* a host that stops reading its socket does not stall the agent */
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	bool kept = false;
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    agent_parse(msgbuf, (size_t)n, &msg) < 0) {
		fail(sock, EPROTO);
	} else {
		switch (msg.op) {
		case AGENT_PING: answerf(sock, NULL, 0, "0 moat-agent 1"); break;
		case AGENT_READ: op_read(sock); break;
		case AGENT_WRITE: op_write(sock); break;
		case AGENT_STAT: op_stat(sock); break;
		case AGENT_LIST: op_list(sock); break;
		case AGENT_MKDIR: op_mkdir(sock); break;
		case AGENT_RENAME: op_rename(sock); break;
		case AGENT_REMOVE: op_remove(sock); break;
		case AGENT_EXEC:
		case AGENT_EXEC_PTY: kept = op_exec(sock); break;
		case AGENT_SIGNAL: op_signal(sock); break;
		case AGENT_DISK: op_disk(sock); break;
		case AGENT_WATCH: kept = op_watch(sock); break;
		case AGENT_CONNECT: op_connect(sock); break;
		}
	}
	if (!kept)
		close(sock);
	return 0;
}

int main(void)
{
	/* same-uid tenant code cannot read or write this process's memory
	 * through /proc (ptrace is refused by the filter anyway) */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (fcntl(CTL_FD, F_SETFD, FD_CLOEXEC) < 0)
		return 2;
	static const char *const dirs[] = { "/sandbox", "/tmp" };
	for (int i = 0; i < 2; i++)
		if ((roots[i] = open(dirs[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			return 2;
	for (size_t i = 0; i < AGENT_MAX_PROCS; i++)
		procs[i].sock = -1;
	signal(SIGPIPE, SIG_IGN);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		return 2;
	for (size_t i = 0; i < AGENT_MAX_WATCHES; i++)
		watches[i].ifd = watches[i].sock = -1;
	for (;;) {
		/* the control socket, SIGCHLD, and each watch's inotify fd and
		 * socket (the host's hang-up ends it; room owed an overflow) */
		struct pollfd p[2 + 2 * AGENT_MAX_WATCHES] = { { .fd = CTL_FD, .events = POLLIN },
							       { .fd = sfd, .events = POLLIN } };
		for (size_t i = 0; i < AGENT_MAX_WATCHES; i++) {
			struct watch *w = &watches[i];
			p[2 + 2 * i] = (struct pollfd){ .fd = w->sock < 0 ? -1 : w->ifd, .events = POLLIN };
			p[3 + 2 * i] = (struct pollfd){ .fd = w->sock, .events = w->lost ? POLLOUT : 0 };
		}
		if (poll(p, 2 + 2 * AGENT_MAX_WATCHES, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 2;
		}
		for (size_t i = 0; i < AGENT_MAX_WATCHES; i++) {
			struct watch *w = &watches[i];
			if (w->sock < 0)
				continue;
			short ev = p[3 + 2 * i].revents;
			if ((ev & (POLLHUP | POLLERR)) ||
			    (p[2 + 2 * i].revents && watch_read(w) < 0) ||
			    ((ev & POLLOUT) && watch_send(w, 0, NULL, NULL) < 0))
				watch_end(w);
		}
		if (p[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				;
			reap();
		}
		if (p[0].revents & POLLIN) {
			if (take_request() < 0)
				return 0;
		} else if (p[0].revents & (POLLHUP | POLLERR)) {
			return 0; /* the host is gone: so is the sandbox */
		}
	}
}
