/*
 * run.h: the geometry of a run: one rank's shares of consecutive steps back to back,
 * `unit` bytes each (from/<G>: a share's encoded bytes; ids/<G>: 8 bytes an id). The one
 * walk of a run's bytes by share, for share.c's reads of from/, fs/read.c's of ids/ and
 * progress.c's count of the shares a read completed; which gsn a share starts at is
 * layout.h's (layout_gsn_after). Pure, thread-safe.
 */
#ifndef ZEPHON_RUN_H
#define ZEPHON_RUN_H

#include <stdint.h>

/* The longest run: an endless stream's is cut at the last whole share below this. */
#define RUN_MAX_BYTES (UINT64_C(1) << 62)

/* The part of the bytes [pos, end) of a run that lies in one share: share `share`,
 * `within` bytes into it, `len` bytes (>= 1). */
struct run_piece {
	uint64_t share;
	uint64_t within;
	uint64_t len;
};

/* The piece at pos of the bytes [pos, end): pos < end, unit >= 1. */
void run_piece(uint64_t unit, uint64_t pos, uint64_t end, struct run_piece *out);

/* The shares whose last byte a read of len bytes at off reached: [*first, *end) (empty
 * when *first == *end). unit >= 1. */
void run_completed(uint64_t unit, uint64_t off, uint64_t len, uint64_t *first,
		   uint64_t *end);

/* Bytes of a run of `steps` shares of unit bytes, cut at the last whole share below
 * RUN_MAX_BYTES (unit may be 0: 0). */
uint64_t run_bytes(uint64_t unit, uint64_t steps);

/* Whole shares of unit bytes in size bytes (unit may be 0: 0). */
uint64_t run_shares(uint64_t unit, uint64_t size);
/* The shares that size bytes reach into: size / unit, rounded up (unit >= 1). */
uint64_t run_shares_up(uint64_t unit, uint64_t size);

#endif
