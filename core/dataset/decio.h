/*
 * decio.h: the buffers of one call of a streaming decoder (unzstd.h, gunzip.h, codec.h),
 * as zstd's ZSTD_inBuffer and ZSTD_outBuffer pair them: the call reads src[src_pos,
 * src_len) and moves src_pos past what it consumed, writes dst[dst_pos, dst_cap) and
 * moves dst_pos past what it produced. The caller owns both buffers.
 */
#ifndef ZEPHON_DECIO_H
#define ZEPHON_DECIO_H

#include <stddef.h>
#include <stdint.h>

struct dec_io {
	const uint8_t *src;
	size_t src_len, src_pos;
	uint8_t *dst;
	size_t dst_cap, dst_pos;
};

#endif
