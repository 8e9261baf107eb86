/* Docker/OCI seccomp profile (JSON) → struct sc_policy.
 *
 * Everything the format can say is either implemented or rejected with an
 * error naming the JSON path of the entry (e.g. syscalls[3].args[0].op):
 *  - top level: defaultAction, defaultErrnoRet, architectures, archMap,
 *    syscalls, flags (only SECCOMP_FILTER_FLAG_LOG), listenerPath and
 *    listenerMetadata (only empty: moat has no notify agent), comment.
 *  - architectures/archMap are validated, but only the native architecture
 *    gets rules: syscalls of any other ABI (i386 int 0x80, x32) are killed.
 *  - syscalls[]: names | name, action, errnoRet, args, comment, includes,
 *    excludes. includes/excludes are decided here: arches against the native
 *    arch, caps against an empty set (the sandbox has no capabilities: a rule
 *    that includes caps never applies, excluding by caps never excludes),
 *    minKernel against uname -r.
 *  - SCMP_ACT_ERRNO without errnoRet returns defaultErrnoRet, else EPERM.
 *  - SCMP_CMP_MASKED_EQ: value is the mask, valueTwo the expected result; a
 *    valueTwo with bits outside the mask is refused (libseccomp would compile
 *    (arg & value) == (valueTwo & value), a condition the policy never wrote).
 *  - A syscall name libseccomp does not know, or that does not exist on this
 *    architecture, is skipped (it cannot be allowed) and recorded as a note. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "core/core.h"
#include "core/embedded.h"
#include "seccomp/internal.h"

/* ---- architectures ---- */

struct arch_name {
	const char *scmp;   /* "SCMP_ARCH_X86_64" */
	const char *docker; /* "amd64": the name includes/excludes.arches use */
	uint32_t token;     /* libseccomp token, 0 when this libseccomp lacks it */
};

static const struct arch_name arches[] = {
	{ "SCMP_ARCH_X86_64", "amd64", SCMP_ARCH_X86_64 },
	{ "SCMP_ARCH_X86", "x86", SCMP_ARCH_X86 },
	{ "SCMP_ARCH_X32", "x32", SCMP_ARCH_X32 },
	{ "SCMP_ARCH_AARCH64", "arm64", SCMP_ARCH_AARCH64 },
	{ "SCMP_ARCH_ARM", "arm", SCMP_ARCH_ARM },
	{ "SCMP_ARCH_MIPS", "mips", SCMP_ARCH_MIPS },
	{ "SCMP_ARCH_MIPSEL", "mipsel", SCMP_ARCH_MIPSEL },
	{ "SCMP_ARCH_MIPS64", "mips64", SCMP_ARCH_MIPS64 },
	{ "SCMP_ARCH_MIPSEL64", "mipsel64", SCMP_ARCH_MIPSEL64 },
	{ "SCMP_ARCH_MIPS64N32", "mips64n32", SCMP_ARCH_MIPS64N32 },
	{ "SCMP_ARCH_MIPSEL64N32", "mipsel64n32", SCMP_ARCH_MIPSEL64N32 },
	{ "SCMP_ARCH_PPC", "ppc", SCMP_ARCH_PPC },
	{ "SCMP_ARCH_PPC64", "ppc64", SCMP_ARCH_PPC64 },
	{ "SCMP_ARCH_PPC64LE", "ppc64le", SCMP_ARCH_PPC64LE },
	{ "SCMP_ARCH_S390", "s390", SCMP_ARCH_S390 },
	{ "SCMP_ARCH_S390X", "s390x", SCMP_ARCH_S390X },
	{ "SCMP_ARCH_PARISC", "parisc", SCMP_ARCH_PARISC },
	{ "SCMP_ARCH_PARISC64", "parisc64", SCMP_ARCH_PARISC64 },
	{ "SCMP_ARCH_RISCV64", "riscv64", SCMP_ARCH_RISCV64 },
	{ "SCMP_ARCH_LOONGARCH64", "loong64", 0 },
	{ "SCMP_ARCH_M68K", "m68k", 0 },
	{ "SCMP_ARCH_SH", "sh", 0 },
	{ "SCMP_ARCH_SHEB", "sheb", 0 },
};

/* Other spellings includes/excludes.arches use for the same ABIs. */
static const struct {
	const char *alias, *docker;
} arch_aliases[] = {
	{ "386", "x86" },       { "mipsle", "mipsel" },
	{ "mips64le", "mipsel64" }, { "mips64len32", "mipsel64n32" },
	{ "loongarch64", "loong64" },
};

static const struct arch_name *arch_by_scmp(const char *s)
{
	for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
		if (strcmp(arches[i].scmp, s) == 0)
			return &arches[i];
	return NULL;
}

static const char *arch_docker_name(const char *s)
{
	for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
		if (strcmp(arches[i].docker, s) == 0)
			return arches[i].docker;
	for (size_t i = 0; i < sizeof arch_aliases / sizeof arch_aliases[0]; i++)
		if (strcmp(arch_aliases[i].alias, s) == 0)
			return arch_aliases[i].docker;
	return NULL;
}

static void parse_release(const char *rel, unsigned v[3])
{
	v[0] = v[1] = v[2] = 0;
	const char *p = rel;
	for (int i = 0; i < 3; i++) {
		if (!isdigit((unsigned char)*p))
			break;
		unsigned long n = strtoul(p, (char **)&p, 10);
		v[i] = n > 1000000 ? 1000000 : (unsigned)n;
		if (*p != '.')
			break;
		p++;
	}
}

int sc_host_detect(struct sc_host *host, struct moat_error *err)
{
	memset(host, 0, sizeof *host);
	host->scmp_arch = seccomp_arch_native();
	host->arch_name = NULL;
	for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
		if (arches[i].token != 0 && arches[i].token == host->scmp_arch)
			host->arch_name = arches[i].docker;
	if (!host->arch_name)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "seccomp: unsupported native architecture 0x%x",
				      host->scmp_arch);
	struct utsname u;
	if (uname(&u) != 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "seccomp: uname");
	snprintf(host->release, sizeof host->release, "%s", u.release);
	parse_release(host->release, host->kernel);
	return 0;
}

/* ---- parsing context and errors ---- */

struct pctx {
	const struct sc_host *host;
	struct sc_policy *pol;
	struct moat_error *err;
	unsigned default_errno;
};

/* An escaped, quoted, length-capped copy of untrusted text for messages. */
static char *quote(const char *s)
{
	size_t n = strlen(s);
	size_t shown = n > 64 ? 64 : n;
	char *out = malloc(shown * 4 + 8);
	if (!out)
		return NULL;
	char *o = out;
	*o++ = '"';
	for (size_t i = 0; i < shown; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\') {
			*o++ = '\\';
			*o++ = (char)ch;
		} else if (ch < 0x20 || ch >= 0x7f) {
			o += sprintf(o, "\\x%02x", ch);
		} else {
			*o++ = (char)ch;
		}
	}
	*o++ = '"';
	if (shown < n)
		o = stpcpy(o, "...");
	*o = '\0';
	return out;
}

/* A policy that could not be read, compiled or written for want of
 * memory: one spelling (MOAT_ERR_CONFIG: the policy, as every error of
 * loading one, is the configuration's) */
static int policy_oom(struct moat_error *err)
{
	return moat_error_set(err, MOAT_ERR_CONFIG, ENOMEM, "seccomp policy: out of memory");
}

static int oom(struct pctx *c)
{
	return policy_oom(c->err);
}

__attribute__((format(printf, 3, 4)))
static int perr(struct pctx *c, const char *path, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		return oom(c);
	moat_error_set(c->err, MOAT_ERR_CONFIG, 0, "%s: %s", path, msg);
	free(msg);
	return -1;
}

/* "<path>: <what> "<value>"<tail>" */
static int perr_val(struct pctx *c, const char *path, const char *what,
		    const char *value, const char *tail)
{
	char *q = quote(value);
	if (!q)
		return oom(c);
	perr(c, path, "%s %s%s", what, q, tail);
	free(q);
	return -1;
}

static int add_note(struct sc_policy *p, char *note)
{
	if (!note)
		return -1;
	char **n = realloc(p->notes, (p->n_notes + 1) * sizeof *n);
	if (!n) {
		free(note);
		return -1;
	}
	p->notes = n;
	p->notes[p->n_notes++] = note;
	return 0;
}

__attribute__((format(printf, 2, 3)))
static char *fmt(struct pctx *c, const char *f, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, f);
	int n = vasprintf(&s, f, ap);
	va_end(ap);
	if (n < 0) {
		oom(c);
		return NULL;
	}
	return s;
}

/* Rejects fields not in `known` and duplicated fields. */
static int check_fields(struct pctx *c, const cJSON *obj, const char *path,
			const char *const *known)
{
	for (const cJSON *f = obj->child; f; f = f->next) {
		const char *key = f->string ? f->string : "";
		bool ok = false;
		for (size_t i = 0; known[i]; i++)
			if (strcmp(known[i], key) == 0)
				ok = true;
		char *list = NULL;
		if (!ok) {
			size_t total = 1;
			for (size_t i = 0; known[i]; i++)
				total += strlen(known[i]) + 2;
			list = malloc(total);
			if (!list)
				return oom(c);
			list[0] = '\0';
			for (size_t i = 0; known[i]; i++) {
				if (i)
					strcat(list, ", ");
				strcat(list, known[i]);
			}
			char *q = quote(key);
			if (!q) {
				free(list);
				return oom(c);
			}
			perr(c, path, "unknown field %s (moat implements: %s)", q, list);
			free(q);
			free(list);
			return -1;
		}
		for (const cJSON *g = obj->child; g != f; g = g->next)
			if (g->string && strcmp(g->string, key) == 0)
				return perr_val(c, path, "duplicate field", key, "");
	}
	return 0;
}

static const cJSON *field(const cJSON *obj, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
	return (v && cJSON_IsNull(v)) ? NULL : v; /* null = absent */
}

static int get_uint(struct pctx *c, const cJSON *v, const char *path,
		    uint64_t min, uint64_t max, uint64_t *out)
{
	if (!cJSON_IsNumber(v))
		return perr(c, path, "expected an integer");
	double d = v->valuedouble;
	if (!(d >= 0.0))
		return perr(c, path, "expected a non-negative integer");
	if (d > 9007199254740992.0)
		return perr(c, path, "integer too large to be exact in JSON (at most 2^53)");
	uint64_t u = (uint64_t)d;
	if ((double)u != d)
		return perr(c, path, "expected an integer");
	if (u < min || u > max)
		return perr(c, path, "%llu out of range (%llu to %llu)",
			    (unsigned long long)u, (unsigned long long)min,
			    (unsigned long long)max);
	*out = u;
	return 0;
}

static int get_string(struct pctx *c, const cJSON *v, const char *path, const char **out)
{
	if (!cJSON_IsString(v) || !v->valuestring)
		return perr(c, path, "expected a string");
	*out = v->valuestring;
	return 0;
}

static int check_array(struct pctx *c, const cJSON *v, const char *path)
{
	if (!cJSON_IsArray(v))
		return perr(c, path, "expected an array");
	return 0;
}

/* ---- actions ---- */

static int parse_action(struct pctx *c, const cJSON *v, const char *path,
			const cJSON *errno_ret, const char *errno_path,
			unsigned fallback_errno, uint32_t *out)
{
	const char *s = "";
	if (get_string(c, v, path, &s) < 0)
		return -1;
	if (strcmp(s, "SCMP_ACT_ERRNO") == 0) {
		uint64_t e = fallback_errno;
		if (errno_ret && get_uint(c, errno_ret, errno_path, 1, 4095, &e) < 0)
			return -1;
		*out = SCMP_ACT_ERRNO((uint32_t)e);
		return 0;
	}
	if (errno_ret)
		return perr(c, errno_path, "only valid with SCMP_ACT_ERRNO (action is %s)", s);
	static const struct {
		const char *name;
		uint32_t act;
	} acts[] = {
		{ "SCMP_ACT_ALLOW", SCMP_ACT_ALLOW },
		{ "SCMP_ACT_KILL", SCMP_ACT_KILL_THREAD },
		{ "SCMP_ACT_KILL_THREAD", SCMP_ACT_KILL_THREAD },
		{ "SCMP_ACT_KILL_PROCESS", SCMP_ACT_KILL_PROCESS },
		{ "SCMP_ACT_TRAP", SCMP_ACT_TRAP },
		{ "SCMP_ACT_LOG", SCMP_ACT_LOG },
	};
	for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
		if (strcmp(acts[i].name, s) == 0) {
			*out = acts[i].act;
			return 0;
		}
	if (strcmp(s, "SCMP_ACT_TRACE") == 0)
		return perr(c, path, "SCMP_ACT_TRACE is not supported (moat runs no tracer)");
	if (strcmp(s, "SCMP_ACT_NOTIFY") == 0)
		return perr(c, path, "SCMP_ACT_NOTIFY is not supported (moat runs no notify agent)");
	return perr_val(c, path, "unknown action", s,
			" (expected SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_ACT_KILL, "
			"SCMP_ACT_KILL_THREAD, SCMP_ACT_KILL_PROCESS, SCMP_ACT_TRAP or SCMP_ACT_LOG)");
}

/* ---- arrays of names ---- */

static int parse_arch_list(struct pctx *c, const cJSON *v, const char *path, bool *foreign)
{
	if (check_array(c, v, path) < 0)
		return -1;
	size_t i = 0;
	for (const cJSON *e = v->child; e; e = e->next, i++) {
		char *p = fmt(c, "%s[%zu]", path, i);
		if (!p)
			return -1;
		const char *s = "";
		int rc = get_string(c, e, p, &s);
		const struct arch_name *a = rc == 0 ? arch_by_scmp(s) : NULL;
		if (rc == 0 && !a)
			rc = perr_val(c, p, "unknown architecture", s, "");
		if (rc == 0 && a->token != c->host->scmp_arch)
			*foreign = true;
		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int parse_archmap(struct pctx *c, const cJSON *v, bool *foreign)
{
	if (check_array(c, v, "archMap") < 0)
		return -1;
	static const char *const known[] = { "architecture", "subArchitectures", NULL };
	size_t i = 0;
	for (const cJSON *e = v->child; e; e = e->next, i++) {
		char *p = fmt(c, "archMap[%zu]", i);
		if (!p)
			return -1;
		int rc = 0;
		if (!cJSON_IsObject(e))
			rc = perr(c, p, "expected an object");
		if (rc == 0)
			rc = check_fields(c, e, p, known);
		if (rc == 0) {
			const cJSON *a = field(e, "architecture");
			char *ap = fmt(c, "%s.architecture", p);
			if (!ap) {
				rc = -1;
			} else if (!a) {
				rc = perr(c, ap, "missing");
			} else {
				/* reuse the list checker on a one-element view */
				const char *s = "";
				rc = get_string(c, a, ap, &s);
				const struct arch_name *an = rc == 0 ? arch_by_scmp(s) : NULL;
				if (rc == 0 && !an)
					rc = perr_val(c, ap, "unknown architecture", s, "");
				if (rc == 0 && an->token != c->host->scmp_arch)
					*foreign = true;
			}
			free(ap);
		}
		if (rc == 0) {
			const cJSON *sub = field(e, "subArchitectures");
			char *sp = fmt(c, "%s.subArchitectures", p);
			if (!sp)
				rc = -1;
			else if (sub)
				rc = parse_arch_list(c, sub, sp, foreign);
			free(sp);
		}
		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ---- includes / excludes ---- */

static int parse_version(const char *s, unsigned v[3])
{
	v[0] = v[1] = v[2] = 0;
	const char *p = s;
	for (int i = 0; i < 3; i++) {
		if (!isdigit((unsigned char)*p))
			return -1;
		size_t digits = 0;
		unsigned long n = 0;
		while (isdigit((unsigned char)*p)) {
			if (++digits > 6)
				return -1;
			n = n * 10 + (unsigned long)(*p++ - '0');
		}
		v[i] = (unsigned)n;
		if (*p == '\0')
			return i >= 1 ? 0 : -1; /* at least major.minor */
		if (*p != '.')
			return -1;
		p++;
	}
	return -1;
}

static int version_cmp(const unsigned a[3], const unsigned b[3])
{
	for (int i = 0; i < 3; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	return 0;
}

/* Evaluates an includes (want=true) or excludes (want=false) filter.
 * *matched: every given condition holds (includes) / any holds (excludes). */
static int parse_filter(struct pctx *c, const cJSON *v, const char *path,
			bool is_include, bool *applies)
{
	if (!cJSON_IsObject(v))
		return perr(c, path, "expected an object");
	static const char *const known[] = { "arches", "caps", "minKernel", NULL };
	if (check_fields(c, v, path, known) < 0)
		return -1;
	int rc = 0;
	char *p = NULL;

	const cJSON *a = field(v, "arches");
	if (a) {
		if (!(p = fmt(c, "%s.arches", path)))
			return -1;
		rc = check_array(c, a, p);
		bool native = false;
		size_t i = 0;
		for (const cJSON *e = rc == 0 ? a->child : NULL; e && rc == 0; e = e->next, i++) {
			char *ep = fmt(c, "%s[%zu]", p, i);
			if (!ep) {
				rc = -1;
				break;
			}
			const char *s = "", *d = NULL;
			rc = get_string(c, e, ep, &s);
			if (rc == 0 && !(d = arch_docker_name(s)))
				rc = perr_val(c, ep, "unknown architecture", s,
					      " (expected amd64, x86, x32, arm64, arm, ppc64le, "
					      "s390x, riscv64, ...)");
			if (rc == 0 && strcmp(d, c->host->arch_name) == 0)
				native = true;
			free(ep);
		}
		if (rc == 0 && a->child) {
			if (is_include && !native)
				*applies = false;
			if (!is_include && native)
				*applies = false;
		}
		free(p);
		if (rc < 0)
			return -1;
	}

	const cJSON *caps = field(v, "caps");
	if (caps) {
		if (!(p = fmt(c, "%s.caps", path)))
			return -1;
		rc = check_array(c, caps, p);
		size_t i = 0;
		for (const cJSON *e = rc == 0 ? caps->child : NULL; e && rc == 0; e = e->next, i++) {
			char *ep = fmt(c, "%s[%zu]", p, i);
			if (!ep) {
				rc = -1;
				break;
			}
			const char *s = "";
			rc = get_string(c, e, ep, &s);
			bool good = rc == 0 && strncmp(s, "CAP_", 4) == 0 && s[4];
			for (const char *q = s + 4; good && *q; q++)
				if (!(isupper((unsigned char)*q) || isdigit((unsigned char)*q) || *q == '_'))
					good = false;
			if (rc == 0 && !good)
				rc = perr_val(c, ep, "not a capability name", s, " (expected CAP_...)");
			free(ep);
		}
		/* The sandbox holds no capability: an include by caps never
		 * matches; an exclude by caps never excludes. */
		if (rc == 0 && caps->child && is_include)
			*applies = false;
		free(p);
		if (rc < 0)
			return -1;
	}

	const cJSON *mk = field(v, "minKernel");
	if (mk) {
		if (!(p = fmt(c, "%s.minKernel", path)))
			return -1;
		const char *s = "";
		unsigned want[3];
		rc = get_string(c, mk, p, &s);
		if (rc == 0 && parse_version(s, want) < 0)
			rc = perr_val(c, p, "bad kernel version", s, " (expected e.g. \"4.8\")");
		if (rc == 0) {
			bool newer = version_cmp(c->host->kernel, want) >= 0;
			if (is_include && !newer)
				*applies = false;
			if (!is_include && newer)
				*applies = false;
		}
		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ---- syscall entries ---- */

static int add_name(struct pctx *c, struct sc_rule *r, const cJSON *v, const char *path)
{
	const char *s = "";
	if (get_string(c, v, path, &s) < 0)
		return -1;
	if (!*s)
		return perr(c, path, "expected a non-empty syscall name");
	int nr = seccomp_syscall_resolve_name(s);
	if (nr == __NR_SCMP_ERROR || nr < 0) {
		char *q = quote(s);
		if (!q)
			return oom(c);
		char *note = fmt(c, "%s: %s %s (skipped)", path, q,
				 nr == __NR_SCMP_ERROR ? "is not a syscall known to libseccomp"
						       : "does not exist on this architecture");
		free(q);
		if (!note || add_note(c->pol, note) < 0)
			return oom(c);
		return 0;
	}
	char *name = strdup(s);
	char **names = realloc(r->names, (r->n_names + 1) * sizeof *names);
	if (names)
		r->names = names;
	int *nrs = realloc(r->nrs, (r->n_names + 1) * sizeof *nrs);
	if (nrs)
		r->nrs = nrs;
	if (!name || !names || !nrs) {
		free(name);
		return oom(c);
	}
	r->names[r->n_names] = name;
	r->nrs[r->n_names] = nr;
	r->n_names++;
	return 0;
}

static const struct {
	const char *name;
	int op;
} ops[] = {
	{ "SCMP_CMP_NE", SCMP_CMP_NE },	{ "SCMP_CMP_LT", SCMP_CMP_LT },
	{ "SCMP_CMP_LE", SCMP_CMP_LE },	{ "SCMP_CMP_EQ", SCMP_CMP_EQ },
	{ "SCMP_CMP_GE", SCMP_CMP_GE },	{ "SCMP_CMP_GT", SCMP_CMP_GT },
	{ "SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ },
};

static int parse_arg(struct pctx *c, const cJSON *v, const char *path, struct sc_cond *out)
{
	if (!cJSON_IsObject(v))
		return perr(c, path, "expected an object");
	static const char *const known[] = { "index", "value", "valueTwo", "op", NULL };
	if (check_fields(c, v, path, known) < 0)
		return -1;
	static const char *const req[] = { "index", "value", "op" };
	for (size_t i = 0; i < 3; i++)
		if (!field(v, req[i]))
			return perr(c, path, "missing \"%s\"", req[i]);
	int rc = -1;
	char *p = NULL;
	uint64_t u;
	if (!(p = fmt(c, "%s.index", path)) ||
	    get_uint(c, field(v, "index"), p, 0, SC_MAX_ARGS - 1, &u) < 0)
		goto out;
	out->index = (unsigned)u;
	free(p);
	if (!(p = fmt(c, "%s.value", path)) ||
	    get_uint(c, field(v, "value"), p, 0, UINT64_MAX, &out->value) < 0)
		goto out;
	free(p);
	if (!(p = fmt(c, "%s.op", path)))
		goto out;
	const char *s = "";
	if (get_string(c, field(v, "op"), p, &s) < 0)
		goto out;
	size_t i;
	for (i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (strcmp(ops[i].name, s) == 0)
			break;
	if (i == sizeof ops / sizeof ops[0]) {
		perr_val(c, p, "unknown operator", s,
			 " (expected SCMP_CMP_NE, SCMP_CMP_LT, SCMP_CMP_LE, SCMP_CMP_EQ, "
			 "SCMP_CMP_GE, SCMP_CMP_GT or SCMP_CMP_MASKED_EQ)");
		goto out;
	}
	out->op = ops[i].op;
	free(p);
	out->value_two = 0;
	if (!(p = fmt(c, "%s.valueTwo", path)))
		goto out;
	const cJSON *two = field(v, "valueTwo");
	if (two && get_uint(c, two, p, 0, UINT64_MAX, &out->value_two) < 0)
		goto out;
	if (out->value_two != 0 && out->op != SCMP_CMP_MASKED_EQ) {
		perr(c, p, "only meaningful with SCMP_CMP_MASKED_EQ (value is the mask, "
			   "valueTwo the expected result)");
		goto out;
	}
	/* (arg & value) == valueTwo can never hold when valueTwo has a bit
	 * outside the mask, but libseccomp compiles (arg & value) ==
	 * (valueTwo & value): a rule that matches calls the policy never
	 * named (an ERRNO rule refusing them, an ALLOW rule letting them in). */
	if (out->op == SCMP_CMP_MASKED_EQ && (out->value_two & ~out->value) != 0) {
		perr(c, p, "0x%llx has bits outside the mask (value 0x%llx): the condition "
			   "can never hold, but libseccomp would compile (arg & 0x%llx) == 0x%llx "
			   "and match other calls; clear those bits or widen the mask",
		     (unsigned long long)out->value_two, (unsigned long long)out->value,
		     (unsigned long long)out->value,
		     (unsigned long long)(out->value_two & out->value));
		goto out;
	}
	rc = 0;
out:
	free(p);
	return rc;
}

static int parse_entry(struct pctx *c, const cJSON *e, size_t idx, struct sc_rule *r)
{
	int rc = -1;
	char *path = fmt(c, "syscalls[%zu]", idx), *p = NULL;
	if (!path)
		return -1;
	r->entry = idx;
	r->applies = true;
	if (!cJSON_IsObject(e)) {
		perr(c, path, "expected an object");
		goto out;
	}
	static const char *const known[] = { "names", "name", "action", "errnoRet", "args",
					     "comment", "includes", "excludes", NULL };
	if (check_fields(c, e, path, known) < 0)
		goto out;

	const cJSON *names = field(e, "names"), *name = field(e, "name");
	if (names && name) {
		perr(c, path, "has both \"name\" and \"names\"; use \"names\"");
		goto out;
	}
	if (!names && !name) {
		perr(c, path, "missing \"names\"");
		goto out;
	}
	if (name) {
		if (!(p = fmt(c, "%s.name", path)) || add_name(c, r, name, p) < 0)
			goto out;
	} else {
		if (!(p = fmt(c, "%s.names", path)) || check_array(c, names, p) < 0)
			goto out;
		if (!names->child) {
			perr(c, p, "empty");
			goto out;
		}
		size_t i = 0;
		for (const cJSON *n = names->child; n; n = n->next, i++) {
			char *np = fmt(c, "%s[%zu]", p, i);
			int nrc = np ? add_name(c, r, n, np) : -1;
			free(np);
			if (nrc < 0)
				goto out;
		}
	}
	free(p);
	p = NULL;

	const cJSON *comment = field(e, "comment");
	if (comment) {
		const char *s = "";
		if (!(p = fmt(c, "%s.comment", path)) || get_string(c, comment, p, &s) < 0)
			goto out;
		free(p);
		p = NULL;
	}

	const cJSON *action = field(e, "action");
	if (!action) {
		perr(c, path, "missing \"action\"");
		goto out;
	}
	char *ep = fmt(c, "%s.errnoRet", path);
	if (!ep || !(p = fmt(c, "%s.action", path))) {
		free(ep);
		goto out;
	}
	int arc = parse_action(c, action, p, field(e, "errnoRet"), ep, c->default_errno, &r->action);
	free(ep);
	if (arc < 0)
		goto out;
	free(p);
	p = NULL;

	const cJSON *args = field(e, "args");
	if (args) {
		if (!(p = fmt(c, "%s.args", path)) || check_array(c, args, p) < 0)
			goto out;
		size_t n = (size_t)cJSON_GetArraySize(args);
		if (n > 64) {
			perr(c, p, "too many conditions (%zu; at most 64)", n);
			goto out;
		}
		if (n) {
			r->conds = calloc(n, sizeof *r->conds);
			if (!r->conds) {
				oom(c);
				goto out;
			}
		}
		size_t i = 0;
		for (const cJSON *a = args->child; a; a = a->next, i++) {
			char *ap = fmt(c, "%s[%zu]", p, i);
			int crc = ap ? parse_arg(c, a, ap, &r->conds[i]) : -1;
			free(ap);
			if (crc < 0)
				goto out;
			r->n_conds++;
		}
		free(p);
		p = NULL;
	}

	static const char *const filters[] = { "includes", "excludes" };
	for (int f = 0; f < 2; f++) {
		const cJSON *fv = field(e, filters[f]);
		if (!fv)
			continue;
		if (!(p = fmt(c, "%s.%s", path, filters[f])) ||
		    parse_filter(c, fv, p, f == 0, &r->applies) < 0)
			goto out;
		free(p);
		p = NULL;
	}
	rc = 0;
out:
	free(p);
	free(path);
	return rc;
}

static void rule_free(struct sc_rule *r)
{
	for (size_t i = 0; i < r->n_names; i++)
		free(r->names[i]);
	free(r->names);
	free(r->nrs);
	free(r->conds);
}

void sc_policy_free(struct sc_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_rules; i++)
		rule_free(&p->rules[i]);
	free(p->rules);
	for (size_t i = 0; i < p->n_notes; i++)
		free(p->notes[i]);
	free(p->notes);
	free(p);
}

static int parse_top(struct pctx *c, const cJSON *root)
{
	struct sc_policy *pol = c->pol;
	if (!cJSON_IsObject(root))
		return perr(c, "(top level)", "expected a JSON object");
	static const char *const known[] = { "defaultAction", "defaultErrnoRet", "architectures",
					     "archMap", "syscalls", "flags", "listenerPath",
					     "listenerMetadata", "comment", NULL };
	if (check_fields(c, root, "(top level)", known) < 0)
		return -1;

	for (const char *const *k = (const char *const[]){ "listenerPath", "listenerMetadata", NULL };
	     *k; k++) {
		const cJSON *v = field(root, *k);
		const char *s = "";
		if (v && get_string(c, v, *k, &s) < 0)
			return -1;
		if (v && *s)
			return perr(c, *k, "not supported (moat has no seccomp notify agent)");
	}
	const cJSON *comment = field(root, "comment");
	const char *cs;
	if (comment && get_string(c, comment, "comment", &cs) < 0)
		return -1;

	const cJSON *flags = field(root, "flags");
	if (flags) {
		if (check_array(c, flags, "flags") < 0)
			return -1;
		size_t i = 0;
		for (const cJSON *f = flags->child; f; f = f->next, i++) {
			char *p = fmt(c, "flags[%zu]", i);
			if (!p)
				return -1;
			const char *s = "";
			int rc = get_string(c, f, p, &s);
			if (rc == 0 && strcmp(s, "SECCOMP_FILTER_FLAG_LOG") == 0)
				pol->flag_log = true;
			else if (rc == 0)
				rc = perr_val(c, p, "unsupported flag", s,
					      " (moat implements SECCOMP_FILTER_FLAG_LOG only)");
			free(p);
			if (rc < 0)
				return -1;
		}
	}

	uint64_t def_errno = EPERM;
	const cJSON *de = field(root, "defaultErrnoRet");
	if (de && get_uint(c, de, "defaultErrnoRet", 1, 4095, &def_errno) < 0)
		return -1;
	c->default_errno = (unsigned)def_errno;
	const cJSON *da = field(root, "defaultAction");
	if (!da)
		return perr(c, "defaultAction", "missing");
	if (parse_action(c, da, "defaultAction", NULL, "defaultErrnoRet", c->default_errno,
			 &pol->default_action) < 0)
		return -1;

	bool foreign = false;
	const cJSON *archs = field(root, "architectures");
	if (archs && parse_arch_list(c, archs, "architectures", &foreign) < 0)
		return -1;
	const cJSON *amap = field(root, "archMap");
	if (amap && parse_archmap(c, amap, &foreign) < 0)
		return -1;
	if (foreign) {
		char *note = fmt(c, "architectures/archMap: only the native architecture (%s) "
				    "gets rules; syscalls of every other ABI are killed",
				 c->host->arch_name);
		if (!note || add_note(pol, note) < 0)
			return oom(c);
	}

	const cJSON *sys = field(root, "syscalls");
	if (!sys)
		return 0;
	if (check_array(c, sys, "syscalls") < 0)
		return -1;
	size_t n = (size_t)cJSON_GetArraySize(sys);
	if (n == 0)
		return 0;
	pol->rules = calloc(n, sizeof *pol->rules);
	if (!pol->rules)
		return oom(c);
	size_t i = 0;
	for (const cJSON *e = sys->child; e; e = e->next, i++) {
		pol->n_rules++; /* counted first so a partial rule is freed */
		if (parse_entry(c, e, i, &pol->rules[i]) < 0)
			return -1;
	}
	return 0;
}

int sc_policy_parse(const char *buf, size_t len, const struct sc_host *host,
		    struct sc_policy **out, struct moat_error *err)
{
	*out = NULL;
	if (len > SC_MAX_POLICY_BYTES)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "seccomp policy: larger than %u bytes", SC_MAX_POLICY_BYTES);
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
	if (root && end) {
		for (const char *q = end; q < buf + len; q++)
			if (!isspace((unsigned char)*q) && *q != '\0') {
				cJSON_Delete(root);
				root = NULL;
				end = q;
				break;
			}
	}
	if (!root) {
		size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;
		size_t line = 1, col = 1;
		for (size_t i = 0; i < off; i++) {
			if (buf[i] == '\n') {
				line++;
				col = 1;
			} else {
				col++;
			}
		}
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "seccomp policy: invalid JSON at line %zu, column %zu",
				      line, col);
	}
	struct sc_policy *pol = calloc(1, sizeof *pol);
	if (!pol) {
		cJSON_Delete(root);
		return policy_oom(err);
	}
	struct pctx c = { .host = host, .pol = pol, .err = err, .default_errno = EPERM };
	int rc = parse_top(&c, root);
	cJSON_Delete(root);
	if (rc < 0) {
		sc_policy_free(pol);
		return -1;
	}
	*out = pol;
	return 0;
}

int sc_policy_read(const char *path, char **buf, size_t *len, struct moat_error *err)
{
	*buf = NULL;
	*len = 0;
	if (!path) {
		size_t n = moat_embedded_default_policy_len;
		char *b = malloc(n + 1);
		if (!b)
			return policy_oom(err);
		memcpy(b, moat_embedded_default_policy, n);
		b[n] = '\0';
		*buf = b;
		*len = n;
		return 0;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, errno, "seccomp policy %s: %s", path,
				      strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return moat_error_set(err, MOAT_ERR_CONFIG, e, "seccomp policy %s: %s", path,
				      strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "seccomp policy %s: not a regular file", path);
	}
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	while (b) {
		if (n + 1 >= cap) {
			if (cap > SC_MAX_POLICY_BYTES)
				break;
			char *nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				b = NULL;
				break;
			}
			b = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, b + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(b);
			close(fd);
			return moat_error_set(err, MOAT_ERR_CONFIG, e, "seccomp policy %s: read: %s",
					      path, strerror(e));
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (!b)
		return policy_oom(err);
	if (n > SC_MAX_POLICY_BYTES) {
		free(b);
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "seccomp policy %s: larger than %u bytes", path,
				      SC_MAX_POLICY_BYTES);
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

/* Prefixes an error message with the file name. */
static int prefix_error(struct moat_error *err, const char *path)
{
	return moat_error_wrap(err, path ? path : "(embedded default policy)", NULL);
}

/* Reads and parses the policy at path (NULL: the embedded default) for this
 * host. *buf: the policy's bytes (malloc'd) when buf is not NULL. */
static int policy_load(const char *path, struct sc_policy **pol, char **buf, size_t *len,
		       struct moat_error *err)
{
	struct sc_host host;
	if (sc_host_detect(&host, err) < 0)
		return -1;
	char *b;
	size_t n;
	if (sc_policy_read(path, &b, &n, err) < 0)
		return -1;
	if (sc_policy_parse(b, n, &host, pol, err) < 0) {
		free(b);
		return prefix_error(err, path);
	}
	if (buf) {
		*buf = b;
		*len = n;
	} else {
		free(b);
	}
	return 0;
}

int sc_policy_check(const char *path, FILE *notes, struct moat_error *err)
{
	struct sc_policy *pol;
	if (policy_load(path, &pol, NULL, NULL, err) < 0)
		return -1;
	struct moat_seccomp_prog *prog = NULL;
	int rc = sc_compile(pol, &prog, err);
	if (rc == 0 && notes)
		for (size_t i = 0; i < pol->n_notes; i++)
			fprintf(notes, "note: %s\n", pol->notes[i]);
	moat_seccomp_prog_free(prog);
	sc_policy_free(pol);
	return rc < 0 ? prefix_error(err, path) : 0;
}

size_t sc_policy_allowed_count(const struct sc_policy *p)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct sc_rule *r = &p->rules[i];
		if (!r->applies || r->action != SCMP_ACT_ALLOW)
			continue;
		for (size_t k = 0; k < r->n_names; k++) {
			bool seen = false;
			/* an earlier allowing rule, or an earlier name of this one */
			for (size_t j = 0; j <= i && !seen; j++) {
				const struct sc_rule *q = &p->rules[j];
				if (!q->applies || q->action != SCMP_ACT_ALLOW)
					continue;
				for (size_t m = 0; m < (j == i ? k : q->n_names) && !seen; m++)
					seen = q->nrs[m] == r->nrs[k];
			}
			n += !seen;
		}
	}
	return n;
}

int sc_policy_allowed(const char *path, size_t *count, struct moat_error *err)
{
	struct sc_policy *pol;
	if (policy_load(path, &pol, NULL, NULL, err) < 0)
		return -1;
	*count = sc_policy_allowed_count(pol);
	sc_policy_free(pol);
	return 0;
}

int moat_seccomp_policy_print(const char *path, FILE *out, struct moat_error *err)
{
	struct sc_policy *pol;
	char *buf;
	size_t len;
	if (policy_load(path, &pol, &buf, &len, err) < 0)
		return -1;
	sc_policy_free(pol);
	cJSON *root = cJSON_ParseWithLength(buf, len);
	free(buf);
	char *text = root ? cJSON_Print(root) : NULL;
	cJSON_Delete(root);
	if (!text)
		return policy_oom(err);
	int bad = fputs(text, out) < 0 || fputc('\n', out) == EOF || fflush(out) != 0;
	int e = errno;
	free(text);
	if (bad)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e, "writing the policy: %s",
				      strerror(e));
	return 0;
}
