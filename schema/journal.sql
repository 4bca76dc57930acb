-- Zephon cursor journal, version 1 (see core/journal.h).
PRAGMA user_version = 1;
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
