/* Unit tests: how a run's end is decoded into the result (run_decode in
 * src/runner/collect.c), from what the supervisor knows when pid 1 ended;
 * and how the outputs stream becomes result.files (moat_outputs_render in
 * src/runner/outputs.c). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "suites.h"
#include "core/sys.h"
#include "runner/run.h"

/* A wait status as the kernel encodes it. */
#define EXITED(code) (((code) & 0xff) << 8)
#define KILLED(sig) ((sig) & 0x7f)

static struct moat_result decode(struct run_end e, bool *unreported)
{
	struct moat_result res;
	memset(&res, 0, sizeof res);
	*unreported = run_decode(&e, &res);
	return res;
}

START_TEST(exit_codes_are_kept)
{
	int codes[] = { 0, 1, 3, 127, 255 };
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		bool un;
		struct moat_result r = decode((struct run_end){ .have_status = true,
								 .status = EXITED(codes[i]) }, &un);
		ck_assert(r.exited);
		ck_assert_int_eq(r.exit_code, codes[i]);
		ck_assert_int_eq(r.signal, 0);
		ck_assert_ptr_null(r.killed_by);
		ck_assert(!r.timed_out);
		ck_assert(!un);
	}
}
END_TEST

START_TEST(a_signal_names_its_cause)
{
	bool un;
	struct moat_result r = decode((struct run_end){ .have_status = true,
							 .status = KILLED(SIGKILL) }, &un);
	ck_assert(!r.exited);
	ck_assert_int_eq(r.signal, SIGKILL);
	ck_assert_str_eq(r.killed_by, "signal");
	ck_assert(!un);
	r = decode((struct run_end){ .have_status = true, .status = KILLED(SIGSEGV) }, &un);
	ck_assert_int_eq(r.signal, SIGSEGV);
	ck_assert_str_eq(r.killed_by, "signal");
	/* the filter's kill (and a program's own SIGSYS, SECURITY.md) */
	r = decode((struct run_end){ .have_status = true, .status = KILLED(SIGSYS) }, &un);
	ck_assert_int_eq(r.signal, SIGSYS);
	ck_assert_str_eq(r.killed_by, "seccomp");
	ck_assert(!un);
}
END_TEST

START_TEST(timeout_wins_over_a_status)
{
	bool un;
	/* killed by the timer before pid 1 could report */
	struct moat_result r = decode((struct run_end){ .timed_out = true, .init_code = CLD_KILLED,
							 .init_status = SIGKILL }, &un);
	ck_assert(r.timed_out);
	ck_assert(!r.exited);
	ck_assert_int_eq(r.signal, SIGKILL);
	ck_assert_str_eq(r.killed_by, "timeout");
	ck_assert(!un);
	/* a status that raced the timer: the timeout is what the caller asked about */
	r = decode((struct run_end){ .have_status = true, .status = EXITED(0), .timed_out = true },
		   &un);
	ck_assert(r.timed_out);
	ck_assert(!r.exited);
	ck_assert_str_eq(r.killed_by, "timeout");
}
END_TEST

START_TEST(init_ending_unreported_is_flagged)
{
	bool un;
	/* the host's OOM killer or an admin killed pid 1 */
	struct moat_result r = decode((struct run_end){ .init_code = CLD_KILLED,
							 .init_status = SIGTERM }, &un);
	ck_assert(un);
	ck_assert(!r.exited);
	ck_assert_int_eq(r.signal, SIGTERM);
	ck_assert_str_eq(r.killed_by, "signal");
	r = decode((struct run_end){ .init_code = CLD_DUMPED, .init_status = SIGABRT }, &un);
	ck_assert(un);
	ck_assert_int_eq(r.signal, SIGABRT);
	/* pid 1 exited on its own without a report (it should not): as a kill */
	r = decode((struct run_end){ .init_code = CLD_EXITED, .init_status = 125 }, &un);
	ck_assert(un);
	ck_assert_int_eq(r.signal, SIGKILL);
	ck_assert_str_eq(r.killed_by, "signal");
}
END_TEST

/* ---- outputs: the stream pid 1 sends, rendered into result.files ---- */

/* Appends one file record (path, content) to a stream. */
static void put_file(struct moat_buf *st, const char *path, size_t path_len, const char *data)
{
	struct moat_out_hdr h = { .path_len = (uint32_t)path_len, .size = strlen(data),
				  .data_len = (uint32_t)strlen(data) };
	moat_buf_append(st, &h, sizeof h);
	moat_buf_append(st, path, path_len);
	moat_buf_append(st, data, strlen(data));
}

static cJSON *render(const struct moat_buf *st, struct moat_result **out)
{
	struct moat_result *res = moat_result_new();
	ck_assert_ptr_nonnull(res);
	*out = res;
	ck_assert_int_eq(moat_outputs_render(st->data ? st->data : "", st->len, false, res), 0);
	cJSON *files = cJSON_Parse(res->files_json);
	ck_assert_msg(cJSON_IsObject(files), "not an object: %s", res->files_json);
	return files;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The README's rule backwards: the path a key stands for, or NULL when the
 * key is not a well-formed escaped key. */
static char *unescape_key(const char *key, size_t *len)
{
	const char *pre = MOAT_OUT_ESCAPED_PREFIX;
	if (strncmp(key, pre, strlen(pre)))
		return NULL;
	key += strlen(pre);
	char *out = malloc(strlen(key) + 1);
	size_t n = 0;
	for (const char *p = key; *p; p++) {
		if (*p != '%') {
			out[n++] = *p;
			continue;
		}
		int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
		if (lo < 0) {
			free(out);
			return NULL;
		}
		out[n++] = (char)(hi << 4 | lo);
		p += 2;
	}
	*len = n;
	return out;
}

static size_t unbase64(const char *s, char *out)
{
	static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 0, bits = 0;
	uint32_t acc = 0;
	for (; *s && *s != '='; s++) {
		const char *q = strchr(tbl, *s);
		ck_assert_ptr_nonnull(q);
		acc = acc << 6 | (uint32_t)(q - tbl);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (char)(acc >> bits);
		}
	}
	return n;
}

START_TEST(output_keys_are_unique_and_reversible)
{
	/* every path a file may have: valid UTF-8 ones (with '%' and with a
	 * name that looks escaped) and invalid ones that used to become the
	 * same key with U+FFFD */
	static const struct { const char *path; const char *key; } cases[] = {
		{ "out/report\xff.txt", ".moat-nonutf8/out/report%FF.txt" },
		{ "out/report\xfe.txt", ".moat-nonutf8/out/report%FE.txt" },
		{ "out/report\xef\xbf\xbd.txt", "out/report\xef\xbf\xbd.txt" }, /* a real U+FFFD */
		{ "out/report%FF.txt", "out/report%FF.txt" },
		{ "out/100%\xff", ".moat-nonutf8/out/100%25%FF" },
		{ "out/100%25\xff", ".moat-nonutf8/out/100%2525%FF" },
		{ "out/r\xc3\xa9sum\xc3\xa9.txt", "out/r\xc3\xa9sum\xc3\xa9.txt" },
		{ "\xc3\xa9/\xe9.txt", ".moat-nonutf8/\xc3\xa9/%E9.txt" }, /* Latin-1 é */
		{ "s\xed\xa0\x80.txt", ".moat-nonutf8/s%ED%A0%80.txt" },  /* a surrogate */
		{ "o\xc0\xaf.txt", ".moat-nonutf8/o%C0%AF.txt" },          /* overlong '/' */
		{ "cut\xe2\x82", ".moat-nonutf8/cut%E2%82" },              /* cut short */
		{ "nl\n\xff", ".moat-nonutf8/nl\n%FF" },
	};
	const size_t n = sizeof cases / sizeof cases[0];
	struct moat_buf st = { 0 };
	for (size_t i = 0; i < n; i++) {
		char data[16];
		snprintf(data, sizeof data, "file %zu", i);
		put_file(&st, cases[i].path, strlen(cases[i].path), data);
	}
	struct moat_result *res;
	cJSON *files = render(&st, &res);
	/* one member per file, no key twice */
	ck_assert_int_eq(cJSON_GetArraySize(files), (int)n);
	for (const cJSON *a = files->child; a; a = a->next)
		for (const cJSON *b = a->next; b; b = b->next)
			ck_assert_msg(strcmp(a->string, b->string), "key twice: %s", a->string);
	for (size_t i = 0; i < n; i++) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(files, cases[i].key);
		ck_assert_msg(e, "no key for case %zu: %s", i, res->files_json);
		char data[16];
		snprintf(data, sizeof data, "file %zu", i);
		ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring, data);
		const cJSON *raw = cJSON_GetObjectItemCaseSensitive(e, "pathBase64");
		size_t plen = strlen(cases[i].path);
		if (!strcmp(cases[i].key, cases[i].path)) {
			/* valid UTF-8: the key is the path, nothing added */
			ck_assert_ptr_null(raw);
			ck_assert_int_ne(strncmp(cases[i].key, ".moat", 5), 0);
			continue;
		}
		/* the key and pathBase64 both give back the exact bytes */
		ck_assert_msg(cJSON_IsString(raw), "case %zu has no pathBase64", i);
		char back[64];
		ck_assert_uint_eq(unbase64(raw->valuestring, back), plen);
		ck_assert(!memcmp(back, cases[i].path, plen));
		size_t klen = 0;
		char *from_key = unescape_key(cases[i].key, &klen);
		ck_assert_ptr_nonnull(from_key);
		ck_assert_uint_eq(klen, plen);
		ck_assert(!memcmp(from_key, cases[i].path, plen));
		free(from_key);
	}
	ck_assert_uint_eq(res->warnings_count, 0);
	cJSON_Delete(files);
	moat_result_free(res);
	moat_buf_free(&st);
}
END_TEST

START_TEST(output_entries_keep_their_fields)
{
	struct moat_buf st = { 0 };
	put_file(&st, "a.txt", 5, "hi \xc3\xa9");
	put_file(&st, "b\xff.bin", 6, "\x01\x02\xff");
	struct moat_result *res;
	cJSON *files = render(&st, &res);
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(files, "a.txt");
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(a, "encoding")->valuestring, "utf8");
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring, "hi \xc3\xa9");
	ck_assert(cJSON_GetObjectItemCaseSensitive(a, "size")->valuedouble == 5);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(a, "truncated")));
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(files, ".moat-nonutf8/b%FF.bin");
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(b, "encoding")->valuestring, "base64");
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(b, "content")->valuestring, "AQL/");
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(b, "pathBase64")->valuestring, "Yv8uYmlu");
	cJSON_Delete(files);
	moat_result_free(res);
	moat_buf_free(&st);
}
END_TEST

/* The thrash watch's rule, over a window of THRASH_TICKS ticks: the limit
 * hit within it and at least THRASH_SHARE_PCT of it stalled. */
START_TEST(thrash_needs_a_window_stalled_at_the_limit)
{
	const int64_t tick = THRASH_TICK_MS * 1000, window = THRASH_TICKS * tick;
	const int64_t enough = tick * THRASH_SHARE_PCT / 100;
	struct run_thrash t = { 0 };
	int64_t now = 1000, full = 0, hits = 0;
	/* fully stalled, but the limit never hit: global pressure, not the run's */
	for (int i = 0; i < 3 * THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, hits, full += tick, now += tick));
	/* the limit hit once, long ago, then stalled: still not the run's limit */
	t = (struct run_thrash){ 0 };
	hits = 5;
	for (int i = 0; i < 3 * THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, hits, full += tick, now += tick));

	/* at the limit, exactly the share stalled: the window's first full
	 * sample kills, and the warning's figures are the window's */
	t = (struct run_thrash){ 0 };
	ck_assert(!run_thrash_step(&t, hits, full, now));
	for (int i = 1; i < THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, ++hits, full += enough, now += tick));
	ck_assert(run_thrash_step(&t, ++hits, full += enough, now += tick));
	ck_assert_int_eq(t.stalled_us, THRASH_TICKS * enough);
	ck_assert_int_eq(t.window_us, window);

	/* one microsecond short over the window: not yet; uneven ticks count
	 * by their sum (a quiet tick among busy ones does not reset it) */
	t = (struct run_thrash){ 0 };
	ck_assert(!run_thrash_step(&t, hits, full, now));
	for (int i = 1; i < THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, ++hits, full += i == 3 ? 0 : tick, now += tick));
	ck_assert(run_thrash_step(&t, ++hits, full += 0, now += tick)); /* 6 of 8 ticks */
	t = (struct run_thrash){ 0 };
	ck_assert(!run_thrash_step(&t, hits, full, now));
	for (int i = 1; i < THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, ++hits, full += enough, now += tick));
	ck_assert(!run_thrash_step(&t, ++hits, full += enough - 1, now += tick));
	/* the window slides: the next enough tick makes it */
	ck_assert(run_thrash_step(&t, ++hits, full += enough + 1, now += tick));

	/* a late tick counts by the time that really passed */
	t = (struct run_thrash){ 0 };
	ck_assert(!run_thrash_step(&t, hits, full, now));
	for (int i = 1; i <= THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, ++hits, full += enough, now += 2 * tick));
	/* a counter that went backwards (a new cgroup) never kills */
	t = (struct run_thrash){ 0 };
	ck_assert(!run_thrash_step(&t, hits, full, now));
	for (int i = 1; i <= THRASH_TICKS; i++)
		ck_assert(!run_thrash_step(&t, ++hits, 0, now += tick));
}
END_TEST

/* run_adopt learns the adopted pid 1's host pid from its pidfd's fdinfo. */
START_TEST(adopted_pid_from_fdinfo)
{
	ck_assert_int_eq(moat_fdinfo_pid("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n"
					 "Pid:\t1234\nNSpid:\t1234\t1\n"), 1234);
	ck_assert_int_eq(moat_fdinfo_pid("NSpid:\t7\nPid:\t99"), 99);
	errno = 0;
	ck_assert_int_eq(moat_fdinfo_pid("Pid:\t-1\nNSpid:\t-1\n"), -1); /* exited */
	ck_assert_int_eq(errno, ESRCH);
	static const char *const bad[] = { "Pid:\t0\n", "NSpid:\t5\n", "", "Pid:\tabc\n",
					   "Pid:\t12x\n", "Pid:\t-2\n", "Pid:\t99999999999\n",
					   "Pid:\n", "Pid:\n5\n" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		errno = 0;
		ck_assert_msg(moat_fdinfo_pid(bad[i]) == -1 && errno == EINVAL, "[%s]", bad[i]);
	}
	/* and from the kernel: a live child, then the same one reaped */
	pid_t c = fork();
	ck_assert_int_ge(c, 0);
	if (c == 0) {
		pause();
		_exit(0);
	}
	int pidfd = (int)syscall(SYS_pidfd_open, c, 0);
	ck_assert_int_ge(pidfd, 0);
	ck_assert_int_eq(moat_pidfd_pid(pidfd), c);
	kill(c, SIGKILL);
	ck_assert_int_eq(waitpid(c, NULL, 0), c);
	errno = 0;
	ck_assert_int_eq(moat_pidfd_pid(pidfd), -1);
	ck_assert_int_eq(errno, ESRCH);
	close(pidfd);
	errno = 0;
	ck_assert_int_eq(moat_pidfd_pid(pidfd), -1); /* no such fd */
	ck_assert_int_eq(errno, ENOENT);
}
END_TEST

Suite *collect_suite(void)
{
	Suite *s = suite_create("collect");
	TCase *tc = tcase_create("decode");
	tcase_add_test(tc, exit_codes_are_kept);
	tcase_add_test(tc, a_signal_names_its_cause);
	tcase_add_test(tc, timeout_wins_over_a_status);
	tcase_add_test(tc, init_ending_unreported_is_flagged);
	tcase_add_test(tc, thrash_needs_a_window_stalled_at_the_limit);
	tcase_add_test(tc, adopted_pid_from_fdinfo);
	suite_add_tcase(s, tc);
	tc = tcase_create("outputs");
	tcase_add_test(tc, output_keys_are_unique_and_reversible);
	tcase_add_test(tc, output_entries_keep_their_fields);
	suite_add_tcase(s, tc);
	return s;
}
