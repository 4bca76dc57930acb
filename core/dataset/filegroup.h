/*
 * filegroup.h: the payload of a sample of several named files (WebDataset sample, or one
 * file of a directory), as dataset.h pins it: little-endian u32 nfiles, then per file
 * u32 name_len, name bytes, u64 size, data bytes. Names are "<key>.<ext>" as packed.
 *
 * filegroup_begin()/filegroup_add()/filegroup_end() build one in a buf; filegroup_next()
 * walks one read back from disk, bounds-checking every field (the bytes are untrusted).
 * Pure functions over caller-owned memory; thread-safe.
 */
#ifndef ZEPHON_FILEGROUP_H
#define ZEPHON_FILEGROUP_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Longest member name accepted (tar's pax headers allow more; nobody needs it). */
#define FILEGROUP_NAME_MAX 4096

/* Start a group at the end of b: reserves the count. *start receives its offset.
 * 0 or -ENOMEM. */
int filegroup_begin(struct buf *b, size_t *start);
/* Append one file to the group that starts at `start`. 0, -ENOMEM, -EOVERFLOW, or
 * -EINVAL (empty or too long a name, or the group already holds UINT32_MAX files). */
int filegroup_add(struct buf *b, size_t start, const char *name, size_t name_len,
		  const void *data, uint64_t size);
/* Start a file of `size` bytes whose data the caller then appends itself (exactly size
 * bytes). Same returns as filegroup_add. */
int filegroup_add_header(struct buf *b, size_t start, const char *name, size_t name_len,
			 uint64_t size);
/* Number of files in the group at start. */
uint32_t filegroup_count(const struct buf *b, size_t start);

struct filegroup_iter {
	const uint8_t *p;
	size_t len;
	size_t pos;
	uint32_t left;
};
struct filegroup_file {
	const char *name;        /* not NUL-terminated */
	size_t name_len;
	const uint8_t *data;
	uint64_t size;
};
/* Start walking payload p of len bytes. 0, or -EBADMSG (too short). */
int filegroup_iter_init(struct filegroup_iter *it, const uint8_t *p, size_t len);
/* 1 with *f filled, 0 after the last file (and the payload is used up exactly),
 * -EBADMSG when a field runs past the end, a name is empty or too long, or bytes are
 * left over. */
int filegroup_next(struct filegroup_iter *it, struct filegroup_file *f);

#endif
