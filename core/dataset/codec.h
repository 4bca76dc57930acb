/*
 * codec.h: compressed pack inputs, told apart by their magic bytes (never by the file
 * name), and decoded to the very end of the stream so that every integrity check the
 * format has is made: gzip's CRC32 and ISIZE (gunzip.h), zstd's content checksums
 * (unzstd.h), xz's check field, index and footer, bzip2's block and stream CRCs and
 * lz4's block and content checksums (libarchive's filters through its raw format; the
 * lzma "alone" format has no check, but a stream cut short or damaged so that it no
 * longer decodes is found), and for all of them, bytes after the last member, frame or
 * stream that do not start another one are refused as trailing garbage.
 *
 * gzip and zstd are push decoders the caller feeds with file bytes; xz, bzip2, lzma and
 * lz4 are a libarchive reader that pulls file bytes through the caller's read callback. Used by
 * instream.c (compressed JSONL and text) and source_tar.c (compressed tar). Not
 * thread-safe; one codec per input.
 */
#ifndef ZEPHON_CODEC_H
#define ZEPHON_CODEC_H

#include "decio.h"

#include <stddef.h>
#include <stdint.h>

#include <archive.h>

enum codec_kind { CODEC_NONE, CODEC_GZIP, CODEC_ZSTD, CODEC_XZ, CODEC_BZIP2, CODEC_LZMA,
		  CODEC_LZ4 };

/* The compression of a file that starts with p[0, n) (n >= 14 to tell them all apart):
 * gzip (RFC 1952, section 2.3.1: 1f 8b), zstd (RFC 8878, section 3.1.1: a frame magic
 * 0xFD2FB528 or a skippable one 0x184D2A5?, little-endian; lz4's skippable frames share
 * it, so a file that starts with one is taken for zstd), xz ("\xfd7zXZ\0"), bzip2 ("BZh"
 * and a block size 1-9), lz4 (a frame magic 0x184D2204 or the legacy 0x184C2102,
 * little-endian) or lzma, which has no magic: its 13-byte header (properties, dictionary
 * size, uncompressed size) is taken as lzma exactly when libarchive's lzma filter would
 * take it, which codec_archive_open() needs; CODEC_NONE otherwise. Pure. */
enum codec_kind codec_sniff(const uint8_t *p, size_t n);

/* "gzip", "zstd", "xz", "bzip2", "lzma", "lz4"; "" for CODEC_NONE. */
const char *codec_name(enum codec_kind k);

struct codec;

/* A push decoder for kind CODEC_GZIP or CODEC_ZSTD; NULL when out of memory (or for any
 * other kind). Free it with codec_free() (NULL is fine). */
struct codec *codec_new(enum codec_kind k);
void codec_free(struct codec *c);

/* Decode src[*src_pos, src_len) into dst[*dst_pos, dst_cap), advancing both, until either
 * is used up; the caller feeds the file's bytes in order from byte 0. 0, or -EBADMSG
 * (corrupt data, trailing garbage) or -ENOMEM with a one-line reason naming path and a
 * byte offset in err: gunzip_decode() and unzstd_decode() list the cases. After an error
 * c must only be freed. */
int codec_decode(struct codec *c, struct dec_io *io, const char *path, char *err,
		 size_t errlen);

/* At the end of the file: 0 when the input ended after a complete, checked member or
 * frame; -EBADMSG with a reason in err when it is truncated. */
int codec_finish(const struct codec *c, const char *path, char *err, size_t errlen);

/* Open a libarchive reader that decodes kind CODEC_XZ, CODEC_BZIP2, CODEC_LZMA or
 * CODEC_LZ4 (raw format: one entry, the decoded bytes, read with archive_read_data()
 * until it returns 0; a negative return is corrupt or truncated data, or an error of
 * read_cb). read_cb gets ctx and the file's bytes from byte 0. 0 with *out set (free it with archive_read_free()), -ENOMEM,
 * -ENOTSUP when this libarchive can decode kind only with an external program, or
 * -EBADMSG with a reason naming path in err (not that format, or its first block is
 * corrupt); a read_cb error comes back as -EBADMSG too, with libarchive's copy of the
 * callback's message. */
int codec_archive_open(enum codec_kind k, void *ctx, archive_read_callback *read_cb,
		       const char *path, struct archive **out, char *err, size_t errlen);

/* Once archive_read_data() on a reader of codec_archive_open() has returned 0: were all
 * of the file's bytes part of the compressed data? libarchive's bzip2, lzma and lz4
 * filters end at the first bytes after a stream that do not start another stream, and
 * report that as the end of the data; the bytes they consumed from read_cb say where that
 * was. The lz4 filter consumes 4 bytes to look for a next frame's magic: its offset may
 * be 4 bytes late, and exactly 4 stray bytes after the last frame are not found (telling
 * them from none would take walking the frames ourselves). handed: the
 * bytes read_cb has handed over in all; more: 1 when the file has bytes after those
 * (the caller tries one more read to know). 0 when nothing follows the data, or
 * -EBADMSG with "trailing garbage after the <kind> data at byte N" naming path in err. */
int codec_archive_end(struct archive *a, enum codec_kind k, uint64_t handed, int more,
		      const char *path, char *err, size_t errlen);

#endif
