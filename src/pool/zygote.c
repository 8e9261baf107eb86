/* The zygote's side of a run (docs/design/pool-zygote.md): a process that
 * is not the run's supervisor -- an initialised interpreter -- clones the
 * run's pid 1 into new namespaces and hands its pidfd to the supervisor,
 * which adopts it (run_adopt, through pool_create_adopted). Every pid 1 is
 * made from one template (runner/sandbox.h, run_sandbox_template_*: the
 * plan, privileges, filter, network and environment of a run prepared
 * once from a request); only the channels are each request's own, made by
 * the supervisor's run_prepare and passed in as fds. This file is the
 * zygote's process: which template it may have (pool_refusal), its
 * control socket and the reaping of its pid 1s. pid 2 comes back from
 * moat_zygote_spawn locked down, in the zygote's copied memory.
 *
 * Built into libmoat, and into moat-zygote.so for an interpreter to load
 * (Makefile; only the moat_zygote_* functions are exported there). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/sys.h"
#include "pool/pool.h"
#include "pool/zygote.h"

struct moat_zygote {
	struct moat_request *req;
	struct run_template *t;
};

struct moat_zygote *moat_zygote_new(const char *request_json, size_t len,
				    unsigned long long tmpfs_bytes, const char *runtime_dir,
				    unsigned flags, char *errbuf, size_t errlen)
{
	struct moat_error err = { 0 };
	struct moat_zygote *z = calloc(1, sizeof *z);
	if (!z) {
		moat_error_oom(&err);
		goto fail;
	}
	if (moat_request_parse_json(request_json, len, &z->req, &err) < 0)
		goto fail;
	/* its children serve what a warm interpreter could */
	const char *why = pool_refusal(z->req, z->req);
	if (why) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0, "a zygote's template cannot be %s", why);
		goto fail;
	}
	if (flags & ~MOAT_ZYGOTE_OWN_TREE) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0, "unknown zygote flags %#x", flags);
		goto fail;
	}
	z->t = run_sandbox_template_new(z->req, tmpfs_bytes, runtime_dir,
					(flags & MOAT_ZYGOTE_OWN_TREE) != 0, &err);
	if (!z->t)
		goto fail;
	return z;
fail:
	if (errbuf && errlen)
		snprintf(errbuf, errlen, "%s", err.message ? err.message : "zygote set-up failed");
	moat_error_clear(&err);
	moat_zygote_free(z);
	return NULL;
}

char *const *moat_zygote_envp(const struct moat_zygote *z)
{
	return z ? run_sandbox_template_envp(z->t) : NULL;
}

int moat_zygote_spawn(struct moat_zygote *z, const int fds[MOAT_ZYGOTE_NFDS], const void *record,
		      size_t record_len, int *pidfd)
{
	if (!z)
		return -EINVAL;
	return run_sandbox_template_spawn(z->t, fds, record, record_len, pidfd);
}

/* Every pid 1 that has ended, reaped (a zombie would hold its cgroup). */
static void reap(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* One record answered: a pid 1 cloned, or why not. 0, 1 in the run's pid
 * 2 (locked down), -errno when the answer could not be sent. */
static int serve_one(struct moat_zygote *z, int ctl, const char *rec, ssize_t n, const int *fds,
		     size_t nfds, void (*before)(void), void (*after_parent)(void))
{
	char answer[16];
	int pidfd = -1, pid = -EINVAL;
	if (nfds == MOAT_ZYGOTE_NFDS) {
		if (before)
			before();
		pid = moat_zygote_spawn(z, fds, rec, (size_t)n, &pidfd);
		if (pid == 0)
			return 1;
		if (after_parent)
			after_parent();
	}
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
	int rc;
	if (pid > 0) {
		rc = moat_send_fds(ctl, "p", 1, &pidfd, 1);
		close(pidfd);
	} else {
		int len = snprintf(answer, sizeof answer, "e%d", -pid);
		rc = moat_send_fds(ctl, answer, (size_t)len, NULL, 0);
	}
	return rc < 0 ? -errno : 0;
}

int moat_zygote_serve(struct moat_zygote *z, int ctl, void (*before)(void),
		      void (*after_parent)(void))
{
	if (!z || ctl < 0)
		return -EINVAL;
	sigset_t chld, old;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, &old) < 0)
		return -errno;
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK), rc = 0;
	if (sfd < 0)
		rc = -errno;
	while (rc == 0) {
		reap();
		struct pollfd pf[2] = { { .fd = ctl, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
		if (poll(pf, 2, -1) < 0) {
			if (errno != EINTR)
				rc = -errno;
			continue;
		}
		if (pf[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
				;
		}
		if (!pf[0].revents)
			continue;
		char rec[MOAT_ZYGOTE_MAX_RECORD + 1];
		int fds[MOAT_ZYGOTE_NFDS];
		size_t nfds = 0;
		ssize_t n = moat_recv_fds(ctl, rec, sizeof rec, fds, MOAT_ZYGOTE_NFDS, &nfds,
					  MSG_DONTWAIT);
		if (n == 0) {
			rc = 1; /* the supervisor closed its end */
		} else if (n < 0) {
			/* a record that did not fit came with its fds closed */
			if (errno == EMSGSIZE)
				rc = moat_send_fds(ctl, "e22", 3, NULL, 0) < 0 ? -errno : 0;
			else if (errno != EAGAIN && errno != EINTR)
				rc = -errno;
		} else {
			rc = serve_one(z, ctl, rec, n, fds, nfds, before, after_parent);
			/* pid 2: pid 1 emptied its signal mask and closed every
			 * fd but 0, 1 and 2 (the signalfd too), as for a cold
			 * run's program */
			if (rc == 1)
				return 0;
		}
	}
	if (sfd >= 0)
		close(sfd);
	reap();
	sigprocmask(SIG_SETMASK, &old, NULL);
	return rc;
}

void moat_zygote_free(struct moat_zygote *z)
{
	if (!z)
		return;
	run_sandbox_template_free(z->t);
	moat_request_free(z->req);
	free(z);
}
