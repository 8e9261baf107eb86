/* Requests: defaults, the JSON parser and the semantic rules shared by the
 * parser and by requests built in code (the CLI). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"

#define MAX_TIMEOUT_MS (24ull * 60 * 60 * 1000)
#define MAX_ENV_COUNT 1024u
#define MAX_ENV_BYTES (1024u * 1024u)
#define MAX_FILES_COUNT 1000u
#define MAX_FILES_BYTES (64u * 1024u * 1024u)
#define MAX_STDIN_BYTES (64u * 1024u * 1024u)
#define MAX_MEMORY_MB 1048576u
#define MAX_CPUS 1024.0
#define MAX_PIDS 4194304u
#define MAX_OUTPUT_BYTES (1024u * 1024u * 1024u)
#define MAX_DEPTH 32u
#define MSG_QUOTE_MAX 100u

#define LANG_NAMES "python, javascript, typescript, bash, sh (aliases: py, python3, js, node, ts, shell)"
#define KEY_NAMES "code, language, timeout, env, files, stdin, network, memoryMb, cpus, " \
	"pidsLimit, strictLimits, maxOutputBytes, allowedHosts, allowedCidrs, outputs, " \
	"sandboxId, kvEnabled, argv"

/* Defined in buf.c (proposed for core.h). */

struct moat_request *moat_request_new(void)
{
	struct moat_request *req = calloc(1, sizeof *req);
	if (!req)
		return NULL;
	req->language = MOAT_LANG_PYTHON;
	req->timeout_ms = MOAT_DEFAULT_TIMEOUT_MS;
	req->max_output_bytes = MOAT_DEFAULT_OUTPUT_CAP;
	return req;
}

static void free_strs(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void free_kvs(struct moat_kv *kv, size_t n)
{
	if (!kv)
		return;
	for (size_t i = 0; i < n; i++) {
		free(kv[i].key);
		free(kv[i].value);
	}
	free(kv);
}

void moat_request_free(struct moat_request *req)
{
	if (!req)
		return;
	free(req->code);
	if (req->argv) {
		for (size_t i = 0; i < req->argc; i++)
			free(req->argv[i]);
		free(req->argv);
	}
	free_kvs(req->env, req->env_count);
	free_kvs(req->files, req->files_count);
	free(req->stdin_data);
	free_strs(req->allowed_hosts, req->allowed_hosts_count);
	free_strs(req->allowed_cidrs, req->allowed_cidrs_count);
	free_strs(req->outputs, req->outputs_count);
	free(req->sandbox_id);
	free(req);
}

/* ---- messages ---- */

/* Sets "<pre><quoted name><post>": names come from untrusted input, so they
 * are escaped and cut at MSG_QUOTE_MAX bytes. */
static int named_error(struct moat_error *err, enum moat_error_type type, const char *pre,
		       const char *name, size_t len, const char *post)
{
	struct moat_buf b = { 0 };
	moat_buf_append_quoted(&b, name ? name : "", name ? len : 0, MSG_QUOTE_MAX);
	char *q = moat_buf_take(&b);
	moat_error_set(err, type, 0, "%s%s%s", pre, q ? q : "(name unavailable)", post);
	free(q);
	return -1;
}

/* ---- semantic rules ---- */

static int cmp_env(const void *pa, const void *pb)
{
	const struct moat_kv *a = *(const struct moat_kv *const *)pa;
	const struct moat_kv *b = *(const struct moat_kv *const *)pb;
	return strcmp(a->key, b->key);
}

/* Byte order, except that '/' sorts before every other byte. */
static int cmp_path(const void *pa, const void *pb)
{
	const unsigned char *a = (const unsigned char *)(*(const struct moat_kv *const *)pa)->key;
	const unsigned char *b = (const unsigned char *)(*(const struct moat_kv *const *)pb)->key;
	while (*a && *a == *b) {
		a++;
		b++;
	}
	int ca = *a == '/' ? 1 : *a == 0 ? 0 : *a + 1;
	int cb = *b == '/' ? 1 : *b == 0 ? 0 : *b + 1;
	return ca - cb;
}

/* An array of pointers to kv[0..n) sorted with cmp; NULL on OOM. */
static const struct moat_kv **sort_kvs(const struct moat_kv *kv, size_t n,
				       int (*cmp)(const void *, const void *))
{
	const struct moat_kv **p = calloc(n ? n : 1, sizeof *p);
	if (!p)
		return NULL;
	for (size_t i = 0; i < n; i++)
		p[i] = &kv[i];
	qsort(p, n, sizeof *p, cmp);
	return p;
}

static int check_env(const struct moat_request *req, struct moat_error *err)
{
	if (req->env_count == 0)
		return 0;
	if (!req->env)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "env: %zu entries but no array",
				      req->env_count);
	if (req->env_count > MAX_ENV_COUNT)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "too many env entries: %zu (max %u)", req->env_count,
				      MAX_ENV_COUNT);
	size_t total = 0;
	for (size_t i = 0; i < req->env_count; i++) {
		const struct moat_kv *kv = &req->env[i];
		if (!kv->key)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0, "env entry %zu has no name", i);
		size_t klen = strlen(kv->key);
		if (!moat_env_name_valid(kv->key, klen))
			return named_error(err, MOAT_ERR_POLICY, "invalid env name ", kv->key, klen,
					   " (names must match ^[A-Za-z_][A-Za-z0-9_]*$)");
		if (!kv->value && kv->value_len)
			return named_error(err, MOAT_ERR_CONFIG, "env ", kv->key, klen, " has no value");
		if (kv->value_len && memchr(kv->value, '\0', kv->value_len))
			return named_error(err, MOAT_ERR_POLICY,
					   "NUL characters are not allowed (in env ", kv->key, klen, ")");
		/* NAME=VALUE\0; each term is bounded, so only the sum can grow. */
		if (kv->value_len > MAX_ENV_BYTES || klen > MAX_ENV_BYTES)
			total = (size_t)MAX_ENV_BYTES + 1;
		else
			total += klen + kv->value_len + 2;
		if (total > MAX_ENV_BYTES)
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "env is too large: more than %u bytes", MAX_ENV_BYTES);
	}
	const struct moat_kv **sorted = sort_kvs(req->env, req->env_count, cmp_env);
	if (!sorted)
		return moat_error_oom(err);
	int rc = 0;
	for (size_t i = 1; i < req->env_count && rc == 0; i++)
		if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0)
			rc = named_error(err, MOAT_ERR_CONFIG, "duplicate env name ", sorted[i]->key,
					 strlen(sorted[i]->key), "");
	free(sorted);
	return rc;
}

/* "a" and "a/b": a file cannot also be a directory. */
static bool is_dir_prefix(const char *dir, size_t dlen, const char *path, size_t plen)
{
	return plen > dlen && path[dlen] == '/' && memcmp(dir, path, dlen) == 0;
}

static int conflict_error(struct moat_error *err, const char *dir, size_t dlen,
			  const char *sub, size_t slen)
{
	struct moat_buf b1 = { 0 }, b2 = { 0 };
	moat_buf_append_quoted(&b1, dir, dlen, MSG_QUOTE_MAX);
	moat_buf_append_quoted(&b2, sub, slen, MSG_QUOTE_MAX);
	char *q1 = moat_buf_take(&b1), *q2 = moat_buf_take(&b2);
	if (q1 && q2)
		moat_error_set(err, MOAT_ERR_POLICY, 0,
			       "file path %s conflicts with %s (a file cannot also be a directory)",
			       q1, q2);
	else
		moat_error_set(err, MOAT_ERR_POLICY, 0,
			       "file paths conflict (a file cannot also be a directory)");
	free(q1);
	free(q2);
	return -1;
}

static int check_files(const struct moat_request *req, struct moat_error *err)
{
	if (req->files_count == 0)
		return 0;
	if (!req->files)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "files: %zu entries but no array",
				      req->files_count);
	if (req->files_count > MAX_FILES_COUNT)
		return moat_error_set(err, MOAT_ERR_POLICY, 0, "too many files: %zu (max %u)",
				      req->files_count, MAX_FILES_COUNT);
	/* an argv request has no code file: main.<ext> is free */
	const struct moat_lang_info *lang = req->argc ? NULL : moat_lang_get(req->language);
	size_t total = 0;
	for (size_t i = 0; i < req->files_count; i++) {
		const struct moat_kv *kv = &req->files[i];
		if (!kv->key)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0, "file entry %zu has no path", i);
		size_t klen = strlen(kv->key);
		if (moat_path_check_relative(kv->key, klen, err) < 0)
			return -1;
		if (strncmp(kv->key, ".moat", 5) == 0)
			return named_error(err, MOAT_ERR_POLICY, "file path ", kv->key, klen,
					   " is reserved (names starting with \".moat\" belong to moat)");
		if (lang && strncmp(kv->key, "main.", 5) == 0 && strcmp(kv->key + 5, lang->ext) == 0)
			return named_error(err, MOAT_ERR_POLICY, "file path ", kv->key, klen,
					   " is reserved for the request's code");
		if (!kv->value && kv->value_len)
			return named_error(err, MOAT_ERR_CONFIG, "file ", kv->key, klen, " has no content");
		if (kv->value_len > MAX_FILES_BYTES)
			total = (size_t)MAX_FILES_BYTES + 1;
		else
			total += kv->value_len;
		if (total > MAX_FILES_BYTES)
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "files are too large: more than %u bytes in total",
					      MAX_FILES_BYTES);
	}
	/* Sorted with '/' first, every path under "a/" directly follows "a", so
	 * duplicates and file/directory conflicts are adjacent. */
	const struct moat_kv **sorted = sort_kvs(req->files, req->files_count, cmp_path);
	if (!sorted)
		return moat_error_oom(err);
	int rc = 0;
	for (size_t i = 1; i < req->files_count && rc == 0; i++) {
		const char *a = sorted[i - 1]->key, *b = sorted[i]->key;
		size_t alen = strlen(a), blen = strlen(b);
		if (alen == blen && memcmp(a, b, alen) == 0)
			rc = named_error(err, MOAT_ERR_CONFIG, "duplicate file path ", b, blen, "");
		else if (is_dir_prefix(a, alen, b, blen))
			rc = conflict_error(err, a, alen, b, blen);
	}
	free(sorted);
	return rc;
}

static int range_error_u64(struct moat_error *err, const char *key, uint64_t min, uint64_t max,
			   uint64_t got)
{
	return moat_error_set(err, MOAT_ERR_CONFIG, 0,
			      "\"%s\" must be between %" PRIu64 " and %" PRIu64 ", got %" PRIu64,
			      key, min, max, got);
}

static int cpus_error(struct moat_error *err, double got)
{
	return moat_error_set(err, MOAT_ERR_CONFIG, 0,
			      "\"cpus\" must be greater than 0 and at most 1024, got %.15g", got);
}

/* "outputs" patterns: relative, no ".." component, no NUL, bounded. */
static int check_outputs(const struct moat_request *req, struct moat_error *err)
{
	if (req->outputs_count > MOAT_MAX_OUTPUT_PATTERNS)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "too many \"outputs\" patterns: %zu (max %u)", req->outputs_count,
				      MOAT_MAX_OUTPUT_PATTERNS);
	for (size_t i = 0; i < req->outputs_count; i++) {
		const char *p = req->outputs[i];
		size_t len = p ? strlen(p) : 0;
		bool dotdot = false;
		for (const char *c = p; c && *c;) {
			size_t n = strcspn(c, "/");
			if (n == 2 && c[0] == '.' && c[1] == '.')
				dotdot = true;
			c += n;
			if (*c == '/')
				c++;
		}
		if (!p || len == 0 || len > 1024 || p[0] == '/' || dotdot)
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "\"outputs\" entry %zu must be a non-empty pattern relative "
					      "to /sandbox without \"..\" (at most 1024 bytes)", i);
	}
	return 0;
}

/* The argv form: 1..MOAT_MAX_ARGC entries, argv[0] non-empty, each entry
 * within the kernel's limit for one argument, all of them within
 * MOAT_MAX_ARGV_BYTES; never together with code. (A C string holds no NUL;
 * the JSON parser refuses the \u0000 escape.) */
static int check_argv(const struct moat_request *req, struct moat_error *err)
{
	if (req->code)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"code\" and \"argv\" are exclusive: give the program as "
				      "code in a language, or as a command line");
	if (!req->argv)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "argv: %zu entries but no array",
				      req->argc);
	if (req->argc > MOAT_MAX_ARGC)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "too many \"argv\" entries: %zu (max %u)", req->argc,
				      MOAT_MAX_ARGC);
	size_t total = 0;
	for (size_t i = 0; i < req->argc; i++) {
		if (!req->argv[i])
			return moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"argv\" entry %zu is missing",
					      i);
		size_t len = strlen(req->argv[i]);
		if (len > MOAT_MAX_ARG_BYTES)
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "\"argv\" entry %zu is too long: %zu bytes (max %u, "
					      "the kernel's limit for one argument)", i, len,
					      MOAT_MAX_ARG_BYTES);
		total += len + 1; /* each term is bounded: the sum cannot wrap */
		if (total > MOAT_MAX_ARGV_BYTES)
			return moat_error_set(err, MOAT_ERR_POLICY, 0,
					      "\"argv\" is too large: more than %u bytes",
					      MOAT_MAX_ARGV_BYTES);
	}
	if (!req->argv[0][0])
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"argv\"[0], the program, must not be empty");
	return 0;
}

int moat_request_check(const struct moat_request *req, struct moat_error *err)
{
	if (!req)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "no request");
	if (req->argc || req->argv) {
		if (!req->argc)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "\"argv\" must have at least one entry, the program");
		if (check_argv(req, err) < 0)
			return -1;
	} else if (!req->code) {
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "missing required key \"code\"");
	}
	if (req->code_len > MOAT_MAX_CODE_BYTES)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "\"code\" is too large: %zu bytes (max %u)", req->code_len,
				      MOAT_MAX_CODE_BYTES);
	if (!req->argc && !moat_lang_get(req->language))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "invalid language (%d); accepted: "
				      LANG_NAMES, (int)req->language);
	if (req->timeout_ms == 0 || req->timeout_ms > MAX_TIMEOUT_MS)
		return range_error_u64(err, "timeout", 1, MAX_TIMEOUT_MS, req->timeout_ms);
	if (check_env(req, err) < 0 || check_files(req, err) < 0)
		return -1;
	if (!req->stdin_data && req->stdin_len)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"stdin\" has a length but no data");
	if (req->stdin_len > MAX_STDIN_BYTES)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "\"stdin\" is too large: %zu bytes (max %u)", req->stdin_len,
				      MAX_STDIN_BYTES);
	if (req->memory_mb > MAX_MEMORY_MB) /* 0: not requested */
		return range_error_u64(err, "memoryMb", 1, MAX_MEMORY_MB, req->memory_mb);
	if (isnan(req->cpus) || req->cpus < 0 || req->cpus > MAX_CPUS)
		return cpus_error(err, req->cpus);
	if (req->pids_limit > MAX_PIDS)
		return range_error_u64(err, "pidsLimit", 1, MAX_PIDS, req->pids_limit);
	if (req->max_output_bytes == 0 || req->max_output_bytes > MAX_OUTPUT_BYTES)
		return range_error_u64(err, "maxOutputBytes", 1, MAX_OUTPUT_BYTES,
				       req->max_output_bytes);
	if (req->sandbox_id && !moat_sandbox_id_valid(req->sandbox_id, req->sandbox_id_len))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"sandboxId\" must be 1 to %u bytes of UTF-8 without NUL "
				      "(it has %zu bytes)", MOAT_MAX_SANDBOX_ID, req->sandbox_id_len);
	if (req->kv_enabled && !req->sandbox_id)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"kvEnabled\" needs a \"sandboxId\": the store is scoped to it");
	/* network, allowedHosts, allowedCidrs: their rules live with the
	 * network (moat_request_validate, runner/validate.c, adds them) */
	return check_outputs(req, err);
}

/* ---- JSON ---- */

static bool is_json_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* What the raw-text scan found: cJSON decodes "\u0000" into a C string and
 * silently truncates it, so it must be caught in the text. */
struct scan {
	bool nul_escape;
	bool nul_in_key;      /* inside a top-level key */
	const char *key;      /* raw text of the enclosing top-level key, or NULL */
	size_t key_len;
};

/* Rejects raw NUL bytes and nesting deeper than MAX_DEPTH; finds the first
 * \u0000 escape. Tolerates malformed text (cJSON reports that afterwards). */
static int prescan(const char *buf, size_t len, struct scan *sc, struct moat_error *err)
{
	const char *nul = memchr(buf, '\0', len);
	if (nul)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "request contains a NUL byte at byte offset %zu",
				      (size_t)(nul - buf));
	size_t depth = 0;
	bool in_string = false, top_object = false, expect_key = false, string_is_key = false;
	const char *key = NULL, *key_start = NULL;
	size_t key_len = 0;

	memset(sc, 0, sizeof *sc);
	for (size_t i = 0; i < len; i++) {
		char c = buf[i];
		if (in_string) {
			if (c == '\\' && i + 1 < len) {
				if (buf[i + 1] == 'u' && !sc->nul_escape && len - i >= 6 &&
				    memcmp(buf + i + 2, "0000", 4) == 0) {
					sc->nul_escape = true;
					sc->nul_in_key = string_is_key;
					sc->key = string_is_key || depth == 0 ? NULL : key;
					sc->key_len = key_len;
				}
				i++; /* the escaped character cannot end the string */
			} else if (c == '"') {
				in_string = false;
				if (string_is_key) {
					key = key_start;
					key_len = (size_t)(buf + i - key_start);
				}
			}
			continue;
		}
		switch (c) {
		case '"':
			in_string = true;
			string_is_key = depth == 1 && top_object && expect_key;
			key_start = buf + i + 1;
			break;
		case '{':
		case '[':
			if (++depth > MAX_DEPTH)
				return moat_error_set(err, MOAT_ERR_CONFIG, 0,
						      "request nests deeper than %u levels "
						      "(at byte offset %zu)", MAX_DEPTH, i);
			if (depth == 1) {
				top_object = c == '{';
				expect_key = top_object;
			}
			break;
		case '}':
		case ']':
			if (depth > 0)
				depth--;
			break;
		case ':':
			if (depth == 1)
				expect_key = false;
			break;
		case ',':
			if (depth == 1)
				expect_key = top_object;
			break;
		default:
			break;
		}
	}
	return 0;
}

int moat_json_prescan(const char *buf, size_t len, bool *nul_escape, struct moat_error *err)
{
	struct scan sc;
	if (prescan(buf, len, &sc, err) < 0)
		return -1;
	*nul_escape = sc.nul_escape;
	return 0;
}

static const char *json_type_name(const cJSON *item)
{
	if (cJSON_IsNull(item))
		return "null";
	if (cJSON_IsBool(item))
		return "a boolean";
	if (cJSON_IsNumber(item))
		return "a number";
	if (cJSON_IsString(item))
		return "a string";
	if (cJSON_IsArray(item))
		return "an array";
	if (cJSON_IsObject(item))
		return "an object";
	return "an invalid value";
}

static int type_error(struct moat_error *err, const char *key, const char *want,
		      const cJSON *item)
{
	return moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"%s\" must be %s, got %s", key, want,
			      json_type_name(item));
}

static char *dup_bytes(const char *s, size_t len)
{
	char *p = malloc(len + 1);
	if (p) {
		memcpy(p, s, len);
		p[len] = '\0';
	}
	return p;
}

static int get_string(const cJSON *item, const char *key, char **out, size_t *out_len,
		      struct moat_error *err)
{
	if (!cJSON_IsString(item) || !item->valuestring)
		return type_error(err, key, "a string", item);
	size_t len = strlen(item->valuestring); /* no NUL inside: see prescan */
	char *p = dup_bytes(item->valuestring, len);
	if (!p)
		return moat_error_oom(err);
	free(*out);
	*out = p;
	*out_len = len;
	return 0;
}

static int get_bool(const cJSON *item, const char *key, bool *out, struct moat_error *err)
{
	if (!cJSON_IsBool(item))
		return type_error(err, key, "a boolean", item);
	*out = cJSON_IsTrue(item);
	return 0;
}

/* A JSON number that must be an integer in [min, max]. */
static int get_uint(const cJSON *item, const char *key, uint64_t min, uint64_t max,
		    uint64_t *out, struct moat_error *err)
{
	if (!cJSON_IsNumber(item))
		return type_error(err, key, "an integer", item);
	double v = item->valuedouble;
	if (!isfinite(v))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"%s\" must be a finite number", key);
	if (v < (double)min || v > (double)max)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"%s\" must be between %" PRIu64 " and %" PRIu64
				      ", got %.15g", key, min, max, v);
	uint64_t u = (uint64_t)v;
	if ((double)u != v)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"%s\" must be an integer, got %.15g", key, v);
	*out = u;
	return 0;
}

/* env / files: a JSON object of strings, kept in document order. Names are
 * checked by moat_request_check (duplicates included). */
static int get_kvs(const cJSON *item, const char *key, size_t max_count, const char *what,
		   struct moat_kv **out, size_t *out_count, struct moat_error *err)
{
	if (!cJSON_IsObject(item))
		return type_error(err, key, "an object of strings", item);
	size_t n = 0;
	for (const cJSON *c = item->child; c; c = c->next)
		n++;
	if (n > max_count)
		return moat_error_set(err, MOAT_ERR_POLICY, 0, "too many %s: %zu (max %zu)", what,
				      n, max_count);
	if (n == 0)
		return 0;
	struct moat_kv *kv = calloc(n, sizeof *kv);
	if (!kv)
		return moat_error_oom(err);
	*out = kv;
	for (const cJSON *c = item->child; c; c = c->next) {
		const char *name = c->string ? c->string : "";
		size_t nlen = strlen(name);
		if (!cJSON_IsString(c) || !c->valuestring) {
			struct moat_buf b = { 0 };
			moat_buf_append_quoted(&b, name, nlen, MSG_QUOTE_MAX);
			char *q = moat_buf_take(&b);
			moat_error_set(err, MOAT_ERR_CONFIG, 0, "\"%s\" entry %s must be a string, got %s",
				       key, q ? q : "(name unavailable)", json_type_name(c));
			free(q);
			return -1;
		}
		struct moat_kv *e = &kv[*out_count];
		e->key = dup_bytes(name, nlen);
		e->value_len = strlen(c->valuestring);
		e->value = dup_bytes(c->valuestring, e->value_len);
		(*out_count)++;
		if (!e->key || !e->value)
			return moat_error_oom(err);
	}
	return 0;
}

/* allowedHosts / allowedCidrs: an array of strings (each checked later by
 * moat_net_validate). */
static int get_strs(const cJSON *item, const char *key, char ***out, size_t *out_count,
		    struct moat_error *err)
{
	if (!cJSON_IsArray(item))
		return type_error(err, key, "an array of strings", item);
	size_t n = 0;
	for (const cJSON *c = item->child; c; c = c->next)
		n++;
	if (n > MOAT_MAX_LIST_ENTRIES)
		return moat_error_set(err, MOAT_ERR_POLICY, 0, "too many \"%s\" entries: %zu (max %u)",
				      key, n, MOAT_MAX_LIST_ENTRIES);
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		return moat_error_oom(err);
	free_strs(*out, *out_count);
	*out = v;
	*out_count = 0;
	size_t i = 0;
	for (const cJSON *c = item->child; c; c = c->next, i++) {
		if (!cJSON_IsString(c) || !c->valuestring)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "\"%s\" entry %zu must be a string, got %s", key, i,
					      json_type_name(c));
		v[i] = dup_bytes(c->valuestring, strlen(c->valuestring));
		if (!v[i])
			return moat_error_oom(err);
		(*out_count)++;
	}
	return 0;
}

/* "argv": an array of 1..MOAT_MAX_ARGC strings (their sizes are checked by
 * moat_request_check). */
static int get_argv(const cJSON *item, struct moat_request *req, struct moat_error *err)
{
	if (!cJSON_IsArray(item))
		return type_error(err, "argv", "an array of strings", item);
	size_t n = 0;
	for (const cJSON *c = item->child; c; c = c->next)
		n++;
	if (n == 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"argv\" must have at least one entry, the program");
	if (n > MOAT_MAX_ARGC)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "too many \"argv\" entries: %zu (max %u)", n, MOAT_MAX_ARGC);
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		return moat_error_oom(err);
	req->argv = v;
	size_t i = 0;
	for (const cJSON *c = item->child; c; c = c->next, i++) {
		if (!cJSON_IsString(c) || !c->valuestring)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "\"argv\" entry %zu must be a string, got %s", i,
					      json_type_name(c));
		/* no NUL inside: see prescan */
		if (!(v[i] = dup_bytes(c->valuestring, strlen(c->valuestring))))
			return moat_error_oom(err);
		req->argc++;
	}
	return 0;
}

enum req_key {
	K_CODE, K_LANGUAGE, K_TIMEOUT, K_ENV, K_FILES, K_STDIN, K_NETWORK, K_MEMORY, K_CPUS,
	K_PIDS, K_STRICT, K_MAXOUT, K_ALLOWED_HOSTS, K_ALLOWED_CIDRS, K_OUTPUTS, K_SANDBOX_ID,
	K_KV, K_ARGV, K__COUNT,
};

static const char *const key_names[K__COUNT] = {
	[K_CODE] = "code", [K_LANGUAGE] = "language", [K_TIMEOUT] = "timeout",
	[K_ENV] = "env", [K_FILES] = "files", [K_STDIN] = "stdin", [K_NETWORK] = "network",
	[K_MEMORY] = "memoryMb", [K_CPUS] = "cpus", [K_PIDS] = "pidsLimit",
	[K_STRICT] = "strictLimits", [K_MAXOUT] = "maxOutputBytes",
	[K_ALLOWED_HOSTS] = "allowedHosts", [K_ALLOWED_CIDRS] = "allowedCidrs",
	[K_OUTPUTS] = "outputs", [K_SANDBOX_ID] = "sandboxId", [K_KV] = "kvEnabled",
	[K_ARGV] = "argv",
};

static int fill_request(const cJSON *root, const char *header_id, bool check,
			struct moat_request *req,
			struct moat_error *err)
{
	bool seen[K__COUNT] = { false };

	for (const cJSON *item = root->child; item; item = item->next) {
		const char *name = item->string ? item->string : "";
		size_t nlen = strlen(name);
		int k = 0;
		while (k < K__COUNT && strcmp(name, key_names[k]) != 0)
			k++;
		if (k == K__COUNT)
			return named_error(err, MOAT_ERR_CONFIG, "unknown key ", name, nlen,
					   " (accepted: " KEY_NAMES ")");
		if (seen[k])
			return named_error(err, MOAT_ERR_CONFIG, "duplicate key ", name, nlen, "");
		seen[k] = true;

		int rc = 0;
		switch ((enum req_key)k) {
		case K_CODE:
			rc = get_string(item, name, &req->code, &req->code_len, err);
			break;
		case K_LANGUAGE:
			if (!cJSON_IsString(item) || !item->valuestring)
				return type_error(err, name, "a string", item);
			if (moat_lang_from_name(item->valuestring, &req->language) < 0)
				return named_error(err, MOAT_ERR_CONFIG, "unknown language ",
						   item->valuestring, strlen(item->valuestring),
						   "; accepted: " LANG_NAMES);
			break;
		case K_TIMEOUT:
			rc = get_uint(item, name, 1, MAX_TIMEOUT_MS, &req->timeout_ms, err);
			req->timeout_from_json = true;
			break;
		case K_ENV:
			rc = get_kvs(item, name, MAX_ENV_COUNT, "env entries", &req->env,
				     &req->env_count, err);
			break;
		case K_FILES:
			rc = get_kvs(item, name, MAX_FILES_COUNT, "files", &req->files,
				     &req->files_count, err);
			break;
		case K_STDIN:
			rc = get_string(item, name, &req->stdin_data, &req->stdin_len, err);
			break;
		case K_NETWORK:
			rc = get_bool(item, name, &req->network, err);
			break;
		case K_MEMORY:
			rc = get_uint(item, name, 1, MAX_MEMORY_MB, &req->memory_mb, err);
			break;
		case K_CPUS:
			if (!cJSON_IsNumber(item))
				return type_error(err, name, "a number", item);
			if (!isfinite(item->valuedouble))
				return moat_error_set(err, MOAT_ERR_CONFIG, 0,
						      "\"cpus\" must be a finite number");
			if (!(item->valuedouble > 0) || item->valuedouble > MAX_CPUS)
				return cpus_error(err, item->valuedouble);
			req->cpus = item->valuedouble;
			break;
		case K_PIDS:
			rc = get_uint(item, name, 1, MAX_PIDS, &req->pids_limit, err);
			break;
		case K_STRICT:
			rc = get_bool(item, name, &req->strict_limits, err);
			break;
		case K_MAXOUT:
			rc = get_uint(item, name, 1, MAX_OUTPUT_BYTES, &req->max_output_bytes, err);
			break;
		case K_ALLOWED_HOSTS:
			req->has_allowed_hosts = true;
			rc = get_strs(item, name, &req->allowed_hosts, &req->allowed_hosts_count, err);
			break;
		case K_ALLOWED_CIDRS:
			rc = get_strs(item, name, &req->allowed_cidrs, &req->allowed_cidrs_count, err);
			break;
		case K_OUTPUTS:
			rc = get_strs(item, name, &req->outputs, &req->outputs_count, err);
			break;
		case K_SANDBOX_ID:
			rc = get_string(item, name, &req->sandbox_id, &req->sandbox_id_len, err);
			break;
		case K_KV:
			rc = get_bool(item, name, &req->kv_enabled, err);
			break;
		case K_ARGV:
			rc = get_argv(item, req, err);
			break;
		case K__COUNT:
			break;
		}
		if (rc < 0)
			return -1;
	}
	if (seen[K_ARGV] && seen[K_CODE])
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"code\" and \"argv\" are exclusive: give the program as "
				      "code in a language, or as a command line");
	/* an argv request names its program itself: a language would be
	 * silently meaningless, so it is refused */
	if (seen[K_ARGV] && seen[K_LANGUAGE])
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "\"language\" applies to \"code\"; an \"argv\" request names "
				      "its program itself");
	if (!seen[K_CODE] && !seen[K_ARGV])
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "missing required key \"code\"");
	/* "language" is optional and defaults to "python", as in the aistack
	 * contract (moat_request_new set it). */
	if (header_id && req->sandbox_id) {
		if (moat_sandbox_id_agree(header_id, req->sandbox_id, req->sandbox_id_len,
					  "the request's \"sandboxId\"", err) < 0)
			return -1;
	} else if (header_id) {
		if (!(req->sandbox_id = strdup(header_id)))
			return moat_error_oom(err);
		req->sandbox_id_len = strlen(header_id);
	}
	return check ? moat_request_check(req, err) : 0;
}

int moat_request_parse(const char *buf, size_t len, struct moat_request **out,
		       struct moat_error *err)
{
	return moat_request_parse_id(buf, len, NULL, out, err);
}

static int parse_request(const char *buf, size_t len, const char *header_id, bool check,
			 struct moat_request **out, struct moat_error *err);

bool moat_sandbox_id_valid(const char *id, size_t len)
{
	return id && len >= 1 && len <= MOAT_MAX_SANDBOX_ID && moat_utf8_text(id, len);
}

int moat_sandbox_id_agree(const char *header_id, const char *id, size_t id_len,
			  const char *where, struct moat_error *err)
{
	if (!header_id || !id)
		return 0;
	if (strlen(header_id) == id_len && !memcmp(header_id, id, id_len))
		return 0;
	return moat_error_set(err, MOAT_ERR_CONFIG, 0,
			      "the X-Sandbox-Id header and %s name different sandboxes (give the "
			      "id once, or the same in both)",
			      where);
}

int moat_request_parse_id(const char *buf, size_t len, const char *header_id,
			  struct moat_request **out, struct moat_error *err)
{
	return parse_request(buf, len, header_id, true, out, err);
}

int moat_request_decode(const char *buf, size_t len, const char *header_id,
			struct moat_request **out, struct moat_error *err)
{
	return parse_request(buf, len, header_id, false, out, err);
}

static int parse_request(const char *buf, size_t len, const char *header_id, bool check,
			 struct moat_request **out, struct moat_error *err)
{
	if (!out)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "no output for the request");
	*out = NULL;
	if (!buf && len)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "no request data");

	size_t start = 0;
	while (start < len && is_json_space(buf[start]))
		start++;
	if (start == len)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "empty request");

	struct scan sc;
	if (prescan(buf, len, &sc, err) < 0)
		return -1;

	/* cJSON gets a NUL-terminated copy so that no version of it can read
	 * past the end, and the length so that it stops there. */
	char *copy = dup_bytes(buf, len);
	if (!copy)
		return moat_error_oom(err);
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
	size_t off = end && end >= copy ? (size_t)(end - copy) : 0;
	free(copy);
	if (off > len)
		off = len;
	if (!root)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "malformed JSON at byte offset %zu", off);
	while (off < len && is_json_space(buf[off]))
		off++;
	int rc = -1;
	struct moat_request *req = NULL;
	if (off < len) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0,
			       "unexpected data after the JSON value at byte offset %zu", off);
		goto out;
	}
	if (sc.nul_escape) {
		if (sc.key)
			named_error(err, MOAT_ERR_POLICY, "NUL characters are not allowed (in ",
				    sc.key, sc.key_len, ")");
		else if (sc.nul_in_key)
			moat_error_set(err, MOAT_ERR_POLICY, 0,
				       "NUL characters are not allowed (in a key)");
		else
			moat_error_set(err, MOAT_ERR_POLICY, 0,
				       "NUL characters are not allowed (in the request)");
		goto out;
	}
	if (!cJSON_IsObject(root)) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "request must be a JSON object, got %s",
			       json_type_name(root));
		goto out;
	}
	req = moat_request_new();
	if (!req) {
		moat_error_oom(err);
		goto out;
	}
	if (fill_request(root, header_id, check, req, err) < 0)
		goto out;
	*out = req;
	req = NULL;
	rc = 0;
out:
	moat_request_free(req);
	cJSON_Delete(root);
	return rc;
}
