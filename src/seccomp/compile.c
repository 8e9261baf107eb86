/* struct sc_policy → libseccomp → classic BPF in memory.
 *
 * - Only the native architecture is in the filter; libseccomp sends every
 *   other audit arch (i386 int 0x80 on x86_64) to the bad-arch action, set to
 *   KILL_PROCESS, and on x86_64 it also kills x32 numbers (nr | 0x40000000)
 *   through the same action (checked by the unit tests).
 * - Several `args` of one rule are ANDed in one rule. libseccomp refuses two
 *   comparisons of the same argument in one rule; for such a rule moat does
 *   what Docker (runc) does: each condition becomes a rule of its own, so the
 *   conditions are ORed. Write ranges as separate rules accordingly.
 * - A rule whose action is the default action is a no-op and skipped
 *   (libseccomp refuses it) — unless it is conditional and another rule gives
 *   the same syscall a different action: then it would silently lose, so the
 *   policy is rejected. Likewise a conditional rule next to an unconditional
 *   rule with another action for the same syscall is rejected (libseccomp
 *   would drop the conditional one), and so are two unconditional rules that
 *   give one syscall different actions (e.g. listed as allowed and denied).
 * - The program is laid out as a binary tree on the syscall number
 *   (SCMP_FLTATR_CTL_OPTIMIZE 2, struct sc_compile_opts): shorter paths for
 *   every call and a cheaper install; no verdict changes. */
#include <errno.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "seccomp/internal.h"

void moat_seccomp_prog_free(struct moat_seccomp_prog *prog)
{
	if (!prog)
		return;
	free(prog->insns);
	free(prog->notify_insns);
	free(prog);
}

static const char *first_name(const struct sc_rule *r, int nr)
{
	for (size_t i = 0; i < r->n_names; i++)
		if (r->nrs[i] == nr)
			return r->names[i];
	return "?";
}

/* See the header comment: combinations libseccomp cannot express faithfully. */
static int check_conflicts(const struct sc_policy *p, struct moat_error *err)
{
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct sc_rule *a = &p->rules[i];
		if (!a->applies)
			continue;
		for (size_t k = 0; k < a->n_names; k++) {
			int nr = a->nrs[k];
			for (size_t j = 0; j < p->n_rules; j++) {
				const struct sc_rule *b = &p->rules[j];
				if (j == i || !b->applies || b->action == a->action)
					continue;
				bool has = false;
				for (size_t m = 0; m < b->n_names; m++)
					if (b->nrs[m] == nr)
						has = true;
				if (!has)
					continue;
				if (a->n_conds == 0 && b->n_conds == 0)
					return moat_error_set(
						err, MOAT_ERR_CONFIG, 0,
						"syscalls[%zu]: \"%s\" is given another action by "
						"syscalls[%zu]",
						a->entry, first_name(a, nr), b->entry);
				if (a->n_conds == 0)
					continue; /* seen from the other side */
				if (b->n_conds == 0 && b->action != p->default_action)
					return moat_error_set(
						err, MOAT_ERR_CONFIG, 0,
						"syscalls[%zu]: the conditional rule for \"%s\" is "
						"overridden by the unconditional rule syscalls[%zu] "
						"with a different action",
						a->entry, a->names[k], b->entry);
				if (a->action == p->default_action)
					return moat_error_set(
						err, MOAT_ERR_CONFIG, 0,
						"syscalls[%zu]: a conditional rule for \"%s\" with the "
						"default action cannot be combined with syscalls[%zu] "
						"(libseccomp drops it); give it another errnoRet",
						a->entry, first_name(a, nr), b->entry);
			}
		}
	}
	return 0;
}

static int add_rule(scmp_filter_ctx ctx, const struct sc_policy *p, const struct sc_rule *r,
		    size_t k, struct moat_error *err)
{
	struct scmp_arg_cmp cmp[SC_MAX_ARGS];
	bool dup = false;
	unsigned seen = 0;
	for (size_t i = 0; i < r->n_conds; i++) {
		if (seen & (1u << r->conds[i].index))
			dup = true;
		seen |= 1u << r->conds[i].index;
	}
	int rc = 0;
	if (!dup) {
		/* distinct indexes: at most SC_MAX_ARGS conditions, ANDed */
		for (size_t i = 0; i < r->n_conds; i++)
			cmp[i] = (struct scmp_arg_cmp){
				.arg = r->conds[i].index,
				.op = (enum scmp_compare)r->conds[i].op,
				.datum_a = r->conds[i].value,
				.datum_b = r->conds[i].value_two,
			};
		rc = seccomp_rule_add_array(ctx, r->action, r->nrs[k], (unsigned)r->n_conds,
					    r->n_conds ? cmp : NULL);
	} else {
		/* same argument compared twice: one rule per condition (ORed) */
		for (size_t i = 0; i < r->n_conds && rc == 0; i++) {
			cmp[0] = (struct scmp_arg_cmp){
				.arg = r->conds[i].index,
				.op = (enum scmp_compare)r->conds[i].op,
				.datum_a = r->conds[i].value,
				.datum_b = r->conds[i].value_two,
			};
			rc = seccomp_rule_add_array(ctx, r->action, r->nrs[k], 1, cmp);
		}
	}
	if (rc < 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, -rc,
				      "syscalls[%zu]: libseccomp refused the rule for \"%s\": %s",
				      r->entry, r->names[k], strerror(-rc));
	return 0;
}

/* libseccomp 2.5 has no export to memory: export into a memfd, read back. */
static int export_bpf(scmp_filter_ctx ctx, struct moat_seccomp_prog *prog,
		      struct moat_error *err)
{
	int fd = memfd_create("moat-seccomp-bpf", MFD_CLOEXEC);
	if (fd < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "seccomp: memfd_create: %s", strerror(errno));
	int rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0) {
		close(fd);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, -rc,
				      "seccomp: exporting BPF: %s", strerror(-rc));
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e, "seccomp: fstat: %s",
				      strerror(e));
	}
	size_t size = (size_t)st.st_size;
	if (size == 0 || size % sizeof(struct sock_filter) != 0 ||
	    size / sizeof(struct sock_filter) > SC_MAX_INSNS) {
		close(fd);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "seccomp: the compiled filter has %zu bytes (at most %u "
				      "instructions of 8 bytes)",
				      size, SC_MAX_INSNS);
	}
	prog->insns = malloc(size);
	if (!prog->insns) {
		close(fd);
		return moat_error_oom(err);
	}
	size_t got = 0;
	while (got < size) {
		ssize_t r = pread(fd, (char *)prog->insns + got, size - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			close(fd);
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
					      "seccomp: reading the BPF back: %s", strerror(e));
		}
		got += (size_t)r;
	}
	close(fd);
	prog->len = (unsigned short)(size / sizeof(struct sock_filter));
	return 0;
}

const struct sc_compile_opts sc_compile_defaults = {
	.compiler = moat_embedded_seccomp_compiler_sha256,
	.optimize = 2,
};

int sc_compile(const struct sc_policy *p, struct moat_seccomp_prog **out,
	       struct moat_error *err)
{
	return sc_compile_with(p, &sc_compile_defaults, out, err);
}

/* libseccomp probes the kernel lazily and keeps the answers (API level,
 * supported actions and flags) in process-wide variables without a lock:
 * filters are compiled one at a time. It is rare (a BPF cache miss). */
static pthread_mutex_t compile_mu = PTHREAD_MUTEX_INITIALIZER;

static int compile_locked(const struct sc_policy *p, const struct sc_compile_opts *opts,
			  struct moat_seccomp_prog **out, struct moat_error *err);

int sc_compile_with(const struct sc_policy *p, const struct sc_compile_opts *opts,
		    struct moat_seccomp_prog **out, struct moat_error *err)
{
	pthread_mutex_lock(&compile_mu);
	int rc = compile_locked(p, opts, out, err);
	pthread_mutex_unlock(&compile_mu);
	return rc;
}

static int compile_locked(const struct sc_policy *p, const struct sc_compile_opts *opts,
			  struct moat_seccomp_prog **out, struct moat_error *err)
{
	*out = NULL;
	if (check_conflicts(p, err) < 0)
		return -1;
	scmp_filter_ctx ctx = seccomp_init(p->default_action);
	if (!ctx)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "seccomp: libseccomp could not create a filter");
	struct moat_seccomp_prog *prog = calloc(1, sizeof *prog);
	int rc = -1;
	if (!prog) {
		moat_error_oom(err);
		goto out;
	}
	int arc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (arc == 0)
		arc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* we set it ourselves */
	if (arc == 0) /* the layout only: same verdicts (see internal.h) */
		arc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, opts->optimize);
	if (arc < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, -arc, "seccomp: filter attributes: %s",
			       strerror(-arc));
		goto out;
	}
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct sc_rule *r = &p->rules[i];
		if (!r->applies || r->action == p->default_action)
			continue;
		for (size_t k = 0; k < r->n_names; k++)
			if (add_rule(ctx, p, r, k, err) < 0)
				goto out;
	}
	if (export_bpf(ctx, prog, err) < 0)
		goto out;
	prog->log = p->flag_log;
	*out = prog;
	prog = NULL;
	rc = 0;
out:
	moat_seccomp_prog_free(prog);
	seccomp_release(ctx);
	return rc;
}
