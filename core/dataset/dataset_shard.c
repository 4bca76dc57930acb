/* dataset_shard.c: where a sample lies in an open dataset (dataset_int.h): its shard, its
 * index entry, and the mapping of a shard's index checked against the catalog. Below
 * dataset.c (which opens a dataset) and dataset_remote.c (which opens the shards of a
 * source in object storage): both map indexes and look samples up through it. */
#include "dataset_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"

/* The shard holding id (< N): binary search over first_sample. */
const struct ds_shard *dataset_find_shard(const struct dataset *ds, uint64_t id)
{
	size_t lo = 0, hi = ds->nshards;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (ds->shards[mid].first_sample <= id)
			lo = mid;
		else
			hi = mid;
	}
	return &ds->shards[lo];
}

/* The index entry of sample id (of shard s) in the index mapping. */
const uint8_t *dataset_entry_at(const struct ds_shard *s, uint64_t id)
{
	return s->index + shard_index_size(id - s->first_sample);
}

/* Read the index entry of sample id (of shard s) out of the index mapping: 0, or -EIO
 * when the read faulted (the index file was truncated under us, or its disk failed). */
int dataset_entry_read(const struct ds_shard *s, uint64_t id, struct shard_index_entry *e)
{
	uint8_t raw[sizeof(struct shard_index_entry)];

	if (guard_copy(raw, dataset_entry_at(s, id), sizeof(raw)))
		return -EIO;
	shard_index_entry_decode(raw, e);
	return 0;
}

int dataset_map_index(int ifd, const char *name, const struct catalog_shard *cs,
		      struct ds_shard *s, char *err, size_t errlen)
{
	struct shard_index_header h;
	uint8_t hb[sizeof(struct shard_index_header)];
	char why[256];
	struct stat sb;
	void *map;

	if (fstat(ifd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		err_printf(err, errlen, "index %s: %s", name, "not a regular file");
		close(ifd);
		return -EBADMSG;
	}
	if (sb.st_size < (off_t)sizeof(h)) {
		close(ifd);
		err_printf(err, errlen, "index %s is truncated: %jd bytes", name,
			(intmax_t)sb.st_size);
		return -EBADMSG;
	}
	map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, ifd, 0);
	close(ifd);
	if (map == MAP_FAILED) {
		err_printf(err, errlen, "index %s: mmap: %s", name, strerror(errno));
		return -EIO;
	}
	s->index = map;
	s->index_len = (size_t)sb.st_size;
	/* Lookups jump around the index: no readahead around each. (Pages already in
	 * the page cache in large folios, e.g. just after a pack, are still mapped a
	 * folio at a time: see B3 in tests/bench/RESULTS.md.) */
	madvise(map, s->index_len, MADV_RANDOM);
	if (guard_copy(&hb, map, sizeof(hb))) {
		err_printf(err, errlen, "index %s: read failed: %s (truncated while "
			"opening?)", name, strerror(EIO));
		return -EIO;
	}
	/* it reads the header's bytes only; the length is the file's */
	if (shard_index_parse_header(hb, s->index_len, &h, why, sizeof(why))) {
		err_printf(err, errlen, "index %s: %s", name, why);
		return -EBADMSG;
	}
	/* the header holds the source's own (local) ids */
	if (h.count != cs->samples || h.first_sample != cs->first_sample) {
		err_printf(err, errlen, "index %s holds samples [%" PRIu64 ", +%" PRIu64 ") but "
			"the catalog says [%" PRIu64 ", +%" PRIu64 ")", name,
			h.first_sample, h.count, cs->first_sample, cs->samples);
		return -EBADMSG;
	}
	return 0;
}

