//! The PostgreSQL store's side of the integrity check: where an image's chunks are, and the
//! raw reads the check's one driver makes.

use super::*;

/// Where an image's chunks are, for the integrity check.
#[derive(Debug)]
pub(crate) enum PgLayout {
    /// In `chunks.data`.
    Rows,
    /// In pack objects: each chunk's location, and the packs' names by id (a pack without a
    /// registration row is missing from it).
    Packs {
        locs: Vec<pack::ChunkLoc>,
        names: std::collections::HashMap<i64, String>,
    },
}

impl integrity::Inspect for PgStore {
    type Layout = PgLayout;

    async fn dangling_pointers(&self) -> Result<Vec<UserId>, StorageError> {
        let client = self.client().await?;
        client
            .query(
                "SELECT u.user_id FROM users u WHERE u.current_seq IS NOT NULL AND NOT EXISTS
                 (SELECT 1 FROM revisions r WHERE r.user_id = u.user_id AND r.seq = u.current_seq AND r.retained)",
                &[],
            )
            .await?
            .iter()
            .map(|r| parse(r.get::<_, &str>(0)))
            .collect()
    }

    async fn retained_images(&self) -> Result<Vec<Digest>, StorageError> {
        let client = self.client().await?;
        client
            .query("SELECT DISTINCT digest FROM revisions WHERE retained", &[])
            .await?
            .iter()
            .map(|r| digest_of(r.get::<_, &[u8]>(0)))
            .collect()
    }

    async fn unfinished_wipes(&self) -> Result<Vec<(String, u64)>, StorageError> {
        let client = self.client().await?;
        Ok(client
            .query(
                "SELECT object, count(*) FROM pending_wipes GROUP BY object ORDER BY object",
                &[],
            )
            .await?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
            .collect())
    }

    async fn image(&self, digest: &Digest) -> Result<integrity::Record<PgLayout>, StorageError> {
        use integrity::Record;
        let client = self.client().await?;
        let Some(row) = client
            .query_opt(
                "SELECT size, extents FROM images WHERE digest = $1",
                &[&digest.as_bytes().as_slice()],
            )
            .await?
        else {
            return Ok(Record::Missing);
        };
        let size = row.get::<_, i64>(0) as u64;
        let manifest = match super::resolved(&**client, digest).await {
            Ok(Some(resolved)) => resolved.chunks,
            Ok(None) | Err(StorageError::Corrupt { .. }) => return Ok(Record::Malformed),
            Err(e) => return Err(e),
        };
        let layout = if self.inner.objects.is_none() {
            PgLayout::Rows
        } else {
            let Some(extents) = row
                .get::<_, Option<&[u8]>>(1)
                .and_then(pack::decode_extents)
            else {
                return Ok(Record::Malformed);
            };
            let locs = pack::expand(&extents, self.inner.chunk_size as u64);
            if locs.len() != manifest.len() {
                return Ok(Record::Malformed);
            }
            let ids: Vec<i64> = extents
                .iter()
                .map(|e| e.pack)
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            let names = client
                .query("SELECT id, name FROM packs WHERE id = ANY($1)", &[&ids])
                .await?
                .iter()
                .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
                .collect();
            PgLayout::Packs { locs, names }
        };
        Ok(Record::Image(integrity::Image {
            size,
            manifest,
            layout,
        }))
    }

    async fn read(
        &self,
        image: &integrity::Image<PgLayout>,
        run: std::ops::Range<usize>,
    ) -> Result<Vec<integrity::Stored>, StorageError> {
        use integrity::Stored;
        match &image.layout {
            PgLayout::Rows => {
                let wanted = &image.manifest[run];
                let keys: Vec<&[u8]> = wanted.iter().map(|d| d.as_bytes().as_slice()).collect();
                let client = self.client().await?;
                let found: std::collections::HashMap<Digest, Bytes> = client
                    .query(
                        "SELECT hash, data FROM chunks WHERE hash = ANY($1) AND data IS NOT NULL",
                        &[&keys],
                    )
                    .await?
                    .iter()
                    .map(|r| {
                        Ok((
                            digest_of(r.get::<_, &[u8]>(0))?,
                            Bytes::copy_from_slice(r.get::<_, &[u8]>(1)),
                        ))
                    })
                    .collect::<Result<_, StorageError>>()?;
                Ok(wanted
                    .iter()
                    .map(|d| found.get(d).cloned().map_or(Stored::Missing, Stored::Bytes))
                    .collect())
            }
            PgLayout::Packs { locs, names } => {
                let objects = self.objects()?;
                let locs = &locs[run];
                let mut out = Vec::with_capacity(locs.len());
                let mut i = 0;
                while i < locs.len() {
                    // One ranged read per run of chunks that are consecutive in one pack.
                    let first = locs[i];
                    let mut j = i + 1;
                    let mut end = first.offset + u64::from(first.len);
                    while j < locs.len() && locs[j].pack == first.pack && locs[j].offset == end {
                        end += u64::from(locs[j].len);
                        j += 1;
                    }
                    let read = match names.get(&first.pack) {
                        None => None,
                        Some(name) => match objects.read(name, first.offset..end).await {
                            Ok(bytes) => Some(bytes),
                            Err(StorageError::Corrupt { .. }) => None,
                            Err(e) => return Err(e),
                        },
                    };
                    let mut at = 0usize;
                    for loc in &locs[i..j] {
                        let len = loc.len as usize;
                        out.push(match &read {
                            Some(bytes) => Stored::Bytes(bytes.slice(at..at + len)),
                            None => Stored::Missing,
                        });
                        at += len;
                    }
                    i = j;
                }
                Ok(out)
            }
        }
    }
}
