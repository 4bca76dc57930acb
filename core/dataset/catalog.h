/*
 * catalog.h: a dataset's catalog.sqlite (schema/catalog.sql), held in memory.
 *
 * Owns the translation between the SQLite file and struct catalog: catalog_load() reads
 * every table into memory and closes the database at once (a mounted dataset keeps no
 * SQLite handle open); catalog_save() writes a new file in one transaction. SQLite
 * result codes become -errno here, through the table the journal uses too
 * (sqlite_errno.h).
 *
 * A struct catalog owns every string and blob it points to; catalog_release() frees
 * them. Not thread-safe while being built; read-only use from many threads is fine.
 */
#ifndef ZEPHON_CATALOG_H
#define ZEPHON_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#define CATALOG_FILE "catalog.sqlite"

struct catalog_meta {
	char *key;
	char *value;
};

/* One input of `zephon pack`, in the order given. For token inputs, first_sample is
 * the first window that starts inside this input and samples the windows that start
 * inside it (windows run across input boundaries). */
struct catalog_source {
	char *path;              /* as given on the command line */
	char *format;            /* "jsonl", "lines", "files", "tar", "bin", "npy", "megatron" */
	uint64_t size;           /* bytes read from the input (all files of a directory) */
	char checksum[33];       /* XXH3-128 of those bytes, 32 hex digits */
	uint64_t first_sample;
	uint64_t samples;
};

/* Shard k holds sample ids [first_sample, first_sample + samples). */
struct catalog_shard {
	char *file;              /* payload file, relative to the dataset directory */
	char *index_file;        /* offset index, relative to the dataset directory */
	uint64_t first_sample;
	uint64_t samples;
	uint64_t bytes;          /* size of the payload file */
};

struct catalog {
	int user_version;        /* PRAGMA user_version of the file */
	struct catalog_meta *meta;
	size_t nmeta;
	uint8_t *dict;           /* zstd dictionary, NULL when none */
	size_t dict_len;
	struct catalog_source *sources;
	size_t nsources;
	struct catalog_shard *shards;
	size_t nshards;
	size_t meta_cap, sources_cap, shards_cap;  /* allocated elements (ARRAY_GROW) */
};

#define CATALOG_INIT { 0 }

/* Read PATH into *out (which must be CATALOG_INIT or released). 0, or -ENOENT (no such
 * file), -EBADMSG (not a catalog: not SQLite, missing tables, bad values), -EBUSY
 * (another process holds it locked), -EACCES, -ENOMEM, -EIO; on failure a one-line
 * reason is written into err and *out is left empty. */
int catalog_load(const char *path, struct catalog *out, char *err, size_t errlen);

/* Create PATH (must not exist) with the embedded DDL and every row of c, in one
 * transaction, then fsync it. 0, or -EEXIST, -ENOENT (no such directory), -EACCES,
 * -EROFS (a read-only file system), -ENOSPC, -EINVAL (a value the schema refuses),
 * -ENOMEM, -EIO (reason in err). */
int catalog_save(const char *path, const struct catalog *c, char *err, size_t errlen);

/* Value of a meta key, NULL when absent. */
const char *catalog_meta_get(const struct catalog *c, const char *key);
/* Parse a meta key as an unsigned decimal. 0, or -ENOENT (absent), -EBADMSG (not a
 * number). */
int catalog_meta_u64(const struct catalog *c, const char *key, uint64_t *out);

/* Set (or replace) a meta key; both strings are copied. 0 or -ENOMEM. */
int catalog_meta_set(struct catalog *c, const char *key, const char *value);
int catalog_meta_set_u64(struct catalog *c, const char *key, uint64_t value);
/* Copy dict_len bytes as the dictionary (replacing any). 0 or -ENOMEM. */
int catalog_set_dict(struct catalog *c, const void *dict, size_t dict_len);
/* Append a copy of *s / *sh (strings copied). 0 or -ENOMEM. */
int catalog_add_source(struct catalog *c, const struct catalog_source *s);
int catalog_add_shard(struct catalog *c, const struct catalog_shard *sh);

void catalog_release(struct catalog *c);

#endif
