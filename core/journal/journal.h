/*
 * journal.h: the cursor journal (docs/design.md §6), one SQLite database in WAL mode.
 *
 * Owns: the identity it belongs to (dataset fingerprint + seed + shuffle + validation
 * split), the layout history (one row per mount: W, B, m, ranks, S0, G0, time, host, and
 * a mixture's integer weights), the cursor of every
 * served rank (its next claim) and its delivered position (every claim below it reached
 * its reader), checkpoint marks and rewinds. The DDL is schema/journal.sql (embedded at
 * build time), versioned with PRAGMA user_version and migrated step by step. SQLite result
 * codes become -errno here, through the table the catalog uses too (sqlite_errno.h).
 *
 * Invariant: journal_claim() returns 0 only after the cursor advance is committed
 * (synchronous=NORMAL: survives a killed process; FULL: survives power loss): by its own
 * commit, or earlier, by journal_sync_delivered()'s, which reserves the rank's next claim
 * (the row's cursor may then be one claim past the cursor handed out, until the claim
 * or a clean journal_flush_delivered()). A claim that cannot be committed returns -EIO
 * and leaves the cursor where it was, both in memory and on disk. The delivered
 * position never passes the cursor handed out; what is consumed (consumed_samples, the
 * resume point) is counted from it, so a claim whose reader never had its bytes is
 * served again after a restart, never skipped. The caller reports a delivery only once
 * its reader can no longer see an error for it (core/serve/claim.h).
 *
 * Locking: a writable journal is opened in SQLite's EXCLUSIVE locking mode: the mount
 * holds the file's lock from journal_open() to journal_close(), so a second mount of the
 * same journal (another process, or another node on shared storage) is refused with
 * -EBUSY instead of silently serving the same batches twice; WAL then needs no shared
 * memory, which is also what lets it work on network file systems. The price: `zephon
 * journal show` and journal_open_readonly() of a journal that a live mount holds fail
 * with -EBUSY (read the mount's /status instead).
 *
 * Files: journal_open.c (opening, closing), journal_schema.c (creation, validation,
 * migration, the identity), journal_util.c (the helpers), journal_policy.c (the resume
 * rules as pure logic, journal_policy.h), journal_start.c, journal_claim.c (claims,
 * deliveries, marks, rewinds), journal_history.c (history queries); journal_int.h is
 * what they share.
 *
 * Thread-safety: every function taking a struct journal may be called from any thread;
 * a mutex serializes them. One writer process per journal file (one file per node).
 *
 * Sources: SQLite's WAL and its EXCLUSIVE locking mode, https://www.sqlite.org/wal.html;
 * the database header (application_id at offset 68, user_version at 60, checked before
 * SQLite opens a file), https://www.sqlite.org/fileformat2.html#database_header.
 */
#ifndef ZEPHON_JOURNAL_H
#define ZEPHON_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "journal_weights.h"
#include "order.h"

/* COMPATIBILITY: the on-disk schema version (PRAGMA user_version). A journal with a
 * higher version is refused (-EBADMSG); lower versions are migrated on open.
 *   1  schema/journal.sql: meta, layout, cursor, mark, rewind, rewind_cursor
 *   2  cursor.delivered_step, cursor.delivered_micro (the delivered position)
 *   3  layout.weights TEXT: a mixture's integer weights in source order, "7,3,0"
 *      (journal_set_weights()); NULL for a single dataset. Meta key `split` (the
 *      validation split of journal_ident) is written by version 3 only when a split
 *      is given; absent means none. */
#define JOURNAL_SCHEMA_VERSION 3
/* PRAGMA application_id of every Zephon journal: "ZPHJ". COMPATIBILITY: never change. */
#define JOURNAL_APPLICATION_ID 0x5a50484a

struct journal;

/* What a journal belongs to. A journal of another identity is refused. */
struct journal_ident {
	char fingerprint[33];       /* dataset fingerprint, 32 hex digits (of the mixture,
	                             * for a mixture mount) */
	uint64_t seed;
	enum order_shuffle shuffle;
	uint64_t samples;           /* N, for messages and sanity checks (not compared) */
	char split[32];             /* the validation split as text ("validation=1/100"),
	                             * "" for none; compared as text. Meta key `split`,
	                             * absent when "" (so journals without it read as "") */
};

enum journal_sync { JOURNAL_SYNC_NORMAL, JOURNAL_SYNC_FULL };

enum resume_rule { RESUME_AUTO, RESUME_FRESH, RESUME_SAMPLES, RESUME_STEP };
struct journal_resume {
	enum resume_rule rule;
	uint64_t value;             /* G for samples:G, S for step:S */
	int has_step;               /* samples:G@S: S0 = step, not derived from history */
	uint64_t step;
};

/* Parse "auto" | "fresh" | "samples:G" | "samples:G@S" | "step:S" (G, S decimal, below
 * 2^62). samples:G@S starts at gsn G numbered step S: what `zephon journal resume-point`
 * prints, so every node of a job numbers steps alike even when its journal is new.
 * 0 or -EINVAL. */
int journal_resume_parse(const char *s, struct journal_resume *out);
/* Format a rule back ("samples:1024"); out is always NUL-terminated. */
void journal_resume_format(const struct journal_resume *r, char *out, size_t len);

/* A layout as recorded. */
struct journal_layout {
	int64_t id;                 /* row id, increasing */
	struct layout layout;
	char ranks[256];            /* rankset_format() of the served ranks, maybe truncated */
	int64_t time;               /* unix seconds */
	char host[64];
	char rule[64];              /* the resume option given: "auto", "samples:384@12", ... */
	char resume[160];           /* what it resolved to ("auto: checkpoint mark at step 12
	                             * -> step 12, samples:384"), maybe truncated */
	char weights[JOURNAL_WEIGHTS_MAX]; /* a mixture's integer weights in source order,
	                             * "7,3,0" (journal_set_weights()); "" for a single
	                             * dataset, weights not given, or a journal older than
	                             * schema version 3 */
};

/* One served rank's cursor: the next claim of that rank is (step, micro); every claim
 * before (delivered_step, delivered_micro) was delivered to its reader. A version-1
 * journal and a rewind's cursors have delivered = the cursor. */
struct journal_cursor {
	uint64_t rank;
	uint64_t step;
	uint64_t micro;
	uint64_t delivered_step;
	uint64_t delivered_micro;
};

/* A checkpoint mark or a rewind as recorded: STEP, its first gsn in the layout it was
 * given in, and when. */
struct journal_event {
	int64_t id;
	int64_t layout_id;
	uint64_t step;
	uint64_t gsn;
	int64_t time_us;            /* unix microseconds */
};

/* The clock of the history's times (time_us of layouts, marks and rewinds, and the
 * creation time in meta): now_us returns Unix microseconds; NULL restores the real clock
 * (CLOCK_REALTIME). Whatever the clock, the times one process writes are strictly
 * increasing (a time not past the last is the last + 1), so its rows keep their order
 * across journals; setting a clock starts that sequence afresh, so a test's clock gives
 * the times it returns. For tests, which order rows across journals without sleeping
 * between them. Process-wide: set it while no other thread uses a journal. */
void journal_set_clock(int64_t (*now_us)(void));

/* Open or create the journal at path for ident, for writing. A missing or empty (0-byte)
 * file is created (the directory must exist) whole or not at all (journal_create.c: built
 * aside, synced, then linked at path; a kill or power cut leaves nothing, or the empty
 * file, or a complete journal); an unfinished creation of an older zephon (our header
 * beside a rollback journal that would empty it, no history) is discarded and created
 * anew, and err then says so (on success err is otherwise emptied). An existing file is
 * validated before anything is written to it (a file of another program is refused
 * before SQLite could roll back a -journal beside it): SQLite header, application_id,
 * schema version, meta, PRAGMA quick_check, identity. On failure returns -errno with a
 * one-line reason in err (which names the path):
 *   -ESTALE   the journal belongs to another fingerprint/seed/shuffle/split, whatever
 *             the resume rule (err names both, and the two ways out: a new
 *             journal=PATH, or deleting this file);
 *   -EBADMSG  not a Zephon journal (not SQLite, or SQLite of another application),
 *             corrupt, or a schema version newer than this build, or a journal with
 *             history beside a rollback journal that would empty it (nothing is written);
 *   -EEXIST   the file is missing or empty but its -wal holds records (nothing written);
 *   -EBUSY    another process (a live mount) holds the journal;
 *   -EACCES, -EROFS, -ENOENT, -ENOTDIR, -EISDIR  the path cannot be created or written
 *             (the file, and its directory for the -wal file);
 *   -ENOSPC   no room to create it (a file this call created is removed again);
 *   -EINVAL   empty path, no ident, an ident whose fingerprint or split is not
 *             NUL-terminated, or path is not a regular file (a device, a FIFO);
 *   -EIO, -ENOMEM.
 * Applies migrations from older schema versions. *out is set only on success. */
int journal_open(const char *path, const struct journal_ident *ident,
		 enum journal_sync sync, struct journal **out, char *err, size_t errlen);

/* Open an existing journal read-only (for `zephon journal show`), whatever its identity
 * (journal_identity() tells it). Validates like journal_open() but never writes, never
 * migrates (an older schema is read as is): an unfinished creation is -EBADMSG, empty,
 * as a 0-byte file is, and left as it is. -ENOENT (no such file), -EBADMSG, -EBUSY,
 * -EACCES, -EIO, -ENOMEM, with err. Every writing function returns -EROFS on it. */
int journal_open_readonly(const char *path, struct journal **out, char *err, size_t errlen);

/* Close (NULL is a no-op). A clean close checkpoints the WAL into the database. */
void journal_close(struct journal *j);

/* Close j after a mount that never served was refused (its journal_start() failed, or it
 * could not mount): a journal that journal_open() created is removed, one that was an
 * empty file is emptied again, and so are the side files (-wal, -shm, -journal) that
 * did not exist before the open; any other journal is closed as journal_close() does,
 * keeping what was there. NULL is a no-op. */
void journal_abandon(struct journal *j);

/* The identity stored in the journal. */
void journal_identity(struct journal *j, struct journal_ident *out);

/* Are a and b one identity (fingerprint, seed, shuffle and split; samples is not
 * compared)? 1 or 0. journal_ident_text() writes one for messages: "fingerprint F, seed
 * S, shuffle X[, split Y]" (the split only when there is one; out is always
 * NUL-terminated; JOURNAL_IDENT_TEXT_MAX bytes hold it whole). */
#define JOURNAL_IDENT_TEXT_MAX 192
int journal_ident_same(const struct journal_ident *a, const struct journal_ident *b);
void journal_ident_text(const struct journal_ident *id, char *out, size_t len);

/* The reason of the latest failing call on j, from any thread ("" if none): the SQLite
 * message for -EIO, the broken rule for -EINVAL. Copied into out (NUL-terminated). */
void journal_last_error(struct journal *j, char *out, size_t len);

/*
 * The resume point (what `resume=auto` and `zephon journal resume-point` use), over one
 * journal or over several (one per node); docs/design.md §6 says it for people. Precisely:
 *
 *  1. History before the latest `fresh` start is ignored (fresh = an empty journal).
 *  2. If there is a checkpoint mark (in any of the journals): the trainer tells where the
 *     model is, and the resume point is the latest *position statement*: a checkpoint
 *     mark, a rewind, or a layout started by an explicit `samples:G`, `step:S` or `fresh`.
 *     The point is that statement's (step, gsn). Not only marks: rewinds and explicit
 *     starts count too because they also say where the model is: a launcher
 *     that falls back to an older checkpoint (samples:G below the latest mark) must not
 *     resume past it after a second crash. Starts by `auto` restate an earlier point and
 *     are not statements.
 *  3. Otherwise, from the cursors of the last layout. The last layout is the most
 *     recently started one; with several journals, every journal whose last layout has
 *     the same (G0, W, B) belongs to it (each node records its own row of one job
 *     layout; S0 may differ, see below); for a rank served by several of those rows
 *     (ranks moved between nodes at a restart from the same point) the most recently
 *     started row counts. With c_r = delivered_step - S0 of its row the steps rank r
 *     completed (a step with a claim not yet delivered is not complete), S = S0 + min_r c_r and
 *     G = G0 + min_r c_r * B (S0 of the most recent row), the minimum over every rank
 *     0..W-1: a rank in none of the rows has unknown progress and counts as c_r = 0 (the
 *     point is then the layout's start: nothing is skipped), and `warning` says so.
 *  4. No layout: the point is 0 (-ENOENT from journal_resume_point()).
 * "Latest" and "most recently" mean record order within one journal and time_us across
 * journals (node clocks need only be closer than the time between restarts).
 */
enum journal_point_basis {
	JOURNAL_POINT_EMPTY,        /* no layout: samples 0, step 0 */
	JOURNAL_POINT_STATEMENT,    /* rule 2 */
	JOURNAL_POINT_CURSORS,      /* rule 3 */
};
struct journal_point {
	uint64_t samples;           /* G */
	uint64_t step;              /* S */
	enum journal_point_basis basis;
	struct layout last;         /* the last layout (rule 3's S0, G0, W, B, m); zero if empty */
	uint64_t min_completed;     /* rule 3: min_r c_r */
	char why[192];              /* for people: "checkpoint mark at step 12 in PATH",
	                             * "every rank of the last layout completed the steps
	                             * below 40 (rank 3 is the slowest)" */
	char warning[192];          /* "" or "ranks 4-7 of the last layout (world_size 8) are
	                             * in none of the journals: their progress is unknown, ..." */
};

/* The integer weights of the mixture this handle serves, as text: what every later
 * journal_start() on j records in its layout row (layout.weights), until set again.
 * weights: 1 to MIX_MAX_SOURCES decimal integers in source order, separated by single
 * commas, no signs, spaces or leading zeros ("7,3,0": mix_weights_exact()'s integers
 * in decimal), each below 2^20, their sum between 1 and MIX_MAX_PERIOD (core/order/mix.h);
 * NULL or "" for none (a single dataset). The text is copied. 0, or
 * -EINVAL (reason in journal_last_error; the setting before the call is kept), -EROFS
 * (read-only handle). */
int journal_set_weights(struct journal *j, const char *weights);


/* Start a mount: resolve `rule` against the history into S0/G0 of *l (W, B, m are given
 * by the caller in *l), record the layout row (with journal_set_weights()'s weights)
 * and set every served rank's cursor to (S0, 0), all in one transaction. Rules:
 *   auto        the resume point above (G = S = 0 on an empty journal);
 *   fresh       S0 = 0, G0 = 0; the history is kept (for `show`) but ignored from now on;
 *   samples:G@S G0 = G, S0 = S: what `zephon journal resume-point` prints and what a
 *               launcher passes to every node, so that all nodes number steps alike (a
 *               node whose journal is new or missed restarts cannot derive S itself);
 *   samples:G   G0 = G; S0 = the step G falls in per the layout history: the latest
 *               layout with G0_old <= G gives S0_old + (G - G0_old) / B_old (rounded
 *               down when G is not on a step boundary of it); with none, G / B;
 *   step:S      S0 = S; G0 = the first gsn of step S per the latest layout with
 *               S0_old <= S; -EINVAL if there is none (an empty journal).
 * Steps and samples are not checked against a finite stream's end (the caller's job).
 * `applied` receives what was done ("auto: checkpoint mark at step 12 -> step 12,
 * samples:384"); the point's warning, if any, is appended. Returns 0, or -EINVAL
 * (no ranks, a rank >= W, a layout that fails layout_check, step:S unmappable, G0 or the
 * gsn of S0 at or past 2^62; reason in journal_last_error), -EROFS (read-only handle),
 * -EIO, -ENOMEM. A second journal_start on the same handle starts a new layout (a
 * remount). */
int journal_start(struct journal *j, const struct journal_resume *rule,
		  const struct rankset *ranks, struct layout *l,
		  char *applied, size_t applied_len);

/* The resume point `auto` would use now, without starting anything: *samples = G,
 * *step = S. 0, or -ENOENT (no history: G = S = 0), -EBADMSG (a recorded row is out of
 * range or a table is not as written: an edited or damaged journal), -EIO, -ENOMEM.
 * journal_resume_point_ex() fills *info (basis, why, warning, the last layout) and
 * returns 0 for an empty history too (basis JOURNAL_POINT_EMPTY). */
int journal_resume_point(struct journal *j, uint64_t *samples, uint64_t *step);
int journal_resume_point_ex(struct journal *j, struct journal_point *info);

/* Record that rank's claim (step, micro) was handed out: the next claim of that rank is
 * (step, micro + 1) or (step + 1, 0). (step, micro) must be the rank's cursor: this is a
 * compare-and-advance, so two threads can never hand out the same micro-batch. Committed
 * before returning. 0, or -EIO (disk full, I/O error, locked: nothing recorded, cursor
 * unchanged), -EINVAL (no journal_start yet, rank not served, (step, micro) is not the
 * cursor), -EROFS (read-only handle). */
int journal_claim(struct journal *j, uint64_t rank, uint64_t step, uint64_t micro);

/* Claim whatever the rank's cursor is: *step, *micro receive the claimed position.
 * Errors as journal_claim(). */
int journal_claim_next(struct journal *j, uint64_t rank, uint64_t *step, uint64_t *micro);

/*
 * Deliveries. By default a claim counts as delivered when it commits (a caller that
 * hands the bytes over at once). After journal_track_delivery(), the caller reports
 * deliveries with journal_delivered() (in memory), and they are written with the rank's
 * next claim (the same row update, no extra commit), by journal_sync_delivered() (the
 * mount calls it right after it answered a reader's close of a finished batch, never
 * before: a kill before the answer fails that close, and the batch must not be counted;
 * one between the answer and this commit serves that batch again) and by
 * journal_flush_delivered() (a clean unmount). A kill loses only deliveries reported and
 * not yet written: those claims are then served again by a restart (a repeat, never a
 * skip).
 */
/* Deliveries are reported from now on (the mount calls it once after journal_start).
 * The delivered position of every served rank starts at its cursor. */
void journal_track_delivery(struct journal *j);

/* Every claim of rank before (step, micro) was delivered. In memory only, and never
 * waits for a commit in progress (a delivery must not stall with the journal's file
 * system). A position behind the one already reported is ignored. 0, or -EINVAL (no
 * journal_start, rank not served, not tracking, or (step, micro) past the rank's
 * committed cursor: nothing beyond what was claimed can be delivered). */
int journal_delivered(struct journal *j, uint64_t rank, uint64_t step, uint64_t micro);

/* Make rank's delivered position, as reported so far, durable before returning (with
 * sync=normal it survives a killed process, with sync=full a power loss). Nothing is
 * written when it is already: by the rank's claim, or by another caller. When it is
 * not, every served rank's unwritten position goes in the same transaction, so callers
 * that come at once share one commit (a group commit: they queue on the journal's lock
 * while the first commits). Waits for a claim or commit in progress, and for the
 * journal's file system. 0, or -EINVAL (no journal_start, rank not served, not
 * tracking), -EROFS, -EIO (not written: disk full, I/O error, or the journal file was
 * deleted or replaced under the mount; the position stays reported, to go with the
 * next claim; reason in journal_last_error), -ENOMEM. */
int journal_sync_delivered(struct journal *j, uint64_t rank);

/* Write the delivered positions reported since the last write, in one transaction
 * (nothing when none changed). 0, -EROFS, -EIO (nothing written; reason in
 * journal_last_error), -ENOMEM. */
int journal_flush_delivered(struct journal *j);

/* The current cursor of a served rank (the next claim). 0 or -EINVAL (not served, or no
 * journal_start yet). */
int journal_cursor(struct journal *j, uint64_t rank, uint64_t *step, uint64_t *micro);

/* The current layout (the one journal_start recorded on this handle). 0 or -ENOENT. */
int journal_current(struct journal *j, struct journal_layout *out);

/* A job that loads through /rank/<r>/step/<t> claims nothing, so its cursors stay at S0:
 * the mount reports each such read here (step = t + 1), and checkpoint and rewind accept
 * steps up to the furthest of them too. In memory only: a remount starts at its S0.
 * Lock-free: it never waits for a commit in progress. */
void journal_note_reached(struct journal *j, uint64_t step);

/* `checkpoint STEP`: the model state saved now holds every step below STEP. Valid when
 * S0 <= STEP <= the furthest step some served rank has at least reached: its cursor, or
 * journal_note_reached(); STEP need not be above earlier marks (after a rewind it is not).
 * 0, -EINVAL (no journal_start, or STEP out of that range; reason in journal_last_error),
 * -EROFS, -EIO. */
int journal_checkpoint(struct journal *j, uint64_t step);

/* `rewind STEP`: every served rank's cursor and delivered position go to (STEP, 0), in
 * one transaction that also records the cursors it moved from. Same validity range as
 * journal_checkpoint() (ranks behind STEP move forward: the trainer says its model holds
 * every step below STEP). 0, -EINVAL, -EROFS, -EIO (nothing changed). */
int journal_rewind(struct journal *j, uint64_t step);

/* `checkpoint samples:G@S`: a checkpoint mark at gsn G numbered step S, for a loader that
 * positions itself (reads /rank/<r>/at/<G>): the model state saved holds every gsn below
 * G. Any G below ORDER_MAX_GSN, whatever this layout's steps; the mark becomes the
 * resume point as a `checkpoint STEP` mark does. 0, -EINVAL (no journal_start, or G out
 * of range; reason in journal_last_error), -EROFS, -EIO. */
int journal_checkpoint_at(struct journal *j, uint64_t gsn, uint64_t step);

/* consumed_samples: G0 + (min over served ranks of delivered steps) * B for the current
 * layout (the deliveries reported so far, written or not); 0 before journal_start. */
uint64_t journal_consumed(struct journal *j);

/* The layout history, oldest first. *out is malloc'd (caller frees; NULL when *count is
 * 0); 0, -ENOMEM, -EBADMSG (a damaged journal, as journal_resume_point), -EIO. */
int journal_layouts(struct journal *j, struct journal_layout **out, size_t *count);

/* The recorded cursors of one layout (by journal_layout.id), by rank. For the current
 * layout they equal journal_cursor(), or are one claim past it where
 * journal_sync_delivered() reserved the rank's next claim. *out malloc'd; 0, -ENOENT (no such layout),
 * -ENOMEM, -EBADMSG, -EIO. */
int journal_cursors(struct journal *j, int64_t layout_id,
		    struct journal_cursor **out, size_t *count);

/* Checkpoint marks and rewinds, oldest first. *out malloc'd; 0, -ENOMEM, -EBADMSG, -EIO. */
int journal_marks(struct journal *j, struct journal_event **out, size_t *count);
int journal_rewinds(struct journal *j, struct journal_event **out, size_t *count);
/* The cursors a rewind (journal_event.id) moved from. 0, -ENOENT, -ENOMEM, -EBADMSG,
 * -EIO. */
int journal_rewind_cursors(struct journal *j, int64_t rewind_id,
			   struct journal_cursor **out, size_t *count);

/* Resume point over several journals (one per node), as `zephon journal resume-point`:
 * the rules above. Opens each with journal_open_readonly() (all must share one identity,
 * else -ESTALE naming the two files). 0, or -errno of journal_open_readonly() with err
 * naming the file, -EINVAL (npaths == 0), -ESTALE, -ENOMEM. An empty history gives 0
 * (G = S = 0, basis JOURNAL_POINT_EMPTY), not -ENOENT. The same file given twice counts
 * once per rank (the newest row wins), so duplicates are harmless. */
int journal_resume_point_files(const char *const *paths, size_t npaths,
			       uint64_t *samples, uint64_t *step, char *err, size_t errlen);
int journal_resume_point_files_ex(const char *const *paths, size_t npaths,
				  struct journal_point *info, char *err, size_t errlen);

#endif
