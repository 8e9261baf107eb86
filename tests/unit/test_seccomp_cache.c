/* Unit tests, suite seccomp_policy (seccomp_common.h): the BPF cache (hits,
 * misses, corruption, what its key covers, the newest entries kept) and
 * prepare's errors and digests. */
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "moat_admin.h"
#include "suites.h"
#include "skip.h"
#include "moat.h"
#include "core/embedded.h"
#include "seccomp/internal.h"
#include "seccomp_common.h"
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* ---- cache ---- */

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static char *cache_file(const char *dir)
{
	struct sc_host h;
	struct moat_error err = { 0 };
	ck_assert_int_eq(sc_host_detect(&h, &err), 0);
	uint8_t key[MOAT_SHA256_LEN];
	sc_cache_key(moat_embedded_default_policy_sha256, &h, &sc_compile_defaults, key);
	char *name = sc_cache_file_name(key), *path = NULL;
	ck_assert_int_ge(asprintf(&path, "%s/%s", dir, name), 0);
	free(name);
	return path;
}

static struct moat_seccomp_prog *prepare_default(bool log, bool *from_cache)
{
	struct moat_error err = { 0 };
	struct moat_seccomp_prog *prog = NULL;
	ck_assert_msg(moat_seccomp_prepare(NULL, log, &prog, &err) == 0, "%s", err.message);
	struct sc_stats st;
	sc_stats_get(&st);
	*from_cache = st.from_cache;
	return prog;
}

static void corrupt(const char *path, off_t off, const void *bytes, size_t n)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

START_TEST(cache_hit_miss_and_corruption)
{
	char *tmp = secpol_tmpdir();
	char *dir = NULL;
	ck_assert_int_ge(asprintf(&dir, "%s/sub/seccomp", tmp), 0);
	sc_cache_set_dir(dir);
	bool hit;

	/* miss: compiled and stored (directory created 0700, file 0600) */
	struct moat_seccomp_prog *a = prepare_default(false, &hit);
	ck_assert(!hit);
	struct sc_stats compile_st;
	sc_stats_get(&compile_st);
	struct stat st;
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	char *file = cache_file(dir);
	ck_assert_int_eq(stat(file, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(st.st_size, 80 + a->len * 8);

	/* hit: the same program */
	struct moat_seccomp_prog *b = prepare_default(false, &hit);
	ck_assert(hit);
	struct sc_stats hit_st;
	sc_stats_get(&hit_st);
	ck_assert_uint_eq(a->len, b->len);
	ck_assert_mem_eq(a->insns, b->insns, a->len * sizeof *a->insns);
	ck_assert(!b->log);
	fprintf(stderr, "seccomp default policy: compile %.3f ms (prepare %.3f ms), cached load %.3f ms\n",
		ms(compile_st.compile_ns), ms(compile_st.prepare_ns), ms(hit_st.prepare_ns));

	/* --seccomp-log shares the entry: the cache holds the program as
	 * compiled, the notify rewrite is derived after loading */
	ck_assert_ptr_null(b->notify_insns);
	moat_seccomp_prog_free(b);
	b = prepare_default(true, &hit);
	ck_assert(hit);
	ck_assert(!b->log);
	ck_assert_mem_eq(a->insns, b->insns, a->len * sizeof *a->insns);
	ck_assert_ptr_nonnull(b->notify_insns);
	moat_seccomp_prog_free(b);

	/* corruptions: each is a miss, then the entry is rewritten */
	static const char garbage[] = "XXXXXXXX";
	const off_t body_off = 80 + 8 * 3;
	const off_t offs[] = { 0, 8, 40, 72, body_off };
	for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
		corrupt(file, offs[i], garbage, 4);
		b = prepare_default(false, &hit);
		ck_assert_msg(!hit, "corruption at %lld not detected", (long long)offs[i]);
		ck_assert_mem_eq(a->insns, b->insns, a->len * sizeof *a->insns);
		moat_seccomp_prog_free(b);
		b = prepare_default(false, &hit);
		ck_assert(hit);
		moat_seccomp_prog_free(b);
	}
	/* size not a multiple of 8, truncated, grown, empty */
	const off_t sizes[] = { 80 + 8 * a->len - 3, 80 + 8 * (a->len - 1), 80 + 8 * (a->len + 1), 0 };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		ck_assert_int_eq(truncate(file, sizes[i]), 0);
		b = prepare_default(false, &hit);
		ck_assert(!hit);
		moat_seccomp_prog_free(b);
	}
	/* a symlink in place of the entry is not followed */
	char *other = NULL;
	ck_assert_int_ge(asprintf(&other, "%s/other", tmp), 0);
	ck_assert_int_eq(rename(file, other), 0);
	ck_assert_int_eq(symlink(other, file), 0);
	b = prepare_default(false, &hit);
	ck_assert(!hit);
	moat_seccomp_prog_free(b);
	ck_assert_int_eq(lstat(file, &st), 0);
	ck_assert(S_ISREG(st.st_mode)); /* replaced by rename */
	/* a file that is too large */
	FILE *f = fopen(file, "we");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < 70000; i++)
		fputc(0, f);
	fclose(f);
	b = prepare_default(false, &hit);
	ck_assert(!hit);
	moat_seccomp_prog_free(b);

	/* a directory others can write is not used at all */
	unlink(file);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	b = prepare_default(false, &hit);
	ck_assert(!hit);
	moat_seccomp_prog_free(b);
	ck_assert_int_eq(access(file, F_OK), -1);
	b = prepare_default(false, &hit);
	ck_assert(!hit);
	moat_seccomp_prog_free(b);
	/* nor is a symlinked cache directory */
	ck_assert_int_eq(chmod(dir, 0700), 0);
	char *link = NULL;
	ck_assert_int_ge(asprintf(&link, "%s/link", tmp), 0);
	ck_assert_int_eq(symlink(dir, link), 0);
	sc_cache_set_dir(link);
	b = prepare_default(false, &hit);
	ck_assert(!hit);
	moat_seccomp_prog_free(b);
	ck_assert_int_eq(access(file, F_OK), -1);
	/* disabled */
	sc_cache_set_dir("");
	b = prepare_default(false, &hit);
	ck_assert(!hit);
	moat_seccomp_prog_free(b);

	sc_cache_set_dir(NULL);
	moat_seccomp_prog_free(a);
	free(link);
	free(other);
	free(file);
	free(dir);
	secpol_rm_rf(tmp);
	free(tmp);
}
END_TEST

START_TEST(prepare_reports_errors)
{
	sc_cache_set_dir("");
	struct moat_error err = { 0 };
	struct moat_seccomp_prog *prog = (struct moat_seccomp_prog *)1;
	ck_assert_int_eq(moat_seccomp_prepare("/nonexistent/policy.json", false, &prog, &err), -1);
	ck_assert_ptr_null(prog);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	char *dir = secpol_tmpdir();
	char *path = secpol_write_tmp(dir, "p.json", "{\"defaultAction\": \"SCMP_ACT_TRACE\"}");
	ck_assert_int_eq(moat_seccomp_prepare(path, false, &prog, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "defaultAction: SCMP_ACT_TRACE is not supported"));
	ck_assert_ptr_nonnull(strstr(err.message, path));
	ck_assert_int_eq(moat_seccomp_install(NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	moat_error_clear(&err);
	free(path);
	secpol_rm_rf(dir);
	free(dir);
	sc_cache_set_dir(NULL);
}
END_TEST

/* The digest tools/embed.c wrote at build time is the run-time SHA-256 of the
 * embedded bytes (a stale or wrong one would key the cache on the wrong
 * policy). */
START_TEST(embedded_policy_digest_is_built_in)
{
	uint8_t d[MOAT_SHA256_LEN];
	moat_sha256(moat_embedded_default_policy, moat_embedded_default_policy_len, d);
	ck_assert_mem_eq(d, moat_embedded_default_policy_sha256, MOAT_SHA256_LEN);
	/* and it is the policy's, not that of an empty or other input */
	uint8_t e[MOAT_SHA256_LEN];
	moat_sha256("", 0, e);
	ck_assert(memcmp(e, moat_embedded_default_policy_sha256, MOAT_SHA256_LEN) != 0);
}
END_TEST

/* Entries of other builds and kernels are never loaded again: a store (a
 * miss) keeps the SC_CACHE_KEEP newest entries and touches nothing else. */
START_TEST(cache_keeps_the_newest_entries)
{
	char *dir = secpol_tmpdir();
	ck_assert_int_eq(chmod(dir, 0700), 0);
	sc_cache_set_dir(dir);
	int extra = 8;
	for (int i = 0; i < SC_CACHE_KEEP + extra; i++) {
		char *p = NULL;
		ck_assert_int_gt(asprintf(&p, "%s/%064x.bpf", dir, i), 0);
		int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
		/* entry i written i hours ago: 0 is the newest */
		struct timespec ts[2] = { { time(NULL) - 3600L * i, 0 }, { time(NULL) - 3600L * i, 0 } };
		ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
		free(p);
	}
	char *other = NULL;
	ck_assert_int_gt(asprintf(&other, "%s/notes.txt", dir), 0);
	int fd = open(other, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	struct timespec old[2] = { { 1, 0 }, { 1, 0 } };
	ck_assert_int_eq(utimensat(AT_FDCWD, other, old, 0), 0);

	bool hit;
	struct moat_seccomp_prog *a = prepare_default(false, &hit);
	ck_assert(!hit);
	char *stored = cache_file(dir);
	struct stat st;
	ck_assert_msg(stat(stored, &st) == 0, "the new entry was pruned");
	ck_assert_msg(stat(other, &st) == 0, "a file that is not an entry was removed");
	int left = 0;
	for (int i = 0; i < SC_CACHE_KEEP + extra; i++) {
		char *p = NULL;
		ck_assert_int_gt(asprintf(&p, "%s/%064x.bpf", dir, i), 0);
		bool present = stat(p, &st) == 0;
		/* the SC_CACHE_KEEP - 1 newest stay beside the new one */
		ck_assert_msg(present == (i < SC_CACHE_KEEP - 1), "entry %d %s", i,
			      present ? "kept" : "removed");
		left += present;
		free(p);
	}
	ck_assert_int_eq(left, SC_CACHE_KEEP - 1);
	/* and it still loads */
	struct moat_seccomp_prog *b = prepare_default(false, &hit);
	ck_assert(hit);
	moat_seccomp_prog_free(b);
	moat_seccomp_prog_free(a);
	sc_cache_set_dir(NULL);
	free(stored);
	free(other);
	secpol_rm_rf(dir);
	free(dir);
}
END_TEST

/* The compiler digest in the binary is that of the sources it was built
 * from (run from the repository root, as make check does). */
START_TEST(compiler_digest_matches_sources)
{
	static const char *const files[] = { "src/seccomp/policy.c", "src/seccomp/compile.c",
					     "src/seccomp/internal.h" };
	struct moat_sha256_ctx s;
	moat_sha256_init(&s);
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		FILE *f = fopen(files[i], "rb");
		ck_assert_msg(f, "cannot read %s (run from the repository root)", files[i]);
		char *data = NULL;
		size_t cap = 0;
		ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
		long n = ftell(f);
		ck_assert_int_ge(n, 1);
		rewind(f);
		cap = (size_t)n;
		data = malloc(cap);
		ck_assert_ptr_nonnull(data);
		ck_assert_uint_eq(fread(data, 1, cap, f), cap);
		fclose(f);
		uint64_t len = cap;
		moat_sha256_update(&s, &len, sizeof len);
		moat_sha256_update(&s, data, cap);
		free(data);
	}
	uint8_t d[MOAT_SHA256_LEN];
	moat_sha256_final(&s, d);
	ck_assert_mem_eq(d, moat_embedded_seccomp_compiler_sha256, MOAT_SHA256_LEN);
	ck_assert_ptr_eq(sc_compile_defaults.compiler, moat_embedded_seccomp_compiler_sha256);
}
END_TEST

/* Every input of the cache key changes it: the policy digest, each compile
 * option and the compiler's source digest (so BPF compiled with another layout or by an older compile.c is
 * never loaded), the kernel release and the architecture. */
START_TEST(cache_key_covers_every_input)
{
	struct sc_host h;
	struct moat_error err = { 0 };
	ck_assert_int_eq(sc_host_detect(&h, &err), 0);
	uint8_t sha[MOAT_SHA256_LEN];
	memcpy(sha, moat_embedded_default_policy_sha256, MOAT_SHA256_LEN);
	struct sc_compile_opts o = sc_compile_defaults;
	ck_assert_uint_eq(o.optimize, 2);
	ck_assert_ptr_eq(o.compiler, moat_embedded_seccomp_compiler_sha256);
	uint8_t base[MOAT_SHA256_LEN], again[MOAT_SHA256_LEN], k[MOAT_SHA256_LEN];
	sc_cache_key(sha, &h, &o, base);
	sc_cache_key(sha, &h, &o, again);
	ck_assert_mem_eq(base, again, MOAT_SHA256_LEN);
	/* the run-time digest of the embedded bytes gives the same key */
	uint8_t rt[MOAT_SHA256_LEN];
	moat_sha256(moat_embedded_default_policy, moat_embedded_default_policy_len, rt);
	sc_cache_key(rt, &h, &o, k);
	ck_assert_mem_eq(base, k, MOAT_SHA256_LEN);

	struct sc_compile_opts v = o;
	v.optimize = 1;
	sc_cache_key(sha, &h, &v, k);
	ck_assert_msg(memcmp(base, k, MOAT_SHA256_LEN) != 0, "optimize not in the key");
	v = o;
	uint8_t other_compiler[MOAT_SHA256_LEN];
	memcpy(other_compiler, o.compiler, MOAT_SHA256_LEN);
	other_compiler[0] ^= 1;
	v.compiler = other_compiler;
	sc_cache_key(sha, &h, &v, k);
	ck_assert_msg(memcmp(base, k, MOAT_SHA256_LEN) != 0, "compiler digest not in the key");
	uint8_t sha2[MOAT_SHA256_LEN];
	memcpy(sha2, sha, MOAT_SHA256_LEN);
	sha2[MOAT_SHA256_LEN - 1] ^= 1;
	sc_cache_key(sha2, &h, &o, k);
	ck_assert_msg(memcmp(base, k, MOAT_SHA256_LEN) != 0, "policy digest not in the key");
	struct sc_host h2 = h;
	h2.release[0] ^= 1;
	sc_cache_key(sha, &h2, &o, k);
	ck_assert_msg(memcmp(base, k, MOAT_SHA256_LEN) != 0, "kernel release not in the key");
	h2 = h;
	h2.scmp_arch ^= 1;
	sc_cache_key(sha, &h2, &o, k);
	ck_assert_msg(memcmp(base, k, MOAT_SHA256_LEN) != 0, "arch not in the key");

	/* file names: 64 lowercase hex digits of the key + ".bpf" */
	char *name = sc_cache_file_name(base);
	char want[2 * MOAT_SHA256_LEN + 5];
	secpol_hex(base, MOAT_SHA256_LEN, want);
	strcat(want, ".bpf");
	ck_assert_str_eq(name, want);
	free(name);
}
END_TEST

/* A run with the embedded default neither reads nor hashes the policy when
 * the cache hits (its digest is built in); a --policy file is read and
 * hashed on every run, so an edited file is never served a stale program. */
START_TEST(prepare_hashes_only_policy_files)
{
	char *tmp = secpol_tmpdir();
	char *dir = NULL;
	ck_assert_int_ge(asprintf(&dir, "%s/cache", tmp), 0);
	sc_cache_set_dir(dir);
	struct moat_error err = { 0 };
	struct moat_seccomp_prog *prog = NULL;
	struct sc_stats st;
	for (int round = 0; round < 2; round++) {
		ck_assert_int_eq(moat_seccomp_prepare(NULL, false, &prog, &err), 0);
		sc_stats_get(&st);
		ck_assert(st.from_cache == (round == 1));
		ck_assert(!st.policy_hashed);
		ck_assert(st.policy_read == (round == 0)); /* read to compile on the miss only */
		moat_seccomp_prog_free(prog);
	}
	char *path = secpol_write_tmp(tmp, "p.json", "{\"defaultAction\": \"SCMP_ACT_ALLOW\", "
					      "\"syscalls\": [{\"names\": [\"ptrace\"], "
					      "\"action\": \"SCMP_ACT_ERRNO\"}]}");
	for (int round = 0; round < 2; round++) {
		ck_assert_msg(moat_seccomp_prepare(path, false, &prog, &err) == 0, "%s", err.message);
		sc_stats_get(&st);
		ck_assert(st.from_cache == (round == 1));
		ck_assert(st.policy_hashed);
		ck_assert(st.policy_read);
		moat_seccomp_prog_free(prog);
	}
	/* the file changes: another key, so a miss and a new program */
	free(secpol_write_tmp(tmp, "p.json", "{\"defaultAction\": \"SCMP_ACT_ALLOW\", "
				     "\"syscalls\": [{\"names\": [\"ptrace\", \"bpf\"], "
				     "\"action\": \"SCMP_ACT_ERRNO\"}]}"));
	ck_assert_int_eq(moat_seccomp_prepare(path, false, &prog, &err), 0);
	sc_stats_get(&st);
	ck_assert(!st.from_cache);
	struct seccomp_data d = { .nr = SYS_bpf, .arch = seccomp_arch_native() };
	uint32_t ret;
	ck_assert_int_eq(sc_bpf_run(prog->insns, prog->len, &d, &ret), 0);
	ck_assert_uint_eq(ret, SECCOMP_RET_ERRNO | EPERM);
	moat_seccomp_prog_free(prog);
	sc_cache_set_dir(NULL);
	free(path);
	free(dir);
	secpol_rm_rf(tmp);
	free(tmp);
}
END_TEST

void seccomp_cache_tests(TCase *tc)
{
	tcase_add_test(tc, cache_hit_miss_and_corruption);
	tcase_add_test(tc, prepare_reports_errors);
	tcase_add_test(tc, embedded_policy_digest_is_built_in);
	tcase_add_test(tc, compiler_digest_matches_sources);
	tcase_add_test(tc, cache_keeps_the_newest_entries);
	tcase_add_test(tc, cache_key_covers_every_input);
	tcase_add_test(tc, prepare_hashes_only_policy_files);
}
