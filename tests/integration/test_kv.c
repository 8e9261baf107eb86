/* The scoped key-value store through `moat exec` (docs/KV.md), as root and
 * as uid 65534: state that outlives a run for one sandboxId and no other,
 * nothing of the store reachable without kvEnabled, writes that survive a
 * kill -9 of moat, concurrent runs on one id, quotas the program sees. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kv_fill.h"
#include "suites.h"

#define ROOTLESS_ID 65534

/* A private directory for one test's store, owned by the mode's user. */
struct store {
	char dir[64];
	char file[96];
};

static void store_make(struct store *s, int mode)
{
	snprintf(s->dir, sizeof s->dir, "/tmp/moat-kv-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	if (mode == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(s->dir, ROOTLESS_ID, ROOTLESS_ID), 0);
	snprintf(s->file, sizeof s->file, "%s/kv.sqlite3", s->dir);
}

static void store_drop(struct store *s)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* moat exec --kv FILE [more] with {"language","code","sandboxId","kvEnabled"...extra}. */
static void kv_exec(int mode, const struct store *s, const char *lang, const char *code,
		    const char *id, bool kv, const char *extra, const char *const *more,
		    struct run_out *o)
{
	char *qc = harness_json_quote(code), *qi = id ? harness_json_quote(id) : NULL;
	char *req = NULL;
	ck_assert_int_ge(asprintf(&req, "{\"language\":\"%s\",\"code\":%s%s%s,\"kvEnabled\":%s%s}",
				  lang, qc, qi ? ",\"sandboxId\":" : "", qi ? qi : "",
				  kv ? "true" : "false", extra ? extra : ""),
			 0);
	const char *args[16] = { "exec", "--kv", s->file, "--runtime", harness_runtime_dir() };
	int n = 5;
	for (int i = 0; more && more[i]; i++)
		args[n++] = more[i];
	args[n] = NULL;
	harness_run(mode, args, req, strlen(req), o);
	free(req);
	free(qc);
	free(qi);
}

static void expect_ok(const char *what, const struct run_out *o)
{
	ck_assert_msg(o->status == 0 && o->json && harness_num(o, "exitCode") == 0,
		      "%s: status %d: %.600s %.300s", what, o->status, o->out, o->err);
}

static const char *out_of(const struct run_out *o)
{
	const char *s = harness_str(o, "stdout");
	return s ? s : "";
}

#define PY_SET                                                                         \
	"from spin_sdk import key_value\n"                                              \
	"s = key_value.open_default()\n"                                                \
	"s.set('greeting', b'hello')\n"                                                 \
	"s.set('bin', bytes(range(256)))\n"                                             \
	"print('set')\n"
#define PY_GET                                                                         \
	"from spin_sdk import key_value\n"                                              \
	"s = key_value.open_default()\n"                                                \
	"g = s.get('greeting')\n"                                                       \
	"b = s.get('bin')\n"                                                            \
	"print(g, b == bytes(range(256)) if b is not None else None, s.exists('greeting'),\n" \
	"      sorted(s.get_keys()), s.get('missing'))\n"

START_TEST(kv_persists_for_one_id)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct run_out o;
	kv_exec(_i, &st, "python", PY_SET, "agent-1", true, NULL, NULL, &o);
	expect_ok("set", &o);
	harness_free(&o);
	kv_exec(_i, &st, "python", PY_GET, "agent-1", true, NULL, NULL, &o);
	expect_ok("get", &o);
	ck_assert_str_eq(out_of(&o), "b'hello' True True ['bin', 'greeting'] None\n");
	harness_free(&o);
	/* another id sees nothing of it */
	kv_exec(_i, &st, "python", PY_GET, "agent-2", true, NULL, NULL, &o);
	expect_ok("other id", &o);
	ck_assert_str_eq(out_of(&o), "None None False [] None\n");
	harness_free(&o);
	/* an id that would alias under a naive "id:key" scheme */
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"print(s.get('1:greeting'), s.get_keys())\n",
		"agent", true, NULL, NULL, &o);
	expect_ok("alias id", &o);
	ck_assert_str_eq(out_of(&o), "None []\n");
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* Written from TypeScript, read from Python: one store, one API contract. */
START_TEST(kv_typescript_to_python)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct run_out o;
	kv_exec(_i, &st, "typescript",
		"import * as kv from \"@spinframework/spin-kv\";\n"
		"const s = kv.openDefault();\n"
		"s.set(\"from-ts\", \"typed\");\n"
		"s.setJson(\"cfg\", { a: 1, b: [true] });\n"
		"const n: number = s.getKeys().length;\n"
		"console.log(n, JSON.stringify(s.getJson(\"cfg\")), s.exists(\"nope\"));\n",
		"mixed", true, NULL, NULL, &o);
	expect_ok("ts set", &o);
	ck_assert_str_eq(out_of(&o), "2 {\"a\":1,\"b\":[true]} false\n");
	harness_free(&o);
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"print(s.get('from-ts'), s.get('cfg'))\n",
		"mixed", true, NULL, NULL, &o);
	expect_ok("python get", &o);
	ck_assert_str_eq(out_of(&o), "b'typed' b'{\"a\":1,\"b\":[true]}'\n");
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* kvEnabled false: no fd, no variable, no socket of the store anywhere the
 * program can look; the file itself is not in the sandbox's view. */
START_TEST(kv_disabled_unreachable)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct run_out o;
	/* create the store first, so there is a file that could leak */
	kv_exec(_i, &st, "python", PY_SET, "secret-id", true, NULL, NULL, &o);
	expect_ok("set", &o);
	harness_free(&o);
	char code[2048];
	snprintf(code, sizeof code,
		 "import os, socket, stat\n"
		 "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
		 "print('fds', [f for f in fds if f > 2 and os.path.exists('/proc/self/fd/%%d' %% f)\n"
		 "      and not os.readlink('/proc/self/fd/%%d' %% f).startswith('/proc')])\n"
		 "print('env', sorted(k for k in os.environ if 'KV' in k or 'MOAT' in k))\n"
		 "socks = []\n"
		 "for top in ('/run', '/tmp', '/sandbox', '/var', '/opt', '/home', '/root'):\n"
		 "    for d, dirs, files in os.walk(top, onerror=lambda e: None):\n"
		 "        for f in files:\n"
		 "            p = os.path.join(d, f)\n"
		 "            try:\n"
		 "                m = os.lstat(p).st_mode\n"
		 "            except OSError:\n"
		 "                continue\n"
		 "            if stat.S_ISSOCK(m) or 'kv.sqlite3' in f:\n"
		 "                socks.append(p)\n"
		 "print('files', socks)\n"
		 "print('unix', [l.split()[-1] for l in open('/proc/net/unix').read().splitlines()[1:]\n"
		 "      if len(l.split()) > 7])\n"
		 "print('store', os.path.exists('%s'))\n",
		 st.file);
	kv_exec(_i, &st, "python", code, "secret-id", false, NULL, NULL, &o);
	expect_ok("probe", &o);
	ck_assert_msg(!strcmp(out_of(&o), "fds []\nenv []\nfiles []\nunix []\nstore False\n"),
		      "the sandbox sees part of the store: %s", out_of(&o));
	harness_free(&o);
	/* opening the store says why it is not there */
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"try:\n"
		"    key_value.open_default()\n"
		"except key_value.Error as e:\n"
		"    print(e.kind, e)\n",
		"secret-id", false, NULL, NULL, &o);
	expect_ok("python open", &o);
	ck_assert_msg(strstr(out_of(&o), "access_denied") && strstr(out_of(&o), "kvEnabled is false"),
		      "%s", out_of(&o));
	harness_free(&o);
	kv_exec(_i, &st, "javascript",
		"import * as kv from \"@spinframework/spin-kv\";\n"
		"try { kv.openDefault(); } catch (e) { console.log(e.kind, e.message); }\n",
		"secret-id", false, NULL, NULL, &o);
	expect_ok("js open", &o);
	ck_assert_msg(strstr(out_of(&o), "access_denied") && strstr(out_of(&o), "kvEnabled is false"),
		      "%s", out_of(&o));
	harness_free(&o);
	/* the fd of a kvEnabled run is there, and only then */
	kv_exec(_i, &st, "python",
		"import os\nprint(os.environ.get('MOAT_KV_FD'), sorted(os.listdir('/proc/self/fd')))\n",
		"secret-id", true, NULL, NULL, &o);
	expect_ok("enabled", &o);
	ck_assert_str_eq(out_of(&o), "4 ['0', '1', '2', '3', '4']\n");
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* In a real sandbox, the Spin SDK modules moat does not offer fail at import
 * with one sentence (Python and JS; JS through the resolve hook, which the
 * runner installs for any "@spinframework/spin-" specifier), and a program
 * that catches the failure runs on. */
START_TEST(kv_spin_modules_not_offered)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct run_out o;
	kv_exec(_i, &st, "python",
		"try:\n"
		"    from spin_sdk import llm\n"
		"except ImportError as e:\n"
		"    print(e)\n"
		"from spin_sdk import variables\n",
		"spin-modules", false, NULL, NULL, &o);
	ck_assert_msg(o.json && harness_num(&o, "exitCode") == 1, "%.600s", o.out);
	ck_assert_msg(strstr(out_of(&o), "moat does not offer spin_sdk.llm ("), "%s", out_of(&o));
	const char *err = harness_str(&o, "stderr");
	ck_assert_msg(err && strstr(err, "\nImportError: moat does not offer spin_sdk.variables ("),
		      "stderr: %s", err ? err : "(none)");
	harness_free(&o);
	kv_exec(_i, &st, "javascript",
		"try { await import(\"@spinframework/spin-llm\"); } catch (e) { console.log(e.message); }\n"
		"const { get } = await import(\"@spinframework/spin-variables\");\n",
		"spin-modules", false, NULL, NULL, &o);
	ck_assert_msg(o.json && harness_num(&o, "exitCode") == 1, "%.600s", o.out);
	ck_assert_str_eq(out_of(&o), "moat does not offer @spinframework/spin-llm: a program run by "
				     "moat cannot use it\n");
	const char *se = harness_str(&o, "stderr");
	ck_assert_msg(se && strstr(se, "Error: moat does not offer @spinframework/spin-variables: "),
		      "stderr: %s", se ? se : "(none)");
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* A set that returned survives a kill -9 of moat (the sandbox dies with it). */
START_TEST(kv_durable_after_kill)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	const char *code = "from spin_sdk import key_value\n"
			   "import time\n"
			   "s = key_value.open_default()\n"
			   "s.set('big', b'v' * 900000)\n"
			   "s.set('done', b'1')\n"
			   "time.sleep(60)\n";
	char *qc = harness_json_quote(code);
	char *req = NULL;
	ck_assert_int_ge(asprintf(&req, "{\"code\":%s,\"sandboxId\":\"durable\",\"kvEnabled\":true,"
				  "\"timeout\":90000}", qc), 0);
	const char *args[] = { "exec", "--kv", st.file, "--runtime", harness_runtime_dir(), NULL };
	struct harness_proc p;
	harness_start(_i, args, req, strlen(req), NULL, NULL, NULL, &p);
	/* wait until "done" is visible from outside (moat kv, as root reads it) */
	bool seen = false;
	for (int i = 0; i < 600 && !seen; i++) {
		char cmd[512];
		snprintf(cmd, sizeof cmd, "'%s' kv --kv '%s' get durable done >/dev/null 2>'%s/poll.err'",
			 getenv("MOAT_BIN"), st.file, st.dir);
		seen = _i == MODE_ROOT || !harness_is_root()
			       ? system(cmd) == 0
			       : false;
		if (!seen && _i == MODE_ROOTLESS && harness_is_root()) {
			char su[640];
			snprintf(su, sizeof su, "setpriv --reuid=%d --regid=%d --clear-groups %s",
				 ROOTLESS_ID, ROOTLESS_ID, cmd);
			seen = system(su) == 0;
		}
		if (!seen)
			usleep(50000);
	}
	ck_assert_int_eq(kill(p.pid, SIGKILL), 0);
	struct run_out o = { 0 };
	harness_finish(&p, &o);
	if (!seen) {
		char errf[128], buf[512] = "";
		snprintf(errf, sizeof errf, "%s/poll.err", st.dir);
		FILE *f = fopen(errf, "r");
		if (f) {
			buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
			fclose(f);
		}
		ck_abort_msg("the program's set never became visible: moat kv said [%s]; the run: "
			     "%.500s %.300s", buf, o.out, o.err);
	}
	ck_assert_int_eq(o.status, 128 + SIGKILL);
	harness_free(&o);
	free(req);
	free(qc);
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"v = s.get('big')\n"
		"print(len(v), v == b'v' * 900000, s.get('done'))\n",
		"durable", true, NULL, NULL, &o);
	expect_ok("after kill", &o);
	ck_assert_str_eq(out_of(&o), "900000 True b'1'\n");
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* 8 runs at once on one id: every write lands, nobody sees "locked". */
START_TEST(kv_concurrent_runs)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct harness_proc p[8];
	char *reqs[8];
	const char *args[] = { "exec", "--kv", st.file, "--runtime", harness_runtime_dir(), NULL };
	for (int i = 0; i < 8; i++) {
		char code[512];
		snprintf(code, sizeof code,
			 "from spin_sdk import key_value\n"
			 "s = key_value.open_default()\n"
			 "for j in range(25):\n"
			 "    s.set('w%d-%%d' %% j, b'x' * 1000)\n"
			 "    s.set('shared', b'%d')\n"
			 "    assert s.get('w%d-%%d' %% j) == b'x' * 1000\n"
			 "print('ok')\n",
			 i, i, i);
		char *qc = harness_json_quote(code);
		ck_assert_int_ge(asprintf(&reqs[i], "{\"code\":%s,\"sandboxId\":\"crowd\","
					  "\"kvEnabled\":true,\"timeout\":120000}", qc), 0);
		free(qc);
		harness_start(_i, args, reqs[i], strlen(reqs[i]), NULL, NULL, NULL, &p[i]);
	}
	for (int i = 0; i < 8; i++) {
		struct run_out o = { 0 };
		harness_finish(&p[i], &o);
		expect_ok("concurrent run", &o);
		ck_assert_str_eq(out_of(&o), "ok\n");
		harness_free(&o);
		free(reqs[i]);
	}
	struct run_out o;
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"k = s.get_keys()\n"
		"print(len(k), s.get('shared') in [str(i).encode() for i in range(8)])\n",
		"crowd", true, NULL, NULL, &o);
	expect_ok("count", &o);
	ck_assert_str_eq(out_of(&o), "201 True\n");
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* Each quota: a clear error in the program, nothing partial stored. */
START_TEST(kv_quotas_in_program)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	const char *more[] = { "--kv-quota", "keys=2,bytes=100,value=40", NULL };
	struct run_out o;
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"s.set('a', b'1')\n"
		"s.set('b', b'2')\n"
		"for k, v in (('c', b'3'), ('a', b'x' * 41), ('b', b'y' * 40), ('b', b'z' * 39)):\n"
		"    try:\n"
		"        s.set(k, v)\n"
		"        print(k, 'stored')\n"
		"    except key_value.Error as e:\n"
		"        print(k, e.kind)\n"
		"print(sorted(s.get_keys()), s.get('a'), len(s.get('b')))\n",
		"quota", true, NULL, more, &o);
	expect_ok("quotas", &o);
	/* b = 1+40 fits (41 + a's 2 = 43); the 39-byte b then too */
	ck_assert_str_eq(out_of(&o), "c store_table_full\na store_table_full\nb stored\nb stored\n"
				     "['a', 'b'] b'1' 39\n");
	harness_free(&o);
	const char *tight[] = { "--kv-quota", "keys=5,bytes=50,value=40", NULL };
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"try:\n"
		"    s.set('c', b'w' * 10)\n"
		"except key_value.Error as e:\n"
		"    print(e.kind, str(e))\n"
		"print(s.get('c'))\n",
		"quota", true, NULL, tight, &o);
	expect_ok("bytes quota", &o);
	ck_assert_msg(strstr(out_of(&o), "store_table_full") &&
			      strstr(out_of(&o), "bytes of keys and values") &&
			      strstr(out_of(&o), "\nNone\n"),
		      "%s", out_of(&o));
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* A store on a tmpfs of mb MiB of its own, owned by the mode's user, in a
 * mount namespace of this test's process (Check forks one per test), so a
 * failed test leaves no mount behind: 0, or -1 when this process cannot
 * mount (not root). */
static int store_tmpfs(struct store *s, int mode, unsigned mb)
{
	if (!harness_is_root())
		return -1;
	ck_assert_msg(unshare(CLONE_NEWNS) == 0, "unshare: %s", strerror(errno));
	ck_assert_int_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
	store_make(s, mode);
	unsigned id = mode == MODE_ROOTLESS ? ROOTLESS_ID : 0;
	char opts[96];
	snprintf(opts, sizeof opts, "size=%um,mode=0700,uid=%u,gid=%u", mb, id, id);
	ck_assert_msg(mount("tmpfs", s->dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == 0,
		      "mount tmpfs on %s: %s", s->dir, strerror(errno));
	return 0;
}

static void store_tmpfs_drop(struct store *s)
{
	ck_assert_int_eq(umount2(s->dir, MNT_DETACH), 0);
	ck_assert_int_eq(rmdir(s->dir), 0);
}

/* Writes 256 KiB values under fresh keys until the store refuses one; then
 * deletes one key. Prints "<writes> <kind> deleted", then the error. */
#define PY_FILL                                                                        \
	KV_PY_FILL_WRITES                                                              \
	"d = 'deleted'\n"                                                               \
	"try:\n"                                                                        \
	"    s.delete('k0')\n"                                                          \
	"except key_value.Error as e:\n"                                                \
	"    d = 'delete-failed ' + repr(e)\n"                                          \
	"print(n, kind, d)\n"                                                           \
	"print(err)\n"

/* Fills a store on a 24 MiB tmpfs (default 16 MiB floor) with PY_FILL as
 * "filler": *o is the run, *n its writes, kind and del its first words. */
static void fill(int mode, const struct store *st, struct run_out *o, int *n, char *kind,
		 char *del)
{
	kv_exec(mode, st, "python", PY_FILL, "filler", true, NULL, NULL, o);
	expect_ok("fill", o);
	*n = -1;
	ck_assert_msg(sscanf(out_of(o), "%d %63s %31s", n, kind, del) == 3, "%s", out_of(o));
}

/* A full store (issue 51 item 3; docs/KV.md, "A full disk"): the program's
 * error is "the store is full" (store_table_full) and names no host path;
 * the operator's stderr does. */
START_TEST(kv_full_disk_names_no_path)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	if (store_tmpfs(&st, _i, 24) < 0) {
		harness_skip("%s: mounting the test's small tmpfs needs root", __func__);
		return;
	}
	struct run_out o;
	int n = -1;
	char kind[64] = "", del[32] = "";
	fill(_i, &st, &o, &n, kind, del);
	/* the tenant's view: no host path anywhere in the result */
	ck_assert_msg(!strstr(o.out, st.dir), "the result names the store's directory %s: %.600s",
		      st.dir, o.out);
	ck_assert_msg(n > 0 && !strcmp(kind, "store_table_full") && strstr(o.out, "the store is full"),
		      "want writes, then store_table_full \"the store is full\": %s", out_of(&o));
	/* the operator's view: where */
	ck_assert_msg(strstr(o.err, st.file), "moat exec's stderr lacks the store's path: %.600s",
		      o.err);
	harness_free(&o);
	store_tmpfs_drop(&st);
}
END_TEST

/* A full store (issue 51 item 4): the program's own delete works; `moat kv
 * clear` retires the id, and that makes room: the next run writes again. */
START_TEST(kv_full_disk_delete_frees)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	if (store_tmpfs(&st, _i, 24) < 0) {
		harness_skip("%s: mounting the test's small tmpfs needs root", __func__);
		return;
	}
	struct run_out o;
	int n1 = -1, n2 = -1;
	char kind[64] = "", del[32] = "";
	fill(_i, &st, &o, &n1, kind, del);
	ck_assert_msg(n1 > 0 && !strcmp(del, "deleted"), "the program's delete on a full store: %s",
		      out_of(&o));
	harness_free(&o);
	const char *clear[] = { "kv", "--kv", st.file, "clear", "filler", NULL };
	harness_run(_i, clear, "", 0, &o);
	ck_assert_msg(o.status == 0 && strstr(o.out, "\"removed\":"),
		      "moat kv clear on a full store: status %d: %.300s %.300s", o.status, o.out,
		      o.err);
	harness_free(&o);
	fill(_i, &st, &o, &n2, kind, del);
	ck_assert_msg(n2 >= (n1 + 1) / 2 && !strcmp(kind, "store_table_full"),
		      "after the clear, writes (want >= %d of them): %s", (n1 + 1) / 2, out_of(&o));
	harness_free(&o);
	store_tmpfs_drop(&st);
}
END_TEST

/* A store that cannot be opened: the run's error names no host path (the
 * operator's stderr does). */
START_TEST(kv_open_error_names_no_path)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct store bad = st;
	snprintf(bad.file, sizeof bad.file, "%s/missing/kv.sqlite3", st.dir);
	struct run_out o;
	kv_exec(_i, &bad, "python", "print('ran')", "id", true, NULL, NULL, &o);
	ck_assert_msg(o.status == 3 && !strstr(o.out, "ran"), "unopenable store: %.300s", o.out);
	ck_assert_msg(!strstr(o.out, st.dir), "the error names the store's directory: %.400s",
		      o.out);
	ck_assert_msg(strstr(o.err, bad.file), "stderr lacks the store's path: %.400s", o.err);
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* Requests the store refuses before anything starts. */
START_TEST(kv_request_errors)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct run_out o;
	kv_exec(_i, &st, "python", "print(1)", NULL, true, NULL, NULL, &o);
	ck_assert_msg(o.status == 2 && harness_error_type(&o) &&
			      !strcmp(harness_error_type(&o), "SandboxConfigError"),
		      "kvEnabled without sandboxId: %.300s", o.out);
	harness_free(&o);
	kv_exec(_i, &st, "python", "print(1)", "", true, NULL, NULL, &o);
	ck_assert_msg(o.status == 2, "empty sandboxId: %.300s", o.out);
	harness_free(&o);
	char long_id[300];
	memset(long_id, 'x', 257);
	long_id[257] = '\0';
	kv_exec(_i, &st, "python", "print(1)", long_id, true, NULL, NULL, &o);
	ck_assert_msg(o.status == 2, "257-byte sandboxId: %.300s", o.out);
	harness_free(&o);
	/* a store that cannot be opened: unavailable, and no run */
	struct store bad = st;
	snprintf(bad.file, sizeof bad.file, "%s/missing/dir/kv.sqlite3", st.dir);
	kv_exec(_i, &bad, "python", "print('ran')", "id", true, NULL, NULL, &o);
	ck_assert_msg(o.status == 3 && !strstr(o.out, "ran"), "unopenable store: %.300s", o.out);
	harness_free(&o);
	/* the aistack contract still works without the new keys */
	harness_exec_code(_i, "python", "print(2)", "", &o);
	expect_ok("plain", &o);
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* moat kv: list, export and clear see exactly one id. */
START_TEST(kv_cli)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	struct run_out o;
	kv_exec(_i, &st, "python", PY_SET, "cli-id", true, NULL, NULL, &o);
	expect_ok("set", &o);
	harness_free(&o);
	const char *list[] = { "kv", "--kv", st.file, "list", "cli-id", NULL };
	harness_run(_i, list, "", 0, &o);
	ck_assert_msg(o.status == 0 && o.json, "%s %s", o.out, o.err);
	ck_assert_str_eq(o.out, "{\"sandboxId\":\"cli-id\",\"keys\":[\"bin\",\"greeting\"]}\n");
	harness_free(&o);
	const char *get[] = { "kv", "--kv", st.file, "get", "cli-id", "greeting", NULL };
	harness_run(_i, get, "", 0, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "hello");
	harness_free(&o);
	const char *clear[] = { "kv", "--kv", st.file, "clear", "cli-id", NULL };
	harness_run(_i, clear, "", 0, &o);
	ck_assert_str_eq(o.out, "{\"sandboxId\":\"cli-id\",\"removed\":2}\n");
	harness_free(&o);
	harness_run(_i, get, "", 0, &o);
	ck_assert_int_eq(o.status, 1);
	harness_free(&o);
	store_drop(&st);
}
END_TEST

/* The config's "kv" and "kvQuota" choose the store as --kv does; another
 * provider refuses kvEnabled instead of running without the store. */
START_TEST(kv_config_and_providers)
{
	HARNESS_MODE_GUARD(_i);
	struct store st;
	store_make(&st, _i);
	char cfg[128], text[256];
	snprintf(cfg, sizeof cfg, "%s/moat.json", st.dir);
	snprintf(text, sizeof text, "{\"kv\":\"sqlite:%s\",\"kvQuota\":\"keys=1\"}", st.file);
	FILE *f = fopen(cfg, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	if (_i == MODE_ROOTLESS && harness_is_root())
		ck_assert_int_eq(chown(cfg, ROOTLESS_ID, ROOTLESS_ID), 0);
	const char *code = "from spin_sdk import key_value\n"
			   "s = key_value.open_default()\n"
			   "s.set('one', b'1')\n"
			   "try:\n"
			   "    s.set('two', b'2')\n"
			   "except key_value.Error as e:\n"
			   "    print(e.kind)\n";
	char *qc = harness_json_quote(code), *req = NULL;
	ck_assert_int_ge(asprintf(&req, "{\"code\":%s,\"sandboxId\":\"cfg\",\"kvEnabled\":true}", qc),
			 0);
	const char *args[] = { "exec", "--config", cfg, "--runtime", harness_runtime_dir(), NULL };
	struct run_out o;
	harness_run(_i, args, req, strlen(req), &o);
	expect_ok("config store", &o);
	ck_assert_str_eq(out_of(&o), "store_table_full\n");
	harness_free(&o);
	const char *list[] = { "kv", "--config", cfg, "list", "cfg", NULL };
	harness_run(_i, list, "", 0, &o);
	ck_assert_str_eq(o.out, "{\"sandboxId\":\"cfg\",\"keys\":[\"one\"]}\n");
	harness_free(&o);
	const char *docker[] = { "exec", "--provider", "docker", "--kv", st.file, NULL };
	harness_run(_i, docker, req, strlen(req), &o);
	ck_assert_msg(o.status == 2 && harness_error_type(&o) &&
			      !strcmp(harness_error_type(&o), "SandboxConfigError") &&
			      strstr(o.out, "native provider"),
		      "kvEnabled with docker: %.400s", o.out);
	harness_free(&o);
	free(req);
	free(qc);
	store_drop(&st);
}
END_TEST

/* The same contract on Redis: one id's state persists between runs, another
 * id sees nothing, a quota holds (the unit suite kv_redis has the rest). */
START_TEST(kv_redis_exec)
{
	HARNESS_MODE_GUARD(_i);
	char spec[64], rdir[64];
	pid_t rp = harness_redis_start(spec, sizeof spec, rdir, sizeof rdir);
	if (rp <= 0) {
		harness_skip("%s: redis-server is not installed", __func__);
		return;
	}
	struct store st = { .dir = "", .file = "" };
	snprintf(st.file, sizeof st.file, "%s", spec);
	struct run_out o;
	kv_exec(_i, &st, "python", PY_SET, "r-agent", true, NULL, NULL, &o);
	expect_ok("redis set", &o);
	harness_free(&o);
	kv_exec(_i, &st, "python", PY_GET, "r-agent", true, NULL, NULL, &o);
	expect_ok("redis get", &o);
	ck_assert_str_eq(out_of(&o), "b'hello' True True ['bin', 'greeting'] None\n");
	harness_free(&o);
	kv_exec(_i, &st, "python", PY_GET, "r-other", true, NULL, NULL, &o);
	expect_ok("redis other id", &o);
	ck_assert_str_eq(out_of(&o), "None None False [] None\n");
	harness_free(&o);
	const char *more[] = { "--kv-quota", "keys=2", NULL };
	kv_exec(_i, &st, "python",
		"from spin_sdk import key_value\n"
		"s = key_value.open_default()\n"
		"try:\n"
		"    s.set('third', b'3')\n"
		"except key_value.Error as e:\n"
		"    print(e.kind, s.get('third'))\n",
		"r-agent", true, NULL, more, &o);
	expect_ok("redis quota", &o);
	ck_assert_str_eq(out_of(&o), "store_table_full None\n");
	harness_free(&o);
	harness_redis_stop(rp, rdir);
}
END_TEST

Suite *kv_suite(void)
{
	Suite *s = suite_create("kv");
	TCase *tc = tcase_create("kv");
	tcase_set_timeout(tc, 240);
	tcase_add_loop_test(tc, kv_persists_for_one_id, 0, 2);
	tcase_add_loop_test(tc, kv_typescript_to_python, 0, 2);
	tcase_add_loop_test(tc, kv_disabled_unreachable, 0, 2);
	tcase_add_loop_test(tc, kv_spin_modules_not_offered, 0, 2);
	tcase_add_loop_test(tc, kv_durable_after_kill, 0, 2);
	tcase_add_loop_test(tc, kv_concurrent_runs, 0, 2);
	tcase_add_loop_test(tc, kv_quotas_in_program, 0, 2);
	tcase_add_loop_test(tc, kv_request_errors, 0, 2);
	tcase_add_loop_test(tc, kv_cli, 0, 2);
	tcase_add_loop_test(tc, kv_config_and_providers, 0, 2);
	tcase_add_loop_test(tc, kv_redis_exec, 0, 2);
	tcase_add_loop_test(tc, kv_full_disk_names_no_path, 0, 2);
	tcase_add_loop_test(tc, kv_full_disk_delete_frees, 0, 2);
	tcase_add_loop_test(tc, kv_open_error_names_no_path, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}
