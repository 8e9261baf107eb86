/* serve: what the tables of sessions and of live sandboxes share: their
 * ids (a prefix, the node's name and 128 random bits in hex:
 * "sbx_<node>_<32 hex>", docs/scaling.md), constant-time comparison, and
 * times as RFC 3339. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/sha256.h"
#include "serve/internal.h"

/* This process's node (one moat serve per process): set once by
 * moat_serve_run before any thread that reads it starts. */
static char node_name[SERVE_NODE_MAX + 1] = "node";
static size_t node_len = 4;

bool serve_node_name_valid(const char *name, size_t n)
{
	if (n < 1 || n > SERVE_NODE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '-'))
			return false;
	return true;
}

void serve_node_default(char out[SERVE_NODE_MAX + 1])
{
	/* the host's name would be in every id a tenant sees: a digest of
	 * it instead, the same on every start, different from host to host */
	char host[256] = "";
	if (gethostname(host, sizeof host - 1) < 0)
		host[0] = '\0';
	host[sizeof host - 1] = '\0';
	uint8_t d[MOAT_SHA256_LEN];
	char in[300];
	int n = snprintf(in, sizeof in, "moat serve node %s", host);
	moat_sha256(in, n > 0 ? (size_t)n : 0, d);
	snprintf(out, SERVE_NODE_MAX + 1, "n%02x%02x%02x%02x", d[0], d[1], d[2], d[3]);
}

int serve_node_set(const char *name)
{
	size_t n = strlen(name);
	if (!serve_node_name_valid(name, n))
		return -1;
	memcpy(node_name, name, n + 1);
	node_len = n;
	return 0;
}

const char *serve_node(void)
{
	return node_name;
}

int64_t serve_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void serve_put_time(struct moat_buf *b, const char *key, int64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	char s[40];
	strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
	moat_buf_appendf(b, ",\"%s\":\"%s.%03dZ\"", key, s, (int)(ms % 1000));
}

bool serve_ct_equal(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	unsigned diff = 0;
	for (size_t i = 0; i < n; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

/* prefix, a node name, "_", 32 lowercase hex digits: the node's name in
 * *node (not terminated) */
static bool id_form(const char *id, const char *prefix, const char **node, size_t *nlen)
{
	size_t n = strlen(id);
	if (strncmp(id, prefix, 4) || n < 4 + 1 + 1 + SERVE_ID_HEX || n > SERVE_ID_LEN ||
	    id[n - SERVE_ID_HEX - 1] != '_')
		return false;
	for (const char *p = id + n - SERVE_ID_HEX; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	*node = id + 4;
	*nlen = n - 4 - 1 - SERVE_ID_HEX;
	return serve_node_name_valid(*node, *nlen);
}

bool serve_id_valid(const char *id, const char *prefix)
{
	const char *node;
	size_t n;
	return id_form(id, prefix, &node, &n) && n == node_len && !memcmp(node, node_name, n);
}

bool serve_id_elsewhere(const char *id, const char *prefix, char node[SERVE_NODE_MAX + 1])
{
	const char *at;
	size_t n;
	if (!id_form(id, prefix, &at, &n) || (n == node_len && !memcmp(at, node_name, n)))
		return false;
	memcpy(node, at, n);
	node[n] = '\0';
	return true;
}

/* 128 random bits as 32 lowercase hex digits at h (not terminated) */
static int random_hex(char *h)
{
	unsigned char r[SERVE_ID_HEX / 2];
	size_t got = 0;
	while (got < sizeof r) {
		ssize_t n = getrandom(r + got, sizeof r - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		got += (size_t)n;
	}
	for (size_t i = 0; i < sizeof r; i++) {
		static const char hex[] = "0123456789abcdef";
		h[2 * i] = hex[r[i] >> 4];
		h[2 * i + 1] = hex[r[i] & 15];
	}
	return 0;
}

int serve_new_local_id(char out[SERVE_LOCAL_ID_LEN + 1], const char *prefix)
{
	memcpy(out, prefix, 4);
	out[SERVE_LOCAL_ID_LEN] = '\0';
	return random_hex(out + 4);
}

bool serve_local_id_valid(const char *id, const char *prefix)
{
	if (strlen(id) != SERVE_LOCAL_ID_LEN || strncmp(id, prefix, 4))
		return false;
	for (const char *p = id + 4; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

int serve_new_id(char out[SERVE_ID_LEN + 1], const char *prefix)
{
	memset(out, 0, SERVE_ID_LEN + 1);
	memcpy(out, prefix, 4);
	memcpy(out + 4, node_name, node_len);
	char *h = out + 4 + node_len;
	*h++ = '_';
	return random_hex(h);
}
