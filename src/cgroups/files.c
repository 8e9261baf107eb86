/* Reading and writing cgroup files. A run's leaves are written and read
 * relative to their directory fds (openat on the O_PATH fd the leaf was
 * opened with, O_CLOEXEC), not by building a path for every file: no
 * allocation per write, and the files are the leaf's even if a name on the
 * way is replaced. The path forms remain for one-off reads of the host
 * (the probe, /proc/self/cgroup). Contents are untrusted: read whole,
 * bounded at 16 MiB, malloc'd. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgroups/backend.h"

char *moat_cg_path(const char *dir, const char *file)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, file) < 0)
		return NULL;
	return p;
}

char *moat_cg_read_at(int dfd, const char *file)
{
	int fd = openat(dfd, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (len + 1 >= cap) {
			char *nb = cap < ((size_t)1 << 24) ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				free(buf);
				buf = NULL;
				errno = ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			free(buf);
			buf = NULL;
			errno = e;
			break;
		}
		if (n == 0) {
			buf[len] = '\0';
			break;
		}
		len += (size_t)n;
	}
	int e = errno;
	close(fd);
	errno = e;
	return buf;
}

char *moat_cg_read(const char *dir, const char *file)
{
	char *path = moat_cg_path(dir, file);
	if (!path)
		return NULL;
	char *t = moat_cg_read_at(AT_FDCWD, path);
	int e = errno;
	free(path);
	errno = e;
	return t;
}

int moat_cg_write_at(int dfd, const char *file, const char *value)
{
	int fd = openat(dfd, file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = strlen(value);
	ssize_t n;
	do
		n = write(fd, value, len);
	while (n < 0 && errno == EINTR);
	int e = errno;
	close(fd);
	if (n < 0 || (size_t)n != len) {
		errno = n < 0 ? e : EIO;
		return -1;
	}
	return 0;
}

int moat_cg_write(const char *dir, const char *file, const char *value)
{
	char *path = moat_cg_path(dir, file);
	if (!path)
		return -1;
	int rc = moat_cg_write_at(AT_FDCWD, path, value);
	int e = errno;
	free(path);
	errno = e;
	return rc;
}

int moat_cg_rmdir_wait(const char *dir)
{
	/* 5 ms steps, up to about 1 s: processes of a finished pid namespace
	 * are being killed and leave the cgroup within milliseconds */
	for (int i = 0; i < 200; i++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -1;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	errno = EBUSY;
	return -1;
}

int64_t cg_read_num(int dfd, const char *file)
{
	int64_t v = -1;
	char *t = dfd >= 0 ? moat_cg_read_at(dfd, file) : NULL;
	if (!t || moat_cg_parse_number(t, &v) != 1)
		v = -1;
	free(t);
	return v;
}

int64_t cg_read_kv(int dfd, const char *file, const char *key)
{
	int64_t v = -1;
	char *t = dfd >= 0 ? moat_cg_read_at(dfd, file) : NULL;
	if (!t || moat_cg_kv_get(t, key, &v) != 1)
		v = -1;
	free(t);
	return v;
}

int cg_write_u64(int dfd, const char *file, unsigned long long v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%llu", v);
	return moat_cg_write_at(dfd, file, buf);
}

int cg_warn(struct moat_result *res, struct moat_error *err, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	char *s = moat_vformat(f, ap);
	va_end(ap);
	int rc = s ? moat_result_warn(res, "%s", s) : -1;
	free(s);
	if (rc < 0)
		return moat_error_oom(err);
	return 0;
}

uint64_t moat_cg_pid_start(pid_t pid)
{
	char dir[32];
	snprintf(dir, sizeof dir, "/proc/%ld", (long)pid);
	char *t = moat_cg_read(dir, "stat");
	uint64_t v = 0;
	if (!t || moat_cg_stat_starttime(t, &v) != 1)
		v = 0;
	free(t);
	return v;
}

bool moat_cg_pid_alive(pid_t pid, uint64_t start)
{
	if (!(kill(pid, 0) == 0 || errno == EPERM))
		return false;
	if (!start)
		return true;
	/* the pid lives: the leaf's owner only if it started when the owner
	 * did (a pid reused since is another process); unknown counts as
	 * alive */
	uint64_t now = moat_cg_pid_start(pid);
	return !now || now == start;
}
