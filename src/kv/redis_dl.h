/* hiredis, loaded with dlopen when a Redis store is opened: most runs use
 * SQLite or no store at all, and a moat built on a host with hiredis must
 * still start where it is not installed. The headers of libhiredis-dev give
 * the types; moat does not link -lhiredis. Include this instead of
 * <hiredis/hiredis.h>; the redis* names below then call through the loaded
 * table. The soname is pinned: redisContext's layout (err, errstr, fd) is
 * read directly and must be the one these headers describe. */
#ifndef MOAT_KV_REDIS_DL_H
#define MOAT_KV_REDIS_DL_H

#include <stddef.h>
#include <sys/time.h>
#include <hiredis/hiredis.h>

struct moat_redis_fns {
	redisContext *(*connect_fd)(int);
	int (*set_timeout)(redisContext *, const struct timeval);
	void *(*command_argv)(redisContext *, int, const char **, const size_t *);
	void (*free_reply)(void *);
	void (*free_context)(redisContext *);
};

extern struct moat_redis_fns moat_redis_fns;

/* Loads libhiredis once. 0, or -1 with a sentence in *why (static). */
int moat_redis_load(const char **why);

#define redisConnectFd (moat_redis_fns.connect_fd)
#define redisSetTimeout (moat_redis_fns.set_timeout)
#define redisCommandArgv (moat_redis_fns.command_argv)
#define freeReplyObject (moat_redis_fns.free_reply)
#define redisFree (moat_redis_fns.free_context)

#endif
