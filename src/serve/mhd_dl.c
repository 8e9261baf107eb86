/* libmicrohttpd through dlopen (mhd_dl.h says why). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "serve/mhd_dl.h"

struct moat_mhd_fns moat_mhd_fns;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error;

static void load(void)
{
	void *h = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		load_error = "libmicrohttpd.so.12 cannot be loaded (Debian package libmicrohttpd12)";
		return;
	}
	static const struct { const char *name; size_t off; } syms[] = {
#define S(f) { "MHD_" #f, offsetof(struct moat_mhd_fns, f) }
		S(start_daemon), S(stop_daemon), S(quiesce_daemon),
		S(create_response_from_buffer), S(create_response_from_callback),
		S(add_response_header), S(queue_response), S(destroy_response),
		S(lookup_connection_value), S(get_connection_values), S(get_connection_info),
#undef S
	};
	struct moat_mhd_fns fns;
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlsym(h, syms[i].name);
		if (!p) {
			load_error = "libmicrohttpd lacks a function moat needs (version 0.9.75 or "
				     "later is required)";
			dlclose(h);
			return;
		}
		*(void **)((char *)&fns + syms[i].off) = p;
	}
	moat_mhd_fns = fns;
}

int moat_mhd_load(const char **why)
{
	pthread_once(&once, load);
	if (load_error) {
		*why = load_error;
		return -1;
	}
	return 0;
}
