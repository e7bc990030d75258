-- The PostgreSQL store: everything, including image bytes, lives in the database, so any number
-- of stateless hub replicas can share it. Every table carries a `-- class:` line (record, ledger or
-- bookkeeping); a test asserts that every table in the schema has exactly one.

-- class: record
-- Store-wide settings fixed at creation, e.g. the chunk size.
CREATE TABLE store_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- class: record
-- The pointer table: one row per provisioned user, current_seq NULL until the first put.
CREATE TABLE users (
    user_id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    last_seq BIGINT NOT NULL DEFAULT 0,
    current_seq BIGINT
);

-- class: record
-- History: every accepted revision; rows stay (retained = false) after their bytes are reclaimed.
CREATE TABLE revisions (
    user_id TEXT NOT NULL REFERENCES users (user_id),
    seq BIGINT NOT NULL,
    revision TEXT NOT NULL,
    digest BYTEA NOT NULL,
    size BIGINT NOT NULL,
    accepted_at BIGINT NOT NULL,
    principal TEXT NOT NULL,
    base TEXT,
    restored_from TEXT,
    idempotency_key TEXT,
    retained BOOLEAN NOT NULL DEFAULT TRUE,
    reclaimed_at BIGINT,
    PRIMARY KEY (user_id, seq),
    UNIQUE (user_id, revision)
);
CREATE INDEX revisions_by_key ON revisions (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX revisions_by_digest ON revisions (digest) WHERE retained;
ALTER TABLE users ADD CONSTRAINT users_current FOREIGN KEY (user_id, current_seq) REFERENCES revisions (user_id, seq);

-- class: record
-- Content-addressed images: the chunk digests in order. Create-once.
CREATE TABLE images (
    digest BYTEA PRIMARY KEY,
    size BIGINT NOT NULL,
    manifest BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

-- class: record
-- Content-addressed chunks. Database pages are incompressible here (SQLite pages of user data),
-- so the bytes are stored out of line without compression.
CREATE TABLE chunks (
    hash BYTEA PRIMARY KEY,
    data BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
ALTER TABLE chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- class: bookkeeping
-- Durable publication records of puts in flight.
CREATE TABLE publications (
    id BIGSERIAL PRIMARY KEY,
    user_id TEXT NOT NULL,
    base TEXT,
    idempotency_key TEXT,
    started_at BIGINT NOT NULL,
    digest BYTEA
);

-- class: bookkeeping
-- Download leases shared by all replicas; an expired lease protects nothing.
CREATE TABLE leases (
    id BIGSERIAL PRIMARY KEY,
    digest BYTEA NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX leases_by_digest ON leases (digest);

-- class: ledger
-- What was served.
CREATE TABLE served (
    id BIGSERIAL PRIMARY KEY,
    user_id TEXT NOT NULL,
    revision TEXT NOT NULL,
    at BIGINT NOT NULL,
    principal TEXT NOT NULL
);
CREATE INDEX served_by_user ON served (user_id, id);

-- class: ledger
-- What was accepted or refused.
CREATE TABLE put_verdicts (
    id BIGSERIAL PRIMARY KEY,
    user_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reason TEXT,
    revision TEXT,
    at BIGINT NOT NULL,
    principal TEXT NOT NULL
);
CREATE INDEX put_verdicts_by_user ON put_verdicts (user_id, id);

-- class: ledger
-- Every deletion reclamation made.
CREATE TABLE reclamations (
    id BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    user_id TEXT
);
