/* oci-seccomp: load an OCI (runtime-spec / containerd) seccomp profile and
 * exec a command under it, the way a container runtime applies a pod's
 * `seccompProfile: Localhost` before the container's first process.
 *
 *   usage: oci-seccomp [-v | -q] PROFILE.json CMD [ARG]...
 * -v: say how many rules were loaded; -q: no note on stderr (for a wrapper
 * whose caller reads the command's stderr; run it once without -q to see it).
 *
 * The profile is the runtime-spec's LinuxSeccomp object: defaultAction,
 * defaultErrnoRet, architectures, syscalls[{names, action, errnoRet,
 * args[{index, value, valueTwo, op}]}] (plus "comment" strings, which
 * change nothing). Anything else is refused with the JSON path of the
 * entry: a key the tool does not know (Docker's includes/excludes/archMap,
 * flags, listenerPath...), an action it cannot apply here (SCMP_ACT_TRACE,
 * SCMP_ACT_NOTIFY), an operator it does not know, a value JSON cannot
 * carry exactly, two conditions on one argument (runc splits those into
 * separate rules, libseccomp would AND them: the file would mean two
 * things), errnoRet on an action that is not an errno.
 *
 * One deliberate exception, the runtimes' own behaviour and never silent:
 * a name in an SCMP_ACT_ALLOW rule that this libseccomp does not know
 * cannot be allowed, so it falls to the default action (runc and crun do
 * the same); the tool names every such syscall on stderr. An unknown name
 * in any other rule is refused: leaving it out would weaken the profile.
 *
 * Used by tests/deploy/seccomp.sh (make check-k8s) to run moat's runtime
 * suites with deploy/kubernetes/seccomp/moat.json as an outer filter. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <seccomp.h>

#define MAX_PROFILE (4u << 20)

static const char *prog = "oci-seccomp";

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return -1;
}

static char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	char *buf = NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	    (size_t)st.st_size <= MAX_PROFILE && (buf = malloc((size_t)st.st_size + 1))) {
		size_t off = 0;
		while (off < (size_t)st.st_size) {
			ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			off += (size_t)n;
		}
		if (off == (size_t)st.st_size) {
			buf[off] = '\0';
			*len = off;
		} else {
			free(buf);
			buf = NULL;
		}
	}
	close(fd);
	return buf;
}

/* every key of obj must be one of keys[] */
static int only_keys(const cJSON *obj, const char *const *keys, const char *where)
{
	if (!cJSON_IsObject(obj))
		return fail("%s: not an object", where);
	for (const cJSON *c = obj->child; c; c = c->next) {
		bool ok = false;
		for (size_t i = 0; keys[i]; i++)
			ok |= strcmp(c->string, keys[i]) == 0;
		if (!ok)
			return fail("%s: unknown key \"%s\" (refused: the tool would not apply it)",
				    where, c->string);
	}
	return 0;
}

/* a JSON number that is exactly a non-negative integer below 2^53 */
static int get_u64(const cJSON *v, uint64_t *out, const char *where, const char *key)
{
	if (!cJSON_IsNumber(v))
		return fail("%s.%s: not a number", where, key);
	double d = v->valuedouble;
	if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d)
		return fail("%s.%s: not an integer JSON can carry exactly (0..2^53)", where, key);
	*out = (uint64_t)d;
	return 0;
}

static int parse_action(const cJSON *v, const cJSON *errno_ret, uint32_t *out, const char *where)
{
	static const struct { const char *name; uint32_t act; } acts[] = {
		{ "SCMP_ACT_ALLOW", SCMP_ACT_ALLOW },
		{ "SCMP_ACT_KILL", SCMP_ACT_KILL },
		{ "SCMP_ACT_KILL_THREAD", SCMP_ACT_KILL_THREAD },
		{ "SCMP_ACT_KILL_PROCESS", SCMP_ACT_KILL_PROCESS },
		{ "SCMP_ACT_TRAP", SCMP_ACT_TRAP },
		{ "SCMP_ACT_LOG", SCMP_ACT_LOG },
	};
	if (!cJSON_IsString(v))
		return fail("%s: the action is not a string", where);
	if (strcmp(v->valuestring, "SCMP_ACT_ERRNO") == 0) {
		uint64_t e = 1; /* EPERM, the runtime-spec's default */
		if (errno_ret && get_u64(errno_ret, &e, where, "errnoRet") < 0)
			return -1;
		if (e > 4095)
			return fail("%s: errnoRet out of range", where);
		*out = SCMP_ACT_ERRNO((uint32_t)e);
		return 0;
	}
	for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
		if (strcmp(v->valuestring, acts[i].name) == 0) {
			if (errno_ret)
				return fail("%s: errnoRet given with %s, which is not SCMP_ACT_ERRNO",
					    where, acts[i].name);
			*out = acts[i].act;
			return 0;
		}
	}
	return fail("%s: action %s is not one the tool can apply", where, v->valuestring);
}

static int parse_arch(const char *name, uint32_t *out)
{
	static const struct { const char *name; uint32_t arch; } arches[] = {
		{ "SCMP_ARCH_X86_64", SCMP_ARCH_X86_64 }, { "SCMP_ARCH_X86", SCMP_ARCH_X86 },
		{ "SCMP_ARCH_X32", SCMP_ARCH_X32 },       { "SCMP_ARCH_AARCH64", SCMP_ARCH_AARCH64 },
		{ "SCMP_ARCH_ARM", SCMP_ARCH_ARM },
	};
	for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++) {
		if (strcmp(name, arches[i].name) == 0) {
			*out = arches[i].arch;
			return 0;
		}
	}
	return -1;
}

static int parse_op(const char *name, enum scmp_compare *out)
{
	static const struct { const char *name; enum scmp_compare op; } ops[] = {
		{ "SCMP_CMP_NE", SCMP_CMP_NE }, { "SCMP_CMP_LT", SCMP_CMP_LT },
		{ "SCMP_CMP_LE", SCMP_CMP_LE }, { "SCMP_CMP_EQ", SCMP_CMP_EQ },
		{ "SCMP_CMP_GE", SCMP_CMP_GE }, { "SCMP_CMP_GT", SCMP_CMP_GT },
		{ "SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ },
	};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		if (strcmp(name, ops[i].name) == 0) {
			*out = ops[i].op;
			return 0;
		}
	}
	return -1;
}

#define MAX_ARGS 6

static int parse_args(const cJSON *args, struct scmp_arg_cmp *cmp, unsigned *n, const char *where)
{
	static const char *const keys[] = { "index", "value", "valueTwo", "op", NULL };
	char path[256];
	*n = 0;
	if (!args || cJSON_IsNull(args))
		return 0;
	if (!cJSON_IsArray(args))
		return fail("%s.args: not an array", where);
	bool seen[MAX_ARGS] = { false };
	int i = 0;
	for (const cJSON *a = args->child; a; a = a->next, i++) {
		snprintf(path, sizeof path, "%s.args[%d]", where, i);
		if (only_keys(a, keys, path) < 0)
			return -1;
		uint64_t idx, value, two = 0;
		const cJSON *op = cJSON_GetObjectItemCaseSensitive(a, "op");
		const cJSON *vt = cJSON_GetObjectItemCaseSensitive(a, "valueTwo");
		if (get_u64(cJSON_GetObjectItemCaseSensitive(a, "index"), &idx, path, "index") < 0 ||
		    get_u64(cJSON_GetObjectItemCaseSensitive(a, "value"), &value, path, "value") < 0 ||
		    (vt && get_u64(vt, &two, path, "valueTwo") < 0))
			return -1;
		if (idx >= MAX_ARGS)
			return fail("%s.index: a system call has 6 arguments (0..5)", path);
		if (seen[idx])
			return fail("%s: a second condition on one argument (runc would OR them, "
				    "libseccomp AND them: refused)", path);
		seen[idx] = true;
		enum scmp_compare c;
		if (!cJSON_IsString(op) || parse_op(op->valuestring, &c) < 0)
			return fail("%s.op: unknown operator", path);
		if (c != SCMP_CMP_MASKED_EQ && two != 0)
			return fail("%s.valueTwo: only SCMP_CMP_MASKED_EQ takes a second value%s",
				    path, "");
		if (*n >= MAX_ARGS)
			return fail("%s: more than 6 conditions", path);
		/* runtime-spec: for MASKED_EQ, value is the mask and valueTwo the datum */
		cmp[(*n)++] = c == SCMP_CMP_MASKED_EQ ? SCMP_CMP64(idx, c, value, two)
						      : SCMP_CMP64(idx, c, value);
	}
	return 0;
}

int main(int argc, char **argv)
{
	bool verbose = false, quiet = false;
	if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "-q") == 0)) {
		verbose = argv[1][1] == 'v';
		quiet = argv[1][1] == 'q';
		argv++;
		argc--;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: %s [-v | -q] PROFILE.json CMD [ARG]...\n", prog);
		return 125;
	}
	size_t len = 0;
	char *text = read_file(argv[1], &len);
	if (!text) {
		fprintf(stderr, "%s: cannot read %s (a regular file of at most 4 MiB)\n", prog, argv[1]);
		return 125;
	}
	/* NUL-terminated by read_file; a NUL inside is not JSON */
	cJSON *root = strlen(text) == len ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
	free(text);
	if (!root) {
		fprintf(stderr, "%s: %s is not valid JSON\n", prog, argv[1]);
		return 125;
	}
	static const char *const top_keys[] = { "defaultAction", "defaultErrnoRet", "architectures",
						"syscalls", "comment", NULL };
	static const char *const sc_keys[] = { "names", "action", "errnoRet", "args", "comment",
					       NULL };
	scmp_filter_ctx ctx = NULL;
	int rc = 125, unknown = 0, rules = 0;
	char unknown_names[2048] = "";
	uint32_t def;
	if (only_keys(root, top_keys, "$") < 0 ||
	    parse_action(cJSON_GetObjectItemCaseSensitive(root, "defaultAction"),
			 cJSON_GetObjectItemCaseSensitive(root, "defaultErrnoRet"), &def,
			 "$.defaultAction") < 0)
		goto out;
	if (def == SCMP_ACT_ALLOW) {
		fail("$.defaultAction: SCMP_ACT_ALLOW (a deny list) is not what this tool checks");
		goto out;
	}
	ctx = seccomp_init(def);
	if (!ctx || seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1) < 0) {
		fail("seccomp_init failed");
		goto out;
	}
	const cJSON *arches = cJSON_GetObjectItemCaseSensitive(root, "architectures");
	if (arches && !cJSON_IsNull(arches)) {
		if (!cJSON_IsArray(arches)) {
			fail("$.architectures: not an array");
			goto out;
		}
		for (const cJSON *a = arches->child; a; a = a->next) {
			uint32_t arch;
			if (!cJSON_IsString(a) || parse_arch(a->valuestring, &arch) < 0) {
				fail("$.architectures: unknown architecture %s",
				     cJSON_IsString(a) ? a->valuestring : "(not a string)");
				goto out;
			}
			int r = seccomp_arch_add(ctx, arch);
			if (r < 0 && r != -EEXIST) {
				fail("$.architectures: cannot add %s: %s", a->valuestring, strerror(-r));
				goto out;
			}
		}
	}
	const cJSON *scs = cJSON_GetObjectItemCaseSensitive(root, "syscalls");
	if (!cJSON_IsArray(scs)) {
		fail("$.syscalls: missing or not an array");
		goto out;
	}
	int si = 0;
	for (const cJSON *s = scs->child; s; s = s->next, si++) {
		char where[64];
		snprintf(where, sizeof where, "$.syscalls[%d]", si);
		if (only_keys(s, sc_keys, where) < 0)
			goto out;
		uint32_t act;
		if (parse_action(cJSON_GetObjectItemCaseSensitive(s, "action"),
				 cJSON_GetObjectItemCaseSensitive(s, "errnoRet"), &act, where) < 0)
			goto out;
		struct scmp_arg_cmp cmp[MAX_ARGS];
		unsigned ncmp;
		if (parse_args(cJSON_GetObjectItemCaseSensitive(s, "args"), cmp, &ncmp, where) < 0)
			goto out;
		const cJSON *names = cJSON_GetObjectItemCaseSensitive(s, "names");
		if (!cJSON_IsArray(names) || !names->child) {
			fail("%s.names: missing, empty or not an array", where);
			goto out;
		}
		for (const cJSON *nm = names->child; nm; nm = nm->next) {
			if (!cJSON_IsString(nm) || !nm->valuestring[0]) {
				fail("%s.names: an entry is not a non-empty string", where);
				goto out;
			}
			int nr = seccomp_syscall_resolve_name(nm->valuestring);
			if (nr == __NR_SCMP_ERROR) {
				if (act != SCMP_ACT_ALLOW) {
					fail("%s.names: %s is unknown to this libseccomp, and leaving "
					     "it out would weaken a rule that is not an allow",
					     where, nm->valuestring);
					goto out;
				}
				unknown++;
				size_t ul = strlen(unknown_names);
				snprintf(unknown_names + ul, sizeof unknown_names - ul, " %s",
					 nm->valuestring);
				continue;
			}
			if (act == def && ncmp == 0)
				continue; /* the default already; libseccomp refuses it */
			int r = seccomp_rule_add_array(ctx, act, nr, ncmp, ncmp ? cmp : NULL);
			if (r < 0) {
				fail("%s: libseccomp refused the rule for %s", where, nm->valuestring);
				fprintf(stderr, "%s: (%s)\n", prog, strerror(-r));
				goto out;
			}
			rules++;
		}
	}
	if (unknown && !quiet) {
		const struct scmp_version *v = seccomp_version();
		fprintf(stderr,
			"%s: note: %d allowed name(s) unknown to libseccomp %u.%u.%u get the "
			"default action, as under runc/crun:%s\n",
			prog, unknown, v->major, v->minor, v->micro, unknown_names);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		perror("oci-seccomp: PR_SET_NO_NEW_PRIVS");
		goto out;
	}
	int r = seccomp_load(ctx);
	if (r < 0) {
		fprintf(stderr, "%s: seccomp_load: %s\n", prog, strerror(-r));
		goto out;
	}
	if (verbose)
		fprintf(stderr, "%s: %s loaded: %d rules\n", prog, argv[1], rules);
	seccomp_release(ctx);
	cJSON_Delete(root);
	execvp(argv[2], argv + 2);
	fprintf(stderr, "%s: exec %s: %s\n", prog, argv[2], strerror(errno));
	return 127;
out:
	if (ctx)
		seccomp_release(ctx);
	cJSON_Delete(root);
	return rc;
}
