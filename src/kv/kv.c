/* The store's front: the --kv spec, quotas, the rules for ids and keys, and
 * each operation dispatched to its backend (docs/KV.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/sys.h"
#include "kv/internal.h"

void moat_kv_quota_default(struct moat_kv_quota *q)
{
	q->max_keys = MOAT_KV_DEFAULT_MAX_KEYS;
	q->max_bytes = MOAT_KV_DEFAULT_MAX_BYTES;
	q->max_value = MOAT_KV_DEFAULT_MAX_VALUE;
	q->min_free = MOAT_KV_DEFAULT_MIN_FREE;
}

/* A decimal count with an optional K/M/G (powers of 1024) suffix. */
static int parse_count(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0, mul = 1;
	if (len && strchr("kKmMgG", s[len - 1])) {
		char c = s[len - 1] | 0x20;
		mul = c == 'k' ? 1024 : c == 'm' ? 1024 * 1024 : 1024ull * 1024 * 1024;
		len--;
	}
	if (len == 0 || len > 12)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > UINT64_MAX / mul / 4) /* room for the floor's arithmetic */
		return -1;
	*out = v * mul;
	return 0;
}

int moat_kv_quota_parse(const char *s, struct moat_kv_quota *q, struct moat_error *err)
{
	struct moat_kv_quota n = *q;
	const char *p = s;
	while (*p) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		uint64_t v;
		if (!eq || parse_count(eq + 1, len - (size_t)(eq + 1 - p), &v) < 0)
			goto bad;
		size_t nl = (size_t)(eq - p);
		bool floor = nl == 4 && !memcmp(p, "free", 4);
		if (v == 0 && !floor)
			goto bad;
		if (floor)
			n.min_free = v;
		else if (nl == 4 && !memcmp(p, "keys", 4))
			n.max_keys = v;
		else if (nl == 5 && !memcmp(p, "bytes", 5))
			n.max_bytes = v;
		else if (nl == 5 && !memcmp(p, "value", 5))
			n.max_value = v;
		else
			goto bad;
		p += len;
		if (*p == ',' && *++p == '\0')
			goto bad;
	}
	if (n.max_value > MOAT_KV_LIMIT_MAX_VALUE)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "--kv-quota: value=%llu is above the limit of %u bytes",
				      (unsigned long long)n.max_value, MOAT_KV_LIMIT_MAX_VALUE);
	*q = n;
	return 0;
bad:
	return moat_error_set(err, MOAT_ERR_CONFIG, 0,
			      "--kv-quota \"%s\": expected keys=N,bytes=N,value=N,free=N (each "
			      "optional; keys, bytes and value > 0; free=0 turns the free-space "
			      "floor off; sizes may end in K, M or G)", s);
}

bool moat_kv_id_valid(const char *id, size_t len)
{
	return moat_sandbox_id_valid(id, len);
}

bool moat_kv_key_valid(const char *key, size_t len)
{
	return len >= 1 && len <= MOAT_KV_MAX_KEY && moat_utf8_text(key, len);
}

char *moat_kv_default_path(struct moat_error *err)
{
	char *dir = NULL;
	const char *xdg = secure_getenv("XDG_STATE_HOME");
	const char *home = secure_getenv("HOME");
	/* systemd's StateDirectory= (a colon-separated list: its first entry) */
	const char *sd = secure_getenv("STATE_DIRECTORY");
	int rc;
	if (sd && sd[0] == '/')
		rc = (dir = strndup(sd, strcspn(sd, ":"))) ? 0 : -1;
	else if (geteuid() == 0)
		rc = (dir = strdup("/var/lib/moat")) ? 0 : -1;
	else if (xdg && xdg[0] == '/')
		rc = asprintf(&dir, "%s/moat", xdg);
	else if (home && home[0] == '/')
		rc = asprintf(&dir, "%s/.local/state/moat", home);
	else {
		moat_error_set(err, MOAT_ERR_CONFIG, 0,
			       "no place for the key-value store: none of STATE_DIRECTORY, "
			       "XDG_STATE_HOME and HOME is an absolute path (give --kv FILE)");
		return NULL;
	}
	if (rc < 0) {
		moat_error_oom(err);
		return NULL;
	}
	if (moat_mkdirs(dir) < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "cannot create %s: %s", dir,
			       strerror(errno));
		free(dir);
		return NULL;
	}
	char *path = moat_format("%s/kv.sqlite3", dir);
	free(dir);
	if (!path)
		moat_error_oom(err);
	return path;
}

static int redis_spec_bad(const char *spec, struct moat_error *err)
{
	return moat_error_set(err, MOAT_ERR_CONFIG, 0,
			      "--kv \"%s\": expected redis://HOST[:PORT][/DB][?password-file=FILE]",
			      spec);
}

/* redis://HOST[:PORT][/DB][?password-file=F] */
static int open_redis(const char *spec, void **h, struct moat_error *err)
{
	const char *p = spec + strlen("redis://");
	size_t hl = strcspn(p, ":/?");
	unsigned long port = 6379, db = 0;
	MOAT_AUTOFREE char *pwfile = NULL;
	MOAT_AUTOWIPE char *password = NULL;
	if (hl == 0 || hl > 253)
		return redis_spec_bad(spec, err);
	MOAT_AUTOFREE char *host = strndup(p, hl);
	if (!host)
		return moat_error_oom(err);
	p += hl;
	if (*p == ':') {
		char *end;
		errno = 0;
		port = strtoul(p + 1, &end, 10);
		if (end == p + 1 || errno || port == 0 || port > 65535)
			return redis_spec_bad(spec, err);
		p = end;
	}
	if (*p == '/' && p[1] && p[1] != '?') {
		char *end;
		errno = 0;
		db = strtoul(p + 1, &end, 10);
		if (end == p + 1 || errno || db > 1000)
			return redis_spec_bad(spec, err);
		p = end;
	} else if (*p == '/') {
		p++;
	}
	if (!strncmp(p, "?password-file=", 15) && p[15]) {
		if (!(pwfile = strdup(p + 15)))
			return moat_error_oom(err);
		p += strlen(p);
	}
	if (*p)
		return redis_spec_bad(spec, err);
	if (pwfile) {
		FILE *f = fopen(pwfile, "re");
		struct stat st;
		if (!f || fstat(fileno(f), &st) < 0) {
			int e = errno;
			if (f)
				fclose(f);
			return moat_error_set(err, MOAT_ERR_CONFIG, e, "--kv: cannot read %s: %s",
					      pwfile, strerror(e));
		}
		size_t cap = 0;
		ssize_t n = (st.st_mode & 077) ? -2 : getline(&password, &cap, f);
		fclose(f);
		if (n == -2)
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--kv: %s holds a password: it must not be readable by "
					      "group or others (chmod 600)", pwfile);
		if (n <= 0) {
			if (password) /* getline may leave it unterminated: the wipe's strlen */
				password[0] = '\0';
			return moat_error_set(err, MOAT_ERR_CONFIG, 0, "--kv: %s is empty", pwfile);
		}
		password[strcspn(password, "\r\n")] = '\0';
	}
	return kv_redis_open(host, (unsigned)port, (unsigned)db, password, h, err);
}

int moat_kv_open(const char *spec, struct moat_kv_store **out, struct moat_error *err)
{
	struct moat_kv_store *st = calloc(1, sizeof *st);
	char *def = NULL;
	int rc;
	if (!st)
		return moat_error_oom(err);
	if (spec && !strncmp(spec, "redis://", 8)) {
		st->be = &kv_redis_backend;
		rc = open_redis(spec, &st->h, err);
	} else {
		const char *path = spec;
		if (path && !strncmp(path, "sqlite:", 7))
			path += 7;
		if (!path || !*path) {
			if (!(def = moat_kv_default_path(err))) {
				free(st);
				return -1;
			}
			path = def;
		}
		if (path[0] != '/' && strstr(path, "://")) {
			free(st);
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "--kv \"%s\": not a store this moat knows (a file path, "
					      "sqlite:PATH or redis://HOST:PORT/DB)", spec);
		}
		st->be = &kv_sqlite_backend;
		rc = kv_sqlite_open(path, &st->h, err);
	}
	free(def);
	if (rc < 0) {
		free(st);
		return -1;
	}
	*out = st;
	return 0;
}

void moat_kv_close(struct moat_kv_store *st)
{
	if (!st)
		return;
	st->be->close(st->h);
	free(st);
}

const char *moat_kv_backend_name(const struct moat_kv_store *st)
{
	return st->be->name;
}

static void answer_begin(struct moat_kv_answer *a)
{
	a->status = MOAT_KV_OK;
	a->kind = NULL;
	a->msg.len = 0;
	a->detail.len = 0;
	a->data.len = 0;
	a->exists = false;
}

int moat_kv_get(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		size_t klen, struct moat_kv_answer *a)
{
	answer_begin(a);
	return st->be->get(st->h, id, idlen, key, klen, a);
}

int moat_kv_set(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		size_t klen, const char *val, size_t vlen, const struct moat_kv_quota *q,
		struct moat_kv_answer *a)
{
	answer_begin(a);
	if (vlen > q->max_value)
		return kv_fail(a, 0, MOAT_KV_KIND_FULL,
			       "quota: a value may have at most %llu bytes (this one has %zu)",
			       (unsigned long long)q->max_value, vlen);
	return st->be->set(st->h, id, idlen, key, klen, val, vlen, q, a);
}

int moat_kv_delete(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		   size_t klen, struct moat_kv_answer *a)
{
	answer_begin(a);
	return st->be->del(st->h, id, idlen, key, klen, a);
}

int moat_kv_exists(struct moat_kv_store *st, const char *id, size_t idlen, const char *key,
		   size_t klen, struct moat_kv_answer *a)
{
	answer_begin(a);
	return st->be->exists(st->h, id, idlen, key, klen, a);
}

int moat_kv_keys(struct moat_kv_store *st, const char *id, size_t idlen,
		 struct moat_kv_answer *a)
{
	answer_begin(a);
	return st->be->keys(st->h, id, idlen, a);
}

int moat_kv_clear(struct moat_kv_store *st, const char *id, size_t idlen, uint64_t *removed,
		  struct moat_kv_answer *a)
{
	uint64_t n = 0;
	answer_begin(a);
	int rc = st->be->clear(st->h, id, idlen, &n, a);
	if (removed)
		*removed = n;
	return rc;
}
