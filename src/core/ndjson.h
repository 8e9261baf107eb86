/* The streamed result (docs/SERVE.md, "Streaming"): one JSON object a line,
 * {"type":"stdout"|"stderr","data":...} as the program writes, then one
 * {"type":"result",...}. Shared by moat serve's /v1/run and moat exec
 * --stream. */
#ifndef MOAT_CORE_NDJSON_H
#define MOAT_CORE_NDJSON_H

#include <stddef.h>

#include "core/core.h"
#include "moat.h"

/* Program bytes one line carries at most: a line is then at most
 * 6 * MOAT_NDJSON_CHUNK + 64 bytes (a control byte is escaped six-fold). */
#define MOAT_NDJSON_CHUNK (64u * 1024u)
#define MOAT_NDJSON_LINE_MAX (6u * MOAT_NDJSON_CHUNK + 64u)

/* Per stream: the start of a UTF-8 sequence a read cut, carried over to
 * the next chunk of that stream. */
struct moat_ndjson {
	unsigned char carry[2][4];
	size_t carry_len[2];
};

/* Appends the lines for len bytes of stream: text when they are UTF-8
 * (NUL and control bytes escaped), else base64 ("encoding":"base64"); a
 * sequence cut at the end is kept for the next call. */
void moat_ndjson_output(struct moat_ndjson *nj, struct moat_buf *out, enum moat_stream stream,
			const char *buf, size_t len);
/* The bytes still carried, as base64 lines (before the result line). */
void moat_ndjson_flush(struct moat_ndjson *nj, struct moat_buf *out);
/* The result line: moat_result_to_json's object with "type":"result" and
 * "streamed":true first, '\n'-terminated; malloc'd, NULL on OOM. */
char *moat_ndjson_result(const struct moat_result *res);

#endif
