/* Growable byte buffer and a JSON string writer that always produces valid
 * UTF-8 from arbitrary bytes. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/sys.h"


/* Makes room for `extra` more bytes plus a trailing NUL. */
static bool buf_reserve(struct moat_buf *b, size_t extra)
{
	if (b->oom)
		return false;
	if (extra > SIZE_MAX - 1 - b->len) {
		b->oom = true;
		return false;
	}
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need) {
		if (cap > SIZE_MAX / 2) {
			cap = need;
			break;
		}
		cap *= 2;
	}
	char *p = realloc(b->data, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->data = p;
	b->cap = cap;
	return true;
}

void moat_buf_append(struct moat_buf *b, const void *data, size_t len)
{
	if (len == 0 || !buf_reserve(b, len))
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void moat_buf_appendf(struct moat_buf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	va_list ap;
	va_start(ap, fmt);
	char *s = moat_vformat(fmt, ap);
	va_end(ap);
	if (!s) {
		b->oom = true; /* formatting failed: treat like an allocation failure */
		return;
	}
	moat_buf_append(b, s, strlen(s));
	free(s);
}

/* Length of the valid UTF-8 sequence starting at s (RFC 3629: no overlongs,
 * no surrogates, nothing above U+10FFFF), or 0 if s[0] does not start one. */
static size_t utf8_seq_len(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	size_t n;
	unsigned char lo = 0x80, hi = 0xBF; /* bounds of the second byte */

	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0; /* overlong */
		else if (c == 0xED)
			hi = 0x9F; /* surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90; /* overlong */
		else if (c == 0xF4)
			hi = 0x8F; /* > U+10FFFF */
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

size_t moat_utf8_char_len(const char *str, size_t avail)
{
	const unsigned char *s = (const unsigned char *)str;
	return s[0] < 0x80 ? 1 : utf8_seq_len(s, avail);
}

bool moat_utf8_text(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	for (size_t i = 0; i < len;) {
		if (s[i] == 0)
			return false;
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		size_t n = utf8_seq_len(s + i, len - i);
		if (n == 0)
			return false;
		i += n;
	}
	return true;
}

void moat_buf_append_json_string(struct moat_buf *b, const char *str, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	moat_buf_append(b, "\"", 1);
	while (i < len && !b->oom) {
		/* Copy the longest run that needs no escaping in one go. */
		size_t run = i;
		while (run < len && s[run] >= 0x20 && s[run] < 0x7F && s[run] != '"' &&
		       s[run] != '\\')
			run++;
		if (run > i) {
			moat_buf_append(b, s + i, run - i);
			i = run;
			continue;
		}
		unsigned char c = s[i];
		if (c >= 0x80) {
			size_t n = utf8_seq_len(s + i, len - i);
			if (n) {
				moat_buf_append(b, s + i, n);
				i += n;
			} else {
				moat_buf_append(b, "\xEF\xBF\xBD", 3);
				i++;
			}
			continue;
		}
		char esc[6];
		switch (c) {
		case '"': moat_buf_append(b, "\\\"", 2); break;
		case '\\': moat_buf_append(b, "\\\\", 2); break;
		case '\b': moat_buf_append(b, "\\b", 2); break;
		case '\f': moat_buf_append(b, "\\f", 2); break;
		case '\n': moat_buf_append(b, "\\n", 2); break;
		case '\r': moat_buf_append(b, "\\r", 2); break;
		case '\t': moat_buf_append(b, "\\t", 2); break;
		default: /* other C0 controls, NUL and DEL */
			esc[0] = '\\';
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xF];
			moat_buf_append(b, esc, sizeof esc);
			break;
		}
		i++;
	}
	moat_buf_append(b, "\"", 1);
}

size_t moat_json_string_fit(const char *str, size_t len, size_t max, size_t *escaped)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, out = 0;
	while (i < len) {
		unsigned char c = s[i];
		size_t in = 1, w;
		if (c >= 0x80) { /* as moat_buf_append_json_string: a sequence or U+FFFD */
			in = utf8_seq_len(s + i, len - i);
			w = in ? in : 3;
			if (!in)
				in = 1;
		} else if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
			   c == '\r' || c == '\t') {
			w = 2;
		} else if (c < 0x20 || c == 0x7F) {
			w = 6;
		} else {
			w = 1;
		}
		if (w > max - out)
			break;
		out += w;
		i += in;
	}
	if (escaped)
		*escaped = out;
	return i;
}

/* Appends s quoted for an error message: printable ASCII kept, '"' and '\\'
 * backslash-escaped, every other byte as \xNN (so no control characters or
 * invalid UTF-8 ever reach a terminal); more than `max` bytes → "...". */
void moat_buf_append_quoted(struct moat_buf *b, const char *str, size_t len, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	bool cut = len > max;
	size_t n = cut ? max : len;

	moat_buf_append(b, "\"", 1);
	for (size_t i = 0; i < n && !b->oom; i++) {
		unsigned char c = s[i];
		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };
			moat_buf_append(b, e, 2);
		} else if (c >= 0x20 && c < 0x7F) {
			moat_buf_append(b, &s[i], 1);
		} else {
			char e[4] = { '\\', 'x', hex[c >> 4], hex[c & 0xF] };
			moat_buf_append(b, e, 4);
		}
	}
	moat_buf_append(b, "\"", 1);
	if (cut)
		moat_buf_append(b, "...", 3);
}

char *moat_buf_take(struct moat_buf *b)
{
	char *out = NULL;
	if (!b->oom) {
		if (!b->data)
			out = calloc(1, 1);
		else
			out = b->data;
	}
	if (!out || out != b->data)
		free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->oom = false;
	return out;
}

void moat_buf_free(struct moat_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->oom = false;
}

/* A JSON string of s in base64 (RFC 4648, with padding). */
void moat_buf_append_base64(struct moat_buf *b, const unsigned char *s, size_t len)
{
	static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char q[4];
	moat_buf_append(b, "\"", 1);
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < len)
			v |= s[i + 2];
		q[0] = tbl[(v >> 18) & 63];
		q[1] = tbl[(v >> 12) & 63];
		q[2] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
		q[3] = i + 2 < len ? tbl[v & 63] : '=';
		moat_buf_append(b, q, 4);
	}
	moat_buf_append(b, "\"", 1);
}

void moat_buf_drop_front(struct moat_buf *b, size_t n)
{
	if (n > b->len)
		n = b->len;
	if (!n)
		return;
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}
