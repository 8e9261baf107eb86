/* A session's sandbox (docs/SESSIONS.md): one sandbox whose program is a
 * driver (runtime/python/moat_session.py, runtime/js/session.cjs) holding
 * one live interpreter, stepped through the runner's session phases
 * (runner/session.c). Here: the driver's command, the run frames, the
 * driver's answers checked (untrusted: the tenant's code shares the
 * driver's process and can write to its control socket), and the
 * session's state for the service. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "pool/session.h"
#include "runner/sandbox.h"

#define VALUE_MAX_BYTES (256u * 1024u)   /* a 64 KiB-character repr in UTF-8 */
#define ERROR_TYPE_MAX 256u
#define ERROR_MESSAGE_MAX (64u * 1024u)
#define DISPLAY_MAX_ITEMS 64
#define TRACEBACK_MAX_LINES 1000u
#define RESULTS_MAX_ITEMS 64
#define RESULT_ENTRY_MAX (4u * 1024u * 1024u)
#define READY_TIMEOUT_MS 30000u
#define KILL_WAIT_MS 10000u

struct pool_session {
	pthread_mutex_t mu;
	struct moat_request *boot; /* the driver's run: the session's limits, env, network */
	struct moat_run_options opts;
	struct moat_sandbox *sb;
	enum moat_language language;
	/* under mu */
	enum pool_session_state state;
	const char *reason;
	char *sentence;
	int64_t cpu_ms;
	unsigned runs;
	bool running; /* a step runs */
	bool frozen;  /* every process stopped (pool_session_freeze) */
	/* the caller killed it (pool_session_kill) */
	atomic_bool kill_asked;
	unsigned seq;
	uint64_t grace_ms; /* of an interrupt */
};

/* The session's CPU time after a step or its end (mu held): the sandbox's
 * own figure when it has one (its cgroup's, or while its processes live
 * their /proc times: background work included), else the step's added;
 * never less than before. */
static void account_cpu(struct pool_session *s, int64_t step_ms)
{
	int64_t now = s->sb ? run_sandbox_cpu_ms(s->sb) : -1;
	int64_t was = s->cpu_ms > 0 ? s->cpu_ms : 0;
	if (now >= 0)
		s->cpu_ms = now > was ? now : was;
	else if (step_ms > 0)
		s->cpu_ms = was + step_ms;
	else
		s->cpu_ms = was;
}

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* The driver's run: the session request's limits, env and network, the
 * driver as its program, the lifetime as its timeout. */
static struct moat_request *boot_request(const struct moat_request *req, uint64_t lifetime_ms,
					 struct moat_error *err)
{
	MOAT_AUTO(moat_request) struct moat_request *b = moat_request_new();
	if (!b) {
		moat_error_oom(err);
		return NULL;
	}
	const char *argv[2];
	if (req->language == MOAT_LANG_PYTHON) {
		argv[0] = "python3";
		argv[1] = MOAT_RUNTIME_MOUNT "/python/moat_session.py";
	} else {
		argv[0] = "node";
		argv[1] = MOAT_RUNTIME_MOUNT "/js/session.cjs";
	}
	bool ok = (b->argv = calloc(3, sizeof *b->argv)) != NULL;
	for (size_t i = 0; ok && i < 2; i++)
		ok = (b->argv[b->argc++] = strdup(argv[i])) != NULL;
	b->language = req->language;
	b->timeout_ms = lifetime_ms ? lifetime_ms : 24ull * 60 * 60 * 1000;
	b->network = req->network;
	b->memory_mb = req->memory_mb;
	b->cpus = req->cpus;
	b->pids_limit = req->pids_limit;
	b->strict_limits = req->strict_limits;
	if (req->max_output_bytes)
		b->max_output_bytes = req->max_output_bytes;
	b->kv_enabled = req->kv_enabled;
	b->has_allowed_hosts = req->has_allowed_hosts;
	/* the Python driver keeps the interpreter's data below the session's
	 * memory (RLIMIT_DATA, soft): an allocation past it is a MemoryError in
	 * the step, not the cgroup's OOM kill of the session */
	char mem[32] = "";
	if (req->language == MOAT_LANG_PYTHON && req->memory_mb)
		snprintf(mem, sizeof mem, "%llu", (unsigned long long)req->memory_mb);
	if (ok && (req->env_count || mem[0])) {
		ok = (b->env = calloc(req->env_count + 1, sizeof *b->env)) != NULL;
		for (size_t i = 0; ok && i < req->env_count; i++, b->env_count++) {
			b->env[i].key = strdup(req->env[i].key);
			b->env[i].value = malloc(req->env[i].value_len + 1);
			ok = b->env[i].key && b->env[i].value;
			if (b->env[i].value) {
				memcpy(b->env[i].value, req->env[i].value, req->env[i].value_len);
				b->env[i].value[req->env[i].value_len] = '\0';
				b->env[i].value_len = req->env[i].value_len;
			}
		}
		if (ok && mem[0]) {
			size_t i = b->env_count++;
			b->env[i].key = strdup("MOAT_SESSION_MEMORY_MB");
			b->env[i].value = strdup(mem);
			b->env[i].value_len = strlen(mem);
			ok = b->env[i].key && b->env[i].value;
		}
	}
	char ***lists[] = { &b->allowed_hosts, &b->allowed_cidrs };
	char **const from[] = { req->allowed_hosts, req->allowed_cidrs };
	size_t counts[] = { req->allowed_hosts_count, req->allowed_cidrs_count };
	size_t *to_counts[] = { &b->allowed_hosts_count, &b->allowed_cidrs_count };
	for (int l = 0; ok && l < 2; l++) {
		if (!counts[l])
			continue;
		ok = (*lists[l] = calloc(counts[l], sizeof **lists[l])) != NULL;
		for (size_t i = 0; ok && i < counts[l]; i++, (*to_counts[l])++)
			ok = ((*lists[l])[i] = dup_str(from[l][i])) != NULL;
	}
	if (ok && req->sandbox_id) {
		ok = (b->sandbox_id = malloc(req->sandbox_id_len + 1)) != NULL;
		if (ok) {
			memcpy(b->sandbox_id, req->sandbox_id, req->sandbox_id_len);
			b->sandbox_id[req->sandbox_id_len] = '\0';
			b->sandbox_id_len = req->sandbox_id_len;
		}
	}
	if (!ok) {
		moat_error_oom(err);
		return NULL;
	}
	return MOAT_TAKE(b);
}

/* The session is over: why, once (the first cause wins). Under mu. */
static void set_over(struct pool_session *s, enum pool_session_state st, const char *reason,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void set_over(struct pool_session *s, enum pool_session_state st, const char *reason,
		     const char *fmt, ...)
{
	if (s->state != POOL_SESSION_LIVE)
		return;
	s->state = st;
	s->reason = reason;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s->sentence, fmt, ap) < 0)
		s->sentence = NULL;
	va_end(ap);
}

/* How a step whose sandbox ended leaves the session (between: no step
 * ran, pool_session_watch saw it die). */
static void ended_by(struct pool_session *s, const struct moat_result *res, bool between)
{
	const char *k = res->killed_by;
	pthread_mutex_lock(&s->mu);
	if (atomic_load(&s->kill_asked))
		set_over(s, POOL_SESSION_KILLED, "cancelled", "the session was killed: cancelled");
	else if (!k && res->exited)
		set_over(s, POOL_SESSION_ENDED, "exit",
			 "the session ended: its interpreter exited with code %d", res->exit_code);
	else if (k && !strcmp(k, "timeout") && run_sandbox_session_interrupted(s->sb, NULL))
		set_over(s, POOL_SESSION_KILLED, "timeout",
			 "the session was killed: a run timed out and its interpreter did not "
			 "stop within %llu ms of the interrupt", (unsigned long long)s->grace_ms);
	else if (k && !strcmp(k, "timeout"))
		set_over(s, POOL_SESSION_KILLED, "timeout",
			 "the session was killed: a run timed out (its state may have been "
			 "half-updated)");
	else if (k && !strcmp(k, "cancelled") && !between &&
		 run_sandbox_session_interrupted(s->sb, NULL))
		set_over(s, POOL_SESSION_KILLED, "cancelled",
			 "the session was killed: its interpreter did not stop within %llu ms of "
			 "the interrupt", (unsigned long long)s->grace_ms);
	else if (k && !strcmp(k, "oom"))
		set_over(s, POOL_SESSION_KILLED, "oom",
			 "the session was killed: memory limit exceeded (%llu MiB)",
			 (unsigned long long)s->boot->memory_mb);
	else if (k && !strcmp(k, "pids"))
		set_over(s, POOL_SESSION_KILLED, "pids",
			 "the session was killed: process limit reached (%llu)",
			 (unsigned long long)s->boot->pids_limit);
	else if (k && !strcmp(k, "seccomp"))
		set_over(s, POOL_SESSION_KILLED, "seccomp",
			 "the session was killed: its interpreter made a system call the "
			 "sandbox forbids");
	else if (k && !strcmp(k, "cancelled"))
		set_over(s, POOL_SESSION_KILLED, "cancelled",
			 "the session was killed: its run was cancelled");
	else if (k && !strcmp(k, "signal") && between)
		set_over(s, POOL_SESSION_KILLED, "crash",
			 "the session was killed: its sandbox was killed between runs (signal %d)",
			 res->signal);
	else if (k && !strcmp(k, "protocol"))
		set_over(s, POOL_SESSION_KILLED, "protocol",
			 "the session was killed: its interpreter broke the session protocol");
	else
		set_over(s, POOL_SESSION_KILLED, "crash",
			 "the session was killed: its interpreter crashed (signal %d)", res->signal);
	account_cpu(s, res->cpu_time_ms);
	pthread_mutex_unlock(&s->mu);
}

/* The driver answered wrong: the sandbox killed, and waited for. */
static void protocol_kill(struct pool_session *s, struct moat_result *res)
{
	run_sandbox_session_kill(s->sb);
	struct moat_result *end = NULL;
	char *reply = NULL;
	size_t len;
	struct moat_error err = { 0 };
	if (run_sandbox_session_step(s->sb, KILL_WAIT_MS, 0, NULL, NULL, 0, &end, &reply, &len,
				     &err) < 0)
		moat_error_clear(&err);
	free(reply);
	moat_result_free(end);
	res->exited = false;
	res->exit_code = 0;
	res->signal = 9;
	res->killed_by = "protocol";
	pthread_mutex_lock(&s->mu);
	set_over(s, POOL_SESSION_KILLED, "protocol",
		 "the session was killed: its interpreter broke the session protocol");
	pthread_mutex_unlock(&s->mu);
}

static bool is_int(const cJSON *j)
{
	return cJSON_IsNumber(j) && j->valuedouble >= -2147483648.0 &&
	       j->valuedouble <= 2147483647.0 && (double)(int)j->valuedouble == j->valuedouble;
}

static bool str_within(const cJSON *j, size_t max)
{
	return cJSON_IsString(j) && strlen(j->valuestring) <= max;
}

/* An error of a done frame: type and message (and Jupyter's name, value
 * and traceback lines), each within its bound, nothing else. */
static bool error_ok(const cJSON *error)
{
	if (!cJSON_IsObject(error))
		return false;
	static const char *const keys[] = { "type", "message", "name", "value", "traceback" };
	static const size_t max[] = { ERROR_TYPE_MAX, ERROR_MESSAGE_MAX, ERROR_TYPE_MAX,
				      ERROR_MESSAGE_MAX, 0 };
	int seen = 0;
	for (int i = 0; i < 5; i++) {
		const cJSON *it = cJSON_GetObjectItemCaseSensitive(error, keys[i]);
		if (!it) {
			if (i < 2)
				return false;
			continue;
		}
		seen++;
		if (i < 4 && !str_within(it, max[i]))
			return false;
		if (i == 4) {
			if (!cJSON_IsArray(it) || (unsigned)cJSON_GetArraySize(it) > TRACEBACK_MAX_LINES)
				return false;
			const cJSON *l;
			cJSON_ArrayForEach(l, it) if (!str_within(l, ERROR_MESSAGE_MAX)) return false;
		}
	}
	return cJSON_GetArraySize(error) == seen;
}

/* A done frame's results: at most RESULTS_MAX_ITEMS {isMain, data} (one
 * isMain at most), data a MIME bundle of the known types with text/plain,
 * each entry a string of at most RESULT_ENTRY_MAX (application/json: any
 * JSON value, bounded by the frame). */
static bool results_ok(const cJSON *results)
{
	static const char *const mimes[] = { "text/plain", "text/html", "text/markdown",
					     "image/svg+xml", "image/png", "image/jpeg",
					     "text/latex", "application/json",
					     "application/javascript" };
	if (!cJSON_IsArray(results) || cJSON_GetArraySize(results) > RESULTS_MAX_ITEMS)
		return false;
	int mains = 0;
	const cJSON *r;
	cJSON_ArrayForEach(r, results) {
		const cJSON *main = cJSON_GetObjectItemCaseSensitive(r, "isMain");
		const cJSON *data = cJSON_GetObjectItemCaseSensitive(r, "data");
		if (!cJSON_IsObject(r) || cJSON_GetArraySize(r) != 2 || !cJSON_IsBool(main) ||
		    !cJSON_IsObject(data) ||
		    !str_within(cJSON_GetObjectItemCaseSensitive(data, "text/plain"),
				VALUE_MAX_BYTES))
			return false;
		mains += cJSON_IsTrue(main);
		const cJSON *d;
		cJSON_ArrayForEach(d, data) {
			size_t m = 0;
			while (m < sizeof mimes / sizeof *mimes && strcmp(d->string, mimes[m]))
				m++;
			if (m == sizeof mimes / sizeof *mimes ||
			    (strcmp(d->string, "application/json") &&
			     !str_within(d, RESULT_ENTRY_MAX)))
				return false;
		}
	}
	return mains <= 1;
}

bool pool_session_result_ok(const char *json, size_t len)
{
	cJSON *j = cJSON_ParseWithLength(json, len);
	cJSON *a = cJSON_CreateArray();
	bool ok = j && a && cJSON_AddItemReferenceToArray(a, j) && results_ok(a);
	cJSON_Delete(a);
	cJSON_Delete(j);
	return ok;
}

bool pool_session_take_done(const char *reply, size_t len, unsigned seq, bool interrupted,
			    struct moat_result *res, char **extra)
{
	MOAT_AUTO(cJSON) cJSON *j = cJSON_ParseWithLength(reply, len);
	MOAT_AUTO(cJSON) cJSON *out = cJSON_CreateObject();
	if (!j || !out || !cJSON_IsObject(j))
		return false;
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
	const cJSON *jseq = cJSON_GetObjectItemCaseSensitive(j, "seq");
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "exitCode");
	if (!cJSON_IsString(type) || strcmp(type->valuestring, "done") || !is_int(jseq) ||
	    jseq->valuedouble < 0 || (unsigned)jseq->valuedouble != seq || !is_int(code))
		return false;
	cJSON *error = cJSON_GetObjectItemCaseSensitive(j, "error");
	if (error && !cJSON_IsNull(error) && !error_ok(error))
		return false;
	cJSON *results = cJSON_GetObjectItemCaseSensitive(j, "results");
	if (results && !results_ok(results))
		return false;
	const cJSON *rt = cJSON_GetObjectItemCaseSensitive(j, "resultsTruncated");
	const cJSON *count = cJSON_GetObjectItemCaseSensitive(j, "executionCount");
	if ((rt && !cJSON_IsBool(rt)) || (count && !(is_int(count) && count->valuedouble >= 0)))
		return false;
	cJSON *value = cJSON_GetObjectItemCaseSensitive(j, "value");
	if (value && !cJSON_IsNull(value) && !str_within(value, VALUE_MAX_BYTES))
		return false;
	const cJSON *vt = cJSON_GetObjectItemCaseSensitive(j, "valueTruncated");
	if (vt && !cJSON_IsBool(vt))
		return false;
	cJSON *display = cJSON_GetObjectItemCaseSensitive(j, "display");
	if (display && !cJSON_IsNull(display)) {
		if (!cJSON_IsArray(display) || cJSON_GetArraySize(display) > DISPLAY_MAX_ITEMS)
			return false;
		const cJSON *d;
		cJSON_ArrayForEach(d, display) {
			const cJSON *dt = cJSON_GetObjectItemCaseSensitive(d, "type");
			const cJSON *dd = cJSON_GetObjectItemCaseSensitive(d, "data");
			if (!cJSON_IsObject(d) || cJSON_GetArraySize(d) != 2 ||
			    !cJSON_IsString(dt) || strcmp(dt->valuestring, "image/png") ||
			    !cJSON_IsString(dd))
				return false;
		}
	}
	const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(j, "displayDropped");
	if (dropped && !(is_int(dropped) && dropped->valuedouble >= 0))
		return false;
	/* the answer's keys: moved over once checked */
	cJSON *keys[] = { error ? cJSON_DetachItemViaPointer(j, error) : cJSON_CreateNull(),
			  value ? cJSON_DetachItemViaPointer(j, value) : cJSON_CreateNull(),
			  cJSON_CreateBool(cJSON_IsTrue(vt)),
			  display && !cJSON_IsNull(display) ? cJSON_DetachItemViaPointer(j, display)
							    : cJSON_CreateArray() };
	const char *names[] = { "error", "value", "valueTruncated", "display" };
	bool ok = true;
	if (!cJSON_AddItemToObject(out, "results", results ? cJSON_DetachItemViaPointer(j, results)
							   : cJSON_CreateArray()) ||
	    !cJSON_AddBoolToObject(out, "resultsTruncated", cJSON_IsTrue(rt)) ||
	    !(count ? cJSON_AddNumberToObject(out, "executionCount", count->valuedouble)
		    : cJSON_AddNullToObject(out, "executionCount")))
		ok = false;
	for (int i = 0; i < 4; i++)
		if (!keys[i] || !cJSON_AddItemToObject(out, names[i], keys[i]))
			ok = false;
	if (!ok || !cJSON_AddBoolToObject(out, "interrupted", interrupted))
		return false;
	res->exited = true;
	res->exit_code = (int)code->valuedouble;
	if (dropped && dropped->valuedouble > 0)
		(void)moat_result_warn(res, "%d figure(s) were not returned: the display of a run "
				       "is at most 8 MiB", (int)dropped->valuedouble);
	if (cJSON_IsTrue(rt))
		(void)moat_result_warn(res, "some results were cut or not returned: a result is "
				       "at most 4 MiB a MIME type, a step's results at most 64 and "
				       "6 MiB (resultsTruncated)");
	*extra = cJSON_PrintUnformatted(out);
	return *extra != NULL;
}

int pool_session_spawn(const struct pool_session_config *cfg, struct pool_session **out,
		       struct moat_error *err)
{
	*out = NULL;
	const struct moat_request *req = cfg->req;
	if (req->argc || (req->language != MOAT_LANG_PYTHON &&
			  req->language != MOAT_LANG_JAVASCRIPT))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a session runs Python or JavaScript (not TypeScript, a shell "
				      "or a command)");
	if (!cfg->opts || !cfg->opts->runtime_dir)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a session needs the runtime directory (its driver is there)");
	struct pool_session *s = calloc(1, sizeof *s);
	if (!s)
		return moat_error_oom(err);
	pthread_mutex_init(&s->mu, NULL);
	s->language = req->language;
	s->cpu_ms = -1;
	s->opts = *cfg->opts;
	s->opts.cancel_fd = s->opts.hangup_fd = s->opts.resume_fd = -1;
	s->opts.on_output = NULL;
	s->opts.output_ctx = NULL;
	s->opts.stdout_stream = s->opts.output_stream = false;
	s->opts.stdout_full = NULL;
	if (!(s->boot = boot_request(req, cfg->lifetime_ms, err)) ||
	    run_sandbox_start_session(s->boot, &s->opts, &s->sb, err) < 0) {
		pool_session_stop(s);
		return -1;
	}
	s->grace_ms = cfg->interrupt_grace_ms ? cfg->interrupt_grace_ms : POOL_SESSION_GRACE_MS;
	run_sandbox_session_set_grace(s->sb, s->grace_ms, cfg->hangup_finish);
	*out = s;
	return 0;
}

int pool_session_ready(struct pool_session *s, uint64_t ready_ms,
		       const struct moat_run_options *per, struct moat_error *err)
{
	pthread_mutex_lock(&s->mu);
	bool go = s->state == POOL_SESSION_LIVE && !atomic_load(&s->kill_asked);
	s->running = go; /* a pool_session_kill now ends the wait below */
	pthread_mutex_unlock(&s->mu);
	if (!go)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "the session's interpreter did not start (cancelled)");
	struct moat_result *res = NULL;
	char *reply = NULL;
	size_t len = 0;
	int rc = run_sandbox_session_step(s->sb, ready_ms ? ready_ms : READY_TIMEOUT_MS, 0, per,
					  NULL, 0, &res, &reply, &len, err);
	pthread_mutex_lock(&s->mu);
	s->running = false;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		return -1;
	cJSON *j = reply ? cJSON_ParseWithLength(reply, len) : NULL;
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
	bool ready = cJSON_IsString(type) && !strcmp(type->valuestring, "ready");
	cJSON_Delete(j);
	free(reply);
	if (!ready || atomic_load(&s->kill_asked)) {
		/* what the driver said on its stderr is the host's to read,
		 * never the tenant's: its first line only, for the operator */
		size_t n = res ? strcspn(res->stderr_buf ? res->stderr_buf : "", "\n") : 0;
		if (res && n > res->stderr_len)
			n = res->stderr_len;
		if (ready || atomic_load(&s->kill_asked))
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				       "the session's interpreter did not start (cancelled)");
		else
			moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				       "the session's interpreter did not start%s%s%.*s",
				       !reply ? " (it ended" : " (it answered wrong",
				       n ? "): " : ")", (int)(n > 200 ? 200 : n),
				       res && res->stderr_buf ? res->stderr_buf : "");
		moat_result_free(res);
		return -1;
	}
	pthread_mutex_lock(&s->mu);
	s->cpu_ms = res->cpu_time_ms;
	pthread_mutex_unlock(&s->mu);
	moat_result_free(res);
	return 0;
}

int pool_session_start(const struct pool_session_config *cfg, struct pool_session **out,
		       struct moat_error *err)
{
	struct pool_session *s;
	if (pool_session_spawn(cfg, &s, err) < 0)
		return -1;
	if (pool_session_ready(s, cfg->ready_timeout_ms, NULL, err) < 0) {
		pool_session_stop(s);
		*out = NULL;
		return -1;
	}
	*out = s;
	return 0;
}

/* The run frame of step seq: header and JSON. */
static char *run_frame(const struct moat_request *step, unsigned seq, size_t *len)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"type\":\"run\",\"seq\":%u,\"code\":", seq);
	moat_buf_append_json_string(&b, step->code ? step->code : "", step->code_len);
	moat_buf_append(&b, ",\"stdin\":", 9);
	moat_buf_append_base64(&b, (const unsigned char *)(step->stdin_data ? step->stdin_data : ""),
			       step->stdin_len);
	moat_buf_append(&b, ",\"files\":[", 10);
	for (size_t i = 0; i < step->files_count; i++) {
		moat_buf_append(&b, i ? ",[" : "[", i ? 2 : 1);
		moat_buf_append_json_string(&b, step->files[i].key, strlen(step->files[i].key));
		moat_buf_append(&b, ",", 1);
		moat_buf_append_base64(&b, (const unsigned char *)step->files[i].value,
				       step->files[i].value_len);
		moat_buf_append(&b, "]", 1);
	}
	moat_buf_append(&b, "]}", 2);
	if (b.oom) {
		moat_buf_free(&b);
		return NULL;
	}
	char head[32];
	int hn = snprintf(head, sizeof head, "MOATSESS1 %zu\n", b.len);
	char *frame = malloc((size_t)hn + b.len);
	if (frame) {
		memcpy(frame, head, (size_t)hn);
		memcpy(frame + hn, b.data, b.len);
		*len = (size_t)hn + b.len;
	}
	moat_buf_free(&b);
	return frame;
}

static int step_run(struct pool_session *s, const struct moat_request *step,
		    const struct moat_run_options *per, unsigned seq, struct moat_result **res,
		    char **extra, struct moat_error *err);

int pool_session_run(struct pool_session *s, const struct moat_request *step,
		     const struct moat_run_options *per, struct moat_result **res, char **extra,
		     struct moat_error *err)
{
	*res = NULL;
	*extra = NULL;
	pthread_mutex_lock(&s->mu);
	bool busy = s->running;
	bool live = s->state == POOL_SESSION_LIVE && !atomic_load(&s->kill_asked) && !busy;
	unsigned seq = ++s->seq;
	if (live)
		s->running = true;
	const char *why = s->sentence ? s->sentence : "the session is not live";
	pthread_mutex_unlock(&s->mu);
	if (busy)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "a run is running in the session");
	if (!live)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "%s", why);
	/* a frozen sandbox is thawed for its step (running keeps a freeze
	 * out meanwhile) */
	if (s->frozen) {
		if (run_sandbox_freeze(s->sb, false, err) < 0) {
			pthread_mutex_lock(&s->mu);
			s->running = false;
			pthread_mutex_unlock(&s->mu);
			return -1;
		}
		s->frozen = false;
	}
	int rc = step_run(s, step, per, seq, res, extra, err);
	pthread_mutex_lock(&s->mu);
	s->running = false;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int step_run(struct pool_session *s, const struct moat_request *step,
		    const struct moat_run_options *per, unsigned seq, struct moat_result **res,
		    char **extra, struct moat_error *err)
{
	if (step->argc || step->language != s->language)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a session's run is code in the session's language");
	size_t flen = 0;
	MOAT_AUTOFREE char *frame = run_frame(step, seq, &flen);
	if (!frame)
		return moat_error_oom(err);
	MOAT_AUTOFREE char *reply = NULL;
	size_t rlen = 0;
	MOAT_AUTO(moat_result) struct moat_result *r = NULL;
	uint64_t timeout = step->timeout_ms ? step->timeout_ms : MOAT_DEFAULT_TIMEOUT_MS;
	int rc = run_sandbox_session_step(s->sb, timeout, s->boot->max_output_bytes, per, frame,
					  flen, &r, &reply, &rlen, err);
	if (rc < 0) {
		pthread_mutex_lock(&s->mu);
		set_over(s, POOL_SESSION_KILLED, "crash",
			 "the session was killed: its sandbox failed");
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	pthread_mutex_lock(&s->mu);
	s->runs++;
	pthread_mutex_unlock(&s->mu);
	if (reply) {
		bool ok = pool_session_take_done(reply, rlen, seq, run_sandbox_session_interrupted(s->sb, NULL),
				    r, extra);
		if (!ok)
			protocol_kill(s, r);
		else {
			pthread_mutex_lock(&s->mu);
			account_cpu(s, r->cpu_time_ms);
			pthread_mutex_unlock(&s->mu);
			/* killed while it answered: over all the same */
			if (atomic_load(&s->kill_asked)) {
				pthread_mutex_lock(&s->mu);
				set_over(s, POOL_SESSION_KILLED, "cancelled",
					 "the session was killed: cancelled");
				pthread_mutex_unlock(&s->mu);
			}
		}
	} else {
		if (atomic_load(&s->kill_asked) && !r->timed_out)
			r->killed_by = "cancelled";
		ended_by(s, r, false);
	}
	if (!*extra &&
	    !(*extra = strdup("{\"error\":null,\"value\":null,\"valueTruncated\":false,"
			      "\"display\":[],\"interrupted\":false,\"results\":[],"
			      "\"resultsTruncated\":false,\"executionCount\":null}")))
		return moat_error_oom(err);
	if (moat_request_warn_units(step, r) < 0) {
		free(*extra);
		*extra = NULL;
		return moat_error_oom(err);
	}
	*res = MOAT_TAKE(r);
	return 0;
}

bool pool_session_watch(struct pool_session *s)
{
	pthread_mutex_lock(&s->mu);
	bool look = s->state == POOL_SESSION_LIVE && !s->running && s->sb;
	bool over = s->state != POOL_SESSION_LIVE;
	if (look && run_sandbox_session_ended(s->sb))
		s->running = true; /* collecting: no step, no ready wait meanwhile */
	else
		look = false;
	pthread_mutex_unlock(&s->mu);
	if (!look)
		return over;
	/* pid 1 is gone, so is every process of its namespace: the pump only
	 * reads what is left in the pipes and pid 1's reports, and returns */
	struct moat_result *res = NULL;
	char *reply = NULL;
	size_t len = 0;
	struct moat_error err = { 0 };
	int rc = run_sandbox_session_step(s->sb, KILL_WAIT_MS, 0, NULL, NULL, 0, &res, &reply,
					  &len, &err);
	moat_error_clear(&err);
	if (rc == 0 && !reply)
		ended_by(s, res, true);
	pthread_mutex_lock(&s->mu);
	if (rc < 0)
		set_over(s, POOL_SESSION_KILLED, "crash", "the session was killed: its sandbox failed");
	else if (reply) /* a frame nobody asked for: the driver broke the protocol */
		set_over(s, POOL_SESSION_KILLED, "protocol",
			 "the session was killed: its interpreter broke the session protocol");
	s->running = false;
	pthread_mutex_unlock(&s->mu);
	free(reply);
	moat_result_free(res);
	return true;
}

enum pool_session_state pool_session_state(const struct pool_session *s, const char **reason,
					   const char **sentence)
{
	struct pool_session *m = (struct pool_session *)s;
	pthread_mutex_lock(&m->mu);
	enum pool_session_state st = s->state;
	if (reason)
		*reason = s->reason;
	if (sentence)
		*sentence = s->sentence ? s->sentence
			    : st == POOL_SESSION_LIVE ? NULL : "the session is over";
	pthread_mutex_unlock(&m->mu);
	return st;
}

int64_t pool_session_memory(const struct pool_session *s)
{
	struct pool_session *m = (struct pool_session *)s;
	pthread_mutex_lock(&m->mu);
	int64_t v = s->state == POOL_SESSION_LIVE && s->sb ? run_sandbox_memory(s->sb) : -1;
	pthread_mutex_unlock(&m->mu);
	return v;
}

int64_t pool_session_cpu_ms(const struct pool_session *s)
{
	struct pool_session *m = (struct pool_session *)s;
	pthread_mutex_lock(&m->mu);
	int64_t v = s->cpu_ms;
	/* while it lives: the sandbox's own figure, background work included
	 * (the steps' sum misses what ran between them) */
	if (s->state == POOL_SESSION_LIVE && s->sb) {
		int64_t now = run_sandbox_cpu_ms(s->sb);
		if (now > v) /* never less than before: a task reaped unseen */
			v = m->cpu_ms = now;
	}
	pthread_mutex_unlock(&m->mu);
	return v;
}

bool pool_session_cpu_bounded(const struct pool_session *s)
{
	return s->sb && run_sandbox_cpu_bounded(s->sb);
}

int pool_session_freeze(struct pool_session *s, bool frozen, struct moat_error *err)
{
	pthread_mutex_lock(&s->mu);
	bool go = s->state == POOL_SESSION_LIVE && !s->running && s->sb &&
		  !atomic_load(&s->kill_asked);
	if (go && s->frozen == frozen) {
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	if (go)
		s->running = true; /* no step, watch or other freeze meanwhile */
	pthread_mutex_unlock(&s->mu);
	if (!go)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "the session is not live, or a run is running in it");
	int rc = run_sandbox_freeze(s->sb, frozen, err);
	pthread_mutex_lock(&s->mu);
	if (rc == 0)
		s->frozen = frozen;
	s->running = false;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

bool pool_session_frozen(const struct pool_session *s)
{
	struct pool_session *m = (struct pool_session *)s;
	pthread_mutex_lock(&m->mu);
	bool v = s->frozen;
	pthread_mutex_unlock(&m->mu);
	return v;
}

unsigned pool_session_runs(const struct pool_session *s)
{
	struct pool_session *m = (struct pool_session *)s;
	pthread_mutex_lock(&m->mu);
	unsigned v = s->runs;
	pthread_mutex_unlock(&m->mu);
	return v;
}

bool pool_session_interrupt(struct pool_session *s)
{
	pthread_mutex_lock(&s->mu);
	bool running = s->running && s->state == POOL_SESSION_LIVE && s->sb;
	if (running && run_sandbox_session_interrupt(s->sb) < 0)
		running = false;
	pthread_mutex_unlock(&s->mu);
	return running;
}

void pool_session_kill(struct pool_session *s)
{
	if (!s)
		return;
	atomic_store(&s->kill_asked, true);
	pthread_mutex_lock(&s->mu);
	if (s->sb)
		run_sandbox_session_kill(s->sb);
	/* no step to see its end: over now */
	if (!s->running)
		set_over(s, POOL_SESSION_KILLED, "cancelled", "the session was killed: cancelled");
	pthread_mutex_unlock(&s->mu);
}

void pool_session_stop(struct pool_session *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	if (s->sb)
		run_sandbox_session_kill(s->sb);
	set_over(s, POOL_SESSION_ENDED, "closed", "the session was closed");
	pthread_mutex_unlock(&s->mu);
	/* release reaps pid 1 and removes the cgroup leaves (waiting for
	 * their last task): nothing of the session is left */
	moat_sandbox_release(s->sb);
	moat_request_free(s->boot);
	free(s->sentence);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
