/*
 * core/pack/rowplan (best-fit decreasing) and core/dataset/rowindex (rows.idx, the row
 * checks):
 * - the plan of a hand-worked example is the one the rule gives (rows, members, order);
 * - on random size lists (small, large, and with many equal sizes) it equals a plain
 *   O(n x rows) best-fit decreasing written here from the rule, row for row: every
 *   document placed once, no row over capacity, rows in opening order, members by index;
 *   and it uses at most 11/9 of the lower bound ceil(sum / capacity) + 1 rows;
 * - the sizes it refuses (0, over capacity, capacity 0 or too large);
 * - rows.idx: what the writer writes the reader gives back across buffer flushes;
 *   rowindex_check accepts it and refuses a document placed twice, a gap, wrong counts;
 *   a truncated file is -EBADMSG, a missing one -ENOENT;
 * - rowindex_check_row accepts a well-made row and names what is wrong in a bad one (a
 *   label that crosses a document boundary, a position that does not restart, padding
 *   that is not input 0 / label -100 / position 0); rowindex_trained gives the spans.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "le.h"
#include "rowindex.h"
#include "rowplan.h"
#include "xorshift.h"

/* Best-fit decreasing by its definition: each document, longest first (ties: lower
 * index), into the open row with the least room that fits it (ties: the row that came
 * to that room last), else a new row. O(n x rows). row_of[i] gets document i's row. */
static uint32_t naive_bfd(const uint32_t *sizes, uint32_t n, uint32_t cap, uint32_t *row_of)
{
	uint32_t *room = malloc((n + 1) * sizeof(*room)), *when = malloc((n + 1) * sizeof(*when));
	uint8_t *done = calloc(n + 1, 1);
	uint32_t rows = 0, clock = 0;

	REQUIRE(room && when && done);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t best = UINT32_MAX, pick = 0;

		for (uint32_t i = 0; i < n; i++) /* the longest not placed, lowest index first */
			if (!done[i] && (best == UINT32_MAX || sizes[i] > sizes[pick])) {
				best = 0;
				pick = i;
			}
		done[pick] = 1;
		best = UINT32_MAX;
		for (uint32_t r = 0; r < rows; r++)
			if (room[r] >= sizes[pick] && (best == UINT32_MAX || room[r] < room[best] ||
			    (room[r] == room[best] && when[r] > when[best])))
				best = r;
		if (best == UINT32_MAX) {
			best = rows++;
			room[best] = cap;
		}
		room[best] -= sizes[pick];
		when[best] = ++clock;
		row_of[pick] = best;
	}
	free(room);
	free(when);
	free(done);
	return rows;
}

/* The plan of sizes equals the naive BFD's, and is a valid plan. */
static void check_against_naive(const uint32_t *sizes, uint32_t n, uint32_t cap)
{
	uint32_t *row_of = malloc((n + 1) * sizeof(*row_of));
	uint64_t sum = 0, bound;
	struct rowplan p;
	uint32_t rows;

	REQUIRE(row_of);
	rows = naive_bfd(sizes, n, cap, row_of);
	REQUIRE(rowplan_make(sizes, n, cap, &p) == 0);
	CHECK_EQ_U64(p.rows, rows);
	for (uint32_t i = 0; i < n; i++)
		sum += sizes[i];
	CHECK_EQ_U64(p.used, sum);
	CHECK_EQ_U64(p.first[0], 0);
	CHECK_EQ_U64(p.first[p.rows], n);
	for (uint64_t r = 0; r < p.rows; r++) {
		uint64_t used = 0;

		CHECK(p.first[r + 1] > p.first[r]);     /* no empty row */
		for (uint32_t k = p.first[r]; k < p.first[r + 1]; k++) {
			CHECK_EQ_U64(row_of[p.members[k]], r);
			if (k > p.first[r])
				CHECK(p.members[k] > p.members[k - 1]);
			used += sizes[p.members[k]];
		}
		CHECK(used <= cap);
	}
	bound = (sum + cap - 1) / cap;
	CHECK(p.rows * 9 <= 11 * bound + 9);           /* 11/9 OPT + 1 */
	rowplan_release(&p);
	free(row_of);
}

static void test_example(void)
{
	/* capacity 10, longest first: 7 (doc 1) opens row 0 (room 3); 6 (doc 4) opens row 1
	 * (room 4); 5 (doc 2) opens row 2 (room 5); 4 (doc 5) takes row 1, the least room
	 * that fits (4 -> 0); 3 (doc 0) row 0 (3 -> 0); 3 (doc 6) row 2 (5 -> 2); 2 (doc 3)
	 * row 2 (2 -> 0); 1 (doc 7) finds no room: row 3. Members by index within a row. */
	static const uint32_t sizes[] = { 3, 7, 5, 2, 6, 4, 3, 1 };
	static const uint32_t want_first[] = { 0, 2, 4, 7, 8 };
	static const uint32_t want_members[] = { 0, 1, 4, 5, 2, 3, 6, 7 };
	struct rowplan p;

	REQUIRE(rowplan_make(sizes, 8, 10, &p) == 0);
	CHECK_EQ_U64(p.rows, 4);
	for (int r = 0; r <= 4 && p.rows == 4; r++)
		CHECK_EQ_U64(p.first[r], want_first[r]);
	for (int k = 0; k < 8 && p.rows == 4; k++)
		CHECK_EQ_U64(p.members[k], want_members[k]);
	CHECK_EQ_U64(p.used, 31);
	rowplan_release(&p);
	check_against_naive(sizes, 8, 10);
}

static void test_random(void)
{
	uint64_t s = 42;
	uint32_t sizes[1500];

	for (int round = 0; round < 60; round++) {
		uint32_t cap = round % 3 == 0 ? 64 : round % 3 == 1 ? 256 : 2048;
		uint32_t n = 1 + (uint32_t)(xorshift64(&s) % 1500);

		for (uint32_t i = 0; i < n; i++) {
			uint64_t x = xorshift64(&s);

			/* mostly short, some long, some equal, some exactly the capacity */
			sizes[i] = round % 4 == 0 ? 1 + (uint32_t)(x % 4) * (cap / 8) :
				x % 50 == 0 ? cap : 1 + (uint32_t)(x % (x % 3 ? cap / 6 : cap));
		}
		check_against_naive(sizes, n, cap);
	}
}

static void test_refusals(void)
{
	uint32_t sizes[] = { 1, 2, 0 };
	struct rowplan p;

	CHECK(rowplan_make(sizes, 3, 4, &p) == -EINVAL);              /* size 0 */
	sizes[2] = 5;
	CHECK(rowplan_make(sizes, 3, 4, &p) == -EINVAL);              /* over capacity */
	CHECK(rowplan_make(sizes, 2, 0, &p) == -EINVAL);
	CHECK(rowplan_make(sizes, 2, ROWPLAN_CAPACITY_MAX + 1, &p) == -EINVAL);
	REQUIRE(rowplan_make(sizes, 0, 4, &p) == 0);
	CHECK_EQ_U64(p.rows, 0);
	rowplan_release(&p);
	sizes[2] = 4;
	REQUIRE(rowplan_make(sizes, 3, ROWPLAN_CAPACITY_MAX, &p) == 0); /* the largest room */
	CHECK_EQ_U64(p.rows, 1);
	rowplan_release(&p);
}

#define ROWS 40000u                /* > one writer buffer (1 MiB) of entries */

static void test_rowindex(void)
{
	char dir[] = "/tmp/zephon-test-rowindex-XXXXXX", path[256], err[256];
	struct rowindex_writer *w;
	struct rowindex *ri;
	struct rowindex_entry e[3], g;
	uint64_t first, count, docs = 0;
	FILE *f;

	REQUIRE(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, ROWINDEX_FILE);
	CHECK(rowindex_open(dir, &ri, err, sizeof(err)) == -ENOENT);
	REQUIRE(rowindex_writer_open(path, 16, &w, err, sizeof(err)) == 0);
	for (uint64_t r = 0; r < ROWS; r++) {
		size_t n = 1 + r % 3;

		for (size_t k = 0; k < n; k++) {
			e[k].document = docs + k;
			e[k].position = (uint32_t)(5 * k);
			e[k].length = 5;
		}
		REQUIRE(rowindex_writer_row(w, e, n, err, sizeof(err)) == 0);
		docs += n;
	}
	REQUIRE(rowindex_writer_finish(w, err, sizeof(err)) == 0);
	REQUIRE(rowindex_open(dir, &ri, err, sizeof(err)) == 0);
	CHECK_EQ_U64(rowindex_rows(ri), ROWS);
	docs = 0;
	for (uint64_t r = 0; r < ROWS; r++) {
		rowindex_row(ri, r, &first, &count);
		CHECK_EQ_U64(first, docs);
		CHECK_EQ_U64(count, 1 + r % 3);
		for (uint64_t k = 0; k < count; k++) {
			rowindex_get(ri, first + k, &g);
			CHECK_EQ_U64(g.document, docs + k);
			CHECK_EQ_U64(g.position, 5 * k);
			CHECK_EQ_U64(g.length, 5);
		}
		docs += count;
	}
	CHECK(rowindex_check(ri, ROWS, 16, docs, err, sizeof(err)) == 0);
	CHECK(rowindex_check(ri, ROWS, 16, docs + 1, err, sizeof(err)) == -EBADMSG);
	CHECK(rowindex_check(ri, ROWS + 1, 16, docs, err, sizeof(err)) == -EBADMSG);
	CHECK(rowindex_check(ri, ROWS, 12, docs, err, sizeof(err)) == -EBADMSG);
	rowindex_close(ri);

	/* a document placed twice, and a gap in a row: refused */
	unlink(path);
	REQUIRE(rowindex_writer_open(path, 16, &w, err, sizeof(err)) == 0);
	e[0] = (struct rowindex_entry){ 0, 0, 4 };
	e[1] = (struct rowindex_entry){ 0, 4, 4 };
	REQUIRE(rowindex_writer_row(w, e, 2, err, sizeof(err)) == 0);
	REQUIRE(rowindex_writer_finish(w, err, sizeof(err)) == 0);
	REQUIRE(rowindex_open(dir, &ri, err, sizeof(err)) == 0);
	CHECK(rowindex_check(ri, 1, 16, 2, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "placed twice") != NULL);
	rowindex_close(ri);
	unlink(path);
	REQUIRE(rowindex_writer_open(path, 16, &w, err, sizeof(err)) == 0);
	e[1] = (struct rowindex_entry){ 1, 5, 4 };
	REQUIRE(rowindex_writer_row(w, e, 2, err, sizeof(err)) == 0);
	REQUIRE(rowindex_writer_finish(w, err, sizeof(err)) == 0);
	REQUIRE(rowindex_open(dir, &ri, err, sizeof(err)) == 0);
	CHECK(rowindex_check(ri, 1, 16, 2, err, sizeof(err)) == -EBADMSG);
	rowindex_close(ri);

	/* truncated */
	REQUIRE(truncate(path, 40) == 0);
	CHECK(rowindex_open(dir, &ri, err, sizeof(err)) == -EBADMSG);
	REQUIRE((f = fopen(path, "w")) != NULL);
	fputs("not a row index at all, but long enough to hold a header..........", f);
	fclose(f);
	CHECK(rowindex_open(dir, &ri, err, sizeof(err)) == -EBADMSG);
	unlink(path);
	rmdir(dir);
}

/* Row bytes (L = 8) from its three planes. */
static void put_row(uint8_t *row, const int32_t *in, const int32_t *lab, const int32_t *pos)
{
	for (int p = 0; p < 8; p++) {
		le32_put(row + 4 * p, (uint32_t)in[p]);
		le32_put(row + 32 + 4 * p, (uint32_t)lab[p]);
		le32_put(row + 64 + 4 * p, (uint32_t)pos[p]);
	}
}

static void test_rows(void)
{
	/* document 0: tokens 5 6 7 8 (inputs 5 6 7, labels -100 7 8: its first label masked);
	 * document 1: tokens 9 4 (input 9, label 4); padding from position 4 */
	int32_t in[8] = { 5, 6, 7, 9, 0, 0, 0, 0 };
	int32_t lab[8] = { -100, 7, 8, 4, -100, -100, -100, -100 };
	int32_t pos[8] = { 0, 1, 2, 0, 0, 0, 0, 0 };
	struct rowindex_entry e[2] = { { 0, 0, 3 }, { 1, 3, 1 } };
	uint64_t spans[4][2], trained;
	uint8_t row[96];
	char err[256];

	put_row(row, in, lab, pos);
	CHECK(rowindex_check_row(row, 8, e, 2, err, sizeof(err)) == 0);
	CHECK(rowindex_trained(row, 8, 0, 3, spans, 4, &trained) == 1);
	CHECK_EQ_U64(spans[0][0], 1);
	CHECK_EQ_U64(spans[0][1], 3);
	CHECK_EQ_U64(trained, 2);
	CHECK(rowindex_trained(row, 8, 3, 1, spans, 4, &trained) == 1);
	CHECK_EQ_U64(spans[0][0], 3);
	CHECK_EQ_U64(spans[0][1], 4);
	CHECK(rowindex_trained(row, 8, 4, 4, spans, 4, &trained) == 0);
	CHECK_EQ_U64(trained, 0);

	lab[2] = 9;      /* document 0's last label is the next document's first input */
	put_row(row, in, lab, pos);
	/* its last label is not checked against an input (the EOS is no input): allowed */
	CHECK(rowindex_check_row(row, 8, e, 2, err, sizeof(err)) == 0);
	lab[2] = 8;
	lab[0] = 7;      /* a label that is not the next input */
	put_row(row, in, lab, pos);
	CHECK(rowindex_check_row(row, 8, e, 2, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "position 0: label 7") != NULL);
	lab[0] = -100;
	pos[3] = 3;      /* positions run on across the boundary */
	put_row(row, in, lab, pos);
	CHECK(rowindex_check_row(row, 8, e, 2, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "position 3: position 3") != NULL);
	pos[3] = 0;
	in[6] = 2003;    /* padding with an input */
	put_row(row, in, lab, pos);
	CHECK(rowindex_check_row(row, 8, e, 2, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "position 6 is padding") != NULL);
	in[6] = 0;
	pos[7] = 3;      /* padding positions count up (0.3.0's ChatDataset): not these rows */
	put_row(row, in, lab, pos);
	CHECK(rowindex_check_row(row, 8, e, 2, err, sizeof(err)) == -EBADMSG);
}

int main(void)
{
	test_example();
	test_random();
	test_refusals();
	test_rowindex();
	test_rows();
	return check_status();
}
