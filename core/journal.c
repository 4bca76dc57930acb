/*
 * journal.c: the cursor journal (see journal.h). SQLite in WAL mode, EXCLUSIVE locking,
 * one connection per struct journal, a mutex around every entry point.
 *
 * The hot path is journal_claim(): one prepared UPDATE of one cursor row in autocommit
 * mode, i.e. one WAL frame per claim; no per-claim history row (the cursor says all
 * there is to say about claims: every position below it was handed out).
 */
#include "journal.h"
#include "parse.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "zephon_config.h"

/* schema/journal.sql, embedded by schema/embed.py. */
extern const char schema_journal_sql[];

/*
 * Migration steps: journal_migrations[k] takes a database at user_version k to k + 1.
 * A new journal runs every step from 0. To change the schema: append a step (ALTER ...,
 * data conversion), bump JOURNAL_SCHEMA_VERSION; never edit a released step.
 */
static const char *const journal_migrations[] = {
	schema_journal_sql, /* 0 -> 1: the first schema */
};
_Static_assert(sizeof(journal_migrations) / sizeof(journal_migrations[0]) ==
	       JOURNAL_SCHEMA_VERSION, "one migration step per schema version");

/* busy_timeout: a live mount holds the lock for its whole life, so waiting longer only
 * delays the refusal; a little absorbs a `journal show` that is just finishing. */
#define JOURNAL_BUSY_MS 100
/* WAL size after a checkpoint is truncated back to this (the file size a long run keeps). */
#define JOURNAL_WAL_LIMIT (1 << 20)

struct rank_pos {
	uint64_t step;
	uint64_t micro;
};

struct journal {
	pthread_mutex_t mu;
	sqlite3 *db;
	char *path;
	char *wal_cleanup;          /* readers: a -wal this open created, removed at close */
	int readonly;
	struct journal_ident ident;
	int64_t next_seq;           /* seq of the next history row */
	sqlite3_stmt *st_claim;     /* UPDATE cursor ... (the hot path) */
	/* The current layout (journal_start on this handle); cur.id == 0: none. */
	struct journal_layout cur;
	size_t nranks;
	uint64_t *ranks;            /* sorted */
	struct rank_pos *pos;       /* committed cursor of ranks[i] */
	uint64_t reached;           /* step/ files read by this mount: the last one's t + 1;
				     * atomic, not under mu: a step/ read must not wait for a
				     * commit (the journal's file system may stall) */
	int64_t moved_checked;      /* CLOCK_MONOTONIC_COARSE ns of check_unmoved's last stat */
	int moved;                  /* it found the path naming another file, or none */
	int file_known;             /* file_dev, file_ino: the database file at open */
	dev_t file_dev;
	ino_t file_ino;
	int moved_known;            /* moved_point was computed from the history */
	struct journal_point moved_point; /* resume=auto's point when moved was found */
	char err[512];              /* room for a path and the remedy after it */
};

/* ---- the one boundary between SQLite result codes and errno ---- */

static int sql_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
	case SQLITE_FORMAT:
	case SQLITE_SCHEMA:
	case SQLITE_MISMATCH:
	case SQLITE_EMPTY:
		return -EBADMSG;
	case SQLITE_CONSTRAINT:
	case SQLITE_RANGE:
	case SQLITE_TOOBIG:
		return -EINVAL;
	default: /* SQLITE_IOERR and everything unexpected */
		return -EIO;
	}
}

/* ---- small helpers ---- */

/* Unix microseconds for history rows, strictly increasing within the process, so the
 * rows of several journals written by one process keep their order across journals. */
static int64_t now_us(void)
{
	static int64_t last;
	struct timespec ts;
	int64_t t, prev;

	clock_gettime(CLOCK_REALTIME, &ts);
	t = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	prev = __atomic_load_n(&last, __ATOMIC_RELAXED);
	do {
		if (t <= prev)
			t = prev + 1;
	} while (!__atomic_compare_exchange_n(&last, &prev, t, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return t;
}

/* snprintf through a wrapper: the texts built here are truncated on purpose when long. */
__attribute__((format(printf, 3, 4)))
static void fmt(char *dst, size_t len, const char *f, ...)
{
	va_list ap;

	if (!len)
		return;
	va_start(ap, f);
	vsnprintf(dst, len, f, ap);
	va_end(ap);
}

static void copy_str(char *dst, size_t len, const char *src)
{
	fmt(dst, len, "%s", src ? src : "");
}

__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Record the reason of a failing call in j->err (caller holds j->mu). */
__attribute__((format(printf, 3, 4)))
static int jfail(struct journal *j, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->err, sizeof(j->err), fmt, ap);
	va_end(ap);
	return rc;
}

/* A failed SQLite call on j's connection: keep its message, undo an open transaction,
 * return the translated errno. */
static int jfail_sql(struct journal *j, int rc, const char *what)
{
	int e = sql_errno(rc);

	snprintf(j->err, sizeof(j->err), "journal %s: %s: %s", j->path, what,
		 sqlite3_errmsg(j->db));
	if (!sqlite3_get_autocommit(j->db))
		sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
	return e ? e : -EIO;
}

static int exec_sql(sqlite3 *db, const char *sql)
{
	return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* One integer from a one-row query; rc of SQLite. */
static int query_i64(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_EMPTY;
	}
	sqlite3_finalize(st);
	return rc;
}

static int u64_col(sqlite3_stmt *st, int col, uint64_t *out)
{
	int64_t v = sqlite3_column_int64(st, col);

	if (v < 0)
		return -EBADMSG;
	*out = (uint64_t)v;
	return 0;
}

/* ---- resume rules ---- */

/* A decimal (parse_u64) below 2^62: gsns, steps, sample counts. */
static int parse_u62(const char *s, uint64_t *out)
{
	uint64_t v;

	if (parse_u64(s, &v) || v >= ORDER_MAX_GSN)
		return -EINVAL;
	*out = v;
	return 0;
}

int journal_resume_parse(const char *s, struct journal_resume *out)
{
	struct journal_resume r = { .rule = RESUME_AUTO };
	char *at;

	if (!s)
		return -EINVAL;
	if (!strcmp(s, "auto"))
		r.rule = RESUME_AUTO;
	else if (!strcmp(s, "fresh"))
		r.rule = RESUME_FRESH;
	else if (!strncmp(s, "samples:", 8)) {
		char g[32];

		r.rule = RESUME_SAMPLES;
		at = strchr(s + 8, '@');
		if (at) {
			if ((size_t)(at - (s + 8)) >= sizeof(g) || parse_u62(at + 1, &r.step))
				return -EINVAL;
			memcpy(g, s + 8, (size_t)(at - (s + 8)));
			g[at - (s + 8)] = 0;
			r.has_step = 1;
		} else {
			snprintf(g, sizeof(g), "%.31s", s + 8);
			if (strlen(s + 8) >= sizeof(g))
				return -EINVAL;
		}
		if (parse_u62(g, &r.value))
			return -EINVAL;
	} else if (!strncmp(s, "step:", 5)) {
		r.rule = RESUME_STEP;
		if (parse_u62(s + 5, &r.value))
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	*out = r;
	return 0;
}

void journal_resume_format(const struct journal_resume *r, char *out, size_t len)
{
	if (!len)
		return;
	switch (r->rule) {
	case RESUME_FRESH:
		snprintf(out, len, "fresh");
		break;
	case RESUME_SAMPLES:
		if (r->has_step)
			snprintf(out, len, "samples:%" PRIu64 "@%" PRIu64, r->value, r->step);
		else
			snprintf(out, len, "samples:%" PRIu64, r->value);
		break;
	case RESUME_STEP:
		snprintf(out, len, "step:%" PRIu64, r->value);
		break;
	default:
		snprintf(out, len, "auto");
		break;
	}
}

/* ---- opening ---- */

/* What the first 100 bytes say (https://www.sqlite.org/fileformat2.html#database_header):
 * magic at 0, user_version at 60, application_id at 68, both big-endian. Reading them
 * ourselves lets a foreign file be refused before SQLite touches it (SQLite would roll
 * back a hot journal or checkpoint a WAL into someone else's database). */
static int check_header(const char *path, char *err, size_t errlen)
{
	static const char magic[16] = "SQLite format 3";
	unsigned char h[100];
	uint32_t app;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return fail(err, errlen, -errno, "cannot read journal %s: %s", path, strerror(errno));
	n = pread(fd, h, sizeof(h), 0);
	close(fd);
	if (n < 0)
		return fail(err, errlen, -EIO, "cannot read journal %s: %s", path, strerror(errno));
	if (n < (ssize_t)sizeof(h) || memcmp(h, magic, sizeof(magic)))
		return fail(err, errlen, -EBADMSG,
			    "%s is not a Zephon journal (not a SQLite database, or truncated); "
			    "nothing was written to it: pass another journal=PATH", path);
	app = (uint32_t)h[68] << 24 | (uint32_t)h[69] << 16 | (uint32_t)h[70] << 8 | h[71];
	if (app != JOURNAL_APPLICATION_ID)
		return fail(err, errlen, -EBADMSG,
			    "%s is a SQLite database but not a Zephon journal (application_id "
			    "0x%08" PRIx32 "); nothing was written to it: pass another journal=PATH",
			    path, app);
	return 0;
}

static char *side_path(const char *path, const char *suffix)
{
	size_t n = strlen(path), s = strlen(suffix);
	char *p = malloc(n + s + 1);

	if (p) {
		memcpy(p, path, n);
		memcpy(p + n, suffix, s + 1);
	}
	return p;
}

static int file_exists(const char *path)
{
	struct stat st;

	return path && !stat(path, &st);
}

/* Remove a side file (-wal, -journal) that this open created and left empty. */
static void drop_empty_side(const char *path, int existed)
{
	struct stat st;

	if (path && !existed && !stat(path, &st) && st.st_size == 0)
		unlink(path);
}

static int dir_writable(const char *path, char *err, size_t errlen)
{
	char *dir = strdup(path), *slash;
	int rc = 0;

	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	if (access(dir, W_OK))
		rc = fail(err, errlen, -errno,
			  "cannot write journal %s: its directory %s is not writable (%s); "
			  "pass journal=PATH in a writable directory", path, dir, strerror(errno));
	free(dir);
	return rc;
}

/* An existing file SQLite cannot read as a journal: busy, out of memory, or bad. */
static int bad_file(sqlite3 *db, int src, const char *path, char *err, size_t errlen)
{
	int e = sql_errno(src);

	if (e == -EBUSY)
		return fail(err, errlen, -EBUSY, "journal %s is in use by another process (a "
			    "running mount holds it): read that mount's /status, or unmount it "
			    "first; two mounts need two journal=PATHs", path);
	if (e == -ENOMEM)
		return fail(err, errlen, -ENOMEM, "out of memory reading journal %s", path);
	return fail(err, errlen, -EBADMSG, "journal %s cannot be read (%s): it is corrupt or "
		    "not a Zephon journal; nothing was written to it: keep it for inspection and "
		    "pass a new journal=PATH (resume=samples:G keeps the position)", path,
		    sqlite3_errmsg(db));
}

static int read_meta(sqlite3 *db, const char *path, struct journal_ident *id,
		     char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, have = 0;

	memset(id, 0, sizeof(*id));
	rc = sqlite3_prepare_v2(db, "SELECT key, value FROM meta", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return bad_file(db, rc, path, err, errlen);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 0);
		const char *v = (const char *)sqlite3_column_text(st, 1);

		if (!k || !v)
			continue;
		if (!strcmp(k, "fingerprint") && strlen(v) < sizeof(id->fingerprint)) {
			copy_str(id->fingerprint, sizeof(id->fingerprint), v);
			have |= 1;
		} else if (!strcmp(k, "seed") && !parse_u64(v, &id->seed)) {
			have |= 2;
		} else if (!strcmp(k, "shuffle") && !order_shuffle_parse(v, &id->shuffle)) {
			have |= 4;
		} else if (!strcmp(k, "samples") && !parse_u62(v, &id->samples)) {
			have |= 8;
		}
	}
	if (rc != SQLITE_DONE) {
		rc = bad_file(db, rc, path, err, errlen);
		sqlite3_finalize(st);
		return rc;
	}
	sqlite3_finalize(st);
	if (have != 15)
		return fail(err, errlen, -EBADMSG,
			    "%s is not a Zephon journal (its meta table lacks the "
			    "fingerprint, seed, shuffle or samples); nothing was written to it", path);
	return 0;
}

static void ident_text(const struct journal_ident *id, char *out, size_t len)
{
	snprintf(out, len, "fingerprint %s, seed %" PRIu64 ", shuffle %s", id->fingerprint,
		 id->seed, order_shuffle_name(id->shuffle));
}

static int ident_same(const struct journal_ident *a, const struct journal_ident *b)
{
	return !strcmp(a->fingerprint, b->fingerprint) && a->seed == b->seed &&
	       a->shuffle == b->shuffle;
}

/* Steps from user_version `from` to JOURNAL_SCHEMA_VERSION, inside the caller's
 * transaction. */
static int migrate(sqlite3 *db, int from)
{
	char sql[64];
	int rc;

	for (int v = from; v < JOURNAL_SCHEMA_VERSION; v++) {
		rc = exec_sql(db, journal_migrations[v]);
		if (rc != SQLITE_OK)
			return rc;
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
		rc = exec_sql(db, sql);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

static int insert_meta(sqlite3 *db, const char *key, const char *value)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, "INSERT INTO meta (key, value) VALUES (?1, ?2)", -1,
				    &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* A new journal: application_id, every migration step and the identity, in one
 * transaction of the rollback journal (so page 1 with the application_id is in the main
 * file before WAL is switched on, and a crash leaves either nothing or a whole journal). */
static int create_schema(sqlite3 *db, const struct journal_ident *id)
{
	char num[32], app[64];
	int64_t tables = -1;
	int rc;

	snprintf(app, sizeof(app), "PRAGMA application_id = %d", (int)JOURNAL_APPLICATION_ID);
	rc = exec_sql(db, "BEGIN IMMEDIATE");
	if (rc != SQLITE_OK)
		return rc;
	rc = query_i64(db, "SELECT count(*) FROM sqlite_master", &tables);
	if (rc == SQLITE_OK && tables != 0)
		rc = SQLITE_NOTADB; /* someone else wrote to the empty file meanwhile */
	if (rc == SQLITE_OK)
		rc = exec_sql(db, app);
	if (rc == SQLITE_OK)
		rc = migrate(db, 0);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "fingerprint", id->fingerprint);
	snprintf(num, sizeof(num), "%" PRIu64, id->seed);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "seed", num);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "shuffle", order_shuffle_name(id->shuffle));
	snprintf(num, sizeof(num), "%" PRIu64, id->samples);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "samples", num);
	snprintf(num, sizeof(num), "%" PRId64, now_us() / 1000000);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "created", num);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "zephon_version", ZEPHON_VERSION);
	if (rc == SQLITE_OK)
		rc = exec_sql(db, "COMMIT");
	if (rc != SQLITE_OK && !sqlite3_get_autocommit(db))
		exec_sql(db, "ROLLBACK");
	return rc;
}

/* Validate an existing journal inside a transaction the caller opened: application_id,
 * schema version, quick_check, identity. *version receives user_version. */
static int validate(sqlite3 *db, const char *path, struct journal_ident *id, int *version,
		    char *err, size_t errlen)
{
	int64_t app = 0, ver = 0;
	sqlite3_stmt *st;
	const char *res;
	int rc;

	rc = query_i64(db, "PRAGMA application_id", &app);
	if (rc == SQLITE_OK)
		rc = query_i64(db, "PRAGMA user_version", &ver);
	if (rc != SQLITE_OK)
		return bad_file(db, rc, path, err, errlen);
	if (app != JOURNAL_APPLICATION_ID)
		return fail(err, errlen, -EBADMSG, "%s is not a Zephon journal (application_id "
			    "0x%08" PRIx64 "); nothing was written to it", path, (uint64_t)app);
	if (ver > JOURNAL_SCHEMA_VERSION)
		return fail(err, errlen, -EBADMSG,
			    "journal %s has schema version %" PRId64 " but this zephon reads "
			    "versions up to %d; use a newer zephon (nothing was written to it)",
			    path, ver, JOURNAL_SCHEMA_VERSION);
	if (ver < 1)
		return fail(err, errlen, -EBADMSG, "%s is not a Zephon journal (schema "
			    "version %" PRId64 "); nothing was written to it", path, ver);
	rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		res = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
		if (rc == SQLITE_ROW && res && strcmp(res, "ok")) {
			fail(err, errlen, -EBADMSG, "journal %s is corrupt (quick_check: %s); "
			     "nothing was written to it: keep it for inspection and pass a new "
			     "journal=PATH with resume=samples:G", path, res);
			sqlite3_finalize(st);
			return -EBADMSG;
		}
		rc = rc == SQLITE_ROW ? SQLITE_OK : rc;
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_OK)
		return bad_file(db, rc, path, err, errlen);
	*version = (int)ver;
	return read_meta(db, path, id, err, errlen);
}

static int prepare_claim(struct journal *j)
{
	return sqlite3_prepare_v3(j->db,
		"UPDATE cursor SET step = ?1, micro = ?2 WHERE layout = ?3 AND rank = ?4",
		-1, SQLITE_PREPARE_PERSISTENT, &j->st_claim, NULL);
}

static int load_next_seq(struct journal *j)
{
	int64_t seq = 0;
	int rc = query_i64(j->db,
		"SELECT max(coalesce((SELECT max(seq) FROM layout), 0), "
		"coalesce((SELECT max(seq) FROM mark), 0), "
		"coalesce((SELECT max(seq) FROM rewind), 0))", &seq);

	j->next_seq = seq + 1;
	return rc;
}

/* How a journal is opened. */
enum open_mode {
	OPEN_WRITE,         /* journal_open(): read-write, creates, migrates */
	OPEN_READ,          /* journal_open_readonly() on a writable file: a read-write
	                     * connection that only reads and never checkpoints, so SQLite can
	                     * recover a WAL left by a killed mount without -shm */
	OPEN_READ_IMMUTABLE /* journal_open_readonly() of a file we cannot write and that has
	                     * no WAL: SQLite's immutable mode (nothing can be pending) */
};

/* "file:" URI for sqlite3_open_v2 (https://www.sqlite.org/uri.html): '%', '?', '#' of
 * the path are escaped. */
static char *file_uri(const char *path, const char *query)
{
	size_t n = strlen(path), q = strlen(query);
	char *u = malloc(5 + 3 * n + 1 + q + 1), *o = u;

	if (!u)
		return NULL;
	o += sprintf(o, "file:");
	for (const char *c = path; *c; c++) {
		if (*c == '%' || *c == '?' || *c == '#')
			o += sprintf(o, "%%%02X", (unsigned char)*c);
		else
			*o++ = *c;
	}
	*o++ = '?';
	memcpy(o, query, q + 1);
	return u;
}

static int can_write(const char *path)
{
	char *dir = strdup(path), *slash;
	int ok;

	if (!dir)
		return 0;
	slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	ok = !access(path, W_OK) && !access(dir, W_OK);
	free(dir);
	return ok;
}

/* Check what is at path before SQLite sees it. *create: nothing there (or 0 bytes). */
static int precheck(const char *path, enum open_mode mode, int *create, int *existed,
		    char *err, size_t errlen)
{
	struct stat st;

	*create = 0;
	*existed = 1;
	if (stat(path, &st)) {
		int e = errno;

		if (e != ENOENT || mode != OPEN_WRITE)
			return fail(err, errlen, -e, "cannot open journal %s: %s%s", path,
				    strerror(e), mode != OPEN_WRITE ? "" :
				    "; pass journal=PATH where a file can be created");
		*create = 1;
		*existed = 0;
		return 0;
	}
	if (S_ISDIR(st.st_mode))
		return fail(err, errlen, -EISDIR, "journal %s is a directory; pass journal=PATH "
			    "naming a file", path);
	if (!S_ISREG(st.st_mode))
		return fail(err, errlen, -EINVAL, "journal %s is not a regular file; pass "
			    "journal=PATH naming a file", path);
	if (st.st_size == 0) {
		if (mode != OPEN_WRITE)
			return fail(err, errlen, -EBADMSG, "journal %s is empty: no mount has "
				    "recorded anything in it", path);
		*create = 1;
		return 0;
	}
	return check_header(path, err, errlen);
}

static int open_common(const char *path, const struct journal_ident *want,
		       enum open_mode mode, enum journal_sync sync, struct journal **out,
		       char *err, size_t errlen)
{
	struct journal_ident have;
	struct journal *j = NULL;
	char *wal = NULL, *uri = NULL, a[128], b[128];
	int wal_existed = 1, create, existed, version = 0, rc, src, flags;
	sqlite3 *db = NULL;

	if (!path || !*path)
		return fail(err, errlen, -EINVAL, "journal path is empty");
	rc = precheck(path, mode, &create, &existed, err, errlen);
	if (rc)
		return rc;
	if (mode == OPEN_WRITE) {
		/* Our own open() first: it reports the precise errno (ENOTDIR, EROFS, ...)
		 * where SQLite would only say "unable to open". */
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

		if (fd < 0 && errno == ENOENT) /* open(O_CREAT) says so only of a directory */
			return fail(err, errlen, -ENOENT, "cannot create journal %s: its directory "
				    "does not exist; create it, or pass another journal=PATH", path);
		if (fd < 0)
			return fail(err, errlen, -errno, "cannot %s journal %s: %s; pass "
				    "journal=PATH on a writable file system", create ? "create" :
				    "write", path, strerror(errno));
		close(fd);
		rc = dir_writable(path, err, errlen);
		if (rc)
			goto err_unlink;
	}
	wal = side_path(path, "-wal");
	if (!wal) {
		rc = -ENOMEM;
		goto err_unlink;
	}
	wal_existed = file_exists(wal);
	if (mode == OPEN_READ && !can_write(path)) {
		struct stat st;

		if (wal_existed && !stat(wal, &st) && st.st_size > 0) {
			rc = fail(err, errlen, -EROFS, "cannot read journal %s: its write-ahead "
				  "log %s holds records that only a writable open can replay; run "
				  "this where the journal's directory is writable", path, wal);
			goto err_free_names;
		}
		mode = OPEN_READ_IMMUTABLE;
	}
	uri = file_uri(path, mode == OPEN_READ_IMMUTABLE ? "immutable=1" : "");
	if (!uri) {
		rc = -ENOMEM;
		goto err_unlink;
	}
	flags = SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX |
		(mode == OPEN_READ_IMMUTABLE ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE);
	src = sqlite3_open_v2(uri, &db, flags, NULL);
	if (src != SQLITE_OK) {
		rc = fail(err, errlen, sql_errno(src) == -ENOMEM ? -ENOMEM : -EIO,
			  "cannot open journal %s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
		goto err_close;
	}
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, JOURNAL_BUSY_MS);
	/* Until the file is known to be ours (and always for readers), closing must not
	 * checkpoint a WAL into it. */
	sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	src = exec_sql(db, "PRAGMA locking_mode = EXCLUSIVE");
	if (src == SQLITE_OK && mode != OPEN_READ_IMMUTABLE && sqlite3_db_readonly(db, "main") == 1) {
		rc = fail(err, errlen, -EROFS, "cannot write journal %s: it is read-only; pass "
			  "journal=PATH on a writable file system", path);
		goto err_close;
	}
	if (src != SQLITE_OK) {
		rc = fail(err, errlen, -EIO, "cannot open journal %s: %s", path, sqlite3_errmsg(db));
		goto err_close;
	}
	if (create) {
		/* 1 KiB pages: a claim rewrites one page, so every claim appends one page
		 * frame to the WAL; small frames halve the claim cost on disk */
		src = exec_sql(db, "PRAGMA page_size = 1024");
		if (src == SQLITE_OK)
			src = create_schema(db, want);
		if (src != SQLITE_OK) {
			rc = sql_errno(src);
			rc = fail(err, errlen, rc == -EBUSY || rc == -ENOMEM || rc == -ENOSPC ? rc :
				  -EIO, "cannot create journal %s: %s", path, sqlite3_errmsg(db));
			goto err_close;
		}
		have = *want;
	} else {
		/* BEGIN IMMEDIATE takes the write lock now: in EXCLUSIVE mode it stays ours
		 * until close, and a live mount elsewhere makes this fail with BUSY. Readers
		 * take the read lock (BEGIN + the first read) and keep it too. */
		src = exec_sql(db, mode == OPEN_WRITE ? "BEGIN IMMEDIATE" : "BEGIN");
		if (src != SQLITE_OK) {
			rc = bad_file(db, src, path, err, errlen);
			goto err_close;
		}
		rc = validate(db, path, &have, &version, err, errlen);
		if (rc)
			goto err_rollback;
		if (want && !ident_same(&have, want)) {
			ident_text(&have, a, sizeof(a));
			ident_text(want, b, sizeof(b));
			rc = fail(err, errlen, -ESTALE,
				  "journal %s belongs to another dataset or order (%s) than this "
				  "mount (%s), and no resume= rule can use it; pass journal=PATH naming "
				  "a file that does not exist yet (add resume=samples:G@S to keep the "
				  "position), or delete %s (and %s-wal) to start over at step 0",
				  path, a, b, path, path);
			goto err_rollback;
		}
		if (mode == OPEN_WRITE && version < JOURNAL_SCHEMA_VERSION) {
			src = migrate(db, version);
			if (src != SQLITE_OK) {
				rc = fail(err, errlen, -EIO, "cannot migrate journal %s from schema "
					  "version %d: %s", path, version, sqlite3_errmsg(db));
				goto err_rollback;
			}
		}
		src = exec_sql(db, "COMMIT");
		if (src != SQLITE_OK) {
			rc = fail(err, errlen, -EIO, "cannot open journal %s: %s", path,
				  sqlite3_errmsg(db));
			goto err_rollback;
		}
	}
	if (mode == OPEN_WRITE) {
		char pragmas[256];

		snprintf(pragmas, sizeof(pragmas),
			 "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s; "
			 "PRAGMA journal_size_limit = %d;",
			 sync == JOURNAL_SYNC_FULL ? "FULL" : "NORMAL", JOURNAL_WAL_LIMIT);
		src = exec_sql(db, pragmas);
		if (src != SQLITE_OK) {
			rc = fail(err, errlen, sql_errno(src) == -ENOMEM ? -ENOMEM : -EIO,
				  "cannot open journal %s: %s", path, sqlite3_errmsg(db));
			goto err_close;
		}
	} else {
		exec_sql(db, "PRAGMA query_only = 1");
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		rc = -ENOMEM;
		goto err_close;
	}
	j->db = db;
	j->ident = have;
	j->readonly = mode != OPEN_WRITE;
	j->path = strdup(path);
	if (!j->path || pthread_mutex_init(&j->mu, NULL)) {
		rc = -ENOMEM;
		goto err_free;
	}
	src = load_next_seq(j);
	if (src == SQLITE_OK && mode == OPEN_WRITE)
		src = prepare_claim(j);
	if (src != SQLITE_OK) {
		rc = fail(err, errlen, sql_errno(src) == -ENOMEM ? -ENOMEM : -EBADMSG,
			  "cannot open journal %s: %s", path, sqlite3_errmsg(db));
		pthread_mutex_destroy(&j->mu);
		goto err_free;
	}
	if (mode == OPEN_WRITE) {
		const char *real = sqlite3_db_filename(db, "main");
		struct stat sb;

		/* ours: a clean close merges the WAL into the database and removes it */
		sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
		free(wal);
		/* the file this handle writes, for check_unmoved() */
		if (real && *real && stat(real, &sb) == 0) {
			j->file_dev = sb.st_dev;
			j->file_ino = sb.st_ino;
			j->file_known = 1;
		}
	} else if (!wal_existed) {
		j->wal_cleanup = wal; /* remove at close if this reader left it empty */
	} else {
		free(wal);
	}
	free(uri);
	if (err && errlen)
		err[0] = 0;
	*out = j;
	return 0;

err_free:
	sqlite3_finalize(j->st_claim);
	free(j->path);
	free(j);
	goto err_close;
err_rollback:
	exec_sql(db, "ROLLBACK");
err_close:
	sqlite3_close_v2(db);
	drop_empty_side(wal, wal_existed);
err_unlink:
	if (mode == OPEN_WRITE && !existed)
		unlink(path);
err_free_names:
	free(uri);
	free(wal);
	return rc;
}

int journal_open(const char *path, const struct journal_ident *ident,
		 enum journal_sync sync, struct journal **out, char *err, size_t errlen)
{
	if (!ident || !out)
		return fail(err, errlen, -EINVAL, "journal_open: no identity given");
	return open_common(path, ident, OPEN_WRITE, sync, out, err, errlen);
}

int journal_open_readonly(const char *path, struct journal **out, char *err, size_t errlen)
{
	if (!out)
		return fail(err, errlen, -EINVAL, "journal_open_readonly: no result pointer");
	return open_common(path, NULL, OPEN_READ, JOURNAL_SYNC_NORMAL, out, err, errlen);
}

void journal_close(struct journal *j)
{
	if (!j)
		return;
	sqlite3_finalize(j->st_claim);
	sqlite3_close_v2(j->db);
	drop_empty_side(j->wal_cleanup, 0);
	pthread_mutex_destroy(&j->mu);
	free(j->wal_cleanup);
	free(j->ranks);
	free(j->pos);
	free(j->path);
	free(j);
}

void journal_identity(struct journal *j, struct journal_ident *out)
{
	pthread_mutex_lock(&j->mu);
	*out = j->ident;
	pthread_mutex_unlock(&j->mu);
}

void journal_last_error(struct journal *j, char *out, size_t len)
{
	pthread_mutex_lock(&j->mu);
	copy_str(out, len, j->err);
	pthread_mutex_unlock(&j->mu);
}

/* ---- history, as the resume rules see it ---- */

enum hev_kind { HEV_LAYOUT, HEV_MARK, HEV_REWIND };

struct hev {
	enum hev_kind kind;
	int64_t seq;
	int64_t eff_us;             /* time_us made non-decreasing along seq */
	uint64_t step;              /* S0 for a layout */
	uint64_t gsn;               /* G0 for a layout */
	int64_t layout_id;          /* the layout's own id for HEV_LAYOUT */
	struct layout l;            /* HEV_LAYOUT only */
	enum resume_rule rule;      /* HEV_LAYOUT only */
	size_t src;                 /* which journal */
};

struct hist {
	struct hev *ev;
	size_t nev;
	struct hev *last;           /* the last layout (by seq) or NULL */
	struct journal_cursor *cur; /* its cursors */
	size_t ncur;
};

/* Why hist_load() failed: SQLite's message, or, when SQLite saw nothing wrong, that a
 * recorded value failed our range checks (SQLite would say "not an error"). */
static const char *hist_errmsg(sqlite3 *db)
{
	int c = sqlite3_errcode(db);

	if (c == SQLITE_OK || c == SQLITE_ROW || c == SQLITE_DONE)
		return "a recorded value is out of range (the journal was edited or is corrupt; "
		       "start a new one with journal=PATH)";
	return sqlite3_errmsg(db);
}

static void hist_release(struct hist *h)
{
	free(h->ev);
	free(h->cur);
	memset(h, 0, sizeof(*h));
}

/* Rows (rank, step, micro) of `sql` with ?1 = key, into a malloc'd array. 0 or -errno; a
 * read that found impossible values is reported as corruption. */
static int load_cursor_rows(sqlite3 *db, const char *sql, int64_t key,
			    struct journal_cursor **out, size_t *count)
{
	sqlite3_stmt *st;
	struct journal_cursor *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*count = 0;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_errno(rc);
	sqlite3_bind_int64(st, 1, key);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct journal_cursor *nv = realloc(v, ncap * sizeof(*nv));

			if (!nv) {
				rc = SQLITE_NOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		if (u64_col(st, 0, &v[n].rank) || u64_col(st, 1, &v[n].step) ||
		    u64_col(st, 2, &v[n].micro)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(v);
		return sql_errno(rc) ? sql_errno(rc) : -EIO;
	}
	*out = v;
	*count = n;
	return 0;
}

static int load_cursors(sqlite3 *db, int64_t layout_id, struct journal_cursor **out,
			size_t *count)
{
	return load_cursor_rows(db, "SELECT rank, step, micro FROM cursor WHERE layout = ?1 "
				"ORDER BY rank", layout_id, out, count);
}

static int hist_load(sqlite3 *db, size_t src, struct hist *h)
{
	sqlite3_stmt *st;
	size_t cap = 0;
	int64_t eff = INT64_MIN;
	int rc;

	memset(h, 0, sizeof(*h));
	rc = sqlite3_prepare_v2(db,
		"SELECT 0, seq, time_us, start_step, start_samples, id, world_size, "
		"global_batch, micro_batch, rule FROM layout "
		"UNION ALL SELECT 1, seq, time_us, step, gsn, layout, 0, 0, 0, '' FROM mark "
		"UNION ALL SELECT 2, seq, time_us, step, gsn, layout, 0, 0, 0, '' FROM rewind "
		"ORDER BY 2", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_errno(rc);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct hev *e;
		struct journal_resume r;
		int64_t t;

		if (h->nev == cap) {
			size_t ncap = cap ? cap * 2 : 32;
			struct hev *nv = realloc(h->ev, ncap * sizeof(*nv));

			if (!nv) {
				rc = SQLITE_NOMEM;
				break;
			}
			h->ev = nv;
			cap = ncap;
		}
		e = &h->ev[h->nev];
		memset(e, 0, sizeof(*e));
		e->kind = (enum hev_kind)sqlite3_column_int(st, 0);
		e->seq = sqlite3_column_int64(st, 1);
		t = sqlite3_column_int64(st, 2);
		eff = t > eff ? t : eff;
		e->eff_us = eff;
		e->layout_id = sqlite3_column_int64(st, 5);
		e->src = src;
		if (u64_col(st, 3, &e->step) || u64_col(st, 4, &e->gsn)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		if (e->kind == HEV_LAYOUT) {
			const char *rule = (const char *)sqlite3_column_text(st, 9);

			if (u64_col(st, 6, &e->l.world_size) || u64_col(st, 7, &e->l.global_batch) ||
			    u64_col(st, 8, &e->l.micro_batch) || !rule ||
			    journal_resume_parse(rule, &r)) {
				rc = SQLITE_CORRUPT;
				break;
			}
			e->l.start_step = e->step;
			e->l.start_samples = e->gsn;
			e->rule = r.rule;
			if (layout_check(&e->l, NULL, 0)) {
				rc = SQLITE_CORRUPT;
				break;
			}
		}
		h->nev++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		hist_release(h);
		return sql_errno(rc) ? sql_errno(rc) : -EIO;
	}
	for (size_t i = h->nev; i-- > 0;)
		if (h->ev[i].kind == HEV_LAYOUT) {
			h->last = &h->ev[i];
			break;
		}
	if (h->last) {
		rc = load_cursors(db, h->last->layout_id, &h->cur, &h->ncur);
		if (rc) {
			hist_release(h);
			return rc;
		}
	}
	return 0;
}

/* Order of events: within a journal by seq (eff_us never decreases along it), across
 * journals by time. */
static int hev_cmp(const struct hev *a, const struct hev *b)
{
	if (a->src == b->src)
		return a->seq < b->seq ? -1 : a->seq > b->seq;
	if (a->eff_us != b->eff_us)
		return a->eff_us < b->eff_us ? -1 : 1;
	if (a->seq != b->seq)
		return a->seq < b->seq ? -1 : 1;
	return a->src < b->src ? -1 : a->src > b->src;
}

static int is_statement(const struct hev *e)
{
	return e->kind != HEV_LAYOUT || e->rule != RESUME_AUTO;
}

/* Rows of one job layout on several nodes: same G0, W and B. S0 is left out on purpose:
 * a node whose journal missed some restarts maps samples:G to another step number, but
 * serves the same gsns (its c_r is taken against its own S0). */
static int same_key(const struct layout *a, const struct layout *b)
{
	return a->start_samples == b->start_samples && a->world_size == b->world_size &&
	       a->global_batch == b->global_batch;
}

struct rank_claim {
	uint64_t rank;
	uint64_t step;
	const struct hev *row;
};

static int rank_claim_cmp(const void *pa, const void *pb)
{
	const struct rank_claim *a = pa, *b = pb;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return -hev_cmp(a->row, b->row); /* newest row first */
}

/* Append "a-b" or "a" to a rank list text. */
static void range_append(char *out, size_t len, uint64_t lo, uint64_t hi)
{
	size_t used = strlen(out);

	if (used + 1 >= len)
		return;
	if (lo == hi)
		snprintf(out + used, len - used, "%s%" PRIu64, used ? "," : "", lo);
	else
		snprintf(out + used, len - used, "%s%" PRIu64 "-%" PRIu64, used ? "," : "", lo, hi);
}

static const char *src_name(const char *const *names, size_t n, size_t i, char *buf,
			    size_t len)
{
	if (n <= 1 || !names) {
		buf[0] = 0;
		return buf;
	}
	snprintf(buf, len, " in %s", names[i]);
	return buf;
}

/* The rules of journal.h over n loaded histories. */
static int point_compute(struct hist *hs, size_t n, const char *const *names,
			 struct journal_point *p)
{
	const struct hev *fresh = NULL, *stmt = NULL, *last = NULL;
	int have_mark = 0;
	char where[160];

	memset(p, 0, sizeof(*p));
	p->basis = JOURNAL_POINT_EMPTY;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < hs[i].nev; k++) {
			const struct hev *e = &hs[i].ev[k];

			if (e->kind == HEV_LAYOUT && e->rule == RESUME_FRESH &&
			    (!fresh || hev_cmp(e, fresh) > 0))
				fresh = e;
			if (e->kind == HEV_LAYOUT && (!last || hev_cmp(e, last) > 0))
				last = e;
		}
	if (!last) {
		snprintf(p->why, sizeof(p->why), "the journal%s no layout yet",
			 n > 1 ? "s have" : " has");
		return 0;
	}
	p->last = last->l;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < hs[i].nev; k++) {
			const struct hev *e = &hs[i].ev[k];

			if (fresh && hev_cmp(e, fresh) < 0)
				continue;
			if (e->kind == HEV_MARK)
				have_mark = 1;
			if (is_statement(e) && (!stmt || hev_cmp(e, stmt) > 0))
				stmt = e;
		}
	if (have_mark) {
		p->basis = JOURNAL_POINT_STATEMENT;
		p->step = stmt->step;
		p->samples = stmt->gsn;
		src_name(names, n, stmt->src, where, sizeof(where));
		if (stmt->kind == HEV_MARK)
			snprintf(p->why, sizeof(p->why), "checkpoint mark at step %" PRIu64 "%s",
				 stmt->step, where);
		else if (stmt->kind == HEV_REWIND)
			snprintf(p->why, sizeof(p->why), "rewind to step %" PRIu64 " after the "
				 "latest checkpoint mark%s", stmt->step, where);
		else
			snprintf(p->why, sizeof(p->why), "%s start at step %" PRIu64 " after the "
				 "latest checkpoint mark%s", stmt->rule == RESUME_FRESH ? "fresh" :
				 stmt->rule == RESUME_STEP ? "step:S" : "samples:G", stmt->step, where);
		return 0;
	}

	/* Rule 3: the cursors of the last layout, over every journal that has a row of it. */
	size_t total = 0, m = 0, covered = 0;
	struct rank_claim *claims;
	uint64_t minc = UINT64_MAX, maxc = 0, slow = 0, prev = 0, W = last->l.world_size;
	int any = 0;

	for (size_t i = 0; i < n; i++)
		if (hs[i].last && same_key(&hs[i].last->l, &last->l))
			total += hs[i].ncur;
	claims = calloc(total ? total : 1, sizeof(*claims));
	if (!claims)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!hs[i].last || !same_key(&hs[i].last->l, &last->l))
			continue;
		for (size_t k = 0; k < hs[i].ncur; k++) {
			if (hs[i].cur[k].rank >= W)
				continue;
			claims[m].rank = hs[i].cur[k].rank;
			claims[m].step = hs[i].cur[k].step;
			claims[m].row = hs[i].last;
			m++;
		}
	}
	qsort(claims, m, sizeof(*claims), rank_claim_cmp);
	for (size_t k = 0; k < m; k++) {
		uint64_t c;

		if (k && claims[k].rank == claims[k - 1].rank)
			continue; /* an older row of the same rank */
		if (any ? claims[k].rank > prev + 1 : claims[k].rank > 0)
			range_append(p->warning, sizeof(p->warning), any ? prev + 1 : 0,
				     claims[k].rank - 1);
		any = 1;
		prev = claims[k].rank;
		covered++;
		c = claims[k].step > claims[k].row->l.start_step ?
		    claims[k].step - claims[k].row->l.start_step : 0;
		if (c < minc) {
			minc = c;
			slow = claims[k].rank;
		}
		maxc = c > maxc ? c : maxc;
	}
	if (!any || prev + 1 < W)
		range_append(p->warning, sizeof(p->warning), any ? prev + 1 : 0, W - 1);
	free(claims);
	if (covered < W) {
		char ranks[96];

		copy_str(ranks, sizeof(ranks), p->warning);
		fmt(p->warning, sizeof(p->warning), "ranks %s of the last layout "
			 "(world_size %" PRIu64 ") are in none of the journals: their progress is "
			 "unknown, so the point is that layout's start", ranks, W);
		minc = 0;
	}
	p->basis = JOURNAL_POINT_CURSORS;
	p->min_completed = minc;
	p->step = last->l.start_step + minc;
	p->samples = last->l.start_samples + minc * last->l.global_batch;
	if (covered < W)
		snprintf(p->why, sizeof(p->why), "start of the last layout (step %" PRIu64 ")",
			 p->step);
	else if (maxc == minc)
		snprintf(p->why, sizeof(p->why), "every rank of the last layout completed the "
			 "steps below %" PRIu64 " (all ranks at the same step)", p->step);
	else
		snprintf(p->why, sizeof(p->why), "every rank of the last layout completed the "
			 "steps below %" PRIu64 " (rank %" PRIu64 " is the slowest)", p->step, slow);
	return 0;
}

int journal_resume_point_ex(struct journal *j, struct journal_point *info)
{
	struct hist h;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = hist_load(j->db, 0, &h);
	if (!rc) {
		rc = point_compute(&h, 1, NULL, info);
		hist_release(&h);
	} else {
		jfail(j, rc, "journal %s: cannot read the history: %s", j->path,
		      hist_errmsg(j->db));
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_resume_point(struct journal *j, uint64_t *samples, uint64_t *step)
{
	struct journal_point p;
	int rc = journal_resume_point_ex(j, &p);

	if (rc)
		return rc;
	*samples = p.samples;
	*step = p.step;
	return p.basis == JOURNAL_POINT_EMPTY ? -ENOENT : 0;
}

int journal_resume_point_files_ex(const char *const *paths, size_t npaths,
				  struct journal_point *info, char *err, size_t errlen)
{
	struct hist *hs;
	struct journal_ident first = { { 0 }, 0, 0, 0 };
	char a[128], b[128];
	int rc = 0;
	size_t loaded = 0;

	if (!npaths)
		return fail(err, errlen, -EINVAL, "no journal given");
	hs = calloc(npaths, sizeof(*hs));
	if (!hs)
		return -ENOMEM;
	for (size_t i = 0; i < npaths && !rc; i++) {
		struct journal *j;

		rc = journal_open_readonly(paths[i], &j, err, errlen);
		if (rc)
			break;
		if (i == 0) {
			first = j->ident;
		} else if (!ident_same(&first, &j->ident)) {
			ident_text(&first, a, sizeof(a));
			ident_text(&j->ident, b, sizeof(b));
			rc = fail(err, errlen, -ESTALE, "journals %s (%s) and %s (%s) belong to "
				  "different datasets or orders; pass the journals of one job",
				  paths[0], a, paths[i], b);
		}
		if (!rc) {
			rc = hist_load(j->db, i, &hs[i]);
			if (rc)
				fail(err, errlen, rc, "cannot read journal %s: %s", paths[i],
				     hist_errmsg(j->db));
			else
				loaded = i + 1;
		}
		journal_close(j);
	}
	if (!rc) {
		rc = point_compute(hs, npaths, paths, info);
		if (err && errlen)
			err[0] = 0;
	}
	for (size_t i = 0; i < loaded; i++)
		hist_release(&hs[i]);
	free(hs);
	return rc;
}

int journal_resume_point_files(const char *const *paths, size_t npaths,
			       uint64_t *samples, uint64_t *step, char *err, size_t errlen)
{
	struct journal_point p;
	int rc = journal_resume_point_files_ex(paths, npaths, &p, err, errlen);

	if (!rc) {
		*samples = p.samples;
		*step = p.step;
	}
	return rc;
}

/* ---- starting a layout ---- */

/* Did some rank of layout e get as far as step S (its cursor at S or beyond)? */
static int layout_reached(struct journal *j, const struct hev *e, uint64_t step)
{
	struct journal_cursor *cur;
	size_t n;
	int yes = e->step == step;

	if (!yes && load_cursors(j->db, e->layout_id, &cur, &n) == 0) {
		for (size_t i = 0; i < n && !yes; i++)
			yes = cur[i].step >= step;
		free(cur);
	}
	return yes;
}

/* S0 for samples:G, G0 for step:S, from the history (caller holds j->mu). */
static int map_rule(struct journal *j, const struct hist *h, const struct journal_resume *r,
		    struct layout *l, char *applied, size_t alen)
{
	const struct hev *best = NULL, *reached = NULL;

	for (size_t k = 0; k < h->nev; k++) {
		const struct hev *e = &h->ev[k];

		if (e->kind != HEV_LAYOUT)
			continue;
		if (r->rule == RESUME_SAMPLES ? e->gsn <= r->value : e->step <= r->value)
			best = e; /* events are in seq order: the latest wins */
		if (r->rule == RESUME_STEP && e->step <= r->value && layout_reached(j, e, r->value))
			reached = e;
	}
	/* step:S names a step of the run that saved the checkpoint: the latest layout that
	 * served up to S, not a later one that started below S and stopped short of it
	 * (after a restart from an older checkpoint, step numbers repeat). */
	if (reached)
		best = reached;
	if (r->rule == RESUME_SAMPLES) {
		l->start_samples = r->value;
		if (r->has_step) {
			l->start_step = r->step;
			snprintf(applied, alen, "samples:%" PRIu64 "@%" PRIu64 " -> step %" PRIu64
				 " at samples:%" PRIu64, r->value, r->step, r->step, r->value);
			return 0;
		}
		if (best)
			l->start_step = best->step + (r->value - best->gsn) / best->l.global_batch;
		else
			l->start_step = r->value / l->global_batch;
		snprintf(applied, alen, "samples:%" PRIu64 " -> step %" PRIu64 " (%s)", r->value,
			 l->start_step, best ? "step numbers of the layout history" :
			 "no history: G / global_batch");
		return 0;
	}
	if (!best)
		return jfail(j, -EINVAL, "resume=step:%" PRIu64 " cannot be mapped to a sample "
			     "position: journal %s has no layout starting at or before step %"
			     PRIu64 "; use resume=samples:G", r->value, j->path, r->value);
	l->start_step = r->value;
	if (layout_step_gsn(&best->l, r->value, &l->start_samples))
		return jfail(j, -EINVAL, "resume=step:%" PRIu64 " is past the end of the gsn "
			     "range (2^62)", r->value);
	snprintf(applied, alen, "step:%" PRIu64 " -> samples:%" PRIu64 " (per the layout "
		 "started at step %" PRIu64 ")", r->value, l->start_samples, best->step);
	return 0;
}

static int insert_layout(struct journal *j, const struct layout *l, const char *ranks,
			 const char *host, const char *rule, const char *applied, int64_t t,
			 int64_t *id)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(j->db,
		"INSERT INTO layout (seq, world_size, global_batch, micro_batch, ranks, "
		"start_step, start_samples, time_us, host, rule, applied) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)", -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, j->next_seq);
	sqlite3_bind_int64(st, 2, (int64_t)l->world_size);
	sqlite3_bind_int64(st, 3, (int64_t)l->global_batch);
	sqlite3_bind_int64(st, 4, (int64_t)l->micro_batch);
	sqlite3_bind_text(st, 5, ranks, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, (int64_t)l->start_step);
	sqlite3_bind_int64(st, 7, (int64_t)l->start_samples);
	sqlite3_bind_int64(st, 8, t);
	sqlite3_bind_text(st, 9, host, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 10, rule, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 11, applied, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return rc;
	*id = sqlite3_last_insert_rowid(j->db);
	return SQLITE_OK;
}

static int insert_cursors(struct journal *j, int64_t layout_id, const uint64_t *ranks,
			  size_t n, uint64_t step)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(j->db, "INSERT INTO cursor (layout, rank, step, micro) "
				    "VALUES (?1, ?2, ?3, 0)", -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		sqlite3_bind_int64(st, 1, layout_id);
		sqlite3_bind_int64(st, 2, (int64_t)ranks[i]);
		sqlite3_bind_int64(st, 3, (int64_t)step);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE)
			break;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

int journal_start(struct journal *j, const struct journal_resume *rule,
		  const struct rankset *ranks, struct layout *l,
		  char *applied, size_t applied_len)
{
	struct layout nl = *l;
	struct journal_point p;
	struct hist h;
	char desc[sizeof(j->cur.resume) * 2], rule_text[64], host[64] = "";
	char why[128] = "", *ranks_text = NULL;
	size_t ranks_len;
	uint64_t *nranks = NULL, g;
	struct rank_pos *npos = NULL;
	int64_t id = 0, t;
	int rc;

	pthread_mutex_lock(&j->mu);
	if (j->readonly) {
		rc = jfail(j, -EROFS, "journal %s is open read-only", j->path);
		goto out;
	}
	if (!rule || !l) {
		rc = jfail(j, -EINVAL, "journal_start: no rule or layout given");
		goto out;
	}
	if (!ranks || !ranks->count) {
		rc = jfail(j, -EINVAL, "a mount must serve at least one rank");
		goto out;
	}
	nl.start_step = 0;
	nl.start_samples = 0;
	if (layout_check(&nl, why, sizeof(why))) {
		rc = jfail(j, -EINVAL, "%s", why);
		goto out;
	}
	for (size_t i = 0; i < ranks->count; i++)
		if (ranks->ranks[i] >= nl.world_size || (i && ranks->ranks[i] <= ranks->ranks[i - 1])) {
			rc = jfail(j, -EINVAL, "ranks must be sorted, unique and below world_size "
				   "(%" PRIu64 ")", nl.world_size);
			goto out;
		}
	rc = hist_load(j->db, 0, &h);
	if (rc) {
		rc = jfail(j, rc == -ENOMEM ? rc : -EIO, "journal %s: cannot read the history: %s",
			   j->path, hist_errmsg(j->db));
		goto out;
	}
	desc[0] = 0;
	switch (rule->rule) {
	case RESUME_AUTO:
		/* This journal holds only these ranks' progress: where the job stands is in
		 * every node's journal together (checkpoint marks in one, cursors in all).
		 * Resolved here alone, the nodes of one job would start at different steps. */
		if (ranks->count < nl.world_size && h.nev) {
			rc = jfail(j, -EINVAL, "resume=auto cannot resume %zu of the %" PRIu64
				   " ranks from this journal alone (the others' progress is in other "
				   "nodes' journals): pass every node the resume=samples:G@S that "
				   "`zephon journal resume-point` prints over all of them "
				   "(mountscripts/zephon-node resume-point), or resume=fresh",
				   ranks->count, nl.world_size);
			break;
		}
		rc = point_compute(&h, 1, NULL, &p);
		if (rc)
			break;
		nl.start_step = p.step;
		nl.start_samples = p.samples;
		fmt(desc, sizeof(desc), "auto: %s -> step %" PRIu64 ", samples:%" PRIu64 "%s%s",
			 p.why, p.step, p.samples, p.warning[0] ? "; " : "", p.warning);
		break;
	case RESUME_FRESH:
		snprintf(desc, sizeof(desc), "fresh: step 0, samples:0%s",
			 h.nev ? " (earlier history ignored)" : "");
		break;
	case RESUME_SAMPLES:
	case RESUME_STEP:
		if (rule->value >= ORDER_MAX_GSN) {
			rc = jfail(j, -EINVAL, "resume value %" PRIu64 " is not below 2^62", rule->value);
			break;
		}
		rc = map_rule(j, &h, rule, &nl, desc, sizeof(desc));
		break;
	default:
		rc = jfail(j, -EINVAL, "unknown resume rule");
		break;
	}
	hist_release(&h);
	if (rc)
		goto out;
	if (layout_check(&nl, why, sizeof(why)) || layout_step_gsn(&nl, nl.start_step, &g) ||
	    layout_step_gsn(&nl, nl.start_step + 1, &g)) {
		rc = jfail(j, -EINVAL, "the resume point (step %" PRIu64 ", samples %" PRIu64
			   ") is out of range: %s", nl.start_step, nl.start_samples, why);
		goto out;
	}
	nranks = malloc(ranks->count * sizeof(*nranks));
	npos = malloc(ranks->count * sizeof(*npos));
	/* the list for the row: whole unless absurdly fragmented (compact ranges are short) */
	ranks_len = ranks->count < 3000 ? ranks->count * 21 + 1 : 65536;
	ranks_text = malloc(ranks_len);
	if (!nranks || !npos || !ranks_text) {
		rc = jfail(j, -ENOMEM, "out of memory");
		goto out;
	}
	memcpy(nranks, ranks->ranks, ranks->count * sizeof(*nranks));
	for (size_t i = 0; i < ranks->count; i++) {
		npos[i].step = nl.start_step;
		npos[i].micro = 0;
	}
	rankset_format(ranks, ranks_text, ranks_len);
	journal_resume_format(rule, rule_text, sizeof(rule_text));
	if (gethostname(host, sizeof(host) - 1))
		copy_str(host, sizeof(host), "?");
	t = now_us();
	rc = exec_sql(j->db, "BEGIN IMMEDIATE");
	if (rc == SQLITE_OK)
		rc = insert_layout(j, &nl, ranks_text, host, rule_text, desc, t, &id);
	if (rc == SQLITE_OK)
		rc = insert_cursors(j, id, nranks, ranks->count, nl.start_step);
	if (rc == SQLITE_OK)
		rc = exec_sql(j->db, "COMMIT");
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot record the layout");
		rc = rc == -ENOMEM ? rc : -EIO;
		goto out;
	}
	j->next_seq++;
	free(j->ranks);
	free(j->pos);
	j->ranks = nranks;
	j->pos = npos;
	nranks = NULL;
	npos = NULL;
	j->nranks = ranks->count;
	memset(&j->cur, 0, sizeof(j->cur));
	j->cur.id = id;
	j->cur.layout = nl;
	copy_str(j->cur.ranks, sizeof(j->cur.ranks), ranks_text);
	j->cur.time = t / 1000000;
	copy_str(j->cur.host, sizeof(j->cur.host), host);
	copy_str(j->cur.rule, sizeof(j->cur.rule), rule_text);
	copy_str(j->cur.resume, sizeof(j->cur.resume), desc);
	*l = nl;
	copy_str(applied, applied_len, desc);
	j->err[0] = 0;
out:
	free(nranks);
	free(npos);
	free(ranks_text);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* ---- claims, marks, rewinds ---- */

/* Index of rank in the served set, or -1 (caller holds j->mu). */
static ssize_t rank_index(const struct journal *j, uint64_t rank)
{
	size_t lo = 0, hi = j->nranks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (j->ranks[mid] == rank)
			return (ssize_t)mid;
		if (j->ranks[mid] < rank)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Claims between two checks that the journal is still the file at its path. */
#define MOVED_CHECK_NS 10000000 /* 10 ms */

/* consumed_samples of the current layout (caller holds j->mu, and cur.id is set):
 * G0 + (min over served ranks of the cursor step - S0) * B; *minstep gets that step. */
static uint64_t consumed_locked(const struct journal *j, uint64_t *minstep)
{
	uint64_t m = UINT64_MAX;

	for (size_t i = 0; i < j->nranks; i++)
		if (j->pos[i].step < m)
			m = j->pos[i].step;
	*minstep = m;
	return j->cur.layout.start_samples + (m - j->cur.layout.start_step) *
	       j->cur.layout.global_batch;
}

/* Whether the journal's path no longer names the file this handle writes: 1 only when
 * that is certain. SQLite's SQLITE_FCNTL_HAS_MOVED (a stat(2) of the path) says moved on
 * any failed stat; then a path that no longer exists (ENOENT) or names another file
 * than the one opened is conclusive, and an I/O error or a timeout of a network file
 * system is not (SQLite writes through its open file, and the claim goes on). */
static int journal_moved(struct journal *j)
{
	const char *real;
	struct stat sb;
	int moved = 0;

	if (sqlite3_file_control(j->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK ||
	    !moved)
		return 0;
	real = sqlite3_db_filename(j->db, "main");
	if (!j->file_known || !real || !*real)
		return 1;
	if (stat(real, &sb) != 0)
		return errno == ENOENT;
	return sb.st_dev != j->file_dev || sb.st_ino != j->file_ino;
}

/* Caller holds j->mu. 0, or -EIO when the journal's path no longer names the file this
 * handle writes (deleted by a /tmp cleaner, replaced by a copy): SQLite would go on
 * committing into the orphaned inode, and every later claim would be lost at unmount.
 * The check is a stat(2) of the path, 2.3 us here against 5.5 us for a whole claim
 * (bench_journal), so a claim makes it only when MOVED_CHECK_NS have passed since the
 * last one (always: every_time): the claims of the last 10 ms before a deletion can still
 * be lost. Once found, every later call fails (a file put back at the path is not this
 * one). */
static int check_unmoved(struct journal *j, int every_time)
{
	uint64_t minstep, consumed;

	if (!j->moved) {
		struct timespec ts;
		int64_t now;
		struct hist h;

		clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
		now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
		if (!every_time && now - j->moved_checked < MOVED_CHECK_NS)
			return 0;
		j->moved_checked = now;
		if (!journal_moved(j))
			return 0;
		j->moved = 1;
		/* Where resume=auto would have started, from the history this handle still
		 * holds open (the orphaned file): the latest checkpoint mark or other position
		 * statement, else the cursors. */
		if (hist_load(j->db, 0, &h) == 0) {
			if (point_compute(&h, 1, NULL, &j->moved_point) == 0 &&
			    j->moved_point.basis != JOURNAL_POINT_EMPTY)
				j->moved_known = 1;
			hist_release(&h);
		}
	}
	if (j->moved_known)
		return jfail(j, -EIO, "journal %s was deleted or replaced under the mount, so no "
			     "claim can be recorded; unmount and remount with resume=samples:%"
			     PRIu64 "@%" PRIu64 " (what resume=auto would use: %s)", j->path,
			     j->moved_point.samples, j->moved_point.step, j->moved_point.why);
	consumed = consumed_locked(j, &minstep);
	return jfail(j, -EIO, "journal %s was deleted or replaced under the mount, so no claim "
		     "can be recorded; unmount and remount with resume=samples:%" PRIu64 "@%"
		     PRIu64 " (every served rank had completed the steps before it; its history "
		     "is unreadable)", j->path, consumed, minstep);
}

/* Commit the advance of ranks[i] past its cursor (caller holds j->mu and checked i). */
static int claim_locked(struct journal *j, size_t i)
{
	uint64_t step = j->pos[i].step, micro = j->pos[i].micro;
	int rc;

	rc = check_unmoved(j, 0);
	if (rc)
		return rc;
	layout_advance(&j->cur.layout, &step, &micro);
	sqlite3_bind_int64(j->st_claim, 1, (int64_t)step);
	sqlite3_bind_int64(j->st_claim, 2, (int64_t)micro);
	sqlite3_bind_int64(j->st_claim, 3, j->cur.id);
	sqlite3_bind_int64(j->st_claim, 4, (int64_t)j->ranks[i]);
	rc = sqlite3_step(j->st_claim);
	sqlite3_reset(j->st_claim);
	if (rc != SQLITE_DONE) {
		jfail_sql(j, rc, "cannot journal a claim");
		return -EIO;
	}
	if (sqlite3_changes(j->db) != 1)
		return jfail(j, -EIO, "journal %s: the cursor row of rank %" PRIu64 " is missing",
			     j->path, j->ranks[i]);
	j->pos[i].step = step;
	j->pos[i].micro = micro;
	return 0;
}

static int claim_check(struct journal *j, uint64_t rank, ssize_t *i)
{
	if (j->readonly)
		return jfail(j, -EROFS, "journal %s is open read-only", j->path);
	if (!j->cur.id)
		return jfail(j, -EINVAL, "no mount started on this journal (journal_start)");
	*i = rank_index(j, rank);
	if (*i < 0)
		return jfail(j, -EINVAL, "rank %" PRIu64 " is not served by this mount", rank);
	return 0;
}

int journal_claim(struct journal *j, uint64_t rank, uint64_t step, uint64_t micro)
{
	ssize_t i;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = claim_check(j, rank, &i);
	if (!rc && (j->pos[i].step != step || j->pos[i].micro != micro))
		rc = jfail(j, -EINVAL, "claim of rank %" PRIu64 " at step %" PRIu64 " micro %"
			   PRIu64 " is not its cursor (step %" PRIu64 " micro %" PRIu64 ")", rank,
			   step, micro, j->pos[i].step, j->pos[i].micro);
	if (!rc)
		rc = claim_locked(j, (size_t)i);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_claim_next(struct journal *j, uint64_t rank, uint64_t *step, uint64_t *micro)
{
	ssize_t i;
	uint64_t s = 0, m = 0;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = claim_check(j, rank, &i);
	if (!rc) {
		s = j->pos[i].step;
		m = j->pos[i].micro;
		rc = claim_locked(j, (size_t)i);
	}
	pthread_mutex_unlock(&j->mu);
	if (!rc) {
		*step = s;
		*micro = m;
	}
	return rc;
}

int journal_cursor(struct journal *j, uint64_t rank, uint64_t *step, uint64_t *micro)
{
	ssize_t i;
	int rc = 0;

	pthread_mutex_lock(&j->mu);
	i = j->cur.id ? rank_index(j, rank) : -1;
	if (i < 0) {
		rc = jfail(j, -EINVAL, "rank %" PRIu64 " is not served by this mount", rank);
	} else {
		*step = j->pos[i].step;
		*micro = j->pos[i].micro;
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_current(struct journal *j, struct journal_layout *out)
{
	int rc = 0;

	pthread_mutex_lock(&j->mu);
	if (!j->cur.id)
		rc = -ENOENT;
	else
		*out = j->cur;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

uint64_t journal_consumed(struct journal *j)
{
	uint64_t minstep, out = 0;

	pthread_mutex_lock(&j->mu);
	if (j->cur.id)
		out = consumed_locked(j, &minstep);
	pthread_mutex_unlock(&j->mu);
	return out;
}

/* The range checkpoint and rewind accept (caller holds j->mu): S0 <= step <= furthest,
 * the furthest cursor or `reached`, whichever is further. A checkpoint passes the
 * furthest step/ read (journal_note_reached); a rewind 0, since it moves the cursors of
 * next and never past where one of them has been. */
static int step_check(struct journal *j, const char *what, uint64_t step, uint64_t reached,
		      uint64_t *gsn)
{
	uint64_t far = reached;

	if (j->readonly)
		return jfail(j, -EROFS, "journal %s is open read-only", j->path);
	if (!j->cur.id)
		return jfail(j, -EINVAL, "%s %" PRIu64 ": no mount started on this journal", what,
			     step);
	for (size_t i = 0; i < j->nranks; i++)
		if (j->pos[i].step > far)
			far = j->pos[i].step;
	if (step < j->cur.layout.start_step)
		return jfail(j, -EINVAL, "%s %" PRIu64 ": the step is before step %" PRIu64
			     ", where this mount started", what, step, j->cur.layout.start_step);
	if (step > far)
		return jfail(j, -EINVAL, "%s %" PRIu64 ": no served rank has reached that step "
			     "yet (the furthest, by next or step/, is step %" PRIu64 ")", what, step, far);
	if (layout_step_gsn(&j->cur.layout, step, gsn))
		return jfail(j, -EINVAL, "%s %" PRIu64 ": step out of range", what, step);
	return check_unmoved(j, 1);
}

static int insert_event(struct journal *j, const char *table, uint64_t step, uint64_t gsn,
			int64_t *id)
{
	char sql[160];
	sqlite3_stmt *st;
	int rc;

	snprintf(sql, sizeof(sql), "INSERT INTO %s (seq, layout, step, gsn, time_us) "
		 "VALUES (?1, ?2, ?3, ?4, ?5)", table);
	rc = sqlite3_prepare_v2(j->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, j->next_seq);
	sqlite3_bind_int64(st, 2, j->cur.id);
	sqlite3_bind_int64(st, 3, (int64_t)step);
	sqlite3_bind_int64(st, 4, (int64_t)gsn);
	sqlite3_bind_int64(st, 5, now_us());
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return rc;
	*id = sqlite3_last_insert_rowid(j->db);
	return SQLITE_OK;
}

void journal_note_reached(struct journal *j, uint64_t step)
{
	uint64_t seen = __atomic_load_n(&j->reached, __ATOMIC_RELAXED);

	while (step > seen && !__atomic_compare_exchange_n(&j->reached, &seen, step, 1,
							   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		; /* seen now holds the value another thread stored: compare again */
}

int journal_checkpoint(struct journal *j, uint64_t step)
{
	uint64_t gsn;
	int64_t id;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = step_check(j, "checkpoint", step, __atomic_load_n(&j->reached, __ATOMIC_RELAXED), &gsn);
	if (!rc) {
		rc = insert_event(j, "mark", step, gsn, &id);
		if (rc != SQLITE_OK) {
			rc = jfail_sql(j, rc, "cannot record a checkpoint mark");
			rc = rc == -ENOMEM ? rc : -EIO;
		} else {
			j->next_seq++;
			j->err[0] = 0;
		}
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_rewind(struct journal *j, uint64_t step)
{
	sqlite3_stmt *st = NULL;
	uint64_t gsn;
	int64_t id;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = step_check(j, "rewind", step, 0, &gsn);
	if (rc)
		goto out;
	rc = exec_sql(j->db, "BEGIN IMMEDIATE");
	if (rc == SQLITE_OK)
		rc = insert_event(j, "rewind", step, gsn, &id);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(j->db, "INSERT INTO rewind_cursor (rewind, rank, step, "
					"micro) VALUES (?1, ?2, ?3, ?4)", -1, &st, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < j->nranks; i++) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int64(st, 2, (int64_t)j->ranks[i]);
		sqlite3_bind_int64(st, 3, (int64_t)j->pos[i].step);
		sqlite3_bind_int64(st, 4, (int64_t)j->pos[i].micro);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(j->db, "UPDATE cursor SET step = ?1, micro = 0 "
					"WHERE layout = ?2", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, (int64_t)step);
		sqlite3_bind_int64(st, 2, j->cur.id);
		rc = sqlite3_step(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
		sqlite3_finalize(st);
	}
	if (rc == SQLITE_OK)
		rc = exec_sql(j->db, "COMMIT");
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot record a rewind");
		rc = rc == -ENOMEM ? rc : -EIO;
		goto out;
	}
	j->next_seq++;
	for (size_t i = 0; i < j->nranks; i++) {
		j->pos[i].step = step;
		j->pos[i].micro = 0;
	}
	j->err[0] = 0;
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* ---- reading the history ---- */

int journal_layouts(struct journal *j, struct journal_layout **out, size_t *count)
{
	sqlite3_stmt *st;
	struct journal_layout *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, "SELECT id, world_size, global_batch, micro_batch, "
				"ranks, start_step, start_samples, time_us, host, rule, applied "
				"FROM layout ORDER BY id", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot read the layouts");
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct journal_layout *e;

		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			struct journal_layout *nv = realloc(v, ncap * sizeof(*nv));

			if (!nv) {
				rc = SQLITE_NOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		e = &v[n];
		memset(e, 0, sizeof(*e));
		e->id = sqlite3_column_int64(st, 0);
		if (u64_col(st, 1, &e->layout.world_size) || u64_col(st, 2, &e->layout.global_batch) ||
		    u64_col(st, 3, &e->layout.micro_batch) || u64_col(st, 5, &e->layout.start_step) ||
		    u64_col(st, 6, &e->layout.start_samples)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		copy_str(e->ranks, sizeof(e->ranks), (const char *)sqlite3_column_text(st, 4));
		e->time = sqlite3_column_int64(st, 7) / 1000000;
		copy_str(e->host, sizeof(e->host), (const char *)sqlite3_column_text(st, 8));
		copy_str(e->rule, sizeof(e->rule), (const char *)sqlite3_column_text(st, 9));
		copy_str(e->resume, sizeof(e->resume), (const char *)sqlite3_column_text(st, 10));
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(v);
		rc = sql_errno(rc) ? sql_errno(rc) : -EIO;
		jfail(j, rc, "journal %s: cannot read the layouts", j->path);
		goto out;
	}
	rc = 0;
	*out = v;
	*count = n;
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_cursors(struct journal *j, int64_t layout_id, struct journal_cursor **out,
		    size_t *count)
{
	int64_t one = 0;
	sqlite3_stmt *st;
	int rc;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, "SELECT 1 FROM layout WHERE id = ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, layout_id);
		rc = sqlite3_step(st);
		one = rc == SQLITE_ROW;
		rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_OK)
		rc = jfail_sql(j, rc, "cannot read the cursors");
	else if (!one)
		rc = jfail(j, -ENOENT, "journal %s has no layout %" PRId64, j->path, layout_id);
	else
		rc = load_cursors(j->db, layout_id, out, count);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

static int load_events(struct journal *j, const char *sql, int64_t key,
		       struct journal_event **out, size_t *count)
{
	sqlite3_stmt *st;
	struct journal_event *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot read the history");
		goto out;
	}
	if (key)
		sqlite3_bind_int64(st, 1, key);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct journal_event *nv = realloc(v, ncap * sizeof(*nv));

			if (!nv) {
				rc = SQLITE_NOMEM;
				break;
			}
			v = nv;
			cap = ncap;
		}
		v[n].id = sqlite3_column_int64(st, 0);
		v[n].layout_id = sqlite3_column_int64(st, 1);
		v[n].time_us = sqlite3_column_int64(st, 4);
		if (u64_col(st, 2, &v[n].step) || u64_col(st, 3, &v[n].gsn)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(v);
		rc = sql_errno(rc) ? sql_errno(rc) : -EIO;
		jfail(j, rc, "journal %s: cannot read the history", j->path);
		goto out;
	}
	rc = 0;
	*out = v;
	*count = n;
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_marks(struct journal *j, struct journal_event **out, size_t *count)
{
	return load_events(j, "SELECT id, layout, step, gsn, time_us FROM mark ORDER BY seq",
			   0, out, count);
}

int journal_rewinds(struct journal *j, struct journal_event **out, size_t *count)
{
	return load_events(j, "SELECT id, layout, step, gsn, time_us FROM rewind ORDER BY seq",
			   0, out, count);
}

int journal_rewind_cursors(struct journal *j, int64_t rewind_id,
			   struct journal_cursor **out, size_t *count)
{
	sqlite3_stmt *st;
	int rc, found = 0;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, "SELECT 1 FROM rewind WHERE id = ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, rewind_id);
		found = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot read a rewind");
		goto out;
	}
	if (!found) {
		rc = jfail(j, -ENOENT, "journal %s has no rewind %" PRId64, j->path, rewind_id);
		goto out;
	}
	rc = load_cursor_rows(j->db, "SELECT rank, step, micro FROM rewind_cursor "
			      "WHERE rewind = ?1 ORDER BY rank", rewind_id, out, count);
	if (rc)
		jfail(j, rc, "journal %s: cannot read a rewind", j->path);
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_checkpoint_at(struct journal *j, uint64_t gsn, uint64_t step)
{
	int64_t id;
	int rc;

	pthread_mutex_lock(&j->mu);
	if (j->readonly)
		rc = jfail(j, -EROFS, "journal %s is open read-only", j->path);
	else if (!j->cur.id)
		rc = jfail(j, -EINVAL, "checkpoint samples:%" PRIu64 "@%" PRIu64 ": no mount "
			   "started on this journal", gsn, step);
	else if (gsn >= ORDER_MAX_GSN || step > INT64_MAX)
		rc = jfail(j, -EINVAL, "checkpoint samples:%" PRIu64 "@%" PRIu64 ": out of range",
			   gsn, step);
	else
		rc = check_unmoved(j, 1);
	if (!rc) {
		rc = insert_event(j, "mark", step, gsn, &id);
		if (rc != SQLITE_OK) {
			rc = jfail_sql(j, rc, "cannot record a checkpoint mark");
			rc = rc == -ENOMEM ? rc : -EIO;
		} else {
			j->next_seq++;
			j->err[0] = 0;
		}
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}
