/* The Redis backend of the key-value store (docs/KV.md).
 *
 * Two hashes per sandboxId: "moat:{<tag>}:kv", whose fields are the keys,
 * and "moat:{<tag>}:meta", whose field "bytes" is the sum of key + value
 * bytes. <tag> is the id with '%', '{' and '}' written as "%25", "%7b",
 * "%7d" and every other byte (NUL too) as it is: so the tag holds no '}',
 * Redis Cluster's hash tag of both names (the bytes between the first '{'
 * and the first '}' after it) is exactly <tag>, both live in one slot, and
 * the escaping is reversible, so no two ids, and no id's data and
 * another's meta, share a name. Every name, key and value travels as a
 * length-counted argument, so NUL and any other byte are safe. What writes
 * (set, delete, clear) runs as a Lua script that names both hashes in KEYS:
 * Redis runs a script alone, so the quota check and the write, or the
 * write and the byte total, are one step no other client sees half of. A
 * script is sent once (SCRIPT LOAD), then run by its digest; a server that
 * lost it (NOSCRIPT: restarted, SCRIPT FLUSH) gets the source again.
 *
 * The socket is moat's own (close-on-exec from the start, connected with a
 * deadline) and handed to hiredis, which speaks the protocol over it. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "kv/internal.h"
#include "kv/redis_dl.h"

#define CONNECT_MS 2000 /* the whole connect, every address tried */
#define COMMAND_S 10    /* one command's send or receive */
#define MAX_SERVER_TEXT 300 /* of a server's error in a message */

/* The scripts. KEYS[1] is the id's hash, KEYS[2] its meta hash. */
enum { SC_SET, SC_DEL, SC_CLEAR, SC__COUNT };

static const char *const script_src[SC__COUNT] = {
	/* ARGV: key, value, max_keys, max_bytes. Answers {0, total} when
	 * written, {1, keys} when the key count is full, {2, total, total
	 * after} when the bytes are: a refusal writes nothing. A replaced
	 * key counts once and only its size difference. */
	[SC_SET] = "local h, m, k, v = KEYS[1], KEYS[2], ARGV[1], ARGV[2]\n"
		   "local old = 0\n"
		   "if redis.call('HEXISTS', h, k) == 1 then\n"
		   "  old = #k + redis.call('HSTRLEN', h, k)\n"
		   "else\n"
		   "  local n = redis.call('HLEN', h)\n"
		   "  if n + 1 > tonumber(ARGV[3]) then return {1, n} end\n"
		   "end\n"
		   "local total = tonumber(redis.call('HGET', m, 'bytes') or '0')\n"
		   "local after = total - old + #k + #v\n"
		   "if after > tonumber(ARGV[4]) then return {2, total, after} end\n"
		   "redis.call('HSET', h, k, v)\n"
		   "redis.call('HSET', m, 'bytes', after)\n"
		   "return {0, after}\n",
	/* ARGV: key. Answers 1 when it was there, 0 when not; the meta hash
	 * goes with the last key, so an emptied id leaves nothing behind. */
	[SC_DEL] = "local h, m, k = KEYS[1], KEYS[2], ARGV[1]\n"
		   "if redis.call('HEXISTS', h, k) == 0 then return 0 end\n"
		   "local size = #k + redis.call('HSTRLEN', h, k)\n"
		   "redis.call('HDEL', h, k)\n"
		   "if redis.call('HLEN', h) == 0 then\n"
		   "  redis.call('DEL', m)\n"
		   "else\n"
		   "  redis.call('HINCRBY', m, 'bytes', -size)\n"
		   "end\n"
		   "return 1\n",
	/* Answers how many keys there were. */
	[SC_CLEAR] = "local n = redis.call('HLEN', KEYS[1])\n"
		     "redis.call('DEL', KEYS[1], KEYS[2])\n"
		     "return n\n",
};

struct kv_redis {
	redisContext *c;
	char *where;              /* "host:port/db", for messages */
	char *sha[SC__COUNT];     /* the digest SCRIPT LOAD answered; NULL: not loaded */
	bool eval_only[SC__COUNT]; /* SCRIPT LOAD refused (an ACL): always EVAL */
};

/* ---- the connection ---- */

/* A TCP connection to host:port, close-on-exec, blocking, within
 * CONNECT_MS for all addresses host has. The fd, or -1 with *err. */
static int tcp_connect(const char *host, unsigned port, const char *where,
		       struct moat_error *err)
{
	char service[16];
	snprintf(service, sizeof service, "%u", port);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	int gai = getaddrinfo(host, service, &hints, &res);
	if (gai != 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, gai == EAI_SYSTEM ? errno : 0,
				      "redis store %s: cannot resolve the host: %s", where,
				      gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
	int64_t deadline = moat_mono_ms() + CONNECT_MS;
	int fd = -1, e = ECONNREFUSED;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			e = errno;
			if (e == EINPROGRESS) {
				struct pollfd p = { .fd = fd, .events = POLLOUT };
				int n;
				do {
					int64_t left = deadline - moat_mono_ms();
					n = left > 0 ? poll(&p, 1, (int)left) : 0;
				} while (n < 0 && errno == EINTR);
				socklen_t sl = sizeof e;
				if (n < 0)
					e = errno;
				else if (n == 0)
					e = ETIMEDOUT;
				else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0)
					e = errno;
			}
			if (e != 0) {
				close(fd);
				fd = -1;
				if (e == ETIMEDOUT)
					break; /* the deadline is for all addresses */
				continue;
			}
		}
		int fl = fcntl(fd, F_GETFL);
		if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
			e = errno;
			close(fd);
			fd = -1;
			break;
		}
		int one = 1; /* requests are small and each waits for its answer */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	freeaddrinfo(res);
	if (fd < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e, "redis store %s: cannot connect: %s",
				      where, e == ETIMEDOUT ? "no answer within 2 s" : strerror(e));
	return fd;
}

/* Blocks SIGPIPE in this thread while hiredis writes, so a server that went
 * away is an EPIPE error and not the death of a process that did not ignore
 * SIGPIPE; a SIGPIPE the write raised is taken before the mask is restored.
 * When the caller blocks SIGPIPE already, its pending signals are its own
 * and left alone. */
struct pipe_guard {
	sigset_t old;
	bool set;
};

static void pipe_block(struct pipe_guard *g)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	g->set = pthread_sigmask(SIG_BLOCK, &s, &g->old) == 0 && !sigismember(&g->old, SIGPIPE);
}

static void pipe_restore(struct pipe_guard *g)
{
	if (!g->set)
		return;
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	struct timespec zero = { 0, 0 };
	while (sigtimedwait(&s, NULL, &zero) > 0)
		;
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* One command and its reply (an error reply included), or NULL when the
 * connection failed now or before (r->c->err says why). */
static redisReply *exchange(struct kv_redis *r, int argc, const char **argv, const size_t *lens)
{
	if (r->c->err)
		return NULL; /* hiredis keeps a broken connection broken */
	struct pipe_guard g;
	pipe_block(&g);
	redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
	pipe_restore(&g);
	return rep;
}

/* A server's text for a one-line message: printable ASCII kept, any other
 * byte as \xNN, at most MAX_SERVER_TEXT bytes of it. */
static void append_text(struct moat_buf *b, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = len > MAX_SERVER_TEXT ? MAX_SERVER_TEXT : len;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f) {
			moat_buf_append(b, &s[i], 1);
		} else {
			char e[4] = { '\\', 'x', hex[c >> 4], hex[c & 0xf] };
			moat_buf_append(b, e, 4);
		}
	}
	if (n < len)
		moat_buf_append(b, "...", 3);
}

/* "redis store[ HOST:PORT/DB]: WHAT: why" into b: why is the connection's
 * error when rep is NULL, the server's error reply, or the reply's
 * unexpected type. The address is for the operator (opening); an
 * operation's message goes to the sandboxed program, which has no use
 * for it. */
static void describe(struct moat_buf *b, const struct kv_redis *r, bool where, const char *what,
		     const redisReply *rep)
{
	moat_buf_appendf(b, "redis store%s%s: %s: ", where ? " " : "", where ? r->where : "",
			 what);
	if (!rep) {
		const char *why = r->c && r->c->err ? r->c->errstr : "out of memory";
		append_text(b, why, strnlen(why, sizeof r->c->errstr));
	} else if (rep->type == REDIS_REPLY_ERROR && rep->str) {
		append_text(b, rep->str, rep->len);
	} else {
		moat_buf_appendf(b, "unexpected reply (type %d)", rep->type);
	}
}

/* Fails the operation (-1) and frees rep. The operator's detail is
 * describe's message with the server's address; the program's names the
 * operation and, for an error reply, only its code (the first word: a
 * MOVED reply's text is another node's address): kind store_table_full
 * "the store is full" for OOM (maxmemory), else other. */
static int op_fail(struct kv_redis *r, struct moat_kv_answer *a, const char *what,
		   redisReply *rep)
{
	struct moat_buf b = { 0 };
	describe(&b, r, true, what, rep);
	char *d = moat_buf_take(&b);
	if (rep && rep->type == REDIS_REPLY_ERROR && rep->str) {
		size_t n = strcspn(rep->str, " ");
		if (n == 3 && !memcmp(rep->str, "OOM", 3)) {
			kv_fail(a, -1, MOAT_KV_KIND_FULL, KV_MSG_FULL);
		} else {
			struct moat_buf c = { 0 };
			append_text(&c, rep->str, n > 32 ? 32 : n);
			char *code = moat_buf_take(&c);
			kv_fail(a, -1, MOAT_KV_KIND_OTHER, "redis store: %s: the server answered %s",
				what, code ? code : "an error");
			free(code);
		}
	} else {
		describe(&b, r, false, what, rep);
		char *m = moat_buf_take(&b);
		kv_fail(a, -1, MOAT_KV_KIND_OTHER, "%s", m ? m : "redis store: out of memory");
		free(m);
	}
	if (d)
		kv_detail(a, "%s", d);
	free(d);
	if (rep)
		freeReplyObject(rep);
	return -1;
}

/* Fails the open with describe's message; frees rep. */
static int open_fail(struct kv_redis *r, struct moat_error *err, enum moat_error_type type,
		     const char *what, redisReply *rep)
{
	struct moat_buf b = { 0 };
	describe(&b, r, true, what, rep);
	if (rep)
		freeReplyObject(rep);
	char *m = moat_buf_take(&b);
	moat_error_set(err, type, 0, "%s", m ? m : "redis store: out of memory");
	free(m);
	return -1;
}

static void r_close(void *h)
{
	struct kv_redis *r = h;
	if (!r)
		return;
	if (r->c)
		redisFree(r->c); /* closes the fd */
	for (int i = 0; i < SC__COUNT; i++)
		free(r->sha[i]);
	free(r->where);
	free(r);
}

int kv_redis_open(const char *host, unsigned port, unsigned db, const char *password, void **h,
		  struct moat_error *err)
{
	const char *why;
	if (moat_redis_load(&why) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "redis store: %s", why);
	struct kv_redis *r = calloc(1, sizeof *r);
	if (!r || !(r->where = moat_format(strchr(host, ':') ? "[%s]:%u/%u" : "%s:%u/%u", host,
					  port, db))) {
		free(r);
		return moat_error_oom(err);
	}
	int fd = tcp_connect(host, port, r->where, err);
	if (fd < 0) {
		r_close(r);
		return -1;
	}
	if (!(r->c = redisConnectFd(fd))) {
		close(fd);
		r_close(r);
		return moat_error_oom(err);
	}
	struct timeval tv = { .tv_sec = COMMAND_S };
	if (redisSetTimeout(r->c, tv) != REDIS_OK) {
		open_fail(r, err, MOAT_ERR_UNAVAILABLE, "setting the command timeout", NULL);
		goto fail;
	}
	/* a refused AUTH or SELECT is the spec's fault (password, db number);
	 * a connection that fails is the server's */
	if (password) {
		const char *argv[] = { "AUTH", password };
		size_t lens[] = { 4, strlen(password) };
		redisReply *rep = exchange(r, 2, argv, lens);
		if (!rep || rep->type != REDIS_REPLY_STATUS) {
			open_fail(r, err, rep ? MOAT_ERR_CONFIG : MOAT_ERR_UNAVAILABLE, "AUTH", rep);
			goto fail;
		}
		freeReplyObject(rep);
	}
	char dbs[16];
	snprintf(dbs, sizeof dbs, "%u", db);
	const char *argv[] = { "SELECT", dbs };
	size_t lens[] = { 6, strlen(dbs) };
	redisReply *rep = exchange(r, 2, argv, lens);
	if (!rep || rep->type != REDIS_REPLY_STATUS) {
		open_fail(r, err, rep ? MOAT_ERR_CONFIG : MOAT_ERR_UNAVAILABLE, "SELECT", rep);
		goto fail;
	}
	freeReplyObject(rep);
	*h = r;
	return 0;
fail:
	r_close(r);
	return -1;
}

/* ---- names ---- */

/* The id's two hash names (the module comment). */
struct names {
	struct moat_buf data, meta;
};

/* "moat:{<tag>}:" + kind into b. */
static void name_of(struct moat_buf *b, const char *id, size_t idlen, const char *kind)
{
	moat_buf_append(b, "moat:{", 6);
	for (size_t i = 0, run = 0; i <= idlen; i++) {
		char c = i < idlen ? id[i] : 0;
		if (i < idlen && c != '%' && c != '{' && c != '}')
			continue;
		moat_buf_append(b, id + run, i - run); /* the bytes kept as they are */
		if (i < idlen)
			moat_buf_append(b, c == '%' ? "%25" : c == '{' ? "%7b" : "%7d", 3);
		run = i + 1;
	}
	moat_buf_appendf(b, "}:%s", kind);
}

/* The store ran out of memory building a command or its answer (one
 * spelling for every command) */
static int redis_oom(struct moat_kv_answer *a)
{
	return kv_fail(a, -1, MOAT_KV_KIND_OTHER, "redis store: out of memory");
}

static int names_make(struct names *n, const char *id, size_t idlen, struct moat_kv_answer *a)
{
	memset(n, 0, sizeof *n);
	name_of(&n->data, id, idlen, "kv");
	name_of(&n->meta, id, idlen, "meta");
	if (n->data.oom || n->meta.oom || !n->data.data || !n->meta.data) {
		moat_buf_free(&n->data);
		moat_buf_free(&n->meta);
		return redis_oom(a);
	}
	return 0;
}

static void names_free(struct names *n)
{
	moat_buf_free(&n->data);
	moat_buf_free(&n->meta);
}

/* ---- scripts ---- */

#define SCRIPT_MAX_ARGS 4

/* Runs script which with the id's two names and nargs (<= SCRIPT_MAX_ARGS)
 * arguments. The reply (maybe an error reply), or NULL with a failed. */
static redisReply *script(struct kv_redis *r, struct moat_kv_answer *a, int which,
			  const char *what, const struct names *n, int nargs, const char **args,
			  const size_t *alens)
{
	if (!r->sha[which] && !r->eval_only[which]) {
		const char *argv[] = { "SCRIPT", "LOAD", script_src[which] };
		size_t lens[] = { 6, 4, strlen(script_src[which]) };
		redisReply *rep = exchange(r, 3, argv, lens);
		if (!rep) {
			op_fail(r, a, what, NULL);
			return NULL;
		}
		if (rep->type == REDIS_REPLY_STRING && rep->str && rep->len > 0) {
			if (!(r->sha[which] = strndup(rep->str, rep->len))) {
				freeReplyObject(rep);
				redis_oom(a);
				return NULL;
			}
		} else {
			r->eval_only[which] = true; /* EVAL below says what is wrong, if anything */
		}
		freeReplyObject(rep);
	}
	const char *argv[5 + SCRIPT_MAX_ARGS];
	size_t lens[5 + SCRIPT_MAX_ARGS];
	argv[2] = "2";
	lens[2] = 1;
	argv[3] = n->data.data;
	lens[3] = n->data.len;
	argv[4] = n->meta.data;
	lens[4] = n->meta.len;
	if (nargs > SCRIPT_MAX_ARGS)
		nargs = SCRIPT_MAX_ARGS;
	for (int i = 0; i < nargs; i++) {
		argv[5 + i] = args[i];
		lens[5 + i] = alens[i];
	}
	redisReply *rep = NULL;
	if (r->sha[which]) {
		argv[0] = "EVALSHA";
		lens[0] = 7;
		argv[1] = r->sha[which];
		lens[1] = strlen(r->sha[which]);
		rep = exchange(r, 5 + nargs, argv, lens);
		if (!rep) {
			op_fail(r, a, what, NULL);
			return NULL;
		}
		if (rep->type != REDIS_REPLY_ERROR || !rep->str || strncmp(rep->str, "NOSCRIPT", 8))
			return rep;
		freeReplyObject(rep); /* the server forgot it: EVAL loads it again */
	}
	argv[0] = "EVAL";
	lens[0] = 4;
	argv[1] = script_src[which];
	lens[1] = strlen(script_src[which]);
	if (!(rep = exchange(r, 5 + nargs, argv, lens)))
		op_fail(r, a, what, NULL);
	return rep;
}

/* ---- the operations ---- */

static int r_get(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		 struct moat_kv_answer *a)
{
	struct kv_redis *r = h;
	struct names n;
	if (names_make(&n, id, idlen, a) < 0)
		return -1;
	const char *argv[] = { "HGET", n.data.data, key };
	size_t lens[] = { 4, n.data.len, klen };
	redisReply *rep = exchange(r, 3, argv, lens);
	names_free(&n);
	if (!rep || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL))
		return op_fail(r, a, "get", rep);
	if (rep->type == REDIS_REPLY_NIL) {
		a->status = MOAT_KV_NOT_FOUND;
	} else {
		a->status = MOAT_KV_OK;
		moat_buf_append(&a->data, rep->str, rep->len);
	}
	freeReplyObject(rep);
	if (a->data.oom)
		return redis_oom(a);
	return 0;
}

static int r_set(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		 const char *val, size_t vlen, const struct moat_kv_quota *q,
		 struct moat_kv_answer *a)
{
	struct kv_redis *r = h;
	if (vlen > q->max_value) /* moat_kv_set checks it first; a backend holds to it too */
		return kv_fail(a, 0, MOAT_KV_KIND_FULL,
			       "quota: a value may have at most %llu bytes (this one has %zu)",
			       (unsigned long long)q->max_value, vlen);
	struct names n;
	if (names_make(&n, id, idlen, a) < 0)
		return -1;
	char maxk[24], maxb[24];
	snprintf(maxk, sizeof maxk, "%llu", (unsigned long long)q->max_keys);
	snprintf(maxb, sizeof maxb, "%llu", (unsigned long long)q->max_bytes);
	const char *args[] = { key, vlen ? val : "", maxk, maxb };
	size_t alens[] = { klen, vlen, strlen(maxk), strlen(maxb) };
	redisReply *rep = script(r, a, SC_SET, "set", &n, 4, args, alens);
	names_free(&n);
	if (!rep)
		return -1;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
	    rep->element[0]->type != REDIS_REPLY_INTEGER)
		return op_fail(r, a, "set", rep);
	long long code = rep->element[0]->integer;
	if (code == 0) {
		a->status = MOAT_KV_OK;
	} else if (code == 1) {
		kv_fail(a, 0, MOAT_KV_KIND_FULL, "quota: at most %llu keys per sandbox",
			(unsigned long long)q->max_keys);
	} else if (code == 2 && rep->elements >= 3 &&
		   rep->element[1]->type == REDIS_REPLY_INTEGER &&
		   rep->element[2]->type == REDIS_REPLY_INTEGER) {
		kv_fail(a, 0, MOAT_KV_KIND_FULL,
			"quota: at most %llu bytes of keys and values per sandbox (%lld in use, "
			"%lld with this write)",
			(unsigned long long)q->max_bytes, rep->element[1]->integer,
			rep->element[2]->integer);
	} else {
		return op_fail(r, a, "set", rep);
	}
	freeReplyObject(rep);
	return 0; /* a refusal too: the store answered */
}

static int r_del(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		 struct moat_kv_answer *a)
{
	struct kv_redis *r = h;
	struct names n;
	if (names_make(&n, id, idlen, a) < 0)
		return -1;
	const char *args[] = { key };
	size_t alens[] = { klen };
	redisReply *rep = script(r, a, SC_DEL, "delete", &n, 1, args, alens);
	names_free(&n);
	if (!rep)
		return -1;
	if (rep->type != REDIS_REPLY_INTEGER)
		return op_fail(r, a, "delete", rep);
	freeReplyObject(rep);
	a->status = MOAT_KV_OK; /* absent is not an error */
	return 0;
}

static int r_exists(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		    struct moat_kv_answer *a)
{
	struct kv_redis *r = h;
	struct names n;
	if (names_make(&n, id, idlen, a) < 0)
		return -1;
	const char *argv[] = { "HEXISTS", n.data.data, key };
	size_t lens[] = { 7, n.data.len, klen };
	redisReply *rep = exchange(r, 3, argv, lens);
	names_free(&n);
	if (!rep || rep->type != REDIS_REPLY_INTEGER)
		return op_fail(r, a, "exists", rep);
	a->status = MOAT_KV_OK;
	a->exists = rep->integer != 0;
	freeReplyObject(rep);
	return 0;
}

struct span {
	const char *s;
	size_t len;
};

/* Byte order: memcmp, then the shorter first. */
static int span_cmp(const void *x, const void *y)
{
	const struct span *p = x, *q = y;
	int c = memcmp(p->s, q->s, p->len < q->len ? p->len : q->len);
	if (c)
		return c;
	return (p->len > q->len) - (p->len < q->len);
}

static int r_keys(void *h, const char *id, size_t idlen, struct moat_kv_answer *a)
{
	struct kv_redis *r = h;
	struct names n;
	if (names_make(&n, id, idlen, a) < 0)
		return -1;
	const char *argv[] = { "HKEYS", n.data.data };
	size_t lens[] = { 5, n.data.len };
	redisReply *rep = exchange(r, 2, argv, lens);
	names_free(&n);
	if (!rep || rep->type != REDIS_REPLY_ARRAY)
		return op_fail(r, a, "keys", rep);
	for (size_t i = 0; i < rep->elements; i++)
		if (rep->element[i]->type != REDIS_REPLY_STRING)
			return op_fail(r, a, "keys", rep);
	struct span *v = rep->elements ? calloc(rep->elements, sizeof *v) : NULL;
	if (rep->elements && !v) {
		freeReplyObject(rep);
		return redis_oom(a);
	}
	for (size_t i = 0; i < rep->elements; i++)
		v[i] = (struct span){ rep->element[i]->str, rep->element[i]->len };
	if (rep->elements > 1)
		qsort(v, rep->elements, sizeof *v, span_cmp);
	for (size_t i = 0; i < rep->elements; i++)
		kv_put_item(&a->data, v[i].s, v[i].len);
	free(v);
	freeReplyObject(rep);
	if (a->data.oom)
		return redis_oom(a);
	a->status = MOAT_KV_OK;
	return 0;
}

static int r_clear(void *h, const char *id, size_t idlen, uint64_t *removed,
		   struct moat_kv_answer *a)
{
	struct kv_redis *r = h;
	struct names n;
	if (names_make(&n, id, idlen, a) < 0)
		return -1;
	redisReply *rep = script(r, a, SC_CLEAR, "clear", &n, 0, NULL, NULL);
	names_free(&n);
	if (!rep)
		return -1;
	if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0)
		return op_fail(r, a, "clear", rep);
	if (removed)
		*removed = (uint64_t)rep->integer;
	freeReplyObject(rep);
	a->status = MOAT_KV_OK;
	return 0;
}

/* The run's deadline bounds each command (docs/KV.md); a timed-out command
 * leaves the connection unusable, and the run's later operations fail. */
static void r_set_timeout(void *h, unsigned ms)
{
	struct kv_redis *r = h;
	if (ms == 0)
		ms = 1; /* 0 would be no timeout at all */
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	if (r->c && !r->c->err)
		(void)redisSetTimeout(r->c, tv);
}

const struct kv_backend kv_redis_backend = {
	.set_timeout = r_set_timeout,
	.name = "redis",
	.get = r_get,
	.set = r_set,
	.del = r_del,
	.exists = r_exists,
	.keys = r_keys,
	.clear = r_clear,
	.close = r_close,
};
