/* E2B's envd (docs/E2B.md) under /e2b/envd of moat serve's listener, on
 * the live sandboxes (src/live/): the sandbox is the E2b-Sandbox-Id
 * header's, its access token X-Access-Token (e2b_records.c; or, for
 * /files, a signed URL's signature made with it). /health,
 * /files (GET a file; POST raw or multipart, written as it comes), and the
 * Connect RPC services process.Process and filesystem.Filesystem with
 * Connect's JSON codec over HTTP/1.1: a unary call is a JSON body and a
 * JSON answer (the polling watchers among them: the native watch kept with
 * the sandbox); a server stream (Process/Start, Process/Connect,
 * Filesystem/WatchDir: the native watch) is one
 * enveloped request message and enveloped answers (flags, a 32-bit
 * big-endian length, the JSON), the last one the end-of-stream (flag 2).
 * Every request message is bounded by the body cap (6 MiB) and parsed
 * strictly (one message, no compression, a JSON object). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/cleanup.h"
#include "live/live.h"
#include "serve/e2b.h"


#define CHUNK (64u * 1024u)
#define WAIT_MS 500
#define STDIN_TIMEOUT_MS 10000
#define KEEPALIVE_S 50 /* Keepalive-Ping-Interval's default */
#define HOME "/sandbox" /* E2B's /home/user, and where relative paths are */
#define MAX_FILENAME 4096u

enum envd_op { E_NONE, E_HEALTH, E_FILES_GET, E_FILES_POST, E_P_START, E_P_CONNECT, E_P_LIST,
	       E_P_INPUT, E_P_SIGNAL, E_P_CLOSE, E_FS_STAT, E_FS_LIST, E_FS_MKDIR, E_FS_MOVE,
	       E_FS_REMOVE, E_FS_WATCH, E_P_UPDATE, E_W_CREATE, E_W_EVENTS, E_W_REMOVE,
	       E_UNIMPL };

static const struct {
	const char *path;
	enum envd_op op;
	bool stream;
} rpcs[] = {
	{ "/process.Process/Start", E_P_START, true },
	{ "/process.Process/Connect", E_P_CONNECT, true },
	{ "/process.Process/List", E_P_LIST, false },
	{ "/process.Process/SendInput", E_P_INPUT, false },
	{ "/process.Process/SendSignal", E_P_SIGNAL, false },
	{ "/process.Process/CloseStdin", E_P_CLOSE, false },
	{ "/process.Process/Update", E_P_UPDATE, false },	      /* a PTY's size */
	{ "/process.Process/StreamInput", E_UNIMPL, true },   /* a client stream: HTTP/2 */
	{ "/filesystem.Filesystem/Stat", E_FS_STAT, false },
	{ "/filesystem.Filesystem/ListDir", E_FS_LIST, false },
	{ "/filesystem.Filesystem/MakeDir", E_FS_MKDIR, false },
	{ "/filesystem.Filesystem/Move", E_FS_MOVE, false },
	{ "/filesystem.Filesystem/Remove", E_FS_REMOVE, false },
	{ "/filesystem.Filesystem/WatchDir", E_FS_WATCH, true },
	{ "/filesystem.Filesystem/CreateWatcher", E_W_CREATE, false }, /* polling watchers */
	{ "/filesystem.Filesystem/GetWatcherEvents", E_W_EVENTS, false },
	{ "/filesystem.Filesystem/RemoveWatcher", E_W_REMOVE, false },
};

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Connect's framing and errors ---- */

static void frame(struct moat_buf *b, uint8_t flags, const char *json, size_t len)
{
	uint8_t h[5] = { flags, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
			 (uint8_t)len };
	moat_buf_append(b, (const char *)h, 5);
	moat_buf_append(b, json, len);
}

/* The end-of-stream message: {} or {"error":{"code","message"}}. */
static void end_frame(struct moat_buf *b, const char *code, const char *msg)
{
	struct moat_buf j = { 0 };
	if (code) {
		moat_buf_appendf(&j, "{\"error\":{\"code\":\"%s\",\"message\":", code);
		moat_buf_append_json_string(&j, msg, strlen(msg));
		moat_buf_append(&j, "}}", 2);
	} else {
		moat_buf_append(&j, "{}", 2);
	}
	if (j.oom)
		b->oom = true;
	else
		frame(b, 2, j.data, j.len);
	moat_buf_free(&j);
}

static unsigned code_status(const char *code)
{
	static const struct {
		const char *code;
		unsigned status;
	} map[] = { { "invalid_argument", 400 },  { "failed_precondition", 400 },
		    { "unauthenticated", 401 },	  { "permission_denied", 403 },
		    { "not_found", 404 },	  { "already_exists", 409 },
		    { "resource_exhausted", 429 }, { "unimplemented", 501 },
		    { "unavailable", 503 },	  { "deadline_exceeded", 504 } };
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (!strcmp(map[i].code, code))
			return map[i].status;
	return 500;
}

/* Connect's error: a unary call's HTTP status and {"code","message"}; a
 * stream's 200 with only the end-of-stream message. */
static enum MHD_Result rpc_fail(struct req *q, struct MHD_Connection *c, const char *code,
				const char *msg)
{
	unsigned st = code_status(code);
	q->outcome = st >= 500 ? O_ERROR : st == 401 ? O_UNAUTHORIZED : O_BAD_REQUEST;
	struct moat_buf b = { 0 };
	if (q->e2b->stream) {
		end_frame(&b, code, msg);
		q->status = 200;
		size_t n = b.len;
		char *body = moat_buf_take(&b);
		if (!body)
			return MHD_NO;
		struct MHD_Response *r = MHD_create_response_from_buffer(n, body,
									 MHD_RESPMEM_MUST_FREE);
		if (!r) {
			free(body);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "application/connect+json");
		enum MHD_Result rc = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return rc;
	}
	moat_buf_appendf(&b, "{\"code\":\"%s\",\"message\":", code);
	moat_buf_append_json_string(&b, msg, strlen(msg));
	moat_buf_append(&b, "}\n", 2);
	char *body = moat_buf_take(&b);
	return body ? srv_respond(q, c, st, body, "application/json", NULL, NULL) : MHD_NO;
}

/* A live operation's errno as Connect's code. */
static const char *errno_code(int e)
{
	switch (e) {
	case ENOENT:
	case ESRCH:
		return "not_found";
	case EEXIST:
		return "already_exists";
	case EACCES:
	case EPERM:
	case EROFS:
		return "permission_denied";
	case ENOTCONN:
		return "unavailable";
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
	case EAGAIN:
		return "resource_exhausted";
	case EOPNOTSUPP: /* user xattrs (file metadata) */
	case ENOTEMPTY:
	case EBUSY:
	case EBADF:
	case EPIPE:
		return "failed_precondition";
	case ELOOP:
	case ENOTDIR:
	case EXDEV:
	case EMLINK:
	case ENXIO:
	case EISDIR:
	case EINVAL:
	case E2BIG:
	case ENAMETOOLONG:
	case EPROTO:
		return "invalid_argument";
	default:
		return "internal";
	}
}

static const char *errno_msg(int e, const struct moat_error *err)
{
	switch (e) {
	case ENOENT:
		return "no such file, directory or process in the sandbox";
	case ELOOP:
		return "the path names a symlink: symlinks are never followed";
	case ENOTCONN:
		return "the sandbox is not running anymore";
	case EXDEV:
		return "/sandbox and /tmp are two filesystems: a move cannot cross them";
	case ENOSPC:
	case EDQUOT:
		return "no space left on the sandbox's filesystem (its size is bounded)";
	case EOPNOTSUPP:
		return "file metadata needs user extended attributes on the sandbox's filesystem "
		       "(Linux 6.6 or later for tmpfs)";
	default:
		return err && err->message ? err->message : "failed";
	}
}

static enum MHD_Result op_fail(struct req *q, struct MHD_Connection *c, const struct moat_error *err)
{
	return rpc_fail(q, c, errno_code(err->sys_errno), errno_msg(err->sys_errno, err));
}

/* /files' errors: E2B's {"code":status,"message"} with the status the SDK
 * maps onto its exceptions. */
static enum MHD_Result files_fail(struct req *q, struct MHD_Connection *c, int e,
				  const struct moat_error *err)
{
	const char *code = errno_code(e);
	unsigned st = !strcmp(code, "unavailable")	      ? 502
		      : !strcmp(code, "resource_exhausted") ? 507
		      : !strcmp(code, "failed_precondition") ? 400
							      : code_status(code);
	return e2b_fail(q, c, st, st >= 500 && st != 507 ? O_ERROR : O_BAD_REQUEST,
			errno_msg(e, err));
}

/* ---- paths: E2B's home and relative paths are under /sandbox ---- */

static char *sbx_path(const char *p)
{
	if (!p)
		return NULL;
	while (p[0] == '.' && p[1] == '/')
		p += 2;
	char *out = NULL;
	int rc;
	if (!*p || !strcmp(p, "."))
		rc = asprintf(&out, "%s", HOME);
	else if (!strncmp(p, "/home/user", 10) && (p[10] == '\0' || p[10] == '/'))
		rc = asprintf(&out, "%s%s", HOME, p + 10);
	else if (*p != '/')
		rc = asprintf(&out, "%s/%s", HOME, p);
	else
		rc = asprintf(&out, "%s", p);
	if (rc < 0)
		return NULL;
	for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--)
		out[n - 1] = '\0';
	if (!live_path_ok(out)) {
		free(out);
		return NULL;
	}
	return out;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s && s[1] ? s + 1 : p;
}

static int file_type(const char *t)
{
	return !strcmp(t, "file") ? 1 : !strcmp(t, "dir") ? 2 : !strcmp(t, "symlink") ? 3 : 0;
}

/* An EntryInfo; meta: its ,"metadata":{...} (NULL or "": none). */
static void put_entry(struct moat_buf *b, const char *path, const char *type, uint64_t size,
		      unsigned mode, int64_t mtime_ms, const char *meta)
{
	moat_buf_append(b, "{\"name\":", 8);
	const char *nm = base_name(path);
	moat_buf_append_json_string(b, nm, strlen(nm));
	moat_buf_appendf(b, ",\"type\":%d,\"path\":", file_type(type));
	moat_buf_append_json_string(b, path, strlen(path));
	char perm[11] = "----------";
	perm[0] = !strcmp(type, "dir") ? 'd' : !strcmp(type, "symlink") ? 'l' : '-';
	for (int i = 0; i < 9; i++)
		if (mode & (0400u >> i))
			perm[1 + i] = "rwxrwxrwx"[i];
	time_t t = (time_t)(mtime_ms / 1000);
	struct tm tm;
	char when[40] = "1970-01-01T00:00:00";
	if (gmtime_r(&t, &tm))
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	moat_buf_appendf(b, ",\"size\":\"%llu\",\"mode\":%u,\"permissions\":\"%s\","
			 "\"modifiedTime\":\"%s.%03dZ\"",
			 (unsigned long long)size, mode & 07777u, perm, when,
			 (int)(mtime_ms % 1000 + 1000) % 1000);
	if (meta)
		moat_buf_append(b, meta, strlen(meta));
	moat_buf_append(b, "}", 1);
}

static int stat_entry(struct live *lv, const char *path, struct moat_buf *b, struct moat_error *err)
{
	MOAT_AUTOFREE struct live_stat *st = malloc(sizeof *st);
	if (!st)
		return moat_error_oom(err);
	if (live_stat(lv, path, st, err) < 0)
		return -1;
	struct moat_buf m = { 0 };
	live_meta_json(&m, st);
	MOAT_AUTOFREE char *meta = m.len ? moat_buf_take(&m) : NULL;
	moat_buf_free(&m);
	put_entry(b, path, st->type, st->size, st->mode, st->mtime_ms, meta);
	return 0;
}

/* ---- base64 (a process's stdin) ---- */

static int b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+' || ch == '-')
		return 62;
	if (ch == '/' || ch == '_')
		return 63;
	return -1;
}

/* Strict: padded or not, nothing else; *out malloc'd. */
static int b64_decode(const char *s, char **out, size_t *n)
{
	size_t len = strlen(s);
	while (len && s[len - 1] == '=')
		len--;
	if (len % 4 == 1)
		return -1;
	char *o = malloc(len / 4 * 3 + 3);
	if (!o)
		return -1;
	size_t w = 0;
	uint32_t acc = 0;
	unsigned bits = 0;
	for (size_t i = 0; i < len; i++) {
		int v = b64_value((unsigned char)s[i]);
		if (v < 0) {
			free(o);
			return -1;
		}
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			o[w++] = (char)(acc >> bits);
		}
	}
	*out = o;
	*n = w;
	return 0;
}

/* ---- a server stream's connection and clock ---- */

struct sclock {
	int client;	  /* dup of the connection: its hang-up ends the wait */
	int64_t deadline; /* monotonic ms; 0 none (Connect-Timeout-Ms) */
	int64_t keepalive_ms, last;
};

static void stream_clock(struct req *q, struct MHD_Connection *c, struct sclock *k)
{
	k->client = -1;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci && ci->connect_fd >= 0)
		k->client = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
	k->last = mono_ms();
	k->keepalive_ms = KEEPALIVE_S * 1000;
	const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
	if (ka) {
		long v = strtol(ka, NULL, 10);
		if (v >= 1 && v <= 3600)
			k->keepalive_ms = v * 1000;
	}
	k->deadline = q->e2b->timeout_ms > 0 ? k->last + q->e2b->timeout_ms : 0;
}

/* Queues r, the stream of q's sandbox: the stream holds it now, busy
 * included, and the connection lives as long as the sandbox may. */
static enum MHD_Result stream_queue(struct req *q, struct MHD_Connection *c,
				    struct MHD_Response *r)
{
	struct serve_sbx *x = q->sbx;
	q->sbx = NULL;
	q->sbx_busy = false;
	MHD_add_response_header(r, "Content-Type", "application/connect+json");
	q->status = 200;
	srv_conn_deadline_in(q->s, c, serve_sbx_left_ms(q->s->sandboxes, x) +
					      (int64_t)q->s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

/* ---- a process's events, streamed ---- */

struct cstream {
	struct server *s;
	struct serve_sbx *x;
	struct live_attach *a;
	struct sclock clock;
	struct moat_buf pending;
	size_t off;
	bool done;
	bool pty; /* its output is the terminal's: E2B's data.pty */
	char chunk[CHUNK];
};

static void event_frame(struct cstream *p, const char *json)
{
	frame(&p->pending, 0, json, strlen(json));
}

static ssize_t cstream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct cstream *p = cls;
	(void)pos;
	for (;;) {
		if (p->off < p->pending.len)
			return srv_pending_take(&p->pending, &p->off, buf, max);
		if (p->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (p->pending.oom)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		int64_t now = mono_ms();
		if (p->clock.deadline && now >= p->clock.deadline) {
			end_frame(&p->pending, "deadline_exceeded",
				  "the call's timeout (Connect-Timeout-Ms) passed; the process runs on");
			p->done = true;
			continue;
		}
		if (now - p->clock.last >= p->clock.keepalive_ms) {
			event_frame(p, "{\"event\":{\"keepalive\":{}}}");
			p->clock.last = now;
			continue;
		}
		size_t n = 0;
		struct live_proc_info info;
		enum live_event ev = live_attach_next(p->a, WAIT_MS, p->clock.client, p->chunk,
						      sizeof p->chunk, &n, &info);
		if (ev == LIVE_EV_HANGUP)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (ev == LIVE_EV_STDOUT || ev == LIVE_EV_STDERR) {
			struct moat_buf j = { 0 };
			moat_buf_appendf(&j, "{\"event\":{\"data\":{\"%s\":",
					 p->pty ? "pty" : ev == LIVE_EV_STDOUT ? "stdout" : "stderr");
			moat_buf_append_base64(&j, (const unsigned char *)p->chunk, n);
			moat_buf_append(&j, "}}}", 3);
			if (j.oom)
				p->pending.oom = true;
			else
				frame(&p->pending, 0, j.data, j.len);
			moat_buf_free(&j);
			p->clock.last = now;
		} else if (ev == LIVE_EV_EXIT) {
			char j[200];
			if (info.exited)
				snprintf(j, sizeof j, "{\"event\":{\"end\":{\"exitCode\":%d,\"exited\":true,"
					 "\"status\":\"exit status %d\"}}}", info.exit_code, info.exit_code);
			else
				snprintf(j, sizeof j, "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,"
					 "\"status\":\"signal: %d\"}}}", info.signal);
			event_frame(p, j);
			end_frame(&p->pending, NULL, NULL);
			p->done = true;
		} else if (ev == LIVE_EV_END) {
			end_frame(&p->pending, "unavailable", "the sandbox ended before the process did");
			p->done = true;
		}
	}
}

static void cstream_free(void *cls)
{
	struct cstream *p = cls;
	live_attach_end(p->a);
	if (p->clock.client >= 0)
		close(p->clock.client);
	moat_buf_free(&p->pending);
	serve_sbx_end(p->s->sandboxes, p->x);
	serve_sbx_put(p->s->sandboxes, p->x);
	free(p);
}

/* Streams pid's events: the start event, its output, its end. */
static enum MHD_Result stream_events(struct req *q, struct MHD_Connection *c, int pid)
{
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	struct cstream *p = calloc(1, sizeof *p);
	if (!p)
		return MHD_NO;
	if (live_attach(serve_sbx_live(q->sbx), pid, &p->a, &err) < 0) {
		free(p);
		if (err.sys_errno == EBUSY)
			return rpc_fail(q, c, "failed_precondition",
					"another client reads this process's output");
		return op_fail(q, c, &err);
	}
	p->s = q->s;
	p->x = q->sbx;
	struct live_proc_info info;
	p->pty = live_wait(serve_sbx_live(q->sbx), pid, 0, &info, &err) == 0 && info.pty;
	stream_clock(q, c, &p->clock);
	char j[96];
	snprintf(j, sizeof j, "{\"event\":{\"start\":{\"pid\":%d}}}", pid);
	event_frame(p, j);
	struct MHD_Response *r =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, CHUNK, cstream_read, p, cstream_free);
	if (!r) {
		live_attach_end(p->a);
		if (p->clock.client >= 0)
			close(p->clock.client);
		moat_buf_free(&p->pending);
		free(p);
		return MHD_NO;
	}
	return stream_queue(q, c, r);
}

/* ---- the RPCs ---- */

static enum MHD_Result rpc_answer(struct req *q, struct MHD_Connection *c, struct moat_buf *b)
{
	char *body = moat_buf_take(b);
	return body ? srv_respond(q, c, 200, body, "application/json", NULL, NULL) : MHD_NO;
}

static enum MHD_Result bad(struct req *q, struct MHD_Connection *c, const char *msg)
{
	return rpc_fail(q, c, "invalid_argument", msg);
}

/* ProcessSelector {"pid"} or {"tag"} of o's "process": the pid or -1. */
static int selector(struct req *q, const cJSON *o)
{
	const cJSON *sel = cJSON_GetObjectItemCaseSensitive(o, "process");
	const cJSON *pid = cJSON_GetObjectItemCaseSensitive(sel, "pid");
	const cJSON *tag = cJSON_GetObjectItemCaseSensitive(sel, "tag");
	if (cJSON_IsNumber(pid) && pid->valuedouble >= 1 && pid->valuedouble <= INT_MAX &&
	    pid->valuedouble == floor(pid->valuedouble))
		return (int)pid->valuedouble;
	if (cJSON_IsString(tag))
		return e2b_proc_by_tag(q->s->e2b, q->e2b->id, tag->valuestring);
	return -1;
}

/* ---- a directory's events, streamed (filesystem.Filesystem/WatchDir) ---- */

struct wdstream {
	struct server *s;
	struct serve_sbx *x;
	struct live_watch *w;
	struct sclock clock;
	struct moat_buf line, pending;
	size_t off;
	bool done;
};

/* Where a watch's events go: a stream's frames (FilesystemEvent in a
 * WatchDirResponse) or GetWatcherEvents' array; code/msg: how the watch
 * ended (an overflow, the directory gone), never silently. */
struct wd_out {
	const char *root; /* the directory watched: an event's name is relative to it */
	struct moat_buf *b;
	bool framed;
	unsigned n; /* events put */
	const char *code, *msg;
};

/* A FilesystemEvent of path (under root) and E2B's type. */
static void fs_event(struct wd_out *o, const char *path, const char *type)
{
	size_t rl = strlen(o->root);
	const char *nm = path;
	if (!strncmp(path, o->root, rl) && path[rl] == '/')
		nm = path + rl + 1;
	struct moat_buf j = { 0 };
	if (o->framed)
		moat_buf_append(&j, "{\"filesystem\":", 14);
	else if (o->n)
		moat_buf_append(&j, ",", 1);
	moat_buf_append(&j, "{\"name\":", 8);
	moat_buf_append_json_string(&j, nm, strlen(nm));
	moat_buf_appendf(&j, ",\"type\":\"EVENT_TYPE_%s\"}%s", type, o->framed ? "}" : "");
	if (j.oom)
		o->b->oom = true;
	else if (o->framed)
		frame(o->b, 0, j.data, j.len);
	else
		moat_buf_append(o->b, j.data, j.len);
	moat_buf_free(&j);
	o->n++;
}

/* The native watch's NDJSON line as E2B's events: a rename is E2B's (the
 * old name's RENAME, the new name's CREATE); an overflow or the directory's
 * end ends the watch with an error (o->code), never silently. */
static void wd_line(struct wd_out *o, struct moat_buf *line)
{
	MOAT_AUTO(cJSON) cJSON *j = cJSON_ParseWithLength(line->data, line->len);
	line->len = 0;
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
	const cJSON *path = cJSON_GetObjectItemCaseSensitive(j, "path");
	const cJSON *from = cJSON_GetObjectItemCaseSensitive(j, "from");
	const char *ty = cJSON_IsString(t) ? t->valuestring : "";
	if (!strcmp(ty, "overflow")) {
		o->code = "data_loss";
		o->msg = "events were lost (the queue overflowed): watch again and list the directory";
	} else if (!strcmp(ty, "end")) {
		o->code = "not_found";
		o->msg = "the directory watched was removed or moved";
	} else if (!cJSON_IsString(t) || !cJSON_IsString(path)) {
		o->code = "internal";
		o->msg = "an event moat could not read";
	} else if (!strcmp(ty, "rename") && cJSON_IsString(from)) {
		fs_event(o, from->valuestring, "RENAME");
		fs_event(o, path->valuestring, "CREATE");
	} else if (!strcmp(ty, "create") || !strcmp(ty, "write") || !strcmp(ty, "remove")) {
		fs_event(o, path->valuestring, !strcmp(ty, "create") ? "CREATE"
					       : !strcmp(ty, "write") ? "WRITE" : "REMOVE");
	}
}

static ssize_t wdstream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct wdstream *p = cls;
	(void)pos;
	for (;;) {
		if (p->off < p->pending.len)
			return srv_pending_take(&p->pending, &p->off, buf, max);
		if (p->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (p->pending.oom || p->line.oom)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		int64_t now = mono_ms();
		if (p->clock.deadline && now >= p->clock.deadline) {
			end_frame(&p->pending, "deadline_exceeded",
				  "the call's timeout (Connect-Timeout-Ms) passed");
			p->done = true;
			continue;
		}
		if (now - p->clock.last >= p->clock.keepalive_ms) {
			const char *ka = "{\"keepalive\":{}}";
			frame(&p->pending, 0, ka, strlen(ka));
			p->clock.last = now;
			continue;
		}
		enum live_event ev = live_watch_next(p->w, WAIT_MS, p->clock.client, &p->line);
		if (ev == LIVE_EV_HANGUP)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (ev == LIVE_EV_STDOUT || ev == LIVE_EV_EXIT) {
			struct wd_out o = { .root = live_watch_root(p->w), .b = &p->pending, .framed = true };
			wd_line(&o, &p->line);
			p->clock.last = now;
			if (ev == LIVE_EV_EXIT && !o.code) {
				o.code = "not_found";
				o.msg = "the directory watched was removed or moved";
			}
			if (o.code) {
				end_frame(&p->pending, o.code, o.msg);
				p->done = true;
			}
		} else if (ev == LIVE_EV_END) {
			end_frame(&p->pending, "unavailable", "the sandbox is not running anymore");
			p->done = true;
		}
	}
}

static void wdstream_free(void *cls)
{
	struct wdstream *p = cls;
	live_watch_close(p->w);
	if (p->clock.client >= 0)
		close(p->clock.client);
	moat_buf_free(&p->line);
	moat_buf_free(&p->pending);
	serve_sbx_end(p->s->sandboxes, p->x);
	serve_sbx_put(p->s->sandboxes, p->x);
	free(p);
}

/* A WatchDirRequest's or CreateWatcherRequest's {"path","recursive"} on
 * the native watch (docs/SANDBOXES.md): 0 and *w, or -1 and *r (the
 * error answered). includeEntry is refused, not ignored. */
static int watch_open(struct req *q, struct MHD_Connection *c, const cJSON *o,
		      struct live_watch **w, enum MHD_Result *r)
{
	const cJSON *path = cJSON_GetObjectItemCaseSensitive(o, "path");
	const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "recursive");
	const cJSON *entry = cJSON_GetObjectItemCaseSensitive(o, "includeEntry");
	if (!cJSON_IsString(path) || (rec && !cJSON_IsBool(rec))) {
		*r = bad(q, c, "\"path\" a string, \"recursive\" a boolean");
		return -1;
	}
	if (cJSON_IsTrue(entry)) {
		*r = rpc_fail(q, c, "unimplemented",
			      "includeEntry is not supported by moat (docs/E2B.md)");
		return -1;
	}
	MOAT_AUTOFREE char *root = sbx_path(path->valuestring);
	if (!root) {
		*r = bad(q, c, "the path must be under /sandbox (E2B's /home/user) or /tmp");
		return -1;
	}
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	if (live_watch_open(serve_sbx_live(q->sbx), root, cJSON_IsTrue(rec), w, &err) == 0)
		return 0;
	if (err.sys_errno == EMFILE)
		*r = rpc_fail(q, c, "resource_exhausted",
			      "at most 8 directory watches at once per sandbox (WatchDir streams and "
			      "polling watchers together)");
	else if (err.sys_errno == E2BIG)
		*r = rpc_fail(q, c, "resource_exhausted",
			      "the tree is too large to watch (at most 1024 directories, 32 levels "
			      "deep)");
	else
		*r = op_fail(q, c, &err);
	return -1;
}

/* WatchDir: the start event once the watch is set, then the directory's
 * events. */
static enum MHD_Result watch_dir(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	struct wdstream *p = calloc(1, sizeof *p);
	if (!p)
		return MHD_NO;
	enum MHD_Result rc;
	if (watch_open(q, c, o, &p->w, &rc) < 0) {
		free(p);
		return rc;
	}
	p->s = q->s;
	p->x = q->sbx;
	stream_clock(q, c, &p->clock);
	const char *start = "{\"start\":{}}";
	frame(&p->pending, 0, start, strlen(start));
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, CHUNK,
								   wdstream_read, p, wdstream_free);
	if (!r) {
		live_watch_close(p->w);
		if (p->clock.client >= 0)
			close(p->clock.client);
		moat_buf_free(&p->pending);
		free(p);
		return MHD_NO;
	}
	return stream_queue(q, c, r);
}

/* ---- the polling watchers (CreateWatcher, GetWatcherEvents,
 * RemoveWatcher): the native watch kept with the sandbox (sandboxes.c:
 * closed when it ends); its events wait in the agent's socket (the
 * kernel's buffer bounds them: past it the agent drops them and says so)
 * and each GetWatcherEvents takes what is there now, at most
 * WATCHER_MAX_LINES of the agent's events (the rest waits for the next
 * call). Events lost, the directory gone or the sandbox's end: the call's
 * error, and the watcher is removed (the next call: not_found). ---- */

#define WATCHER_MAX_LINES 512u

static const char *watcher_id(const cJSON *o)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "watcherId");
	return cJSON_IsString(id) && strlen(id->valuestring) == SERVE_LOCAL_ID_LEN
		       ? id->valuestring
		       : NULL;
}

static enum MHD_Result watcher_create(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	struct live_watch *w;
	enum MHD_Result rc;
	if (watch_open(q, c, o, &w, &rc) < 0)
		return rc;
	char id[SERVE_LOCAL_ID_LEN + 1];
	int k = serve_sbx_watch_keep(q->s->sandboxes, q->sbx, w, id); /* takes w */
	if (k < 0)
		return k == -2 ? rpc_fail(q, c, "unavailable", "the sandbox is not running anymore")
			       : rpc_fail(q, c, "internal", "no randomness for the watcher's id");
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"watcherId\":\"%s\"}\n", id);
	return rpc_answer(q, c, &b);
}

static enum MHD_Result watcher_events(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	const char *id = watcher_id(o);
	int why = ENOENT;
	struct live_watch *w = id ? serve_sbx_watch_lend(q->s->sandboxes, q->sbx, id, &why) : NULL;
	if (!w)
		return why == EBUSY ? rpc_fail(q, c, "failed_precondition",
					       "another GetWatcherEvents of this watcher is running")
				    : rpc_fail(q, c, "not_found", "no such watcher");
	struct moat_buf b = { 0 }, line = { 0 };
	moat_buf_append(&b, "{\"events\":[", 11);
	struct wd_out out = { .root = live_watch_root(w), .b = &b };
	for (unsigned i = 0; i < WATCHER_MAX_LINES && !out.code && !b.oom && !line.oom; i++) {
		enum live_event ev = live_watch_next(w, 0, -1, &line);
		if (ev == LIVE_EV_NONE)
			break;
		if (ev == LIVE_EV_STDOUT || ev == LIVE_EV_EXIT) {
			wd_line(&out, &line);
			if (ev == LIVE_EV_EXIT && !out.code) {
				out.code = "not_found";
				out.msg = "the directory watched was removed or moved";
			}
		} else {
			out.code = "unavailable";
			out.msg = "the sandbox is not running anymore";
		}
	}
	bool oom = b.oom || line.oom;
	moat_buf_free(&line);
	serve_sbx_watch_return(q->s->sandboxes, q->sbx, id, w, !out.code && !oom);
	if (out.code || oom) {
		moat_buf_free(&b);
		return oom ? rpc_fail(q, c, "resource_exhausted", "the events could not be held: "
				      "the watcher is removed")
			   : rpc_fail(q, c, out.code, out.msg);
	}
	moat_buf_append(&b, "]}\n", 3);
	return rpc_answer(q, c, &b);
}

static enum MHD_Result watcher_remove(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	const char *id = watcher_id(o);
	if (!id || serve_sbx_watch_drop(q->s->sandboxes, q->sbx, id) < 0)
		return rpc_fail(q, c, "not_found", "no such watcher");
	return srv_respond(q, c, 200, strdup("{}\n"), "application/json", NULL, NULL);
}

/* A PTY message {"size":{"rows","cols"}}: each 1..LIVE_MAX_WINSIZE. */
static int pty_size(const cJSON *pty, unsigned *rows, unsigned *cols)
{
	const cJSON *size = cJSON_GetObjectItemCaseSensitive(pty, "size");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(size, "rows");
	const cJSON *cl = cJSON_GetObjectItemCaseSensitive(size, "cols");
	if (!cJSON_IsNumber(r) || !cJSON_IsNumber(cl) || r->valuedouble < 1 ||
	    r->valuedouble > LIVE_MAX_WINSIZE || cl->valuedouble < 1 ||
	    cl->valuedouble > LIVE_MAX_WINSIZE || r->valuedouble != floor(r->valuedouble) ||
	    cl->valuedouble != floor(cl->valuedouble))
		return -1;
	*rows = (unsigned)r->valuedouble;
	*cols = (unsigned)cl->valuedouble;
	return 0;
}

static enum MHD_Result p_start(struct req *q, struct MHD_Connection *c, cJSON *o)
{
	cJSON *proc = cJSON_GetObjectItemCaseSensitive(o, "process");
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(proc, "cmd");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(proc, "args");
	const cJSON *envs = cJSON_GetObjectItemCaseSensitive(proc, "envs");
	const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(proc, "cwd");
	const cJSON *pty = cJSON_GetObjectItemCaseSensitive(o, "pty");
	const cJSON *tag = cJSON_GetObjectItemCaseSensitive(o, "tag");
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "stdin");
	if (cJSON_IsString(tag) && strlen(tag->valuestring) > E2B_MAX_TAG)
		return bad(q, c, "\"tag\": at most 256 bytes");
	unsigned rows = 0, cols = 0;
	if (pty && !cJSON_IsNull(pty) && pty_size(pty, &rows, &cols) < 0)
		return bad(q, c, "\"pty\": {\"size\": {\"rows\", \"cols\"}}, each 1-1000");
	if (!cJSON_IsString(cmd) || !cmd->valuestring[0] || (args && !cJSON_IsArray(args)) ||
	    cJSON_GetArraySize(args) > (int)SERVE_SBX_MAX_ARGS - 1 ||
	    (envs && !cJSON_IsObject(envs)) || cJSON_GetArraySize(envs) > (int)SERVE_SBX_MAX_ARGS ||
	    (cwd && !cJSON_IsNull(cwd) && !cJSON_IsString(cwd)) ||
	    (tag && !cJSON_IsNull(tag) && !cJSON_IsString(tag)) ||
	    (in && !cJSON_IsNull(in) && !cJSON_IsBool(in)))
		return bad(q, c, "process: \"cmd\" a string, \"args\" strings (at most 999), \"envs\" "
			   "a map of strings (at most 1000), \"cwd\" a string");
	MOAT_AUTOFREE char *dir = sbx_path(cJSON_IsString(cwd) ? cwd->valuestring : HOME);
	if (!dir)
		return bad(q, c, "\"cwd\" must be under /sandbox (E2B's /home/user) or /tmp");
	size_t argc = 1 + (size_t)cJSON_GetArraySize(args);
	size_t envc = (size_t)cJSON_GetArraySize(envs);
	MOAT_AUTOFREE const char **av = calloc(argc + 1, sizeof *av);
	char **ev = calloc(envc + 1, sizeof *ev);
	MOAT_AUTOFREE char *config = NULL;
	/* before the first goto: clang refuses a jump past a cleanup variable */
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	enum MHD_Result r = MHD_NO;
	if (!av || !ev)
		goto out;
	av[0] = cmd->valuestring;
	size_t i = 1;
	for (const cJSON *it = args ? args->child : NULL; it; it = it->next, i++) {
		if (!cJSON_IsString(it)) {
			r = bad(q, c, "\"args\" must hold strings");
			goto out;
		}
		av[i] = it->valuestring;
	}
	i = 0;
	for (const cJSON *it = envs ? envs->child : NULL; it; it = it->next, i++) {
		if (!cJSON_IsString(it) || !it->string ||
		    !moat_env_name_valid(it->string, strlen(it->string))) {
			r = bad(q, c, "\"envs\": names like [A-Za-z_][A-Za-z0-9_]*, string values");
			goto out;
		}
		if (asprintf(&ev[i], "%s=%s", it->string, it->valuestring) < 0) {
			ev[i] = NULL;
			goto out;
		}
	}
	struct live_exec spec = { .argv = av, .argc = argc, .env = (const char *const *)ev,
				  .envc = envc, .cwd = dir, .stdin_open = cJSON_IsTrue(in),
				  .pty = rows > 0, .rows = rows, .cols = cols };
	int pid;
	if (live_exec(serve_sbx_live(q->sbx), &spec, &pid, &err) < 0) {
		r = err.sys_errno == ENOENT ? bad(q, c, "no such command, or no such cwd, in the sandbox")
					    : op_fail(q, c, &err);
		goto out;
	}
	config = cJSON_PrintUnformatted(proc);
	e2b_proc_note(q->s->e2b, q->e2b->id, pid, cJSON_IsString(tag) ? tag->valuestring : NULL,
		      config);
	r = stream_events(q, c, pid);
out:
	for (size_t j = 0; ev && j < envc; j++)
		free(ev[j]);
	free(ev);
	return r;
}

static enum MHD_Result p_list(struct req *q, struct MHD_Connection *c)
{
	struct moat_buf raw = { 0 };
	moat_buf_append(&raw, "[", 1);
	live_procs_json(serve_sbx_live(q->sbx), &raw);
	moat_buf_append(&raw, "]", 1);
	MOAT_AUTO(cJSON) cJSON *arr = raw.oom ? NULL : cJSON_ParseWithLength(raw.data, raw.len);
	moat_buf_free(&raw);
	if (!arr)
		return rpc_fail(q, c, "internal", "the process list could not be made");
	struct moat_buf b = { 0 };
	moat_buf_append(&b, "{\"processes\":[", 14);
	bool first = true;
	for (const cJSON *it = arr->child; it; it = it->next) {
		const cJSON *pid = cJSON_GetObjectItemCaseSensitive(it, "pid");
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "state");
		if (!cJSON_IsNumber(pid) || !cJSON_IsString(st) || strcmp(st->valuestring, "running"))
			continue; /* envd lists the running ones */
		if (!first)
			moat_buf_append(&b, ",", 1);
		first = false;
		e2b_proc_json(q->s->e2b, q->e2b->id, (int)pid->valuedouble, &b);
	}
	moat_buf_append(&b, "]}\n", 3);
	return rpc_answer(q, c, &b);
}

static enum MHD_Result fs_op(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	enum envd_op op = (enum envd_op)q->e2b->op;
	const cJSON *pj = cJSON_GetObjectItemCaseSensitive(o, op == E_FS_MOVE ? "source" : "path");
	MOAT_AUTOFREE char *path = cJSON_IsString(pj) ? sbx_path(pj->valuestring) : NULL;
	if (!path)
		return bad(q, c, "the path must be under /sandbox (E2B's /home/user) or /tmp, "
			   "without \".\" or \"..\" components");
	struct moat_buf b = { 0 };
	switch (op) {
	case E_FS_STAT:
		moat_buf_append(&b, "{\"entry\":", 9);
		if (stat_entry(lv, path, &b, &err) < 0)
			goto fail;
		break;
	case E_FS_MKDIR: /* parents made, but the directory itself must be new (E2B) */
		if (live_mkdir(lv, path, false, &err) < 0) {
			if (err.sys_errno != ENOENT)
				goto fail;
			moat_error_clear(&err);
			if (live_mkdir(lv, path, true, &err) < 0)
				goto fail;
		}
		moat_buf_append(&b, "{\"entry\":", 9);
		if (stat_entry(lv, path, &b, &err) < 0)
			goto fail;
		break;
	case E_FS_REMOVE:
		if (live_remove(lv, path, true, &err) < 0)
			goto fail;
		moat_buf_append(&b, "{", 1);
		break;
	case E_FS_MOVE: {
		const cJSON *dj = cJSON_GetObjectItemCaseSensitive(o, "destination");
		MOAT_AUTOFREE char *dest = cJSON_IsString(dj) ? sbx_path(dj->valuestring) : NULL;
		if (!dest) {
			moat_buf_free(&b);
			return bad(q, c, "\"destination\" must be under /sandbox or /tmp");
		}
		if (live_rename(lv, path, dest, &err) < 0)
			goto fail;
		moat_buf_append(&b, "{\"entry\":", 9);
		if (stat_entry(lv, dest, &b, &err) < 0)
			goto fail;
		break;
	}
	case E_FS_LIST: {
		const cJSON *dj = cJSON_GetObjectItemCaseSensitive(o, "depth");
		unsigned depth = 1;
		if (dj && !cJSON_IsNull(dj)) {
			if (!cJSON_IsNumber(dj) || dj->valuedouble < 1 ||
			    dj->valuedouble > SERVE_SBX_MAX_DEPTH)
				return bad(q, c, "\"depth\" must be 1 to 32");
			depth = (unsigned)dj->valuedouble;
		}
		struct moat_buf raw = { 0 };
		unsigned count;
		bool truncated;
		moat_buf_append(&raw, "[", 1);
		if (live_list(lv, path, depth, SERVE_SBX_MAX_ENTRIES, &raw, &count, &truncated,
			      &err) < 0) {
			moat_buf_free(&raw);
			goto fail;
		}
		moat_buf_append(&raw, "]", 1);
		MOAT_AUTO(cJSON) cJSON *arr =
			raw.oom ? NULL : cJSON_ParseWithLength(raw.data, raw.len);
		moat_buf_free(&raw);
		if (!arr)
			return rpc_fail(q, c, "internal", "the listing could not be made");
		if (truncated) /* never a silent cut */
			return rpc_fail(q, c, "resource_exhausted",
					"the listing has more than 10000 entries (or 8 MiB with "
					"their metadata): list a smaller tree or less deep");
		moat_buf_append(&b, "{\"entries\":[", 12);
		bool first = true;
		for (const cJSON *it = arr->child; it; it = it->next) {
			const cJSON *ep = cJSON_GetObjectItemCaseSensitive(it, "path");
			const cJSON *et = cJSON_GetObjectItemCaseSensitive(it, "type");
			const cJSON *es = cJSON_GetObjectItemCaseSensitive(it, "size");
			const cJSON *em = cJSON_GetObjectItemCaseSensitive(it, "mode");
			const cJSON *mt = cJSON_GetObjectItemCaseSensitive(it, "mtimeMs");
			if (!cJSON_IsString(ep) || !cJSON_IsString(et))
				continue;
			if (!first)
				moat_buf_append(&b, ",", 1);
			first = false;
			/* its metadata as the native listing has it (live_meta_json) */
			const cJSON *md = cJSON_GetObjectItemCaseSensitive(it, "metadata");
			MOAT_AUTOFREE char *mj = md ? cJSON_PrintUnformatted(md) : NULL;
			MOAT_AUTOFREE char *meta = NULL;
			if (asprintf(&meta, "%s%s%s",
				     mj ? ",\"metadata\":" : "", mj ? mj : "",
				     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "metadataIncomplete"))
					     ? ",\"metadataIncomplete\":true"
					     : "") < 0)
				meta = NULL;
			put_entry(&b, ep->valuestring, et->valuestring,
				  cJSON_IsNumber(es) ? (uint64_t)es->valuedouble : 0,
				  cJSON_IsString(em) ? (unsigned)strtoul(em->valuestring, NULL, 8) : 0,
				  cJSON_IsNumber(mt) ? (int64_t)mt->valuedouble : 0, meta);
		}
		moat_buf_append(&b, "]", 1);
		break;
	}
	default:
		return rpc_fail(q, c, "internal", "no such operation");
	}
	moat_buf_append(&b, "}\n", 2);
	return rpc_answer(q, c, &b);
fail:
	moat_buf_free(&b);
	return op_fail(q, c, &err);
}

static enum MHD_Result p_control(struct req *q, struct MHD_Connection *c, const cJSON *o)
{
	struct live *lv = serve_sbx_live(q->sbx);
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	int pid = selector(q, o);
	if (pid < 0)
		return rpc_fail(q, c, "not_found", "no such process (its pid or tag)");
	switch ((enum envd_op)q->e2b->op) {
	case E_P_CONNECT:
		return stream_events(q, c, pid);
	case E_P_CLOSE:
		if (live_stdin_close(lv, pid, &err) < 0)
			return op_fail(q, c, &err);
		break;
	case E_P_SIGNAL: {
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "signal");
		int sig = -1;
		if (cJSON_IsString(s))
			sig = !strcmp(s->valuestring, "SIGNAL_SIGKILL")	  ? SIGKILL
			      : !strcmp(s->valuestring, "SIGNAL_SIGTERM") ? SIGTERM
									  : -1;
		else if (cJSON_IsNumber(s) && (s->valuedouble == SIGKILL || s->valuedouble == SIGTERM))
			sig = (int)s->valuedouble;
		if (sig < 0)
			return bad(q, c, "\"signal\" must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
		if (live_signal(lv, pid, sig, &err) < 0)
			return op_fail(q, c, &err);
		break;
	}
	case E_P_INPUT: {
		const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "input");
		const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "stdin");
		const cJSON *tty = cJSON_GetObjectItemCaseSensitive(in, "pty");
		struct live_proc_info info;
		if (live_wait(lv, pid, 0, &info, &err) < 0)
			return op_fail(q, c, &err);
		if (tty && data)
			return bad(q, c, "\"input\": one of \"stdin\" and \"pty\"");
		if (tty)
			data = tty;
		if ((tty != NULL) != info.pty) /* the input a process has: never another's */
			return rpc_fail(q, c, "failed_precondition",
					tty ? "the process has no PTY: send \"stdin\""
					    : "the process runs on a PTY: send \"pty\"");
		MOAT_AUTOFREE char *bytes = NULL;
		size_t n = 0;
		if (!cJSON_IsString(data) || b64_decode(data->valuestring, &bytes, &n) < 0)
			return bad(q, c, "\"input\": {\"stdin\" or \"pty\": base64 bytes}");
		size_t done = 0;
		while (done < n) { /* all of it, or the error: E2B's input is never cut */
			ssize_t w = live_stdin_write(lv, pid, bytes + done, n - done,
						     STDIN_TIMEOUT_MS, &err);
			if (w < 0)
				return op_fail(q, c, &err);
			if (w == 0)
				return rpc_fail(q, c, "deadline_exceeded",
						"the process did not read its stdin for 10 s");
			done += (size_t)w;
		}
		break;
	}
	case E_P_UPDATE: { /* UpdateRequest: the PTY's size (the only thing E2B updates) */
		unsigned rows, cols;
		if (pty_size(cJSON_GetObjectItemCaseSensitive(o, "pty"), &rows, &cols) < 0)
			return bad(q, c, "\"pty\": {\"size\": {\"rows\", \"cols\"}}, each 1-1000");
		if (live_resize(lv, pid, rows, cols, &err) < 0) {
			if (err.sys_errno == ENOTTY)
				return rpc_fail(q, c, "failed_precondition", "the process has no PTY");
			return op_fail(q, c, &err);
		}
		break;
	}
	default:
		return rpc_fail(q, c, "internal", "no such operation");
	}
	return srv_respond(q, c, 200, strdup("{}\n"), "application/json", NULL, NULL);
}

/* The request's message: a JSON object (a stream's: one enveloped message). */
static cJSON *message(struct req *q, const char **why)
{
	if (!q->e2b->stream)
		return e2b_json_body(q, why);
	*why = "a server stream's request is one enveloped JSON message, uncompressed";
	const uint8_t *d = (const uint8_t *)q->body.data;
	if (q->body.len < 5 || d[0] != 0)
		return NULL;
	size_t n = (size_t)d[1] << 24 | (size_t)d[2] << 16 | (size_t)d[3] << 8 | d[4];
	if (n != q->body.len - 5)
		return NULL;
	memmove(q->body.data, q->body.data + 5, n);
	q->body.len = n;
	return e2b_json_body(q, why);
}

/* ---- file metadata: X-Metadata-<key> headers (docs/E2B.md) ---- */

struct meta_ctx {
	struct e2b_req *e;
	size_t cap;
	const char *why; /* static: the request's 400 */
};

/* One header: an X-Metadata-<key> kept (its key lowercased; a key given
 * again: its first value wins). */
static enum MHD_Result meta_header(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct meta_ctx *m = cls;
	(void)kind;
	static const char pre[] = "x-metadata-";
	if (!key || strncasecmp(key, pre, sizeof pre - 1))
		return MHD_YES;
	const char *k = key + sizeof pre - 1;
	const char *v = value ? value : "";
	size_t kl = strlen(k), vl = strlen(v);
	if (!kl) {
		m->why = "X-Metadata-<key>: the key is empty";
		return MHD_NO;
	}
	for (size_t i = 0; i < kl; i++)
		if (k[i] < 0x20 || k[i] > 0x7e) {
			m->why = "X-Metadata-<key>: keys are printable US-ASCII (0x20-0x7E)";
			return MHD_NO;
		}
	for (size_t i = 0; i < vl; i++)
		if (v[i] < 0x20 || v[i] > 0x7e) {
			m->why = "X-Metadata-<key>: values are printable US-ASCII (0x20-0x7E)";
			return MHD_NO;
		}
	if (kl > LIVE_MAX_META_KEY) {
		m->why = "X-Metadata-<key>: a key is at most 246 bytes";
		return MHD_NO;
	}
	struct e2b_req *e = m->e;
	for (size_t i = 0; i < e->nmeta; i++)
		if (!strcasecmp(e->meta[2 * i], k))
			return MHD_YES; /* the first value wins */
	if (e->nmeta == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 8;
		char **n = cap > LIVE_MAX_META ? NULL : realloc(e->meta, 2 * cap * sizeof *n);
		if (!n) {
			m->why = "X-Metadata-*: at most 4096 bytes in all";
			return MHD_NO;
		}
		e->meta = n;
		m->cap = cap;
	}
	char *kc = strdup(k), *vc = strdup(v);
	if (!kc || !vc) {
		free(kc);
		free(vc);
		m->why = "out of memory";
		return MHD_NO;
	}
	for (char *p = kc; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	e->meta[2 * e->nmeta] = kc;
	e->meta[2 * e->nmeta + 1] = vc;
	e->nmeta++;
	return MHD_YES;
}

/* The request's metadata into q->e2b (meta, nmeta, meta_json): NULL, or
 * why it is refused (static). */
static const char *meta_take(struct req *q, struct MHD_Connection *c)
{
	struct e2b_req *e = q->e2b;
	struct meta_ctx m = { .e = e };
	MHD_get_connection_values(c, MHD_HEADER_KIND, meta_header, &m);
	if (m.why)
		return m.why;
	if (!live_meta_ok((const char *const *)e->meta, e->nmeta))
		return "X-Metadata-*: at most 4096 bytes in all (\"user.e2b.\", each key and "
		       "its value)";
	struct moat_buf b = { 0 };
	for (size_t i = 0; i < e->nmeta; i++) {
		moat_buf_append(&b, i ? "," : ",\"metadata\":{", i ? 1 : 13);
		moat_buf_append_json_string(&b, e->meta[2 * i], strlen(e->meta[2 * i]));
		moat_buf_append(&b, ":", 1);
		moat_buf_append_json_string(&b, e->meta[2 * i + 1], strlen(e->meta[2 * i + 1]));
	}
	if (e->nmeta)
		moat_buf_append(&b, "}", 1);
	e->meta_json = b.len ? moat_buf_take(&b) : strdup("");
	moat_buf_free(&b);
	return e->meta_json ? NULL : "out of memory";
}

static const struct live_meta *req_meta(struct req *q, struct live_meta *m)
{
	m->kv = (const char *const *)q->e2b->meta;
	m->npairs = q->e2b->nmeta;
	return m;
}

/* ---- /files ---- */

/* The boundary of a multipart/form-data Content-Type. */
static struct e2b_mp *mp_new(const char *ctype)
{
	const char *b = strcasestr(ctype, "boundary=");
	if (!b)
		return NULL;
	b += 9;
	bool quoted = *b == '"';
	b += quoted;
	size_t n = strcspn(b, quoted ? "\"" : "; \t");
	if (n < 1 || n > 70)
		return NULL;
	struct e2b_mp *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->dlen = (size_t)snprintf(m->delim, sizeof m->delim, "\r\n--%.*s", (int)n, b);
	moat_buf_append(&m->hold, "\r\n", 2); /* the first delimiter has no CRLF before it */
	return m;
}

/* A part's headers: its file's path from filename= (the SDK's own path). */
static void mp_part(struct req *q, struct e2b_mp *m, const char *h, size_t len)
{
	free(m->cur);
	m->cur = NULL;
	MOAT_AUTOFREE char *hd = strndup(h, len);
	const char *f = hd ? strcasestr(hd, "filename=\"") : NULL;
	if (!f) {
		m->st = MP_SKIP; /* a field, not a file: not written */
		return;
	}
	f += 10;
	size_t n = strcspn(f, "\"\r\n");
	if (f[n] != '"' || n > MAX_FILENAME) {
		m->st = MP_BAD;
		return;
	}
	MOAT_AUTOFREE char *name = strndup(f, n);
	m->cur = name && n ? sbx_path(name) : (q->e2b->path ? strdup(q->e2b->path) : NULL);
	if (++m->parts > E2B_MAX_PARTS || !m->cur) {
		if (!m->err)
			m->err = m->parts > E2B_MAX_PARTS ? E2BIG : EINVAL;
		m->st = MP_SKIP;
		return;
	}
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	q->up_len = 0;
	q->up_errno = 0;
	q->up_too_large = false;
	struct live_meta lm;
	if (live_open_write(serve_sbx_live(q->sbx), m->cur, true, req_meta(q, &lm), &q->up_fd,
			    &err) < 0) {
		if (!m->err)
			m->err = err.sys_errno ? err.sys_errno : EIO;
		m->st = MP_SKIP;
		return;
	}
	m->st = MP_DATA;
}

static void mp_part_end(struct req *q, struct e2b_mp *m)
{
	if (m->st != MP_DATA)
		return;
	moat_close_fd(&q->up_fd);
	if (q->up_errno || q->up_too_large) {
		if (!m->err)
			m->err = q->up_too_large ? EFBIG : q->up_errno;
		return;
	}
	if (m->out.len)
		moat_buf_append(&m->out, ",", 1);
	moat_buf_append(&m->out, "{\"name\":", 8);
	const char *nm = base_name(m->cur);
	moat_buf_append_json_string(&m->out, nm, strlen(nm));
	moat_buf_append(&m->out, ",\"type\":\"file\",\"path\":", 22);
	moat_buf_append_json_string(&m->out, m->cur, strlen(m->cur));
	moat_buf_append(&m->out, q->e2b->meta_json, strlen(q->e2b->meta_json));
	moat_buf_append(&m->out, "}", 1);
}

/* A gzip upload's bytes: inflated a CHUNK at a time, each piece written
 * (and counted against the file's bound) before the next is made; once the
 * bound, a write or the stream fails, the rest is read and dropped. gzip's
 * members may follow one another (as gunzip takes them). */
static void gz_upload(struct req *q, const char *data, size_t n)
{
	struct e2b_req *e = q->e2b;
	z_stream *z = e->gz;
	z->next_in = (Bytef *)data;
	z->avail_in = (uInt)n; /* n: one of libmicrohttpd's reads, far below 4 GiB */
	while (!e->gz_bad && !q->up_errno && !q->up_too_large) {
		if (e->gz_end) {
			if (!z->avail_in)
				break;
			if (inflateReset(z) != Z_OK) { /* another member */
				e->gz_bad = true;
				break;
			}
			e->gz_end = false;
		}
		z->next_out = e->gz_out;
		z->avail_out = CHUNK;
		int rc = inflate(z, Z_NO_FLUSH);
		size_t got = CHUNK - z->avail_out;
		if (got)
			srv_sandboxes_upload(q, (const char *)e->gz_out, got);
		if (rc == Z_STREAM_END)
			e->gz_end = true;
		else if (rc != Z_OK && rc != Z_BUF_ERROR)
			e->gz_bad = true;
		else if (!z->avail_in && z->avail_out) /* all in, all out */
			break;
		else if (rc == Z_BUF_ERROR)
			break;
	}
	z->next_in = NULL; /* data is libmicrohttpd's, for this call only */
	z->avail_in = 0;
}

void srv_e2b_upload(struct req *q, const char *data, size_t n)
{
	struct e2b_mp *m = q->e2b->mp;
	if (q->e2b->defer_status) { /* dropped; past 1 GiB the connection goes */
		q->e2b->drained += n;
		if (q->e2b->drained > SERVE_SBX_MAX_FILE)
			q->up_too_large = true;
		return;
	}
	if (q->e2b->gz) {
		gz_upload(q, data, n);
		return;
	}
	moat_buf_append(&m->hold, data, n);
	if (m->hold.oom) {
		m->st = MP_BAD;
		return;
	}
	size_t off = 0;
	for (;;) {
		char *p = m->hold.data + off;
		size_t avail = m->hold.len - off;
		if (m->st == MP_END || m->st == MP_BAD) {
			off = m->hold.len;
			break;
		}
		if (m->st == MP_AFTER) {
			if (avail < 2)
				break;
			m->st = !memcmp(p, "--", 2) ? MP_END : !memcmp(p, "\r\n", 2) ? MP_HEAD : MP_BAD;
			off += 2;
			continue;
		}
		if (m->st == MP_HEAD) {
			char *e = avail >= 2 && !memcmp(p, "\r\n", 2) ? p : memmem(p, avail, "\r\n\r\n", 4);
			if (!e) {
				if (avail > E2B_MAX_MULTIPART_HEAD)
					m->st = MP_BAD;
				break;
			}
			size_t hl = (size_t)(e - p);
			if (hl > E2B_MAX_MULTIPART_HEAD) {
				m->st = MP_BAD;
				break;
			}
			off += hl + (e == p ? 2 : 4);
			mp_part(q, m, p, hl);
			continue;
		}
		/* PRE, DATA, SKIP: up to the next delimiter */
		char *d = memmem(p, avail, m->delim, m->dlen);
		size_t take = d ? (size_t)(d - p) : avail > m->dlen - 1 ? avail - (m->dlen - 1) : 0;
		if (m->st == MP_DATA && take)
			srv_sandboxes_upload(q, p, take);
		off += take;
		if (!d)
			break;
		off += m->dlen;
		mp_part_end(q, m);
		m->st = MP_AFTER;
	}
	memmove(m->hold.data, m->hold.data + off, m->hold.len - off);
	m->hold.len -= off;
}

/* A POST /files refused from its headers: its answer after its body. */
static enum MHD_Result files_defer(struct req *q, struct MHD_Connection *c, unsigned status,
				   const char *msg)
{
	if (srv_length_over(c, SERVE_SBX_MAX_FILE))
		return e2b_fail(q, c, status, status == 401 ? O_UNAUTHORIZED : O_BAD_REQUEST, msg);
	q->e2b->defer_status = status;
	q->e2b->defer_msg = msg;
	q->is_post = true;
	return MHD_YES;
}

static enum MHD_Result files_get(struct req *q, struct MHD_Connection *c)
{
	MOAT_AUTO_ERROR struct moat_error err = { 0 };
	int fd;
	uint64_t size;
	if (live_open_read(serve_sbx_live(q->sbx), q->e2b->path, &fd, &size, &err) < 0)
		return files_fail(q, c, err.sys_errno, &err);
	return srv_sandboxes_send_fd(q, c, fd, 0, size, UINT64_MAX);
}

static enum MHD_Result files_post_route(struct req *q, struct MHD_Connection *c)
{
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
	bool gz = ce && !strcasecmp(ce, "gzip");
	if (ce && !gz && strcasecmp(ce, "identity"))
		return files_defer(q, c, 400, "Content-Encoding: gzip or identity only");
	bool multipart = ct && !strncasecmp(ct, "multipart/form-data", 19);
	if (gz && multipart)
		return files_defer(q, c, 400, "Content-Encoding: gzip is taken for an "
				   "application/octet-stream upload only (the SDK's gzip option)");
	/* the files' metadata, checked before any file is touched */
	const char *why = meta_take(q, c);
	if (why)
		return files_defer(q, c, 400, why);
	if (gz) {
		struct e2b_req *e = q->e2b;
		if (!(e->gz = calloc(1, sizeof *e->gz)) || !(e->gz_out = malloc(CHUNK)) ||
		    inflateInit2(e->gz, 15 + 16) != Z_OK) { /* gzip's header and trailer */
			free(e->gz); /* never initialised: nothing to end */
			e->gz = NULL;
			return e2b_fail(q, c, 500, O_ERROR, "out of memory");
		}
	}
	if (multipart) {
		if (!(q->e2b->mp = mp_new(ct)))
			return files_defer(q, c, 400, "multipart/form-data needs a boundary of 1 to 70 "
					   "characters");
	} else {
		if (!q->e2b->path)
			return files_defer(q, c, 400, "\"path\" is required");
		if (srv_length_over(c, SERVE_SBX_MAX_FILE))
			return e2b_fail(q, c, 413, O_BAD_REQUEST, "the file is larger than 1 GiB");
		MOAT_AUTO_ERROR struct moat_error err = { 0 };
		struct live_meta lm;
		if (live_open_write(serve_sbx_live(q->sbx), q->e2b->path, true, req_meta(q, &lm),
				    &q->up_fd, &err) < 0) {
			if (err.sys_errno == ENOTCONN)
				return files_fail(q, c, err.sys_errno, &err);
			return files_defer(q, c, err.sys_errno == ENOENT ? 404 : 400,
					   errno_msg(err.sys_errno, NULL));
		}
		q->e2b->raw_upload = true;
	}
	q->is_post = true;
	return MHD_YES;
}

static enum MHD_Result files_post_body(struct req *q, struct MHD_Connection *c)
{
	struct moat_buf b = { 0 };
	struct e2b_mp *m = q->e2b->mp;
	if (q->e2b->defer_status)
		return e2b_fail(q, c, q->e2b->defer_status,
				q->e2b->defer_status == 401 ? O_UNAUTHORIZED : O_BAD_REQUEST,
				q->e2b->defer_msg);
	if (m) {
		if (m->st == MP_DATA) /* a part the body cut short */
			moat_close_fd(&q->up_fd);
		if (m->err) {
			struct moat_error err = { 0 };
			return m->err == EFBIG ? e2b_fail(q, c, 413, O_BAD_REQUEST,
							  "a file is larger than 1 GiB")
			       : m->err == E2BIG
				       ? e2b_fail(q, c, 400, O_BAD_REQUEST,
						  "at most 1000 files in one upload")
				       : files_fail(q, c, m->err, &err);
		}
		if (m->st != MP_END || m->out.oom)
			return e2b_fail(q, c, 400, O_BAD_REQUEST,
					"the body is not a whole multipart/form-data message");
		moat_buf_append(&b, "[", 1);
		moat_buf_append(&b, m->out.data ? m->out.data : "", m->out.len);
		moat_buf_append(&b, "]\n", 2);
	} else {
		if (q->up_too_large)
			return e2b_fail(q, c, 413, O_BAD_REQUEST,
					q->e2b->gz ? "the file is larger than 1 GiB (inflated: gzip)"
						   : "the file is larger than 1 GiB");
		if (q->up_errno)
			return files_fail(q, c, q->up_errno, NULL);
		moat_close_fd(&q->up_fd);
		if (q->e2b->gz && (q->e2b->gz_bad || !q->e2b->gz_end))
			return e2b_fail(q, c, 400, O_BAD_REQUEST,
					q->e2b->gz_bad ? "the body is not gzip (Content-Encoding: gzip); "
							 "the file holds what came before it"
						       : "the gzip stream ends early; the file holds "
							 "what came before its end");
		const char *nm = base_name(q->e2b->path);
		moat_buf_append(&b, "[{\"name\":", 9);
		moat_buf_append_json_string(&b, nm, strlen(nm));
		moat_buf_append(&b, ",\"type\":\"file\",\"path\":", 22);
		moat_buf_append_json_string(&b, q->e2b->path, strlen(q->e2b->path));
		moat_buf_append(&b, q->e2b->meta_json, strlen(q->e2b->meta_json));
		moat_buf_append(&b, "}]\n", 3);
	}
	char *body = moat_buf_take(&b);
	return body ? srv_respond(q, c, 200, body, "application/json", NULL, NULL) : MHD_NO;
}

/* ---- the routes ---- */

enum MHD_Result e2b_envd_route(struct req *q, struct MHD_Connection *c, const char *rest,
			       const char *method)
{
	struct e2b_req *e = q->e2b;
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
	bool rpc = false;
	const char *port = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Port");
	if (port && !strcmp(port, E2B_CI_PORT)) { /* the code interpreter's */
		e->ci = true;
		return e2b_ci_route(q, c, rest, method);
	}
	if (port && strcmp(port, E2B_ENVD_PORT)) /* a server of the sandbox's own */
		return e2b_port_route(q, c, port, rest, method);
	if (!strcmp(rest, "/health")) {
		e->op = E_HEALTH;
	} else if (!strcmp(rest, "/files")) {
		e->op = get ? E_FILES_GET : post ? E_FILES_POST : E_NONE;
		if (e->op == E_NONE)
			return e2b_fail(q, c, 405, O_BAD_REQUEST, "/files takes GET or POST");
	} else {
		for (size_t i = 0; i < sizeof rpcs / sizeof rpcs[0]; i++)
			if (!strcmp(rest, rpcs[i].path)) {
				e->op = rpcs[i].op;
				e->stream = rpcs[i].stream;
				rpc = true;
			}
		if (!rpc)
			return e2b_fail(q, c, 404, O_BAD_REQUEST, "no such route");
	}
	/* a signed URL (E2B's downloadUrl, uploadUrl): no access token, the
	 * signature bound to the path, the operation and the sandbox's token */
	const char *msg = "unknown sandbox or invalid access token (X-Access-Token)";
	bool files = e->op == E_FILES_GET || e->op == E_FILES_POST;
	int a = files && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token") &&
			MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "signature")
		? e2b_envd_signed(q, c, e->op == E_FILES_POST, &msg)
		: e2b_envd_sandbox(q, c);
	if (a < 0) {
		if (a == -2)
			msg = "the sandbox is not running anymore";
		if (rpc)
			return rpc_fail(q, c, a == -1 ? "unauthenticated" : "unavailable", msg);
		if (e->op == E_FILES_POST && a == -1)
			return files_defer(q, c, 401, msg);
		return e2b_fail(q, c, a == -1 ? 401 : 502, a == -1 ? O_UNAUTHORIZED : O_ERROR, msg);
	}
	if (e->op == E_HEALTH)
		return srv_respond(q, c, 204, strdup(""), "application/json", NULL, NULL);
	if (e->op == E_FILES_GET || e->op == E_FILES_POST) {
		const char *p = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
		static const char bad_path[] = "the path must be under /sandbox (E2B's /home/user) "
					       "or /tmp, without \".\" or \"..\" components";
		if (p && !(e->path = sbx_path(p)))
			return e->op == E_FILES_POST ? files_defer(q, c, 400, bad_path)
						     : e2b_fail(q, c, 400, O_BAD_REQUEST, bad_path);
		if (e->op == E_FILES_POST)
			return files_post_route(q, c);
		if (!e->path)
			return e2b_fail(q, c, 400, O_BAD_REQUEST, "\"path\" is required");
		return files_get(q, c);
	}
	if (!post)
		return rpc_fail(q, c, "unimplemented", "Connect RPC takes POST");
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	const char *want = e->stream ? "application/connect+json" : "application/json";
	if (!ct || strncasecmp(ct, want, strlen(want)) ||
	    (ct[strlen(want)] && ct[strlen(want)] != ';'))
		return rpc_fail(q, c, "invalid_argument",
				e->stream ? "a server stream takes application/connect+json"
					  : "a unary call takes application/json (the JSON codec)");
	if (e->op == E_UNIMPL)
		return rpc_fail(q, c, "unimplemented",
				"not supported by moat (docs/E2B.md): input streams (StreamInput: "
				"use SendInput)");
	const char *tm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
	if (tm) {
		char *end;
		errno = 0;
		long long v = strtoll(tm, &end, 10);
		if (errno || end == tm || *end || v < 0 || strlen(tm) > 10)
			return rpc_fail(q, c, "invalid_argument",
					"Connect-Timeout-Ms: at most 10 digits of milliseconds");
		e->timeout_ms = v;
	}
	if (srv_length_over(c, SERVE_MAX_BODY))
		return rpc_fail(q, c, "resource_exhausted", "the request is larger than 6 MiB");
	q->is_post = true;
	return MHD_YES;
}

enum MHD_Result e2b_envd_body(struct req *q, struct MHD_Connection *c)
{
	if (q->e2b->ci)
		return e2b_ci_body(q, c);
	if (q->e2b->port)
		return e2b_port_body(q, c);
	if (q->e2b->op == E_FILES_POST)
		return files_post_body(q, c);
	const char *why;
	MOAT_AUTO(cJSON) cJSON *o = message(q, &why);
	if (!o)
		return rpc_fail(q, c, "invalid_argument", why);
	switch ((enum envd_op)q->e2b->op) {
	case E_P_START:
		return p_start(q, c, o);
	case E_P_LIST:
		return p_list(q, c);
	case E_P_CONNECT:
	case E_P_INPUT:
	case E_P_SIGNAL:
	case E_P_CLOSE:
	case E_P_UPDATE:
		return p_control(q, c, o);
	case E_FS_WATCH:
		return watch_dir(q, c, o);
	case E_W_CREATE:
		return watcher_create(q, c, o);
	case E_W_EVENTS:
		return watcher_events(q, c, o);
	case E_W_REMOVE:
		return watcher_remove(q, c, o);
	default:
		return fs_op(q, c, o);
	}
}
