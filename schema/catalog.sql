-- Zephon dataset catalog, format version 1.
-- COMPATIBILITY: changing a table or a meta key's meaning is a format break; bump
-- user_version and CATALOG_FORMAT_VERSION in core/dataset.h together.
--
-- meta keys (all TEXT):
--   format_version  '1'
--   kind            'records' | 'tokens'
--   content         'text' (JSONL / text lines) | 'files' (directory / tar) | 'tokens'
--   samples         N, sample ids are [0, N)
--   dtype, seq_len  tokens only: 'uint8'|'uint16'|'uint32'|'int32', window length L
--   compress        'zstd' | 'none';  level: zstd level used
--   raw_bytes, stored_bytes  totals over all samples
--   fingerprint     32 hex digits, XXH3-128 over kind, content, dtype, seq_len, N and
--                   every sample's length and bytes in id order (not over compression)
--   created, zephon_version, remainder_tokens (tokens cut off at the end of the input)
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
-- Inputs in the order given; their samples are consecutive ids.
CREATE TABLE sources (
    idx          INTEGER PRIMARY KEY,
    path         TEXT NOT NULL,
    format       TEXT NOT NULL,
    size         INTEGER NOT NULL,
    checksum     TEXT NOT NULL,     -- XXH3-128 hex of the input file's bytes
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
