/* Small helpers shared by the modules (see sys.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"

void moat_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void moat_strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

int64_t moat_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t moat_test_ms(const char *name, int64_t dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	char *end;
	errno = 0;
	long long ms = strtoll(v, &end, 10);
	return !*end && !errno && ms > 0 ? ms : dflt;
}

uint64_t moat_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int moat_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_cond_timedwait(cv, mu, &ts);
}

int moat_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int moat_wait_or_stop(int fd, short events, int stop_fd, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - moat_mono_ms();
		if (left <= 0)
			return 0;
		struct pollfd pf[2] = { { .fd = fd, .events = events },
					{ .fd = stop_fd, .events = POLLIN } };
		int r = poll(pf, 2, (int)(left > 60000 ? 60000 : left));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || pf[1].revents)
			return -1;
		if (r > 0)
			return 1;
	}
}

int moat_send_all_until(int fd, const void *buf, size_t len, int stop_fd, int64_t deadline)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (moat_wait_or_stop(fd, POLLOUT, stop_fd, deadline) <= 0)
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

union fd_control {
	char buf[CMSG_SPACE(MOAT_SYS_MAX_FDS * sizeof(int))];
	struct cmsghdr align;
};

int moat_send_fds(int sock, const void *data, size_t len, const int *fds, size_t nfds)
{
	if (nfds > MOAT_SYS_MAX_FDS || len == 0) {
		errno = EINVAL;
		return -1;
	}
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
	union fd_control u;
	memset(&u, 0, sizeof u);
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if ((size_t)n != len) {
		errno = EMSGSIZE;
		return -1;
	}
	return 0;
}

ssize_t moat_recv_fds(int sock, void *data, size_t len, int *fds, size_t max_fds,
		      size_t *nfds, int flags)
{
	*nfds = 0;
	struct iovec iov = { .iov_base = data, .iov_len = len };
	union fd_control u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof u.buf };
	ssize_t n;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	size_t got = 0;
	bool over = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
			if (got < max_fds)
				fds[got++] = fd;
			else {
				close(fd);
				over = true;
			}
		}
	}
	if (over) {
		for (size_t i = 0; i < got; i++)
			close(fds[i]);
		errno = EMSGSIZE;
		return -1;
	}
	*nfds = got;
	return n;
}

pid_t moat_fdinfo_pid(const char *text)
{
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (strncmp(l, "Pid:", 4))
			continue;
		if (l[4] != '\t' && l[4] != ' ')
			break;
		char *end;
		errno = 0;
		long v = strtol(l + 4, &end, 10);
		if (errno || end == l + 4 || (*end && *end != '\n') || v < -1 || v > INT32_MAX)
			break;
		if (v <= 0) {
			errno = v < 0 ? ESRCH : EINVAL; /* exited; another pid namespace */
			return -1;
		}
		return (pid_t)v;
	}
	errno = EINVAL;
	return -1;
}

pid_t moat_pidfd_pid(int pidfd)
{
	char path[48], text[1024];
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	ssize_t n;
	while (len < sizeof text - 1 &&
	       ((n = read(fd, text + len, sizeof text - 1 - len)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	int e = errno;
	close(fd);
	text[len] = '\0';
	if (len == 0) {
		errno = e ? e : EINVAL;
		return -1;
	}
	return moat_fdinfo_pid(text);
}

int moat_pdeathsig_rearm(pid_t parent, int parent_fd)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return -1;
	if (parent > 0 && getppid() != parent) {
		errno = ESRCH;
		return -1;
	}
	if (parent_fd >= 0) {
		struct pollfd alive = { .fd = parent_fd, .events = POLLIN | POLLRDHUP };
		if (poll(&alive, 1, 0) < 0)
			return -1;
		if (alive.revents & (POLLHUP | POLLRDHUP | POLLERR)) {
			errno = ESRCH;
			return -1;
		}
	}
	return 0;
}

pid_t moat_sys_fork(void)
{
	/* SYS_clone, not clone3: inside the sandbox the seccomp policy answers
	 * clone3 with ENOSYS (libc then falls back to clone, which the filter
	 * can inspect). Argument order differs on s390 and cris. */
#if defined(__s390__) || defined(__CRIS__)
	return (pid_t)syscall(SYS_clone, 0L, (long)SIGCHLD, 0L, 0L, 0L);
#else
	return (pid_t)syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
#endif
}

void moat_sys_exit(int code)
{
	for (;;)
		syscall(SYS_exit_group, code);
}

#ifdef __SANITIZE_THREAD__
void __tsan_ignore_thread_begin(void);
void AnnotateIgnoreSyncBegin(const char *file, int line);
#endif

void moat_sys_child_begin(void)
{
#ifdef __SANITIZE_THREAD__
	__tsan_ignore_thread_begin();
	AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
#endif
}

char *moat_vformat(const char *fmt, va_list ap)
{
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s)
		vsnprintf(s, (size_t)n + 1, fmt, again);
	va_end(again);
	return s;
}

char *moat_format(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = moat_vformat(fmt, ap);
	va_end(ap);
	return s;
}

size_t moat_cap_take(size_t have, size_t len, size_t cap, bool *truncated)
{
	size_t room = have < cap ? cap - have : 0;
	if (len <= room)
		return len;
	*truncated = true;
	return room;
}

int moat_mkdirs(char *path)
{
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		int rc = mkdir(path, 0700);
		int e = errno;
		*p = saved;
		if (rc != 0 && e != EEXIST) {
			errno = e;
			return -1;
		}
		if (saved == '\0')
			return 0;
	}
}
