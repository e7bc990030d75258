-- The served ledger's journal (`served/<generation>.journal`, beside this database): downloads
-- append their entries there, and folds move them into `served` in bulk. A fold inserts a
-- file's entries and records its generation here in one transaction, then deletes the file; a
-- file at or below this generation is already in `served` (its deletion was lost to a crash)
-- and is deleted unread, so no entry is folded twice.

-- class: bookkeeping
-- How far the served-ledger journal has been folded into `served`: one row.
CREATE TABLE served_journal (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    folded_through INTEGER NOT NULL CHECK (folded_through >= 0)
);
INSERT INTO served_journal (id, folded_through) VALUES (1, 0);
