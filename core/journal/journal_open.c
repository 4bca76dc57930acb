/*
 * journal_open.c: opening a journal (see journal.h): checks of the path and the file
 * before SQLite sees it, the connection's settings, the handle, closing and abandoning.
 * What a journal file holds (its schema, its identity) is journal_schema.c's; the small
 * helpers every journal file uses are journal_util.c's.
 */
#include "journal_int.h"
#include "parse.h"
#include "sqlite_errno.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zephon_config.h"

/* busy_timeout: a live mount holds the lock for its whole life, so waiting longer only
 * delays the refusal; a little absorbs a `journal show` that is just finishing. */
#define JOURNAL_BUSY_MS 100
/* WAL size after a checkpoint is truncated back to this (the file size a long run keeps). */
#define JOURNAL_WAL_LIMIT (1 << 20)

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
		return err_set(err, errlen, -errno, "cannot read journal %s: %s", path, strerror(errno));
	n = pread(fd, h, sizeof(h), 0);
	close(fd);
	if (n < 0)
		return err_set(err, errlen, -EIO, "cannot read journal %s: %s", path, strerror(errno));
	if (n < (ssize_t)sizeof(h) || memcmp(h, magic, sizeof(magic)))
		return err_set(err, errlen, -EBADMSG,
			    "%s is not a Zephon journal (not a SQLite database, or truncated); "
			    "nothing was written to it: pass another journal=PATH", path);
	app = (uint32_t)h[68] << 24 | (uint32_t)h[69] << 16 | (uint32_t)h[70] << 8 | h[71];
	if (app != JOURNAL_APPLICATION_ID)
		return err_set(err, errlen, -EBADMSG,
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

/* The files SQLite may create beside a journal (WAL, its shared memory, the rollback
 * journal of the creating transaction). */
static const char *const side_names[] = { "-wal", "-shm", "-journal" };
#define NSIDES (sizeof(side_names) / sizeof(side_names[0]))

/* Which side files of path exist: bit k for side_names[k]. */
static unsigned sides_present(const char *path)
{
	unsigned bits = 0;

	for (unsigned k = 0; k < NSIDES; k++) {
		char *p = side_path(path, side_names[k]);

		if (file_exists(p))
			bits |= 1u << k;
		free(p);
	}
	return bits;
}

/* Remove a side file (-wal, -journal) that this open created and left empty. */
static void drop_empty_side(const char *path, int existed)
{
	struct stat st;

	if (path && !existed && !stat(path, &st) && st.st_size == 0)
		unlink(path);
}

/* The directory holding path ("." for a bare name, "/" for a file in the root), malloc'd;
 * NULL when out of memory. */
static char *parent_dir(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

static int dir_writable(const char *path, char *err, size_t errlen)
{
	char *dir = parent_dir(path);
	int rc = 0;

	if (!dir)
		return -ENOMEM;
	if (access(dir, W_OK))
		rc = err_set(err, errlen, -errno,
			  "cannot write journal %s: its directory %s is not writable (%s); "
			  "pass journal=PATH in a writable directory", path, dir, strerror(errno));
	free(dir);
	return rc;
}

static int prepare_claim(struct journal *j)
{
	return sqlite3_prepare_v3(j->db,
		"UPDATE cursor SET step = ?1, micro = ?2, delivered_step = ?5, delivered_micro = ?6 "
		"WHERE layout = ?3 AND rank = ?4",
		-1, SQLITE_PREPARE_PERSISTENT, &j->st_claim, NULL);
}

static int load_next_seq(struct journal *j)
{
	int64_t seq = 0;
	int rc = jnl_query_i64(j->db,
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

static int can_write(const char *path)
{
	char *dir = parent_dir(path);
	int ok;

	if (!dir)
		return 0;
	ok = !access(path, W_OK) && !access(dir, W_OK);
	free(dir);
	return ok;
}

/* Check what is at path before SQLite sees it. *create: nothing there (or 0 bytes), or
 * (a writer) an unfinished creation to discard first (*unfinished). */
static int precheck(const char *path, enum open_mode mode, int *create, int *existed,
		    int *unfinished, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	*create = 0;
	*existed = 1;
	*unfinished = 0;
	if (stat(path, &st)) {
		int e = errno;

		if (e != ENOENT || mode != OPEN_WRITE)
			return err_set(err, errlen, -e, "cannot open journal %s: %s%s", path,
				    strerror(e), mode != OPEN_WRITE ? "" :
				    "; pass journal=PATH where a file can be created");
		*create = 1;
		*existed = 0;
		return 0;
	}
	if (S_ISDIR(st.st_mode))
		return err_set(err, errlen, -EISDIR, "journal %s is a directory; pass journal=PATH "
			    "naming a file", path);
	if (!S_ISREG(st.st_mode))
		return err_set(err, errlen, -EINVAL, "journal %s is not a regular file; pass "
			    "journal=PATH naming a file", path);
	if (st.st_size == 0) {
		if (mode != OPEN_WRITE)
			return err_set(err, errlen, -EBADMSG, "journal %s is empty: no mount has "
				    "recorded anything in it", path);
		*create = 1;
		return 0;
	}
	rc = check_header(path, err, errlen);
	/* Our header beside a rollback journal that would empty the file: the creation of
	 * an older zephon, killed before it committed. SQLite would roll it back to nothing
	 * (a reader must not: it only reads); a writer creates it anew. */
	if (!rc && (rc = jnl_birth_unfinished(path, err, errlen)) == 1) {
		rc = 0;
		if (mode != OPEN_WRITE)
			return err_set(err, errlen, -EBADMSG, "journal %s is empty: the mount that "
				    "created it was stopped before it was complete (nothing was recorded "
				    "in it; the next mount creates it anew)", path);
		*create = *unfinished = 1;
	}
	return rc;
}

/* One journal_open*() in progress: what its steps have set up, for the next step and
 * for open_unwind(). */
struct opening {
	const char *path;
	enum open_mode mode;
	int create;                 /* nothing at path (or 0 bytes): create the journal */
	int existed;                /* path existed before this open (0 after discarding an
	                             * unfinished creation) */
	int unfinished;             /* an unfinished creation was there: discarded */
	int made;                   /* this open created the file at path */
	int wal_existed;
	unsigned sides;             /* sides_present() before this open */
	char *wal, *uri;
	sqlite3 *db;
	struct journal_ident have;
	int version;
};

/* What is at the path, and for a writer, that it can be written (our own open() first:
 * it reports the precise errno, EACCES, EROFS, ..., where SQLite would only say "unable
 * to open"), or a new journal created there whole (journal_create.c). 0 or -errno with
 * err. */
static int open_file(struct opening *o, const struct journal_ident *want, char *err,
		     size_t errlen)
{
	int fd, rc;

	for (int tries = 0;; tries++) {
		rc = precheck(o->path, o->mode, &o->create, &o->existed, &o->unfinished, err, errlen);
		if (rc)
			return rc;
		o->sides = sides_present(o->path);
		if (o->mode != OPEN_WRITE)
			return 0;
		if (o->unfinished) {
			if ((rc = jnl_birth_discard(o->path, err, errlen)))
				return rc;
			o->existed = 0;
			o->sides = sides_present(o->path);
		}
		if (!o->create)
			break;
		rc = jnl_create_file(o->path, o->existed, want, err, errlen);
		if (rc != -EAGAIN || tries) /* made meanwhile, by another mount: open that */
			break;
	}
	if (rc == -EAGAIN)
		rc = err_set(err, errlen, -EBUSY, "journal %s is being created by another process "
			      "at the same time; two mounts need two journal=PATHs", o->path);
	if (o->create) {
		o->made = !rc;
		return rc;
	}
	fd = open(o->path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		return err_set(err, errlen, -e, "cannot write journal %s: %s; pass journal=PATH on "
				"a writable file system", o->path, strerror(e));
	}
	close(fd);
	return 0;
}

/* The SQLite connection in EXCLUSIVE locking mode (a reader of a file it cannot write
 * and without a WAL to replay uses immutable mode). 0 or -errno with err. */
static int open_db(struct opening *o, char *err, size_t errlen)
{
	int src, flags;

	o->wal = side_path(o->path, "-wal");
	if (!o->wal)
		return -ENOMEM;
	o->wal_existed = file_exists(o->wal);
	if (o->mode == OPEN_READ && !can_write(o->path)) {
		struct stat st;

		if (o->wal_existed && !stat(o->wal, &st) && st.st_size > 0)
			return err_set(err, errlen, -EROFS, "cannot read journal %s: its write-ahead "
					"log %s holds records that only a writable open can replay; run "
					"this where the journal's directory is writable", o->path, o->wal);
		o->mode = OPEN_READ_IMMUTABLE;
	}
	o->uri = jnl_file_uri(o->path, o->mode == OPEN_READ_IMMUTABLE ? "immutable=1" : "");
	if (!o->uri)
		return -ENOMEM;
	flags = SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX |
		(o->mode == OPEN_READ_IMMUTABLE ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE);
	src = sqlite3_open_v2(o->uri, &o->db, flags, NULL);
	if (src != SQLITE_OK)
		return err_set(err, errlen, sqlite_errno(src) == -ENOMEM ? -ENOMEM : -EIO,
				"cannot open journal %s: %s", o->path,
				o->db ? sqlite3_errmsg(o->db) : "out of memory");
	sqlite3_extended_result_codes(o->db, 1);
	sqlite3_busy_timeout(o->db, JOURNAL_BUSY_MS);
	/* Until the file is known to be ours (and always for readers), closing must not
	 * checkpoint a WAL into it. */
	sqlite3_db_config(o->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	src = jnl_exec(o->db, "PRAGMA locking_mode = EXCLUSIVE");
	if (src == SQLITE_OK && o->mode != OPEN_READ_IMMUTABLE &&
	    sqlite3_db_readonly(o->db, "main") == 1)
		return err_set(err, errlen, -EROFS, "cannot write journal %s: it is read-only; "
				"pass journal=PATH on a writable file system", o->path);
	if (src != SQLITE_OK)
		return err_set(err, errlen, -EIO, "cannot open journal %s: %s", o->path,
				sqlite3_errmsg(o->db));
	return 0;
}

/* An existing journal (or one this open just created): validated, of identity want
 * (when given), migrated for a writer, in one transaction. 0 or -errno with err (the
 * transaction rolled back). */
static int open_existing(struct opening *o, const struct journal_ident *want, char *err,
			 size_t errlen)
{
	char a[JOURNAL_IDENT_TEXT_MAX], b[JOURNAL_IDENT_TEXT_MAX];
	int src, rc;

	/* BEGIN IMMEDIATE takes the write lock now: in EXCLUSIVE mode it stays ours until
	 * close, and a live mount elsewhere makes this fail with BUSY. Readers take the read
	 * lock (BEGIN + the first read) and keep it too. */
	src = jnl_exec(o->db, o->mode == OPEN_WRITE ? "BEGIN IMMEDIATE" : "BEGIN");
	if (src != SQLITE_OK)
		return jnl_bad_file(o->db, src, o->path, err, errlen);
	rc = jnl_validate(o->db, o->path, &o->have, &o->version, err, errlen);
	if (!rc && want && !journal_ident_same(&o->have, want)) {
		journal_ident_text(&o->have, a, sizeof(a));
		journal_ident_text(want, b, sizeof(b));
		rc = err_set(err, errlen, -ESTALE,
			      "journal %s belongs to another dataset, order or split (%s) than this "
			      "mount (%s), and no resume= rule can use it; pass journal=PATH naming "
			      "a file that does not exist yet (add resume=samples:G@S to keep the "
			      "position), or delete %s (and %s-wal) to start over at step 0",
			      o->path, a, b, o->path, o->path);
	}
	if (!rc && o->mode == OPEN_WRITE && o->version < JOURNAL_SCHEMA_VERSION) {
		src = jnl_migrate(o->db, o->version);
		if (src != SQLITE_OK)
			rc = err_set(err, errlen, -EIO, "cannot migrate journal %s from schema "
				      "version %d: %s", o->path, o->version, sqlite3_errmsg(o->db));
		else
			o->version = JOURNAL_SCHEMA_VERSION;
	}
	if (!rc && (src = jnl_exec(o->db, "COMMIT")) != SQLITE_OK)
		rc = err_set(err, errlen, -EIO, "cannot open journal %s: %s", o->path,
			      sqlite3_errmsg(o->db));
	if (rc)
		jnl_exec(o->db, "ROLLBACK");
	return rc;
}

/* A writer's WAL and durability settings; a reader's query_only. 0 or -errno with err. */
static int open_settings(struct opening *o, enum journal_sync sync, char *err, size_t errlen)
{
	char pragmas[256];
	int src;

	if (o->mode != OPEN_WRITE) {
		jnl_exec(o->db, "PRAGMA query_only = 1");
		return 0;
	}
	snprintf(pragmas, sizeof(pragmas),
		 "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s; "
		 "PRAGMA journal_size_limit = %d;",
		 sync == JOURNAL_SYNC_FULL ? "FULL" : "NORMAL", JOURNAL_WAL_LIMIT);
	src = jnl_exec(o->db, pragmas);
	if (src != SQLITE_OK)
		return err_set(err, errlen, sqlite_errno(src) == -ENOMEM ? -ENOMEM : -EIO,
				"cannot open journal %s: %s", o->path, sqlite3_errmsg(o->db));
	return 0;
}

/* The handle: it takes o's connection and, for a reader, the WAL to clean up (o->db and
 * o->wal are then NULL). 0 or -errno with err. */
static int open_handle(struct opening *o, struct journal **out, char *err, size_t errlen)
{
	struct journal *j = calloc(1, sizeof(*j));
	int src;

	if (!j)
		return -ENOMEM;
	j->db = o->db;
	j->ident = o->have;
	j->readonly = o->mode != OPEN_WRITE;
	j->version = o->version;
	j->created = o->mode != OPEN_WRITE || !o->create ? JOURNAL_NEW_NONE :
		     o->existed ? JOURNAL_NEW_FILLED_EMPTY : JOURNAL_NEW_FILE;
	j->sides_existed = o->sides;
	j->path = strdup(o->path);
	if (!j->path || pthread_mutex_init(&j->mu, NULL)) {
		free(j->path);
		free(j);
		return -ENOMEM;
	}
	if (pthread_mutex_init(&j->dmu, NULL)) {
		pthread_mutex_destroy(&j->mu);
		free(j->path);
		free(j);
		return -ENOMEM;
	}
	src = load_next_seq(j);
	if (src == SQLITE_OK && o->mode == OPEN_WRITE)
		src = prepare_claim(j);
	if (src != SQLITE_OK) {
		int rc = err_set(err, errlen, sqlite_errno(src) == -ENOMEM ? -ENOMEM : -EBADMSG,
				  "cannot open journal %s: %s", o->path, sqlite3_errmsg(o->db));

		sqlite3_finalize(j->st_claim);
		pthread_mutex_destroy(&j->mu);
		pthread_mutex_destroy(&j->dmu);
		free(j->path);
		free(j);
		return rc;
	}
	if (o->mode == OPEN_WRITE) {
		const char *real = sqlite3_db_filename(o->db, "main");
		struct stat sb;

		/* ours: a clean close merges the WAL into the database and removes it */
		sqlite3_db_config(o->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
		/* the file this handle writes, for check_unmoved() */
		if (real && *real && stat(real, &sb) == 0) {
			j->file_dev = sb.st_dev;
			j->file_ino = sb.st_ino;
			j->file_known = 1;
		}
	} else if (!o->wal_existed) {
		j->wal_cleanup = o->wal; /* remove at close if this reader left it empty */
		o->wal = NULL;
	}
	o->db = NULL;
	*out = j;
	return 0;
}

/* Undo what a failed open set up: the connection, an empty WAL it created, the file
 * when this open created it (emptied again when it was an empty file). */
static void open_unwind(struct opening *o)
{
	sqlite3_close_v2(o->db);
	drop_empty_side(o->wal, o->wal_existed);
	if (o->made && !o->existed)
		unlink(o->path);
	else if (o->made && truncate(o->path, 0) != 0) {
		/* left as a valid journal without a layout: the next mount uses it */
	}
}

/* Open op->path as op->mode says (op: path and mode set, the rest zero). */
static int open_common(const struct opening *op, const struct journal_ident *want,
		       enum journal_sync sync, struct journal **out, char *err, size_t errlen)
{
	struct opening o = *op;
	const char *path = o.path;
	int rc;

	o.existed = o.wal_existed = 1;
	if (!path || !*path)
		return err_set(err, errlen, -EINVAL, "journal path is empty");
	rc = open_file(&o, want, err, errlen);
	if (!rc && o.mode == OPEN_WRITE)
		rc = dir_writable(path, err, errlen);
	if (!rc)
		rc = open_db(&o, err, errlen);
	if (!rc)
		rc = open_existing(&o, want, err, errlen);
	if (!rc)
		rc = open_settings(&o, sync, err, errlen);
	if (!rc)
		rc = open_handle(&o, out, err, errlen);
	if (rc)
		open_unwind(&o);
	else if (o.unfinished)
		err_set(err, errlen, 0, "journal %s was left unfinished by a mount stopped while "
			 "creating it (nothing had been recorded in it): created anew", path);
	else if (err && errlen)
		err[0] = 0;
	free(o.uri);
	free(o.wal);
	return rc;
}

int journal_open(const char *path, const struct journal_ident *ident,
		 enum journal_sync sync, struct journal **out, char *err, size_t errlen)
{
	if (!ident || !out)
		return err_set(err, errlen, -EINVAL, "journal_open: no identity given");
	if (!memchr(ident->fingerprint, 0, sizeof(ident->fingerprint)) ||
	    !memchr(ident->split, 0, sizeof(ident->split)))
		return err_set(err, errlen, -EINVAL, "journal_open: the identity's fingerprint "
				"or split is not NUL-terminated");
	return open_common(&(struct opening){ .path = path, .mode = OPEN_WRITE }, ident, sync,
			   out, err, errlen);
}

int journal_open_readonly(const char *path, struct journal **out, char *err, size_t errlen)
{
	if (!out)
		return err_set(err, errlen, -EINVAL, "journal_open_readonly: no result pointer");
	return open_common(&(struct opening){ .path = path, .mode = OPEN_READ }, NULL,
			   JOURNAL_SYNC_NORMAL, out, err, errlen);
}

void journal_close(struct journal *j)
{
	if (!j)
		return;
	sqlite3_finalize(j->st_claim);
	sqlite3_close_v2(j->db);
	drop_empty_side(j->wal_cleanup, 0);
	jnl_ranks_set(j, NULL, NULL);
	pthread_mutex_destroy(&j->mu);
	pthread_mutex_destroy(&j->dmu);
	free(j->wal_cleanup);
	free(j->path);
	free(j);
}

void journal_abandon(struct journal *j)
{
	if (!j)
		return;
	if (j->created != JOURNAL_NEW_NONE) {
		/* Undone while this handle still holds the file's lock, so no other mount can
		 * have opened it meanwhile; closing then must not write into the file: no
		 * checkpoint of the WAL (which is removed with the other side files). */
		sqlite3_db_config(j->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
		if (j->created == JOURNAL_NEW_FILE) {
			unlink(j->path);
		} else if (truncate(j->path, 0) != 0) {
			/* left as a valid journal without a layout: the next mount uses it */
		}
		for (unsigned k = 0; k < NSIDES; k++) {
			char *p = side_path(j->path, side_names[k]);

			if (p && !(j->sides_existed & (1u << k)))
				unlink(p);
			free(p);
		}
	}
	journal_close(j);
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
	jnl_copy_str(out, len, j->err);
	pthread_mutex_unlock(&j->mu);
}

