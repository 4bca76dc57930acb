#include "codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive_entry.h>

#include "gunzip.h"
#include "le.h"
#include "unzstd.h"

struct codec {                   /* exactly one of: */
	struct gunzip *gz;       /* CODEC_GZIP */
	struct unzstd *zs;       /* CODEC_ZSTD */
};

/* Is p[0, 14) the start of an lzma "alone" stream (xz --format=lzma, LZMA SDK)? Its header
 * has no magic: a properties byte (pb * 5 + lp) * 9 + lc, at most (4 * 5 + 4) * 9 + 8; a
 * dictionary size, little-endian; the uncompressed size, little-endian, all ones when
 * unknown. This takes what libarchive's lzma filter bids on (its lzma_bidder_bid() in
 * 3.6), no more, no less: the raw reader that decodes it must bid the same, and a plain
 * tar whose first member is named ']' must stay a tar. Its dictionary sizes: a power of
 * two from 4 KiB to 128 MiB (lzma -d12..-d27, xz -0..-9), or, for the usual properties
 * 0x5d/0x5e and an unknown size, a multiple of 1 MiB from 3 to 63 MiB (xz lowers the
 * dictionary by 1 MiB steps when memory is short). */
static int lzma_alone_like(const uint8_t *p)
{
	uint32_t dict = le32_get(p + 1);
	int usual = (p[0] == 0x5d || p[0] == 0x5e) &&
		!memcmp(p + 5, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);

	if (p[0] > (4 * 5 + 4) * 9 + 8)
		return 0;
	if (dict >= (1u << 12) && dict <= (1u << 27) && !(dict & (dict - 1)))
		return 1;
	return usual && dict >= (3u << 20) && dict <= (63u << 20) && !(dict & ((1u << 20) - 1));
}

enum codec_kind codec_sniff(const uint8_t *p, size_t n)
{
	uint32_t m;

	if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
		return CODEC_GZIP;
	if (n >= 4) {
		m = le32_get(p);
		if (m == 0xFD2FB528u || (m & 0xFFFFFFF0u) == 0x184D2A50u)
			return CODEC_ZSTD;
		/* lz4_Frame_format.md: a frame, or a legacy frame (lz4 -l) */
		if (m == 0x184D2204u || m == 0x184C2102u)
			return CODEC_LZ4;
	}
	if (n >= 6 && !memcmp(p, "\xfd" "7zXZ\0", 6))
		return CODEC_XZ;
	/* "BZh" and the block size, '1'..'9' (bzip2's own check, bzip2.c) */
	if (n >= 4 && !memcmp(p, "BZh", 3) && p[3] >= '1' && p[3] <= '9')
		return CODEC_BZIP2;
	if (n >= 14 && lzma_alone_like(p))
		return CODEC_LZMA;
	return CODEC_NONE;
}

const char *codec_name(enum codec_kind k)
{
	static const char *const names[] = {
		[CODEC_NONE] = "", [CODEC_GZIP] = "gzip", [CODEC_ZSTD] = "zstd",
		[CODEC_XZ] = "xz", [CODEC_BZIP2] = "bzip2", [CODEC_LZMA] = "lzma",
		[CODEC_LZ4] = "lz4",
	};

	return names[k];
}

struct codec *codec_new(enum codec_kind k)
{
	struct codec *c;

	if (k != CODEC_GZIP && k != CODEC_ZSTD)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (k == CODEC_GZIP ? !(c->gz = gunzip_new()) : !(c->zs = unzstd_new())) {
		free(c);
		return NULL;
	}
	return c;
}

void codec_free(struct codec *c)
{
	if (!c)
		return;
	gunzip_free(c->gz);
	unzstd_free(c->zs);
	free(c);
}

int codec_decode(struct codec *c, struct dec_io *io, const char *path, char *err,
		 size_t errlen)
{
	if (c->gz)
		return gunzip_decode(c->gz, io, path, err, errlen);
	return unzstd_decode(c->zs, io, path, err, errlen);
}

int codec_finish(const struct codec *c, const char *path, char *err, size_t errlen)
{
	if (c->gz)
		return gunzip_finish(c->gz, path, err, errlen);
	return unzstd_finish(c->zs, path, err, errlen);
}

int codec_archive_open(enum codec_kind k, void *ctx, archive_read_callback *read_cb,
		       const char *path, struct archive **out, char *err, size_t errlen)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	const char *why;
	int rc, code;

	if (!a)
		return -ENOMEM;
	/* Only the filter for the sniffed magic: filter_all would also run external
	 * programs, and a mislabelled input should fail here, not decode as something else.
	 * ARCHIVE_WARN: this libarchive was built without the library, and would run the
	 * program instead. */
	switch (k) {
	case CODEC_XZ: rc = archive_read_support_filter_xz(a); code = ARCHIVE_FILTER_XZ; break;
	case CODEC_BZIP2:
		rc = archive_read_support_filter_bzip2(a);
		code = ARCHIVE_FILTER_BZIP2;
		break;
	case CODEC_LZMA:
		rc = archive_read_support_filter_lzma(a);
		code = ARCHIVE_FILTER_LZMA;
		break;
	case CODEC_LZ4: rc = archive_read_support_filter_lz4(a); code = ARCHIVE_FILTER_LZ4; break;
	default: rc = ARCHIVE_FATAL; code = ARCHIVE_FILTER_NONE; break;
	}
	if (rc != ARCHIVE_OK) {
		snprintf(err, errlen, "%s: this build's libarchive cannot decode %s in-process; "
			 "decompress the file first", path, codec_name(k));
		archive_read_free(a);
		return -ENOTSUP;
	}
	archive_read_support_format_raw(a);
	if (archive_read_open(a, ctx, NULL, read_cb, NULL) != ARCHIVE_OK ||
	    archive_read_next_header(a, &e) != ARCHIVE_OK) {
		why = archive_error_string(a);
		snprintf(err, errlen, "%s: cannot read it as %s: %s", path, codec_name(k),
			 why ? why : "unknown error");
		archive_read_free(a);
		return -EBADMSG;
	}
	/* The raw format takes any bytes: when the filter's bidder declines (a damaged
	 * stream header after the magic), libarchive reads the file as it is. */
	if (archive_filter_count(a) < 2 || archive_filter_code(a, 0) != code) {
		snprintf(err, errlen, "%s: starts like %s but its stream header is damaged "
			 "(corrupt file); re-download or re-compress it", path, codec_name(k));
		archive_read_free(a);
		return -EBADMSG;
	}
	*out = a;
	return 0;
}

int codec_archive_end(struct archive *a, enum codec_kind k, uint64_t handed, int more,
		      const char *path, char *err, size_t errlen)
{
	/* -1: the client's end of the filter chain, whose position counts the bytes the
	 * decompressor consumed (not those libarchive merely read ahead). */
	int64_t used = archive_filter_bytes(a, -1);

	if (used < 0 || (uint64_t)used > handed)
		used = (int64_t)handed;  /* cannot happen; then name the end of what we gave */
	if ((uint64_t)used == handed && !more)
		return 0;
	/* lz4's filter has consumed up to 4 of the stray bytes (codec.h): not "at". */
	snprintf(err, errlen, "%s: trailing garbage after the %s data %s byte %jd (not another "
		 "%s stream); remove it, or re-download the file", path, codec_name(k),
		 k == CODEC_LZ4 ? "near" : "at", (intmax_t)used, codec_name(k));
	return -EBADMSG;
}
