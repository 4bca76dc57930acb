/* dataset_warm.c: page-cache warming of a batch's index entries and payloads before
 * it is read (sample_reader_warm() in dataset.h). */
#include "dataset_int.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* The read-around sample_reader_warm() gives each payload of a cold batch when the whole
 * dataset fits in memory: the kernel's default for a fault in a file mapping (128 KiB). */
#define WARM_WINDOW (128u << 10)

/* What sample_reader_warm() reads around each payload of a batch that is not in memory.
 * A dataset that fits in half the machine's memory gets WARM_WINDOW: each of its bytes
 * is read within the epoch and stays cached until then, so larger reads fill the cache
 * sooner (with only the payloads' pages every batch is random reads for a whole epoch;
 * figures in tests/bench/RESULTS.md). A larger one gets only the payloads' pages:
 * around them the window would read 32 times the bytes of 4 KiB samples, evicted before
 * they are used. */
static uint64_t warm_window(const struct dataset *ds)
{
	uint64_t bytes = 0, mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

	for (size_t k = 0; k < ds->nshards; k++)
		bytes += ds->shards[k].bytes;
	return bytes <= mem / 2 ? WARM_WINDOW : 0;
}

/* Samples whose pages mincore() checks per batch before sample_reader_warm() decides:
 * two index pages and two payload pages, a few system calls, small against building a
 * batch from memory. One mostly on disk is found cold at once;
 * one partly cached (hit ratio h) gets its read-ahead for all but about h^4 of its
 * batches. */
#define WARM_PROBES 2

/* Batches that pass unprobed after two probes in a row found everything in memory: the
 * probes then cost next to nothing (figures in tests/bench/RESULTS.md), and a dataset
 * that leaves the page cache is noticed within 8 batches. (Two, because a batch built
 * twice, a peek then its claim, is found in memory the second time just because the
 * first read it.) */
#define WARM_SKIP 7

/* Whether the page holding p is in memory (mincore(2); an error counts as resident: the
 * read itself reports what is wrong). */
static int page_resident(const void *p)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	unsigned char v = 1;

	if (mincore((void *)((uintptr_t)p & ~(page - 1)), 1, &v) != 0)
		return 1;
	return v & 1;
}

/* Whether some probed page of ids is not in memory (index entry, then the payload the
 * entry points at when that entry is in memory). */
static int batch_cold(const struct dataset *ds, const uint64_t *ids, size_t count)
{
	for (size_t k = 0; k < WARM_PROBES && k < count; k++) {
		uint64_t id = ids[k * count / WARM_PROBES];
		const struct ds_shard *s;
		struct shard_index_entry e;

		if (id >= ds->info.samples)
			continue;
		s = dataset_find_shard(ds, id);
		if (!page_resident(dataset_entry_at(s, id)) || dataset_entry_read(s, id, &e))
			return 1;
		if (s->data && e.offset < s->bytes && !page_resident(s->data + e.offset))
			return 1;
	}
	return 0;
}

void sample_reader_warm(struct sample_reader *r, const uint64_t *ids, size_t count)
{
	const struct dataset *ds;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), last = 0;
	uint64_t w;

	if (!count)
		return;
	if (r->warm_skip) {
		r->warm_skip--;
		return;
	}
	ds = r->ds;
	if (!batch_cold(ds, ids, count)) {
		if (++r->warm_hot >= 2)
			r->warm_skip = WARM_SKIP;
		return;
	}
	r->warm_hot = 0;
	if (!r->warm_known) {
		/* once per reader, here rather than in dataset_open(): the dataset stands below
		 * its warming (no call back up), and a reader that never meets a cold batch
		 * never sums the shards */
		r->warm_window = warm_window(ds);
		r->warm_known = 1;
	}
	w = r->warm_window ? r->warm_window : page;
	/* every index page first, all of them in flight at once ... */
	for (size_t i = 0; i < count; i++) {
		uintptr_t at, end;

		if (ids[i] >= ds->info.samples)
			continue;
		at = (uintptr_t)dataset_entry_at(dataset_find_shard(ds, ids[i]), ids[i]);
		end = at + sizeof(struct shard_index_entry); /* it may straddle two pages */
		at &= ~(page - 1);
		if (at != last) /* entries of neighbouring ids share a page */
			madvise((void *)at, end - at, MADV_WILLNEED);
		last = at;
	}
	/* ... then the payloads, whose place the entries give (the first of these reads
	 * waits for its index page; by then the others have arrived or are on their way) */
	last = UINTPTR_MAX;
	for (size_t i = 0, last_shard = SIZE_MAX; i < count; i++) {
		const struct ds_shard *s;
		struct shard_index_entry e;
		uint64_t from, to;

		if (ids[i] >= ds->info.samples)
			continue;
		s = dataset_find_shard(ds, ids[i]);
		/* an entry is checked, and a failed read reported, when its sample is read */
		if (dataset_entry_read(s, ids[i], &e) || e.offset >= s->bytes)
			continue;
		from = e.offset & ~(w - 1);
		to = e.stored_len < s->bytes - e.offset ? e.offset + e.stored_len : s->bytes;
		to = (to + w - 1) & ~(w - 1);
		if (from != last || (size_t)(s - ds->shards) != last_shard) /* samples in order
									     * share windows */
			posix_fadvise(s->fd, (off_t)from, (off_t)(to - from), POSIX_FADV_WILLNEED);
		last = from;
		last_shard = (size_t)(s - ds->shards);
	}
}
