-- The embedded store's metadata. Image bytes live in pack files beside this database.
-- Every table carries a `-- class:` line: record (the data of record, never rebuilt), ledger
-- (append-only audit, never rewritten) or bookkeeping (transient state of work in progress).
-- A test asserts that every table in the database has exactly one declared class.

-- class: record
-- Store-wide settings fixed at creation, e.g. the chunk size.
CREATE TABLE store_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- class: record
-- The pointer table: one row per provisioned user, current_seq NULL until the first put.
CREATE TABLE users (
    user_id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    current_seq INTEGER,
    FOREIGN KEY (user_id, current_seq) REFERENCES revisions (user_id, seq)
) WITHOUT ROWID;

-- class: record
-- History: every accepted revision. Rows stay after their bytes are reclaimed (retained = 0) so
-- a put based on a reclaimed revision is reported as stale, not unknown.
CREATE TABLE revisions (
    user_id TEXT NOT NULL REFERENCES users (user_id),
    seq INTEGER NOT NULL,
    revision TEXT NOT NULL,
    digest BLOB NOT NULL,
    size INTEGER NOT NULL,
    accepted_at INTEGER NOT NULL,
    principal TEXT NOT NULL,
    base TEXT,
    restored_from TEXT,
    idempotency_key TEXT,
    retained INTEGER NOT NULL DEFAULT 1,
    reclaimed_at INTEGER,
    PRIMARY KEY (user_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX revisions_by_token ON revisions (user_id, revision);
CREATE INDEX revisions_by_key ON revisions (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX revisions_by_digest ON revisions (digest) WHERE retained = 1;

-- class: record
-- Content-addressed images: the manifest (chunk digests in order) and where those chunks sit
-- (coalesced runs of pack, offset, length), so a download reads a few ranges and needs no
-- per-chunk lookups. Create-once: a second write of the same digest must bring the same manifest.
CREATE TABLE images (
    id INTEGER PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    manifest BLOB NOT NULL,
    extents BLOB NOT NULL,
    created_at INTEGER NOT NULL
);

-- class: record
-- Pack files: the new chunks of one put, written once, fsynced, linked into place create-once.
CREATE TABLE packs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

-- class: record
-- The chunk index: where each content-addressed chunk is stored. Locations never change.
CREATE TABLE chunks (
    hash BLOB PRIMARY KEY,
    pack_id INTEGER NOT NULL REFERENCES packs (id),
    offset INTEGER NOT NULL,
    len INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX chunks_by_pack ON chunks (pack_id);

-- class: bookkeeping
-- Durable publication records of puts in flight: written before any object is created, cleared
-- in the transaction that swaps the pointer, reclaimed as orphans after the grace period.
CREATE TABLE publications (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    base TEXT,
    idempotency_key TEXT,
    started_at INTEGER NOT NULL,
    digest BLOB,
    size INTEGER,
    pack TEXT
);

-- class: ledger
-- What was served: one row per download handed out.
CREATE TABLE served (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    revision TEXT NOT NULL,
    at INTEGER NOT NULL,
    principal TEXT NOT NULL
);
CREATE INDEX served_by_user ON served (user_id, id);

-- class: ledger
-- What was accepted or refused, with the refusal's reason. No foreign key to users: refusals
-- for users that do not exist are recorded too.
CREATE TABLE put_verdicts (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reason TEXT,
    revision TEXT,
    at INTEGER NOT NULL,
    principal TEXT NOT NULL
);
CREATE INDEX put_verdicts_by_user ON put_verdicts (user_id, id);

-- class: ledger
-- Every deletion reclamation made.
CREATE TABLE reclamations (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    user_id TEXT
);
