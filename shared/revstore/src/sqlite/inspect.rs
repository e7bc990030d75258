//! The embedded store's reads of what it keeps, for the integrity check and the read-back of a
//! restore: an image's manifest and pack layout, read from the rows, and its chunks read from
//! the pack files and checked against their addresses.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Inner, digest_col, packs, packs::ChunkLoc, token};
use crate::{
    error::{PutError, StorageError},
    integrity, manifest,
    types::{Digest, UserId},
};

impl Inner {
    /// The chunk digests of a stored image, in image order.
    pub(super) fn manifest(&self, digest: &Digest) -> Result<Vec<Digest>, StorageError> {
        self.stored_manifest(digest)?
            .ok_or_else(|| StorageError::Corrupt {
                object: format!("image {digest}"),
            })
    }

    /// The chunk digests of a stored image, or `None` when no such image is stored.
    pub(super) fn stored_manifest(
        &self,
        digest: &Digest,
    ) -> Result<Option<Vec<Digest>>, StorageError> {
        Ok(self
            .with_reader(|conn| resolved(conn, digest))?
            .map(|r| r.chunks))
    }

    /// Reads an image back and checks every chunk against its address.
    pub(super) fn verify_image(&self, digest: &Digest) -> Result<(), PutError> {
        let (manifest, locs, paths) = self.with_reader(|conn| -> Result<_, PutError> {
            let extents: Vec<u8> = conn
                .prepare_cached("SELECT extents FROM images WHERE digest = ?1")?
                .query_row([digest.as_bytes().as_slice()], |r| r.get(0))
                .optional()?
                .ok_or(PutError::NotFound)?;
            let corrupt = || StorageError::Corrupt {
                object: format!("image {digest}"),
            };
            let manifest = resolved(conn, digest)?.ok_or_else(corrupt)?.chunks;
            let extents = packs::decode_extents(&extents).ok_or_else(corrupt)?;
            let locs = packs::expand(&extents, self.chunk_size as u64);
            let paths = Inner::pack_paths(conn, extents.iter().map(|e| e.pack), &self.packs_dir)?;
            Ok((manifest, locs, paths))
        })?;
        if locs.len() != manifest.len() {
            return Err(StorageError::Corrupt {
                object: format!("image {digest}"),
            }
            .into());
        }
        let files = packs::open_packs(&paths).map_err(StorageError::from)?;
        packs::verify_chunks(&files, &locs, &manifest).map_err(|c| StorageError::Corrupt {
            object: format!("chunk {c}"),
        })?;
        Ok(())
    }
}

/// Where an image's chunks sit in the pack files, for the integrity check.
#[derive(Debug)]
pub(crate) struct PackLayout {
    locs: Vec<ChunkLoc>,
    /// The image's pack files that could be opened; a pack missing here is damage.
    files: HashMap<i64, std::fs::File>,
    /// Manifest positions whose chunk has no index row.
    unindexed: HashSet<usize>,
}

// The check runs on one blocking thread (see `check_integrity`), so each read is a plain call.
impl integrity::Inspect for Inner {
    type Layout = PackLayout;

    async fn dangling_pointers(&self) -> Result<Vec<UserId>, StorageError> {
        let users: Vec<String> = self.with_reader(|conn| {
            conn.prepare(
                "SELECT u.user_id FROM users u WHERE u.current_seq IS NOT NULL AND NOT EXISTS
                 (SELECT 1 FROM revisions r WHERE r.user_id = u.user_id AND r.seq = u.current_seq AND r.retained = 1)",
            )?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()
        })?;
        Ok(users.into_iter().map(token).collect::<Result<_, _>>()?)
    }

    async fn retained_images(&self) -> Result<Vec<Digest>, StorageError> {
        let digests: Vec<Vec<u8>> = self.with_reader(|conn| {
            conn.prepare("SELECT DISTINCT digest FROM revisions WHERE retained = 1")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()
        })?;
        Ok(digests
            .into_iter()
            .map(digest_col)
            .collect::<Result<_, _>>()?)
    }

    async fn unfinished_wipes(&self) -> Result<Vec<(String, u64)>, StorageError> {
        Ok(self.with_reader(|conn| {
            conn.prepare(
                "SELECT object, count(*) FROM pending_wipes GROUP BY object ORDER BY object",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?
            .collect::<Result<Vec<_>, _>>()
        })?)
    }

    async fn image(&self, digest: &Digest) -> Result<integrity::Record<PackLayout>, StorageError> {
        self.with_reader(|conn| {
            let row: Option<(i64, Vec<u8>)> = conn
                .prepare_cached("SELECT size, extents FROM images WHERE digest = ?1")?
                .query_row([digest.as_bytes().as_slice()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let Some((size, extents)) = row else {
                return Ok(integrity::Record::Missing);
            };
            let manifest = match resolved(conn, digest) {
                Ok(Some(resolved)) => Some(resolved.chunks),
                Ok(None) | Err(StorageError::Corrupt { .. }) => None,
                Err(e) => return Err(e),
            };
            let (Some(manifest), Some(extents)) = (manifest, packs::decode_extents(&extents))
            else {
                return Ok(integrity::Record::Malformed);
            };
            let locs = packs::expand(&extents, self.chunk_size as u64);
            if locs.len() != manifest.len() {
                return Ok(integrity::Record::Malformed);
            }
            let mut indexed =
                conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM chunks WHERE hash = ?1)")?;
            let mut unindexed = HashSet::new();
            for (i, c) in manifest.iter().enumerate() {
                if !indexed.query_row([c.as_bytes().as_slice()], |r| r.get::<_, bool>(0))? {
                    unindexed.insert(i);
                }
            }
            let mut named = conn.prepare_cached("SELECT name FROM packs WHERE id = ?1")?;
            let mut files = HashMap::new();
            for pack in extents.iter().map(|e| e.pack).collect::<HashSet<_>>() {
                let name: Option<String> = named.query_row([pack], |r| r.get(0)).optional()?;
                if let Some(file) = name.and_then(|n| std::fs::File::open(self.pack_path(&n)).ok())
                {
                    files.insert(pack, file);
                }
            }
            Ok(integrity::Record::Image(integrity::Image {
                size: size as u64,
                manifest,
                layout: PackLayout {
                    locs,
                    files,
                    unindexed,
                },
            }))
        })
    }

    async fn read(
        &self,
        image: &integrity::Image<PackLayout>,
        run: std::ops::Range<usize>,
    ) -> Result<Vec<integrity::Stored>, StorageError> {
        use std::os::unix::fs::FileExt as _;
        let layout = &image.layout;
        Ok(run
            .map(|i| {
                let loc = layout.locs[i];
                let file = layout
                    .files
                    .get(&loc.pack)
                    .filter(|_| !layout.unindexed.contains(&i));
                let mut buf = vec![0u8; loc.len as usize];
                match file.map(|f| f.read_exact_at(&mut buf, loc.offset)) {
                    Some(Ok(())) => integrity::Stored::Bytes(Bytes::from(buf)),
                    _ => integrity::Stored::Missing,
                }
            })
            .collect())
    }
}

/// The rows of `digest`'s manifest chain, the image's own first (`manifest.rs`).
fn chain(conn: &Connection, digest: &Digest) -> Result<Vec<(Digest, manifest::Row)>, StorageError> {
    let mut stmt = conn.prepare_cached(
        "WITH RECURSIVE chain (n, digest, base, manifest) AS (
             SELECT 0, digest, base, manifest FROM images WHERE digest = ?1
             UNION ALL
             SELECT c.n + 1, i.digest, i.base, i.manifest FROM images i JOIN chain c ON i.digest = c.base
             WHERE c.n <= ?2
         )
         SELECT digest, base, manifest FROM chain ORDER BY n",
    )?;
    let rows = stmt.query_map(
        params![digest.as_bytes().as_slice(), manifest::MAX_CHAIN as i64],
        |r| {
            Ok((
                r.get::<_, Vec<u8>>(0)?,
                r.get::<_, Option<Vec<u8>>>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ))
        },
    )?;
    let corrupt = || StorageError::Corrupt {
        object: format!("image {digest}"),
    };
    let mut out = Vec::new();
    for row in rows {
        let (d, base, body) = row?;
        let d = Digest::from_slice(&d).ok_or_else(corrupt)?;
        let base = match base {
            Some(b) => Some(Digest::from_slice(&b).ok_or_else(corrupt)?),
            None => None,
        };
        out.push((d, manifest::Row { base, body }));
    }
    Ok(out)
}

/// The resolved manifest of the stored image `digest`; `None` when no such image is stored, a
/// corruption error when its rows do not resolve.
pub(super) fn resolved(
    conn: &Connection,
    digest: &Digest,
) -> Result<Option<manifest::Resolved>, StorageError> {
    let chain = chain(conn, digest)?;
    if chain.is_empty() {
        return Ok(None);
    }
    manifest::resolve(&chain)
        .map(Some)
        .ok_or_else(|| StorageError::Corrupt {
            object: format!("image {digest}"),
        })
}
