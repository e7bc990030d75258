//! Pack files of the embedded store: writing them create-once, reading ranges, verifying chunks.
//!
//! One put writes all of its new chunks into one temporary file, fsyncs it once, and links it into
//! `packs/<name>.pack`, where the name is the SHA-256 of the chunk digests it holds in order (so the
//! name determines the content). One fsync per put instead of one per chunk is what keeps a durable
//! 64 MiB put close to a plain atomic file write.

use std::{
    collections::HashMap,
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    ops::ControlFlow,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use bytes::Bytes;

pub(crate) use crate::pack::{
    ChunkLoc, Extent, coalesce, decode_extents, encode_extents, expand, is_pack_name, pack_name,
    prefix, repoint_row,
};
use crate::types::Digest;

/// The largest read a verification issues at once.
pub(crate) const READ_PIECE: usize = 1 << 20;

/// The size of the pieces a download yields. Each piece is one hand-off from the reading thread to
/// the caller's task (a wake-up, costly on a loaded machine), so pieces are large; a download's
/// read-ahead (the piece being read, two queued, the one the caller holds) stays under 8 MiB.
/// The buffers come from a [`PiecePool`].
pub(crate) const DOWNLOAD_PIECE: usize = 2 << 20;

/// The length of a download's pieces in a store of `chunk_size`: whole chunks, so that each piece
/// is checked against the manifest before it is handed on, and as close to [`DOWNLOAD_PIECE`] as
/// that allows.
pub(crate) fn piece_len(chunk_size: usize) -> usize {
    (DOWNLOAD_PIECE / chunk_size.max(1)).max(1) * chunk_size.max(1)
}

/// A pack being written in `tmp/`; the file is removed on drop unless it was linked into place.
#[derive(Debug)]
pub(crate) struct TempPack {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
    pub(crate) len: u64,
}

impl TempPack {
    pub(crate) fn create(tmp_dir: &Path) -> io::Result<Self> {
        let mut suffix = [0u8; 12];
        getrandom::fill(&mut suffix).map_err(|e| io::Error::other(e.to_string()))?;
        let path = tmp_dir.join(format!("{}.tmp", hex::encode(suffix)));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(Self {
            path,
            writer: Some(BufWriter::with_capacity(READ_PIECE, file)),
            len: 0,
        })
    }

    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<u64> {
        let offset = self.len;
        self.writer
            .as_mut()
            .ok_or_else(|| io::Error::other("pack already sealed"))?
            .write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(offset)
    }

    /// Flushes buffered writes and hands back the file for its fsync and read-back.
    pub(crate) fn finish_writes(&mut self) -> io::Result<File> {
        let writer = self
            .writer
            .take()
            .ok_or_else(|| io::Error::other("pack already finished"))?;
        writer.into_inner().map_err(|e| e.into_error())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempPack {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Reads the given chunks, checking each against its address, and returns their bytes in order;
/// the error names the first chunk that is missing or does not match.
pub(crate) fn read_verified(
    files: &PackFiles,
    locs: &[ChunkLoc],
    manifest: &[Digest],
) -> Result<Vec<u8>, Digest> {
    let mut out = Vec::new();
    for (loc, digest) in locs.iter().zip(manifest) {
        let file = files.get(&loc.pack).ok_or(*digest)?;
        let start = out.len();
        out.resize(start + loc.len as usize, 0);
        file.read_exact_at(&mut out[start..], loc.offset)
            .map_err(|_| *digest)?;
        if Digest::of(&out[start..]) != *digest {
            return Err(*digest);
        }
    }
    Ok(out)
}

/// Open pack files by id.
pub(crate) type PackFiles = HashMap<i64, Arc<File>>;

pub(crate) fn open_packs(paths: &HashMap<i64, PathBuf>) -> io::Result<PackFiles> {
    paths
        .iter()
        .map(|(id, p)| Ok((*id, Arc::new(File::open(p)?))))
        .collect()
}

/// Idle piece buffers a store keeps for the next downloads: enough for a few concurrent
/// downloads' read-ahead, small enough not to matter (16 MiB).
const IDLE_PIECE_BUFFERS: usize = (16 << 20) / DOWNLOAD_PIECE;

/// Pieces shorter than this (small images, and the tail of a large one) are read into a buffer of
/// their own size rather than a pooled one.
const SMALL_PIECE: usize = 256 << 10;

/// Piece buffers, reused across pieces and downloads.
///
/// A piece handed out owns its buffer until the caller drops it, and then the buffer comes back
/// here. In the steady state a download therefore touches no fresh memory (fresh pages cost a
/// page fault each on first touch, which dominated a download's time) and never zeroes a buffer:
/// a recycled buffer is already initialized, so the next read overwrites it in place.
#[derive(Clone, Debug, Default)]
pub(crate) struct PiecePool(Arc<Mutex<Vec<Vec<u8>>>>);

impl PiecePool {
    fn take(&self) -> Vec<u8> {
        self.lock()
            .pop()
            // A fresh buffer is zeroed by calloc, which for a buffer this size maps zero pages
            // instead of writing them; it is zeroed once and reused from then on.
            .unwrap_or_else(|| vec![0u8; DOWNLOAD_PIECE])
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut idle = self.lock();
        if idle.len() < IDLE_PIECE_BUFFERS {
            idle.push(buf);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        // A poisoned list is still a list of whole buffers: every mutation is one push or pop.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The owner behind a piece's `Bytes`: the first `len` bytes of a pooled buffer, returned to the
/// pool when the last clone of the piece is dropped.
struct PooledPiece {
    buf: Vec<u8>,
    len: usize,
    pool: PiecePool,
}

impl AsRef<[u8]> for PooledPiece {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PooledPiece {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

/// One piece of a download: up to [`DOWNLOAD_PIECE`] bytes gathered from consecutive extents.
#[derive(Debug)]
pub(crate) struct ReadTask {
    ranges: Vec<(Arc<File>, u64, usize)>,
    len: usize,
}

impl ReadTask {
    /// Reads the piece into a buffer from `pool`, one positioned read per range (a first revision
    /// is one range per piece), so handles may be shared and no seek is needed.
    ///
    /// A piece of a small image gets a buffer of its own size instead: a pooled buffer would pin
    /// [`DOWNLOAD_PIECE`] bytes for as long as the caller holds a few KiB, and zeroing a small
    /// buffer costs little next to reading it.
    pub(crate) fn read(self, pool: &PiecePool) -> io::Result<Bytes> {
        // A piece larger than the pooled buffers exists only in a store whose chunks are.
        if self.len < SMALL_PIECE || self.len > DOWNLOAD_PIECE {
            let mut buf = vec![0u8; self.len];
            self.fill(&mut buf)?;
            return Ok(Bytes::from(buf));
        }
        let mut buf = pool.take();
        self.fill(&mut buf[..self.len])?;
        Ok(Bytes::from_owner(PooledPiece {
            buf,
            len: self.len,
            pool: pool.clone(),
        }))
    }

    fn fill(&self, buf: &mut [u8]) -> io::Result<()> {
        let mut at = 0;
        for (file, offset, len) in &self.ranges {
            // `read_exact_at` reports a pack shorter than its extents as `UnexpectedEof`.
            file.read_exact_at(&mut buf[at..at + len], *offset)?;
            at += len;
        }
        Ok(())
    }
}

/// Plans the reads of a download, in pieces of `piece_len` bytes (the last may be shorter).
pub(crate) fn read_tasks(
    extents: &[Extent],
    files: &PackFiles,
    piece_len: usize,
) -> io::Result<Vec<ReadTask>> {
    let mut tasks = Vec::new();
    let mut current = ReadTask {
        ranges: Vec::new(),
        len: 0,
    };
    for e in extents {
        let file = files
            .get(&e.pack)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "pack missing"))?;
        let mut off = 0u64;
        while off < e.len {
            let room = piece_len - current.len;
            let n = (e.len - off).min(room as u64) as usize;
            current.ranges.push((file.clone(), e.offset + off, n));
            current.len += n;
            off += n as u64;
            if current.len == piece_len {
                tasks.push(std::mem::replace(
                    &mut current,
                    ReadTask {
                        ranges: Vec::new(),
                        len: 0,
                    },
                ));
            }
        }
    }
    if current.len > 0 {
        tasks.push(current);
    }
    Ok(tasks)
}

/// Reads every chunk back and checks it against its address, spreading the work over a few
/// threads. Returns the first chunk that is missing or does not match.
pub(crate) fn verify_chunks(
    files: &PackFiles,
    locs: &[ChunkLoc],
    manifest: &[Digest],
) -> Result<(), Digest> {
    debug_assert_eq!(locs.len(), manifest.len());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let per = locs.len().div_ceil(threads).max(256);
    let pairs: Vec<(&[ChunkLoc], &[Digest])> = locs.chunks(per).zip(manifest.chunks(per)).collect();
    if pairs.len() <= 1 {
        return pairs
            .first()
            .map_or(Ok(()), |(l, m)| verify_range(files, l, m));
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = pairs
            .into_iter()
            .map(|(l, m)| s.spawn(move || verify_range(files, l, m)))
            .collect();
        let mut result = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(Digest::from_bytes([0; 32])));
            if result.is_ok() {
                result = r;
            }
        }
        result
    })
}

fn verify_range(files: &PackFiles, locs: &[ChunkLoc], manifest: &[Digest]) -> Result<(), Digest> {
    match scan_range(files, locs, manifest, ControlFlow::Break) {
        ControlFlow::Break(digest) => Err(digest),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The chunks among `locs` (named by `manifest`) whose stored bytes are missing or do not hash
/// to their address: what a put writes afresh rather than reuse.
pub(crate) fn damaged_chunks(
    files: &PackFiles,
    locs: &[ChunkLoc],
    manifest: &[Digest],
) -> Vec<Digest> {
    let mut damaged = Vec::new();
    let _ = scan_range(files, locs, manifest, |digest| {
        damaged.push(digest);
        ControlFlow::<()>::Continue(())
    });
    damaged
}

/// Reads `locs` in runs of consecutive chunks of one pack and hands every chunk that is missing
/// or does not match its digest to `bad`, until `bad` breaks.
fn scan_range<B>(
    files: &PackFiles,
    locs: &[ChunkLoc],
    manifest: &[Digest],
    mut bad: impl FnMut(Digest) -> ControlFlow<B>,
) -> ControlFlow<B> {
    let mut buf = vec![0u8; READ_PIECE];
    let mut i = 0;
    while i < locs.len() {
        // Gather a run of chunks that are consecutive in one pack and read it with one call.
        let first = locs[i];
        let mut j = i + 1;
        let mut run = u64::from(first.len);
        while j < locs.len()
            && locs[j].pack == first.pack
            && locs[j].offset == first.offset + run
            && run + u64::from(locs[j].len) <= READ_PIECE as u64
        {
            run += u64::from(locs[j].len);
            j += 1;
        }
        let bytes = &mut buf[..run as usize];
        let read = files
            .get(&first.pack)
            .is_some_and(|file| file.read_exact_at(bytes, first.offset).is_ok());
        let mut at = 0usize;
        for k in i..j {
            let len = locs[k].len as usize;
            if !read || Digest::of(&bytes[at..at + len]) != manifest[k] {
                bad(manifest[k])?;
            }
            at += len;
        }
        i = j;
    }
    ControlFlow::Continue(())
}
