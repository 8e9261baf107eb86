/* Unit tests: provider dispatch, the docker argv builder (every rule of the
 * aistack security table), address filtering and secret redaction. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <check.h>

#include "suites.h"
#include "core/config.h"
#include "core/core.h"
#include "net/net.h"
#include "providers/providers.h"

#define CODE_MARK "print('code-marker-7f3a')"

static char *host_env[] = { "PATH=/opt/bin:/usr/bin", "HOME=/home/u", "HOST_SECRET=s3cr3t",
			    "DOCKER_HOST=unix:///run/d.sock", "LD_PRELOAD=/evil.so", NULL };

static struct moat_request *req_new(void)
{
	struct moat_request *r = moat_request_new();
	ck_assert_ptr_nonnull(r);
	r->code = strdup(CODE_MARK);
	r->code_len = strlen(CODE_MARK);
	return r;
}

static void add_env(struct moat_request *r, const char *k, const char *v)
{
	r->env = realloc(r->env, (r->env_count + 1) * sizeof *r->env);
	ck_assert_ptr_nonnull(r->env);
	r->env[r->env_count].key = strdup(k);
	r->env[r->env_count].value = strdup(v);
	r->env[r->env_count].value_len = strlen(v);
	r->env_count++;
}

static void build_ok(const struct moat_request *r, const struct moat_config *cfg,
		     struct moat_docker_cmd *cmd)
{
	struct moat_error err = { 0 };
	int rc = moat_docker_build(r, cfg, "/usr/bin/docker", "moat-0123abcd", host_env, cmd, &err);
	ck_assert_msg(rc == 0, "build failed: %s", err.message ? err.message : "");
	ck_assert_ptr_nonnull(cmd->argv);
	ck_assert_ptr_nonnull(cmd->envp);
}

static void build_bad(const struct moat_request *r, enum moat_error_type type)
{
	struct moat_docker_cmd cmd;
	struct moat_error err = { 0 };
	struct moat_config *cfg = moat_config_new();
	ck_assert_int_eq(moat_docker_build(r, cfg, "/usr/bin/docker", "moat-0123abcd", host_env,
					   &cmd, &err), -1);
	ck_assert_int_eq(err.type, type);
	ck_assert_ptr_null(cmd.argv);
	moat_error_clear(&err);
	moat_config_free(cfg);
}

static size_t count_arg(char **argv, const char *exact)
{
	size_t n = 0;
	for (char **p = argv; *p; p++)
		n += !strcmp(*p, exact);
	return n;
}

static size_t count_prefix(char **argv, const char *prefix)
{
	size_t n = 0;
	for (char **p = argv; *p; p++)
		n += !strncmp(*p, prefix, strlen(prefix));
	return n;
}

static bool any_contains(char **v, const char *s)
{
	for (char **p = v; *p; p++)
		if (strstr(*p, s))
			return true;
	return false;
}

/* The argv index of the image: the first argument after the options. */
static size_t image_index(char **argv)
{
	size_t i = 2;
	while (argv[i] && argv[i][0] == '-') {
		if (!strcmp(argv[i], "-e"))
			i++;
		i++;
	}
	return i;
}

START_TEST(docker_required_flags)
{
	struct moat_request *r = req_new();
	struct moat_config *cfg = moat_config_new();
	struct moat_docker_cmd cmd;
	build_ok(r, cfg, &cmd);
	char **a = cmd.argv;
	ck_assert_str_eq(a[0], "/usr/bin/docker");
	ck_assert_str_eq(a[1], "run");
	const char *required[] = { "--rm", "-i", "--read-only", "--cap-drop=ALL",
				   "--security-opt=no-new-privileges", "--user=65534:65534",
				   "--network=none", "--name=moat-0123abcd", "--memory=512m",
				   "--memory-swap=512m", "--cpus=1.000", "--pids-limit=100",
				   "--workdir=/sandbox" };
	for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
		ck_assert_msg(count_arg(a, required[i]) == 1, "missing %s", required[i]);
	ck_assert_int_eq(count_prefix(a, "--tmpfs"), 2);
	ck_assert_int_eq(count_arg(a, "--tmpfs=/tmp:rw,noexec,nosuid,nodev,size=64m"), 1);
	ck_assert_int_eq(count_prefix(a, "--tmpfs=/sandbox:"), 1);
	ck_assert_int_eq(count_prefix(a, "--security-opt"), 1);
	moat_docker_cmd_free(&cmd);
	moat_config_free(cfg);
	moat_request_free(r);
}
END_TEST

START_TEST(docker_never_flags)
{
	struct moat_request *r = req_new();
	r->network = true;
	r->memory_mb = 300;
	add_env(r, "A", "1");
	struct moat_config *cfg = moat_config_new();
	struct moat_docker_cmd cmd;
	build_ok(r, cfg, &cmd);
	const char *never_prefix[] = { "--privileged", "--cap-add", "--device", "--pid=", "--ipc=",
				       "--uts=", "--userns", "--volume", "--volumes-from", "--mount",
				       "--env-file", "--network=host", "--net=host", "-v",
				       "--group-add", "--sysctl", "--cgroup-parent" };
	for (size_t i = 0; i < sizeof never_prefix / sizeof never_prefix[0]; i++)
		ck_assert_msg(count_prefix(cmd.argv, never_prefix[i]) == 0, "found %s",
			      never_prefix[i]);
	const char *never_exact[] = { "--pid", "--ipc", "--uts", "--net", "--network" };
	for (size_t i = 0; i < sizeof never_exact / sizeof never_exact[0]; i++)
		ck_assert_int_eq(count_arg(cmd.argv, never_exact[i]), 0);
	ck_assert_int_eq(count_arg(cmd.argv, "--network=bridge"), 1);
	ck_assert_int_eq(count_prefix(cmd.argv, "--network"), 1);
	ck_assert_int_eq(count_arg(cmd.argv, "--memory=300m"), 1);
	ck_assert_int_eq(count_arg(cmd.argv, "--memory-swap=300m"), 1);
	moat_docker_cmd_free(&cmd);
	moat_config_free(cfg);
	moat_request_free(r);
}
END_TEST

START_TEST(docker_limits_from_request)
{
	struct moat_request *r = req_new();
	r->cpus = 0.5;
	r->pids_limit = 7;
	struct moat_config *cfg = moat_config_new();
	struct moat_docker_cmd cmd;
	build_ok(r, cfg, &cmd);
	ck_assert_int_eq(count_arg(cmd.argv, "--cpus=0.500"), 1);
	ck_assert_int_eq(count_arg(cmd.argv, "--pids-limit=7"), 1);
	moat_docker_cmd_free(&cmd);
	moat_config_free(cfg);
	moat_request_free(r);
}
END_TEST

START_TEST(docker_code_not_in_argv)
{
	struct moat_request *r = req_new();
	struct moat_config *cfg = moat_config_new();
	struct moat_docker_cmd cmd;
	build_ok(r, cfg, &cmd);
	ck_assert(!any_contains(cmd.argv, "code-marker-7f3a"));
	ck_assert(!any_contains(cmd.envp, "code-marker-7f3a"));
	size_t img = image_index(cmd.argv);
	ck_assert_str_eq(cmd.argv[img], "python:3.12-slim");
	ck_assert_str_eq(cmd.argv[img + 1], "python3");
	ck_assert_str_eq(cmd.argv[img + 2], "-");
	ck_assert_ptr_null(cmd.argv[img + 3]);
	moat_docker_cmd_free(&cmd);
	moat_config_free(cfg);
	moat_request_free(r);
}
END_TEST

START_TEST(docker_interpreters_read_stdin)
{
	static const struct { enum moat_language l; const char *first, *last; } cases[] = {
		{ MOAT_LANG_JAVASCRIPT, "node", "-" }, { MOAT_LANG_TYPESCRIPT, "node", "-" },
		{ MOAT_LANG_BASH, "bash", "-s" }, { MOAT_LANG_SH, "sh", "-s" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct moat_request *r = req_new();
		r->language = cases[i].l;
		struct moat_config *cfg = moat_config_new();
		struct moat_docker_cmd cmd;
		build_ok(r, cfg, &cmd);
		size_t img = image_index(cmd.argv);
		ck_assert_str_eq(cmd.argv[img], moat_docker_default_image(cases[i].l));
		ck_assert_str_eq(cmd.argv[img + 1], cases[i].first);
		size_t n = img + 1;
		while (cmd.argv[n + 1])
			n++;
		ck_assert_str_eq(cmd.argv[n], cases[i].last);
		moat_docker_cmd_free(&cmd);
		moat_config_free(cfg);
		moat_request_free(r);
	}
}
END_TEST

START_TEST(docker_env_values_via_environment)
{
	struct moat_request *r = req_new();
	add_env(r, "GREETING", "hello; $(rm -rf /) `x`");
	add_env(r, "EMPTY", "");
	struct moat_config *cfg = moat_config_new();
	struct moat_docker_cmd cmd;
	build_ok(r, cfg, &cmd);
	/* -e NAME, never -e NAME=value */
	size_t e = 0;
	for (char **p = cmd.argv; *p; p++)
		if (!strcmp(*p, "-e")) {
			e++;
			ck_assert_ptr_nonnull(p[1]);
			ck_assert_ptr_null(strchr(p[1], '='));
		}
	ck_assert_int_eq(e, 2);
	ck_assert_int_eq(count_prefix(cmd.argv, "--env"), 0);
	ck_assert(!any_contains(cmd.argv, "rm -rf"));
	ck_assert_int_eq(count_arg(cmd.envp, "GREETING=hello; $(rm -rf /) `x`"), 1);
	ck_assert_int_eq(count_arg(cmd.envp, "EMPTY="), 1);
	/* the docker CLI keeps its own settings; nothing else of the host */
	ck_assert_int_eq(count_arg(cmd.envp, "PATH=/opt/bin:/usr/bin"), 1);
	ck_assert_int_eq(count_arg(cmd.envp, "HOME=/home/u"), 1);
	ck_assert_int_eq(count_arg(cmd.envp, "DOCKER_HOST=unix:///run/d.sock"), 1);
	ck_assert(!any_contains(cmd.envp, "HOST_SECRET"));
	ck_assert(!any_contains(cmd.envp, "LD_PRELOAD"));
	moat_docker_cmd_free(&cmd);
	moat_config_free(cfg);
	moat_request_free(r);
}
END_TEST

START_TEST(docker_rejects_bad_env_names)
{
	const char *bad[] = { "BAD;NAME", "$(rm -rf /)", "1ABC", "A B", "A=B", "-e", "", "A\nB" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct moat_request *r = req_new();
		add_env(r, bad[i], "v");
		build_bad(r, MOAT_ERR_POLICY);
		moat_request_free(r);
	}
}
END_TEST

START_TEST(docker_rejects_reserved_env_names)
{
	const char *bad[] = { "PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "LD_PRELOAD",
			      "http_proxy", "HTTPS_PROXY", "XDG_RUNTIME_DIR", "GODEBUG", "SSL_CERT_FILE" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ck_assert_msg(moat_docker_env_reserved(bad[i]), "%s", bad[i]);
		struct moat_request *r = req_new();
		add_env(r, bad[i], "v");
		build_bad(r, MOAT_ERR_POLICY);
		moat_request_free(r);
	}
	ck_assert(!moat_docker_env_reserved("MY_PATH"));
	ck_assert(!moat_docker_env_reserved("GOOD"));
}
END_TEST

START_TEST(docker_files_and_stdin_unsupported)
{
	struct moat_request *r = req_new();
	r->files = calloc(1, sizeof *r->files);
	r->files[0].key = strdup("a.txt");
	r->files[0].value = strdup("x");
	r->files[0].value_len = 1;
	r->files_count = 1;
	build_bad(r, MOAT_ERR_CONFIG);
	moat_request_free(r);
	r = req_new();
	r->stdin_data = strdup("in");
	r->stdin_len = 2;
	build_bad(r, MOAT_ERR_CONFIG);
	moat_request_free(r);
}
END_TEST

START_TEST(docker_image_from_config_and_bad_name)
{
	static const char conf[] = "{\"images\":{\"python\":\"registry.local/py:3@sha256:ab\"}}";
	struct moat_config *cfg = NULL;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_config_parse(conf, strlen(conf), false, "t", &cfg, &err), 0);
	struct moat_request *r = req_new();
	struct moat_docker_cmd cmd;
	build_ok(r, cfg, &cmd);
	ck_assert_str_eq(cmd.argv[image_index(cmd.argv)], "registry.local/py:3@sha256:ab");
	moat_docker_cmd_free(&cmd);
	ck_assert_int_eq(moat_docker_build(r, cfg, "/usr/bin/docker", "--privileged", host_env, &cmd,
					   &err), -1);
	ck_assert_int_eq(moat_docker_build(r, cfg, "/usr/bin/docker", "Moat X", host_env, &cmd,
					   &err), -1);
	moat_error_clear(&err);
	moat_config_free(cfg);
	moat_request_free(r);
}
END_TEST

static bool forbidden4(const char *s)
{
	struct in_addr a;
	ck_assert_int_eq(inet_pton(AF_INET, s, &a), 1);
	return moat_net_addr_refused(AF_INET, &a) != NULL;
}

static bool forbidden6(const char *s)
{
	struct in6_addr a;
	ck_assert_int_eq(inet_pton(AF_INET6, s, &a), 1);
	return moat_net_addr_refused(AF_INET6, &a) != NULL;
}

START_TEST(addresses)
{
	const char *bad4[] = { "127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255",
			       "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
			       "224.0.0.1", "255.255.255.255" };
	for (size_t i = 0; i < sizeof bad4 / sizeof bad4[0]; i++)
		ck_assert_msg(forbidden4(bad4[i]), "%s allowed", bad4[i]);
	const char *good4[] = { "8.8.8.8", "172.32.0.1", "1.1.1.1", "100.128.0.1" };
	for (size_t i = 0; i < sizeof good4 / sizeof good4[0]; i++)
		ck_assert_msg(!forbidden4(good4[i]), "%s refused", good4[i]);
	const char *bad6[] = { "::1", "::", "fe80::1", "fd00:ec2::254", "fc00::1",
			       "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
			       "ff02::1", "64:ff9b::a9fe:a9fe", "2002:0a00:0001::1" };
	for (size_t i = 0; i < sizeof bad6 / sizeof bad6[0]; i++)
		ck_assert_msg(forbidden6(bad6[i]), "%s allowed", bad6[i]);
	ck_assert(!forbidden6("2606:4700::1111"));
	ck_assert(!forbidden6("::ffff:8.8.8.8"));
}
END_TEST

START_TEST(redaction)
{
	char *s = strdup("key=SECRETKEY and again SECRETKEYSECRETKEY.");
	moat_redact(&s, "SECRETKEY");
	ck_assert_str_eq(s, "key=[redacted] and again [redacted][redacted].");
	moat_redact(&s, NULL);
	moat_redact(&s, "");
	ck_assert_str_eq(s, "key=[redacted] and again [redacted][redacted].");
	free(s);
}
END_TEST

START_TEST(provider_lookup_and_none)
{
	ck_assert_ptr_nonnull(moat_provider_get("native"));
	ck_assert_ptr_nonnull(moat_provider_get("docker"));
	ck_assert_ptr_nonnull(moat_provider_get("e2b"));
	ck_assert_ptr_nonnull(moat_provider_get("daytona"));
	ck_assert_ptr_nonnull(moat_provider_get("none"));
	ck_assert_ptr_null(moat_provider_get("host"));
	ck_assert_ptr_null(moat_provider_get(NULL));
	struct moat_config *cfg = moat_config_new();
	struct moat_provider_options o = { .cfg = cfg, .run = NULL };
	struct moat_request *r = req_new();
	struct moat_result *res = (struct moat_result *)0x1;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_provider_run("none", r, &o, &res, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_POLICY);
	ck_assert_ptr_null(res);
	ck_assert_int_eq(moat_provider_run("bogus", r, &o, &res, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	moat_request_free(r);
	moat_config_free(cfg);
}
END_TEST

START_TEST(remote_keys_missing)
{
	unsetenv("E2B_API_KEY");
	unsetenv("DAYTONA_API_KEY");
	struct moat_config *cfg = moat_config_new();
	struct moat_provider_options o = { .cfg = cfg, .run = NULL };
	struct moat_request *r = req_new();
	struct moat_result *res = NULL;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_provider_run("e2b", r, &o, &res, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(err.message, "E2B_API_KEY"));
	ck_assert_int_eq(moat_provider_run("daytona", r, &o, &res, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(err.message, "DAYTONA_API_KEY"));
	moat_error_clear(&err);
	moat_request_free(r);
	moat_config_free(cfg);
}
END_TEST

/* Runs the provider the config text names; the run must fail, with err set. */
static void run_must_fail(const char *conf, struct moat_error *err)
{
	struct moat_config *cfg = NULL;
	ck_assert_int_eq(moat_config_parse(conf, strlen(conf), false, "t", &cfg, err), 0);
	struct moat_provider_options o = { .cfg = cfg, .run = NULL };
	struct moat_request *r = req_new();
	struct moat_result *res = NULL;
	ck_assert_int_eq(moat_provider_run(NULL, r, &o, &res, err), -1);
	moat_request_free(r);
	moat_config_free(cfg);
}

START_TEST(remote_url_policy)
{
	unsetenv("MOAT_TEST_ALLOW_HTTP");
	/* a URL that is wrong in itself is a mistake in the config, and so is one that
	 * names a refused address or this machine (blackms/aistack src/sandbox/daytona.ts,
	 * validateDaytonaApiUrlSync: SandboxConfigError) */
	static const struct { const char *url; const char *msg; enum moat_error_type type; } cases[] = {
		{ "http://example.com/api", "https", MOAT_ERR_CONFIG },
		{ "ftp://example.com/api", "https", MOAT_ERR_CONFIG },
		{ "file:///etc/passwd", "", MOAT_ERR_CONFIG },
		{ "gopher://example.com/api", "https", MOAT_ERR_CONFIG },
		{ "https://127.0.0.1/api", "private", MOAT_ERR_CONFIG },
		{ "https://10.1.2.3/api", "private", MOAT_ERR_CONFIG },
		{ "https://172.16.0.1/api", "private", MOAT_ERR_CONFIG },
		{ "https://192.168.1.1/api", "private", MOAT_ERR_CONFIG },
		{ "https://100.64.0.1/api", "private", MOAT_ERR_CONFIG },
		{ "https://localhost/api", "loopback", MOAT_ERR_CONFIG },
		{ "https://LocalHost./api", "loopback", MOAT_ERR_CONFIG },
		{ "https://api.localhost/api", "loopback", MOAT_ERR_CONFIG },
		{ "https://169.254.169.254/api", "private", MOAT_ERR_CONFIG },
		{ "https://[::1]/api", "private", MOAT_ERR_CONFIG },
		{ "https://[fe80::1]/api", "private", MOAT_ERR_CONFIG },
		{ "https://[fd00::1]/api", "private", MOAT_ERR_CONFIG },
		{ "https://[::ffff:127.0.0.1]/api", "private", MOAT_ERR_CONFIG },
		{ "https://user:pw@example.com/api", "credentials", MOAT_ERR_CONFIG },
		{ "https://example.com/api?x=1", "query", MOAT_ERR_CONFIG },
		{ "not a url", "valid", MOAT_ERR_CONFIG },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char conf[256];
		snprintf(conf, sizeof conf, "{\"provider\":\"daytona\",\"daytonaApiUrl\":\"%s\","
			 "\"daytonaApiKey\":\"KEY-123456\"}", cases[i].url);
		struct moat_error err = { 0 };
		run_must_fail(conf, &err);
		ck_assert_msg(err.type == cases[i].type, "%s: %s is a %s", cases[i].url, err.message,
			      moat_error_type_name(err.type));
		ck_assert_msg(strstr(err.message, cases[i].msg), "%s: %s", cases[i].url, err.message);
		ck_assert_ptr_null(strstr(err.message, "KEY-123456"));
		moat_error_clear(&err);
	}
	/* the test escape hatch covers the literal 127.0.0.1 only */
	setenv("MOAT_TEST_ALLOW_HTTP", "1", 1);
	const char conf[] = "{\"provider\":\"daytona\",\"daytonaApiUrl\":\"http://localhost:1/\","
			    "\"daytonaApiKey\":\"KEY-123456\"}";
	struct moat_config *cfg = NULL;
	struct moat_error err = { 0 };
	ck_assert_int_eq(moat_config_parse(conf, strlen(conf), false, "t", &cfg, &err), 0);
	struct moat_provider_options o = { .cfg = cfg, .run = NULL };
	struct moat_request *r = req_new();
	struct moat_result *res = NULL;
	ck_assert_int_eq(moat_provider_run(NULL, r, &o, &res, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "https"));
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	unsetenv("MOAT_TEST_ALLOW_HTTP");
	moat_error_clear(&err);
	moat_request_free(r);
	moat_config_free(cfg);
}
END_TEST

/* aistack checks daytonaApiUrl when the adapter is built, before it looks for a key
 * (blackms/aistack src/sandbox/daytona.ts, DaytonaSandbox constructor): a bad URL is
 * a SandboxConfigError even with no DAYTONA_API_KEY; a name that resolves to a refused
 * address is a SandboxConfigError too, found when the run resolves it. */
START_TEST(daytona_url_checked_before_key)
{
	unsetenv("MOAT_TEST_ALLOW_HTTP");
	unsetenv("DAYTONA_API_KEY");
	struct moat_error err = { 0 };
	run_must_fail("{\"provider\":\"daytona\",\"daytonaApiUrl\":\"https://10.0.0.7/api\"}", &err);
	ck_assert_msg(err.type == MOAT_ERR_CONFIG, "%s", err.message);
	ck_assert_ptr_nonnull(strstr(err.message, "private"));
	moat_error_clear(&err);
	/* a name (not a literal, not *.localhost) that resolves to loopback: this
	 * machine's own name when /etc/hosts maps it so */
	char name[256] = "";
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	bool loop = gethostname(name, sizeof name - 1) == 0 && name[0] && !strchr(name, '"') &&
		    getaddrinfo(name, NULL, &hints, &ai) == 0 && ai &&
		    ai->ai_family == AF_INET &&
		    ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
	if (ai)
		freeaddrinfo(ai);
	if (loop) {
		char c2[512];
		snprintf(c2, sizeof c2, "{\"provider\":\"daytona\",\"daytonaApiUrl\":\"https://%s/api\","
			 "\"daytonaApiKey\":\"KEY-123456\"}", name);
		run_must_fail(c2, &err);
		ck_assert_msg(err.type == MOAT_ERR_CONFIG, "%s: %s", name, err.message);
		ck_assert_ptr_nonnull(strstr(err.message, "resolves to"));
		moat_error_clear(&err);
	}
}
END_TEST

Suite *providers_suite(void)
{
	Suite *s = suite_create("providers");
	TCase *tc = tcase_create("docker");
	tcase_add_test(tc, docker_required_flags);
	tcase_add_test(tc, docker_never_flags);
	tcase_add_test(tc, docker_limits_from_request);
	tcase_add_test(tc, docker_code_not_in_argv);
	tcase_add_test(tc, docker_interpreters_read_stdin);
	tcase_add_test(tc, docker_env_values_via_environment);
	tcase_add_test(tc, docker_rejects_bad_env_names);
	tcase_add_test(tc, docker_rejects_reserved_env_names);
	tcase_add_test(tc, docker_files_and_stdin_unsupported);
	tcase_add_test(tc, docker_image_from_config_and_bad_name);
	suite_add_tcase(s, tc);
	tc = tcase_create("remote");
	tcase_add_test(tc, addresses);
	tcase_add_test(tc, redaction);
	tcase_add_test(tc, provider_lookup_and_none);
	tcase_add_test(tc, remote_keys_missing);
	tcase_add_test(tc, remote_url_policy);
	tcase_add_test(tc, daytona_url_checked_before_key);
	suite_add_tcase(s, tc);
	return s;
}
