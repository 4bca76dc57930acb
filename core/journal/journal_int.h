/*
 * journal_int.h: what the files of the journal share (core/journal/journal*.c only): struct
 * journal, and the helpers around its SQLite connection. journal.h is the contract;
 * this header is its implementation's.
 *
 *   journal_open.c     opening, closing, abandoning
 *   journal_create.c   a new journal file, made whole or not at all
 *   journal_schema.c   the schema's creation, validation, migration, the identity
 *   journal_util.c     the helpers below (clock, error texts, one-row queries)
 *   journal_policy.c   the resume rules as pure logic (journal_policy.h)
 *   journal_start.c    journal_start(): resolving a rule and recording a layout
 *   journal_claim.c    claims, deliveries, checkpoint marks, rewinds
 *   journal_history.c  loading histories, the resume point, history queries
 *
 * Locking: every entry point takes j->mu; the helpers expect it held where they touch j.
 */
#ifndef ZEPHON_JOURNAL_INT_H
#define ZEPHON_JOURNAL_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "buf.h"
#include "journal.h"
#include "journal_policy.h"

/* A (step, micro) position of one rank. */
struct rank_pos {
	uint64_t step;
	uint64_t micro;
};

/* One served rank of the current layout: its positions (caller holds j->mu; dlv and
 * claimed are under j->dmu too). */
struct jrank {
	struct rank_pos pos;        /* the cursor: the next claim handed out */
	/* the committed cursor: pos, or one claim past it when a delivery's commit
	 * (journal_sync_delivered) reserved the rank's next claim; a claim below it needs
	 * no commit of its own */
	struct rank_pos cpos;
	struct rank_pos dpos;       /* committed delivered position */
	struct rank_pos dlv;        /* delivered position reported, not yet written */
	/* the delivered position journal_sync_delivered() was asked to write (under mu): a
	 * group commit writes these, never a position only reported (a last byte read by a
	 * reader that may yet fail: that one goes with the rank's next claim) */
	struct rank_pos want;
	struct rank_pos claimed;    /* = pos, for journal_delivered's check */
};

/* journal->created: whether journal_abandon() has something to undo. */
enum { JOURNAL_NEW_NONE, JOURNAL_NEW_FILE, JOURNAL_NEW_FILLED_EMPTY };
struct journal {
	pthread_mutex_t mu;
	sqlite3 *db;
	char *path;
	char *wal_cleanup;          /* readers: a -wal this open created, removed at close */
	int readonly;
	int version;                /* user_version: 1 has no delivered positions, 2 no
	                             * layout.weights */
	int created;                /* JOURNAL_NEW_*: what journal_open() found at path */
	unsigned sides_existed;     /* bit k: side_names[k] existed before journal_open() */
	struct journal_ident ident;
	int64_t next_seq;           /* seq of the next history row */
	sqlite3_stmt *st_claim;     /* UPDATE cursor ... (the hot path) */
	/* The current layout (journal_start on this handle); cur.id == 0: none. */
	struct journal_layout cur;
	char weights[JOURNAL_WEIGHTS_MAX]; /* journal_set_weights(): "" for none */
	/* the served ranks of the current layout, and their positions: rk[i] is
	 * ranks.ranks[i]'s (jnl_ranks_set) */
	struct rankset ranks;
	struct jrank *rk;
	/* journal_track_delivery(): deliveries are reported by journal_delivered() and
	 * written with the rank's next claim or journal_flush_delivered(); else a claim
	 * counts as delivered when it commits. dmu guards each rank's dlv and claimed, and is
	 * never held during a commit: a delivery never waits for the journal's file system.
	 * Lock order: mu, then dmu. */
	int track;
	pthread_mutex_t dmu;
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

/* ---- helpers (journal_util.c) ---- */

/* Unix microseconds for history rows, strictly increasing within the process, so the
 * rows of several journals written by one process keep their order across journals. */
int64_t jnl_now_us(void);

/* Copy src ("" for NULL) into dst, truncated on purpose when long (len may be 0); texts
 * are formatted with err_printf() (core/util/buf.h), which truncates the same way. */
void jnl_copy_str(char *dst, size_t len, const char *src);

/* Record the reason of a failing call in j->err (caller holds j->mu) and return rc. */
__attribute__((format(printf, 3, 4)))
int jfail(struct journal *j, int rc, const char *fmt, ...);

/* A failed SQLite call on j's connection: keep its message, undo an open transaction,
 * return sqlite_errno(rc) (-EIO when that is 0). */
int jfail_sql(struct journal *j, int rc, const char *what);

/* sqlite3_exec without callbacks; SQLite's rc. */
int jnl_exec(sqlite3 *db, const char *sql);
/* "file:" URI of path for sqlite3_open_v2 (https://www.sqlite.org/uri.html; '%', '?',
 * '#' escaped), with query after its '?': malloc'd, NULL when out of memory. */
char *jnl_file_uri(const char *path, const char *query);

/* One integer from a one-row query; SQLite's rc (SQLITE_EMPTY: no row). */
int jnl_query_i64(sqlite3 *db, const char *sql, int64_t *out);

/* Make ranks (taken over: its array is j's now) and rk (ranks->count positions, in its
 * order; malloc'd) j's served ranks, freeing those it had (caller holds j->mu; takes
 * j->dmu). NULL and NULL: none. The one place they are freed. */
void jnl_ranks_set(struct journal *j, struct rankset *ranks, struct jrank *rk);

/* Column col as a uint64_t: 0, or -EBADMSG when negative (a corrupt or edited row). */
int jnl_u64_col(sqlite3_stmt *st, int col, uint64_t *out);

/* The layout of a row whose columns col[0..5) hold its world_size, global_batch,
 * micro_batch, start_step and start_samples: 0, or -EBADMSG when they make no layout
 * (layout_make refuses them: a corrupt or edited row). */
int jnl_layout_cols(sqlite3_stmt *st, const int col[5], struct layout *out);

/* ---- schema and identity (journal_schema.c) ---- */

/* An existing file SQLite cannot read as a journal (src: SQLite's rc): a reason in err,
 * and -EBUSY (another process holds it), -ENOMEM or -EBADMSG. */
int jnl_bad_file(sqlite3 *db, int src, const char *path, char *err, size_t errlen);

/* Steps from user_version `from` to JOURNAL_SCHEMA_VERSION, inside the caller's
 * transaction; SQLite's rc. */
int jnl_migrate(sqlite3 *db, int from);

/* A new journal: application_id, every migration step and the identity id, in one
 * transaction of the rollback journal. SQLite's rc (SQLITE_NOTADB: someone else wrote
 * to the empty file meanwhile); rolled back on failure. */
int jnl_create_schema(sqlite3 *db, const struct journal_ident *id);

/* journal_create.c. A new journal of identity want at path, which is missing
 * (over_empty 0) or an empty file (1, replaced: its mode kept): built whole, synced,
 * then linked at path and the directory synced, in WAL mode from its first byte. First
 * jnl_birth_sides(). 0, -EAGAIN (path appeared, or the empty file was written,
 * meanwhile: open it as it is), or -errno with err (jnl_birth_sides()'s -EEXIST among
 * them; nothing left at path but what was there). */
int jnl_create_file(const char *path, int over_empty, const struct journal_ident *want,
		    char *err, size_t errlen);
/* Whether path, a file with our header, is an unfinished creation: its rollback journal
 * (path-journal) is hot and began on an empty file, so its rollback would empty path
 * and nothing in it was ever committed (a creation by an older zephon, killed in it).
 * Checked without writing: path read in SQLite's immutable mode must hold no layout (or
 * be unreadable, half written). 1: unfinished; 0: not (no such rollback journal);
 * -EBADMSG with err: such a rollback journal beside a journal with history (refuse,
 * touching neither); -ENOMEM. */
int jnl_birth_unfinished(const char *path, char *err, size_t errlen);
/* Remove such an unfinished creation: path, then path-journal; the directory synced.
 * 0 or -errno with err. */
int jnl_birth_discard(const char *path, char *err, size_t errlen);
/* Beside a path about to be created (missing or empty): remove a -journal (nothing
 * rolls back into an empty file) and an empty -wal; a -wal holding records refuses
 * (-EEXIST with err: it may be a journal's only copy of its latest records). */
int jnl_birth_sides(const char *path, char *err, size_t errlen);

/* Validate an existing journal inside a transaction the caller opened: application_id,
 * schema version, quick_check, identity (into *id). *version receives user_version.
 * 0, or -errno with a reason in err (-EBADMSG: not a journal, too new, corrupt). */
int jnl_validate(sqlite3 *db, const char *path, struct journal_ident *id, int *version,
		 char *err, size_t errlen);

/* ---- history rows (journal_history.c) ---- */

/* Rows (rank, step, micro[, delivered_step, delivered_micro]) of `sql` with ?1 = key,
 * into a malloc'd array; without the delivered columns the delivered position is the
 * cursor. 0 or -errno (impossible values read as corruption: -EBADMSG). */
int jnl_load_cursor_rows(sqlite3 *db, const char *sql, int64_t key,
			 struct journal_cursor **out, size_t *count);
/* The cursors of one layout (schema version `version`), by rank. As above. */
int jnl_load_cursors(sqlite3 *db, int version, int64_t layout_id,
		     struct journal_cursor **out, size_t *count);

/* Every layout, mark and rewind of db in seq order, with the cursors of the last
 * layout; src is stored in each event. 0 or -errno (h is then empty). */
int hist_load(sqlite3 *db, int version, size_t src, struct hist *h);
/* Why hist_load() failed, for messages. */
const char *hist_errmsg(sqlite3 *db);

#endif
