/*
 * encode.h: batch encodings (docs/mounting.md, `format=`).
 *
 *   lines  each sample followed by '\n' (text content)
 *   tar    a POSIX (pax) tar stream, written with libarchive: for files content one member
 *          per file of each sample, names "<key>.<ext>" as packed; for text content one
 *          member "<id, 9 digits>.<record_ext>" per sample (record_ext from the catalog,
 *          "json" for JSONL, "txt" for lines). WebDataset and Python's tarfile read it.
 *   npy    a .npy v1.0 file (NumPy NEP 1, "A Simple File Format for NumPy Arrays") of
 *          shape (count, L) and the packed dtype, little-endian, C order (tokens content)
 *   bin    the bare little-endian array, count * L * itemsize bytes (tokens content)
 *
 * Pure given the dataset; thread-safe with one sample_reader per thread.
 */
#ifndef ZEPHON_ENCODE_H
#define ZEPHON_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include <sys/uio.h>

#include "buf.h"
#include "dataset.h"

enum encode_format { FORMAT_LINES, FORMAT_TAR, FORMAT_NPY, FORMAT_BIN };

/* 0 or -EINVAL. */
int encode_format_parse(const char *s, enum encode_format *out);
const char *encode_format_name(enum encode_format f);
/* lines for text, tar for files, npy for tokens. */
enum encode_format encode_format_default(const struct dataset_info *info);
/* Is format f defined for this dataset? 0, or -EINVAL with a one-line reason in why. */
int encode_format_check(const struct dataset_info *info, enum encode_format f,
		       char *why, size_t why_len);

/* What to encode: samples ids[0..count) of the dataset of info, read with r, in format. */
struct encode_in {
	struct sample_reader *r;
	const struct dataset_info *info;
	enum encode_format format;
	const uint64_t *ids;
	size_t count;
};

/* Append the encoding of in's samples to out. 0, or -EIO (a sample failed its checksum
 * or is corrupt: *bad_id names it, out is left as it was), -ENOMEM, -EINVAL (format not
 * defined for the dataset), -EOVERFLOW (the batch size does not fit in size_t), -ERANGE
 * (an id >= N). On any error out is left as it was. */
int encode_batch(const struct encode_in *in, struct buf *out, uint64_t *bad_id);

/* The length encode_batch() would give samples ids[0..count), from the index alone
 * (nothing is decoded or checksummed): for npy and bin arithmetic (r and ids are not
 * used and may be NULL), for lines the samples' lengths plus one newline each (a sum:
 * the length of a long list is that of its parts added). 0, or -ENOTSUP (tar: its headers need each sample's
 * members; build it), -EINVAL (format not defined for the dataset), -EOVERFLOW, -ERANGE,
 * -EIO (a bad index entry: building the batch would fail too). */
int encode_batch_len(struct sample_reader *r, const struct dataset_info *info,
		      enum encode_format f, const uint64_t *ids, size_t count, uint64_t *len);

/* Views: a batch of an uncompressed token dataset in npy or bin, with samples of at
 * least BATCH_VIEW_MIN bytes, can be served without copying its samples: a header (the
 * npy preamble; nothing for bin) followed by each sample's bytes in the dataset's shard
 * mapping. (The floor keeps a 1 MiB read within the kernel's 1,024 iovecs.) */
#define BATCH_VIEW_MIN 4096

/* Can batches of format f of this dataset be served as views? 1 or 0. */
int encode_views_possible(const struct dataset_info *info, enum encode_format f);

/* 1 when every batch of `count` samples has one length in format f, whatever its samples
 * (npy and bin), else 0 (lines, tar). */
int encode_format_fixed(enum encode_format f);

/* The views encoding of in's samples: the header appended to head, then views[i] =
 * sample ids[i] (count entries, checksums verified). 0, or -ENOTSUP (not possible here:
 * encode with encode_batch), -EIO (*bad_id names the sample; head is left as it was),
 * -EOVERFLOW, -ENOMEM. */
int encode_batch_views(const struct encode_in *in, struct buf *head, struct iovec *views,
		       uint64_t *bad_id);

#endif
