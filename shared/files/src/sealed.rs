//! Immutable in-memory bytes that also live in a sealed file, so a socket can send them without
//! copying them.
//!
//! A hub answers most downloads with a few small images it keeps in memory, and copying an image
//! into the socket is the largest single cost of such an answer (nginx skips it with `sendfile`).
//! A [`Sealer`] keeps a copy of such bytes in a memfd sealed against every change
//! ([`Sealer::seal`]), and notes where in memory its heap copy lives; a writer that finds a slice
//! it is about to write in that note ([`Sealer::file_range`]) can `sendfile` it from the memfd
//! instead. The kernel then hands the socket references to the memfd's pages: the seals guarantee
//! those pages never change, so the bytes a peer receives are the bytes that were sealed, whenever
//! it reads them.
//!
//! Sealing costs a second copy of the bytes and a file descriptor per sealed buffer for as long
//! as it lives, so only a process that can use it seals: its composition root (`snug-hub serve`,
//! which runs the gateway in the same process as the store that keeps the images) builds one
//! enabled [`Sealer`] and hands clones of it to the store, which seals, and to the gateway's
//! writer, which looks buffers up in it. Everyone else has a disabled one ([`Sealer::disabled`],
//! the default). Where sealing is off, or not available (not Linux, or the memfd cannot be made),
//! [`Sealer::seal`] returns the bytes as they are and everything works as before, one copy slower.
//!
//! Large buffers, which nobody would keep in memory but to send them without copying, are sealed
//! only within the budget the sealer was built with ([`Sealer::new`]): [`Sealer::reserve`] claims
//! their length before the caller gathers them, so buffers being gathered count too, and the claim
//! lasts until the sealed buffer is dropped.
//!
//! Each sealer is a registry and a budget of its own, not a process-wide one: a buffer is found
//! only by the sealer that sealed it, so tests that each build their own run side by side.
//!
//! Two invariants make a found slice safe to send from its memfd: a sealed buffer's registry
//! entry is removed before its heap copy is freed (so an allocation later made at the same
//! address is never mistaken for it), and a sealed memfd never changes (its seals forbid writes,
//! growth, shrinking and new seals).

use std::{
    collections::BTreeMap,
    fmt,
    fs::File,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;

/// Seals buffers and finds them again: the registry of live sealed buffers and the budget for
/// large ones. Cheap to clone; every clone shares the same registry and budget.
#[derive(Clone, Default)]
pub struct Sealer(Option<Arc<Registry>>);

/// What an enabled [`Sealer`] shares between its clones, its sealed buffers and its
/// reservations.
struct Registry {
    /// How many sealed buffers are alive: a writer that sees none skips the lookup.
    live: AtomicUsize,
    /// Bytes of large buffers reserved or sealed ([`Sealer::reserve`]).
    reserved: AtomicUsize,
    /// How many bytes of large buffers may be reserved or sealed at once.
    large_budget: usize,
    /// Where each live sealed buffer's heap copy starts: its length and its memfd.
    regions: RwLock<BTreeMap<usize, Region>>,
}

struct Region {
    len: usize,
    file: Arc<File>,
}

impl Sealer {
    /// A sealer that seals, for a process that writes sealed bytes to sockets with
    /// [`Sealer::file_range`]; up to `large_budget` bytes of large sealed buffers may be claimed
    /// at once ([`Sealer::reserve`]; each costs its length twice: the heap copy and the memfd).
    /// Zero refuses every reservation; small buffers ([`Sealer::seal`]) are sealed regardless.
    pub fn new(large_budget: usize) -> Self {
        Self(Some(Arc::new(Registry {
            live: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            large_budget,
            regions: RwLock::new(BTreeMap::new()),
        })))
    }

    /// A sealer that never seals and finds nothing (the default): for a process with no writer
    /// that sends sealed bytes, such as a store whose gateway runs elsewhere.
    pub fn disabled() -> Self {
        Self(None)
    }

    /// Whether this sealer seals.
    pub fn is_enabled(&self) -> bool {
        self.0.is_some()
    }

    /// A claim on `len` bytes of the large-buffer budget, for a buffer the caller is gathering to
    /// seal. The claim is given back when the reservation is dropped unused, or when the buffer
    /// sealed with it is.
    pub fn reserve(&self, len: usize) -> Result<Reservation, NoRoom> {
        let Some(registry) = &self.0 else {
            return Err(NoRoom::Never);
        };
        let budget = registry.large_budget;
        if len == 0 || len > budget {
            return Err(NoRoom::Never);
        }
        registry
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |reserved| {
                reserved.checked_add(len).filter(|&total| total <= budget)
            })
            .map(|_| Reservation {
                registry: registry.clone(),
                len,
            })
            .map_err(|_| NoRoom::Taken)
    }

    /// Bytes of the large-buffer budget claimed now (reserved or sealed).
    pub fn reserved_bytes(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |registry| registry.reserved.load(Ordering::Relaxed))
    }

    /// Whether any buffer this sealer sealed is alive (a cheap test before
    /// [`Sealer::file_range`]).
    pub fn any_live(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|registry| registry.live.load(Ordering::Relaxed) > 0)
    }

    /// `bytes`, sealed if this sealer is enabled and sealing possible: the returned buffer has the
    /// same content, and every slice of it is found by [`Sealer::file_range`] for as long as any
    /// clone of it lives. Otherwise `bytes` itself is returned.
    pub fn seal(&self, bytes: Bytes) -> Bytes {
        let Some(registry) = &self.0 else {
            return bytes;
        };
        if bytes.is_empty() {
            return bytes;
        }
        // A copy of its own, so that no other buffer shares the address it is registered under.
        match Sealed::new(registry.clone(), bytes[..].into(), None) {
            Ok(sealed) => Bytes::from_owner(sealed),
            Err(err) => {
                warn_once(&err);
                bytes
            }
        }
    }

    /// The sealed file holding `slice` and the offset of its first byte there, if `slice` lies
    /// within one live buffer this sealer sealed. The file stays valid as long as the caller
    /// holds it.
    pub fn file_range(&self, slice: &[u8]) -> Option<(Arc<File>, u64)> {
        let registry = self.0.as_ref()?;
        if slice.is_empty() || registry.live.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let regions = registry.regions.read().unwrap_or_else(|p| p.into_inner());
        let (region, offset) = locate(&regions, slice.as_ptr() as usize, slice.len())?;
        Some((region.file.clone(), offset))
    }
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("Sealer(disabled)"),
            Some(registry) => f
                .debug_struct("Sealer")
                .field("large_budget", &registry.large_budget)
                .field("reserved", &registry.reserved.load(Ordering::Relaxed))
                .field("live", &registry.live.load(Ordering::Relaxed))
                .finish(),
        }
    }
}

/// Why [`Sealer::reserve`] made no claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// Sealing is off, or the buffer is empty or larger than the whole budget: freeing other
    /// buffers would not help.
    Never,
    /// Other buffers hold the budget: there is room once enough of them are dropped.
    Taken,
}

/// A claim on part of a sealer's large-buffer budget ([`Sealer::reserve`]).
pub struct Reservation {
    registry: Arc<Registry>,
    len: usize,
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Reservation {
    /// Seals `bytes` (at most the reserved length), keeping the claim for as long as the sealed
    /// buffer lives; `None`, and the claim given back, when it cannot be sealed. `bytes` becomes
    /// the heap copy itself, so nothing is copied in memory but into the memfd.
    pub fn seal(self, bytes: Vec<u8>) -> Option<Bytes> {
        if bytes.is_empty() || bytes.len() > self.len {
            return None;
        }
        match Sealed::new(self.registry.clone(), bytes.into_boxed_slice(), Some(self)) {
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
        self.registry.reserved.fetch_sub(self.len, Ordering::AcqRel);
    }
}

/// Only a cost: the bytes are served by copying, as without sealing. Process-wide, since whether
/// memfds can be made is a property of the platform, not of one sealer.
fn warn_once(err: &std::io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(error = %err, "buffers cannot be sealed here; they are sent by copying");
    }
}

/// The region of `regions` that holds all of `len` bytes at address `start`, and their offset
/// in it.
fn locate(regions: &BTreeMap<usize, Region>, start: usize, len: usize) -> Option<(&Region, u64)> {
    let (&base, region) = regions.range(..=start).next_back()?;
    let offset = start - base;
    (offset.checked_add(len)? <= region.len).then_some((region, offset as u64))
}

/// The owner behind a sealed `Bytes`: the heap copy readers see, and the registry entry that
/// points a writer at the memfd holding the same bytes.
struct Sealed {
    registry: Arc<Registry>,
    heap: Box<[u8]>,
    /// The budget claim of a large buffer, given back after the registry entry is gone.
    _reservation: Option<Reservation>,
}

impl Sealed {
    /// Seals `heap`, which no other buffer may share an address with, in `registry`.
    fn new(
        registry: Arc<Registry>,
        heap: Box<[u8]>,
        reservation: Option<Reservation>,
    ) -> std::io::Result<Self> {
        let file = sealed_file(&heap)?;
        registry
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                heap.as_ptr() as usize,
                Region {
                    len: heap.len(),
                    file: Arc::new(file),
                },
            );
        registry.live.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            registry,
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
        // The entry goes before the heap copy is freed (the fields are dropped after this body):
        // an allocation later made at the same address is never mistaken for this buffer.
        let mut regions = self
            .registry
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        regions.remove(&(self.heap.as_ptr() as usize));
        self.registry.live.fetch_sub(1, Ordering::Relaxed);
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
        let sealer = Sealer::new(0);
        let content: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sealed = sealer.seal(Bytes::from(content.clone()));
        assert_eq!(sealed[..], content[..]);
        for (start, end) in [(0, 10_000), (0, 1), (9_999, 10_000), (1_234, 5_678)] {
            let slice = sealed.slice(start..end);
            let (file, offset) = sealer.file_range(&slice).expect("sealed");
            assert_eq!(offset, start as u64);
            assert_eq!(read_at(&file, offset, end - start), content[start..end]);
        }
    }

    #[test]
    fn other_buffers_are_not_found() {
        let sealer = Sealer::new(0);
        let sealed = sealer.seal(Bytes::from(vec![1u8; 4096]));
        let plain = vec![1u8; 4096];
        assert!(sealer.file_range(&plain).is_none());
        assert!(sealer.file_range(&[]).is_none());
        // Each sealer is a registry of its own.
        assert!(Sealer::new(0).file_range(&sealed).is_none());
        assert!(Sealer::disabled().file_range(&sealed).is_none());
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
        let sealer = Sealer::new(0);
        let sealed = sealer.seal(Bytes::from(vec![3u8; 8192]));
        let clone = sealed.slice(100..200);
        drop(sealed);
        let (file, _) = sealer.file_range(&clone).expect("a clone keeps it alive");
        drop(clone);
        assert!(!sealer.any_live());
        // The registry held the other reference to the file.
        assert_eq!(Arc::strong_count(&file), 1);
    }

    #[test]
    fn the_file_refuses_every_change() {
        let sealer = Sealer::new(0);
        let sealed = sealer.seal(Bytes::from(vec![4u8; 4096]));
        let (file, _) = sealer.file_range(&sealed).expect("sealed");
        assert!(file.write_at(b"x", 0).is_err(), "write");
        assert!(file.write_at(b"x", 4096).is_err(), "growth");
        assert!(file.set_len(10).is_err(), "shrinking");
        assert_eq!(read_at(&file, 0, 4096), vec![4u8; 4096]);
    }

    #[test]
    fn empty_bytes_are_returned_as_they_are() {
        let sealer = Sealer::new(0);
        assert!(sealer.seal(Bytes::new()).is_empty());
        assert!(!sealer.any_live());
    }
}
