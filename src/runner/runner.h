/* The handover between the supervisor and the sandbox (both sides of
 * runner/): what the supervisor hands pid 1 (struct moat_child), the sync
 * bytes that release it step by step, and the records it reports back.
 * docs/ARCHITECTURE.md draws the sequence. */
#ifndef MOAT_RUNNER_RUNNER_H
#define MOAT_RUNNER_RUNNER_H

#include <errno.h>
#include <locale.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "ns/ns.h"
#include "priv/priv.h"
#include "net/net.h"
#include "seccomp/seccomp.h"
#include "runner/sandbox.h"

enum moat_step {
	MOAT_STEP_NONE = 0,
	MOAT_STEP_SYNC,       /* waiting for the supervisor */
	MOAT_STEP_IDS,        /* becoming 65534 */
	MOAT_STEP_MOUNT,      /* detail = plan op index */
	MOAT_STEP_HOSTNAME,
	MOAT_STEP_FORK,
	MOAT_STEP_FDS,
	MOAT_STEP_RLIMITS,
	MOAT_STEP_CAPS,
	MOAT_STEP_NNP,
	MOAT_STEP_SECCOMP,
	MOAT_STEP_TRANSPILE,  /* running the transpiler failed to start */
	MOAT_STEP_EXEC,
	MOAT_STEP_INIT,
	MOAT_STEP_PRIVATE,    /* making the mount tree private */
	MOAT_STEP_NET,        /* network setup inside; detail = enum moat_net_step */
	MOAT_STEP_LANDLOCK,
	MOAT_STEP_CMDLINE,    /* hiding the host's command line from /proc/1/cmdline */
	MOAT_STEP_CGROUPNS,   /* the cgroup namespace rooted at the run's leaves */
};

/* The supervisor releases pid 1 with one byte per step over the sync pipe,
 * in this order. EOF (or any other byte) instead: the supervisor gave up,
 * and pid 1 exits (125) without reporting. */
enum moat_sync {
	/* uid_map/gid_map are written (and the network attached): become
	 * 65534, then (after MOAT_SYNC_PLAN where the plan is handed over)
	 * build the mounts, set up lo */
	MOAT_SYNC_IDS = 'g',
	/* the mount plan follows on the sync pipe (moat_child.plan_piped
	 * only; the supervisor builds it after clone3 while pid 1 sets its
	 * ids): a struct moat_plan_header, then its len bytes; read it, make
	 * the mounts */
	MOAT_SYNC_PLAN = 'p',
	/* the run's cgroups hold pid 1 (v1 join done) and the run is started:
	 * fork the program. Until this byte only moat's own code runs. */
	MOAT_SYNC_START = 'c',
};

/* After MOAT_SYNC_PLAN on the sync pipe: the mount plan as
 * moat_plan_flatten laid it out in the supervisor's buffer at address at,
 * len bytes of it following. pid 1 reads them into memory of its own and
 * moves every pointer into it (moat_plan_rebase). A pipe, not a mapping
 * made before clone3: another thread's clone3 (another run's pid 1, a copy
 * of the supervisor) would inherit a mapping and with it this run's plan;
 * the pipe's fds it inherits it closes first thing (moat_child_main). */
struct moat_plan_header {
	uint64_t len;
	uint64_t at;
};
/* A plan's size is bounded by the request's (at most 1000 files, each a
 * path of at most PATH_MAX) and the fixed root plan: a few MiB at most. */
#define MOAT_PLAN_MAX_BYTES (16u << 20)

/* Supervisor side. 0, or -1 with errno (EPIPE: pid 1 is gone). */
static inline int moat_sync_send(int fd, enum moat_sync what)
{
	char b = (char)what;
	ssize_t n;
	do
		n = write(fd, &b, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -1;
}

/* pid 1: blocks until the supervisor sends what. 0, or -1 on EOF or any
 * other byte. System calls only. */
static inline int moat_sync_wait(int fd, enum moat_sync what)
{
	char got;
	ssize_t n;
	do
		n = read(fd, &got, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 && got == (char)what ? 0 : -1;
}

enum moat_report_kind {
	MOAT_REPORT_SETUP_FAILED = 1, /* step, err, detail */
	MOAT_REPORT_STATUS = 2,       /* detail = wait status of the program */
	MOAT_REPORT_LISTENER = 3,     /* carries the seccomp listener fd (SCM_RIGHTS) */
};

struct moat_report {
	int32_t kind;
	int32_t step;
	int32_t err;
	int32_t detail;
};
/* A MOAT_REPORT_STATUS record's step: pid 1 had no other child left when
 * it sent the status (waitpid ECHILD), so nothing of the run but pid 1,
 * already exiting, is alive (every process of the pid namespace descends
 * from it). */
#define MOAT_STATUS_ALONE 1


/* The namespaces every sandbox's pid 1 is cloned into, spelled once: by
 * the runner (start.c, clone3) and for a zygote's children (template.c,
 * run_sandbox_template_spawn). Security-relevant: SECURITY.md's namespace rows
 * hold for both because both use this set. (CLONE_NEW* from <sched.h>.) */
#define MOAT_RUN_NS_FLAGS                                                                  \
	(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |        \
	 CLONE_NEWUTS | CLONE_NEWCGROUP)

/* One program to execute: tried at each candidate path in turn. */
struct moat_exec {
	char **paths;       /* NULL-terminated candidates: /usr/local/bin/python3 ... */
	char **argv;        /* NULL-terminated */
	/* an argv request's program: when no candidate can be executed, that is
	 * the program's own failure, as in a shell: a line on its stderr and
	 * exit 127 (not found) or 126 (found, not executable), not a setup
	 * failure of the sandbox */
	bool command;
};

/* The program's fd of the key-value store (its number is MOAT_KV_FD). */
#define RUN_KV_FD 4
#define RUN_KV_FD_STR "4"
/* A session's driver's control socket (runner/session.c, docs/SESSIONS.md):
 * the program keeps it as fd 3 (the report socket, close-on-exec, moves
 * past it then). */
#define RUN_SESSION_FD 3

struct moat_child {
	/* NULL when plan_piped */
	const struct moat_mount_plan *plan;
	/* the plan comes after MOAT_SYNC_PLAN on sync_fd (struct
	 * moat_plan_header), built by the supervisor after clone3; pid 1
	 * reads it into an anonymous private mapping of its own and unmaps it
	 * once its mounts are made */
	bool plan_piped;
	const struct moat_priv_plan *priv;
	const struct moat_seccomp_prog *seccomp; /* NULL: none */
	const struct moat_net *net;
	int net_fds[2]; /* kept for moat_net_child_setup, or -1 */
	bool as_root;
	int sync_fd;    /* read: enum moat_sync bytes (EOF: the supervisor gave up) */
	int report_fd;  /* SOCK_SEQPACKET: struct moat_report records (+ fds) */
	int stdin_fd;
	int stdout_fd;
	int stderr_fd;
	char *const *outputs; /* "outputs" patterns, sent by pid 1 after the program */
	size_t outputs_count;
	int outputs_fd;       /* write end of the outputs stream, or -1 */
	bool outputs_skip_work; /* the work directory is bound: not walked */
	int kv_fd;            /* the program's end of the key-value socket, or -1 */
	int session_fd;       /* a session's control socket (RUN_SESSION_FD), or -1 */
	locale_t c_locale;    /* the C locale for matching them, or (locale_t)0 */
	const struct moat_exec *transpile; /* NULL unless the language needs it */
	/* NULL: no execve, pid 2 returns from moat_child_main once locked
	 * down (a zygote's child: docs/design/pool-zygote.md); transpile
	 * must be NULL then */
	const struct moat_exec *program;
	char **envp;
};

/* "outputs" (outputs.c). The stream pid 1 sends the supervisor: for each
 * file a header, the path (path_len bytes, relative to /sandbox), then
 * data_len bytes of content; at most one summary record (flags
 * MOAT_OUT_SUMMARY: size = files left out, pad != 0 = the walk stopped at
 * its entry cap) at the end. */
struct moat_out_hdr {
	uint32_t path_len;
	uint32_t flags;
	uint64_t size;     /* the file's size (summary record: files left out) */
	uint32_t data_len;
	uint32_t pad;
};
#define MOAT_OUT_TRUNCATED 1u
#define MOAT_OUT_SUMMARY 2u
/* result.files keys of paths that are not valid UTF-8 start with this: the
 * walk never returns a path whose first name starts with ".moat", so no
 * other key can (README, "outputs"). */
#define MOAT_OUT_ESCAPED_PREFIX ".moat-nonutf8/"

/* Sandbox side, pid 1 after the program exited: stream matching files to
 * c->outputs_fd. System calls only. */
void moat_outputs_collect(const struct moat_child *c);
/* Supervisor side: the C locale pid 1 matches the patterns in (made once
 * per process; (locale_t)0 if it cannot be), the most bytes a stream may
 * carry, and rendering of a
 * collected stream into res->files_json (+ warnings). */
locale_t moat_outputs_locale(void);
size_t moat_outputs_stream_cap(void);
int moat_outputs_render(const char *stream, size_t len, bool stream_cut,
			struct moat_result *res);

/* The clone3 child: pid 1 of the new namespaces. pid 1 never returns.
 * With c->program NULL, pid 2 returns 0 (the only return), after
 * everything a program would have gone through before its execve: fds 0,
 * 1 and 2 the program's and no other fd open but the key-value socket (fd
 * RUN_KV_FD, when c->kv_fd was one), rlimits, no capabilities,
 * no_new_privs, Landlock, the seccomp filter, as 65534 in the new
 * namespaces with the plan's mounts, and the supervisor has sent
 * MOAT_SYNC_START (the run's cgroups hold it). Its memory is its own (a
 * fork of pid 1's copy of the caller's). */
int moat_child_main(const struct moat_child *c);

#endif
