#include "gunzip.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZLIB_CONST               /* next_in is const: src is the caller's */
#include <zlib.h>

/* windowBits for inflateInit2(): a 32 KiB window (15) and a gzip wrapper only (+16), so
 * zlib parses the RFC 1952 header and checks the CRC32 and ISIZE trailer itself. */
#define GUNZIP_WBITS (15 + 16)

struct gunzip {
	z_stream z;              /* zlib keeps a pointer to it: a gunzip never moves */
	uint64_t in_total;       /* compressed bytes consumed: the file offset of the next */
	uint64_t member_start;   /* file offset of the current (or last) member's header */
	uint64_t members;        /* members decoded and checked */
	int in_member;           /* inside a member: its trailer is not checked yet */
	int padding;             /* zero bytes seen after the last member */
};

struct gunzip *gunzip_new(void)
{
	struct gunzip *g = calloc(1, sizeof(*g));

	if (g && inflateInit2(&g->z, GUNZIP_WBITS) != Z_OK) {
		free(g);
		return NULL;
	}
	return g;
}

void gunzip_free(struct gunzip *g)
{
	if (!g)
		return;
	inflateEnd(&g->z);
	free(g);
}

/* The one place zlib's errors become ours. zlib says which check failed only in z.msg
 * (inflate.c's strings, unchanged since zlib 1.2), so the trailer checks are told apart
 * by it; anything else is reported with zlib's own words. */
static int data_error(const struct gunzip *g, const char *path, char *err, size_t errlen)
{
	const char *msg = g->z.msg ? g->z.msg : "unknown error";

	if (!strcmp(msg, "incorrect data check"))
		snprintf(err, errlen, "%s: gzip CRC mismatch in the member at byte %ju (corrupt or "
			 "truncated file); re-download or re-compress it", path,
			 (uintmax_t)g->member_start);
	else if (!strcmp(msg, "incorrect length check"))
		snprintf(err, errlen, "%s: gzip length (ISIZE) mismatch in the member at byte %ju "
			 "(corrupt or truncated file); re-download or re-compress it", path,
			 (uintmax_t)g->member_start);
	else if (g->members && !strcmp(msg, "incorrect header check"))
		snprintf(err, errlen, "%s: trailing garbage after the gzip data at byte %ju (not "
			 "another gzip member); remove it, or re-download the file", path,
			 (uintmax_t)g->member_start);
	else
		snprintf(err, errlen, "%s: corrupt gzip data near byte %ju (in the member at byte "
			 "%ju): %s", path, (uintmax_t)g->in_total, (uintmax_t)g->member_start, msg);
	return -EBADMSG;
}

/* Between members: skip zero padding; 1 if a new member starts at io's src_pos, 0 if
 * the input is used up, -EBADMSG for a non-zero byte after padding. */
static int next_member(struct gunzip *g, struct dec_io *io, const char *path, char *err,
		       size_t errlen)
{
	/* Padding only after a member: a file never starts with it (the caller sniffed the
	 * gzip magic), and it only ever ends a file. */
	while (g->members && io->src_pos < io->src_len && io->src[io->src_pos] == 0) {
		io->src_pos++;
		g->in_total++;
		g->padding = 1;
	}
	if (io->src_pos == io->src_len)
		return 0;
	if (g->padding) {
		snprintf(err, errlen, "%s: trailing garbage after the gzip data at byte %ju (a "
			 "non-zero byte after zero padding); remove it, or re-download the file",
			 path, (uintmax_t)g->in_total);
		return -EBADMSG;
	}
	/* Cannot fail: z was initialised by gunzip_new() and never moved. */
	if (g->members)
		inflateReset(&g->z);
	g->member_start = g->in_total;
	g->in_member = 1;
	return 1;
}

int gunzip_decode(struct gunzip *g, struct dec_io *io, const char *path, char *err,
		  size_t errlen)
{
	while (io->src_pos < io->src_len && io->dst_pos < io->dst_cap) {
		size_t in_avail, out_avail, used, made;
		int zr;

		if (!g->in_member) {
			zr = next_member(g, io, path, err, errlen);
			if (zr <= 0)
				return zr;
		}
		/* zlib counts in uInt; larger windows are simply fed in turns */
		in_avail = io->src_len - io->src_pos < UINT_MAX ? io->src_len - io->src_pos : UINT_MAX;
		out_avail = io->dst_cap - io->dst_pos < UINT_MAX ? io->dst_cap - io->dst_pos : UINT_MAX;
		g->z.next_in = io->src + io->src_pos;
		g->z.avail_in = (uInt)in_avail;
		g->z.next_out = io->dst + io->dst_pos;
		g->z.avail_out = (uInt)out_avail;
		zr = inflate(&g->z, Z_NO_FLUSH);
		used = in_avail - g->z.avail_in;
		made = out_avail - g->z.avail_out;
		io->src_pos += used;
		io->dst_pos += made;
		g->in_total += used;
		switch (zr) {
		case Z_STREAM_END:       /* the trailer matched: CRC32 and ISIZE checked */
			g->in_member = 0;
			g->members++;
			break;
		case Z_OK:
			break;
		case Z_BUF_ERROR:        /* no progress: not with room on both sides, but a
					  * caller looping on it would spin forever */
			if (!used && !made)
				return data_error(g, path, err, errlen);
			break;
		case Z_MEM_ERROR:
			snprintf(err, errlen, "%s: out of memory decoding gzip data", path);
			return -ENOMEM;
		default:                 /* Z_DATA_ERROR, Z_NEED_DICT (no dictionary in gzip) */
			return data_error(g, path, err, errlen);
		}
	}
	return 0;
}

int gunzip_finish(const struct gunzip *g, const char *path, char *err, size_t errlen)
{
	if (!g->in_member)
		return 0;
	/* After a good member, fewer bytes than the smallest gzip header (10, RFC 1952
	 * section 2.3) are as likely stray bytes as a member cut short: say both. */
	if (g->members && g->in_total - g->member_start < 10) {
		snprintf(err, errlen, "%s: trailing garbage or a truncated gzip member at byte %ju "
			 "(the file ends at byte %ju, too soon for a gzip header); remove it, or "
			 "re-download the file", path, (uintmax_t)g->member_start,
			 (uintmax_t)g->in_total);
		return -EBADMSG;
	}
	snprintf(err, errlen, "%s: truncated gzip data: the input ends at byte %ju inside the "
		 "gzip member that starts at byte %ju (corrupt or truncated file); re-download or "
		 "re-compress it", path, (uintmax_t)g->in_total, (uintmax_t)g->member_start);
	return -EBADMSG;
}
