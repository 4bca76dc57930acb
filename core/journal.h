/*
 * journal.h: the cursor journal (DESIGN.md section 5), one SQLite database in WAL mode.
 *
 * Owns: the identity it belongs to (dataset fingerprint + seed + shuffle), the layout
 * history (one row per mount: W, B, m, ranks, S0, G0, time, host), the cursor of every
 * served rank, checkpoint marks and rewinds. SQLite result codes are translated to -errno
 * here and nowhere else.
 *
 * Invariant: journal_claim() returns 0 only after the cursor advance is committed
 * (synchronous=NORMAL: survives a killed process; FULL: survives power loss). A claim
 * that cannot be committed returns -EIO and leaves the cursor where it was.
 *
 * Thread-safety: every function may be called from any thread; a mutex serializes them.
 * One writer process per journal file (one file per node on shared storage).
 */
#ifndef ZEPHON_JOURNAL_H
#define ZEPHON_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "order.h"

#define JOURNAL_SCHEMA_VERSION 1

struct journal;

/* What a journal belongs to. A journal of another identity is refused. */
struct journal_ident {
	char fingerprint[33];       /* dataset fingerprint, 32 hex digits */
	uint64_t seed;
	enum order_shuffle shuffle;
	uint64_t samples;           /* N, for messages and sanity checks */
};

enum journal_sync { JOURNAL_SYNC_NORMAL, JOURNAL_SYNC_FULL };

enum resume_rule { RESUME_AUTO, RESUME_FRESH, RESUME_SAMPLES, RESUME_STEP };
struct journal_resume {
	enum resume_rule rule;
	uint64_t value;             /* G for samples:G, S for step:S */
};

/* Parse "auto" | "fresh" | "samples:G" | "step:S". 0 or -EINVAL. */
int journal_resume_parse(const char *s, struct journal_resume *out);
/* Format a rule back ("samples:1024"). */
void journal_resume_format(const struct journal_resume *r, char *out, size_t len);

/* A layout as recorded. */
struct journal_layout {
	int64_t id;                 /* row id, increasing */
	struct layout layout;
	char ranks[256];            /* rankset_format() of the served ranks, maybe truncated */
	int64_t time;               /* unix seconds */
	char host[64];
	char resume[64];            /* the resume rule that produced S0/G0, as applied */
};

/* Open or create the journal at path for ident. On failure returns -errno with a
 * one-line reason in err:
 *   -ESTALE   the journal belongs to another fingerprint/seed/shuffle (err names both
 *             and says to pass a new journal=PATH for a fresh start);
 *   -EBADMSG  not a Zephon journal, corrupt, or a schema version this build cannot read
 *             (nothing is written to it);
 *   -EACCES / -EROFS / -ENOENT  the path cannot be created or written;
 *   -EIO, -ENOMEM.
 * Applies migrations from older schema versions. *out is set only on success. */
int journal_open(const char *path, const struct journal_ident *ident,
		 enum journal_sync sync, struct journal **out, char *err, size_t errlen);
void journal_close(struct journal *j);

/* Start a mount: resolve `rule` against the history (DESIGN.md section 5) into S0/G0 of
 * *l (W, B, m are given by the caller in *l), record the layout row and set every served
 * rank's cursor to (S0, 0), all in one transaction. `applied` receives a description
 * of what was applied ("auto: checkpoint mark step 12 -> samples:384"). 0, or -EINVAL
 * (rule points before 0 or past 2^62, or step:S with no layout to map S), -EIO. */
int journal_start(struct journal *j, const struct journal_resume *rule,
		  const struct rankset *ranks, struct layout *l,
		  char *applied, size_t applied_len);

/* The resume point `auto` would use, without starting anything: *samples = G, *step = S.
 * 0, or -ENOENT (no history: G = 0). */
int journal_resume_point(struct journal *j, uint64_t *samples, uint64_t *step);

/* Record that rank's cursor moved past (step, micro): the next claim of that rank is
 * (step, micro + 1) or the next step. Committed before returning. 0, or -EIO (disk
 * full, I/O error, busy: nothing recorded), -EINVAL (rank not served / not the cursor). */
int journal_claim(struct journal *j, uint64_t rank, uint64_t step, uint64_t micro);

/* The current cursor of a served rank. 0 or -EINVAL (not served). */
int journal_cursor(struct journal *j, uint64_t rank, uint64_t *step, uint64_t *micro);

/* `checkpoint STEP`: the model state saved now holds every step below STEP. 0, -EINVAL
 * (STEP < S0 of the current layout or beyond the furthest cursor), -EIO. */
int journal_checkpoint(struct journal *j, uint64_t step);

/* `rewind STEP`: every served rank's cursor goes back to (STEP, 0). 0, -EINVAL (STEP <
 * S0 of the current layout or beyond the furthest cursor), -EIO. */
int journal_rewind(struct journal *j, uint64_t step);

/* consumed_samples: G0 + (min over served ranks of completed steps) * B for the current
 * layout. */
uint64_t journal_consumed(struct journal *j);

/* The layout history, oldest first. *out is malloc'd (caller frees); 0, -ENOMEM, -EIO. */
int journal_layouts(struct journal *j, struct journal_layout **out, size_t *count);

/* Resume point over several journals (one per node), as `zephon journal resume-point`:
 * the latest checkpoint mark in any of them wins, else the minimum over all ranks of the
 * last layout. Opens each read-only. 0, or -errno with err naming the file. */
int journal_resume_point_files(const char *const *paths, size_t npaths,
			       uint64_t *samples, uint64_t *step, char *err, size_t errlen);

#endif
