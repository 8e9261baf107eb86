/* `moat serve`'s streamed responses (a handler's, a streamed /v1/run's): the
 * worker thread that runs while the connection's thread answers, the
 * pending bytes between them with the window's back-pressure (the run's
 * stdout_full/resume_fd), and the reader callback MHD sends them with. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/http.h"

#define READER_BLOCK (64u * 1024u)
/* A handler's response bytes read from its sandbox and not yet taken by
 * the client: past STREAM_WINDOW the run's stdout is not read (the program
 * blocks on its pipe, inside its slot and its timeout); while all streams
 * together hold more than STREAM_BUDGET, a stream holding any waits too.
 * Each stream holds at most the window and one read (64 KiB). */
#define STREAM_WINDOW (256u * 1024u)
#define STREAM_BUDGET (64ull * 1024 * 1024)

/* What was taken from pending goes (the buffer stays the window's size);
 * returns its length, for srv_pending_added (q->mu held). */
size_t srv_pending_compact(struct req *q)
{
	moat_buf_drop_front(&q->st.pending, q->st.pending_off);
	q->st.pending_off = 0;
	return q->st.pending.len;
}

/* Bytes appended to pending since srv_pending_compact join the budget. */
void srv_pending_added(struct req *q, size_t before)
{
	__atomic_add_fetch(&q->s->stream_bytes, q->st.pending.len - before, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&q->cv);
}

/* The run's stdout_full: the client has not taken enough yet. A failed or
 * abandoned response is read on (and dropped) to the program's end. */
static bool stream_full(void *ctx)
{
	struct req *q = ctx;
	pthread_mutex_lock(&q->mu);
	size_t held = q->st.pending.len - q->st.pending_off;
	bool full = !q->st.abandoned && q->st.frame.state != FRAME_FAILED &&
		    (held >= STREAM_WINDOW ||
		     (held > 0 &&
		      __atomic_load_n(&q->s->stream_bytes, __ATOMIC_RELAXED) > STREAM_BUDGET));
	pthread_mutex_unlock(&q->mu);
	return full;
}

/* Tells the run's pump to ask stream_full again. */
static void stream_wake(struct req *q)
{
	uint64_t one = 1;
	if (q->st.resume_fd >= 0 && write(q->st.resume_fd, &one, sizeof one) < 0) {
		/* EAGAIN: the counter is full, the pump is woken anyway */
	}
}

/* A streamed response's run options: its output to fn, the window's flow
 * control (stream_full, the response's resume_fd). */
void srv_stream_options(struct req *q, struct moat_run_options *opts,
			void (*fn)(void *, enum moat_stream, const char *, size_t))
{
	srv_run_options(q, opts);
	opts->on_output = fn;
	opts->output_ctx = q;
	opts->stdout_full = stream_full;
	opts->resume_fd = q->st.resume_fd;
}

/* A detached worker thread holding a reference of q; -1 when none started. */
int srv_start_worker(struct req *q, void *(*fn)(void *))
{
	pthread_t t;
	pthread_attr_t attr;
	pthread_mutex_lock(&q->mu);
	q->refs++; /* the worker's */
	pthread_mutex_unlock(&q->mu);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&t, &attr, fn, q);
	pthread_attr_destroy(&attr);
	if (e) {
		pthread_mutex_lock(&q->mu);
		q->refs--;
		pthread_mutex_unlock(&q->mu);
		return -1;
	}
	return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *q = cls;
	pthread_mutex_lock(&q->mu);
	while (q->st.pending.len == q->st.pending_off && !q->st.finished &&
	       q->st.frame.state != FRAME_END && q->st.frame.state != FRAME_FAILED)
		pthread_cond_wait(&q->cv, &q->mu);
	size_t have = q->st.pending.len - q->st.pending_off;
	ssize_t rc;
	if (have) {
		size_t n = have < max ? have : max;
		memcpy(buf, q->st.pending.data + q->st.pending_off, n);
		q->st.pending_off += n;
		if (q->st.pending_off == q->st.pending.len)
			q->st.pending.len = q->st.pending_off = 0;
		__atomic_sub_fetch(&q->s->stream_bytes, n, __ATOMIC_RELAXED);
		q->bytes_out += n;
		rc = (ssize_t)n;
		stream_wake(q);
	} else if (q->st.ndjson ? !q->st.run_failed : q->st.frame.state == FRAME_END) {
		rc = MHD_CONTENT_READER_END_OF_STREAM; /* a streamed run: its result line is out */
	} else {
		rc = MHD_CONTENT_READER_END_WITH_ERROR; /* truncated after the head */
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

static void stream_free(void *cls)
{
	struct req *q = cls;
	pthread_mutex_lock(&q->mu);
	q->st.abandoned = true; /* sent or the client is gone */
	srv_stream_drop(q);
	pthread_mutex_unlock(&q->mu);
	stream_wake(q);
	srv_req_unref(q);
}

/* A streamed response (stream_read), holding a reference of q; NULL on OOM. */
struct MHD_Response *srv_stream_response(struct req *q)
{
	struct MHD_Response *r = MHD_create_response_from_callback(
		MHD_SIZE_UNKNOWN, READER_BLOCK, stream_read, q, stream_free);
	if (r) {
		pthread_mutex_lock(&q->mu);
		q->refs++; /* the response's */
		pthread_mutex_unlock(&q->mu);
	}
	return r;
}

/* Queues it (and lets it go): the whole response is out within the run's
 * timeout and then --client-timeout, however slowly the client reads. */
enum MHD_Result srv_stream_queue(struct req *q, struct MHD_Connection *c,
				 struct MHD_Response *r, unsigned status, uint64_t timeout_ms)
{
	q->status = status;
	srv_conn_deadline_in(q->s, c, (int64_t)timeout_ms + (int64_t)q->s->o->client_timeout_s * 1000);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}
