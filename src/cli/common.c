/* Shared CLI helpers. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

int cli_read_file(const char *path, size_t max, char **out, size_t *len, struct moat_error *err)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
	if (fd < 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, errno, "cannot open %s: %s", path,
				      strerror(errno));
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap + 1);
	int rc = -1;
	if (!buf) {
		moat_error_oom(err);
		goto out;
	}
	for (;;) {
		if (n == cap) {
			if (cap > max) {
				moat_error_set(err, MOAT_ERR_POLICY, 0, "%s is larger than %zu bytes",
					       strcmp(path, "-") ? path : "standard input", max);
				goto out;
			}
			char *nb = realloc(buf, cap * 2 + 1);
			if (!nb) {
				moat_error_oom(err);
				goto out;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			moat_error_set(err, MOAT_ERR_CONFIG, errno, "cannot read %s: %s", path,
				       strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max) {
		moat_error_set(err, MOAT_ERR_POLICY, 0, "%s is larger than %zu bytes",
			       strcmp(path, "-") ? path : "standard input", max);
		goto out;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	if (fd != STDIN_FILENO)
		close(fd);
	return rc;
}

int cli_fail(const struct moat_error *err)
{
	fprintf(stderr, "moat: %s: %s\n", moat_error_type_name(err->type),
		err->message ? err->message : "unknown error");
	return moat_error_exit_code(err->type);
}

bool cli_is_dir(const char *p)
{
	struct stat st;
	return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* $MOAT_RUNTIME_DIR, else next to the binary: ../share/moat/runtime
 * (installed) or ../runtime (the build tree). Malloc'd or NULL. */
char *cli_find_runtime(void)
{
	const char *env = getenv("MOAT_RUNTIME_DIR");
	if (env && *env)
		return realpath(env, NULL);
	char *exe = realpath("/proc/self/exe", NULL);
	if (!exe)
		return NULL;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	static const char *const rel[] = { "/../share/moat/runtime", "/../runtime" };
	char *found = NULL;
	for (size_t i = 0; i < 2 && !found; i++) {
		char *p = NULL;
		if (asprintf(&p, "%s%s", exe, rel[i]) < 0)
			break;
		if (cli_is_dir(p))
			found = realpath(p, NULL);
		free(p);
	}
	free(exe);
	return found;
}
