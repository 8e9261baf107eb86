/* core: release on scope exit (GCC/Clang's cleanup attribute), so that an
 * error path is a plain `return` and each resource is let go in one place.
 *
 *   MOAT_AUTOFREE char *text = cJSON_PrintUnformatted(o);  // free()d
 *   MOAT_AUTOCLOSE int fd = open(...);                     // close()d if >= 0
 *   MOAT_AUTOWIPE char *password = NULL;                   // zeroed, then free()d
 *   MOAT_AUTO(moat_request) struct moat_request *req = NULL;
 *   MOAT_AUTO_ERROR struct moat_error err = { 0 };         // moat_error_clear
 *   ...
 *   *out = MOAT_TAKE(req);   // ownership handed out: nothing freed at exit
 *   return MOAT_TAKE_FD(fd);
 *
 * The supervisor's side only (serve, the CLI, the pool's and the runner's
 * parent). Never in pid 1 or pid 2 code (src/runner/child.c and what it
 * calls before execve, the zygote's child path): their raw-syscall
 * discipline stays as docs/ARCHITECTURE.md "The handover" says; a cleanup
 * there would run libc's free() where no allocator may be touched.
 *
 * A variable marked here must be initialised where it is declared (NULL,
 * -1, { 0 } or its value): a goto past it, or a return before it is set,
 * would otherwise release garbage. */
#ifndef MOAT_CORE_CLEANUP_H
#define MOAT_CORE_CLEANUP_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "moat.h"

static inline void moat_cleanup_free(void *p)
{
	free(*(void **)p);
}

/* close(2) keeps errno: a cleanup that runs on the way out of an error
 * path must not change the error being returned. */
static inline void moat_cleanup_close(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

/* A secret (a token, a password) as a string: wiped, then freed. */
static inline void moat_cleanup_wipe(char **s)
{
	if (*s) {
		explicit_bzero(*s, strlen(*s));
		free(*s);
	}
}

static inline void moat_cleanup_error(struct moat_error *err)
{
	moat_error_clear(err);
}

#define MOAT_AUTOFREE __attribute__((cleanup(moat_cleanup_free)))
#define MOAT_AUTOCLOSE __attribute__((cleanup(moat_cleanup_close)))
#define MOAT_AUTOWIPE __attribute__((cleanup(moat_cleanup_wipe)))
#define MOAT_AUTO_ERROR __attribute__((cleanup(moat_cleanup_error)))

/* A pointer released by its type's own function: MOAT_AUTO(T) on a
 * `struct T *` calls T_free (NULL-safe) at exit. A type gets one with
 * MOAT_DEFINE_AUTO(T, T_free) where its header is in scope. */
#define MOAT_DEFINE_AUTO(type, fn)                                                \
	static inline void moat_cleanup_##type(struct type **p)                   \
	{                                                                         \
		if (*p)                                                           \
			fn(*p);                                                   \
	}
#define MOAT_AUTO(type) __attribute__((cleanup(moat_cleanup_##type)))

MOAT_DEFINE_AUTO(moat_request, moat_request_free)
MOAT_DEFINE_AUTO(moat_result, moat_result_free)
MOAT_DEFINE_AUTO(cJSON, cJSON_Delete)

/* Hands the pointer out and leaves NULL behind (nothing released at exit). */
static inline void *moat_take_ptr(void *pp)
{
	void **p = pp;
	void *v = *p;
	*p = NULL;
	return v;
}
#define MOAT_TAKE(p) ((__typeof__(p))moat_take_ptr(&(p)))

/* Hands the fd out and leaves -1 behind. */
static inline int moat_take_fd(int *fd)
{
	int v = *fd;
	*fd = -1;
	return v;
}
#define MOAT_TAKE_FD(fd) moat_take_fd(&(fd))

#endif
