/* moat run / moat exec. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cJSON.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "core/cleanup.h"

MOAT_DEFINE_AUTO(moat_config, moat_config_free)

#define MAX_INPUT_BYTES (256u * 1024u * 1024u)
#define MAX_STDIN_BYTES (64u * 1024u * 1024u)
#define MAX_FILE_BYTES (64u * 1024u * 1024u)

/* A run's line for the operator (the store's path behind the program's
 * "the store is full"): moat run's and moat exec's stderr is the
 * operator's. */
static void notice_stderr(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "moat: %s\n", line);
}

/* "5s", "500ms", "2m", "5" (seconds) → milliseconds. */
static int parse_duration(const char *s, uint64_t *ms)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v <= 0)
		return -1;
	double mult = 1000;
	if (!strcmp(end, "ms"))
		mult = 1;
	else if (!strcmp(end, "s") || !*end)
		mult = 1000;
	else if (!strcmp(end, "m"))
		mult = 60000;
	else if (!strcmp(end, "h"))
		mult = 3600000;
	else
		return -1;
	double r = v * mult;
	if (r < 1 || r > 86400000.0)
		return -1;
	*ms = (uint64_t)r;
	return 0;
}

/* "256M", "1G", "512" (MiB) → MiB. */
static int parse_size_mb(const char *s, uint64_t *mb)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-' || v == 0)
		return -1;
	if (!*end || !strcmp(end, "M") || !strcmp(end, "m") || !strcmp(end, "MiB"))
		*mb = v;
	else if (!strcmp(end, "G") || !strcmp(end, "g") || !strcmp(end, "GiB"))
		*mb = v * 1024;
	else
		return -1;
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

static int add_kv(struct moat_kv **arr, size_t *count, const char *key, size_t key_len,
		  char *value, size_t value_len)
{
	struct moat_kv *n = realloc(*arr, (*count + 1) * sizeof *n);
	if (!n)
		return -1;
	*arr = n;
	n[*count].key = strndup(key, key_len);
	if (!n[*count].key)
		return -1;
	n[*count].value = value;
	n[*count].value_len = value_len;
	(*count)++;
	return 0;
}

/* --output: one more "outputs" pattern (checked with the request). */
static int add_output(struct moat_request *req, const char *pattern)
{
	char **n = realloc(req->outputs, (req->outputs_count + 1) * sizeof *n);
	if (!n)
		return -1;
	req->outputs = n;
	if (!(n[req->outputs_count] = strdup(pattern)))
		return -1;
	req->outputs_count++;
	return 0;
}

/* moat run -- CMD ARG...: the request's argv, a copy (checked with the
 * request: count, sizes, a non-empty CMD). */
static int set_command(struct moat_request *req, char *const *args, size_t n)
{
	if (!(req->argv = calloc(n + 1, sizeof *req->argv)))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!(req->argv[i] = strdup(args[i])))
			return -1;
		req->argc++;
	}
	return 0;
}

static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

static void stream_out(void *ctx, enum moat_stream stream, const char *buf, size_t len)
{
	(void)ctx; /* reader gone: keep capturing, stop relaying */
	write_all(stream == MOAT_STDOUT ? STDOUT_FILENO : STDERR_FILENO, buf, len);
}

/* moat exec --stream: the lines of core/ndjson.h on stdout as the program
 * writes. A writer thread takes them to stdout; while LINES_WINDOW wait for
 * the reader the run's pipes are not read (stdout_full, resume_fd: the
 * program blocks, its timeout runs on), and a reader gone (EPIPE) cancels
 * the run (cancel_fd). */
#define LINES_WINDOW (256u * 1024u)
#define LINES_WRITE (64u * 1024u)

struct stream_lines {
	struct moat_lines *lines; /* the lines not yet written */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done, broken;
	int resume_fd, cancel_fd; /* eventfds: the run's */
	pthread_t writer;
};

static void lines_wake(int fd)
{
	uint64_t one = 1;
	if (write(fd, &one, sizeof one) < 0) {
		/* EAGAIN: the counter is full, the pump is woken anyway */
	}
}

/* Writes n bytes; false when the reader is gone. */
static bool lines_write(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(STDOUT_FILENO, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
	}
	return true;
}

static void *lines_writer(void *arg)
{
	struct stream_lines *sl = arg;
	sigset_t pipe_sig;
	sigemptyset(&pipe_sig);
	sigaddset(&pipe_sig, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL); /* a reader gone is EPIPE here */
	char *chunk = malloc(LINES_WRITE);
	pthread_mutex_lock(&sl->mu);
	for (;;) {
		const char *data;
		while (moat_lines_pending(sl->lines, &data) == 0 && !sl->done)
			pthread_cond_wait(&sl->cv, &sl->mu);
		size_t n = moat_lines_pending(sl->lines, &data);
		if (n == 0)
			break;
		if (n > LINES_WRITE)
			n = LINES_WRITE;
		bool send = chunk && !sl->broken;
		if (send)
			memcpy(chunk, data, n);
		moat_lines_consume(sl->lines, n);
		pthread_mutex_unlock(&sl->mu);
		bool gone = send ? !lines_write(chunk, n) : !chunk;
		pthread_mutex_lock(&sl->mu);
		if (gone && !sl->broken) {
			sl->broken = true; /* nobody reads (or no memory): the run is cancelled */
			lines_wake(sl->cancel_fd);
		}
		lines_wake(sl->resume_fd);
	}
	pthread_mutex_unlock(&sl->mu);
	free(chunk);
	return NULL;
}

static void stream_lines_out(void *ctx, enum moat_stream stream, const char *buf, size_t len)
{
	struct stream_lines *sl = ctx;
	pthread_mutex_lock(&sl->mu);
	if (!sl->broken) {
		moat_lines_output(sl->lines, stream, buf, len);
		pthread_cond_signal(&sl->cv);
	}
	pthread_mutex_unlock(&sl->mu);
}

static bool stream_lines_full(void *ctx)
{
	struct stream_lines *sl = ctx;
	pthread_mutex_lock(&sl->mu);
	const char *data;
	bool full = !sl->broken && moat_lines_pending(sl->lines, &data) >= LINES_WINDOW;
	pthread_mutex_unlock(&sl->mu);
	return full;
}

/* The writer and the run's eventfds; -1 with err set. */
static int lines_start(struct stream_lines *sl, struct moat_run_options *opts,
		       struct moat_error *err)
{
	if (!(sl->lines = moat_lines_new()))
		return moat_error_oom(err);
	pthread_mutex_init(&sl->mu, NULL);
	pthread_cond_init(&sl->cv, NULL);
	sl->resume_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	sl->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sl->resume_fd < 0 || sl->cancel_fd < 0 ||
	    pthread_create(&sl->writer, NULL, lines_writer, sl) != 0) {
		if (sl->resume_fd >= 0)
			close(sl->resume_fd);
		if (sl->cancel_fd >= 0)
			close(sl->cancel_fd);
		sl->resume_fd = sl->cancel_fd = -1;
		pthread_mutex_destroy(&sl->mu);
		pthread_cond_destroy(&sl->cv);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno,
				      "--stream: cannot start the writer of the lines");
	}
	opts->on_output = stream_lines_out;
	opts->output_ctx = sl;
	opts->output_stream = true; /* both streams as lines, capped, nothing kept */
	opts->stdout_full = stream_lines_full;
	opts->resume_fd = sl->resume_fd;
	opts->cancel_fd = sl->cancel_fd;
	/* a pipe's reader gone is seen at once (EPOLLERR), not only at the
	 * next write: a program that says nothing more is cancelled too */
	struct stat st;
	if (fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode))
		opts->hangup_fd = STDOUT_FILENO;
	return 0;
}

/* The writer has written every line (or the reader is gone) and ended. */
static void lines_stop(struct stream_lines *sl)
{
	if (sl->resume_fd < 0)
		return;
	pthread_mutex_lock(&sl->mu);
	sl->done = true;
	pthread_cond_signal(&sl->cv);
	pthread_mutex_unlock(&sl->mu);
	pthread_join(sl->writer, NULL);
	close(sl->resume_fd);
	close(sl->cancel_fd);
	sl->resume_fd = sl->cancel_fd = -1;
	pthread_mutex_destroy(&sl->mu);
	pthread_cond_destroy(&sl->cv);
}

/* --seccomp-log under the default policy: one line a person can act on per
 * call it refused with EPERM, after the JSON (which says the same in its
 * "hint"). */
static void print_seccomp_refusals(const char *json)
{
	cJSON *root = cJSON_Parse(json);
	const cJSON *policy = cJSON_GetObjectItemCaseSensitive(root, "policy");
	const cJSON *denied = cJSON_GetObjectItemCaseSensitive(root, "denied");
	if (cJSON_IsString(policy) && !strcmp(policy->valuestring, "default")) {
		const cJSON *e;
		cJSON_ArrayForEach(e, denied) {
			const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "syscall");
			const cJSON *en = cJSON_GetObjectItemCaseSensitive(e, "errno");
			const cJSON *count = cJSON_GetObjectItemCaseSensitive(e, "count");
			/* EPERM is the default's refusal; clone3's ENOSYS and the
			 * ioctls' EACCES are rules of their own (SECURITY.md) */
			if (!cJSON_IsString(name) || !cJSON_IsString(en) || !cJSON_IsNumber(count) ||
			    strcmp(en->valuestring, "EPERM"))
				continue;
			fprintf(stderr,
				"moat: seccomp: %s refused (%s, %.0f call%s): the default policy does "
				"not allow it; to allow it, run with --policy FILE (moat policy show, "
				"with \"%s\" added)\n",
				name->valuestring, en->valuestring, count->valuedouble,
				count->valuedouble == 1 ? "" : "s", name->valuestring);
		}
	}
	cJSON_Delete(root);
}

static int exit_status_of(const struct moat_result *r)
{
	if (r->timed_out)
		return 124;
	if (r->exited)
		return r->exit_code;
	if (r->signal > 0)
		return 128 + r->signal;
	return 125;
}

/* "moat: out of memory" on stderr; returns rc */
static int say_oom(int rc)
{
	fputs("moat: out of memory\n", stderr);
	return rc;
}

static int print_json_result(const struct moat_result *r)
{
	char *json = moat_result_to_json(r);
	if (!json) {
		return say_oom(-1);
	}
	fputs(json, stdout);
	fputc('\n', stdout);
	free(json);
	return fflush(stdout) == 0 ? 0 : -1;
}

/* The provider (--provider, else the config's) and the config: *used names
 * the provider for the error's JSON, *cfg is the config (free it). */
static int load_config(const char *provider, const char *config_path, const char **used,
		       struct moat_config **cfg, struct moat_error *err)
{
	*cfg = NULL;
	*used = provider ? provider : "native";
	if (provider && !moat_provider_name(provider))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "--provider: unknown provider \"%s\" (native, docker, e2b, "
				      "daytona, none)", provider);
	if (moat_config_load(config_path, cfg, err) < 0)
		return -1;
	if (!provider)
		*used = moat_provider_name(moat_config_provider(*cfg));
	return 0;
}

/* Runs a prepared request (moat_request_prepare/_finish, with cfg's
 * defaults) with the provider used. */
static int run_prepared(const struct moat_request *req, const struct moat_config *cfg,
			const char *used, const struct moat_run_options *opts,
			struct moat_result **res, struct moat_error *err)
{
	if (req->kv_enabled && !opts->runtime_dir && used && !strcmp(used, "native"))
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "kvEnabled needs the runtime shims (--runtime DIR, "
				      "$MOAT_RUNTIME_DIR, or ../share/moat/runtime next to moat)");
	struct moat_provider_options po = { .cfg = cfg, .run = opts };
	return moat_provider_run(used, req, &po, res, err);
}

/* moat run: the request its flags built, through the request pipeline with
 * the config's defaults, then run. */
static int run_with_provider(struct moat_request *req, unsigned given, const char *provider,
			     const char *config_path, const struct moat_run_options *opts,
			     const char **used, struct moat_result **res, struct moat_error *err)
{
	struct moat_config *cfg = NULL;
	if (load_config(provider, config_path, used, &cfg, err) < 0)
		return -1;
	struct moat_request_defaults d = { .cfg = cfg };
	int rc = moat_request_finish(req, given, &d, err);
	if (rc == 0)
		rc = run_prepared(req, cfg, *used, opts, res, err);
	moat_config_free(cfg);
	return rc;
}

/* What moat run's flags set. */
struct run_args {
	struct moat_request *req;
	struct moat_run_options opts;
	struct moat_error err;
	const char *provider, *config_path, *code_arg, *stdin_path;
	unsigned given;
	bool json, lang_given;
};

enum {
	RUN_LANGUAGE = 1, RUN_TIMEOUT, RUN_MEMORY, RUN_CPUS, RUN_PIDS, RUN_MAXOUT, RUN_STRICT,
	RUN_ENV, RUN_FILE, RUN_NET, RUN_OUTPUT,
};

/* NAME=VALUE (--env) or DEST=SRC (--file, the host file's bytes) */
static int run_set_pair(struct run_args *a, int id, const char *arg)
{
	struct moat_request *req = a->req;
	const char *eq = strchr(arg, '=');
	if (id == RUN_ENV) {
		if (!eq)
			return moat_error_set(&a->err, MOAT_ERR_CONFIG, 0, "--env: expected NAME=VALUE");
		char *value = strdup(eq + 1);
		if (!value || add_kv(&req->env, &req->env_count, arg, (size_t)(eq - arg), value,
				     strlen(value)) < 0) {
			free(value);
			return moat_error_oom(&a->err);
		}
		return 0;
	}
	if (!eq || eq == arg || !eq[1])
		return moat_error_set(&a->err, MOAT_ERR_CONFIG, 0, "--file: expected DEST=SRC");
	char *data;
	size_t len;
	if (cli_read_file(eq + 1, MAX_FILE_BYTES, &data, &len, &a->err) < 0)
		return -1;
	if (add_kv(&req->files, &req->files_count, arg, (size_t)(eq - arg), data, len) < 0) {
		free(data);
		return moat_error_oom(&a->err);
	}
	return 0;
}

/* A CALL row of run_opts: 0, or -1 with a->err set. */
static int run_set(void *ctx, const struct cli_opt *o, const char *arg)
{
	struct run_args *a = ctx;
	struct moat_request *req = a->req;
	struct moat_error *err = &a->err;
	switch (o->id) {
	case RUN_LANGUAGE:
		if (moat_lang_from_name(arg, &req->language) < 0)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "unknown language \"%s\" (python, javascript, "
					      "typescript, bash, sh)", arg);
		a->lang_given = true;
		return 0;
	case RUN_TIMEOUT:
		a->given |= MOAT_REQ_HAS_TIMEOUT;
		if (parse_duration(arg, &req->timeout_ms) < 0)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--timeout: expected a duration like 500ms, 5s or 2m, "
					      "got \"%s\"", arg);
		return 0;
	case RUN_MEMORY:
		a->given |= MOAT_REQ_HAS_MEMORY;
		if (parse_size_mb(arg, &req->memory_mb) < 0)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--memory: expected a size like 256M or 1G, got \"%s\"",
					      arg);
		return 0;
	case RUN_CPUS: {
		a->given |= MOAT_REQ_HAS_CPUS;
		char *end;
		errno = 0;
		req->cpus = strtod(arg, &end);
		if (errno || end == arg || *end || !isfinite(req->cpus) || req->cpus <= 0)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--cpus: expected a positive number, got \"%s\"", arg);
		return 0;
	}
	case RUN_PIDS:
		a->given |= MOAT_REQ_HAS_PIDS;
		if (parse_u64(arg, &req->pids_limit) < 0 || req->pids_limit == 0)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--pids: expected a positive integer, got \"%s\"", arg);
		return 0;
	case RUN_MAXOUT:
		a->given |= MOAT_REQ_HAS_MAXOUT;
		if (parse_u64(arg, &req->max_output_bytes) < 0 || req->max_output_bytes == 0)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--max-output: expected a positive integer, got \"%s\"",
					      arg);
		return 0;
	case RUN_STRICT:
		a->given |= MOAT_REQ_HAS_STRICT;
		req->strict_limits = true;
		return 0;
	case RUN_NET:
		a->given |= MOAT_REQ_HAS_NETWORK;
		req->network = true;
		return 0;
	case RUN_ENV:
	case RUN_FILE:
		return run_set_pair(a, o->id, arg);
	case RUN_OUTPUT:
		return add_output(req, arg) < 0 ? moat_error_oom(err) : 0;
	}
	return 2;
}

#define R_CALL(n, s, a, i, h) { .name = n, .short_name = s, .arg = a, .kind = CLI_OPT_CALL, \
	.id = i, .help = h }
#define R_STR(n, a, f, c, h) { .name = n, .arg = a, .kind = CLI_OPT_STR, \
	.off = offsetof(struct run_args, f), .complete = c, .help = h }
#define R_FLAG(n, f, h) { .name = n, .kind = CLI_OPT_FLAG, \
	.off = offsetof(struct run_args, f), .help = h }

static const struct cli_opt run_opts[] = {
	{ .name = "language", .short_name = 'l', .arg = "LANG", .kind = CLI_OPT_CALL,
	  .id = RUN_LANGUAGE, .complete = CLI_COMP_WORDS,
	  .words = "python javascript typescript bash sh",
	  .help = "python, javascript, typescript, bash, sh (default: from the file extension, "
		  "else python)" },
	{ .name = "code", .short_name = 'c', .arg = "CODE", .kind = CLI_OPT_STR,
	  .off = offsetof(struct run_args, code_arg), .help = "the program text" },
	{ .kind = CLI_OPT_DOC, .arg = "FILE | -", .help = "read the program from FILE or standard input" },
	{ .kind = CLI_OPT_DOC, .arg = "-- CMD [ARG]...",
	  .help = "run this command line instead of code: CMD is looked up in the sandbox's "
		  "PATH (/usr/local/bin:/usr/bin:/bin) unless it holds a '/'; 127 when it is "
		  "not found" },
	R_STR("workdir", "DIR", opts.workdir, CLI_COMP_DIR,
	      "bind host directory DIR read-only at /sandbox/work and run there"),
	R_CALL("output", 0, "PATTERN", RUN_OUTPUT,
	       "return the files under /sandbox matching PATTERN in the result's \"files\" "
	       "(repeatable; needs --json)"),
	R_CALL("timeout", 0, "DURATION", RUN_TIMEOUT,
	       "wall clock: 500ms, 5s, 2m (plain number: seconds; default 30s)"),
	R_CALL("memory", 0, "SIZE", RUN_MEMORY, "memory limit: 256M, 1G (plain number: MiB)"),
	R_CALL("cpus", 0, "N", RUN_CPUS, "CPU share, fractions allowed (0.5)"),
	R_CALL("pids", 0, "N", RUN_PIDS, "process limit"),
	R_CALL("strict-limits", 0, NULL, RUN_STRICT,
	       "fail instead of running with a limit not enforced"),
	R_CALL("env", 0, "NAME=VALUE", RUN_ENV,
	       "set a variable (repeatable; nothing of the host is passed)"),
	{ .name = "file", .arg = "DEST=SRC", .kind = CLI_OPT_CALL, .id = RUN_FILE,
	  .complete = CLI_COMP_ASSIGN_FILE,
	  .help = "copy host file SRC to /sandbox/DEST (repeatable)" },
	R_STR("stdin", "FILE|-", stdin_path, CLI_COMP_FILE,
	      "the program's standard input (default: empty)"),
	R_CALL("max-output", 0, "BYTES", RUN_MAXOUT, "capture cap per stream (default 1 MiB)"),
	R_CALL("net", 0, NULL, RUN_NET, "allow network egress"),
	R_STR("policy", "FILE", opts.policy_path, CLI_COMP_FILE, "seccomp policy (Docker JSON format)"),
	R_FLAG("seccomp-log", opts.seccomp_log, "report every system call the policy refused"),
	R_FLAG("strict-isolation", opts.strict_isolation,
	       "refuse to run where Landlock (the second filesystem wall) is missing, instead "
	       "of a warning"),
	R_STR("rootfs", "DIR", opts.rootfs_dir, CLI_COMP_DIR,
	      "a prepared root directory instead of the host's /usr"),
	{ .name = "provider", .arg = "NAME", .kind = CLI_OPT_STR,
	  .off = offsetof(struct run_args, provider), .complete = CLI_COMP_WORDS,
	  .words = "native docker e2b daytona none",
	  .help = "native (default), docker, e2b, daytona or none" },
	R_STR("config", "FILE", config_path, CLI_COMP_FILE,
	      "config file (default: $MOAT_CONFIG, ./moat.json, ./aistack.config.json, "
	      "~/.config/moat/config.json, /etc/moat/config.json)"),
	R_FLAG("json", json, "print the result as JSON instead of streaming output"),
	{ .name = "help", .kind = CLI_OPT_HELP },
};

const struct cli_cmd cli_run_cmd = {
	.name = "run",
	.usage = "usage: moat run [-l LANG] [-c CODE | FILE | -] [options]\n"
		 "       moat run [options] -- CMD [ARG]...\n",
	.epilogue = "Exit status: the program's; 124 on timeout; 128+N when killed by signal N;\n"
		    "2 for a bad request or policy refusal; 3 when the sandbox is unavailable.\n",
	.help_col = 24,
	.opts = run_opts,
	.count = sizeof run_opts / sizeof run_opts[0],
	.set = run_set,
	.usage_on_error = true,
	.dashdash_command = true,
};

int cli_run(int argc, char **argv)
{
	struct run_args a = { .req = moat_request_new() };
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	const char *used = "native";
	MOAT_AUTO(moat_request) struct moat_request *req = a.req;
	moat_run_options_init(&a.opts);
	a.opts.on_notice = notice_stderr;
	MOAT_AUTO(moat_result) struct moat_result *res = NULL;
	if (!req) {
		return say_oom(3);
	}
	struct cli_parsed p;
	if (cli_opts_parse(&cli_run_cmd, argc, argv, &a, &p)) {
		if (p.status >= 0) /* --help, or getopt said why */
			return p.status;
		err = a.err;
		return cli_fail(&err);
	}
	struct moat_run_options opts = a.opts;
	const char *provider = a.provider, *config_path = a.config_path;
	const char *code_arg = a.code_arg, *stdin_path = a.stdin_path;
	bool json = a.json, lang_given = a.lang_given;
	unsigned given = a.given;
	int next = p.next;
	bool command = p.dashdash; /* "--" ended the options: a command line */
	if (command) {
		if (code_arg || lang_given) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0,
				       "a command after -- is the program: -c and -l do not apply to it");
			return cli_fail(&err);
		}
		if (next >= argc) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0, "give the command after --");
			return cli_fail(&err);
		}
		if (set_command(req, argv + next, (size_t)(argc - next)) < 0) {
			moat_error_oom(&err);
			return cli_fail(&err);
		}
	}
	if (req->outputs_count && !json) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "--output returns the files in the result's \"files\": add --json");
		return cli_fail(&err);
	}
	const char *file = !command && next < argc ? argv[next] : NULL;
	if (!command && (next + 1 < argc || (file && code_arg) || (!file && !code_arg))) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "give the program as exactly one of -c CODE, FILE or - (see moat run --help)");
		return cli_fail(&err);
	}
	if (command) {
		/* no code */
	} else if (code_arg) {
		req->code = strdup(code_arg);
		req->code_len = strlen(code_arg);
		if (!req->code) {
			moat_error_oom(&err);
			return cli_fail(&err);
		}
	} else {
		if (stdin_path && !strcmp(stdin_path, "-") && !strcmp(file, "-")) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0,
				       "the program and its --stdin cannot both come from standard input");
			return cli_fail(&err);
		}
		if (cli_read_file(file, MOAT_MAX_CODE_BYTES, &req->code, &req->code_len, &err) < 0)
			return cli_fail(&err);
		if (!lang_given && strcmp(file, "-") && moat_lang_from_path(file, &req->language) < 0) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0,
				       "cannot tell the language of %s from its name; give -l LANG", file);
			return cli_fail(&err);
		}
	}
	if (stdin_path && cli_read_file(stdin_path, MAX_STDIN_BYTES, &req->stdin_data,
					&req->stdin_len, &err) < 0)
		return cli_fail(&err);
	/* validated by the request pipeline, after the config filled its defaults */
	if (!json) {
		opts.on_output = stream_out;
	}
	if (run_with_provider(req, given, provider, config_path, &opts, &used, &res, &err) < 0)
		return cli_fail(&err);
	if (json)
		return print_json_result(res) < 0 ? 3 : exit_status_of(res);
	for (size_t i = 0; i < res->warnings_count; i++)
		fprintf(stderr, "moat: warning: %s\n", res->warnings[i]);
	if (res->seccomp_json) {
		fprintf(stderr, "moat: seccomp: %s\n", res->seccomp_json);
		print_seccomp_refusals(res->seccomp_json);
	}
	if (res->stdout_truncated)
		fprintf(stderr, "moat: stdout truncated at %zu bytes\n", res->stdout_len);
	if (res->stderr_truncated)
		fprintf(stderr, "moat: stderr truncated at %zu bytes\n", res->stderr_len);
	if (res->timed_out)
		fprintf(stderr, "moat: timed out after %llu ms; every process of the run was killed\n",
			(unsigned long long)req->timeout_ms);
	else if (res->killed_by && res->signal > 0)
		fprintf(stderr, "moat: program killed (%s, signal %d)\n", res->killed_by,
			res->signal);
	return exit_status_of(res);
}

/* What moat exec's flags set. */
struct exec_args {
	struct moat_run_options opts;
	struct moat_error err;
	const char *provider, *config_path, *runtime;
	bool stream;
};

/* --kv-quota: 0, or -1 with a->err set */
static int exec_set(void *ctx, const struct cli_opt *o, const char *arg)
{
	struct exec_args *a = ctx;
	(void)o;
	return moat_kv_quota_options(arg, &a->opts, &a->err) < 0 ? -1 : 0;
}

#define E_STR(n, a, f, c, h) { .name = n, .arg = a, .kind = CLI_OPT_STR, \
	.off = offsetof(struct exec_args, f), .complete = c, .help = h }
#define E_FLAG(n, f, h) { .name = n, .kind = CLI_OPT_FLAG, \
	.off = offsetof(struct exec_args, f), .help = h }

static const struct cli_opt exec_opts[] = {
	{ .name = "provider", .arg = "NAME", .kind = CLI_OPT_STR,
	  .off = offsetof(struct exec_args, provider), .complete = CLI_COMP_WORDS,
	  .words = "native docker e2b daytona none",
	  .help = "native (default), docker, e2b, daytona or none" },
	E_STR("config", "FILE", config_path, CLI_COMP_FILE, "config file (as for moat run)"),
	E_STR("policy", "FILE", opts.policy_path, CLI_COMP_FILE,
	      "seccomp policy (Docker JSON format)"),
	E_FLAG("seccomp-log", opts.seccomp_log, "report every system call the policy refused"),
	E_FLAG("strict-isolation", opts.strict_isolation,
	       "refuse to run where Landlock (the second filesystem wall) is missing"),
	E_STR("rootfs", "DIR", opts.rootfs_dir, CLI_COMP_DIR,
	      "a prepared root directory instead of the host's /usr"),
	E_STR("kv", "SPEC", opts.kv_store, CLI_COMP_FILE,
	      "the key-value store of kvEnabled requests: a file, sqlite:FILE or "
	      "redis://HOST:PORT/DB"),
	{ .name = "kv-quota", .arg = "keys=N,bytes=N,value=N", .kind = CLI_OPT_CALL,
	  .help = "quotas per sandbox id (defaults: 1024 keys, 64 MiB, 1 MiB a value)" },
	E_STR("runtime", "DIR", runtime, CLI_COMP_DIR,
	      "the runtime shims (default: $MOAT_RUNTIME_DIR, else next to moat)"),
	E_FLAG("stream", stream,
	       "the output as lines of JSON as the program writes, then the result's line"),
	{ .name = "help", .kind = CLI_OPT_HELP },
};

const struct cli_cmd cli_exec_cmd = {
	.name = "exec",
	.usage = "usage: moat exec [options] < REQUEST\n"
		 "Runs the JSON request on standard input and prints its result as JSON.\n",
	.help_col = 24,
	.opts = exec_opts,
	.count = sizeof exec_opts / sizeof exec_opts[0],
	.set = exec_set,
};

/* moat exec's failure: the stream (if started) stopped first, so no line of
 * it follows the error; then the error as JSON on stdout. */
static int exec_fail(struct stream_lines *sl, const struct moat_error *err, const char *used)
{
	lines_stop(sl);
	moat_lines_free(sl->lines);
	sl->lines = NULL;
	char *json = moat_error_to_json(err, moat_provider_name(used) ? used : "native");
	int status = moat_error_exit_code(err->type);
	if (json) {
		fputs(json, stdout);
		fputc('\n', stdout);
		free(json);
	}
	fflush(stdout);
	return status;
}

int cli_exec(int argc, char **argv)
{
	struct exec_args a = { .err = { 0 } };
	moat_run_options_init(&a.opts);
	a.opts.on_notice = notice_stderr;
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct stream_lines sl = { .resume_fd = -1, .cancel_fd = -1 };
	MOAT_AUTOFREE char *rt = NULL;
	MOAT_AUTOFREE char *input = NULL;
	MOAT_AUTO(moat_config) struct moat_config *cfg = NULL;
	MOAT_AUTO(moat_request) struct moat_request *req = NULL;
	MOAT_AUTO(moat_result) struct moat_result *res = NULL;
	struct cli_parsed p;
	int parsed = cli_opts_parse(&cli_exec_cmd, argc, argv, &a, &p);
	struct moat_run_options opts = a.opts;
	bool stream = a.stream;
	const char *provider = a.provider, *config_path = a.config_path, *runtime = a.runtime;
	const char *used = provider ? provider : "native";
	if (parsed) {
		if (p.status >= 0) /* --help, or getopt said why */
			return p.status;
		err = a.err;
		return exec_fail(&sl, &err, used);
	}
	if (p.next < argc) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "moat exec takes its request as JSON on standard input, not arguments");
		return exec_fail(&sl, &err, used);
	}
	size_t len = 0;
	if (cli_read_file("-", MAX_INPUT_BYTES, &input, &len, &err) < 0)
		return exec_fail(&sl, &err, used);
	/* the config first: the request pipeline fills what the request leaves
	 * out from it, then validates once */
	if (load_config(provider, config_path, &used, &cfg, &err) < 0)
		return exec_fail(&sl, &err, used);
	struct moat_request_defaults d = { .cfg = cfg };
	int rc = moat_request_prepare(input, len, NULL, &d, &req, &err);
	free(MOAT_TAKE(input));
	if (rc < 0)
		return exec_fail(&sl, &err, used);
	/* the store's API comes from the runtime shims (docs/KV.md); a Spin-style
	 * request (a sandboxId) gets them without kvEnabled too, so that opening
	 * the store says why it is not there */
	if (req->kv_enabled || req->sandbox_id) {
		rt = runtime ? (cli_is_dir(runtime) ? realpath(runtime, NULL) : NULL)
			     : cli_find_runtime();
		if (!rt && runtime) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0, "--runtime %s: not a directory",
				       runtime);
			return exec_fail(&sl, &err, used);
		}
		opts.runtime_dir = rt; /* none found: run_prepared says so */
	}
	if (stream && lines_start(&sl, &opts, &err) < 0)
		return exec_fail(&sl, &err, used);
	if (run_prepared(req, cfg, used, &opts, &res, &err) < 0)
		return exec_fail(&sl, &err, used);
	if (stream) {
		/* a provider that does not stream (docker, e2b...) returned the
		 * output in the result: its lines come now, before the result */
		stream_lines_out(&sl, MOAT_STDOUT, res->stdout_buf, res->stdout_len);
		stream_lines_out(&sl, MOAT_STDERR, res->stderr_buf, res->stderr_len);
		pthread_mutex_lock(&sl.mu);
		moat_lines_flush(sl.lines);
		pthread_mutex_unlock(&sl.mu);
		lines_stop(&sl);
		moat_lines_free(sl.lines);
		sl.lines = NULL;
		res->stdout_len = res->stderr_len = 0;
		MOAT_AUTOFREE char *line = moat_lines_result(res);
		if (!line)
			return say_oom(3);
		write_all(STDOUT_FILENO, line, strlen(line));
		return 0;
	}
	return print_json_result(res) < 0 ? 3 : 0;
}
