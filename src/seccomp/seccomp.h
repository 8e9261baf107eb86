/* seccomp: Docker/OCI-format JSON policies → libseccomp → BPF (cached),
 * installed in the sandboxed program as the last step before execve. */
#ifndef MOAT_SECCOMP_SECCOMP_H
#define MOAT_SECCOMP_SECCOMP_H

#include <stdbool.h>
#include <stdio.h>
#include "moat.h"

/* A compiled filter for the native architecture, ready to install. */
struct moat_seccomp_prog;

/* Supervisor side, before clone: load the policy (path NULL = the embedded
 * default), compile it (or take the cached BPF) and return the program.
 * log_denied: install so denials are logged / reportable (--seccomp-log). */
int moat_seccomp_prepare(const char *policy_path, bool log_denied,
			 struct moat_seccomp_prog **out, struct moat_error *err);
/* The filter of moat serve's Python zygote's own sandbox (the embedded
 * policies/zygote.json: the default plus what building a sandbox needs;
 * docs/design/pool-zygote.md). */
int moat_seccomp_prepare_zygote(struct moat_seccomp_prog **out, struct moat_error *err);
void moat_seccomp_prog_free(struct moat_seccomp_prog *prog);

/* Child side, after no_new_privs: async-signal-safe (no allocation, no
 * locks, only the seccomp syscall). 0, or -1 with errno. When the program
 * was prepared with log_denied, the filter is installed with a user
 * notification listener whose fd is stored in *listener_fd (else -1): every
 * call the policy refuses with an errno is then sent to the supervisor, which
 * answers with that same errno and records it (moat_seccomp_log_*). */
int moat_seccomp_install(const struct moat_seccomp_prog *prog, int *listener_fd);

/* Supervisor side of --seccomp-log. default_policy: the run's policy is the
 * embedded default (no --policy), which the JSON says, with the way out. */
struct moat_seccomp_log;
struct moat_seccomp_log *moat_seccomp_log_new(bool default_policy);
void moat_seccomp_log_free(struct moat_seccomp_log *log);
/* Answers one pending notification on listener_fd (readable): evaluates the
 * original policy on the call, replies with its errno, counts the call. The
 * call is never let through: a verdict that is not an errno (the interpreter
 * disagrees with the kernel) is answered EPERM and counted as unexplained.
 * Returns 0, or -1 when the listener is gone (all filtered tasks exited). */
int moat_seccomp_log_handle(const struct moat_seccomp_prog *prog, int listener_fd,
			    struct moat_seccomp_log *log);
/* {"denied":[{"syscall":"ptrace","nr":101,"errno":"EPERM","count":1},...],
 *  "policy":"default"} — malloc'd ("file" under --policy). With the default
 * policy and a refused call, "hint" (SC_LOG_DEFAULT_HINT) says that policy
 * refused it and how to allow it. An entry answered EPERM because the policy's verdict could not
 * be reproduced carries "unexplained":true (and "unknown":true when the
 * interpreter could not run the program); "dropped":N counts calls past the
 * entry limit. */
char *moat_seccomp_log_json(const struct moat_seccomp_log *log);
#define SC_LOG_DEFAULT_HINT                                                                 \
	"refused by moat's default seccomp policy, which refuses the calls that open "      \
	"kernel attack surface sandboxed code does not need (SECURITY.md row 90); to "     \
	"allow one, run with --policy FILE, a copy of moat policy show with its name added"

/* For `moat doctor`: where this user's compiled filters are cached (malloc'd
 * path; NULL when there is none: root uses /var/cache/moat/seccomp, others
 * $XDG_CACHE_HOME or $HOME/.cache), and whether the last
 * moat_seccomp_prepare took its program from there. Without a usable cache
 * every run compiles its filter (a few ms). */
char *moat_seccomp_cache_dir(void);
bool moat_seccomp_last_from_cache(void);

/* moat policy (moat_admin.h's moat_seccomp_policy_check/show, src/admin/):
 * check parses and compiles the policy at path (NULL: the embedded
 * default), its notes to notes (may be NULL); print writes it as Docker-format JSON. */
int sc_policy_check(const char *path, FILE *notes, struct moat_error *err);
int moat_seccomp_policy_print(const char *path, FILE *out, struct moat_error *err);
/* How many distinct system call names the policy at path (NULL: the
 * embedded default) allows on this host (moat_admin.h's
 * moat_seccomp_policy_allowed). */
int sc_policy_allowed(const char *path, size_t *count, struct moat_error *err);

#endif
