/* The Python zygote of moat serve's pool (docs/design/pool-zygote.md): one
 * sandbox whose program is runtime/python/moat_zygote.py with
 * moat-zygote.so, an initialised interpreter that clones each Python
 * request's sandbox (a cold run's, mount for mount) and never reads a byte
 * of a request. The pool's thread starts it, restarts it when it died and
 * releases it (its pid 1's parent-death signal follows that thread); the
 * workers hand it runs over its control socket, one at a time. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/sys.h"
#include "pool/internal.h"

MOAT_DEFINE_AUTO(pool_zygote, pool_zygote_free)

/* How long a worker waits for the zygote's answer (a clone and an id map
 * take a few ms; a zygote that does not answer in this time is dead). */
#define ZYGOTE_ANSWER_MS 10000
#define ZYGOTE_RUNTIME "/opt/moat/runtime"
#define ZYGOTE_SO "moat-zygote.so"

struct pool_zygote {
	pthread_mutex_t mu;        /* the control socket, one exchange at a time */
	int ctl;                   /* moat serve's end; -1: no zygote */
	bool dead;                 /* the zygote failed an exchange: to be replaced */
	struct moat_sandbox *sb;   /* its own sandbox (the pool's thread's) */
	struct moat_request *boot; /* its program */
	struct moat_run_options opts;
	uint64_t started, children, failed;
	int64_t born; /* when the running one started (moat_mono_ms) */
	/* the running one's children so far, and the most it makes (0: no
	 * bound); spent: it made them all (no more: pool_zygote_up is false
	 * until it is replaced) */
	uint64_t made;
	unsigned max_children;
	bool spent;
	/* replacements by reason (pool_zygote_rotate) */
	uint64_t replaced[POOL_ZYGOTE_REASONS];
	/* the one before it, replaced (pool_zygote_rotate): alive until its
	 * last child is done, then released (pool_zygote_release_old) */
	struct moat_sandbox *old_sb;
	int old_ctl;
	int64_t old_born;
	/* MOAT_TEST_ZYGOTE_REFUSE=1 (tests only): every record goes with a
	 * wrong first byte, so the zygote refuses each sandbox as it would
	 * one it cannot make (serve/zygote_that_cannot_make_sandboxes) */
	bool test_refuse;
};

/* moat-zygote.so: beside the moat binary (a build tree), else in
 * ../lib/moat/ from it (make install, the Debian package). malloc'd bytes,
 * or NULL. */
static char *read_so(size_t *len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	const char *cands[2] = { NULL, NULL };
	char beside[PATH_MAX + 32], libdir[PATH_MAX + 32];
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(beside, sizeof beside, "%s/" ZYGOTE_SO, exe);
			snprintf(libdir, sizeof libdir, "%s/../lib/moat/" ZYGOTE_SO, exe);
			cands[0] = beside;
			cands[1] = libdir;
		}
	}
	for (int i = 0; i < 2; i++) {
		if (!cands[i])
			continue;
		int fd = open(cands[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct stat st;
		char *buf = NULL;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
		    st.st_size < 64 * 1024 * 1024 && (buf = malloc((size_t)st.st_size))) {
			size_t got = 0;
			while (got < (size_t)st.st_size) {
				ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0)
					break;
				got += (size_t)r;
			}
			if (got != (size_t)st.st_size) {
				free(buf);
				buf = NULL;
			}
			*len = got;
		}
		close(fd);
		if (buf)
			return buf;
	}
	return NULL;
}

const char *pool_zygote_refusal(const struct moat_run_options *opts)
{
	return opts->rootfs_dir    ? "a rootfs is set"
	       : opts->policy_path ? "a policy is set"
	       : !opts->runtime_dir ? "no runtime shims"
				    : NULL;
}

int pool_zygote_new(struct pool_zygote **out, const struct moat_run_options *opts,
		     unsigned max_children, struct moat_error *err)
{
	*out = NULL;
	const char *why = pool_zygote_refusal(opts);
	if (why)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the Python zygote needs the runtime shims, the host's root "
				      "and the default seccomp policy (%s)", why);
	MOAT_AUTO(pool_zygote) struct pool_zygote *z = calloc(1, sizeof *z);
	if (!z)
		return moat_error_oom(err);
	pthread_mutex_init(&z->mu, NULL);
	z->ctl = -1;
	z->old_ctl = -1;
	z->opts = *opts;
	z->max_children = max_children;
	const char *refuse = getenv("MOAT_TEST_ZYGOTE_REFUSE");
	z->test_refuse = refuse && !strcmp(refuse, "1");
	struct moat_request *b = z->boot = moat_request_new();
	if (!b)
		return moat_error_oom(err);
	size_t so_len = 0;
	MOAT_AUTOFREE char *so = read_so(&so_len);
	if (!so)
		return moat_error_set(err, MOAT_ERR_CONFIG, ENOENT,
				      "no " ZYGOTE_SO " beside the moat binary or in ../lib/moat/ "
				      "from it");
	char tmpfs[24];
	snprintf(tmpfs, sizeof tmpfs, "%llu", (unsigned long long)opts->tmpfs_bytes);
	b->language = MOAT_LANG_PYTHON;
	if (asprintf(&b->code,
		     "import sys\n"
		     "sys.argv = ['" ZYGOTE_RUNTIME "/python/moat_zygote.py', '/sandbox/" ZYGOTE_SO
		     "', '{\"language\":\"python\",\"code\":\"pass\"}', '%s', '" ZYGOTE_RUNTIME
		     "', '4', 'own-tree']\n" /* zygote_fd becomes the program's fd 4 */
		     "sys.path[0] = '" ZYGOTE_RUNTIME "/python'\n"
		     "exec(compile(open(sys.argv[0], 'rb').read(), sys.argv[0], 'exec'))\n",
		     tmpfs) < 0) {
		b->code = NULL;
		return moat_error_oom(err);
	}
	b->code_len = strlen(b->code);
	if (!(b->files = calloc(1, sizeof *b->files)) || !(b->files[0].key = strdup(ZYGOTE_SO)))
		return moat_error_oom(err);
	b->files[0].value = MOAT_TAKE(so);
	b->files[0].value_len = so_len;
	b->files_count = 1;
	*out = MOAT_TAKE(z);
	return 0;
}

/* It runs and takes records (under z->mu). */
static bool running(const struct pool_zygote *z)
{
	return z->ctl >= 0 && !z->dead;
}

/* It runs and may make another child (under z->mu). */
static bool usable(const struct pool_zygote *z)
{
	return running(z) && !z->spent;
}

bool pool_zygote_wanted(struct pool_zygote *z)
{
	if (!z)
		return false;
	pthread_mutex_lock(&z->mu);
	bool want = !running(z);
	pthread_mutex_unlock(&z->mu);
	return want;
}

bool pool_zygote_up(struct pool_zygote *z)
{
	if (!z)
		return false;
	pthread_mutex_lock(&z->mu);
	bool up = usable(z);
	pthread_mutex_unlock(&z->mu);
	return up;
}

bool pool_zygote_spent(struct pool_zygote *z)
{
	if (!z)
		return false;
	pthread_mutex_lock(&z->mu);
	bool spent = running(z) && z->spent;
	pthread_mutex_unlock(&z->mu);
	return spent;
}

enum pool_zygote_reason pool_zygote_due(struct pool_zygote *z, int64_t max_age_ms)
{
	if (!z)
		return POOL_ZYGOTE_NOT_DUE;
	pthread_mutex_lock(&z->mu);
	enum pool_zygote_reason why = POOL_ZYGOTE_NOT_DUE;
	if (running(z) && z->spent)
		why = POOL_ZYGOTE_CHILDREN;
	else if (running(z) && moat_mono_ms() - z->born >= max_age_ms)
		why = POOL_ZYGOTE_AGE;
	pthread_mutex_unlock(&z->mu);
	return why;
}

int64_t pool_zygote_old_age_ms(struct pool_zygote *z)
{
	if (!z)
		return -1;
	pthread_mutex_lock(&z->mu);
	int64_t age = z->old_sb ? moat_mono_ms() - z->old_born : -1;
	pthread_mutex_unlock(&z->mu);
	return age;
}

void pool_zygote_condemn(struct pool_zygote *z)
{
	if (!z)
		return;
	pthread_mutex_lock(&z->mu);
	if (z->ctl >= 0)
		z->dead = true;
	pthread_mutex_unlock(&z->mu);
}

void pool_zygote_release_old(struct pool_zygote *z)
{
	if (!z)
		return;
	pthread_mutex_lock(&z->mu);
	int ctl = z->old_ctl;
	struct moat_sandbox *sb = z->old_sb;
	z->old_ctl = -1;
	z->old_sb = NULL;
	pthread_mutex_unlock(&z->mu);
	if (ctl >= 0)
		close(ctl);
	moat_sandbox_release(sb);
}

/* The zygote that was (dead or not), gone: its sandbox released (every
 * child it cloned dies with it: their parent-death signal). Under no lock;
 * the pool's thread only. */
static void drop(struct pool_zygote *z)
{
	pthread_mutex_lock(&z->mu);
	int ctl = z->ctl;
	struct moat_sandbox *sb = z->sb;
	z->ctl = -1;
	z->sb = NULL;
	z->dead = false;
	pthread_mutex_unlock(&z->mu);
	if (ctl >= 0)
		close(ctl); /* the zygote ends at EOF */
	moat_sandbox_release(sb);
}

/* A new zygote's sandbox and the service's end of its control socket. */
static int spawn(struct pool_zygote *z, struct moat_sandbox **out, int *ctl,
		 struct moat_error *err)
{
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "socketpair: %s",
				      strerror(errno));
	struct moat_run_options o = z->opts;
	o.cancel_fd = o.hangup_fd = -1;
	o.on_output = NULL;
	struct moat_sandbox *sb = NULL;
	int rc = run_sandbox_start_zygote(z->boot, &o, sp[1], &sb, err);
	close(sp[1]);
	if (rc < 0) {
		close(sp[0]);
		return -1;
	}
	*out = sb;
	*ctl = sp[0];
	return 0;
}

/* sb and ctl become the running zygote (under z->mu). */
static void install(struct pool_zygote *z, struct moat_sandbox *sb, int ctl)
{
	z->sb = sb;
	z->ctl = ctl;
	z->dead = false;
	z->spent = false;
	z->made = 0;
	z->started++;
	z->born = moat_mono_ms();
}

int pool_zygote_start(struct pool_zygote *z, struct moat_error *err)
{
	drop(z); /* a dead one first */
	struct moat_sandbox *sb;
	int ctl;
	if (spawn(z, &sb, &ctl, err) < 0)
		return -1;
	pthread_mutex_lock(&z->mu);
	install(z, sb, ctl);
	pthread_mutex_unlock(&z->mu);
	return 0;
}

uint64_t pool_zygote_rotate(struct pool_zygote *z, enum pool_zygote_reason why,
			     struct moat_error *err)
{
	pthread_mutex_lock(&z->mu);
	bool can = running(z) && !z->old_sb;
	pthread_mutex_unlock(&z->mu);
	if (!can) {
		moat_error_set(err, MOAT_ERR_CONFIG, 0, "no Python zygote to replace");
		return 0;
	}
	struct moat_sandbox *sb;
	int ctl;
	if (spawn(z, &sb, &ctl, err) < 0)
		return 0;
	pthread_mutex_lock(&z->mu);
	uint64_t gen = z->started;
	z->old_sb = z->sb;
	z->old_ctl = z->ctl;
	z->old_born = z->born;
	install(z, sb, ctl);
	if (why > POOL_ZYGOTE_NOT_DUE && why < POOL_ZYGOTE_REASONS)
		z->replaced[why]++;
	pthread_mutex_unlock(&z->mu);
	return gen;
}

void pool_zygote_free(struct pool_zygote *z)
{
	if (!z)
		return;
	drop(z);
	pool_zygote_release_old(z);
	moat_request_free(z->boot);
	pthread_mutex_destroy(&z->mu);
	free(z);
}

/* make_pid1 of pool_create_adopted: one exchange on the control
 * socket, under the lock. A zygote that fails it is dead from then on. */
struct exchange {
	struct pool_zygote *z;
	uint64_t gen; /* the zygote that made the child (its z->started) */
};

static int make_pid1(void *ctx, const int *fds, size_t nfds, const void *record,
		     size_t record_len, int *pidfd, struct moat_error *err)
{
	struct exchange *x = ctx;
	struct pool_zygote *z = x->z;
	pthread_mutex_lock(&z->mu);
	if (z->ctl < 0 || z->dead) {
		pthread_mutex_unlock(&z->mu);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "no Python zygote");
	}
	if (z->spent) {
		/* its bound: it makes no more, whatever asks (the request runs
		 * in another sandbox; the pool's thread replaces it) */
		pthread_mutex_unlock(&z->mu);
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0,
				      "the Python zygote has made its last child");
	}
	char reply[32], bad[1] = { 'x' };
	size_t got_fds = 0;
	ssize_t n = -1;
	int e = 0;
	if (moat_send_fds(z->ctl, z->test_refuse ? bad : record, z->test_refuse ? 1 : record_len,
			  fds, nfds) < 0) {
		e = errno;
	} else {
		struct pollfd pf = { .fd = z->ctl, .events = POLLIN };
		int p;
		do
			p = poll(&pf, 1, ZYGOTE_ANSWER_MS);
		while (p < 0 && errno == EINTR);
		if (p <= 0)
			e = p == 0 ? ETIMEDOUT : errno;
		else if ((n = moat_recv_fds(z->ctl, reply, sizeof reply - 1, pidfd, 1, &got_fds,
					    MSG_DONTWAIT)) < 0)
			e = errno;
	}
	int rc = 0;
	if (n > 0 && reply[0] == 'p' && got_fds == 1) {
		z->children++;
		x->gen = z->started;
		if (z->max_children && ++z->made >= z->max_children)
			z->spent = true;
	} else {
		if (got_fds == 1) {
			close(*pidfd);
			*pidfd = -1;
		}
		z->failed++;
		/* an "e<errno>" answer leaves the zygote usable; anything else
		 * (EOF, a timeout, garbage) does not */
		bool refused = n > 1 && reply[0] == 'e';
		if (!refused)
			z->dead = true;
		reply[n > 0 ? n : 0] = '\0';
		rc = moat_error_set(err, MOAT_ERR_UNAVAILABLE, e,
				    refused ? "the Python zygote could not make the sandbox (errno %s)"
					    : "the Python zygote did not answer (%s)",
				    refused ? reply + 1 : e ? strerror(e) : "it ended");
	}
	pthread_mutex_unlock(&z->mu);
	return rc;
}

int pool_zygote_create(struct pool_zygote *z, const struct moat_request *req,
		       const struct moat_run_options *opts, enum run_adopt_start start,
		       struct moat_sandbox **out, uint64_t *gen, struct moat_error *err)
{
	struct exchange x = { z, 0 };
	int rc = pool_create_adopted(req, opts, make_pid1, &x, start, out, err);
	if (gen)
		*gen = rc == 0 ? x.gen : 0;
	return rc;
}

void pool_zygote_render(struct pool_zygote *z, struct moat_buf *b)
{
	if (!z)
		return;
	pthread_mutex_lock(&z->mu);
	moat_buf_appendf(b,
			 "# HELP moat_pool_zygote_up The Python zygote is running.\n"
			 "# TYPE moat_pool_zygote_up gauge\nmoat_pool_zygote_up %d\n"
			 "# HELP moat_pool_zygote_starts_total Python zygotes started.\n"
			 "# TYPE moat_pool_zygote_starts_total counter\n"
			 "moat_pool_zygote_starts_total %llu\n"
			 "# HELP moat_pool_zygote_children_total Sandboxes the Python zygote made "
			 "(each for one request).\n"
			 "# TYPE moat_pool_zygote_children_total counter\n"
			 "moat_pool_zygote_children_total %llu\n"
			 "# HELP moat_pool_zygote_failed_total Requests the Python zygote could "
			 "not take (they ran without it).\n"
			 "# TYPE moat_pool_zygote_failed_total counter\n"
			 "moat_pool_zygote_failed_total %llu\n"
			 "# HELP moat_pool_zygote_memory_bytes Memory of the Python zygote's own "
			 "sandbox (its cgroup; its children share its pages); -1: unknown.\n"
			 "# TYPE moat_pool_zygote_memory_bytes gauge\n"
			 "moat_pool_zygote_memory_bytes %lld\n"
			 "# HELP moat_pool_zygote_replaced_total Python zygotes replaced, by reason "
			 "(age: --pool-zygote-max-age; children: --pool-zygote-max-children).\n"
			 "# TYPE moat_pool_zygote_replaced_total counter\n"
			 "moat_pool_zygote_replaced_total{reason=\"age\"} %llu\n"
			 "moat_pool_zygote_replaced_total{reason=\"children\"} %llu\n",
			 running(z), (unsigned long long)z->started,
			 (unsigned long long)z->children, (unsigned long long)z->failed,
			 (long long)(z->sb ? run_sandbox_memory(z->sb) : -1),
			 (unsigned long long)z->replaced[POOL_ZYGOTE_AGE],
			 (unsigned long long)z->replaced[POOL_ZYGOTE_CHILDREN]);
	pthread_mutex_unlock(&z->mu);
}
