-- Revision metadata for restore and bootstrap: the image's storage version (its SQLite
-- `user_version`, the big-endian u32 at byte 60 of the header), recorded from the first bytes of
-- the image as the store accepts it, so a client can tell before downloading whether it can open
-- a revision. NULL: not a SQLite image, or unknown. A restore copies its source's value.
-- The store fills the column for the revisions already accepted when it applies this migration,
-- from the first chunk of each retained image (the pack files are local: one read and one hash of
-- a chunk per image); a revision whose bytes were already reclaimed stays NULL.
-- No new table, so no class line: `revisions` stays a record table.
ALTER TABLE revisions ADD COLUMN storage_version INTEGER
    CHECK (storage_version BETWEEN 0 AND 4294967295);
