/* Unit tests: config parsing, the search order and applying defaults. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "moat_admin.h"
#include "suites.h"
#include "core/config.h"
#include "core/core.h"

static struct moat_config *parse_ok(const char *text, bool aistack)
{
	struct moat_config *cfg = NULL;
	struct moat_error err = { 0 };
	int rc = moat_config_parse(text, strlen(text), aistack, "test.json", &cfg, &err);
	ck_assert_msg(rc == 0, "%s: %s", text, err.message ? err.message : "");
	ck_assert_ptr_nonnull(cfg);
	return cfg;
}

static void parse_bad(const char *text, const char *substr)
{
	struct moat_config *cfg = (struct moat_config *)0x1;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_config_parse(text, strlen(text), false, "test.json", &cfg, &err), -1);
	ck_assert_ptr_null(cfg);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, substr), "\"%s\" lacks \"%s\"", err.message, substr);
	ck_assert_ptr_nonnull(strstr(err.message, "test.json"));
	moat_error_clear(&err);
}

START_TEST(all_keys)
{
	struct moat_config *cfg = parse_ok(
		"{\"provider\":\"docker\",\"timeout\":5000,\"memoryMb\":256,\"cpus\":0.5,"
		"\"pidsLimit\":50,\"network\":true,\"e2bApiKey\":\"k1\",\"daytonaApiUrl\":"
		"\"https://d.example.com/api\",\"daytonaApiKey\":\"k2\",\"images\":{\"python\":"
		"\"python:3.11\",\"js\":\"node:20\"},\"strictLimits\":true,\"maxOutputBytes\":1000,"
		"\"e2bApiUrl\":\"https://e.example.com\",\"e2bTemplate\":\"base\","
		"\"e2bSandboxUrl\":\"https://{sandboxId}.example.com\",\"dockerPath\":\"/bin/docker\","
		"\"policy\":\"/p.json\",\"rootfs\":\"/r\",\"strictIsolation\":true,"
		"\"kv\":\"redis://127.0.0.1:6379/2\",\"kvQuota\":\"keys=5\"}", false);
	ck_assert_str_eq(cfg->provider, "docker");
	ck_assert_int_eq(cfg->strict_isolation, 1);
	ck_assert_str_eq(moat_config_kv_store(cfg), "redis://127.0.0.1:6379/2");
	ck_assert_str_eq(moat_config_kv_quota(cfg), "keys=5");
	ck_assert_uint_eq(cfg->timeout_ms, 5000);
	ck_assert_uint_eq(cfg->memory_mb, 256);
	ck_assert(cfg->cpus == 0.5);
	ck_assert_uint_eq(cfg->pids_limit, 50);
	ck_assert_int_eq(cfg->network, 1);
	ck_assert_int_eq(cfg->strict_limits, 1);
	ck_assert_uint_eq(cfg->max_output_bytes, 1000);
	ck_assert_str_eq(cfg->e2b_api_key, "k1");
	ck_assert_str_eq(cfg->daytona_api_key, "k2");
	ck_assert_str_eq(cfg->daytona_api_url, "https://d.example.com/api");
	ck_assert_str_eq(moat_config_image(cfg, "python"), "python:3.11");
	ck_assert_str_eq(moat_config_image(cfg, "javascript"), "node:20");
	ck_assert_ptr_null(moat_config_image(cfg, "bash"));
	ck_assert_int_eq(cfg->warnings_count, 0);
	moat_config_free(cfg);
}
END_TEST

START_TEST(defaults_and_unknown_keys)
{
	struct moat_config *cfg = parse_ok("{\"colour\":\"blue\",\"timeout\":100}", false);
	ck_assert_str_eq(cfg->provider, "native");
	ck_assert_int_eq(cfg->network, -1);
	ck_assert_int_eq(cfg->warnings_count, 1);
	ck_assert_ptr_nonnull(strstr(cfg->warnings[0], "\"colour\""));
	moat_config_free(cfg);
}
END_TEST

START_TEST(invalid_values)
{
	parse_bad("{\"provider\":\"host\"}", "unknown provider");
	parse_bad("{\"provider\":1}", "\"provider\"");
	parse_bad("{\"timeout\":0}", "\"timeout\"");
	parse_bad("{\"timeout\":1.5}", "\"timeout\"");
	parse_bad("{\"timeout\":\"5s\"}", "\"timeout\"");
	parse_bad("{\"memoryMb\":-1}", "\"memoryMb\"");
	parse_bad("{\"cpus\":0}", "\"cpus\"");
	parse_bad("{\"cpus\":2000}", "\"cpus\"");
	parse_bad("{\"pidsLimit\":true}", "\"pidsLimit\"");
	parse_bad("{\"network\":\"yes\"}", "\"network\"");
	parse_bad("{\"e2bApiKey\":\"\"}", "\"e2bApiKey\"");
	parse_bad("{\"daytonaApiKey\":\"a\\nb\"}", "control");
	parse_bad("{\"images\":{\"cobol\":\"x\"}}", "\"cobol\"");
	parse_bad("{\"images\":{\"python\":\"--privileged\"}}", "image reference");
	parse_bad("{\"images\":{\"python\":\"a b\"}}", "image reference");
	parse_bad("{\"images\":[]}", "\"images\"");
	parse_bad("{\"e2bTemplate\":\"a/../b\"}", "\"e2bTemplate\"");
	parse_bad("{\"timeout\":1,\"timeout\":2}", "twice");
	parse_bad("[1]", "object");
	parse_bad("{", "not valid JSON");
}
END_TEST

START_TEST(aistack_sandbox_object)
{
	/* nothing about sandboxing: none */
	struct moat_config *cfg = parse_ok("{\"agents\":{}}", true);
	ck_assert_str_eq(cfg->provider, "none");
	ck_assert(cfg->from_aistack);
	moat_config_free(cfg);
	cfg = parse_ok("{\"sandbox\":{\"timeout\":1000}}", true);
	ck_assert_str_eq(cfg->provider, "none");
	moat_config_free(cfg);
	/* other top-level aistack keys are not moat's business: no warnings */
	cfg = parse_ok("{\"llm\":1,\"sandbox\":{\"provider\":\"docker\",\"memoryMb\":128}}", true);
	ck_assert_str_eq(cfg->provider, "docker");
	ck_assert_uint_eq(cfg->memory_mb, 128);
	ck_assert_int_eq(cfg->warnings_count, 0);
	moat_config_free(cfg);
	struct moat_config *bad = NULL;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_config_parse("{\"sandbox\":true}", 16, true, "a.json", &bad, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
}
END_TEST

/* blackms/aistack src/sandbox/index.ts: DEFAULT_SANDBOX_CONFIG fills every key the
 * "sandbox" object leaves out; a moat.json gets no limit it did not ask for. */
START_TEST(aistack_defaults_fill_missing_keys)
{
	struct moat_config *cfg = parse_ok("{\"sandbox\":{\"provider\":\"native\"}}", true);
	ck_assert_uint_eq(cfg->timeout_ms, 30000);
	ck_assert_uint_eq(cfg->memory_mb, 512);
	ck_assert(cfg->cpus == 1.0);
	ck_assert_uint_eq(cfg->pids_limit, 100);
	ck_assert_int_eq(cfg->network, 0);
	struct moat_request *req = moat_request_new();
	ck_assert_ptr_nonnull(req);
	moat_config_apply(cfg, req, 0);
	ck_assert_uint_eq(req->memory_mb, 512);
	ck_assert_uint_eq(req->pids_limit, 100);
	ck_assert(req->cpus == 1.0);
	ck_assert_uint_eq(req->timeout_ms, 30000);
	moat_request_free(req);
	moat_config_free(cfg);
	/* what the object says wins, key by key */
	cfg = parse_ok("{\"sandbox\":{\"provider\":\"docker\",\"memoryMb\":128,\"timeout\":900,"
		       "\"network\":true}}", true);
	ck_assert_uint_eq(cfg->memory_mb, 128);
	ck_assert_uint_eq(cfg->timeout_ms, 900);
	ck_assert_int_eq(cfg->network, 1);
	ck_assert_uint_eq(cfg->pids_limit, 100);
	ck_assert(cfg->cpus == 1.0);
	moat_config_free(cfg);
	cfg = parse_ok("{\"provider\":\"native\"}", false);
	ck_assert_uint_eq(cfg->memory_mb, 0);
	ck_assert_uint_eq(cfg->pids_limit, 0);
	ck_assert(cfg->cpus == 0);
	moat_config_free(cfg);
}
END_TEST

START_TEST(apply_fills_only_missing)
{
	struct moat_config *cfg = parse_ok("{\"timeout\":1234,\"memoryMb\":64,\"cpus\":2,"
					   "\"pidsLimit\":9,\"network\":true,\"strictLimits\":true,"
					   "\"maxOutputBytes\":77}", false);
	struct moat_request *r = moat_request_new();
	moat_config_apply(cfg, r, 0);
	ck_assert_uint_eq(r->timeout_ms, 1234);
	ck_assert_uint_eq(r->memory_mb, 64);
	ck_assert(r->cpus == 2);
	ck_assert_uint_eq(r->pids_limit, 9);
	ck_assert(r->network);
	ck_assert(r->strict_limits);
	ck_assert_uint_eq(r->max_output_bytes, 77);
	moat_request_free(r);

	static const char req[] = "{\"code\":\"x\",\"timeout\":30000,\"network\":false,\"cpus\":1}";
	unsigned given = moat_config_request_keys(req, strlen(req));
	ck_assert_uint_eq(given, MOAT_REQ_HAS_TIMEOUT | MOAT_REQ_HAS_NETWORK | MOAT_REQ_HAS_CPUS);
	r = moat_request_new();
	r->cpus = 1;
	moat_config_apply(cfg, r, given);
	ck_assert_uint_eq(r->timeout_ms, MOAT_DEFAULT_TIMEOUT_MS); /* explicit 30000 kept */
	ck_assert(!r->network);                                  /* explicit false kept */
	ck_assert(r->cpus == 1);
	ck_assert_uint_eq(r->memory_mb, 64);
	moat_request_free(r);
	moat_config_free(cfg);
}
END_TEST

/* The request pipeline (moat_admin.h): a fill callback that counts its
 * calls, checks given and may refuse. */
struct fill_ctx {
	int calls;
	unsigned given;
	bool refuse;
};

static int count_fill(void *ctx, struct moat_request *req, unsigned given, struct moat_error *err)
{
	struct fill_ctx *f = ctx;
	f->calls++;
	f->given = given;
	if (f->refuse)
		return moat_error_set(err, MOAT_ERR_POLICY, 0, "refused by the fill");
	if (!(given & MOAT_REQ_HAS_TIMEOUT))
		req->timeout_ms = 4321;
	return 0;
}

START_TEST(request_pipeline)
{
	struct moat_error err = { 0 };
	struct moat_request *r = NULL;
	/* the config fills, then the whole is validated once: open egress from
	 * the config and the request's own allowlist contradict each other,
	 * which neither the request's parse nor the config alone can see */
	struct moat_config *cfg = parse_ok("{\"network\":true,\"memoryMb\":64}", false);
	struct moat_request_defaults d = { .cfg = cfg };
	static const char hosts[] = "{\"code\":\"x\",\"allowedHosts\":[\"https://a.example.com\"]}";
	ck_assert_int_eq(moat_request_prepare(hosts, strlen(hosts), NULL, &d, &r, &err), -1);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, "contradict"), "%s", err.message);
	moat_error_clear(&err);
	/* a request the config completes is prepared, with its defaults */
	static const char plain[] = "{\"code\":\"x\",\"timeout\":2000}";
	ck_assert_int_eq(moat_request_prepare(plain, strlen(plain), NULL, &d, &r, &err), 0);
	ck_assert(r->prepared);
	ck_assert(r->network);
	ck_assert_uint_eq(r->memory_mb, 64);
	ck_assert_uint_eq(r->timeout_ms, 2000);
	moat_request_free(r);
	moat_config_free(cfg);

	/* a service's fill: called once, with the keys the JSON named; its
	 * refusal is the pipeline's error */
	struct fill_ctx f = { 0 };
	struct moat_request_defaults sd = { .fill = count_fill, .ctx = &f };
	static const char mem[] = "{\"code\":\"x\",\"memoryMb\":32}";
	ck_assert_int_eq(moat_request_prepare(mem, strlen(mem), NULL, &sd, &r, &err), 0);
	ck_assert_int_eq(f.calls, 1);
	ck_assert_uint_eq(f.given, MOAT_REQ_HAS_MEMORY);
	ck_assert_uint_eq(r->timeout_ms, 4321);
	ck_assert(r->prepared);
	/* changed in code and finished again: validated again */
	r->timeout_ms = 0;
	ck_assert_int_eq(moat_request_finish(r, MOAT_REQ_HAS_TIMEOUT, &sd, &err), -1);
	ck_assert(!r->prepared);
	ck_assert_msg(strstr(err.message, "timeout"), "%s", err.message);
	moat_error_clear(&err);
	moat_request_free(r);
	f.refuse = true;
	ck_assert_int_eq(moat_request_prepare(mem, strlen(mem), NULL, &sd, &r, &err), -1);
	ck_assert_ptr_null(r);
	ck_assert_str_eq(err.message, "refused by the fill");
	moat_error_clear(&err);

	/* the X-Sandbox-Id header stands in for a missing id, and must agree */
	static const char kv[] = "{\"code\":\"x\",\"kvEnabled\":true}";
	ck_assert_int_eq(moat_request_prepare(kv, strlen(kv), "tenant-1", NULL, &r, &err), 0);
	ck_assert_str_eq(r->sandbox_id, "tenant-1");
	moat_request_free(r);
	static const char id[] = "{\"code\":\"x\",\"sandboxId\":\"b\"}";
	ck_assert_int_eq(moat_request_prepare(id, strlen(id), "a", NULL, &r, &err), -1);
	ck_assert_msg(strstr(err.message, "the X-Sandbox-Id header and the request's \"sandboxId\" "
				       "name different sandboxes"), "%s", err.message);
	moat_error_clear(&err);

	/* a refused allowlist entry: a policy refusal (403), or the caller's
	 * input error where the Spin envelope says so (400) */
	static const char priv[] = "{\"code\":\"x\",\"allowedHosts\":[\"ftp://a.example.com\"]}";
	ck_assert_int_eq(moat_request_prepare(priv, strlen(priv), NULL, NULL, &r, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	moat_error_clear(&err);
	struct moat_request_defaults spin = { .entry_refusal_is_config = true };
	ck_assert_int_eq(moat_request_prepare(priv, strlen(priv), NULL, &spin, &r, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
}
END_TEST

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

START_TEST(search_order)
{
	char dir[] = "/tmp/moat-cfg-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char old[PATH_MAX];
	ck_assert_ptr_nonnull(getcwd(old, sizeof old));
	ck_assert_int_eq(chdir(dir), 0);
	char home[PATH_MAX + 32], path[PATH_MAX + 64];
	snprintf(home, sizeof home, "%s/home", dir);
	setenv("HOME", home, 1);
	unsetenv("MOAT_CONFIG");
	struct moat_config *cfg = NULL;
	struct moat_error err = { 0 };

	/* nothing: built-in defaults (native) — on a machine with
	 * /etc/moat/config.json, that file, the last place searched (checked
	 * either way: it must not skip the check) */
	int rc = moat_config_load(NULL, &cfg, &err);
	if (access("/etc/moat/config.json", F_OK) != 0) {
		ck_assert_int_eq(rc, 0);
		ck_assert_str_eq(cfg->provider, "native");
		ck_assert_ptr_null(cfg->source);
	} else if (rc == 0) {
		ck_assert_msg(cfg->source && !strcmp(cfg->source, "/etc/moat/config.json"),
			      "with /etc/moat/config.json and nothing else: source %s",
			      cfg->source ? cfg->source : "(defaults)");
	} else {
		ck_assert_msg(err.message && strstr(err.message, "/etc/moat/config.json"),
			      "with /etc/moat/config.json and nothing else: %s", err.message);
		moat_error_clear(&err);
	}
	moat_config_free(cfg);
	cfg = NULL;
	/* ~/.config/moat/config.json */
	snprintf(path, sizeof path, "%s/home", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/home/.config", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/home/.config/moat", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/home/.config/moat/config.json", dir);
	write_file(path, "{\"provider\":\"e2b\"}");
	ck_assert_int_eq(moat_config_load(NULL, &cfg, &err), 0);
	ck_assert_str_eq(cfg->provider, "e2b");
	moat_config_free(cfg);
	/* ./aistack.config.json beats the home config; no sandbox → none */
	write_file("aistack.config.json", "{\"name\":\"x\"}");
	ck_assert_int_eq(moat_config_load(NULL, &cfg, &err), 0);
	ck_assert_str_eq(cfg->provider, "none");
	moat_config_free(cfg);
	/* ./moat.json beats both */
	write_file("moat.json", "{\"provider\":\"docker\"}");
	ck_assert_int_eq(moat_config_load(NULL, &cfg, &err), 0);
	ck_assert_str_eq(cfg->provider, "docker");
	ck_assert_str_eq(cfg->source, "moat.json");
	moat_config_free(cfg);
	/* $MOAT_CONFIG beats ./moat.json */
	write_file("other.json", "{\"provider\":\"daytona\"}");
	setenv("MOAT_CONFIG", "other.json", 1);
	ck_assert_int_eq(moat_config_load(NULL, &cfg, &err), 0);
	ck_assert_str_eq(cfg->provider, "daytona");
	moat_config_free(cfg);
	/* --config beats everything; an aistack file given explicitly is read as one */
	write_file("aistack.config.json", "{\"sandbox\":{\"provider\":\"native\"}}");
	ck_assert_int_eq(moat_config_load("aistack.config.json", &cfg, &err), 0);
	ck_assert_str_eq(cfg->provider, "native");
	ck_assert(cfg->from_aistack);
	moat_config_free(cfg);
	/* an explicit file must exist */
	ck_assert_int_eq(moat_config_load("missing.json", &cfg, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	setenv("MOAT_CONFIG", "missing.json", 1);
	ck_assert_int_eq(moat_config_load(NULL, &cfg, &err), -1);
	moat_error_clear(&err);
	unsetenv("MOAT_CONFIG");

	unlink("aistack.config.json");
	unlink("moat.json");
	unlink("other.json");
	unlink(path);
	snprintf(path, sizeof path, "%s/home/.config/moat", dir);
	rmdir(path);
	snprintf(path, sizeof path, "%s/home/.config", dir);
	rmdir(path);
	snprintf(path, sizeof path, "%s/home", dir);
	rmdir(path);
	ck_assert_int_eq(chdir(old), 0);
	rmdir(dir);
}
END_TEST

Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");
	tcase_add_test(tc, all_keys);
	tcase_add_test(tc, defaults_and_unknown_keys);
	tcase_add_test(tc, invalid_values);
	tcase_add_test(tc, aistack_sandbox_object);
	tcase_add_test(tc, aistack_defaults_fill_missing_keys);
	tcase_add_test(tc, apply_fills_only_missing);
	tcase_add_test(tc, request_pipeline);
	tcase_add_test(tc, search_order);
	suite_add_tcase(s, tc);
	return s;
}
