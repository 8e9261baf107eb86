/* moat — run untrusted code in a fresh Linux sandbox. CLI dispatch only. */
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
	fputs("usage: moat run [-l LANG] [-c CODE | FILE | -] [options]   run a program\n"
	      "       moat exec [--provider NAME] [--stream]            JSON request on stdin\n"
	      "       moat serve [--listen HOST:PORT | --socket PATH]   the HTTP service\n"
	      "       moat kv list|get|export|clear SANDBOXID [KEY]   the key-value store\n"
	      "       moat mcp [--config FILE] [options]               the MCP server (stdio)\n"
	      "       moat doctor                                      what this host supports\n"
	      "       moat policy check FILE | moat policy show [FILE] seccomp policies\n"
	      "       moat version\n"
	      "`moat run --help` lists the run options.\n", f);
}

int main(int argc, char **argv)
{
	/* output relays must see EPIPE, not die of SIGPIPE */
	moat_timeline_mark("main");
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	/* network egress holds two fds per relayed connection in this process;
	 * the program's own limit is set inside (RLIMIT_NOFILE 1024) */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max &&
	    nofile.rlim_cur < 4096) {
		nofile.rlim_cur = nofile.rlim_max < 4096 ? nofile.rlim_max : 4096;
		(void)setrlimit(RLIMIT_NOFILE, &nofile);
	}
	if (!strcmp(cmd, "run")) {
		int rc = cli_run(argc - 1, argv + 1);
		moat_timeline_mark("cli: done");
		moat_timeline_dump();
		return rc;
	}
	if (!strcmp(cmd, "exec"))
		return cli_exec(argc - 1, argv + 1);
	if (!strcmp(cmd, "serve"))
		return cli_serve(argc - 1, argv + 1);
	if (!strcmp(cmd, "mcp"))
		return cli_mcp(argc - 1, argv + 1);
	if (!strcmp(cmd, "kv"))
		return cli_kv(argc - 1, argv + 1);
	if (!strcmp(cmd, "doctor"))
		return cli_doctor(argc - 1, argv + 1);
	if (!strcmp(cmd, "policy"))
		return cli_policy(argc - 1, argv + 1);
	if (!strcmp(cmd, "__options"))
		return cli_options(argc - 1, argv + 1);
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
		return cli_version();
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "moat: unknown command \"%s\"\n", cmd);
	usage(stderr);
	return 2;
}
