/* Small helpers shared by the modules, so that each exists once: the
 * monotonic clock, complete writes, fd passing, the parent-death signal,
 * a raw fork, message formatting and output capping.
 *
 * "Child-safe" marks the ones that make system calls only (no allocation,
 * no locks, no stdio): they may run in a raw clone3 child of a
 * multi-threaded process, where a lock another thread held at clone time
 * stays held forever. Each of those returns 0 (or a count), or -1 with
 * errno set: the one error convention of the sandbox side. */
#ifndef MOAT_CORE_SYS_H
#define MOAT_CORE_SYS_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in milliseconds / nanoseconds. Child-safe. */
/* ---- libraries loaded with dlopen (core/dl.c) ---- */
/* One function of a table: its symbol and its field's offset. */
struct moat_dl_sym {
	const char *name;
	size_t off;
};
/* Opens soname and fills the table fns (size bytes) from syms, all or
 * nothing: the handle, or NULL (*lacks: the function it opened without,
 * or NULL when it did not open). */
void *moat_dl_open(const char *soname, const struct moat_dl_sym *syms, size_t n, void *fns,
		   size_t size, const char **lacks);
/* A library's first use: load runs once (it sets error when the library
 * cannot be used); 0, or -1 with *why = error. */
struct moat_dl_once {
	pthread_once_t once;
	const char *error;
};
#define MOAT_DL_ONCE_INIT { PTHREAD_ONCE_INIT, NULL }
int moat_dl_once(struct moat_dl_once *o, void (*load)(void), const char **why);
/* A load's usual body: moat_dl_open, and o->error = cannot_open or lacks
 * when it fails. The handle, or NULL. */
void *moat_dl_load(struct moat_dl_once *o, const char *soname, const struct moat_dl_sym *syms,
		   size_t n, void *fns, size_t size, const char *cannot_open, const char *lacks);

/* Closes *fd if open (>= 0) and sets it to -1. */
void moat_close_fd(int *fd);
/* Frees a NULL-terminated array of malloc'd strings and the array (v may
 * be NULL). */
void moat_strv_free(char **v);
int64_t moat_mono_ms(void);
uint64_t moat_mono_ns(void);

/* A time the tests set in the environment variable name (MOAT_TEST_*:
 * positive milliseconds, nothing else), else dflt. The one parser of the
 * test-only time knobs. */
int64_t moat_test_ms(const char *name, int64_t dflt);

/* pthread_cond_timedwait for at most ms (the condition's clock is the
 * default CLOCK_REALTIME); mu held. Its result (0, ETIMEDOUT). */
int moat_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

/* Writes all of buf to a blocking fd, retrying EINTR and short writes.
 * 0, or -1 with errno (a write of 0 bytes counts as EIO). Child-safe. */
int moat_write_all(int fd, const void *buf, size_t len);

/* For the threads of a run's network paths: waits until fd has events,
 * stop_fd becomes readable or the deadline (moat_mono_ms) passes. 1: fd
 * ready; 0: deadline passed; -1: stopping or poll error. */
int moat_wait_or_stop(int fd, short events, int stop_fd, int64_t deadline);
/* Sends all of buf on a non-blocking socket (MSG_NOSIGNAL), waiting with
 * moat_wait_or_stop; 0, or -1 when it fails, the run stops or the
 * deadline passes. */
int moat_send_all_until(int fd, const void *buf, size_t len, int stop_fd, int64_t deadline);

/* The most fds one message passes. */
#define MOAT_SYS_MAX_FDS 8

/* Sends one record of len bytes (len > 0) carrying nfds file descriptors
 * (SCM_RIGHTS; nfds <= MOAT_SYS_MAX_FDS, may be 0) over a Unix socket,
 * without SIGPIPE. 0 when the whole record went, else -1 with errno.
 * Child-safe. */
int moat_send_fds(int sock, const void *data, size_t len, const int *fds, size_t nfds);

/* Receives one record into data (up to len bytes) and the fds it carries
 * (made O_CLOEXEC) into fds[0..*nfds). flags: extra recvmsg flags
 * (MSG_DONTWAIT). Returns the bytes received (0: the peer closed), or -1
 * with errno: EMSGSIZE when the record or its fds did not fit (more than
 * max_fds, or truncated) — every fd that came with it is closed then, so
 * no fd is ever kept unasked. EINTR is retried. */
ssize_t moat_recv_fds(int sock, void *data, size_t len, int *fds, size_t max_fds,
		      size_t *nfds, int flags);

/* The pid, in this process's pid namespace, of the process a pidfd refers
 * to: the "Pid:" line of the fdinfo text (moat_fdinfo_pid, pure), read
 * from /proc/self/fdinfo/<pidfd> (moat_pidfd_pid). -1 when the process has
 * exited (the kernel says -1), lives in a pid namespace this one cannot
 * see (0), or the text has no such line: errno ESRCH, EINVAL; or the read
 * failed. */
pid_t moat_fdinfo_pid(const char *text);
pid_t moat_pidfd_pid(int pidfd);

/* Re-arms the parent-death signal (SIGKILL), which a change of ids clears,
 * then makes sure the parent did not die before it was armed: parent > 0
 * must still be getppid() (useless across a pid namespace, where getppid()
 * is 0), and parent_fd >= 0, a socket whose peer the parent holds, must not
 * be hung up. 0, or -1 with errno (ESRCH: the parent is gone). Child-safe. */
int moat_pdeathsig_rearm(pid_t parent, int parent_fd);

/* fork() without glibc: a raw clone(SIGCHLD) system call. glibc's fork()
 * takes the malloc and stdio locks and runs atfork handlers, which deadlocks
 * in a raw clone3 child of a multi-threaded process (a lock held by another
 * thread at clone time is never released there). The new process runs on
 * a copy of the caller's memory and must make only system calls before it
 * execs or exits. Returns like fork(). Child-safe. */
pid_t moat_sys_fork(void);

/* _exit without interposers: the exit_group system call. In a raw clone
 * child no library gets to run exit-time work (a sanitizer's final report
 * would judge a process it never saw start). Child-safe. */
__attribute__((noreturn)) void moat_sys_exit(int code);

/* First call of a raw clone3 child. In ThreadSanitizer builds (make
 * check-threads) it makes TSan ignore the child's memory accesses and
 * synchronisation: the child is a new process whose copied fds and memory
 * TSan would judge against the parent's other threads; elsewhere it does
 * nothing. MOAT_SYS_TSAN is 1 in those builds. Child-safe. */
void moat_sys_child_begin(void);
#ifdef __SANITIZE_THREAD__
#define MOAT_SYS_TSAN 1
#else
#define MOAT_SYS_TSAN 0
#endif

/* printf into a new malloc'd string; NULL when out of memory. The
 * arguments may point into memory the caller frees right after. */
char *moat_vformat(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
char *moat_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Output capping: of len new bytes, how many fit when have bytes are kept
 * already and at most cap may be; sets *truncated when some do not.
 * Child-safe. */
/* mkdir -p: creates the missing components of path (absolute) 0700. 0, or
 * -1 with errno. path is modified during the call and restored. */
int moat_mkdirs(char *path);

size_t moat_cap_take(size_t have, size_t len, size_t cap, bool *truncated);

#endif
