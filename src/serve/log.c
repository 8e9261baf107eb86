/* serve/log: the service's log lines, one writer for all threads. Text
 * ("moat serve: ..." on stderr) for a terminal; with --json-log every line
 * is one JSON object (on stdout), as a log collector in a pod wants: the
 * access lines as they are, the notices as {"ts","level","component","msg"}. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/sys.h"
#include "serve/internal.h"

/* Logging never blocks a request: a line goes into a ring bounded in bytes
 * and one writer thread drains it to the fd. When whatever reads the log
 * stalls (a full pipe, a stuck log shipper) only that thread waits; a line
 * that does not fit is dropped and counted (/metrics), and once the reader
 * is back the writer says how many were lost. */
#define LOG_RING_BYTES (1024u * 1024u)
#define LOG_CHUNK (64u * 1024u) /* written at once */
#define LOG_DRAIN_MS 2000       /* what the stop waits for the rest */
#define LOG_BATCH_MS 10         /* a quiet writer's wait for the rest of a burst */

struct log_ring {
	pthread_mutex_t mu;
	pthread_cond_t more, idle; /* lines queued; the ring empty and nothing in write() */
	int fd;
	bool json;
	char *data, *chunk; /* the ring; what the writer has in write() */
	size_t head, len; /* the queued bytes: data[head..], wrapping */
	bool writing, stop;
	int refs; /* the log's and the writer's: the last one frees */
	uint64_t dropped, reported;
};

static void ring_unref(struct log_ring *r)
{
	pthread_mutex_lock(&r->mu);
	int left = --r->refs;
	pthread_mutex_unlock(&r->mu);
	if (left)
		return;
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->more);
	pthread_cond_destroy(&r->idle);
	free(r->data);
	free(r->chunk);
	free(r);
}

static void ring_vnotice(struct log_ring *r, const char *level, const char *component,
			 const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
static void ring_notice(struct log_ring *r, const char *level, const char *component,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Appends a whole line or nothing (r->mu held). */
static bool ring_put(struct log_ring *r, const char *line, size_t len)
{
	if (len > LOG_RING_BYTES - r->len) {
		r->dropped++;
		return false;
	}
	size_t tail = (r->head + r->len) % LOG_RING_BYTES;
	size_t first = LOG_RING_BYTES - tail < len ? LOG_RING_BYTES - tail : len;
	memcpy(r->data + tail, line, first);
	memcpy(r->data, line + first, len - first);
	size_t before = r->len;
	r->len += len;
	/* the writer is woken by the first line after a quiet spell (it then
	 * waits LOG_BATCH_MS for the rest of the burst), and at half full */
	if (before == 0 || (before < LOG_RING_BYTES / 2 && r->len >= LOG_RING_BYTES / 2))
		pthread_cond_signal(&r->more);
	return true;
}

static void *log_writer(void *arg)
{
	struct log_ring *r = arg;
	/* a reader that went away is an error of write(), not the process's end */
	sigset_t pipe;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL);
	pthread_mutex_lock(&r->mu);
	for (;;) {
		if (!r->len && r->dropped != r->reported) {
			/* the reader is back: say what it missed (a line of its own, so
			 * the count is the drops before it) */
			uint64_t n = r->dropped - r->reported;
			r->reported = r->dropped;
			r->writing = true; /* the stop waits for this line too */
			pthread_mutex_unlock(&r->mu);
			ring_notice(r, "warn", "serve",
				    "%llu log line(s) dropped: the log's reader was too slow",
				    (unsigned long long)n);
			pthread_mutex_lock(&r->mu);
			r->writing = false;
			continue;
		}
		if (!r->len) {
			pthread_cond_broadcast(&r->idle);
			if (r->stop)
				break;
			pthread_cond_wait(&r->more, &r->mu);
			/* a line costs its request no wake-up of this thread but
			 * the first of a burst, which is written with the rest */
			if (r->len && !r->stop && r->len < LOG_RING_BYTES / 2)
				moat_cond_wait_ms(&r->more, &r->mu, LOG_BATCH_MS);
			continue;
		}
		size_t n = LOG_RING_BYTES - r->head < r->len ? LOG_RING_BYTES - r->head : r->len;
		if (n > LOG_CHUNK)
			n = LOG_CHUNK;
		memcpy(r->chunk, r->data + r->head, n);
		r->head = (r->head + n) % LOG_RING_BYTES;
		r->len -= n;
		r->writing = true;
		pthread_mutex_unlock(&r->mu);
		(void)moat_write_all(r->fd, r->chunk, n); /* nowhere to say it failed */
		pthread_mutex_lock(&r->mu);
		r->writing = false;
	}
	pthread_mutex_unlock(&r->mu);
	ring_unref(r);
	return NULL;
}

int serve_log_init(struct serve_log *l, FILE *f, bool json, struct moat_error *err)
{
	memset(l, 0, sizeof *l);
	l->json = json;
	fflush(f); /* what stdio holds goes first: from here on the fd is the writer's */
	struct log_ring *r = calloc(1, sizeof *r);
	if (!r || !(r->data = malloc(LOG_RING_BYTES)) || !(r->chunk = malloc(LOG_CHUNK))) {
		if (r)
			free(r->data);
		free(r);
		return moat_error_oom(err);
	}
	r->fd = fileno(f);
	r->json = json;
	r->refs = 2;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->more, NULL);
	pthread_cond_init(&r->idle, NULL);
	l->ring = r;
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&t, &attr, log_writer, r);
	pthread_attr_destroy(&attr);
	if (e) {
		r->refs = 1;
		ring_unref(r);
		l->ring = NULL;
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
				      "moat serve: cannot start the log writer: %s", strerror(e));
	}
	return 0;
}

/* What is queued gets LOG_DRAIN_MS to be written; a writer still stuck in
 * write() then is left behind with the ring (it frees it if it ever
 * returns): the stop never hangs on the log's reader. */
void serve_log_destroy(struct serve_log *l)
{
	struct log_ring *r = l->ring;
	if (!r)
		return;
	int64_t deadline = moat_mono_ms() + LOG_DRAIN_MS;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_signal(&r->more);
	while ((r->len || r->writing) && moat_mono_ms() < deadline)
		moat_cond_wait_ms(&r->idle, &r->mu, 50);
	pthread_mutex_unlock(&r->mu);
	ring_unref(r);
	l->ring = NULL;
}

uint64_t serve_log_dropped(struct serve_log *l)
{
	struct log_ring *r = l->ring;
	if (!r)
		return 0;
	pthread_mutex_lock(&r->mu);
	uint64_t n = r->dropped;
	pthread_mutex_unlock(&r->mu);
	return n;
}

/* "2026-12-03T08:30:00.123Z" */
void serve_log_ts(struct moat_buf *b)
{
	char ts[64];
	struct timespec tv;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &tv);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
	moat_buf_appendf(b, "%s.%03ldZ", ts, tv.tv_nsec / 1000000);
}

void serve_log_write(struct serve_log *l, const char *line, size_t len)
{
	struct log_ring *r = l->ring;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	ring_put(r, line, len);
	pthread_mutex_unlock(&r->mu);
}

static void ring_vnotice(struct log_ring *r, const char *level, const char *component,
			 const char *fmt, va_list ap)
{
	char *msg = moat_vformat(fmt, ap);
	if (!msg)
		return;
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n') /* libmicrohttpd ends its own */
		n--;
	struct moat_buf b = { 0 };
	if (r->json) {
		moat_buf_append(&b, "{\"ts\":\"", 7);
		serve_log_ts(&b);
		moat_buf_appendf(&b, "\",\"level\":\"%s\",\"component\":\"%s\",\"msg\":", level,
				 component);
		moat_buf_append_json_string(&b, msg, n);
		moat_buf_append(&b, "}\n", 2);
	} else {
		bool own = !strcmp(component, "serve"); /* the text form has no level */
		moat_buf_appendf(&b, "moat serve: %s%s", own ? "" : component, own ? "" : ": ");
		moat_buf_append(&b, msg, n);
		moat_buf_append(&b, "\n", 1);
	}
	if (!b.oom && b.data) {
		pthread_mutex_lock(&r->mu);
		ring_put(r, b.data, b.len);
		pthread_mutex_unlock(&r->mu);
	}
	moat_buf_free(&b);
	free(msg);
}

static void ring_notice(struct log_ring *r, const char *level, const char *component,
			const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ring_vnotice(r, level, component, fmt, ap);
	va_end(ap);
}

void serve_log_vnotice(struct serve_log *l, const char *level, const char *component,
		       const char *fmt, va_list ap)
{
	if (l->ring)
		ring_vnotice(l->ring, level, component, fmt, ap);
}

void serve_log_notice(struct serve_log *l, const char *level, const char *component,
		      const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	serve_log_vnotice(l, level, component, fmt, ap);
	va_end(ap);
}
