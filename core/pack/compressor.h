/*
 * compressor.h: one sample into one independent zstd frame (RFC 8878) with content size
 * and XXH64 content checksum on, optionally against a dictionary (the dataset's; its id
 * is left out of the frame: the reader always knows which dictionary to use).
 *
 * A struct compressor holds a ZSTD_CCtx: one per thread. Several compressors may share
 * one dictionary: compressor_new() digests it into its own ZSTD_CDict.
 * zstd error codes are translated here (-EIO); the shard reader translates the decoder's.
 */
#ifndef ZEPHON_COMPRESSOR_H
#define ZEPHON_COMPRESSOR_H

#include <stddef.h>

#include "buf.h"

struct compressor;

/* level: zstd level; dict may be NULL. 0, or -ENOMEM, -EINVAL (zstd refused the level
 * or the dictionary). */
int compressor_new(int level, const void *dict, size_t dict_len, struct compressor **out);
void compressor_free(struct compressor *c);

/* Append the frame of src[0..len) to out. 0, -ENOMEM, or -EIO (zstd failed). */
int compressor_frame(struct compressor *c, const void *src, size_t len, struct buf *out);

#endif
