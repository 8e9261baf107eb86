/* serve/log: the service's log lines, one writer for all threads. Text
 * ("moat serve: ..." on stderr) for a terminal; with --json-log every line
 * is one JSON object (on stdout), as a log collector in a pod wants: the
 * access lines as they are, the notices as {"ts","level","component","msg"}. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sys.h"
#include "serve/internal.h"

void serve_log_init(struct serve_log *l, FILE *f, bool json)
{
	l->f = f;
	l->json = json;
	pthread_mutex_init(&l->mu, NULL);
}

void serve_log_destroy(struct serve_log *l)
{
	pthread_mutex_destroy(&l->mu);
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
	pthread_mutex_lock(&l->mu);
	fwrite(line, 1, len, l->f);
	fflush(l->f);
	pthread_mutex_unlock(&l->mu);
}

void serve_log_vnotice(struct serve_log *l, const char *level, const char *component,
		       const char *fmt, va_list ap)
{
	char *msg = moat_vformat(fmt, ap);
	if (!msg)
		return;
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n') /* libmicrohttpd ends its own */
		n--;
	struct moat_buf b = { 0 };
	if (l->json) {
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
	if (!b.oom && b.data)
		serve_log_write(l, b.data, b.len);
	moat_buf_free(&b);
	free(msg);
}

void serve_log_notice(struct serve_log *l, const char *level, const char *component,
		      const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	serve_log_vnotice(l, level, component, fmt, ap);
	va_end(ap);
}
