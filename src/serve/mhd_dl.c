/* libmicrohttpd through dlopen (mhd_dl.h says why). */
#include <stddef.h>

#include "core/sys.h"
#include "serve/mhd_dl.h"

struct moat_mhd_fns moat_mhd_fns;

static struct moat_dl_once once = MOAT_DL_ONCE_INIT;

static const struct moat_dl_sym syms[] = {
#define S(f) { "MHD_" #f, offsetof(struct moat_mhd_fns, f) }
	S(start_daemon), S(stop_daemon), S(quiesce_daemon),
	S(create_response_from_buffer), S(create_response_from_callback),
	S(add_response_header), S(queue_response), S(destroy_response),
	S(lookup_connection_value), S(get_connection_values), S(get_connection_info),
	S(create_post_processor), S(post_process), S(destroy_post_processor),
#undef S
};

static void load(void)
{
	moat_dl_load(&once, "libmicrohttpd.so.12", syms, sizeof syms / sizeof syms[0], &moat_mhd_fns,
		     sizeof moat_mhd_fns,
		     "libmicrohttpd.so.12 cannot be loaded (Debian package libmicrohttpd12)",
		     "libmicrohttpd lacks a function moat needs (version 0.9.75 or "
		     "later is required)");
}

int moat_mhd_load(const char **why)
{
	return moat_dl_once(&once, load, why);
}
