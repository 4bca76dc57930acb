/*
 * shard_index.h: the layout of a shard's offset index (the `.idx` file of dataset.h's
 * directory: struct shard_index_header, then `count` entries, little-endian), pinned
 * here, and the checks and reads of it.
 *
 * Index bytes come from disk and are untrusted: every function here bounds-checks what
 * it reads and never trusts a count or offset before checking it against the file size.
 * Pure functions over caller-owned memory; thread-safe.
 */
#ifndef ZEPHON_SHARD_INDEX_H
#define ZEPHON_SHARD_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif

#define SHARD_INDEX_MAGIC "ZPHIDX\0\1" /* 8 bytes; the last byte is the index format */
#define SHARD_INDEX_VERSION 2  /* 2: checksum is shard_index_checksum() (XXH3), was XXH32 */

struct shard_index_header {
	char magic[8];          /* SHARD_INDEX_MAGIC */
	uint32_t version;       /* SHARD_INDEX_VERSION */
	uint32_t entry_size;    /* sizeof(struct shard_index_entry) */
	uint64_t count;         /* entries that follow */
	uint64_t first_sample;  /* id of entry 0 */
};
_Static_assert(sizeof(struct shard_index_header) == 32, "index header is 32 bytes on disk");

struct shard_index_entry {
	uint64_t offset;        /* byte offset of the payload in the shard file */
	uint32_t stored_len;    /* payload bytes in the shard file */
	uint32_t raw_len;       /* decoded sample bytes */
	uint32_t checksum;      /* shard_index_checksum() of the decoded sample */
	uint32_t reserved;      /* 0 */
};
_Static_assert(sizeof(struct shard_index_entry) == 24, "index entry is 24 bytes on disk");

/* Largest decoded sample accepted (raw_len is 32-bit on disk; keep batches sane). */
#define SAMPLE_MAX_BYTES (UINT32_C(1) << 31)

/* The index entry's checksum of a decoded sample of len bytes: the low 32 bits of
 * XXH3_64bits (seed 0) of its bytes (xxHash, https://github.com/Cyan4973/xxHash, the
 * XXH3 algorithm; several times faster than XXH32 on samples of kilobytes, which every
 * read of a raw shard pays). COMPATIBILITY: part of the shard index format. */
static inline uint32_t shard_index_checksum(const void *data, size_t len)
{
#if defined(__x86_64__) || defined(__i386__)
	/* the same hash, with the widest vector unit of this CPU picked at run time:
	 * Debian builds XXH3_64bits itself for baseline x86-64 (SSE2 only) */
	return (uint32_t)XXH3_64bits_dispatch(data, len);
#else
	return (uint32_t)XXH3_64bits(data, len);
#endif
}

/* Bytes of an index of `count` entries: 32 + 24 * count. */
static inline uint64_t shard_index_size(uint64_t count)
{
	return sizeof(struct shard_index_header) + count * sizeof(struct shard_index_entry);
}

/* Decode the header of an index file of len bytes at p (O(1)): magic, version, entry
 * size, and that the file holds exactly `count` entries. 0, or -EBADMSG with a one-line
 * reason in why (truncated, bad magic, unknown version, wrong size). */
int shard_index_parse_header(const void *p, size_t len, struct shard_index_header *out,
			     char *why, size_t why_len);

/* Entry i of an index whose header parsed (i < count; not checked here). */
void shard_index_entry_get(const void *p, uint64_t i, struct shard_index_entry *out);

/* Decode the sizeof(struct shard_index_entry) bytes of one entry at p. */
void shard_index_entry_decode(const void *p, struct shard_index_entry *out);

/* Check one entry against the payload file size and the largest sample (O(1)):
 * offset + stored_len <= shard_bytes, raw_len <= SAMPLE_MAX_BYTES, reserved == 0, and
 * for raw storage stored_len == raw_len. 0 or -EBADMSG with the reason in why. */
int shard_index_entry_check(const struct shard_index_entry *e, uint64_t shard_bytes,
			    int compressed, char *why, size_t why_len);

/* Check every entry of a parsed index (O(count)): each passes shard_index_entry_check,
 * payloads lie back to back from offset 0 and the last one ends at shard_bytes.
 * 0, or -EBADMSG with *bad_entry set to the first bad entry and the reason in why. */
int shard_index_check_all(const void *p, size_t len, uint64_t shard_bytes, int compressed,
			  uint64_t *bad_entry, char *why, size_t why_len);

#endif
