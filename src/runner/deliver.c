/* The one request of a run started ahead of it (a warm interpreter, or a
 * zygote's child started ahead; src/pool/): its frame becomes the
 * program's stdin, its per-request options take over, and the wall clock,
 * the output caps and the thrash watch start from here. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/sys.h"
#include "runner/run.h"

int run_take_per(struct run *r, const struct moat_run_options *per, uint64_t max_output,
		 struct moat_error *err)
{
	size_t cap = max_output ? max_output : MOAT_DEFAULT_OUTPUT_CAP;
	r->out.cap = r->errout.cap = cap;
	if (!per)
		return 0;
	r->opts.on_output = per->on_output;
	r->opts.output_ctx = per->output_ctx;
	r->opts.stdout_stream = per->stdout_stream;
	r->opts.stdout_full = per->stdout_full;
	r->opts.resume_fd = per->resume_fd;
	r->opts.output_stream = per->output_stream;
	r->out.passed_on = per->stdout_stream || per->output_stream;
	r->out.capped = r->errout.passed_on = r->errout.capped = per->output_stream;
	r->cancel_fd = per->cancel_fd;
	r->hangup_fd = per->hangup_fd;
	if ((r->cancel_fd >= 0 && pump_watch_slot(r, PUMP_CANCEL, EPOLLIN) < 0) ||
	    (r->hangup_fd >= 0 && pump_watch_slot(r, PUMP_HANGUP, EPOLLRDHUP) < 0))
		return moat_error_set(err, MOAT_ERR_CONFIG, errno,
				      "cannot watch the cancellation fd: %s", strerror(errno));
	return 0;
}

int run_deliver(struct run *r, const struct moat_request *req,
		const struct moat_run_options *per, char *frame, size_t frame_len,
		struct moat_error *err)
{
	/* a warm interpreter, or a zygote's child started ahead
	 * (run_sandbox_start_ahead: pid 2 locked down in Python, waiting on
	 * its stdin as a warm interpreter does) */
	if (!r->ahead || !r->started || r->delivered || r->pid <= 0) {
		free(frame);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "not a warm sandbox waiting for its request");
	}
	/* a warm sandbox that died while it waited (killed from outside, an
	 * OOM of the host, its zygote gone) is not handed anything: the caller
	 * runs cold */
	struct pollfd pf = { .fd = r->pidfd, .events = POLLIN };
	if (poll(&pf, 1, 0) != 0) {
		free(frame);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "the warm sandbox ended while it waited");
	}
	r->delivered = true;
	r->req = req;
	r->t0 = moat_mono_ms();
	free(r->pool_frame); /* a zygote's child started ahead: its bootstrap's */
	r->pool_frame = frame;
	r->pool_frame_len = frame_len;
	r->res->pooled = true;
	if (run_take_per(r, per, req->max_output_bytes, err) < 0)
		return -1;
	r->stdin_data = r->pool_frame;
	r->stdin_len = frame_len;
	r->stdin_off = 0;
	if (pump_watch_slot(r, PUMP_STDIN, EPOLLOUT) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "epoll_ctl: %s",
				      strerror(errno));
	/* the request's wall clock starts now */
	run_thrash_arm(r);
	return run_arm_timer(r, req->timeout_ms, err);
}
