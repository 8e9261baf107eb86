/* A small library for the make/CMake workloads (tests/workloads/README.md). */
#ifndef WL_H
#define WL_H
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>

/* one result line the harness reads: "@@wl ok|fail NAME[: why]" */
#define WL_CHECK(name, expr)                                                       \
	do {                                                                       \
		errno = 0;                                                         \
		if (expr)                                                          \
			printf("\n@@wl ok %s.%s\n", wl_prog, name);                \
		else {                                                             \
			printf("\n@@wl fail %s.%s: %s (errno %d %s)\n", wl_prog,   \
			       name, #expr, errno, strerror(errno));               \
			wl_failed = 1;                                             \
		}                                                                  \
		fflush(stdout);                                                    \
	} while (0)

extern const char *wl_prog;
extern int wl_failed;

size_t wl_count_words(const char *s);
char *wl_reverse(char *s);
unsigned long wl_checksum(const void *buf, size_t n);
#endif
