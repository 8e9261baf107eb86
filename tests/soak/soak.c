/* The soak's mix, its checks, and what a process holds (see soak.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "soak.h"

#define NLANGS 4
static const char *const LANGS[NLANGS] = { "python", "javascript", "typescript", "bash" };

/* Every program reads the run's number from $SOAK_RUN and prints it, so a
 * result that came back to the wrong run (or mixed with another) fails. */
static const char *const OK_CODE[NLANGS] = {
	"import os\nprint('ok', os.environ['SOAK_RUN'])\n",
	"console.log('ok', process.env.SOAK_RUN)\n",
	"const run: string = process.env.SOAK_RUN ?? '?';\nconsole.log('ok', run)\n",
	"echo ok \"$SOAK_RUN\"\n",
};
static const char *const EXIT_CODE[NLANGS] = {
	"import os, sys\nprint('bye', os.environ['SOAK_RUN'])\nsys.exit(13)\n",
	"console.log('bye', process.env.SOAK_RUN)\nprocess.exit(14)\n",
	"const code: number = 15;\nconsole.log('bye', process.env.SOAK_RUN)\nprocess.exitCode = code\n",
	"echo bye \"$SOAK_RUN\"\nexit 16\n",
};
static const int EXIT_STATUS[NLANGS] = { 13, 14, 15, 16 };
static const char *const SLEEP_CODE[NLANGS] = {
	"import time\ntime.sleep(60)\n",
	"setTimeout(() => {}, 60000)\n",
	"const ms: number = 60000;\nsetTimeout(() => {}, ms)\n",
	"sleep 60\n",
};
/* Touches every byte it allocates (b'x' * n writes them): under a cgroup
 * the OOM killer ends it; under RLIMIT_DATA the allocation fails. */
static const char OOM_CODE[] =
	"import sys\n"
	"keep = []\n"
	"try:\n"
	"    for i in range(64):\n"
	"        keep.append(b'x' * (8 << 20))\n"
	"except MemoryError:\n"
	"    print('memory-error')\n"
	"    sys.exit(3)\n"
	"print('survived')\n";
/* Every process forks again; the first to fail is the program itself,
 * which exits 7; the others that fail sleep until the sandbox ends. */
static const char FORKBOMB_CODE[] =
	"import os, sys, time\n"
	"top = os.getpid()\n"
	"while True:\n"
	"    try:\n"
	"        os.fork()\n"
	"    except OSError:\n"
	"        if os.getpid() == top:\n"
	"            sys.exit(7)\n"
	"        time.sleep(60)\n"
	"        os._exit(0)\n";
/* An A question only (no AAAA: the host's /etc/hosts answers localhost's
 * A record, where an AAAA question would go on to the host's DNS server).
 * moat answers it empty: 127.0.0.1 is loopback. No packet leaves the host. */
static const char *const NET_CODE[2] = {
	"import os, socket\n"
	"try:\n"
	"    socket.getaddrinfo('localhost.', 80, socket.AF_INET)\n"
	"    print('resolved', os.environ['SOAK_RUN'])\n"
	"except socket.gaierror:\n"
	"    print('dns-failed', os.environ['SOAK_RUN'])\n",
	"require('dns').lookup('localhost.', { family: 4 }, (e) =>\n"
	"  console.log(e ? 'dns-failed' : 'resolved', process.env.SOAK_RUN))\n",
};
static const char *const NET_LANG[2] = { "python", "javascript" };
static const char *const OUT_CODE[2] = {
	"mkdir -p out\n"
	"echo \"a $SOAK_RUN\" > out/a.txt\n"
	"printf '\\000\\001\\002\\377' > out/b.bin\n"
	"echo skip > skip.txt\n",
	"import os\n"
	"os.makedirs('out', exist_ok=True)\n"
	"open('out/a.txt', 'w').write('a %s\\n' % os.environ['SOAK_RUN'])\n"
	"open('out/b.bin', 'wb').write(bytes([0, 1, 2, 255]))\n"
	"open('skip.txt', 'w').write('skip\\n')\n",
};
static const char *const OUT_LANG[2] = { "bash", "python" };

#define TIMEOUT_MS 500
/* the runs that should end by themselves: far above any start-up, so
 * that only a hung run reaches it */
#define NORMAL_TIMEOUT_MS 30000

const char *soak_mode_name(enum soak_mode m)
{
	static const char *const names[SOAK__MODES] = { "ok", "exit", "timeout", "oom",
							 "forkbomb", "network", "outputs" };
	return (unsigned)m < SOAK__MODES ? names[m] : "?";
}

void soak_case_of(unsigned long i, struct soak_case *c)
{
	unsigned long v = (i / 10) % NLANGS;
	memset(c, 0, sizeof *c);
	switch (i % 10) {
	case 0: case 1: case 2:
		c->mode = SOAK_OK;
		c->lang = LANGS[(v + i % 10) % NLANGS];
		break;
	case 3: case 4: {
		size_t l = (v + (i % 10 == 3 ? 0 : 3)) % NLANGS;
		c->mode = SOAK_EXIT;
		c->lang = LANGS[l];
		c->exit_code = EXIT_STATUS[l];
		break;
	}
	case 5:
		c->mode = SOAK_TIMEOUT;
		c->lang = LANGS[v];
		break;
	case 6:
		c->mode = SOAK_OOM;
		c->lang = "python";
		break;
	case 7:
		c->mode = SOAK_FORKBOMB;
		c->lang = "python";
		break;
	case 8:
		c->mode = SOAK_NETWORK;
		c->lang = NET_LANG[v % 2];
		break;
	default:
		c->mode = SOAK_OUTPUTS;
		c->lang = OUT_LANG[v % 2];
		break;
	}
}

static size_t lang_index(const char *lang)
{
	for (size_t k = 0; k < NLANGS; k++)
		if (!strcmp(LANGS[k], lang))
			return k;
	return 0;
}

char *soak_request(unsigned long i, const struct soak_case *c)
{
	const char *code = NULL;
	size_t l = lang_index(c->lang);
	switch (c->mode) {
	case SOAK_OK: code = OK_CODE[l]; break;
	case SOAK_EXIT: code = EXIT_CODE[l]; break;
	case SOAK_TIMEOUT: code = SLEEP_CODE[l]; break;
	case SOAK_OOM: code = OOM_CODE; break;
	case SOAK_FORKBOMB: code = FORKBOMB_CODE; break;
	case SOAK_NETWORK: code = NET_CODE[!strcmp(c->lang, "javascript")]; break;
	case SOAK_OUTPUTS: code = OUT_CODE[!strcmp(c->lang, "python")]; break;
	case SOAK__MODES: return NULL;
	}
	char run[24];
	snprintf(run, sizeof run, "%lu", i);
	cJSON *o = cJSON_CreateObject(), *env = cJSON_CreateObject();
	bool ok = o && env && cJSON_AddStringToObject(o, "language", c->lang) &&
		  cJSON_AddStringToObject(o, "code", code) &&
		  cJSON_AddNumberToObject(o, "timeout",
					  c->mode == SOAK_TIMEOUT ? TIMEOUT_MS : NORMAL_TIMEOUT_MS) &&
		  cJSON_AddStringToObject(env, "SOAK_RUN", run) &&
		  cJSON_AddItemToObject(o, "env", env);
	if (!ok)
		cJSON_Delete(env);
	env = NULL;
	if (ok && c->mode == SOAK_OOM)
		ok = cJSON_AddNumberToObject(o, "memoryMb", 48) != NULL;
	if (ok && c->mode == SOAK_FORKBOMB)
		ok = cJSON_AddNumberToObject(o, "pidsLimit", 16) != NULL;
	if (ok && c->mode == SOAK_NETWORK)
		ok = cJSON_AddTrueToObject(o, "network") != NULL;
	if (ok && c->mode == SOAK_OUTPUTS) {
		cJSON *pats = cJSON_CreateArray();
		cJSON *p = cJSON_CreateString("out/*");
		ok = pats && p && cJSON_AddItemToArray(pats, p) && cJSON_AddItemToObject(o, "outputs", pats);
		if (!ok) {
			cJSON_Delete(p);
			cJSON_Delete(pats);
		}
	}
	char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	return text;
}

static const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool str_is(const cJSON *v, const char *s)
{
	return cJSON_IsString(v) && !strcmp(v->valuestring, s);
}

static const char *str_or(const cJSON *v, const char *dflt)
{
	return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* The file "name" of the result's "files", as the outputs runs write it. */
static bool file_is(const cJSON *files, const char *name, const char *encoding, const char *content,
		    double size)
{
	const cJSON *f = get(files, name);
	return cJSON_IsObject(f) && str_is(get(f, "encoding"), encoding) &&
	       str_is(get(f, "content"), content) && cJSON_IsNumber(get(f, "size")) &&
	       get(f, "size")->valuedouble == size && cJSON_IsFalse(get(f, "truncated"));
}

bool soak_check(unsigned long i, const struct soak_case *c, const char *json, size_t len,
		char *why, size_t whylen, struct soak_tally *t)
{
	char want[64];
	cJSON *r = json ? cJSON_ParseWithLength(json, len) : NULL;
	t->runs[c->mode]++;
#define FAIL(...)                                          \
	do {                                               \
		snprintf(why, whylen, __VA_ARGS__);        \
		goto fail;                                 \
	} while (0)
	if (!r || !cJSON_IsObject(r))
		FAIL("not a JSON object");
	const cJSON *e = get(r, "error");
	if (e)
		FAIL("error %s: %s", str_or(get(e, "type"), "?"), str_or(get(e, "message"), "?"));
	const cJSON *code = get(r, "exitCode"), *killed = get(r, "killedBy"), *to = get(r, "timedOut");
	const cJSON *oom = get(r, "oomKilled"), *out = get(r, "stdout"), *lim = get(r, "limits");
	if (!str_is(get(r, "provider"), "native") || !(cJSON_IsNumber(code) || cJSON_IsNull(code)) ||
	    !(cJSON_IsString(killed) || cJSON_IsNull(killed)) || !cJSON_IsBool(to) ||
	    !cJSON_IsBool(oom) || !cJSON_IsString(out) || !cJSON_IsString(get(r, "stderr")) ||
	    !cJSON_IsNumber(get(r, "durationMs")) || !cJSON_IsObject(lim) ||
	    !cJSON_IsArray(get(r, "warnings")))
		FAIL("not a result: a field is missing or of the wrong type");
	int exit_code = cJSON_IsNumber(code) ? code->valueint : -1000;
	const char *kb = cJSON_IsString(killed) ? killed->valuestring : "null";
	bool timed_out = cJSON_IsTrue(to);
	if (c->mode != SOAK_TIMEOUT && timed_out)
		FAIL("timed out");
	switch (c->mode) {
	case SOAK_OK:
	case SOAK_EXIT:
		snprintf(want, sizeof want, "%s %lu\n", c->mode == SOAK_OK ? "ok" : "bye", i);
		if (exit_code != c->exit_code || strcmp(kb, "null"))
			FAIL("exitCode %d killedBy %s, expected %d", exit_code, kb, c->exit_code);
		if (!str_is(out, want))
			FAIL("stdout is not \"%.*s\\n\"", (int)strlen(want) - 1, want);
		break;
	case SOAK_TIMEOUT:
		if (!cJSON_IsNull(code) || strcmp(kb, "timeout") || !timed_out)
			FAIL("exitCode %d killedBy %s timedOut %d, expected a timeout", exit_code, kb,
			     timed_out);
		break;
	case SOAK_OOM: {
		const char *mech = str_or(get(lim, "memory"), "?");
		if (!strncmp(mech, "cgroup-", 7)) {
			t->mem_cgroup++;
			if (!cJSON_IsNull(code) || strcmp(kb, "oom") || !cJSON_IsTrue(oom))
				FAIL("memory %s: exitCode %d killedBy %s oomKilled %d, expected an "
				     "OOM kill", mech, exit_code, kb, cJSON_IsTrue(oom));
		} else if (!strcmp(mech, "rlimit")) {
			t->mem_rlimit++;
			if (exit_code != 3 || strcmp(kb, "null") || !str_is(out, "memory-error\n"))
				FAIL("memory rlimit: exitCode %d killedBy %s, expected a MemoryError "
				     "(exit 3)", exit_code, kb);
		} else {
			FAIL("memory limit enforced by \"%s\"", mech);
		}
		break;
	}
	case SOAK_FORKBOMB: {
		const char *mech = str_or(get(lim, "pids"), "?");
		bool cg = !strncmp(mech, "cgroup-", 7);
		if (cg)
			t->pids_cgroup++;
		else if (!strcmp(mech, "rlimit"))
			t->pids_rlimit++;
		else
			FAIL("pids limit enforced by \"%s\"", mech);
		if (exit_code != 7 || strcmp(kb, cg ? "pids" : "null"))
			FAIL("pids %s: exitCode %d killedBy %s, expected 7 and %s", mech, exit_code, kb,
			     cg ? "pids" : "null");
		break;
	}
	case SOAK_NETWORK: {
		snprintf(want, sizeof want, "dns-failed %lu\n", i);
		if (exit_code != 0 || strcmp(kb, "null") || !str_is(out, want))
			FAIL("exitCode %d killedBy %s, expected 0 and \"dns-failed %lu\"", exit_code, kb, i);
		const cJSON *net = get(r, "network"), *conns = get(net, "connections");
		if (!str_is(get(net, "mode"), "egress") || !cJSON_IsArray(conns) ||
		    cJSON_GetArraySize(conns) < 1)
			FAIL("network: no egress mode, or no DNS question logged");
		const cJSON *q;
		cJSON_ArrayForEach(q, conns) {
			if (!str_is(get(q, "kind"), "dns") || !str_is(get(q, "host"), "localhost") ||
			    !cJSON_IsFalse(get(q, "allowed")))
				FAIL("network: an entry other than a refused DNS question for localhost");
		}
		break;
	}
	case SOAK_OUTPUTS: {
		snprintf(want, sizeof want, "a %lu\n", i);
		const cJSON *files = get(r, "files");
		if (exit_code != 0 || strcmp(kb, "null"))
			FAIL("exitCode %d killedBy %s, expected 0", exit_code, kb);
		if (!cJSON_IsObject(files) || cJSON_GetArraySize(files) != 2 ||
		    !file_is(files, "out/a.txt", "utf8", want, (double)strlen(want)) ||
		    !file_is(files, "out/b.bin", "base64", "AAEC/w==", 4))
			FAIL("files are not out/a.txt and out/b.bin as written");
		break;
	}
	case SOAK__MODES:
		FAIL("no such mode");
	}
#undef FAIL
	cJSON_Delete(r);
	return true;
fail:
	t->failed[c->mode]++;
	if (json) {
		size_t used = strlen(why);
		while (len > 0 && (json[len - 1] == '\n' || json[len - 1] == ' '))
			len--;
		snprintf(why + used, whylen - used, "; result: %.*s", (int)(len > 600 ? 600 : len), json);
	}
	cJSON_Delete(r);
	return false;
}

void soak_tally_add(struct soak_tally *into, const struct soak_tally *t)
{
	for (int m = 0; m < SOAK__MODES; m++) {
		into->runs[m] += t->runs[m];
		into->failed[m] += t->failed[m];
	}
	into->mem_cgroup += t->mem_cgroup;
	into->mem_rlimit += t->mem_rlimit;
	into->pids_cgroup += t->pids_cgroup;
	into->pids_rlimit += t->pids_rlimit;
}

void soak_tally_format(const struct soak_tally *t, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int m = 0; m < SOAK__MODES && used < len; m++) {
		int n = snprintf(buf + used, len - used, "%s%s:%lu/%lu", m ? "," : "mix=",
				 soak_mode_name((enum soak_mode)m), t->runs[m], t->failed[m]);
		if (n < 0)
			return;
		used += (size_t)n;
	}
	if (used < len)
		snprintf(buf + used, len - used, " mem=cgroup:%lu/rlimit:%lu pids=cgroup:%lu/rlimit:%lu",
			 t->mem_cgroup, t->mem_rlimit, t->pids_cgroup, t->pids_rlimit);
}

/* ---- what a process holds and leaves ------------------------------------ */

double soak_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int soak_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

long soak_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

#define MAX_LEAF_DIRS 32
static char leaf_dirs[MAX_LEAF_DIRS][4200];
static int n_leaf_dirs;

static void add_leaf_dir(const char *dir)
{
	for (int i = 0; i < n_leaf_dirs; i++)
		if (!strcmp(leaf_dirs[i], dir))
			return;
	if (n_leaf_dirs < MAX_LEAF_DIRS && strlen(dir) < sizeof leaf_dirs[0])
		strcpy(leaf_dirs[n_leaf_dirs++], dir);
}

void soak_leaf_dirs_init(void)
{
	n_leaf_dirs = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096], dir[4200];
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *ctl = strchr(line, ':');
		char *path = ctl ? strchr(ctl + 1, ':') : NULL;
		if (!path)
			continue;
		*path++ = '\0';
		ctl++;
		if (!strcmp(path, "/"))
			path = "";
		if (*ctl == '\0') { /* cgroup2: hybrid or unified */
			snprintf(dir, sizeof dir, "/sys/fs/cgroup/unified%s", path);
			add_leaf_dir(dir);
			snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", path);
			add_leaf_dir(dir);
		} else if (strncmp(ctl, "name=", 5)) {
			/* "cpu,cpuacct" is mounted under that name, often with links */
			snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s", ctl, path);
			add_leaf_dir(dir);
			char *comma = strchr(ctl, ',');
			if (comma) {
				*comma = '\0';
				snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s", ctl, path);
				add_leaf_dir(dir);
			}
		}
	}
	if (f)
		fclose(f);
	const char *parent = getenv("MOAT_CGROUP_PARENT");
	if (parent && parent[0] == '/')
		add_leaf_dir(parent);
}

int soak_count_leaves(pid_t pid, bool with_supervisor, char *which, size_t len)
{
	char prefix[48];
	int plen = snprintf(prefix, sizeof prefix, "moat-%ld-", (long)pid);
	int n = 0;
	if (which && len)
		which[0] = '\0';
	for (int i = 0; i < n_leaf_dirs; i++) {
		DIR *d = opendir(leaf_dirs[i]);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d))) {
			if (strncmp(de->d_name, prefix, (size_t)plen) ||
			    (!with_supervisor && !strcmp(de->d_name + plen, "supervisor")))
				continue;
			if (n++ == 0 && which && len)
				snprintf(which, len, "%s/%s", leaf_dirs[i], de->d_name);
		}
		closedir(d);
	}
	return n;
}

int soak_children(pid_t *pids, int max)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char path[300];
		snprintf(path, sizeof path, "/proc/self/task/%s/children", de->d_name);
		FILE *f = fopen(path, "re");
		long p;
		while (f && fscanf(f, "%ld", &p) == 1) {
			if (n < max)
				pids[n] = (pid_t)p;
			n++;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return n;
}

int soak_subreaper(void)
{
	return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}
