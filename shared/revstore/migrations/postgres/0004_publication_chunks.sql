-- The chunks a put in flight reuses from earlier images (its manifest's digests, 32 bytes each),
-- recorded when it publishes: from then on a reclamation pass keeps them, so a put whose image
-- shares chunks with a revision the pass releases is not failed at its commit.
ALTER TABLE publications ADD COLUMN chunks BYTEA;
