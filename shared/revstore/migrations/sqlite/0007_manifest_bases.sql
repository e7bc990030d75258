-- Issue 38 point 4: an image's manifest may be kept against the image that was current when it
-- was committed (`manifest.rs`): `base` names that image, and `manifest` then holds only the
-- chunks that differ from it. NULL: the manifest is whole, as every row written before this.
ALTER TABLE images ADD COLUMN base BLOB;
CREATE INDEX images_by_base ON images (base) WHERE base IS NOT NULL;
