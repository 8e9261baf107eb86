/* libsystemd's sd-bus through dlopen (systemd_dl.h says why). */
#include <stddef.h>

#include "core/sys.h"
#include "cgroups/systemd_dl.h"

struct moat_sdbus_fns moat_sdbus_fns;

static struct moat_dl_once once = MOAT_DL_ONCE_INIT;

static const struct moat_dl_sym syms[] = {
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

static void load(void)
{
	moat_dl_load(&once, "libsystemd.so.0", syms, sizeof syms / sizeof syms[0], &moat_sdbus_fns,
		     sizeof moat_sdbus_fns,
		     "libsystemd.so.0 cannot be loaded (Debian package libsystemd0)",
		     "libsystemd.so.0 lacks a function moat needs (sd-bus of "
		     "systemd 237 or later)");
}

int moat_sdbus_load(const char **why)
{
	return moat_dl_once(&once, load, why);
}
