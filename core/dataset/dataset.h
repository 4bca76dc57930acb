/*
 * dataset.h: read access to a packed dataset directory (docs/design.md §4).
 *
 * On-disk layout (format version 1; COMPATIBILITY: any change below is a format break,
 * bump CATALOG_FORMAT_VERSION and the catalog's user_version together):
 *   DIR/catalog.sqlite      schema/catalog.sql: meta, dict, sources, shards
 *   DIR/shard-NNNNN.zst     sample payloads back to back; with compress=zstd each one an
 *                           independent zstd frame (content size and content checksum
 *                           on, compressed with the dataset's dictionary if any); with
 *                           compress=none the file is shard-NNNNN.raw and holds the raw
 *                           bytes (the catalog's shards table names every file)
 *   DIR/shard-NNNNN.idx     struct shard_index_header, then `count` struct shard_index_entry,
 *                           all little-endian, mmap-able
 *   DIR/documents.idx       (packs with --tokenizer only) the document index, docindex.h
 *   DIR/rows.idx            (datasets of rows only) which documents each row holds,
 *                           rowindex.h
 * Sample ids [first_sample, first_sample + count) of a shard are consecutive; shards
 * tile [0, N) in order. Lookup by id: binary search over the (few) shards, then one
 * index entry: O(log shards) = O(1) in practice.
 *
 * Sample payloads by content:
 *   text    the record's bytes (a JSON line or a text line, without its '\n')
 *   files   a "file group" (WebDataset sample, or one file of a directory):
 *             u32 nfiles, then per file: u32 name_len, name bytes, u64 size, data bytes
 *           (little-endian; names are "<key>.<ext>" as packed)
 *   tokens  seq_len tokens of dtype, little-endian; in a dataset of rows (row_len L,
 *           meta layout=rows: docs/design.md §4, "Datasets of rows") seq_len = 3 L
 *           int32, the planes inputs[L], labels[L], positions[L] of one row of whole
 *           documents
 *
 * Several packed datasets open as one (dataset_open_sources(), for a mixture): their
 * sources. Source s's sample i is sample offset_s + i of the whole, offset_s the sum of
 * the sample counts of the sources before it; each source keeps its own files,
 * compression and dictionary, and every call below takes the whole's ids.
 *
 * Thread-safety: a struct dataset is read-only after dataset_open() and may be shared by
 * threads; each thread decodes through its own struct sample_reader.
 */
#ifndef ZEPHON_DATASET_H
#define ZEPHON_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "buf.h"
#include "dtype.h"
#include "shard_index.h"

#define CATALOG_FORMAT_VERSION 1

enum dataset_kind { DATASET_RECORDS, DATASET_TOKENS };
enum dataset_content { CONTENT_TEXT, CONTENT_FILES, CONTENT_TOKENS };

struct dataset_info {
	enum dataset_kind kind;
	enum dataset_content content;
	uint64_t samples;          /* N */
	enum token_dtype dtype;    /* tokens only */
	unsigned itemsize;         /* bytes per token; tokens only */
	uint64_t seq_len;          /* L, tokens only: tokens per sample as stored */
	uint64_t overlap;          /* tokens only: 1 when each window's last token is the
	                            * next window's first (pack --overlap 1, windows of
	                            * --seq-len + 1 tokens); 0 otherwise. Catalog meta key
	                            * 'overlap', absent in older datasets (0) */
	int have_eod_token;        /* tokens only: 1 when pack appended eod_token after every
	                            * document (pack --eod-token); catalog meta key
	                            * 'eod_token', absent in older datasets (0: none) */
	uint32_t eod_token;        /* the end-of-document token id; fits dtype */
	int have_max_token_id;     /* tokens only: meta 'max_token_id', absent before it */
	uint64_t max_token_id;     /* the largest token id in the dataset */
	uint64_t row_len;          /* tokens only: 0 for windows cut from the token stream;
	                            * L for a dataset of rows (pack --whole-documents, --chat):
	                            * each sample is three planes of L int32, inputs, labels
	                            * (-100 where no loss is taken) and positions, and seq_len
	                            * is 3 L. Meta 'layout' = "rows" and 'row_len', absent in
	                            * older datasets (0) */
	uint64_t max_context;      /* rows: the most input tokens of one document in a row
	                            * (meta 'max_context_length'; positions stay below it) */
	char tokenizer_sha256[65]; /* pack --tokenizer: sha256 of its files (meta
	                            * 'tokenizer_sha256'); "" otherwise. In the fingerprint */
	int compressed;            /* 1 for compress=zstd */
	uint64_t raw_bytes, stored_bytes;
	uint64_t shards;
	char fingerprint[33];      /* 32 hex digits + NUL */
	char record_ext[8];        /* text content: "json" (JSONL) or "txt" (lines); the
	                            * extension of tar members (meta key record_ext) */
};

struct dataset;
struct sample_reader;
struct catalog;

/* Open DIR read-only: read the catalog, mmap every shard index and check each header
 * against the catalog. On failure returns -errno and writes a one-line reason into err:
 * -ENOENT (no catalog), -EPROTO (unknown format version), -EBADMSG (catalog and shard
 * files disagree: missing/truncated index or shard, bad magic, counts differ),
 * -EMFILE (more shards than the open-file limit allows: one fd is kept per shard),
 * -EACCES, -ENOMEM, -EIO. *out is set only on success; free with dataset_close(). */
int dataset_open(const char *dir, struct dataset **out, char *err, size_t errlen);

/* A union of two or more datasets holds fewer samples than this (ids fit 62 bits). */
#define DATASET_SAMPLES_MAX (UINT64_C(1) << 62)

/* Open the count packed datasets dirs[0..count) as one dataset whose ids are theirs
 * concatenated in order (see the top of this file). count == 1 is dataset_open(dirs[0]):
 * the same dataset_info, fingerprint included. For count >= 2 the dataset_info is the
 * union's: samples, raw_bytes, stored_bytes and shards summed; compressed when any
 * source is; fingerprint the XXH3-128 (32 hex digits) of "zephon-mixture-v1\n" then
 * each source's fingerprint and "\n", in order (a different order is another mixture);
 * max_token_id the largest (known when every source's is); every other field is the
 * sources' common one (tokenizer_sha256 the first's).
 * Every catalog is read and checked before any shard file is opened. On failure returns
 * -errno with a one-line reason in err and nothing left open: dataset_open()'s errors for
 * the first source that fails (its message names its directory); -EINVAL for count == 0,
 * or for two sources that serve different batches: kind, content, record_ext, dtype,
 * seq_len, overlap or eod_token differ (the message names both directories, the field
 * and both values; row_len is one of the fields, and the union's max_context is the
 * largest); -EOVERFLOW when the samples add up to DATASET_SAMPLES_MAX or more
 * (count >= 2). *out is set only on success; free with dataset_close(). dirs is not
 * kept (the strings are copied). */
int dataset_open_sources(const char *const *dirs, size_t count, struct dataset **out,
			 char *err, size_t errlen);
void dataset_close(struct dataset *ds);

const struct dataset_info *dataset_info(const struct dataset *ds);
/* The directory as given to dataset_open(); of a union, its first source's. */
const char *dataset_dir(const struct dataset *ds);
/* The whole catalog as loaded (meta, sources, shards; see catalog.h), owned by ds; of a
 * union, its first source's (dataset_source_info() has each source's numbers). */
const struct catalog *dataset_catalog(const struct dataset *ds);

/* Sources: 1 for dataset_open(), count for dataset_open_sources(). */
size_t dataset_source_count(const struct dataset *ds);
/* Source s's own dataset_info as its catalog has it (its samples, its fingerprint), or
 * NULL when s >= dataset_source_count(). Owned by ds. */
const struct dataset_info *dataset_source_info(const struct dataset *ds, size_t s);
/* Source s's directory as given, or NULL when s >= dataset_source_count(). Owned by ds. */
const char *dataset_source_dir(const struct dataset *ds, size_t s);
/* The id of source s's sample 0 in ds (the sum of the samples of the sources before it);
 * N, the whole's samples, when s >= dataset_source_count(). */
uint64_t dataset_source_offset(const struct dataset *ds, size_t s);
/* Which source holds sample id: its index, with id's number in that source in *local_id
 * (when not NULL); dataset_source_count() when id >= N (*local_id untouched).
 * O(log sources). */
size_t dataset_source_of(const struct dataset *ds, uint64_t id, uint64_t *local_id);

/* Decoded size of sample id from the index, without reading the shard.
 * 0, or -ERANGE (id >= N), -EIO (the index entry is corrupt: more than
 * SAMPLE_MAX_BYTES; or it could not be read: the index file was truncated under us, or
 * its disk failed). A size from here is a hint until sample_reader_read() succeeds. */
int dataset_sample_len(const struct dataset *ds, uint64_t id, uint32_t *raw_len);

/* Which shard file holds sample id (for messages): its file name, "<source dir>/<name>"
 * in a union of two or more. NULL when id >= N. Owned by ds. */
const char *dataset_shard_name(const struct dataset *ds, uint64_t id);

/* Where uncompressed token samples lie, for a reader that maps the shard files itself
 * (the mount's /status "shards"): shard i (0 <= i < dataset_info().shards, in id order)
 * holds ids [*first, *first + *count), sample first + k at byte offset k * seq_len *
 * itemsize of the file named *file in the directory *dir (both owned by ds; dir as
 * the source was opened).
 * 0, or -ENOTSUP (not tokens, compress=zstd, or the shard's first or last index entry is
 * not there with that length: its samples are not back to back), -ERANGE (i too large),
 * -EIO (the index could not be read). O(1): the entries between are not checked. */
int dataset_flat_shard(const struct dataset *ds, size_t i, const char **dir, const char **file,
		       uint64_t *first, uint64_t *count);
/* 1 when every shard of ds is flat (dataset_flat_shard() succeeds for each: reads two
 * index entries per shard), 0 otherwise or without shards. */
int dataset_flat(const struct dataset *ds);

/* The identity (st_dev, st_ino) of the payload file of shard i as this dataset holds it
 * open, so that a reader that maps the file by its path can tell that it maps the same
 * file (not one packed again in place since). 0, -ERANGE (i too large), or fstat's -errno. */
int dataset_shard_file_id(const struct dataset *ds, size_t i, uint64_t *dev, uint64_t *ino);

/* Datasets in object storage (docs/object-storage.md). A dataset path "s3://BUCKET/PREFIX"
 * opens the dataset whose files are the objects PREFIX/NAME (s3.h: endpoint, region and
 * credentials from the AWS environment and profile files). Its catalog and shard indexes
 * are fetched whole at open (HEAD of every object: size and ETag recorded, each shard's
 * size checked against the catalog), its samples by byte range when read or read ahead
 * (dataset_hint, sample_reader_warm), every fetch pinned to the ETag recorded (an object
 * replaced under an open dataset fails the read with -EIO, never mixes). Everything
 * fetched goes through the node cache (cache.h: cache_dir, cache_size) and is checked
 * when read as a local dataset's bytes are (the sample's XXH3, zstd's checksum); a
 * cached sample that fails its check is fetched again once. Process-wide settings,
 * read by each later dataset_open(); a field left 0 or NULL keeps its default. */
struct dataset_remote_opts {
	const char *cache_dir;   /* default: $ZEPHON_CACHE_DIR, $XDG_CACHE_HOME/zephon,
	                          * $HOME/.cache/zephon */
	uint64_t cache_size;     /* bytes of samples kept; 0: no cap but the disk */
	unsigned connections;    /* requests in flight, default 64 */
	double timeout_s;        /* a fetch's retries end after this long, default 60 */
	int fill;                /* 1: besides what the order needs, fetch every sample into
	                          * the cache in the background, shard by shard in GETs of
	                          * 4 MiB (4 at a time), while the cache keeps them: a node
	                          * whose cache holds the dataset reads it all once at the
	                          * link's speed where GETs of single samples would be held
	                          * to the server's request rate */
};
void dataset_remote_defaults(const struct dataset_remote_opts *o);

/* What a dataset fetched (the sum over its s3:// sources) and its node cache held. */
struct dataset_fetch_stats {
	uint64_t requests, bytes, retries, errors, in_flight;
	uint64_t samples_fetched;  /* samples whose bytes came over the network */
	uint64_t fill_bytes;       /* bytes the fill fetched (dataset_remote_opts.fill) */
	uint64_t sample_bytes;     /* their stored bytes (what the order needed) */
	uint64_t cache_hits, cache_written, cache_not_kept, cache_evicted, cache_bad;
	uint64_t cache_used, cache_cap;
	int cache_full;
	char cache_dir[512];
	char last_error[320];      /* "" when none; names the object, never a secret */
};
/* 1 when some source of ds is in object storage. */
int dataset_is_remote(const struct dataset *ds);
/* ds's fetch counters into *out: 0, or -ENOTSUP (every source is local). */
int dataset_fetch_stats(const struct dataset *ds, struct dataset_fetch_stats *out);

const char *dataset_kind_name(enum dataset_kind k);
const char *dataset_content_name(enum dataset_content c);

/* A per-thread decoder (zstd DCtx with the dictionary referenced). NULL on ENOMEM. */
struct sample_reader *sample_reader_new(const struct dataset *ds);
void sample_reader_free(struct sample_reader *r);

/* Append the decoded bytes of sample id to out (exactly raw_len bytes). Checks the frame
 * checksum and the index checksum. 0, or -ERANGE (id >= N), -EIO (checksum mismatch,
 * corrupt frame, read error, size differs from the index, or the index entry or the
 * payload could not be read from its mapping (a file truncated under us): out is left
 * as it was), -ENOMEM. Never returns wrong bytes.
 * Every read of the dataset's mappings, here and in the other sample_reader_* and
 * dataset_* calls, goes through guard.h: a fault fails the call, never the process, on
 * any thread. */
int sample_reader_read(struct sample_reader *r, uint64_t id, struct buf *out);
/* The decoded length of sample id (its index entry's raw_len, checked against the shard
 * like a read does), without reading its bytes. 0, or -ERANGE (id >= N), -EIO (bad index
 * entry: see sample_reader_last_error). */
int sample_reader_raw_len(struct sample_reader *r, uint64_t id, uint64_t *len);
/* A hint that sample id is read soon: its index entry (payload 0) or, from the entry,
 * the first 512 bytes of its stored bytes in the shard mapping (payload 1; do that once
 * the entry had time to arrive). Prefetch instructions only: no fault, no error, nothing
 * for an id out of range or a shard read with pread. Readers of random samples issue it
 * for the sample after next (entry) and the next (payload) before reading one. */
void sample_reader_prefetch(const struct sample_reader *r, uint64_t id, int payload);
/* Before reading the samples ids[0..count) as one batch: when a few of their pages
 * (mincore(2) of two index entries and two payloads) are not in memory, ask the kernel to
 * read the index pages of all of them, then their payloads (MADV_WILLNEED,
 * POSIX_FADV_WILLNEED), so that the disk reads overlap. A payload is read with a window
 * of 128 KiB around it when the dataset fits in half the memory (the machine's, or its
 * cgroup's limit when lower), alone otherwise (see warm_window() in dataset_warm.c). Without it each
 * sample of a dataset that is not in the page cache waits for two reads of its own, one
 * after the other, and a batch for all of them in turn. Once a probe
 * finds the pages in memory, the reader's next 7 batches are not probed. Hints only: no
 * error; ids out of range are left to the read. */
void sample_reader_warm(struct sample_reader *r, const uint64_t *ids, size_t count);
/* sample_reader_warm() without the window and without a reader: the pages of the samples
 * ids[0..count) alone (read-ahead of samples known to come, serve.h server_readahead: a
 * window would read 32 times the bytes asked for). flags: HINT_FLAT when every shard of
 * the dataset is flat (dataset_flat_shard(): uncompressed token samples back to back), so
 * that the payloads are found from the ids without waiting for an index page; HINT_INDEX
 * with it when the reader checks each sample against its index entry (a batch's build),
 * so that the entries' pages are asked for too. Without HINT_FLAT: entries, then the
 * payloads they give. Unlike sample_reader_warm() it neither probes nor skips: every call
 * hints (pages already in memory cost the kernel a lookup each); a caller that knows the
 * dataset is in memory (dataset_resident) does not call it. Hints only: no error. */
#define HINT_FLAT 1u
#define HINT_INDEX 2u
void dataset_hint(const struct dataset *ds, const uint64_t *ids, size_t count, unsigned flags);
/* 1 when the first page of sample id's payload is in memory (and, unless flags is
 * HINT_FLAT alone, its index entry's page): whether a dataset_hint() of id has arrived.
 * mincore(2) only: nothing is read. An id out of range, or of a shard read with pread,
 * counts as in memory. */
int dataset_cached(const struct dataset *ds, uint64_t id, unsigned flags);
/* Whether the dataset looks wholly in the page cache: 64 pages, each of a shard drawn at
 * random and at a random place in its payload mapping (and, unless flags is HINT_FLAT
 * alone, in its index too; flags as for dataset_hint), are all in memory. mincore(2)
 * only: nothing is read. *seed: the caller's counter, which the draws (SplitMix64 of it,
 * prp_mix64) advance by 64. 0 when a probe falls in a shard read with pread (nothing to probe) or the
 * dataset has no shard. With shards of one size (a pack's, but for its last) a dataset
 * with a fraction h of its pages in memory is found resident with probability about h^64:
 * 1 when it is all there, 0.53 at 99%, below 0.002 at 90%; small shards (the last of each
 * source of a union) weigh more than their bytes. */
int dataset_resident(const struct dataset *ds, unsigned flags, uint64_t *seed);
/* Zero-copy access to count samples of an uncompressed dataset: views[i] is set to the
 * raw_len bytes of sample ids[i] inside its shard's read-only mapping (valid until
 * dataset_close()), after their checksum was verified; a fault while hashing (a shard
 * truncated under us, an I/O error) is caught. The samples of a round of 64 are located
 * first, then hashed in order while the next one is prefetched: random samples then cost
 * one pass at memory speed, not a TLB and cache miss at the start of each.
 * 0, or -ERANGE (an id >= N), -ENOTSUP (an id of a compressed source, or a shard is not
 * mapped: use sample_reader_read), -EIO (checksum mismatch, fault, bad index entry: *bad_id, when
 * bad_id is not NULL, names the sample; see sample_reader_last_error). */
int sample_reader_views(struct sample_reader *r, const uint64_t *ids, size_t count,
			struct iovec *views, uint64_t *bad_id);

/* Why the last sample_reader_read() of r failed, one line naming the sample id and shard
 * file ("sample 17 (shard-00000.zst): content checksum mismatch"); "" after a success.
 * Owned by r, valid until the next read. */
const char *sample_reader_last_error(const struct sample_reader *r);

/* The metadata text that closes a dataset's fingerprint (pack.h states the whole rule):
 * "zephon-dataset-v1\nkind=K\ncontent=C\nrecord_ext=E\ndtype=D\nseq_len=L\nsamples=N\n",
 * with E, D empty and L 0 where they do not apply, then "tokenizer_sha256=H\n" for a
 * dataset packed with --tokenizer (info->tokenizer_sha256), then, for a dataset of rows,
 * "layout=rows\nrow_len=R\nmax_context_length=C\n". Writes at most len bytes (NUL
 * included); returns the text's length. */
size_t dataset_fingerprint_text(const struct dataset_info *info, char *out, size_t len);

struct dataset_verify_report {
	uint64_t samples_ok;
	uint64_t samples_bad;
	uint64_t problems;        /* every problem reported, samples or not */
	uint64_t raw_bytes;       /* recomputed from the decoded samples */
	char fingerprint[33];     /* recomputed; compare with dataset_info()->fingerprint */
};

/* Decode every sample and check everything that can be checked: each frame, content
 * checksum and index checksum (sample_reader_read), that each shard's payloads lie back
 * to back and fill the file, that file groups parse, and that the recomputed
 * fingerprint, raw and stored byte totals match the catalog. Calls bad(ctx, id, msg)
 * once per problem (id = UINT64_MAX for a problem that is not one sample's) and
 * progress(ctx, done, N) now and then; either may be NULL. O(N) time, O(1) memory.
 * A union is checked source by source, each against its own catalog (a problem that is
 * not one sample's names its source's directory); rep then sums them, and its
 * fingerprint is the union's, made from the recomputed fingerprints of the sources.
 * 0 when clean, -EBADMSG when any problem was found, -ENOMEM. */
int dataset_verify(const struct dataset *ds,
		   void (*bad)(void *ctx, uint64_t id, const char *msg),
		   void (*progress)(void *ctx, uint64_t done, uint64_t total),
		   void *ctx, struct dataset_verify_report *rep);

#endif
