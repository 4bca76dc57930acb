/*
 * journal_weights.h: the text of a mixture's integer weights, as the journal records it
 * (layout.weights, journal.h) and a mount shows it: "7,3,0", 1 to MIX_MAX_SOURCES decimal
 * integers in source order, separated by single commas, no signs, spaces or leading
 * zeros, each below 2^20, their sum between 1 and MIX_MAX_PERIOD (mix.h).
 * journal_weights_format() writes only such texts and journal_weights_parse() reads
 * them back. Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_JOURNAL_WEIGHTS_H
#define ZEPHON_JOURNAL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

/* Longest weights text of a layout, with its NUL: MIX_MAX_SOURCES weights of up to 7
 * digits (below 2^20) and their commas. */
#define JOURNAL_WEIGHTS_MAX 8192

/* Parse a weights text as journal_set_weights() takes it and journal_layouts() gives it
 * (non-empty): out (room for MIX_MAX_SOURCES values; may be NULL) receives the weights,
 * *count (may be NULL) how many. 0, or -EINVAL with the broken rule in why (naming the
 * weight by its 1-based position; why may be NULL). */
int journal_weights_parse(const char *text, uint64_t *out, size_t *count, char *why,
			  size_t why_len);

/* Write the k weights a[0..k) as "7,3,0" into out[0..JOURNAL_WEIGHTS_MAX), NUL-terminated
 * (k <= MIX_MAX_SOURCES, each a[s] below 2^20: then the text fits; past that it is cut
 * short, never overrun). The text parses back to a when their sum is 1..MIX_MAX_PERIOD. */
void journal_weights_format(const uint64_t *a, size_t k, char out[JOURNAL_WEIGHTS_MAX]);

#endif
