/* Pure parsing and formatting for cgroup files (unit-tested against
 * fixtures); the files themselves are files.c's. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgroups/internal.h"

const char *moat_cg_mech_name(enum moat_cg_mech m)
{
	switch (m) {
	case MOAT_CG_V2: return "cgroup-v2";
	case MOAT_CG_V1: return "cgroup-v1";
	case MOAT_CG_RLIMIT: return "rlimit";
	case MOAT_CG_NONE: break;
	}
	return "none";
}

const char *moat_cg_v1_name(enum moat_cg_v1ctl c)
{
	static const char *const names[MOAT_V1__COUNT] = { "memory", "pids", "cpu", "cpuacct" };
	return (unsigned)c < MOAT_V1__COUNT ? names[c] : "?";
}

void moat_cg_self_free(struct moat_cg_self *s)
{
	free(s->v2);
	s->v2 = NULL;
	for (int i = 0; i < MOAT_V1__COUNT; i++) {
		free(s->v1[i]);
		s->v1[i] = NULL;
	}
}

/* Sets *slot to a copy of path[0..len) unless already set. */
static int set_path(char **slot, const char *path, size_t len)
{
	if (*slot)
		return 0;
	*slot = strndup(path, len);
	return *slot ? 0 : -1;
}

int moat_cg_parse_self(const char *text, struct moat_cg_self *out)
{
	memset(out, 0, sizeof *out);
	const char *line = text;
	while (*line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *next = end ? end + 1 : line + len;
		if (len == 0) {
			line = next;
			continue;
		}
		/* hierarchy-ID:controller-list:path — the path may contain ':' */
		const char *c1 = memchr(line, ':', len);
		const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
		if (!c1 || !c2 || c1 == line || c2[1] != '/') {
			moat_cg_self_free(out);
			errno = EINVAL;
			return -1;
		}
		for (const char *p = line; p < c1; p++)
			if (*p < '0' || *p > '9') {
				moat_cg_self_free(out);
				errno = EINVAL;
				return -1;
			}
		const char *path = c2 + 1;
		size_t plen = len - (size_t)(path - line);
		int rc = 0;
		if (c2 == c1 + 1) {
			/* empty controller list: the v2 line ("0::/path") */
			if (c1 - line == 1 && line[0] == '0')
				rc = set_path(&out->v2, path, plen);
		} else {
			const char *ctl = c1 + 1;
			while (ctl < c2 && rc == 0) {
				const char *comma = memchr(ctl, ',', (size_t)(c2 - ctl));
				const char *ce = comma ? comma : c2;
				size_t clen = (size_t)(ce - ctl);
				for (int i = 0; i < MOAT_V1__COUNT; i++) {
					const char *name = moat_cg_v1_name((enum moat_cg_v1ctl)i);
					if (strlen(name) == clen && !memcmp(ctl, name, clen))
						rc = set_path(&out->v1[i], path, plen);
				}
				ctl = ce + 1;
			}
		}
		if (rc < 0) {
			moat_cg_self_free(out);
			errno = ENOMEM;
			return -1;
		}
		line = next;
	}
	return 0;
}

/* The next component of *p (skipping '/' and "."): its start, *len, and
 * *p past it; NULL at the end. */
static const char *next_component(const char **p, size_t *len)
{
	for (;;) {
		while (**p == '/')
			(*p)++;
		if (**p == '\0')
			return NULL;
		const char *c = *p;
		size_t n = strcspn(c, "/");
		*p = c + n;
		if (n == 1 && c[0] == '.')
			continue;
		*len = n;
		return c;
	}
}

static bool has_dotdot(const char *path)
{
	const char *p = path, *c;
	size_t n;
	while ((c = next_component(&p, &n)))
		if (n == 2 && !memcmp(c, "..", 2))
			return true;
	return false;
}

char *moat_cg_common_ancestor(const char *a, const char *b)
{
	if (!a || !b || a[0] != '/' || b[0] != '/' || has_dotdot(a) || has_dotdot(b)) {
		errno = EINVAL;
		return NULL;
	}
	size_t cap = strlen(a) + 2, len = 0;
	char *out = malloc(cap);
	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	const char *pa = a, *pb = b, *ca, *cb;
	size_t na, nb;
	while ((ca = next_component(&pa, &na)) && (cb = next_component(&pb, &nb)) && na == nb &&
	       !memcmp(ca, cb, na)) {
		out[len++] = '/';
		memcpy(out + len, ca, na);
		len += na;
	}
	if (len == 0)
		out[len++] = '/';
	out[len] = '\0';
	return out;
}

int moat_cg_parse_number(const char *text, int64_t *out)
{
	while (*text == ' ' || *text == '\t')
		text++;
	if (!strncmp(text, "max", 3) && (text[3] == '\0' || text[3] == '\n' || text[3] == ' ')) {
		*out = INT64_MAX;
		return 1;
	}
	if (*text == '\0' || *text == '\n')
		return 0;
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (errno || end == text || (*end != '\0' && *end != '\n' && *end != ' '))
		return 0;
	*out = (int64_t)v;
	return 1;
}

int moat_cg_kv_get(const char *text, const char *key, int64_t *out)
{
	size_t klen = strlen(key);
	const char *line = text;
	while (line && *line) {
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			return moat_cg_parse_number(line + klen + 1, out);
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return 0;
}

int moat_cg_pressure_total(const char *text, const char *kind, int64_t *out)
{
	size_t klen = strlen(kind);
	const char *line = text;
	while (line && *line) {
		const char *eol = strchr(line, '\n');
		if (!strncmp(line, kind, klen) && line[klen] == ' ') {
			const char *t = strstr(line, " total=");
			if (!t || (eol && t > eol))
				return 0;
			return moat_cg_parse_number(t + 7, out) == 1 && *out >= 0 &&
			       *out != INT64_MAX;
		}
		line = eol ? eol + 1 : NULL;
	}
	return 0;
}

int64_t moat_cg_cpu_quota(double cpus)
{
	double q = ceil(cpus * MOAT_CG_CPU_PERIOD);
	if (!(q >= MOAT_CG_CPU_MIN_QUOTA))
		return MOAT_CG_CPU_MIN_QUOTA;
	if (q > (double)INT64_MAX / 2)
		return INT64_MAX / 2;
	return (int64_t)q;
}

int moat_cg_format_cpu_max(double cpus, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%" PRId64 " %d", moat_cg_cpu_quota(cpus), MOAT_CG_CPU_PERIOD);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int moat_cg_leaf_name(pid_t pid, uint64_t start, unsigned counter, char *buf, size_t len)
{
	int n = start ? snprintf(buf, len, "moat-%ld-t%" PRIu64 "-%u", (long)pid, start, counter)
		      : snprintf(buf, len, "moat-%ld-%u", (long)pid, counter);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int moat_cg_leaf_owner(const char *name, pid_t *pid, uint64_t *start)
{
	if (strncmp(name, "moat-", 5))
		return 0;
	const char *p = name + 5;
	if (*p < '1' || *p > '9')
		return 0;
	long v = 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (*p - '0');
		if (v > INT_MAX)
			return 0;
	}
	if (*p != '-' || p[1] == '\0')
		return 0;
	*pid = (pid_t)v;
	*start = 0;
	/* "t<start>-<counter>": the owner's start time (/proc/<pid>/stat's
	 * field 22) */
	if (p[1] == 't' && p[2] >= '1' && p[2] <= '9') {
		uint64_t t = 0;
		const char *q = p + 2;
		for (; *q >= '0' && *q <= '9'; q++) {
			if (t > (UINT64_MAX - 9) / 10)
				return 1; /* not a start time: the pid alone */
			t = t * 10 + (uint64_t)(*q - '0');
		}
		if (*q == '-' && q[1] != '\0')
			*start = t;
	}
	return 1;
}

int moat_cg_leaf_pid(const char *name, pid_t *pid)
{
	uint64_t start;
	return moat_cg_leaf_owner(name, pid, &start);
}

int moat_cg_stat_starttime(const char *text, uint64_t *out)
{
	/* "pid (comm) state ppid ...": comm may hold spaces and ')'; field 22
	 * is the 20th after the last ')' */
	const char *p = text ? strrchr(text, ')') : NULL;
	if (!p)
		return 0;
	p++;
	for (int field = 3; field <= 22; field++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return 0;
		if (field == 22) {
			uint64_t v = 0;
			if (*p < '0' || *p > '9')
				return 0;
			for (; *p >= '0' && *p <= '9'; p++) {
				if (v > (UINT64_MAX - 9) / 10)
					return 0;
				v = v * 10 + (uint64_t)(*p - '0');
			}
			if (*p != ' ' && *p != '\n' && *p != '\0')
				return 0;
			*out = v;
			return 1;
		}
		while (*p && *p != ' ')
			p++;
	}
	return 0;
}

bool moat_cg_leaf_stale(const char *name, bool (*alive)(pid_t pid, uint64_t start))
{
	pid_t pid;
	uint64_t start;
	return moat_cg_leaf_owner(name, &pid, &start) && !alive(pid, start);
}
