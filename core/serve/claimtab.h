/*
 * claimtab.h: the claims a server has open and each process's latest claim (claim.c
 * counts them; a clean stop waits for the count to reach 0, a GETATTR without a file
 * handle answers with the size of the opener's latest claim). One table per server,
 * owned by this file; the server holds it (server_claimtab()).
 * Thread-safety: every function may be called from any thread (one mutex).
 */
#ifndef ZEPHON_CLAIMTAB_H
#define ZEPHON_CLAIMTAB_H

#include <stdint.h>

/* The latest claim of next of each (process, rank) that the table remembers. */
#define CLAIMTAB_PID_SLOTS 256

struct claimtab;

/* 0 or -ENOMEM; free with claimtab_free (NULL is a no-op). */
int claimtab_new(struct claimtab **out);
void claimtab_free(struct claimtab *t);

/* One claim open more, one fewer (claim_open's, claim_free's). */
void claimtab_enter(struct claimtab *t);
void claimtab_leave(struct claimtab *t);

/* Wait up to timeout_s seconds until no claim is open: 0 or -ETIMEDOUT; *left receives
 * how many are still open. */
int claimtab_wait(struct claimtab *t, double timeout_s, unsigned *left);

/* Process pid's latest claim of rank is `size` bytes; the oldest of the
 * CLAIMTAB_PID_SLOTS pairs goes when the table is full. */
void claimtab_note(struct claimtab *t, uint32_t pid, uint64_t rank, uint64_t size);

/* Bytes of process pid's latest claim of rank (pid 0: none): *found 1, else 0 and
 * returns 0. */
uint64_t claimtab_size(struct claimtab *t, uint32_t pid, uint64_t rank, int *found);

#endif
