/*
 * test_layout.h: layouts for the unit tests, made as everything else makes them
 * (layout_make): test_layout(W, B, m, S0, G0) is that layout, and a test that means a
 * valid one stops (exit 1, saying which) when it is not.
 */
#ifndef ZEPHON_TEST_LAYOUT_H
#define ZEPHON_TEST_LAYOUT_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "layout.h"

static inline struct layout test_layout(uint64_t world_size, uint64_t global_batch,
					uint64_t micro_batch, uint64_t start_step,
					uint64_t start_samples)
{
	struct layout_values v = { world_size, global_batch, micro_batch, start_step,
				   start_samples };
	struct layout l;
	char why[160];

	if (layout_make(&v, &l, why, sizeof(why))) {
		fprintf(stderr, "test_layout(%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64
			", %" PRIu64 "): %s\n", world_size, global_batch, micro_batch, start_step,
			start_samples, why);
		exit(1);
	}
	return l;
}

#endif
