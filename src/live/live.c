/* Live sandboxes (live.h; docs/SANDBOXES.md): the sandbox's thread, the
 * agent's requests and answers, the fds it hands over checked, and the
 * processes' pipes streamed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <termios.h>
#include <unistd.h>

#include "agent/proto.h"
#include "core/cleanup.h"
#include "core/sys.h"
#include "live/live.h"
#include "ns/ns.h"
#include "runner/sandbox.h"

#define AGENT_PATH MOAT_RUNTIME_MOUNT "/bin/moat-agent"
#define SEND_TIMEOUT_MS 5000
/* an answer the agent owes: its loop never blocks on one operation, so a
 * silent agent is a stopped or broken one (tenant code may SIGSTOP it) */
#define ANSWER_TIMEOUT_MS 30000

struct proc {
	struct proc *next;
	int pid;
	int in, out, err, sock;
	bool out_eof, err_eof;
	bool exited, signaled, lost, attached, removed;
	bool pty; /* out is a pty master (in its dup), err none */
	int code, sig;
	int refs; /* the table's while in it, and one per caller holding it */
};

struct live {
	pthread_mutex_t mu; /* everything below but ctl's sending */
	pthread_cond_t cv;
	pthread_mutex_t ctl_mu;
	int ctl;
	struct moat_request *req;
	struct moat_run_options opts;
	struct moat_sandbox *sb; /* NULL once released (by its thread) */
	struct moat_result *made;
	pthread_t thread;
	bool have_thread;
	bool started, ended, kill_asked, protocol;
	int start_rc;
	struct moat_error start_err;
	char *gone;
	int64_t cpu_ms; /* at the end */
	struct proc *procs;
	unsigned nprocs;
	unsigned nwatches; /* open live_watch streams, at most LIVE_MAX_WATCHES */
	unsigned nconns;   /* live_connect's connections open, at most LIVE_MAX_CONNS */
};

struct live_watch {
	struct live *lv;
	int sock;  /* the agent's events */
	char *root; /* the directory watched, as asked */
	bool done;
	char buf[AGENT_MAX_MSG + 1];
};

struct live_attach {
	struct live *lv;
	struct proc *p;
	bool exit_sent;
};

/* ---- the sandbox's thread ---- */

static char *end_sentence(struct live *lv, const struct moat_result *res)
{
	char *s = NULL;
	const char *k = res ? res->killed_by : NULL;
	int rc;
	if (lv->protocol)
		rc = asprintf(&s, "the sandbox was killed: its agent broke the protocol (the "
			      "processes in it share the agent's uid and may have interfered)");
	else if (lv->kill_asked)
		rc = asprintf(&s, "the sandbox was ended");
	else if (!res)
		rc = asprintf(&s, "the sandbox ended");
	else if (k && !strcmp(k, "timeout"))
		rc = asprintf(&s, "the sandbox reached the end of its lifetime");
	else if (k && !strcmp(k, "oom"))
		rc = asprintf(&s, "the sandbox was killed: memory limit exceeded (%llu MiB)",
			      (unsigned long long)lv->req->memory_mb);
	else if (k && !strcmp(k, "pids"))
		rc = asprintf(&s, "the sandbox was killed: process limit reached (%llu)",
			      (unsigned long long)lv->req->pids_limit);
	else if (res->exited)
		rc = asprintf(&s, "the sandbox ended: its agent exited with code %d", res->exit_code);
	else
		rc = asprintf(&s, "the sandbox ended: its agent was killed (signal %d)", res->signal);
	return rc < 0 ? NULL : s;
}

static void *live_main(void *arg)
{
	struct live *lv = arg;
	struct moat_sandbox *sb = NULL;
	struct moat_result *made = NULL;
	struct moat_error err = { 0 };
	int ctl = -1;
	int rc = run_sandbox_start_live(lv->req, &lv->opts, &sb, &ctl, &made, &err);
	pthread_mutex_lock(&lv->mu);
	lv->start_rc = rc;
	lv->started = true;
	if (rc < 0) {
		lv->start_err = err;
		lv->ended = true;
	} else {
		lv->sb = sb;
		lv->ctl = ctl;
		lv->made = made;
		if (lv->kill_asked)
			run_sandbox_session_kill(sb);
	}
	pthread_cond_broadcast(&lv->cv);
	pthread_mutex_unlock(&lv->mu);
	if (rc < 0)
		return NULL;
	struct moat_result *res = NULL;
	struct moat_error werr = { 0 };
	(void)moat_sandbox_wait(sb, &res, &werr);
	moat_error_clear(&werr);
	pthread_mutex_lock(&lv->mu);
	lv->gone = end_sentence(lv, res);
	lv->cpu_ms = res ? res->cpu_time_ms : -1;
	lv->ended = true;
	/* nothing of it left: pid 1 reaped, its cgroups and mounts gone */
	moat_sandbox_release(sb);
	lv->sb = NULL;
	pthread_cond_broadcast(&lv->cv);
	pthread_mutex_unlock(&lv->mu);
	moat_result_free(res);
	return NULL;
}

void live_kill(struct live *lv)
{
	if (!lv)
		return;
	pthread_mutex_lock(&lv->mu);
	lv->kill_asked = true;
	if (lv->sb)
		run_sandbox_session_kill(lv->sb);
	pthread_mutex_unlock(&lv->mu);
}

/* The agent broke the protocol: the sandbox dies. */
static int breach(struct live *lv, struct moat_error *err)
{
	pthread_mutex_lock(&lv->mu);
	if (!lv->kill_asked)
		lv->protocol = true;
	lv->kill_asked = true;
	if (lv->sb)
		run_sandbox_session_kill(lv->sb);
	pthread_mutex_unlock(&lv->mu);
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOTCONN,
			      "the sandbox was killed: its agent broke the protocol");
}

static void proc_unref(struct proc *p)
{
	if (--p->refs > 0)
		return;
	int *fds[] = { &p->in, &p->out, &p->err, &p->sock };
	for (int i = 0; i < 4; i++)
		moat_close_fd(fds[i]);
	free(p);
}

void live_destroy(struct live *lv)
{
	if (!lv)
		return;
	live_kill(lv);
	if (lv->have_thread)
		pthread_join(lv->thread, NULL);
	while (lv->procs) {
		struct proc *p = lv->procs;
		lv->procs = p->next;
		proc_unref(p);
	}
	moat_close_fd(&lv->ctl);
	moat_result_free(lv->made);
	moat_request_free(lv->req);
	moat_error_clear(&lv->start_err);
	free(lv->gone);
	pthread_mutex_destroy(&lv->mu);
	pthread_cond_destroy(&lv->cv);
	pthread_mutex_destroy(&lv->ctl_mu);
	free(lv);
}

void live_wait_ended(struct live *lv)
{
	pthread_mutex_lock(&lv->mu);
	while (!lv->ended || lv->sb)
		pthread_cond_wait(&lv->cv, &lv->mu);
	pthread_mutex_unlock(&lv->mu);
}

const char *live_gone(struct live *lv)
{
	pthread_mutex_lock(&lv->mu);
	const char *g = lv->ended ? (lv->gone ? lv->gone : "the sandbox ended") : NULL;
	pthread_mutex_unlock(&lv->mu);
	return g;
}

/* Waits up to ms for the sandbox's end to be collected (true: it ended):
 * an agent that died is seen by the sandbox's thread within moments, and
 * its reason is then the right one. */
static bool wait_end(struct live *lv, int64_t ms)
{
	int64_t end = moat_mono_ms() + ms;
	pthread_mutex_lock(&lv->mu);
	while (!lv->ended && moat_mono_ms() < end)
		moat_cond_wait_ms(&lv->cv, &lv->mu, end - moat_mono_ms());
	bool ended = lv->ended;
	pthread_mutex_unlock(&lv->mu);
	return ended;
}

static int gone_error(struct live *lv, struct moat_error *err)
{
	(void)wait_end(lv, 2000);
	const char *g = live_gone(lv);
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOTCONN, "%s",
			      g ? g : "the sandbox is ending");
}

int64_t live_memory(struct live *lv)
{
	pthread_mutex_lock(&lv->mu);
	int64_t v = lv->sb ? run_sandbox_memory(lv->sb) : -1;
	pthread_mutex_unlock(&lv->mu);
	return v;
}

int64_t live_cpu_ms(struct live *lv)
{
	pthread_mutex_lock(&lv->mu);
	int64_t v = lv->sb ? run_sandbox_cpu_ms(lv->sb) : lv->cpu_ms;
	pthread_mutex_unlock(&lv->mu);
	return v;
}

int live_freeze(struct live *lv, bool frozen, struct moat_error *err)
{
	/* mu held throughout: the sandbox's thread cannot release it meanwhile */
	pthread_mutex_lock(&lv->mu);
	int rc = lv->sb ? run_sandbox_freeze(lv->sb, frozen, err)
			: moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOTCONN, "the sandbox has ended");
	pthread_mutex_unlock(&lv->mu);
	if (rc < 0 && err->sys_errno == ESRCH) {
		/* its processes went while it was frozen or thawed (its agent
		 * killed, pid 1 reaped meanwhile by the sandbox's thread, which
		 * waited for mu to say so): the end's own reason, not a failure
		 * to stop what no longer runs */
		moat_error_clear(err);
		return gone_error(lv, err);
	}
	return rc;
}

bool live_cpu_bounded(struct live *lv)
{
	pthread_mutex_lock(&lv->mu);
	bool b = !lv->sb || run_sandbox_cpu_bounded(lv->sb);
	pthread_mutex_unlock(&lv->mu);
	return b;
}

void live_made_json(struct live *lv, struct moat_buf *out, const char *extra)
{
	const struct moat_result *m = lv->made;
	moat_buf_appendf(out, "\"limits\":{\"memory\":\"%s\",\"pids\":\"%s\",\"cpu\":\"%s\"},"
			 "\"warnings\":[",
			 m && m->limit_memory ? m->limit_memory : "none",
			 m && m->limit_pids ? m->limit_pids : "none",
			 m && m->limit_cpu ? m->limit_cpu : "none");
	for (size_t i = 0; m && i < m->warnings_count; i++) {
		if (i)
			moat_buf_append(out, ",", 1);
		moat_buf_append_json_string(out, m->warnings[i], strlen(m->warnings[i]));
	}
	if (extra) {
		if (m && m->warnings_count)
			moat_buf_append(out, ",", 1);
		moat_buf_append_json_string(out, extra, strlen(extra));
	}
	moat_buf_append(out, "]", 1);
}

/* ---- requests and answers ---- */

/* The request (len bytes) with a fresh socket for its answers: *sock. */
static int send_req(struct live *lv, const char *req, size_t len, int *sock,
		    struct moat_error *err)
{
	*sock = -1;
	if (live_gone(lv))
		return gone_error(lv, err);
	if (len > AGENT_MAX_MSG)
		return moat_error_set(err, MOAT_ERR_CONFIG, E2BIG,
				      "the request is too large for the sandbox's agent (%u bytes at most)",
				      AGENT_MAX_MSG);
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair: %s",
				      strerror(errno));
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = { .iov_base = (void *)req, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof u.buf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &sp[1], sizeof(int));
	int64_t end = moat_mono_ms() + SEND_TIMEOUT_MS;
	ssize_t n;
	pthread_mutex_lock(&lv->ctl_mu);
	for (;;) {
		n = sendmsg(lv->ctl, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n >= 0 || (errno != EAGAIN && errno != EINTR))
			break;
		int64_t left = end - moat_mono_ms();
		if (left <= 0)
			break;
		struct pollfd p = { .fd = lv->ctl, .events = POLLOUT };
		(void)poll(&p, 1, (int)left);
	}
	int e = errno;
	pthread_mutex_unlock(&lv->ctl_mu);
	close(sp[1]);
	if (n < 0) {
		close(sp[0]);
		if (live_gone(lv) || e == EPIPE || e == ECONNRESET)
			return gone_error(lv, err);
		return breach(lv, err); /* an agent that reads no request */
	}
	*sock = sp[0];
	return 0;
}

/* One answer on sock: its text (NUL-terminated in buf, cap > 1) and up to
 * want fds (*got of them). -1 with err: the sandbox gone, or a breach. */
static int recv_answer(struct live *lv, int sock, char *buf, size_t cap, size_t *len, int *fds,
		       size_t want, size_t *got, bool meta, struct moat_error *err)
{
	*got = 0;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int64_t end = moat_mono_ms() + ANSWER_TIMEOUT_MS;
	for (;;) {
		int64_t left = end - moat_mono_ms();
		if (left <= 0) {
			if (live_gone(lv))
				return gone_error(lv, err);
			return breach(lv, err);
		}
		int r = poll(&p, 1, left > 200 ? 200 : (int)left);
		if (r > 0)
			break;
		if (live_gone(lv))
			return gone_error(lv, err);
	}
	union {
		char b[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = cap - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof u.b };
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	/* every fd that came is ours to close, whatever else is wrong */
	size_t nf = 0;
	int in[4];
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && nf < 4; i++)
			memcpy(&in[nf++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	/* a NUL only before a metadata block (meta: the caller parses it) */
	bool bad = n <= 0 || nf > want || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
		   (!meta && memchr(buf, '\0', n > 0 ? (size_t)n : 0));
	if (bad) {
		for (size_t i = 0; i < nf; i++)
			close(in[i]);
		/* the agent closed it unanswered: it died (the sandbox is
		 * ending), or broke the protocol */
		if ((n == 0 || live_gone(lv)) && wait_end(lv, 2000))
			return gone_error(lv, err);
		return breach(lv, err);
	}
	buf[n] = '\0';
	*len = (size_t)n;
	memcpy(fds, in, nf * sizeof(int));
	*got = nf;
	return 0;
}

/* "<errno> <payload>": 0 and *payload, or -1 with err (the agent's errno,
 * or a breach). */
static int answer_status(struct live *lv, const char *buf, const char **payload,
			 struct moat_error *err)
{
	int e = 0;
	const char *p = buf;
	while (*p >= '0' && *p <= '9' && p - buf < 4)
		e = e * 10 + (*p++ - '0');
	if (p == buf || *p != ' ' || (p - buf > 1 && buf[0] == '0'))
		return breach(lv, err);
	*payload = p + 1;
	if (e == 0)
		return 0;
	if (e > 4095)
		return breach(lv, err);
	return moat_error_set(err, MOAT_ERR_CONFIG, e, "%s", strerror(e));
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* One request, one answer with exactly nfds fds (none on failure). With
 * meta_len, the answer's length (its text may be followed by a metadata
 * block), else a NUL in it is a breach. */
static int call_meta(struct live *lv, const char *req, size_t len, char *ans, size_t cap,
		     const char **payload, int *fds, size_t nfds, int *keep, size_t *meta_len,
		     struct moat_error *err)
{
	int sock;
	if (send_req(lv, req, len, &sock, err) < 0)
		return -1;
	size_t alen = 0, got;
	int rc = recv_answer(lv, sock, ans, cap, &alen, fds, nfds, &got, meta_len != NULL, err);
	if (meta_len)
		*meta_len = alen;
	if (rc == 0 && (rc = answer_status(lv, ans, payload, err)) < 0 &&
	    (got || strlen(ans) != alen)) { /* a failure carries nothing else */
		close_all(fds, got);
		rc = breach(lv, err);
	} else if (rc == 0 && got != nfds) {
		close_all(fds, got);
		rc = breach(lv, err);
	}
	if (rc == 0 && keep)
		*keep = sock;
	else
		close(sock);
	return rc;
}

static int call(struct live *lv, const char *req, size_t len, char *ans, size_t cap,
		const char **payload, int *fds, size_t nfds, int *keep, struct moat_error *err)
{
	return call_meta(lv, req, len, ans, cap, payload, fds, nfds, keep, NULL, err);
}

/* The fd is what the host expects: a regular file of a tmpfs (the
 * sandbox's /sandbox, /tmp) or an anonymous pipe, open for acc (O_RDONLY
 * or O_WRONLY) and nothing else (no O_PATH). */
static bool fd_is(int fd, bool pipe, int acc)
{
	struct stat st;
	struct statfs sf;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_PATH) || (fl & O_ACCMODE) != acc || fstat(fd, &st) < 0 ||
	    fstatfs(fd, &sf) < 0)
		return false;
	if (pipe)
		return S_ISFIFO(st.st_mode) && sf.f_type == PIPEFS_MAGIC;
	return S_ISREG(st.st_mode) && sf.f_type == TMPFS_MAGIC;
}

#ifndef DEVPTS_SUPER_MAGIC
#define DEVPTS_SUPER_MAGIC 0x1cd1
#endif

/* The fd is a pty master of a devpts instance (the sandbox's own): a
 * character device whose node is a devpts ptmx (major 5, minor 2: a pty's
 * terminal end has another major), open read-write. Nothing else is ever
 * ioctl()ed here. */
static bool fd_is_ptmx(int fd)
{
	struct stat st;
	struct statfs sf;
	int fl = fcntl(fd, F_GETFL);
	return fl >= 0 && !(fl & O_PATH) && (fl & O_ACCMODE) == O_RDWR && fstat(fd, &st) == 0 &&
	       fstatfs(fd, &sf) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 5 &&
	       minor(st.st_rdev) == 2 && sf.f_type == DEVPTS_SUPER_MAGIC;
}

/* The request buffer: op then NUL-ended fields. */
static void req_field(struct moat_buf *b, const char *s)
{
	moat_buf_append(b, s, strlen(s) + 1);
}

static int simple(struct live *lv, char op, const char *a, const char *b, struct moat_error *err)
{
	struct moat_buf q = { 0 };
	moat_buf_append(&q, &op, 1);
	req_field(&q, a);
	if (b)
		req_field(&q, b);
	if (q.oom) {
		moat_buf_free(&q);
		return moat_error_oom(err);
	}
	char ans[256];
	const char *pl;
	int rc = call(lv, q.data, q.len, ans, sizeof ans, &pl, NULL, 0, NULL, err);
	moat_buf_free(&q);
	return rc;
}

/* A decimal number (at most 20 digits, no sign) ending at a space or the
 * end: its value and *end past it, or false. */
static bool answer_num(const char *p, uint64_t *v, const char **end)
{
	const char *q = p;
	unsigned long long n = 0;
	while (*q >= '0' && *q <= '9' && q - p < 20) {
		unsigned d = (unsigned)(*q++ - '0');
		if (n > (~0ull - d) / 10)
			return false;
		n = n * 10 + d;
	}
	if (q == p || (*q && *q != ' '))
		return false;
	*v = n;
	*end = q;
	return true;
}

int live_disk(struct live *lv, uint64_t *bytes, struct moat_error *err)
{
	char q = AGENT_DISK, ans[256];
	const char *pl, *e;
	uint64_t a, b;
	if (call(lv, &q, 1, ans, sizeof ans, &pl, NULL, 0, NULL, err) < 0)
		return -1;
	if (!answer_num(pl, &a, &e) || *e != ' ' || !answer_num(e + 1, &b, &e) || *e ||
	    a > UINT64_MAX - b)
		return breach(lv, err);
	*bytes = a + b;
	return 0;
}

/* ---- files ---- */

bool live_path_ok(const char *path)
{
	int root;
	const char *rel;
	return agent_path(path, &root, &rel) == 0;
}

int live_open_read(struct live *lv, const char *path, int *fd, uint64_t *size,
		   struct moat_error *err)
{
	*fd = -1;
	struct moat_buf q = { 0 };
	moat_buf_append(&q, "r", 1);
	req_field(&q, path);
	char ans[256];
	const char *pl;
	int f = -1;
	int rc = q.oom ? moat_error_oom(err)
		       : call(lv, q.data, q.len, ans, sizeof ans, &pl, &f, 1, NULL, err);
	moat_buf_free(&q);
	if (rc < 0)
		return -1;
	char *end;
	errno = 0;
	unsigned long long sz = strtoull(pl, &end, 10);
	if (!fd_is(f, false, O_RDONLY) || errno || *end || end == pl) {
		close(f);
		return breach(lv, err);
	}
	*fd = f;
	*size = sz;
	return 0;
}

_Static_assert(LIVE_MAX_META == AGENT_MAX_META && LIVE_MAX_META_KEY == AGENT_MAX_META_KEY,
	       "live.h's metadata bounds are the agent's");

bool live_meta_ok(const char *const *kv, size_t npairs)
{
	return agent_meta_pairs_ok(kv, npairs);
}

int live_open_write(struct live *lv, const char *path, bool mkdirs, const struct live_meta *meta,
		    int *fd, struct moat_error *err)
{
	*fd = -1;
	if (meta && !live_meta_ok(meta->kv, meta->npairs))
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL,
				      "file metadata: keys of 1 to %u bytes, keys and values printable "
				      "US-ASCII, at most %u bytes in all",
				      LIVE_MAX_META_KEY, LIVE_MAX_META);
	struct moat_buf q = { 0 };
	moat_buf_append(&q, "w", 1);
	req_field(&q, path);
	req_field(&q, mkdirs ? "1" : "0");
	req_field(&q, meta ? "1" : "0");
	for (size_t i = 0; meta && i < 2 * meta->npairs; i++)
		req_field(&q, meta->kv[i]);
	char ans[256];
	const char *pl;
	int f = -1;
	int rc = q.oom ? moat_error_oom(err)
		       : call(lv, q.data, q.len, ans, sizeof ans, &pl, &f, 1, NULL, err);
	moat_buf_free(&q);
	if (rc < 0)
		return -1;
	if (!fd_is(f, false, O_WRONLY) || *pl) {
		close(f);
		return breach(lv, err);
	}
	*fd = f;
	return 0;
}

static bool type_ok(const char *t)
{
	static const char *const types[] = { "file", "dir", "symlink", "fifo", "socket",
					     "char", "block", "other" };
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (!strcmp(t, types[i]))
			return true;
	return false;
}

/* The metadata block after an answer's text (ans: alen bytes) into st
 * (none when the answer ends with its text): false when malformed. */
static bool parse_meta(const char *ans, size_t alen, struct live_stat *st)
{
	st->meta_len = st->meta_pairs = 0;
	st->meta_incomplete = false;
	size_t tl = strlen(ans);
	if (tl == alen)
		return true;
	MOAT_AUTOFREE const char **kv = malloc(2 * AGENT_MAX_META_PAIRS * sizeof *kv);
	size_t np;
	bool inc;
	if (!kv || agent_meta_parse(ans + tl + 1, alen - tl - 1, kv, &np, &inc) < 0)
		return false;
	for (size_t i = 0; i < 2 * np; i++) {
		size_t l = strlen(kv[i]) + 1;
		if (l > sizeof st->meta - st->meta_len) /* never: the bound holds it */
			return false;
		memcpy(st->meta + st->meta_len, kv[i], l);
		st->meta_len += l;
	}
	st->meta_pairs = np;
	st->meta_incomplete = inc;
	return true;
}

void live_meta_json(struct moat_buf *out, const struct live_stat *st)
{
	const char *p = st->meta;
	for (size_t i = 0; i < st->meta_pairs; i++) {
		moat_buf_append(out, i ? "," : ",\"metadata\":{", i ? 1 : 13);
		size_t kl = strlen(p);
		moat_buf_append_json_string(out, p, kl);
		p += kl + 1;
		size_t vl = strlen(p);
		moat_buf_append(out, ":", 1);
		moat_buf_append_json_string(out, p, vl);
		p += vl + 1;
	}
	if (st->meta_pairs)
		moat_buf_append(out, "}", 1);
	if (st->meta_incomplete)
		moat_buf_append(out, ",\"metadataIncomplete\":true", 26);
}

/* "<type> <size> <mode> <mtime>" then, with rest, " <rest>". */
static bool parse_stat(const char *s, struct live_stat *st, const char **rest)
{
	char type[8];
	unsigned long long size;
	unsigned mode;
	long long mt;
	int used = 0;
	if (sscanf(s, "%7s %llu %o %lld%n", type, &size, &mode, &mt, &used) != 4 || !type_ok(type))
		return false;
	if (rest) {
		if (s[used] != ' ' || !s[used + 1])
			return false;
		*rest = s + used + 1;
	} else if (s[used]) {
		return false;
	}
	snprintf(st->type, sizeof st->type, "%s", type);
	st->size = size;
	st->mode = mode & 07777;
	st->mtime_ms = mt;
	return true;
}

int live_stat(struct live *lv, const char *path, struct live_stat *st, struct moat_error *err)
{
	struct moat_buf q = { 0 };
	moat_buf_append(&q, "s", 1);
	req_field(&q, path);
	MOAT_AUTOFREE char *ans = malloc(AGENT_MAX_MSG + 1);
	const char *pl;
	size_t alen = 0;
	int rc = q.oom || !ans ? moat_error_oom(err)
			       : call_meta(lv, q.data, q.len, ans, AGENT_MAX_MSG + 1, &pl, NULL, 0,
					   NULL, &alen, err);
	moat_buf_free(&q);
	if (rc < 0)
		return -1;
	if (!parse_stat(pl, st, NULL) || !parse_meta(ans, alen, st))
		return breach(lv, err);
	return 0;
}

static void stat_json(struct moat_buf *out, const char *path, const struct live_stat *st)
{
	moat_buf_append(out, "{\"path\":", 8);
	moat_buf_append_json_string(out, path, strlen(path));
	moat_buf_appendf(out, ",\"type\":\"%s\",\"size\":%llu,\"mode\":\"%04o\",\"mtimeMs\":%lld",
			 st->type, (unsigned long long)st->size, st->mode,
			 (long long)st->mtime_ms);
	live_meta_json(out, st);
	moat_buf_append(out, "}", 1);
}

int live_list(struct live *lv, const char *path, unsigned depth, unsigned max,
	      struct moat_buf *out, unsigned *count, bool *truncated, struct moat_error *err)
{
	*count = 0;
	*truncated = false;
	char d[16], m[16];
	snprintf(d, sizeof d, "%u", depth);
	snprintf(m, sizeof m, "%u", max);
	struct moat_buf q = { 0 };
	moat_buf_append(&q, "l", 1);
	req_field(&q, path);
	req_field(&q, d);
	req_field(&q, m);
	int sock = -1;
	int rc = q.oom ? moat_error_oom(err) : send_req(lv, q.data, q.len, &sock, err);
	moat_buf_free(&q);
	if (rc < 0)
		return -1;
	char *ans = malloc(AGENT_MAX_MSG + 1);
	MOAT_AUTOFREE struct live_stat *st = malloc(sizeof *st); /* 4 KiB of metadata */
	if (!ans || !st) {
		free(ans);
		close(sock);
		return moat_error_oom(err);
	}
	size_t prefix = strlen(path);
	while (prefix > 1 && path[prefix - 1] == '/')
		prefix--;
	for (;;) {
		size_t len, got;
		int fds[1];
		if (recv_answer(lv, sock, ans, AGENT_MAX_MSG + 1, &len, fds, 0, &got, true, err) < 0) {
			rc = -1;
			break;
		}
		if (ans[0] == 'e' && ans[1] == ' ') {
			const char *rel;
			if (*count >= max || !parse_stat(ans + 2, st, &rel) ||
			    !parse_meta(ans, len, st)) {
				rc = breach(lv, err);
				break;
			}
			if ((*count)++)
				moat_buf_append(out, ",", 1);
			struct moat_buf full = { 0 };
			moat_buf_append(&full, path, prefix);
			moat_buf_append(&full, "/", 1);
			moat_buf_append(&full, rel, strlen(rel));
			moat_buf_append(&full, "", 1);
			if (full.oom) {
				moat_buf_free(&full);
				rc = moat_error_oom(err);
				break;
			}
			stat_json(out, full.data, st);
			moat_buf_free(&full);
			if (out->len > LIVE_LIST_MAX_BYTES) {
				/* cut: the agent sees its socket closed and stops */
				*truncated = true;
				break;
			}
			continue;
		}
		const char *pl;
		if (strlen(ans) != len) { /* a block after anything but an entry */
			rc = breach(lv, err);
			break;
		}
		if (answer_status(lv, ans, &pl, err) < 0) {
			rc = -1;
			break;
		}
		unsigned long long n;
		int t, used = 0;
		if (sscanf(pl, "%llu %d%n", &n, &t, &used) != 2 || pl[used] || n != *count ||
		    (t != 0 && t != 1)) {
			rc = breach(lv, err);
			break;
		}
		*truncated = t == 1;
		break;
	}
	free(ans);
	close(sock);
	return rc;
}

int live_mkdir(struct live *lv, const char *path, bool parents, struct moat_error *err)
{
	return simple(lv, AGENT_MKDIR, path, parents ? "1" : "0", err);
}

int live_rename(struct live *lv, const char *from, const char *to, struct moat_error *err)
{
	return simple(lv, AGENT_RENAME, from, to, err);
}

int live_remove(struct live *lv, const char *path, bool recursive, struct moat_error *err)
{
	return simple(lv, AGENT_REMOVE, path, recursive ? "1" : "0", err);
}

/* ---- processes ---- */

/* mu held */
static struct proc *proc_find(struct live *lv, int pid)
{
	for (struct proc *p = lv->procs; p; p = p->next)
		if (p->pid == pid && !p->removed)
			return p;
	return NULL;
}

static struct proc *proc_get(struct live *lv, int pid, struct moat_error *err)
{
	pthread_mutex_lock(&lv->mu);
	struct proc *p = proc_find(lv, pid);
	if (p)
		p->refs++;
	pthread_mutex_unlock(&lv->mu);
	if (!p)
		moat_error_set(err, MOAT_ERR_CONFIG, ESRCH, "no such process in this sandbox");
	return p;
}

static void proc_put(struct live *lv, struct proc *p)
{
	pthread_mutex_lock(&lv->mu);
	proc_unref(p);
	pthread_mutex_unlock(&lv->mu);
}

/* The process's end, if its socket has it (mu held): "X <code> <signal>";
 * EOF before it: the agent is gone. */
static void proc_take_exit(struct live *lv, struct proc *p)
{
	if (p->exited || p->signaled || p->lost || p->sock < 0)
		return;
	char b[64];
	ssize_t n = recv(p->sock, b, sizeof b - 1, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		p->lost = true;
		return;
	}
	b[n] = '\0';
	int code, sig, used = 0;
	if (sscanf(b, "X %d %d%n", &code, &sig, &used) == 2 && !b[used] &&
	    ((code >= 0 && code <= 255 && sig == 0) || (code == -1 && sig >= 1 && sig <= 64))) {
		p->exited = sig == 0;
		p->signaled = sig != 0;
		p->code = code;
		p->sig = sig;
		return;
	}
	p->lost = true;
	lv->protocol = !lv->kill_asked;
	lv->kill_asked = true;
	if (lv->sb)
		run_sandbox_session_kill(lv->sb);
}

static bool proc_done(const struct proc *p)
{
	return p->exited || p->signaled || p->lost;
}

/* Makes room for one more (mu held): the oldest ended, unattached one
 * dropped; false when every kept one still runs. */
static bool proc_room(struct live *lv)
{
	if (lv->nprocs < LIVE_MAX_PROCS)
		return true;
	struct proc **victim = NULL;
	for (struct proc **pp = &lv->procs; *pp; pp = &(*pp)->next) {
		proc_take_exit(lv, *pp);
		if (proc_done(*pp) && !(*pp)->attached)
			victim = pp; /* the list is newest first: the last is the oldest */
	}
	if (!victim)
		return false;
	struct proc *v = *victim;
	*victim = v->next;
	v->removed = true;
	lv->nprocs--;
	proc_unref(v);
	return true;
}

/* A unix stream socket, open for reading and writing (a context's
 * control socket, made by the agent). */
static bool fd_is_stream(int fd)
{
	int fl = fcntl(fd, F_GETFL), dom = 0, type = 0;
	socklen_t l1 = sizeof dom, l2 = sizeof type;
	struct stat st;
	return fl >= 0 && !(fl & O_PATH) && (fl & O_ACCMODE) == O_RDWR && fstat(fd, &st) == 0 &&
	       S_ISSOCK(st.st_mode) && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l1) == 0 &&
	       dom == AF_UNIX && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) == 0 &&
	       type == SOCK_STREAM;
}

static int exec_proc(struct live *lv, const struct live_exec *spec, int *pid, int *own,
		     struct moat_error *err);

int live_exec(struct live *lv, const struct live_exec *spec, int *pid, struct moat_error *err)
{
	return exec_proc(lv, spec, pid, NULL, err);
}

int live_exec_ctl(struct live *lv, const struct live_exec *spec, int *pid, int fds[3],
		  struct moat_error *err)
{
	fds[0] = fds[1] = fds[2] = -1;
	struct live_exec s = *spec;
	s.stdin_open = false;
	s.pty = false; /* a context's driver: pipes and its control socket */
	return exec_proc(lv, &s, pid, fds, err);
}

/* own: NULL, or the control socket's, stdout's and stderr's host ends,
 * the caller's (the process then stays attached: nobody else reads it). */
static int exec_proc(struct live *lv, const struct live_exec *spec, int *pid, int *own,
		     struct moat_error *err)
{
	*pid = 0;
	if (spec->pty && (spec->rows < 1 || spec->rows > LIVE_MAX_WINSIZE || spec->cols < 1 ||
			  spec->cols > LIVE_MAX_WINSIZE))
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL,
				      "a pty's rows and cols are from 1 to %u", LIVE_MAX_WINSIZE);
	struct moat_buf q = { 0 };
	char argc[16], rows[16], cols[16];
	snprintf(argc, sizeof argc, "%zu", spec->argc);
	snprintf(rows, sizeof rows, "%u", spec->rows);
	snprintf(cols, sizeof cols, "%u", spec->cols);
	moat_buf_append(&q, spec->pty ? "t" : "x", 1);
	req_field(&q, spec->cwd);
	if (spec->pty) {
		req_field(&q, rows);
		req_field(&q, cols);
	} else {
		req_field(&q, own ? "2" : spec->stdin_open ? "1" : "0");
	}
	req_field(&q, argc);
	for (size_t i = 0; i < spec->argc; i++)
		req_field(&q, spec->argv[i]);
	for (size_t i = 0; i < spec->envc; i++)
		req_field(&q, spec->env[i]);
	if (q.oom) {
		moat_buf_free(&q);
		return moat_error_oom(err);
	}
	pthread_mutex_lock(&lv->mu);
	bool room = proc_room(lv);
	pthread_mutex_unlock(&lv->mu);
	if (!room) {
		moat_buf_free(&q);
		return moat_error_set(err, MOAT_ERR_CONFIG, EAGAIN,
				      "%d processes of this sandbox are running (at most)",
				      LIVE_MAX_PROCS);
	}
	char ans[256];
	const char *pl;
	int fds[3] = { -1, -1, -1 }, sock = -1;
	/* a pty: its master only; else [stdin or a context's control socket]
	 * stdout stderr */
	size_t n = spec->pty ? 1 : spec->stdin_open || own ? 3 : 2;
	int rc = call(lv, q.data, q.len, ans, sizeof ans, &pl, fds, n, &sock, err);
	moat_buf_free(&q);
	if (rc < 0)
		return -1;
	int in = -1, ctl = -1, out, er = -1;
	bool fds_ok;
	if (spec->pty) {
		out = fds[0];
		fds_ok = fd_is_ptmx(out);
	} else {
		in = spec->stdin_open && !own ? fds[0] : -1;
		ctl = own ? fds[0] : -1;
		out = fds[n - 2];
		er = fds[n - 1];
		fds_ok = (in < 0 || fd_is(in, true, O_WRONLY)) && (!own || fd_is_stream(ctl)) &&
			 fd_is(out, true, O_RDONLY) && fd_is(er, true, O_RDONLY);
	}
	char *end;
	errno = 0;
	long v = strtol(pl, &end, 10);
	bool ok = !errno && end != pl && !*end && v >= 1 && v <= 4194304 && fds_ok;
	/* the pty's input is its master too: a dup of its own, so that
	 * closing "stdin" never closes the output */
	if (ok && spec->pty && (in = fcntl(out, F_DUPFD_CLOEXEC, 3)) < 0)
		ok = false;
	struct proc *p = ok ? calloc(1, sizeof *p) : NULL;
	if (!p) {
		close_all(fds, n);
		if (spec->pty && in >= 0)
			close(in);
		close(sock);
		return ok ? moat_error_oom(err) : breach(lv, err);
	}
	/* the host's ends never block a thread of the service */
	int set[] = { in, out, er, ctl };
	for (int i = 0; i < 4; i++)
		if (set[i] >= 0)
			(void)fcntl(set[i], F_SETFL, fcntl(set[i], F_GETFL) | O_NONBLOCK);
	p->pid = (int)v;
	p->in = in;
	if (own) {
		/* the caller's: the process is attached for good */
		own[0] = ctl;
		own[1] = out;
		own[2] = er;
		p->out = p->err = -1;
		p->out_eof = p->err_eof = true;
		p->attached = true;
	} else {
		p->out = out;
		p->err = er;
		p->err_eof = er < 0;
	}
	p->pty = spec->pty;
	p->sock = sock;
	p->refs = 1;
	pthread_mutex_lock(&lv->mu);
	/* a pid the sandbox reused: the old one is gone */
	struct proc *old = proc_find(lv, p->pid);
	if (old) {
		for (struct proc **pp = &lv->procs; *pp; pp = &(*pp)->next)
			if (*pp == old) {
				*pp = old->next;
				break;
			}
		old->removed = true;
		lv->nprocs--;
		proc_unref(old);
	}
	p->next = lv->procs;
	lv->procs = p;
	lv->nprocs++;
	pthread_mutex_unlock(&lv->mu);
	*pid = p->pid;
	return 0;
}

int live_resize(struct live *lv, int pid, unsigned rows, unsigned cols, struct moat_error *err)
{
	if (rows < 1 || rows > LIVE_MAX_WINSIZE || cols < 1 || cols > LIVE_MAX_WINSIZE)
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL,
				      "a pty's rows and cols are from 1 to %u", LIVE_MAX_WINSIZE);
	struct proc *p = proc_get(lv, pid, err);
	if (!p)
		return -1;
	int rc = 0;
	pthread_mutex_lock(&lv->mu);
	proc_take_exit(lv, p);
	if (!p->pty) {
		rc = moat_error_set(err, MOAT_ERR_CONFIG, ENOTTY, "the process has no pty");
	} else if (proc_done(p)) {
		rc = moat_error_set(err, MOAT_ERR_CONFIG, ESRCH, "the process has ended");
	} else {
		/* the master checked at exec (fd_is_ptmx); the kernel tells the
		 * terminal's foreground process group (SIGWINCH) */
		struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
		if (ioctl(p->out, TIOCSWINSZ, &ws) < 0)
			rc = moat_error_set(err, MOAT_ERR_CONFIG, errno, "resizing the pty failed");
	}
	pthread_mutex_unlock(&lv->mu);
	proc_put(lv, p);
	return rc;
}

int live_signal(struct live *lv, int pid, int sig, struct moat_error *err)
{
	struct proc *p = proc_get(lv, pid, err);
	if (!p)
		return -1;
	pthread_mutex_lock(&lv->mu);
	proc_take_exit(lv, p);
	bool done = proc_done(p);
	pthread_mutex_unlock(&lv->mu);
	int rc;
	if (done) {
		rc = moat_error_set(err, MOAT_ERR_CONFIG, ESRCH, "the process has ended");
	} else {
		char a[16], s[16];
		snprintf(a, sizeof a, "%d", pid);
		snprintf(s, sizeof s, "%d", sig);
		rc = simple(lv, AGENT_SIGNAL, a, s, err);
	}
	proc_put(lv, p);
	return rc;
}

ssize_t live_stdin_write(struct live *lv, int pid, const char *buf, size_t len,
			 int64_t timeout_ms, struct moat_error *err)
{
	struct proc *p = proc_get(lv, pid, err);
	if (!p)
		return -1;
	pthread_mutex_lock(&lv->mu);
	int fd = p->in >= 0 ? dup(p->in) : -1;
	pthread_mutex_unlock(&lv->mu);
	proc_put(lv, p);
	if (fd < 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, EBADF,
				      "the process's stdin is closed (or was never open)");
	size_t done = 0;
	int64_t end = moat_mono_ms() + timeout_ms;
	while (done < len) {
		ssize_t w = write(fd, buf + done, len - done);
		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EPIPE) {
			close(fd);
			return moat_error_set(err, MOAT_ERR_CONFIG, EPIPE,
					      "the process no longer reads its stdin");
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			break;
		int64_t left = end - moat_mono_ms();
		if (left <= 0)
			break;
		struct pollfd pf = { .fd = fd, .events = POLLOUT };
		(void)poll(&pf, 1, (int)left);
	}
	close(fd);
	return (ssize_t)done;
}

int live_stdin_close(struct live *lv, int pid, struct moat_error *err)
{
	struct proc *p = proc_get(lv, pid, err);
	if (!p)
		return -1;
	pthread_mutex_lock(&lv->mu);
	bool pty = p->pty;
	if (!pty)
		moat_close_fd(&p->in);
	pthread_mutex_unlock(&lv->mu);
	proc_put(lv, p);
	if (pty) /* its master is its output too: closing ours would end nothing */
		return moat_error_set(err, MOAT_ERR_CONFIG, EBUSY,
				      "a pty has no stdin to close: write its end-of-file "
				      "character (ctrl-D, \\u0004) to stdin");
	return 0;
}

static void proc_info(const struct proc *p, struct live_proc_info *info)
{
	info->pid = p->pid;
	info->running = !proc_done(p);
	info->exited = p->exited;
	info->exit_code = p->exited ? p->code : -1;
	info->signal = p->sig;
	info->attached = p->attached;
	info->lost = p->lost;
	info->pty = p->pty;
}

int live_wait(struct live *lv, int pid, int64_t ms, struct live_proc_info *info,
	      struct moat_error *err)
{
	struct proc *p = proc_get(lv, pid, err);
	if (!p)
		return -1;
	int64_t end = moat_mono_ms() + ms;
	for (;;) {
		pthread_mutex_lock(&lv->mu);
		proc_take_exit(lv, p);
		bool done = proc_done(p);
		int sock = p->sock;
		if (done || moat_mono_ms() >= end) {
			proc_info(p, info);
			pthread_mutex_unlock(&lv->mu);
			break;
		}
		pthread_mutex_unlock(&lv->mu);
		int64_t left = end - moat_mono_ms();
		struct pollfd pf = { .fd = sock, .events = POLLIN };
		(void)poll(&pf, 1, left > 200 ? 200 : (int)(left > 0 ? left : 0));
	}
	proc_put(lv, p);
	return 0;
}

unsigned live_running(struct live *lv)
{
	unsigned n = 0;
	pthread_mutex_lock(&lv->mu);
	for (struct proc *p = lv->procs; p; p = p->next) {
		proc_take_exit(lv, p);
		n += !proc_done(p);
	}
	pthread_mutex_unlock(&lv->mu);
	return n;
}

void live_procs_json(struct live *lv, struct moat_buf *out)
{
	pthread_mutex_lock(&lv->mu);
	bool first = true;
	for (struct proc *p = lv->procs; p; p = p->next) {
		proc_take_exit(lv, p);
		struct live_proc_info i;
		proc_info(p, &i);
		moat_buf_appendf(out, "%s{\"pid\":%d,\"state\":\"%s\"", first ? "" : ",", i.pid,
				 i.running ? "running" : i.lost ? "lost" : "exited");
		if (i.exited)
			moat_buf_appendf(out, ",\"exitCode\":%d", i.exit_code);
		if (i.signal)
			moat_buf_appendf(out, ",\"signal\":%d", i.signal);
		moat_buf_appendf(out, ",\"attached\":%s,\"stdin\":%s,\"pty\":%s}",
				 i.attached ? "true" : "false", p->in >= 0 ? "true" : "false",
				 p->pty ? "true" : "false");
		first = false;
	}
	pthread_mutex_unlock(&lv->mu);
}

int live_attach(struct live *lv, int pid, struct live_attach **out, struct moat_error *err)
{
	*out = NULL;
	struct live_attach *a = calloc(1, sizeof *a);
	if (!a)
		return moat_error_oom(err);
	struct proc *p = proc_get(lv, pid, err);
	if (!p) {
		free(a);
		return -1;
	}
	pthread_mutex_lock(&lv->mu);
	bool busy = p->attached;
	p->attached = true;
	pthread_mutex_unlock(&lv->mu);
	if (busy) {
		proc_put(lv, p);
		free(a);
		return moat_error_set(err, MOAT_ERR_CONFIG, EBUSY,
				      "another client reads this process's output");
	}
	a->lv = lv;
	a->p = p;
	*out = a;
	return 0;
}

void live_attach_end(struct live_attach *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lv->mu);
	a->p->attached = false;
	pthread_mutex_unlock(&a->lv->mu);
	proc_put(a->lv, a->p);
	free(a);
}

/* Reads one pipe without waiting: 1 data, 0 nothing now, -1 EOF. */
static int read_pipe(int fd, bool *eof, char *buf, size_t cap, size_t *n)
{
	if (*eof)
		return -1;
	ssize_t r = read(fd, buf, cap);
	if (r > 0) {
		*n = (size_t)r;
		return 1;
	}
	if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
		*eof = true;
		return -1;
	}
	return 0;
}

/* The reader's socket hung up (or errs). A read side shut here (the HTTP
 * server may shut it once the request is in) is not a hang-up: over TCP
 * only the peer's FIN (CLOSE_WAIT and after) is, elsewhere POLLHUP. */
bool live_client_gone(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR))
		return true;
	if (!(p.revents & POLLRDHUP))
		return false;
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return false;
	return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_LAST_ACK ||
	       ti.tcpi_state == TCP_CLOSING || ti.tcpi_state == TCP_CLOSE;
}

enum live_event live_attach_next(struct live_attach *a, int ms, int client, char *buf,
				 size_t cap, size_t *n, struct live_proc_info *info)
{
	struct live *lv = a->lv;
	struct proc *p = a->p;
	*n = 0;
	if (a->exit_sent)
		return LIVE_EV_END;
	pthread_mutex_lock(&lv->mu);
	proc_take_exit(lv, p);
	bool done = proc_done(p);
	pthread_mutex_unlock(&lv->mu);
	if (!done) {
		struct pollfd pf[4] = { { .fd = p->out_eof ? -1 : p->out, .events = POLLIN },
					{ .fd = p->err_eof ? -1 : p->err, .events = POLLIN },
					{ .fd = p->sock, .events = POLLIN },
					{ .fd = client, .events = POLLRDHUP } };
		(void)poll(pf, 4, ms);
	}
	if (live_client_gone(client))
		return LIVE_EV_HANGUP; /* what the pipes hold is the next reader's */
	/* the output before the end: whatever the pipes hold now */
	if (read_pipe(p->out, &p->out_eof, buf, cap, n) > 0)
		return LIVE_EV_STDOUT;
	if (read_pipe(p->err, &p->err_eof, buf, cap, n) > 0)
		return LIVE_EV_STDERR;
	pthread_mutex_lock(&lv->mu);
	proc_take_exit(lv, p);
	done = proc_done(p);
	proc_info(p, info);
	pthread_mutex_unlock(&lv->mu);
	if (!done)
		return LIVE_EV_NONE;
	a->exit_sent = true;
	return p->lost ? LIVE_EV_END : LIVE_EV_EXIT;
}

/* ---- the sandbox's own servers ---- */

/* An AF_INET stream socket (the agent's: tenant code may have made it
 * anything) connected to 127.0.0.1:port, open read-write. */
static bool fd_is_loopback_tcp(int fd, unsigned port)
{
	int fl = fcntl(fd, F_GETFL), dom = 0, type = 0;
	socklen_t l1 = sizeof dom, l2 = sizeof type;
	struct stat st;
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	return fl >= 0 && !(fl & O_PATH) && (fl & O_ACCMODE) == O_RDWR && fstat(fd, &st) == 0 &&
	       S_ISSOCK(st.st_mode) && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l1) == 0 &&
	       dom == AF_INET && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) == 0 &&
	       type == SOCK_STREAM && getpeername(fd, (struct sockaddr *)&sa, &sl) == 0 &&
	       sl == sizeof sa && sa.sin_family == AF_INET &&
	       sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && ntohs(sa.sin_port) == port;
}

/* One of the sandbox's max slots of a kind (*n counts them, under mu):
 * whether it was free, and then taken. */
static bool slot_take(struct live *lv, unsigned *n, unsigned max)
{
	pthread_mutex_lock(&lv->mu);
	bool room = *n < max;
	if (room)
		(*n)++;
	pthread_mutex_unlock(&lv->mu);
	return room;
}

int live_connect(struct live *lv, unsigned port, int64_t timeout_ms, int *fd,
		 struct moat_error *err)
{
	*fd = -1;
	if (port < 1 || port > AGENT_MAX_PORT)
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL, "a port is from 1 to %u",
				      AGENT_MAX_PORT);
	if (!slot_take(lv, &lv->nconns, LIVE_MAX_CONNS))
		return moat_error_set(err, MOAT_ERR_CONFIG, EAGAIN,
				      "the sandbox has %u connections to its servers open already",
				      LIVE_MAX_CONNS);
	char q[16], ans[256];
	int n = snprintf(q, sizeof q, "%c%u", AGENT_CONNECT, port);
	const char *pl;
	int f = -1;
	int rc = call(lv, q, (size_t)n + 1, ans, sizeof ans, &pl, &f, 1, NULL, err);
	if (rc == 0 && *pl) {
		close(f);
		rc = breach(lv, err);
	}
	if (rc == 0) {
		/* the connect the agent began: its end within timeout_ms */
		struct pollfd p = { .fd = f, .events = POLLOUT };
		int64_t end = moat_mono_ms() + timeout_ms;
		int r = 0;
		for (;;) {
			int64_t left = end - moat_mono_ms();
			if (left <= 0)
				break;
			r = poll(&p, 1, left > 200 ? 200 : (int)left);
			if (r != 0 || live_gone(lv))
				break;
		}
		int soe = 0;
		socklen_t sl = sizeof soe;
		if (r <= 0 || live_gone(lv))
			rc = live_gone(lv) ? gone_error(lv, err)
					   : moat_error_set(err, MOAT_ERR_CONFIG, ETIMEDOUT,
							    "the sandbox's server did not accept within %lld ms",
							    (long long)timeout_ms);
		else if (getsockopt(f, SOL_SOCKET, SO_ERROR, &soe, &sl) < 0 || soe)
			rc = moat_error_set(err, MOAT_ERR_CONFIG, soe ? soe : errno, "%s",
					    strerror(soe ? soe : errno));
		else if (!fd_is_loopback_tcp(f, port) || fcntl(f, F_SETFL, O_NONBLOCK) < 0)
			rc = breach(lv, err);
		if (rc < 0)
			close(f);
	}
	if (rc < 0) {
		pthread_mutex_lock(&lv->mu);
		lv->nconns--;
		pthread_mutex_unlock(&lv->mu);
		return -1;
	}
	*fd = f;
	return 0;
}

void live_connect_end(struct live *lv, int fd)
{
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&lv->mu);
	if (lv->nconns)
		lv->nconns--;
	pthread_mutex_unlock(&lv->mu);
}

/* ---- watches ---- */

int live_watch_open(struct live *lv, const char *path, bool recursive, struct live_watch **out,
		    struct moat_error *err)
{
	*out = NULL;
	if (!slot_take(lv, &lv->nwatches, LIVE_MAX_WATCHES))
		return moat_error_set(err, MOAT_ERR_CONFIG, EMFILE,
				      "the sandbox has %u watches open already", LIVE_MAX_WATCHES);
	struct live_watch *w = calloc(1, sizeof *w);
	struct moat_buf q = { 0 };
	moat_buf_append(&q, "i", 1);
	req_field(&q, path);
	req_field(&q, recursive ? "1" : "0");
	int rc = -1;
	if (!w || !(w->root = strdup(path)) || q.oom) {
		rc = moat_error_oom(err);
	} else {
		char ans[256];
		const char *pl;
		int sock = -1;
		rc = call(lv, q.data, q.len, ans, sizeof ans, &pl, NULL, 0, &sock, err);
		uint64_t dirs;
		if (rc == 0 && (agent_num(pl, AGENT_MAX_WATCH_DIRS, &dirs) < 0 || dirs < 1)) {
			close(sock);
			rc = breach(lv, err);
		} else if (rc == 0) {
			w->sock = sock;
		}
	}
	moat_buf_free(&q);
	if (rc < 0) {
		if (w)
			free(w->root);
		free(w);
		pthread_mutex_lock(&lv->mu);
		lv->nwatches--;
		pthread_mutex_unlock(&lv->mu);
		return -1;
	}
	/* its trailing slashes off, as the agent's paths have them */
	for (size_t n = strlen(w->root); n > 1 && w->root[n - 1] == '/'; n--)
		w->root[n - 1] = '\0';
	w->lv = lv;
	*out = w;
	return 0;
}

static void json_path(struct moat_buf *b, const char *key, const char *p)
{
	moat_buf_appendf(b, ",\"%s\":", key);
	moat_buf_append_json_string(b, p, strlen(p));
}

enum live_event live_watch_next(struct live_watch *w, int ms, int client, struct moat_buf *line)
{
	if (w->done)
		return LIVE_EV_END;
	struct pollfd pf[2] = { { .fd = w->sock, .events = POLLIN },
				{ .fd = client, .events = POLLRDHUP } };
	(void)poll(pf, 2, ms);
	if (live_client_gone(client))
		return LIVE_EV_HANGUP;
	ssize_t n = recv(w->sock, w->buf, sizeof w->buf, MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return LIVE_EV_NONE;
	if (n <= 0) { /* the agent, the sandbox gone */
		w->done = true;
		return LIVE_EV_END;
	}
	struct agent_event ev;
	if ((size_t)n > AGENT_MAX_MSG || agent_event_parse(w->buf, (size_t)n, w->root, &ev) < 0) {
		struct moat_error e = { 0 };
		breach(w->lv, &e);
		moat_error_clear(&e);
		w->done = true;
		return LIVE_EV_END;
	}
	static const struct {
		char kind;
		const char *type;
	} names[] = { { AGENT_EV_CREATE, "create" }, { AGENT_EV_WRITE, "write" },
		      { AGENT_EV_REMOVE, "remove" }, { AGENT_EV_RENAME, "rename" },
		      { AGENT_EV_OVERFLOW, "overflow" }, { AGENT_EV_END, "end" } };
	const char *type = "end";
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].kind == ev.kind)
			type = names[i].type;
	moat_buf_appendf(line, "{\"type\":\"%s\"", type);
	if (ev.kind == AGENT_EV_RENAME) {
		json_path(line, "from", ev.path);
		json_path(line, "path", ev.to);
	} else if (ev.path) {
		json_path(line, "path", ev.path);
	} else if (ev.kind == AGENT_EV_END) {
		json_path(line, "path", w->root);
		moat_buf_appendf(line, ",\"reason\":\"the directory watched was removed or moved\"");
		w->done = true;
	}
	moat_buf_append(line, "}\n", 2);
	return w->done ? LIVE_EV_EXIT : LIVE_EV_STDOUT;
}

const char *live_watch_root(const struct live_watch *w)
{
	return w->root;
}

void live_watch_close(struct live_watch *w)
{
	if (!w)
		return;
	close(w->sock);
	pthread_mutex_lock(&w->lv->mu);
	w->lv->nwatches--;
	pthread_mutex_unlock(&w->lv->mu);
	free(w->root);
	free(w);
}

/* ---- making it ---- */

int live_create(const struct live_config *cfg, struct live **out, struct moat_error *err)
{
	*out = NULL;
	struct moat_request *req = cfg->req;
	if (!cfg->opts || !cfg->opts->runtime_dir) {
		moat_request_free(req);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a live sandbox needs the runtime directory (its agent is there)");
	}
	char host_agent[4096];
	snprintf(host_agent, sizeof host_agent, "%s/bin/moat-agent", cfg->opts->runtime_dir);
	if (access(host_agent, X_OK) < 0) {
		moat_request_free(req);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "live sandboxes are not built into this moat (the agent, "
				      "runtime/bin/moat-agent, is missing: make builds it)");
	}
	struct live *lv = calloc(1, sizeof *lv);
	if (!lv) {
		moat_request_free(req);
		return moat_error_oom(err);
	}
	pthread_mutex_init(&lv->mu, NULL);
	pthread_cond_init(&lv->cv, NULL);
	pthread_mutex_init(&lv->ctl_mu, NULL);
	lv->ctl = -1;
	lv->cpu_ms = -1;
	lv->req = req;
	for (size_t i = 0; i < req->argc; i++)
		free(req->argv[i]);
	free(req->argv);
	req->argc = 0;
	if (!(req->argv = calloc(2, sizeof *req->argv)) || !(req->argv[0] = strdup(AGENT_PATH))) {
		live_destroy(lv);
		return moat_error_oom(err);
	}
	req->argc = 1;
	req->timeout_ms = cfg->backstop_ms;
	if (req->max_output_bytes > 65536 || !req->max_output_bytes)
		req->max_output_bytes = 65536; /* the agent's own output: it writes none */
	lv->opts = *cfg->opts;
	lv->opts.cancel_fd = lv->opts.hangup_fd = lv->opts.resume_fd = -1;
	lv->opts.on_output = NULL;
	lv->opts.output_ctx = NULL;
	lv->opts.stdout_stream = lv->opts.output_stream = false;
	lv->opts.stdout_full = NULL;
	if (pthread_create(&lv->thread, NULL, live_main, lv) != 0) {
		live_destroy(lv);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "could not start a thread");
	}
	lv->have_thread = true;
	pthread_mutex_lock(&lv->mu);
	while (!lv->started)
		pthread_cond_wait(&lv->cv, &lv->mu);
	int rc = lv->start_rc;
	if (rc < 0) {
		*err = lv->start_err;
		lv->start_err = (struct moat_error){ 0 };
	}
	pthread_mutex_unlock(&lv->mu);
	if (rc < 0) {
		live_destroy(lv);
		return -1;
	}
	/* the agent's first answer: it runs, locked down, with its roots */
	char ans[64];
	const char *pl;
	if (call(lv, "p", 1, ans, sizeof ans, &pl, NULL, 0, NULL, err) < 0 ||
	    strcmp(pl, "moat-agent 1")) {
		if (!err->message)
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "the sandbox's agent did not start");
		live_destroy(lv);
		return -1;
	}
	*out = lv;
	return 0;
}
