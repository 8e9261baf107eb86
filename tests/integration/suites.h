/* Every integration and security suite; tests/integration/main.c runs them. */
#ifndef MOAT_TESTS_INTEGRATION_SUITES_H
#define MOAT_TESTS_INTEGRATION_SUITES_H
#include <check.h>

Suite *runner_suite(void);
Suite *isolation_suite(void);
Suite *requests_suite(void);
Suite *cli_suite(void);
Suite *escape_suite(void);
Suite *network_suite(void);
Suite *providers_cli_suite(void);
Suite *limits_suite(void);
Suite *seccomp_escape_suite(void);
Suite *outputs_suite(void);
Suite *egress_suite(void);
Suite *serve_suite(void);
Suite *kv_suite(void);
Suite *argv_suite(void);
Suite *systemd_suite(void);
Suite *serve_speed_suite(void);
Suite *serve_stream_suite(void);
Suite *pool_session_suite(void);
Suite *serve_sessions_suite(void);
Suite *serve_sandboxes_suite(void);
Suite *serve_sbx_pool_suite(void);
Suite *serve_contexts_suite(void);

#endif
