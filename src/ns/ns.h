/* ns: the sandbox's filesystem view and id mapping.
 *
 * The supervisor builds a mount plan (a flat list of operations with every
 * path and byte precomputed); the child applies it with system calls only —
 * no allocation, no locks — so it is safe right after clone3. */
#ifndef MOAT_NS_NS_H
#define MOAT_NS_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "core/core.h"

/* MOAT_SANDBOX_DIR, MOAT_RUNTIME_MOUNT: core/core.h */
/* where moat_run_options.workdir appears inside (read-only; the program's
 * working directory), and its name under MOAT_SANDBOX_DIR */
#define MOAT_WORK_NAME "work"
#define MOAT_WORK_MOUNT MOAT_SANDBOX_DIR "/" MOAT_WORK_NAME
/* host directories a plan may hold open at once (MOAT_OP_HOLD slots) */
#define MOAT_PLAN_HELD 2
#define MOAT_HELD_RUNTIME 0
#define MOAT_HELD_WORK 1
#define MOAT_HOSTNAME "moat"
#define MOAT_DEFAULT_TMPFS_BYTES (64ull * 1024 * 1024)
/* the runtime shims' copy (MOAT_OP_COPY_HELD): at most this much, this
 * many files and directories, and directories at most this deep */
#define MOAT_RUNTIME_COPY_BYTES (16ull * 1024 * 1024)
#define MOAT_RUNTIME_COPY_INODES 16384
#define MOAT_RUNTIME_COPY_DEPTH 8
/* the most pseudo-terminals a sandbox may hold at once (its devpts max=) */
#define MOAT_MAX_PTYS 64

enum moat_op_kind {
	MOAT_OP_MKDIR,     /* dst; an existing directory is fine */
	MOAT_OP_TMPFS,     /* dst, mount flags, data (tmpfs options) */
	MOAT_OP_BIND,      /* src → dst, recursive when op.recursive */
	MOAT_OP_SETATTR,   /* dst: mount_setattr(attr_set), recursive when op.recursive */
	MOAT_OP_MKFILE,    /* dst: an empty file to bind a file onto */
	MOAT_OP_SYMLINK,   /* src (target text) → dst */
	MOAT_OP_WRITE,     /* dst: new file with data/len, mode */
	MOAT_OP_PROC,      /* dst: a new procfs of this pid namespace */
	MOAT_OP_SANDBOX_FILE, /* dst relative to the sandbox dir: parents made, data written */
	MOAT_OP_PIVOT,     /* dst becomes /, the old root is detached */
	MOAT_OP_CHDIR,     /* dst */
	MOAT_OP_HOLD,      /* src: opened (O_PATH) into held slot op.slot before anything
			    * is mounted on the base, which may hide it (a source under /tmp) */
	MOAT_OP_BIND_HELD, /* the source held in op.slot → dst (recursive), then closed */
	MOAT_OP_DEVPTS,    /* dst: a new devpts instance, mount flags, data (its options) */
	MOAT_OP_COPY_HELD, /* a tmpfs (options in src) on dst, the directory held in
			    * op.slot copied into it (files, directories, symlinks),
			    * then closed: mountinfo names no host path for it */
};

struct moat_mount_op {
	enum moat_op_kind kind;
	char *src;
	char *dst;
	const char *data;   /* not owned */
	size_t data_len;
	unsigned long flags; /* MS_* for TMPFS/PROC/DEVPTS */
	uint64_t attr_set;   /* MOUNT_ATTR_* for SETATTR */
	mode_t mode;
	bool recursive;
	bool optional;       /* ENOENT on the source is skipped */
	bool user_data;      /* a request file: ENOSPC/EEXIST are the request's fault */
	unsigned slot;       /* HOLD/BIND_HELD: which held fd, < MOAT_PLAN_HELD */
	/* HOLD of a path whose symlinks the supervisor resolved: opened without
	 * following any (openat2 RESOLVE_NO_SYMLINKS), so a symlink swapped into
	 * it since then fails the run (ELOOP) instead of being followed */
	bool no_symlinks;
	/* MOAT_OP_COPY_HELD: a top-level entry of that name not copied, or NULL */
	const char *skip;
};

struct moat_mount_plan {
	struct moat_mount_op *ops;
	size_t count;
	size_t cap;
	char *base;          /* where the new root is assembled before pivot */
	char *owned_text;    /* generated file contents */
};

struct moat_plan_input {
	const char *rootfs_dir;      /* NULL: the embedded host-derived plan */
	const char *plan_text;       /* NULL: embedded rootfs/default.plan */
	uint64_t tmpfs_bytes;
	const struct moat_request *req;
	const char *code_name;       /* "main.py" */
	const char *resolv_conf;     /* text of /etc/resolv.conf (network on), or NULL: absent */
	const char *runtime_dir;     /* host directory bound read-only at MOAT_RUNTIME_MOUNT, or NULL */
	/* its bin/ copied too (the live sandboxes' agent, about 700 KB: only a
	 * live sandbox runs it; every other run's copy leaves it out) */
	bool runtime_bin;
	/* host directory (absolute, symlinks already resolved: it is opened
	 * without following any) bound read-only, nosuid, nodev at
	 * MOAT_WORK_MOUNT, the working directory; or NULL */
	const char *workdir;
	/* /proc without moat's read-only binds and masks: only for a zygote's
	 * own sandbox (run_sandbox_start_zygote), whose sandboxes each
	 * mount a new /proc, which the kernel allows only where a fully
	 * visible one is mounted; they mask theirs */
	bool proc_unmasked;
	/* a zygote's child: the calling process's tree (the zygote's, made by
	 * this plan; moat_zygote_new checked it with moat_tree_check_own) is
	 * the sandbox's, with /dev/pts, /dev/shm, /proc, /tmp and /sandbox
	 * mounted anew on it; no root, work directory or network of its own */
	bool own_tree;
};

/* Supervisor side. */
int moat_plan_build(const struct moat_plan_input *in, struct moat_mount_plan **out,
		    struct moat_error *err);
void moat_plan_free(struct moat_mount_plan *plan);
/* Parses plan text only (for tests and `moat doctor`): -1 with a message that
 * names the line on error. */
int moat_plan_check_text(const char *text, struct moat_error *err);
/* Whether the tree of a /proc/self/mountinfo text can be a zygote's
 * children's (moat_plan_input.own_tree): / read-only, and every mount that
 * is not at /dev/pts, /dev/shm, /proc, /tmp or /sandbox (each a mount
 * point) or below one of them read-only; with runtime, the runtime's mount
 * point too. 0, or -1 with the reason in why. */
int moat_tree_check_own(const char *mountinfo, bool runtime, char *why, size_t len);
/* The same of this process's own tree (/proc/self/mountinfo). */
int moat_tree_check_self(bool runtime, char *why, size_t len);
/* A copy of plan laid out in buf (cap bytes): the plan at buf itself, then
 * its ops and every string, each pointer into buf; data pointers are kept
 * as they are (never owned by a plan: the request's files, static text and
 * the network's resolv.conf, all made before clone3). The supervisor builds
 * the plan after clone3, lays it out in a buffer of its own and writes it
 * to pid 1 over the sync pipe; pid 1 reads it into memory of its own and
 * moves its pointers there (moat_plan_rebase). NULL: it does not fit. */
struct moat_mount_plan *moat_plan_flatten(const struct moat_mount_plan *plan, void *buf,
					  size_t cap);
/* The bytes moat_plan_flatten takes of plan (from an aligned buf). */
size_t moat_plan_flat_size(const struct moat_mount_plan *plan);
/* Human description of op i for error messages: "bind /usr on /usr". */
int moat_plan_describe(const struct moat_mount_plan *plan, size_t i, char *buf, size_t len);

/* Child side: a flat plan (moat_plan_flatten) laid out at address was,
 * copied to buf (len bytes): every pointer of it into buf moved there, each
 * checked to fall inside buf (data pointers are left as they are). The plan
 * at buf, or NULL (errno EINVAL) when one does not. System calls only. */
struct moat_mount_plan *moat_plan_rebase(void *buf, size_t len, uint64_t was);

/* Child side: applies every op in order. 0, or -1 with errno and the index
 * of the op that failed in *failed_op. System calls only. */
int moat_plan_apply(const struct moat_mount_plan *plan, size_t *failed_op);

/* Supervisor side: write the child's uid/gid maps. Rootless: caller → 65534,
 * setgroups denied. Root: 65534 → host_id (never 0), setgroups left allowed
 * so the child can drop root's supplementary groups. */
int moat_idmap_write(pid_t pid, bool as_root, uid_t host_uid, gid_t host_gid,
		     struct moat_error *err);

/* Why user namespaces are unavailable here, with the fix, or NULL when no
 * known restriction is found (malloc'd); the runner adds it to clone3 and
 * id-map errors, moat doctor prints it (moat_userns_diagnose, src/admin/). */
char *moat_ns_userns_diagnose(void);

/* The mount points strictly under /proc in a /proc/self/mountinfo text,
 * binfmt_misc aside ("/proc/sys, /proc/kcore"), in *out (malloc'd; NULL
 * when there is none). 0, or -1 when out of memory. */
int moat_proc_overmounts_parse(const char *text, char **out);
/* Why a sandbox could not mount its own /proc here (mounts over parts of
 * it), with the fix, or NULL (malloc'd); the runner adds it to a failed
 * proc mount (moat_proc_diagnose, src/admin/). */
char *moat_ns_proc_diagnose(void);

/* /proc/self/uid_map text is the initial user namespace's ("0 0 4294967295"). */
bool moat_uid_map_is_initial(const char *text);

/* AppArmor's user-namespace restriction and moat's profile: the fields of
 * moat_admin.h's struct moat_apparmor (src/admin/ copies them), which the
 * walls' headers do not see. */
struct moat_ns_apparmor {
	bool enabled;
	int restrict_userns;
	bool as_root;
	char label[256];
	bool covered;
	int profile_loaded;
	bool etc_profile;
	bool exe_attached;
	char exe[4096];
	char profile_src[4096];
};
/* Fills *aa from /proc, /sys and the filesystem; changes nothing. */
void moat_ns_apparmor_probe(struct moat_ns_apparmor *aa);
/* What to run so that this binary may create user namespaces (malloc'd),
 * or NULL when nothing stands in the way. */
char *moat_ns_apparmor_fix(const struct moat_ns_apparmor *aa);

/* AppArmor, pure parsers behind moat_ns_apparmor_probe. */
/* The text of /proc/self/attr/current ("moat (unconfined)\n", "unconfined\n")
 * split into the label's profile part and its mode ("" when none). 0, or -1
 * when the text holds no label or a part does not fit. */
int moat_aa_label_parse(const char *text, size_t len, char *profile, size_t profile_len,
			char *mode, size_t mode_len);
/* The profile part of a label is moat's profile (alone, or first of a stack). */
bool moat_aa_label_is_moat(const char *profile);
/* /sys/kernel/security/apparmor/profiles lists a profile named name. */
bool moat_aa_profiles_has(const char *text, size_t len, const char *name);
/* exe is a path apparmor/moat attaches to (/usr/bin/moat, /usr/local/bin/moat). */
bool moat_aa_exe_attached(const char *exe);

#endif
