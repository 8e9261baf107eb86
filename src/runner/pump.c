/* The pump: one epoll loop that relays the program's output and stdin,
 * reads pid 1's reports, answers the seccomp listener and enforces the
 * wall-clock timeout, until pid 1 has ended and every stream is drained.
 * Each watched fd is an entry that carries its own handler. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "core/stamp.h"
#include "core/sys.h"
#include "runner/run.h"

#define DRAIN_GRACE_MS 2000

/* The entry is done: unwatched and its fd closed. */
static void pump_drop(struct run *r, struct pump_entry *e)
{
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, *e->fd, NULL);
	close(*e->fd);
	*e->fd = -1;
}

/* ---- handlers ---- */

/* Back-pressure on output passed on (opts.stdout_stream, output_stream):
 * while the caller's stdout_full says so, the streams passed on are
 * unwatched and resume_fd watched instead; the program blocks on its full
 * pipes, its timer runs on. */
static int pump_flow(struct run *r)
{
	struct run_stream *ss[] = { &r->out, &r->errout };
	int fds[] = { r->stdout_r, r->stderr_r };
	bool any = (ss[0]->passed_on && fds[0] >= 0) || (ss[1]->passed_on && fds[1] >= 0);
	if (!any || !r->opts.stdout_full || r->opts.resume_fd < 0 || r->out_paused ||
	    !r->opts.stdout_full(r->opts.output_ctx))
		return PUMP_GO;
	r->resume_fd = r->opts.resume_fd;
	if (pump_watch_slot(r, PUMP_RESUME, EPOLLIN) < 0) {
		r->resume_fd = -1; /* cannot wait: read on */
		return PUMP_GO;
	}
	for (int i = 0; i < 2; i++)
		if (ss[i]->passed_on && fds[i] >= 0) {
			epoll_ctl(r->epfd, EPOLL_CTL_DEL, fds[i], NULL);
			ss[i]->paused = true;
		}
	r->out_paused = true;
	return PUMP_GO;
}

/* resume_fd (the caller's) is no longer watched. */
static void resume_unwatch(struct run *r)
{
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->resume_fd, NULL);
	r->resume_fd = -1;
	r->out_paused = false;
}

/* The streams paused are read again (the caller took enough, or its fd broke). */
static void pump_unpause(struct run *r)
{
	if (!r->out_paused)
		return;
	resume_unwatch(r);
	struct run_stream *ss[] = { &r->out, &r->errout };
	enum pump_slot slots[] = { PUMP_STDOUT, PUMP_STDERR };
	for (int i = 0; i < 2; i++) {
		if (!ss[i]->paused)
			continue;
		ss[i]->paused = false;
		if (pump_watch_slot(r, slots[i], EPOLLIN) < 0)
			pump_drop(r, &r->pump[slots[i]]); /* cannot watch: stop reading it */
	}
}

/* The caller's resume_fd: it took some of what it holds. */
static int on_resume(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	uint64_t v;
	if (read(r->resume_fd, &v, sizeof v) < 0 && errno != EAGAIN && errno != EINTR) {
		pump_unpause(r); /* a broken fd: no more flow control */
		return PUMP_GO;
	}
	if (!r->opts.stdout_full(r->opts.output_ctx))
		pump_unpause(r);
	return PUMP_GO;
}

static int on_output(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	struct run_stream *s = e == &r->pump[PUMP_STDOUT] ? &r->out : &r->errout;
	ssize_t n = read(*e->fd, r->chunk, RUN_READ_CHUNK);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return PUMP_GO;
	if (n <= 0) { /* EOF or error */
		pump_drop(r, e);
		return PUMP_GO;
	}
	if (s->passed_on) { /* the caller's sink bounds it: nothing kept */
		size_t give = (size_t)n;
		if (s->capped) /* past the cap: read and dropped */
			s->seen += give = moat_cap_take(s->seen, give, s->cap, s->truncated);
		if (give && r->opts.on_output)
			r->opts.on_output(r->opts.output_ctx, s->which, r->chunk, give);
		return pump_flow(r);
	}
	size_t keep = moat_cap_take(*s->len, (size_t)n, s->cap, s->truncated);
	if (keep == 0)
		return PUMP_GO;
	if (*s->len + keep > s->alloc) {
		size_t na = s->alloc ? s->alloc : 4096;
		while (na < *s->len + keep)
			na *= 2;
		if (na > s->cap)
			na = s->cap;
		char *nb = realloc(*s->buf, na);
		if (!nb) {
			*s->truncated = true;
			return PUMP_GO;
		}
		*s->buf = nb;
		s->alloc = na;
	}
	memcpy(*s->buf + *s->len, r->chunk, keep);
	*s->len += keep;
	if (r->opts.on_output)
		r->opts.on_output(r->opts.output_ctx, s->which, r->chunk, keep);
	return PUMP_GO;
}

/* One report record; a listener fd that comes with it is kept in
 * r->listener. 1 for a record, 0 for nothing now, -1 at EOF or error. */
static int recv_report(struct run *r, struct moat_report *rep)
{
	int fd;
	size_t nfd;
	ssize_t n = moat_recv_fds(r->report_r, rep, sizeof *rep, &fd, 1, &nfd, MSG_DONTWAIT);
	if (n < 0)
		return (errno == EAGAIN || errno == EMSGSIZE) ? 0 : -1; /* EMSGSIZE: malformed */
	if (n == 0)
		return -1;
	bool whole = (size_t)n == sizeof *rep;
	if (nfd && whole && r->listener < 0 && rep->kind == MOAT_REPORT_LISTENER)
		r->listener = fd;
	else if (nfd)
		close(fd); /* never keep an fd we did not ask for */
	return whole ? 1 : 0; /* a record of another size is ignored */
}

static int on_report(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	struct moat_report rep;
	int got;
	while ((got = recv_report(r, &rep)) > 0) {
		if (rep.kind == MOAT_REPORT_STATUS && !r->have_status) {
			r->status = rep;
			r->have_status = true;
			/* the program is over and pid 1 is exiting: its
			 * cgroup figures now, while the kernel tears the
			 * namespaces down, not after (run_collect uses them) */
			moat_cgroup_snapshot(r->cg);
			moat_stamp("sup: status in, figures read");
		} else if (rep.kind == MOAT_REPORT_SETUP_FAILED && !r->have_setup) {
			r->setup = rep;
			r->have_setup = true;
		} else if (rep.kind == MOAT_REPORT_LISTENER && r->listener >= 0 &&
			   (!r->sclog || pump_watch_slot(r, PUMP_LISTENER, EPOLLIN) < 0)) {
			/* unanswered, the filtered calls fail with ENOSYS */
			close(r->listener);
			r->listener = -1;
		}
	}
	if (got < 0)
		pump_drop(r, e);
	return PUMP_GO;
}

static int on_outputs(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	ssize_t n = read(*e->fd, r->chunk, RUN_READ_CHUNK);
	if (n > 0)
		moat_buf_append(&r->outs, r->chunk,
				moat_cap_take(r->outs.len, (size_t)n, moat_outputs_stream_cap(),
					      &r->outs_cut));
	else if (n == 0 || (errno != EAGAIN && errno != EINTR))
		pump_drop(r, e);
	return PUMP_GO;
}

static int on_listener(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	if (moat_seccomp_log_handle(r->seccomp, r->listener, r->sclog) < 0)
		pump_drop(r, e);
	return PUMP_GO;
}

static int on_stdin(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	ssize_t w = write(r->stdin_w, r->stdin_data + r->stdin_off, r->stdin_len - r->stdin_off);
	if (w > 0)
		r->stdin_off += (size_t)w;
	if ((w < 0 && errno != EAGAIN && errno != EINTR) || r->stdin_off == r->stdin_len)
		pump_drop(r, e);
	return PUMP_GO;
}

/* The key-value socket: requests in, one answer out at a time. While an
 * answer waits to be written the broker reads nothing more (a program that
 * never reads its answers cannot make the supervisor buffer without end).
 * A malformed stream, EOF or an error ends the connection: the program
 * sees EOF, the run goes on. */
static int kv_mode(struct run *r, bool writing)
{
	if (writing == r->kv_writing)
		return 0;
	struct epoll_event ev = { .events = writing ? EPOLLOUT : EPOLLIN,
				  .data.ptr = &r->pump[PUMP_KV] };
	r->kv_writing = writing;
	return epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->kv_fd, &ev);
}

static int on_kv(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	size_t len;
	const char *p = moat_kv_broker_pending(r->broker, &len);
	if (len) {
		ssize_t w = write(r->kv_fd, p, len);
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			return PUMP_GO;
		if (w <= 0)
			goto end;
		moat_kv_broker_consume(r->broker, (size_t)w);
		/* requests already buffered are answered before reading more */
		if (moat_kv_broker_pending(r->broker, &len) && len == 0 &&
		    moat_kv_broker_feed(r->broker, NULL, 0) < 0)
			goto end;
	} else {
		ssize_t n = read(r->kv_fd, r->chunk, RUN_READ_CHUNK);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return PUMP_GO;
		if (n <= 0 || moat_kv_broker_feed(r->broker, r->chunk, (size_t)n) < 0)
			goto end;
	}
	moat_kv_broker_pending(r->broker, &len);
	if (kv_mode(r, len > 0) < 0)
		goto end;
	return PUMP_GO;
end:
	pump_drop(r, e);
	return PUMP_GO;
}

/* The timeout, a cancellation or the thrash watch ends the run: the whole
 * tree at once (cgroup.kill), else pid 1 and with it the pid namespace. */
static void kill_sandbox(struct run *r)
{
	if (moat_cgroup_kill(r->cg) < 0)
		syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0);
}

void pump_kill(struct run *r)
{
	kill_sandbox(r);
}

void pump_drain_now(struct run *r)
{
	enum pump_slot slots[] = { PUMP_STDOUT, PUMP_STDERR };
	for (int i = 0; i < 2; i++) {
		struct pump_entry *e = &r->pump[slots[i]];
		for (int k = 0; k < 16 && *e->fd >= 0; k++) {
			struct pollfd pf = { .fd = *e->fd, .events = POLLIN };
			if (poll(&pf, 1, 0) <= 0 || !(pf.revents & (POLLIN | POLLHUP | POLLERR)))
				break;
			(void)on_output(r, e, NULL);
		}
	}
}

static int on_timer(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	uint64_t ticks;
	if (read(r->timerfd, &ticks, sizeof ticks) < 0)
		return PUMP_GO;
	if (r->draining) {
		/* stdout waits for its caller (pump_flow): a program that ended
		 * by itself keeps the rest of its timeout to be read */
		int64_t left = r->t0 + (int64_t)r->req->timeout_ms - moat_mono_ms();
		if (r->out_paused && !r->res->timed_out && !r->cancelled && left > 0 &&
		    run_arm_timer(r, (uint64_t)left, err) == 0)
			return PUMP_GO;
		/* output pipes still open after the sandbox died: give up */
		(void)moat_result_warn(r->res, "output was still open %d ms after the sandbox "
				       "ended; stopped reading", DRAIN_GRACE_MS);
		return PUMP_STOP;
	}
	if (!r->exited && !r->have_status) {
		/* a session's step is interrupted first (its driver gets the
		 * grace to answer); past the grace, or a run, is killed */
		if (r->session_stepping && run_session_interrupt(r, RUN_INTR_TIMEOUT))
			return PUMP_GO;
		if (r->session_intr == RUN_INTR_ASKED)
			r->cancelled = true;
		else
			r->res->timed_out = true;
		kill_sandbox(r);
	}
	return PUMP_GO;
}

/* The thrash watch's tick (thrash.c). */
static int on_thrash(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	int verdict = run_thrash_tick(r);
	if (verdict != 0)
		pump_drop(r, e);
	if (verdict == 1)
		kill_sandbox(r);
	return PUMP_GO;
}

/* The caller cancelled (cancel_fd readable) or its client hung up
 * (hangup_fd): kill the sandbox as the timeout does. The fd is the caller's:
 * unwatched, never read or closed. */
static int on_cancel(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, *e->fd, NULL);
	bool hangup = e->fd == &r->hangup_fd;
	*e->fd = -1;
	/* a session's step whose client hung up: interrupted (or let run
	 * on), its session kept */
	if (hangup && r->session_stepping &&
	    (r->session_hangup_finish || r->session_intr != RUN_INTR_NONE ||
	     run_session_interrupt(r, RUN_INTR_ASKED)))
		return PUMP_GO;
	if (!r->exited && !r->have_status && !r->res->timed_out && !r->cancelled) {
		r->cancelled = true;
		kill_sandbox(r);
	}
	return PUMP_GO;
}

/* pid 1 has ended: what is still in the pipes gets DRAIN_GRACE_MS. */
static int on_ended(struct run *r, struct pump_entry *e, struct moat_error *err)
{
	moat_stamp("sup: pidfd readable");
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->pidfd, NULL); /* the pidfd stays: collect reaps */
	r->exited = true;
	r->draining = true;
	return run_arm_timer(r, DRAIN_GRACE_MS, err) < 0 ? -1 : PUMP_GO;
}

/* ---- the loop ---- */

int pump_watch(struct run *r, struct moat_error *err)
{
	r->pump[PUMP_STDOUT] = (struct pump_entry){ &r->stdout_r, on_output };
	r->pump[PUMP_STDERR] = (struct pump_entry){ &r->stderr_r, on_output };
	r->pump[PUMP_REPORT] = (struct pump_entry){ &r->report_r, on_report };
	r->pump[PUMP_OUTPUTS] = (struct pump_entry){ &r->outputs_r, on_outputs };
	r->pump[PUMP_LISTENER] = (struct pump_entry){ &r->listener, on_listener };
	r->pump[PUMP_STDIN] = (struct pump_entry){ &r->stdin_w, on_stdin };
	r->pump[PUMP_TIMER] = (struct pump_entry){ &r->timerfd, on_timer };
	r->pump[PUMP_EXIT] = (struct pump_entry){ &r->pidfd, on_ended };
	r->cancel_fd = r->opts.cancel_fd;
	r->hangup_fd = r->opts.hangup_fd;
	r->pump[PUMP_CANCEL] = (struct pump_entry){ &r->cancel_fd, on_cancel };
	r->pump[PUMP_HANGUP] = (struct pump_entry){ &r->hangup_fd, on_cancel };
	r->pump[PUMP_KV] = (struct pump_entry){ &r->kv_fd, on_kv };
	r->pump[PUMP_THRASH] = (struct pump_entry){ &r->thrash_fd, on_thrash };
	r->pump[PUMP_RESUME] = (struct pump_entry){ &r->resume_fd, on_resume };
	r->resume_fd = -1;
	r->out_paused = false;
	size_t cap = r->req->max_output_bytes ? r->req->max_output_bytes : MOAT_DEFAULT_OUTPUT_CAP;
	/* a run started ahead waits for its request (run_deliver); a zygote's
	 * child made for its request reads it as a frame (pool_frame) */
	r->stdin_data = r->ahead ? NULL : r->pool_frame ? r->pool_frame : r->req->stdin_data;
	r->stdin_len = r->ahead ? 0 : r->pool_frame ? r->pool_frame_len : r->req->stdin_len;
	r->out = (struct run_stream){ MOAT_STDOUT, &r->res->stdout_buf, &r->res->stdout_len,
				      &r->res->stdout_truncated, cap, 0,
				      r->opts.stdout_stream || r->opts.output_stream,
				      r->opts.output_stream, 0, false };
	r->errout = (struct run_stream){ MOAT_STDERR, &r->res->stderr_buf, &r->res->stderr_len,
					 &r->res->stderr_truncated, cap, 0, r->opts.output_stream,
					 r->opts.output_stream, 0, false };

	/* a blocking read or write here would stall the timeout: fail instead */
	if (fcntl(r->stdout_r, F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(r->stderr_r, F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(r->report_r, F_SETFL, O_NONBLOCK) < 0 ||
	    (r->outputs_r >= 0 && fcntl(r->outputs_r, F_SETFL, O_NONBLOCK) < 0) ||
	    ((r->stdin_len > 0 || r->ahead) && fcntl(r->stdin_w, F_SETFL, O_NONBLOCK) < 0) ||
	    (r->kv_fd >= 0 && fcntl(r->kv_fd, F_SETFL, O_NONBLOCK) < 0))
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "fcntl(O_NONBLOCK): %s",
				      strerror(errno));
	if (r->outputs_r >= 0 && pump_watch_slot(r, PUMP_OUTPUTS, EPOLLIN) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "outputs pipe: %s",
				      strerror(errno));
	if (r->stdin_len == 0 && !r->ahead) {
		close(r->stdin_w);
		r->stdin_w = -1;
	}
	if (pump_watch_slot(r, PUMP_STDOUT, EPOLLIN) < 0 || pump_watch_slot(r, PUMP_STDERR, EPOLLIN) < 0 ||
	    pump_watch_slot(r, PUMP_REPORT, EPOLLIN) < 0 || pump_watch_slot(r, PUMP_TIMER, EPOLLIN) < 0 ||
	    pump_watch_slot(r, PUMP_EXIT, EPOLLIN) < 0 ||
	    (r->stdin_len > 0 && pump_watch_slot(r, PUMP_STDIN, EPOLLOUT) < 0) ||
	    (r->kv_fd >= 0 && pump_watch_slot(r, PUMP_KV, EPOLLIN) < 0))
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll_ctl: %s",
				      strerror(errno));
	if ((r->cancel_fd >= 0 && pump_watch_slot(r, PUMP_CANCEL, EPOLLIN) < 0) ||
	    (r->hangup_fd >= 0 && pump_watch_slot(r, PUMP_HANGUP, EPOLLRDHUP) < 0))
		return moat_error_set(err, MOAT_ERR_CONFIG, errno,
				      "cannot watch the cancellation fd: %s", strerror(errno));
	if (!r->ahead) /* a warm sandbox's watch starts with its request */
		run_thrash_arm(r);
	return 0;
}

bool run_ended_alone(const struct run *r)
{
	return !r->exited && r->have_status && r->status.step == MOAT_STATUS_ALONE &&
	       !r->res->timed_out && !r->cancelled && !r->thrash_killed;
}

/* The run is over for its caller: every stream drained to EOF, and pid 1
 * either ended (its reports read to EOF) or reported the program's status
 * with nothing else of the run alive (run_ended_alone): then no process is
 * left that could write to the pipes, the store or the cgroup's figures,
 * and pid 1's own exit (the namespaces' teardown) is waited for by
 * run_release (run_kill), after the answer. */
static bool pump_over(const struct run *r)
{
	if (r->stdout_r >= 0 || r->stderr_r >= 0 || r->outputs_r >= 0)
		return false;
	if (r->exited)
		return r->report_r < 0;
	if (!run_ended_alone(r))
		return false;
	/* store requests the program sent before it ended are served first,
	 * as they were while pid 1 exited (its end of the socket stays open) */
	struct pollfd pf = { .fd = r->kv_fd, .events = POLLIN };
	return r->kv_fd < 0 || r->kv_writing || poll(&pf, 1, 0) == 0;
}

static int pump(struct run *r, struct moat_error *err)
{
	while (!pump_over(r)) {
		struct epoll_event evs[8];
		int n = epoll_wait(r->epfd, evs, 8, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll_wait: %s",
					      strerror(errno));
		}
		for (int i = 0; i < n; i++) {
			struct pump_entry *e = evs[i].data.ptr;
			if (*e->fd < 0)
				continue; /* dropped by an earlier handler of this batch */
			int rc = e->ready(r, e, err);
			if (rc < 0)
				return -1;
			if (rc == PUMP_STOP)
				return 0;
		}
	}
	return 0;
}

int run_pump(struct run *r, struct moat_error *err)
{
	if (!r->started || r->pid <= 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the sandbox is not running (start it first, wait once)");
	/* the program may close its stdin while we write to it */
	struct sigpipe_guard g;
	sigpipe_block(&g);
	int rc = pump(r, err);
	if (r->out_paused)
		resume_unwatch(r);
	sigpipe_restore(&g);
	return rc;
}
