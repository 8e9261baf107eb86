/* The host side of a run, as a list of phases over one struct run
 * (runner/run.h says what each does and where it lives). These are also
 * libmoat's phase API (include/moat.h): moat_run is their composition. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runner/run.h"
#include "runner/sandbox.h"

struct moat_sandbox {
	struct run run;
};

int moat_sandbox_create(const struct moat_request *req, const struct moat_run_options *opts,
			struct moat_sandbox **out, struct moat_error *err)
{
	*out = NULL;
	/* 1. validate (a prepared request was): nothing acquired yet */
	if (!req->prepared && moat_request_validate(req, err) < 0)
		return -1;
	struct moat_sandbox *sb = malloc(sizeof *sb);
	if (!sb)
		return moat_error_oom(err);
	run_init(&sb->run, req, opts);
	if (run_prepare(&sb->run, err) < 0 ||      /* 2. prepare (prepare.c) */
	    run_spawn(&sb->run, err) < 0) {        /* 3. clone3 ... cgroups joined (start.c) */
		moat_sandbox_release(sb);
		return -1;
	}
	*out = sb;
	return 0;
}

/* The record a zygote takes (runner.h): the run's rlimits. */
static size_t zygote_record(const struct run *r, char rec[MOAT_ZYGOTE_MAX_RECORD])
{
	size_t len = 1;
	rec[0] = MOAT_ZYGOTE_RUN;
	for (int i = 0; i < r->priv.rlimit_count && len < MOAT_ZYGOTE_MAX_RECORD; i++) {
		struct moat_zygote_rlimit rl = { .resource = r->priv.rlimits[i].resource,
						 .value = r->priv.rlimits[i].value.rlim_cur };
		memcpy(rec + len, &rl, sizeof rl);
		len += sizeof rl;
	}
	return len;
}

int run_sandbox_create_adopted(const struct moat_request *req, const struct moat_run_options *opts,
			       char *frame, size_t frame_len, run_make_pid1_fn make_pid1,
			       void *ctx, enum run_adopt_start start, struct moat_sandbox **out,
			       struct moat_error *err)
{
	*out = NULL;
	if (opts && (opts->rootfs_dir || opts->policy_path || opts->seccomp_log || opts->workdir)) {
		free(frame);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a zygote's child has the zygote's root, policy and no workdir");
	}
	struct moat_sandbox *sb = malloc(sizeof *sb);
	if (!sb) {
		free(frame);
		return moat_error_oom(err);
	}
	struct run *r = &sb->run;
	run_init(r, req, opts);
	r->origin = RUN_ADOPTED;
	r->pool_frame = frame; /* freed by run_release */
	r->pool_frame_len = frame_len;
	if (run_prepare(r, err) < 0)
		goto fail;
	int fds[MOAT_ZYGOTE_NFDS] = { r->stdin_r, r->stdout_w, r->stderr_w, r->report_w, r->sync_r };
	char rec[MOAT_ZYGOTE_MAX_RECORD];
	size_t len = zygote_record(r, rec);
	int pidfd = -1;
	if (make_pid1(ctx, fds, MOAT_ZYGOTE_NFDS, rec, len, &pidfd, err) < 0)
		goto fail;
	r->res->pooled = true;
	if (run_adopt(r, pidfd, err) < 0)
		goto fail;
	/* started ahead: from here it is a warm sandbox; its stdin carries no
	 * frame until run_deliver's, the timer and the thrash watch are the
	 * request's */
	r->ahead = start == RUN_ADOPT_AHEAD;
	if (run_start(r, err) < 0)                 /* 4. as moat_sandbox_start */
		goto fail;
	*out = sb;
	return 0;
fail:
	moat_sandbox_release(sb);
	return -1;
}

int moat_sandbox_start(struct moat_sandbox *sb, struct moat_error *err)
{
	return run_start(&sb->run, err);           /* 4. the program starts (start.c) */
}

int moat_sandbox_wait(struct moat_sandbox *sb, struct moat_result **out, struct moat_error *err)
{
	*out = NULL;
	if (run_pump(&sb->run, err) < 0)           /* 5. relay until the end (pump.c) */
		return -1;
	return run_collect(&sb->run, out, err);    /* 6. reap, decode, stats (collect.c) */
}

/* A created sandbox of origin, started. */
static int create_started(const struct moat_request *req, const struct moat_run_options *opts,
			  enum run_origin origin, int zygote_fd, struct moat_sandbox **out,
			  struct moat_error *err)
{
	*out = NULL;
	if (moat_request_validate(req, err) < 0)
		return -1;
	struct moat_sandbox *sb = malloc(sizeof *sb);
	if (!sb)
		return moat_error_oom(err);
	struct run *r = &sb->run;
	run_init(r, req, opts);
	r->origin = origin;
	r->ahead = origin == RUN_WARM;
	r->zygote_fd = zygote_fd;
	if (run_prepare(r, err) < 0 || run_spawn(r, err) < 0 || run_start(r, err) < 0) {
		moat_sandbox_release(sb);
		return -1;
	}
	*out = sb;
	return 0;
}

int run_sandbox_prewarm(const struct moat_request *boot, const struct moat_run_options *opts,
			struct moat_sandbox **out, struct moat_error *err)
{
	struct moat_run_options o;
	if (opts)
		o = *opts;
	else
		moat_run_options_init(&o);
	o.cancel_fd = o.hangup_fd = -1; /* the request's, given at delivery */
	o.on_output = NULL;
	o.output_ctx = NULL;
	o.stdout_stream = false; /* the request's too */
	o.stdout_full = NULL;
	o.resume_fd = -1;
	return create_started(boot, &o, RUN_WARM, -1, out, err);
}

int run_sandbox_start_zygote(const struct moat_request *boot, const struct moat_run_options *opts,
			     int zygote_fd, struct moat_sandbox **out, struct moat_error *err)
{
	if (zygote_fd < 0) {
		*out = NULL;
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a zygote's sandbox needs its control socket");
	}
	return create_started(boot, opts, RUN_COLD, zygote_fd, out, err);
}

int run_sandbox_deliver(struct moat_sandbox *sb, const struct moat_request *req,
			const struct moat_run_options *per, char *frame, size_t frame_len,
			struct moat_error *err)
{
	if (!req->prepared && moat_request_validate(req, err) < 0) {
		free(frame);
		return -1;
	}
	struct sigpipe_guard g;
	sigpipe_block(&g);
	int rc = run_deliver(&sb->run, req, per, frame, frame_len, err);
	sigpipe_restore(&g);
	return rc;
}

int64_t run_sandbox_memory(const struct moat_sandbox *sb)
{
	return sb ? moat_cgroup_memory_now(sb->run.cg) : -1;
}

void run_sandbox_reap(struct moat_sandbox *sb)
{
	if (sb)
		run_kill(&sb->run);
}

void moat_sandbox_release(struct moat_sandbox *sb)
{
	if (!sb)
		return;
	run_release(&sb->run);                     /* 7. kill if needed, close, free */
	free(sb);
}

int moat_run(const struct moat_request *req, const struct moat_run_options *opts,
	     struct moat_result **out, struct moat_error *err)
{
	struct moat_sandbox *sb;
	int rc = moat_sandbox_create(req, opts, &sb, err);
	if (rc == 0)
		rc = moat_sandbox_start(sb, err);
	if (rc == 0)
		rc = moat_sandbox_wait(sb, out, err);
	moat_sandbox_release(sb);
	return rc;
}
