/* "outputs": files the program wrote under /sandbox, returned in the result.
 *
 * Sandbox side (pid 1, after the program exited): walk /sandbox with system
 * calls only, match the request's patterns, and stream matching regular
 * files over a pipe — never following a symlink, never opening anything but
 * a regular file, within fixed bounds.
 * Supervisor side: collect the stream (bounded) and render result.files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <locale.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/sys.h"
#include "runner/runner.h"

#define WALK_MAX_DEPTH 16
#define WALK_MAX_ENTRIES 10000
#define PATH_CAP 4096

struct walk {
	char *const *patterns;
	size_t npatterns;
	bool skip_work;    /* /sandbox/work is the caller's read-only directory */
	int fd;
	bool broken;       /* the supervisor stopped reading */
	size_t total;
	unsigned files;
	unsigned entries;
	unsigned omitted;
	char path[PATH_CAP];
	char copy[65536];
};

/* Once a write fails (the supervisor stopped reading) nothing more is sent. */
static int write_all(struct walk *w, const void *buf, size_t len)
{
	if (!w->broken && moat_write_all(w->fd, buf, len) < 0)
		w->broken = true;
	return w->broken ? -1 : 0;
}

static bool matches(const struct walk *w, const char *path)
{
	for (size_t i = 0; i < w->npatterns; i++)
		if (fnmatch(w->patterns[i], path, FNM_PATHNAME | FNM_PERIOD) == 0)
			return true;
	return false;
}

static void emit_file(struct walk *w, int dirfd, const char *name, size_t plen)
{
	if (w->files >= MOAT_OUTPUT_MAX_FILES || w->total >= MOAT_OUTPUT_TOTAL_CAP) {
		w->omitted++;
		return;
	}
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return;
	}
	uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
	uint64_t want = size;
	if (want > MOAT_OUTPUT_FILE_CAP)
		want = MOAT_OUTPUT_FILE_CAP;
	if (want > MOAT_OUTPUT_TOTAL_CAP - w->total)
		want = MOAT_OUTPUT_TOTAL_CAP - w->total;
	struct moat_out_hdr h = { .path_len = (uint32_t)plen, .size = size,
				  .data_len = (uint32_t)want,
				  .flags = want < size ? MOAT_OUT_TRUNCATED : 0 };
	if (write_all(w, &h, sizeof h) < 0 || write_all(w, w->path, plen) < 0) {
		close(fd);
		return;
	}
	uint64_t off = 0;
	while (off < want) {
		size_t chunk = want - off > sizeof w->copy ? sizeof w->copy : (size_t)(want - off);
		ssize_t n = pread(fd, w->copy, chunk, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* the file shrank under us: keep the stream aligned */
			memset(w->copy, 0, chunk);
			n = (ssize_t)chunk;
		}
		if (write_all(w, w->copy, (size_t)n) < 0)
			break;
		off += (uint64_t)n;
	}
	close(fd);
	w->total += want;
	w->files++;
}

static void walk_dir(struct walk *w, int dirfd, size_t plen, int depth)
{
	char dbuf[8192];
	for (;;) {
		long n = syscall(SYS_getdents64, dirfd, dbuf, sizeof dbuf);
		if (n <= 0)
			return;
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(dbuf + off);
			off += d->d_reclen;
			const char *name = d->d_name;
			if (!strcmp(name, ".") || !strcmp(name, ".."))
				continue;
			/* moat's own files (the TypeScript bundle); and so no
			 * path returned starts with MOAT_OUT_ESCAPED_PREFIX */
			if (depth == 0 && !strncmp(name, ".moat", 5))
				continue;
			/* the work directory holds the caller's files, nothing the
			 * program wrote (it is read-only); a big checkout would
			 * also use up the walk's entries */
			if (depth == 0 && w->skip_work && !strcmp(name, MOAT_WORK_NAME))
				continue;
			if (++w->entries > WALK_MAX_ENTRIES || w->broken)
				return;
			size_t nlen = strlen(name);
			size_t np = plen + (plen ? 1 : 0) + nlen;
			if (np >= PATH_CAP)
				continue;
			if (plen)
				w->path[plen] = '/';
			memcpy(w->path + plen + (plen ? 1 : 0), name, nlen + 1);
			unsigned char type = d->d_type;
			if (type == DT_UNKNOWN) {
				struct stat st;
				if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
					continue;
				type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
			}
			if (type == DT_DIR && depth + 1 < WALK_MAX_DEPTH) {
				int sub = openat(dirfd, name,
						 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (sub >= 0) {
					walk_dir(w, sub, np, depth + 1);
					close(sub);
				}
			} else if (type == DT_REG && matches(w, w->path)) {
				emit_file(w, dirfd, name, np);
			}
			w->path[plen] = '\0';
		}
	}
}

void moat_outputs_collect(const struct moat_child *c)
{
	/* fnmatch in a multibyte locale (a host program that called
	 * setlocale) converts long names with malloc, whose locks may be held
	 * forever in this copy of a threaded supervisor; in the C locale it
	 * matches bytes without allocating, as the moat CLI always did */
	if (c->c_locale)
		uselocale(c->c_locale);
	struct walk *w = NULL;
	/* pid 1 is single-threaded here; the walk state is too big for the stack
	 * of a process whose stack size we do not control, so map it */
	void *mem = (void *)syscall(SYS_mmap, NULL, sizeof *w, 3 /* RW */, 0x22 /* PRIVATE|ANON */, -1,
				    0);
	if (mem == (void *)-1)
		return;
	w = mem;
	w->patterns = c->outputs;
	w->npatterns = c->outputs_count;
	w->skip_work = c->outputs_skip_work;
	w->fd = c->outputs_fd;
	int root = open(MOAT_SANDBOX_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root >= 0) {
		walk_dir(w, root, 0, 0);
		close(root);
	}
	if (w->omitted || w->entries > WALK_MAX_ENTRIES) {
		struct moat_out_hdr h = { .flags = MOAT_OUT_SUMMARY, .size = w->omitted,
					  .pad = w->entries > WALK_MAX_ENTRIES };
		write_all(w, &h, sizeof h);
	}
	syscall(SYS_munmap, mem, sizeof *w);
}

/* ---- supervisor side ---- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void)
{
	c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

locale_t moat_outputs_locale(void)
{
	pthread_once(&c_locale_once, make_c_locale);
	return c_locale;
}

size_t moat_outputs_stream_cap(void)
{
	return MOAT_OUTPUT_TOTAL_CAP +
	       MOAT_OUTPUT_MAX_FILES * (sizeof(struct moat_out_hdr) + PATH_CAP) +
	       2 * sizeof(struct moat_out_hdr);
}

/* The key of path in result.files, unique and reversible (README,
 * "outputs"). A path that is valid UTF-8 is its own key. Any other path
 * becomes MOAT_OUT_ESCAPED_PREFIX followed by the path with '%' and every
 * byte that does not belong to a valid UTF-8 character written as %XX;
 * true then (the entry also carries the raw path as "pathBase64").
 * Distinct paths get distinct keys: the escaping can be undone, and an
 * escaped key starts with ".moat", which no path the walk returns does. */
static bool append_key(struct moat_buf *b, const char *path, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	if (moat_utf8_text(path, len)) {
		moat_buf_append_json_string(b, path, len);
		return false;
	}
	struct moat_buf k = { 0 };
	moat_buf_append(&k, MOAT_OUT_ESCAPED_PREFIX, strlen(MOAT_OUT_ESCAPED_PREFIX));
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)path[i];
		size_t n = moat_utf8_char_len(path + i, len - i);
		if (n == 0 || c == '%') {
			char esc[3] = { '%', hex[c >> 4], hex[c & 15] };
			moat_buf_append(&k, esc, 3);
			i++;
		} else {
			moat_buf_append(&k, path + i, n);
			i += n;
		}
	}
	if (k.oom)
		b->oom = true;
	else
		moat_buf_append_json_string(b, k.data, k.len);
	moat_buf_free(&k);
	return true;
}

int moat_outputs_render(const char *stream, size_t len, bool stream_cut, struct moat_result *res)
{
	struct moat_buf b = { 0 };
	size_t off = 0;
	bool first = true;
	unsigned long omitted = 0;
	bool too_many_entries = false, damaged = stream_cut;
	moat_buf_append(&b, "{", 1);
	while (off + sizeof(struct moat_out_hdr) <= len) {
		struct moat_out_hdr h;
		memcpy(&h, stream + off, sizeof h);
		off += sizeof h;
		if (h.flags & MOAT_OUT_SUMMARY) {
			omitted += h.size;
			too_many_entries = h.pad != 0;
			continue;
		}
		if (h.path_len == 0 || h.path_len >= PATH_CAP || h.data_len > MOAT_OUTPUT_FILE_CAP ||
		    len - off < (size_t)h.path_len + h.data_len) {
			damaged = true;
			break;
		}
		const char *path = stream + off;
		const unsigned char *data = (const unsigned char *)stream + off + h.path_len;
		off += (size_t)h.path_len + h.data_len;
		if (!first)
			moat_buf_append(&b, ",", 1);
		first = false;
		bool escaped = append_key(&b, path, h.path_len);
		bool text = moat_utf8_text((const char *)data, h.data_len);
		moat_buf_appendf(&b, ":{\"size\":%llu,\"truncated\":%s,\"encoding\":\"%s\",\"content\":",
				 (unsigned long long)h.size, (h.flags & MOAT_OUT_TRUNCATED) ? "true" : "false",
				 text ? "utf8" : "base64");
		if (text)
			moat_buf_append_json_string(&b, (const char *)data, h.data_len);
		else
			moat_buf_append_base64(&b, data, h.data_len);
		if (escaped) {
			moat_buf_append(&b, ",\"pathBase64\":", 14);
			moat_buf_append_base64(&b, (const unsigned char *)path, h.path_len);
		}
		moat_buf_append(&b, "}", 1);
	}
	if (off != len)
		damaged = true;
	moat_buf_append(&b, "}", 1);
	char *json = moat_buf_take(&b);
	if (!json)
		return -1;
	free(res->files_json);
	res->files_json = json;
	if (omitted)
		(void)moat_result_warn(res, "outputs: %lu matching file(s) left out (at most %u files "
				       "and %u bytes are returned)", omitted, MOAT_OUTPUT_MAX_FILES,
				       MOAT_OUTPUT_TOTAL_CAP);
	if (too_many_entries)
		(void)moat_result_warn(res, "outputs: /sandbox holds more than %d entries; the "
				       "rest was not searched", WALK_MAX_ENTRIES);
	if (damaged)
		(void)moat_result_warn(res, "outputs: the file stream ended early (the sandbox "
				       "was killed while sending files); partial list");
	return 0;
}
