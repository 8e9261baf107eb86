/* The soak's mix of runs and what each must return (tests/soak/soak.c),
 * shared by the two drivers: execsoak (moat exec, one process per run) and
 * libsoak (moat_run from 8 threads in one process). tests/soak/soak.sh
 * runs both, as root and as uid 65534, and counts what is left behind. */
#ifndef MOAT_TESTS_SOAK_H
#define MOAT_TESTS_SOAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum soak_mode {
	SOAK_OK,       /* prints "ok <run>", exits 0 */
	SOAK_EXIT,     /* prints "bye <run>", exits with a code of its language */
	SOAK_TIMEOUT,  /* sleeps past a 500 ms timeout */
	SOAK_OOM,      /* allocates past memoryMb 48 */
	SOAK_FORKBOMB, /* forks exponentially under pidsLimit 16 */
	SOAK_NETWORK,  /* "network": true; a DNS lookup moat refuses */
	SOAK_OUTPUTS,  /* writes two files under out/, an "outputs" pattern returns them */
	SOAK__MODES,
};

struct soak_case {
	enum soak_mode mode;
	const char *lang;
	int exit_code; /* SOAK_EXIT */
};

/* Counts of one driver's runs, by mode, and the limit mechanisms the
 * results named for the OOM and fork-bomb runs. */
struct soak_tally {
	unsigned long runs[SOAK__MODES];
	unsigned long failed[SOAK__MODES];
	unsigned long mem_cgroup, mem_rlimit, pids_cgroup, pids_rlimit;
};

const char *soak_mode_name(enum soak_mode m);
/* The case of run number i: the mix repeats every 10 runs (3 normal exits,
 * 2 non-zero exits, a timeout, an OOM, a fork bomb, a network run, an
 * outputs run), the languages rotating every cycle. */
void soak_case_of(unsigned long i, struct soak_case *c);
/* The moat exec request of run i (malloc'd JSON text), or NULL on OOM. */
char *soak_request(unsigned long i, const struct soak_case *c);
/* Checks the result text of run i. true when it is a valid result JSON with
 * what case c expects; otherwise false and why (with the result's head).
 * Counts the run, and its failure, in *t. */
bool soak_check(unsigned long i, const struct soak_case *c, const char *json, size_t len,
		char *why, size_t whylen, struct soak_tally *t);
void soak_tally_add(struct soak_tally *into, const struct soak_tally *t);
/* "mix=ok:30/0,exit:20/0,..." (runs/failed per mode) "mem=cgroup:N/rlimit:M pids=...". */
void soak_tally_format(const struct soak_tally *t, char *buf, size_t len);

/* ---- what a process holds and leaves ------------------------------------ */

double soak_now(void);
/* Open fds of this process (not counting the one used to count). */
int soak_count_fds(void);
/* VmRSS of this process, KiB; -1 when unknown. */
long soak_rss_kib(void);
/* The cgroup directories moat puts its leaves in for this process: each
 * cgroup /proc/self/cgroup names (v1 controllers, cgroup2 both at
 * /sys/fs/cgroup and /sys/fs/cgroup/unified), and $MOAT_CGROUP_PARENT. */
void soak_leaf_dirs_init(void);
/* Leaves "moat-<pid>-*" of those directories (the "-supervisor" leaf too
 * when with_supervisor); the first one's path in which. */
int soak_count_leaves(pid_t pid, bool with_supervisor, char *which, size_t len);
/* Children of this process, any thread (the children file of each /proc/self/task entry),
 * into pids (up to max); the count of all. */
int soak_children(pid_t *pids, int max);
/* PR_SET_CHILD_SUBREAPER: orphans of descendants become our children. */
int soak_subreaper(void);

#endif
