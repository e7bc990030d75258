-- Image bytes in an S3-compatible object store: pack objects hold the chunks, and PostgreSQL keeps
-- their index. A store with its bytes in rows leaves these columns empty; `store_meta.chunks_in`
-- says which kind a store is (`postgres`, or `s3://BUCKET/PREFIX`), fixed at its first image.

-- class: record
-- Pack objects in the bucket, registered by the commit that first references them.
CREATE TABLE packs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

-- A chunk's bytes are in its row or at (pack_id, pack_offset, len), never both.
ALTER TABLE chunks ALTER COLUMN data DROP NOT NULL;
ALTER TABLE chunks ADD COLUMN pack_id BIGINT REFERENCES packs (id);
ALTER TABLE chunks ADD COLUMN pack_offset BIGINT;
ALTER TABLE chunks ADD COLUMN len INTEGER;
ALTER TABLE chunks ADD CONSTRAINT chunks_bytes_in_one_place CHECK ((data IS NULL) = (pack_id IS NOT NULL));
CREATE INDEX chunks_by_pack ON chunks (pack_id) WHERE pack_id IS NOT NULL;

-- An image's chunk locations coalesced into extents (24 bytes each: pack id, offset, length).
ALTER TABLE images ADD COLUMN extents BYTEA;

-- The pack objects a put in flight writes, named before each is written.
ALTER TABLE publications ADD COLUMN packs TEXT[] NOT NULL DEFAULT '{}';
