/* Small system helpers shared by the modules (see sys.h). */
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/sys.h"

pid_t moat_sys_fork(void)
{
	/* SYS_clone, not clone3: inside the sandbox the seccomp policy answers
	 * clone3 with ENOSYS (libc then falls back to clone, which the filter
	 * can inspect). Argument order differs on s390 and cris. */
#if defined(__s390__) || defined(__CRIS__)
	return (pid_t)syscall(SYS_clone, 0L, (long)SIGCHLD, 0L, 0L, 0L);
#else
	return (pid_t)syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
#endif
}
