/* Sniffing the first bytes of a transparent TCP connection out of the
 * sandbox: the TLS SNI or HTTP Host name it is meant for. Pure: unit-tested. */
#ifndef MOAT_NET_SNIFF_H
#define MOAT_NET_SNIFF_H

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
 * bytes, two Host headers, bare CR or LF, control bytes, obs-fold lines and
 * malformed Host values are OTHER.
 * OTHER: anything else. name is always NUL-terminated ("" unless TLS/HTTP). */
enum moat_sniff_kind moat_sniff(const uint8_t *buf, size_t len, char name[254]);

#endif
