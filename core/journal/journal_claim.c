/*
 * journal_claim.c: the running mount's side of the journal: claims (the hot path: one
 * prepared UPDATE of one cursor row in autocommit mode, i.e. one WAL frame per claim, no
 * per-claim history row), deliveries, checkpoint marks and rewinds, and the check that
 * the file under the path is still the one written.
 */
#include "journal_int.h"
#include "sqlite_errno.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

static int pos_before(struct rank_pos a, struct rank_pos b)
{
	return a.step < b.step || (a.step == b.step && a.micro < b.micro);
}

static int pos_same(struct rank_pos a, struct rank_pos b)
{
	return a.step == b.step && a.micro == b.micro;
}

/* ---- claims, marks, rewinds ---- */

/* Index of rank in the served set, or -1 (caller holds j->mu). */
static ssize_t rank_index(const struct journal *j, uint64_t rank)
{
	return rankset_index(&j->ranks, rank);
}

/* Claims between two checks that the journal is still the file at its path. */
#define MOVED_CHECK_NS 10000000 /* 10 ms */

/* The delivered position of ranks[i] as known now (caller holds j->mu): the latest
 * reported, never past the committed cursor. */
static struct rank_pos delivered_now(struct journal *j, size_t i)
{
	struct rank_pos d;

	if (!j->track)
		return j->rk[i].pos;
	pthread_mutex_lock(&j->dmu);
	d = j->rk[i].dlv;
	pthread_mutex_unlock(&j->dmu);
	return pos_before(j->rk[i].pos, d) ? j->rk[i].pos : d;
}

/* consumed_samples of the current layout (caller holds j->mu, and cur.id is set):
 * G0 + (min over served ranks of the delivered step - S0) * B; *minstep gets that step. */
static uint64_t consumed_locked(struct journal *j, uint64_t *minstep)
{
	uint64_t m = UINT64_MAX;

	for (size_t i = 0; i < j->ranks.count; i++)
		if (delivered_now(j, i).step < m)
			m = delivered_now(j, i).step;
	return layout_consumed_at(&j->cur.layout, m, minstep);
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
 * The check is a stat(2) of the path, a large part of a claim's cost (bench_journal), so
 * a claim makes it only when MOVED_CHECK_NS have passed since the
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
		if (hist_load(j->db, j->version, 0, &h) == 0) {
			if (hist_point(&h, 1, NULL, &j->moved_point) == 0 &&
			    j->moved_point.basis != JOURNAL_POINT_EMPTY)
				j->moved_known = 1;
			hist_release(&h);
		}
		/* From the cursors: the deliveries this handle knows, written or not (the
		 * history only has those written with each rank's last claim). */
		if (j->moved_known && j->moved_point.basis == JOURNAL_POINT_CURSORS &&
		    j->cur.id && j->ranks.count == layout_world_size(&j->cur.layout)) {
			j->moved_point.samples = consumed_locked(j, &minstep);
			j->moved_point.step = minstep;
			err_printf(j->moved_point.why, sizeof(j->moved_point.why), "every rank of the "
			    "last layout had the steps below %" PRIu64 " delivered", minstep);
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

/* Write ranks[i]'s row with st_claim (caller holds j->mu): cursor c, delivered
 * position d; in the caller's transaction, or committed on its own. SQLite's rc, or
 * SQLITE_NOTFOUND when the row is missing. */
static int write_row(struct journal *j, size_t i, struct rank_pos c, struct rank_pos d)
{
	int rc;

	sqlite3_bind_int64(j->st_claim, 1, (int64_t)c.step);
	sqlite3_bind_int64(j->st_claim, 2, (int64_t)c.micro);
	sqlite3_bind_int64(j->st_claim, 3, j->cur.id);
	sqlite3_bind_int64(j->st_claim, 4, (int64_t)j->ranks.ranks[i]);
	sqlite3_bind_int64(j->st_claim, 5, (int64_t)d.step);
	sqlite3_bind_int64(j->st_claim, 6, (int64_t)d.micro);
	rc = sqlite3_step(j->st_claim);
	sqlite3_reset(j->st_claim);
	if (rc != SQLITE_DONE)
		return rc;
	return sqlite3_changes(j->db) == 1 ? SQLITE_OK : SQLITE_NOTFOUND;
}

/* Hand out the claim at ranks[i]'s cursor (caller holds j->mu and checked i): commit
 * the cursor's advance past it, with the rank's delivered position in the same row
 * update (the claim pays for the transaction, so recording deliveries costs no commit
 * of its own) -- unless a delivery's commit reserved this claim already (cpos past
 * pos: journal_sync_delivered), when nothing is written. */
static int claim_locked(struct journal *j, size_t i)
{
	struct rank_pos next = j->rk[i].pos, d;
	int rc;

	rc = check_unmoved(j, 0);
	if (rc)
		return rc;
	layout_advance(&j->cur.layout, &next.step, &next.micro);
	if (pos_before(j->rk[i].pos, j->rk[i].cpos)) {
		d = j->rk[i].dpos;
	} else {
		d = delivered_now(j, i);
		if (!j->track) /* the caller hands the batch over as the claim commits */
			d = next;
		rc = write_row(j, i, next, d);
		if (rc == SQLITE_NOTFOUND)
			return jfail(j, -EIO, "journal %s: the cursor row of rank %" PRIu64 " is "
				     "missing", j->path, j->ranks.ranks[i]);
		if (rc != SQLITE_OK) {
			jfail_sql(j, rc, "cannot journal a claim");
			return -EIO;
		}
		j->rk[i].cpos = next;
	}
	j->rk[i].pos = next;
	j->rk[i].dpos = d;
	if (j->track) {
		pthread_mutex_lock(&j->dmu);
		j->rk[i].claimed = j->rk[i].pos;
		pthread_mutex_unlock(&j->dmu);
	}
	return 0;
}

void journal_track_delivery(struct journal *j)
{
	pthread_mutex_lock(&j->mu);
	if (!j->track && j->cur.id) {
		pthread_mutex_lock(&j->dmu);
		for (size_t i = 0; i < j->ranks.count; i++)
			j->rk[i].dlv = j->rk[i].want = j->rk[i].claimed = j->rk[i].pos;
		pthread_mutex_unlock(&j->dmu);
	}
	j->track = 1;
	pthread_mutex_unlock(&j->mu);
}

int journal_delivered(struct journal *j, uint64_t rank, uint64_t step, uint64_t micro)
{
	struct rank_pos p = { step, micro };
	ssize_t i;
	int rc = 0;

	pthread_mutex_lock(&j->dmu);
	i = j->cur.id ? rank_index(j, rank) : -1;
	if (i < 0 || !j->track || pos_before(j->rk[i].claimed, p))
		rc = -EINVAL;
	else if (pos_before(j->rk[i].dlv, p))
		j->rk[i].dlv = p;
	pthread_mutex_unlock(&j->dmu);
	return rc;
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

/* The committed cursor ranks[i]'s row should get now (caller holds j->mu), given its
 * delivered position d. reserve: when every claim handed out was delivered (d = pos: a
 * reader that reads a batch, closes it and opens the next), one claim past the cursor,
 * so that the rank's next claim finds itself committed and costs no commit of its own
 * (a kill then leaves the row one claim ahead of what was handed out: a claim never
 * handed out is never delivered, so a restart serves it, as any claim in flight).
 * Otherwise what is committed, or with !reserve the cursor itself (a clean stop writes
 * the cursors as handed out). */
static struct rank_pos row_cursor(struct journal *j, size_t i, struct rank_pos d, int reserve)
{
	struct rank_pos c = j->rk[i].pos;

	if (!reserve)
		return c;
	if (pos_same(d, c) && pos_same(j->rk[i].cpos, c)) {
		layout_advance(&j->cur.layout, &c.step, &c.micro);
		return c;
	}
	return j->rk[i].cpos;
}

/* The delivered position flush_locked() writes for ranks[i] (caller holds j->mu):
 * reserve (a sync): the one a sync asked for, else every one reported. Never behind
 * the one written. */
static struct rank_pos to_write(struct journal *j, size_t i, int reserve)
{
	struct rank_pos d;

	if (reserve) {
		pthread_mutex_lock(&j->dmu);
		d = j->rk[i].want;
		pthread_mutex_unlock(&j->dmu);
	} else {
		d = delivered_now(j, i);
	}
	return pos_before(d, j->rk[i].dpos) ? j->rk[i].dpos : d;
}

/* Write every delivered position reported and not yet written, in one transaction
 * (caller holds j->mu and checked the handle is writable): the group commit of
 * journal_sync_delivered(), whose concurrent callers wait on j->mu and then find their
 * rank written by whoever held it. One rank, the common case, is one autocommit UPDATE
 * on the claims' statement, prepared at open. reserve: see row_cursor(); without it,
 * rows whose committed cursor is past the cursor are written back too. every_time:
 * check on every call that the path still names the journal (check_unmoved), not once
 * per 10 ms. 0, -EIO, -ENOMEM. */
static int flush_locked(struct journal *j, int reserve, int every_time)
{
	struct rank_pos one[2], *w = one; /* written, by rank: (cursor, delivered) pairs */
	size_t n = 0;
	int rc;

	for (size_t i = 0; i < j->ranks.count && j->cur.id; i++)
		n += !pos_same(to_write(j, i, reserve), j->rk[i].dpos) ||
		     (!reserve && !pos_same(j->rk[i].cpos, j->rk[i].pos));
	if (!n)
		return 0;
	rc = check_unmoved(j, every_time);
	if (rc)
		return rc;
	if (n > 1 && !(w = malloc(2 * j->ranks.count * sizeof(*w))))
		return jfail(j, -ENOMEM, "cannot record the delivered positions: out of memory");
	rc = n > 1 ? jnl_exec(j->db, "BEGIN IMMEDIATE") : SQLITE_OK;
	for (size_t i = 0, k = 0; rc == SQLITE_OK && i < j->ranks.count; i++) {
		k = n > 1 ? 2 * i : 0;
		w[k + 1] = to_write(j, i, reserve);
		w[k] = j->rk[i].cpos;
		if (pos_same(w[k + 1], j->rk[i].dpos) && (reserve || pos_same(w[k], j->rk[i].pos)))
			continue; /* nothing new: no reservation either */
		w[k] = row_cursor(j, i, w[k + 1], reserve);
		rc = write_row(j, i, w[k], w[k + 1]);
		if (rc == SQLITE_OK && n == 1) { /* an autocommit UPDATE: committed */
			j->rk[i].cpos = w[0];
			j->rk[i].dpos = w[1];
		}
	}
	if (rc == SQLITE_OK && n > 1)
		rc = jnl_exec(j->db, "COMMIT");
	for (size_t i = 0; rc == SQLITE_OK && n > 1 && i < j->ranks.count; i++) {
		j->rk[i].cpos = w[2 * i];
		j->rk[i].dpos = w[2 * i + 1];
	}
	if (w != one)
		free(w);
	if (rc == SQLITE_NOTFOUND) {
		if (n > 1)
			jnl_exec(j->db, "ROLLBACK");
		return jfail(j, -EIO, "journal %s: a cursor row of this mount is missing", j->path);
	}
	if (rc != SQLITE_OK) {
		/* nothing written: the positions stay reported, for the next claim or flush */
		rc = jfail_sql(j, rc, "cannot record the delivered positions");
		return rc == -ENOMEM ? rc : -EIO;
	}
	return 0;
}

int journal_flush_delivered(struct journal *j)
{
	int rc = 0;

	pthread_mutex_lock(&j->mu);
	if (j->readonly)
		rc = jfail(j, -EROFS, "journal %s is open read-only", j->path);
	else
		rc = flush_locked(j, 0, 1);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_sync_delivered(struct journal *j, uint64_t rank)
{
	ssize_t i;
	int rc = 0;

	/* The request is noted before waiting for j->mu, under dmu (which no commit holds):
	 * whoever holds mu and commits next writes it too. */
	pthread_mutex_lock(&j->dmu);
	i = j->cur.id ? rank_index(j, rank) : -1;
	if (i >= 0 && j->track && pos_before(j->rk[i].want, j->rk[i].dlv))
		j->rk[i].want = j->rk[i].dlv; /* never past claimed[i]: journal_delivered checks */
	pthread_mutex_unlock(&j->dmu);
	pthread_mutex_lock(&j->mu);
	rc = claim_check(j, rank, &i);
	if (!rc && !j->track)
		rc = jfail(j, -EINVAL, "deliveries are not tracked (journal_track_delivery)");
	/* written already: by the rank's claim, or by another caller's group commit */
	if (!rc && !pos_same(to_write(j, (size_t)i, 1), j->rk[i].dpos))
		rc = flush_locked(j, 1, 0);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_claim(struct journal *j, uint64_t rank, uint64_t step, uint64_t micro)
{
	ssize_t i;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = claim_check(j, rank, &i);
	if (!rc && (j->rk[i].pos.step != step || j->rk[i].pos.micro != micro))
		rc = jfail(j, -EINVAL, "claim of rank %" PRIu64 " at step %" PRIu64 " micro %"
			   PRIu64 " is not its cursor (step %" PRIu64 " micro %" PRIu64 ")", rank,
			   step, micro, j->rk[i].pos.step, j->rk[i].pos.micro);
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
		s = j->rk[i].pos.step;
		m = j->rk[i].pos.micro;
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
		*step = j->rk[i].pos.step;
		*micro = j->rk[i].pos.micro;
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
	for (size_t i = 0; i < j->ranks.count; i++)
		if (j->rk[i].pos.step > far)
			far = j->rk[i].pos.step;
	if (step < layout_start_step(&j->cur.layout))
		return jfail(j, -EINVAL, "%s %" PRIu64 ": the step is before step %" PRIu64
			     ", where this mount started", what, step,
			     layout_start_step(&j->cur.layout));
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
	sqlite3_bind_int64(st, 5, jnl_now_us());
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

/* Record a checkpoint mark (STEP, its gsn) under j->mu: 0, -ENOMEM or -EIO (reason in
 * journal_last_error). */
static int record_mark(struct journal *j, uint64_t step, uint64_t gsn)
{
	int64_t id;
	int rc = insert_event(j, "mark", step, gsn, &id);

	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot record a checkpoint mark");
		return rc == -ENOMEM ? rc : -EIO;
	}
	j->next_seq++;
	j->err[0] = 0;
	return 0;
}

int journal_checkpoint(struct journal *j, uint64_t step)
{
	uint64_t gsn;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = step_check(j, "checkpoint", step, __atomic_load_n(&j->reached, __ATOMIC_RELAXED), &gsn);
	if (!rc)
		rc = record_mark(j, step, gsn);
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
	rc = jnl_exec(j->db, "BEGIN IMMEDIATE");
	if (rc == SQLITE_OK)
		rc = insert_event(j, "rewind", step, gsn, &id);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(j->db, "INSERT INTO rewind_cursor (rewind, rank, step, "
					"micro) VALUES (?1, ?2, ?3, ?4)", -1, &st, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < j->ranks.count; i++) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int64(st, 2, (int64_t)j->ranks.ranks[i]);
		sqlite3_bind_int64(st, 3, (int64_t)j->rk[i].pos.step);
		sqlite3_bind_int64(st, 4, (int64_t)j->rk[i].pos.micro);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(j->db, "UPDATE cursor SET step = ?1, micro = 0, "
					"delivered_step = ?1, delivered_micro = 0 WHERE layout = ?2",
					-1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, (int64_t)step);
		sqlite3_bind_int64(st, 2, j->cur.id);
		rc = sqlite3_step(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
		sqlite3_finalize(st);
	}
	if (rc == SQLITE_OK)
		rc = jnl_exec(j->db, "COMMIT");
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot record a rewind");
		rc = rc == -ENOMEM ? rc : -EIO;
		goto out;
	}
	j->next_seq++;
	pthread_mutex_lock(&j->dmu);
	for (size_t i = 0; i < j->ranks.count; i++) {
		j->rk[i].pos.step = step;
		j->rk[i].pos.micro = 0;
		j->rk[i].cpos = j->rk[i].dpos = j->rk[i].dlv = j->rk[i].want = j->rk[i].claimed = j->rk[i].pos;
	}
	pthread_mutex_unlock(&j->dmu);
	j->err[0] = 0;
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_checkpoint_at(struct journal *j, uint64_t gsn, uint64_t step)
{
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
	if (!rc)
		rc = record_mark(j, step, gsn);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

