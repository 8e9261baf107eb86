/* runner internals: what the supervisor hands the child, and what the child
 * reports back. Only runner/ knows the order of the steps. */
#ifndef MOAT_RUNNER_RUNNER_H
#define MOAT_RUNNER_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "ns/ns.h"
#include "priv/priv.h"
#include "net/net.h"
#include "seccomp/seccomp.h"

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
};

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

/* One program to execute: tried at each candidate path in turn. */
struct moat_exec {
	char **paths;       /* NULL-terminated candidates: /usr/local/bin/python3 ... */
	char **argv;        /* NULL-terminated */
};

struct moat_child {
	const struct moat_mount_plan *plan;
	const struct moat_priv_plan *priv;
	const struct moat_seccomp_prog *seccomp; /* NULL: none */
	const struct moat_net *net;
	int net_fds[2]; /* kept for moat_net_child_setup, or -1 */
	bool as_root;
	int sync_fd;    /* read: 'g' when the id maps are written, then 'c' when
			 * the run's cgroups are joined (EOF: the supervisor gave up) */
	int report_fd;  /* SOCK_SEQPACKET: struct moat_report records (+ fds) */
	int stdin_fd;
	int stdout_fd;
	int stderr_fd;
	char *const *outputs; /* "outputs" patterns, sent by pid 1 after the program */
	size_t outputs_count;
	int outputs_fd;       /* write end of the outputs stream, or -1 */
	const struct moat_exec *transpile; /* NULL unless the language needs it */
	const struct moat_exec *program;
	char **envp;
};

/* "outputs" (outputs.c). Sandbox side, pid 1 after the program exited:
 * stream matching files to c->outputs_fd. System calls only. */
void moat_outputs_collect(const struct moat_child *c);
/* Supervisor side: the most bytes a stream may carry, and rendering of a
 * collected stream into res->files_json (+ warnings). */
size_t moat_outputs_stream_cap(void);
int moat_outputs_render(const char *stream, size_t len, bool stream_cut,
			struct moat_result *res);

/* The clone3 child: pid 1 of the new namespaces. Never returns. */
__attribute__((noreturn)) void moat_child_main(const struct moat_child *c);

#endif
