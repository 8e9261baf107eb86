/* Every unit suite; tests/unit/main.c runs them all. */
#ifndef MOAT_TESTS_UNIT_SUITES_H
#define MOAT_TESTS_UNIT_SUITES_H
#include <check.h>

Suite *error_suite(void);
Suite *lang_suite(void);
Suite *path_suite(void);
Suite *request_suite(void);
Suite *result_suite(void);
Suite *jsonw_suite(void);
Suite *seccomp_policy_suite(void);
Suite *rootfs_plan_suite(void);
Suite *net_suite(void);
Suite *providers_suite(void);
Suite *config_suite(void);
Suite *cgroups_suite(void);
Suite *sniff_suite(void);
Suite *dnsmsg_suite(void);
Suite *egress_suite(void);
Suite *collect_suite(void);
Suite *serve_suite(void);
Suite *kv_suite(void);
Suite *priv_suite(void);
Suite *pool_suite(void);
Suite *kv_redis_suite(void);
Suite *apparmor_suite(void);
Suite *ndjson_suite(void);
Suite *cliopts_suite(void);
Suite *agent_proto_suite(void);

#endif
