/* The handler's framed response on its stdout (SERVE.md, "The handler
 * protocol"): a head line, length-prefixed body chunks, then "end" or
 * "error ...". Everything in it is the sandboxed program's: parsed strictly,
 * bounded, and any deviation fails the response. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve/internal.h"

#define HEAD_MAGIC "MOAT/1 "
#define LEN_LINE_MAX 20u
#define ERROR_MAX 500u

void frame_init(struct frame_parser *p, uint64_t body_cap, const struct frame_sink *sink)
{
	memset(p, 0, sizeof *p);
	p->state = FRAME_HEAD;
	p->body_cap = body_cap;
	p->sink = *sink;
}

void frame_free(struct frame_parser *p)
{
	moat_buf_free(&p->line);
	free(p->error);
	p->error = NULL;
}

static void fail(struct frame_parser *p, const char *fmt, const char *detail, size_t dlen)
{
	if (p->state == FRAME_FAILED)
		return;
	p->state = FRAME_FAILED;
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "%s", fmt);
	if (detail) {
		/* the program's words: one line, printable, bounded */
		for (size_t i = 0; i < dlen && i < ERROR_MAX; i++) {
			unsigned char c = (unsigned char)detail[i];
			char ch = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
			moat_buf_append(&b, &ch, 1);
		}
	}
	free(p->error);
	p->error = moat_buf_take(&b);
}

static void fail_oom(struct frame_parser *p)
{
	fail(p, "out of memory", NULL, 0);
}

static const char *const dropped[] = {
	"content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
	"trailer", "proxy-connection",
};

bool frame_header_dropped(const char *name)
{
	for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
		if (!strcasecmp(name, dropped[i]))
			return true;
	return false;
}

bool frame_header_ok(const char *name, const char *value)
{
	if (!*name || strlen(name) > 256)
		return false;
	for (const char *s = name; *s; s++)
		if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s)))
			return false;
	if (strlen(value) > 8192)
		return false;
	for (const char *s = value; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

/* The head: {"status": 200..599, "headers": [[name, value]...]}. */
static void take_head(struct frame_parser *p, const char *json, size_t len)
{
	/* strict: one object, nothing after it, no \u0000 (cJSON would cut a
	 * string there), no key twice */
	bool nul = false;
	struct moat_error perr = { 0 };
	if (moat_json_prescan(json, len, &nul, &perr) < 0 || nul) {
		moat_error_clear(&perr);
		fail(p, "the handler's response head is malformed", NULL, 0);
		return;
	}
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
	if (root && end && (size_t)(end - json) < len) {
		cJSON_Delete(root);
		root = NULL;
	}
	for (const cJSON *a = root ? root->child : NULL; a; a = a->next)
		for (const cJSON *b = a->next; b; b = b->next)
			if (a->string && b->string && !strcmp(a->string, b->string)) {
				cJSON_Delete(root);
				fail(p, "the handler's response head is malformed", NULL, 0);
				return;
			}
	const cJSON *st = root ? cJSON_GetObjectItemCaseSensitive(root, "status") : NULL;
	const cJSON *hs = root ? cJSON_GetObjectItemCaseSensitive(root, "headers") : NULL;
	char **headers = NULL;
	size_t count = 0;
	if (!cJSON_IsObject(root) || !cJSON_IsNumber(st) || (hs && !cJSON_IsArray(hs))) {
		fail(p, "the handler's response head is malformed", NULL, 0);
		goto out;
	}
	double s = st->valuedouble;
	if (s < 200 || s > 599 || s != (double)(int)s) {
		fail(p, "the handler's response status is not an integer in 200..599", NULL, 0);
		goto out;
	}
	size_t n = hs ? (size_t)cJSON_GetArraySize(hs) : 0;
	if (n > SERVE_MAX_HANDLER_HEADERS) {
		fail(p, "the handler's response has more than 100 headers", NULL, 0);
		goto out;
	}
	if (n && !(headers = calloc(2 * n, sizeof *headers))) {
		fail_oom(p);
		goto out;
	}
	for (const cJSON *h = hs ? hs->child : NULL; h; h = h->next) {
		const cJSON *k = cJSON_GetArrayItem(h, 0), *v = cJSON_GetArrayItem(h, 1);
		if (!cJSON_IsArray(h) || cJSON_GetArraySize(h) != 2 || !cJSON_IsString(k) ||
		    !cJSON_IsString(v) || !frame_header_ok(k->valuestring, v->valuestring)) {
			fail(p, "the handler's response has an invalid header (a name must be an HTTP "
				"token, a value must not hold control characters)", NULL, 0);
			goto out;
		}
		if (frame_header_dropped(k->valuestring))
			continue;
		if (!(headers[2 * count] = strdup(k->valuestring)) ||
		    !(headers[2 * count + 1] = strdup(v->valuestring))) {
			count++;
			fail_oom(p);
			goto out;
		}
		count++;
	}
	p->head_seen = true;
	p->state = FRAME_LEN;
	if (p->sink.head) {
		p->sink.head(p->sink.ctx, (int)s, headers, count);
		headers = NULL; /* the sink owns them */
	}
out:
	if (headers) {
		for (size_t i = 0; i < 2 * count; i++)
			free(headers[i]);
		free(headers);
	}
	cJSON_Delete(root);
}

/* A complete line (without its '\n') in the head or length state. */
static void take_line(struct frame_parser *p, const char *l, size_t len)
{
	if (len >= 6 && !memcmp(l, "error ", 6)) {
		if (len == 6)
			fail(p, "the handler failed (no message)", NULL, 0);
		else
			fail(p, "", l + 6, len - 6);
		return;
	}
	if (p->state == FRAME_HEAD) {
		if (len < sizeof HEAD_MAGIC - 1 || memcmp(l, HEAD_MAGIC, sizeof HEAD_MAGIC - 1)) {
			fail(p, "the handler wrote no response head", NULL, 0);
			return;
		}
		take_head(p, l + sizeof HEAD_MAGIC - 1, len - (sizeof HEAD_MAGIC - 1));
		return;
	}
	if (len == 3 && !memcmp(l, "end", 3)) {
		p->state = FRAME_END;
		return;
	}
	uint64_t n = 0;
	if (len == 0 || len > LEN_LINE_MAX || l[0] == '0') {
		fail(p, "the handler's response body is malformed", NULL, 0);
		return;
	}
	for (size_t i = 0; i < len; i++) {
		if (l[i] < '0' || l[i] > '9' || n > (UINT64_MAX - 9) / 10) {
			fail(p, "the handler's response body is malformed", NULL, 0);
			return;
		}
		n = n * 10 + (uint64_t)(l[i] - '0');
	}
	if (n > p->body_cap - p->body_total) {
		fail(p, "the handler's response body is larger than maxResponseBytes", NULL, 0);
		return;
	}
	p->remaining = n;
	p->state = FRAME_BODY;
}

void frame_feed(struct frame_parser *p, const char *buf, size_t len)
{
	size_t i = 0;
	while (i < len && p->state != FRAME_FAILED) {
		if (p->state == FRAME_END) {
			fail(p, "the handler wrote after the end of its response", NULL, 0);
			return;
		}
		if (p->state == FRAME_BODY) {
			size_t take = len - i < p->remaining ? len - i : (size_t)p->remaining;
			if (p->sink.body)
				p->sink.body(p->sink.ctx, buf + i, take);
			p->remaining -= take;
			p->body_total += take;
			i += take;
			if (p->remaining == 0)
				p->state = FRAME_LEN;
			continue;
		}
		const char *nl = memchr(buf + i, '\n', len - i);
		size_t seg = nl ? (size_t)(nl - (buf + i)) : len - i;
		size_t max = p->state == FRAME_HEAD ? SERVE_MAX_HEAD_BYTES : LEN_LINE_MAX + 520;
		if (p->line.len + seg > max) {
			fail(p, p->state == FRAME_HEAD ? "the handler's response head is too large"
						       : "the handler's response body is malformed",
			     NULL, 0);
			return;
		}
		moat_buf_append(&p->line, buf + i, seg);
		if (p->line.oom) {
			fail_oom(p);
			return;
		}
		i += seg;
		if (!nl)
			return;
		i++; /* the '\n' */
		take_line(p, p->line.data ? p->line.data : "", p->line.len);
		p->line.len = 0;
	}
}

void frame_finish(struct frame_parser *p)
{
	if (p->state == FRAME_END || p->state == FRAME_FAILED)
		return;
	fail(p, p->head_seen ? "the handler ended before its response was complete"
			     : "the handler ended without a response", NULL, 0);
}
