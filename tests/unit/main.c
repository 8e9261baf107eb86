/* Runs every unit suite (built with ASan/UBSan). */
#include <stdlib.h>
#include "suites.h"

int main(void)
{
	Suite *(*suites[])(void) = {
		error_suite, lang_suite, path_suite, request_suite, result_suite,
		jsonw_suite, seccomp_policy_suite, rootfs_plan_suite, net_suite,
		providers_suite, config_suite, cgroups_suite, sniff_suite, dnsmsg_suite, egress_suite,
		collect_suite, serve_suite, kv_suite, priv_suite, pool_suite, kv_redis_suite,
		apparmor_suite, ndjson_suite, cliopts_suite, agent_proto_suite,
	};
	SRunner *sr = srunner_create(NULL);
	for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
		srunner_add_suite(sr, suites[i]());
	srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, CK_TAP_LOG_FILE_NAME (tools/check.sh) */
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
