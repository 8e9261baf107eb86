/* serve: E2B's API (docs/E2B.md) under the prefix /e2b of moat serve's
 * listener, on the live sandboxes (sandboxes.c, src/live/): the control
 * plane (E2B's REST, X-API-KEY) in e2b_api.c, envd (Connect RPC with the
 * JSON codec over HTTP/1.1, /files, /health; the sandbox named by the
 * E2b-Sandbox-Id header, its access token in X-Access-Token, or a signed
 * /files URL) in e2b_envd.c. Each sandbox made here has a record (e2b_records.c): its
 * access token, its maker's credential, its template, its processes;
 * e2b_req.c frees a request's state. */
#ifndef MOAT_SERVE_E2B_H
#define MOAT_SERVE_E2B_H

#include <stdbool.h>
#include <stdint.h>

#include "serve/http.h"

/* bounds (docs/E2B.md, "Bounds") */
#define E2B_MAX_MULTIPART_HEAD 8192u /* a multipart part's headers */
#define E2B_MAX_PARTS 1000u          /* files in one multipart upload */
#define E2B_ENVD_VERSION "0.6.2"     /* the envd version answered: what the SDK may use */
#define E2B_MAX_TEMPLATE 64         /* a template's name */
#define E2B_TOKEN_HEX 32             /* an access token: 128 random bits in hex */
#define E2B_ENVD_PORT "49983"        /* E2b-Sandbox-Port of envd */
#define E2B_CI_PORT "49999"          /* E2b-Sandbox-Port of the code interpreter (e2b_ci.c) */
#define E2B_CI_LANGS 3               /* python, javascript, typescript */
#define E2B_CI_CTX_ID 36             /* SERVE_CTX_ID_LEN */

struct e2b;
/* The records' table: at most 4 x max + 16 records (a killed sandbox's
 * stays, so that envd answers it 502, until room is needed and the native
 * table has forgotten it). */
int e2b_start(struct e2b **out, unsigned max_sandboxes, struct moat_error *err);
void e2b_stop(struct e2b *e);

/* A multipart upload being parsed (e2b_envd.c). */
struct e2b_mp {
	char delim[80]; /* "\r\n--" and the boundary (at most 70) */
	size_t dlen;
	enum { MP_PRE, MP_AFTER, MP_HEAD, MP_DATA, MP_SKIP, MP_END, MP_BAD } st;
	struct moat_buf hold;
	struct moat_buf out; /* the written files' EntryInfo, comma-separated */
	unsigned parts;
	int err; /* a part's errno */
	char *cur; /* the part's file */
};

/* What a request of the E2B surface carries between its calls. */
struct e2b_req {
	bool envd;   /* the sandbox URL's surface, else the control plane */
	bool ci;     /* of it, the code interpreter's (E2b-Sandbox-Port 49999) */
	unsigned port; /* of it, a server of the sandbox's own (e2b_port.c): its port */
	char *target;  /* its path (from /e2b/envd on) */
	int op;      /* e2b_api.c's or e2b_envd.c's */
	char id[SERVE_SBX_ID_LEN + 1];
	struct e2b_mp *mp;  /* POST /files multipart */
	bool raw_upload;    /* POST /files application/octet-stream (q->up_fd) */
	/* POST /files with Content-Encoding: gzip (raw only): inflated as it
	 * comes into gz_out (CHUNK bytes), each piece to q->up_fd, bounded as a
	 * plain upload (srv_sandboxes_upload); gz_end: a member ended there,
	 * gz_bad: not gzip */
	struct z_stream_s *gz;
	unsigned char *gz_out;
	bool gz_end, gz_bad;
	char *path;         /* POST /files: the file's path (raw) */
	/* POST /files: its X-Metadata-<key> headers, nmeta pairs (meta[2i]
	 * the key, lowercased; meta[2i+1] its value), each file's metadata
	 * replaced by them (none: cleared); meta_json the answer's
	 * ,"metadata":{...} ("" when none) */
	char **meta;
	size_t nmeta;
	char *meta_json;
	int64_t timeout_ms; /* Connect-Timeout-Ms: 0 none */
	bool stream;        /* a Connect server stream (application/connect+json) */
	/* POST /files refused from its headers: answered after its body is
	 * read and dropped (at most 1 GiB), so that a client still sending
	 * gets the answer, not a reset */
	unsigned defer_status;
	const char *defer_msg; /* static */
	uint64_t drained;
};
void srv_e2b_req_free(struct e2b_req *r);

/* dispatch.c: a request whose target starts with /e2b (rest: after it).
 * Headers only; a body's requests go on with q->is_post. */
enum MHD_Result srv_e2b_route(struct req *q, struct MHD_Connection *c, const char *rest,
			      const char *method);
/* After its body. */
enum MHD_Result srv_e2b_body(struct req *q, struct MHD_Connection *c);
/* A body chunk of POST /files (multipart or raw), written as it comes. */
void srv_e2b_upload(struct req *q, const char *data, size_t n);

/* ---- e2b_records.c: below e2b_api.c and e2b_envd.c ---- */
/* E2B's JSON error {"code":status,"message":msg}. */
enum MHD_Result e2b_fail(struct req *q, struct MHD_Connection *c, unsigned status,
			 enum serve_outcome o, const char *msg);
/* A JSON object body (strict: prescan, no NUL, bounded by the body cap). */
struct cJSON *e2b_json_body(struct req *q, const char **why);
struct e2b_rec;
struct e2b_rec *e2b_rec_new(void);
void e2b_rec_drop(struct e2b_rec *r); /* one never added */
/* Room for one more record: 0, or -1 (all taken by sandboxes still known). */
int e2b_rec_reserve(struct server *s);
void e2b_rec_unreserve(struct e2b *e);
/* The reserved room's record (r taken): sandbox id's, its access token, its
 * maker's credential, its template. */
void e2b_rec_add(struct e2b *e, struct e2b_rec *r, const char *id, const char *token,
		 const uint8_t cred[MOAT_SHA256_LEN], const char *tmpl);
/* id's template ("base" for a sandbox the native API made: false). */
bool e2b_rec_template(struct e2b *e, const char *id, char out[E2B_MAX_TEMPLATE + 1]);
/* id's access token: false when it has none (made by the native API). */
bool e2b_rec_token(struct e2b *e, const char *id, char out[E2B_TOKEN_HEX + 1]);
/* The sandbox of the envd request (E2b-Sandbox-Id, X-Access-Token; the
 * code interpreter's and a forward's also E2B-Traffic-Access-Token): 0 and
 * q->sbx held (busy); -1 an unknown id or a wrong token alike (401); -2 a
 * sandbox that ended (502). Nothing answered. */
int e2b_envd_sandbox(struct req *q, struct MHD_Connection *c);
/* The same for a signed /files URL (no X-Access-Token: E2B's query
 * parameters signature, signature_expiration, path, username; write: a
 * POST's "write", else "read"): the sandbox whose access token makes the
 * signature (only E2b-Sandbox-Id's when given), compared in constant
 * time, its expiration (Unix seconds) not past. -1 (401, *why static):
 * no such signature, or expired; 0 and -2 as above. */
#define E2B_MAX_SIGNED_PATH 4096u /* a signed URL's path (as given) */
#define E2B_MAX_SIGNED_USER 256u  /* its username */
int e2b_envd_signed(struct req *q, struct MHD_Connection *c, bool write, const char **why);
/* The processes envd started (Process/List, tags): config is a
 * ProcessConfig's JSON (kept when at most E2B_MAX_PROC_CONFIG bytes). */
#define E2B_MAX_PROC_CONFIG 4096u
#define E2B_MAX_TAG 256u /* a process's tag */
void e2b_proc_note(struct e2b *e, const char *id, int pid, const char *tag, const char *config);
int e2b_proc_by_tag(struct e2b *e, const char *id, const char *tag); /* pid, or -1 */
/* {"pid","config"[,"tag"]}: a ProcessInfo. */
void e2b_proc_json(struct e2b *e, const char *id, int pid, struct moat_buf *b);
/* The sandbox id's default code context of language lang (0 python, 1
 * javascript, 2 typescript) into out: false when none. With set, set
 * becomes it unless one is already there (out: the one kept). */
bool e2b_ci_default(struct e2b *e, const char *id, unsigned lang, const char *set,
		    char out[E2B_CI_CTX_ID + 1]);
/* Forgets it when it is still ctx (it was deleted). */
void e2b_ci_default_forget(struct e2b *e, const char *id, unsigned lang, const char *ctx);
/* ---- e2b_ci.c: the code interpreter (port 49999) ---- */
enum MHD_Result e2b_ci_route(struct req *q, struct MHD_Connection *c, const char *rest,
			     const char *method);
enum MHD_Result e2b_ci_body(struct req *q, struct MHD_Connection *c);
/* ---- e2b_port.c: a server of the sandbox's own (any other port) ---- */
enum MHD_Result e2b_port_route(struct req *q, struct MHD_Connection *c, const char *port,
			       const char *rest, const char *method);
enum MHD_Result e2b_port_body(struct req *q, struct MHD_Connection *c);
/* ---- e2b_envd.c ---- */
enum MHD_Result e2b_envd_route(struct req *q, struct MHD_Connection *c, const char *rest,
			       const char *method);
enum MHD_Result e2b_envd_body(struct req *q, struct MHD_Connection *c);

#endif
