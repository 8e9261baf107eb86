/* The run's network log: one entry per connection or DNS question, from
 * every egress path (transparent TCP, DNS answerer, explicit proxy), safe
 * to write from their threads. At most NETLOG_MAX entries are kept; the
 * rest are counted. Rendered once into the result's "network" object. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/internal.h"

#define NETLOG_MAX 256

struct entry {
	const char *kind;   /* "tcp", "dns", "proxy" (static strings) */
	const char *method; /* proxy: "CONNECT" / "HTTP"; dns: the query type */
	char *host;         /* a name, or the address text */
	char *address;      /* the address connected to, when it differs from host */
	char *answers;      /* dns: the addresses answered, space separated */
	char *reason;
	uint16_t port;
	bool allowed;
	uint64_t sent, received;
};

struct moat_netlog {
	pthread_mutex_t mu;
	unsigned refs;
	struct entry *e;
	size_t len;
	uint64_t dropped;
	uint64_t counters[MOAT_NETLOG_COUNTERS];
};

struct moat_netlog *moat_netlog_new(void)
{
	struct moat_netlog *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->e = calloc(NETLOG_MAX, sizeof *l->e);
	if (!l->e) {
		free(l);
		return NULL;
	}
	pthread_mutex_init(&l->mu, NULL);
	l->refs = 1;
	return l;
}

struct moat_netlog *moat_netlog_ref(struct moat_netlog *l)
{
	pthread_mutex_lock(&l->mu);
	l->refs++;
	pthread_mutex_unlock(&l->mu);
	return l;
}

void moat_netlog_unref(struct moat_netlog *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	unsigned left = --l->refs;
	pthread_mutex_unlock(&l->mu);
	if (left)
		return;
	for (size_t i = 0; i < l->len; i++) {
		free(l->e[i].host);
		free(l->e[i].address);
		free(l->e[i].answers);
		free(l->e[i].reason);
	}
	free(l->e);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static void set_str(char **dst, const char *s)
{
	free(*dst);
	*dst = s ? strdup(s) : NULL;
}

int moat_netlog_add(struct moat_netlog *l, const char *kind, const char *method,
		    const char *host, uint16_t port)
{
	pthread_mutex_lock(&l->mu);
	int idx = -1;
	if (l->len < NETLOG_MAX) {
		idx = (int)l->len++;
		struct entry *e = &l->e[idx];
		e->kind = kind;
		e->method = method;
		e->port = port;
		set_str(&e->host, host);
	} else {
		l->dropped++;
	}
	pthread_mutex_unlock(&l->mu);
	return idx;
}

void moat_netlog_host(struct moat_netlog *l, int idx, const char *host, const char *address)
{
	if (idx < 0)
		return;
	pthread_mutex_lock(&l->mu);
	if (host)
		set_str(&l->e[idx].host, host);
	if (address)
		set_str(&l->e[idx].address, address);
	pthread_mutex_unlock(&l->mu);
}

void moat_netlog_verdict(struct moat_netlog *l, int idx, bool allowed, const char *reason)
{
	if (idx < 0)
		return;
	pthread_mutex_lock(&l->mu);
	l->e[idx].allowed = allowed;
	set_str(&l->e[idx].reason, reason);
	pthread_mutex_unlock(&l->mu);
}

void moat_netlog_answers(struct moat_netlog *l, int idx, const char *answers)
{
	if (idx < 0)
		return;
	pthread_mutex_lock(&l->mu);
	set_str(&l->e[idx].answers, answers);
	pthread_mutex_unlock(&l->mu);
}

void moat_netlog_bytes(struct moat_netlog *l, int idx, uint64_t sent, uint64_t received)
{
	if (idx < 0)
		return;
	pthread_mutex_lock(&l->mu);
	l->e[idx].sent = sent;
	l->e[idx].received = received;
	pthread_mutex_unlock(&l->mu);
}

void moat_netlog_count(struct moat_netlog *l, enum moat_netlog_counter c, uint64_t n)
{
	pthread_mutex_lock(&l->mu);
	l->counters[c] += n;
	pthread_mutex_unlock(&l->mu);
}

uint64_t moat_netlog_counter(struct moat_netlog *l, enum moat_netlog_counter c)
{
	pthread_mutex_lock(&l->mu);
	uint64_t v = l->counters[c];
	pthread_mutex_unlock(&l->mu);
	return v;
}

static void json_key_str(struct moat_buf *b, const char *key, const char *s)
{
	moat_buf_appendf(b, ",\"%s\":", key);
	moat_buf_append_json_string(b, s, strlen(s));
}

void moat_netlog_render(struct moat_netlog *l, struct moat_buf *b)
{
	static const char *const counter_names[MOAT_NETLOG_COUNTERS] = {
		[MOAT_NETLOG_BYTES] = "bytes",
		[MOAT_NETLOG_BUSY] = "busyRefusals",
		[MOAT_NETLOG_MALFORMED] = "malformedRequests",
		[MOAT_NETLOG_DNS_RATE] = "dnsRateRefusals",
	};
	pthread_mutex_lock(&l->mu);
	moat_buf_append(b, ",\"connections\":[", 16);
	for (size_t i = 0; i < l->len; i++) {
		const struct entry *e = &l->e[i];
		moat_buf_appendf(b, "%s{\"kind\":\"%s\"", i ? "," : "", e->kind);
		if (e->method)
			moat_buf_appendf(b, ",\"method\":\"%s\"", e->method);
		json_key_str(b, "host", e->host ? e->host : "");
		if (e->address)
			json_key_str(b, "address", e->address);
		if (e->port)
			moat_buf_appendf(b, ",\"port\":%u", e->port);
		moat_buf_appendf(b, ",\"allowed\":%s", e->allowed ? "true" : "false");
		if (e->reason)
			json_key_str(b, "reason", e->reason);
		if (e->answers) {
			moat_buf_append(b, ",\"answers\":[", 12);
			const char *s = e->answers;
			for (bool first = true; *s; first = false) {
				size_t n = strcspn(s, " ");
				if (!first)
					moat_buf_append(b, ",", 1);
				moat_buf_append_json_string(b, s, n);
				s += n;
				s += *s == ' ';
			}
			moat_buf_append(b, "]", 1);
		}
		if (strcmp(e->kind, "dns"))
			moat_buf_appendf(b, ",\"sent\":%llu,\"received\":%llu",
					 (unsigned long long)e->sent, (unsigned long long)e->received);
		moat_buf_append(b, "}", 1);
	}
	moat_buf_append(b, "]", 1);
	if (l->dropped)
		moat_buf_appendf(b, ",\"connectionsNotListed\":%llu", (unsigned long long)l->dropped);
	for (int c = 0; c < MOAT_NETLOG_COUNTERS; c++)
		if (l->counters[c] || c == MOAT_NETLOG_BYTES)
			moat_buf_appendf(b, ",\"%s\":%llu", counter_names[c],
					 (unsigned long long)l->counters[c]);
	pthread_mutex_unlock(&l->mu);
}

void moat_netlog_addr_text(int family, const uint8_t *addr, char out[48])
{
	if (!inet_ntop(family, addr, out, 48))
		snprintf(out, 48, "?");
}
