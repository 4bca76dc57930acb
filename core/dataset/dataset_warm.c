/* dataset_warm.c: page-cache warming of a batch's index entries and payloads before
 * it is read (sample_reader_warm() in dataset.h). */
#include "dataset_int.h"
#include "prp.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* The read-around sample_reader_warm() gives each payload of a cold batch when the whole
 * dataset fits in memory: the kernel's default for a fault in a file mapping (128 KiB). */
#define WARM_WINDOW (128u << 10)

/* The memory limit of this process's cgroup in bytes (a container's, a job's slice), or
 * UINT64_MAX without one: cgroup v1's memory.limit_in_bytes, else v2's memory.max, of the
 * group /proc/self/cgroup names. The page cache a process's reads fill is charged to it,
 * so a dataset that fits in the machine's memory may not fit in this. */
static uint64_t cgroup_memory_limit(void)
{
	static const char *const where[][2] = {
		{ "/sys/fs/cgroup/memory", "memory.limit_in_bytes" }, /* v1 */
		{ "/sys/fs/cgroup", "memory.max" },                   /* v2 */
		{ "/sys/fs/cgroup/unified", "memory.max" },           /* v2 beside v1 */
	};
	char line[4096], path[4200 + 64];
	uint64_t best = UINT64_MAX;
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (!f)
		return best;
	while (fgets(line, sizeof(line), f)) {
		/* "7:memory:/job.slice" (v1) or "0::/job.slice" (v2) */
		char *ctl = strchr(line, ':'), *grp = ctl ? strchr(ctl + 1, ':') : NULL;
		int v1;

		if (!grp)
			continue;
		*grp++ = '\0';
		grp[strcspn(grp, "\n")] = '\0';
		v1 = strcmp(ctl + 1, "memory") == 0;
		if (!v1 && ctl[1])
			continue;
		for (int k = v1 ? 0 : 1; k < (v1 ? 1 : 3); k++) {
			FILE *m;
			unsigned long long v;

			snprintf(path, sizeof(path), "%s%s/%s", where[k][0], strcmp(grp, "/") ? grp : "",
				 where[k][1]);
			if (!(m = fopen(path, "re")))
				continue;
			if (fscanf(m, "%llu", &v) == 1 && v < best) /* "max" reads as no number */
				best = v;
			fclose(m);
		}
	}
	fclose(f);
	return best;
}

/* What sample_reader_warm() reads around each payload of a batch that is not in memory.
 * A dataset that fits in half the memory its pages may use (the machine's, or its
 * cgroup's limit when lower) gets WARM_WINDOW: each of its bytes is read within the epoch
 * and stays cached until then, so larger reads fill the cache sooner (with only the
 * payloads' pages every batch is random reads for a whole epoch; figures in
 * tests/bench/RESULTS.md). A larger one gets only the payloads' pages: around them the
 * window would read 32 times the bytes of 4 KiB samples, evicted before they are used. */
static uint64_t warm_window(const struct dataset *ds)
{
	uint64_t bytes = 0, mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t limit = cgroup_memory_limit();

	for (size_t k = 0; k < ds->nshards; k++)
		bytes += ds->shards[k].bytes;
	return bytes <= (limit < mem ? limit : mem) / 2 ? WARM_WINDOW : 0;
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

/* The payload bytes of sample id of a flat shard s (dataset_flat_shard(): samples of
 * `size` bytes back to back from offset 0). */
static uint64_t flat_offset(const struct ds_shard *s, uint64_t id, uint64_t size)
{
	return (id - s->first_sample) * size;
}

/* batch_cold() for flat shards: the payload pages alone (no index page is read). */
static int flat_cold(const struct dataset *ds, const uint64_t *ids, size_t count)
{
	uint64_t size = ds->info.seq_len * ds->info.itemsize;

	for (size_t k = 0; k < WARM_PROBES && k < count; k++) {
		uint64_t id = ids[k * count / WARM_PROBES], off;
		const struct ds_shard *s;

		if (id >= ds->info.samples)
			continue;
		s = dataset_find_shard(ds, id);
		off = flat_offset(s, id, size);
		if (!s->data || (off < s->bytes && !page_resident(s->data + off)))
			return 1;
	}
	return 0;
}

/* Whether the count samples ids are to be hinted now: not while r lets batches pass
 * unprobed (WARM_SKIP), nor when the probe (flat_cold or batch_cold) finds them in
 * memory. Sets r's window at its first cold batch. */
static int warm_due(struct sample_reader *r, const uint64_t *ids, size_t count, int flat)
{
	if (!count)
		return 0;
	if (r->warm_skip) {
		r->warm_skip--;
		return 0;
	}
	if (!(flat ? flat_cold(r->ds, ids, count) : batch_cold(r->ds, ids, count))) {
		if (++r->warm_hot >= 2)
			r->warm_skip = WARM_SKIP;
		return 0;
	}
	r->warm_hot = 0;
	if (!r->warm_known) {
		/* once per reader, here rather than in dataset_open(): the dataset stands below
		 * its warming (no call back up), and a reader that never meets a cold batch
		 * never sums the shards */
		r->warm_window = warm_window(r->ds);
		r->warm_known = 1;
	}
	return 1;
}

/* Ask for the pages [from, to) of shard s, widened to whole windows of w bytes, unless
 * they are the window asked for last (*last, *last_shard: samples in order share one). */
static void hint_payload(const struct dataset *ds, const struct ds_shard *s, uint64_t from,
			 uint64_t to, uint64_t w, uint64_t *last, size_t *last_shard)
{
	from &= ~(w - 1);
	to = (to + w - 1) & ~(w - 1);
	if (from != *last || (size_t)(s - ds->shards) != *last_shard)
		posix_fadvise(s->fd, (off_t)from, (off_t)(to - from), POSIX_FADV_WILLNEED);
	*last = from;
	*last_shard = (size_t)(s - ds->shards);
}

/* The payloads of flat shards, found from the id; w: the window of each. */
static void warm_flat(const struct dataset *ds, const uint64_t *ids, size_t count, uint64_t w)
{
	uint64_t size = ds->info.seq_len * ds->info.itemsize, last = UINT64_MAX;
	size_t last_shard = SIZE_MAX;

	for (size_t i = 0; i < count; i++) {
		const struct ds_shard *s;
		uint64_t off;

		if (ids[i] >= ds->info.samples)
			continue;
		s = dataset_find_shard(ds, ids[i]);
		off = flat_offset(s, ids[i], size);
		if (off < s->bytes)
			hint_payload(ds, s, off, off + size < s->bytes ? off + size : s->bytes, w,
				     &last, &last_shard);
	}
}

/* The pages of the index entries of ids, all of them in flight at once. */
static void warm_entries(const struct dataset *ds, const uint64_t *ids, size_t count)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), last = 0;

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
}

/* Index entries (warm_entries), then payloads; w: the window of each payload. */
static void warm_indexed(const struct dataset *ds, const uint64_t *ids, size_t count,
			 uint64_t w)
{
	uint64_t last_from = UINT64_MAX;
	size_t last_shard = SIZE_MAX;

	warm_entries(ds, ids, count);
	/* ... then the payloads, whose place the entries give (the first of these reads
	 * waits for its index page; by then the others have arrived or are on their way) */
	for (size_t i = 0; i < count; i++) {
		const struct ds_shard *s;
		struct shard_index_entry e;

		if (ids[i] >= ds->info.samples)
			continue;
		s = dataset_find_shard(ds, ids[i]);
		/* an entry is checked, and a failed read reported, when its sample is read */
		if (dataset_entry_read(s, ids[i], &e) || e.offset >= s->bytes)
			continue;
		hint_payload(ds, s, e.offset,
			     e.stored_len < s->bytes - e.offset ? e.offset + e.stored_len : s->bytes,
			     w, &last_from, &last_shard);
	}
}

/* dataset_resident()'s pages per call: 64 mincore() calls, once per half read-ahead
 * window, small against the ids of that window they save (tests/bench/RESULTS.md, "Warm
 * cache: the real floor") */
#define RESIDENT_PROBES 64

int dataset_resident(const struct dataset *ds, unsigned flags, uint64_t *seed)
{
	int index = flags != HINT_FLAT;

	if (!ds->nshards)
		return 0;
	for (unsigned k = 0; k < RESIDENT_PROBES; k++) {
		const struct ds_shard *s;
		uint64_t x = prp_mix64((*seed)++), span, at; /* SplitMix64 */

		s = &ds->shards[x % ds->nshards];
		span = s->bytes + (index ? s->index_len : 0);
		if (!span)
			continue; /* an empty shard: nothing to probe */
		at = (x >> 20) % span; /* other bits than the shard's */
		if (s->remote) { /* in the node cache: a sample's bit */
			if (!s->count || !dsr_cached(s, s->first_sample + at % s->count))
				return 0;
			continue;
		}
		if (at < s->bytes && !s->data)
			return 0; /* read with pread: nothing to probe */
		if (!page_resident(at < s->bytes ? s->data + at : s->index + (at - s->bytes)))
			return 0;
	}
	return 1;
}

void sample_reader_warm(struct sample_reader *r, const uint64_t *ids, size_t count)
{
	if (r->ds->remote) { /* its missing samples fetched in parallel, not one by one */
		dsr_want(r->ds, ids, count, 0);
		return;
	}
	if (warm_due(r, ids, count, 0))
		warm_indexed(r->ds, ids, count,
			     r->warm_window ? r->warm_window : (uint64_t)sysconf(_SC_PAGESIZE));
}

void dataset_hint(const struct dataset *ds, const uint64_t *ids, size_t count, unsigned flags)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	if (ds->remote) {
		dsr_want(ds, ids, count, 1);
		return;
	}
	/* no probe and no skip (warm_due: a reader's, for its batches): a chunk whose probed
	 * samples another rank's hints brought in may still be cold; the caller probes the
	 * whole dataset instead (dataset_resident) */
	if (!(flags & HINT_FLAT)) {
		warm_indexed(ds, ids, count, page);
		return;
	}
	if (flags & HINT_INDEX)
		warm_entries(ds, ids, count);
	warm_flat(ds, ids, count, page);
}

int dataset_cached(const struct dataset *ds, uint64_t id, unsigned flags)
{
	if (id < ds->info.samples && dataset_find_shard(ds, id)->remote)
		return dsr_cached(dataset_find_shard(ds, id), id);
	if (id >= ds->info.samples || !dataset_find_shard(ds, id)->data)
		return 1; /* nothing mapped to look at: read with pread */
	return flags == HINT_FLAT ? !flat_cold(ds, &id, 1) : !batch_cold(ds, &id, 1);
}
