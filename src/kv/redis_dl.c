/* libhiredis through dlopen (redis_dl.h says why). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "kv/redis_dl.h"

struct moat_redis_fns moat_redis_fns;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error;

static void load(void)
{
	void *h = dlopen("libhiredis.so.0.14", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		load_error = "libhiredis.so.0.14 cannot be loaded (Debian package libhiredis0.14)";
		return;
	}
	static const struct { const char *name; size_t off; } syms[] = {
#define S(sym, field) { #sym, offsetof(struct moat_redis_fns, field) }
		S(redisConnectFd, connect_fd), S(redisSetTimeout, set_timeout),
		S(redisCommandArgv, command_argv), S(freeReplyObject, free_reply),
		S(redisFree, free_context),
#undef S
	};
	struct moat_redis_fns fns;
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlsym(h, syms[i].name);
		if (!p) {
			load_error = "libhiredis.so.0.14 lacks a function moat needs (Debian package "
				     "libhiredis0.14)";
			dlclose(h);
			return;
		}
		*(void **)((char *)&fns + syms[i].off) = p;
	}
	moat_redis_fns = fns;
}

int moat_redis_load(const char **why)
{
	pthread_once(&once, load);
	if (load_error) {
		*why = load_error;
		return -1;
	}
	return 0;
}
