/* moat run / moat exec. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cJSON.h>

#include "cli/cli.h"

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

static void run_usage(FILE *f)
{
	fputs("usage: moat run [-l LANG] [-c CODE | FILE | -] [options]\n"
	      "       moat run [options] -- CMD [ARG]...\n"
	      "  -l, --language LANG   python, javascript, typescript, bash, sh (default: from\n"
	      "                        the file extension, else python)\n"
	      "  -c, --code CODE       the program text\n"
	      "  FILE | -              read the program from FILE or standard input\n"
	      "  -- CMD [ARG]...       run this command line instead of code: CMD is looked up\n"
	      "                        in the sandbox's PATH (/usr/local/bin:/usr/bin:/bin)\n"
	      "                        unless it holds a '/'; 127 when it is not found\n"
	      "  --workdir DIR         bind host directory DIR read-only at /sandbox/work and\n"
	      "                        run there\n"
	      "  --output PATTERN      return the files under /sandbox matching PATTERN in the\n"
	      "                        result's \"files\" (repeatable; needs --json)\n"
	      "  --timeout DURATION    wall clock: 500ms, 5s, 2m (plain number: seconds; default 30s)\n"
	      "  --memory SIZE         memory limit: 256M, 1G (plain number: MiB)\n"
	      "  --cpus N              CPU share, fractions allowed (0.5)\n"
	      "  --pids N              process limit\n"
	      "  --strict-limits       fail instead of running with a limit not enforced\n"
	      "  --env NAME=VALUE      set a variable (repeatable; nothing of the host is passed)\n"
	      "  --file DEST=SRC       copy host file SRC to /sandbox/DEST (repeatable)\n"
	      "  --stdin FILE|-        the program's standard input (default: empty)\n"
	      "  --max-output BYTES    capture cap per stream (default 1 MiB)\n"
	      "  --net                 allow network egress\n"
	      "  --policy FILE         seccomp policy (Docker JSON format)\n"
	      "  --seccomp-log         report every system call the policy refused\n"
	      "  --strict-isolation    refuse to run where Landlock (the second filesystem\n"
	      "                        wall) is missing, instead of a warning\n"
	      "  --rootfs DIR          a prepared root directory instead of the host's /usr\n"
	      "  --provider NAME       native (default), docker, e2b, daytona or none\n"
	      "  --config FILE         config file (default: $MOAT_CONFIG, ./moat.json,\n"
	      "                        ./aistack.config.json, ~/.config/moat/config.json,\n"
	      "                        /etc/moat/config.json)\n"
	      "  --json                print the result as JSON instead of streaming output\n"
	      "Exit status: the program's; 124 on timeout; 128+N when killed by signal N;\n"
	      "2 for a bad request or policy refusal; 3 when the sandbox is unavailable.\n", f);
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

enum {
	OPT_TIMEOUT = 256, OPT_MEMORY, OPT_CPUS, OPT_PIDS, OPT_STRICT, OPT_ENV, OPT_FILE,
	OPT_STDIN, OPT_MAXOUT, OPT_NET, OPT_POLICY, OPT_ROOTFS, OPT_JSON, OPT_HELP, OPT_SCLOG,
	OPT_PROVIDER, OPT_CONFIG, OPT_KV, OPT_KV_QUOTA, OPT_RUNTIME, OPT_STRICT_ISO, OPT_WORKDIR,
	OPT_OUTPUT, OPT_STREAM,
};

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

int cli_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "language", required_argument, NULL, 'l' }, { "code", required_argument, NULL, 'c' },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "memory", required_argument, NULL, OPT_MEMORY },
		{ "cpus", required_argument, NULL, OPT_CPUS },
		{ "pids", required_argument, NULL, OPT_PIDS },
		{ "strict-limits", no_argument, NULL, OPT_STRICT },
		{ "env", required_argument, NULL, OPT_ENV },
		{ "file", required_argument, NULL, OPT_FILE },
		{ "stdin", required_argument, NULL, OPT_STDIN },
		{ "max-output", required_argument, NULL, OPT_MAXOUT },
		{ "net", no_argument, NULL, OPT_NET },
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "rootfs", required_argument, NULL, OPT_ROOTFS },
		{ "json", no_argument, NULL, OPT_JSON }, { "help", no_argument, NULL, OPT_HELP },
		{ "seccomp-log", no_argument, NULL, OPT_SCLOG },
		{ "provider", required_argument, NULL, OPT_PROVIDER },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "strict-isolation", no_argument, NULL, OPT_STRICT_ISO },
		{ "workdir", required_argument, NULL, OPT_WORKDIR },
		{ "output", required_argument, NULL, OPT_OUTPUT },
		{ NULL, 0, NULL, 0 },
	};
	struct moat_error err = { 0 };
	const char *provider = NULL, *config_path = NULL, *used = "native";
	const char *last_optarg = NULL;
	unsigned given = 0;
	struct moat_request *req = moat_request_new();
	struct moat_run_options opts;
	moat_run_options_init(&opts);
	opts.on_notice = notice_stderr;
	struct moat_result *res = NULL;
	bool json = false, lang_given = false;
	const char *code_arg = NULL, *stdin_path = NULL;
	int status = 2;
	if (!req) {
		return say_oom(3);
	}
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "+l:c:", longopts, NULL)) != -1) {
		last_optarg = optarg;
		switch (c) {
		case 'l':
			if (moat_lang_from_name(optarg, &req->language) < 0) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					       "unknown language \"%s\" (python, javascript, "
					       "typescript, bash, sh)", optarg);
				goto fail;
			}
			lang_given = true;
			break;
		case 'c':
			code_arg = optarg;
			break;
		case OPT_TIMEOUT:
			given |= MOAT_REQ_HAS_TIMEOUT;
			if (parse_duration(optarg, &req->timeout_ms) < 0) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					       "--timeout: expected a duration like 500ms, 5s or 2m, got \"%s\"",
					       optarg);
				goto fail;
			}
			break;
		case OPT_MEMORY:
			given |= MOAT_REQ_HAS_MEMORY;
			if (parse_size_mb(optarg, &req->memory_mb) < 0) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					       "--memory: expected a size like 256M or 1G, got \"%s\"", optarg);
				goto fail;
			}
			break;
		case OPT_CPUS: {
			given |= MOAT_REQ_HAS_CPUS;
			char *end;
			errno = 0;
			req->cpus = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(req->cpus) || req->cpus <= 0) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					       "--cpus: expected a positive number, got \"%s\"", optarg);
				goto fail;
			}
			break;
		}
		case OPT_PIDS:
			given |= MOAT_REQ_HAS_PIDS;
			if (parse_u64(optarg, &req->pids_limit) < 0 || req->pids_limit == 0) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					       "--pids: expected a positive integer, got \"%s\"", optarg);
				goto fail;
			}
			break;
		case OPT_MAXOUT:
			given |= MOAT_REQ_HAS_MAXOUT;
			if (parse_u64(optarg, &req->max_output_bytes) < 0 || req->max_output_bytes == 0) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0,
					       "--max-output: expected a positive integer, got \"%s\"", optarg);
				goto fail;
			}
			break;
		case OPT_STRICT:
			given |= MOAT_REQ_HAS_STRICT;
			req->strict_limits = true;
			break;
		case OPT_ENV: {
			const char *eq = strchr(optarg, '=');
			if (!eq) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0, "--env: expected NAME=VALUE");
				goto fail;
			}
			char *value = strdup(eq + 1);
			if (!value || add_kv(&req->env, &req->env_count, optarg,
					     (size_t)(eq - optarg), value, strlen(value)) < 0) {
				free(value);
				moat_error_oom(&err);
				goto fail;
			}
			break;
		}
		case OPT_FILE: {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg || !eq[1]) {
				moat_error_set(&err, MOAT_ERR_CONFIG, 0, "--file: expected DEST=SRC");
				goto fail;
			}
			char *data;
			size_t len;
			if (cli_read_file(eq + 1, MAX_FILE_BYTES, &data, &len, &err) < 0)
				goto fail;
			if (add_kv(&req->files, &req->files_count, optarg, (size_t)(eq - optarg), data,
				   len) < 0) {
				free(data);
				moat_error_oom(&err);
				goto fail;
			}
			break;
		}
		case OPT_STDIN:
			stdin_path = optarg;
			break;
		case OPT_NET:
			given |= MOAT_REQ_HAS_NETWORK;
			req->network = true;
			break;
		case OPT_POLICY:
			opts.policy_path = optarg;
			break;
		case OPT_ROOTFS:
			opts.rootfs_dir = optarg;
			break;
		case OPT_JSON:
			json = true;
			break;
		case OPT_SCLOG:
			opts.seccomp_log = true;
			break;
		case OPT_STRICT_ISO:
			opts.strict_isolation = true;
			break;
		case OPT_PROVIDER:
			provider = optarg;
			break;
		case OPT_CONFIG:
			config_path = optarg;
			break;
		case OPT_WORKDIR:
			opts.workdir = optarg;
			break;
		case OPT_OUTPUT:
			if (add_output(req, optarg) < 0) {
				moat_error_oom(&err);
				goto fail;
			}
			break;
		case OPT_HELP:
			run_usage(stdout);
			moat_request_free(req);
			return 0;
		default:
			run_usage(stderr);
			moat_request_free(req);
			return 2;
		}
	}
	/* "--" ended the options (not an option's argument "--"): a command line */
	bool command = optind > 1 && !strcmp(argv[optind - 1], "--") &&
		       argv[optind - 1] != last_optarg;
	if (command) {
		if (code_arg || lang_given) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0,
				       "a command after -- is the program: -c and -l do not apply to it");
			goto fail;
		}
		if (optind >= argc) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0, "give the command after --");
			goto fail;
		}
		if (set_command(req, argv + optind, (size_t)(argc - optind)) < 0) {
			moat_error_oom(&err);
			goto fail;
		}
	}
	if (req->outputs_count && !json) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "--output returns the files in the result's \"files\": add --json");
		goto fail;
	}
	const char *file = !command && optind < argc ? argv[optind] : NULL;
	if (!command && (optind + 1 < argc || (file && code_arg) || (!file && !code_arg))) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "give the program as exactly one of -c CODE, FILE or - (see moat run --help)");
		goto fail;
	}
	if (command) {
		/* no code */
	} else if (code_arg) {
		req->code = strdup(code_arg);
		req->code_len = strlen(code_arg);
		if (!req->code) {
			moat_error_oom(&err);
			goto fail;
		}
	} else {
		if (stdin_path && !strcmp(stdin_path, "-") && !strcmp(file, "-")) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0,
				       "the program and its --stdin cannot both come from standard input");
			goto fail;
		}
		if (cli_read_file(file, MOAT_MAX_CODE_BYTES, &req->code, &req->code_len, &err) < 0)
			goto fail;
		if (!lang_given && strcmp(file, "-") && moat_lang_from_path(file, &req->language) < 0) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0,
				       "cannot tell the language of %s from its name; give -l LANG", file);
			goto fail;
		}
	}
	if (stdin_path && cli_read_file(stdin_path, MAX_STDIN_BYTES, &req->stdin_data,
					&req->stdin_len, &err) < 0)
		goto fail;
	/* validated by the request pipeline, after the config filled its defaults */
	if (!json) {
		opts.on_output = stream_out;
	}
	if (run_with_provider(req, given, provider, config_path, &opts, &used, &res, &err) < 0)
		goto fail;
	if (json) {
		if (print_json_result(res) < 0)
			status = 3;
		else
			status = exit_status_of(res);
	} else {
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
		status = exit_status_of(res);
	}
	moat_result_free(res);
	moat_request_free(req);
	moat_error_clear(&err);
	return status;
fail:
	status = cli_fail(&err);
	moat_error_clear(&err);
	moat_request_free(req);
	return status;
}

int cli_exec(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "rootfs", required_argument, NULL, OPT_ROOTFS },
		{ "provider", required_argument, NULL, OPT_PROVIDER },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "seccomp-log", no_argument, NULL, OPT_SCLOG },
		{ "kv", required_argument, NULL, OPT_KV },
		{ "kv-quota", required_argument, NULL, OPT_KV_QUOTA },
		{ "runtime", required_argument, NULL, OPT_RUNTIME },
		{ "strict-isolation", no_argument, NULL, OPT_STRICT_ISO },
		{ "stream", no_argument, NULL, OPT_STREAM },
		{ NULL, 0, NULL, 0 },
	};
	struct moat_run_options opts;
	moat_run_options_init(&opts);
	opts.on_notice = notice_stderr;
	struct moat_error err = { 0 };
	struct stream_lines sl = { .resume_fd = -1, .cancel_fd = -1 };
	bool stream = false;
	const char *provider = NULL, *config_path = NULL, *used = "native", *runtime = NULL;
	char *rt = NULL;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		if (c == OPT_POLICY)
			opts.policy_path = optarg;
		else if (c == OPT_ROOTFS)
			opts.rootfs_dir = optarg;
		else if (c == OPT_SCLOG)
			opts.seccomp_log = true;
		else if (c == OPT_PROVIDER)
			provider = used = optarg;
		else if (c == OPT_CONFIG)
			config_path = optarg;
		else if (c == OPT_KV)
			opts.kv_store = optarg;
		else if (c == OPT_RUNTIME)
			runtime = optarg;
		else if (c == OPT_STRICT_ISO)
			opts.strict_isolation = true;
		else if (c == OPT_STREAM)
			stream = true;
		else if (c == OPT_KV_QUOTA) {
			if (moat_kv_quota_options(optarg, &opts, &err) < 0)
				goto fail;
		} else
			return 2;
	}
	if (optind < argc) {
		moat_error_set(&err, MOAT_ERR_CONFIG, 0,
			       "moat exec takes its request as JSON on standard input, not arguments");
		goto fail;
	}
	char *input = NULL;
	size_t len = 0;
	struct moat_request *req = NULL;
	struct moat_result *res = NULL;
	if (cli_read_file("-", MAX_INPUT_BYTES, &input, &len, &err) < 0)
		goto fail;
	/* the config first: the request pipeline fills what the request leaves
	 * out from it, then validates once */
	struct moat_config *cfg = NULL;
	if (load_config(provider, config_path, &used, &cfg, &err) < 0) {
		free(input);
		goto fail;
	}
	struct moat_request_defaults d = { .cfg = cfg };
	int rc = moat_request_prepare(input, len, NULL, &d, &req, &err);
	free(input);
	if (rc < 0) {
		moat_config_free(cfg);
		goto fail;
	}
	/* the store's API comes from the runtime shims (docs/KV.md); a Spin-style
	 * request (a sandboxId) gets them without kvEnabled too, so that opening
	 * the store says why it is not there */
	if (req->kv_enabled || req->sandbox_id) {
		rt = runtime ? (cli_is_dir(runtime) ? realpath(runtime, NULL) : NULL)
			     : cli_find_runtime();
		if (!rt && runtime) {
			moat_error_set(&err, MOAT_ERR_CONFIG, 0, "--runtime %s: not a directory",
				       runtime);
			moat_request_free(req);
			moat_config_free(cfg);
			goto fail;
		}
		opts.runtime_dir = rt; /* none found: run_prepared says so */
	}
	if (stream && lines_start(&sl, &opts, &err) < 0) {
		moat_request_free(req);
		moat_config_free(cfg);
		goto fail;
	}
	rc = run_prepared(req, cfg, used, &opts, &res, &err);
	moat_config_free(cfg);
	moat_request_free(req);
	free(rt);
	rt = NULL;
	if (rc < 0)
		goto fail;
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
		char *line = moat_lines_result(res);
		moat_result_free(res);
		if (!line) {
			return say_oom(3);
		}
		write_all(STDOUT_FILENO, line, strlen(line));
		free(line);
		return 0;
	}
	rc = print_json_result(res);
	moat_result_free(res);
	return rc < 0 ? 3 : 0;
fail:;
	free(rt);
	lines_stop(&sl);
	moat_lines_free(sl.lines);
	char *json = moat_error_to_json(&err, moat_provider_name(used) ? used : "native");
	int status = moat_error_exit_code(err.type);
	if (json) {
		fputs(json, stdout);
		fputc('\n', stdout);
		free(json);
	}
	fflush(stdout);
	moat_error_clear(&err);
	return status;
}
