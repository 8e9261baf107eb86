/* Providers: one interface, five implementations.
 *
 *   native   the moat runner (moat_run): the default
 *   docker   `docker run` with the aistack security flags; code on stdin
 *   e2b      E2B REST API + code-interpreter /execute (NDJSON), always deleted
 *   daytona  Daytona REST API + toolbox (upload, process/execute), always deleted
 *   none     refuses with SandboxPolicyError
 *
 * Every provider fills res->provider with its name and maps a timeout to
 * timed_out = true, exited = false (exitCode null). A missing tool, daemon,
 * key or setting is a SandboxUnavailableError. API keys come only from the
 * config or E2B_API_KEY / DAYTONA_API_KEY and never appear in messages.
 *
 * Remote URLs must be https (otherwise a SandboxConfigError: the config is
 * wrong, not the host) and must not resolve to a private, loopback,
 * link-local, CGNAT or metadata address; the checked address is pinned with
 * CURLOPT_RESOLVE (no DNS rebinding between check and connect), redirects
 * and proxies are off. Test-only escape hatch: with MOAT_TEST_ALLOW_HTTP=1 in
 * the environment, a URL whose host is literally 127.0.0.1 may be plain http
 * (and loopback). Nothing else is relaxed by it. */
#ifndef MOAT_PROVIDERS_PROVIDERS_H
#define MOAT_PROVIDERS_PROVIDERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "moat_admin.h" /* the public part: options, name, run */

struct moat_provider {
	const char *name;
	int (*run)(const struct moat_request *req, const struct moat_provider_options *o,
		   struct moat_result **out, struct moat_error *err);
};

/* By name ("native", "docker", "e2b", "daytona", "none"); NULL when unknown. */
const struct moat_provider *moat_provider_get(const char *name);

/* ---- docker (exposed for the unit tests) ---- */

struct moat_docker_cmd {
	char **argv;   /* NULL-terminated; argv[0] is the docker program */
	char **envp;   /* the docker CLI's whole environment (request env values live here) */
	char *name;    /* the container name (for docker kill) */
};

/* The argv and environment of `docker run` for req (pure: no I/O).
 * docker_bin: the docker program; name: container name; host_env: the
 * environment the docker CLI's own settings (PATH, HOME, DOCKER_*) are taken
 * from. Refuses env names that are invalid or that would configure the docker
 * CLI itself (PATH, HOME, DOCKER_*, LD_*, ...), and files/stdin (unsupported). */
int moat_docker_build(const struct moat_request *req, const struct moat_config *cfg,
		      const char *docker_bin, const char *name, char *const *host_env,
		      struct moat_docker_cmd *out, struct moat_error *err);
void moat_docker_cmd_free(struct moat_docker_cmd *cmd);
/* true for env names the docker provider refuses to forward (see above). */
bool moat_docker_env_reserved(const char *name);
/* The image for a language when the config names none. */
const char *moat_docker_default_image(enum moat_language lang);

/* ---- remote helpers (exposed for the unit tests) ---- */

/* Removes every occurrence of secret from s (in place), replacing it with
 * "[redacted]" (s is reallocated). No-op when secret is NULL or empty. */
void moat_redact(char **s, const char *secret);

#endif
