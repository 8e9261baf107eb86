/* sd-bus from libsystemd, loaded with dlopen only when a rootless run on a
 * cgroup v2 host finds no delegated cgroup and asks the user's systemd for
 * one (cgroups/systemd.c): every other run, and a host without systemd,
 * never loads it. moat does not link -lsystemd and needs no libsystemd-dev:
 * the few declarations below are sd-bus's public, stable ABI (sd-bus.h,
 * libsystemd.so.0, unchanged since systemd 237, which added
 * sd_bus_match_signal_async). */
#ifndef MOAT_CGROUPS_SYSTEMD_DL_H
#define MOAT_CGROUPS_SYSTEMD_DL_H

#include <stdint.h>

typedef struct sd_bus sd_bus;
typedef struct sd_bus_message sd_bus_message;
typedef struct sd_bus_slot sd_bus_slot;
/* sd-bus.h's struct sd_bus_error, field for field */
typedef struct {
	const char *name;
	const char *message;
	int _need_free;
} sd_bus_error;
#define SD_BUS_ERROR_NULL { NULL, NULL, 0 }
typedef int (*sd_bus_message_handler_t)(sd_bus_message *m, void *userdata, sd_bus_error *ret);

struct moat_sdbus_fns {
	int (*bus_new)(sd_bus **);
	int (*set_address)(sd_bus *, const char *);
	int (*set_bus_client)(sd_bus *, int);
	int (*start)(sd_bus *);
	void (*close)(sd_bus *);
	sd_bus *(*unref)(sd_bus *);
	int (*process)(sd_bus *, sd_bus_message **);
	int (*wait)(sd_bus *, uint64_t);
	int (*match_signal_async)(sd_bus *, sd_bus_slot **, const char *, const char *,
				  const char *, const char *, sd_bus_message_handler_t,
				  sd_bus_message_handler_t, void *);
	sd_bus_slot *(*slot_unref)(sd_bus_slot *);
	int (*new_method_call)(sd_bus *, sd_bus_message **, const char *, const char *,
			       const char *, const char *);
	int (*append)(sd_bus_message *, const char *, ...);
	int (*open_container)(sd_bus_message *, char, const char *);
	int (*close_container)(sd_bus_message *);
	int (*call)(sd_bus *, sd_bus_message *, uint64_t, sd_bus_error *, sd_bus_message **);
	int (*read)(sd_bus_message *, const char *, ...);
	sd_bus_message *(*message_unref)(sd_bus_message *);
	void (*error_free)(sd_bus_error *);
};

extern struct moat_sdbus_fns moat_sdbus_fns;

/* Loads libsystemd.so.0 once. 0, or -1 with a sentence in *why (static). */
int moat_sdbus_load(const char **why);

#define sd_bus_new (moat_sdbus_fns.bus_new)
#define sd_bus_set_address (moat_sdbus_fns.set_address)
#define sd_bus_set_bus_client (moat_sdbus_fns.set_bus_client)
#define sd_bus_start (moat_sdbus_fns.start)
#define sd_bus_close (moat_sdbus_fns.close)
#define sd_bus_unref (moat_sdbus_fns.unref)
#define sd_bus_process (moat_sdbus_fns.process)
#define sd_bus_wait (moat_sdbus_fns.wait)
#define sd_bus_match_signal_async (moat_sdbus_fns.match_signal_async)
#define sd_bus_slot_unref (moat_sdbus_fns.slot_unref)
#define sd_bus_message_new_method_call (moat_sdbus_fns.new_method_call)
#define sd_bus_message_append (moat_sdbus_fns.append)
#define sd_bus_message_open_container (moat_sdbus_fns.open_container)
#define sd_bus_message_close_container (moat_sdbus_fns.close_container)
#define sd_bus_call (moat_sdbus_fns.call)
#define sd_bus_message_read (moat_sdbus_fns.read)
#define sd_bus_message_unref (moat_sdbus_fns.message_unref)
#define sd_bus_error_free (moat_sdbus_fns.error_free)

#endif
