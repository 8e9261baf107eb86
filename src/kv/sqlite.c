/* The SQLite backend (docs/KV.md): one table keyed by (sid, key), WAL,
 * synchronous=FULL, every write one transaction committed before it
 * returns. libsqlite3 is loaded with dlopen the first time a store is
 * opened, so a run without kvEnabled does not map it.
 *
 * A full disk (docs/KV.md, "A full disk"): a write that would leave less
 * free space than the quota's min_free on the file's file system is
 * refused, deletes are not, so there is room to retire an id; a delete
 * that still finds no room is retried without SQLite's secure_delete
 * zeroing of the freed pages (Debian builds SQLite with it on, which
 * makes a delete write as much as it removes). The program's messages
 * never carry the file's path: that is the operator's (a->detail). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/sys.h"
#include "kv/internal.h"

/* ---- libsqlite3 through dlopen ---- */

static struct sq_fns {
	int (*open_v2)(const char *, sqlite3 **, int, const char *);
	int (*close_v2)(sqlite3 *);
	const char *(*errmsg)(sqlite3 *);
	int (*exec)(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *,
		    char **);
	int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
	int (*bind_blob)(sqlite3_stmt *, int, const void *, int, void (*)(void *));
	int (*bind_int64)(sqlite3_stmt *, int, sqlite3_int64);
	int (*step)(sqlite3_stmt *);
	int (*reset)(sqlite3_stmt *);
	int (*clear_bindings)(sqlite3_stmt *);
	const void *(*column_blob)(sqlite3_stmt *, int);
	int (*column_bytes)(sqlite3_stmt *, int);
	sqlite3_int64 (*column_int64)(sqlite3_stmt *, int);
	int (*finalize)(sqlite3_stmt *);
	int (*busy_timeout)(sqlite3 *, int);
	int (*changes)(sqlite3 *);
	int (*system_errno)(sqlite3 *);
} sq;

static struct moat_dl_once sq_once = MOAT_DL_ONCE_INIT;

static const struct moat_dl_sym sq_syms[] = {
#define S(f) { "sqlite3_" #f, offsetof(struct sq_fns, f) }
	S(open_v2), S(close_v2), S(errmsg), S(exec), S(prepare_v2), S(bind_blob),
	S(bind_int64), S(step), S(reset), S(clear_bindings), S(column_blob),
	S(column_bytes), S(column_int64), S(finalize), S(busy_timeout), S(changes),
	S(system_errno),
#undef S
};

static void sq_load(void)
{
	moat_dl_load(&sq_once, "libsqlite3.so.0", sq_syms, sizeof sq_syms / sizeof sq_syms[0], &sq,
		     sizeof sq, "libsqlite3.so.0 cannot be loaded (Debian package libsqlite3-0)",
		     "libsqlite3 lacks a function moat needs (3.24 or later is required)");
}

/* ---- the store ---- */


enum {
	Q_GET, Q_EXISTS, Q_KEYS, Q_DEL, Q_USAGE, Q_PUT, Q_CLEAR, Q_BEGIN, Q_COMMIT, Q_ROLLBACK,
	Q_FREELIST, Q__COUNT
};
static const char *const sql[Q__COUNT] = {
	[Q_GET] = "SELECT value FROM kv WHERE sid = ?1 AND key = ?2",
	[Q_EXISTS] = "SELECT 1 FROM kv WHERE sid = ?1 AND key = ?2",
	[Q_KEYS] = "SELECT key FROM kv WHERE sid = ?1 ORDER BY key",
	[Q_DEL] = "DELETE FROM kv WHERE sid = ?1 AND key = ?2",
	/* the id's keys and bytes without the key being written */
	[Q_USAGE] = "SELECT count(*), coalesce(sum(length(key) + length(value)), 0) FROM kv "
		    "WHERE sid = ?1 AND key <> ?2",
	[Q_PUT] = "INSERT INTO kv (sid, key, value) VALUES (?1, ?2, ?3) "
		  "ON CONFLICT (sid, key) DO UPDATE SET value = excluded.value",
	[Q_CLEAR] = "DELETE FROM kv WHERE sid = ?1",
	[Q_BEGIN] = "BEGIN IMMEDIATE",
	[Q_COMMIT] = "COMMIT",
	[Q_ROLLBACK] = "ROLLBACK",
	[Q_FREELIST] = "PRAGMA freelist_count",
};

struct sqlite_store {
	sqlite3 *db;
	sqlite3_stmt *q[Q__COUNT];
	char *path;
	int dirfd;          /* the file's directory (its file system's free space) */
	int64_t page_size;  /* bytes */
	int secure_delete;  /* the connection's default: 0, 1 or 2 (FAST) */
	/* the floor's last fstatvfs: free bytes then, less what this handle
	 * has written since (an estimate), and when (moat_mono_ms) */
	uint64_t est_free;
	int64_t est_at;
};

static void sqlite_close(void *h)
{
	struct sqlite_store *s = h;
	if (!s)
		return;
	for (int i = 0; i < Q__COUNT; i++)
		if (s->q[i])
			sq.finalize(s->q[i]);
	if (s->db)
		sq.close_v2(s->db);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->path);
	free(s);
}

static void reserve_keep(struct sqlite_store *s);
static bool reserve_release(struct sqlite_store *s);
static bool full(struct sqlite_store *s, int rc);

/* One integer a PRAGMA answers; fallback when it answers none. */
static int64_t pragma_int(sqlite3 *db, const char *text, int64_t fallback)
{
	sqlite3_stmt *st = NULL;
	int64_t v = fallback;
	if (sq.prepare_v2(db, text, -1, &st, NULL) == SQLITE_OK && sq.step(st) == SQLITE_ROW)
		v = sq.column_int64(st, 0);
	if (st)
		sq.finalize(st);
	return v;
}

/* The file must be ours, regular, and not writable by anyone else: its
 * rows are every sandbox's data. Created 0600 when missing. */
static int check_file(const char *path, struct moat_error *err)
{
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0)
		return moat_error_set(err, errno == ELOOP ? MOAT_ERR_CONFIG : MOAT_ERR_UNAVAILABLE,
				      errno, "key-value store %s: %s", path,
				      errno == ELOOP ? "is a symbolic link" : strerror(errno));
	struct stat st;
	int rc = fstat(fd, &st);
	int e = errno;
	close(fd);
	if (rc < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, e, "key-value store %s: %s", path,
				      strerror(e));
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "key-value store %s must be a regular file owned by uid %u "
				      "and writable by no one else", path, (unsigned)geteuid());
	return 0;
}

int kv_sqlite_open(const char *path, void **h, struct moat_error *err)
{
	const char *why;
	if (moat_dl_once(&sq_once, sq_load, &why) < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "key-value store: %s", why);
	if (path[0] != '/')
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "key-value store \"%s\": the path must be absolute", path);
	if (check_file(path, err) < 0)
		return -1;
	struct sqlite_store *s = calloc(1, sizeof *s);
	if (!s || !(s->path = strdup(path))) {
		free(s);
		return moat_error_oom(err);
	}
	/* the directory, not the file: closing an fd of the file would drop
	 * SQLite's POSIX locks on it */
	char *slash = strrchr(s->path, '/');
	*slash = '\0';
	s->dirfd = open(slash == s->path ? "/" : s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int derr = errno;
	*slash = '/';
	if (s->dirfd < 0) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, derr, "key-value store %s: its directory: %s",
			       path, strerror(derr));
		sqlite_close(s);
		return -1;
	}
	/* NOMUTEX: one store per run, used by one thread */
	int rc = sq.open_v2(path, &s->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc == SQLITE_OK)
		rc = sq.busy_timeout(s->db, (int)KV_OP_WAIT_MS);
	/* journal_mode first: the table is then created in WAL. Switching the
	 * mode, and reading the schema while another process recovers the WAL
	 * after a crash, can answer SQLITE_BUSY without calling the busy
	 * handler: such a start is retried, for as long as an operation may
	 * wait (a "database is locked" never reaches the caller early) */
	int64_t until = moat_mono_ms() + KV_OP_WAIT_MS;
	for (unsigned nap = 1; rc == SQLITE_OK;) {
		rc = sq.exec(s->db,
			     "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; "
			     "CREATE TABLE IF NOT EXISTS kv (sid BLOB NOT NULL, key BLOB NOT NULL, "
			     "value BLOB NOT NULL, PRIMARY KEY (sid, key)) WITHOUT ROWID;",
			     NULL, NULL, NULL);
		/* a full disk has no room for the WAL index (32 KiB) a connection
		 * needs: the reserve gives it, once (a delete may be what comes) */
		if (rc != SQLITE_OK && full(s, rc) && reserve_release(s)) {
			rc = SQLITE_OK;
			continue;
		}
		if (((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) ||
		    moat_mono_ms() >= until)
			break;
		usleep(nap * 1000);
		nap = nap < 32 ? nap * 2 : 32;
		rc = SQLITE_OK;
	}
	for (int i = 0; rc == SQLITE_OK && i < Q__COUNT; i++)
		rc = sq.prepare_v2(s->db, sql[i], -1, &s->q[i], NULL);
	if (rc != SQLITE_OK) {
		moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "key-value store %s: %s", path,
			       s->db ? sq.errmsg(s->db) : "cannot open");
		sqlite_close(s);
		return -1;
	}
	s->page_size = pragma_int(s->db, "PRAGMA page_size", 4096);
	s->secure_delete = (int)pragma_int(s->db, "PRAGMA secure_delete", 0);
	reserve_keep(s);
	*h = s;
	return 0;
}

/* A statement bound to (id, key), ready to step. */
static sqlite3_stmt *bound(struct sqlite_store *s, int which, const char *id, size_t idlen,
			   const char *key, size_t klen)
{
	sqlite3_stmt *st = s->q[which];
	sq.reset(st);
	sq.clear_bindings(st);
	sq.bind_blob(st, 1, id, (int)idlen, SQLITE_STATIC);
	if (key)
		sq.bind_blob(st, 2, klen ? key : "", (int)klen, SQLITE_STATIC);
	return st;
}

/* true when rc (or, for an I/O error, the system call behind it: the WAL
 * index grown by a write) says the disk is full */
static bool full(struct sqlite_store *s, int rc)
{
	int e = (rc & 0xff) == SQLITE_IOERR ? sq.system_errno(s->db) : 0;
	return (rc & 0xff) == SQLITE_FULL || e == ENOSPC || e == EDQUOT;
}

/* The operation failed with rc: the program is told what (the store is
 * full, or SQLite's own words, which name no file), the operator where. */
static int db_fail(struct sqlite_store *s, struct moat_kv_answer *a, int rc)
{
	if (full(s, rc))
		kv_fail(a, -1, MOAT_KV_KIND_FULL, KV_MSG_FULL);
	else
		kv_fail(a, -1, MOAT_KV_KIND_OTHER, "the store failed: %s", sq.errmsg(s->db));
	kv_detail(a, "sqlite store %s: %s", s->path, sq.errmsg(s->db));
	return -1;
}

/* Runs a statement that returns no row; resets it. */
static int run_done(struct sqlite_store *s, sqlite3_stmt *st, struct moat_kv_answer *a)
{
	int rc = sq.step(st);
	sq.reset(st);
	return rc == SQLITE_DONE ? 0 : db_fail(s, a, rc);
}

/* Bytes free on the store's file system for an unprivileged writer (root's
 * reserved blocks are not counted); UINT64_MAX when unknown. */
static uint64_t fs_free(struct sqlite_store *s)
{
	struct statvfs v;
	if (fstatvfs(s->dirfd, &v) < 0)
		return UINT64_MAX;
	return (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
}

/* The reserve: FILE.reserve beside the store, KV_RESERVE bytes allocated
 * while there is room, given back to the file system when a delete finds
 * none (another writer filled it, or no floor), so the delete can run. */
#define KV_RESERVE (1u << 20)

/* The reserve's fd (ours, a regular file, not a symlink), or -1. */
static int reserve_open(struct sqlite_store *s, bool create)
{
	const char *base = strrchr(s->path, '/') + 1;
	char *name = moat_format("%s.reserve", base);
	if (!name)
		return -1;
	int fd = openat(s->dirfd, name,
			O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | (create ? O_CREAT : 0), 0600);
	free(name);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Allocates the reserve when it is not, and the file system has room for
 * it twice over. Best effort: a store without one still works. */
static void reserve_keep(struct sqlite_store *s)
{
	int fd = reserve_open(s, true);
	struct stat st;
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && (st.st_size < (off_t)KV_RESERVE || st.st_blocks == 0) &&
	    fs_free(s) >= 2ull * KV_RESERVE && posix_fallocate(fd, 0, KV_RESERVE) != 0 &&
	    ftruncate(fd, 0) < 0) {
		/* a part allocated stays: it is reserve all the same */
	}
	close(fd);
}

/* Gives the reserve's space back; true when it held some. */
static bool reserve_release(struct sqlite_store *s)
{
	int fd = reserve_open(s, false);
	struct stat st;
	bool had = fd >= 0 && fstat(fd, &st) == 0 && st.st_blocks > 0 && ftruncate(fd, 0) == 0;
	if (fd >= 0)
		close(fd);
	return had;
}

/* A delete (or clear) statement bound and ready: run, and when the disk is
 * full, once more without zeroing the freed pages (secure_delete FAST),
 * which needs a few pages of room instead of as many as it frees; when
 * even that finds none, once more after giving the reserve back. */
static int run_delete(struct sqlite_store *s, sqlite3_stmt *st, struct moat_kv_answer *a,
		      bool *retried)
{
	int rc = sq.step(st);
	sq.reset(st);
	*retried = false;
	if (rc == SQLITE_DONE)
		return 0;
	if (!full(s, rc))
		return db_fail(s, a, rc);
	*retried = true;
	if (s->secure_delete != 2)
		sq.exec(s->db, "PRAGMA secure_delete = FAST", NULL, NULL, NULL);
	rc = sq.step(st);
	sq.reset(st);
	if (rc != SQLITE_DONE && full(s, rc) && reserve_release(s)) {
		rc = sq.step(st);
		sq.reset(st);
	}
	int failed = rc == SQLITE_DONE ? 0 : db_fail(s, a, rc); /* before the next exec */
	if (s->secure_delete != 2)
		sq.exec(s->db,
			s->secure_delete ? "PRAGMA secure_delete = 1" : "PRAGMA secure_delete = 0",
			NULL, NULL, NULL);
	return failed;
}

static int sqlite_get(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		      struct moat_kv_answer *a)
{
	struct sqlite_store *s = h;
	sqlite3_stmt *st = bound(s, Q_GET, id, idlen, key, klen);
	int rc = sq.step(st);
	if (rc == SQLITE_ROW) {
		const void *v = sq.column_blob(st, 0);
		moat_buf_append(&a->data, v ? v : "", (size_t)sq.column_bytes(st, 0));
	} else if (rc == SQLITE_DONE) {
		a->status = MOAT_KV_NOT_FOUND;
	} else {
		sq.reset(st);
		return db_fail(s, a, rc);
	}
	sq.reset(st);
	return 0;
}

static int sqlite_exists(void *h, const char *id, size_t idlen, const char *key, size_t klen,
			 struct moat_kv_answer *a)
{
	struct sqlite_store *s = h;
	sqlite3_stmt *st = bound(s, Q_EXISTS, id, idlen, key, klen);
	int rc = sq.step(st);
	sq.reset(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return db_fail(s, a, rc);
	a->exists = rc == SQLITE_ROW;
	return 0;
}

static int sqlite_keys(void *h, const char *id, size_t idlen, struct moat_kv_answer *a)
{
	struct sqlite_store *s = h;
	sqlite3_stmt *st = bound(s, Q_KEYS, id, idlen, NULL, 0);
	int rc;
	while ((rc = sq.step(st)) == SQLITE_ROW) {
		const void *k = sq.column_blob(st, 0);
		kv_put_item(&a->data, k ? k : "", (size_t)sq.column_bytes(st, 0));
	}
	sq.reset(st);
	return rc == SQLITE_DONE ? 0 : db_fail(s, a, rc);
}

static int sqlite_del(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		      struct moat_kv_answer *a)
{
	struct sqlite_store *s = h;
	bool retried;
	return run_delete(s, bound(s, Q_DEL, id, idlen, key, klen), a, &retried);
}

/* Retiring an id. When the file system is short of room (the delete had to
 * be retried, or less than the default floor is left), the WAL is then
 * checkpointed into the database and truncated: its space goes back to the
 * file system, and the freed pages are what the next writes reuse. */
static int sqlite_clear(void *h, const char *id, size_t idlen, uint64_t *removed,
			struct moat_kv_answer *a)
{
	struct sqlite_store *s = h;
	bool retried;
	if (run_delete(s, bound(s, Q_CLEAR, id, idlen, NULL, 0), a, &retried) < 0)
		return -1;
	*removed = (uint64_t)sq.changes(s->db);
	if (retried || fs_free(s) < MOAT_KV_DEFAULT_MIN_FREE) {
		(void)sq.exec(s->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
		reserve_keep(s); /* again, when that made room */
	}
	return 0;
}

/* The free-space floor (in the write's transaction): true when this write
 * may go on. It needs its bytes twice (the WAL's frame and the database
 * page the checkpoint copies it to); pages on SQLite's free list count as
 * room, as the write reuses them (read only when the file system alone
 * is short). */
static bool floor_ok(struct sqlite_store *s, uint64_t need, uint64_t min_free, uint64_t *avail)
{
	*avail = UINT64_MAX;
	if (!min_free)
		return true;
	if (min_free > UINT64_MAX / 8) /* no overflow below; still above any disk */
		min_free = UINT64_MAX / 8;
	/* far above the floor (twice it, after this write), the last figure
	 * serves for a second: fstatvfs is 1-6 us (docs/KV.md), a set 50 */
	int64_t now = moat_mono_ms();
	if (s->est_at && now - s->est_at < 1000 && s->est_free >= 2 * (min_free + 2 * need)) {
		s->est_free -= 2 * need;
		*avail = s->est_free;
		return true;
	}
	uint64_t fs = fs_free(s);
	*avail = fs;
	s->est_free = fs;
	s->est_at = now;
	if (fs == UINT64_MAX || fs >= min_free + 2 * need) {
		if (fs != UINT64_MAX)
			s->est_free -= 2 * need;
		return true;
	}
	sqlite3_stmt *st = s->q[Q_FREELIST];
	int64_t pages = sq.step(st) == SQLITE_ROW ? sq.column_int64(st, 0) : 0;
	sq.reset(st);
	if (pages > 0)
		*avail = fs + (uint64_t)pages * (uint64_t)s->page_size;
	return *avail >= min_free + 2 * need;
}

/* Quota check and write in one IMMEDIATE transaction: a concurrent writer of
 * the same id waits for it, and a refused write leaves nothing behind. */
static int sqlite_set(void *h, const char *id, size_t idlen, const char *key, size_t klen,
		      const char *val, size_t vlen, const struct moat_kv_quota *q,
		      struct moat_kv_answer *a)
{
	struct sqlite_store *s = h;
	if (run_done(s, s->q[Q_BEGIN], a) < 0)
		return -1;
	int failed = 0;
	sqlite3_stmt *st = s->q[Q_FREELIST];
	uint64_t avail;
	if (!floor_ok(s, klen + vlen, q->min_free, &avail)) {
		kv_fail(a, 0, MOAT_KV_KIND_FULL, KV_MSG_FULL);
		kv_detail(a, "sqlite store %s: a write of %zu bytes refused: %llu bytes free on its "
			  "file system (with SQLite's free pages), the floor is %llu (--kv-quota "
			  "free=N)", s->path, klen + vlen, (unsigned long long)avail,
			  (unsigned long long)q->min_free);
		goto rollback;
	}
	st = bound(s, Q_USAGE, id, idlen, key, klen);
	int rc = sq.step(st);
	if (rc != SQLITE_ROW) {
		failed = db_fail(s, a, rc);
		goto rollback;
	}
	uint64_t keys = (uint64_t)sq.column_int64(st, 0), bytes = (uint64_t)sq.column_int64(st, 1);
	sq.reset(st);
	if (keys + 1 > q->max_keys) {
		kv_fail(a, 0, MOAT_KV_KIND_FULL, "quota: at most %llu keys per sandbox",
			(unsigned long long)q->max_keys);
		goto rollback;
	}
	if (bytes + klen + vlen > q->max_bytes) {
		kv_fail(a, 0, MOAT_KV_KIND_FULL,
			"quota: at most %llu bytes of keys and values per sandbox (%llu in use, "
			"this write needs %zu)", (unsigned long long)q->max_bytes,
			(unsigned long long)bytes, klen + vlen);
		goto rollback;
	}
	st = bound(s, Q_PUT, id, idlen, key, klen);
	sq.bind_blob(st, 3, vlen ? val : "", (int)vlen, SQLITE_STATIC);
	if ((failed = run_done(s, st, a)) < 0 || (failed = run_done(s, s->q[Q_COMMIT], a)) < 0)
		goto rollback;
	return 0;
rollback:
	sq.reset(st);
	struct moat_kv_answer ignored = { 0 };
	(void)run_done(s, s->q[Q_ROLLBACK], &ignored);
	moat_kv_answer_reset(&ignored);
	return failed;
}

static void sqlite_set_timeout(void *h, unsigned ms)
{
	struct sqlite_store *s = h;
	sq.busy_timeout(s->db, ms ? (int)ms : 1);
}

const struct kv_backend kv_sqlite_backend = {
	.set_timeout = sqlite_set_timeout,
	.name = "sqlite",
	.get = sqlite_get,
	.set = sqlite_set,
	.del = sqlite_del,
	.exists = sqlite_exists,
	.keys = sqlite_keys,
	.clear = sqlite_clear,
	.close = sqlite_close,
};
