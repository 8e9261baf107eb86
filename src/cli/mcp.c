/* moat mcp: starts the MCP server (clients/node/mcp.js, docs/MCP.md) with node,
 * by execve, telling it this binary's path so its runs use the same moat. Its
 * flags are the server's own: passed on as they are. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

extern char **environ;

/* $MOAT_MCP_BIN, else next to the binary: ../lib/moat/mcp/mcp.js (installed)
 * or ../clients/node/mcp.js (the build tree). Malloc'd or NULL. */
static char *find_server(const char *exe_dir)
{
	const char *env = getenv("MOAT_MCP_BIN");
	if (env && *env)
		return access(env, R_OK) == 0 ? strdup(env) : NULL;
	static const char *const rel[] = { "/../lib/moat/mcp/mcp.js", "/../clients/node/mcp.js" };
	for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
		char *p = NULL;
		if (asprintf(&p, "%s%s", exe_dir, rel[i]) < 0)
			return NULL;
		char *real = access(p, R_OK) == 0 ? realpath(p, NULL) : NULL;
		free(p);
		if (real)
			return real;
	}
	return NULL;
}

/* node (or Debian's older name, nodejs) on PATH. Malloc'd or NULL. */
static char *find_node(void)
{
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	static const char *const names[] = { "node", "nodejs" };
	for (size_t n = 0; n < 2; n++) {
		for (const char *p = path; *p;) {
			size_t len = strcspn(p, ":");
			char *cand = NULL;
			if (len && asprintf(&cand, "%.*s/%s", (int)len, p, names[n]) < 0)
				return NULL;
			if (cand && access(cand, X_OK) == 0)
				return cand;
			free(cand);
			p += len + (p[len] == ':');
		}
	}
	return NULL;
}

int cli_mcp(int argc, char **argv)
{
	char *exe = realpath("/proc/self/exe", NULL);
	if (!exe) {
		fprintf(stderr, "moat mcp: cannot tell where moat is: %s\n", strerror(errno));
		return 3;
	}
	char *dir = strdup(exe);
	char *slash = dir ? strrchr(dir, '/') : NULL;
	if (slash)
		*slash = '\0';
	char *server = dir ? find_server(dir) : NULL;
	free(dir);
	if (!server) {
		const char *env = getenv("MOAT_MCP_BIN");
		if (env && *env)
			fprintf(stderr, "moat mcp: MOAT_MCP_BIN=%s: cannot read it\n", env);
		else
			fprintf(stderr, "moat mcp: the MCP server is not installed (looked for "
					"../lib/moat/mcp/mcp.js and ../clients/node/mcp.js beside %s; "
					"set MOAT_MCP_BIN)\n", exe);
		free(exe);
		return 3;
	}
	char *node = find_node();
	if (!node) {
		fputs("moat mcp: node (Node.js 18 or later) is not on PATH: install it "
		      "(apt-get install nodejs)\n", stderr);
		free(server);
		free(exe);
		return 3;
	}
	/* node SERVER --moat EXE ARGS... (argv[0] is "mcp") */
	char **args = calloc((size_t)argc + 4, sizeof *args);
	if (!args) {
		fputs("moat mcp: out of memory\n", stderr);
		return 3;
	}
	size_t n = 0;
	args[n++] = node;
	args[n++] = server;
	args[n++] = "--moat";
	args[n++] = exe;
	for (int i = 1; i < argc; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	execve(node, args, environ);
	fprintf(stderr, "moat mcp: cannot run %s: %s\n", node, strerror(errno));
	free(args);
	free(node);
	free(server);
	free(exe);
	return 3;
}
