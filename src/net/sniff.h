/* Sniffing the first bytes of a transparent TCP connection out of the
 * sandbox: the TLS SNI or HTTP Host name it is meant for. Pure: unit-tested. */
#ifndef MOAT_NET_SNIFF_H
#define MOAT_NET_SNIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum moat_sniff_kind { MOAT_SNIFF_MORE, MOAT_SNIFF_TLS, MOAT_SNIFF_HTTP, MOAT_SNIFF_OTHER };

/* Most bytes a caller reads before giving up on MORE (it is then OTHER). */
#define MOAT_SNIFF_MAX 16384

/* Looks at the first len bytes a client sent on a connection.
 * MORE: not enough bytes to decide yet; the caller reads more, up to
 * MOAT_SNIFF_MAX bytes (moat_sniff itself answers OTHER at that size).
 * TLS: a TLS ClientHello (record type 22, handshake type 1) that fills the
 * first record exactly; name gets the SNI host_name (lowercased, no trailing
 * dot) or "" when the hello has no server_name extension. Parsed strictly:
 * a length that does not add up, a second server_name extension or
 * host_name, or a name with bytes outside [A-Za-z0-9._-] or an empty label
 * is OTHER.
 * HTTP: an HTTP/1.x request line ("METHOD SP target SP HTTP/1.d CRLF") with
 * an origin-form ("/...") or "*" target, and a complete header section
 * ("\r\n\r\n"); name gets the Host header's host (lowercased, port and one
 * trailing dot removed, IPv6 brackets removed), "" when there is none.
 * Absolute- and authority-form targets (proxy requests), a method over 32
 * bytes, two Host headers, bare CR or LF, control bytes, obs-fold lines,
 * malformed Host values and every head moat_sniff_request refuses (below)
 * are OTHER.
 * OTHER: anything else. name is always NUL-terminated ("" unless TLS/HTTP). */
enum moat_sniff_kind moat_sniff(const uint8_t *buf, size_t len, char name[254]);

/* ---- one HTTP request per transparent connection ----
 * moat relays one HTTP/1.x request on a transparent plain-HTTP connection:
 * its head (judged here) with "Connection: close", exactly the body that
 * head declares, and nothing after it (a second request could name another
 * host behind the same address). */

/* What a request head declares beyond its Host. */
struct moat_http_req {
	size_t head_len;     /* HTTP: the head's bytes, its blank line included */
	bool chunked;        /* Transfer-Encoding: chunked */
	uint64_t length;     /* Content-Length (0 without one) */
	const char *refusal; /* OTHER: why, when it looked like HTTP (static text) */
};

/* moat_sniff, stricter for HTTP and saying why: besides moat_sniff's rules
 * a head is OTHER with req->refusal set for a second Content-Length or
 * Transfer-Encoding header, a Content-Length that is not 1-15 digits, a
 * Transfer-Encoding other than "chunked" (or any in HTTP/1.0), both
 * Content-Length and Transfer-Encoding, an Upgrade or HTTP2-Settings
 * header (h2c, WebSocket), and for each of moat_sniff's refusals of a head
 * whose request line was HTTP (absolute-form target, two Host headers,
 * obs-fold, bare CR or LF, control bytes, malformed Host). req->refusal is
 * NULL for other kinds and for OTHER that is not HTTP at all. */
enum moat_sniff_kind moat_sniff_request(const uint8_t *buf, size_t len, char name[254],
					struct moat_http_req *req);

#define MOAT_HTTP_LINE_MAX 16384 /* a chunk-size line; all trailers together */

/* The body of one request: Content-Length bytes, or a chunked body parsed
 * strictly (CRLF only, sizes of at most 15 hex digits, bounded lines), its
 * trailer lines as strictly as a head's header lines: each "name:" (tchars)
 * then a value without control bytes; no obs-fold, and no Content-Length,
 * Transfer-Encoding or Host (framing and routing, never trailers). */
#define MOAT_HTTP_TRAILER_NAME 18 /* longest name kept to compare */
struct moat_http_body {
	bool chunked;
	int state;
	unsigned digits;
	uint64_t left;    /* bytes left of the body or of the current chunk */
	size_t line;      /* bytes of the current framing line */
	size_t trailer;   /* bytes of the trailer section */
	bool value;       /* the current trailer line is past its colon */
	size_t name_len;  /* bytes of the current trailer line's name */
	char name[MOAT_HTTP_TRAILER_NAME]; /* its first bytes, lowercased */
};

void moat_http_body_init(struct moat_http_body *b, const struct moat_http_req *req);
/* Feeds the next n bytes the client sent after the head; *used: how many of
 * them belong to the body. 1: the body is complete (bytes past *used are
 * not part of this request), 0: more to come (*used == n), -1: malformed
 * framing (*why, static text; *used bytes were fine). */
int moat_http_body_feed(struct moat_http_body *b, const uint8_t *p, size_t n, size_t *used,
			const char **why);

/* How many bytes "Connection: close" adds at most. */
#define MOAT_HTTP_CLOSE_EXTRA 19
/* Writes head (an HTTP head moat_sniff_request accepted, head_len bytes)
 * into out (head_len + MOAT_HTTP_CLOSE_EXTRA bytes) without its Connection,
 * Keep-Alive and Proxy-Connection headers and with "Connection: close";
 * returns the length written. */
size_t moat_http_close_head(const uint8_t *head, size_t head_len, uint8_t *out);

#endif
