/*
 * prp.h: a keyed pseudo-random permutation of [0, n), evaluated one index at a time.
 *
 * Construction: a balanced Feistel network (Luby & Rackoff, "How to construct
 * pseudorandom permutations from pseudorandom functions", SIAM J. Comput. 17(2), 1988)
 * over the smallest domain 2^(2h) >= n, made a permutation of [0, n) by cycle-walking
 * (Black & Rogaway, "Ciphers with arbitrary finite domains", CT-RSA 2002). This is the
 * scheme of TensorFlow's random_index_shuffle, which Grain's index shuffle uses.
 * PRP_ROUNDS rounds (>= 4 for the Luby-Rackoff bound); the round function is the
 * SplitMix64 finalizer (Steele, Lea & Flood, OOPSLA 2014) of the half-block xor a round key.
 * Round keys are mixed from (seed, epoch), so every epoch is a different permutation.
 *
 * Cost: O(1) memory, expected < 4 Feistel evaluations per index (the domain is less
 * than 4n), so O(1) expected time. Nothing is ever materialized.
 *
 * Invariant: prp_apply() is a bijection on [0, n) for every key.
 * Pure, no globals; a struct prp is read-only after prp_init() and thread-safe.
 */
#ifndef ZEPHON_PRP_H
#define ZEPHON_PRP_H

#include <stddef.h>
#include <stdint.h>

#define PRP_ROUNDS 8
/* Indexes prp_apply_run() evaluates side by side. */
#define PRP_LANES 8
/* Smallest Feistel domain, 2^PRP_MIN_BITS: Feistel networks on tiny halves reach only a
 * small, biased family of permutations (they are all even, for one), so small n walk the
 * cycles of a larger domain instead. Costs up to 2^PRP_MIN_BITS / n evaluations per
 * index, which matters only for toy datasets. */
#define PRP_MIN_BITS 8
/* Largest n accepted: gsn and sample counts are kept below 2^62 everywhere. */
#define PRP_MAX_N (UINT64_C(1) << 62)

struct prp {
	uint64_t n;
	unsigned half_bits;    /* h: each Feistel half has h bits, domain 2^(2h) */
	uint64_t half_mask;    /* 2^h - 1 */
	uint64_t keys[PRP_ROUNDS];
};

/* Key the permutation of [0, n) for (seed, epoch).
 * Returns 0, or -EINVAL when n == 0 or n > PRP_MAX_N. */
int prp_init(struct prp *p, uint64_t n, uint64_t seed, uint64_t epoch);

/* The image of x, for x in [0, n). x >= n is a caller bug (asserted). */
uint64_t prp_apply(const struct prp *p, uint64_t x);

/* out[i] = prp_apply(p, first + i) for i in [0, count); first + count <= n (asserted).
 * The same values, computed PRP_LANES indexes side by side: one index is a chain of
 * dependent multiplies, and independent chains overlap in the CPU (a lane whose index
 * has left its cycle walk takes the next index). prp_apply() in a loop stalls on the
 * unpredictable length of each walk, so the lanes gain most where walks are long and
 * cost nothing where they are not (tests/bench/bench_prp; figures in RESULTS.md). */
void prp_apply_run(const struct prp *p, uint64_t first, size_t count, uint64_t *out);

/* SplitMix64's output function: a bijective 64-bit mixer with full avalanche. */
uint64_t prp_mix64(uint64_t x);

#endif
