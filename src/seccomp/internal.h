/* seccomp module internals (not for other modules): the parsed policy, the
 * compiler, the BPF cache and SHA-256. Tests use these directly. */
#ifndef MOAT_SECCOMP_INTERNAL_H
#define MOAT_SECCOMP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include "moat.h"
#include "seccomp/seccomp.h"

/* ---- SHA-256 ---- */
#define SC_SHA256_LEN 32
struct sc_sha256 {
	uint32_t h[8];
	uint64_t total;
	uint8_t buf[64];
	size_t used;
};
void sc_sha256_init(struct sc_sha256 *s);
void sc_sha256_update(struct sc_sha256 *s, const void *data, size_t len);
void sc_sha256_final(struct sc_sha256 *s, uint8_t out[SC_SHA256_LEN]);
void sc_sha256(const void *data, size_t len, uint8_t out[SC_SHA256_LEN]);

/* ---- the host a policy is evaluated for (includes/excludes) ---- */
struct sc_host {
	uint32_t scmp_arch;    /* seccomp_arch_native() */
	const char *arch_name; /* Docker name of the native arch: "amd64" */
	char release[128];     /* uname -r, for the cache key */
	unsigned kernel[3];    /* major, minor, patch parsed from release */
};
int sc_host_detect(struct sc_host *host, struct moat_error *err);

/* ---- parsed policy ---- */
#define SC_MAX_POLICY_BYTES (4u * 1024u * 1024u)
#define SC_MAX_ARGS 6

struct sc_cond {
	unsigned index;   /* 0..5 */
	int op;           /* enum scmp_compare */
	uint64_t value;   /* MASKED_EQ: the mask */
	uint64_t value_two; /* MASKED_EQ: the datum */
};

struct sc_rule {
	size_t entry;       /* index in the JSON syscalls[] array */
	char **names;       /* syscall names (valid, known to libseccomp) */
	int *nrs;           /* their native numbers */
	size_t n_names;
	uint32_t action;    /* SCMP_ACT_* value, errno folded in */
	struct sc_cond *conds;
	size_t n_conds;
	bool applies;       /* includes/excludes matched this host */
};

struct sc_policy {
	uint32_t default_action;
	bool flag_log;      /* "flags": ["SECCOMP_FILTER_FLAG_LOG"] */
	struct sc_rule *rules;
	size_t n_rules;
	char **notes;       /* informational: skipped names, ignored arches */
	size_t n_notes;
};

/* Parses and validates a Docker-format policy. Every error names the JSON path
 * of the bad entry (MOAT_ERR_CONFIG). */
int sc_policy_parse(const char *buf, size_t len, const struct sc_host *host,
		    struct sc_policy **out, struct moat_error *err);
void sc_policy_free(struct sc_policy *p);
/* Reads a policy file (path NULL: the embedded default) into a malloc'd,
 * NUL-terminated buffer. */
int sc_policy_read(const char *path, char **buf, size_t *len, struct moat_error *err);
/* policy check with notes written to `notes` (may be NULL). */
int sc_policy_check(const char *path, FILE *notes, struct moat_error *err);

/* ---- compiled program ---- */
#define SC_MAX_INSNS 4096u /* BPF_MAXINSNS: 32 KiB of BPF */
struct moat_seccomp_prog {
	struct sock_filter *insns;
	unsigned short len;
	bool log; /* install with SECCOMP_FILTER_FLAG_LOG (the policy's "flags") */
	/* --seccomp-log: insns with every RET ERRNO turned into RET USER_NOTIF
	 * (same length), installed instead of insns with a listener; NULL
	 * otherwise. The supervisor answers each notification by running insns. */
	struct sock_filter *notify_insns;
};

int sc_compile(const struct sc_policy *p, struct moat_seccomp_prog **out,
	       struct moat_error *err);

/* ---- --seccomp-log (notify.c) ---- */
/* Derives prog->notify_insns from prog->insns. Fails (MOAT_ERR_CONFIG) on a
 * program whose errno cannot be known statically (RET A), ENOMEM otherwise. */
int sc_notify_rewrite(struct moat_seccomp_prog *prog, struct moat_error *err);
/* A classic-BPF interpreter with the kernel's seccomp semantics (the opcodes
 * seccomp_check_filter accepts; seccomp_data is 64 bytes). Returns 0 with the
 * filter's return value in *ret, or -1 for a program it cannot run (unknown
 * opcode, jump or load out of bounds, read of an unset scratch cell, shift
 * by 32 or more, falling off the end). */
int sc_bpf_run(const struct sock_filter *insns, size_t len, const struct seccomp_data *d,
	       uint32_t *ret);
/* true when sc_bpf_run knows the opcode (for tests). */
bool sc_bpf_opcode_known(uint16_t code);

/* ---- cache ---- */
/* The cache key: SHA-256 over policy bytes, native arch, kernel release,
 * libseccomp version and moat version. The cache holds the program as
 * compiled; the --seccomp-log rewrite is derived after loading. */
void sc_cache_key(const char *policy, size_t len, const struct sc_host *host,
		  uint8_t key[SC_SHA256_LEN]);
/* 0 and *out on a valid hit; -1 on a miss or anything wrong (never an error). */
int sc_cache_load(const uint8_t key[SC_SHA256_LEN], struct moat_seccomp_prog **out);
/* Best effort: returns 0 when stored, -1 otherwise. */
int sc_cache_store(const uint8_t key[SC_SHA256_LEN], const struct moat_seccomp_prog *prog);
/* Tests: dir NULL = the default location, "" = no cache, else that directory
 * (created 0700 if missing; must be owned by us and not group/other-accessible). */
void sc_cache_set_dir(const char *dir);
/* Cache file name for a key: 64 hex chars + ".bpf" (malloc'd). */
char *sc_cache_file_name(const uint8_t key[SC_SHA256_LEN]);

/* Timings of the last moat_seccomp_prepare (nanoseconds). */
struct sc_stats {
	bool from_cache;
	uint64_t prepare_ns; /* whole prepare: read + key + (load | parse+compile+store) */
	uint64_t compile_ns; /* parse + compile, 0 on a hit */
};
void sc_stats_get(struct sc_stats *out);

#endif
