/* libsystemd's sd-bus through dlopen (systemd_dl.h says why). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "cgroups/systemd_dl.h"

struct moat_sdbus_fns moat_sdbus_fns;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error;

static void load(void)
{
	void *h = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		load_error = "libsystemd.so.0 cannot be loaded (Debian package libsystemd0)";
		return;
	}
	static const struct { const char *name; size_t off; } syms[] = {
#define S(sym, field) { #sym, offsetof(struct moat_sdbus_fns, field) }
		S(sd_bus_new, bus_new), S(sd_bus_set_address, set_address),
		S(sd_bus_set_bus_client, set_bus_client), S(sd_bus_start, start),
		S(sd_bus_close, close), S(sd_bus_unref, unref), S(sd_bus_process, process),
		S(sd_bus_wait, wait), S(sd_bus_match_signal_async, match_signal_async),
		S(sd_bus_slot_unref, slot_unref),
		S(sd_bus_message_new_method_call, new_method_call),
		S(sd_bus_message_append, append),
		S(sd_bus_message_open_container, open_container),
		S(sd_bus_message_close_container, close_container), S(sd_bus_call, call),
		S(sd_bus_message_read, read), S(sd_bus_message_unref, message_unref),
		S(sd_bus_error_free, error_free),
#undef S
	};
	struct moat_sdbus_fns fns;
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlsym(h, syms[i].name);
		if (!p) {
			load_error = "libsystemd.so.0 lacks a function moat needs (sd-bus of "
				     "systemd 237 or later)";
			dlclose(h);
			return;
		}
		*(void **)((char *)&fns + syms[i].off) = p;
	}
	moat_sdbus_fns = fns;
}

int moat_sdbus_load(const char **why)
{
	pthread_once(&once, load);
	if (load_error) {
		*why = load_error;
		return -1;
	}
	return 0;
}
