#include "shard_index.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "le.h"

int shard_index_parse_header(const void *p, size_t len, struct shard_index_header *out,
			     char *why, size_t why_len)
{
	const uint8_t *b = p;
	struct shard_index_header h;

	if (len < sizeof(h)) {
		snprintf(why, why_len, "index is truncated: %zu bytes, the header alone is %zu",
			 len, sizeof(h));
		return -EBADMSG;
	}
	memcpy(h.magic, b, 8);
	h.version = le32_get(b + 8);
	h.entry_size = le32_get(b + 12);
	h.count = le64_get(b + 16);
	h.first_sample = le64_get(b + 24);
	if (memcmp(h.magic, SHARD_INDEX_MAGIC, 8)) {
		snprintf(why, why_len, "index has a bad magic number (not a zephon shard index)");
		return -EBADMSG;
	}
	if (h.version != SHARD_INDEX_VERSION) {
		snprintf(why, why_len, "index format version %" PRIu32 " is not supported (this "
			 "zephon reads version %d)", h.version, SHARD_INDEX_VERSION);
		return -EBADMSG;
	}
	if (h.entry_size != sizeof(struct shard_index_entry)) {
		snprintf(why, why_len, "index entry size %" PRIu32 " is not %zu", h.entry_size,
			 sizeof(struct shard_index_entry));
		return -EBADMSG;
	}
	if (h.count > (UINT64_MAX - sizeof(h)) / sizeof(struct shard_index_entry) ||
	    shard_index_size(h.count) != len) {
		snprintf(why, why_len, "index size %zu does not match its %" PRIu64 " entries "
			 "(truncated or padded)", len, h.count);
		return -EBADMSG;
	}
	*out = h;
	return 0;
}

void shard_index_entry_get(const void *p, uint64_t i, struct shard_index_entry *out)
{
	shard_index_entry_decode((const uint8_t *)p + shard_index_size(i), out);
}

void shard_index_entry_decode(const void *p, struct shard_index_entry *out)
{
	const uint8_t *e = p;

	out->offset = le64_get(e);
	out->stored_len = le32_get(e + 8);
	out->raw_len = le32_get(e + 12);
	out->checksum = le32_get(e + 16);
	out->reserved = le32_get(e + 20);
}

int shard_index_entry_check(const struct shard_index_entry *e, uint64_t shard_bytes,
			    int compressed, char *why, size_t why_len)
{
	if (e->offset > shard_bytes || e->stored_len > shard_bytes - e->offset) {
		snprintf(why, why_len, "payload [%" PRIu64 ", +%" PRIu32 ") lies past the end of "
			 "the %" PRIu64 "-byte shard (truncated shard?)", e->offset,
			 e->stored_len, shard_bytes);
		return -EBADMSG;
	}
	if (e->raw_len > SAMPLE_MAX_BYTES) {
		snprintf(why, why_len, "sample size %" PRIu32 " exceeds the %" PRIu32 "-byte "
			 "limit", e->raw_len, (uint32_t)SAMPLE_MAX_BYTES);
		return -EBADMSG;
	}
	if (e->reserved) {
		snprintf(why, why_len, "index entry has a non-zero reserved field");
		return -EBADMSG;
	}
	if (!compressed && e->stored_len != e->raw_len) {
		snprintf(why, why_len, "stored size %" PRIu32 " differs from sample size %" PRIu32
			 " in an uncompressed shard", e->stored_len, e->raw_len);
		return -EBADMSG;
	}
	if (compressed && e->stored_len == 0) {
		snprintf(why, why_len, "compressed payload of 0 bytes");
		return -EBADMSG;
	}
	return 0;
}

int shard_index_check_all(const void *p, size_t len, uint64_t shard_bytes, int compressed,
			  uint64_t *bad_entry, char *why, size_t why_len)
{
	struct shard_index_header h;
	uint64_t next = 0;
	int rc;

	*bad_entry = 0;
	rc = shard_index_parse_header(p, len, &h, why, why_len);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < h.count; i++) {
		struct shard_index_entry e;

		shard_index_entry_get(p, i, &e);
		*bad_entry = i;
		rc = shard_index_entry_check(&e, shard_bytes, compressed, why, why_len);
		if (rc)
			return rc;
		if (e.offset != next) {
			snprintf(why, why_len, "payload starts at byte %" PRIu64 ", expected %" PRIu64
				 " (entries must lie back to back)", e.offset, next);
			return -EBADMSG;
		}
		next = e.offset + e.stored_len;
	}
	if (next != shard_bytes) {
		*bad_entry = h.count;
		snprintf(why, why_len, "payloads end at byte %" PRIu64 " but the shard has %" PRIu64
			 " bytes", next, shard_bytes);
		return -EBADMSG;
	}
	return 0;
}
