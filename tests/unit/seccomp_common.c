/* The seccomp_policy unit suite's shared helpers (seccomp_common.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "moat.h"
#include "fixture.h"
#include "seccomp_common.h"

struct sc_host secpol_host(void)
{
	struct sc_host h;
	struct moat_error err = { 0 };
	ck_assert_int_eq(sc_host_detect(&h, &err), 0);
	/* includes/excludes tests assume an amd64-named native arch only when
	 * they say so; the kernel is pinned for minKernel */
	h.kernel[0] = 5;
	h.kernel[1] = 10;
	h.kernel[2] = 0;
	return h;
}

struct sc_policy *secpol_parse_ok(const char *json)
{
	struct sc_host h = secpol_host();
	struct moat_error err = { 0 };
	struct sc_policy *p = NULL;
	int rc = sc_policy_parse(json, strlen(json), &h, &p, &err);
	ck_assert_msg(rc == 0, "parse failed: %s", err.message ? err.message : "?");
	ck_assert_ptr_nonnull(p);
	moat_error_clear(&err);
	return p;
}

/* Docker's default profile, shipped in the checkout (tests/fixtures/seccomp/
 * README.md): found from the checkout's top, where make check runs the
 * tests, or from the test binary's directory (build/); or
 * $MOAT_DOCKER_SECCOMP_FIXTURE. */
const char *secpol_docker_fixture(void)
{
	const char *env = getenv("MOAT_DOCKER_SECCOMP_FIXTURE");
	if (env && *env)
		return access(env, R_OK) == 0 ? env : NULL;
	return fixture_path(DOCKER_FIXTURE_REL);
}

char *secpol_tmpdir(void)
{
	char *d = strdup("/tmp/moat-sc-test-XXXXXX");
	ck_assert_ptr_nonnull(d);
	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

void secpol_rm_rf(const char *dir)
{
	char *cmd = NULL;
	ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", dir), 0);
	ck_assert_int_eq(system(cmd), 0);
	free(cmd);
}

char *secpol_write_tmp(const char *dir, const char *name, const char *text)
{
	char *path = NULL;
	ck_assert_int_ge(asprintf(&path, "%s/%s", dir, name), 0);
	FILE *f = fopen(path, "we");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

void secpol_hex(const uint8_t *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}
