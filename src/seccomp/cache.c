/* Compiled-BPF cache: compile a policy once per (policy bytes, compiler
 * sources, compile options, native arch, kernel release, libseccomp version,
 * moat version).
 *
 * Location: /var/cache/moat/seccomp for root, else
 * $XDG_CACHE_HOME/moat/seccomp or ~/.cache/moat/seccomp. Poisoning is kept
 * out by refusing any cache directory not owned by us or accessible to group
 * or others (created 0700), and any entry not a regular file of ours. Entries
 * are written to a temporary name and renamed (0600, O_CLOEXEC|O_NOFOLLOW).
 *
 * File: struct cache_hdr, then n_insns BPF instructions. Read back only if
 * the size is exact, the magic and key match, and the SHA-256 of the body
 * matches; anything else is a miss and the policy is compiled again. The
 * cache never produces an error: at worst it is not used.
 *
 * A hit costs: the key (a few SHA-256 blocks over the policy's digest, which
 * for the embedded default comes from the build), open + fstat of the
 * directory and of the entry, one readv and the SHA-256 of the body (~2.9 KB
 * for the default policy, ~10 us here). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include "core/sys.h"
#include "seccomp/internal.h"

#define CACHE_MAGIC "MOATBPF\x01"
#define CACHE_FLAG_LOG 1u

struct cache_hdr {
	char magic[8];
	uint8_t key[MOAT_SHA256_LEN];
	uint8_t body_sha[MOAT_SHA256_LEN];
	uint32_t n_insns;
	uint32_t flags;
};

/* The tests' override of the cache directory: process-wide, so read and
 * written under a lock. */
static pthread_mutex_t override_mu = PTHREAD_MUTEX_INITIALIZER;
static char *dir_override; /* NULL: default; "": disabled */
static bool dir_overridden;

void sc_cache_set_dir(const char *dir)
{
	pthread_mutex_lock(&override_mu);
	free(dir_override);
	dir_override = dir ? strdup(dir) : NULL;
	dir_overridden = dir != NULL;
	pthread_mutex_unlock(&override_mu);
}

static char *default_dir(uid_t euid);

/* The cache directory to use (malloc'd), or NULL for none. */
static char *cache_dir(uid_t euid)
{
	pthread_mutex_lock(&override_mu);
	bool overridden = dir_overridden;
	char *dir = overridden && dir_override && dir_override[0] ? strdup(dir_override) : NULL;
	pthread_mutex_unlock(&override_mu);
	return overridden ? dir : default_dir(euid);
}

static void hash_field(struct moat_sha256_ctx *s, const void *data, size_t len)
{
	uint64_t n = len;
	moat_sha256_update(s, &n, sizeof n);
	moat_sha256_update(s, data, len);
}

void sc_cache_key(const uint8_t policy_sha[MOAT_SHA256_LEN], const struct sc_host *host,
		  const struct sc_compile_opts *opts, uint8_t key[MOAT_SHA256_LEN])
{
	struct moat_sha256_ctx s;
	moat_sha256_init(&s);
	/* v4: the policy and the compiler's sources enter as digests */
	hash_field(&s, "moat-seccomp-cache-v4", 21);
	hash_field(&s, MOAT_VERSION, strlen(MOAT_VERSION));
	const struct scmp_version *v = seccomp_version();
	uint32_t ver[3] = { v ? v->major : 0, v ? v->minor : 0, v ? v->micro : 0 };
	hash_field(&s, ver, sizeof ver);
	hash_field(&s, opts->compiler, MOAT_SHA256_LEN);
	hash_field(&s, &opts->optimize, sizeof opts->optimize);
	hash_field(&s, &host->scmp_arch, sizeof host->scmp_arch);
	hash_field(&s, host->release, strlen(host->release));
	hash_field(&s, policy_sha, MOAT_SHA256_LEN);
	moat_sha256_final(&s, key);
}

char *sc_cache_file_name(const uint8_t key[MOAT_SHA256_LEN])
{
	static const char hexdig[] = "0123456789abcdef";
	char *name = malloc(MOAT_SHA256_LEN * 2 + 5);
	if (!name)
		return NULL;
	for (size_t i = 0; i < MOAT_SHA256_LEN; i++) {
		name[2 * i] = hexdig[key[i] >> 4];
		name[2 * i + 1] = hexdig[key[i] & 15];
	}
	memcpy(name + 2 * MOAT_SHA256_LEN, ".bpf", 5);
	return name;
}

/* Our own directory, 0700: the only kind the cache trusts. */
static bool dir_trusted(int fd, uid_t euid)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == euid &&
	       (st.st_mode & 077) == 0;
}

static char *default_dir(uid_t euid)
{
	char *d = NULL;
	if (euid == 0)
		return strdup("/var/cache/moat/seccomp");
	const char *xdg = secure_getenv("XDG_CACHE_HOME");
	const char *home = secure_getenv("HOME");
	if (xdg && xdg[0] == '/') {
		if (asprintf(&d, "%s/moat/seccomp", xdg) < 0)
			return NULL;
	} else if (home && home[0] == '/') {
		if (asprintf(&d, "%s/.cache/moat/seccomp", home) < 0)
			return NULL;
	}
	return d;
}

char *moat_seccomp_cache_dir(void)
{
	return cache_dir(geteuid());
}

/* The cache directory fd, or -1 when there is no usable cache. */
static int open_dir(uid_t euid)
{
	char *dir = cache_dir(euid);
	if (!dir)
		return -1;
	if (dir[0] != '/' || strlen(dir) >= PATH_MAX) {
		free(dir);
		return -1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && moat_mkdirs(dir) == 0)
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	free(dir);
	if (fd >= 0 && !dir_trusted(fd, euid)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int sc_cache_load(const uint8_t key[MOAT_SHA256_LEN], struct moat_seccomp_prog **out)
{
	*out = NULL;
	uid_t euid = geteuid();
	int dfd = open_dir(euid);
	if (dfd < 0)
		return -1;
	char *name = sc_cache_file_name(key);
	int fd = name ? openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
	free(name);
	close(dfd);
	if (fd < 0)
		return -1;
	struct moat_seccomp_prog *prog = NULL;
	struct cache_hdr h;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != euid ||
	    st.st_size < (off_t)sizeof h ||
	    st.st_size > (off_t)(sizeof h + SC_MAX_INSNS * sizeof(struct sock_filter)) ||
	    (st.st_size - (off_t)sizeof h) % (off_t)sizeof(struct sock_filter) != 0)
		goto bad;
	/* header, body and one byte more in one call: the file must end exactly
	 * where fstat said (a short read, or one that gets the extra byte because
	 * the file grew, is a miss) */
	size_t body = (size_t)st.st_size - sizeof h;
	char extra;
	prog = calloc(1, sizeof *prog);
	if (!prog || !(prog->insns = malloc(body)))
		goto bad;
	struct iovec iov[3] = { { &h, sizeof h }, { prog->insns, body }, { &extra, 1 } };
	ssize_t got;
	do
		got = readv(fd, iov, 3);
	while (got < 0 && errno == EINTR);
	if (got != st.st_size || memcmp(h.magic, CACHE_MAGIC, 8) != 0 ||
	    memcmp(h.key, key, MOAT_SHA256_LEN) != 0 || h.n_insns == 0 ||
	    h.n_insns > SC_MAX_INSNS || (h.flags & ~CACHE_FLAG_LOG) != 0 ||
	    h.n_insns * sizeof(struct sock_filter) != body)
		goto bad;
	uint8_t sha[MOAT_SHA256_LEN];
	moat_sha256(prog->insns, body, sha);
	if (memcmp(sha, h.body_sha, MOAT_SHA256_LEN) != 0)
		goto bad;
	close(fd);
	prog->len = (unsigned short)h.n_insns;
	prog->log = (h.flags & CACHE_FLAG_LOG) != 0;
	*out = prog;
	return 0;
bad:
	moat_seccomp_prog_free(prog);
	close(fd);
	return -1;
}

/* Entries from other builds, kernels or policies are never loaded again, so
 * they would pile up: after each store (a miss, so rare), only the
 * SC_CACHE_KEEP most recently written entries are kept. A removed entry that
 * is still wanted is compiled again on its next use. */
static void prune(int dfd, const char *keep_name)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct entry {
		char name[MOAT_SHA256_LEN * 2 + 5];
		struct timespec mtime;
	} *e = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		struct stat st;
		if (len != MOAT_SHA256_LEN * 2 + 4 || strcmp(de->d_name + MOAT_SHA256_LEN * 2, ".bpf") ||
		    !strcmp(de->d_name, keep_name) ||
		    fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct entry *ne = nc <= 4096 ? realloc(e, nc * sizeof *e) : NULL;
			if (!ne)
				break;
			e = ne;
			cap = nc;
		}
		memcpy(e[n].name, de->d_name, len + 1);
		e[n].mtime = st.st_mtim;
		n++;
	}
	closedir(d);
	/* keep the SC_CACHE_KEEP - 1 newest others (plus the entry just stored) */
	while (n >= SC_CACHE_KEEP) {
		size_t old = 0;
		for (size_t i = 1; i < n; i++)
			if (e[i].mtime.tv_sec < e[old].mtime.tv_sec ||
			    (e[i].mtime.tv_sec == e[old].mtime.tv_sec &&
			     e[i].mtime.tv_nsec < e[old].mtime.tv_nsec))
				old = i;
		(void)unlinkat(dfd, e[old].name, 0);
		e[old] = e[--n];
	}
	free(e);
}

int sc_cache_store(const uint8_t key[MOAT_SHA256_LEN], const struct moat_seccomp_prog *prog)
{
	if (!prog || prog->len == 0 || prog->len > SC_MAX_INSNS)
		return -1;
	int dfd = open_dir(geteuid());
	if (dfd < 0)
		return -1;
	char *name = sc_cache_file_name(key);
	char *tmp = NULL;
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd)
		rnd ^= (uint64_t)getpid() << 20;
	if (!name || asprintf(&tmp, ".tmp-%d-%016llx", (int)getpid(),
			      (unsigned long long)rnd) < 0) {
		free(name);
		close(dfd);
		return -1;
	}
	int rc = -1;
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		goto out;
	struct cache_hdr h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, CACHE_MAGIC, 8);
	memcpy(h.key, key, MOAT_SHA256_LEN);
	size_t body = prog->len * sizeof(struct sock_filter);
	moat_sha256(prog->insns, body, h.body_sha);
	h.n_insns = prog->len;
	h.flags = prog->log ? CACHE_FLAG_LOG : 0;
	bool ok = moat_write_all(fd, &h, sizeof h) == 0 && moat_write_all(fd, prog->insns, body) == 0;
	if (close(fd) != 0)
		ok = false;
	if (ok && renameat(dfd, tmp, dfd, name) == 0) {
		rc = 0;
		prune(dfd, name);
	} else {
		unlinkat(dfd, tmp, 0);
	}
out:
	free(tmp);
	free(name);
	close(dfd);
	return rc;
}
