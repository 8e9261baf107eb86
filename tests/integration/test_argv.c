/* moat run -- CMD ARGS and --workdir DIR: an arbitrary command line runs
 * with exactly the isolation of a code run, and a host directory is seen
 * read-only at /sandbox/work, where the command runs. Every test runs as
 * root and rootless (loop index = harness mode). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* ---- helpers ---------------------------------------------------------------- */

static void run(int mode, const char *const *args, struct run_out *o)
{
	harness_run(mode, args, NULL, 0, o);
}

static void write_file(const char *dir, const char *name, const char *content, mode_t mode)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	size_t len = strlen(content);
	ck_assert_int_eq(write(fd, content, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

/* A fresh directory under /tmp with the given mode (0755: readable by uid
 * 65534, as the work directory must be). */
static void make_dir(char *path, size_t size, const char *tag, mode_t mode)
{
	snprintf(path, size, "/tmp/moat-argv-%s-XXXXXX", tag);
	ck_assert_ptr_nonnull(mkdtemp(path));
	ck_assert_int_eq(chmod(path, mode), 0);
}

static void remove_tree(const char *path)
{
	char *cmd = NULL;
	ck_assert_int_gt(asprintf(&cmd, "rm -rf '%s'", path), 0);
	ck_assert_int_eq(system(cmd), 0);
	free(cmd);
}

static char *read_host_file(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *buf = calloc(1, 4096);
	ck_assert_ptr_nonnull(buf);
	size_t n = fread(buf, 1, 4095, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* A failed `moat run` before the sandbox: status, one line on stderr
 * naming the error type and containing want. */
static void expect_error(int mode, const char *const *args, int status, const char *type,
			 const char *want)
{
	struct run_out o;
	run(mode, args, &o);
	ck_assert_msg(o.status == status, "status %d (want %d): %s", o.status, status, o.err);
	char prefix[64];
	snprintf(prefix, sizeof prefix, "moat: %s: ", type);
	ck_assert_msg(!strncmp(o.err, prefix, strlen(prefix)), "stderr [%s], want prefix [%s]",
		      o.err, prefix);
	ck_assert_msg(strstr(o.err, want), "stderr [%s] lacks [%s]", o.err, want);
	ck_assert_str_eq(o.out, "");
	harness_free(&o);
}

/* ---- the command line ---------------------------------------------------------- */

/* Every argument arrives exactly: spaces, quotes, empty strings, shell
 * syntax that must stay text, unicode. No shell of moat's is involved. */
START_TEST(args_arrive_exactly)
{
	HARNESS_MODE_GUARD(_i);
	const char *args[] = { "run", "--", "sh", "-c", "printf '[%s]\\n' \"$0\" \"$@\"", "a",
			       "b c", "", "'single' \"double\"", "$HOME `id` $(id) *", "\\ \\n",
			       "\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x98\x80", "  lead and trail  ", "-x",
			       "--", NULL };
	struct run_out o;
	run(_i, args, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "[a]\n[b c]\n[]\n['single' \"double\"]\n[$HOME `id` $(id) *]\n"
				"[\\ \\n]\n[\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x98\x80]\n"
				"[  lead and trail  ]\n[-x]\n[--]\n");
	ck_assert_str_eq(o.err, "");
	harness_free(&o);

	/* echo $0 "$@" as in the issue: one line */
	const char *echo[] = { "run", "--", "sh", "-c", "echo $0 \"$@\"", "a", "b", NULL };
	run(_i, echo, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "a b\n");
	harness_free(&o);

	/* the program itself by absolute path; argv[0] is what was given */
	const char *abs[] = { "run", "--", "/bin/sh", "-c", "echo \"$0\"", NULL };
	run(_i, abs, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "/bin/sh\n");
	harness_free(&o);
}
END_TEST

/* moat run exits with the command's status; the result JSON carries it. */
START_TEST(exit_status_propagates)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *exit42[] = { "run", "--", "sh", "-c", "echo out; echo err >&2; exit 42", NULL };
	run(_i, exit42, &o);
	ck_assert_msg(o.status == 42, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "out\n");
	ck_assert_str_eq(o.err, "err\n");
	harness_free(&o);

	const char *json[] = { "run", "--json", "--", "sh", "-c", "exit 3", NULL };
	run(_i, json, &o);
	ck_assert_int_eq(o.status, 3);
	ck_assert_ptr_nonnull(o.json);
	ck_assert(harness_num(&o, "exitCode") == 3);
	ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o.json, "error"));
	harness_free(&o);

	const char *killed[] = { "run", "--", "sh", "-c", "kill -KILL $$", NULL };
	run(_i, killed, &o);
	ck_assert_msg(o.status == 128 + 9, "status %d", o.status);
	harness_free(&o);

	const char *timeout[] = { "run", "--timeout", "300ms", "--", "sleep", "30", NULL };
	run(_i, timeout, &o);
	ck_assert_msg(o.status == 124, "status %d: %s", o.status, o.err);
	harness_free(&o);

	const char *stdin_cat[] = { "run", "--stdin", "-", "--", "cat", NULL };
	harness_run(_i, stdin_cat, "fed\n", 4, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "fed\n");
	harness_free(&o);
}
END_TEST

/* A command that cannot be executed is the run's 127 (not found) or 126
 * (not executable), with a clear line on stderr, as in a shell; a bad
 * command line is refused before any sandbox. */
START_TEST(missing_command_is_127)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *abs[] = { "run", "--", "/nonexistent", NULL };
	run(_i, abs, &o);
	ck_assert_msg(o.status == 127, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.err, "moat: /nonexistent: no such file or directory\n");
	ck_assert_str_eq(o.out, "");
	harness_free(&o);

	const char *name[] = { "run", "--json", "--", "moat-no-such-command", "x", NULL };
	run(_i, name, &o);
	ck_assert_int_eq(o.status, 127);
	ck_assert(harness_num(&o, "exitCode") == 127);
	ck_assert_str_eq(harness_str(&o, "stderr"),
			 "moat: moat-no-such-command: command not found (looked in "
			 "/usr/local/bin:/usr/bin:/bin)\n");
	harness_free(&o);

	/* the request's PATH does not change where the command is looked up */
	const char *path[] = { "run", "--env", "PATH=/nowhere", "--", "true", NULL };
	run(_i, path, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	harness_free(&o);

	/* found but not executable: 126 */
	char dir[64];
	make_dir(dir, sizeof dir, "noexec", 0755);
	write_file(dir, "data.txt", "not a program\n", 0644);
	const char *noexec[] = { "run", "--workdir", dir, "--", "./data.txt", NULL };
	run(_i, noexec, &o);
	ck_assert_msg(o.status == 126, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.err, "moat: ./data.txt: permission denied\n");
	harness_free(&o);
	remove_tree(dir);

	const char *empty[] = { "run", "--", "", NULL };
	expect_error(_i, empty, 2, "SandboxConfigError", "must not be empty");
	const char *nothing[] = { "run", "--", NULL };
	expect_error(_i, nothing, 2, "SandboxConfigError", "give the command after --");
	const char *with_code[] = { "run", "-c", "print(1)", "--", "ls", NULL };
	expect_error(_i, with_code, 2, "SandboxConfigError", "-c and -l do not apply");
	const char *with_lang[] = { "run", "-l", "python", "--", "ls", NULL };
	expect_error(_i, with_lang, 2, "SandboxConfigError", "-c and -l do not apply");
	/* an option's argument "--" is not the end of the options */
	const char *optarg_dd[] = { "run", "--workdir", "--", "-c", "print(1)", NULL };
	expect_error(_i, optarg_dd, 2, "SandboxConfigError", "the work directory --");
	/* other providers run code only */
	const char *docker[] = { "run", "--provider", "docker", "--", "ls", NULL };
	expect_error(_i, docker, 2, "SandboxConfigError", "needs the native provider");
	const char *output[] = { "run", "--output", "x", "--", "ls", NULL };
	expect_error(_i, output, 2, "SandboxConfigError", "add --json");
}
END_TEST

/* The command runs as a code run does: uid/gid 65534 without capabilities,
 * no_new_privs, seccomp and Landlock in force, only lo, a read-only root,
 * nothing of the host's environment. */
START_TEST(same_isolation_as_code)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	const char *ids[] = { "run", "--", "sh", "-c",
			      "id -u; id -g; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs"
			      "|Seccomp):' /proc/self/status; env | sort", NULL };
	run(_i, ids, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_msg(!strncmp(o.out, "65534\n65534\n", 12), "ids: %s", o.out);
	static const char *const want[] = {
		"CapInh:\t0000000000000000\n", "CapPrm:\t0000000000000000\n",
		"CapEff:\t0000000000000000\n", "CapBnd:\t0000000000000000\n",
		"CapAmb:\t0000000000000000\n", "NoNewPrivs:\t1\n", "Seccomp:\t2\n",
		"HOME=/sandbox\n", "PATH=/usr/local/bin:/usr/bin:/bin\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		ck_assert_msg(strstr(o.out, want[i]), "no [%s] in: %s", want[i], o.out);
	ck_assert_msg(!strstr(o.out, HARNESS_CANARY_NAME), "host env leaked: %s", o.out);
	harness_free(&o);

	/* the root is read-only: a write to /usr fails */
	const char *usr[] = { "run", "--", "sh", "-c", "touch /usr/moat-argv-probe", NULL };
	run(_i, usr, &o);
	ck_assert_msg(o.status != 0, "a write to /usr succeeded");
	ck_assert_msg(strstr(o.err, "Read-only file system"), "stderr: %s", o.err);
	ck_assert(access("/usr/moat-argv-probe", F_OK) != 0);
	harness_free(&o);

	/* only lo, and no way out */
	const char *net[] = { "run", "--", "python3", "-c",
			      "import socket\n"
			      "print([l.split(':')[0].strip() for l in open('/proc/net/dev')][2:])\n"
			      "try:\n"
			      "    socket.create_connection(('1.1.1.1', 53), 2)\n"
			      "    print('connected')\n"
			      "except OSError as e:\n"
			      "    print('refused', e.errno)\n", NULL };
	run(_i, net, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_msg(!strncmp(o.out, "['lo']\nrefused ", 15), "network: %s", o.out);
	harness_free(&o);

	/* seccomp: unshare(2) is refused by the filter, which --seccomp-log
	 * names (not merely a missing privilege) */
	const char *userns[] = { "run", "--json", "--seccomp-log", "--", "unshare", "-U", "true",
				 NULL };
	run(_i, userns, &o);
	ck_assert_ptr_nonnull(o.json);
	ck_assert_msg(harness_num(&o, "exitCode") != 0, "unshare -U succeeded: %s", o.out);
	const char *err = harness_str(&o, "stderr");
	ck_assert_msg(err && strstr(err, "Operation not permitted"), "stderr: %s", o.out);
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o.json, "seccomp");
	const cJSON *denied = cJSON_GetObjectItemCaseSensitive(sc, "denied");
	bool listed = false;
	const cJSON *d;
	cJSON_ArrayForEach(d, denied)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(d, "syscall");
		listed |= cJSON_IsString(n) && !strcmp(n->valuestring, "unshare");
	}
	ck_assert_msg(listed, "unshare is not in the seccomp log: %s", o.out);
	harness_free(&o);
}
END_TEST

/* ---- the work directory ----------------------------------------------------------- */

/* --workdir shows the host directory at /sandbox/work, the working
 * directory; it is mounted read-only, nosuid, nodev but not noexec; every
 * write fails with EROFS and the host directory is left as it was. */
START_TEST(workdir_is_read_only)
{
	HARNESS_MODE_GUARD(_i);
	char dir[64];
	make_dir(dir, sizeof dir, "work", 0755);
	write_file(dir, "f.txt", "original\n", 0666); /* even a file writable by all */
	write_file(dir, "build.sh", "#!/bin/sh\necho built \"$@\" in \"$(pwd)\"\n", 0755);
	char sub[128];
	snprintf(sub, sizeof sub, "%s/sub", dir);
	ck_assert_int_eq(mkdir(sub, 0777), 0);
	ck_assert_int_eq(chmod(sub, 0777), 0);
	struct run_out o;
	const char *args[] = {
		"run", "--workdir", dir, "--", "sh", "-c",
		"pwd; ls; cat f.txt; ./build.sh a b\n"
		"awk '$5 == \"/sandbox/work\" { print \"opts\", $6 }' /proc/self/mountinfo\n"
		"touch new 2>&1; { echo x >> f.txt; } 2>&1; rm f.txt 2>&1; mkdir d 2>&1; touch sub/n 2>&1\n"
		"ln -s f.txt l 2>&1; mv build.sh b2 2>&1\n"
		"python3 -c \"import os, errno\n"
		"try:\n"
		"    os.open('f.txt', os.O_WRONLY)\n"
		"except OSError as e:\n"
		"    print('open', errno.errorcode[e.errno])\"\n"
		"touch /sandbox/ok && echo sandbox writable",
		NULL };
	run(_i, args, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_msg(!strncmp(o.out, "/sandbox/work\nbuild.sh\nf.txt\nsub\noriginal\n"
				      "built a b in /sandbox/work\nopts ro,",
			       strlen("/sandbox/work\nbuild.sh\nf.txt\nsub\noriginal\n"
				      "built a b in /sandbox/work\nopts ro,")),
		      "out: %s", o.out);
	const char *opts = strstr(o.out, "opts ");
	const char *eol = strchr(opts, '\n');
	char line[256];
	snprintf(line, sizeof line, "%.*s", (int)(eol - opts), opts);
	ck_assert_msg(strstr(line, "nosuid") && strstr(line, "nodev") && !strstr(line, "noexec"),
		      "mount options: %s", line);
	/* seven writes from the shell, each refused by the read-only mount */
	int erofs = 0;
	for (const char *p = o.out; (p = strstr(p, "Read-only file system")); p++)
		erofs++;
	ck_assert_msg(erofs == 7, "%d EROFS in: %s", erofs, o.out);
	ck_assert_msg(strstr(o.out, "open EROFS\n"), "out: %s", o.out);
	ck_assert_msg(strstr(o.out, "sandbox writable\n"), "out: %s", o.out);
	harness_free(&o);
	/* the host directory is as it was */
	char *f = read_host_file(dir, "f.txt");
	ck_assert_ptr_nonnull(f);
	ck_assert_str_eq(f, "original\n");
	free(f);
	static const char *const absent[] = { "new", "d", "l", "b2", "sub/n" };
	for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
		char p[256];
		snprintf(p, sizeof p, "%s/%s", dir, absent[i]);
		ck_assert_msg(access(p, F_OK) != 0, "%s appeared on the host", p);
	}
	char b[256];
	snprintf(b, sizeof b, "%s/build.sh", dir);
	ck_assert_int_eq(access(b, F_OK), 0);

	/* a code run gets it too, and runs there */
	const char *code[] = { "run", "--workdir", dir, "-l", "python", "-c",
			       "import os; print(os.getcwd(), open('f.txt').read().strip())", NULL };
	run(_i, code, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "/sandbox/work original\n");
	harness_free(&o);

	/* without --workdir the command runs in /sandbox, and work/ is nothing */
	const char *none[] = { "run", "--", "sh", "-c", "pwd; ls -a /sandbox", NULL };
	run(_i, none, &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert_str_eq(o.out, "/sandbox\n.\n..\n");
	harness_free(&o);
	remove_tree(dir);
}
END_TEST

/* A symlink in the work directory resolves inside the sandbox's root: it
 * cannot reach a host file (a root-only secret, /etc/shadow). A symlink in
 * the path given to --workdir is resolved before the directory is opened. */
START_TEST(workdir_symlinks_stay_inside)
{
	HARNESS_MODE_GUARD(_i);
	char secret_dir[64], dir[64];
	make_dir(secret_dir, sizeof secret_dir, "secret", 0700);
	char marker[96];
	harness_marker(marker, sizeof marker, "argvsecret", _i);
	write_file(secret_dir, "secret", marker, 0600);
	make_dir(dir, sizeof dir, "links", 0755);
	char target[256], link[256];
	snprintf(target, sizeof target, "%s/secret", secret_dir);
	snprintf(link, sizeof link, "%s/secret-link", dir);
	ck_assert_int_eq(symlink(target, link), 0);
	snprintf(link, sizeof link, "%s/dir-link", dir);
	ck_assert_int_eq(symlink(secret_dir, link), 0);
	snprintf(link, sizeof link, "%s/shadow-link", dir);
	ck_assert_int_eq(symlink("/etc/shadow", link), 0);
	snprintf(link, sizeof link, "%s/up-link", dir);
	ck_assert_int_eq(symlink("../../../..", link), 0);
	/* as root the harness itself can read the secret: the sandbox must not */
	struct run_out o;
	char script[1024];
	snprintf(script, sizeof script,
		 "cat secret-link 2>&1; cat dir-link/secret 2>&1; cat %s 2>&1;"
		 " cat shadow-link 2>&1; ls up-link/tmp 2>&1; cat up-link%s 2>&1; ls -la /etc; true",
		 target, target);
	const char *args[] = { "run", "--workdir", dir, "--", "sh", "-c", script, NULL };
	run(_i, args, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_msg(!strstr(o.out, marker) && !strstr(o.err, marker), "the secret leaked: %s",
		      o.out);
	ck_assert_msg(!strstr(o.out, "root:") && !strstr(o.out, " shadow\n"),
		      "a shadow file is visible: %s", o.out);
	ck_assert_msg(strstr(o.out, "shadow-link: No such file or directory"), "out: %s", o.out);
	ck_assert_msg(strstr(o.out, "secret-link: No such file or directory"), "out: %s", o.out);
	harness_free(&o);

	/* --workdir through a symlink: its target is what is bound */
	char alias[80];
	snprintf(alias, sizeof alias, "%s-alias", dir);
	ck_assert_int_eq(symlink(dir, alias), 0);
	write_file(dir, "seen.txt", "through the link\n", 0644);
	const char *via[] = { "run", "--workdir", alias, "--", "cat", "seen.txt", NULL };
	run(_i, via, &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.err);
	ck_assert_str_eq(o.out, "through the link\n");
	harness_free(&o);
	unlink(alias);

	/* a directory the sandbox's user cannot reach is refused, saying so */
	char hidden[128];
	snprintf(hidden, sizeof hidden, "%s/inner", secret_dir);
	ck_assert_int_eq(mkdir(hidden, 0755), 0);
	const char *unreach[] = { "run", "--workdir", hidden, "--", "ls", NULL };
	expect_error(_i, unreach, 2, "SandboxConfigError", hidden);
	const char *missing[] = { "run", "--workdir", "/nonexistent-moat-workdir", "--", "ls", NULL };
	expect_error(_i, missing, 2, "SandboxConfigError", "/nonexistent-moat-workdir");
	char file[128];
	snprintf(file, sizeof file, "%s/f", dir);
	write_file(dir, "f", "x", 0644);
	const char *notdir[] = { "run", "--workdir", file, "--", "ls", NULL };
	expect_error(_i, notdir, 2, "SandboxConfigError", "not a directory");
	remove_tree(dir);
	remove_tree(secret_dir);
}
END_TEST

/* Copy-in with --file beside the work directory, copy-out with --output:
 * files the command wrote under /sandbox come back; the work directory is
 * never walked (nothing in it was written by the command) and a file
 * under work/ cannot be copied in (the mount would hide it). */
START_TEST(workdir_with_outputs)
{
	HARNESS_MODE_GUARD(_i);
	char dir[64];
	make_dir(dir, sizeof dir, "outs", 0755);
	write_file(dir, "input.txt", "in\n", 0644);
	char src[128];
	snprintf(src, sizeof src, "%s/input.txt", dir);
	char copied[160];
	snprintf(copied, sizeof copied, "extra.txt=%s", src);
	struct run_out o;
	const char *args[] = { "run", "--json", "--workdir", dir, "--file", copied, "--output",
			       "out/*", "--output", "work/*", "--output", "*.txt", "--", "sh", "-c",
			       "mkdir ../out && tr a-z A-Z < input.txt > ../out/report.txt", NULL };
	run(_i, args, &o);
	ck_assert_msg(o.status == 0, "status %d: %s %s", o.status, o.out, o.err);
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(o.json, "files");
	ck_assert_msg(cJSON_IsObject(files), "no files: %s", o.out);
	const cJSON *rep = cJSON_GetObjectItemCaseSensitive(files, "out/report.txt");
	ck_assert_msg(rep, "no out/report.txt: %s", o.out);
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(rep, "content")->valuestring, "IN\n");
	ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(files, "extra.txt"));
	ck_assert_msg(cJSON_GetArraySize(files) == 2, "work/ was returned: %s", o.out);
	harness_free(&o);

	char under[160];
	snprintf(under, sizeof under, "work/x=%s", src);
	const char *hidden[] = { "run", "--workdir", dir, "--file", under, "--", "ls", NULL };
	expect_error(_i, hidden, 2, "SandboxConfigError", "hidden by the work directory");
	remove_tree(dir);
}
END_TEST

/* ---- moat exec ----------------------------------------------------------------- */

/* The JSON request's "argv"; "workdir" is no key of it (a request must not
 * name host paths); code and argv are exclusive; "language" is refused
 * with argv. */
START_TEST(json_argv)
{
	HARNESS_MODE_GUARD(_i);
	struct run_out o;
	harness_exec(_i, "{\"argv\":[\"echo\",\"hi\"]}", &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.out);
	ck_assert_str_eq(harness_str(&o, "stdout"), "hi\n");
	ck_assert(harness_num(&o, "exitCode") == 0);
	harness_free(&o);

	harness_exec(_i, "{\"argv\":[\"sh\",\"-c\",\"cat; pwd; exit 5\"],\"stdin\":\"x\\n\","
			 "\"env\":{\"A\":\"1\"},\"files\":{\"main.py\":\"f\"}}", &o);
	ck_assert_msg(o.status == 0, "status %d: %s", o.status, o.out);
	ck_assert_str_eq(harness_str(&o, "stdout"), "x\n/sandbox\n");
	ck_assert(harness_num(&o, "exitCode") == 5);
	harness_free(&o);

	harness_exec(_i, "{\"argv\":[\"moat-no-such-command\"]}", &o);
	ck_assert_int_eq(o.status, 0);
	ck_assert(harness_num(&o, "exitCode") == 127);
	ck_assert_ptr_nonnull(strstr(harness_str(&o, "stderr"), "command not found"));
	harness_free(&o);

	static const char *const refused[][2] = {
		{ "{\"argv\":[\"echo\",\"hi\"],\"code\":\"print(1)\"}", "exclusive" },
		{ "{\"argv\":[\"ls\"],\"language\":\"bash\"}", "applies to" },
		{ "{\"argv\":[\"ls\"],\"workdir\":\"/etc\"}", "unknown key \\\"workdir" },
		{ "{\"code\":\"print(1)\",\"workdir\":\"/\"}", "unknown key \\\"workdir" },
		{ "{\"argv\":[]}", "at least one entry" },
		{ "{\"argv\":[\"\"]}", "must not be empty" },
		{ "{\"argv\":\"echo hi\"}", "must be an array of strings" },
	};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		harness_exec(_i, refused[i][0], &o);
		ck_assert_msg(o.status == 2, "%s: status %d", refused[i][0], o.status);
		const char *type = harness_error_type(&o);
		ck_assert_msg(type && !strcmp(type, "SandboxConfigError"), "%s: %s", refused[i][0],
			      o.out);
		ck_assert_msg(strstr(o.out, refused[i][1]), "%s: %s lacks %s", refused[i][0], o.out,
			      refused[i][1]);
		harness_free(&o);
	}
	harness_exec(_i, "{\"argv\":[\"echo\",\"a\\u0000b\"]}", &o);
	ck_assert_int_eq(o.status, 2);
	ck_assert_str_eq(harness_error_type(&o), "SandboxPolicyError");
	harness_free(&o);
}
END_TEST

Suite *argv_suite(void)
{
	Suite *s = suite_create("argv");
	TCase *tc = tcase_create("argv");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, args_arrive_exactly, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, exit_status_propagates, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, missing_command_is_127, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, same_isolation_as_code, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, workdir_is_read_only, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, workdir_symlinks_stay_inside, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, workdir_with_outputs, MODE_ROOT, MODE_ROOTLESS + 1);
	tcase_add_loop_test(tc, json_argv, MODE_ROOT, MODE_ROOTLESS + 1);
	suite_add_tcase(s, tc);
	return s;
}
