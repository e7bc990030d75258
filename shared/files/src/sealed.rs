//! Immutable in-memory bytes that also live in a sealed file, so a socket can send them without
//! copying them.
//!
//! A hub answers most downloads with a few small images it keeps in memory, and copying an image
//! into the socket is the largest single cost of such an answer (nginx skips it with `sendfile`).
//! [`seal`] keeps a copy of such bytes in a memfd sealed against every change, and notes where in
//! memory its heap copy lives; a writer that finds a slice it is about to write in that note
//! ([`file_range`]) can `sendfile` it from the memfd instead. The kernel then hands the socket
//! references to the memfd's pages: the seals guarantee those pages never change, so the bytes a
//! peer receives are the bytes that were sealed, whenever it reads them.
//!
//! Sealing costs a second copy of the bytes and a file descriptor per sealed buffer for as long
//! as it lives, so it is off until a process that can use it switches it on ([`enable`]): the
//! gateway does when it serves in the same process as the store that keeps the images. Where it
//! is off, or not available (not Linux, or the memfd cannot be made), [`seal`] returns the bytes
//! as they are and everything works as before, one copy slower.
//!
//! Large buffers, which nobody would keep in memory but to send them without copying, are sealed
//! only within a budget the process sets ([`set_large_budget`]): [`reserve`] claims their length
//! before the caller gathers them, so buffers being gathered count too, and the claim lasts until
//! the sealed buffer is dropped.

use std::{
    collections::BTreeMap,
    fs::File,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;

/// Whether [`seal`] seals.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// How many sealed buffers are alive: a writer that sees none skips the lookup.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Bytes of large buffers reserved or sealed ([`reserve`]), and how many may be.
static RESERVED: AtomicUsize = AtomicUsize::new(0);
static LARGE_BUDGET: AtomicUsize = AtomicUsize::new(0);

/// Where each live sealed buffer's heap copy starts: its length and its memfd.
static REGISTRY: RwLock<BTreeMap<usize, Region>> = RwLock::new(BTreeMap::new());

struct Region {
    len: usize,
    file: Arc<File>,
}

/// Lets [`seal`] seal from now on. Call it in a process that writes sealed bytes to sockets with
/// [`file_range`]; buffers sealed before stay as they were.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Lets [`reserve`] claim up to `bytes` of large sealed buffers at once (each costs its length
/// twice: the heap copy and the memfd). Zero, the default, refuses every reservation.
pub fn set_large_budget(bytes: usize) {
    LARGE_BUDGET.store(bytes, Ordering::Relaxed);
}

/// A claim on `len` bytes of the large-buffer budget, for a buffer the caller is gathering to
/// seal. The claim is given back when the reservation is dropped unused, or when the buffer
/// sealed with it is.
pub fn reserve(len: usize) -> Result<Reservation, NoRoom> {
    let budget = LARGE_BUDGET.load(Ordering::Relaxed);
    if !ENABLED.load(Ordering::Relaxed) || len == 0 || len > budget {
        return Err(NoRoom::Never);
    }
    RESERVED
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |reserved| {
            reserved.checked_add(len).filter(|&total| total <= budget)
        })
        .map(|_| Reservation { len })
        .map_err(|_| NoRoom::Taken)
}

/// Why [`reserve`] made no claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// Sealing is off, or the buffer is empty or larger than the whole budget: freeing other
    /// buffers would not help.
    Never,
    /// Other buffers hold the budget: there is room once enough of them are dropped.
    Taken,
}

/// Bytes of the large-buffer budget claimed now (reserved or sealed).
pub fn reserved_bytes() -> usize {
    RESERVED.load(Ordering::Relaxed)
}

/// A claim on part of the large-buffer budget ([`reserve`]).
#[derive(Debug)]
pub struct Reservation {
    len: usize,
}

impl Reservation {
    /// Seals `bytes` (at most the reserved length), keeping the claim for as long as the sealed
    /// buffer lives; `None`, and the claim given back, when it cannot be sealed. `bytes` becomes
    /// the heap copy itself, so nothing is copied in memory but into the memfd.
    pub fn seal(self, bytes: Vec<u8>) -> Option<Bytes> {
        if bytes.is_empty() || bytes.len() > self.len {
            return None;
        }
        match Sealed::new(bytes.into_boxed_slice(), Some(self)) {
            Ok(sealed) => Some(Bytes::from_owner(sealed)),
            Err(err) => {
                warn_once(&err);
                None
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        RESERVED.fetch_sub(self.len, Ordering::AcqRel);
    }
}

/// Whether any sealed buffer is alive (a cheap test before [`file_range`]).
pub fn any_live() -> bool {
    LIVE.load(Ordering::Relaxed) > 0
}

/// `bytes`, sealed if sealing is enabled and possible: the returned buffer has the same content,
/// and every slice of it is found by [`file_range`] for as long as any clone of it lives.
/// Otherwise `bytes` itself is returned.
pub fn seal(bytes: Bytes) -> Bytes {
    if !ENABLED.load(Ordering::Relaxed) || bytes.is_empty() {
        return bytes;
    }
    // A copy of its own, so that no other buffer shares the address it is registered under.
    match Sealed::new(bytes[..].into(), None) {
        Ok(sealed) => Bytes::from_owner(sealed),
        Err(err) => {
            warn_once(&err);
            bytes
        }
    }
}

/// Only a cost: the bytes are served by copying, as without sealing.
fn warn_once(err: &std::io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(error = %err, "buffers cannot be sealed here; they are sent by copying");
    }
}

/// The sealed file holding `slice` and the offset of its first byte there, if `slice` lies within
/// one live sealed buffer. The file stays valid as long as the caller holds it.
pub fn file_range(slice: &[u8]) -> Option<(Arc<File>, u64)> {
    if slice.is_empty() || !any_live() {
        return None;
    }
    let registry = REGISTRY.read().unwrap_or_else(|p| p.into_inner());
    let (region, offset) = locate(&registry, slice.as_ptr() as usize, slice.len())?;
    Some((region.file.clone(), offset))
}

/// The region of `registry` that holds all of `len` bytes at address `start`, and their offset
/// in it.
fn locate(registry: &BTreeMap<usize, Region>, start: usize, len: usize) -> Option<(&Region, u64)> {
    let (&base, region) = registry.range(..=start).next_back()?;
    let offset = start - base;
    (offset.checked_add(len)? <= region.len).then_some((region, offset as u64))
}

/// The owner behind a sealed `Bytes`: the heap copy readers see, and the registry entry that
/// points a writer at the memfd holding the same bytes.
struct Sealed {
    heap: Box<[u8]>,
    /// The budget claim of a large buffer, given back after the registry entry is gone.
    _reservation: Option<Reservation>,
}

impl Sealed {
    /// Seals `heap`, which no other buffer may share an address with.
    fn new(heap: Box<[u8]>, reservation: Option<Reservation>) -> std::io::Result<Self> {
        let file = sealed_file(&heap)?;
        let mut registry = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
        registry.insert(
            heap.as_ptr() as usize,
            Region {
                len: heap.len(),
                file: Arc::new(file),
            },
        );
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            heap,
            _reservation: reservation,
        })
    }
}

impl AsRef<[u8]> for Sealed {
    fn as_ref(&self) -> &[u8] {
        &self.heap
    }
}

impl Drop for Sealed {
    fn drop(&mut self) {
        // The entry goes before the heap copy is freed: an allocation later made at the same
        // address is never mistaken for this buffer.
        let mut registry = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
        registry.remove(&(self.heap.as_ptr() as usize));
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A memfd holding `bytes`, sealed against writes, growth, shrinking and further seal changes.
#[cfg(target_os = "linux")]
fn sealed_file(bytes: &[u8]) -> std::io::Result<File> {
    use std::os::unix::fs::FileExt as _;

    use rustix::fs::{MemfdFlags, SealFlags};

    let fd = rustix::fs::memfd_create(
        "snug-sealed",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let file = File::from(fd);
    file.write_all_at(bytes, 0)?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok(file)
}

#[cfg(not(target_os = "linux"))]
fn sealed_file(_bytes: &[u8]) -> std::io::Result<File> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "sealed files need Linux memfds",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::fs::FileExt as _;

    use super::*;

    fn read_at(file: &File, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        file.read_exact_at(&mut out, offset).expect("read");
        out
    }

    #[test]
    fn every_slice_of_a_sealed_buffer_is_found_in_its_file() {
        enable();
        let content: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sealed = seal(Bytes::from(content.clone()));
        assert_eq!(sealed[..], content[..]);
        for (start, end) in [(0, 10_000), (0, 1), (9_999, 10_000), (1_234, 5_678)] {
            let slice = sealed.slice(start..end);
            let (file, offset) = file_range(&slice).expect("sealed");
            assert_eq!(offset, start as u64);
            assert_eq!(read_at(&file, offset, end - start), content[start..end]);
        }
    }

    #[test]
    fn other_buffers_are_not_found() {
        enable();
        let _sealed = seal(Bytes::from(vec![1u8; 4096]));
        let plain = vec![1u8; 4096];
        assert!(file_range(&plain).is_none());
        assert!(file_range(&[]).is_none());
    }

    #[test]
    fn a_range_is_found_only_wholly_inside_one_region() {
        let file = Arc::new(sealed_file(b"x").expect("memfd"));
        let region = |len| Region {
            len,
            file: file.clone(),
        };
        let registry = BTreeMap::from([(1000, region(100)), (1100, region(50))]);
        let found = |start, len| locate(&registry, start, len).map(|(r, at)| (r.len, at));
        assert_eq!(found(1000, 100), Some((100, 0)));
        assert_eq!(found(1099, 1), Some((100, 99)));
        assert_eq!(found(1050, 51), None, "runs into the next region");
        assert_eq!(found(1100, 50), Some((50, 0)));
        assert_eq!(found(1120, 31), None, "runs past the last region");
        assert_eq!(found(999, 1), None, "before the first region");
        assert_eq!(found(1120, usize::MAX), None, "no overflow");
    }

    #[test]
    fn a_dropped_buffer_is_forgotten() {
        enable();
        let sealed = seal(Bytes::from(vec![3u8; 8192]));
        let clone = sealed.slice(100..200);
        drop(sealed);
        let (file, _) = file_range(&clone).expect("a clone keeps it alive");
        drop(clone);
        // The registry held the other reference to the file.
        assert_eq!(Arc::strong_count(&file), 1);
    }

    #[test]
    fn the_file_refuses_every_change() {
        enable();
        let sealed = seal(Bytes::from(vec![4u8; 4096]));
        let (file, _) = file_range(&sealed).expect("sealed");
        assert!(file.write_at(b"x", 0).is_err(), "write");
        assert!(file.write_at(b"x", 4096).is_err(), "growth");
        assert!(file.set_len(10).is_err(), "shrinking");
        assert_eq!(read_at(&file, 0, 4096), vec![4u8; 4096]);
    }

    #[test]
    fn empty_bytes_are_returned_as_they_are() {
        enable();
        assert!(seal(Bytes::new()).is_empty());
    }
}
