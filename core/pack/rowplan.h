/*
 * rowplan.h: the global packing plan of a dataset of rows (`zephon pack
 * --whole-documents`, `--chat`; docs/design.md §4, "Datasets of rows"): whole documents
 * placed into rows of a fixed number of positions, once, over the whole dataset, before
 * any row is written.
 *
 * Algorithm: best-fit decreasing (BFD; Johnson, "Near-optimal bin packing algorithms",
 * MIT 1973; Johnson et al., SIAM J. Comput. 3(4), 1974: at most 11/9 OPT + 1 rows).
 * Documents are taken longest first (ties: lower index first); each goes into the open
 * row with the least room that still fits it (ties: the row that reached that room
 * last), or opens a new row. Rows are numbered in the order they were opened; within a
 * row its documents are listed by index. The plan depends on the sizes alone: the same
 * on every machine, for any number of threads.
 *
 * Cost: O(n + capacity) to sort (counting sort by size) and O(n log_64 capacity) to
 * place, with a hierarchical bitmap over the free room of the open rows; memory 16 bytes
 * per document plus 4 bytes per row and about 4.1 bytes per unit of capacity.
 *
 * Pure: no I/O, no globals; thread-safe on distinct plans.
 */
#ifndef ZEPHON_ROWPLAN_H
#define ZEPHON_ROWPLAN_H

#include <stddef.h>
#include <stdint.h>

/* The largest capacity (positions per row) a plan takes. */
#define ROWPLAN_CAPACITY_MAX (UINT32_C(1) << 24)

struct rowplan {
	uint64_t rows;
	uint32_t *first;      /* rows + 1 offsets: row r holds members[first[r], first[r + 1]) */
	uint32_t *members;    /* the document indexes, row by row, ascending within a row */
	uint64_t used;        /* sum of the sizes: positions that hold a document */
};

/* Plan n documents of sizes[0..n) (each 1..capacity) into rows of capacity positions.
 * 0, or -EINVAL (capacity 0 or above ROWPLAN_CAPACITY_MAX, a size 0 or above capacity,
 * n >= UINT32_MAX), -ENOMEM. On success *out owns its arrays (rowplan_release); n == 0
 * gives no rows. */
int rowplan_make(const uint32_t *sizes, size_t n, uint32_t capacity, struct rowplan *out);
void rowplan_release(struct rowplan *p);

#endif
