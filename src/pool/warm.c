/* Warm sandboxes (moat serve's pool; docs/SERVE.md, "The pool"): a run
 * started with a bootstrap request whose program is an interpreter waiting
 * on its stdin (runtime/python/moat_pool.py, runtime/js/pool.cjs), fully
 * locked down (namespaces, mounts, cgroup leaf, no_new_privs, empty
 * capabilities, Landlock, seccomp, uid 65534) before it reads a byte of the
 * request. Here: which requests such a sandbox may take, and the frame
 * that hands it exactly one (run_deliver, runner/deliver.c); the sandbox
 * is released after that run like any other. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "pool/pool.h"
#include "runner/sandbox.h"

#define POOL_MAGIC "MOATPOOL2"

/* An env name the interpreter reads at start-up: a warm one cannot honour
 * it. PYTHONPATH is the exception (the bootstrap puts it on sys.path). */
static bool startup_env(enum moat_language lang, const char *name)
{
	if (lang == MOAT_LANG_PYTHON)
		return !strncmp(name, "PYTHON", 6) && strcmp(name, "PYTHONPATH") != 0;
	if (!strncmp(name, "NODE_", 5) || !strcmp(name, "UV_THREADPOOL_SIZE"))
		return true;
	/* a warm node's esbuild is started before the request (pool.cjs): the
	 * variables it reads at its start, Go's runtime's and NO_COLOR */
	static const char *const esbuild_env[] = { "GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT",
						   "GOTRACEBACK", "NO_COLOR" };
	if (lang == MOAT_LANG_TYPESCRIPT)
		for (size_t i = 0; i < sizeof esbuild_env / sizeof *esbuild_env; i++)
			if (!strcmp(name, esbuild_env[i]))
				return true;
	return false;
}

const char *pool_refusal(const struct moat_request *boot, const struct moat_request *req)
{
	if (req->argc)
		return "an argv request (warm sandboxes run code)";
	/* a warm node also takes TypeScript: it runs esbuild as a cold run's
	 * pid 2 does, then the result */
	bool ts_on_js = req->language == MOAT_LANG_TYPESCRIPT && boot->language == MOAT_LANG_JAVASCRIPT;
	if (req->language != boot->language && !ts_on_js)
		return "another language";
	if (boot->language != MOAT_LANG_PYTHON && boot->language != MOAT_LANG_JAVASCRIPT)
		return "only python and javascript (and typescript on a javascript one) are kept warm";
	if (req->network || req->has_allowed_hosts)
		return "network access (warm sandboxes have none)";
	if (req->outputs_count)
		return "\"outputs\"";
	if (req->kv_enabled)
		return "kvEnabled (warm sandboxes have no store socket)";
	if (req->memory_mb != boot->memory_mb || req->cpus != boot->cpus ||
	    req->pids_limit != boot->pids_limit || req->strict_limits != boot->strict_limits)
		return "limits other than the pool's";
	for (size_t i = 0; i < req->env_count; i++)
		if (startup_env(req->language, req->env[i].key))
			return "an environment variable the interpreter reads at start-up";
	return NULL;
}

bool pool_typescript_ready(const struct moat_run_options *opts)
{
	const char *root = opts && opts->rootfs_dir ? opts->rootfs_dir : "/";
	const char *name = moat_lang_get(MOAT_LANG_TYPESCRIPT)->transpiler;
	const char *dirs = RUN_SANDBOX_PATH;
	while (name && *dirs) {
		size_t n = strcspn(dirs, ":");
		char *f = NULL;
		if (asprintf(&f, "%s%.*s/%s", strcmp(root, "/") ? root : "", (int)n, dirs, name) < 0)
			return false;
		bool ok = access(f, X_OK) == 0;
		free(f);
		if (ok)
			return true;
		dirs += n + (dirs[n] == ':');
	}
	return false;
}

static void put_b64(struct moat_buf *b, const char *s, size_t len)
{
	moat_buf_append_base64(b, (const unsigned char *)(s ? s : ""), s ? len : 0);
}

/* TypeScript's part of a request: the transpiler's name, the directories a
 * cold run looks in, the code file, its arguments after the code file and
 * the file node then runs (JSON, every string base64: node parses it
 * natively). */
static void put_ts_spec(struct moat_buf *j)
{
	const struct moat_lang_info *li = moat_lang_get(MOAT_LANG_TYPESCRIPT);
	moat_buf_append(j, "{\"transpiler\":", 14);
	put_b64(j, li->transpiler, strlen(li->transpiler));
	moat_buf_append(j, ",\"path\":", 8);
	put_b64(j, RUN_SANDBOX_PATH, strlen(RUN_SANDBOX_PATH));
	moat_buf_append(j, ",\"code\":", 8);
	char code[32];
	snprintf(code, sizeof code, MOAT_SANDBOX_DIR "/main.%s", li->ext);
	put_b64(j, code, strlen(code));
	moat_buf_append(j, ",\"args\":[", 9);
	for (size_t i = 0; run_ts_flags[i]; i++) {
		if (i)
			moat_buf_append(j, ",", 1);
		put_b64(j, run_ts_flags[i], strlen(run_ts_flags[i]));
	}
	moat_buf_append(j, "],\"run\":", 8);
	put_b64(j, RUN_TS_OUTPUT, strlen(RUN_TS_OUTPUT));
	moat_buf_append(j, "}", 1);
}

char *pool_typescript_spec(void)
{
	struct moat_buf j = { 0 };
	put_ts_spec(&j);
	return moat_buf_take(&j);
}

/* One field of a frame: "<decimal length>:<bytes>," (a netstring). */
static void put_field(struct moat_buf *f, const char *s, size_t len)
{
	moat_buf_appendf(f, "%zu:", len);
	if (len)
		moat_buf_append(f, s, len);
	moat_buf_append(f, ",", 1);
}

static void put_count(struct moat_buf *f, size_t n)
{
	char num[24];
	int len = snprintf(num, sizeof num, "%zu", n);
	put_field(f, num, (size_t)len);
}

/* "MOATPOOL2 <n>\n" + n bytes of fields (put_field: the bytes exactly) +
 * the request's stdin. The fields: the code; the number of files, then
 * each file's path and content; the number of env variables, then each
 * name and value; for TypeScript, put_ts_spec's JSON. Netstrings, not
 * JSON: python's bootstrap splits them with bytes methods alone, where
 * importing json and base64 (re, enum, struct) cost a warm interpreter
 * more CPU than its whole start. */
char *pool_frame(const struct moat_request *req, size_t *len)
{
	struct moat_buf j = { 0 }, f = { 0 };
	put_field(&j, req->code, req->code_len);
	put_count(&j, req->files_count);
	for (size_t i = 0; i < req->files_count; i++) {
		put_field(&j, req->files[i].key, strlen(req->files[i].key));
		put_field(&j, req->files[i].value, req->files[i].value_len);
	}
	put_count(&j, req->env_count);
	for (size_t i = 0; i < req->env_count; i++) {
		put_field(&j, req->env[i].key, strlen(req->env[i].key));
		put_field(&j, req->env[i].value, req->env[i].value_len);
	}
	if (req->language == MOAT_LANG_TYPESCRIPT) {
		struct moat_buf t = { 0 };
		put_ts_spec(&t);
		if (t.oom)
			j.oom = true;
		else
			put_field(&j, t.data, t.len);
		moat_buf_free(&t);
	}
	if (j.oom) {
		moat_buf_free(&j);
		return NULL;
	}
	moat_buf_appendf(&f, POOL_MAGIC " %zu\n", j.len);
	moat_buf_append(&f, j.data, j.len);
	moat_buf_free(&j);
	if (req->stdin_len)
		moat_buf_append(&f, req->stdin_data, req->stdin_len);
	if (f.oom) {
		moat_buf_free(&f);
		return NULL;
	}
	*len = f.len;
	return moat_buf_take(&f);
}

int pool_deliver(struct moat_sandbox *sb, const struct moat_request *boot,
		 const struct moat_request *req, const struct moat_run_options *per,
		 struct moat_error *err)
{
	const char *why = pool_refusal(boot, req);
	if (why)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "this request cannot use a warm sandbox: %s", why);
	size_t len = 0;
	char *frame = pool_frame(req, &len);
	if (!frame)
		return moat_error_oom(err);
	return run_sandbox_deliver(sb, req, per, frame, len, err);
}

int pool_create_adopted(const struct moat_request *req, const struct moat_run_options *opts,
			run_make_pid1_fn make_pid1, void *ctx, enum run_adopt_start start,
			struct moat_sandbox **out, struct moat_error *err)
{
	*out = NULL;
	if (!req->prepared && moat_request_validate(req, err) < 0)
		return -1;
	const char *why = pool_refusal(req, req);
	if (why)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "this request cannot run in a zygote's child: %s", why);
	/* started ahead, its stdin waits for the request's frame
	 * (pool_deliver); else the request's is its stdin from the start */
	size_t len = 0;
	char *frame = NULL;
	if (start == RUN_ADOPT_START && !(frame = pool_frame(req, &len)))
		return moat_error_oom(err);
	return run_sandbox_create_adopted(req, opts, frame, len, make_pid1, ctx, start, out, err);
}
