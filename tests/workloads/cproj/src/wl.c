#include "wl.h"
#include <ctype.h>

size_t wl_count_words(const char *s)
{
	size_t n = 0;
	int in = 0;
	for (; *s; s++) {
		if (isspace((unsigned char)*s))
			in = 0;
		else if (!in) {
			in = 1;
			n++;
		}
	}
	return n;
}

char *wl_reverse(char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n / 2; i++) {
		char c = s[i];
		s[i] = s[n - 1 - i];
		s[n - 1 - i] = c;
	}
	return s;
}

unsigned long wl_checksum(const void *buf, size_t n)
{
	const unsigned char *p = buf;
	unsigned long a = 1, b = 0;
	for (size_t i = 0; i < n; i++) {
		a = (a + p[i]) % 65521;
		b = (b + a) % 65521;
	}
	return (b << 16) | a;
}
