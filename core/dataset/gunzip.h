/*
 * gunzip.h: a streaming gzip decoder (RFC 1952) over zlib that checks every member's
 * trailer, for pack inputs (*.jsonl.gz, *.tar.gz).
 *
 * Why not libarchive's gzip filter: it never compares a member's CRC32 and ISIZE
 * (RFC 1952, section 2.3.1) with the decoded data, so a corrupt file packed without an
 * error. zlib's inflate() in gzip mode (windowBits 15 + 16) checks both; this module adds
 * what zlib leaves to its caller:
 *   - several members back to back (RFC 1952, section 2.2: "a gzip file consists of a
 *     series of members"; what `cat a.gz b.gz`, pigz and bgzip make) decode as one stream;
 *   - zero bytes after the last member (tape or block padding) are ignored, as gzip(1)
 *     and Python's gzip module do; any other byte after a member is refused as trailing
 *     garbage, since it may be a damaged further member whose data would be lost;
 *   - a stream that ends inside a member is reported as truncated by gunzip_finish().
 *
 * The caller owns both buffers and feeds the file's bytes in order from byte 0, so the
 * byte offsets in messages are file offsets. Not thread-safe; one decoder per input.
 */
#ifndef ZEPHON_GUNZIP_H
#define ZEPHON_GUNZIP_H

#include "decio.h"

#include <stddef.h>
#include <stdint.h>

struct gunzip;

/* A new decoder, or NULL when out of memory. Free it with gunzip_free() (NULL is fine). */
struct gunzip *gunzip_new(void);
void gunzip_free(struct gunzip *g);

/* Decode compressed bytes src[*src_pos, src_len) into dst[*dst_pos, dst_cap), advancing
 * both positions, until either side is used up. 0, or -errno with a
 * one-line reason naming path and a file byte offset in err:
 *   -EBADMSG  corrupt data: a bad header, bad deflate data, a CRC32 or ISIZE that does
 *             not match the decoded bytes, or non-zero bytes after a member;
 *   -ENOMEM   zlib could not allocate its window.
 * After an error g must only be freed. */
int gunzip_decode(struct gunzip *g, struct dec_io *io, const char *path, char *err,
		  size_t errlen);

/* Call at the end of the file: 0 when the input ended after a checked member (or its zero
 * padding), -EBADMSG with a reason in err when it ended inside a member (truncated). */
int gunzip_finish(const struct gunzip *g, const char *path, char *err, size_t errlen);

#endif
