/* PLACEHOLDER until h/srun lands src/pool/session.c (docs/SESSIONS.md):
 * moat serve's sessions (src/serve/sessions.c) link against this; every
 * session is refused as unavailable. On merging h/srun, take its file. */
#include <stdlib.h>

#include "pool/session.h"

int pool_session_start(const struct pool_session_config *cfg, struct pool_session **out,
		       struct moat_error *err)
{
	(void)cfg;
	*out = NULL;
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
			      "sessions are not built into this moat (src/pool/session.c)");
}

int pool_session_run(struct pool_session *s, const struct moat_request *step,
		     const struct moat_run_options *per, struct moat_result **res, char **extra,
		     struct moat_error *err)
{
	(void)s, (void)step, (void)per;
	*res = NULL;
	*extra = NULL;
	return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "sessions are not built");
}

enum pool_session_state pool_session_state(const struct pool_session *s, const char **reason,
					   const char **sentence)
{
	(void)s;
	*reason = "crash";
	*sentence = "the session is gone";
	return POOL_SESSION_KILLED;
}

int64_t pool_session_memory(const struct pool_session *s)
{
	(void)s;
	return -1;
}

int64_t pool_session_cpu_ms(const struct pool_session *s)
{
	(void)s;
	return -1;
}

unsigned pool_session_runs(const struct pool_session *s)
{
	(void)s;
	return 0;
}

void pool_session_kill(struct pool_session *s)
{
	(void)s;
}

void pool_session_stop(struct pool_session *s)
{
	(void)s;
}
