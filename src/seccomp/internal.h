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
#include "core/sha256.h"

/* ---- SHA-256 (core/sha256.h) ---- */
/* SHA-256 of the embedded default policy, computed at build time by
 * tools/embed.c (generated next to moat_embedded_default_policy): the cache
 * key of a run with the default policy needs no hashing of the policy. */
extern const unsigned char moat_embedded_default_policy_sha256[MOAT_SHA256_LEN];

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
/* How many distinct system calls an allowing rule that applies on this host
 * names (with or without conditions on the arguments). */
size_t sc_policy_allowed_count(const struct sc_policy *p);

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

/* Digest of the policy compiler's own sources (policy.c, compile.c,
 * internal.h), computed at build time by tools/embed.c: part of every cache
 * key, so a build whose compiler differs never loads a program an older one
 * cached. */
extern const unsigned char moat_embedded_seccomp_compiler_sha256[MOAT_SHA256_LEN];

/* How a policy is turned into BPF. Every field is part of the cache key, so
 * a program compiled with other options is never loaded from the cache.
 * compiler: the digest above (a pointer, so that tests can vary it).
 * optimize: libseccomp's SCMP_FLTATR_CTL_OPTIMIZE. 2 (the default) lays the
 * syscall numbers out as a binary tree: any call is decided in about 25
 * instructions instead of up to ~265 with the linear layout (1), and the
 * kernel's per-filter action cache, which runs the filter for every syscall
 * number at install time, has ten times less to do. The verdicts are the
 * same (checked by the unit tests). */
struct sc_compile_opts {
	const unsigned char *compiler; /* MOAT_SHA256_LEN bytes */
	uint32_t optimize;
};
extern const struct sc_compile_opts sc_compile_defaults;

/* sc_compile_with(p, &sc_compile_defaults, ...) */
int sc_compile(const struct sc_policy *p, struct moat_seccomp_prog **out,
	       struct moat_error *err);
int sc_compile_with(const struct sc_policy *p, const struct sc_compile_opts *opts,
		    struct moat_seccomp_prog **out, struct moat_error *err);

/* ---- --seccomp-log (notify.c) ---- */
/* Derives prog->notify_insns from prog->insns. Fails (MOAT_ERR_CONFIG) on a
 * program whose errno cannot be known statically (RET A), ENOMEM otherwise. */
int sc_notify_rewrite(struct moat_seccomp_prog *prog, struct moat_error *err);
/* How the supervisor answers one notification: always with an errno (err,
 * > 0), never by letting the call run. unexplained: the original program's
 * verdict on the call is not RET ERRNO with a non-zero errno (the interpreter
 * disagrees with the kernel, which notified), so the answer is EPERM;
 * unknown: the interpreter could not run the program at all (also
 * unexplained). */
struct sc_answer {
	int err;
	bool unknown;
	bool unexplained;
};
/* Builds the answer to req from prog->insns: resp (resp_size bytes, at least
 * sizeof *resp: the kernel's SECCOMP_GET_NOTIF_SIZES) is zeroed, then gets
 * req's id and error = -out->err; its flags are always 0 (never
 * SECCOMP_USER_NOTIF_FLAG_CONTINUE). */
void sc_notify_answer(const struct moat_seccomp_prog *prog, const struct seccomp_notif *req,
		      struct seccomp_notif_resp *resp, size_t resp_size, struct sc_answer *out);
/* A classic-BPF interpreter with the kernel's seccomp semantics (the opcodes
 * seccomp_check_filter accepts; seccomp_data is 64 bytes). Returns 0 with the
 * filter's return value in *ret, or -1 for a program it cannot run (unknown
 * opcode, jump or load out of bounds, read of an unset scratch cell, shift
 * by 32 or more, falling off the end). */
int sc_bpf_run(const struct sock_filter *insns, size_t len, const struct seccomp_data *d,
	       uint32_t *ret);
/* sc_bpf_run that also counts the instructions executed (*steps; tests). */
int sc_bpf_run_counted(const struct sock_filter *insns, size_t len,
		       const struct seccomp_data *d, uint32_t *ret, size_t *steps);
/* true when sc_bpf_run knows the opcode (for tests). */
bool sc_bpf_opcode_known(uint16_t code);

/* ---- cache ---- */
/* The cache key: SHA-256 over the policy's SHA-256 (policy_sha: for the
 * embedded default, moat_embedded_default_policy_sha256 from the build; for a
 * --policy file, hashed at run time), the compile options, native arch,
 * kernel release, libseccomp version and moat version. The cache holds the
 * program as compiled; the --seccomp-log rewrite is derived after loading. */
void sc_cache_key(const uint8_t policy_sha[MOAT_SHA256_LEN], const struct sc_host *host,
		  const struct sc_compile_opts *opts, uint8_t key[MOAT_SHA256_LEN]);
/* 0 and *out on a valid hit; -1 on a miss or anything wrong (never an error). */
int sc_cache_load(const uint8_t key[MOAT_SHA256_LEN], struct moat_seccomp_prog **out);
/* Entries kept in the cache directory (the newest by mtime); see prune(). */
#define SC_CACHE_KEEP 32
/* Best effort: returns 0 when stored, -1 otherwise. Then prunes the
 * directory to the SC_CACHE_KEEP newest entries. */
int sc_cache_store(const uint8_t key[MOAT_SHA256_LEN], const struct moat_seccomp_prog *prog);
/* Tests: dir NULL = the default location, "" = no cache, else that directory
 * (created 0700 if missing; must be owned by us and not group/other-accessible). */
void sc_cache_set_dir(const char *dir);
/* Cache file name for a key: 64 hex chars + ".bpf" (malloc'd). */
char *sc_cache_file_name(const uint8_t key[MOAT_SHA256_LEN]);

/* Timings of the last moat_seccomp_prepare (nanoseconds). */
struct sc_stats {
	bool from_cache;
	bool policy_hashed; /* the policy bytes were hashed (a --policy file, not the default) */
	bool policy_read;   /* the policy bytes were read (a file, or a cache miss) */
	uint64_t prepare_ns; /* whole prepare: read + key + (load | parse+compile+store) */
	uint64_t compile_ns; /* parse + compile, 0 on a hit */
};
void sc_stats_get(struct sc_stats *out);

#endif
