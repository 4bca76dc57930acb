/*
 * instream.h: a pack input read as a byte stream and split into lines.
 *
 * Owns one file descriptor. zstd input is detected by the frame magic (RFC 8878, section
 * 3.1.1: 0xFD2FB528 little-endian, or a skippable frame 0x184D2A5?) in the first bytes,
 * not by the file name, and decoded with zstd's streaming API (unzstd.h), so frames
 * without a content size and several concatenated frames (what lm_dataformat / The Pile
 * write) work, each frame's content checksum is checked, bytes after the last frame that
 * are not a frame are refused, and a stream that ends inside a frame is reported as
 * truncated. gzip (RFC 1952,
 * Dolma's *.json.gz) is detected by its magic too and decoded with zlib (gunzip.h), which
 * checks every member's CRC32 and ISIZE and reads concatenated members as one stream;
 * xz, bzip2, lz4 and lzma are detected by magic (lzma by its header) and decoded through
 * libarchive's raw format (codec.h tells them all apart); bytes after their last stream
 * are refused too.
 * Every byte read from the file (compressed bytes for zstd and gzip) goes into the
 * caller's XXH3-128 state, if any.
 *
 * Lines end at '\n'; a trailing '\r' is dropped too; the last line may lack '\n'.
 * Not thread-safe; one reader per input.
 */
#ifndef ZEPHON_INSTREAM_H
#define ZEPHON_INSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

#include "buf.h"

struct instream;

/* Open path; file bytes are hashed into `hash` (borrowed, may be NULL). 0, or -errno of
 * open()/read() with a one-line reason in err; -EISDIR for a directory. *out is set
 * only on success. */
int instream_open(const char *path, XXH3_state_t *hash, struct instream **out, char *err,
		  size_t errlen);
void instream_close(struct instream *in);

/* Next line, without its terminator: *line points into the stream's buffer, valid until
 * the next call. Returns 1 (a line), 0 (end of input), or -errno with a reason naming the
 * file and position in err: -EIO (read error), -EBADMSG (corrupt or truncated
 * compressed data: a bad zstd frame or content checksum, bytes after the last zstd frame
 * that are not a frame, a gzip member whose CRC32 or ISIZE does not match, non-zero bytes
 * after the last gzip member, bad xz, bzip2, lzma or lz4 data or bytes after it), -EFBIG (a line
 * longer than max_line bytes), -ENOMEM. */
int instream_getline(struct instream *in, size_t max_line, const uint8_t **line,
		     size_t *len, char *err, size_t errlen);

uint64_t instream_lineno(const struct instream *in);      /* 1-based, of the last line */
uint64_t instream_bytes_read(const struct instream *in);  /* file bytes consumed so far */
uint64_t instream_file_size(const struct instream *in);   /* 0 for non-regular files */
int instream_is_zstd(const struct instream *in);

/* Format an XXH3-128 digest as 32 lowercase hex digits + NUL. */
void xxh128_hex(XXH128_hash_t h, char hex[33]);

#endif
