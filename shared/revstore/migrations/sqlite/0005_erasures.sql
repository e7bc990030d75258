-- An erased user's id is refused for good (issue 36): the erasure stamps the user's pointer row,
-- which stays as the tombstone, and every write, delta and first contact for that id is refused
-- from then on, so an upload in flight across the erasure cannot bring the bytes back under an
-- id no directory names.
-- No new table, so no class line: `users` stays a record.
ALTER TABLE users ADD COLUMN erased_at INTEGER;

-- class: bookkeeping
-- The byte ranges an erasure must still overwrite with zeros in pack files that also hold other
-- users' chunks: recorded in the transaction that commits the erasure, deleted as each range is
-- wiped. A wipe that failed is retried by the next erasure and by every reclamation pass, and an
-- erasure is reported incomplete, and the integrity check lists the ranges, until none is left.
CREATE TABLE pending_wipes (
    object TEXT NOT NULL,
    offset INTEGER NOT NULL CHECK (offset >= 0),
    len INTEGER NOT NULL CHECK (len > 0),
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (object, offset)
) WITHOUT ROWID;

-- One word, one meaning (issue 37): the put ledger is the table `put_ledger`, read by
-- `RevStore::put_ledger`; its class stays ledger.
ALTER TABLE put_verdicts RENAME TO put_ledger;
