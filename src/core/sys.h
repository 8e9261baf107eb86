/* Small system helpers shared by the modules, so that each exists once.
 *
 * Marked "child-safe": system calls only (no allocation, no locks, no
 * stdio), callable in a raw clone3 child of a multi-threaded process, where
 * any lock another thread held at clone time stays held forever. */
#ifndef MOAT_CORE_SYS_H
#define MOAT_CORE_SYS_H

#include <sys/types.h>

/* fork() without glibc: a raw clone(SIGCHLD) system call. glibc's fork()
 * takes the malloc and stdio locks and runs atfork handlers, which deadlocks
 * in a raw clone3 child of a multi-threaded process (a lock held by another
 * thread at clone time is never released there). The new process runs on
 * a copy of the caller's memory and must make only system calls before it
 * execs or exits. Returns like fork(). Child-safe. */
pid_t moat_sys_fork(void);

#endif
