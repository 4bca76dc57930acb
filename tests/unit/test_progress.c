/*
 * test_progress.c: progress learned from reads (core/serve/progress.h): positions that
 * follow the latest read (back as well as forward); the job's least position; rates over
 * whole seconds; untracked ranks; the shares a read of a run completes; step numbers off
 * the grid. (Which step a batch completes is layout_micro_step_gsn(), test_order.c.)
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "order.h"
#include "progress.h"
#include "run.h"
#include "test_layout.h"

static void positions_and_rates(void)
{
	const uint64_t ranks[] = { 1, 3, 8 };
	struct progress *p;
	struct progress_rank_info in;
	uint64_t consumed;
	double rate, last;

	struct layout l = test_layout(2, 10, 5, 0, 0);    /* B = 10, a share of 5 */

	CHECK(progress_new(ranks, 3, &l, &p) == 0);
	CHECK(progress_total(p, 40, 100.5, &consumed, &rate, &last) == 0);
	CHECK_EQ_U64(consumed, 40);
	CHECK(rate == 0 && last == 0);
	CHECK(progress_rank(p, 2, 100, &in) == -ENOENT);
	progress_note(p, 2, 0, 5, 100);                 /* not tracked: ignored */
	progress_note(p, 3, 50, 4, 100.2);              /* rank 3 read step [50, 60) */
	progress_note(p, 1, PROGRESS_NO_STEP, 2, 100.3); /* half a share: no position */
	CHECK(progress_rank(p, 3, 100.4, &in) == 0);
	CHECK(in.have_position && in.step_gsn == 50 && in.position == 60 && in.samples == 4);
	CHECK(in.samples_per_s == 0);                   /* no whole second yet */
	CHECK(progress_rank(p, 1, 100.4, &in) == 0);
	CHECK(!in.have_position && in.samples == 2 && in.last_read_s == 100.3);
	CHECK(progress_total(p, 40, 100.5, &consumed, &rate, &last) == 1);
	CHECK_EQ_U64(consumed, 40);                     /* ranks 1 and 8 count at the start */
	CHECK(last == 100.3);
	progress_note(p, 1, 60, 2, 101.1);
	progress_note(p, 8, 70, 4, 101.2);
	CHECK(progress_total(p, 40, 101.5, &consumed, &rate, &last) == 1);
	CHECK_EQ_U64(consumed, 60);
	/* the latest read decides, not the furthest: a loader sent back */
	progress_note(p, 3, 20, 4, 102.0);
	CHECK(progress_rank(p, 3, 102.5, &in) == 0);
	CHECK(in.position == 30 && in.samples == 8);
	CHECK(progress_total(p, 40, 102.5, &consumed, &rate, &last) == 1);
	CHECK_EQ_U64(consumed, 30);
	/* rank 3: 4 samples in second 100, none in 101, 4 in 102; at 103.0 the window is the
	 * 3 whole seconds since its first read: 8 / 3 */
	CHECK(progress_rank(p, 3, 103.0, &in) == 0);
	CHECK(fabs(in.samples_per_s - 8.0 / 3) < 1e-9);
	/* 20 s later the window (10 s) holds nothing */
	CHECK(progress_rank(p, 3, 123.0, &in) == 0);
	CHECK(in.samples_per_s == 0);
	/* from/<100> of shares of 64 bytes: a read of [32, 200) reaches the ends of shares
	 * 0 and 1 (bytes 63 and 127) and 2 (191); [200, 250) none */
	progress_note_run(p, &(struct progress_read){ 1, 100, 64, 32, 168 }, 150.0);
	CHECK(progress_rank(p, 1, 150.0, &in) == 0);
	CHECK(in.position == 100 + 3 * 10 && in.step_gsn == 120 && in.samples == 4 + 3 * 5);
	progress_note_run(p, &(struct progress_read){ 1, 100, 64, 200, 50 }, 150.1);
	CHECK(progress_rank(p, 1, 150.2, &in) == 0);
	CHECK(in.position == 130 && in.samples == 19);
	/* a steady 5 samples a second for 30 s: 5/s, whatever wrapped in the buckets */
	for (int s = 0; s < 30; s++)
		progress_note(p, 8, 100 + 10 * (uint64_t)s, 5, 200.0 + s);
	CHECK(progress_rank(p, 8, 230.0, &in) == 0);
	CHECK(fabs(in.samples_per_s - 5) < 1e-9);
	progress_free(p);
}

/* The walk of a run's bytes by share (run.h), which share.c's reads, fs/read.c's ids/ and
 * the count above share: pieces tile [pos, end) share by share. */
static void run_geometry(void)
{
	struct run_piece p;
	uint64_t first, end, pos, total;

	for (uint64_t unit = 1; unit <= 9; unit++)
		for (uint64_t a = 0; a < 30; a++)
			for (uint64_t b = a + 1; b <= 30; b++) {
				for (pos = a, total = 0; pos < b; pos += p.len, total += p.len) {
					run_piece(unit, pos, b, &p);
					CHECK(p.len >= 1 && p.within + p.len <= unit);
					CHECK_EQ_U64(p.share * unit + p.within, pos);
				}
				CHECK_EQ_U64(total, b - a);
				run_completed(unit, a, b - a, &first, &end);
				CHECK_EQ_U64(first, a / unit);
				CHECK_EQ_U64(end, b / unit);   /* share k's last byte is (k+1) unit - 1 */
			}
	CHECK_EQ_U64(run_bytes(10, 7), 70);
	CHECK_EQ_U64(run_bytes(0, 7), 0);
	CHECK_EQ_U64(run_bytes(3, UINT64_MAX), (RUN_MAX_BYTES / 3) * 3); /* cut, whole */
	CHECK_EQ_U64(run_shares(0, 10), 0);
	CHECK_EQ_U64(run_shares(4, 10), 2);
	CHECK_EQ_U64(run_shares_up(4, 10), 3);
	CHECK_EQ_U64(run_shares_up(4, 8), 2);
}

static void step_numbers(void)
{
	const uint64_t rank = 0;
	struct layout l = test_layout(2, 8, 2, 5, 40);
	struct progress *p;
	uint64_t s = 0;

	REQUIRE(progress_new(&rank, 1, &l, &p) == 0);
	CHECK(progress_step_number(p, 40, &s) == 0 && s == 5);
	CHECK(progress_step_number(p, 64, &s) == 0 && s == 8);
	CHECK(progress_step_number(p, 44, &s) == -ERANGE);    /* off the steps */
	CHECK(progress_step_number(p, 32, &s) == -ERANGE);    /* before G0 */
	progress_free(p);
}

int main(void)
{
	positions_and_rates();
	step_numbers();
	run_geometry();
	return check_status();
}
