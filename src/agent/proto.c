/* The agent's request parser (proto.h): every bound checked, nothing
 * allocated, nothing trusted. */
#include <string.h>

#include "agent/proto.h"

int agent_num(const char *s, uint64_t max, uint64_t *out)
{
	size_t n = strlen(s);
	if (n < 1 || n > 10 || (n > 1 && s[0] == '0'))
		return -1;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

static bool flag_ok(const char *s)
{
	return (s[0] == '0' || s[0] == '1') && s[1] == '\0';
}

int agent_path(const char *p, int *root, const char **rel)
{
	static const char *const roots[] = { "/sandbox", "/tmp" };
	size_t len = strlen(p);
	if (len > AGENT_MAX_PATH)
		return -1;
	int r = -1;
	size_t rl = 0;
	for (int i = 0; i < 2; i++) {
		size_t n = strlen(roots[i]);
		if (!strncmp(p, roots[i], n) && (p[n] == '\0' || p[n] == '/')) {
			r = i;
			rl = n;
		}
	}
	if (r < 0)
		return -1;
	const char *rest = p + rl;
	while (*rest == '/')
		rest++;
	/* every component: not "." nor ".." */
	for (const char *c = rest; *c;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return -1;
		if (!slash)
			break;
		c = slash + 1;
	}
	*root = r;
	*rel = rest;
	return 0;
}

static bool path_ok(const char *p)
{
	int root;
	const char *rel;
	return agent_path(p, &root, &rel) == 0;
}

int agent_parse(const char *buf, size_t len, struct agent_msg *m)
{
	memset(m, 0, sizeof *m);
	if (len < 1 || len > AGENT_MAX_MSG)
		return -1;
	m->op = buf[0];
	if (len > 1) {
		if (buf[len - 1] != '\0')
			return -1;
		for (size_t off = 1; off < len;) {
			if (m->nfields == AGENT_MAX_FIELDS)
				return -1;
			m->field[m->nfields++] = buf + off;
			off += strlen(buf + off) + 1;
		}
	}
	const char *const *f = m->field;
	size_t n = m->nfields;
	uint64_t v;
	switch (m->op) {
	case AGENT_PING:
	case AGENT_DISK:
		return n == 0 ? 0 : -1;
	case AGENT_READ:
	case AGENT_STAT:
		return n == 1 && path_ok(f[0]) ? 0 : -1;
	case AGENT_WRITE:
		if (n < 3 || !path_ok(f[0]) || !flag_ok(f[1]) || !flag_ok(f[2]))
			return -1;
		if (f[2][0] == '0')
			return n == 3 ? 0 : -1;
		return (n - 3) % 2 == 0 && agent_meta_pairs_ok(f + 3, (n - 3) / 2) ? 0 : -1;
	case AGENT_MKDIR:
	case AGENT_REMOVE:
		return n == 2 && path_ok(f[0]) && flag_ok(f[1]) ? 0 : -1;
	case AGENT_RENAME:
		return n == 2 && path_ok(f[0]) && path_ok(f[1]) ? 0 : -1;
	case AGENT_LIST:
		return n == 3 && path_ok(f[0]) && agent_num(f[1], AGENT_MAX_DEPTH, &v) == 0 &&
				       v >= 1 && agent_num(f[2], AGENT_MAX_ENTRIES, &v) == 0 && v >= 1
			       ? 0
			       : -1;
	case AGENT_WATCH:
		return n == 2 && path_ok(f[0]) && flag_ok(f[1]) ? 0 : -1;
	case AGENT_CONNECT:
		return n == 1 && agent_num(f[0], AGENT_MAX_PORT, &v) == 0 && v >= 1 ? 0 : -1;
	case AGENT_SIGNAL:
		return n == 2 && agent_num(f[0], 4194304, &v) == 0 && v >= 1 &&
				       agent_num(f[1], 64, &v) == 0 && v >= 1
			       ? 0
			       : -1;
	case AGENT_EXEC:
	case AGENT_EXEC_PTY: {
		size_t a0 = m->op == AGENT_EXEC ? 3 : 4;
		if (n < a0 + 1 || !path_ok(f[0]))
			return -1;
		/* stdin 0|1, or 2: a code context's control socket */
		if (m->op == AGENT_EXEC && !(flag_ok(f[1]) || !strcmp(f[1], "2")))
			return -1;
		if (m->op == AGENT_EXEC_PTY &&
		    (agent_num(f[1], AGENT_MAX_WINSIZE, &v) < 0 || v < 1 ||
		     agent_num(f[2], AGENT_MAX_WINSIZE, &v) < 0 || v < 1))
			return -1;
		if (agent_num(f[a0 - 1], AGENT_MAX_FIELDS, &v) < 0 || v < 1 || v > n - a0)
			return -1;
		m->argv0 = a0;
		m->argc = (size_t)v;
		m->envc = n - a0 - m->argc;
		if (!f[a0][0])
			return -1;
		for (size_t i = 0; i < m->envc; i++) {
			const char *e = f[a0 + m->argc + i];
			const char *eq = strchr(e, '=');
			if (!eq || eq == e)
				return -1;
		}
		return 0;
	}
	default:
		return -1;
	}
}

static bool printable(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

bool agent_meta_key_ok(const char *k, size_t len)
{
	return len >= 1 && len <= AGENT_MAX_META_KEY && printable(k, len);
}

bool agent_meta_value_ok(const char *v, size_t len)
{
	return len <= AGENT_MAX_META && printable(v, len);
}

bool agent_meta_pairs_ok(const char *const *kv, size_t npairs)
{
	if (npairs > AGENT_MAX_META_PAIRS)
		return false;
	size_t total = 0;
	for (size_t i = 0; i < npairs; i++) {
		size_t kl = strlen(kv[2 * i]), vl = strlen(kv[2 * i + 1]);
		if (!agent_meta_key_ok(kv[2 * i], kl) || !agent_meta_value_ok(kv[2 * i + 1], vl))
			return false;
		total += AGENT_META_PREFIX_LEN + kl + vl;
		if (total > AGENT_MAX_META)
			return false;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(kv[2 * j], kv[2 * i]))
				return false;
	}
	return true;
}

int agent_meta_parse(const char *buf, size_t len, const char **kv, size_t *npairs,
		     bool *incomplete)
{
	*npairs = 0;
	*incomplete = false;
	if (len < 2 || len > AGENT_MAX_MSG || buf[len - 1] != '\0' || !flag_ok(buf))
		return -1;
	bool inc = buf[0] == '1';
	size_t n = 0;
	for (size_t off = 2; off < len; off += strlen(buf + off) + 1) {
		if (n == 2 * AGENT_MAX_META_PAIRS)
			return -1;
		kv[n++] = buf + off;
	}
	if (n % 2 || (n == 0 && !inc) || !agent_meta_pairs_ok(kv, n / 2))
		return -1;
	*npairs = n / 2;
	*incomplete = inc;
	return 0;
}

/* p is root or under it */
static bool under(const char *p, const char *root)
{
	size_t n = strlen(root);
	while (n > 1 && root[n - 1] == '/')
		n--;
	return !strncmp(p, root, n) && (!p[n] || p[n] == '/');
}

int agent_event_parse(const char *buf, size_t len, const char *root, struct agent_event *ev)
{
	memset(ev, 0, sizeof *ev);
	if (len < 1 || len > AGENT_MAX_MSG)
		return -1;
	const char *f[3];
	size_t n = 0;
	if (len > 1) {
		if (buf[len - 1] != '\0')
			return -1;
		for (size_t off = 1; off < len; off += strlen(buf + off) + 1) {
			if (n == 2)
				return -1;
			f[n++] = buf + off;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!path_ok(f[i]) || !under(f[i], root))
			return -1;
	ev->kind = buf[0];
	switch (buf[0]) {
	case AGENT_EV_CREATE:
	case AGENT_EV_WRITE:
	case AGENT_EV_REMOVE:
		if (n != 1)
			return -1;
		ev->path = f[0];
		return 0;
	case AGENT_EV_RENAME:
		if (n != 2)
			return -1;
		ev->path = f[0];
		ev->to = f[1];
		return 0;
	case AGENT_EV_OVERFLOW:
	case AGENT_EV_END:
		return n == 0 ? 0 : -1;
	default:
		return -1;
	}
}
