/*
 * source.h: the inputs of `zephon pack`, each format behind one small vtable
 * ({open, next, close}, as Redis' rio.h does for its streams).
 *
 *   jsonl     one sample per line, each validated as JSON with jansson (RFC 8259; strings
 *             must be valid UTF-8); blank lines are skipped. zstd detected by magic.
 *   lines     one sample per non-empty line (the bytes as they are, no validation).
 *   dir       one sample per regular file under a directory, sorted by relative path
 *             (bytewise); symlinks and special files are skipped with a notice, never
 *             followed. The sample is a file group of one file named by its relative path.
 *   tar       a tar archive read with libarchive (ustar, pax, GNU long names; xz, bzip2
 *             and zstd compression; gzip decoded with zlib, every member's trailer
 *             checked, see gunzip.h): WebDataset grouping, consecutive members
 *             sharing a key (path up to the first dot of the base name) form one file
 *             group; member paths that are absolute or contain ".." are refused.
 *   bin       a raw little-endian token stream of --dtype.
 *   npy       a 1-D .npy of an integer dtype (NEP 1, "A Simple File Format for NumPy
 *             Arrays"), versions 1.0-3.0.
 *   megatron  a Megatron-LM indexed dataset: PREFIX.idx ("MMIDIDX\0\0", version 1) and
 *             PREFIX.bin; the tokens of every sequence in index order.
 * Token sources return chunks of whole tokens; pack concatenates them over all inputs and
 * cuts windows of seq_len tokens.
 *
 * A file group payload is (little-endian) u32 nfiles, then per file u32 name_len, the
 * name, u64 size, the data: see dataset.h and filegroup.h.
 *
 * Errors: every function returns 0/1 or -errno and puts a one-line message into s->err
 * that names the input and the position (file:line, tar member, byte offset).
 * Not thread-safe; one struct source per input.
 */
#ifndef ZEPHON_SOURCE_H
#define ZEPHON_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <xxhash.h>

#include "buf.h"
#include "dataset.h"

enum source_format {
	SOURCE_AUTO = 0,         /* by name (and magic bytes); see source_detect() */
	SOURCE_JSONL,
	SOURCE_LINES,
	SOURCE_DIR,
	SOURCE_TAR,
	SOURCE_BIN,
	SOURCE_NPY,
	SOURCE_MEGATRON,
	SOURCE_TOKENS,           /* forced family: bin, npy or megatron by name */
	SOURCE_FILES,            /* forced family: dir or tar */
};

struct source_opts {
	int skip_bad;            /* skip a bad record (counted, noticed) instead of failing */
	int defer_checks;        /* jsonl: return lines unvalidated; the caller runs
	                          * jsonl_check_line() (on other threads) and names
	                          * path:record_line in its messages */
	int have_dtype;          /* dtype of raw .bin input given */
	enum token_dtype dtype;
	/* Token inputs: append eod_token after every document, as Megatron's
	 * preprocess_data.py --append-eod does. A Megatron input's documents are those of
	 * its .idx document index; a .bin or .npy input is one document. source_open()
	 * refuses (-EINVAL) an id that does not fit the input's dtype. */
	int have_eod_token;
	uint64_t eod_token;
	/* Called with one line for each skipped record or file; may be NULL. */
	void (*notice)(void *ctx, const char *msg);
	void *ctx;
};

struct source;

struct source_ops {
	const char *name;        /* catalog sources.format */
	/* Prepare s->path. Sets s->content, s->dtype (tokens), s->bytes_total. */
	int (*open)(struct source *s);
	/* Append the next sample (tokens: the next chunk of whole tokens, never empty) to
	 * out. 1 when one was appended, 0 at the end, -errno on error. */
	int (*next)(struct source *s, struct buf *out);
	void (*close)(struct source *s);
};

struct source {
	const struct source_ops *ops;
	char *path;
	const struct source_opts *opts;
	enum dataset_content content;
	enum token_dtype dtype;  /* tokens */
	uint64_t bytes_total;    /* input bytes, for progress; 0 when unknown */
	uint64_t bytes_read;     /* input bytes consumed so far */
	uint64_t skipped;        /* records skipped under skip_bad */
	uint64_t record_line;    /* line number of the last record (line-based sources) */
	XXH3_state_t *hash;      /* checksum of every input byte read (made by source_open) */
	char err[768];
	void *priv;
	uint8_t eod[4];          /* the end-of-document token as stored (little-endian) */
	unsigned eod_len;        /* its bytes; 0 without opts->have_eod_token */
};

extern const struct source_ops source_jsonl_ops;
extern const struct source_ops source_lines_ops;
extern const struct source_ops source_dir_ops;
extern const struct source_ops source_tar_ops;
extern const struct source_ops source_bin_ops;
extern const struct source_ops source_npy_ops;
extern const struct source_ops source_megatron_ops;

/* Read want bytes at offset of fd (path names it in the message) into the free space of
 * out (reserved by the caller), hash them into s->hash and append them: the chunk read
 * of the token sources. 0, or -EIO with s->err naming the file and byte (a read error,
 * or the file shrank while being packed). */
int source_read_chunk(struct source *s, int fd, const char *path, uint64_t offset,
		      size_t want, struct buf *out);

/* open/close of the line-based sources (lines, jsonl): s->priv is a struct instream of
 * s->path (source_lines.c). open returns 0 or -errno with s->err set. */
int source_text_open(struct source *s);
void source_text_close(struct source *s);

/* Drop a UTF-8 byte order mark (EF BB BF) from the start of line 1 of a text file: editors
 * on Windows write one, it is not text, and a JSON parser refuses it (RFC 8259 section
 * 8.1 lets a parser ignore it; we do, for lines too). */
static inline void source_text_skip_bom(uint64_t lineno, const uint8_t **line, size_t *len)
{
	if (lineno == 1 && *len >= 3 && (*line)[0] == 0xEF && (*line)[1] == 0xBB &&
	    (*line)[2] == 0xBF) {
		*line += 3;
		*len -= 3;
	}
}

/* The concrete format of path: a directory is dir; otherwise by name: .jsonl/.ndjson
 * (optionally .zst) jsonl, .txt (optionally .zst) lines, .tar/.tgz/.tar.{gz,xz,bz2,zst}
 * tar, .npy npy, .idx megatron, .bin megatron when PREFIX.idx exists beside it else bin,
 * and a PREFIX whose .idx and .bin exist megatron. `forced` (from --format) narrows or
 * overrides: LINES and JSONL apply to any file, TOKENS picks among bin/npy/megatron,
 * FILES among dir/tar. 0, or -EINVAL with a reason (what to pass) in why. */
int source_detect(const char *path, enum source_format forced, enum source_format *out,
		  char *why, size_t why_len);
const struct source_ops *source_ops_for(enum source_format f);
/* Parse a --format name (auto, jsonl, lines, files, dir, tar, tokens, bin, npy,
 * megatron). 0 or -EINVAL. */
int source_format_parse(const char *s, enum source_format *out);

/* What one named input is, so that pack can tell repeated inputs apart. Files compare by
 * device and inode, never by spelling: ./a.jsonl, a.jsonl, a symlink or a hard link to
 * it are one input. A Megatron pair is one input whichever of PREFIX, PREFIX.idx and
 * PREFIX.bin names it (a glob gives both files): its key is both files, and role says
 * which of the three names was given, so that pack can fold the others into it. */
enum source_role {
	SOURCE_ROLE_FILE = 1,    /* any input but a Megatron pair */
	SOURCE_ROLE_PREFIX = 2,  /* Megatron PREFIX */
	SOURCE_ROLE_IDX = 4,     /* Megatron PREFIX.idx */
	SOURCE_ROLE_BIN = 8,     /* Megatron PREFIX.bin */
};

struct source_id {
	dev_t dev, bin_dev;      /* the file or directory; a Megatron pair: .idx, then .bin */
	ino_t ino, bin_ino;      /* bin_* are 0 but for a Megatron pair */
	enum source_role role;
};

/* Identify path, read as format f (from source_detect(); symlinks are followed, as open
 * follows them). 0, or -errno of stat() (path or, for Megatron, one of the pair is
 * missing or unreadable; open then reports it, naming the file). */
int source_identify(const char *path, enum source_format f, struct source_id *out);
/* 1 when a and b are the same file, or the same Megatron pair whatever their roles. */
int source_id_same(const struct source_id *a, const struct source_id *b);
/* Length of the PREFIX of a Megatron path: path without a trailing .idx or .bin, in any
 * case (X.IDX too, as source_detect() takes it). */
size_t megatron_prefix_len(const char *path);
/* The two files of the Megatron pair that path names (PREFIX, PREFIX.idx or PREFIX.bin).
 * A name with its extension is used as it is, and its sibling is spelled in the same
 * case letter by letter (X.IDX: X.BIN, x.Idx: x.Bin), or else in lower, or else in upper
 * case, whichever exists first; a bare PREFIX takes .idx/.bin, else .IDX/.BIN, each the
 * first that exists. When none exists, the first spelling, for the error message.
 * 0 with *idx and *bin allocated (the caller frees them), or -ENOMEM. */
int megatron_pair_paths(const char *path, char **idx, char **bin);

/* Open path with ops; on failure s->err says why and s needs only source_close(). */
int source_open(struct source *s, const struct source_ops *ops, const char *path,
		const struct source_opts *o);
int source_next(struct source *s, struct buf *out);
/* The input's XXH3-128 checksum, valid after next() returned 0. */
void source_checksum(struct source *s, char hex[33]);
void source_close(struct source *s);

/* Append the end-of-document token to out when the source has one (a token source
 * calls it where a document ends). 1 appended, 0 none to append, -ENOMEM. */
int source_put_eod(struct source *s, struct buf *out);

/* Put a formatted message into s->err; returns rc (for `return source_error(...)`). */
int source_error(struct source *s, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Report a skipped record: counts it and passes "msg; skipped" to opts->notice. */
void source_notice(struct source *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parsers of untrusted bytes, exposed for the fuzz targets and unit tests. */

/* Validate one JSONL line (without its newline) as one JSON value (RFC 8259, UTF-8).
 * 0, or -EINVAL with "column C: reason" in why. */
int jsonl_check_line(const uint8_t *line, size_t len, char *why, size_t why_len);

struct megatron_idx {
	enum token_dtype dtype;
	unsigned itemsize;
	uint64_t sequences;
	uint64_t documents;
	const uint8_t *sizes;    /* sequences x int32 token counts, into the caller's bytes */
	const uint8_t *pointers; /* sequences x int64 byte offsets into .bin */
	const uint8_t *doc_index; /* documents x int64: the sequence where each document
	                          * starts, then the sequence count (untrusted: not checked
	                          * here) */
	uint64_t tokens;         /* sum of sizes */
};
/* Parse a Megatron-LM .idx (megatron/core/datasets/indexed_dataset.py, _INDEX_HEADER
 * "MMIDIDX\0\0", version 1, dtype code, sequence count, document count, then int32
 * sizes, int64 pointers, int64 document indices) of len bytes and check every sequence
 * against a .bin of bin_size bytes. Dtype codes 1 (uint8), 4 (int32) and 8 (uint16) are
 * taken; others refused. 0, or -EINVAL (unsupported dtype), -EBADMSG (bad magic or
 * version, truncated, a sequence outside .bin), reason in why. */
int megatron_idx_parse(const uint8_t *p, size_t len, uint64_t bin_size,
		       struct megatron_idx *out, char *why, size_t why_len);

/* Tar member path rules (WebDataset grouping): strip a leading "./", refuse absolute
 * paths and ".." components. On success *key_len is the length of the key (up to the
 * first '.' of the base name); 0 when the base name has no '.' (no extension).
 * 0 or -EINVAL with the reason in why. */
int tar_member_path(const char *path, const char **clean, size_t *key_len,
		    char *why, size_t why_len);

#endif
