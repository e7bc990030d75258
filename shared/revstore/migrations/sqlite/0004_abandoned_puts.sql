-- A put known not to land (refused at its commit, failed, its body broken off) marks its
-- publication record abandoned instead of deleting it, and what it staged is reclaimed at once
-- (`reclaim::discard`); should that fail, the next reclamation pass takes the record whatever
-- its age. Only a record left by a crash waits for the orphan period.
-- `reserved`: the bytes the put may stage (its declared size, or the quota), which count against
-- the user's limit on staged bytes until the record goes.
-- No new table, so no class line: `publications` stays bookkeeping.
ALTER TABLE publications ADD COLUMN abandoned_at INTEGER;
ALTER TABLE publications ADD COLUMN reserved INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0);
CREATE INDEX publications_by_user ON publications (user_id);
