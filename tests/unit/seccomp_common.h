/* The seccomp_policy unit suite's shared helpers (seccomp_common.c); the
 * tests are in test_seccomp_policy.c (parsing, compilation, the default
 * policy's rule, and the suite), test_seccomp_cache.c (the BPF cache) and
 * test_seccomp_installed.c (the default policy installed for real,
 * --seccomp-log's rewrite, interpreter and listener, the tree layout). */
#ifndef MOAT_TESTS_UNIT_SECCOMP_COMMON_H
#define MOAT_TESTS_UNIT_SECCOMP_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "seccomp/internal.h"

/* The host as detected, with the kernel pinned at 5.10 for minKernel. */
struct sc_host secpol_host(void);
/* json parsed against secpol_host(); the test fails when it does not parse. */
struct sc_policy *secpol_parse_ok(const char *json);

/* Docker's default profile, shipped in the checkout (tests/fixtures/seccomp/
 * README.md): its path, or NULL. */
#define DOCKER_FIXTURE_REL "seccomp/docker-default.json" /* under tests/fixtures/ */
#define DOCKER_FIXTURE "tests/fixtures/" DOCKER_FIXTURE_REL
const char *secpol_docker_fixture(void);

/* A new directory under /tmp (malloc'd), removed with secpol_rm_rf; a file
 * in it with text (its path, malloc'd). */
char *secpol_tmpdir(void);
void secpol_rm_rf(const char *dir);
char *secpol_write_tmp(const char *dir, const char *name, const char *text);

/* n bytes as lowercase hex into out (2n + 1 bytes). */
void secpol_hex(const uint8_t *d, size_t n, char *out);

/* Each file's tests, added to the suite's tcases in order. */
void seccomp_cache_tests(TCase *tc);
void seccomp_log_policy_tests(TCase *tc); /* the "policy" tcase's, of test_seccomp_installed.c */
void seccomp_installed_tests(TCase *run);

#endif
