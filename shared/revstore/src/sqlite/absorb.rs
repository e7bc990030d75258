//! The embedded store's chunk writer: a put's chunks hashed, deduplicated against the chunk index
//! (each stored chunk it would reuse read and checked first; a damaged one is written afresh),
//! and the new ones appended to one temporary pack, on blocking threads while the async side
//! keeps reading. A chunk that arrives checked (a derived put's, `chunk.rs`) is neither hashed
//! nor read again: its stored copy was checked against its address when the put read its base.

use std::{
    collections::{HashMap, HashSet},
    fs::File,
    io,
    sync::Arc,
};

use bytes::Bytes;
use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use super::{
    Inner, digest_col,
    packs::{self, ChunkLoc, TempPack},
};
use crate::{
    chunk::{Batch, ChunkSink},
    error::{PutError, StorageError},
    types::Digest,
};

/// What the chunk writer produced for one put.
pub(crate) struct Absorbed {
    pub(super) manifest: Vec<Digest>,
    /// Per chunk: where it already is (`pack >= 0`) or its offset in the new pack (`pack == NEW`).
    pub(super) locs: Vec<ChunkLoc>,
    pub(super) pack: Option<NewPack>,
    /// Stored chunks found damaged, with where the index had them: written afresh in `pack`.
    pub(super) rewritten: HashMap<Digest, ChunkLoc>,
}

/// The pack a put writes its new chunks to, and where each is in it.
pub(crate) struct NewPack {
    pub(super) temp: TempPack,
    pub(super) chunks: Vec<(Digest, u64, u32)>,
}

impl NewPack {
    /// Where each of the pack's chunks is in it (pack [`NEW`]), and their digests, to read them
    /// back.
    pub(super) fn in_pack(&self) -> (Vec<ChunkLoc>, Vec<Digest>) {
        self.chunks
            .iter()
            .map(|(digest, offset, len)| {
                let loc = ChunkLoc {
                    pack: NEW,
                    offset: *offset,
                    len: *len,
                };
                (loc, *digest)
            })
            .unzip()
    }
}

/// Pseudo pack id for chunks in the pack this put is writing.
pub(super) const NEW: i64 = -1;

/// Hands chunk batches to the blocking chunk writer.
pub(crate) struct ChannelSink(pub(super) mpsc::Sender<Batch>);

impl ChunkSink for ChannelSink {
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        // A closed channel means the writer failed; its own error is reported by the caller.
        self.0
            .send(batch)
            .await
            .map_err(|_| PutError::Storage(StorageError::unavailable("chunk writer stopped")))
    }
}

impl Inner {
    /// Hashes chunks, deduplicates them against the chunk index and this put, and appends the new
    /// ones to a temporary pack. Runs on a blocking thread while the async side keeps reading.
    pub(super) fn absorb(&self, mut rx: mpsc::Receiver<Batch>) -> Result<Absorbed, PutError> {
        // Two stages on two threads: one hashes chunks, the other deduplicates and writes them.
        // With the whole-image digest computed on the async side, the three passes over the bytes
        // run side by side instead of one after another.
        let (hashed_tx, hashed_rx) =
            std::sync::mpsc::sync_channel::<(Vec<Bytes>, Vec<Digest>, HashSet<Digest>)>(2);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                while let Some(batch) = rx.blocking_recv() {
                    let hashes = batch.addresses();
                    let checked: HashSet<Digest> =
                        batch.checked.iter().flatten().copied().collect();
                    if hashed_tx.send((batch.chunks, hashes, checked)).is_err() {
                        break;
                    }
                }
            });
            self.with_reader(|conn| {
                let mut manifest = Vec::new();
                let mut locs = Vec::new();
                let mut pack: Option<NewPack> = None;
                let mut in_pack: HashMap<Digest, (u64, u32)> = HashMap::new();
                let mut rewritten: HashMap<Digest, ChunkLoc> = HashMap::new();
                for (batch, hashes, checked) in hashed_rx {
                    let unknown: Vec<&Digest> = hashes
                        .iter()
                        .filter(|h| !in_pack.contains_key(*h))
                        .collect();
                    let mut found = lookup_chunks(conn, &unknown)?;
                    // A stored chunk is reused only once read and checked against its address:
                    // a damaged one is written afresh below (issue 36 point 8). A checked chunk
                    // was, when this put read its base.
                    let unchecked: HashMap<Digest, ChunkLoc> = found
                        .iter()
                        .filter(|(digest, _)| !checked.contains(*digest))
                        .map(|(digest, loc)| (*digest, *loc))
                        .collect();
                    for digest in self.damaged_among(conn, &unchecked)? {
                        if let Some(was) = found.remove(&digest) {
                            rewritten.insert(digest, was);
                        }
                    }
                    for (bytes, hash) in batch.iter().zip(&hashes) {
                        let len = bytes.len() as u32;
                        let loc = if let Some(loc) = found.get(hash) {
                            *loc
                        } else if let Some((offset, len)) = in_pack.get(hash) {
                            ChunkLoc {
                                pack: NEW,
                                offset: *offset,
                                len: *len,
                            }
                        } else {
                            if pack.is_none() {
                                pack = Some(NewPack {
                                    temp: TempPack::create(&self.tmp_dir)?,
                                    chunks: Vec::new(),
                                });
                            }
                            let p = pack.as_mut().ok_or_else(|| io::Error::other("no pack"))?;
                            let offset = p.temp.append(bytes)?;
                            p.chunks.push((*hash, offset, len));
                            in_pack.insert(*hash, (offset, len));
                            ChunkLoc {
                                pack: NEW,
                                offset,
                                len,
                            }
                        };
                        manifest.push(*hash);
                        locs.push(loc);
                    }
                }
                if let Some(p) = pack.as_mut() {
                    let file = p.temp.finish_writes()?;
                    // Read the new chunks back while the fsync runs: both must succeed before the
                    // pack is published, and neither needs the other.
                    let files = HashMap::from([(NEW, Arc::new(file.try_clone()?))]);
                    let (new_locs, new_digests) = p.in_pack();
                    let (synced, verified) = std::thread::scope(|s| {
                        let sync = s.spawn(|| file.sync_all());
                        let verified = packs::verify_chunks(&files, &new_locs, &new_digests);
                        (
                            sync.join()
                                .unwrap_or_else(|_| Err(io::Error::other("fsync thread panicked"))),
                            verified,
                        )
                    });
                    synced?;
                    if let Err(chunk) = verified {
                        return Err(StorageError::Corrupt {
                            object: format!("chunk {chunk}"),
                        }
                        .into());
                    }
                }
                Ok(Absorbed {
                    manifest,
                    locs,
                    pack,
                    rewritten,
                })
            })
        })
    }
}

impl Inner {
    /// The chunks among `found` (where the index has them) whose stored bytes are damaged or
    /// gone.
    fn damaged_among(
        &self,
        conn: &Connection,
        found: &HashMap<Digest, ChunkLoc>,
    ) -> Result<Vec<Digest>, PutError> {
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let mut chunks: Vec<(ChunkLoc, Digest)> = found.iter().map(|(d, l)| (*l, *d)).collect();
        chunks.sort_by_key(|(loc, _)| (loc.pack, loc.offset));
        let (locs, digests): (Vec<ChunkLoc>, Vec<Digest>) = chunks.into_iter().unzip();
        let paths = Inner::pack_paths(conn, locs.iter().map(|l| l.pack), &self.packs_dir)?;
        // A pack file that cannot be opened holds damaged chunks as much as one that misreads.
        let files: packs::PackFiles = paths
            .iter()
            .filter_map(|(id, path)| Some((*id, Arc::new(File::open(path).ok()?))))
            .collect();
        Ok(packs::damaged_chunks(&files, &locs, &digests))
    }
}

/// Checks that every chunk a put deduplicated against the index is still where it found it.
pub(super) fn check_reused(conn: &Connection, absorbed: &Absorbed) -> Result<(), PutError> {
    let mut stmt = conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM chunks WHERE hash = ?1 AND pack_id = ?2 AND offset = ?3)",
    )?;
    for (loc, hash) in absorbed.locs.iter().zip(&absorbed.manifest) {
        if loc.pack != NEW
            && !stmt.query_row(
                params![hash.as_bytes().as_slice(), loc.pack, loc.offset as i64],
                |r| r.get::<_, bool>(0),
            )?
        {
            return Err(
                StorageError::unavailable("a chunk was reclaimed during the put; retry").into(),
            );
        }
    }
    Ok(())
}

/// Looks up where the given chunks are stored, in batches of bound parameters.
fn lookup_chunks(
    conn: &Connection,
    hashes: &[&Digest],
) -> Result<HashMap<Digest, ChunkLoc>, rusqlite::Error> {
    let mut out = HashMap::new();
    for group in hashes.chunks(256) {
        let placeholders = vec!["?"; group.len()].join(",");
        let sql =
            format!("SELECT hash, pack_id, offset, len FROM chunks WHERE hash IN ({placeholders})");
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            rusqlite::params_from_iter(group.iter().map(|h| h.as_bytes().as_slice())),
            |r| {
                Ok((
                    digest_col(r.get(0)?)?,
                    ChunkLoc {
                        pack: r.get(1)?,
                        offset: r.get::<_, i64>(2)? as u64,
                        len: r.get::<_, i64>(3)? as u32,
                    },
                ))
            },
        )?;
        for row in rows {
            let (h, loc) = row?;
            out.insert(h, loc);
        }
    }
    Ok(out)
}
