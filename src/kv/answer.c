/* The answer a store operation fills, below every file of kv/ that fills
 * one: kv.c's front and the backends (redis.c, sqlite.c) all call down to
 * it, so none of them calls back up into another (make layers). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys.h"
#include "kv/internal.h"

int kv_fail(struct moat_kv_answer *a, int rc, const char *kind, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *m = moat_vformat(fmt, ap);
	va_end(ap);
	a->status = MOAT_KV_ERROR;
	a->kind = kind;
	a->msg.len = 0;
	a->detail.len = 0;
	if (m) {
		/* one line: a backend's message may carry newlines */
		for (char *c = m; *c; c++)
			if (*c == '\n' || *c == '\r')
				*c = ' ';
		moat_buf_append(&a->msg, m, strlen(m));
		free(m);
	}
	return rc;
}

void kv_detail(struct moat_kv_answer *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *m = moat_vformat(fmt, ap);
	va_end(ap);
	a->detail.len = 0;
	if (m) {
		for (char *c = m; *c; c++)
			if (*c == '\n' || *c == '\r')
				*c = ' ';
		moat_buf_append(&a->detail, m, strlen(m));
		free(m);
	}
}

void kv_put_item(struct moat_buf *b, const char *s, size_t len)
{
	char le[4];
	kv_le32_put(le, (uint32_t)len);
	moat_buf_append(b, le, 4);
	moat_buf_append(b, s, len);
}

void moat_kv_answer_reset(struct moat_kv_answer *a)
{
	moat_buf_free(&a->msg);
	moat_buf_free(&a->detail);
	moat_buf_free(&a->data);
	memset(a, 0, sizeof *a);
}
