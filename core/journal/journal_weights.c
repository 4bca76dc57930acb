#include "journal_weights.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "mix.h"
#include "parse.h"

/* A weight is below 2^20: 7 digits; with its comma, 8 characters per source. */
_Static_assert(JOURNAL_WEIGHTS_MAX >= MIX_MAX_SOURCES * 8,
	       "journal_layout.weights holds every valid weights text");
#define WEIGHT_LIMIT (UINT64_C(1) << 20)

int journal_weights_parse(const char *text, uint64_t *out, size_t *count, char *why,
			  size_t why_len)
{
	uint64_t sum = 0;
	size_t k = 0;
	const char *c = text;

	for (;;) {
		const char *d = c, *e;
		uint64_t w = 0;
		int len;

		if (parse_u64_prefix(&c, &w) && *c >= '0' && *c <= '9') {
			w = WEIGHT_LIMIT; /* past 2^64: as far from a weight as any past 2^20 */
			c += strspn(c, "0123456789");
		}
		e = c;
		while (*c && *c != ',')
			c++;
		len = c - d > 24 ? 24 : (int)(c - d); /* the weight, for the message */
		k++;
		if (e == d || e != c)
			return err_set(why, why_len, -EINVAL, "weight %zu (\"%.*s\") is not a "
				       "decimal integer; give integer weights separated by commas, "
				       "as \"7,3,0\"", k, len, d);
		if (c - d > 1 && *d == '0')
			return err_set(why, why_len, -EINVAL, "weight %zu (\"%.*s\") has a leading "
				       "zero; write it without", k, len, d);
		if (w >= WEIGHT_LIMIT)
			return err_set(why, why_len, -EINVAL, "weight %zu (\"%.*s\") is not below "
				       "2^20; give the reduced integer weights", k, len, d);
		if (k > MIX_MAX_SOURCES)
			return err_set(why, why_len, -EINVAL, "more than %d weights; a mixture has "
				       "at most %d sources", MIX_MAX_SOURCES, MIX_MAX_SOURCES);
		if (out)
			out[k - 1] = w;
		sum += w;
		if (!*c)
			break;
		c++;
	}
	if (count)
		*count = k;
	if (sum == 0)
		return err_set(why, why_len, -EINVAL, "every weight is 0; give at least one "
			       "source a positive weight");
	if (sum > MIX_MAX_PERIOD)
		return err_set(why, why_len, -EINVAL, "the weights sum to %" PRIu64 ", past %"
			       PRIu64 "; give the reduced integer weights", sum, MIX_MAX_PERIOD);
	return 0;
}

void journal_weights_format(const uint64_t *a, size_t k, char out[JOURNAL_WEIGHTS_MAX])
{
	size_t len = 0;

	out[0] = 0;
	for (size_t s = 0; s < k && len < JOURNAL_WEIGHTS_MAX; s++)
		len += (size_t)snprintf(out + len, JOURNAL_WEIGHTS_MAX - len, "%s%" PRIu64,
					s ? "," : "", a[s]);
}
