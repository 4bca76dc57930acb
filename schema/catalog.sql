-- Zephon dataset catalog, format version 1.
-- COMPATIBILITY: changing a table or a meta key's meaning is a format break; bump
-- user_version and CATALOG_FORMAT_VERSION in core/dataset/dataset.h together.
--
-- meta keys (all TEXT):
--   format_version  '1'
--   kind            'records' | 'tokens'
--   content         'text' (JSONL / text lines) | 'files' (directory / tar) | 'tokens'
--   samples         N, sample ids are [0, N)
--   record_ext      text only: 'json' (all inputs JSONL) | 'txt'; tar member extension
--   dtype, seq_len  tokens only: 'uint8'|'uint16'|'uint32'|'int32', window length L
--   remainder_tokens  tokens only: tokens after the last whole window, dropped
--   compress        'zstd' | 'none';  level: zstd level used;  dict_bytes: 0 when none
--   raw_bytes, stored_bytes  totals over all samples (stored = all shard files)
--   skipped         records or files skipped at pack time (--skip-bad, symlinks, ...)
--   fingerprint     32 hex digits: XXH3-128 over every sample as (u64 little-endian
--                   length, bytes) in id order, then the text
--                   "zephon-dataset-v1\nkind=K\ncontent=C\nrecord_ext=E\ndtype=D\n
--                   seq_len=L\nsamples=N\n" (core/pack/pack.h, dataset_fingerprint_text);
--                   not over compression, dictionary or shard size
--   created, zephon_version
PRAGMA user_version = 1;
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- The zstd dictionary trained at pack time; absent with --no-dict or --compress none.
CREATE TABLE dict (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    bytes BLOB NOT NULL
);
-- Inputs in the order given; their samples are consecutive ids. For tokens, windows
-- run across inputs: first_sample/samples count the windows that start in the input.
CREATE TABLE sources (
    idx          INTEGER PRIMARY KEY,
    path         TEXT NOT NULL,
    format       TEXT NOT NULL,
    size         INTEGER NOT NULL,
    checksum     TEXT NOT NULL,     -- XXH3-128 hex of the bytes read from the input: the
                                    -- file (compressed bytes for zstd); a directory: each
                                    -- file's path, NUL, u64 size, bytes in packed order;
                                    -- Megatron: the .idx, then each sequence's tokens
    first_sample INTEGER NOT NULL,
    samples      INTEGER NOT NULL
);
-- Shard k holds ids [first_sample, first_sample + samples); files relative to the dataset.
CREATE TABLE shards (
    idx          INTEGER PRIMARY KEY,
    file         TEXT NOT NULL,
    index_file   TEXT NOT NULL,
    first_sample INTEGER NOT NULL,
    samples      INTEGER NOT NULL,
    bytes        INTEGER NOT NULL   -- size of the shard file
);
