-- A put known not to land (refused at its commit, failed, its body broken off) marks its
-- publication record abandoned instead of deleting it, and what it staged is reclaimed at once
-- (`reclaim::discard`); should that fail, the next reclamation pass takes the record whatever
-- its age. Only a record left by a crash waits for the orphan period.
-- `reserved`: the bytes the put may stage (its declared size, or the quota), which count against
-- the user's limit on staged bytes until the record goes.
ALTER TABLE publications ADD COLUMN abandoned_at BIGINT;
ALTER TABLE publications ADD COLUMN reserved BIGINT NOT NULL DEFAULT 0 CHECK (reserved >= 0);
CREATE INDEX publications_by_user ON publications (user_id);

-- class: bookkeeping
-- The chunk rows a put in flight relies on as its bytes stream in (without an object store,
-- chunk rows are written then): each batch records its chunks here under the store's advisory
-- lock, shared, in the statement that inserts them, with whether this put created the row. A
-- reclamation pass (the lock, exclusive) therefore knows every chunk a streaming put needs, and a
-- put that failed has its own rows deleted at once unless another record or a newer image names
-- them. Rows go with their record.
CREATE TABLE streamed_chunks (
    publication_id BIGINT NOT NULL REFERENCES publications (id) ON DELETE CASCADE,
    hash BYTEA NOT NULL,
    created BOOLEAN NOT NULL,
    PRIMARY KEY (publication_id, hash)
);
CREATE INDEX streamed_chunks_by_hash ON streamed_chunks (hash);
