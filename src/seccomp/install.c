/* moat_seccomp_prepare (supervisor: policy → cached or fresh BPF) and
 * moat_seccomp_install (child: one seccomp syscall, nothing else). */
#include <errno.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "core/core.h"
#include "core/embedded.h"
#include "core/sys.h"
#include "seccomp/internal.h"

/* Per thread: what the calling thread's last prepare did (moat doctor and
 * the tests ask right after their own prepare). */
static _Thread_local struct sc_stats last_stats;

bool moat_seccomp_last_from_cache(void)
{
	return last_stats.from_cache;
}

void sc_stats_get(struct sc_stats *out)
{
	*out = last_stats;
}

static int prepare(const char *policy_path, bool zygote, bool log_denied,
		   struct moat_seccomp_prog **out, struct moat_error *err)
{
	*out = NULL;
	uint64_t t0 = moat_mono_ns();
	struct sc_host host;
	if (sc_host_detect(&host, err) < 0)
		return -1;
	/* The embedded default is neither read nor hashed on a hit: its digest
	 * was computed at build time (tools/embed.c). A --policy file is read and
	 * hashed on every run (it may have changed). */
	char *buf = NULL;
	size_t len = 0;
	uint8_t policy_sha[MOAT_SHA256_LEN];
	bool hashed = false;
	if (zygote) {
		len = moat_embedded_zygote_policy_len;
		if (!(buf = malloc(len + 1)))
			return moat_error_set(err, MOAT_ERR_CONFIG, ENOMEM, "out of memory");
		memcpy(buf, moat_embedded_zygote_policy, len + 1);
		moat_sha256(buf, len, policy_sha);
		hashed = true;
		policy_path = "(embedded zygote policy)";
	} else if (policy_path) {
		if (sc_policy_read(policy_path, &buf, &len, err) < 0)
			return -1;
		moat_sha256(buf, len, policy_sha);
		hashed = true;
	} else {
		memcpy(policy_sha, moat_embedded_default_policy_sha256, MOAT_SHA256_LEN);
	}
	uint8_t key[MOAT_SHA256_LEN];
	sc_cache_key(policy_sha, &host, &sc_compile_defaults, key);
	struct moat_seccomp_prog *prog = NULL;
	if (sc_cache_load(key, &prog) == 0) {
		bool was_read = buf != NULL;
		free(buf);
		if (log_denied && sc_notify_rewrite(prog, err) < 0) {
			moat_seccomp_prog_free(prog);
			return -1;
		}
		last_stats = (struct sc_stats){ .from_cache = true, .policy_hashed = hashed,
						.policy_read = was_read,
						.prepare_ns = moat_mono_ns() - t0 };
		*out = prog;
		return 0;
	}
	uint64_t t1 = moat_mono_ns();
	if (!buf && sc_policy_read(policy_path, &buf, &len, err) < 0)
		return -1;
	struct sc_policy *pol = NULL;
	int rc = sc_policy_parse(buf, len, &host, &pol, err);
	free(buf);
	if (rc == 0)
		rc = sc_compile_with(pol, &sc_compile_defaults, &prog, err);
	sc_policy_free(pol);
	uint64_t t2 = moat_mono_ns();
	if (rc == 0)
		sc_cache_store(key, prog); /* the program as compiled, never the rewrite */
	if (rc == 0 && log_denied && sc_notify_rewrite(prog, err) < 0) {
		moat_seccomp_prog_free(prog);
		prog = NULL;
		rc = -1;
	}
	if (rc < 0) {
		/* name the policy in the message */
		return moat_error_wrap(err, policy_path ? policy_path : "(embedded default policy)",
				       NULL);
	}
	last_stats = (struct sc_stats){ .from_cache = false, .policy_hashed = hashed,
					.policy_read = true, .prepare_ns = moat_mono_ns() - t0,
					.compile_ns = t2 - t1 };
	*out = prog;
	return 0;
}

int moat_seccomp_prepare(const char *policy_path, bool log_denied,
			 struct moat_seccomp_prog **out, struct moat_error *err)
{
	return prepare(policy_path, false, log_denied, out, err);
}

int moat_seccomp_prepare_zygote(struct moat_seccomp_prog **out, struct moat_error *err)
{
	return prepare(NULL, true, false, out, err);
}

int moat_seccomp_install(const struct moat_seccomp_prog *prog, int *listener_fd)
{
	if (listener_fd)
		*listener_fd = -1;
	bool notify = prog && prog->notify_insns != NULL;
	if (!prog || !prog->insns || prog->len == 0 || (notify && !listener_fd)) {
		errno = EINVAL;
		return -1;
	}
	struct sock_fprog fprog = {
		.len = prog->len,
		.filter = notify ? prog->notify_insns : prog->insns,
	};
	/* Single-threaded child: no TSYNC needed. */
	unsigned long flags = prog->log ? SECCOMP_FILTER_FLAG_LOG : 0;
	if (notify)
		flags |= SECCOMP_FILTER_FLAG_NEW_LISTENER;
	/* No syscall may follow the install here: with a listener, any call
	 * the policy refuses would wait for a supervisor that does not have the
	 * listener yet. The kernel makes the listener O_CLOEXEC itself
	 * (get_unused_fd_flags(O_CLOEXEC); checked by the unit tests). */
	long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
	if (rc < 0)
		return -1;
	if (notify)
		*listener_fd = (int)rc;
	return 0;
}
