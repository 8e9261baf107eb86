/* Fuzz: a handler's framed response on its stdout (frame_init, frame_feed,
 * frame_finish): the sandboxed program writes every byte of it. Input: two
 * bytes for the body cap, one for the size of the pieces the bytes after
 * them are fed in (as pipe reads would cut them), then the stream. The sink
 * checks what the parser promises: one head, a status in 200..599, valid
 * headers, body bytes only after the head and never past the cap. */
#include "serve/internal.h"
#include "fuzz.h"

struct seen {
	int heads;
	uint64_t body;
	uint64_t cap;
};

static void on_head(void *ctx, int status, char **headers, size_t count)
{
	struct seen *s = ctx;
	if (s->heads++ || status < 200 || status > 599)
		abort();
	for (size_t i = 0; i < count; i++) {
		if (!frame_header_ok(headers[2 * i], headers[2 * i + 1]) ||
		    frame_header_dropped(headers[2 * i]))
			abort();
		free(headers[2 * i]);
		free(headers[2 * i + 1]);
	}
	free(headers);
}

static void on_body(void *ctx, const char *buf, size_t len)
{
	struct seen *s = ctx;
	if (!s->heads)
		abort();
	if (len) {
		volatile char first = buf[0], last = buf[len - 1]; /* in bounds (ASan) */
		(void)first;
		(void)last;
	}
	s->body += len;
	if (s->body > s->cap)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	struct seen s = { .cap = ((uint64_t)data[0] << 8 | data[1]) * 16 };
	size_t piece = (size_t)data[2] + 1;
	data += 3;
	size -= 3;
	struct frame_sink sink = { .head = on_head, .body = on_body, .ctx = &s };
	struct frame_parser p;
	frame_init(&p, s.cap, &sink);
	for (size_t off = 0; off < size;) {
		size_t n = size - off < piece ? size - off : piece;
		char *b = fuzz_copy(data + off, n);
		frame_feed(&p, b, n);
		free(b);
		off += n;
	}
	frame_finish(&p);
	if ((p.state == FRAME_FAILED) != (p.error != NULL))
		abort();
	if (p.state != FRAME_FAILED && p.state != FRAME_END)
		abort();
	frame_free(&p);
	return 0;
}
