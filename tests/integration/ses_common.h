/* What the sessions' test files share (test_serve_sessions.c defines
 * them): creating, stepping and ending a session of a test's server. */
#ifndef MOAT_TESTS_SES_COMMON_H
#define MOAT_TESTS_SES_COMMON_H

#include <stdbool.h>

#include "serve_common.h"

/* POST /v1/sessions with body: the id (malloc'd), or NULL when sessions
 * are not built here; out (may be NULL) keeps the answer. */
char *ses_try_create(struct server *s, const char *body, const char *auth, struct resp *out);
/* The same, skipping the test (and stopping the server) when sessions
 * are not built here: false then. */
bool ses_create(struct server *s, const char *body, char **id);
/* server_start (no warm pool), then ses_create: the common first lines. */
bool ses_start(struct server *s, int mode, const char *body, char **id);
/* POST /v1/sessions/{id}/run with code (extra: more keys, ",\"k\":v"). */
void ses_run(struct server *s, const char *id, const char *code, const char *extra,
	     struct resp *r);
void ses_run_start(struct server *s, const char *id, const char *body, struct call *c);
void ses_call(struct server *s, const char *method, const char *id, struct resp *r);
/* A step that must succeed: its stdout (malloc'd). */
char *ses_ok(struct server *s, const char *id, const char *code);
const char *err_name(const struct resp *r);
bool cgroup_memory(const struct resp *r);
void expect_gone(struct server *s, const char *id, const char *why_has);
void ses_end(struct server *s, const char *id);
bool have_js_driver(void);

/* test_serve_notebook.c: the tcase session_notebook */
void serve_sessions_notebook_tcase(Suite *s);

#endif
