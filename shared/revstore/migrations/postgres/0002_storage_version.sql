-- Revision metadata for restore and bootstrap: the image's storage version (its SQLite
-- `user_version`, the big-endian u32 at byte 60 of the header), recorded from the first bytes of
-- the image as the store accepts it, so a client can tell before downloading whether it can open
-- a revision. NULL: not a SQLite image, or unknown. A restore copies its source's value.
-- No new table, so no class line: `revisions` stays a record table.
ALTER TABLE revisions ADD COLUMN storage_version BIGINT
    CHECK (storage_version BETWEEN 0 AND 4294967295);

-- Backfill from the stored bytes, in this same transaction: an image's first chunk is one indexed
-- row of at most one chunk (4 KiB by default), checked against its address before it is believed.
-- Only a first chunk that holds the whole 100-byte header counts (always true at the default
-- chunk size); otherwise, and for revisions whose bytes were already reclaimed, the value stays
-- NULL (unknown).
UPDATE revisions r
SET storage_version = (get_byte(h.header, 60)::BIGINT << 24)
                    | (get_byte(h.header, 61)::BIGINT << 16)
                    | (get_byte(h.header, 62)::BIGINT << 8)
                    | get_byte(h.header, 63)::BIGINT
FROM (
    SELECT i.digest, substring(c.data FROM 1 FOR 100) AS header
    FROM images i
    JOIN chunks c ON c.hash = substring(i.manifest FROM 1 FOR 32)
    WHERE sha256(c.data) = c.hash
) h
WHERE r.digest = h.digest
  AND length(h.header) = 100
  AND substring(h.header FROM 1 FOR 16) = '\x53514c69746520666f726d6174203300'::BYTEA;
