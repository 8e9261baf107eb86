/* Privilege reduction: ids, capabilities (libcap), no_new_privs, rlimits. */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "priv/priv.h"

int moat_priv_prepare(struct moat_priv_plan *p, uint64_t fsize_bytes, struct moat_error *err)
{
	memset(p, 0, sizeof *p);
	p->last_cap = (int)cap_max_bits() - 1;
	if (p->last_cap < CAP_SETPCAP)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "cannot tell how many capabilities this kernel has");
	p->landlock_abi = moat_landlock_abi();
	p->empty = cap_init(); /* cap_init returns every set cleared */
	if (!p->empty)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cap_init: %s", strerror(errno));
	/* RLIMIT_MEMLOCK, RLIMIT_NICE and RLIMIT_RTPRIO bound what the default
	 * seccomp policy lets the program do without capabilities (SECURITY.md
	 * row 90): lock at most 8 MiB (the kernel's own default since 5.16),
	 * never lower its niceness, never take a real-time scheduling class */
	if (moat_priv_add_rlimit(p, RLIMIT_CORE, 0, err) < 0 ||
	    moat_priv_add_rlimit(p, RLIMIT_NOFILE, 1024, err) < 0 ||
	    moat_priv_add_rlimit(p, RLIMIT_FSIZE, (rlim_t)fsize_bytes, err) < 0 ||
	    moat_priv_add_rlimit(p, RLIMIT_MEMLOCK, MOAT_MEMLOCK_BYTES, err) < 0 ||
	    moat_priv_add_rlimit(p, RLIMIT_NICE, 0, err) < 0 ||
	    moat_priv_add_rlimit(p, RLIMIT_RTPRIO, 0, err) < 0) {
		moat_priv_release(p);
		return -1;
	}
	return 0;
}

int moat_priv_add_rlimit(struct moat_priv_plan *p, int resource, rlim_t value,
			 struct moat_error *err)
{
	for (int i = 0; i < p->rlimit_count; i++) {
		if (p->rlimits[i].resource == resource) {
			if (value < p->rlimits[i].value.rlim_cur)
				p->rlimits[i].value.rlim_cur = p->rlimits[i].value.rlim_max = value;
			return 0;
		}
	}
	if (p->rlimit_count == MOAT_MAX_RLIMITS)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "too many rlimits");
	struct rlimit cur;
	if (getrlimit(resource, &cur) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "getrlimit: %s", strerror(errno));
	/* never raise: the sandbox gets the lower of ours and the wanted one */
	if (cur.rlim_max != RLIM_INFINITY && value > cur.rlim_max)
		value = cur.rlim_max;
	p->rlimits[p->rlimit_count].resource = resource;
	p->rlimits[p->rlimit_count].value.rlim_cur = value;
	p->rlimits[p->rlimit_count].value.rlim_max = value;
	p->rlimit_count++;
	return 0;
}

void moat_priv_release(struct moat_priv_plan *p)
{
	if (p->empty)
		cap_free(p->empty);
	p->empty = NULL;
}

/* Raw system calls, not glibc's setgroups/setresgid/setresuid: in a process
 * glibc believes multi-threaded those change the ids of every thread it
 * knows (nptl "setxid": SIGSETXID to each, then wait). pid 1 is a raw clone3
 * copy of such a process when a host program runs moat from several
 * threads: the threads glibc lists do not exist here, and one that was
 * being created at clone time is waited for forever, so the sandbox hung
 * until its timeout without running anything. The calling thread is the
 * whole process here, which is all the raw calls change. */
int moat_priv_become_nobody(bool as_root)
{
	if (as_root && syscall(SYS_setgroups, 0, NULL) < 0)
		return -1;
	if (syscall(SYS_setresgid, MOAT_SANDBOX_GID, MOAT_SANDBOX_GID, MOAT_SANDBOX_GID) < 0)
		return -1;
	if (syscall(SYS_setresuid, MOAT_SANDBOX_UID, MOAT_SANDBOX_UID, MOAT_SANDBOX_UID) < 0)
		return -1;
	return 0;
}

int moat_priv_drop_bounding(const struct moat_priv_plan *p)
{
	for (int c = 0; c <= p->last_cap; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	return 0;
}

int moat_priv_clear_caps(const struct moat_priv_plan *p)
{
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -1;
	return cap_set_proc(p->empty);
}

int moat_priv_no_new_privs(void)
{
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

int moat_priv_apply_rlimits(const struct moat_priv_plan *p)
{
	for (int i = 0; i < p->rlimit_count; i++)
		if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].value) < 0)
			return -1;
	return 0;
}
