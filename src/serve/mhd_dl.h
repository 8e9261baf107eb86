/* libmicrohttpd, loaded when `moat serve` starts: linking it would make every
 * `moat run` load it and its TLS libraries (a dozen shared objects) for
 * nothing. Include this instead of <microhttpd.h>; the MHD_* names below then
 * call through the loaded table. */
#ifndef MOAT_SERVE_MHD_DL_H
#define MOAT_SERVE_MHD_DL_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

struct moat_mhd_fns {
	struct MHD_Daemon *(*start_daemon)(unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *,
					   MHD_AccessHandlerCallback, void *, ...);
	void (*stop_daemon)(struct MHD_Daemon *);
	MHD_socket (*quiesce_daemon)(struct MHD_Daemon *);
	struct MHD_Response *(*create_response_from_buffer)(size_t, void *,
							     enum MHD_ResponseMemoryMode);
	struct MHD_Response *(*create_response_from_callback)(uint64_t, size_t,
							       MHD_ContentReaderCallback, void *,
							       MHD_ContentReaderFreeCallback);
	enum MHD_Result (*add_response_header)(struct MHD_Response *, const char *, const char *);
	enum MHD_Result (*queue_response)(struct MHD_Connection *, unsigned int,
					  struct MHD_Response *);
	void (*destroy_response)(struct MHD_Response *);
	const char *(*lookup_connection_value)(struct MHD_Connection *, enum MHD_ValueKind,
					       const char *);
	int (*get_connection_values)(struct MHD_Connection *, enum MHD_ValueKind,
				     MHD_KeyValueIterator, void *);
	const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *,
								enum MHD_ConnectionInfoType, ...);
	struct MHD_PostProcessor *(*create_post_processor)(struct MHD_Connection *, size_t,
							   MHD_PostDataIterator, void *);
	enum MHD_Result (*post_process)(struct MHD_PostProcessor *, const char *, size_t);
	enum MHD_Result (*destroy_post_processor)(struct MHD_PostProcessor *);
};

extern struct moat_mhd_fns moat_mhd_fns;

/* Loads libmicrohttpd once. 0, or -1 with a sentence in *why (static). */
int moat_mhd_load(const char **why);

#define MHD_start_daemon (moat_mhd_fns.start_daemon)
#define MHD_stop_daemon (moat_mhd_fns.stop_daemon)
#define MHD_quiesce_daemon (moat_mhd_fns.quiesce_daemon)
#define MHD_create_response_from_buffer (moat_mhd_fns.create_response_from_buffer)
#define MHD_create_response_from_callback (moat_mhd_fns.create_response_from_callback)
#define MHD_add_response_header (moat_mhd_fns.add_response_header)
#define MHD_queue_response (moat_mhd_fns.queue_response)
#define MHD_destroy_response (moat_mhd_fns.destroy_response)
#define MHD_lookup_connection_value (moat_mhd_fns.lookup_connection_value)
#define MHD_get_connection_info (moat_mhd_fns.get_connection_info)
#define MHD_get_connection_values (moat_mhd_fns.get_connection_values)
#define MHD_create_post_processor (moat_mhd_fns.create_post_processor)
#define MHD_post_process (moat_mhd_fns.post_process)
#define MHD_destroy_post_processor (moat_mhd_fns.destroy_post_processor)

#endif
