//! The PostgreSQL store with its chunk bytes in an object store (feature `objects`): pack objects
//! in the bucket, their index (`packs`, `chunks.pack_id/pack_offset/len`, `images.extents`) in
//! PostgreSQL.
//!
//! A put's new chunks fill packs of up to [`PACK_BYTES`]; each full pack is named in the put's
//! publication record (`publications.packs`) before it is written, then written create-once, read
//! back and verified (`Objects::create_pack`) while the next one fills, with at most
//! [`UPLOADS_IN_FLIGHT`] uploads at a time. Deduplicated chunks are looked up in the index as they
//! stream in; the packs holding them are checked present (and of their recorded size) before the
//! commit, and the commit re-checks every such chunk's row under the shared advisory lock, so a
//! reclamation pass in between makes the put fail (`STORAGE_UNAVAILABLE`, retry) rather than land
//! an image whose bytes are gone. The commit registers the new packs and chunks and the image's
//! coalesced extents, so a download reads a few ranges and checks every chunk before handing it
//! on.
//!
//! Reclamation ([`crate::reclaim`], `super::reclaim`) journals every pack it deletes before it
//! deletes it, in the transaction that drops the pack's row; a pack object that no row and no
//! publication record names (a put that crashed after writing it, or a deletion that failed after
//! its journal entry) is deleted once it is older than the orphan period, and an object under
//! `packs/` it cannot identify stops the pass.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use bytes::{Bytes, BytesMut};
use deadpool_postgres::Pool;
use futures::{StreamExt as _, stream};
use tokio::task::JoinHandle;
use tokio_postgres::GenericClient;

use super::{PgStore, digest_of};
use crate::{
    chunk::{self, Batch, ChunkSink},
    error::{PutError, ReclaimError, StorageError},
    objects::{Bucket as Objects, PACK_BYTES},
    pack::{self, ChunkLoc, Extent},
    protocol::Image,
    store::ImageBody,
    types::{Digest, Timestamp},
};

/// Pack uploads of one put in flight at once: enough to keep the stream and the object store
/// both busy, few enough to bound a put's memory to a few packs.
pub(crate) const UPLOADS_IN_FLIGHT: usize = 2;

/// The largest range one download request reads.
const READ_RANGE: u64 = 4 << 20;

/// Range requests of one download in flight at once.
const READS_IN_FLIGHT: usize = 4;

/// A pack this put wrote: its name, length and chunks (digest, offset, length).
#[derive(Debug)]
pub(crate) struct NewPack {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) chunks: Vec<(Digest, u64, u32)>,
}

/// Pseudo pack id of the `n`th pack this put writes (the index uses positive ids).
fn new_pack_id(n: usize) -> i64 {
    -(n as i64) - 1
}

fn new_pack_index(id: i64) -> Option<usize> {
    (id < 0).then(|| (-id - 1) as usize)
}

/// A put's chunks as they stream in: deduplicated against the index, new ones packed and uploaded.
pub(crate) struct PackSink {
    pool: Pool,
    objects: Objects,
    publication: i64,
    /// The store's advisory lock (see `PgPass`).
    lock_key: i64,
    manifest: Vec<Digest>,
    locs: Vec<ChunkLoc>,
    known: HashMap<Digest, ChunkLoc>,
    /// Stored chunks found damaged, with where the index has them: this put writes them afresh.
    rewritten: HashMap<Digest, ChunkLoc>,
    filling: BytesMut,
    filling_chunks: Vec<(Digest, u64, u32)>,
    packs: Vec<NewPack>,
    uploads: Vec<JoinHandle<Result<(), PutError>>>,
}

impl PackSink {
    pub(crate) fn new(pool: Pool, objects: Objects, publication: i64, lock_key: i64) -> Self {
        Self {
            pool,
            objects,
            publication,
            lock_key,
            manifest: Vec::new(),
            locs: Vec::new(),
            known: HashMap::new(),
            rewritten: HashMap::new(),
            filling: BytesMut::new(),
            filling_chunks: Vec::new(),
            packs: Vec::new(),
            uploads: Vec::new(),
        }
    }

    /// Names the filling pack in the publication record, then starts its upload.
    async fn seal(&mut self) -> Result<(), PutError> {
        if self.filling_chunks.is_empty() {
            return Ok(());
        }
        let chunks = std::mem::take(&mut self.filling_chunks);
        let bytes = self.filling.split().freeze();
        let name = pack::pack_name(&chunks);
        // Under the advisory lock (shared): a reclamation pass about to delete a pack of this
        // name (the same chunks) finishes first, so this put writes it again rather than reusing
        // an object that is about to go.
        let mut client = self.pool.get().await.map_err(StorageError::from)?;
        let tx = client.transaction().await.map_err(StorageError::from)?;
        super::lock_shared(&*tx, self.lock_key)
            .await
            .map_err(StorageError::from)?;
        let recorded = tx
            .execute(
                "UPDATE publications SET packs = array_append(packs, $1) WHERE id = $2",
                &[&name, &self.publication],
            )
            .await
            .map_err(StorageError::from)?;
        if recorded == 0 {
            // Taken while the bytes streamed in: no object is written for a record that is gone.
            return Err(StorageError::unavailable(crate::protocol::RECORD_GONE).into());
        }
        tx.commit().await.map_err(StorageError::from)?;
        drop(client);
        while self.uploads.len() >= UPLOADS_IN_FLIGHT {
            let oldest = self.uploads.remove(0);
            oldest.await.map_err(StorageError::from)??;
        }
        let objects = self.objects.clone();
        let (upload_name, upload_chunks) = (name.clone(), chunks.clone());
        self.uploads.push(tokio::spawn(async move {
            objects
                .create_pack(&upload_name, bytes, &upload_chunks)
                .await
        }));
        self.packs.push(NewPack {
            name,
            size: chunks.last().map_or(0, |(_, o, l)| o + u64::from(*l)),
            chunks,
        });
        Ok(())
    }

    /// Seals the last pack and waits for every upload; the put's objects are then durable and
    /// verified.
    pub(crate) async fn finish(mut self) -> Result<Staged, PutError> {
        self.seal().await?;
        for upload in std::mem::take(&mut self.uploads) {
            upload.await.map_err(StorageError::from)??;
        }
        Ok(Staged {
            manifest: std::mem::take(&mut self.manifest),
            locs: std::mem::take(&mut self.locs),
            packs: std::mem::take(&mut self.packs),
            rewritten: std::mem::take(&mut self.rewritten),
        })
    }
}

impl Drop for PackSink {
    fn drop(&mut self) {
        // A put that stops halfway stops its uploads too; what they wrote is an orphan the
        // listing pass reclaims.
        for upload in &self.uploads {
            upload.abort();
        }
    }
}

impl ChunkSink for PackSink {
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        let digests = batch.addresses();
        let chunks = batch.chunks;
        let unknown: Vec<&[u8]> = digests
            .iter()
            .filter(|d| !self.known.contains_key(*d))
            .map(|d| d.as_bytes().as_slice())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if !unknown.is_empty() {
            let client = self.pool.get().await.map_err(StorageError::from)?;
            let rows = client
                .query(
                    "SELECT c.hash, c.pack_id, c.pack_offset, c.len, p.name
                     FROM chunks c JOIN packs p ON p.id = c.pack_id WHERE c.hash = ANY($1)",
                    &[&unknown],
                )
                .await
                .map_err(StorageError::from)?;
            drop(client);
            let mut found: Vec<(ChunkLoc, Digest)> = Vec::with_capacity(rows.len());
            let mut names: HashMap<i64, Arc<str>> = HashMap::new();
            for r in &rows {
                let loc = ChunkLoc {
                    pack: r.get(1),
                    offset: r.get::<_, i64>(2) as u64,
                    len: r.get::<_, i32>(3) as u32,
                };
                names
                    .entry(loc.pack)
                    .or_insert_with(|| Arc::from(r.get::<_, &str>(4)));
                found.push((loc, digest_of(r.get(0))?));
            }
            // A stored chunk is reused only once read and checked against its address: a
            // damaged one is written afresh from this put's bytes below (issue 36 point 8).
            let damaged = damaged_among(&self.objects, &mut found, &names).await?;
            for (loc, digest) in found {
                if damaged.contains(&digest) {
                    self.rewritten.insert(digest, loc);
                } else {
                    self.known.insert(digest, loc);
                }
            }
        }
        for (bytes, digest) in chunks.iter().zip(digests) {
            let loc = match self.known.get(&digest) {
                Some(loc) => *loc,
                None => {
                    let offset = self.filling.len() as u64;
                    let len = bytes.len() as u32;
                    self.filling.extend_from_slice(bytes);
                    self.filling_chunks.push((digest, offset, len));
                    let loc = ChunkLoc {
                        pack: new_pack_id(self.packs.len()),
                        offset,
                        len,
                    };
                    self.known.insert(digest, loc);
                    loc
                }
            };
            self.manifest.push(digest);
            self.locs.push(loc);
            if self.filling.len() >= PACK_BYTES {
                self.seal().await?;
            }
        }
        Ok(())
    }
}

/// A put's objects once written and verified.
#[derive(Debug)]
pub(crate) struct Staged {
    pub(crate) manifest: Vec<Digest>,
    /// Per chunk: in an indexed pack (`pack > 0`) or in the `n`th new pack ([`new_pack_id`]).
    pub(crate) locs: Vec<ChunkLoc>,
    pub(crate) packs: Vec<NewPack>,
    /// Stored chunks found damaged and written afresh in `packs`, with where the index had them.
    pub(crate) rewritten: HashMap<Digest, ChunkLoc>,
}

impl Staged {
    /// The distinct stored chunks this put reuses, with where the stream found them.
    pub(crate) fn reused(&self) -> HashMap<&Digest, &ChunkLoc> {
        self.manifest
            .iter()
            .zip(&self.locs)
            .filter(|(_, l)| l.pack > 0)
            .collect()
    }
}

/// Checks, in `tx`, that every chunk a staged put reuses is still indexed where the stream found
/// it; a reclamation pass that took one makes the put fail (`STORAGE_UNAVAILABLE`, retry).
pub(crate) async fn check_reused_chunks<C: GenericClient + Sync>(
    tx: &C,
    staged: &Staged,
) -> Result<(), PutError> {
    let reused: Vec<(&Digest, &ChunkLoc)> = staged.reused().into_iter().collect();
    if reused.is_empty() {
        return Ok(());
    }
    let hashes: Vec<&[u8]> = reused
        .iter()
        .map(|(d, _)| d.as_bytes().as_slice())
        .collect();
    let packs: Vec<i64> = reused.iter().map(|(_, l)| l.pack).collect();
    let offsets: Vec<i64> = reused.iter().map(|(_, l)| l.offset as i64).collect();
    let present: i64 = tx
        .query_one(
            "SELECT count(*) FROM chunks c JOIN unnest($1::bytea[], $2::bigint[], $3::bigint[]) AS t(h, p, o)
             ON c.hash = t.h AND c.pack_id = t.p AND c.pack_offset = t.o",
            &[&hashes, &packs, &offsets],
        )
        .await?
        .get(0);
    if present as usize != reused.len() {
        return Err(
            StorageError::unavailable("a chunk was reclaimed during the put; retry").into(),
        );
    }
    Ok(())
}

impl PgStore {
    pub(crate) fn objects(&self) -> Result<&Objects, StorageError> {
        self.inner
            .objects
            .as_ref()
            .ok_or_else(|| StorageError::unavailable("this store keeps no object store"))
    }

    /// The packs holding the chunks a staged put reuses are still there at their recorded sizes.
    /// Every reused chunk was read and checked against its address as the put streamed in
    /// ([`PackSink`]; a damaged one was written afresh instead), and the packs the put wrote
    /// were read back whole as they were written.
    pub(crate) async fn check_reused_packs(&self, staged: &Staged) -> Result<(), PutError> {
        let ids: Vec<i64> = staged
            .reused()
            .into_values()
            .map(|loc| loc.pack)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        self.check_packs_present(&ids).await.map(drop)
    }

    /// The names of the packs `ids`, each checked to be in the bucket at its recorded size.
    async fn check_packs_present(&self, ids: &[i64]) -> Result<HashMap<i64, Arc<str>>, PutError> {
        let mut names = HashMap::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(names);
        }
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT name, size, id FROM packs WHERE id = ANY($1)",
                &[&ids],
            )
            .await?;
        drop(client);
        if rows.len() != ids.len() {
            return Err(
                StorageError::unavailable("a pack was reclaimed during the put; retry").into(),
            );
        }
        let objects = self.objects()?;
        for r in &rows {
            let name: String = r.get(0);
            let size = r.get::<_, i64>(1) as u64;
            if objects.size(&name).await? != Some(size) {
                return Err(StorageError::Corrupt {
                    object: format!("pack {name}"),
                }
                .into());
            }
            names.insert(r.get::<_, i64>(2), Arc::from(name));
        }
        Ok(names)
    }

    /// The commit's part for a streamed image not stored before (the protocol checked that):
    /// register the new packs and chunks, re-check the reused chunks, and create the image row
    /// with its extents.
    pub(crate) async fn register_image<C: GenericClient + Sync>(
        &self,
        tx: &C,
        image: &Image,
        staged: &Staged,
        against: Option<&Digest>,
        now: Timestamp,
    ) -> Result<(), PutError> {
        let digest_bytes = image.digest.as_bytes().as_slice();
        let row = super::manifest_to_store(tx, &staged.manifest, against).await?;
        // Reused chunks must still be where the stream found them.
        check_reused_chunks(tx, staged).await?;
        let (pack_ids, moved) = self.register_packs(tx, staged, now).await?;
        let locs: Vec<ChunkLoc> = staged
            .locs
            .iter()
            .zip(&staged.manifest)
            .map(
                |(loc, digest)| match (new_pack_index(loc.pack), moved.get(digest)) {
                    (Some(_), Some(m)) => Ok(*m),
                    (Some(n), None) => Ok(ChunkLoc {
                        pack: *pack_ids
                            .get(n)
                            .ok_or_else(|| StorageError::unavailable("pack index out of range"))?,
                        ..*loc
                    }),
                    (None, _) => Ok(*loc),
                },
            )
            .collect::<Result<_, StorageError>>()?;
        let extents = pack::encode_extents(&pack::coalesce(&locs));
        tx.execute(
            "INSERT INTO images (digest, size, manifest, base, extents, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &digest_bytes,
                &(image.size as i64),
                &row.body,
                &row.base.as_ref().map(|b| b.as_bytes().as_slice()),
                &extents,
                &now.unix_millis(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Registers a put's new packs and their chunks: the packs' ids, in order, and the chunks
    /// another put indexed first, where the index has them (this image points there too, or
    /// reclaiming our copy would strand it). A damaged chunk the put wrote afresh moves the
    /// index, and every image holding it, to the fresh copy.
    pub(crate) async fn register_packs<C: GenericClient + Sync>(
        &self,
        tx: &C,
        staged: &Staged,
        now: Timestamp,
    ) -> Result<(Vec<i64>, HashMap<Digest, ChunkLoc>), PutError> {
        let mut pack_ids: Vec<i64> = Vec::with_capacity(staged.packs.len());
        let mut moved: HashMap<Digest, ChunkLoc> = HashMap::new();
        let mut healed: HashMap<Digest, ChunkLoc> = HashMap::new();
        for p in &staged.packs {
            tx.execute(
                "INSERT INTO packs (name, size, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
                &[&p.name, &(p.size as i64), &now.unix_millis()],
            )
            .await?;
            let id: i64 = tx
                .query_one("SELECT id FROM packs WHERE name = $1", &[&p.name])
                .await?
                .get(0);
            pack_ids.push(id);
            let hashes: Vec<&[u8]> = p
                .chunks
                .iter()
                .map(|(d, _, _)| d.as_bytes().as_slice())
                .collect();
            let offsets: Vec<i64> = p.chunks.iter().map(|(_, o, _)| *o as i64).collect();
            let lens: Vec<i32> = p.chunks.iter().map(|(_, _, l)| *l as i32).collect();
            tx.execute(
                "INSERT INTO chunks (hash, pack_id, pack_offset, len, created_at)
                 SELECT h, $2, o, l, $5 FROM unnest($1::bytea[], $3::bigint[], $4::int[]) AS t(h, o, l)
                 ON CONFLICT (hash) DO NOTHING",
                &[&hashes, &id, &offsets, &lens, &now.unix_millis()],
            )
            .await?;
            // A damaged chunk this put wrote afresh: the index moves to the fresh copy, unless
            // another put healed it first (it then points there, as for any chunk indexed first).
            for (digest, offset, len) in &p.chunks {
                let Some(was) = staged.rewritten.get(digest) else {
                    continue;
                };
                let moved = tx
                    .execute(
                        "UPDATE chunks SET pack_id = $2, pack_offset = $3, len = $4
                         WHERE hash = $1 AND pack_id = $5 AND pack_offset = $6",
                        &[
                            &digest.as_bytes().as_slice(),
                            &id,
                            &(*offset as i64),
                            &(*len as i32),
                            &was.pack,
                            &(was.offset as i64),
                        ],
                    )
                    .await?;
                if moved == 1 {
                    healed.insert(
                        *digest,
                        ChunkLoc {
                            pack: id,
                            offset: *offset,
                            len: *len,
                        },
                    );
                }
            }
            for r in tx
                .query(
                    "SELECT hash, pack_id, pack_offset, len FROM chunks WHERE hash = ANY($1) AND pack_id IS DISTINCT FROM $2",
                    &[&hashes, &id],
                )
                .await?
            {
                let loc = ChunkLoc {
                    pack: r.get::<_, Option<i64>>(1).ok_or_else(|| {
                        StorageError::unavailable("a chunk of this put is held in PostgreSQL rows")
                    })?,
                    offset: r.get::<_, Option<i64>>(2).unwrap_or_default() as u64,
                    len: r.get::<_, Option<i32>>(3).unwrap_or_default() as u32,
                };
                moved.insert(digest_of(r.get(0))?, loc);
            }
        }
        self.heal_images(tx, &healed).await?;
        Ok((pack_ids, moved))
    }

    /// Points every stored image that holds a chunk in `healed` at its fresh copy (in `tx`, with
    /// the move of the index): the revisions that read the damaged bytes read whole again.
    async fn heal_images<C: GenericClient + Sync>(
        &self,
        tx: &C,
        healed: &HashMap<Digest, ChunkLoc>,
    ) -> Result<(), PutError> {
        let mut seen = HashSet::new();
        for digest in healed.keys() {
            // An image holds the chunk when its own manifest row names it or when it is kept
            // against one that holds it (`manifest.rs`); `repoint_row` moves only what it holds.
            let rows = tx
                .query(
                    "WITH RECURSIVE holders (digest) AS (
                         SELECT digest FROM images WHERE position($1::bytea IN manifest) > 0
                         UNION SELECT i.digest FROM images i JOIN holders h ON i.base = h.digest
                     )
                     SELECT digest, extents FROM images WHERE digest IN (SELECT digest FROM holders)",
                    &[&digest.as_bytes().as_slice()],
                )
                .await?;
            for r in &rows {
                let image: &[u8] = r.get(0);
                if !seen.insert(image.to_vec()) {
                    continue;
                }
                let Some(manifest) = super::resolved(tx, &super::digest_of(image)?).await? else {
                    continue;
                };
                if let Some(extents) = pack::repoint_row(
                    &manifest.chunks,
                    r.get(1),
                    self.inner.chunk_size as u64,
                    healed,
                ) {
                    tx.execute(
                        "UPDATE images SET extents = $1 WHERE digest = $2",
                        &[&extents, &image],
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// The pieces a download or a verification reads: (pack name, byte range, the chunks in it).
    async fn read_plan(&self, digest: &Digest) -> Result<Vec<Piece>, StorageError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT extents FROM images WHERE digest = $1",
                &[&digest.as_bytes().as_slice()],
            )
            .await?
            .ok_or_else(|| corrupt(format!("image {digest}")))?;
        let manifest = super::resolved(&**client, digest)
            .await?
            .ok_or_else(|| corrupt(format!("image {digest}")))?
            .chunks;
        let extents = row
            .get::<_, Option<&[u8]>>(0)
            .and_then(pack::decode_extents)
            .ok_or_else(|| corrupt(format!("image {digest}")))?;
        let ids: Vec<i64> = extents
            .iter()
            .map(|e| e.pack)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let names: HashMap<i64, Arc<str>> = client
            .query("SELECT id, name FROM packs WHERE id = ANY($1)", &[&ids])
            .await?
            .iter()
            .map(|r| (r.get::<_, i64>(0), Arc::from(r.get::<_, &str>(1))))
            .collect();
        plan_pieces(&extents, &manifest, self.inner.chunk_size as u64, &names)
    }

    /// Streams an image's bytes from its packs, every chunk checked before it is handed on.
    /// A download's body; `lease`, if any, is released when the body has been read to its end,
    /// before the end is reported (so a caller that read it all can rely on the lease being gone),
    /// or by its drop if the body is dropped early.
    pub(crate) async fn pack_body(
        &self,
        digest: &Digest,
        lease: Option<super::PgLease>,
    ) -> Result<ImageBody, StorageError> {
        let pieces = self.read_plan(digest).await?;
        let objects = self.objects()?.clone();
        let body = stream::iter(pieces)
            .map(move |piece| {
                let objects = objects.clone();
                async move { piece.read(&objects).await }
            })
            .buffered(READS_IN_FLIGHT);
        let release = stream::once(async move {
            if let Some(mut lease) = lease {
                lease.release().await;
            }
            None
        })
        .filter_map(std::future::ready);
        Ok(ImageBody::new(body.chain(release)))
    }

    /// Reads an image back whole and checks every chunk (restore's read-back, integrity checks).
    pub(crate) async fn verify_packed_image(&self, digest: &Digest) -> Result<u64, StorageError> {
        let body = self.pack_body(digest, None).await?;
        let mut whole = sha2::Sha256::default();
        let mut size = 0u64;
        let mut body = std::pin::pin!(body);
        while let Some(piece) = body.next().await {
            let piece = piece?;
            size += piece.len() as u64;
            sha2::Digest::update(&mut whole, &piece);
        }
        if Digest(sha2::Digest::finalize(whole).into()) != *digest {
            return Err(corrupt(format!("image {digest}")));
        }
        Ok(size)
    }

    /// Deletes the pack objects a committed pass decided on. A failure leaves an unnamed object
    /// the next pass deletes.
    pub(crate) async fn delete_packs(&self, doomed: &[String]) {
        let Ok(objects) = self.objects() else { return };
        for name in doomed {
            if let Err(e) = objects.delete(name).await {
                tracing::warn!(pack = %name, error = %e, "could not delete a reclaimed pack; the next pass retries");
            }
        }
    }

    /// The listing of pack objects reclamation decides on, taken before the publication records
    /// are read (a put names a pack in its record before the pack exists).
    pub(crate) async fn list_packs(&self) -> Result<Vec<(String, Timestamp)>, ReclaimError> {
        match &self.inner.objects {
            Some(objects) => objects.list().await,
            None => Ok(Vec::new()),
        }
    }
}

fn corrupt(object: String) -> StorageError {
    StorageError::Corrupt { object }
}

/// One range read of a download.
#[derive(Debug)]
struct Piece {
    pack: Arc<str>,
    start: u64,
    end: u64,
    /// The chunks in the range, in order: digest and length.
    chunks: Vec<(Digest, u32)>,
}

impl Piece {
    async fn read(self, objects: &Objects) -> Result<Bytes, StorageError> {
        let bytes = objects.read(&self.pack, self.start..self.end).await?;
        let mut at = 0usize;
        for (digest, len) in &self.chunks {
            let end = at + *len as usize;
            chunk::check(
                digest,
                bytes
                    .get(at..end)
                    .ok_or_else(|| corrupt(format!("chunk {digest}")))?,
            )?;
            at = end;
        }
        Ok(bytes)
    }

    /// The chunks of this piece whose stored bytes are damaged or gone.
    async fn damaged(self, objects: &Objects) -> Result<Vec<Digest>, StorageError> {
        let bytes = match objects.read(&self.pack, self.start..self.end).await {
            Ok(bytes) => bytes,
            Err(StorageError::Corrupt { .. }) => {
                return Ok(self.chunks.into_iter().map(|(digest, _)| digest).collect());
            }
            Err(err) => return Err(err),
        };
        let mut at = 0usize;
        let mut damaged = Vec::new();
        for (digest, len) in self.chunks {
            let end = at + len as usize;
            if bytes
                .get(at..end)
                .is_none_or(|stored| chunk::check(&digest, stored).is_err())
            {
                damaged.push(digest);
            }
            at = end;
        }
        Ok(damaged)
    }
}

/// The chunks among `found` (where the index has them, and their digests) whose stored bytes
/// do not hash to their address, or are gone: each read (a few ranges per pack, in order) and
/// checked. An unreachable store is an error, not damage.
async fn damaged_among(
    objects: &Objects,
    found: &mut [(ChunkLoc, Digest)],
    names: &HashMap<i64, Arc<str>>,
) -> Result<HashSet<Digest>, StorageError> {
    found.sort_by_key(|(loc, _)| (loc.pack, loc.offset));
    let pieces = pieces_of(found.iter().map(|(loc, digest)| (loc, digest)), names)?;
    let mut damaged = HashSet::new();
    let mut reads = stream::iter(pieces)
        .map(|piece| piece.damaged(objects))
        .buffered(READS_IN_FLIGHT);
    while let Some(bad) = reads.next().await {
        damaged.extend(bad?);
    }
    Ok(damaged)
}

/// Splits an image's extents into range reads of at most [`READ_RANGE`], on chunk boundaries,
/// each carrying the digests of the chunks it holds.
fn plan_pieces(
    extents: &[Extent],
    manifest: &[Digest],
    chunk_size: u64,
    names: &HashMap<i64, Arc<str>>,
) -> Result<Vec<Piece>, StorageError> {
    let locs = pack::expand(extents, chunk_size);
    if locs.len() != manifest.len() {
        return Err(corrupt("image extents".to_owned()));
    }
    pieces_of(locs.iter().zip(manifest), names)
}

/// Range reads of at most [`READ_RANGE`] of `chunks` (where each is, and its digest), in their
/// order: consecutive chunks of one pack share a read.
fn pieces_of<'a>(
    chunks: impl IntoIterator<Item = (&'a ChunkLoc, &'a Digest)>,
    names: &HashMap<i64, Arc<str>>,
) -> Result<Vec<Piece>, StorageError> {
    let mut pieces: Vec<Piece> = Vec::new();
    for (loc, digest) in chunks {
        let name = names
            .get(&loc.pack)
            .ok_or_else(|| corrupt(format!("pack {} (missing from the index)", loc.pack)))?;
        match pieces.last_mut() {
            Some(p)
                if Arc::ptr_eq(&p.pack, name)
                    && p.end == loc.offset
                    && p.end - p.start + u64::from(loc.len) <= READ_RANGE =>
            {
                p.end += u64::from(loc.len);
                p.chunks.push((*digest, loc.len));
            }
            _ => pieces.push(Piece {
                pack: name.clone(),
                start: loc.offset,
                end: loc.offset + u64::from(loc.len),
                chunks: vec![(*digest, loc.len)],
            }),
        }
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_follow_extents_and_stay_bounded() {
        let names: HashMap<i64, Arc<str>> =
            HashMap::from([(1, Arc::from("a.pack")), (2, Arc::from("b.pack"))]);
        let chunk = 4096u64;
        // 1,500 chunks in pack 1 (more than one READ_RANGE), then 2 in pack 2, then 1 back in 1.
        let extents = [
            Extent {
                pack: 1,
                offset: 0,
                len: 1500 * chunk,
            },
            Extent {
                pack: 2,
                offset: 8192,
                len: 2 * chunk,
            },
            Extent {
                pack: 1,
                offset: 0,
                len: 100,
            },
        ];
        let manifest: Vec<Digest> = (0..1503u32)
            .map(|i| Digest::from_bytes([(i % 251) as u8; 32]))
            .collect();
        let pieces = plan_pieces(&extents, &manifest, chunk, &names).expect("plan");
        let per_range = (READ_RANGE / chunk) as usize;
        assert_eq!(pieces[0].chunks.len(), per_range);
        assert!(pieces.iter().all(|p| p.end - p.start <= READ_RANGE));
        let total: usize = pieces.iter().map(|p| p.chunks.len()).sum();
        assert_eq!(total, manifest.len());
        let last = pieces.last().expect("pieces");
        assert_eq!((&*last.pack, last.start, last.end), ("a.pack", 0, 100));
        assert!(
            plan_pieces(&extents, &manifest[1..], chunk, &names).is_err(),
            "a manifest that does not match its extents is damage"
        );
        assert!(
            plan_pieces(&extents, &manifest, chunk, &HashMap::new()).is_err(),
            "an unindexed pack is damage"
        );
    }
}
