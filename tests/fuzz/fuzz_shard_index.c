/* fuzz_shard_index.c: a shard's offset index (shard_index.h) as dataset_open and verify
 * read it. */
#include "fuzz.h"
#include "shard_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t shard_sizes[] = { 0, 5, 1000, UINT64_MAX };
	struct shard_index_header h;
	char why[300];

	if (shard_index_parse_header(data, size, &h, why, sizeof(why)))
		return 0;
	if (shard_index_size(h.count) != size)
		__builtin_trap();
	for (size_t i = 0; i < sizeof(shard_sizes) / sizeof(shard_sizes[0]); i++) {
		for (int compressed = 0; compressed < 2; compressed++) {
			uint64_t bad;

			shard_index_check_all(data, size, shard_sizes[i], compressed, &bad, why,
					      sizeof(why));
			for (uint64_t k = 0; k < h.count; k++) {
				struct shard_index_entry e;

				shard_index_entry_get(data, k, &e);
				if (shard_index_entry_check(&e, shard_sizes[i], compressed, why,
							    sizeof(why)) == 0 &&
				    (e.offset > shard_sizes[i] ||
				     e.stored_len > shard_sizes[i] - e.offset))
					__builtin_trap();
			}
		}
	}
	return 0;
}
