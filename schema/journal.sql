-- Zephon cursor journal, schema version 1 (see core/journal/journal.h and docs/design.md §6).
--
-- This file is migration step 0 -> 1: journal_open() runs it on an empty database in one
-- transaction, after `PRAGMA application_id` (JOURNAL_APPLICATION_ID) and before switching
-- to WAL, then sets `PRAGMA user_version = 1`. Later versions add steps k -> k+1 in
-- core/journal/journal_schema.c (journal_migrations[]; core/journal/journal.h lists them: 2 adds
-- cursor.delivered_step/delivered_micro, 3 adds layout.weights and the meta key `split`);
-- the statements of this file are never edited once released.
-- COMPATIBILITY: changing the meaning of a table, a column or a meta key is a format
-- break: add a migration step and bump JOURNAL_SCHEMA_VERSION.
--
-- meta keys (all TEXT):
--   fingerprint   dataset fingerprint, 32 hex digits
--   seed          shuffle seed, decimal
--   shuffle       'global' | 'none'
--   samples       N of the dataset, decimal
--   split         (version 3) the validation split, "validation=1/100"; absent: none
--   created       unix seconds, decimal
--   zephon_version  the zephon that created the journal
--
-- Every history row (layout, mark, rewind) carries `seq`, one counter over the three
-- tables, giving the order of events in this journal; `time_us` (unix microseconds) orders
-- events across the journals of several nodes.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per mount (journal_start): its parallel configuration and where it started.
CREATE TABLE layout (
    id            INTEGER PRIMARY KEY,
    seq           INTEGER NOT NULL UNIQUE,
    world_size    INTEGER NOT NULL CHECK (world_size >= 1),
    global_batch  INTEGER NOT NULL CHECK (global_batch >= 1 AND global_batch % world_size = 0),
    micro_batch   INTEGER NOT NULL CHECK (micro_batch >= 1
                                          AND (global_batch / world_size) % micro_batch = 0),
    ranks         TEXT NOT NULL,      -- the served ranks, "0-3,8"
    start_step    INTEGER NOT NULL CHECK (start_step >= 0),    -- S0
    start_samples INTEGER NOT NULL CHECK (start_samples >= 0), -- G0, the gsn of step S0
    time_us       INTEGER NOT NULL,
    host          TEXT NOT NULL,
    rule          TEXT NOT NULL,      -- the resume option given: auto|fresh|samples:G|step:S
    applied       TEXT NOT NULL       -- what it resolved to, for people
);

-- Per served rank of a layout: the next claim, (step, micro). journal_start inserts
-- (S0, 0) for every served rank; each claim updates one row in its own transaction.
CREATE TABLE cursor (
    layout INTEGER NOT NULL REFERENCES layout(id),
    rank   INTEGER NOT NULL CHECK (rank >= 0),
    step   INTEGER NOT NULL CHECK (step >= 0),
    micro  INTEGER NOT NULL CHECK (micro >= 0),
    PRIMARY KEY (layout, rank)
) WITHOUT ROWID;

-- `checkpoint STEP`: the model state saved now holds every step below STEP.
CREATE TABLE mark (
    id      INTEGER PRIMARY KEY,
    seq     INTEGER NOT NULL UNIQUE,
    layout  INTEGER NOT NULL REFERENCES layout(id),
    step    INTEGER NOT NULL,
    gsn     INTEGER NOT NULL,     -- first gsn of STEP in that layout
    time_us INTEGER NOT NULL
);

-- `rewind STEP`: every served rank of the layout went back to (STEP, 0).
CREATE TABLE rewind (
    id      INTEGER PRIMARY KEY,
    seq     INTEGER NOT NULL UNIQUE,
    layout  INTEGER NOT NULL REFERENCES layout(id),
    step    INTEGER NOT NULL,
    gsn     INTEGER NOT NULL,
    time_us INTEGER NOT NULL
);

-- The cursors a rewind moved from.
CREATE TABLE rewind_cursor (
    rewind INTEGER NOT NULL REFERENCES rewind(id),
    rank   INTEGER NOT NULL,
    step   INTEGER NOT NULL,
    micro  INTEGER NOT NULL,
    PRIMARY KEY (rewind, rank)
) WITHOUT ROWID;
