/*
 * dstream.h: a pack input file read as its decoded bytes, checked to the very end: the
 * one decompression stream under the line reader (instream.h) and the tar reader
 * (source_tar.c).
 *
 * The compression is told by the file's first bytes (codec_sniff(), never the name):
 * gzip and zstd are decoded with the push decoders of codec.h, xz, bzip2, lzma and lz4
 * through a raw-format libarchive reader, anything else is passed through. Every check
 * the format has is made (codec.h lists them), and bytes after the last member, frame or
 * stream that do not start another one are refused. Every byte read from the file
 * (compressed bytes, before decoding) is hashed into the caller's XXH3-128 state, if any.
 * Not thread-safe; one reader per stream.
 */
#ifndef ZEPHON_DSTREAM_H
#define ZEPHON_DSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

#include "codec.h"

struct dstream;

/* Open path, hashing its bytes into hash (borrowed; may be NULL), and read its first
 * chunk to sniff the compression. 0 with *out set; or -errno with a one-line reason in
 * err: the -errno of open(), fstat() or read() (-EIO for read), -EISDIR ("is a
 * directory"), -ENOMEM, -ENOTSUP (this libarchive needs an external program for the
 * format), -EBADMSG (the first block of xz, bzip2, lzma or lz4 data is corrupt). */
int dstream_open(const char *path, XXH3_state_t *hash, struct dstream **out, char *err,
		 size_t errlen);
void dstream_close(struct dstream *d);

/* Decode up to cap bytes into dst: *n > 0 bytes, or *n == 0 once the stream has ended and
 * was checked to its end (and on every later call). 0, or -errno with a reason naming
 * the file and a byte offset in err: -EIO (read error), -EBADMSG (corrupt or truncated
 * data, trailing garbage), -ENOMEM. After an error only dstream_close() is valid. */
int dstream_read(struct dstream *d, uint8_t *dst, size_t cap, size_t *n, char *err,
		 size_t errlen);

/* The read size that suits the file: 256 KiB, less for a small file. */
size_t dstream_chunk(const struct dstream *d);
const char *dstream_path(const struct dstream *d);       /* as given to dstream_open() */
enum codec_kind dstream_kind(const struct dstream *d);
uint64_t dstream_bytes_read(const struct dstream *d);  /* file bytes consumed so far */
uint64_t dstream_file_size(const struct dstream *d);   /* 0 for non-regular files */

#endif
