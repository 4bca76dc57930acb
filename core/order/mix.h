/*
 * mix.h: weighted mixtures of datasets (docs/design.md §11): which source each gsn of the
 * global stream comes from, and the how-many-th sample of that source it is.
 *
 * Weights are exact: each weight w_s is read as a fraction and the K weights become
 * integers a_s with a period D = sum a_s (mix_weights_exact()). The interleave is a
 * sequence of sources s(0), s(1), ... with a_s slots of source s in every D slots. Its
 * count c_s(n), the slots of source s among the first n, satisfies for every n and s
 *
 *     |c_s(n) - n * a_s / D| < 1                                        (the bound)
 *
 * Construction: slot n = 1, 2, ... (1-based here) may hold the k-th slot of source s
 * (k = 1, 2, ...) exactly when the bound holds on both sides of it, i.e. when
 *     floor((k - 1) * D / a_s) + 1 <= n <= ceil(k * D / a_s)
 * (its release and deadline). Such an assignment exists for every set of weights
 * (R. Tijdeman, "The chairman assignment problem", Discrete Math. 32(1), 1980, proves
 * the stronger |c_s(n) - n w_s| <= 1 - 1/(2K - 2)). Earliest deadline first over unit
 * jobs with integer release times and deadlines finds one whenever one exists (Jackson's
 * rule; ties go to the lower source index, so the sequence is a pure function of the
 * integer weights). At n = D the bound forces c_s(D) = a_s, so the sequence repeats
 * with period D: it is built once per weight vector (O(D log K) time, 10 bytes per slot)
 * and every query is O(1) or O(log a_s), at any n below 2^62.
 * mix_schedule_new() checks every deadline as it builds, and the unit tests check the
 * bound over every prefix of random weight vectors.
 *
 * A mixture stream (struct mixture) is a history of segments: weights w^(i) from gsn
 * start_i on (a curriculum changes the weights at a step boundary). Segment i serves
 * the interleave of w^(i) from its start, continuing every source where the segments
 * before it left it (base_i[s] = samples of s in gsn [0, start_i)). Each source has its
 * own plain struct order (order_one.h: never a mixture itself) over its own N_s samples
 * and its own seed, so each source has its own epochs and its own permutation per epoch:
 * a small source repeated 3 times is seen in 3 orders, and the k-th sample of source s is sample perm_s(k / N_s)(k % N_s) of it.
 *
 * Pure, no globals; read-only structures are thread-safe.
 */
#ifndef ZEPHON_MIX_H
#define ZEPHON_MIX_H

#include <stddef.h>
#include <stdint.h>

struct order;

/* Sources of one mixture: a slot of the schedule names its source in two bytes. */
#define MIX_MAX_SOURCES 1024
/* Largest period D = sum of the integer weights: the schedule takes 10 bytes per slot. */
#define MIX_MAX_PERIOD (UINT64_C(1) << 20)
/* A weight is read as the fraction of smallest denominator within this relative
 * distance of it (so 0.7 is 7/10 and 0.3333333333 is 1/3). */
#define MIX_WEIGHT_TOLERANCE 1e-9

/* Exact integer weights a[0..k) from real weights w[0..k): each w_s as a fraction, then
 * the smallest integers in the same ratios. 0, or -EINVAL with a one-line reason in why
 * (k == 0 or k > MIX_MAX_SOURCES; a weight negative, NaN or infinite; every weight 0;
 * a weight that is no fraction of denominator <= 10^6 within MIX_WEIGHT_TOLERANCE;
 * weights whose period D would pass MIX_MAX_PERIOD: "round them to fewer digits"). */
int mix_weights_exact(const double *w, size_t k, uint64_t *a, char *why, size_t why_len);

/* Parse a weight list "0.7,0.3" or "0.7+0.3" (k numbers, in source order; '+' where a
 * comma cannot go, as in a mount's -o list) into w[0..k). Names may prefix each weight
 * ("web:0.7+code:0.3"); then every name of names[0..k) must appear once, in any order. 0, or -EINVAL with why (not a number, too many or too few, an
 * unknown or repeated name). Range rules are mix_weights_exact()'s. */
int mix_weights_parse(const char *text, const char *const *names, size_t k, double *w,
		      char *why, size_t why_len);

/* The interleave of integer weights, built once (see above). */
struct mix_schedule;

/* Build the schedule of a[0..k) (k <= MIX_MAX_SOURCES, 0 < sum a <= MIX_MAX_PERIOD; a
 * zero weight is allowed: that source gets no slot). 0, -EINVAL (weights out of range),
 * -ENOMEM, or -EDOM (a deadline was missed: impossible by the theorem; a bug). */
int mix_schedule_new(const uint64_t *a, size_t k, struct mix_schedule **out);
void mix_schedule_free(struct mix_schedule *m);

uint64_t mix_schedule_period(const struct mix_schedule *m);
/* The integer weight a_s (s < k). */
uint64_t mix_schedule_weight(const struct mix_schedule *m, size_t s);

/* The source of slot n (0-based, n < 2^62); *j receives c_s(n), the index of the slot
 * among its source's slots. O(1). */
size_t mix_schedule_at(const struct mix_schedule *m, uint64_t n, uint64_t *j);

/* c_s(n): slots of source s among slots [0, n). O(log a_s). */
uint64_t mix_schedule_count(const struct mix_schedule *m, size_t s, uint64_t n);

/* The slot holding source s's j-th slot (0-based): the n with mix_schedule_at(n) = s,
 * c = j. UINT64_MAX when a_s == 0 or the slot is past 2^62. O(1). */
uint64_t mix_schedule_slot(const struct mix_schedule *m, size_t s, uint64_t j);

/* A mixture stream: sources with their own orders, and a history of weight segments. */
struct mixture;

/* A mixture of k sources. src[s] is source s's order (its N_s training samples, its seed
 * and shuffle: mixture_source_seed() gives the seed), copied; offset[s] the first id of
 * source s in the union's id space (dataset_source_offset()). weights0 are the integer
 * weights of the first segment (from gsn 0). 0, -EINVAL, -ENOMEM, -EDOM (as
 * mix_schedule_new). *out is set only on success. */
int mixture_new(size_t k, const struct order *src, const uint64_t *offset,
		const uint64_t *weights0, struct mixture **out);
void mixture_free(struct mixture *mx);

/* Serve weights a[0..k) from gsn `start` on: segments starting at or after start are
 * dropped (a resume before an earlier change forgets it), and the source positions at
 * start carry over. Equal weights to the segment in force at start change nothing.
 * 0, -EINVAL (start >= 2^62), -ENOMEM, -EDOM. On failure the mixture is unchanged. */
int mixture_set_weights(struct mixture *mx, uint64_t start, const uint64_t *a);

size_t mixture_sources(const struct mixture *mx);
/* The segments: count, and segment i's start gsn and integer weights (k values, owned
 * by mx). */
size_t mixture_segments(const struct mixture *mx);
uint64_t mixture_segment_start(const struct mixture *mx, size_t i);
const uint64_t *mixture_segment_weights(const struct mixture *mx, size_t i);
/* The segment in force at gsn. */
size_t mixture_segment_at(const struct mixture *mx, uint64_t gsn);

/* The source of gsn and its source gsn k (how many samples of that source come before
 * it). O(log segments). */
size_t mixture_locate(const struct mixture *mx, uint64_t gsn, uint64_t *k);

/* Samples of source s among gsn [0, gsn). O(log segments + log a_s). */
uint64_t mixture_count(const struct mixture *mx, size_t s, uint64_t gsn);

/* The first gsn at which source s would serve its source gsn k (its sample k of the
 * source stream); ORDER_MAX_GSN when it never does (its weight is 0 from there on). */
uint64_t mixture_gsn_of(const struct mixture *mx, size_t s, uint64_t k);

/* The mixture's epoch at gsn: the least epoch, at gsn, of the sources with a weight in
 * the segment in force there (each source's samples before gsn over its N); 0 when none
 * has one. What `epoch` of a claim in /rank/<r>/state says. */
uint64_t mixture_epoch(const struct mixture *mx, uint64_t gsn);

/* The union id of gsn; *epoch (may be NULL) receives the source's epoch of it,
 * *source (may be NULL) the source. */
uint64_t mixture_sample(const struct mixture *mx, uint64_t gsn, uint64_t *epoch,
			size_t *source);

/* ids[i] = mixture_sample(gsn + i) for i < count, each source's share of a run keyed
 * once per epoch (order_one_fill()). 0, or -EOVERFLOW (past 2^62). */
int mixture_fill(const struct mixture *mx, uint64_t gsn, size_t count, uint64_t *ids);

/* The first gsn at which some source begins its epoch `epochs` (0: ORDER_MAX_GSN): a
 * mixture of finite epochs ends when its first source is used up. */
uint64_t mixture_limit(const struct mixture *mx, uint64_t epochs);

/* The validation stream of a mixture whose sources hold samples out (order.h): the
 * held-out samples of source 0 in its split order, then source 1's, and so on; position
 * j < mixture_holdout() gives a union id, *source (may be NULL) its source. */
uint64_t mixture_validation_sample(const struct mixture *mx, uint64_t j, size_t *source);
/* Held-out samples over every source. */
uint64_t mixture_holdout(const struct mixture *mx);

/* The order of source s (its N_s, seed, shuffle). */
const struct order *mixture_source_order(const struct mixture *mx, size_t s);

/* Source s's seed in a mixture of the job's seed: a mix of both, so the sources'
 * permutations are independent. */
uint64_t mixture_source_seed(uint64_t seed, size_t s);

#endif
