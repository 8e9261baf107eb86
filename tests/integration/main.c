/* Runs every integration and security suite against $MOAT_BIN, as root and
 * as uid 65534. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

int main(void)
{
	Suite *(*suites[])(void) = {
		runner_suite, isolation_suite, requests_suite, cli_suite, escape_suite,
		network_suite, providers_cli_suite, limits_suite, seccomp_escape_suite,
		outputs_suite, egress_suite, serve_suite, kv_suite, argv_suite,
		systemd_suite, serve_speed_suite, serve_stream_suite, pool_session_suite,
		serve_sessions_suite, serve_sandboxes_suite, serve_contexts_suite,
	};
	/* copy the binary once, in the parent, where uid 65534 can run it */
	const char *moat = harness_moat();
	if (!harness_is_root())
		fprintf(stderr, "note: not root: only the rootless mode runs\n");
	SRunner *sr = srunner_create(NULL);
	for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
		srunner_add_suite(sr, suites[i]());
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
