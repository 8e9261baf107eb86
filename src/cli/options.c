/* moat __options: the option tables for the man page's check and the bash
 * completion (completions/moat.bash.in, made by the Makefile). Hidden: not
 * in moat --help. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"

int cli_options(int argc, char **argv)
{
	const struct cli_cmd *const cmds[] = { &cli_run_cmd, &cli_exec_cmd, &cli_serve_cmd,
					       &cli_kv_cmd };
	size_t n = sizeof cmds / sizeof cmds[0];
	if (argc == 2 && !strcmp(argv[1], "bash")) {
		cli_opts_bash(cmds, n, stdout);
		return fflush(stdout) == 0 ? 0 : 3;
	}
	for (size_t i = 0; argc == 2 && i < n; i++)
		if (!strcmp(argv[1], cmds[i]->name)) {
			cli_opts_list(cmds[i], stdout);
			return fflush(stdout) == 0 ? 0 : 3;
		}
	fputs("usage: moat __options run|exec|serve|kv|bash\n", stderr);
	return 2;
}
