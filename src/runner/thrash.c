/* The thrash watch. At its memory limit, a program whose working set
 * includes file-backed pages (its interpreter's own text, a mapped file)
 * can keep the kernel's reclaim "making progress" forever: pages are
 * dropped and faulted straight back in, the OOM killer never fires and
 * the program grinds the disk until the wall clock ends it. Where the
 * cgroup v2 memory controller and PSI are there, the pump samples the
 * leaf's memory.events "max" (limit hits) and memory.pressure "full" stall
 * every THRASH_TICK_MS; when, over the last THRASH_TICKS ticks, the limit
 * was hit and every task of the run was stalled on memory together for at
 * least THRASH_SHARE_PCT of the time, the run is killed and reported out of
 * memory, with a warning that says moat did it.
 *
 * The share is low on purpose: a program streaming a file through its page
 * cache at its limit stalls a few per cent (clean cache is cheap to drop,
 * and a first read is no refault); a program refaulting its own working
 * set stalled 38-44 % of the time in the TCG VM (make check-vm), the rest
 * being the emulated CPU that faults the pages back. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/sys.h"
#include "runner/run.h"

bool run_thrash_step(struct run_thrash *t, int64_t limit_hits, int64_t full_us, int64_t now_us)
{
	/* the ring holds the last THRASH_TICKS + 1 samples: THRASH_TICKS ticks */
	const size_t slots = sizeof t->ring / sizeof t->ring[0];
	t->ring[t->next % slots] = (struct run_thrash_sample){ limit_hits, full_us, now_us };
	t->next++;
	if (t->next < slots)
		return false;
	const struct run_thrash_sample *old = &t->ring[t->next % slots];
	int64_t stalled = full_us - old->full_us, elapsed = now_us - old->at_us;
	if (limit_hits <= old->limit_hits || elapsed <= 0 || stalled < 0 ||
	    stalled * 100 < elapsed * THRASH_SHARE_PCT)
		return false;
	t->stalled_us = stalled;
	t->window_us = elapsed;
	return true;
}

void run_thrash_arm(struct run *r)
{
	/* nothing read here, on the run's start: the first tick takes the
	 * baseline, and a host without PSI ends the watch there */
	if (!moat_cgroup_memory_is_v2(r->cg))
		return; /* a v1 or rlimit memory limit, or none: the timeout remains */
	r->thrash = (struct run_thrash){ 0 };
	r->thrash_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	struct itimerspec it = { .it_interval = { 0, THRASH_TICK_MS * 1000000L },
				 .it_value = { 0, THRASH_TICK_MS * 1000000L } };
	if (r->thrash_fd < 0 || timerfd_settime(r->thrash_fd, 0, &it, NULL) < 0 ||
	    pump_watch_slot(r, PUMP_THRASH, EPOLLIN) < 0) {
		(void)moat_result_warn(r->res, "the memory thrash watch could not start (%s): a "
				       "program thrashing at its memory limit runs until its "
				       "timeout", strerror(errno));
		if (r->thrash_fd >= 0)
			close(r->thrash_fd);
		r->thrash_fd = -1;
	}
}

/* A tick: sample, and kill the run when it has thrashed long enough. */
int run_thrash_tick(struct run *r)
{
	uint64_t ticks;
	if (read(r->thrash_fd, &ticks, sizeof ticks) < 0)
		return 0;
	int64_t hits, full;
	if (r->exited || r->have_status || r->res->timed_out || r->cancelled ||
	    moat_cgroup_memory_stall(r->cg, &hits, &full) < 0)
		return -1; /* nothing left to watch */
	if (!run_thrash_step(&r->thrash, hits, full, moat_mono_ms() * 1000))
		return 0;
	r->thrash_killed = true;
	return 1;
}
