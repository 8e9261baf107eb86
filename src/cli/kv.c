/* moat kv: look into or retire a sandboxId's key-value store (docs/KV.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
	fputs("usage: moat kv [--kv SPEC | --config F] list SANDBOXID   its keys (JSON)\n"
	      "       moat kv [--kv SPEC] get SANDBOXID KEY   the value's bytes\n"
	      "       moat kv [--kv SPEC] export SANDBOXID    keys and values (JSON)\n"
	      "       moat kv [--kv SPEC] clear SANDBOXID     delete every key of the id\n"
	      "SPEC: a file, sqlite:FILE or redis://HOST:PORT/DB (default: the config's\n"
	      "\"kv\", else this user's SQLite file). Exit status: 0; 1 when get finds no such key; 2 for bad\n"
	      "arguments; 3 when the store cannot be used.\n", f);
}

int cli_kv(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "kv", required_argument, NULL, 'k' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *spec = NULL, *config = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", longs, NULL)) != -1) {
		if (c == 'k') {
			spec = optarg;
		} else if (c == 'c') {
			config = optarg;
		} else if (c == 'h') {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	bool get = argc >= 1 && !strcmp(argv[0], "get");
	if (argc != (get ? 3 : 2)) {
		usage(stderr);
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
