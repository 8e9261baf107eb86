/* Start-up timeline for profiling builds (make timeline): moat_stamp("name")
 * records CLOCK_MONOTONIC in a page shared by the supervisor, the sandbox init
 * and the program until its execve; moat_stamp_dump() prints the steps to
 * stderr. In normal builds both compile to nothing. */
#ifndef MOAT_CORE_STAMP_H
#define MOAT_CORE_STAMP_H

#ifdef MOAT_TIMELINE
void moat_stamp(const char *name);
void moat_stamp_dump(void);
#else
#define moat_stamp(name) ((void)0)
#define moat_stamp_dump() ((void)0)
#endif

#endif
