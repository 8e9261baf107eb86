/* Unit tests: the key-value store (src/kv) on its SQLite backend — scoping,
 * quotas, durability rules of the file, the broker's protocol (docs/KV.md),
 * the operator's view — without a sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "kv/kv.h"
#include "moat_admin.h"
#include "suites.h"

static char dir[] = "/tmp/moat-kv-unit-XXXXXX";
static char path[64];

static void setup(void)
{
	strcpy(dir, "/tmp/moat-kv-unit-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/kv.sqlite3", dir);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static struct moat_kv_store *open_store(void)
{
	struct moat_kv_store *st = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_kv_open(path, &st, &err) == 0, "open: %s", err.message);
	return st;
}

#define S(x) x, strlen(x)

static void set_ok(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		   size_t klen, const char *val, const struct moat_kv_quota *q)
{
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_set(st, id, idlen, key, klen, val, strlen(val), q, &a), 0);
	ck_assert_msg(a.status == MOAT_KV_OK, "set: %s", a.msg.data);
	moat_kv_answer_reset(&a);
}

/* The value of key, or NULL when absent (malloc'd). */
static char *get(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		 size_t klen)
{
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_get(st, id, idlen, key, klen, &a), 0);
	char *v = NULL;
	if (a.status == MOAT_KV_OK) {
		v = strndup(a.data.data ? a.data.data : "", a.data.len);
	} else {
		ck_assert_int_eq(a.status, MOAT_KV_NOT_FOUND);
	}
	moat_kv_answer_reset(&a);
	return v;
}

static int count_keys(struct moat_kv_store *st, const char *id, size_t idlen)
{
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_keys(st, id, idlen, &a), 0);
	int n = 0;
	for (size_t off = 0; off + 4 <= a.data.len; n++) {
		uint32_t kl;
		memcpy(&kl, a.data.data + off, 4);
		off += 4 + kl;
	}
	moat_kv_answer_reset(&a);
	return n;
}

START_TEST(kv_scoped_by_id)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	/* "a" + "b:c" and "a:b" + "c" must stay apart */
	set_ok(st, S("a"), S("b:c"), "first", &q);
	set_ok(st, S("a:b"), S("c"), "second", &q);
	char *v1 = get(st, S("a"), S("b:c")), *v2 = get(st, S("a:b"), S("c"));
	ck_assert_str_eq(v1, "first");
	ck_assert_str_eq(v2, "second");
	free(v1);
	free(v2);
	ck_assert_ptr_null(get(st, S("a"), S("c")));
	ck_assert_ptr_null(get(st, S("a:b"), S("b:c")));
	/* an id with a NUL inside (the API takes lengths) is not its prefix */
	set_ok(st, "x\0y", 3, S("k"), "nul", &q);
	ck_assert_ptr_null(get(st, "x", 1, S("k")));
	/* a 256-byte id and its 255-byte prefix */
	char long_id[MOAT_KV_MAX_ID];
	memset(long_id, 'i', sizeof long_id);
	set_ok(st, long_id, sizeof long_id, S("k"), "long", &q);
	ck_assert_ptr_null(get(st, long_id, sizeof long_id - 1, S("k")));
	ck_assert_int_eq(count_keys(st, S("a")), 1);
	ck_assert_int_eq(count_keys(st, S("nobody")), 0);
	moat_kv_close(st);
}
END_TEST

START_TEST(kv_ops)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	struct moat_kv_answer a = { 0 };
	ck_assert_str_eq(moat_kv_backend_name(st), "sqlite");
	set_ok(st, S("id"), S("k2"), "v2", &q);
	set_ok(st, S("id"), S("k1"), "", &q); /* empty values are values */
	char *v = get(st, S("id"), S("k1"));
	ck_assert_str_eq(v, "");
	free(v);
	ck_assert_int_eq(moat_kv_exists(st, S("id"), S("k1"), &a), 0);
	ck_assert(a.exists);
	ck_assert_int_eq(moat_kv_exists(st, S("id"), S("k3"), &a), 0);
	ck_assert(!a.exists);
	/* keys in byte order */
	ck_assert_int_eq(moat_kv_keys(st, S("id"), &a), 0);
	ck_assert_int_eq(a.data.len, 2 * (4 + 2));
	ck_assert_int_eq(memcmp(a.data.data + 4, "k1", 2), 0);
	ck_assert_int_eq(memcmp(a.data.data + 10, "k2", 2), 0);
	ck_assert_int_eq(moat_kv_delete(st, S("id"), S("k1"), &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	ck_assert_int_eq(moat_kv_delete(st, S("id"), S("k1"), &a), 0); /* absent: OK */
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	ck_assert_ptr_null(get(st, S("id"), S("k1")));
	uint64_t removed = 0;
	ck_assert_int_eq(moat_kv_clear(st, S("id"), &removed, &a), 0);
	ck_assert_int_eq(removed, 1);
	ck_assert_int_eq(count_keys(st, S("id")), 0);
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
}
END_TEST

/* A refused write stores nothing and leaves the previous value. */
START_TEST(kv_quotas)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q = { .max_keys = 2, .max_bytes = 20, .max_value = 8 };
	struct moat_kv_answer a = { 0 };
	set_ok(st, S("id"), S("a"), "12345", &q);
	set_ok(st, S("id"), S("b"), "1", &q);
	/* a third key */
	ck_assert_int_eq(moat_kv_set(st, S("id"), S("c"), S("1"), &q, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_FULL);
	ck_assert_msg(strstr(a.msg.data, "at most 2 keys"), "%s", a.msg.data);
	ck_assert_ptr_null(get(st, S("id"), S("c")));
	/* replacing counts the difference only: a = 1+8, b = 1+1 → 11 <= 20 */
	set_ok(st, S("id"), S("a"), "12345678", &q);
	/* a value too large */
	ck_assert_int_eq(moat_kv_set(st, S("id"), S("b"), S("123456789"), &q, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_msg(strstr(a.msg.data, "at most 8 bytes"), "%s", a.msg.data);
	/* bytes: b = 1 + 8 would make 18; then 20 is the edge, 21 too many */
	struct moat_kv_quota q2 = { .max_keys = 2, .max_bytes = 17, .max_value = 8 };
	ck_assert_int_eq(moat_kv_set(st, S("id"), S("b"), S("12345678"), &q2, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_msg(strstr(a.msg.data, "bytes of keys and values"), "%s", a.msg.data);
	char *v = get(st, S("id"), S("b"));
	ck_assert_str_eq(v, "1");
	free(v);
	v = get(st, S("id"), S("a"));
	ck_assert_str_eq(v, "12345678");
	free(v);
	/* another id has its own quota */
	set_ok(st, S("id2"), S("a"), "x", &q);
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
}
END_TEST

START_TEST(kv_quota_parse)
{
	struct moat_kv_quota q;
	struct moat_error err = { 0 };
	moat_kv_quota_default(&q);
	ck_assert_int_eq(q.max_keys, MOAT_KV_DEFAULT_MAX_KEYS);
	ck_assert_int_eq(moat_kv_quota_parse("keys=10,value=2K", &q, &err), 0);
	ck_assert_int_eq(q.max_keys, 10);
	ck_assert_int_eq(q.max_value, 2048);
	ck_assert_int_eq(q.max_bytes, MOAT_KV_DEFAULT_MAX_BYTES);
	ck_assert_int_eq(moat_kv_quota_parse("bytes=1G", &q, &err), 0);
	ck_assert_int_eq(q.max_bytes, 1024ull * 1024 * 1024);
	/* the free-space floor: 16 MiB by default, 0 turns it off */
	ck_assert_uint_eq(q.min_free, MOAT_KV_DEFAULT_MIN_FREE);
	ck_assert_int_eq(moat_kv_quota_parse("free=32M", &q, &err), 0);
	ck_assert_uint_eq(q.min_free, 32ull << 20);
	ck_assert_int_eq(moat_kv_quota_parse("keys=3,free=0", &q, &err), 0);
	ck_assert_uint_eq(q.min_free, 0);
	ck_assert_int_eq(q.max_keys, 3);
	ck_assert_int_eq(moat_kv_quota_parse("free=1G", &q, &err), 0);
	const char *bad[] = { "keys", "keys=", "keys=0", "keys=-1", "keys=1,", "nope=1",
			      "value=65M", "keys=1x", "keys=1,,bytes=2", "free=", "free=-1",
			      "free=1T", "free=ten", "floor=1M" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct moat_kv_quota before = q;
		ck_assert_msg(moat_kv_quota_parse(bad[i], &q, &err) == -1, "accepted %s", bad[i]);
		ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
		if (strcmp(bad[i], "value=65M")) /* that one names the limit */
			ck_assert_msg(strstr(err.message, "free=N"), "%s", err.message);
		ck_assert_int_eq(memcmp(&before, &q, sizeof q), 0); /* unchanged */
		moat_error_clear(&err);
	}
}
END_TEST

/* The free-space floor (docs/KV.md, "A full disk"): a write that would leave
 * less is store_table_full "the store is full", with no path in the
 * program's message (the operator's detail has it); deletes and a clear
 * are not held to it. A floor above any disk stands for a full one. */
START_TEST(kv_floor)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	set_ok(st, S("id"), S("a"), "1", &q);
	set_ok(st, S("id"), S("b"), "2", &q);
	struct moat_kv_quota full = q;
	full.min_free = 1ull << 60;
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_set(st, S("id"), S("c"), S("3"), &full, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_FULL);
	ck_assert_msg(strstr(a.msg.data, "the store is full") && !strstr(a.msg.data, dir), "%s",
		      a.msg.data);
	ck_assert_msg(a.detail.len && strstr(a.detail.data, path) && strstr(a.detail.data, "floor"),
		      "detail: %s", a.detail.data ? a.detail.data : "(none)");
	ck_assert_ptr_null(get(st, S("id"), S("c")));
	/* a replacement is a write too */
	ck_assert_int_eq(moat_kv_set(st, S("id"), S("a"), S("9"), &full, &a), 0);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_FULL);
	char *v = get(st, S("id"), S("a"));
	ck_assert_str_eq(v, "1");
	free(v);
	ck_assert_int_eq(moat_kv_delete(st, S("id"), S("a"), &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	uint64_t removed = 0;
	ck_assert_int_eq(moat_kv_clear(st, S("id"), &removed, &a), 0);
	ck_assert_uint_eq(removed, 1);
	/* no floor: the write goes in */
	full.min_free = 0;
	set_ok(st, S("id"), S("c"), "3", &full);
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
}
END_TEST

struct notices {
	unsigned n;
	char last[512];
};

static void on_notice(void *ctx, const char *line)
{
	struct notices *ns = ctx;
	ns->n++;
	snprintf(ns->last, sizeof ns->last, "%s", line);
}

static int call(struct moat_kv_broker *b, int op, const char *key, size_t klen, const char *val,
		size_t vlen, char **out, size_t *olen);

/* The broker's refusal on a full store: the program's answer names no path,
 * the operator's notice does; a program looping on it gets a few notices,
 * then one saying the rest are not logged. */
START_TEST(broker_full_notices)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	q.min_free = 1ull << 60;
	struct moat_kv_broker *b = moat_kv_broker_new(st, S("sb"), &q);
	struct notices ns = { 0 };
	moat_kv_broker_set_notice(b, on_notice, &ns);
	for (unsigned i = 0; i < MOAT_KV_BROKER_NOTICES + 3; i++) {
		char *out = NULL;
		size_t olen;
		ck_assert_int_eq(call(b, 2, S("k"), "v", 1, &out, &olen), MOAT_KV_ERROR);
		ck_assert_msg(!strncmp(out, "store_table_full the store is full", 34) &&
				      !strstr(out, dir),
			      "%s", out);
		free(out);
		if (i < MOAT_KV_BROKER_NOTICES)
			ck_assert_msg(ns.n == i + 1 && strstr(ns.last, path), "%u: %s", ns.n, ns.last);
	}
	ck_assert_uint_eq(ns.n, MOAT_KV_BROKER_NOTICES + 1);
	ck_assert_msg(strstr(ns.last, "not logged"), "%s", ns.last);
	/* a delete is answered OK under the same floor */
	ck_assert_int_eq(call(b, 3, S("k"), NULL, 0, NULL, NULL), MOAT_KV_OK);
	moat_kv_broker_free(b);
	moat_kv_close(st);
}
END_TEST

START_TEST(kv_names_valid)
{
	ck_assert(moat_kv_key_valid(S("k")));
	ck_assert(!moat_kv_key_valid(S("")));
	ck_assert(!moat_kv_key_valid("a\0b", 3));
	ck_assert(!moat_kv_key_valid("\xff", 1));
	char k[MOAT_KV_MAX_KEY + 1];
	memset(k, 'k', sizeof k);
	ck_assert(moat_kv_key_valid(k, MOAT_KV_MAX_KEY));
	ck_assert(!moat_kv_key_valid(k, MOAT_KV_MAX_KEY + 1));
	ck_assert(moat_kv_id_valid(S("sandbox-\xc3\xa9")));
	ck_assert(!moat_kv_id_valid(S("")));
	ck_assert(!moat_kv_id_valid("a\0", 2));
}
END_TEST

/* The file is every sandbox's data: private, ours, not a symlink. */
START_TEST(kv_file_rules)
{
	struct moat_kv_store *st = open_store();
	moat_kv_close(st);
	struct stat sb;
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 0777, 0600);
	struct moat_error err = { 0 };
	ck_assert_int_eq(chmod(path, 0620), 0);
	ck_assert_int_eq(moat_kv_open(path, &st, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, "writable by no one else"), "%s", err.message);
	moat_error_clear(&err);
	ck_assert_int_eq(chmod(path, 0600), 0);
	char link[96];
	snprintf(link, sizeof link, "%s/link.sqlite3", dir);
	ck_assert_int_eq(symlink(path, link), 0);
	ck_assert_int_eq(moat_kv_open(link, &st, &err), -1);
	ck_assert_msg(strstr(err.message, "symbolic link"), "%s", err.message);
	moat_error_clear(&err);
	ck_assert_int_eq(moat_kv_open("relative.sqlite3", &st, &err), -1);
	moat_error_clear(&err);
	ck_assert_int_eq(moat_kv_open("memcached://x", &st, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	ck_assert_int_eq(moat_kv_open("redis://", &st, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	ck_assert_int_eq(moat_kv_open("redis://h:99999/0", &st, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	moat_error_clear(&err);
	/* sqlite: prefix */
	char spec[96];
	snprintf(spec, sizeof spec, "sqlite:%s", path);
	ck_assert_int_eq(moat_kv_open(spec, &st, &err), 0);
	moat_kv_close(st);
}
END_TEST

START_TEST(kv_default_path)
{
	if (geteuid() == 0) {
		/* root: /var/lib/moat; checked by the integration suite */
		struct moat_error err = { 0 };
		char *p = moat_kv_default_path(&err);
		ck_assert_str_eq(p, "/var/lib/moat/kv.sqlite3");
		free(p);
		return;
	}
	char *old = getenv("XDG_STATE_HOME") ? strdup(getenv("XDG_STATE_HOME")) : NULL;
	char xdg[96];
	snprintf(xdg, sizeof xdg, "%s/state", dir);
	setenv("XDG_STATE_HOME", xdg, 1);
	struct moat_error err = { 0 };
	char *p = moat_kv_default_path(&err);
	char want[128];
	snprintf(want, sizeof want, "%s/moat/kv.sqlite3", xdg);
	ck_assert_str_eq(p, want);
	free(p);
	if (old) {
		setenv("XDG_STATE_HOME", old, 1);
		free(old);
	} else {
		unsetenv("XDG_STATE_HOME");
	}
}
END_TEST

/* ---- the broker ---- */

static void put32(char *p, uint32_t v)
{
	p[0] = (char)(v & 0xff);
	p[1] = (char)((v >> 8) & 0xff);
	p[2] = (char)((v >> 16) & 0xff);
	p[3] = (char)(v >> 24);
}

/* One request frame into b (malloc'd; *len). */
static char *frame(int op, const char *key, size_t klen, const char *val, size_t vlen,
		   size_t *len)
{
	*len = 4 + 1 + 4 + klen + vlen;
	char *f = malloc(*len);
	put32(f, (uint32_t)(1 + 4 + klen + vlen));
	f[4] = (char)op;
	put32(f + 5, (uint32_t)klen);
	if (klen)
		memcpy(f + 9, key, klen);
	if (vlen)
		memcpy(f + 9 + klen, val, vlen);
	return f;
}

/* Takes the pending answer: status, payload copied to out (malloc'd). */
static int take_answer(struct moat_kv_broker *b, char **out, size_t *olen)
{
	size_t len;
	const char *p = moat_kv_broker_pending(b, &len);
	ck_assert_uint_ge(len, 5);
	uint32_t n = (uint32_t)(unsigned char)p[0] | (uint32_t)(unsigned char)p[1] << 8 |
		     (uint32_t)(unsigned char)p[2] << 16 | (uint32_t)(unsigned char)p[3] << 24;
	ck_assert_uint_eq(n + 4, len);
	int status = (unsigned char)p[4];
	if (out) {
		*olen = n - 1;
		*out = malloc(n);
		memcpy(*out, p + 5, n - 1);
		(*out)[n - 1] = '\0';
	}
	moat_kv_broker_consume(b, len);
	moat_kv_broker_pending(b, &len);
	ck_assert_uint_eq(len, 0);
	return status;
}

static int call(struct moat_kv_broker *b, int op, const char *key, size_t klen, const char *val,
		size_t vlen, char **out, size_t *olen)
{
	size_t len;
	char *f = frame(op, key, klen, val, vlen, &len);
	/* byte by byte: requests split anywhere are put together */
	for (size_t i = 0; i < len; i++)
		ck_assert_int_eq(moat_kv_broker_feed(b, f + i, 1), 0);
	free(f);
	return take_answer(b, out, olen);
}

START_TEST(broker_protocol)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	struct moat_kv_broker *b = moat_kv_broker_new(st, S("sb"), &q);
	char *out;
	size_t olen;
	/* nothing fed yet, nothing pending (found by the kv_broker fuzzer: UB
	 * on the empty buffers) */
	ck_assert_int_eq(moat_kv_broker_feed(b, NULL, 0), 0);
	moat_kv_broker_pending(b, &olen);
	ck_assert_uint_eq(olen, 0);
	ck_assert_int_eq(call(b, 6, S("default"), NULL, 0, NULL, NULL), 0);
	ck_assert_int_eq(call(b, 6, S("other"), NULL, 0, &out, &olen), 2);
	ck_assert_msg(!strncmp(out, "no_such_store ", 14), "%s", out);
	free(out);
	ck_assert_int_eq(call(b, 1, S("k"), NULL, 0, NULL, NULL), 1); /* not found */
	char bin[256];
	for (int i = 0; i < 256; i++)
		bin[i] = (char)i;
	ck_assert_int_eq(call(b, 2, S("k"), bin, sizeof bin, NULL, NULL), 0);
	ck_assert_int_eq(call(b, 1, S("k"), NULL, 0, &out, &olen), 0);
	ck_assert_uint_eq(olen, 256);
	ck_assert_int_eq(memcmp(out, bin, 256), 0);
	free(out);
	ck_assert_int_eq(call(b, 4, S("k"), NULL, 0, &out, &olen), 0);
	ck_assert(olen == 1 && out[0] == 1);
	free(out);
	ck_assert_int_eq(call(b, 5, NULL, 0, NULL, 0, &out, &olen), 0);
	ck_assert(olen == 5 && out[4] == 'k');
	free(out);
	/* refusals the program sees as errors, the stream stays usable */
	ck_assert_int_eq(call(b, 2, "", 0, S("v"), &out, &olen), 2);
	ck_assert_msg(!strncmp(out, "invalid ", 8), "%s", out);
	free(out);
	ck_assert_int_eq(call(b, 1, "a\0b", 3, NULL, 0, &out, &olen), 2);
	free(out);
	ck_assert_int_eq(call(b, 1, S("k"), S("v"), &out, &olen), 2); /* GET with a value */
	free(out);
	ck_assert_int_eq(call(b, 3, S("k"), NULL, 0, NULL, NULL), 0);
	ck_assert_int_eq(call(b, 4, S("k"), NULL, 0, &out, &olen), 0);
	ck_assert(olen == 1 && out[0] == 0);
	free(out);
	ck_assert_uint_eq(moat_kv_broker_ops(b), 12);
	moat_kv_broker_free(b);
	moat_kv_close(st);
}
END_TEST

/* Malformed streams end the connection. */
START_TEST(broker_malformed)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	static const char *const bad[] = {
		"\x04\x00\x00\x00\x01\x00\x00\x00",         /* len < 5 */
		"\x05\x00\x00\x00\x09\x00\x00\x00\x00",     /* unknown op */
		"\x05\x00\x00\x00\x00\x00\x00\x00\x00",     /* op 0 */
		"\x06\x00\x00\x00\x01\x02\x00\x00\x00\x61", /* key longer than the frame */
		"\x05\x00\x00\x00\x01\xff\xff\xff\xff",     /* key length overflows */
	};
	static const size_t lens[] = { 8, 9, 9, 10, 9 };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct moat_kv_broker *b = moat_kv_broker_new(st, S("sb"), &q);
		ck_assert_msg(moat_kv_broker_feed(b, bad[i], lens[i]) == -1, "case %zu", i);
		moat_kv_broker_free(b);
	}
	moat_kv_close(st);
}
END_TEST

/* A value over the quota is answered at once and its bytes dropped as they
 * come; the next request is answered normally. Nothing is stored. */
START_TEST(broker_too_large)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q = { .max_keys = 10, .max_bytes = 1 << 20, .max_value = 100 };
	struct moat_kv_broker *b = moat_kv_broker_new(st, S("sb"), &q);
	size_t vlen = 100000, len;
	char *val = calloc(1, vlen);
	char *f = frame(2, S("big"), val, vlen, &len);
	ck_assert_int_eq(moat_kv_broker_feed(b, f, 9), 0); /* the head only */
	char *out;
	size_t olen;
	ck_assert_int_eq(take_answer(b, &out, &olen), 2);
	ck_assert_msg(!strncmp(out, "store_table_full value too large", 32), "%s", out);
	free(out);
	for (size_t off = 9; off < len; off += 4096)
		ck_assert_int_eq(moat_kv_broker_feed(b, f + off, len - off < 4096 ? len - off : 4096),
				 0);
	free(f);
	free(val);
	size_t plen;
	moat_kv_broker_pending(b, &plen);
	ck_assert_uint_eq(plen, 0);
	ck_assert_int_eq(call(b, 1, S("big"), NULL, 0, NULL, NULL), 1);
	moat_kv_broker_free(b);
	moat_kv_close(st);
}
END_TEST

/* Requests sent without reading the answers: one answer at a time, the
 * rest waits in the broker's input. */
START_TEST(broker_pipelined)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	struct moat_kv_broker *b = moat_kv_broker_new(st, S("sb"), &q);
	struct moat_buf all = { 0 };
	for (int i = 0; i < 3; i++) {
		size_t len;
		char key[8];
		snprintf(key, sizeof key, "k%d", i);
		char *f = frame(2, key, strlen(key), "v", 1, &len);
		moat_buf_append(&all, f, len);
		free(f);
	}
	ck_assert_int_eq(moat_kv_broker_feed(b, all.data, all.len), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(take_answer(b, NULL, NULL), 0);
		ck_assert_int_eq(moat_kv_broker_feed(b, NULL, 0), 0);
	}
	size_t plen;
	moat_kv_broker_pending(b, &plen);
	ck_assert_uint_eq(plen, 0);
	ck_assert_int_eq(count_keys(st, S("sb")), 3);
	moat_buf_free(&all);
	moat_kv_broker_free(b);
	moat_kv_close(st);
}
END_TEST

/* ---- concurrency: 8 writers, one id, each with its own connection ---- */

static void *writer(void *arg)
{
	long n = (long)arg;
	struct moat_kv_store *st = NULL;
	struct moat_error err = { 0 };
	if (moat_kv_open(path, &st, &err) < 0)
		return (void *)1;
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	long bad = 0;
	for (int i = 0; i < 50; i++) {
		struct moat_kv_answer a = { 0 };
		char key[32], val[32];
		snprintf(key, sizeof key, "w%ld-%d", n, i % 10);
		snprintf(val, sizeof val, "%d", i);
		if (moat_kv_set(st, S("shared"), key, strlen(key), val, strlen(val), &q, &a) < 0 ||
		    a.status != MOAT_KV_OK)
			bad++;
		if (moat_kv_set(st, S("shared"), S("common"), val, strlen(val), &q, &a) < 0 ||
		    a.status != MOAT_KV_OK)
			bad++;
		moat_kv_answer_reset(&a);
	}
	moat_kv_close(st);
	return (void *)bad;
}

START_TEST(kv_concurrent_writers)
{
	struct moat_kv_store *st = open_store(); /* creates the table */
	pthread_t t[8];
	for (long i = 0; i < 8; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, writer, (void *)i), 0);
	long bad = 0;
	for (int i = 0; i < 8; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad += (long)r;
	}
	ck_assert_int_eq(bad, 0);
	ck_assert_int_eq(count_keys(st, S("shared")), 8 * 10 + 1);
	char *v = get(st, S("shared"), S("common"));
	ck_assert_str_eq(v, "49");
	free(v);
	moat_kv_close(st);
}
END_TEST

/* ---- the operator's view ---- */

START_TEST(kv_admin_ops)
{
	struct moat_kv_store *st = open_store();
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	set_ok(st, S("sb"), S("text"), "hello", &q);
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_set(st, S("sb"), S("bin"), "\xff\x00", 2, &q, &a), 0);
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
	struct moat_error err = { 0 };
	char *out;
	size_t len;
	ck_assert_int_eq(moat_kv_admin(path, "list", S("sb"), NULL, &out, &len, NULL, &err), 0);
	ck_assert_str_eq(out, "{\"sandboxId\":\"sb\",\"keys\":[\"bin\",\"text\"]}");
	free(out);
	ck_assert_int_eq(moat_kv_admin(path, "export", S("sb"), NULL, &out, &len, NULL, &err), 0);
	ck_assert_str_eq(out, "{\"sandboxId\":\"sb\",\"items\":[{\"key\":\"bin\",\"valueBase64\":"
			      "\"/wA=\"},{\"key\":\"text\",\"value\":\"hello\"}]}");
	free(out);
	ck_assert_int_eq(moat_kv_admin(path, "get", S("sb"), "text", &out, &len, NULL, &err), 0);
	ck_assert_uint_eq(len, 5);
	free(out);
	ck_assert_int_eq(moat_kv_admin(path, "get", S("sb"), "none", &out, &len, NULL, &err), 1);
	free(out);
	ck_assert_int_eq(moat_kv_admin(path, "clear", S("sb"), NULL, &out, &len, NULL, &err), 0);
	ck_assert_str_eq(out, "{\"sandboxId\":\"sb\",\"removed\":2}");
	free(out);
	ck_assert_int_eq(moat_kv_admin(path, "drop", S("sb"), NULL, &out, &len, NULL, &err), -1);
	moat_error_clear(&err);
	ck_assert_int_eq(moat_kv_admin(path, "list", "", 0, NULL, &out, &len, NULL, &err), -1);
	moat_error_clear(&err);
	struct moat_run_options o;
	moat_run_options_init(&o);
	ck_assert_int_eq(moat_kv_quota_options("keys=5", &o, &err), 0);
	ck_assert_int_eq(o.kv_max_keys, 5);
	ck_assert_int_eq(o.kv_max_value, MOAT_KV_DEFAULT_MAX_VALUE);
}
END_TEST

Suite *kv_suite(void)
{
	Suite *s = suite_create("kv");
	TCase *tc = tcase_create("kv");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, kv_scoped_by_id);
	tcase_add_test(tc, kv_ops);
	tcase_add_test(tc, kv_quotas);
	tcase_add_test(tc, kv_quota_parse);
	tcase_add_test(tc, kv_floor);
	tcase_add_test(tc, broker_full_notices);
	tcase_add_test(tc, kv_names_valid);
	tcase_add_test(tc, kv_file_rules);
	tcase_add_test(tc, kv_default_path);
	tcase_add_test(tc, broker_protocol);
	tcase_add_test(tc, broker_malformed);
	tcase_add_test(tc, broker_too_large);
	tcase_add_test(tc, broker_pipelined);
	tcase_add_test(tc, kv_concurrent_writers);
	tcase_add_test(tc, kv_admin_ops);
	suite_add_tcase(s, tc);
	return s;
}
