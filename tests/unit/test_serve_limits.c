/* Unit tests, suite serve (test_serve.c): the operator limits, the script
 * error line and the outcome, the metrics, the listeners' auth check and
 * the log. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "net/internal.h"
#include "serve/internal.h"
#include "fixture.h"

/* ---- operator limits ---- */

/* serve.e2b.keys (docs/E2B.md): E2B's form with 128 bits at least, their
 * hashes kept; anything else refuses the config. */
START_TEST(limits_e2b_keys)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	ck_assert_uint_eq(l.e2b_nkeys, 0);
	const char *key = "e2b_0123456789abcdef0123456789abcdef";
	char json[256];
	snprintf(json, sizeof json, "{\"e2b\":{\"keys\":[\"%s\"]}}", key);
	ck_assert_int_eq(serve_limits_parse(json, &l, &err), 0);
	ck_assert_uint_eq(l.e2b_nkeys, 1);
	uint8_t h[MOAT_SHA256_LEN];
	moat_sha256(key, strlen(key), h);
	ck_assert(memcmp(h, l.e2b_keys[0], MOAT_SHA256_LEN) == 0);
	static const char *const bad[] = {
		"{\"e2b\":{\"keys\":[\"e2b_0123\"]}}",				/* < 128 bits */
		"{\"e2b\":{\"keys\":[\"xyz_0123456789abcdef0123456789abcdef\"]}}", /* not e2b_ */
		"{\"e2b\":{\"keys\":[\"e2b_0123456789ABCDEF0123456789ABCDEF\"]}}", /* upper case */
		"{\"e2b\":{\"keys\":[\"e2b_0123456789abcdef0123456789abcdeg\"]}}", /* not hex */
		"{\"e2b\":{\"keys\":[7]}}", "{\"e2b\":{\"keys\":\"e2b_\"}}",
		"{\"e2b\":{\"keys\":[],\"other\":1}}", "{\"e2b\":[]}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		serve_limits_default(&l);
		ck_assert_msg(serve_limits_parse(bad[i], &l, &err) < 0, "%s", bad[i]);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		moat_error_clear(&err);
	}
	/* more than 64 keys */
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"e2b\":{\"keys\":[", 15);
	for (int i = 0; i < 65; i++)
		moat_buf_appendf(&b, "%s\"e2b_%032x\"", i ? "," : "", i);
	moat_buf_append(&b, "]}}", 3);
	serve_limits_default(&l);
	ck_assert_int_lt(serve_limits_parse(b.data, &l, &err), 0);
	moat_error_clear(&err);
	moat_buf_free(&b);
}
END_TEST

/* serve.e2b.templates: names E2B allows, roots absolute existing directories,
 * at most 64; the lookup finds each name's root and nothing else. */
START_TEST(limits_e2b_templates)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	/* two prepared roots: the mount points a root needs */
	char a[] = "/tmp/moat-tpl-a.XXXXXX", b2[] = "/tmp/moat-tpl-b.XXXXXX";
	static const char *const need[] = { "proc", "dev", "tmp", "sandbox", "opt", "opt/moat",
					    "opt/moat/runtime" };
	ck_assert_ptr_nonnull(mkdtemp(a));
	ck_assert_ptr_nonnull(mkdtemp(b2));
	char sub[128];
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		snprintf(sub, sizeof sub, "%s/%s", a, need[i]);
		ck_assert_int_eq(mkdir(sub, 0755), 0);
		snprintf(sub, sizeof sub, "%s/%s", b2, need[i]);
		ck_assert_int_eq(mkdir(sub, 0755), 0);
	}
	char ok[512];
	snprintf(ok, sizeof ok, "{\"e2b\":{\"keys\":[],\"templates\":{\"marked\":\"%s\","
		 "\"base\":\"%s\",\"my_tpl-2\":\"%s\"}}}", a, b2, a);
	ck_assert_int_eq(serve_limits_parse(ok, &l, &err), 0);
	ck_assert_uint_eq(l.e2b_ntemplates, 3);
	ck_assert_str_eq(serve_limits_e2b_template(&l, "marked"), a);
	ck_assert_str_eq(serve_limits_e2b_template(&l, "base"), b2);
	ck_assert_str_eq(serve_limits_e2b_template(&l, "my_tpl-2"), a);
	ck_assert_ptr_null(serve_limits_e2b_template(&l, "mark"));
	ck_assert_ptr_null(serve_limits_e2b_template(&l, a));
	serve_limits_free(&l);
	ck_assert_ptr_null(serve_limits_e2b_template(&l, "marked"));
	/* a directory that is not a prepared root (no /sandbox) */
	snprintf(sub, sizeof sub, "%s/sandbox", b2);
	ck_assert_int_eq(rmdir(sub), 0);
	snprintf(ok, sizeof ok, "{\"e2b\":{\"keys\":[],\"templates\":{\"x\":\"%s\"}}}", b2);
	serve_limits_default(&l);
	ck_assert_int_lt(serve_limits_parse(ok, &l, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.message, "no /sandbox directory"));
	moat_error_clear(&err);
	for (size_t i = sizeof need / sizeof need[0]; i-- > 0;) {
		snprintf(sub, sizeof sub, "%s/%s", a, need[i]);
		rmdir(sub);
		snprintf(sub, sizeof sub, "%s/%s", b2, need[i]);
		rmdir(sub);
	}
	ck_assert_int_eq(rmdir(a), 0);
	ck_assert_int_eq(rmdir(b2), 0);
	static const char *const bad[] = {
		"{\"e2b\":{\"keys\":[],\"templates\":{\"x\":\"tmp\"}}}",	  /* relative */
		"{\"e2b\":{\"keys\":[],\"templates\":{\"x\":\"/no/such/dir\"}}}",
		"{\"e2b\":{\"keys\":[],\"templates\":{\"x\":\"/etc/passwd\"}}}", /* a file */
		"{\"e2b\":{\"keys\":[],\"templates\":{\"x\":7}}}",
		"{\"e2b\":{\"keys\":[],\"templates\":{\"X\":\"/tmp\"}}}",	  /* upper case */
		"{\"e2b\":{\"keys\":[],\"templates\":{\"a/b\":\"/tmp\"}}}",
		"{\"e2b\":{\"keys\":[],\"templates\":{\"\":\"/tmp\"}}}",
		"{\"e2b\":{\"keys\":[],\"templates\":[\"/tmp\"]}}",
		"{\"e2b\":{\"keys\":[],\"templates\":{\"x\":\"/tmp\",\"x\":\"/usr\"}}}",
		"{\"e2b\":{\"templates\":{\"x\":\"/tmp\"}}}", /* keys stay required */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		serve_limits_default(&l);
		ck_assert_msg(serve_limits_parse(bad[i], &l, &err) < 0, "%s", bad[i]);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		moat_error_clear(&err);
		serve_limits_free(&l);
	}
	/* a 65-byte name, and 65 templates */
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"e2b\":{\"keys\":[],\"templates\":{\"%065d\":\"/tmp\"}}}", 0);
	serve_limits_default(&l);
	ck_assert_int_lt(serve_limits_parse(b.data, &l, &err), 0);
	moat_error_clear(&err);
	moat_buf_free(&b);
	moat_buf_appendf(&b, "{\"e2b\":{\"keys\":[],\"templates\":{");
	for (int i = 0; i < 65; i++)
		moat_buf_appendf(&b, "%s\"t%d\":\"/tmp\"", i ? "," : "", i);
	moat_buf_appendf(&b, "}}}");
	ck_assert_int_lt(serve_limits_parse(b.data, &l, &err), 0);
	moat_error_clear(&err);
	moat_buf_free(&b);
	serve_limits_free(&l);
}
END_TEST

START_TEST(limits_parse)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	ck_assert_uint_eq(l.def_timeout_ms, 10000);
	ck_assert_uint_eq(l.max_timeout_ms, 60000);
	ck_assert_uint_eq(l.def_memory_mb, 256);
	ck_assert_uint_eq(l.max_memory_mb, 1024);
	ck_assert(l.def_cpus == 1);
	ck_assert(l.max_cpus >= 1);
	ck_assert_uint_eq(l.def_pids, 64);
	ck_assert_uint_eq(l.max_pids, 256);
	ck_assert(!l.allow_open_network);
	ck_assert_uint_eq(l.max_response_bytes, 16777216);
	ck_assert_uint_eq(l.max_output_bytes, 4194304);
	ck_assert_int_eq(serve_limits_parse(NULL, &l, &err), 0);
	ck_assert_uint_eq(l.def_timeout_ms, 10000);
	ck_assert_int_eq(serve_limits_parse("{}", &l, &err), 0);
	ck_assert_uint_eq(l.max_response_bytes, 16777216);

	ck_assert_int_eq(serve_limits_parse(
				 "{\"defaults\":{\"timeout\":2000,\"memoryMb\":128,\"cpus\":0.5,"
				 "\"pidsLimit\":32},\"max\":{\"timeout\":5000,\"memoryMb\":512,"
				 "\"cpus\":1.5,\"pidsLimit\":100},\"allowOpenNetwork\":true,"
				 "\"maxResponseBytes\":4096}", &l, &err), 0);
	ck_assert_ptr_null(err.message);
	ck_assert_uint_eq(l.def_timeout_ms, 2000);
	ck_assert_uint_eq(l.max_timeout_ms, 5000);
	ck_assert_uint_eq(l.def_memory_mb, 128);
	ck_assert_uint_eq(l.max_memory_mb, 512);
	ck_assert(l.def_cpus == 0.5);
	ck_assert(l.max_cpus == 1.5);
	ck_assert_uint_eq(l.def_pids, 32);
	ck_assert_uint_eq(l.max_pids, 100);
	ck_assert(l.allow_open_network);
	ck_assert_uint_eq(l.max_response_bytes, 4096);

	ck_assert_int_eq(serve_limits_parse("{\"allowOpenNetwork\":false}", &l, &err), 0);
	ck_assert(!l.allow_open_network);

	/* poolZygote: unset (-1: the service decides) unless a boolean says */
	serve_limits_default(&l);
	ck_assert_int_eq(l.pool_zygote, -1);
	ck_assert_int_eq(serve_limits_parse("{\"pool\":3}", &l, &err), 0);
	ck_assert_int_eq(l.pool_zygote, -1);
	ck_assert_int_eq(serve_limits_parse("{\"poolZygote\":false}", &l, &err), 0);
	ck_assert_int_eq(l.pool_zygote, 0);
	ck_assert_int_eq(serve_limits_parse("{\"poolZygote\":true}", &l, &err), 0);
	ck_assert_int_eq(l.pool_zygote, 1);

	/* serve.max.maxOutputBytes: 1 B .. 1 GiB; not a default */
	ck_assert_int_eq(serve_limits_parse("{\"max\":{\"maxOutputBytes\":65536}}", &l, &err), 0);
	ck_assert_uint_eq(l.max_output_bytes, 65536);
	/* the zygote's lifetime: 100 children, 60 s unless set (issue 31) */
	serve_limits_default(&l);
	ck_assert_uint_eq(l.pool_zygote_max_children, 100);
	ck_assert_uint_eq(l.pool_zygote_max_age_ms, 60000);
	ck_assert_int_eq(serve_limits_parse("{\"poolZygoteMaxChildren\":7,\"poolZygoteMaxAge\":2}",
					    &l, &err), 0);
	ck_assert_uint_eq(l.pool_zygote_max_children, 7);
	ck_assert_uint_eq(l.pool_zygote_max_age_ms, 2000);
	/* the relay caps across runs: 4096 connections, 256 DNS questions */
	serve_limits_default(&l);
	ck_assert_uint_eq(l.max_relays, 4096);
	ck_assert_uint_eq(l.max_dns, 256);
	ck_assert_int_eq(serve_limits_parse("{\"maxRelays\":100,\"maxDns\":8}", &l, &err), 0);
	ck_assert_uint_eq(l.max_relays, 100);
	ck_assert_uint_eq(l.max_dns, 8);

	/* sessions (docs/SESSIONS.md): max unset (from memory), 10 min idle, 1 h */
	serve_limits_default(&l);
	ck_assert_int_eq(l.sessions_max, -1);
	ck_assert_uint_eq(l.session_idle_ms, 600000);
	ck_assert_uint_eq(l.session_max_idle_ms, 3600000);
	ck_assert_uint_eq(l.session_max_life_ms, 3600000);
	ck_assert_int_eq(serve_limits_parse("{\"sessions\":{\"max\":0,\"idleTimeoutMs\":1500,"
					    "\"maxIdleTimeoutMs\":2000,\"maxLifetimeMs\":9000}}",
					    &l, &err), 0);
	ck_assert_int_eq(l.sessions_max, 0);
	ck_assert_uint_eq(l.session_idle_ms, 1500);
	ck_assert_uint_eq(l.session_max_idle_ms, 2000);
	ck_assert_uint_eq(l.session_max_life_ms, 9000);
	/* an interrupt's grace and a hang-up's (issue 46): 2 s and "interrupt" */
	ck_assert_uint_eq(l.session_grace_ms, 2000);
	ck_assert(!l.session_hangup_finish);
	ck_assert_int_eq(serve_limits_parse("{\"sessions\":{\"interruptGraceMs\":500,"
					    "\"onHangup\":\"finish\"}}", &l, &err), 0);
	ck_assert_uint_eq(l.session_grace_ms, 500);
	ck_assert(l.session_hangup_finish);

	/* only some keys: the rest stay */
	serve_limits_default(&l);
	ck_assert_int_eq(serve_limits_parse("{\"max\":{\"timeout\":120000}}", &l, &err), 0);
	ck_assert_uint_eq(l.max_timeout_ms, 120000);
	ck_assert_uint_eq(l.def_timeout_ms, 10000);
	ck_assert_uint_eq(l.max_memory_mb, 1024);
	ck_assert(!l.allow_open_network);

	static const char *const bad[][2] = {
		{ "[]", "object" },
		{ "1", "object" },
		{ "{", "object" },
		{ "{\"default\":{}}", "unknown key \"default\"" },
		{ "{\"maxima\":{}}", "unknown key" },
		{ "{\"defaults\":{\"timeoutMs\":1}}", "unknown key \"timeoutMs\"" },
		{ "{\"max\":{\"network\":true}}", "unknown key" },
		{ "{\"defaults\":[]}", "serve.defaults must be an object" },
		{ "{\"max\":1}", "serve.max must be an object" },
		{ "{\"defaults\":{\"timeout\":\"1000\"}}", "timeout" },
		{ "{\"defaults\":{\"timeout\":0}}", "timeout" },
		{ "{\"defaults\":{\"memoryMb\":true}}", "memoryMb" },
		{ "{\"defaults\":{\"memoryMb\":8}}", "memoryMb" },
		{ "{\"max\":{\"cpus\":0}}", "cpus" },
		{ "{\"max\":{\"cpus\":null}}", "cpus" },
		{ "{\"max\":{\"pidsLimit\":0}}", "pidsLimit" },
		{ "{\"max\":{\"pidsLimit\":-5}}", "pidsLimit" },
		{ "{\"allowOpenNetwork\":1}", "allowOpenNetwork" },
		{ "{\"allowOpenNetwork\":\"true\"}", "allowOpenNetwork" },
		{ "{\"poolZygote\":1}", "serve.poolZygote must be a boolean" },
		{ "{\"poolZygote\":\"false\"}", "serve.poolZygote must be a boolean" },
		{ "{\"poolzygote\":true}", "unknown key \"poolzygote\"" },
		{ "{\"defaults\":{\"maxOutputBytes\":1024}}", "unknown key \"maxOutputBytes\"" },
		{ "{\"max\":{\"maxOutputBytes\":0}}", "serve.max.maxOutputBytes must be" },
		{ "{\"max\":{\"maxOutputBytes\":1073741825}}", "maxOutputBytes" },
		{ "{\"max\":{\"maxOutputBytes\":\"1\"}}", "maxOutputBytes" },
		{ "{\"poolZygoteMaxChildren\":0}", "poolZygoteMaxChildren" },
		{ "{\"poolZygoteMaxChildren\":true}", "poolZygoteMaxChildren" },
		{ "{\"poolZygoteMaxAge\":0}", "poolZygoteMaxAge" },
		{ "{\"poolZygoteMaxAge\":100000}", "poolZygoteMaxAge" },
		{ "{\"maxResponseBytes\":\"1\"}", "maxResponseBytes" },
		{ "{\"maxRelays\":0}", "serve.maxRelays must be a number from 1 to 1048576" },
		{ "{\"maxRelays\":1048577}", "maxRelays" },
		{ "{\"maxDns\":0}", "serve.maxDns must be a number from 1 to 65536" },
		{ "{\"maxDns\":\"8\"}", "maxDns" },
		{ "{\"maxdns\":8}", "unknown key \"maxdns\"" },
		{ "{\"maxResponseBytes\":100}", "maxResponseBytes" },
		{ "{\"defaults\":{\"timeout\":70000}}", "above its max" },
		{ "{\"defaults\":{\"memoryMb\":2048}}", "above its max" },
		{ "{\"defaults\":{\"pidsLimit\":300}}", "above its max" },
		{ "{\"max\":{\"timeout\":5000}}", "above its max" },
		{ "{\"defaults\":{\"cpus\":1000}}", "above its max" },
		{ "{\"sessions\":1}", "serve.sessions must be an object" },
		{ "{\"sessions\":{\"max\":4097}}", "serve.sessions.max must be" },
		{ "{\"sessions\":{\"idleTimeoutMs\":99}}", "serve.sessions.idleTimeoutMs" },
		{ "{\"sessions\":{\"idleTimeoutMs\":7200000}}", "above maxIdleTimeoutMs" },
		{ "{\"sessions\":{\"maxlifetimems\":1000}}", "unknown key \"maxlifetimems\"" },
		{ "{\"sessions\":{\"interruptGraceMs\":99}}", "serve.sessions.interruptGraceMs" },
		{ "{\"sessions\":{\"interruptGraceMs\":60001}}", "serve.sessions.interruptGraceMs" },
		{ "{\"sessions\":{\"onHangup\":\"kill\"}}", "\"interrupt\" or \"finish\"" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		serve_limits_default(&l);
		ck_assert_msg(serve_limits_parse(bad[i][0], &l, &err) == -1, "accepted %s", bad[i][0]);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		ck_assert_msg(strstr(err.message, bad[i][1]), "%s: \"%s\" lacks \"%s\"", bad[i][0],
			      err.message, bad[i][1]);
		moat_error_clear(&err);
	}
}
END_TEST

/* The message of a bad maxResponseBytes names it as the config spells it. */
START_TEST(limits_message_names_key)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	ck_assert_int_eq(serve_limits_parse("{\"maxResponseBytes\":100}", &l, &err), -1);
	ck_assert_msg(strstr(err.message, "serve.maxResponseBytes"), "%s", err.message);
	ck_assert_msg(!strstr(err.message, ".."), "%s", err.message);
	moat_error_clear(&err);
}
END_TEST

START_TEST(limits_apply)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	l.max_cpus = 2;

	/* given = 0: every limit from the defaults, even if the request held one */
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->timeout_ms = 999999;
	req->memory_mb = 99999;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	ck_assert_uint_eq(req->timeout_ms, 10000);
	ck_assert_uint_eq(req->memory_mb, 256);
	ck_assert(req->cpus == 1);
	ck_assert_uint_eq(req->pids_limit, 64);
	ck_assert_ptr_null(err.message);

	/* given values within the max are kept */
	req->timeout_ms = 60000;
	req->memory_mb = 1024;
	req->cpus = 2;
	req->pids_limit = 256;
	unsigned all = MOAT_REQ_HAS_TIMEOUT | MOAT_REQ_HAS_MEMORY | MOAT_REQ_HAS_CPUS |
		       MOAT_REQ_HAS_PIDS;
	ck_assert_int_eq(serve_limits_apply(&l, req, all, &err), 0);
	ck_assert_uint_eq(req->timeout_ms, 60000);
	ck_assert_uint_eq(req->memory_mb, 1024);
	ck_assert(req->cpus == 2);
	ck_assert_uint_eq(req->pids_limit, 256);

	/* one at a time over the max: a policy error naming it */
	struct {
		unsigned flag;
		const char *name;
	} over[] = {
		{ MOAT_REQ_HAS_TIMEOUT, "timeout" },
		{ MOAT_REQ_HAS_MEMORY, "memoryMb" },
		{ MOAT_REQ_HAS_CPUS, "cpus" },
		{ MOAT_REQ_HAS_PIDS, "pidsLimit" },
	};
	for (size_t i = 0; i < 4; i++) {
		req->timeout_ms = 60001;
		req->memory_mb = 1025;
		req->cpus = 2.5;
		req->pids_limit = 257;
		ck_assert_int_eq(serve_limits_apply(&l, req, over[i].flag, &err), -1);
		ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
		ck_assert_msg(strstr(err.message, over[i].name), "%s lacks %s", err.message,
			      over[i].name);
		moat_error_clear(&err);
	}
	/* maxOutputBytes: asked above serve.max, refused; unasked (moat's
	 * default, a Spin script's cap), brought down to it */
	req->timeout_ms = 60000;
	req->memory_mb = 1024;
	req->cpus = 2;
	req->pids_limit = 256;
	req->max_output_bytes = 4194305;
	ck_assert_int_eq(serve_limits_apply(&l, req, all | MOAT_REQ_HAS_MAXOUT, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_msg(strstr(err.message, "maxOutputBytes"), "%s", err.message);
	moat_error_clear(&err);
	req->max_output_bytes = 4194304;
	ck_assert_int_eq(serve_limits_apply(&l, req, all | MOAT_REQ_HAS_MAXOUT, &err), 0);
	ck_assert_uint_eq(req->max_output_bytes, 4194304);
	l.max_output_bytes = 1000;
	req->max_output_bytes = 1048576;
	ck_assert_int_eq(serve_limits_apply(&l, req, all, &err), 0);
	ck_assert_uint_eq(req->max_output_bytes, 1000);
	l.max_output_bytes = 4194304;

	req->timeout_ms = 120000;
	ck_assert_int_eq(serve_limits_apply(&l, req, MOAT_REQ_HAS_TIMEOUT, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(strstr(err.message, "timeout"));
	ck_assert_ptr_nonnull(strstr(err.message, "120000"));
	ck_assert_ptr_nonnull(strstr(err.message, "60000"));
	moat_error_clear(&err);
	/* not given: the default replaces it, no error */
	req->timeout_ms = 120000;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	ck_assert_uint_eq(req->timeout_ms, 10000);

	/* open network */
	req->network = true;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_nonnull(strstr(err.message, "network"));
	moat_error_clear(&err);
	ck_assert_int_eq(serve_limits_apply(&l, req, MOAT_REQ_HAS_NETWORK, &err), -1);
	moat_error_clear(&err);
	l.allow_open_network = true;
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	ck_assert(req->network);
	l.allow_open_network = false;
	req->network = false;
	req->has_allowed_hosts = true; /* allowedHosts is always allowed */
	ck_assert_int_eq(serve_limits_apply(&l, req, 0, &err), 0);
	moat_request_free(req);
}
END_TEST

/* ---- the script error line and the outcome ---- */

static char *script_error(struct moat_result *res, const char *stderr_text)
{
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	req->timeout_ms = 1500;
	req->memory_mb = 128;
	req->pids_limit = 64;
	char *copy = NULL;
	if (stderr_text) {
		/* exact size, no NUL after it: ASan sees any over-read */
		copy = malloc(strlen(stderr_text) ? strlen(stderr_text) : 1);
		ck_assert_ptr_nonnull(copy);
		memcpy(copy, stderr_text, strlen(stderr_text));
		res->stderr_buf = copy;
		res->stderr_len = strlen(stderr_text);
	}
	char *e = serve_script_error(res, req);
	res->stderr_buf = NULL;
	res->stderr_len = 0;
	free(copy);
	moat_request_free(req);
	if (e)
		ck_assert_msg(!strchr(e, '\n') && !strchr(e, '\r'), "%s", e);
	return e;
}

static void expect_error(struct moat_result res, const char *stderr_text, const char *want,
			 bool exact, enum serve_outcome outcome)
{
	char *e = script_error(&res, stderr_text);
	if (!want) {
		ck_assert_msg(e == NULL, "%s", e);
	} else {
		ck_assert_ptr_nonnull(e);
		if (exact)
			ck_assert_str_eq(e, want);
		else
			ck_assert_msg(strstr(e, want), "\"%s\" lacks \"%s\"", e, want);
	}
	free(e);
	ck_assert_int_eq(serve_run_outcome(&res), outcome);
}

START_TEST(script_error_lines)
{
	expect_error((struct moat_result){ .exited = true }, NULL, NULL, true, O_OK);
	expect_error((struct moat_result){ .exited = true }, "warning\n", NULL, true, O_OK);
	expect_error((struct moat_result){ .exited = true, .exit_code = 1 },
		     "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: x\n",
		     "exit code 1: ValueError: x", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 1 },
		     "Traceback...\nValueError: x\n", "exit code 1: ValueError: x", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 2 },
		     "first\nlast line  \r\n\n\n", "exit code 2: last line", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 3 }, "no newline",
		     "exit code 3: no newline", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 3 }, "a\tb\x01",
		     "exit code 3: a b ", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 4 }, NULL, "exit code 4",
		     true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 4 }, "\n\n \n",
		     "exit code 4", true, O_ERROR);
	expect_error((struct moat_result){ .exited = true, .exit_code = 255 }, "", "exit code 255",
		     true, O_ERROR);
	/* a long last line is cut to its last 300 bytes */
	char longline[1000];
	memset(longline, 'a', 500);
	memset(longline + 500, 'z', 300);
	longline[800] = '\0';
	struct moat_result r1 = { .exited = true, .exit_code = 1 };
	char *e = script_error(&r1, longline);
	ck_assert_uint_eq(strlen(e), strlen("exit code 1: ") + 300);
	ck_assert_ptr_null(strchr(e + strlen("exit code 1: "), 'a'));
	free(e);

	expect_error((struct moat_result){ .timed_out = true, .killed_by = "timeout",
					   .signal = SIGKILL },
		     "partial\n", "timed out after 1500 ms", true, O_TIMEOUT);
	expect_error((struct moat_result){ .timed_out = true }, NULL, "timed out after", false,
		     O_TIMEOUT);
	expect_error((struct moat_result){ .killed_by = "timeout" }, NULL, "timed out after",
		     false, O_TIMEOUT);
	expect_error((struct moat_result){ .oom_killed = true, .killed_by = "oom",
					   .signal = SIGKILL },
		     NULL, "memory limit exceeded (128 MiB)", true, O_OOM);
	expect_error((struct moat_result){ .killed_by = "oom" }, NULL, "memory limit exceeded",
		     false, O_OOM);
	expect_error((struct moat_result){ .killed_by = "pids", .signal = SIGKILL }, NULL,
		     "process limit reached", false, O_KILLED);
	expect_error((struct moat_result){ .killed_by = "seccomp", .signal = SIGSYS }, NULL,
		     "killed by seccomp", false, O_KILLED);
	expect_error((struct moat_result){ .killed_by = "cancelled", .signal = SIGKILL }, NULL,
		     "cancelled", true, O_DISCONNECTED);
	expect_error((struct moat_result){ .killed_by = "signal", .signal = SIGKILL }, NULL,
		     "killed by signal SIGKILL", true, O_KILLED);
	expect_error((struct moat_result){ .signal = 9 }, "x\n", "killed by signal SIGKILL", true,
		     O_KILLED);
	expect_error((struct moat_result){ .killed_by = "signal", .signal = SIGSEGV }, NULL,
		     "killed by signal SIGSEGV", true, O_KILLED);
	expect_error((struct moat_result){ .killed_by = "signal", .signal = SIGABRT }, NULL,
		     "killed by signal SIGABRT", true, O_KILLED);
	expect_error((struct moat_result){ 0 }, NULL, "killed by signal", false, O_KILLED);
	/* a timeout wins over the exit status only when the program did not exit */
	expect_error((struct moat_result){ .exited = true, .exit_code = 0, .timed_out = false },
		     NULL, NULL, true, O_OK);
}
END_TEST

/* ---- metrics ---- */

/* The value of the line that starts with prefix (followed by ' '), or -1. */
static double metric(const char *text, const char *prefix)
{
	size_t pl = strlen(prefix);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, prefix, pl) && l[pl] == ' ')
			return strtod(l + pl + 1, NULL);
	}
	return -1;
}

static size_t count_lines(const char *text, const char *prefix)
{
	size_t n = 0, pl = strlen(prefix);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, prefix, pl))
			n++;
	return n;
}

/* /metrics' relay caps: the gauges (now, the cap) and the refusals, by
 * kind; zero for a service without caps. */
START_TEST(metrics_relays)
{
	struct moat_relay_caps *c = moat_relay_caps_new(2, 1);
	ck_assert_ptr_nonnull(c);
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_TCP));
	ck_assert(moat_relay_caps_take(c, MOAT_RELAY_DNS));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_DNS));
	ck_assert(!moat_relay_caps_take(c, MOAT_RELAY_DNS));
	struct moat_buf b = { 0 };
	serve_metrics_relays(c, &b);
	char *t = moat_buf_take(&b);
	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_relays gauge\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_relay_limit gauge\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_relay_refused_total counter\n"));
	ck_assert(metric(t, "moat_serve_relays{kind=\"tcp\"}") == 2);
	ck_assert(metric(t, "moat_serve_relays{kind=\"dns\"}") == 1);
	ck_assert(metric(t, "moat_serve_relay_limit{kind=\"tcp\"}") == 2);
	ck_assert(metric(t, "moat_serve_relay_limit{kind=\"dns\"}") == 1);
	ck_assert(metric(t, "moat_serve_relay_refused_total{kind=\"tcp\"}") == 1);
	ck_assert(metric(t, "moat_serve_relay_refused_total{kind=\"dns\"}") == 2);
	free(t);
	moat_relay_caps_release(c);
	memset(&b, 0, sizeof b);
	serve_metrics_relays(NULL, &b);
	t = moat_buf_take(&b);
	ck_assert(metric(t, "moat_serve_relay_refused_total{kind=\"tcp\"}") == 0);
	free(t);
}
END_TEST

START_TEST(metrics_render)
{
	struct serve_metrics m;
	serve_metrics_init(&m);
	char *t = serve_metrics_render(&m);
	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_requests_total counter\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE moat_serve_request_duration_seconds histogram\n"));
	ck_assert_uint_eq(count_lines(t, "moat_serve_requests_total{"), 0);
	ck_assert(metric(t, "moat_serve_in_flight") == 0);
	ck_assert(metric(t, "moat_serve_queued") == 0);
	ck_assert(metric(t, "moat_serve_rejected_total") == 0);
	free(t);

	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_OK, 0.003);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_OK, 0.2);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_TIMEOUT, 1000);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_OK, 0.005); /* le is inclusive */
	serve_metrics_record(&m, R_TS, MOAT_LANG_TYPESCRIPT, O_ERROR, 2);
	serve_metrics_record(&m, R_HEALTHZ, -1, O_OK, 0.0001);
	serve_metrics_record(&m, R_V1_RUN, -1, O_REJECTED, 0.001);
	serve_metrics_record(&m, R_V1_RUN, MOAT_LANG_BASH, O_REJECTED, 0.001);
	serve_metrics_record(&m, R_PY, MOAT_LANG_PYTHON, O_REJECTED, 0.001);
	serve_metrics_record(&m, (enum serve_route)99, 99, (enum serve_outcome)99, 0.5);
	m.in_flight = 3;
	m.queued = 2;
	t = serve_metrics_render(&m);
	ck_assert_ptr_nonnull(t);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"py\",language=\"python\","
			    "outcome=\"ok\"}") == 3);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"py\",language=\"python\","
			    "outcome=\"timeout\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"ts\",language=\"typescript\","
			    "outcome=\"error\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"healthz\",language=\"none\","
			    "outcome=\"ok\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"v1_run\",language=\"none\","
			    "outcome=\"rejected\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"v1_run\",language=\"bash\","
			    "outcome=\"rejected\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"other\",language=\"none\","
			    "outcome=\"error\"}") == 1);
	ck_assert(metric(t, "moat_serve_requests_total{route=\"py\",language=\"python\","
			    "outcome=\"rejected\"}") == 1);
	ck_assert_uint_eq(count_lines(t, "moat_serve_requests_total{"), 8);
	ck_assert(metric(t, "moat_serve_rejected_total") == 3);
	ck_assert(metric(t, "moat_serve_in_flight") == 3);
	ck_assert(metric(t, "moat_serve_queued") == 2);

	/* the histogram of each route that has requests */
	static const char *const routes[] = { "py", "ts", "healthz", "v1_run", "other" };
	static const unsigned counts[] = { 5, 1, 1, 2, 1 };
	static const char *const les[] = { "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
					   "0.5", "1", "2.5", "5", "10", "30", "60", "300",
					   "+Inf" };
	for (size_t r = 0; r < 5; r++) {
		char name[200];
		double prev = 0;
		for (size_t i = 0; i < 15; i++) {
			snprintf(name, sizeof name,
				 "moat_serve_request_duration_seconds_bucket{route=\"%s\",le=\"%s\"}",
				 routes[r], les[i]);
			double v = metric(t, name);
			ck_assert_msg(v >= prev, "%s: %g after %g", name, v, prev);
			prev = v;
		}
		snprintf(name, sizeof name, "moat_serve_request_duration_seconds_count{route=\"%s\"}",
			 routes[r]);
		ck_assert_msg(metric(t, name) == counts[r], "%s", name);
		ck_assert_msg(prev == counts[r], "+Inf of %s: %g", routes[r], prev);
		snprintf(name, sizeof name,
			 "moat_serve_request_duration_seconds_bucket{route=\"%s\",", routes[r]);
		ck_assert_uint_eq(count_lines(t, name), 15);
	}
	/* no histogram for a route without requests */
	ck_assert_uint_eq(count_lines(t, "moat_serve_request_duration_seconds_bucket{route=\"metrics\""),
			  0);
	/* py: 0.001, 0.003 and 0.005 in le=0.005, 0.2 by le=0.25, 1000 only in +Inf */
	const char *b = "moat_serve_request_duration_seconds_bucket{route=\"py\",le=";
	char name[200];
	snprintf(name, sizeof name, "%s\"0.005\"}", b);
	ck_assert(metric(t, name) == 3);
	snprintf(name, sizeof name, "%s\"0.1\"}", b);
	ck_assert(metric(t, name) == 3);
	snprintf(name, sizeof name, "%s\"0.25\"}", b);
	ck_assert(metric(t, name) == 4);
	snprintf(name, sizeof name, "%s\"300\"}", b);
	ck_assert(metric(t, name) == 4);
	snprintf(name, sizeof name, "%s\"+Inf\"}", b);
	ck_assert(metric(t, name) == 5);
	double sum = metric(t, "moat_serve_request_duration_seconds_sum{route=\"py\"}");
	ck_assert_msg(fabs(sum - 1000.209) < 1e-5, "%g", sum);
	snprintf(name, sizeof name, "moat_serve_request_duration_seconds_bucket{route=\"ts\","
				    "le=\"1\"}");
	ck_assert(metric(t, name) == 0);
	snprintf(name, sizeof name, "moat_serve_request_duration_seconds_bucket{route=\"ts\","
				    "le=\"2.5\"}");
	ck_assert(metric(t, name) == 1);
	/* every line is a comment or "name{labels} value" / "name value" */
	for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
		ck_assert_ptr_nonnull(strchr(l, '\n'));
		ck_assert(l[0] == '#' || !strncmp(l, "moat_serve_", 11));
	}
	free(t);

	ck_assert_str_eq(serve_route_name(R_V1_RUN), "v1_run");
	ck_assert_str_eq(serve_route_name((enum serve_route)77), "other");
	ck_assert_str_eq(serve_outcome_name(O_DISCONNECTED), "disconnected");
	ck_assert_str_eq(serve_outcome_name((enum serve_outcome)77), "error");
	ck_assert_str_eq(serve_route_template(R_KV), "/v1/kv/{id}");
	ck_assert_str_eq(serve_route_template(R_PY), "/py/{path}");
	ck_assert_str_eq(serve_route_template((enum serve_route)77), "/{unknown}");
	for (int r = 0; r < R__COUNT; r++)
		ck_assert_ptr_nonnull(serve_route_template((enum serve_route)r));
	pthread_mutex_destroy(&m.mu);
}
END_TEST

/* A TCP socket bound to addr, port 0 (IPv6 when v6); -1 when the address
 * cannot be bound here. */
static int bound_tcp(const char *addr, bool v6)
{
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a4 = { .sin_family = AF_INET };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };
	ck_assert_int_eq(v6 ? inet_pton(AF_INET6, addr, &a6.sin6_addr)
			    : inet_pton(AF_INET, addr, &a4.sin_addr), 1);
	if (v6 ? bind(fd, (struct sockaddr *)&a6, sizeof a6) : bind(fd, (struct sockaddr *)&a4,
									 sizeof a4)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* moat_serve_auth_check: TCP needs the token, loopback too, unless no_auth
 * on loopback; a unix socket needs neither; no_auth never with a token. */
START_TEST(auth_check_listeners)
{
	int sp[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	struct {
		const char *what, *addr;
		bool v6, is_unix;
		int want[2][2]; /* [token][no_auth]: 0 allowed, -1 refused */
	} l[] = {
		{ "127.0.0.1", "127.0.0.1", false, false, { { -1, 0 }, { 0, -1 } } },
		{ "127.0.0.2", "127.0.0.2", false, false, { { -1, 0 }, { 0, -1 } } },
		{ "0.0.0.0", "0.0.0.0", false, false, { { -1, -1 }, { 0, -1 } } },
		{ "::1", "::1", true, false, { { -1, 0 }, { 0, -1 } } },
		{ "::", "::", true, false, { { -1, -1 }, { 0, -1 } } },
		{ "unix", NULL, false, true, { { 0, 0 }, { 0, -1 } } },
	};
	for (size_t i = 0; i < sizeof l / sizeof l[0]; i++) {
		int fd = l[i].addr ? bound_tcp(l[i].addr, l[i].v6) : sp[0];
		if (fd < 0) {
			fprintf(stderr, "note: auth_check_listeners: cannot bind %s here; not run\n",
				l[i].what);
			continue;
		}
		for (int t = 0; t < 2; t++)
			for (int n = 0; n < 2; n++) {
				const char *why = NULL;
				bool is_unix = !l[i].is_unix;
				int rc = moat_serve_auth_check(fd, t, n, &is_unix, &why);
				ck_assert_msg(rc == l[i].want[t][n],
					      "%s, token %d, no_auth %d: %d (want %d): %s", l[i].what,
					      t, n, rc, l[i].want[t][n], why ? why : "");
				ck_assert_msg(rc == 0 || (why && strstr(why, "--token-file")),
					      "%s: the refusal does not name --token-file: %s",
					      l[i].what, why ? why : "(none)");
				ck_assert_msg(is_unix == l[i].is_unix, "%s: is_unix %d", l[i].what,
					      is_unix);
			}
		if (l[i].addr)
			close(fd);
	}
	/* loopback without either: both ways out named */
	int fd = bound_tcp("127.0.0.1", false);
	const char *why = NULL;
	ck_assert_int_eq(moat_serve_auth_check(fd, false, false, NULL, &why), -1);
	ck_assert_msg(strstr(why, "--token-file") && strstr(why, "--no-auth"), "%s", why);
	close(fd);
	/* not a socket */
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(moat_serve_auth_check(p[0], true, false, NULL, &why), -1);
	close(p[0]);
	close(p[1]);
	close(sp[0]);
	close(sp[1]);
}
END_TEST

/* ---- the log (log.c) ---- */

static long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the pipe until it has been quiet for quiet_ms; appends to *all. */
static void read_quiet(int fd, char **all, size_t *len, long quiet_ms)
{
	char buf[65536];
	for (;;) {
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, (int)quiet_ms) <= 0)
			return;
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			return;
		*all = realloc(*all, *len + (size_t)n + 1);
		ck_assert_ptr_nonnull(*all);
		memcpy(*all + *len, buf, (size_t)n);
		*len += (size_t)n;
		(*all)[*len] = '\0';
	}
}

/* Writers never wait for the reader: with nobody reading, 3 MiB of lines
 * are queued or dropped at once; what comes out once the reader is back is
 * whole lines in order (the ring wrapped), the drops are counted and said,
 * and lines written after that come through. */
START_TEST(log_never_blocks)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
	FILE *f = fdopen(p[1], "w");
	ck_assert_ptr_nonnull(f);
	struct serve_log l;
	struct moat_error err = { 0 };
	ck_assert_int_eq(serve_log_init(&l, f, false, &err), 0);
	enum { N = 30000 };
	char line[128];
	long t0 = mono_ms();
	for (int i = 0; i < N; i++) {
		int n = snprintf(line, sizeof line, "line %06d %s\n", i,
				 "................................................................"
				 "......................");
		serve_log_write(&l, line, (size_t)n);
	}
	long took = mono_ms() - t0;
	ck_assert_msg(took < 5000, "30000 lines with nobody reading took %ld ms", took);
	uint64_t dropped = serve_log_dropped(&l);
	ck_assert_msg(dropped > 10000 && dropped < N, "dropped %llu of %d", (unsigned long long)dropped,
		      N);
	char *all = NULL;
	size_t len = 0;
	read_quiet(p[0], &all, &len, 500);
	serve_log_write(&l, "after the reader came back\n", 27);
	read_quiet(p[0], &all, &len, 500);
	ck_assert_ptr_nonnull(all);
	/* every line whole, numbers increasing, the drop notice before the last */
	int last = -1, count = 0;
	bool notice = false, after = false;
	for (char *save = NULL, *s = strtok_r(all, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
		int i;
		if (sscanf(s, "line %d", &i) == 1) {
			ck_assert_msg(!notice, "a queued line after the drop notice: %s", s);
			ck_assert_msg(i > last && strlen(s) == 98, "line out of order or cut: [%s]", s);
			last = i;
			count++;
		} else if (strstr(s, "log line(s) dropped")) {
			char want[64];
			snprintf(want, sizeof want, "moat serve: %llu log line(s) dropped",
				 (unsigned long long)dropped);
			ck_assert_msg(!strncmp(s, want, strlen(want)), "[%s] (want %s)", s, want);
			notice = true;
		} else {
			ck_assert_str_eq(s, "after the reader came back");
			after = true;
		}
	}
	ck_assert_msg((uint64_t)count + dropped == N, "%d lines out + %llu dropped != %d", count,
		      (unsigned long long)dropped, N);
	ck_assert(notice && after);
	free(all);
	/* the stop with a reader gone: bounded (the writer gets 2 s) */
	for (int i = 0; i < 20000; i++)
		serve_log_write(&l, line, strlen(line));
	t0 = mono_ms();
	serve_log_destroy(&l);
	took = mono_ms() - t0;
	ck_assert_msg(took < 4000, "the stop took %ld ms with nobody reading", took);
	/* the writer left behind gets EPIPE (SIGPIPE blocked) and ends; f
	 * stays open: it may still be writing to it (as a service's stderr
	 * stays open until the process exits) */
	close(p[0]);
}
END_TEST

/* ---- the live sandboxes' budgets (budget.c) ---- */

START_TEST(budget_reserve_release)
{
	struct serve_budget b;
	serve_budget_init(&b, 2560, 2);
	char *why = NULL;
	ck_assert_int_eq(serve_budget_reserve(&b, 1024, 1, &why), 0);
	ck_assert_int_eq(serve_budget_reserve(&b, 1024, 0.5, &why), 0);
	/* memory first: 2048 + 1024 > 2560 */
	ck_assert_int_eq(serve_budget_reserve(&b, 1024, 0.25, &why), -1);
	ck_assert_ptr_nonnull(why);
	ck_assert_msg(strstr(why, "serve.sandboxes.memoryMb 2560 MiB") && strstr(why, "2048 MiB"),
		      "%s", why);
	free(why);
	/* what is left of memory fits; the CPUs do not (1.5 + 0.75 > 2) */
	ck_assert_int_eq(serve_budget_reserve(&b, 512, 0.75, &why), -1);
	ck_assert_msg(why && strstr(why, "serve.sandboxes.cpus 2"), "%s", why ? why : "(null)");
	free(why);
	/* a third of a CPU, three times: no drift past the total */
	serve_budget_release(&b, 1024, 0.5);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(serve_budget_reserve(&b, 1, 1.0 / 3, &why), 0);
	ck_assert_int_eq(serve_budget_reserve(&b, 1, 0.01, &why), -1);
	free(why);
	/* a release never goes below zero */
	serve_budget_release(&b, 1 << 20, 100);
	struct moat_buf out = { 0 };
	serve_budget_json(&b, &out);
	ck_assert_str_eq(out.data, "{\"memoryMb\":{\"reserved\":0,\"total\":2560},"
				   "\"cpus\":{\"reserved\":0,\"total\":2}}");
	moat_buf_free(&out);
	serve_budget_metrics(&b, &out);
	ck_assert_ptr_nonnull(strstr(out.data, "moat_serve_sandboxes_budget_refused_total"
					       "{budget=\"memory\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out.data, "moat_serve_sandboxes_budget_refused_total"
					       "{budget=\"cpus\"} 2\n"));
	moat_buf_free(&out);
	/* the default: half the host less the slots, never below the floor */
	ck_assert_uint_eq(serve_budget_default_memory_mb(1000000, 1024, 256), 256);
	ck_assert_uint_gt(serve_budget_default_memory_mb(0, 0, 1), 1);
}
END_TEST

START_TEST(budget_config)
{
	struct serve_limits l;
	struct moat_error err = { 0 };
	serve_limits_default(&l);
	ck_assert_uint_eq(l.sandboxes_memory_mb, 0);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"memoryMb\":4096,\"cpus\":1.5},"
					    "\"sessions\":{\"maxCpuTimeMs\":60000}}", &l, &err), 0);
	ck_assert_uint_eq(l.sandboxes_memory_mb, 4096);
	ck_assert(l.sandboxes_cpus == 1.5);
	ck_assert_uint_eq(l.session_max_cpu_ms, 60000);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"disk\":1}}", &l, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "unknown key \"disk\" (memoryMb, cpus, pool, "
					       "networkPool)"));
	moat_error_clear(&err);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"cpus\":0}}", &l, &err), -1);
	moat_error_clear(&err);
	/* serve.sandboxes.pool: the live sandboxes' pool, 0 to 16; unset: -1 */
	ck_assert_int_eq(l.sandboxes_pool, -1);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"pool\":3}}", &l, &err), 0);
	ck_assert_int_eq(l.sandboxes_pool, 3);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"pool\":17}}", &l, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "serve.sandboxes.pool must be a number from 0 to 16"));
	moat_error_clear(&err);
	/* serve.sandboxes.networkPool: the pool's network: true shape, 0 to 16; unset: -1 */
	ck_assert_int_eq(l.sandboxes_network_pool, -1);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"networkPool\":2}}", &l, &err), 0);
	ck_assert_int_eq(l.sandboxes_network_pool, 2);
	ck_assert_int_eq(serve_limits_parse("{\"sandboxes\":{\"networkPool\":17}}", &l, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "serve.sandboxes.networkPool must be a number from "
					       "0 to 16"));
	moat_error_clear(&err);
}
END_TEST

void serve_limits_tests(TCase *tc);

void serve_limits_tests(TCase *tc)
{
	tcase_add_test(tc, limits_parse);
	tcase_add_test(tc, limits_e2b_keys);
	tcase_add_test(tc, limits_e2b_templates);
	tcase_add_test(tc, limits_message_names_key);
	tcase_add_test(tc, limits_apply);
	tcase_add_test(tc, script_error_lines);
	tcase_add_test(tc, metrics_render);
	tcase_add_test(tc, metrics_relays);
	tcase_add_test(tc, auth_check_listeners);
	tcase_add_test(tc, log_never_blocks);
	tcase_add_test(tc, budget_reserve_release);
	tcase_add_test(tc, budget_config);
}
