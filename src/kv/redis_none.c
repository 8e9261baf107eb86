/* Placeholder until the Redis backend lands (src/kv/redis.c): a redis://
 * spec is refused with a clear error instead of failing to link. */
#include "kv/internal.h"

int kv_redis_open(const char *host, unsigned port, unsigned db, const char *password, void **h,
		  struct moat_error *err)
{
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			      "--kv redis://: this build of moat has no Redis backend");
}

const struct kv_backend kv_redis_backend = { .name = "redis" };
