/* libhiredis through dlopen (redis_dl.h says why). */
#include <stddef.h>

#include "core/sys.h"
#include "kv/redis_dl.h"

struct moat_redis_fns moat_redis_fns;

static struct moat_dl_once once = MOAT_DL_ONCE_INIT;

static const struct moat_dl_sym syms[] = {
#define S(sym, field) { #sym, offsetof(struct moat_redis_fns, field) }
	S(redisConnectFd, connect_fd), S(redisSetTimeout, set_timeout),
	S(redisCommandArgv, command_argv), S(freeReplyObject, free_reply),
	S(redisFree, free_context),
#undef S
};

static void load(void)
{
	moat_dl_load(&once, "libhiredis.so.0.14", syms, sizeof syms / sizeof syms[0], &moat_redis_fns,
		     sizeof moat_redis_fns,
		     "libhiredis.so.0.14 cannot be loaded (Debian package libhiredis0.14)",
		     "libhiredis.so.0.14 lacks a function moat needs (Debian package "
		     "libhiredis0.14)");
}

int moat_redis_load(const char **why)
{
	return moat_dl_once(&once, load, why);
}
