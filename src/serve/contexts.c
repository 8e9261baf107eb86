/* Code contexts in a live sandbox (docs/CONTEXTS.md; the face is
 * contexts.h): each one the session driver (runtime/python/moat_session.py,
 * runtime/js/session.cjs) started through the sandbox's agent as a process
 * of the sandbox, its fd 3 a unix stream socket whose other end is here,
 * with its stdout and stderr pipes. Each step: the run frame written, then
 * the pipes and the socket read until the driver's done frame (result
 * frames mid-step, MOAT_SESSION_EVENTS), the step's timeout an interrupt
 * (SIGINT to the driver's process group), the grace past it a kill of
 * that context only. Every byte from the driver is untrusted (tenant code
 * shares its process): frames bounded, checked as a session's
 * (pool_session_take_done, pool_session_result_ok); a breach kills the
 * context ("protocol"), never the sandbox.
 *
 * Locking: cs->mu guards the table and each context's state; a context's
 * fds and its inbound buffer are used only by the thread that holds it
 * busy (its step, or its making). Nothing of a tenant reaches the log. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/sys.h"
#include "live/live.h"
#include "pool/session.h"
#include "serve/contexts.h"
#include "serve/internal.h"

#define FRAME_MAGIC "MOATSESS1 "
#define FRAME_MAX (16u * 1024u * 1024u)
#define FRAME_HEADER_MAX (sizeof FRAME_MAGIC - 1 + 10 + 1)
#define CHUNK (64u * 1024u)
#define KILL_WAIT_MS 5000 /* a killed driver's end, at most */
#define RESULTS_MAX 64    /* result frames a step (the driver's own bound) */
#define DEFAULT_TIMEOUT_MS 30000u

enum ctx_state { CTX_IDLE, CTX_RUNNING, CTX_KILLED, CTX_ENDED };
static const char *const state_names[] = { "idle", "running", "killed", "ended" };

struct serve_ctx {
	struct serve_ctx *next;
	char id[SERVE_CTX_ID_LEN + 1];
	enum moat_language lang;
	char *cwd;
	uint64_t memory_mb;
	int refs; /* the table's, one per holder; under mu */
	/* under mu */
	enum ctx_state state;
	char *reason;
	bool busy;       /* a step or a (re)start holds its fds */
	int64_t intr_ms; /* a client's interrupt sent at (0: none) */
	long long count; /* executionCount */
	unsigned seq;
	int pid;
	/* the holder's */
	int ctl, out, err;
	struct moat_buf in;
};

struct serve_ctxs {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct serve_ctx *list; /* oldest first */
	unsigned n;
};

static void close_fds(struct serve_ctx *c)
{
	moat_close_fd(&c->ctl);
	moat_close_fd(&c->out);
	moat_close_fd(&c->err);
	moat_buf_free(&c->in);
}

/* mu held */
static void unref(struct serve_ctx *c)
{
	if (--c->refs)
		return;
	close_fds(c);
	free(c->cwd);
	free(c->reason);
	free(c);
}

struct serve_ctxs *serve_ctxs_new(void)
{
	struct serve_ctxs *cs = calloc(1, sizeof *cs);
	if (!cs)
		return NULL;
	pthread_mutex_init(&cs->mu, NULL);
	pthread_cond_init(&cs->cv, NULL);
	return cs;
}

void serve_ctxs_free(struct serve_ctxs *cs)
{
	if (!cs)
		return;
	/* the sandbox's end kills every process of it: here only the table */
	pthread_mutex_lock(&cs->mu);
	while (cs->list) {
		struct serve_ctx *c = cs->list;
		cs->list = c->next;
		unref(c);
	}
	pthread_mutex_unlock(&cs->mu);
	pthread_mutex_destroy(&cs->mu);
	pthread_cond_destroy(&cs->cv);
	free(cs);
}

bool serve_ctx_id_valid(const char *id)
{
	return id && serve_local_id_valid(id, "ctx_");
}

/* A reference to the context id names, or NULL. */
static struct serve_ctx *get(struct serve_ctxs *cs, const char *id)
{
	if (!serve_ctx_id_valid(id))
		return NULL;
	pthread_mutex_lock(&cs->mu);
	struct serve_ctx *c = cs->list;
	while (c && !serve_ct_equal(c->id, id, SERVE_CTX_ID_LEN))
		c = c->next;
	if (c)
		c->refs++;
	pthread_mutex_unlock(&cs->mu);
	return c;
}

static void put(struct serve_ctxs *cs, struct serve_ctx *c)
{
	pthread_mutex_lock(&cs->mu);
	unref(c);
	pthread_mutex_unlock(&cs->mu);
}

/* mu held: the context is over, why (the first cause wins). */
static void set_over(struct serve_ctx *c, enum ctx_state st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_over(struct serve_ctx *c, enum ctx_state st, const char *fmt, ...)
{
	if (c->state == CTX_KILLED || c->state == CTX_ENDED)
		return;
	c->state = st;
	free(c->reason);
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&c->reason, fmt, ap) < 0)
		c->reason = NULL;
	va_end(ap);
}

/* mu held: its object */
static void ctx_json(const struct serve_ctx *c, struct moat_buf *b)
{
	const struct moat_lang_info *li = moat_lang_get(c->lang);
	moat_buf_appendf(b, "{\"id\":\"%s\",\"language\":\"%s\",\"cwd\":", c->id, li->name);
	moat_buf_append_json_string(b, c->cwd, strlen(c->cwd));
	moat_buf_appendf(b, ",\"pid\":%d,\"state\":\"%s\",\"executionCount\":%lld,\"reason\":",
			 c->pid, state_names[c->state], c->count);
	if (c->reason)
		moat_buf_append_json_string(b, c->reason, strlen(c->reason));
	else
		moat_buf_append(b, "null", 4);
	moat_buf_append(b, "}", 1);
}

/* ---- frames ---- */

/* The frame at the front of in: 1 (*body malloc'd), 0 not whole yet, -1
 * malformed or too large. */
static int take_frame(struct moat_buf *in, char **body, size_t *blen)
{
	size_t magic = sizeof FRAME_MAGIC - 1;
	size_t cmp = in->len < magic ? in->len : magic;
	if (!in->len)
		return 0;
	if (memcmp(in->data, FRAME_MAGIC, cmp) != 0)
		return -1;
	char *nl = memchr(in->data, '\n', in->len < FRAME_HEADER_MAX ? in->len : FRAME_HEADER_MAX);
	if (!nl)
		return in->len >= FRAME_HEADER_MAX ? -1 : 0;
	size_t digits = (size_t)(nl - in->data) - magic;
	if (digits < 1 || digits > 10)
		return -1;
	uint64_t len = 0;
	for (size_t i = 0; i < digits; i++) {
		char ch = in->data[magic + i];
		if (ch < '0' || ch > '9')
			return -1;
		len = len * 10 + (uint64_t)(ch - '0');
	}
	if (len < 1 || len > FRAME_MAX)
		return -1;
	size_t head = (size_t)(nl - in->data) + 1;
	if (in->len - head < len)
		return 0;
	if (!(*body = malloc((size_t)len + 1)))
		return -1;
	memcpy(*body, in->data + head, (size_t)len);
	(*body)[len] = '\0';
	*blen = (size_t)len;
	moat_buf_drop_front(in, head + (size_t)len);
	return 1;
}

/* Whatever the socket holds now into c->in: 1 some, 0 none (EAGAIN), -1
 * its end (EOF or an error), -2 past the bound of a frame. */
static int recv_ctl(struct serve_ctx *c)
{
	char buf[CHUNK];
	ssize_t n = recv(c->ctl, buf, sizeof buf, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	if (c->in.len + (size_t)n > FRAME_MAX + FRAME_HEADER_MAX)
		return -2;
	moat_buf_append(&c->in, buf, (size_t)n);
	return c->in.oom ? -2 : 1;
}

/* A pipe emptied (its bytes dropped: a driver's output outside a step). */
static void drain(int fd)
{
	char buf[4096];
	while (fd >= 0 && read(fd, buf, sizeof buf) > 0)
		;
}

/* ---- making a driver ---- */

/* Starts c's driver and waits for its ready frame (c held busy, its fds
 * closed): 0, or -1 with *err (c's fds closed again). */
static int start_driver(struct live *lv, struct serve_ctx *c, struct moat_error *err)
{
	const char *argv[2];
	if (c->lang == MOAT_LANG_PYTHON) {
		argv[0] = "python3";
		argv[1] = MOAT_RUNTIME_MOUNT "/python/moat_session.py";
	} else {
		argv[0] = "node";
		argv[1] = MOAT_RUNTIME_MOUNT "/js/session.cjs";
	}
	char root[4200], mem[64];
	snprintf(root, sizeof root, "MOAT_SESSION_ROOT=%s", c->cwd);
	const char *env[3] = { "MOAT_SESSION_EVENTS=1", root, NULL };
	size_t envc = 2;
	if (c->lang == MOAT_LANG_TYPESCRIPT)
		env[envc++] = "MOAT_SESSION_TS=1"; /* each cell through esbuild */
	if (c->lang == MOAT_LANG_PYTHON && c->memory_mb) {
		snprintf(mem, sizeof mem, "MOAT_SESSION_MEMORY_MB=%llu",
			 (unsigned long long)c->memory_mb);
		env[envc++] = mem;
	}
	struct live_exec ex = { .argv = argv, .argc = 2, .env = env, .envc = envc, .cwd = c->cwd };
	int fds[3], pid;
	if (live_exec_ctl(lv, &ex, &pid, fds, err) < 0)
		return -1;
	c->ctl = fds[0];
	c->out = fds[1];
	c->err = fds[2];
	c->pid = pid;
	moat_buf_free(&c->in);
	int64_t until = moat_mono_ms() + SERVE_CTX_READY_MS;
	struct moat_buf first = { 0 }; /* its stderr's start: why it did not start */
	const char *why = "it did not answer in time";
	for (;;) {
		char *body = NULL;
		size_t blen = 0;
		int f = take_frame(&c->in, &body, &blen);
		if (f > 0) {
			cJSON *j = cJSON_ParseWithLength(body, blen);
			const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
			bool ready = cJSON_IsString(t) && !strcmp(t->valuestring, "ready");
			cJSON_Delete(j);
			free(body);
			if (ready) {
				moat_buf_free(&first);
				drain(c->out);
				drain(c->err);
				return 0;
			}
			why = "it answered wrong";
			break;
		}
		if (f < 0) {
			why = "it answered wrong";
			break;
		}
		int64_t left = until - moat_mono_ms();
		if (left <= 0)
			break;
		struct pollfd pf[3] = { { .fd = c->ctl, .events = POLLIN },
					{ .fd = c->out, .events = POLLIN },
					{ .fd = c->err, .events = POLLIN } };
		(void)poll(pf, 3, left > 500 ? 500 : (int)left);
		drain(c->out);
		char buf[512];
		ssize_t n;
		while ((n = read(c->err, buf, sizeof buf)) > 0)
			if (first.len < 512)
				moat_buf_append(&first, buf, (size_t)n);
		int r = recv_ctl(c);
		if (r == -2) {
			why = "it answered wrong";
			break;
		}
		if (r < 0) {
			why = "it ended";
			break;
		}
	}
	(void)live_signal(lv, pid, SIGKILL, NULL);
	close_fds(c);
	/* its stderr is the sandbox's own (tenant) output: its first line */
	size_t l = first.len ? strcspn(first.data, "\n") : 0;
	if (first.len && l > first.len)
		l = first.len;
	moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "the context's interpreter did not start (%s)%s%.*s",
		       why, l ? ": " : "", (int)(l > 200 ? 200 : l), first.data ? first.data : "");
	moat_buf_free(&first);
	return -1;
}

static bool cwd_ok(const char *cwd)
{
	return live_path_ok(cwd) && strlen(cwd) < 4096;
}

int serve_ctx_create(struct serve_ctxs *cs, struct live *lv, const char *language,
		     const char *cwd, uint64_t memory_mb, struct moat_buf *out,
		     struct moat_error *err)
{
	enum moat_language lang;
	if (!language)
		language = "python";
	if (moat_lang_from_name(language, &lang) < 0 ||
	    (lang != MOAT_LANG_PYTHON && lang != MOAT_LANG_JAVASCRIPT &&
	     lang != MOAT_LANG_TYPESCRIPT))
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL,
				      "\"language\": a context runs \"python\", \"javascript\" or "
				      "\"typescript\"");
	if (!cwd)
		cwd = "/sandbox";
	if (!cwd_ok(cwd))
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL,
				      "\"cwd\": an absolute path under /sandbox or /tmp, without "
				      "\".\" or \"..\" components");
	struct serve_ctx *c = calloc(1, sizeof *c);
	if (!c || !(c->cwd = strdup(cwd)) || serve_new_local_id(c->id, "ctx_") < 0) {
		if (c)
			free(c->cwd);
		free(c);
		return moat_error_oom(err);
	}
	c->lang = lang;
	c->memory_mb = memory_mb;
	c->ctl = c->out = c->err = -1;
	c->busy = true;
	c->refs = 2; /* the table's and ours */
	pthread_mutex_lock(&cs->mu);
	if (cs->n >= SERVE_CTX_MAX) {
		pthread_mutex_unlock(&cs->mu);
		free(c->cwd);
		free(c);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, EAGAIN,
				      "the sandbox has %u contexts already (the most): delete one",
				      SERVE_CTX_MAX);
	}
	cs->n++;
	struct serve_ctx **pp = &cs->list;
	while (*pp)
		pp = &(*pp)->next;
	*pp = c;
	pthread_mutex_unlock(&cs->mu);
	int rc = start_driver(lv, c, err);
	pthread_mutex_lock(&cs->mu);
	c->busy = false;
	if (rc < 0) {
		for (pp = &cs->list; *pp; pp = &(*pp)->next)
			if (*pp == c) {
				*pp = c->next;
				cs->n--;
				unref(c);
				break;
			}
	} else {
		ctx_json(c, out);
	}
	unref(c);
	pthread_cond_broadcast(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
	return rc;
}

void serve_ctx_list(struct serve_ctxs *cs, struct moat_buf *out)
{
	moat_buf_append(out, "{\"contexts\":[", 13);
	pthread_mutex_lock(&cs->mu);
	for (struct serve_ctx *c = cs->list; c; c = c->next) {
		ctx_json(c, out);
		if (c->next)
			moat_buf_append(out, ",", 1);
	}
	pthread_mutex_unlock(&cs->mu);
	moat_buf_append(out, "]}", 2);
}

int serve_ctx_get(struct serve_ctxs *cs, const char *id, struct moat_buf *out,
		  struct moat_error *err)
{
	struct serve_ctx *c = get(cs, id);
	if (!c)
		return moat_error_set(err, MOAT_ERR_CONFIG, ENOENT, "no such context");
	pthread_mutex_lock(&cs->mu);
	ctx_json(c, out);
	unref(c);
	pthread_mutex_unlock(&cs->mu);
	return 0;
}

/* mu held: kill c's driver (its process group) */
static void kill_driver(struct live *lv, struct serve_ctx *c)
{
	if (c->pid > 0 && c->state != CTX_ENDED)
		(void)live_signal(lv, c->pid, SIGKILL, NULL);
}

int serve_ctx_restart(struct serve_ctxs *cs, struct live *lv, const char *id,
		      struct moat_buf *out, struct moat_error *err)
{
	struct serve_ctx *c = get(cs, id);
	if (!c)
		return moat_error_set(err, MOAT_ERR_CONFIG, ENOENT, "no such context");
	pthread_mutex_lock(&cs->mu);
	/* a running step ends on the kill ("killed"), then the driver is ours */
	if (c->busy && c->state == CTX_RUNNING)
		set_over(c, CTX_KILLED, "the context was restarted");
	kill_driver(lv, c);
	while (c->busy)
		pthread_cond_wait(&cs->cv, &cs->mu);
	c->busy = true;
	pthread_mutex_unlock(&cs->mu);
	(void)live_wait(lv, c->pid, KILL_WAIT_MS, &(struct live_proc_info){ 0 }, NULL);
	close_fds(c);
	int rc = start_driver(lv, c, err);
	pthread_mutex_lock(&cs->mu);
	c->busy = false;
	free(c->reason);
	c->reason = NULL;
	c->count = 0;
	c->intr_ms = 0;
	if (rc < 0) {
		c->state = CTX_ENDED;
		c->reason = strdup("its interpreter did not start again");
	} else {
		c->state = CTX_IDLE;
		ctx_json(c, out);
	}
	pthread_cond_broadcast(&cs->cv);
	unref(c);
	pthread_mutex_unlock(&cs->mu);
	return rc;
}

int serve_ctx_delete(struct serve_ctxs *cs, struct live *lv, const char *id,
		     struct moat_error *err)
{
	struct serve_ctx *c = get(cs, id);
	if (!c)
		return moat_error_set(err, MOAT_ERR_CONFIG, ENOENT, "no such context");
	pthread_mutex_lock(&cs->mu);
	bool listed = false;
	for (struct serve_ctx **pp = &cs->list; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			cs->n--;
			listed = true;
			break;
		}
	if (listed) {
		if (c->busy && c->state == CTX_RUNNING)
			set_over(c, CTX_KILLED, "the context was deleted");
		kill_driver(lv, c);
		if (c->state != CTX_KILLED)
			set_over(c, CTX_ENDED, "the context was deleted");
		unref(c); /* the table's */
	}
	unref(c);
	pthread_mutex_unlock(&cs->mu);
	return listed ? 0 : moat_error_set(err, MOAT_ERR_CONFIG, ENOENT, "no such context");
}

int serve_ctx_interrupt(struct serve_ctxs *cs, struct live *lv, const char *id,
			struct moat_error *err)
{
	struct serve_ctx *c = get(cs, id);
	if (!c)
		return moat_error_set(err, MOAT_ERR_CONFIG, ENOENT, "no such context");
	pthread_mutex_lock(&cs->mu);
	int rc = 0;
	if (c->state == CTX_RUNNING && !c->intr_ms) {
		c->intr_ms = moat_mono_ms(); /* the step sends it (its frame out first) */
		rc = 1;
	} else if (c->state == CTX_RUNNING) {
		rc = 1;
	}
	(void)lv;
	unref(c);
	pthread_mutex_unlock(&cs->mu);
	return rc;
}

/* ---- a step ---- */

struct serve_ctx_step {
	struct serve_ctxs *cs;
	struct serve_ctx *c;
	struct live *lv;
	struct serve_ctx_exec ex;
	unsigned seq;
	int64_t t0, deadline, intr_at, kill_at;
	char *frame;
	size_t frame_len, frame_off;
	bool intr_later; /* an interrupt due once the frame is out */
	struct moat_buf out, err;
	bool out_trunc, err_trunc, out_eof, err_eof;
	bool timed_out, interrupted, killed, hung;
	unsigned nresults;
	int fin; /* 0 running, 1 the error event given (DONE next), 2 DONE given */
	bool ended; /* the driver's end seen (no done frame) */
	bool released; /* its context given back (serve_ctx_step_release) */
	int64_t eof_at; /* the socket's end seen at (its pipes then wait a little) */
	char *error_json; /* the done frame's error, for its event */
	char *extra;      /* pool_session_take_done's keys */
	struct moat_result *res;
	char *data; /* the last event's */
	char buf[CHUNK];
};

int serve_ctx_step_begin(struct serve_ctxs *cs, struct live *lv, const char *id,
			 const struct serve_ctx_exec *ex, struct serve_ctx_step **out,
			 struct moat_error *err)
{
	*out = NULL;
	struct serve_ctx *c = get(cs, id);
	if (!c)
		return moat_error_set(err, MOAT_ERR_CONFIG, ENOENT, "no such context");
	struct serve_ctx_step *st = calloc(1, sizeof *st);
	struct moat_result *res = moat_result_new();
	if (!st || !res) {
		free(st);
		moat_result_free(res);
		put(cs, c);
		return moat_error_oom(err);
	}
	pthread_mutex_lock(&cs->mu);
	int e = c->busy ? EBUSY : c->state != CTX_IDLE ? ENOTCONN : 0;
	char *why = NULL;
	if (e == ENOTCONN && asprintf(&why, "the context is %s: %s (restart it)",
				     state_names[c->state], c->reason ? c->reason : "gone") < 0)
		why = NULL;
	if (!e) {
		c->busy = true;
		c->state = CTX_RUNNING;
		c->intr_ms = 0;
		st->seq = ++c->seq;
	}
	pthread_mutex_unlock(&cs->mu);
	if (e) {
		free(st);
		moat_result_free(res);
		put(cs, c);
		if (e == EBUSY)
			return moat_error_set(err, MOAT_ERR_UNAVAILABLE, EBUSY,
					      "a step runs in this context (one at a time)");
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, ENOTCONN, "%s",
			       why ? why : "the context is not live");
		free(why);
		return -1;
	}
	st->cs = cs;
	st->c = c;
	st->lv = lv;
	st->ex = *ex;
	st->ex.code = NULL;
	st->res = res;
	if (!st->ex.max_output)
		st->ex.max_output = SERVE_CTX_MAX_OUTPUT;
	st->t0 = moat_mono_ms();
	st->deadline = st->t0 + (int64_t)(ex->timeout_ms ? ex->timeout_ms : DEFAULT_TIMEOUT_MS);
	/* the run frame (the session protocol's: no stdin, no files) */
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"type\":\"run\",\"seq\":%u,\"code\":", st->seq);
	moat_buf_append_json_string(&b, ex->code ? ex->code : "", ex->code_len);
	static const char tail[] = ",\"stdin\":\"\",\"files\":[]}";
	moat_buf_append(&b, tail, sizeof tail - 1);
	struct moat_buf f = { 0 };
	moat_buf_appendf(&f, "MOATSESS1 %zu\n", b.len);
	moat_buf_append(&f, b.data, b.len);
	moat_buf_free(&b);
	st->frame_len = f.len;
	if (!(st->frame = moat_buf_take(&f))) {
		*out = st;
		serve_ctx_step_end(st);
		return moat_error_oom(err);
	}
	/* what the driver wrote between steps is not this step's */
	drain(c->out);
	drain(c->err);
	*out = st;
	return 0;
}

/* The driver is killed (its process group): why, once. */
static void step_kill(struct serve_ctx_step *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void step_kill(struct serve_ctx_step *st, const char *fmt, ...)
{
	char *why = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&why, fmt, ap) < 0)
		why = NULL;
	va_end(ap);
	pthread_mutex_lock(&st->cs->mu);
	set_over(st->c, CTX_KILLED, "%s", why ? why : "its interpreter was killed");
	kill_driver(st->lv, st->c);
	pthread_mutex_unlock(&st->cs->mu);
	free(why);
	st->killed = true;
	if (!st->kill_at)
		st->kill_at = moat_mono_ms();
}

static void step_interrupt(struct serve_ctx_step *st, int64_t now)
{
	if (st->intr_at)
		return;
	st->intr_at = now;
	if (st->frame_off < st->frame_len)
		st->intr_later = true;
	else
		(void)live_signal(st->lv, st->c->pid, SIGINT, NULL);
}

/* One pipe's chunk: an event, or NONE (empty, or at its end). */
static enum serve_ctx_ev read_pipe(struct serve_ctx_step *st, bool is_err, const char **data,
				   size_t *len)
{
	int fd = is_err ? st->c->err : st->c->out;
	bool *eof = is_err ? &st->err_eof : &st->out_eof;
	if (*eof || fd < 0)
		return SERVE_CTX_EV_NONE;
	ssize_t n = read(fd, st->buf, sizeof st->buf);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		*eof = true;
	if (n <= 0)
		return SERVE_CTX_EV_NONE;
	if (!st->ex.stream) {
		struct moat_buf *b = is_err ? &st->err : &st->out;
		bool *cut = is_err ? &st->err_trunc : &st->out_trunc;
		size_t room = b->len < st->ex.max_output ? st->ex.max_output - b->len : 0;
		size_t k = (size_t)n < room ? (size_t)n : room;
		moat_buf_append(b, st->buf, k);
		if (k < (size_t)n)
			*cut = true;
	}
	*data = st->buf;
	*len = (size_t)n;
	return is_err ? SERVE_CTX_EV_STDERR : SERVE_CTX_EV_STDOUT;
}

/* A frame of the step's: an event (RESULT, ERROR, DONE), NONE (go on), or
 * a breach (the context killed, the step then ends on its end). */
static enum serve_ctx_ev on_frame(struct serve_ctx_step *st, char *body, size_t blen,
				  const char **data, size_t *len)
{
	cJSON *j = cJSON_ParseWithLength(body, blen);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "seq");
	bool seq_ok = cJSON_IsNumber(seq) && seq->valuedouble == (double)st->seq;
	enum serve_ctx_ev ev = SERVE_CTX_EV_NONE;
	if (cJSON_IsString(t) && !strcmp(t->valuestring, "result") && seq_ok &&
	    cJSON_GetArraySize(j) == 3 && st->nresults < RESULTS_MAX) {
		char *r = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "result"));
		if (r && pool_session_result_ok(r, strlen(r))) {
			/* the driver waits for this: the output before the result
			 * has been read (its events are before this one), what the
			 * step writes next comes after */
			static const char ack[] = "MOATSESS1 14\n{\"type\":\"ack\"}";
			(void)send(st->c->ctl, ack, sizeof ack - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
			st->nresults++;
			st->data = r;
			*data = r;
			*len = strlen(r);
			ev = SERVE_CTX_EV_RESULT;
		} else {
			free(r);
			step_kill(st, "its interpreter broke the session protocol");
		}
		cJSON_Delete(j);
		return ev;
	}
	cJSON_Delete(j);
	bool intr = st->timed_out || st->interrupted;
	if (!pool_session_take_done(body, blen, st->seq, intr, st->res, &st->extra)) {
		step_kill(st, "its interpreter broke the session protocol");
		return SERVE_CTX_EV_NONE;
	}
	/* its error, for the event */
	cJSON *x = cJSON_Parse(st->extra);
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(x, "error");
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(x, "executionCount");
	if (cJSON_IsObject(e))
		st->error_json = cJSON_PrintUnformatted(e);
	pthread_mutex_lock(&st->cs->mu);
	if (cJSON_IsNumber(n))
		st->c->count = (long long)n->valuedouble;
	pthread_mutex_unlock(&st->cs->mu);
	cJSON_Delete(x);
	if (st->error_json) {
		st->fin = 1;
		*data = st->error_json;
		*len = strlen(st->error_json);
		return SERVE_CTX_EV_ERROR;
	}
	st->fin = 2;
	return SERVE_CTX_EV_DONE;
}

/* The driver's end without a done frame: why, into the context. */
static void on_end(struct serve_ctx_step *st)
{
	struct live_proc_info info = { 0 };
	(void)live_wait(st->lv, st->c->pid, 1000, &info, NULL);
	pthread_mutex_lock(&st->cs->mu);
	if (info.signal)
		set_over(st->c, CTX_KILLED, "its interpreter was killed (signal %d%s)", info.signal,
			 info.signal == SIGKILL ? ": the sandbox's memory limit (the kernel's OOM "
						  "killer), or a process of the sandbox"
						: "");
	else if (info.exited)
		set_over(st->c, CTX_ENDED, "its interpreter exited with code %d", info.exit_code);
	else
		set_over(st->c, CTX_ENDED, "its interpreter ended");
	st->killed = st->killed || st->c->state == CTX_KILLED;
	pthread_mutex_unlock(&st->cs->mu);
	st->ended = true;
	st->fin = 2;
}

enum serve_ctx_ev serve_ctx_step_next(struct serve_ctx_step *st, int wait_ms, const char **data,
				      size_t *len)
{
	free(st->data);
	st->data = NULL;
	*data = NULL;
	*len = 0;
	if (st->fin == 2)
		return SERVE_CTX_EV_NONE;
	if (st->fin == 1) {
		st->fin = 2;
		return SERVE_CTX_EV_DONE;
	}
	struct serve_ctx *c = st->c;
	int64_t until = moat_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
	for (;;) {
		/* the pipes first: what the driver wrote before a frame */
		enum serve_ctx_ev ev = read_pipe(st, false, data, len);
		if (ev == SERVE_CTX_EV_NONE)
			ev = read_pipe(st, true, data, len);
		if (ev != SERVE_CTX_EV_NONE)
			return ev;
		if (c->ctl >= 0) {
			char *body = NULL;
			size_t blen = 0;
			int f = take_frame(&c->in, &body, &blen);
			if (f < 0) {
				moat_buf_free(&c->in);
				moat_close_fd(&c->ctl);
				step_kill(st, "its interpreter broke the session protocol");
				continue;
			}
			if (f > 0) {
				ev = on_frame(st, body, blen, data, len);
				free(body);
				if (ev != SERVE_CTX_EV_NONE)
					return ev;
				continue;
			}
		}
		int64_t now = moat_mono_ms();
		if (c->ctl < 0 && !st->eof_at)
			st->eof_at = now;
		/* its end: once the pipes are at theirs too (a process it left
		 * behind may hold them: a second at most) */
		if (c->ctl < 0 && ((st->out_eof && st->err_eof) || st->killed || now >= st->eof_at + 1000)) {
			on_end(st);
			return SERVE_CTX_EV_DONE;
		}
		/* the clocks: the timeout, a client's interrupt or hang-up, the grace */
		pthread_mutex_lock(&st->cs->mu);
		int64_t asked = c->intr_ms;
		pthread_mutex_unlock(&st->cs->mu);
		if (!st->intr_at) {
			if (now >= st->deadline) {
				st->timed_out = true;
				step_interrupt(st, now);
			} else if (asked) {
				st->interrupted = true;
				step_interrupt(st, now);
			} else if (st->ex.client_fd >= 0 && !st->ex.hangup_finish &&
				   live_client_gone(st->ex.client_fd)) {
				st->interrupted = st->hung = true;
				step_interrupt(st, now);
			}
		}
		if (st->intr_at && !st->killed && now >= st->intr_at + (int64_t)SERVE_CTX_GRACE_MS)
			step_kill(st, "its interpreter did not stop within %u ms of the interrupt",
				  SERVE_CTX_GRACE_MS);
		if (st->killed && now >= st->kill_at + KILL_WAIT_MS) {
			moat_close_fd(&c->ctl);
			on_end(st);
			return SERVE_CTX_EV_DONE;
		}
		if (now >= until)
			return SERVE_CTX_EV_NONE;
		int64_t next = until;
		if (!st->intr_at && st->deadline < next)
			next = st->deadline;
		if (st->intr_at && !st->killed && st->intr_at + (int64_t)SERVE_CTX_GRACE_MS < next)
			next = st->intr_at + SERVE_CTX_GRACE_MS;
		int ms = next - now > 200 ? 200 : (int)(next - now);
		bool sending = st->frame_off < st->frame_len;
		struct pollfd pf[4] = {
			{ .fd = c->ctl, .events = POLLIN | (sending ? POLLOUT : 0) },
			{ .fd = st->out_eof ? -1 : c->out, .events = POLLIN },
			{ .fd = st->err_eof ? -1 : c->err, .events = POLLIN },
			{ .fd = st->intr_at || st->ex.hangup_finish ? -1 : st->ex.client_fd,
			  .events = POLLRDHUP },
		};
		(void)poll(pf, 4, ms < 0 ? 0 : ms);
		if (c->ctl >= 0 && sending) {
			ssize_t w = send(c->ctl, st->frame + st->frame_off,
					 st->frame_len - st->frame_off, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w > 0)
				st->frame_off += (size_t)w;
			if (st->frame_off == st->frame_len && st->intr_later) {
				st->intr_later = false;
				(void)live_signal(st->lv, c->pid, SIGINT, NULL);
			}
		}
		if (c->ctl >= 0) {
			int r;
			while ((r = recv_ctl(c)) > 0)
				;
			if (r == -2) {
				moat_buf_free(&c->in);
				moat_close_fd(&c->ctl);
				step_kill(st, "its interpreter broke the session protocol");
			} else if (r < 0) {
				moat_close_fd(&c->ctl); /* its end: the frames before it first */
			}
		}
	}
}

static void append_output(struct moat_buf *b, const char *key, const struct moat_buf *o,
			  bool cut)
{
	moat_buf_appendf(b, "\"%s\":", key);
	moat_buf_append_json_string(b, o->data ? o->data : "", o->len);
	moat_buf_appendf(b, ",\"%sTruncated\":%s,", key, cut ? "true" : "false");
}

void serve_ctx_step_answer(struct serve_ctx_step *st, struct moat_buf *out)
{
	cJSON *x = st->extra ? cJSON_Parse(st->extra) : NULL;
	const char *keys[] = { "results", "resultsTruncated", "error", "executionCount" };
	moat_buf_append(out, "{", 1);
	append_output(out, "stdout", &st->out, st->out_trunc);
	append_output(out, "stderr", &st->err, st->err_trunc);
	for (int i = 0; i < 4; i++) {
		cJSON *v = cJSON_GetObjectItemCaseSensitive(x, keys[i]);
		char *s = v ? cJSON_PrintUnformatted(v) : NULL;
		moat_buf_appendf(out, "\"%s\":%s,", keys[i],
				 s ? s : i == 0 ? "[]" : i == 1 ? "false" : "null");
		free(s);
	}
	if (st->extra)
		moat_buf_appendf(out, "\"exitCode\":%d,", st->res->exit_code);
	else
		moat_buf_append(out, "\"exitCode\":null,", 16);
	pthread_mutex_lock(&st->cs->mu);
	const struct serve_ctx *c = st->c;
	moat_buf_appendf(out, "\"timedOut\":%s,\"interrupted\":%s,\"killed\":%s,"
			 "\"context\":{\"id\":\"%s\",\"state\":\"%s\",\"reason\":",
			 st->timed_out ? "true" : "false",
			 st->timed_out || st->interrupted ? "true" : "false",
			 st->killed ? "true" : "false", c->id,
			 state_names[c->state == CTX_RUNNING ? CTX_IDLE : c->state]);
	if (c->reason && c->state != CTX_IDLE && c->state != CTX_RUNNING)
		moat_buf_append_json_string(out, c->reason, strlen(c->reason));
	else
		moat_buf_append(out, "null", 4);
	pthread_mutex_unlock(&st->cs->mu);
	moat_buf_appendf(out, "},\"durationMs\":%lld,\"warnings\":[",
			 (long long)(moat_mono_ms() - st->t0));
	bool first = true;
	for (size_t i = 0; i < st->res->warnings_count; i++, first = false) {
		if (!first)
			moat_buf_append(out, ",", 1);
		moat_buf_append_json_string(out, st->res->warnings[i], strlen(st->res->warnings[i]));
	}
	if (st->out_trunc || st->err_trunc) {
		if (!first)
			moat_buf_append(out, ",", 1);
		moat_buf_appendf(out, "\"the step's output was cut: %llu bytes of stdout and of "
				 "stderr are kept (stdoutTruncated, stderrTruncated)\"",
				 (unsigned long long)st->ex.max_output);
	}
	moat_buf_append(out, "]}", 2);
	cJSON_Delete(x);
}

void serve_ctx_step_release(struct serve_ctx_step *st)
{
	if (!st || st->fin != 2 || st->released)
		return;
	st->released = true;
	pthread_mutex_lock(&st->cs->mu);
	if (st->c->state == CTX_RUNNING)
		st->c->state = CTX_IDLE;
	st->c->busy = false;
	st->c->intr_ms = 0;
	pthread_cond_broadcast(&st->cs->cv);
	pthread_mutex_unlock(&st->cs->mu);
}

void serve_ctx_step_end(struct serve_ctx_step *st)
{
	if (!st)
		return;
	if (st->fin != 2) {
		/* not run to its end: interrupted (as a hang-up), unless it may
		 * finish: either way run out here, so that the context is free */
		if (!st->ex.hangup_finish && !st->intr_at) {
			st->interrupted = true;
			step_interrupt(st, moat_mono_ms());
		}
		const char *d;
		size_t l;
		while (st->fin != 2)
			(void)serve_ctx_step_next(st, 500, &d, &l);
	}
	serve_ctx_step_release(st);
	pthread_mutex_lock(&st->cs->mu);
	unref(st->c);
	pthread_mutex_unlock(&st->cs->mu);
	free(st->data);
	free(st->frame);
	free(st->error_json);
	free(st->extra);
	moat_result_free(st->res);
	moat_buf_free(&st->out);
	moat_buf_free(&st->err);
	free(st);
}
