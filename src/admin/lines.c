/* The streamed result's lines for moat exec --stream (moat_admin.h,
 * "streamed results"): core/ndjson.h's encoder behind a face the CLI may
 * use, with the bytes not yet written kept in one buffer. */
#include <stdlib.h>
#include <string.h>

#include "moat_admin.h"
#include "core/core.h"
#include "core/ndjson.h"

struct moat_lines {
	struct moat_ndjson nj;
	struct moat_buf buf; /* lines not yet written: data[off..len) */
	size_t off;
};

struct moat_lines *moat_lines_new(void)
{
	return calloc(1, sizeof(struct moat_lines));
}

void moat_lines_free(struct moat_lines *l)
{
	if (!l)
		return;
	moat_buf_free(&l->buf);
	free(l);
}

/* what was written goes, so the buffer holds only what waits */
static void compact(struct moat_lines *l)
{
	moat_buf_drop_front(&l->buf, l->off);
	l->off = 0;
}

void moat_lines_output(struct moat_lines *l, enum moat_stream stream, const char *buf, size_t len)
{
	compact(l);
	moat_ndjson_output(&l->nj, &l->buf, stream, buf, len);
}

void moat_lines_flush(struct moat_lines *l)
{
	compact(l);
	moat_ndjson_flush(&l->nj, &l->buf);
}

size_t moat_lines_pending(const struct moat_lines *l, const char **data)
{
	*data = l->buf.data ? l->buf.data + l->off : NULL;
	return l->buf.len - l->off;
}

void moat_lines_consume(struct moat_lines *l, size_t n)
{
	size_t left = l->buf.len - l->off;
	l->off += n < left ? n : left;
}

char *moat_lines_result(const struct moat_result *res)
{
	return moat_ndjson_result(res);
}
