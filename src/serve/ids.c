/* serve: what the tables of sessions and of live sandboxes share: their
 * ids (a prefix and 128 random bits in hex), constant-time comparison,
 * and times as RFC 3339. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/internal.h"

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

bool serve_id_valid(const char *id, const char *prefix)
{
	if (strncmp(id, prefix, 4) || strlen(id) != SERVE_ID_LEN)
		return false;
	for (const char *p = id + 4; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

int serve_new_id(char out[SERVE_ID_LEN + 1], const char *prefix)
{
	unsigned char r[16];
	size_t got = 0;
	while (got < sizeof r) {
		ssize_t n = getrandom(r + got, sizeof r - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		got += (size_t)n;
	}
	memcpy(out, prefix, 4);
	for (size_t i = 0; i < sizeof r; i++) {
		static const char hex[] = "0123456789abcdef";
		out[4 + 2 * i] = hex[r[i] >> 4];
		out[5 + 2 * i] = hex[r[i] & 15];
	}
	out[SERVE_ID_LEN] = '\0';
	return 0;
}
