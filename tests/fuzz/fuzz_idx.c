/* fuzz_idx.c: Megatron-LM .idx files (megatron_idx_parse) against .bin sizes. */
#include <string.h>

#include "fuzz.h"
#include "source.h"

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t bins[] = { 0, 1, 4096, 1u << 20, UINT64_MAX / 2 };
	struct megatron_idx m;
	char why[300];

	for (size_t i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
		uint64_t tokens = 0;

		if (megatron_idx_parse(data, size, bins[i], &m, why, sizeof(why)))
			continue;
		/* every accepted sequence lies inside the .bin */
		for (uint64_t k = 0; k < m.sequences; k++) {
			uint64_t n = rd32(m.sizes + 4 * k), ptr = rd64(m.pointers + 8 * k);

			if (ptr > bins[i] || n * m.itemsize > bins[i] - ptr)
				__builtin_trap();
			tokens += n;
		}
		if (tokens != m.tokens)
			__builtin_trap();
		/* the document index, read by pack --eod-token, lies inside the .idx */
		if (m.doc_index < data || (size_t)(m.doc_index - data) > size ||
		    m.documents > (size - (size_t)(m.doc_index - data)) / 8)
			__builtin_trap();
		for (uint64_t k = 0; k < m.documents; k++)
			tokens ^= rd64(m.doc_index + 8 * k);
	}
	return 0;
}
