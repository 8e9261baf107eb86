/* A request of E2B's surface (e2b.h): its state freed (reply.c, at the
 * request's end). A leaf: nothing of the E2B files below it. */
#include <stdlib.h>

#include <zlib.h>

#include "serve/e2b.h"

void srv_e2b_req_free(struct e2b_req *r)
{
	if (!r)
		return;
	if (r->mp) { /* its state holds no fd: q->up_fd is the open file */
		moat_buf_free(&r->mp->hold);
		moat_buf_free(&r->mp->out);
		free(r->mp->cur);
		free(r->mp);
	}
	if (r->gz) {
		inflateEnd(r->gz);
		free(r->gz);
	}
	free(r->gz_out);
	for (size_t i = 0; i < 2 * r->nmeta; i++)
		free(r->meta[i]);
	free(r->meta);
	free(r->meta_json);
	free(r->path);
	free(r->target);
	free(r);
}
