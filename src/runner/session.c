/* A session's sandbox (docs/SESSIONS.md; the pool's src/pool/session.c
 * decides what goes in the frames): a run whose program is a driver
 * holding one interpreter, with a control socket as its fd 3, that runs
 * step after step. Each step is one exchange: the host's frame written,
 * then the pump as for any run (output, caps, streaming, flow control,
 * cancel and hangup, the step's timeout) until the driver's next frame or
 * the sandbox's end. Every frame of the driver is untrusted (the tenant's
 * code shares its process and fd 3): bounded, its header checked, anything
 * else kills the sandbox ("protocol"). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/sys.h"
#include "runner/run.h"
#include "runner/sandbox.h"

#define FRAME_MAGIC "MOATSESS1 "
#define FRAME_HEADER_MAX (sizeof FRAME_MAGIC - 1 + 10 + 1)

struct moat_sandbox {
	struct run run;
};

/* The frame at the front of session_in: 1 taken (session_reply), 0 not
 * whole yet, -1 malformed. */
static int take_frame(struct run *r)
{
	struct moat_buf *b = &r->session_in;
	size_t magic = sizeof FRAME_MAGIC - 1;
	size_t cmp = b->len < magic ? b->len : magic;
	if (memcmp(b->data, FRAME_MAGIC, cmp) != 0)
		return -1;
	char *nl = memchr(b->data, '\n', b->len < FRAME_HEADER_MAX ? b->len : FRAME_HEADER_MAX);
	if (!nl)
		return b->len >= FRAME_HEADER_MAX ? -1 : 0;
	size_t digits = (size_t)(nl - b->data) - magic;
	if (digits < 1 || digits > 10)
		return -1;
	uint64_t len = 0;
	for (size_t i = 0; i < digits; i++) {
		char c = b->data[magic + i];
		if (c < '0' || c > '9')
			return -1;
		len = len * 10 + (uint64_t)(c - '0');
	}
	if (len > RUN_SESSION_MAX_FRAME)
		return -1;
	size_t head = (size_t)(nl - b->data) + 1;
	if (b->len - head < len)
		return 0;
	char *body = malloc((size_t)len + 1);
	if (!body)
		return -1;
	memcpy(body, b->data + head, (size_t)len);
	body[len] = '\0';
	r->session_reply = body;
	r->session_reply_len = (size_t)len;
	moat_buf_drop_front(b, head + (size_t)len);
	return 1;
}

static void session_unwatch(struct run *r)
{
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->session_fd, NULL);
	moat_close_fd(&r->session_fd);
}

/* The driver broke the protocol: the sandbox dies, the pump goes on to
 * its end. */
static void session_bad(struct run *r)
{
	r->session_bad = true;
	session_unwatch(r);
	pump_kill(r);
}

static int session_events(struct run *r, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = &r->pump[PUMP_SESSION] };
	return epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->session_fd, &e);
}

/* The control socket: the host's frame out while it lasts, the driver's
 * bytes in; a whole frame ends the pump (PUMP_STOP). */
static int on_session(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	(void)e;
	(void)err;
	if (r->session_out_off < r->session_out_len) {
		ssize_t w = send(r->session_fd, r->session_out + r->session_out_off,
				 r->session_out_len - r->session_out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0)
			r->session_out_off += (size_t)w;
		else if (w < 0 && errno != EAGAIN && errno != EINTR) {
			session_unwatch(r); /* the driver is gone: its end follows */
			return PUMP_GO;
		}
		if (r->session_out_off == r->session_out_len && session_events(r, EPOLLIN) < 0) {
			session_bad(r);
			return PUMP_GO;
		}
		/* an interrupt that came while the frame went out: now */
		if (r->session_out_off == r->session_out_len && r->session_intr_later) {
			r->session_intr_later = false;
			if (!run_session_sigint(r)) {
				if (r->session_intr == RUN_INTR_ASKED)
					r->cancelled = true;
				else
					r->res->timed_out = true;
				pump_kill(r);
			}
		}
	}
	ssize_t n = recv(r->session_fd, r->chunk, RUN_READ_CHUNK, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return PUMP_GO;
	if (n <= 0) { /* EOF: the interpreter is going; its end tells how */
		session_unwatch(r);
		return PUMP_GO;
	}
	moat_buf_append(&r->session_in, r->chunk, (size_t)n);
	if (r->session_in.oom) {
		session_bad(r);
		return PUMP_GO;
	}
	int got = take_frame(r);
	if (got < 0) {
		session_bad(r);
		return PUMP_GO;
	}
	return got ? PUMP_STOP : PUMP_GO;
}

/* An interrupt asked from another thread (run_sandbox_session_interrupt):
 * the step's driver is interrupted, or killed when it cannot be. */
static int on_interrupt(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	(void)e;
	(void)err;
	uint64_t n;
	if (read(r->session_intr_fd, &n, sizeof n) < 0 || !r->session_stepping ||
	    r->session_intr != RUN_INTR_NONE || r->exited || r->have_status ||
	    r->res->timed_out || r->cancelled)
		return PUMP_GO;
	if (!run_session_interrupt(r, RUN_INTR_ASKED)) {
		r->cancelled = true;
		pump_kill(r);
	}
	return PUMP_GO;
}

/* The limits and warnings of from into to. */
static int proto_copy(struct moat_result *to, const struct moat_result *from)
{
	to->limit_memory = from->limit_memory;
	to->limit_pids = from->limit_pids;
	to->limit_cpu = from->limit_cpu;
	for (size_t i = 0; i < from->warnings_count; i++)
		if (moat_result_warn(to, "%s", from->warnings[i]) < 0)
			return -1;
	return 0;
}

/* A sandbox set up for boot with a control socket pair of type: the
 * child's end is the program's fd 3, *host the other. */
static int with_socket(const struct moat_request *boot, const struct moat_run_options *opts,
		       int type, struct moat_sandbox **out, int *host, struct moat_error *err)
{
	struct moat_sandbox *sb = malloc(sizeof *sb);
	if (!sb)
		return moat_error_oom(err);
	run_init(&sb->run, boot, opts);
	int sp[2];
	if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sp) < 0) {
		free(sb);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair: %s",
				      strerror(errno));
	}
	sb->run.session_child = sp[1];
	*host = sp[0];
	*out = sb;
	return 0;
}

int run_sandbox_start_session(const struct moat_request *boot, const struct moat_run_options *opts,
			      struct moat_sandbox **out, struct moat_error *err)
{
	*out = NULL;
	if (!boot->prepared && moat_request_validate(boot, err) < 0)
		return -1;
	struct moat_sandbox *sb;
	int host;
	if (with_socket(boot, opts, SOCK_STREAM, &sb, &host, err) < 0)
		return -1;
	struct run *r = &sb->run;
	r->session_fd = host;
	r->session_end = moat_mono_ms() + (int64_t)boot->timeout_ms;
	if (run_prepare(r, err) < 0 || run_spawn(r, err) < 0 || run_start(r, err) < 0)
		goto fail;
	/* what every step's result says of the sandbox: its limits and the
	 * warnings of its making (a limit's fallback, Landlock missing) */
	if (!(r->session_proto = moat_result_new()))
		goto oom;
	if (proto_copy(r->session_proto, r->res) < 0)
		goto oom;
	r->pump[PUMP_SESSION] = (struct pump_entry){ &r->session_fd, on_session };
	r->pump[PUMP_INTERRUPT] = (struct pump_entry){ &r->session_intr_fd, on_interrupt };
	r->session_intr_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->session_intr_fd < 0 || pump_watch_slot(r, PUMP_SESSION, EPOLLIN) < 0 ||
	    pump_watch_slot(r, PUMP_INTERRUPT, EPOLLIN) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll_ctl: %s", strerror(errno));
		goto fail;
	}
	*out = sb;
	return 0;
oom:
	moat_error_oom(err);
fail:
	moat_sandbox_release(sb);
	return -1;
}

/* A step's own state: a fresh result, its caps, options and clock. */
static int step_begin(struct run *r, uint64_t timeout_ms, uint64_t max_output,
		      const struct moat_run_options *per, struct moat_error *err)
{
	if (!r->res) {
		if (!(r->res = moat_result_new()) || proto_copy(r->res, r->session_proto) < 0)
			return moat_error_oom(err);
	}
	r->t0 = moat_mono_ms();
	/* an interrupt asked after the last step's end is not this step's */
	uint64_t stale;
	if (r->session_intr_fd >= 0 && read(r->session_intr_fd, &stale, sizeof stale) < 0 &&
	    errno != EAGAIN)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "eventfd: %s",
				      strerror(errno));
	r->session_intr = RUN_INTR_NONE;
	r->session_intr_later = false;
	struct run_stream *ss[] = { &r->out, &r->errout };
	enum pump_slot slots[] = { PUMP_STDOUT, PUMP_STDERR };
	for (int i = 0; i < 2; i++) {
		ss[i]->buf = i ? &r->res->stderr_buf : &r->res->stdout_buf;
		ss[i]->len = i ? &r->res->stderr_len : &r->res->stdout_len;
		ss[i]->truncated = i ? &r->res->stderr_truncated : &r->res->stdout_truncated;
		ss[i]->alloc = 0;
		ss[i]->seen = 0;
		/* a stream the last step's caller paused is read again */
		if (ss[i]->paused && *r->pump[slots[i]].fd >= 0) {
			ss[i]->paused = false;
			if (pump_watch_slot(r, slots[i], EPOLLIN) < 0)
				return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
						      "epoll_ctl: %s", strerror(errno));
		}
	}
	struct moat_run_options none;
	moat_run_options_init(&none);
	if (run_take_per(r, per ? per : &none, max_output, err) < 0)
		return -1;
	int64_t left = r->session_end - r->t0;
	if (left < 1)
		left = 1;
	uint64_t ms = timeout_ms < (uint64_t)left ? timeout_ms : (uint64_t)left;
	if (r->broker)
		moat_kv_broker_set_deadline(r->broker, r->t0 + (int64_t)ms);
	return run_arm_timer(r, ms, err);
}

/* The step's per-request fds are the caller's again. */
static void step_end(struct run *r)
{
	int *fds[] = { &r->cancel_fd, &r->hangup_fd };
	for (int i = 0; i < 2; i++)
		if (*fds[i] >= 0) {
			epoll_ctl(r->epfd, EPOLL_CTL_DEL, *fds[i], NULL);
			*fds[i] = -1;
		}
	r->session_out = NULL;
	r->session_out_len = r->session_out_off = 0;
	r->session_stepping = false;
}

int run_sandbox_session_step(struct moat_sandbox *sb, uint64_t timeout_ms, uint64_t max_output,
			     const struct moat_run_options *per, const char *frame,
			     size_t frame_len, struct moat_result **res, char **reply,
			     size_t *reply_len, struct moat_error *err)
{
	struct run *r = &sb->run;
	*res = NULL;
	*reply = NULL;
	*reply_len = 0;
	if (r->pid <= 0 || r->exited || r->session_fd < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "the session's sandbox has ended");
	if (step_begin(r, timeout_ms, max_output, per, err) < 0) {
		step_end(r);
		return -1;
	}
	int64_t cpu0 = r->session_cpu_ms;
	/* bytes from the driver before the host asked anything: not a frame
	 * of this step */
	if (r->session_in.len)
		session_bad(r);
	else if (frame && frame_len) {
		r->session_out = frame;
		r->session_out_len = frame_len;
		r->session_out_off = 0;
		r->session_stepping = true;
		if (session_events(r, EPOLLIN | EPOLLOUT) < 0)
			session_bad(r);
	}
	int rc = run_pump(r, err);
	if (rc < 0) {
		step_end(r);
		pump_kill(r);
		return -1;
	}
	if (r->session_reply) {
		/* everything written before the frame is in the pipes */
		pump_drain_now(r);
		step_end(r);
		/* the session's own clock again: a backstop nobody reads between
		 * steps (the caller's reaper ends an idle session) */
		int64_t left = r->session_end - moat_mono_ms();
		struct moat_error ignored = { 0 };
		(void)run_arm_timer(r, left > 1 ? (uint64_t)left : 1, &ignored);
		moat_error_clear(&ignored);
		struct moat_result *out = r->res;
		r->res = NULL;
		/* interrupted at its timeout, and the driver answered: timed out,
		 * the session lives on */
		if (r->session_intr == RUN_INTR_TIMEOUT)
			out->timed_out = true;
		out->duration_ms = (uint64_t)(moat_mono_ms() - r->t0);
		int64_t cpu = moat_cgroup_cpu_ms(r->cg);
		if (cpu >= 0) {
			out->cpu_time_ms = cpu0 >= 0 ? cpu - cpu0 : cpu;
			r->session_cpu_ms = cpu;
		}
		*reply = r->session_reply;
		*reply_len = r->session_reply_len;
		r->session_reply = NULL;
		*res = out;
		return 0;
	}
	/* the sandbox ended (its program, the timeout, a cancel, the kernel,
	 * a protocol breach): collected as any run's end */
	step_end(r);
	struct moat_result *out = NULL;
	if (run_collect(r, &out, err) < 0)
		return -1;
	if (out->cpu_time_ms >= 0) {
		int64_t total = out->cpu_time_ms;
		out->cpu_time_ms = cpu0 >= 0 ? total - cpu0 : total;
		r->session_cpu_ms = total;
	}
	if (r->session_bad) {
		out->killed_by = "protocol";
		out->exited = false;
	}
	*res = out;
	return 0;
}

void run_sandbox_session_kill(struct moat_sandbox *sb)
{
	/* from any thread: the cgroup and the pidfd stay until release */
	pump_kill(&sb->run);
}

bool run_sandbox_session_ended(struct moat_sandbox *sb)
{
	struct run *r = &sb->run;
	if (r->pid <= 0 || r->exited)
		return true;
	if (r->pidfd < 0)
		return false;
	struct pollfd p = { .fd = r->pidfd, .events = POLLIN };
	int n;
	do
		n = poll(&p, 1, 0);
	while (n < 0 && errno == EINTR);
	return n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

void run_sandbox_session_set_grace(struct moat_sandbox *sb, uint64_t grace_ms,
				   bool hangup_finish)
{
	sb->run.session_grace_ms = grace_ms;
	sb->run.session_hangup_finish = hangup_finish;
}

int run_sandbox_session_interrupt(struct moat_sandbox *sb)
{
	uint64_t one = 1;
	return write(sb->run.session_intr_fd, &one, sizeof one) == (ssize_t)sizeof one ? 0 : -1;
}

bool run_sandbox_session_interrupted(const struct moat_sandbox *sb, bool *asked)
{
	if (asked)
		*asked = sb->run.session_intr == RUN_INTR_ASKED;
	return sb->run.session_intr != RUN_INTR_NONE;
}

/* A live sandbox's (src/live/): as a session's, but the control socket is
 * a SOCK_SEQPACKET pair whose host end is the caller's (*ctl): the agent's
 * requests carry fds, its answers come on per-operation sockets, so the
 * pump never watches it. moat_sandbox_wait then pumps the sandbox to its
 * end (the program's output is kept up to boot's maxOutputBytes). */
int run_sandbox_start_live(const struct moat_request *boot, const struct moat_run_options *opts,
			   struct moat_sandbox **out, int *ctl, struct moat_result **made,
			   struct moat_error *err)
{
	*out = NULL;
	*ctl = -1;
	*made = NULL;
	if (!boot->prepared && moat_request_validate(boot, err) < 0)
		return -1;
	struct moat_sandbox *sb;
	int host;
	if (with_socket(boot, opts, SOCK_SEQPACKET, &sb, &host, err) < 0)
		return -1;
	struct run *r = &sb->run;
	r->live = true;
	if (run_prepare(r, err) < 0 || run_spawn(r, err) < 0 || run_start(r, err) < 0) {
		close(host);
		moat_sandbox_release(sb);
		return -1;
	}
	if (!(*made = moat_result_new()) || proto_copy(*made, r->res) < 0) {
		moat_result_free(*made);
		*made = NULL;
		close(host);
		moat_sandbox_release(sb);
		return moat_error_oom(err);
	}
	*ctl = host;
	*out = sb;
	return 0;
}

