/* src/pool/: sandboxes made ahead of their request -- warm interpreters
 * and the Python zygote's children -- behind one face (docs/SERVE.md,
 * "The pool"; docs/design/pool-zygote.md). moat serve asks the pool for a
 * started sandbox for a request (pool_acquire), runs a cold one when it has
 * none, waits, and gives it back (pool_return). How a sandbox is made is
 * the runner's (runner/sandbox.h); which request may go where, when the
 * refill thread makes them, and the zygote's lifetime are the pool's. */
#ifndef MOAT_POOL_POOL_H
#define MOAT_POOL_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "runner/sandbox.h"

/* ---- which requests a sandbox made ahead may take (warm.c) ---- */

/* NULL when req can be handed to a sandbox prewarmed with boot; otherwise
 * why not (a static string): an argv request, another language, network,
 * outputs, kvEnabled, other limits, or an env variable read at interpreter
 * start. */
const char *pool_refusal(const struct moat_request *boot, const struct moat_request *req);
/* req as the MOATPOOL2 frame a warm sandbox or a zygote's child reads on
 * its stdin (malloc'd, *len bytes), or NULL when out of memory. */
char *pool_frame(const struct moat_request *req, size_t *len);
/* A sandbox made with opts (its root: opts->rootfs_dir, else the host's)
 * has esbuild where a run looks for it, so a warm javascript sandbox can
 * take TypeScript and answer as a cold run would, a missing esbuild
 * included. */
bool pool_typescript_ready(const struct moat_run_options *opts);
/* What a warm node needs to start TypeScript's transpiler before its
 * request arrives (runtime/js/pool.cjs, main({ts: SPEC})): a JSON object,
 * every string base64, the same "ts" a TypeScript request's frame carries.
 * malloc'd; NULL when out of memory. */
char *pool_typescript_spec(void);
/* Hands sb, started ahead with boot, its one request req: refused with a
 * SandboxConfigError when pool_refusal says no, else
 * run_sandbox_deliver with req's frame. */
int pool_deliver(struct moat_sandbox *sb, const struct moat_request *boot,
		 const struct moat_request *req, const struct moat_run_options *per,
		 struct moat_error *err);
/* A zygote's child for req (run_sandbox_create_adopted), started: for req
 * (its frame on stdin) or ahead of its request (req: the bootstrap).
 * Refused (MOAT_ERR_CONFIG, before make_pid1 is called) for requests
 * pool_refusal refuses against themselves. */
int pool_create_adopted(const struct moat_request *req, const struct moat_run_options *opts,
			run_make_pid1_fn make_pid1, void *ctx, enum run_adopt_start start,
			struct moat_sandbox **out, struct moat_error *err);

/* ---- moat serve's pool (pool.c, zygote_host.c) ---- */

struct pool;
struct pool_config {
	/* sandboxes kept ready per kind (python, javascript, and typescript
	 * where the root has esbuild); 0: none (the thread still releases
	 * finished runs) */
	unsigned want;
	/* Python requests go to a Python zygote while it runs (its warm
	 * python sandboxes are not kept then); one that cannot start is
	 * logged and the pool goes on without it */
	bool zygote;
	unsigned zygote_max_children; /* per zygote; 0: no bound */
	uint64_t zygote_max_age_ms;
	/* every sandbox's options (borrowed while the pool lives) */
	const struct moat_run_options *opts;
	/* the limits the pool's sandboxes have (timeout, memory, cpus, pids,
	 * strict limits, output cap): a request with others runs cold */
	const struct moat_request *limits;
	/* no prewarm while saturated(sat_ctx) says every run slot is taken */
	bool (*saturated)(void *ctx);
	void *sat_ctx;
	/* a warning for the operator (never a request's bytes); may be NULL */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
};
int pool_start(struct pool **out, const struct pool_config *cfg, struct moat_error *err);
/* Stops refilling, releases the idle ones, waits for the ones in use.
 * NULL-safe. */
void pool_stop(struct pool *p);

/* How the sandbox of a request was made. */
enum pool_made {
	POOL_COLD,    /* by the caller (moat_sandbox_create): none was taken */
	POOL_WARM,    /* a warm interpreter made ahead */
	POOL_AHEAD,   /* a child of the zygote made ahead */
	POOL_ADOPTED, /* a child of the zygote made for this request */
};
struct pool_lease {
	struct moat_sandbox *sb; /* started, or NULL: the caller runs cold */
	enum pool_made made;
	unsigned mark; /* the zygote hold (pool.c) */
};
/* A started sandbox for req with its per-request options (cancel and
 * hangup fds, output callbacks, stdout flow control), made ahead or by the
 * zygote, in l->sb; else l->sb NULL (the request cannot use one, or none
 * could be had): the caller creates and starts a cold sandbox into l->sb.
 * p may be NULL. Never fails: a pool's failure is a cold run. */
void pool_acquire(struct pool *p, const struct moat_request *req,
		  const struct moat_run_options *opts, struct pool_lease *l);
/* The run in l->sb is over (rc: moat_sandbox_wait's, or a failed cold
 * create/start's); its pid 1 is reaped now (run_sandbox_reap: one that
 * reported its status alone may still be exiting), the rest of l->sb is
 * released by the pool's thread after the answer when it can. p may be
 * NULL. */
void pool_return(struct pool *p, struct pool_lease *l, int rc);
/* The pool's and the zygote's metrics (Prometheus text). */
void pool_render(struct pool *p, struct moat_buf *b);
/* Why a service with opts cannot run the Python zygote ("a rootfs is
 * set", ...), or NULL. */
const char *pool_zygote_refusal(const struct moat_run_options *opts);

#endif
