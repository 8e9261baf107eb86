/* The moat command line: a thin client of libmoat, through its two public
 * headers only (include/moat.h, include/moat_admin.h). */
#ifndef MOAT_CLI_CLI_H
#define MOAT_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include "moat_admin.h"

int cli_run(int argc, char **argv);
int cli_exec(int argc, char **argv);
int cli_doctor(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_policy(int argc, char **argv);
/* moat mcp: execve's the MCP server (node) with this binary's path. */
int cli_mcp(int argc, char **argv);
/* moat version: moat and its libraries, with their linkage. */
int cli_version(void);

/* Reads a whole file ("-" = stdin) up to max bytes into a malloc'd buffer. */
int cli_read_file(const char *path, size_t max, char **out, size_t *len, struct moat_error *err);
/* true when p is a directory. */
bool cli_is_dir(const char *p);
/* The runtime shims: $MOAT_RUNTIME_DIR, else next to the binary:
 * ../share/moat/runtime (installed) or ../runtime (the build tree).
 * Malloc'd (a real path) or NULL. */
char *cli_find_runtime(void);
int cli_kv(int argc, char **argv);
/* The option tables of the commands (cli/opts.h). */
struct cli_cmd;
extern const struct cli_cmd cli_run_cmd, cli_exec_cmd, cli_serve_cmd, cli_kv_cmd;
/* moat __options CMD: the options of run, exec, serve or kv, one a line (the
 * man page's check); moat __options bash: the completion's functions. */
int cli_options(int argc, char **argv);
/* Prints "moat: <message>" on stderr and returns the error's exit code. */
int cli_fail(const struct moat_error *err);

#endif
