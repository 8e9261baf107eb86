/* Landlock: a second filesystem wall, applied by the program (pid 2) to
 * itself after no_new_privs and before seccomp. It grants exactly what the
 * mount plan already allows — read and execute on the tree, read and write
 * on /tmp, /sandbox and /dev/shm, the device nodes of /dev, reading /proc —
 * so that a hole in the mounts (a bind left writable, a mount_setattr that
 * did not take) still meets a refusal. Raw system calls: Debian 12's
 * <linux/landlock.h> stops at ABI 2, the constants of later ABIs are here. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "priv/priv.h"

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH 1

/* filesystem rights, by the ABI that introduced them */
#define FS_EXECUTE (1ull << 0)
#define FS_WRITE_FILE (1ull << 1)
#define FS_READ_FILE (1ull << 2)
#define FS_READ_DIR (1ull << 3)
#define FS_REMOVE_DIR (1ull << 4)
#define FS_REMOVE_FILE (1ull << 5)
#define FS_MAKE_CHAR (1ull << 6)
#define FS_MAKE_DIR (1ull << 7)
#define FS_MAKE_REG (1ull << 8)
#define FS_MAKE_SOCK (1ull << 9)
#define FS_MAKE_FIFO (1ull << 10)
#define FS_MAKE_BLOCK (1ull << 11)
#define FS_MAKE_SYM (1ull << 12)
#define FS_ABI1 ((1ull << 13) - 1)
#define FS_REFER (1ull << 13)      /* ABI 2 */
#define FS_TRUNCATE (1ull << 14)   /* ABI 3 */
#define FS_IOCTL_DEV (1ull << 15)  /* ABI 5 */
/* scopes (ABI 6): no connecting to abstract unix sockets, no signals, out of
 * the domain (pid 1, moat's init, is outside it) */
#define SCOPE_ABSTRACT_UNIX (1ull << 0)
#define SCOPE_SIGNAL (1ull << 1)

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;             /* ABI 6 */
};

struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

int moat_landlock_abi(void)
{
	long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	return abi < 0 ? 0 : (int)abi;
}

static uint64_t handled_fs(int abi)
{
	uint64_t fs = FS_ABI1;
	if (abi >= 2)
		fs |= FS_REFER;
	if (abi >= 3)
		fs |= FS_TRUNCATE;
	if (abi >= 5)
		fs |= FS_IOCTL_DEV;
	return fs;
}

static int add_path(int ruleset, const char *path, uint64_t access, uint64_t handled)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1; /* absent: nothing to grant */
	struct ll_path_beneath pb = { .allowed_access = access & handled, .parent_fd = fd };
	long rc = syscall(__NR_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &pb, 0);
	int saved = errno;
	close(fd);
	errno = saved;
	return rc < 0 ? -1 : 0;
}

int moat_priv_landlock(const struct moat_priv_plan *p)
{
	int abi = p->landlock_abi;
	if (abi < 1)
		return 0; /* the supervisor warned */
	uint64_t fs = handled_fs(abi);
	struct ll_ruleset_attr attr = { .handled_access_fs = fs };
	size_t size = sizeof attr.handled_access_fs;
	if (abi >= 6) {
		attr.scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL;
		size = sizeof attr;
	}
	int rs = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
	if (rs < 0)
		return -1;
	const uint64_t read = FS_READ_FILE | FS_READ_DIR;
	const uint64_t write = FS_WRITE_FILE | FS_TRUNCATE | FS_REMOVE_DIR | FS_REMOVE_FILE |
			       FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK | FS_MAKE_FIFO |
			       FS_MAKE_SYM | FS_REFER;
	const struct {
		const char *path;
		uint64_t access;
	} rules[] = {
		{ "/", read | FS_EXECUTE },          /* the read-only tree */
		{ "/sandbox", read | write | FS_EXECUTE },
		{ "/tmp", read | write },            /* noexec, as mounted */
		{ "/dev/shm", read | write },        /* noexec, as mounted */
		/* the device nodes: null, zero, full, random, urandom, ptys */
		{ "/dev", read | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV },
	};
	int rc = 0;
	for (size_t i = 0; i < sizeof rules / sizeof rules[0] && rc == 0; i++)
		rc = add_path(rs, rules[i].path, rules[i].access, fs);
	if (rc == 0)
		rc = (int)syscall(__NR_landlock_restrict_self, rs, 0);
	int saved = errno;
	close(rs);
	errno = saved;
	return rc < 0 ? -1 : 0;
}

int moat_landlock_decide(int abi, bool strict, struct moat_error *err)
{
	if (abi >= 1)
		return 0;
	if (strict)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "strict isolation: Landlock is not available on this kernel "
				      "(not built, or not in the lsm= boot list), and the run would "
				      "have only one filesystem wall; refusing to run");
	return 1;
}
