/* Unit tests: which requests a warm sandbox may take (pool_refusal):
 * anything the bootstrap could not reproduce exactly runs cold; and the
 * MOATPOOL2 frame it is handed, against the vectors the Python and JS
 * readers are tested with (tests/fixtures/frames/moatpool2.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "moat.h"
#include "pool/pool.h"
#include "fixture.h"
#include "suites.h"

static struct moat_request *req(enum moat_language lang)
{
	struct moat_request *r = moat_request_new();
	ck_assert_ptr_nonnull(r);
	r->code = strdup("x");
	r->code_len = 1;
	r->language = lang;
	r->memory_mb = 256;
	r->pids_limit = 64;
	r->cpus = 1;
	return r;
}

static void set_env(struct moat_request *r, const char *k, const char *v)
{
	r->env = realloc(r->env, (r->env_count + 1) * sizeof *r->env);
	r->env[r->env_count].key = strdup(k);
	r->env[r->env_count].value = strdup(v);
	r->env[r->env_count].value_len = strlen(v);
	r->env_count++;
}

START_TEST(pool_takes_only_what_it_can_reproduce)
{
	struct moat_request *boot = req(MOAT_LANG_PYTHON), *r = req(MOAT_LANG_PYTHON);
	ck_assert_ptr_null(pool_refusal(boot, r));
	r->timeout_ms = 5; /* re-armed at delivery: any */
	r->max_output_bytes = 10;
	set_env(r, "PYTHONPATH", "/sandbox/lib"); /* the bootstrap puts it on sys.path */
	set_env(r, "MY_VAR", "1");
	ck_assert_ptr_null(pool_refusal(boot, r));
	set_env(r, "PYTHONHASHSEED", "0"); /* read at interpreter start */
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(r);

	/* each of these runs cold */
	for (int c = 0; c < 9; c++) {
		r = req(MOAT_LANG_PYTHON);
		switch (c) {
		case 0: r->memory_mb = 512; break;
		case 1: r->cpus = 0.5; break;
		case 2: r->pids_limit = 10; break;
		case 3: r->strict_limits = true; break;
		case 4: r->network = true; break;
		case 5: r->has_allowed_hosts = true; break;
		case 6: r->outputs_count = 1; break;
		case 7: r->kv_enabled = true; break;
		default: r->language = MOAT_LANG_JAVASCRIPT; break;
		}
		ck_assert_msg(pool_refusal(boot, r) != NULL, "case %d was taken", c);
		r->outputs_count = 0; /* not allocated */
		moat_request_free(r);
	}
	moat_request_free(boot);
	/* javascript: NODE_* variables are read at start */
	boot = req(MOAT_LANG_JAVASCRIPT);
	r = req(MOAT_LANG_JAVASCRIPT);
	ck_assert_ptr_null(pool_refusal(boot, r));
	set_env(r, "NODE_OPTIONS", "--max-old-space-size=10");
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(r);
	/* typescript: a warm node runs esbuild first, under the same rules */
	r = req(MOAT_LANG_TYPESCRIPT);
	ck_assert_ptr_null(pool_refusal(boot, r));
	r->network = true;
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	r->network = false;
	set_env(r, "NODE_OPTIONS", "--inspect");
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(r);
	/* and what the esbuild started before the request would not see: Go's
	 * runtime variables and NO_COLOR (a javascript request may set them) */
	static const char *const go_env[] = { "GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT",
					      "GOTRACEBACK", "NO_COLOR" };
	for (size_t i = 0; i < sizeof go_env / sizeof *go_env; i++) {
		r = req(MOAT_LANG_TYPESCRIPT);
		set_env(r, "GOOGLE_API_KEY", "k"); /* not Go's */
		ck_assert_ptr_null(pool_refusal(boot, r));
		set_env(r, go_env[i], "1");
		ck_assert_msg(pool_refusal(boot, r) != NULL, "typescript with %s", go_env[i]);
		moat_request_free(r);
		r = req(MOAT_LANG_JAVASCRIPT);
		set_env(r, go_env[i], "1");
		ck_assert_ptr_null(pool_refusal(boot, r));
		moat_request_free(r);
	}
	moat_request_free(boot);
	/* but never on a python one, and a typescript boot is not kept */
	boot = req(MOAT_LANG_PYTHON);
	r = req(MOAT_LANG_TYPESCRIPT);
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(boot);
	boot = req(MOAT_LANG_TYPESCRIPT);
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(r);
	moat_request_free(boot);
	/* an argv request runs cold: the bootstrap runs code */
	boot = req(MOAT_LANG_PYTHON);
	r = req(MOAT_LANG_PYTHON);
	free(r->code);
	r->code = NULL;
	r->code_len = 0;
	r->argv = calloc(2, sizeof *r->argv);
	r->argv[0] = strdup("python3");
	r->argc = 1;
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(r);
	moat_request_free(boot);
	/* only python and javascript are kept warm */
	boot = req(MOAT_LANG_TYPESCRIPT);
	r = req(MOAT_LANG_TYPESCRIPT);
	ck_assert_ptr_nonnull(pool_refusal(boot, r));
	moat_request_free(r);
	moat_request_free(boot);
}
END_TEST

/* TypeScript goes to a warm node only where the sandbox's root has esbuild
 * in a directory a run looks in (else a cold run's error would become a
 * warm node's status 127). */
START_TEST(typescript_needs_esbuild_in_the_root)
{
	char root[] = "/tmp/moat-pool-root-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(root));
	struct moat_run_options o;
	moat_run_options_init(&o);
	o.rootfs_dir = root;
	ck_assert(!pool_typescript_ready(&o)); /* an empty root */
	char dir[128], exe[160];
	snprintf(dir, sizeof dir, "%s/usr", root);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(dir, sizeof dir, "%s/usr/bin", root);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(exe, sizeof exe, "%s/esbuild", dir);
	int fd = open(exe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert(!pool_typescript_ready(&o)); /* not executable (root too: no x bit) */
	ck_assert_int_eq(chmod(exe, 0755), 0);
	ck_assert(pool_typescript_ready(&o));
	unlink(exe);
	rmdir(dir);
	snprintf(dir, sizeof dir, "%s/usr", root);
	rmdir(dir);
	rmdir(root);
}
END_TEST

/* Each valid vector's request, parsed as moat exec parses it, is framed
 * byte for byte as the vector says (pool_frame: what a zygote's child
 * or a warm sandbox reads on its stdin). */
START_TEST(frame_vectors_written_exactly)
{
	cJSON *doc = fixture_json("frames/moatpool2.json");
	const cJSON *valid = cJSON_GetObjectItemCaseSensitive(doc, "valid"), *v;
	ck_assert_int_gt(cJSON_GetArraySize(valid), 0);
	cJSON_ArrayForEach(v, valid)
	{
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
		const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "frame"));
		ck_assert_ptr_nonnull(name);
		ck_assert_ptr_nonnull(want);
		char *json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(v, "request"));
		struct moat_request *r = NULL;
		struct moat_error err = { 0 };
		ck_assert_msg(moat_request_parse_json(json, strlen(json), &r, &err) == 0, "%s: %s", name,
			      err.message ? err.message : "?");
		size_t len = 0;
		char *frame = pool_frame(r, &len);
		ck_assert_msg(frame != NULL, "%s: out of memory", name);
		ck_assert_msg(len == strlen(want) && !memcmp(frame, want, strlen(want)),
			      "%s: framed as [%.*s], the vector says [%s]", name, (int)len, frame, want);
		free(frame);
		moat_request_free(r);
		moat_error_clear(&err);
		free(json);
	}
	cJSON_Delete(doc);
}
END_TEST

Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("refusal");
	tcase_add_test(tc, pool_takes_only_what_it_can_reproduce);
	tcase_add_test(tc, typescript_needs_esbuild_in_the_root);
	suite_add_tcase(s, tc);
	TCase *frames = tcase_create("frames");
	tcase_add_test(frames, frame_vectors_written_exactly);
	suite_add_tcase(s, frames);
	return s;
}
