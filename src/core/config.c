/* Configuration files (see config.h for the search order and the rules). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "moat_admin.h"
#include "core/config.h"
#include "core/core.h"

#define MAX_CONFIG_BYTES (1024u * 1024u)
#define MAX_TIMEOUT_MS (24ull * 60 * 60 * 1000)
#define MAX_MEMORY_MB 1048576u
#define MAX_PIDS 4194304u
#define MAX_OUTPUT_BYTES (1024u * 1024u * 1024u)
#define MAX_STR_BYTES 4096u
#define QUOTE_MAX 100u

/* Defined in buf.c (proposed for core.h). */
void moat_buf_append_quoted(struct moat_buf *b, const char *s, size_t len, size_t max);

static const char *const PROVIDERS[] = { "native", "docker", "e2b", "daytona", "none" };

struct moat_config *moat_config_new(void)
{
	struct moat_config *cfg = calloc(1, sizeof *cfg);
	if (!cfg)
		return NULL;
	cfg->network = -1;
	cfg->strict_limits = -1;
	cfg->provider = strdup("native");
	if (!cfg->provider) {
		free(cfg);
		return NULL;
	}
	return cfg;
}

void moat_config_free(struct moat_config *cfg)
{
	if (!cfg)
		return;
	char **strs[] = { &cfg->source, &cfg->provider, &cfg->e2b_api_key, &cfg->e2b_api_url,
			  &cfg->e2b_sandbox_url, &cfg->e2b_template, &cfg->daytona_api_url,
			  &cfg->daytona_api_key, &cfg->docker_path, &cfg->policy_path,
			  &cfg->rootfs_dir, &cfg->serve_json, &cfg->kv_store, &cfg->kv_quota };
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
		free(*strs[i]);
	for (size_t i = 0; i < cfg->images_count; i++) {
		free(cfg->images[i].key);
		free(cfg->images[i].value);
	}
	free(cfg->images);
	for (size_t i = 0; i < cfg->warnings_count; i++)
		free(cfg->warnings[i]);
	free(cfg->warnings);
	free(cfg);
}

/* "<source>: <pre><quoted name><post>" — names come from the file. */
static char *quoted(const char *s)
{
	struct moat_buf b = { 0 };
	moat_buf_append_quoted(&b, s ? s : "", s ? strlen(s) : 0, QUOTE_MAX);
	return moat_buf_take(&b);
}

static int key_error(struct moat_error *err, const char *source, const char *key,
		     const char *what)
{
	char *q = quoted(key);
	moat_error_set(err, MOAT_ERR_CONFIG, 0, "config %s: %s %s", source, q ? q : "(key)", what);
	free(q);
	return -1;
}

static int warn(struct moat_config *cfg, const char *source, const char *key, const char *what)
{
	char **w = realloc(cfg->warnings, (cfg->warnings_count + 1) * sizeof *w);
	if (!w)
		return -1;
	cfg->warnings = w;
	char *q = quoted(key);
	char *msg = NULL;
	if (!q || asprintf(&msg, "config %s: %s %s", source, q, what) < 0)
		msg = NULL;
	free(q);
	if (!msg)
		return -1;
	w[cfg->warnings_count++] = msg;
	return 0;
}

static int get_str(const cJSON *item, const char *source, char **out, struct moat_error *err)
{
	if (!cJSON_IsString(item) || !item->valuestring)
		return key_error(err, source, item->string, "must be a string");
	size_t len = strlen(item->valuestring);
	if (len == 0 || len > MAX_STR_BYTES)
		return key_error(err, source, item->string, "must be a non-empty string of at most 4096 bytes");
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)item->valuestring[i] < 0x20 || item->valuestring[i] == 0x7f)
			return key_error(err, source, item->string, "must not contain control characters");
	char *p = strdup(item->valuestring);
	if (!p)
		return moat_error_oom(err);
	free(*out);
	*out = p;
	return 0;
}

static int get_uint(const cJSON *item, const char *source, uint64_t max, uint64_t *out,
		    struct moat_error *err)
{
	double v = cJSON_IsNumber(item) ? item->valuedouble : NAN;
	if (!isfinite(v) || v < 1 || v > (double)max || (double)(uint64_t)v != v) {
		char what[96];
		snprintf(what, sizeof what, "must be an integer between 1 and %llu",
			 (unsigned long long)max);
		return key_error(err, source, item->string, what);
	}
	*out = (uint64_t)v;
	return 0;
}

static int get_bool(const cJSON *item, const char *source, int *out, struct moat_error *err)
{
	if (!cJSON_IsBool(item))
		return key_error(err, source, item->string, "must be true or false");
	*out = cJSON_IsTrue(item) ? 1 : 0;
	return 0;
}

/* Names that reach other programs' argv (image refs, templates, hosts):
 * [A-Za-z0-9] first, then [A-Za-z0-9._:/@-]. Never an option, never a shell word. */
static bool token_ok(const char *s, const char *extra)
{
	if (!s || !*s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
			   (*s >= '0' && *s <= '9')))
		return false;
	for (const char *p = s; *p; p++) {
		char c = *p;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '.' || c == '-' || c == '_')
			continue;
		if (!strchr(extra, c))
			return false;
	}
	return true;
}

static int get_images(struct moat_config *cfg, const cJSON *item, const char *source,
		      struct moat_error *err)
{
	if (!cJSON_IsObject(item))
		return key_error(err, source, item->string, "must be an object of language → image");
	for (const cJSON *c = item->child; c; c = c->next) {
		enum moat_language lang;
		if (!c->string || moat_lang_from_name(c->string, &lang) < 0)
			return key_error(err, source, c->string,
					 "in \"images\" is not a language (python, javascript, "
					 "typescript, bash, sh)");
		if (!cJSON_IsString(c) || !token_ok(c->valuestring, ":/@") ||
		    strlen(c->valuestring) > 255)
			return key_error(err, source, c->string,
					 "in \"images\" must be an image reference "
					 "([A-Za-z0-9][A-Za-z0-9._:/@-]*)");
		const char *canon = moat_lang_get(lang)->name;
		for (size_t i = 0; i < cfg->images_count; i++)
			if (!strcmp(cfg->images[i].key, canon))
				return key_error(err, source, c->string,
						 "in \"images\" names a language twice");
		struct moat_kv *n = realloc(cfg->images, (cfg->images_count + 1) * sizeof *n);
		if (!n)
			return moat_error_oom(err);
		cfg->images = n;
		n[cfg->images_count].key = strdup(canon);
		n[cfg->images_count].value = strdup(c->valuestring);
		n[cfg->images_count].value_len = strlen(c->valuestring);
		cfg->images_count++;
		if (!n[cfg->images_count - 1].key || !n[cfg->images_count - 1].value)
			return moat_error_oom(err);
	}
	return 0;
}

static int fill(struct moat_config *cfg, const cJSON *obj, const char *source,
		struct moat_error *err)
{
	for (const cJSON *it = obj->child; it; it = it->next) {
		const char *k = it->string ? it->string : "";
		for (const cJSON *o = obj->child; o != it; o = o->next)
			if (o->string && !strcmp(o->string, k))
				return key_error(err, source, k, "appears twice");
		int rc = 0;
		if (!strcmp(k, "provider")) {
			if (!cJSON_IsString(it))
				return key_error(err, source, k, "must be a string");
			size_t i = 0, n = sizeof PROVIDERS / sizeof PROVIDERS[0];
			while (i < n && strcmp(PROVIDERS[i], it->valuestring))
				i++;
			if (i == n) {
				char *q = quoted(it->valuestring);
				moat_error_set(err, MOAT_ERR_CONFIG, 0,
					       "config %s: unknown provider %s (native, docker, e2b, "
					       "daytona, none)", source, q ? q : "");
				free(q);
				return -1;
			}
			rc = get_str(it, source, &cfg->provider, err);
		} else if (!strcmp(k, "timeout")) {
			rc = get_uint(it, source, MAX_TIMEOUT_MS, &cfg->timeout_ms, err);
			/* milliseconds, where E2B and Daytona take seconds */
			char what[160];
			if (rc == 0 && cfg->timeout_ms < MOAT_TIMEOUT_UNIT_WARN_MS) {
				snprintf(what, sizeof what,
					 "%llu is in milliseconds (for %llu seconds, give %llu)",
					 (unsigned long long)cfg->timeout_ms,
					 (unsigned long long)cfg->timeout_ms,
					 (unsigned long long)cfg->timeout_ms * 1000);
				if (warn(cfg, source, k, what) < 0)
					return moat_error_oom(err);
			}
		} else if (!strcmp(k, "memoryMb")) {
			rc = get_uint(it, source, MAX_MEMORY_MB, &cfg->memory_mb, err);
		} else if (!strcmp(k, "cpus")) {
			if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
			    !(it->valuedouble > 0) || it->valuedouble > 1024)
				return key_error(err, source, k, "must be a number greater than 0 and at most 1024");
			cfg->cpus = it->valuedouble;
		} else if (!strcmp(k, "pidsLimit")) {
			rc = get_uint(it, source, MAX_PIDS, &cfg->pids_limit, err);
		} else if (!strcmp(k, "network")) {
			rc = get_bool(it, source, &cfg->network, err);
		} else if (!strcmp(k, "strictLimits")) {
			rc = get_bool(it, source, &cfg->strict_limits, err);
		} else if (!strcmp(k, "maxOutputBytes")) {
			rc = get_uint(it, source, MAX_OUTPUT_BYTES, &cfg->max_output_bytes, err);
		} else if (!strcmp(k, "e2bApiKey")) {
			rc = get_str(it, source, &cfg->e2b_api_key, err);
		} else if (!strcmp(k, "e2bApiUrl")) {
			rc = get_str(it, source, &cfg->e2b_api_url, err);
		} else if (!strcmp(k, "e2bSandboxUrl")) {
			rc = get_str(it, source, &cfg->e2b_sandbox_url, err);
		} else if (!strcmp(k, "e2bTemplate")) {
			rc = get_str(it, source, &cfg->e2b_template, err);
			if (rc == 0 && !token_ok(cfg->e2b_template, ""))
				return key_error(err, source, k, "must match [A-Za-z0-9][A-Za-z0-9._-]*");
		} else if (!strcmp(k, "daytonaApiUrl")) {
			rc = get_str(it, source, &cfg->daytona_api_url, err);
		} else if (!strcmp(k, "daytonaApiKey")) {
			rc = get_str(it, source, &cfg->daytona_api_key, err);
		} else if (!strcmp(k, "dockerPath")) {
			rc = get_str(it, source, &cfg->docker_path, err);
		} else if (!strcmp(k, "policy")) {
			rc = get_str(it, source, &cfg->policy_path, err);
		} else if (!strcmp(k, "rootfs")) {
			rc = get_str(it, source, &cfg->rootfs_dir, err);
		} else if (!strcmp(k, "images")) {
			rc = get_images(cfg, it, source, err);
		} else if (!strcmp(k, "strictIsolation")) {
			rc = get_bool(it, source, &cfg->strict_isolation, err);
		} else if (!strcmp(k, "kv")) {
			rc = get_str(it, source, &cfg->kv_store, err);
		} else if (!strcmp(k, "kvQuota")) {
			rc = get_str(it, source, &cfg->kv_quota, err);
		} else if (!strcmp(k, "serve")) {
			/* moat serve's limits: checked by the service (serve/limits.c) */
			free(cfg->serve_json);
			if (!(cfg->serve_json = cJSON_PrintUnformatted(it)))
				return moat_error_oom(err);
		} else if (warn(cfg, source, k, "is not a moat setting; ignored") < 0) {
			return moat_error_oom(err);
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* aistack fills DEFAULT_SANDBOX_CONFIG (src/sandbox/index.ts upstream) into every key
 * its "sandbox" object leaves out; a moat reading that object does the same, so the
 * limits it runs with are the ones aistack's users were promised. The provider's default
 * ("none") is set by the caller. */
static void aistack_defaults(struct moat_config *cfg)
{
	if (!cfg->timeout_ms)
		cfg->timeout_ms = MOAT_AISTACK_TIMEOUT_MS;
	if (!cfg->memory_mb)
		cfg->memory_mb = MOAT_AISTACK_MEMORY_MB;
	if (!(cfg->cpus > 0))
		cfg->cpus = MOAT_AISTACK_CPUS;
	if (!cfg->pids_limit)
		cfg->pids_limit = MOAT_AISTACK_PIDS;
	if (cfg->network < 0)
		cfg->network = 0;
}

int moat_config_parse(const char *buf, size_t len, bool aistack, const char *source,
		      struct moat_config **out, struct moat_error *err)
{
	*out = NULL;
	if (!source)
		source = "(text)";
	if (len > MAX_CONFIG_BYTES)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "config %s is larger than %u bytes",
				      source, MAX_CONFIG_BYTES);
	if (memchr(buf, '\0', len))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "config %s contains a NUL byte", source);
	cJSON *root = cJSON_ParseWithLength(buf, len);
	if (!root)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "config %s is not valid JSON", source);
	int rc = -1;
	struct moat_config *cfg = moat_config_new();
	if (!cfg || !(cfg->source = strdup(source))) {
		moat_error_oom(err);
		goto out;
	}
	cfg->from_aistack = aistack;
	if (!cJSON_IsObject(root)) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "config %s must be a JSON object", source);
		goto out;
	}
	const cJSON *obj = root;
	if (aistack) {
		/* aistack: nothing said about sandboxing means "none" (refuse). */
		free(cfg->provider);
		if (!(cfg->provider = strdup("none"))) {
			moat_error_oom(err);
			goto out;
		}
		obj = cJSON_GetObjectItemCaseSensitive(root, "sandbox");
		if (obj && !cJSON_IsObject(obj)) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "config %s: \"sandbox\" must be an object", source);
			goto out;
		}
	}
	if (obj && fill(cfg, obj, source, err) < 0)
		goto out;
	if (aistack)
		aistack_defaults(cfg);
	*out = cfg;
	cfg = NULL;
	rc = 0;
out:
	moat_config_free(cfg);
	cJSON_Delete(root);
	return rc;
}

/* 0: loaded; 1: absent (ENOENT) and optional; -1: error. */
static int load_file(const char *path, bool optional, struct moat_config **out,
		     struct moat_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (optional && (errno == ENOENT || errno == ENOTDIR))
			return 1;
		/* a search location inside a directory we may not enter (HOME
		 * still pointing at another user's home): nothing to read there.
		 * A file we can see but not read is an error. */
		if (optional && errno == EACCES) {
			char *dir = strdup(path);
			char *slash = dir ? strrchr(dir, '/') : NULL;
			bool hidden = false;
			if (slash && slash != dir) {
				*slash = '\0';
				hidden = access(dir, X_OK) < 0;
			}
			free(dir);
			if (hidden)
				return 1;
			errno = EACCES;
		}
		return moat_error_set(err, MOAT_ERR_CONFIG, errno, "cannot open config %s: %s",
				      path, strerror(errno));
	}
	struct moat_buf b = { 0 };
	char chunk[8192];
	int rc = -1;
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			moat_error_set(err, MOAT_ERR_CONFIG, errno, "cannot read config %s: %s", path,
				       strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		moat_buf_append(&b, chunk, (size_t)n);
		if (b.len > MAX_CONFIG_BYTES) {
			moat_error_set(err, MOAT_ERR_CONFIG, 0, "config %s is larger than %u bytes",
				       path, MAX_CONFIG_BYTES);
			goto out;
		}
	}
	if (b.oom) {
		moat_error_oom(err);
		goto out;
	}
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	rc = moat_config_parse(b.data ? b.data : "", b.len,
			       !strcmp(base, "aistack.config.json"), path, out, err);
out:
	moat_buf_free(&b);
	close(fd);
	return rc;
}

int moat_config_load(const char *explicit_path, struct moat_config **out, struct moat_error *err)
{
	*out = NULL;
	if (explicit_path)
		return load_file(explicit_path, false, out, err) < 0 ? -1 : 0;
	const char *env = getenv("MOAT_CONFIG");
	if (env && *env)
		return load_file(env, false, out, err) < 0 ? -1 : 0;
	char *home_cfg = NULL;
	const char *home = getenv("HOME");
	if (home && *home == '/' && asprintf(&home_cfg, "%s/.config/moat/config.json", home) < 0)
		home_cfg = NULL;
	const char *paths[] = { "moat.json", "aistack.config.json", home_cfg,
				"/etc/moat/config.json" };
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		if (!paths[i])
			continue;
		int rc = load_file(paths[i], true, out, err);
		if (rc <= 0) {
			free(home_cfg);
			return rc;
		}
	}
	free(home_cfg);
	if (!(*out = moat_config_new()))
		return moat_error_oom(err);
	return 0;
}

void moat_config_apply(const struct moat_config *cfg, struct moat_request *req, unsigned given)
{
	if (!cfg || !req)
		return;
	if (!(given & MOAT_REQ_HAS_TIMEOUT) && cfg->timeout_ms)
		req->timeout_ms = cfg->timeout_ms;
	if (!(given & MOAT_REQ_HAS_MEMORY) && cfg->memory_mb)
		req->memory_mb = cfg->memory_mb;
	if (!(given & MOAT_REQ_HAS_CPUS) && cfg->cpus > 0)
		req->cpus = cfg->cpus;
	if (!(given & MOAT_REQ_HAS_PIDS) && cfg->pids_limit)
		req->pids_limit = cfg->pids_limit;
	if (!(given & MOAT_REQ_HAS_NETWORK) && cfg->network >= 0)
		req->network = cfg->network == 1;
	if (!(given & MOAT_REQ_HAS_STRICT) && cfg->strict_limits >= 0)
		req->strict_limits = cfg->strict_limits == 1;
	if (!(given & MOAT_REQ_HAS_MAXOUT) && cfg->max_output_bytes)
		req->max_output_bytes = cfg->max_output_bytes;
}

unsigned moat_config_request_keys(const char *json, size_t len)
{
	static const struct { const char *key; unsigned bit; } keys[] = {
		{ "timeout", MOAT_REQ_HAS_TIMEOUT }, { "memoryMb", MOAT_REQ_HAS_MEMORY },
		{ "cpus", MOAT_REQ_HAS_CPUS }, { "pidsLimit", MOAT_REQ_HAS_PIDS },
		{ "network", MOAT_REQ_HAS_NETWORK }, { "strictLimits", MOAT_REQ_HAS_STRICT },
		{ "maxOutputBytes", MOAT_REQ_HAS_MAXOUT },
	};
	unsigned given = 0;
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return 0;
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (cJSON_GetObjectItemCaseSensitive(root, keys[i].key))
			given |= keys[i].bit;
	cJSON_Delete(root);
	return given;
}

const char *moat_config_image(const struct moat_config *cfg, const char *language)
{
	if (!cfg)
		return NULL;
	for (size_t i = 0; i < cfg->images_count; i++)
		if (!strcmp(cfg->images[i].key, language))
			return cfg->images[i].value;
	return NULL;
}

const char *moat_config_provider(const struct moat_config *cfg)
{
	return cfg && cfg->provider ? cfg->provider : "native";
}

const char *moat_config_kv_store(const struct moat_config *cfg)
{
	return cfg ? cfg->kv_store : NULL;
}

const char *moat_config_kv_quota(const struct moat_config *cfg)
{
	return cfg ? cfg->kv_quota : NULL;
}
