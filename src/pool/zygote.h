/* The zygote's side of a run (zygote.c; docs/design/pool-zygote.md). The
 * only interface moat-zygote.so exports. */
#ifndef MOAT_POOL_ZYGOTE_H
#define MOAT_POOL_ZYGOTE_H

#include <stddef.h>
#include <stdint.h>

#include "runner/sandbox.h"

struct moat_zygote;

/* The template every pid 1 is made from: a run prepared from request_json
 * (the language and environment of the runs it will serve; no network,
 * kvEnabled, outputs, argv or TypeScript) with tmpfs_bytes for /tmp and
 * /sandbox (0: the default) and runtime_dir bound (NULL: none), as the
 * supervisor's runs have them. With MOAT_ZYGOTE_OWN_TREE in flags (a
 * zygote in moat's own sandbox: moat serve's) each child keeps the
 * zygote's tree, with /dev/pts, /dev/shm, /proc, /tmp and /sandbox mounted
 * anew (moat_plan_input.own_tree), where the tree passes
 * moat_tree_check_self; it fails otherwise. Without it each child builds
 * its tree as a cold run does (run_sandbox_template_new). NULL on
 * failure, with the reason in errbuf. */
#define MOAT_ZYGOTE_OWN_TREE 1u
struct moat_zygote *moat_zygote_new(const char *request_json, size_t len,
				    unsigned long long tmpfs_bytes, const char *runtime_dir,
				    unsigned flags, char *errbuf, size_t errlen);

/* The record and the fds it takes: runner/sandbox.h (MOAT_ZYGOTE_*). */
/* The program's environment (NULL-terminated "NAME=value"): what a cold
 * run's program starts with, for the interpreter to take over in pid 2. */
char *const *moat_zygote_envp(const struct moat_zygote *z);
/* Clones pid 1 of a run from the template (run_sandbox_template_spawn)
 * with the run's fds (borrowed: the caller closes its copies) and the
 * record's rlimits into new namespaces, writes its id maps
 * and returns its pid with *pidfd, for the supervisor to adopt
 * (run_adopt) and the caller to reap. Returns 0 in the run's pid 2 only,
 * locked down (moat_child_main without a program): the caller's code runs
 * on as the program. -errno when no pid 1 was made (or it was killed
 * because its maps could not be written). */
int moat_zygote_spawn(struct moat_zygote *z, const int fds[MOAT_ZYGOTE_NFDS], const void *record,
		      size_t record_len, int *pidfd);
/* The zygote's loop on its control socket ctl (SOCK_SEQPACKET): for each
 * record (MOAT_ZYGOTE_RUN, the rlimits, and the run's MOAT_ZYGOTE_NFDS fds
 * as SCM_RIGHTS) one moat_zygote_spawn between before() and
 * after_parent() (the interpreter's fork hooks; either may be NULL), then
 * the answer: "p" with pid 1's pidfd, or "e<errno>" and no fd (a record
 * without its fds, or too long, is answered "e22"). Every pid 1 is reaped
 * as it ends (SIGCHLD through a signalfd, the signal blocked in the loop).
 * No byte of a request passes here: a record holds fds and limits only.
 * Returns 0 in each run's pid 2 (locked down, as moat_zygote_spawn's:
 * with the empty signal mask pid 1 gave it), 1 when ctl reached its end,
 * -errno when the loop itself failed; in the zygote, the signal mask is
 * then as it was on entry. */
int moat_zygote_serve(struct moat_zygote *z, int ctl, void (*before)(void),
		      void (*after_parent)(void));
void moat_zygote_free(struct moat_zygote *z);

#endif
