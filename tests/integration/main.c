/* Runs every integration and security suite against $MOAT_BIN, as root and
 * as uid 65534.
 *
 * MOAT_SUITES=name,name... runs only those suites; MOAT_SKIP_SUITES=name,...
 * runs every suite but those. make check runs the stage as two shards at
 * once (tools/shards.sh), one with MOAT_SUITES=LIST and one with
 * MOAT_SKIP_SUITES=LIST (the same LIST), so every suite runs in exactly one
 * of them, a suite added here included (docs/testing.md, "CI's time by
 * stage"). A name not in the table below is an error, never a suite
 * silently left out. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* each name is the one its suite_create gives (CK_RUN_SUITE takes it too) */
static const struct {
	const char *name;
	Suite *(*make)(void);
} suites[] = {
	{"runner", runner_suite},
	{"isolation", isolation_suite},
	{"requests", requests_suite},
	{"cli", cli_suite},
	{"escape", escape_suite},
	{"network", network_suite},
	{"providers_cli", providers_cli_suite},
	{"limits", limits_suite},
	{"seccomp_escape", seccomp_escape_suite},
	{"outputs", outputs_suite},
	{"egress", egress_suite},
	{"serve", serve_suite},
	{"kv", kv_suite},
	{"argv", argv_suite},
	{"systemd", systemd_suite},
	{"serve_speed", serve_speed_suite},
	{"serve_stream", serve_stream_suite},
	{"pool_session", pool_session_suite},
	{"serve_sessions", serve_sessions_suite},
	{"serve_sandboxes", serve_sandboxes_suite},
	{"serve_sbx_pool", serve_sbx_pool_suite},
	{"serve_contexts", serve_contexts_suite},
};
#define NSUITES (sizeof suites / sizeof suites[0])

/* Marks in pick[] the suites LIST names (comma- or space-separated); false
 * with a message for a name that is no suite's. */
static bool parse_list(const char *var, const char *list, bool pick[NSUITES])
{
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ", ");
		if (len) {
			size_t i = 0;
			while (i < NSUITES && !(strlen(suites[i].name) == len &&
						!strncmp(suites[i].name, p, len)))
				i++;
			if (i == NSUITES) {
				fprintf(stderr, "test-integration: %s names no suite: %.*s\n", var,
					(int)len, p);
				return false;
			}
			pick[i] = true;
		}
		p += len;
		p += strspn(p, ", ");
	}
	return true;
}

int main(void)
{
	const char *only = getenv("MOAT_SUITES"), *skip = getenv("MOAT_SKIP_SUITES");
	bool pick[NSUITES] = {false}, run[NSUITES];
	if (only && *only && skip && *skip) {
		fprintf(stderr, "test-integration: MOAT_SUITES and MOAT_SKIP_SUITES are exclusive\n");
		return 2;
	}
	if (!parse_list(only && *only ? "MOAT_SUITES" : "MOAT_SKIP_SUITES",
			only && *only ? only : skip ? skip : "", pick))
		return 2;
	for (size_t i = 0; i < NSUITES; i++)
		run[i] = only && *only ? pick[i] : !pick[i];
	/* copy the binary once, in the parent, where uid 65534 can run it */
	const char *moat = harness_moat();
	if (!harness_is_root())
		fprintf(stderr, "note: not root: only the rootless mode runs\n");
	SRunner *sr = srunner_create(NULL);
	for (size_t i = 0; i < NSUITES; i++)
		if (run[i])
			srunner_add_suite(sr, suites[i].make());
	srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, CK_TAP_LOG_FILE_NAME (tools/check.sh) */
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	/* remove the copy and its directory */
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", moat);
	unlink(moat);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		rmdir(dir);
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
