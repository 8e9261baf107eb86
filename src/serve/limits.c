/* The operator's limits (the config's "serve" object) and how a finished
 * run is reported: the Spin "error" line and the metrics outcome. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "serve/internal.h"

#define MAX_TIMEOUT_MS (24ull * 3600 * 1000)

void serve_limits_default(struct serve_limits *l)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	*l = (struct serve_limits){
		.def_timeout_ms = 10000, .max_timeout_ms = 60000,
		.def_memory_mb = 256, .max_memory_mb = 1024,
		.def_cpus = 1, .max_cpus = n > 0 ? (double)n : 1,
		.def_pids = 64, .max_pids = 256,
		.allow_open_network = false,
		.max_response_bytes = 16u * 1024u * 1024u,
		.max_output_bytes = SERVE_MAX_OUTPUT_DEFAULT,
		.pool = -1,
		.sandboxes_pool = -1,
		.sandboxes_network_pool = -1,
		.pool_zygote = -1,
		.pool_zygote_max_children = SERVE_ZYGOTE_MAX_CHILDREN,
		.pool_zygote_max_age_ms = SERVE_ZYGOTE_MAX_AGE_S * 1000ull,
		.max_relays = SERVE_MAX_RELAYS,
		.max_dns = SERVE_MAX_DNS,
		.sessions_max = -1,
		.session_idle_ms = 600000,
		.session_max_idle_ms = 3600000,
		.session_max_life_ms = 3600000,
		.session_grace_ms = 2000,
	};
}

static int get_num(const cJSON *it, const char *where, double lo, double hi, double *out,
		   struct moat_error *err)
{
	if (!cJSON_IsNumber(it) || it->valuedouble < lo || it->valuedouble > hi)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "config serve.%s%s%s must be a number from %.15g to %.15g", where,
				      *where ? "." : "", it->string, lo, hi);
	*out = it->valuedouble;
	return 0;
}

/* A boolean key of the "serve" object. */
static int get_bool(const cJSON *it, bool *out, struct moat_error *err)
{
	if (!cJSON_IsBool(it))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "config serve.%s must be a boolean",
				      it->string);
	*out = cJSON_IsTrue(it);
	return 0;
}

/* maxout: serve.max's maxOutputBytes (NULL for serve.defaults: none). */
static int parse_set(const cJSON *obj, const char *where, uint64_t *timeout, uint64_t *mem,
		     double *cpus, uint64_t *pids, uint64_t *maxout, struct moat_error *err)
{
	if (!cJSON_IsObject(obj))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0, "config serve.%s must be an object",
				      where);
	for (const cJSON *it = obj->child; it; it = it->next) {
		double v = 0;
		const char *k = it->string ? it->string : "";
		if (!strcmp(k, "timeout")) {
			if (get_num(it, where, 1, (double)MAX_TIMEOUT_MS, &v, err) < 0)
				return -1;
			*timeout = (uint64_t)v;
		} else if (!strcmp(k, "memoryMb")) {
			if (get_num(it, where, 16, 1024.0 * 1024, &v, err) < 0)
				return -1;
			*mem = (uint64_t)v;
		} else if (!strcmp(k, "cpus")) {
			if (get_num(it, where, 0.01, 1024, &v, err) < 0)
				return -1;
			*cpus = v;
		} else if (!strcmp(k, "pidsLimit")) {
			if (get_num(it, where, 1, 1 << 22, &v, err) < 0)
				return -1;
			*pids = (uint64_t)v;
		} else if (maxout && !strcmp(k, "maxOutputBytes")) {
			if (get_num(it, where, 1, 1024.0 * 1024 * 1024, &v, err) < 0)
				return -1;
			*maxout = (uint64_t)v;
		} else {
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "config serve.%s: unknown key \"%.64s\" (timeout, "
					      "memoryMb, cpus, pidsLimit%s)", where, k,
					      maxout ? ", maxOutputBytes" : "");
		}
	}
	return 0;
}

/* The "sandboxes" object: the live sandboxes' budgets. */
static int parse_sandboxes(const cJSON *obj, struct serve_limits *l, struct moat_error *err)
{
	if (!cJSON_IsObject(obj))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "config serve.sandboxes must be an object");
	for (const cJSON *it = obj->child; it; it = it->next) {
		const char *k = it->string ? it->string : "";
		double v = 0;
		if (!strcmp(k, "memoryMb")) {
			if (get_num(it, "sandboxes", 16, 1024.0 * 1024 * 1024, &v, err) < 0)
				return -1;
			l->sandboxes_memory_mb = (uint64_t)v;
		} else if (!strcmp(k, "cpus")) {
			if (get_num(it, "sandboxes", 0.01, 65536, &v, err) < 0)
				return -1;
			l->sandboxes_cpus = v;
		} else if (!strcmp(k, "pool")) {
			if (get_num(it, "sandboxes", 0, SERVE_SBX_POOL_MAX, &v, err) < 0)
				return -1;
			l->sandboxes_pool = (int)v;
		} else if (!strcmp(k, "networkPool")) {
			if (get_num(it, "sandboxes", 0, SERVE_SBX_POOL_MAX, &v, err) < 0)
				return -1;
			l->sandboxes_network_pool = (int)v;
		} else {
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "config serve.sandboxes: unknown key \"%.64s\" "
					      "(memoryMb, cpus, pool, networkPool)", k);
		}
	}
	return 0;
}

/* serve.e2b.templates: {"name": "/abs/dir", ...} into l->e2b_templates. */
static int parse_templates(const cJSON *obj, struct serve_limits *l, struct moat_error *err)
{
	if (!cJSON_IsObject(obj) || cJSON_GetArraySize(obj) > (int)SERVE_E2B_MAX_TEMPLATES)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "config serve.e2b.templates must be {\"name\": \"/root/dir\", "
				      "...} (at most %u)", SERVE_E2B_MAX_TEMPLATES);
	struct moat_buf b = { 0 };
	unsigned n = 0;
	for (const cJSON *t = obj->child; t; t = t->next) {
		const char *name = t->string ? t->string : "";
		size_t nl = strlen(name);
		/* cJSON keeps a repeated key: the first would win, silently */
		bool ok = nl >= 1 && nl <= SERVE_E2B_MAX_TEMPLATE_NAME &&
			  cJSON_GetObjectItemCaseSensitive(obj, name) == t;
		for (size_t i = 0; ok && i < nl; i++)
			ok = strchr("abcdefghijklmnopqrstuvwxyz0123456789_-", name[i]) != NULL;
		if (!ok) {
			moat_buf_free(&b);
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "config serve.e2b.templates: a template's name is 1 to "
					      "%u of a-z, 0-9, _ and -, each once",
					      SERVE_E2B_MAX_TEMPLATE_NAME);
		}
		struct stat st;
		const char *dir = cJSON_IsString(t) ? t->valuestring : "";
		if (dir[0] != '/' || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
			moat_buf_free(&b);
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "config serve.e2b.templates.%s: the root must be an "
					      "absolute path to an existing directory (as --rootfs)",
					      name);
		}
		/* a prepared root's mount points (ns/plan.c checks them again at each
		 * create): missing, every create on it would fail, told only there */
		static const char *const need[] = { "proc", "dev", "tmp", "sandbox",
						    "opt/moat/runtime" };
		for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
			MOAT_AUTOFREE char *sub = NULL;
			if (asprintf(&sub, "%s/%s", dir, need[i]) < 0) {
				sub = NULL;
				moat_buf_free(&b);
				return moat_error_oom(err);
			}
			if (lstat(sub, &st) < 0 || !S_ISDIR(st.st_mode)) {
				moat_buf_free(&b);
				return moat_error_set(err, MOAT_ERR_CONFIG, 0,
						      "config serve.e2b.templates.%s: %s has no /%s "
						      "directory (a prepared root, as --rootfs: "
						      "rootfs/build-rootfs.sh)", name, dir, need[i]);
			}
		}
		moat_buf_append(&b, name, nl + 1);
		moat_buf_append(&b, dir, strlen(dir) + 1);
		if (b.oom) {
			moat_buf_free(&b);
			return moat_error_oom(err);
		}
		n++;
	}
	free(l->e2b_templates);
	l->e2b_templates = b.data;
	l->e2b_ntemplates = n;
	return 0;
}

/* The "e2b" object: {"keys": ["e2b_<hex>", ...], "templates": {...}}
 * (docs/E2B.md); "templates" may be left out. */
static int parse_e2b(const cJSON *obj, struct serve_limits *l, struct moat_error *err)
{
	const cJSON *keys = cJSON_GetObjectItemCaseSensitive(obj, "keys");
	const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(obj, "templates");
	if (!cJSON_IsObject(obj) || !cJSON_IsArray(keys) ||
	    cJSON_GetArraySize(obj) != 1 + (tmpl != NULL) ||
	    cJSON_GetArraySize(keys) > (int)SERVE_E2B_MAX_KEYS)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "config serve.e2b must be {\"keys\": [...], \"templates\": "
				      "{...}} (at most %u keys; templates may be left out)",
				      SERVE_E2B_MAX_KEYS);
	l->e2b_nkeys = 0;
	for (const cJSON *k = keys->child; k; k = k->next) {
		size_t n = cJSON_IsString(k) ? strlen(k->valuestring) : 0;
		bool ok = n >= 4 + 32 && n <= 4 + 128 && !strncmp(k->valuestring, "e2b_", 4);
		for (size_t i = 4; ok && i < n; i++)
			ok = strchr("0123456789abcdef", k->valuestring[i]) != NULL;
		if (!ok)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "config serve.e2b.keys: each key is \"e2b_\" and 32 to "
					      "128 lowercase hex digits (128 bits at least)");
		moat_sha256(k->valuestring, n, l->e2b_keys[l->e2b_nkeys++]);
	}
	return tmpl ? parse_templates(tmpl, l, err) : 0;
}

void serve_limits_free(struct serve_limits *l)
{
	free(l->e2b_templates);
	l->e2b_templates = NULL;
	l->e2b_ntemplates = 0;
}

const char *serve_limits_e2b_template(const struct serve_limits *l, const char *name)
{
	const char *p = l->e2b_templates;
	for (unsigned i = 0; p && i < l->e2b_ntemplates; i++) {
		const char *dir = p + strlen(p) + 1;
		if (!strcmp(p, name))
			return dir;
		p = dir + strlen(dir) + 1;
	}
	return NULL;
}

/* The "sessions" object. */
static int parse_sessions(const cJSON *obj, struct serve_limits *l, struct moat_error *err)
{
	if (!cJSON_IsObject(obj))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "config serve.sessions must be an object");
	for (const cJSON *it = obj->child; it; it = it->next) {
		const char *k = it->string ? it->string : "";
		double v = 0;
		if (!strcmp(k, "max")) {
			if (get_num(it, "sessions", 0, SERVE_SESSIONS_LIMIT, &v, err) < 0)
				return -1;
			l->sessions_max = (int)v;
		} else if (!strcmp(k, "maxCpuTimeMs")) {
			if (get_num(it, "sessions", 100, (double)MAX_TIMEOUT_MS * 7, &v, err) < 0)
				return -1;
			l->session_max_cpu_ms = (uint64_t)v;
		} else if (!strcmp(k, "idleTimeoutMs") || !strcmp(k, "maxIdleTimeoutMs") ||
			   !strcmp(k, "maxLifetimeMs")) {
			if (get_num(it, "sessions", 100, (double)MAX_TIMEOUT_MS * 7, &v, err) < 0)
				return -1;
			*(!strcmp(k, "idleTimeoutMs")	 ? &l->session_idle_ms
			  : !strcmp(k, "maxLifetimeMs") ? &l->session_max_life_ms
						       : &l->session_max_idle_ms) = (uint64_t)v;
		} else if (!strcmp(k, "interruptGraceMs")) {
			if (get_num(it, "sessions", 100, 60000, &v, err) < 0)
				return -1;
			l->session_grace_ms = (uint64_t)v;
		} else if (!strcmp(k, "onHangup")) {
			bool fin = cJSON_IsString(it) && !strcmp(it->valuestring, "finish");
			if (!fin && !(cJSON_IsString(it) && !strcmp(it->valuestring, "interrupt")))
				return moat_error_set(err, MOAT_ERR_CONFIG, 0,
						      "config serve.sessions.onHangup must be "
						      "\"interrupt\" or \"finish\"");
			l->session_hangup_finish = fin;
		} else {
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "config serve.sessions: unknown key \"%.64s\" (max, "
					      "idleTimeoutMs, maxIdleTimeoutMs, maxLifetimeMs, "
					      "maxCpuTimeMs, interruptGraceMs, onHangup)", k);
		}
	}
	if (l->session_idle_ms > l->session_max_idle_ms)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "config serve.sessions: idleTimeoutMs %llu is above "
				      "maxIdleTimeoutMs %llu",
				      (unsigned long long)l->session_idle_ms,
				      (unsigned long long)l->session_max_idle_ms);
	return 0;
}

int serve_limits_parse(const char *json, struct serve_limits *l, struct moat_error *err)
{
	if (!json)
		return 0;
	cJSON *root = cJSON_Parse(json);
	int rc = -1;
	if (!cJSON_IsObject(root)) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "config \"serve\" must be an object");
		goto out;
	}
	for (const cJSON *it = root->child; it; it = it->next) {
		const char *k = it->string ? it->string : "";
		if (!strcmp(k, "defaults")) {
			if (parse_set(it, "defaults", &l->def_timeout_ms, &l->def_memory_mb,
				      &l->def_cpus, &l->def_pids, NULL, err) < 0)
				goto out;
		} else if (!strcmp(k, "max")) {
			if (parse_set(it, "max", &l->max_timeout_ms, &l->max_memory_mb, &l->max_cpus,
				      &l->max_pids, &l->max_output_bytes, err) < 0)
				goto out;
		} else if (!strcmp(k, "allowOpenNetwork")) {
			if (get_bool(it, &l->allow_open_network, err) < 0)
				goto out;
		} else if (!strcmp(k, "e2b")) {
			if (parse_e2b(it, l, err) < 0)
				goto out;
		} else if (!strcmp(k, "maxResponseBytes")) {
			double v = 0;
			if (get_num(it, "", 1024, 1024.0 * 1024 * 1024, &v, err) < 0)
				goto out;
			l->max_response_bytes = (uint64_t)v;
		} else if (!strcmp(k, "pool")) {
			double v = 0;
			if (get_num(it, "", 0, 64, &v, err) < 0)
				goto out;
			l->pool = (int)v;
		} else if (!strcmp(k, "poolZygote")) {
			bool on = false;
			if (get_bool(it, &on, err) < 0)
				goto out;
			l->pool_zygote = on;
		} else if (!strcmp(k, "poolZygoteMaxChildren")) {
			double v = 0;
			if (get_num(it, "", 1, SERVE_ZYGOTE_CHILDREN_LIMIT, &v, err) < 0)
				goto out;
			l->pool_zygote_max_children = (unsigned)v;
		} else if (!strcmp(k, "poolZygoteMaxAge")) {
			double v = 0;
			if (get_num(it, "", 1, SERVE_ZYGOTE_AGE_LIMIT_S, &v, err) < 0)
				goto out;
			l->pool_zygote_max_age_ms = (uint64_t)(v * 1000);
		} else if (!strcmp(k, "sessions")) {
			if (parse_sessions(it, l, err) < 0)
				goto out;
		} else if (!strcmp(k, "sandboxes")) {
			if (parse_sandboxes(it, l, err) < 0)
				goto out;
		} else if (!strcmp(k, "node")) {
			if (!cJSON_IsString(it) ||
			    !serve_node_name_valid(it->valuestring, strlen(it->valuestring))) {
				moat_error_set(err, MOAT_ERR_CONFIG, 0,
					       "config serve.node must be 1-32 of a-z, 0-9 and -");
				goto out;
			}
			strcpy(l->node, it->valuestring);
		} else if (!strcmp(k, "maxRelays") || !strcmp(k, "maxDns")) {
			bool tcp = k[3] == 'R';
			double v = 0;
			double hi = tcp ? SERVE_MAX_RELAYS_LIMIT : SERVE_MAX_DNS_LIMIT;
			if (get_num(it, "", 1, hi, &v, err) < 0)
				goto out;
			*(tcp ? &l->max_relays : &l->max_dns) = (unsigned)v;
		} else {
			moat_error_set(err, MOAT_ERR_CONFIG, 0,
				       "config serve: unknown key \"%.64s\" (defaults, max, "
				       "allowOpenNetwork, e2b, maxResponseBytes, pool, poolZygote, "
				       "poolZygoteMaxChildren, poolZygoteMaxAge, maxRelays, "
				       "maxDns, sessions, sandboxes, node)", k);
			goto out;
		}
	}
	if (l->def_timeout_ms > l->max_timeout_ms || l->def_memory_mb > l->max_memory_mb ||
	    l->def_cpus > l->max_cpus || l->def_pids > l->max_pids) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0,
			       "config serve: a default is above its max (timeout %llu/%llu ms, "
			       "memoryMb %llu/%llu, cpus %g/%g, pidsLimit %llu/%llu)",
			       (unsigned long long)l->def_timeout_ms,
			       (unsigned long long)l->max_timeout_ms,
			       (unsigned long long)l->def_memory_mb,
			       (unsigned long long)l->max_memory_mb, l->def_cpus, l->max_cpus,
			       (unsigned long long)l->def_pids, (unsigned long long)l->max_pids);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

static int over(struct moat_error *err, const char *what, double asked, double max,
		const char *unit)
{
	return moat_error_set(err, MOAT_ERR_POLICY, 0,
			      "%s %.15g%s exceeds this server's maximum %.15g%s", what, asked, unit,
			      max, unit);
}

int serve_limits_apply(const struct serve_limits *l, struct moat_request *req, unsigned given,
		       struct moat_error *err)
{
	if (!(given & MOAT_REQ_HAS_TIMEOUT))
		req->timeout_ms = l->def_timeout_ms;
	if (!(given & MOAT_REQ_HAS_MEMORY))
		req->memory_mb = l->def_memory_mb;
	if (!(given & MOAT_REQ_HAS_CPUS))
		req->cpus = l->def_cpus;
	if (!(given & MOAT_REQ_HAS_PIDS))
		req->pids_limit = l->def_pids;
	if (req->timeout_ms > l->max_timeout_ms)
		return over(err, "timeout", (double)req->timeout_ms, (double)l->max_timeout_ms,
			    " ms");
	if (req->memory_mb > l->max_memory_mb)
		return over(err, "memoryMb", (double)req->memory_mb, (double)l->max_memory_mb, "");
	if (req->cpus > l->max_cpus)
		return over(err, "cpus", req->cpus, l->max_cpus, "");
	if (req->pids_limit > l->max_pids)
		return over(err, "pidsLimit", (double)req->pids_limit, (double)l->max_pids, "");
	/* what the request did not ask for (moat's default, a Spin script's
	 * cap) fits under the max; what it asked for must */
	if (req->max_output_bytes > l->max_output_bytes) {
		if (given & MOAT_REQ_HAS_MAXOUT)
			return over(err, "maxOutputBytes", (double)req->max_output_bytes,
				    (double)l->max_output_bytes, "");
		req->max_output_bytes = l->max_output_bytes;
	}
	if (req->network && !l->allow_open_network)
		return moat_error_set(err, MOAT_ERR_POLICY, 0,
				      "\"network\": true (open egress) is not allowed on this server "
				      "(config serve.allowOpenNetwork); use \"allowedHosts\"");
	return 0;
}

/* The last non-empty line of stderr, bounded and printable. */
static void last_line(const struct moat_result *res, struct moat_buf *b)
{
	const char *s = res->stderr_buf;
	size_t n = res->stderr_len;
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		n--;
	size_t start = n;
	while (start && s[start - 1] != '\n')
		start--;
	size_t len = n - start;
	if (len > 300) {
		start = n - 300;
		len = 300;
	}
	if (!len)
		return;
	moat_buf_append(b, ": ", 2);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[start + i];
		char ch = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
		moat_buf_append(b, &ch, 1);
	}
}

char *serve_script_error(const struct moat_result *res, const struct moat_request *req)
{
	struct moat_buf b = { 0 };
	if (res->exited && res->exit_code == 0)
		return NULL;
	const char *k = res->killed_by ? res->killed_by : "";
	if (res->exited) {
		moat_buf_appendf(&b, "exit code %d", res->exit_code);
		last_line(res, &b);
	} else if (res->timed_out || !strcmp(k, "timeout")) {
		moat_buf_appendf(&b, "timed out after %llu ms", (unsigned long long)req->timeout_ms);
	} else if (res->oom_killed || !strcmp(k, "oom")) {
		moat_buf_appendf(&b, "memory limit exceeded (%llu MiB)",
				 (unsigned long long)req->memory_mb);
	} else if (!strcmp(k, "pids")) {
		moat_buf_appendf(&b, "process limit reached (%llu)",
				 (unsigned long long)req->pids_limit);
	} else if (!strcmp(k, "seccomp")) {
		moat_buf_appendf(&b, "killed by seccomp (a forbidden system call)");
	} else if (!strcmp(k, "cancelled")) {
		moat_buf_appendf(&b, "cancelled");
	} else {
		const char *abbrev = res->signal > 0 ? sigabbrev_np(res->signal) : NULL;
		if (abbrev)
			moat_buf_appendf(&b, "killed by signal SIG%s", abbrev);
		else
			moat_buf_appendf(&b, "killed by signal %d", res->signal);
	}
	return moat_buf_take(&b);
}

enum serve_outcome serve_run_outcome(const struct moat_result *res)
{
	const char *k = res->killed_by ? res->killed_by : "";
	if (res->exited)
		return res->exit_code == 0 ? O_OK : O_ERROR;
	if (res->timed_out || !strcmp(k, "timeout"))
		return O_TIMEOUT;
	if (res->oom_killed || !strcmp(k, "oom"))
		return O_OOM;
	if (!strcmp(k, "cancelled"))
		return O_DISCONNECTED;
	return O_KILLED;
}
