/* Integration test harness (see harness.h). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define HARNESS_TIMEOUT_MS 120000

static char moat_copy[4096];

bool harness_is_root(void)
{
	return geteuid() == 0;
}

const char *harness_moat(void)
{
	if (moat_copy[0])
		return moat_copy;
	const char *bin = getenv("MOAT_BIN");
	ck_assert_msg(bin && *bin, "MOAT_BIN is not set");
	char dir[] = "/tmp/moat-test-XXXXXX";
	ck_assert_msg(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	snprintf(moat_copy, sizeof moat_copy, "%s/moat", dir);
	int in = open(bin, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(in >= 0, "open %s: %s", bin, strerror(errno));
	int out = open(moat_copy, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	ck_assert_msg(out >= 0, "create %s: %s", moat_copy, strerror(errno));
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof buf)) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	close(in);
	ck_assert_int_eq(fchmod(out, 0755), 0);
	close(out);
	return moat_copy;
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
	char *nb = realloc(*buf, *len + n + 1);
	ck_assert_ptr_nonnull(nb);
	memcpy(nb + *len, data, n);
	*len += n;
	nb[*len] = '\0';
	*buf = nb;
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

void harness_run(int mode, const char *const *args, const char *stdin_data, size_t stdin_len,
		 struct run_out *out)
{
	memset(out, 0, sizeof *out);
	const char *moat = harness_moat();
	int in_p[2], out_p[2], err_p[2];
	ck_assert_int_eq(pipe2(in_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out_p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err_p, O_CLOEXEC), 0);
	size_t argc = 0;
	while (args[argc])
		argc++;
	char **argv = calloc(argc + 2, sizeof *argv);
	ck_assert_ptr_nonnull(argv);
	argv[0] = (char *)"moat";
	for (size_t i = 0; i < argc; i++)
		argv[i + 1] = (char *)args[i];
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in_p[0], 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		if (mode == MODE_ROOTLESS && geteuid() == 0) {
			if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
			    setresuid(65534, 65534, 65534) < 0) {
				perror("harness: drop to 65534");
				_exit(99);
			}
		}
		char *envp[] = { (char *)"PATH=/usr/bin:/bin",
				 (char *)HARNESS_CANARY_NAME "=" HARNESS_CANARY_VALUE,
				 (char *)"HOME=/nonexistent", NULL };
		execve(moat, argv, envp);
		perror("harness: execve moat");
		_exit(98);
	}
	free(argv);
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	fcntl(in_p[1], F_SETFL, O_NONBLOCK);
	size_t off = 0;
	int in_fd = in_p[1];
	if (stdin_len == 0) {
		close(in_fd);
		in_fd = -1;
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ofd = out_p[0], efd = err_p[0];
	char buf[65536];
	while (ofd >= 0 || efd >= 0) {
		struct pollfd p[3] = { { ofd, POLLIN, 0 }, { efd, POLLIN, 0 }, { in_fd, POLLOUT, 0 } };
		int r = poll(p, 3, 1000);
		if (elapsed_ms(&t0) > HARNESS_TIMEOUT_MS) {
			kill(pid, SIGKILL);
			ck_abort_msg("moat did not finish within %d ms", HARNESS_TIMEOUT_MS);
		}
		if (r <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			int *fd = i == 0 ? &ofd : &efd;
			if (*fd >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
				ssize_t n = read(*fd, buf, sizeof buf);
				if (n > 0)
					append(i == 0 ? &out->out : &out->err,
					       i == 0 ? &out->out_len : &out->err_len, buf, (size_t)n);
				else if (n == 0 || errno != EINTR) {
					close(*fd);
					*fd = -1;
				}
			}
		}
		if (in_fd >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = write(in_fd, stdin_data + off, stdin_len - off);
			if (n > 0)
				off += (size_t)n;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) || off == stdin_len) {
				close(in_fd);
				in_fd = -1;
			}
		}
	}
	if (in_fd >= 0)
		close(in_fd);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (!out->out)
		append(&out->out, &out->out_len, "", 0);
	if (!out->err)
		append(&out->err, &out->err_len, "", 0);
	out->json = cJSON_ParseWithLength(out->out, out->out_len);
}

void harness_exec(int mode, const char *request_json, struct run_out *out)
{
	const char *args[] = { "exec", NULL };
	harness_run(mode, args, request_json, strlen(request_json), out);
	ck_assert_msg(out->json, "moat exec printed no JSON (status %d): stdout=%s stderr=%s",
		      out->status, out->out, out->err);
}

char *harness_json_quote(const char *s)
{
	cJSON *str = cJSON_CreateString(s);
	ck_assert_ptr_nonnull(str);
	char *q = cJSON_PrintUnformatted(str);
	cJSON_Delete(str);
	ck_assert_ptr_nonnull(q);
	return q;
}

void harness_exec_code(int mode, const char *lang, const char *code, const char *extra_json,
		       struct run_out *out)
{
	char *q = harness_json_quote(code);
	char *req = NULL;
	ck_assert_int_ge(asprintf(&req, "{\"language\":\"%s\",\"code\":%s%s}", lang, q,
				  extra_json ? extra_json : ""), 0);
	harness_exec(mode, req, out);
	free(q);
	free(req);
}

void harness_free(struct run_out *out)
{
	free(out->out);
	free(out->err);
	cJSON_Delete(out->json);
	memset(out, 0, sizeof *out);
}

const char *harness_str(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double harness_num(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

bool harness_bool(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	ck_assert_msg(cJSON_IsBool(v), "result has no boolean \"%s\": %s", key, out->out);
	return cJSON_IsTrue(v);
}

bool harness_is_null(const struct run_out *out, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(out->json, key);
	return cJSON_IsNull(v);
}

const char *harness_error_type(const struct run_out *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(out->json, "error");
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
	return cJSON_IsString(t) ? t->valuestring : NULL;
}
