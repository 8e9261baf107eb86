/* moat kv: look into or retire a sandboxId's key-value store (docs/KV.md). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"

struct kv_args {
	const char *spec, *config;
};

static const struct cli_opt kv_opts[] = {
	{ .name = "kv", .arg = "SPEC", .kind = CLI_OPT_STR, .off = offsetof(struct kv_args, spec),
	  .complete = CLI_COMP_FILE },
	{ .name = "config", .arg = "F", .kind = CLI_OPT_STR,
	  .off = offsetof(struct kv_args, config), .complete = CLI_COMP_FILE },
	{ .name = "help", .short_name = 'h', .kind = CLI_OPT_HELP },
};

/* The help is the usage: its two options are in its lines. */
const struct cli_cmd cli_kv_cmd = {
	.name = "kv",
	.usage = "usage: moat kv [--kv SPEC | --config F] list SANDBOXID   its keys (JSON)\n"
		 "       moat kv [--kv SPEC] get SANDBOXID KEY   the value's bytes\n"
		 "       moat kv [--kv SPEC] export SANDBOXID    keys and values (JSON)\n"
		 "       moat kv [--kv SPEC] clear SANDBOXID     delete every key of the id\n"
		 "SPEC: a file, sqlite:FILE or redis://HOST:PORT/DB (default: the config's\n"
		 "\"kv\", else this user's SQLite file). Exit status: 0; 1 when get finds no such key; 2 for bad\n"
		 "arguments; 3 when the store cannot be used.\n",
	.opts = kv_opts,
	.count = sizeof kv_opts / sizeof kv_opts[0],
	.usage_on_error = true,
};

int cli_kv(int argc, char **argv)
{
	struct kv_args a = { 0 };
	struct cli_parsed p;
	if (cli_opts_parse(&cli_kv_cmd, argc, argv, &a, &p))
		return p.status;
	const char *spec = a.spec, *config = a.config;
	argc -= p.next;
	argv += p.next;
	bool get = argc >= 1 && !strcmp(argv[0], "get");
	if (argc != (get ? 3 : 2)) {
		cli_opts_help(&cli_kv_cmd, stderr);
		return 2;
	}
	struct moat_error err = { 0 };
	char *out = NULL;
	size_t len = 0;
	struct moat_config *cfg = NULL;
	if (!spec) { /* the config's "kv", as moat exec and moat serve use it */
		if (moat_config_load(config, &cfg, &err) < 0) {
			int st = cli_fail(&err);
			moat_error_clear(&err);
			return st;
		}
		spec = moat_config_kv_store(cfg);
	}
	char *detail = NULL;
	int rc = moat_kv_admin(spec, argv[0], argv[1], strlen(argv[1]), get ? argv[2] : NULL, &out,
			       &len, &detail, &err);
	moat_config_free(cfg); /* spec is not used after this */
	if (rc < 0 && detail) /* the operator's own tool: the path and the backend's words */
		moat_error_set(&err, err.type, err.sys_errno, "%s", detail);
	free(detail);
	if (rc < 0) {
		rc = cli_fail(&err);
		moat_error_clear(&err);
		return rc;
	}
	if (rc == 1) {
		fprintf(stderr, "moat kv: %s has no key %s\n", argv[1], argv[2]);
	} else {
		fwrite(out, 1, len, stdout);
		if (!get)
			fputc('\n', stdout);
	}
	free(out);
	return fflush(stdout) == 0 ? rc : 3;
}
