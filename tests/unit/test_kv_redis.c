/* Unit tests: the Redis backend of the key-value store (src/kv/redis.c),
 * against a redis-server this suite starts on 127.0.0.1 (a free port, no
 * persistence, a private directory) and kills at its end. The backend is
 * driven through its table (kv_redis_backend), and what it leaves in Redis
 * is read back over a second connection, since the hash names and the byte
 * total are part of the contract (docs/KV.md).
 *
 * Without redis-server or libhiredis every test says "note: ... not run"
 * and returns (tools/check.sh counts it skipped). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "core/sys.h"
#include "kv/internal.h"
#include "kv/redis_dl.h"
#include "suites.h"
#include "skip.h"

/* ---- a redis-server of the suite's own ---- */

struct server {
	pid_t pid;
	unsigned port;
	char *dir;
};

static struct server shared = { .pid = -1 };
static const char *skip_why;   /* the suite cannot run here */
static char *setup_error;      /* it should, but the server did not start */

static bool in_path(const char *prog)
{
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/bin:/bin";
	char *copy = strdup(path);
	if (!copy)
		return false;
	bool found = false;
	for (char *save = NULL, *d = strtok_r(copy, ":", &save); d && !found;
	     d = strtok_r(NULL, ":", &save)) {
		char *p = moat_format("%s/%s", d, prog);
		found = p && access(p, X_OK) == 0;
		free(p);
	}
	free(copy);
	return found;
}

/* A port nothing listens on now: the kernel's pick for 127.0.0.1:0 (Redis
 * cannot be told to bind port 0 and say which it got). */
static unsigned free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof sa;
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* A plain connection to 127.0.0.1:port, or -1. */
static int tcp_to(unsigned port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* true once the server answers PING (+PONG, or -NOAUTH when it wants a
 * password: either way it is serving). */
static bool answers(unsigned port)
{
	int fd = tcp_to(port);
	if (fd < 0)
		return false;
	struct timeval tv = { .tv_sec = 1 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char buf[8] = { 0 };
	bool ok = write(fd, "PING\r\n", 6) == 6 && read(fd, buf, 1) == 1 &&
		  (buf[0] == '+' || buf[0] == '-');
	close(fd);
	return ok;
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	rmdir(dir);
}

static void server_stop(struct server *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	s->pid = -1;
	if (s->dir)
		rm_dir(s->dir);
	free(s->dir);
	s->dir = NULL;
}

/* Starts redis-server (with requirepass when password; as a Cluster node
 * when cluster) and waits until it answers. 0, or -1 with *why (malloc'd). */
static int server_start_as(struct server *s, const char *password, bool cluster, char **why)
{
	s->pid = -1;
	s->dir = strdup("/tmp/moat-kv-redis-XXXXXX");
	if (!s->dir || !mkdtemp(s->dir)) {
		*why = moat_format("mkdtemp: %s", strerror(errno));
		free(s->dir);
		s->dir = NULL;
		return -1;
	}
	s->port = free_port();
	char port[16];
	snprintf(port, sizeof port, "%u", s->port);
	char *log = moat_format("%s/log", s->dir);
	int lfd = log ? open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
	if (lfd < 0) {
		*why = moat_format("cannot create the server's log: %s", strerror(errno));
		free(log);
		server_stop(s);
		return -1;
	}
	/* a Cluster node's bus port is the port + 10000 unless told: a free
	 * port of its own, since the port + 10000 may be past 65535 */
	char bus[16];
	snprintf(bus, sizeof bus, "%u", cluster ? free_port() : 0);
	const char *argv[] = { "redis-server", "--port", port, "--bind", "127.0.0.1",
			       "--save", "", "--appendonly", "no", "--daemonize", "no",
			       "--dir", s->dir,
			       cluster ? "--cluster-enabled" : password ? "--requirepass" : NULL,
			       cluster ? "yes" : password,
			       cluster ? "--cluster-port" : NULL, bus, NULL };
	pid_t parent = getpid();
	s->pid = fork();
	if (s->pid == 0) {
		/* dies with the test process, whatever happens to it */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
		    dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0)
			_exit(127);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(lfd);
	if (s->pid < 0) {
		*why = moat_format("fork: %s", strerror(errno));
		free(log);
		server_stop(s);
		return -1;
	}
	int64_t deadline = moat_mono_ms() + 10000;
	while (!answers(s->port)) {
		int st;
		bool gone = waitpid(s->pid, &st, WNOHANG) == s->pid;
		if (gone || moat_mono_ms() > deadline) {
			if (gone)
				s->pid = -1;
			char text[512] = { 0 };
			int fd = open(log, O_RDONLY | O_CLOEXEC);
			if (fd >= 0) {
				ssize_t n = read(fd, text, sizeof text - 1);
				text[n > 0 ? n : 0] = 0;
				close(fd);
			}
			*why = moat_format("redis-server on port %u %s: %s", s->port,
					   gone ? "exited" : "did not answer within 10 s", text);
			free(log);
			server_stop(s);
			return -1;
		}
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	/* serving: the log was for a start that fails, and the server writes
	 * no file, so the directory goes now and a test that fails before
	 * server_stop leaves nothing in /tmp (the server dies with it) */
	free(log);
	if (!cluster) /* a Cluster node writes nodes.conf there: server_stop removes it */
		rm_dir(s->dir);
	return 0;
}

static int server_start(struct server *s, const char *password, char **why)
{
	return server_start_as(s, password, false, why);
}

static void suite_setup(void)
{
	const char *why;
	if (moat_redis_load(&why) < 0) {
		skip_why = why;
		return;
	}
	if (!in_path("redis-server")) {
		skip_why = "redis-server is not installed (Debian package redis-server)";
		return;
	}
	if (server_start(&shared, NULL, &setup_error) < 0 && !setup_error)
		setup_error = strdup("redis-server did not start");
}

static void suite_teardown(void)
{
	server_stop(&shared);
	free(setup_error);
	setup_error = NULL;
}

/* ---- a second connection, to look at what the backend left ---- */

static redisContext *raw_connect(unsigned port)
{
	int fd = tcp_to(port);
	ck_assert_int_ge(fd, 0);
	redisContext *c = redisConnectFd(fd);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* A command of argc arguments, each given as (const char *, size_t). */
static redisReply *raw(redisContext *c, int argc, ...)
{
	const char *argv[8];
	size_t lens[8];
	ck_assert_int_le(argc, 8);
	va_list ap;
	va_start(ap, argc);
	for (int i = 0; i < argc; i++) {
		argv[i] = va_arg(ap, const char *);
		lens[i] = va_arg(ap, size_t);
	}
	va_end(ap);
	redisReply *r = redisCommandArgv(c, argc, argv, lens);
	ck_assert_msg(r, "raw command: %s", c->errstr);
	return r;
}

#define A(s) (s), strlen(s)    /* a C string argument */
#define B(s) (s), sizeof(s) - 1 /* a literal with NULs inside */

/* A command of one or two words answered with a status ("+OK"). */
static void raw_ok(redisContext *c, const char *cmd)
{
	const char *sp = strchr(cmd, ' ');
	redisReply *r = sp ? raw(c, 2, cmd, (size_t)(sp - cmd), A(sp + 1)) : raw(c, 1, A(cmd));
	ck_assert_msg(r->type == REDIS_REPLY_STATUS, "%s: reply type %d", cmd, r->type);
	freeReplyObject(r);
}

/* The id's hash name, as docs/KV.md spells it: "moat:{<tag>}:<kind>",
 * the tag being the id with '%', '{', '}' as %25, %7b, %7d. */
static size_t hash_name(char *out, size_t cap, const char *kind, const char *id, size_t idlen)
{
	size_t n = 0;
	ck_assert(cap > 6 + 3 * idlen + 2 + strlen(kind));
	memcpy(out, "moat:{", 6);
	n = 6;
	for (size_t i = 0; i < idlen; i++) {
		const char *esc = id[i] == '%' ? "%25" : id[i] == '{' ? "%7b" : id[i] == '}' ? "%7d" : NULL;
		if (esc) {
			memcpy(out + n, esc, 3);
			n += 3;
		} else {
			out[n++] = id[i];
		}
	}
	out[n++] = '}';
	out[n++] = ':';
	memcpy(out + n, kind, strlen(kind));
	return n + strlen(kind);
}

/* The meta hash's "bytes", or -1 when the meta hash is absent. */
static long long meta_bytes(redisContext *c, const char *id, size_t idlen)
{
	char name[800];
	size_t n = hash_name(name, sizeof name, "meta", id, idlen);
	redisReply *r = raw(c, 3, A("HGET"), name, n, A("bytes"));
	long long v = -1;
	if (r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	else
		ck_assert_int_eq(r->type, REDIS_REPLY_NIL);
	freeReplyObject(r);
	return v;
}

/* HLEN of the id's data hash. */
static long long hash_len(redisContext *c, const char *id, size_t idlen)
{
	char name[800];
	size_t n = hash_name(name, sizeof name, "kv", id, idlen);
	redisReply *r = raw(c, 2, A("HLEN"), name, n);
	ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
	long long v = r->integer;
	freeReplyObject(r);
	return v;
}

/* ---- the backend ---- */

static const struct moat_kv_quota roomy = {
	.max_keys = MOAT_KV_DEFAULT_MAX_KEYS,
	.max_bytes = MOAT_KV_DEFAULT_MAX_BYTES,
	.max_value = MOAT_KV_DEFAULT_MAX_VALUE,
};

static const struct kv_backend *be = &kv_redis_backend;

/* Each test starts here: says it does not run when it cannot, fails when
 * the server should be there and is not, else empties the server. */
#define BEGIN()                                                                          \
	do {                                                                             \
		if (skip_why) {                                                          \
			harness_skip("%s: %s", __func__, skip_why);  \
			return;                                                          \
		}                                                                        \
		ck_assert_msg(!setup_error, "%s", setup_error);                          \
		redisContext *c_ = raw_connect(shared.port);                             \
		raw_ok(c_, "FLUSHALL");                                                  \
		redisFree(c_);                                                           \
	} while (0)

static void *open_at(unsigned port, unsigned db)
{
	struct moat_error err = { 0 };
	void *h = NULL;
	int rc = kv_redis_open("127.0.0.1", port, db, NULL, &h, &err);
	ck_assert_msg(rc == 0, "open: %s", err.message ? err.message : "?");
	ck_assert_ptr_nonnull(h);
	return h;
}

/* Empties an answer between operations (moat_kv_* does it in kv.c). */
static void fresh(struct moat_kv_answer *a)
{
	moat_kv_answer_reset(a);
}

static const char *msg_of(const struct moat_kv_answer *a)
{
	static char m[512];
	snprintf(m, sizeof m, "%.*s", (int)a->msg.len, a->msg.data ? a->msg.data : "");
	return m;
}

static void set_ok(void *h, const char *id, size_t idlen, const char *key, const char *val,
		   size_t vlen, const struct moat_kv_quota *q)
{
	struct moat_kv_answer a = { 0 };
	int rc = be->set(h, id, idlen, key, strlen(key), val, vlen, q, &a);
	ck_assert_msg(rc == 0 && a.status == MOAT_KV_OK, "set %s: rc %d status %d: %s", key, rc,
		      a.status, msg_of(&a));
	fresh(&a);
}

/* A set the quota refuses: rc 0, ERROR store_table_full, message holding want. */
static void set_full(void *h, const char *id, size_t idlen, const char *key, const char *val,
		     size_t vlen, const struct moat_kv_quota *q, const char *want)
{
	struct moat_kv_answer a = { 0 };
	int rc = be->set(h, id, idlen, key, strlen(key), val, vlen, q, &a);
	ck_assert_msg(rc == 0 && a.status == MOAT_KV_ERROR, "set %s: rc %d status %d", key, rc,
		      a.status);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_FULL);
	ck_assert_msg(strstr(msg_of(&a), want), "\"%s\" lacks \"%s\"", msg_of(&a), want);
	ck_assert_ptr_null(memchr(a.msg.data, '\n', a.msg.len));
	fresh(&a);
}

/* GET: want NULL means NOT_FOUND. */
static void get_is(void *h, const char *id, size_t idlen, const char *key, const char *want,
		   size_t wlen)
{
	struct moat_kv_answer a = { 0 };
	int rc = be->get(h, id, idlen, key, strlen(key), &a);
	ck_assert_msg(rc == 0, "get %s: %s", key, msg_of(&a));
	if (!want) {
		ck_assert_int_eq(a.status, MOAT_KV_NOT_FOUND);
	} else {
		ck_assert_int_eq(a.status, MOAT_KV_OK);
		ck_assert_uint_eq(a.data.len, wlen);
		if (wlen)
			ck_assert_mem_eq(a.data.data, want, wlen);
	}
	fresh(&a);
}

static bool exists(void *h, const char *id, size_t idlen, const char *key)
{
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(be->exists(h, id, idlen, key, strlen(key), &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	bool e = a.exists;
	fresh(&a);
	return e;
}

static void del_ok(void *h, const char *id, size_t idlen, const char *key)
{
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(be->del(h, id, idlen, key, strlen(key), &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	fresh(&a);
}

/* KEYS answers exactly want[0..n), in that order. */
static void keys_are(void *h, const char *id, size_t idlen, const char *const *want, size_t n)
{
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(be->keys(h, id, idlen, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	size_t off = 0, i = 0;
	const unsigned char *d = (const unsigned char *)a.data.data;
	while (off < a.data.len) {
		ck_assert_uint_ge(a.data.len - off, 4);
		size_t len = d[off] | d[off + 1] << 8 | (size_t)d[off + 2] << 16 |
			     (size_t)d[off + 3] << 24;
		off += 4;
		ck_assert_uint_ge(a.data.len - off, len);
		ck_assert_msg(i < n, "more keys than the %zu expected", n);
		ck_assert_msg(len == strlen(want[i]) && !memcmp(d + off, want[i], len),
			      "key %zu is \"%.*s\", not \"%s\"", i, (int)len, d + off, want[i]);
		off += len;
		i++;
	}
	ck_assert_uint_eq(i, n);
	fresh(&a);
}

static uint64_t clear(void *h, const char *id, size_t idlen)
{
	struct moat_kv_answer a = { 0 };
	uint64_t n = 99999;
	ck_assert_int_eq(be->clear(h, id, idlen, &n, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	fresh(&a);
	return n;
}

/* ---- the operations ---- */

START_TEST(basic_ops)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	const char *id = "demo";
	size_t il = 4;

	get_is(h, id, il, "visits", NULL, 0);
	ck_assert(!exists(h, id, il, "visits"));
	keys_are(h, id, il, NULL, 0);
	ck_assert_int_eq(meta_bytes(c, id, il), -1);

	set_ok(h, id, il, "visits", "1", 1, &roomy);
	get_is(h, id, il, "visits", "1", 1);
	ck_assert(exists(h, id, il, "visits"));
	ck_assert_int_eq(meta_bytes(c, id, il), 7);
	/* the names of docs/KV.md */
	redisReply *r = raw(c, 3, A("HGET"), A("moat:{demo}:kv"), A("visits"));
	ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
	ck_assert_str_eq(r->str, "1");
	freeReplyObject(r);

	/* an empty value is a value; any byte is */
	set_ok(h, id, il, "empty", "", 0, &roomy);
	get_is(h, id, il, "empty", "", 0);
	ck_assert(exists(h, id, il, "empty"));
	set_ok(h, id, il, "bin", B("\0\xff\r\n\0"), &roomy);
	get_is(h, id, il, "bin", B("\0\xff\r\n\0"));
	ck_assert_int_eq(meta_bytes(c, id, il), 7 + 5 + 8);

	/* a value of the default limit, 1 MiB */
	size_t big = MOAT_KV_DEFAULT_MAX_VALUE;
	char *v = malloc(big);
	ck_assert_ptr_nonnull(v);
	for (size_t i = 0; i < big; i++)
		v[i] = (char)(i * 7 + 3);
	set_ok(h, id, il, "big", v, big, &roomy);
	get_is(h, id, il, "big", v, big);
	free(v);
	ck_assert_int_eq(meta_bytes(c, id, il), 7 + 5 + 8 + 3 + (long long)big);

	const char *all[] = { "big", "bin", "empty", "visits" };
	keys_are(h, id, il, all, 4);

	/* delete: absent is OK; the total follows */
	del_ok(h, id, il, "big");
	del_ok(h, id, il, "big");
	del_ok(h, id, il, "never");
	get_is(h, id, il, "big", NULL, 0);
	ck_assert(!exists(h, id, il, "big"));
	ck_assert_int_eq(meta_bytes(c, id, il), 7 + 5 + 8);

	/* the last key takes the meta hash with it */
	del_ok(h, id, il, "visits");
	del_ok(h, id, il, "empty");
	del_ok(h, id, il, "bin");
	ck_assert_int_eq(meta_bytes(c, id, il), -1);
	ck_assert_int_eq(hash_len(c, id, il), 0);
	keys_are(h, id, il, NULL, 0);

	redisFree(c);
	be->close(h);
}
END_TEST

START_TEST(keys_byte_order)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	const char *in[] = { "b", "\xff", "ab", "a", "A", "a\x01", "aa", "\xc3\xa9t\xc3\xa9", "0" };
	for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
		set_ok(h, "k", 1, in[i], "x", 1, &roomy);
	const char *want[] = { "0", "A", "a", "a\x01", "aa", "ab", "b", "\xc3\xa9t\xc3\xa9", "\xff" };
	keys_are(h, "k", 1, want, sizeof want / sizeof want[0]);
	be->close(h);
}
END_TEST

START_TEST(clear_ops)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	ck_assert_uint_eq(clear(h, "x", 1), 0);
	set_ok(h, "x", 1, "k1", "v", 1, &roomy);
	set_ok(h, "x", 1, "k2", "v", 1, &roomy);
	set_ok(h, "x", 1, "k3", "v", 1, &roomy);
	set_ok(h, "y", 1, "k1", "w", 1, &roomy);
	ck_assert_uint_eq(clear(h, "x", 1), 3);
	get_is(h, "x", 1, "k1", NULL, 0);
	keys_are(h, "x", 1, NULL, 0);
	ck_assert_int_eq(meta_bytes(c, "x", 1), -1);
	ck_assert_int_eq(hash_len(c, "x", 1), 0);
	/* another id is untouched */
	get_is(h, "y", 1, "k1", "w", 1);
	ck_assert_int_eq(meta_bytes(c, "y", 1), 3);
	ck_assert_uint_eq(clear(h, "x", 1), 0);
	/* a cleared id starts again from nothing */
	set_ok(h, "x", 1, "k9", "vv", 2, &roomy);
	ck_assert_int_eq(meta_bytes(c, "x", 1), 4);
	redisFree(c);
	be->close(h);
}
END_TEST

/* ---- ids never alias ---- */

START_TEST(ids_apart)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);

	/* id "a" + key "b:c" against id "a:b" + key "c" */
	set_ok(h, "a", 1, "b:c", "one", 3, &roomy);
	set_ok(h, "a:b", 3, "c", "two", 3, &roomy);
	get_is(h, "a", 1, "b:c", "one", 3);
	get_is(h, "a:b", 3, "c", "two", 3);
	get_is(h, "a", 1, "c", NULL, 0);
	get_is(h, "a:b", 3, "b:c", NULL, 0);
	const char *ka[] = { "b:c" }, *kab[] = { "c" };
	keys_are(h, "a", 1, ka, 1);
	keys_are(h, "a:b", 3, kab, 1);

	/* ids that are prefixes of each other */
	set_ok(h, "ab", 2, "k", "ab", 2, &roomy);
	set_ok(h, "abc", 3, "k", "abc", 3, &roomy);
	get_is(h, "ab", 2, "k", "ab", 2);
	get_is(h, "abc", 3, "k", "abc", 3);
	/* an id that looks like a name's length field */
	set_ok(h, "1:a", 3, "b:c", "three", 5, &roomy);
	get_is(h, "a", 1, "b:c", "one", 3);

	/* 256-byte ids that differ in their last byte */
	char id1[MOAT_KV_MAX_ID], id2[MOAT_KV_MAX_ID];
	memset(id1, 'i', sizeof id1);
	memcpy(id2, id1, sizeof id2);
	id2[sizeof id2 - 1] = 'j';
	char key[MOAT_KV_MAX_KEY + 1];
	memset(key, 'k', MOAT_KV_MAX_KEY);
	key[MOAT_KV_MAX_KEY] = 0;
	set_ok(h, id1, sizeof id1, key, "1", 1, &roomy);
	set_ok(h, id2, sizeof id2, key, "2", 1, &roomy);
	get_is(h, id1, sizeof id1, key, "1", 1);
	get_is(h, id2, sizeof id2, key, "2", 1);
	ck_assert_uint_eq(clear(h, id1, sizeof id1), 1);
	get_is(h, id2, sizeof id2, key, "2", 1);
	ck_assert_int_eq(meta_bytes(c, id2, sizeof id2), MOAT_KV_MAX_KEY + 1);

	/* NUL inside an id given with its length: "a\0b", "a\0c", "a" */
	set_ok(h, B("a\0b"), "k", "nul-b", 5, &roomy);
	set_ok(h, B("a\0c"), "k", "nul-c", 5, &roomy);
	get_is(h, B("a\0b"), "k", "nul-b", 5);
	get_is(h, B("a\0c"), "k", "nul-c", 5);
	get_is(h, "a", 1, "k", NULL, 0);
	get_is(h, "a", 1, "b:c", "one", 3);
	ck_assert_int_eq(hash_len(c, B("a\0b")), 1);
	redisReply *r = raw(c, 3, A("HGET"), B("moat:{a\0b}:kv"), A("k"));
	ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
	ck_assert_str_eq(r->str, "nul-b");
	freeReplyObject(r);
	ck_assert_uint_eq(clear(h, B("a\0b")), 1);
	get_is(h, B("a\0c"), "k", "nul-c", 5);
	get_is(h, "a", 1, "b:c", "one", 3);

	redisFree(c);
	be->close(h);
}
END_TEST

/* Ids with the bytes the names escape ('%', '{', '}') or that a naive
 * tag would trip on: every one is its own store, and the names are
 * docs/KV.md's. Two names per id in the server, no more: no id's data
 * hash is another id's (or its own) meta hash. */
static const struct {
	const char *s;
	size_t len;
} tricky[] = {
	{ B("{") },	{ B("}") },	 { B("%") },	   { B("%7d") },     { B("%257d") },
	{ B("a}b") },	{ B("a%7db") },	 { B("{a}") },	   { B("}{") },	     { B("x}:meta") },
	{ B("x") },	{ B("a\0}") },	 { B("a\0%7d") },  { B("{}") },	     { B("%7b%7d") },
	{ B("\xc3\xa9{") }, { B("kv") }, { B("meta") },	   { B("a}:kv") },   { B("a") },
};
#define NTRICKY (sizeof tricky / sizeof tricky[0])

START_TEST(tags_apart)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	for (size_t i = 0; i < NTRICKY; i++) {
		char v[16];
		int vl = snprintf(v, sizeof v, "v%zu", i);
		set_ok(h, tricky[i].s, tricky[i].len, "k", v, (size_t)vl, &roomy);
	}
	for (size_t i = 0; i < NTRICKY; i++) {
		char v[16];
		int vl = snprintf(v, sizeof v, "v%zu", i);
		get_is(h, tricky[i].s, tricky[i].len, "k", v, (size_t)vl);
		ck_assert_int_eq(hash_len(c, tricky[i].s, tricky[i].len), 1);
		ck_assert_int_eq(meta_bytes(c, tricky[i].s, tricky[i].len), 1 + vl);
	}
	redisReply *r = raw(c, 1, A("DBSIZE"));
	ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
	ck_assert_int_eq(r->integer, 2 * (long long)NTRICKY);
	freeReplyObject(r);
	/* spelled out: the escapes, and NUL kept as it is */
	r = raw(c, 3, A("HGET"), A("moat:{a%7db}:kv"), A("k"));
	ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
	ck_assert_str_eq(r->str, "v5");
	freeReplyObject(r);
	r = raw(c, 3, A("HGET"), A("moat:{%257d}:kv"), A("k"));
	ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
	ck_assert_str_eq(r->str, "v3");
	freeReplyObject(r);
	r = raw(c, 3, A("HGET"), B("moat:{a\0%7d}:meta"), A("bytes"));
	ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
	ck_assert_str_eq(r->str, "4");
	freeReplyObject(r);
	/* clearing one leaves the others */
	ck_assert_uint_eq(clear(h, B("a}b")), 1);
	get_is(h, B("a%7db"), "k", "v6", 2);
	get_is(h, B("a"), "k", "v19", 3);
	redisFree(c);
	be->close(h);
}
END_TEST

/* ---- Redis Cluster: a one-node cluster owning all 16384 slots ---- */

/* CLUSTER KEYSLOT of a name. */
static long long keyslot(redisContext *c, const char *name, size_t len)
{
	redisReply *r = raw(c, 3, A("CLUSTER"), A("KEYSLOT"), name, len);
	ck_assert_msg(r->type == REDIS_REPLY_INTEGER, "CLUSTER KEYSLOT: %s",
		      r->type == REDIS_REPLY_ERROR ? r->str : "not an integer");
	long long v = r->integer;
	freeReplyObject(r);
	return v;
}

/* Starts a Cluster node, gives it every slot, waits for cluster_state:ok. */
static void cluster_start(struct server *s)
{
	char *why = NULL;
	ck_assert_msg(server_start_as(s, NULL, true, &why) == 0, "%s", why);
	redisContext *c = raw_connect(s->port);
	redisReply *r = raw(c, 4, A("CLUSTER"), A("ADDSLOTSRANGE"), A("0"), A("16383"));
	ck_assert_msg(r->type == REDIS_REPLY_STATUS, "ADDSLOTSRANGE: %s",
		      r->type == REDIS_REPLY_ERROR ? r->str : "?");
	freeReplyObject(r);
	int64_t deadline = moat_mono_ms() + 10000;
	for (;;) {
		r = raw(c, 2, A("CLUSTER"), A("INFO"));
		ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
		bool ok = strstr(r->str, "cluster_state:ok") != NULL;
		freeReplyObject(r);
		if (ok)
			break;
		ck_assert_msg(moat_mono_ms() < deadline, "the cluster did not reach state ok in 10 s");
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	redisFree(c);
}

START_TEST(cluster_one_slot)
{
	BEGIN();
	struct server s;
	cluster_start(&s);
	redisContext *c = raw_connect(s.port);

	/* the test can fail: two names in different slots in one script are
	 * refused (the layout before this one: moat:kv:1:a, moat:kvmeta:1:a) */
	ck_assert_int_ne(keyslot(c, A("moat:kv:1:a")), keyslot(c, A("moat:kvmeta:1:a")));
	redisReply *r = raw(c, 5, A("EVAL"), A("return redis.call('EXISTS', KEYS[1], KEYS[2])"),
			    A("2"), A("moat:kv:1:a"), A("moat:kvmeta:1:a"));
	ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
	ck_assert_msg(strstr(r->str, "CROSSSLOT") || strstr(r->str, "same slot"), "%s", r->str);
	freeReplyObject(r);

	/* both names of every id in one slot: the slot of the tag alone */
	for (size_t i = 0; i < NTRICKY; i++) {
		char kv[800], meta[800];
		size_t kl = hash_name(kv, sizeof kv, "kv", tricky[i].s, tricky[i].len);
		size_t ml = hash_name(meta, sizeof meta, "meta", tricky[i].s, tricky[i].len);
		long long sk = keyslot(c, kv, kl), sm = keyslot(c, meta, ml);
		ck_assert_msg(sk == sm, "id %zu: slots %lld and %lld", i, sk, sm);
		/* the tag is the escaped id: "moat:{" .. "}" */
		ck_assert_int_eq(keyslot(c, kv + 6, kl - 6 - 4), sk);
	}

	/* the operations, on the cluster node */
	void *h = open_at(s.port, 0);
	struct moat_kv_quota q = roomy;
	q.max_keys = 2;
	q.max_bytes = 12;
	for (size_t i = 0; i < NTRICKY; i++) {
		const char *id = tricky[i].s;
		size_t il = tricky[i].len;
		set_ok(h, id, il, "k1", "abc", 3, &q);
		set_ok(h, id, il, "k2", "de", 2, &q);
		get_is(h, id, il, "k1", "abc", 3);
		ck_assert(exists(h, id, il, "k2"));
		const char *both[] = { "k1", "k2" };
		keys_are(h, id, il, both, 2);
		set_full(h, id, il, "k3", "x", 1, &q, "at most 2 keys");
		set_full(h, id, il, "k1", "abcdefgh", 8, &q, "(9 in use, 14 with this write)");
		ck_assert_int_eq(meta_bytes(c, id, il), 9);
		del_ok(h, id, il, "k2");
		ck_assert_int_eq(meta_bytes(c, id, il), 5);
		get_is(h, id, il, "k2", NULL, 0);
		set_ok(h, id, il, "k2", "d", 1, &q);
	}
	for (size_t i = 0; i < NTRICKY; i++) {
		ck_assert_uint_eq(clear(h, tricky[i].s, tricky[i].len), 2);
		ck_assert_int_eq(meta_bytes(c, tricky[i].s, tricky[i].len), -1);
		ck_assert_int_eq(hash_len(c, tricky[i].s, tricky[i].len), 0);
	}
	r = raw(c, 1, A("DBSIZE"));
	ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
	ck_assert_int_eq(r->integer, 0);
	freeReplyObject(r);
	/* a cluster node has database 0 only: another one is the spec's fault */
	struct moat_error err = { 0 };
	void *h1 = NULL;
	ck_assert_int_eq(kv_redis_open("127.0.0.1", s.port, 1, NULL, &h1, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, "SELECT"), "%s", err.message);
	moat_error_clear(&err);
	be->close(h);
	redisFree(c);
	server_stop(&s);
}
END_TEST

/* ---- quotas ---- */

START_TEST(quota_keys)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	struct moat_kv_quota q = roomy;
	q.max_keys = 3;
	set_ok(h, "q", 1, "k1", "a", 1, &q);
	set_ok(h, "q", 1, "k2", "b", 1, &q);
	set_ok(h, "q", 1, "k3", "c", 1, &q);
	set_full(h, "q", 1, "k4", "d", 1, &q, "quota: at most 3 keys per sandbox");
	get_is(h, "q", 1, "k4", NULL, 0);
	ck_assert_int_eq(hash_len(c, "q", 1), 3);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 9);
	/* replacing a key is not a new key */
	set_ok(h, "q", 1, "k3", "cc", 2, &q);
	get_is(h, "q", 1, "k3", "cc", 2);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 10);
	/* the quota is per id */
	set_ok(h, "r", 1, "k4", "d", 1, &q);
	/* a delete makes room */
	del_ok(h, "q", 1, "k1");
	set_ok(h, "q", 1, "k4", "d", 1, &q);
	/* no key at all */
	q.max_keys = 0;
	set_full(h, "z", 1, "k", "v", 1, &q, "at most 0 keys");
	ck_assert_int_eq(hash_len(c, "z", 1), 0);
	ck_assert_int_eq(meta_bytes(c, "z", 1), -1);
	redisFree(c);
	be->close(h);
}
END_TEST

START_TEST(quota_bytes)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	struct moat_kv_quota q = roomy;
	q.max_bytes = 20;
	set_ok(h, "q", 1, "k", "0123456789", 10, &q); /* 11 */
	/* 11 + 2 + 9 = 22 > 20: refused, nothing written */
	set_full(h, "q", 1, "k2", "012345678", 9, &q,
		 "quota: at most 20 bytes of keys and values per sandbox (11 in use, 22 with this "
		 "write)");
	get_is(h, "q", 1, "k2", NULL, 0);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 11);
	ck_assert_int_eq(hash_len(c, "q", 1), 1);
	/* replacing counts only the difference: 1 + 19 = 20 fits exactly */
	set_ok(h, "q", 1, "k", "0123456789abcdefghi", 19, &q);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 20);
	/* one byte more does not, and the value stays */
	set_full(h, "q", 1, "k", "0123456789abcdefghij", 20, &q, "(20 in use, 21 with this write)");
	get_is(h, "q", 1, "k", "0123456789abcdefghi", 19);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 20);
	/* a smaller value frees room */
	set_ok(h, "q", 1, "k", "x", 1, &q);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 2);
	set_ok(h, "q", 1, "k2", "012345678", 9, &q);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 13);
	redisFree(c);
	be->close(h);
}
END_TEST

START_TEST(quota_value)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	struct moat_kv_quota q = roomy;
	q.max_value = 4;
	set_ok(h, "q", 1, "k", "abcd", 4, &q);
	set_full(h, "q", 1, "k", "abcde", 5, &q,
		 "quota: a value may have at most 4 bytes (this one has 5)");
	get_is(h, "q", 1, "k", "abcd", 4);
	set_full(h, "q", 1, "new", "abcde", 5, &q, "at most 4 bytes");
	get_is(h, "q", 1, "new", NULL, 0);
	ck_assert_int_eq(meta_bytes(c, "q", 1), 5);
	redisFree(c);
	be->close(h);
}
END_TEST

/* ---- the server's side ---- */

/* A server that forgot the scripts (SCRIPT FLUSH, a restart) gets them again. */
START_TEST(scripts_reloaded)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	set_ok(h, "s", 1, "k", "v", 1, &roomy);
	del_ok(h, "s", 1, "k");
	ck_assert_uint_eq(clear(h, "s", 1), 0);
	raw_ok(c, "SCRIPT FLUSH");
	set_ok(h, "s", 1, "k", "v2", 2, &roomy);
	get_is(h, "s", 1, "k", "v2", 2);
	set_ok(h, "s", 1, "k2", "v", 1, &roomy);
	raw_ok(c, "SCRIPT FLUSH");
	del_ok(h, "s", 1, "k");
	ck_assert_int_eq(meta_bytes(c, "s", 1), 3);
	raw_ok(c, "SCRIPT FLUSH");
	ck_assert_uint_eq(clear(h, "s", 1), 1);
	redisFree(c);
	be->close(h);
}
END_TEST

/* An error reply (a name holding another type) fails the operation: -1,
 * kind other, the server's words; the connection goes on. */
START_TEST(error_reply)
{
	BEGIN();
	void *h = open_at(shared.port, 0);
	redisContext *c = raw_connect(shared.port);
	redisReply *r = raw(c, 3, A("SET"), A("moat:{w}:kv"), A("a string"));
	freeReplyObject(r);
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(be->get(h, "w", 1, "k", 1, &a), -1);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	ck_assert_msg(strstr(msg_of(&a), "redis") && strstr(msg_of(&a), "WRONGTYPE"), "%s",
		      msg_of(&a));
	fresh(&a);
	ck_assert_int_eq(be->set(h, "w", 1, "k", 1, "v", 1, &roomy, &a), -1);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	ck_assert_msg(strstr(msg_of(&a), "WRONGTYPE"), "%s", msg_of(&a));
	fresh(&a);
	ck_assert_int_eq(be->keys(h, "w", 1, &a), -1);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	fresh(&a);
	ck_assert_int_eq(be->exists(h, "w", 1, "k", 1, &a), -1);
	fresh(&a);
	ck_assert_int_eq(be->del(h, "w", 1, "k", 1, &a), -1);
	fresh(&a);
	/* the same connection still serves other ids */
	set_ok(h, "v", 1, "k", "v", 1, &roomy);
	get_is(h, "v", 1, "k", "v", 1);
	redisFree(c);
	be->close(h);
}
END_TEST

/* A full Redis (maxmemory with noeviction: its OOM error reply): a set is
 * store_table_full "the store is full", whose message names neither the
 * server's address nor its words (a MOVED reply's text is another node's
 * address); the operator's detail has both. Deletes and a clear still
 * work (Redis runs DEL under maxmemory), and writes after them. */
START_TEST(full_names_no_host)
{
	BEGIN();
	struct server s;
	char *why = NULL;
	ck_assert_msg(server_start(&s, NULL, &why) == 0, "%s", why);
	void *h = open_at(s.port, 0);
	set_ok(h, "f", 1, "k", "v", 1, &roomy);
	set_ok(h, "f", 1, "k1", "v", 1, &roomy);
	redisContext *c = raw_connect(s.port);
	freeReplyObject(raw(c, 4, A("CONFIG"), A("SET"), A("maxmemory-policy"), A("noeviction")));
	freeReplyObject(raw(c, 4, A("CONFIG"), A("SET"), A("maxmemory"), A("1")));
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(be->set(h, "f", 1, "k2", 2, "v", 1, &roomy, &a), -1);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_FULL);
	ck_assert_msg(strstr(msg_of(&a), "the store is full") && !strstr(msg_of(&a), "127.0.0.1") &&
			      !strstr(msg_of(&a), "maxmemory"),
		      "%s", msg_of(&a));
	char port[16];
	snprintf(port, sizeof port, ":%u", s.port);
	ck_assert_msg(a.detail.len && strstr(a.detail.data, "127.0.0.1") &&
			      strstr(a.detail.data, port) && strstr(a.detail.data, "OOM"),
		      "detail: %s", a.detail.data ? a.detail.data : "(none)");
	fresh(&a);
	/* one key of two (the byte count goes down), then the id */
	ck_assert_msg(be->del(h, "f", 1, "k", 1, &a) == 0 && a.status == MOAT_KV_OK, "del: %s",
		      msg_of(&a));
	fresh(&a);
	uint64_t n = 9;
	ck_assert_int_eq(be->clear(h, "f", 1, &n, &a), 0);
	ck_assert_uint_eq(n, 1);
	fresh(&a);
	freeReplyObject(raw(c, 4, A("CONFIG"), A("SET"), A("maxmemory"), A("0")));
	set_ok(h, "f", 1, "k2", "v", 1, &roomy);
	get_is(h, "f", 1, "k2", "v", 1);
	redisFree(c);
	be->close(h);
	server_stop(&s);
}
END_TEST

/* The server dies under an open store: every operation is -1, kind other,
 * a message naming redis; nothing crashes (and no SIGPIPE kills us). */
START_TEST(lost_connection)
{
	BEGIN();
	struct server s;
	char *why = NULL;
	ck_assert_msg(server_start(&s, NULL, &why) == 0, "%s", why);
	void *h = open_at(s.port, 0);
	set_ok(h, "l", 1, "k", "v", 1, &roomy);
	kill(s.pid, SIGKILL);
	while (waitpid(s.pid, NULL, 0) < 0 && errno == EINTR)
		;
	s.pid = -1;

	/* first a value larger than the socket's buffers: hiredis writes on
	 * after the peer's reset, which raises SIGPIPE */
	struct moat_kv_quota q = roomy;
	q.max_value = q.max_bytes = 16u << 20;
	char *v = calloc(1, q.max_value);
	ck_assert_ptr_nonnull(v);
	struct moat_kv_answer a = { 0 };
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(be->set(h, "l", 1, "k", 1, v, q.max_value, &q, &a), -1);
		ck_assert_int_eq(a.status, MOAT_KV_ERROR);
		ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
		/* the program is told what failed, not where the server is */
		ck_assert_msg(!strncmp(msg_of(&a), "redis store: set: ", 18) &&
				      !strstr(msg_of(&a), "127.0.0.1"),
			      "%s", msg_of(&a));
		/* where it is: the operator's */
		ck_assert_msg(a.detail.len && strstr(a.detail.data, "redis store 127.0.0.1:"), "%s",
			      a.detail.data ? a.detail.data : "(no detail)");
		ck_assert_ptr_null(memchr(a.msg.data, '\n', a.msg.len));
		fresh(&a);
	}
	free(v);
	ck_assert_int_eq(be->get(h, "l", 1, "k", 1, &a), -1);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	ck_assert_msg(strstr(msg_of(&a), "redis store: get: "), "%s", msg_of(&a));
	fresh(&a);
	ck_assert_int_eq(be->exists(h, "l", 1, "k", 1, &a), -1);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	fresh(&a);
	ck_assert_int_eq(be->del(h, "l", 1, "k", 1, &a), -1);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	fresh(&a);
	ck_assert_int_eq(be->keys(h, "l", 1, &a), -1);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	fresh(&a);
	uint64_t n = 7;
	ck_assert_int_eq(be->clear(h, "l", 1, &n, &a), -1);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_OTHER);
	fresh(&a);
	be->close(h);
	server_stop(&s);
}
END_TEST

/* ---- opening ---- */

START_TEST(open_refused)
{
	BEGIN();
	struct moat_error err = { 0 };
	void *h = NULL;
	unsigned port = free_port();
	ck_assert_int_eq(kv_redis_open("127.0.0.1", port, 0, NULL, &h, &err), -1);
	ck_assert_ptr_null(h);
	ck_assert_int_eq(err.type, MOAT_ERR_UNAVAILABLE);
	ck_assert_msg(strstr(err.message, "redis store 127.0.0.1:") &&
			      strstr(err.message, "cannot connect"),
		      "%s", err.message);
	moat_error_clear(&err);
	/* a db the server does not have: the spec's fault */
	ck_assert_int_eq(kv_redis_open("127.0.0.1", shared.port, 4000, NULL, &h, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, "SELECT") && strstr(err.message, "/4000"), "%s",
		      err.message);
	moat_error_clear(&err);
}
END_TEST

START_TEST(databases_apart)
{
	BEGIN();
	void *h0 = open_at(shared.port, 0), *h1 = open_at(shared.port, 1);
	set_ok(h1, "d", 1, "k", "one", 3, &roomy);
	get_is(h0, "d", 1, "k", NULL, 0);
	get_is(h1, "d", 1, "k", "one", 3);
	be->close(h0);
	be->close(h1);
}
END_TEST

START_TEST(auth)
{
	BEGIN();
	struct server s;
	char *why = NULL;
	ck_assert_msg(server_start(&s, "s3cret pass", &why) == 0, "%s", why);
	struct moat_error err = { 0 };
	void *h = NULL;
	/* no password: the server refuses the SELECT */
	ck_assert_int_eq(kv_redis_open("127.0.0.1", s.port, 0, NULL, &h, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, "NOAUTH"), "%s", err.message);
	moat_error_clear(&err);
	ck_assert_int_eq(kv_redis_open("127.0.0.1", s.port, 0, "wrong", &h, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_msg(strstr(err.message, "AUTH") && !strstr(err.message, "wrong"), "%s",
		      err.message);
	moat_error_clear(&err);
	ck_assert_int_eq(kv_redis_open("127.0.0.1", s.port, 0, "s3cret pass", &h, &err), 0);
	set_ok(h, "p", 1, "k", "v", 1, &roomy);
	get_is(h, "p", 1, "k", "v", 1);
	be->close(h);

	/* the same through a spec's password file (kv.c reads it) */
	char dir[] = "/tmp/moat-kv-redis-pw-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char *file = moat_format("%s/pw", dir);
	int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "s3cret pass\n", 12), 12);
	close(fd);
	char *spec = moat_format("redis://127.0.0.1:%u/0?password-file=%s", s.port, file);
	struct moat_kv_store *st = NULL;
	int rc = moat_kv_open(spec, &st, &err);
	unlink(file);
	rmdir(dir);
	ck_assert_msg(rc == 0, "%s: %s", spec, err.message);
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_get(st, "p", 1, "k", 1, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	ck_assert_uint_eq(a.data.len, 1);
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
	free(spec);
	free(file);
	server_stop(&s);
}
END_TEST

/* The whole path a run takes: a --kv spec, moat_kv_open, the moat_kv_*
 * calls (which check the value's size before the backend). */
START_TEST(through_the_spec)
{
	BEGIN();
	char *spec = moat_format("redis://127.0.0.1:%u/2", shared.port);
	struct moat_kv_store *st = NULL;
	struct moat_error err = { 0 };
	ck_assert_msg(moat_kv_open(spec, &st, &err) == 0, "%s: %s", spec, err.message);
	free(spec);
	ck_assert_str_eq(moat_kv_backend_name(st), "redis");
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	q.max_value = 4;
	struct moat_kv_answer a = { 0 };
	ck_assert_int_eq(moat_kv_set(st, "s", 1, "k", 1, "abcd", 4, &q, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	ck_assert_int_eq(moat_kv_set(st, "s", 1, "k", 1, "abcde", 5, &q, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_ERROR);
	ck_assert_str_eq(a.kind, MOAT_KV_KIND_FULL);
	ck_assert_int_eq(moat_kv_get(st, "s", 1, "k", 1, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	ck_assert_uint_eq(a.data.len, 4);
	ck_assert_mem_eq(a.data.data, "abcd", 4);
	ck_assert_int_eq(moat_kv_exists(st, "s", 1, "k", 1, &a), 0);
	ck_assert(a.exists);
	ck_assert_int_eq(moat_kv_keys(st, "s", 1, &a), 0);
	ck_assert_uint_eq(a.data.len, 5);
	ck_assert_mem_eq(a.data.data, "\1\0\0\0k", 5);
	/* in database 2, not 0 */
	redisContext *c = raw_connect(shared.port);
	ck_assert_int_eq(hash_len(c, "s", 1), 0);
	raw_ok(c, "SELECT 2");
	ck_assert_int_eq(hash_len(c, "s", 1), 1);
	redisFree(c);
	uint64_t removed = 0;
	ck_assert_int_eq(moat_kv_clear(st, "s", 1, &removed, &a), 0);
	ck_assert_uint_eq(removed, 1);
	ck_assert_int_eq(moat_kv_delete(st, "s", 1, "k", 1, &a), 0);
	ck_assert_int_eq(a.status, MOAT_KV_OK);
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
}
END_TEST

/* Every fd the store opens is close-on-exec (a sandbox must not inherit
 * the connection). */
START_TEST(fds_cloexec)
{
	BEGIN();
	enum { MAXFD = 1024 };
	bool before[MAXFD];
	for (int fd = 0; fd < MAXFD; fd++)
		before[fd] = fcntl(fd, F_GETFD) >= 0;
	void *h = open_at(shared.port, 0);
	set_ok(h, "c", 1, "k", "v", 1, &roomy);
	int fresh_fds = 0;
	for (int fd = 0; fd < MAXFD; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl < 0 || before[fd])
			continue;
		fresh_fds++;
		ck_assert_msg(fl & FD_CLOEXEC, "fd %d is not close-on-exec", fd);
	}
	ck_assert_int_ge(fresh_fds, 1);
	be->close(h);
	for (int fd = 0; fd < MAXFD; fd++)
		ck_assert_msg(before[fd] == (fcntl(fd, F_GETFD) >= 0), "fd %d left open", fd);
}
END_TEST

Suite *kv_redis_suite(void)
{
	Suite *s = suite_create("kv_redis");
	TCase *tc = tcase_create("redis");
	tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, basic_ops);
	tcase_add_test(tc, keys_byte_order);
	tcase_add_test(tc, clear_ops);
	tcase_add_test(tc, ids_apart);
	tcase_add_test(tc, tags_apart);
	tcase_add_test(tc, cluster_one_slot);
	tcase_add_test(tc, quota_keys);
	tcase_add_test(tc, quota_bytes);
	tcase_add_test(tc, quota_value);
	tcase_add_test(tc, scripts_reloaded);
	tcase_add_test(tc, error_reply);
	tcase_add_test(tc, full_names_no_host);
	tcase_add_test(tc, lost_connection);
	tcase_add_test(tc, open_refused);
	tcase_add_test(tc, databases_apart);
	tcase_add_test(tc, auth);
	tcase_add_test(tc, through_the_spec);
	tcase_add_test(tc, fds_cloexec);
	suite_add_tcase(s, tc);
	return s;
}
