/*
 * unzstd.h: a streaming zstd decoder (RFC 8878) that decodes to the end of the input and
 * checks every frame, for pack inputs (*.jsonl.zst, *.tar.zst).
 *
 * Why our own and not libarchive's zstd filter: libarchive's tar reader stops at the tar
 * end-of-archive blocks, so whatever follows them in the compressed stream (the rest of
 * the last frame with its content checksum, trailing bytes) was never decoded. Here the
 * caller decodes to the end of the file and calls unzstd_finish(). zstd itself checks each
 * frame's optional XXH64 content checksum (RFC 8878, section 3.1.1) and skips skippable
 * frames (section 3.1.2); this module adds what zstd leaves to its caller:
 *   - several frames back to back (`cat a.zst b.zst`, zstd -T, The Pile) decode as one
 *     stream;
 *   - bytes after a frame that are not another frame are refused as trailing garbage
 *     (zstd -t refuses them too, zero bytes included);
 *   - a stream that ends inside a frame is reported as truncated by unzstd_finish().
 *
 * The caller owns both buffers and feeds the file's bytes in order from byte 0, so the
 * byte offsets in messages are file offsets. Not thread-safe; one decoder per input.
 */
#ifndef ZEPHON_UNZSTD_H
#define ZEPHON_UNZSTD_H

#include "decio.h"

#include <stddef.h>
#include <stdint.h>

struct unzstd;

/* A new decoder, or NULL when out of memory. Free it with unzstd_free() (NULL is fine). */
struct unzstd *unzstd_new(void);
void unzstd_free(struct unzstd *z);

/* Decode compressed bytes src[*src_pos, src_len) into dst[*dst_pos, dst_cap), advancing
 * both positions, until either side is used up. 0, or -errno with a one-line reason
 * naming path and a file byte offset in err:
 *   -EBADMSG  corrupt data: a bad frame header or block, a content checksum that does not
 *             match the decoded bytes, a frame whose window exceeds zstd's default limit
 *             (128 MiB; zstd --long=31), or bytes after a frame that are not a frame;
 *   -ENOMEM   zstd could not allocate its window.
 * After an error z must only be freed. */
int unzstd_decode(struct unzstd *z, struct dec_io *io, const char *path, char *err,
		  size_t errlen);

/* Call at the end of the file: 0 when the input ended after a complete frame (its
 * checksum, if it has one, checked), -EBADMSG with a reason in err when it ended inside
 * a frame (truncated). */
int unzstd_finish(const struct unzstd *z, const char *path, char *err, size_t errlen);

#endif
