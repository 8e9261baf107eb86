/* The streamed result's lines (core/ndjson.h). */
#include <stdlib.h>
#include <string.h>

#include "core/ndjson.h"

static void line(struct moat_buf *out, enum moat_stream stream, const unsigned char *p,
		 size_t len, bool text)
{
	const char *head = stream == MOAT_STDERR ? "{\"type\":\"stderr\",\"data\":"
						 : "{\"type\":\"stdout\",\"data\":";
	moat_buf_append(out, head, strlen(head));
	if (text)
		moat_buf_append_json_string(out, (const char *)p, len);
	else
		moat_buf_append_base64(out, p, len);
	if (!text)
		moat_buf_append(out, ",\"encoding\":\"base64\"", 20);
	moat_buf_append(out, "}\n", 2);
}

/* The length of the UTF-8 sequence p[0] starts when p[0] is a lead byte
 * and the bytes after it (of avail) are continuation bytes; 0 otherwise. */
static size_t utf8_need(const unsigned char *p, size_t avail)
{
	size_t need = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
		      : p[0] >= 0xe0 && p[0] <= 0xef ? 3
		      : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
						     : 0;
	for (size_t i = 1; need && i < need && i < avail; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return need;
}

void moat_ndjson_output(struct moat_ndjson *nj, struct moat_buf *out, enum moat_stream stream,
			const char *buf, size_t len)
{
	int k = stream == MOAT_STDERR;
	size_t total = nj->carry_len[k] + len;
	unsigned char *p = malloc(total ? total : 1);
	if (!p) {
		out->oom = true;
		return;
	}
	memcpy(p, nj->carry[k], nj->carry_len[k]);
	if (len)
		memcpy(p + nj->carry_len[k], buf, len);
	nj->carry_len[k] = 0;
	size_t start = 0;
	while (start < total) {
		size_t end = total - start > MOAT_NDJSON_CHUNK ? start + MOAT_NDJSON_CHUNK : total;
		size_t i = start, n;
		while (i < end && (n = moat_utf8_char_len((const char *)p + i, end - i)) > 0)
			i += n;
		if (i == end) {
			line(out, stream, p + start, end - start, true);
			start = end;
			continue;
		}
		size_t need = utf8_need(p + i, total - i);
		if (need && total - i < need) { /* cut by the read: the rest comes next */
			if (i > start)
				line(out, stream, p + start, i - start, true);
			memcpy(nj->carry[k], p + i, total - i);
			nj->carry_len[k] = total - i;
			break;
		}
		if (need && i + need > end && i > start) { /* cut by the chunk's bound */
			line(out, stream, p + start, i - start, true);
			start = i;
			continue;
		}
		line(out, stream, p + start, end - start, false); /* not UTF-8 */
		start = end;
	}
	free(p);
}

void moat_ndjson_flush(struct moat_ndjson *nj, struct moat_buf *out)
{
	for (int k = 0; k < 2; k++) {
		if (nj->carry_len[k])
			line(out, k ? MOAT_STDERR : MOAT_STDOUT, nj->carry[k], nj->carry_len[k], false);
		nj->carry_len[k] = 0;
	}
}

char *moat_ndjson_result(const struct moat_result *res)
{
	char *json = moat_result_to_json(res);
	if (!json)
		return NULL;
	struct moat_buf b = { 0 };
	static const char head[] = "{\"type\":\"result\",\"streamed\":true,";
	moat_buf_append(&b, head, sizeof head - 1);
	moat_buf_append(&b, json + 1, strlen(json + 1)); /* after its '{' */
	moat_buf_append(&b, "\n", 1);
	free(json);
	return moat_buf_take(&b);
}
