/* `moat serve`'s live sandbox routes (docs/SANDBOXES.md): /v1/sandboxes
 * and everything under it, bound to the caller's credential as sessions
 * are (another caller's id is a 404 alike). The table is sandboxes.c's,
 * the sandbox src/live/'s. Files and process output are streamed in
 * bounded chunks from and to the fds the sandbox's agent opened: nothing
 * is buffered whole here. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "live/live.h"
#include "serve/http.h"


#define CHUNK (64u * 1024u)
#define ATTACH_WAIT_MS 500
#define DEFAULT_IDLE_MS (10u * 60u * 1000u)
#define DEFAULT_LIFE_MS (60u * 60u * 1000u)
#define STDIN_TIMEOUT_MS 10000
#define MAX_WAIT_MS 60000

enum sbx_op {
	OP_NONE, OP_LIST, OP_CREATE, OP_GET, OP_DELETE, OP_TIMEOUT,
	OP_PROCS, OP_PROC_START, OP_PROC_WAIT, OP_PROC_OUTPUT, OP_PROC_STDIN,
	OP_PROC_STDIN_CLOSE, OP_PROC_SIGNAL, OP_PROC_RESIZE,
	OP_FILE_GET, OP_FILE_PUT, OP_FILE_DELETE, OP_FILE_STAT, OP_FILE_LIST, OP_FILE_MKDIR,
	OP_FILE_RENAME, OP_PAUSE, OP_RESUME, OP_CTX, OP_FILE_WATCH, OP_FILE_UPLOAD,
};

static enum MHD_Result missing(struct req *q, struct MHD_Connection *c)
{
	return srv_fail(q, c, 404, "SandboxNotFound", O_BAD_REQUEST,
			"no such sandbox (it never existed, is another caller's, or ended long ago)");
}

static enum MHD_Result gone(struct req *q, struct MHD_Connection *c, char *why)
{
	enum MHD_Result r = srv_fail(q, c, 410, "SandboxGone", O_ERROR,
				     why ? why : "the sandbox is gone");
	free(why);
	return r;
}

static enum MHD_Result bad(struct req *q, struct MHD_Connection *c, const char *msg)
{
	return srv_fail(q, c, 400, "SandboxConfigError", O_BAD_REQUEST, msg);
}

/* An operation's error: the agent's errno as an HTTP answer. */
static enum MHD_Result op_fail(struct req *q, struct MHD_Connection *c,
			       const struct moat_error *err)
{
	const char *m = err->message ? err->message : "failed";
	switch (err->sys_errno) {
	case ENOTCONN:
		return gone(q, c, serve_sbx_gone(q->s->sandboxes, q->sbx));
	case ENOENT:
		return srv_fail(q, c, 404, "FileNotFound", O_BAD_REQUEST,
				"no such file or directory in the sandbox");
	case ESRCH:
		return srv_fail(q, c, 404, "ProcessNotFound", O_BAD_REQUEST, m);
	case EEXIST:
	case ENOTEMPTY:
		return srv_fail(q, c, 409, "Conflict", O_BAD_REQUEST,
				err->sys_errno == EEXIST ? "it exists already"
							 : "the directory is not empty (recursive=1)");
	case EBUSY:
		return srv_fail(q, c, 409, "Conflict", O_BAD_REQUEST, m);
	case ELOOP:
		return bad(q, c, "the path names a symlink: symlinks are never followed "
			   "(docs/SANDBOXES.md, \"Paths\")");
	case ENOTDIR:
		return bad(q, c, "a component of the path is not a directory (symlinks are never "
			   "followed)");
	case EXDEV:
		return bad(q, c, "/sandbox and /tmp are two filesystems: a rename cannot cross "
			   "them (copy, then remove)");
	case EMLINK:
		return bad(q, c, "the tree is deeper than 32 levels: remove it in parts");
	case ENXIO:
		return bad(q, c, "not a regular file: FIFOs, sockets and devices are never opened");
	case EISDIR:
		return bad(q, c, "it is a directory");
	case EACCES:
	case EPERM:
	case EROFS:
		return srv_fail(q, c, 403, "Forbidden", O_BAD_REQUEST,
				"the sandbox's identity may not do that there");
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return srv_fail(q, c, 507, "InsufficientStorage", O_BAD_REQUEST,
				"the sandbox's filesystem is full (its tmpfs size)");
	case EAGAIN:
		return srv_fail(q, c, 503, "ServerBusy", O_REJECTED, m);
	case EINVAL:
	case E2BIG:
	case ENAMETOOLONG:
	case EPROTO:
		return bad(q, c, m);
	default:
		return srv_fail(q, c, 500, "InternalError", O_ERROR, m);
	}
}

/* ---- the URL ---- */

/* "/v1/sandboxes[/{id}[/rest]]" → op for method; *id, *pid, 0, or -1
 * (404 no such route) or -2 (405). */
static int parse_route(const char *url, const char *method, char *id, int *pid, enum sbx_op *op)
{
	const char *p = url + strlen("/v1/sandboxes");
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST"),
	     del = !strcmp(method, "DELETE"), put = !strcmp(method, "PUT");
	*op = OP_NONE;
	*pid = 0;
	id[0] = '\0';
	if (!*p || !strcmp(p, "/")) {
		*op = get ? OP_LIST : post ? OP_CREATE : OP_NONE;
		return *op ? 0 : -2;
	}
	if (*p++ != '/')
		return -1;
	const char *slash = strchr(p, '/');
	size_t n = slash ? (size_t)(slash - p) : strlen(p);
	if (n <= SERVE_SBX_ID_LEN)
		memcpy(id, p, n);
	id[n <= SERVE_SBX_ID_LEN ? n : 0] = '\0';
	const char *rest = slash ? slash : "";
	if (!*rest) {
		*op = get ? OP_GET : del ? OP_DELETE : OP_NONE;
		return *op ? 0 : -2;
	}
	if (!strcmp(rest, "/timeout")) {
		*op = post ? OP_TIMEOUT : OP_NONE;
		return *op ? 0 : -2;
	}
	if (!strcmp(rest, "/pause") || !strcmp(rest, "/resume")) {
		*op = !post ? OP_NONE : rest[1] == 'p' ? OP_PAUSE : OP_RESUME;
		return *op ? 0 : -2;
	}
	if (!strcmp(rest, "/processes")) {
		*op = get ? OP_PROCS : post ? OP_PROC_START : OP_NONE;
		return *op ? 0 : -2;
	}
	if (!strncmp(rest, "/processes/", 11)) {
		const char *q = rest + 11;
		char *end;
		errno = 0;
		long v = strtol(q, &end, 10);
		if (errno || end == q || v < 1 || v > 4194304 || (*q < '1' || *q > '9'))
			return -1;
		*pid = (int)v;
		if (!*end)
			*op = get ? OP_PROC_WAIT : OP_NONE;
		else if (!strcmp(end, "/output"))
			*op = get ? OP_PROC_OUTPUT : OP_NONE;
		else if (!strcmp(end, "/stdin"))
			*op = post ? OP_PROC_STDIN : OP_NONE;
		else if (!strcmp(end, "/stdin/close"))
			*op = post ? OP_PROC_STDIN_CLOSE : OP_NONE;
		else if (!strcmp(end, "/signal"))
			*op = post ? OP_PROC_SIGNAL : OP_NONE;
		else if (!strcmp(end, "/resize"))
			*op = post ? OP_PROC_RESIZE : OP_NONE;
		else
			return -1;
		return *op ? 0 : -2;
	}
	if (!strncmp(rest, "/contexts", 9) && (!rest[9] || rest[9] == '/')) {
		*op = OP_CTX; /* route_contexts.c's */
		return 0;
	}
	if (!strcmp(rest, "/files")) {
		*op = get ? OP_FILE_GET : put ? OP_FILE_PUT : del ? OP_FILE_DELETE
		    : post ? OP_FILE_UPLOAD : OP_NONE;
		return *op ? 0 : -2;
	}
	static const struct {
		const char *name;
		enum sbx_op op;
		bool post;
	} files[] = {
		{ "/files/stat", OP_FILE_STAT, false },
		{ "/files/list", OP_FILE_LIST, false },
		{ "/files/mkdir", OP_FILE_MKDIR, true },
		{ "/files/rename", OP_FILE_RENAME, true },
		{ "/files/watch", OP_FILE_WATCH, false },
	};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		if (!strcmp(rest, files[i].name)) {
			*op = (files[i].post ? post : get) ? files[i].op : OP_NONE;
			return *op ? 0 : -2;
		}
	return -1;
}

static bool arg_flag(struct MHD_Connection *c, const char *name)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
	return v && (!strcmp(v, "1") || !strcmp(v, "true"));
}

/* An unsigned query argument: def when absent, -1 when not a number in
 * [lo, hi]. */
static long long arg_num(struct MHD_Connection *c, const char *name, long long def, long long lo,
			 long long hi)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
	if (!v)
		return def;
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi)
		return -1;
	return n;
}

/* ---- streamed answers ---- */

struct fstream { /* a file read to the client */
	struct server *s;
	struct serve_sbx *x;
	int fd;
	uint64_t off, len;
};

static ssize_t file_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fstream *f = cls;
	if (pos >= f->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	size_t want = f->len - pos < max ? (size_t)(f->len - pos) : max;
	ssize_t n;
	do
		n = pread(f->fd, buf, want, (off_t)(f->off + pos));
	while (n < 0 && errno == EINTR);
	if (n <= 0) /* it shrank under the read: the answer is cut, not padded */
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n;
}

static void file_free(void *cls)
{
	struct fstream *f = cls;
	close(f->fd);
	serve_sbx_end(f->s->sandboxes, f->x);
	serve_sbx_put(f->s->sandboxes, f->x);
	free(f);
}

struct pstream { /* a process's output, NDJSON */
	struct server *s;
	struct serve_sbx *x;
	struct live_attach *a;
	int client; /* dup of the connection: its hang-up ends the wait */
	struct moat_buf pending;
	size_t off;
	bool done;
	struct moat_ndjson nj;
	char chunk[CHUNK];
};

static ssize_t proc_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct pstream *p = cls;
	(void)pos;
	for (;;) {
		if (p->off < p->pending.len)
			return srv_pending_take(&p->pending, &p->off, buf, max);
		if (p->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (p->pending.oom)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		size_t n = 0;
		struct live_proc_info info;
		enum live_event ev = live_attach_next(p->a, ATTACH_WAIT_MS, p->client, p->chunk,
						      sizeof p->chunk, &n, &info);
		if (ev == LIVE_EV_HANGUP)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (ev == LIVE_EV_STDOUT || ev == LIVE_EV_STDERR) {
			moat_ndjson_output(&p->nj, &p->pending,
					   ev == LIVE_EV_STDOUT ? MOAT_STDOUT : MOAT_STDERR, p->chunk, n);
		} else if (ev == LIVE_EV_EXIT) {
			moat_ndjson_flush(&p->nj, &p->pending);
			moat_buf_appendf(&p->pending, "{\"type\":\"exit\",\"pid\":%d,\"exitCode\":", info.pid);
			if (info.exited)
				moat_buf_appendf(&p->pending, "%d", info.exit_code);
			else
				moat_buf_appendf(&p->pending, "null");
			if (info.signal)
				moat_buf_appendf(&p->pending, ",\"signal\":%d", info.signal);
			moat_buf_append(&p->pending, "}\n", 2);
			p->done = true;
		} else if (ev == LIVE_EV_END) {
			moat_ndjson_flush(&p->nj, &p->pending);
			char *why = serve_sbx_gone(p->s->sandboxes, p->x);
			static const char head[] = "{\"type\":\"error\",\"error\":{\"type\":"
						   "\"SandboxGone\",\"message\":";
			moat_buf_append(&p->pending, head, sizeof head - 1);
			const char *w = why ? why : "the sandbox ended before the process did";
			moat_buf_append_json_string(&p->pending, w, strlen(w));
			moat_buf_append(&p->pending, "}}\n", 3);
			free(why);
			p->done = true;
		}
	}
}

static void proc_free(void *cls)
{
	struct pstream *p = cls;
	live_attach_end(p->a);
	if (p->client >= 0)
		close(p->client);
	moat_buf_free(&p->pending);
	serve_sbx_end(p->s->sandboxes, p->x);
	serve_sbx_put(p->s->sandboxes, p->x);
	free(p);
}

/* Streams pid's output (an attach) as NDJSON; first (may be NULL) a line
 * before it. */
static enum MHD_Result stream_output(struct req *q, struct MHD_Connection *c, int pid,
				     const char *first)
{
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct pstream *p = calloc(1, sizeof *p);
	if (!p)
		return MHD_NO;
	if (live_attach(lv, pid, &p->a, &err) < 0) {
		free(p);
		return op_fail(q, c, &err);
	}
	p->s = q->s;
	p->x = q->sbx;
	p->client = -1;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ci->connect_fd >= 0)
		p->client = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
	if (first)
		moat_buf_append(&p->pending, first, strlen(first));
	struct MHD_Response *r =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, CHUNK, proc_read, p, proc_free);
	if (!r) {
		live_attach_end(p->a);
		if (p->client >= 0)
			close(p->client);
		moat_buf_free(&p->pending);
		free(p);
		return MHD_NO;
	}
	/* the stream holds the sandbox (and keeps it from idling) */
	q->sbx = NULL;
	q->sbx_busy = false;
	MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	q->status = 200;
	/* a process may run for the sandbox's lifetime: the answer's deadline
	 * is its end, and then the client's time */
	srv_conn_deadline_in(q->s, c, serve_sbx_left_ms(q->s->sandboxes, p->x) +
					      (int64_t)q->s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

/* ---- files ---- */

static const char *path_arg(struct MHD_Connection *c)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
}

static enum MHD_Result bad_path(struct req *q, struct MHD_Connection *c)
{
	return bad(q, c, "\"path\" must be an absolute path under /sandbox or /tmp, without "
		   "\".\" or \"..\" components, of at most 4095 bytes");
}

struct wstream { /* a directory's events, NDJSON */
	struct server *s;
	struct serve_sbx *x;
	struct live_watch *w;
	int client; /* dup of the connection: its hang-up ends the wait */
	struct moat_buf pending;
	size_t off;
	bool done;
};

static ssize_t watch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct wstream *p = cls;
	(void)pos;
	/* as many events as are there now, up to max bytes, in one chunk; the
	 * wait (half a second at a time) only while there are none */
	while (!p->done && !p->pending.oom && p->pending.len - p->off < max) {
		bool have = p->pending.len > p->off;
		enum live_event ev = live_watch_next(p->w, have ? 0 : ATTACH_WAIT_MS, p->client,
						     &p->pending);
		if (ev == LIVE_EV_HANGUP)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (ev == LIVE_EV_NONE && have)
			break;
		if (ev == LIVE_EV_EXIT) {
			p->done = true;
		} else if (ev == LIVE_EV_END) {
			char *why = serve_sbx_gone(p->s->sandboxes, p->x);
			moat_buf_append(&p->pending, "{\"type\":\"error\",\"error\":{\"type\":\"SandboxGone\","
					"\"message\":", 60);
			const char *w = why ? why : "the sandbox ended";
			moat_buf_append_json_string(&p->pending, w, strlen(w));
			moat_buf_append(&p->pending, "}}\n", 3);
			free(why);
			p->done = true;
		}
	}
	if (p->pending.oom)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (p->off < p->pending.len)
		return srv_pending_take(&p->pending, &p->off, buf, max);
	return MHD_CONTENT_READER_END_OF_STREAM; /* done, all sent */
}

static void watch_free(void *cls)
{
	struct wstream *p = cls;
	live_watch_close(p->w);
	if (p->client >= 0)
		close(p->client);
	moat_buf_free(&p->pending);
	serve_sbx_end(p->s->sandboxes, p->x);
	serve_sbx_put(p->s->sandboxes, p->x);
	free(p);
}

/* GET .../files/watch?path=DIR[&recursive=1]: the directory's events as
 * NDJSON, from now until the client hangs up, the directory goes or the
 * sandbox ends. The first line, {"type":"ready"}, says the watch is set. */
static enum MHD_Result file_watch(struct req *q, struct MHD_Connection *c, const char *path)
{
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct wstream *p = calloc(1, sizeof *p);
	if (!p)
		return MHD_NO;
	if (live_watch_open(serve_sbx_live(q->sbx), path, arg_flag(c, "recursive"), &p->w,
			    &err) < 0) {
		free(p);
		if (err.sys_errno == EMFILE)
			return srv_fail(q, c, 429, "TooManyWatches", O_BAD_REQUEST, err.message);
		if (err.sys_errno == E2BIG)
			return bad(q, c, "the tree is too large to watch (at most 1024 directories, "
				   "32 levels deep)");
		return op_fail(q, c, &err);
	}
	p->s = q->s;
	p->x = q->sbx;
	p->client = -1;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ci->connect_fd >= 0)
		p->client = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
	moat_buf_append(&p->pending, "{\"type\":\"ready\"}\n", 17);
	struct MHD_Response *r =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, CHUNK, watch_read, p, watch_free);
	if (!r) {
		live_watch_close(p->w);
		if (p->client >= 0)
			close(p->client);
		moat_buf_free(&p->pending);
		free(p);
		return MHD_NO;
	}
	/* the stream holds the sandbox, as a process's output does */
	q->sbx = NULL;
	q->sbx_busy = false;
	MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	q->status = 200;
	srv_conn_deadline_in(q->s, c, serve_sbx_left_ms(q->s->sandboxes, p->x) +
					      (int64_t)q->s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

/* "bytes=a-b", "bytes=a-", "bytes=-n" against size: 1 and the range, 0
 * no Range header, -1 not satisfiable or not understood. */
static int parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
	if (!h)
		return 0;
	if (strncmp(h, "bytes=", 6) || strchr(h, ','))
		return -1;
	const char *p = h + 6;
	char *end;
	unsigned long long a = 0, b = 0;
	errno = 0;
	if (*p == '-') {
		b = strtoull(p + 1, &end, 10);
		if (errno || end == p + 1 || *end || b == 0)
			return -1;
		if (b > size)
			b = size;
		*off = size - b;
		*len = b;
		return size ? 1 : -1;
	}
	a = strtoull(p, &end, 10);
	if (errno || end == p || *end != '-')
		return -1;
	p = end + 1;
	if (!*p)
		b = size ? size - 1 : 0;
	else {
		b = strtoull(p, &end, 10);
		if (errno || end == p || *end)
			return -1;
	}
	if (a >= size || b < a)
		return -1;
	if (b >= size)
		b = size - 1;
	*off = a;
	*len = b - a + 1;
	return 1;
}

static enum MHD_Result file_get(struct req *q, struct MHD_Connection *c, const char *path)
{
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	int fd;
	uint64_t size;
	if (live_open_read(serve_sbx_live(q->sbx), path, &fd, &size, &err) < 0)
		return op_fail(q, c, &err);
	uint64_t off = 0, len = size;
	int rg = parse_range(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range"), size, &off,
			     &len);
	if (rg < 0) {
		close(fd);
		char cr[64];
		snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)size);
		char *body = srv_error_json("RangeNotSatisfiable",
					   "the Range is not one satisfiable byte range of the file");
		q->outcome = O_BAD_REQUEST;
		return srv_respond(q, c, 416, body, "application/json", "Content-Range", cr);
	}
	return srv_sandboxes_send_fd(q, c, fd, off, len, rg > 0 ? size : UINT64_MAX);
}

enum MHD_Result srv_sandboxes_send_fd(struct req *q, struct MHD_Connection *c, int fd, uint64_t off,
				      uint64_t len, uint64_t range_of)
{
	bool rg = range_of != UINT64_MAX;
	uint64_t size = range_of;
	struct fstream *f = calloc(1, sizeof *f);
	if (!f) {
		close(fd);
		return MHD_NO;
	}
	f->s = q->s;
	f->x = q->sbx;
	f->fd = fd;
	f->off = off;
	f->len = len;
	struct MHD_Response *r = MHD_create_response_from_callback(len, CHUNK, file_read, f, file_free);
	if (!r) {
		close(fd);
		free(f);
		return MHD_NO;
	}
	q->sbx = NULL; /* the response's now, busy included */
	q->sbx_busy = false;
	MHD_add_response_header(r, "Content-Type", "application/octet-stream");
	MHD_add_response_header(r, "Accept-Ranges", "bytes");
	if (rg) {
		char cr[96];
		snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)off,
			 (unsigned long long)(off + len - 1), (unsigned long long)size);
		MHD_add_response_header(r, "Content-Range", cr);
	}
	unsigned status = rg ? 206 : 200;
	q->status = status;
	/* the client's time, and a second per MiB at 1 MiB/s: a reader that
	 * trickles cannot hold the connection forever */
	srv_conn_deadline_in(q->s, c, (int64_t)q->s->o->client_timeout_s * 1000 +
					      (int64_t)(len / 1024));
	q->bytes_out = len;
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result respond_json(struct req *q, struct MHD_Connection *c, unsigned status,
				    struct moat_buf *b)
{
	char *body = moat_buf_take(b);
	return body ? srv_respond(q, c, status, body, "application/json", NULL, NULL) : MHD_NO;
}

static enum MHD_Result file_stat(struct req *q, struct MHD_Connection *c, const char *path)
{
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct live_stat st;
	if (live_stat(serve_sbx_live(q->sbx), path, &st, &err) < 0)
		return op_fail(q, c, &err);
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"path\":", 8);
	moat_buf_append_json_string(&b, path, strlen(path));
	moat_buf_appendf(&b, ",\"type\":\"%s\",\"size\":%llu,\"mode\":\"%04o\",\"mtimeMs\":%lld",
			 st.type, (unsigned long long)st.size, st.mode, (long long)st.mtime_ms);
	live_meta_json(&b, &st);
	moat_buf_append(&b, "}\n", 2);
	return respond_json(q, c, 200, &b);
}

static enum MHD_Result file_list(struct req *q, struct MHD_Connection *c, const char *path)
{
	long long depth = arg_num(c, "depth", 1, 1, SERVE_SBX_MAX_DEPTH);
	if (depth < 0)
		return bad(q, c, "\"depth\" must be a whole number from 1 to 32");
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"path\":", 8);
	moat_buf_append_json_string(&b, path, strlen(path));
	moat_buf_append(&b, ",\"entries\":[", 12);
	unsigned count;
	bool truncated;
	if (live_list(serve_sbx_live(q->sbx), path, (unsigned)depth, SERVE_SBX_MAX_ENTRIES, &b,
		      &count, &truncated, &err) < 0) {
		moat_buf_free(&b);
		return op_fail(q, c, &err);
	}
	moat_buf_appendf(&b, "],\"count\":%u,\"truncated\":%s}\n", count,
			 truncated ? "true" : "false");
	return respond_json(q, c, 200, &b);
}

/* ---- bodies ---- */

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* "metadata" (removed from o): a string map, bounded. */
int srv_sandboxes_metadata(cJSON *o, char ***out, size_t *count, struct moat_error *err)
{
	*out = NULL;
	*count = 0;
	cJSON *m = cJSON_DetachItemFromObjectCaseSensitive(o, "metadata");
	if (!m)
		return 0;
	int rc = 0;
	size_t n = (size_t)cJSON_GetArraySize(m);
	if (!cJSON_IsObject(m) || n > SERVE_SBX_MAX_META) {
		rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
				    "\"metadata\" must be an object of at most %u string values",
				    SERVE_SBX_MAX_META);
		goto out;
	}
	char **kv = calloc(2 * n + 1, sizeof *kv);
	if (!kv) {
		rc = moat_error_oom(err);
		goto out;
	}
	size_t i = 0;
	for (const cJSON *it = m->child; it; it = it->next, i++) {
		if (!cJSON_IsString(it) || !it->string || !it->string[0] ||
		    strlen(it->string) > SERVE_SBX_MAX_META_KEY ||
		    strlen(it->valuestring) > SERVE_SBX_MAX_META_VALUE) {
			rc = moat_error_set(err, MOAT_ERR_CONFIG, 0,
					    "\"metadata\": each key 1 to %u bytes, each value a string "
					    "of at most %u bytes",
					    SERVE_SBX_MAX_META_KEY, SERVE_SBX_MAX_META_VALUE);
			break;
		}
		if (!(kv[2 * i] = strdup(it->string)) || !(kv[2 * i + 1] = strdup(it->valuestring))) {
			rc = moat_error_oom(err);
			break;
		}
	}
	if (rc < 0) {
		for (size_t j = 0; j < 2 * n; j++)
			free(kv[j]);
		free(kv);
	} else {
		*out = kv;
		*count = n;
	}
out:
	cJSON_Delete(m);
	return rc;
}

static enum MHD_Result sbx_create(struct req *q, struct MHD_Connection *c)
{
	static const char *const refused[] = { "code", "argv", "stdin", "files", "outputs",
					       "timeout", "language", NULL };
	/* its keys are the request pipeline's, which names them */
	static const struct srv_body_spec spec = { "POST /v1/sandboxes", NULL, "docs/SANDBOXES.md" };
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
	if (!o)
		return srv_fail_moat(q, c, &err);
	for (const char *const *k = refused; *k; k++)
		if (cJSON_GetObjectItemCaseSensitive(o, *k)) {
			char msg[160];
			snprintf(msg, sizeof msg, "\"%s\" is not taken here: a sandbox runs processes "
				 "(POST /v1/sandboxes/{id}/processes; docs/SANDBOXES.md)", *k);
			return bad(q, c, msg);
		}
	const struct serve_limits *l = &q->s->limits;
	uint64_t life, idle, max_cpu;
	bool idle_pause;
	char **meta = NULL;
	size_t nmeta = 0;
	uint64_t max_life = l->session_max_life_ms;
	/* maxCpuTimeMs: bounded as a session's (serve.sessions.maxCpuTimeMs) */
	uint64_t cpu_max = l->session_max_cpu_ms ? l->session_max_cpu_ms : 7ull * 24 * 3600 * 1000;
	if (srv_lifetime_key(o, "lifetimeMs", max_life < DEFAULT_LIFE_MS ? max_life : DEFAULT_LIFE_MS,
		   max_life, &life, &err) < 0 ||
	    srv_lifetime_key(o, "idleTimeoutMs", DEFAULT_IDLE_MS < max_life ? DEFAULT_IDLE_MS : max_life,
		   max_life, &idle, &err) < 0 ||
	    srv_lifetime_key(o, "maxCpuTimeMs", l->session_max_cpu_ms, cpu_max, &max_cpu, &err) < 0 ||
	    srv_on_idle_key(o, &idle_pause, &err) < 0 ||
	    srv_sandboxes_metadata(o, &meta, &nmeta, &err) < 0)
		return srv_fail_moat(q, c, &err);
	struct moat_request *req = NULL;
	MOAT_AUTOFREE char *text = NULL;
	if (!cJSON_AddStringToObject(o, "language", "bash") ||
	    !cJSON_AddStringToObject(o, "code", "") || !(text = cJSON_PrintUnformatted(o))) {
		moat_error_oom(&err);
	} else {
		struct moat_request_defaults d = { .fill = srv_limits_fill, .ctx = &q->s->limits };
		(void)moat_request_prepare(text, strlen(text), q->header_id, &d, &req, &err);
	}
	if (!req) {
		for (size_t i = 0; i < 2 * nmeta; i++)
			free(meta[i]);
		free(meta);
		return srv_fail_moat(q, c, &err);
	}
	if (req->kv_enabled && q->s->o->kv_off) {
		moat_request_free(req);
		for (size_t i = 0; i < 2 * nmeta; i++)
			free(meta[i]);
		free(meta);
		return srv_fail(q, c, 501, "NotImplemented", O_BAD_REQUEST,
				"kvEnabled: this server runs without the key-value store (--no-kv)");
	}
	struct serve_sbx *x = NULL;
	/* the pool's sandbox only for exactly the pool's request */
	int rc = serve_sbx_create(q->s->sandboxes, q->cred, req, q->header_id ? NULL : text, life,
				  idle, meta, nmeta, NULL, &x, &err);
	if (rc == -2)
		return srv_fail(q, c, 503, "ServerBusy", O_REJECTED, err.message);
	if (rc < 0)
		return srv_fail_moat(q, c, &err);
	q->sbx = x;
	serve_sbx_set_accounting(q->s->sandboxes, x, idle_pause, max_cpu);
	struct moat_buf b = { 0 };
	serve_sbx_json(q->s->sandboxes, x, &b);
	moat_buf_append(&b, "\n", 1);
	return respond_json(q, c, 201, &b);
}

/* {"rows":R,"cols":C} (srv_json_body refused other keys), each
 * 1..LIVE_MAX_WINSIZE: 0, or -1. */
static int winsize(const cJSON *o, unsigned *rows, unsigned *cols)
{
	if (!cJSON_IsObject(o))
		return -1;
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "rows");
	const cJSON *cl = cJSON_GetObjectItemCaseSensitive(o, "cols");
	if (!cJSON_IsNumber(r) || !cJSON_IsNumber(cl) || r->valuedouble < 1 ||
	    r->valuedouble > LIVE_MAX_WINSIZE || cl->valuedouble < 1 ||
	    cl->valuedouble > LIVE_MAX_WINSIZE || r->valuedouble != floor(r->valuedouble) ||
	    cl->valuedouble != floor(cl->valuedouble))
		return -1;
	*rows = (unsigned)r->valuedouble;
	*cols = (unsigned)cl->valuedouble;
	return 0;
}

static enum MHD_Result proc_start(struct req *q, struct MHD_Connection *c)
{
	static const char *const keys[] = { "argv", "cmd", "env", "cwd", "stdin", "pty", NULL };
	static const struct srv_body_spec body = { "POST /v1/sandboxes/{id}/processes", keys,
						   "docs/SANDBOXES.md" };
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &body, &err);
	if (!o)
		return srv_fail_moat(q, c, &err);
	const cJSON *argv = cJSON_GetObjectItemCaseSensitive(o, "argv");
	const char *cmd = jstr(o, "cmd");
	const cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
	const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(o, "cwd");
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "stdin");
	if ((argv != NULL) == (cmd != NULL) ||
	    (argv && (!cJSON_IsArray(argv) || cJSON_GetArraySize(argv) < 1 ||
		      cJSON_GetArraySize(argv) > (int)SERVE_SBX_MAX_ARGS)) ||
	    (cJSON_GetObjectItemCaseSensitive(o, "cmd") && !cmd))
		return bad(q, c, "give \"argv\" (an array of 1 to 1000 strings) or \"cmd\" (a shell "
			   "line, run by /bin/sh -c), not both");
	if ((env && (!cJSON_IsObject(env) || cJSON_GetArraySize(env) > (int)SERVE_SBX_MAX_ARGS)) ||
	    (cwd && !cJSON_IsString(cwd)) || (in && !cJSON_IsBool(in)))
		return bad(q, c, "\"env\" is an object of strings (at most 1000), \"cwd\" a path "
			   "under /sandbox or /tmp, \"stdin\" true or false");
	const cJSON *pty = cJSON_GetObjectItemCaseSensitive(o, "pty");
	unsigned rows = 0, cols = 0;
	if (pty && (winsize(pty, &rows, &cols) < 0 || (in && !cJSON_IsTrue(in))))
		return bad(q, c, "\"pty\" is {\"rows\":R,\"cols\":C}, each a whole number from 1 "
			   "to 1000 (a pty's stdin is always open)");
	const char *dir = cwd ? cwd->valuestring : "/sandbox";
	if (!live_path_ok(dir))
		return bad_path(q, c);
	size_t argc = cmd ? 3 : (size_t)cJSON_GetArraySize(argv);
	size_t envc = env ? (size_t)cJSON_GetArraySize(env) : 0;
	const char **av = calloc(argc + 1, sizeof *av);
	char **ev = calloc(envc + 1, sizeof *ev);
	enum MHD_Result r = MHD_NO;
	if (!av || !ev)
		goto out;
	if (cmd) {
		av[0] = "/bin/sh";
		av[1] = "-c";
		av[2] = cmd;
	} else {
		size_t i = 0;
		for (const cJSON *it = argv->child; it; it = it->next, i++) {
			if (!cJSON_IsString(it) || (i == 0 && !it->valuestring[0])) {
				r = bad(q, c, "\"argv\" must hold strings, the first not empty");
				goto out;
			}
			av[i] = it->valuestring;
		}
	}
	size_t i = 0;
	for (const cJSON *it = env ? env->child : NULL; it; it = it->next, i++) {
		if (!cJSON_IsString(it) || !it->string ||
		    !moat_env_name_valid(it->string, strlen(it->string))) {
			r = bad(q, c, "\"env\": names like [A-Za-z_][A-Za-z0-9_]*, string values");
			goto out;
		}
		if (asprintf(&ev[i], "%s=%s", it->string, it->valuestring) < 0) {
			ev[i] = NULL;
			goto out;
		}
	}
	struct live_exec spec = { .argv = av, .argc = argc, .env = (const char *const *)ev,
				  .envc = envc, .cwd = dir, .stdin_open = cJSON_IsTrue(in) || pty,
				  .pty = pty != NULL, .rows = rows, .cols = cols };
	int pid;
	if (live_exec(serve_sbx_live(q->sbx), &spec, &pid, &err) < 0) {
		if (err.sys_errno == ENOENT)
			r = bad(q, c, "no such command, or no such cwd, in the sandbox");
		else if (err.sys_errno == EACCES)
			r = bad(q, c, "the command is not executable by the sandbox's identity");
		else
			r = op_fail(q, c, &err);
		goto out;
	}
	char line[96];
	if (arg_flag(c, "stream") || srv_wants_ndjson(c)) {
		snprintf(line, sizeof line, "{\"type\":\"start\",\"pid\":%d}\n", pid);
		r = stream_output(q, c, pid, line);
	} else {
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"pid\":%d,\"state\":\"running\"}\n", pid);
		r = respond_json(q, c, 201, &b);
	}
out:
	free(av);
	for (size_t j = 0; ev && j < envc; j++)
		free(ev[j]);
	free(ev);
	return r;
}

static int signal_number(const cJSON *v)
{
	static const struct {
		const char *name;
		int sig;
	} names[] = { { "TERM", SIGTERM }, { "KILL", SIGKILL }, { "INT", SIGINT },
		      { "HUP", SIGHUP },   { "QUIT", SIGQUIT }, { "USR1", SIGUSR1 },
		      { "USR2", SIGUSR2 }, { "STOP", SIGSTOP }, { "CONT", SIGCONT },
		      { "ALRM", SIGALRM }, { "WINCH", SIGWINCH } };
	if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 64 &&
	    v->valuedouble == floor(v->valuedouble))
		return (int)v->valuedouble;
	if (!cJSON_IsString(v))
		return -1;
	const char *s = v->valuestring;
	if (!strncmp(s, "SIG", 3))
		s += 3;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(s, names[i].name))
			return names[i].sig;
	return -1;
}

static enum MHD_Result proc_info_answer(struct req *q, struct MHD_Connection *c,
					const struct live_proc_info *i)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"pid\":%d,\"state\":\"%s\"", i->pid,
			 i->running ? "running" : i->lost ? "lost" : "exited");
	if (!i->running && !i->lost) {
		if (i->exited)
			moat_buf_appendf(&b, ",\"exitCode\":%d", i->exit_code);
		else
			moat_buf_appendf(&b, ",\"exitCode\":null");
		if (i->signal)
			moat_buf_appendf(&b, ",\"signal\":%d", i->signal);
	}
	moat_buf_appendf(&b, ",\"attached\":%s}\n", i->attached ? "true" : "false");
	return respond_json(q, c, 200, &b);
}

/* The body's request, the sandbox held (busy). */
static enum MHD_Result with_body(struct req *q, struct MHD_Connection *c)
{
	if (q->sbx_op == OP_CREATE)
		return sbx_create(q, c);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	switch ((enum sbx_op)q->sbx_op) {
	case OP_CTX: {
		/* each context route checks its own keys (route_contexts.c) */
		static const struct srv_body_spec spec = { "POST /v1/sandboxes/{id}/contexts", NULL,
							   "docs/CONTEXTS.md" };
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
		return o ? srv_contexts_body(q, c, o) : srv_fail_moat(q, c, &err);
	}
	case OP_PROC_START:
		return proc_start(q, c);
	case OP_PROC_STDIN: {
		ssize_t n = live_stdin_write(lv, q->sbx_pid, q->body.data ? q->body.data : "",
					     q->body.len, STDIN_TIMEOUT_MS, &err);
		if (n < 0)
			return err.sys_errno == EBADF || err.sys_errno == EPIPE
				       ? srv_fail(q, c, 409, "Conflict", O_BAD_REQUEST, err.message)
				       : op_fail(q, c, &err);
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"written\":%zd,\"complete\":%s}\n", n,
				 (size_t)n == q->body.len ? "true" : "false");
		return respond_json(q, c, 200, &b);
	}
	case OP_PROC_STDIN_CLOSE:
		if (live_stdin_close(lv, q->sbx_pid, &err) < 0)
			return op_fail(q, c, &err);
		break;
	case OP_PROC_SIGNAL: {
		static const char *const keys[] = { "signal", NULL };
		static const struct srv_body_spec spec = {
			"POST /v1/sandboxes/{id}/processes/{pid}/signal", keys, "docs/SANDBOXES.md"
		};
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
		if (!o)
			return srv_fail_moat(q, c, &err);
		int sig = signal_number(cJSON_GetObjectItemCaseSensitive(o, "signal"));
		if (sig < 0)
			return bad(q, c, "\"signal\": a name (\"TERM\", \"KILL\", \"INT\", \"HUP\", "
				   "\"QUIT\", \"USR1\", \"USR2\", \"STOP\", \"CONT\", \"ALRM\", "
				   "\"WINCH\") or a number from 1 to 64");
		if (live_signal(lv, q->sbx_pid, sig, &err) < 0)
			return op_fail(q, c, &err);
		break;
	}
	case OP_PROC_RESIZE: {
		static const char *const keys[] = { "rows", "cols", NULL };
		static const struct srv_body_spec spec = {
			"POST /v1/sandboxes/{id}/processes/{pid}/resize", keys, "docs/SANDBOXES.md"
		};
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
		if (!o)
			return srv_fail_moat(q, c, &err);
		unsigned rows, cols;
		if (winsize(o, &rows, &cols) < 0)
			return bad(q, c, "the body is {\"rows\":R,\"cols\":C}, each a whole number "
				   "from 1 to 1000");
		if (live_resize(lv, q->sbx_pid, rows, cols, &err) < 0)
			return err.sys_errno == ENOTTY
				       ? srv_fail(q, c, 409, "Conflict", O_BAD_REQUEST, err.message)
				       : op_fail(q, c, &err);
		break;
	}
	case OP_FILE_MKDIR:
	case OP_FILE_RENAME: {
		static const char *const mkdir_keys[] = { "path", "parents", NULL };
		static const char *const rename_keys[] = { "from", "to", NULL };
		static const struct srv_body_spec mkdir_spec = {
			"POST /v1/sandboxes/{id}/files/mkdir", mkdir_keys, "docs/SANDBOXES.md"
		};
		static const struct srv_body_spec rename_spec = {
			"POST /v1/sandboxes/{id}/files/rename", rename_keys, "docs/SANDBOXES.md"
		};
		bool mk = q->sbx_op == OP_FILE_MKDIR;
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, mk ? &mkdir_spec : &rename_spec, &err);
		if (!o)
			return srv_fail_moat(q, c, &err);
		const char *a = jstr(o, mk ? "path" : "from");
		const char *b = mk ? NULL : jstr(o, "to");
		if (!a || !live_path_ok(a) || (!mk && (!b || !live_path_ok(b))))
			return bad_path(q, c);
		const cJSON *par = cJSON_GetObjectItemCaseSensitive(o, "parents");
		int rc = mk ? live_mkdir(lv, a, cJSON_IsTrue(par), &err) : live_rename(lv, a, b, &err);
		if (rc < 0)
			return op_fail(q, c, &err);
		break;
	}
	case OP_TIMEOUT: {
		static const char *const keys[] = { "lifetimeMs", NULL };
		static const struct srv_body_spec spec = { "POST /v1/sandboxes/{id}/timeout", keys,
							   "docs/SANDBOXES.md" };
		MOAT_AUTO(cJSON) cJSON *o = srv_json_body(q, &spec, &err);
		uint64_t ms;
		if (!o || srv_lifetime_key(o, "lifetimeMs", 0, q->s->limits.session_max_life_ms, &ms, &err) < 0)
			return srv_fail_moat(q, c, &err);
		if (!ms)
			return bad(q, c, "\"lifetimeMs\": the sandbox's lifetime from now");
		char *why = NULL;
		if (serve_sbx_extend(q->s->sandboxes, q->sbx, ms, &why) < 0)
			return gone(q, c, why);
		struct moat_buf b = { 0 };
		serve_sbx_json(q->s->sandboxes, q->sbx, &b);
		moat_buf_append(&b, "\n", 1);
		return respond_json(q, c, 200, &b);
	}
	default:
		return srv_fail(q, c, 500, "InternalError", O_ERROR, "no such operation");
	}
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"ok\":true}\n");
	return respond_json(q, c, 200, &b);
}

/* ---- a multipart upload: POST .../files?path=DIR ---- */

#define MP_MAX_PARTS 100u   /* files per upload */
#define MP_MAX_NAME 255u    /* a part's filename, bytes (one path component) */
#define MP_BUFFER 65536u    /* the post processor's buffer */

struct sbx_multipart {
	struct MHD_PostProcessor *pp;
	struct live *lv;
	char *dir;
	int fd;          /* the current part's file */
	char *key, *name; /* the current part's field name and filename */
	uint64_t len, total; /* its bytes, every part's */
	unsigned parts;
	bool malformed;      /* the body is not well-formed multipart */
	const char *why;     /* a 400's sentence: stops the upload */
	struct moat_error err; /* a file's failure: stops it */
	struct moat_buf out; /* {"path","size"} of each file written */
};

/* One path component: not empty, ".", ".." nor holding a slash. */
static bool mp_name_ok(const char *n)
{
	size_t len = strlen(n);
	return len >= 1 && len <= MP_MAX_NAME && !strchr(n, '/') && strcmp(n, ".") &&
	       strcmp(n, "..");
}

/* The current part's file closed, and said in out. */
static void mp_close(struct sbx_multipart *m)
{
	if (m->fd < 0)
		return;
	moat_close_fd(&m->fd);
	moat_buf_append(&m->out, m->parts > 1 ? ",{\"path\":" : "{\"path\":", m->parts > 1 ? 9 : 8);
	char *p = NULL;
	if (asprintf(&p, "%s/%s", m->dir, m->name) < 0) {
		m->out.oom = true;
		return;
	}
	moat_buf_append_json_string(&m->out, p, strlen(p));
	moat_buf_appendf(&m->out, ",\"size\":%llu}", (unsigned long long)m->len);
	free(p);
}

static enum MHD_Result mp_part(void *cls, enum MHD_ValueKind kind, const char *key,
			       const char *filename, const char *content_type,
			       const char *transfer_encoding, const char *data, uint64_t off,
			       size_t size)
{
	struct sbx_multipart *m = cls;
	(void)kind;
	(void)content_type;
	(void)transfer_encoding;
	if (m->why || m->err.sys_errno)
		return MHD_NO;
	if (!filename) {
		m->why = "every part is a file: a filename in its Content-Disposition";
		return MHD_NO;
	}
	bool same = m->fd >= 0 && !(off == 0 && m->len > 0) && !strcmp(key ? key : "", m->key) &&
		    !strcmp(filename, m->name);
	if (!same) {
		mp_close(m);
		if (!mp_name_ok(filename)) {
			m->why = "a part's filename is one path component: not empty, not . or .., "
				 "no slash, at most 255 bytes";
			return MHD_NO;
		}
		if (++m->parts > MP_MAX_PARTS) {
			m->why = "at most 100 files in one upload";
			return MHD_NO;
		}
		free(m->key);
		free(m->name);
		m->key = strdup(key ? key : "");
		m->name = strdup(filename);
		char *path = NULL;
		if (!m->key || !m->name || asprintf(&path, "%s/%s", m->dir, filename) < 0) {
			moat_error_oom(&m->err);
			return MHD_NO;
		}
		bool ok = live_path_ok(path);
		if (!ok)
			m->why = "the directory and a filename make a path too long";
		else if (live_open_write(m->lv, path, false, NULL, &m->fd, &m->err) < 0 &&
			 !m->err.sys_errno)
			m->err.sys_errno = EIO;
		free(path);
		m->len = 0;
		if (!ok || m->err.sys_errno)
			return MHD_NO;
	}
	if (m->total + size > SERVE_SBX_MAX_FILE) {
		m->why = "the upload is larger than this server's most (1 GiB)";
		return MHD_NO;
	}
	for (size_t done = 0; done < size;) {
		ssize_t w = write(m->fd, data + done, size - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			moat_error_set(&m->err, MOAT_ERR_CONFIG, w < 0 ? errno : EIO,
				       "writing the file failed");
			return MHD_NO;
		}
		done += (size_t)w;
	}
	m->len += size;
	m->total += size;
	return MHD_YES;
}

void srv_sandboxes_multipart(struct req *q, const char *data, size_t n)
{
	struct sbx_multipart *m = q->sbx_mp;
	if (m->why || m->err.sys_errno || m->malformed)
		return; /* the rest is read and dropped */
	if (MHD_post_process(m->pp, data, n) == MHD_NO && !m->why && !m->err.sys_errno)
		m->malformed = true;
}

void srv_sandboxes_multipart_free(struct req *q)
{
	struct sbx_multipart *m = q->sbx_mp;
	if (!m)
		return;
	if (m->pp)
		MHD_destroy_post_processor(m->pp);
	if (m->fd >= 0)
		close(m->fd);
	free(m->dir);
	free(m->key);
	free(m->name);
	moat_error_clear(&m->err);
	moat_buf_free(&m->out);
	free(m);
	q->sbx_mp = NULL;
}

static enum MHD_Result multipart_start(struct req *q, struct MHD_Connection *c, const char *dir)
{
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	if (!ct || strncasecmp(ct, "multipart/form-data", 19))
		return srv_fail(q, c, 415, "UnsupportedMediaType", O_BAD_REQUEST,
				"POST .../files takes multipart/form-data (PUT takes a raw body)");
	if (srv_length_over(c, SERVE_SBX_MAX_FILE))
		return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
				"the upload is larger than this server's most (1 GiB)");
	struct sbx_multipart *m = calloc(1, sizeof *m);
	if (!m || !(m->dir = strdup(dir))) {
		free(m);
		return MHD_NO;
	}
	for (size_t n = strlen(m->dir); n > 1 && m->dir[n - 1] == '/'; n--)
		m->dir[n - 1] = '\0';
	m->fd = -1;
	m->lv = serve_sbx_live(q->sbx);
	q->sbx_mp = m;
	/* the parts streamed through libmicrohttpd's parser, a 64 KiB buffer:
	 * never the body whole */
	if (!(m->pp = MHD_create_post_processor(c, MP_BUFFER, mp_part, m)))
		return bad(q, c, "the body is not multipart/form-data with a boundary");
	q->is_post = true;
	return MHD_YES;
}

static enum MHD_Result multipart_end(struct req *q, struct MHD_Connection *c)
{
	struct sbx_multipart *m = q->sbx_mp;
	mp_close(m);
	bool whole = MHD_destroy_post_processor(m->pp) == MHD_YES;
	m->pp = NULL;
	if (m->err.sys_errno)
		return op_fail(q, c, &m->err);
	if (m->why)
		return bad(q, c, m->why);
	if (m->malformed || !whole)
		return bad(q, c, "the body is not well-formed multipart/form-data (the files "
			   "before the fault are written)");
	if (!m->parts)
		return bad(q, c, "the upload holds no file");
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"files\":[", 10);
	moat_buf_append(&b, m->out.data, m->out.len);
	moat_buf_appendf(&b, "],\"count\":%u}\n", m->parts);
	if (m->out.oom)
		b.oom = true;
	return respond_json(q, c, 201, &b);
}

/* After the body: the request's answer. */
enum MHD_Result srv_sandboxes_body(struct req *q, struct MHD_Connection *c)
{
	if (q->sbx_op == OP_FILE_UPLOAD && q->sbx_mp)
		return multipart_end(q, c);
	if (q->sbx_op == OP_FILE_PUT) {
		if (q->up_too_large)
			return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
					"the file is larger than this server's serve.sandboxes "
					"maxFileBytes");
		if (q->up_errno) {
			struct moat_error err = { .sys_errno = q->up_errno,
						  .message = (char *)"writing the file failed" };
			return op_fail(q, c, &err);
		}
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"path\":");
		const char *p = q->sbx_path ? q->sbx_path : "";
		moat_buf_append_json_string(&b, p, strlen(p));
		moat_buf_appendf(&b, ",\"size\":%llu}\n", (unsigned long long)q->up_len);
		moat_close_fd(&q->up_fd);
		return respond_json(q, c, 201, &b);
	}
	return with_body(q, c);
}

/* A body chunk of a PUT .../files: written to the file as it comes. */
void srv_sandboxes_upload(struct req *q, const char *data, size_t n)
{
	if (q->up_fd < 0 || q->up_errno || q->up_too_large)
		return;
	if (q->up_len + n > SERVE_SBX_MAX_FILE) {
		q->up_too_large = true;
		return;
	}
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(q->up_fd, data + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			q->up_errno = w < 0 ? errno : EIO;
			return;
		}
		done += (size_t)w;
	}
	q->up_len += n;
}

/* The first call, headers only: everything answered from them is answered
 * here; a body's requests go on (MHD_YES with q->is_post). */
enum MHD_Result srv_sandboxes_route(struct req *q, struct MHD_Connection *c, const char *url,
				    const char *method)
{
	struct server *s = q->s;
	char id[SERVE_SBX_ID_LEN + 1];
	int pid;
	enum sbx_op op;
	int pr = parse_route(url, method, id, &pid, &op);
	if (pr == -1)
		return srv_fail(q, c, 404, "NotFound", O_BAD_REQUEST, "no such route");
	if (pr == -2)
		return srv_fail(q, c, 405, "MethodNotAllowed", O_BAD_REQUEST,
				"this route does not take that method (docs/SANDBOXES.md)");
	q->sbx_op = (int)op;
	q->sbx_pid = pid;
	q->mode = "sandbox";
	srv_caller_cred(s, c, q->cred);
	enum MHD_Result mis;
	if (srv_misdirected(q, c, id, "sbx_", &mis))
		return mis;
	if (op == OP_LIST) {
		unsigned limit = (unsigned)arg_num(c, "limit", 100, 1, 1000);
		if (arg_num(c, "limit", 100, 1, 1000) < 0)
			return bad(q, c, "\"limit\" must be a whole number from 1 to 1000");
		const char *next = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "next");
		if (next && !serve_sbx_id_valid(next))
			return bad(q, c, "\"next\" must be a sandbox id from a previous page");
		struct moat_buf b = { 0 };
		struct meta_filter f = { 0 };
		MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, srv_sandboxes_filter, &f);
		if (f.bad) {
			for (size_t i = 0; i < 2 * f.n; i++)
				free(f.kv[i]);
			return bad(q, c, "at most 16 metadata.<key>=<value> filters");
		}
		serve_sbx_list(s->sandboxes, q->cred, f.kv, f.n, limit, next, &b);
		for (size_t i = 0; i < 2 * f.n; i++)
			free(f.kv[i]);
		return respond_json(q, c, 200, &b);
	}
	if (op == OP_CREATE) {
		q->is_post = true;
		return MHD_YES;
	}
	if (!(q->sbx = serve_sbx_get(s->sandboxes, id, q->cred)))
		return missing(q, c);
	if (op == OP_DELETE) {
		serve_sbx_delete(s->sandboxes, q->sbx);
		struct moat_buf b = { 0 };
		moat_buf_appendf(&b, "{\"id\":\"%s\",\"state\":\"ended\"}\n", id);
		return respond_json(q, c, 200, &b);
	}
	if (op == OP_PAUSE || op == OP_RESUME) {
		/* not a request on it (it would resume it): the state it asks */
		char *why = NULL;
		int rc = serve_sbx_pause(s->sandboxes, q->sbx, op == OP_PAUSE, &why);
		if (rc == -2)
			return gone(q, c, why);
		if (rc == -1)
			return srv_fail(q, c, 409, "Conflict", O_BAD_REQUEST,
					"a request is in flight on the sandbox (an attached output "
					"stream too): pause it once they have ended");
		struct moat_buf b = { 0 };
		serve_sbx_json(s->sandboxes, q->sbx, &b);
		moat_buf_append(&b, "\n", 1);
		return respond_json(q, c, 200, &b);
	}
	if (op == OP_GET) {
		struct moat_buf b = { 0 };
		serve_sbx_json(s->sandboxes, q->sbx, &b);
		moat_buf_append(&b, "\n", 1);
		return respond_json(q, c, 200, &b);
	}
	char *why = serve_sbx_begin(s->sandboxes, q->sbx);
	if (why)
		return gone(q, c, why);
	q->sbx_busy = true;
	if (op == OP_CTX)
		return srv_contexts_route(q, c, url + strlen("/v1/sandboxes/") + strlen(id),
					  method);
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	const char *path = NULL;
	bool file_op = op == OP_FILE_GET || op == OP_FILE_PUT || op == OP_FILE_DELETE ||
		       op == OP_FILE_STAT || op == OP_FILE_LIST || op == OP_FILE_WATCH ||
		       op == OP_FILE_UPLOAD;
	if (file_op) {
		path = path_arg(c);
		if (!path || !live_path_ok(path))
			return bad_path(q, c);
	}
	switch (op) {
	case OP_PROCS: {
		struct moat_buf b = { 0 };
		moat_buf_append(&b, "{\"processes\":[", 14);
		live_procs_json(lv, &b);
		moat_buf_append(&b, "]}\n", 3);
		return respond_json(q, c, 200, &b);
	}
	case OP_PROC_WAIT: {
		long long ms = arg_num(c, "wait", 0, 0, MAX_WAIT_MS);
		if (ms < 0)
			return bad(q, c, "\"wait\" must be a whole number of milliseconds from 0 to 60000");
		struct live_proc_info i;
		if (live_wait(lv, pid, ms, &i, &err) < 0)
			return op_fail(q, c, &err);
		return proc_info_answer(q, c, &i);
	}
	case OP_PROC_OUTPUT:
		return stream_output(q, c, pid, NULL);
	case OP_FILE_GET:
		return file_get(q, c, path);
	case OP_FILE_STAT:
		return file_stat(q, c, path);
	case OP_FILE_LIST:
		return file_list(q, c, path);
	case OP_FILE_WATCH:
		return file_watch(q, c, path);
	case OP_FILE_DELETE:
		if (live_remove(lv, path, arg_flag(c, "recursive"), &err) < 0)
			return op_fail(q, c, &err);
		return srv_respond(q, c, 200, strdup("{\"ok\":true}\n"), "application/json", NULL,
				   NULL);
	case OP_FILE_UPLOAD:
		return multipart_start(q, c, path);
	case OP_FILE_PUT: {
		if (srv_length_over(c, SERVE_SBX_MAX_FILE))
			return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
					"the file is larger than this server's most (1 GiB)");
		if (live_open_write(lv, path, arg_flag(c, "mkdirs"), NULL, &q->up_fd, &err) < 0)
			return op_fail(q, c, &err);
		q->sbx_path = strdup(path);
		q->is_post = true;
		return MHD_YES;
	}
	default:
		break;
	}
	/* the rest have a (small) body: read it, 6 MiB at most */
	if (srv_length_over(c, SERVE_MAX_BODY))
		return srv_fail(q, c, 413, "PayloadTooLarge", O_BAD_REQUEST,
				"the request body is larger than 6 MiB");
	q->is_post = true;
	return MHD_YES;
}

enum MHD_Result srv_sandboxes_filter(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct meta_filter *f = cls;
	(void)kind;
	if (!key || strncmp(key, "metadata.", 9) || !key[9])
		return MHD_YES;
	if (f->n == 16) {
		f->bad = true;
		return MHD_NO;
	}
	f->kv[2 * f->n] = strdup(key + 9);
	f->kv[2 * f->n + 1] = strdup(value ? value : "");
	if (!f->kv[2 * f->n] || !f->kv[2 * f->n + 1]) {
		f->bad = true;
		f->n++;
		return MHD_NO;
	}
	f->n++;
	return MHD_YES;
}
