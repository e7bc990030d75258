//! Immutable in-memory bytes that also lie in a file that never changes, so a socket can send
//! them from the file without copying them.
//!
//! A hub answers most downloads with a few small images it keeps in memory, and copying an image
//! into the socket is the largest single cost of such an answer (nginx skips it with `sendfile`).
//! [`seal`] keeps a copy of such bytes in a memfd sealed against every change, and notes where in
//! memory its heap copy lives; a writer that finds a slice it is about to write in that note
//! ([`lead`]) can `sendfile` it from the memfd instead. The kernel then hands the socket
//! references to the memfd's pages: the seals guarantee those pages never change, so the bytes a
//! peer receives are the bytes that were sealed, whenever it reads them. [`register`] notes a
//! buffer just read from a file its owner never changes (a pack of the sync store, written once
//! and only ever deleted whole), for as long as the returned [`Registration`] lives.
//!
//! Sealing costs a second copy of the bytes and a file descriptor per sealed buffer for as long
//! as it lives, so it is off until a process that can use it switches it on ([`enable`]): the
//! gateway does when it serves in the same process as the store that keeps the images. Where it
//! is off, or not available (not Linux, or the memfd cannot be made), [`seal`] returns the bytes
//! as they are and [`register`] notes nothing, and everything works as before, one copy slower.

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

/// Where each live sealed buffer's heap copy starts: its length and its memfd.
static REGISTRY: RwLock<BTreeMap<usize, Region>> = RwLock::new(BTreeMap::new());

struct Region {
    len: usize,
    file: Arc<File>,
    /// Where the buffer's first byte is in `file`.
    offset: u64,
}

/// Lets [`seal`] seal from now on. Call it in a process that writes sealed bytes to sockets with
/// [`lead`]; buffers sealed before stay as they were.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether any buffer is sealed or registered (a cheap test before [`lead`]).
pub fn any_live() -> bool {
    LIVE.load(Ordering::Relaxed) > 0
}

/// `bytes`, sealed if sealing is enabled and possible: the returned buffer has the same content,
/// and [`lead`] finds every slice of it for as long as any clone of it lives.
/// Otherwise `bytes` itself is returned.
pub fn seal(bytes: Bytes) -> Bytes {
    if !ENABLED.load(Ordering::Relaxed) || bytes.is_empty() {
        return bytes;
    }
    match Sealed::new(&bytes) {
        Ok(sealed) => Bytes::from_owner(sealed),
        Err(err) => {
            // Only a cost: the bytes are served by copying, as without sealing.
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %err, "buffers cannot be sealed here; they are sent by copying");
            }
            bytes
        }
    }
}

/// Pieces of a file shorter than this are copied rather than sent from the file: a `sendfile`
/// of their own costs more than copying them.
pub const MIN_SEND: usize = 64 << 10;

/// How a writer should send the start of a slice.
#[derive(Debug)]
pub enum Lead {
    /// The first `len` bytes lie in `file` at `offset`, and are at least [`MIN_SEND`] long.
    File {
        /// The file, valid as long as the caller holds it.
        file: Arc<File>,
        /// Where the slice's first byte is in `file`.
        offset: u64,
        /// How many of the slice's bytes follow it there.
        len: usize,
    },
    /// The first this many bytes are to be copied: no file holds them, or only in pieces shorter
    /// than [`MIN_SEND`]. The whole slice when nothing after them is sent from a file.
    Memory(usize),
}

/// How to send the start of `slice` (see [`Lead`]).
pub fn lead(slice: &[u8]) -> Lead {
    let len = slice.len();
    if len == 0 || !any_live() {
        return Lead::Memory(len);
    }
    let registry = REGISTRY.read().unwrap_or_else(|p| p.into_inner());
    lead_in(&registry, slice.as_ptr() as usize, len)
}

fn lead_in(registry: &BTreeMap<usize, Region>, start: usize, len: usize) -> Lead {
    let end = start.saturating_add(len);
    if let Some((&base, region)) = registry.range(..=start).next_back() {
        let here = base
            .saturating_add(region.len)
            .saturating_sub(start)
            .min(len);
        if here >= MIN_SEND {
            return Lead::File {
                file: region.file.clone(),
                offset: region.offset + (start - base) as u64,
                len: here,
            };
        }
    }
    // Copy up to the next piece worth sending from its file.
    let next = registry
        .range(start.saturating_add(1)..end)
        .find(|(base, region)| base.saturating_add(region.len).min(end) - **base >= MIN_SEND)
        .map_or(len, |(base, _)| base - start);
    Lead::Memory(next)
}

/// The note that a buffer's bytes lie in a file; removed when dropped.
#[derive(Debug)]
#[must_use = "the note is removed when the registration is dropped"]
pub struct Registration {
    /// The buffer's address, or `None` when nothing was noted.
    key: Option<usize>,
}

/// Notes that `buf` holds exactly the bytes of `file` at `offset`, so that [`lead`] finds any
/// slice of it, until the registration is dropped (drop it before the buffer is freed or
/// reused). The caller promises that those bytes of the file never change: a socket may still be
/// reading the file's pages after the buffer is gone. Notes nothing while sealing is off.
pub fn register(buf: &[u8], file: Arc<File>, offset: u64) -> Registration {
    if !ENABLED.load(Ordering::Relaxed) || buf.is_empty() {
        return Registration { key: None };
    }
    let key = buf.as_ptr() as usize;
    let mut registry = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
    let noted = registry
        .insert(
            key,
            Region {
                len: buf.len(),
                file,
                offset,
            },
        )
        .is_none();
    // A buffer is noted once: a second note at the same address would be removed by the
    // first registration's drop.
    debug_assert!(noted, "a buffer registered twice");
    LIVE.fetch_add(1, Ordering::Relaxed);
    Registration { key: Some(key) }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            // The note goes before the buffer can be freed or reused: an allocation later made
            // at the same address is never mistaken for this buffer.
            let mut registry = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
            registry.remove(&key);
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The owner behind a sealed `Bytes`: the heap copy readers see, and the registry entry that
/// points a writer at the memfd holding the same bytes.
struct Sealed {
    heap: Box<[u8]>,
    registration: Registration,
}

impl Sealed {
    fn new(bytes: &[u8]) -> std::io::Result<Self> {
        let file = sealed_file(bytes)?;
        // A copy of its own, so that no other buffer shares the address it is noted under.
        let heap: Box<[u8]> = bytes.into();
        let registration = register(&heap, Arc::new(file), 0);
        Ok(Self { heap, registration })
    }
}

impl AsRef<[u8]> for Sealed {
    fn as_ref(&self) -> &[u8] {
        &self.heap
    }
}

impl Drop for Sealed {
    fn drop(&mut self) {
        // The note goes before the heap copy is freed.
        drop(std::mem::replace(
            &mut self.registration,
            Registration { key: None },
        ));
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

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 253) as u8).collect()
    }

    /// The file, offset and length `lead` gives for `slice`, or the length to copy.
    fn file_lead(slice: &[u8]) -> Result<(Arc<File>, u64, usize), usize> {
        match lead(slice) {
            Lead::File { file, offset, len } => Ok((file, offset, len)),
            Lead::Memory(len) => Err(len),
        }
    }

    #[test]
    fn every_long_slice_of_a_sealed_buffer_is_found_in_its_file() {
        enable();
        let content = pattern(300_000);
        let sealed = seal(Bytes::from(content.clone()));
        assert_eq!(sealed[..], content[..]);
        for (start, end) in [
            (0, 300_000),
            (0, MIN_SEND),
            (1_234, 201_234),
            (300_000 - MIN_SEND, 300_000),
        ] {
            let (file, offset, len) = file_lead(&sealed[start..end]).expect("sealed");
            assert_eq!((offset, len), (start as u64, end - start));
            assert_eq!(read_at(&file, offset, len), content[start..end]);
        }
        // Too short to be worth a sendfile of its own.
        assert_eq!(file_lead(&sealed[10..MIN_SEND]).err(), Some(MIN_SEND - 10));
    }

    #[test]
    fn other_buffers_are_copied_whole() {
        enable();
        let _sealed = seal(Bytes::from(vec![1u8; 4096]));
        let plain = vec![1u8; 200_000];
        assert_eq!(file_lead(&plain).err(), Some(200_000));
        assert_eq!(file_lead(&[]).err(), Some(0));
    }

    #[test]
    fn a_slice_over_several_regions_is_sent_piece_by_piece() {
        let file = Arc::new(sealed_file(b"x").expect("memfd"));
        let region = |len, offset| Region {
            len,
            file: file.clone(),
            offset,
        };
        const K: usize = 1024;
        // Regions at made-up addresses: 100 KiB, a 4 KiB gap, 8 KiB, 70 KiB, then 200 KiB.
        let registry = BTreeMap::from([
            (1_000_000, region(100 * K, 5_000)),
            (1_000_000 + 104 * K, region(8 * K, 0)),
            (1_000_000 + 112 * K, region(70 * K, 9_000)),
            (1_000_000 + 182 * K, region(200 * K, 0)),
        ]);
        let lead = |start, len| match lead_in(&registry, start, len) {
            Lead::File { offset, len, .. } => Ok((offset, len)),
            Lead::Memory(len) => Err(len),
        };
        // From the first region's start: all of it, and no more.
        assert_eq!(lead(1_000_000, 500 * K), Ok((5_000, 100 * K)));
        // Inside it: the rest of it.
        assert_eq!(lead(1_000_000 + 10, 500 * K), Ok((5_010, 100 * K - 10)));
        // Near its end, too little is left: copy the rest of it, the gap and the short region,
        // up to the 70 KiB one.
        assert_eq!(lead(1_000_000 + 99 * K, 500 * K), Err(13 * K));
        // In the gap: likewise.
        assert_eq!(lead(1_000_000 + 101 * K, 500 * K), Err(11 * K));
        // A slice that ends inside the 70 KiB region before MIN_SEND of it: all copied.
        assert_eq!(lead(1_000_000 + 101 * K, 20 * K), Err(20 * K));
        // Nothing registered: all copied.
        assert_eq!(lead(10, 500 * K), Err(500 * K));
        assert_eq!(lead(usize::MAX - 10, 10), Err(10), "no overflow");
        // The last region, cut by the slice's end.
        assert_eq!(lead(1_000_000 + 182 * K, 150 * K), Ok((0, 150 * K)));
    }

    #[test]
    fn a_dropped_buffer_is_forgotten() {
        enable();
        let sealed = seal(Bytes::from(vec![3u8; 200_000]));
        let clone = sealed.slice(100..100_100);
        drop(sealed);
        let (file, _, _) = file_lead(&clone).expect("a clone keeps it alive");
        drop(clone);
        // The registry held the other reference to the file.
        assert_eq!(Arc::strong_count(&file), 1);
    }

    #[test]
    fn a_registered_buffer_is_found_at_its_place_in_its_file_until_dropped() {
        enable();
        let content = pattern(500_000);
        let file = Arc::new(sealed_file(&content).expect("memfd"));
        let buf = content[1_000..301_000].to_vec();
        let registration = register(&buf, file, 1_000);
        let (found, offset, len) = file_lead(&buf[500..100_500]).expect("registered");
        assert_eq!((offset, len), (1_500, 100_000));
        assert_eq!(read_at(&found, offset, len), buf[500..100_500]);
        drop(registration);
        assert_eq!(
            file_lead(&buf[500..100_500]).err(),
            Some(100_000),
            "forgotten"
        );
    }

    #[test]
    fn the_file_refuses_every_change() {
        enable();
        let sealed = seal(Bytes::from(vec![4u8; 100_000]));
        let (file, _, _) = file_lead(&sealed).expect("sealed");
        assert!(file.write_at(b"x", 0).is_err(), "write");
        assert!(file.write_at(b"x", 100_000).is_err(), "growth");
        assert!(file.set_len(10).is_err(), "shrinking");
        assert_eq!(read_at(&file, 0, 100_000), vec![4u8; 100_000]);
    }

    #[test]
    fn empty_bytes_are_returned_as_they_are() {
        enable();
        assert!(seal(Bytes::new()).is_empty());
    }
}
