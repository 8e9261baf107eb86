/* Configuration: moat.json, or the "sandbox" object of an aistack.config.json.
 *
 * Search (first file found wins, files are never merged):
 *   1. --config FILE            (an "aistack.config.json" name: its "sandbox" object)
 *   2. $MOAT_CONFIG             (same rule)
 *   3. ./moat.json
 *   4. ./aistack.config.json    (its "sandbox" object)
 *   5. ~/.config/moat/config.json
 *   6. /etc/moat/config.json
 * An explicit file (1, 2) must exist; the others are skipped when absent.
 * With no file at all, the provider is "native". An aistack config that says
 * nothing about sandboxing (no "sandbox" object, or one without "provider")
 * selects "none", which refuses to run: nobody runs unsandboxed by accident.
 * Unknown keys are warned about; invalid values are a SandboxConfigError.
 * An aistack "sandbox" object gets aistack's DEFAULT_SANDBOX_CONFIG for every limit it
 * leaves out (timeout 30000 ms, memoryMb 512, cpus 1, pidsLimit 100, network false);
 * a moat.json gets none: a request without limits runs without them. */
#ifndef MOAT_CORE_CONFIG_H
#define MOAT_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moat.h" /* the public part (load, free, apply, request keys): moat_admin.h */

#define MOAT_AISTACK_TIMEOUT_MS 30000u
#define MOAT_AISTACK_MEMORY_MB 512u
#define MOAT_AISTACK_CPUS 1.0
#define MOAT_AISTACK_PIDS 100u

struct moat_config {
	char *source;          /* file the values came from; NULL: built-in defaults */
	bool from_aistack;     /* the "sandbox" object of an aistack.config.json */
	char *provider;        /* never NULL after loading: "native", "docker", ... */
	uint64_t timeout_ms;   /* 0: not set */
	uint64_t memory_mb;    /* 0: not set */
	double cpus;           /* 0: not set */
	uint64_t pids_limit;   /* 0: not set */
	int network;           /* -1: not set, 0 false, 1 true */
	int strict_limits;     /* -1: not set */
	uint64_t max_output_bytes; /* 0: not set */
	char *e2b_api_key;     /* NULL: $E2B_API_KEY */
	char *e2b_api_url;     /* NULL: https://api.e2b.dev */
	char *e2b_sandbox_url; /* NULL: https://49999-{sandboxId}.e2b.app ({sandboxId} replaced) */
	char *e2b_template;    /* NULL: code-interpreter-v1 */
	char *daytona_api_url; /* NULL: https://app.daytona.io/api */
	char *daytona_api_key; /* NULL: $DAYTONA_API_KEY */
	char *docker_path;     /* NULL: "docker" looked up on $PATH */
	char *policy_path;     /* native: seccomp policy file */
	char *rootfs_dir;      /* native: prepared root directory */
	int strict_isolation;  /* "strictIsolation": refuse runs without Landlock (0/1) */
	char *kv_store;        /* "kv": the store spec (docs/KV.md), or NULL */
	char *kv_quota;        /* "kvQuota": "keys=N,bytes=N,value=N,free=N", or NULL */
	char *serve_json;      /* the "serve" object (moat serve's limits) as JSON, or NULL */
	struct moat_kv *images; /* language name → container image (docker) */
	size_t images_count;
	char **warnings;       /* unknown keys and the like */
	size_t warnings_count;
};

/* Parses config text. aistack: take the top-level "sandbox" object. source
 * names the text in messages. */
int moat_config_parse(const char *buf, size_t len, bool aistack, const char *source,
		      struct moat_config **out, struct moat_error *err);
/* A config with built-in defaults (provider "native"). */
struct moat_config *moat_config_new(void);
/* The image for a language: from "images" (by canonical name), else NULL. */
const char *moat_config_image(const struct moat_config *cfg, const char *language);

#endif
