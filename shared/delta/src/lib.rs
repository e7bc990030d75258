//! Delta sync's codec: a small change to a user database costs a small transfer (issue 21).
//!
//! An image is cut into pages of a size the client chooses (its SQLite page size); a page is
//! named by a [`PageId`], the first 8 bytes of its SHA-256. Two wire formats, both binary,
//! little-endian, with fixed-width fields:
//!
//! - a [`Manifest`] names an image: its length, page size, SHA-256 and every page's id. A client
//!   sends one to push (the new image's pages) or to pull (the pages of the file it has).
//! - a [`Delta`] describes how to build an image from a *source* (the base revision on a push,
//!   the client's own file on a pull): runs that tile the target's pages in order, each copied
//!   from a range of source pages, literal, or patched (copied, then a few byte ranges
//!   replaced), followed by the literal and patched pages' data, each with its page's id.
//!   Without that data (a [`Layout`]) it is the origin's answer to a push manifest: which pages
//!   to copy from the base and which it lacks.
//!
//! A [`Sparse`] manifest names an image group by group, a group of pages by one hash where the
//! other side holds it (`sparse.rs`): what a client that knows nothing of the hub's pages sends
//! first, so a fallback costs kilobytes rather than eight bytes a page.
//!
//! A manifest may also carry each page's *shape* (`shape.rs`: the page with the fields that
//! name other pages zeroed), which finds a page again after a row inserted early moved every
//! later page and so rewrote every page that names one; such a page costs its fields' bytes
//! instead of a whole page. A manifest without shapes (the first format) never asks for
//! patches, so a client that sends one never receives a run it does not know.
//!
//! A sender that holds exactly the receiver's source (a device its copy of the base it last
//! synced, the origin the revision a device's file is) may send a changed page *compressed*: a
//! zstd frame with the source's pages where the edit happened as its dictionary
//! (`compressed.rs`, [`Delta::build_compressed`]), so rows a split moved cost nothing.
//!
//! [`plan`] matches a manifest against a [`Source`]'s ids and shapes; [`Delta::build`] fills
//! in the data (a patched page carries only the bytes that differ where the source's bytes are
//! known, else all its fields); [`Delta::assemble`] builds the image from a source and checks
//! every literal and patched page against its id and the whole image against the SHA-256 the
//! delta claims, so a prefix collision or a lie is caught before any byte is used. Parsing is
//! strict and bounded by [`Limits`] (the per-user quota): a hostile input
//! (runs that overlap, leave a gap or reach past either image, a page count over the quota,
//! pages that do not hash to their names, a trailing byte) is a [`DeltaError`], never a panic
//! or an allocation beyond the limit.
//!
//! What this crate deliberately does not do: IO of any kind, or decide whose pages a source may
//! hold. The origin must only ever offer the pages of the caller's own revisions as a source
//! (chunks are shared across users in the store, so matching against anything wider would tell
//! a client whether someone else's image holds a page).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

mod compressed;
mod delta;
mod manifest;
mod shape;
mod sparse;
#[cfg(test)]
mod tests;

pub use delta::Delta;
use delta::delta_prefix;
#[cfg(test)]
use manifest::PARALLEL_FROM;
pub use manifest::{Manifest, page_ids};
pub use sparse::{Group, GroupHash, MAX_GROUP, Sparse};

/// Bytes in a [`PageId`].
pub const ID_LEN: usize = 8;
/// Smallest accepted page size (SQLite's smallest).
pub const MIN_PAGE_SIZE: u32 = 512;
/// Largest accepted page size (SQLite's largest).
pub const MAX_PAGE_SIZE: u32 = 65536;

const MANIFEST_MAGIC: &[u8; 4] = b"SDM1";
/// A manifest with each page's shape after its ids.
const SHAPED_MANIFEST_MAGIC: &[u8; 4] = b"SDM2";
const DELTA_MAGIC: &[u8; 4] = b"SDD1";
/// Magic, page size, length, SHA-256.
const MANIFEST_HEADER: usize = 4 + 4 + 8 + 32;
/// Magic, page size, length, SHA-256, source pages, run count.
const DELTA_HEADER: usize = 4 + 4 + 8 + 32 + 4 + 4;
/// Kind, to, count, from.
const RUN_LEN: usize = 1 + 4 + 4 + 4;
/// A patched page's entry count.
const PATCH_HEADER: usize = 2;
/// A patch entry's offset and length.
const ENTRY_HEADER: usize = 2 + 2;

/// The first 8 bytes of a page's SHA-256: enough to find a page among one user's revisions; a
/// collision is caught by the whole image's SHA-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId(pub [u8; ID_LEN]);

impl PageId {
    /// Names `page`.
    pub fn of(page: &[u8]) -> Self {
        let hash = Sha256::digest(page);
        let mut id = [0; ID_LEN];
        id.copy_from_slice(&hash[..ID_LEN]);
        Self(id)
    }
}

/// The page size a delta cuts `image` into: its SQLite page size (header offset 16, big-endian;
/// 1 means 65536), or 4096 for anything that is not a SQLite database with a valid one.
pub fn page_size_of(image: &[u8]) -> u32 {
    const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
    let size = match image.get(16..18) {
        Some(&[1, 0]) => 65536,
        Some(&[hi, lo]) => u32::from(u16::from_be_bytes([hi, lo])),
        _ => 0,
    };
    if image.starts_with(SQLITE_MAGIC)
        && size.is_power_of_two()
        && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&size)
    {
        size
    } else {
        4096
    }
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// What a parser accepts: images up to the per-user quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest image, in bytes.
    pub max_length: u64,
}

impl Limits {
    /// The most pages an image within these limits can have at the smallest page size.
    pub fn max_pages(&self) -> u64 {
        self.max_length.div_ceil(u64::from(MIN_PAGE_SIZE))
    }

    /// The largest encoded manifest these limits accept, shapes included, in any form (a
    /// transport can refuse a bigger body before reading it): a sparse one with every group in
    /// full and one page a group is the largest, a tag byte a page over a plain one.
    pub fn max_manifest_len(&self) -> u64 {
        sparse::SPARSE_HEADER as u64 + self.max_pages() * (2 * ID_LEN as u64 + 1)
    }

    /// The largest encoded layout (a push plan) these limits accept: one run per page.
    pub fn max_layout_len(&self) -> u64 {
        DELTA_HEADER as u64 + self.max_pages() * RUN_LEN as u64
    }

    /// The largest encoded delta these limits accept: the layout, and every page literal with
    /// its id (a patched page takes less than its literal: its entries are smaller than it).
    pub fn max_delta_len(&self) -> u64 {
        self.max_layout_len() + self.max_length + self.max_pages() * ID_LEN as u64
    }
}

/// An image's length and the page size it is cut into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The image's length in bytes, at least 1.
    pub length: u64,
    /// The page size: a power of two from [`MIN_PAGE_SIZE`] to [`MAX_PAGE_SIZE`].
    pub page_size: u32,
}

impl Geometry {
    /// Checks the page size and the length against `limits`.
    pub fn new(length: u64, page_size: u32, limits: &Limits) -> Result<Self, DeltaError> {
        if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(DeltaError::PageSize { page_size });
        }
        if length == 0 {
            return Err(DeltaError::Malformed {
                what: "an empty image",
            });
        }
        if length > limits.max_length {
            return Err(DeltaError::TooLarge {
                length,
                max_length: limits.max_length,
            });
        }
        Ok(Self { length, page_size })
    }

    /// How many pages the image has; the last may be short.
    pub fn pages(&self) -> u32 {
        // Bounded by the quota over MIN_PAGE_SIZE, far below u32::MAX for any real quota; a
        // geometry over u32::MAX pages is refused by `new`'s callers through `pages_checked`.
        u32::try_from(self.length.div_ceil(u64::from(self.page_size))).unwrap_or(u32::MAX)
    }

    /// The byte range of page `index` within the image.
    pub fn page_range(&self, index: u32) -> std::ops::Range<usize> {
        let start = u64::from(index) * u64::from(self.page_size);
        let end = (start + u64::from(self.page_size)).min(self.length);
        start as usize..end as usize
    }

    fn page_len(&self, index: u32) -> usize {
        self.page_range(index).len()
    }

    /// `bytes` (an image of this geometry) cut into its pages, by index.
    fn pages_of<'a>(&self, bytes: &'a [u8]) -> impl Fn(u32) -> &'a [u8] + use<'a> {
        let geometry = *self;
        move |index| &bytes[geometry.page_range(index)]
    }
}

/// How the target's pages `to..to + count` are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// Copied from the source's pages `from..from + count`.
    Copy {
        /// The first target page.
        to: u32,
        /// The first source page.
        from: u32,
        /// How many pages.
        count: u32,
    },
    /// Sent as literal pages.
    Literal {
        /// The first target page.
        to: u32,
        /// How many pages.
        count: u32,
    },
    /// Copied from the source's pages `from..from + count`, each with a few byte ranges
    /// replaced by its patch (sent with the literal pages).
    Patch {
        /// The first target page.
        to: u32,
        /// The first source page.
        from: u32,
        /// How many pages.
        count: u32,
    },
    /// Sent as frames compressed against source pages each names (`compressed.rs`); only a
    /// sender that holds the source's bytes makes one.
    Compressed {
        /// The first target page.
        to: u32,
        /// How many pages.
        count: u32,
    },
}

impl Run {
    fn to(&self) -> u32 {
        match *self {
            Run::Copy { to, .. }
            | Run::Literal { to, .. }
            | Run::Patch { to, .. }
            | Run::Compressed { to, .. } => to,
        }
    }

    fn count(&self) -> u32 {
        match *self {
            Run::Copy { count, .. }
            | Run::Literal { count, .. }
            | Run::Patch { count, .. }
            | Run::Compressed { count, .. } => count,
        }
    }

    /// How target page `to + k` of this run is made.
    fn make(&self, k: u32) -> Make {
        match *self {
            Run::Copy { from, .. } => Make::Copy(from + k),
            Run::Literal { .. } => Make::Literal,
            Run::Patch { from, .. } => Make::Patch(from + k),
            Run::Compressed { .. } => Make::Compressed,
        }
    }
}

/// How one target page is made: copied from a source page, literal, patched from one, or
/// compressed against some.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Make {
    Copy(u32),
    Literal,
    Patch(u32),
    Compressed,
}

/// Runs built page by page in target order, each page extending the last run it continues.
#[derive(Default)]
struct Runs(Vec<Run>);

impl Runs {
    fn push(&mut self, to: u32, make: Make) {
        match (self.0.last_mut(), make) {
            (Some(Run::Copy { from, count, .. }), Make::Copy(f))
            | (Some(Run::Patch { from, count, .. }), Make::Patch(f))
                if *from + *count == f =>
            {
                *count += 1
            }
            (Some(Run::Literal { count, .. }), Make::Literal)
            | (Some(Run::Compressed { count, .. }), Make::Compressed) => *count += 1,
            _ => self.0.push(match make {
                Make::Copy(from) => Run::Copy { to, from, count: 1 },
                Make::Literal => Run::Literal { to, count: 1 },
                Make::Patch(from) => Run::Patch { to, from, count: 1 },
                Make::Compressed => Run::Compressed { to, count: 1 },
            }),
        }
    }

    /// The source page the last run would continue with.
    fn next_source(&self) -> Option<u32> {
        match self.0.last()? {
            Run::Copy { from, count, .. } | Run::Patch { from, count, .. } => Some(from + count),
            Run::Literal { .. } | Run::Compressed { .. } => None,
        }
    }
}

/// How to build a target image from a source: the runs, without the literal pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The target's length and page size (the source is cut into the same page size).
    pub geometry: Geometry,
    /// The SHA-256 the assembled image must have.
    pub digest: [u8; 32],
    /// How many pages the source has; a delta built against another source is refused.
    pub source_pages: u32,
    /// Runs tiling the target's pages in order.
    pub runs: Vec<Run>,
}

impl Layout {
    /// Every target page in order, with how it is made.
    fn pages(&self) -> impl Iterator<Item = (u32, Make)> + '_ {
        self.runs
            .iter()
            .flat_map(|run| (0..run.count()).map(move |k| (run.to() + k, run.make(k))))
    }

    /// The target pages sent literally, in order.
    pub fn literal_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages()
            .filter(|(_, make)| *make == Make::Literal)
            .map(|(page, _)| page)
    }

    /// How many pages are sent literally.
    pub fn literal_count(&self) -> u64 {
        self.count(|run| matches!(run, Run::Literal { .. }))
    }

    /// How many pages are sent as patches.
    pub fn patched_count(&self) -> u64 {
        self.count(|run| matches!(run, Run::Patch { .. }))
    }

    /// How many pages are sent compressed against source pages.
    pub fn compressed_count(&self) -> u64 {
        self.count(|run| matches!(run, Run::Compressed { .. }))
    }

    fn count(&self, which: impl Fn(&Run) -> bool) -> u64 {
        self.runs
            .iter()
            .filter(|run| which(run))
            .map(|run| u64::from(run.count()))
            .sum()
    }

    /// The wire form of the layout alone (the origin's answer to a push manifest).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DELTA_HEADER + self.runs.len() * RUN_LEN);
        out.extend_from_slice(DELTA_MAGIC);
        out.extend_from_slice(&self.geometry.page_size.to_le_bytes());
        out.extend_from_slice(&self.geometry.length.to_le_bytes());
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&self.source_pages.to_le_bytes());
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for run in &self.runs {
            let (kind, to, from, count) = match *run {
                Run::Copy { to, from, count } => (0u8, to, from, count),
                Run::Literal { to, count } => (1u8, to, 0, count),
                Run::Patch { to, from, count } => (2u8, to, from, count),
                Run::Compressed { to, count } => (3u8, to, 0, count),
            };
            out.push(kind);
            out.extend_from_slice(&to.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(&from.to_le_bytes());
        }
        out
    }

    /// Parses an origin's answer to a push manifest, for the client, which does not hold the
    /// source: as [`Layout::parse`], copies checked against the page count the layout states,
    /// and nothing may follow it.
    pub fn parse_plan(bytes: &[u8], limits: &Limits) -> Result<Self, DeltaError> {
        if bytes.len() < DELTA_HEADER {
            return Err(DeltaError::Malformed { what: "truncated" });
        }
        let mut r = Reader::new(&bytes[4..]);
        let page_size = r.u32()?;
        let _ = r.take(8 + 32)?;
        let source_pages = r.u32()?;
        let source_len = u64::from(source_pages) * u64::from(page_size);
        let (layout, rest) = Self::parse(bytes, limits, source_len)?;
        if !rest.is_empty() {
            return Err(DeltaError::Malformed {
                what: "bytes after the layout",
            });
        }
        Ok(layout)
    }

    /// Parses a layout and checks that its runs tile the target exactly and stay within a
    /// source of `source_len` bytes (cut into the layout's page size). Returns the layout and
    /// the bytes after it.
    pub fn parse<'a>(
        bytes: &'a [u8],
        limits: &Limits,
        source_len: u64,
    ) -> Result<(Self, &'a [u8]), DeltaError> {
        let mut r = Reader::new(bytes);
        let (page_size, length) = delta_prefix(&mut r)?;
        let digest = r.array::<32>()?;
        let claimed_source = r.u32()?;
        let n_runs = r.u32()?;
        let geometry = Geometry::new(length, page_size, limits)?;
        let source_pages = source_pages(source_len, page_size);
        if claimed_source != source_pages {
            return Err(DeltaError::SourceMismatch {
                claimed: claimed_source,
                actual: source_pages,
            });
        }
        let pages = geometry.pages();
        // Every run covers at least one page, so more runs than pages cannot tile; checking
        // first bounds the allocation below by the quota.
        if n_runs > pages || r.rest().len() < n_runs as usize * RUN_LEN {
            return Err(DeltaError::Malformed {
                what: "a run count over the page count or past the end",
            });
        }
        let mut runs = Vec::with_capacity(n_runs as usize);
        let mut next = 0u32;
        for _ in 0..n_runs {
            let kind = r.u8()?;
            let to = r.u32()?;
            let count = r.u32()?;
            let from = r.u32()?;
            let run = match kind {
                0 => Run::Copy { to, from, count },
                1 if from == 0 => Run::Literal { to, count },
                2 => Run::Patch { to, from, count },
                3 if from == 0 => Run::Compressed { to, count },
                _ => {
                    return Err(DeltaError::Malformed {
                        what: "an unknown run kind",
                    });
                }
            };
            if count == 0 {
                return Err(DeltaError::Malformed {
                    what: "an empty run",
                });
            }
            if to < next {
                return Err(DeltaError::Duplicate { page: to });
            }
            if to > next {
                return Err(DeltaError::Gap { page: next });
            }
            let end = u64::from(to) + u64::from(count);
            if end > u64::from(pages) {
                return Err(DeltaError::OutOfRange {
                    page: to,
                    pages,
                    what: "target",
                });
            }
            if let Run::Copy { from, .. } | Run::Patch { from, .. } = run
                && u64::from(from) + u64::from(count) > u64::from(source_pages)
            {
                return Err(DeltaError::OutOfRange {
                    page: from,
                    pages: source_pages,
                    what: "source",
                });
            }
            next = end as u32;
            runs.push(run);
        }
        if next != pages {
            return Err(DeltaError::Gap { page: next });
        }
        let layout = Self {
            geometry,
            digest,
            source_pages,
            runs,
        };
        Ok((layout, r.rest()))
    }
}

/// What a plan is made against: the source's page ids, and where known its pages' shapes (from
/// a manifest that has them) and its bytes (the origin's own revision, on a pull).
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// One id per source page.
    pub ids: &'a [PageId],
    /// One shape per source page, if known.
    pub shapes: Option<&'a [PageId]>,
    /// The source image, if known.
    pub bytes: Option<&'a [u8]>,
}

impl<'a> Source<'a> {
    /// A source known by its page ids alone.
    pub fn ids(ids: &'a [PageId]) -> Self {
        Self {
            ids,
            shapes: None,
            bytes: None,
        }
    }
}

/// Matches `target`'s pages against `source`: a target page whose id the source holds is
/// copied, one whose shape a source page shares (both manifests having shapes) is patched from
/// that page, every other one is literal. A page that continues the previous run (the next
/// source page matches) extends it, so a shifted range stays one run.
pub fn plan(target: &Manifest, source: &Source<'_>) -> Layout {
    let mut first: HashMap<PageId, u32> = HashMap::with_capacity(source.ids.len());
    for (idx, id) in source.ids.iter().enumerate() {
        first.entry(*id).or_insert(idx as u32);
    }
    let shapes = match (target.shapes.as_deref(), source.shapes) {
        (Some(ours), Some(theirs))
            if ours.len() == target.ids.len() && theirs.len() == source.ids.len() =>
        {
            Some((ours, theirs))
        }
        _ => None,
    };
    // Only pages with fields: a page without has its id as its shape, found by `first`.
    let mut by_shape: HashMap<PageId, u32> = HashMap::new();
    if let Some((_, theirs)) = shapes {
        for (idx, (shape, id)) in theirs.iter().zip(source.ids).enumerate() {
            if shape != id {
                by_shape.entry(*shape).or_insert(idx as u32);
            }
        }
    }
    let mut runs = Runs::default();
    for (to, id) in target.ids.iter().enumerate() {
        let shape = shapes.map(|(ours, _)| ours[to]);
        let next = runs.next_source();
        let continues = |n: u32, wanted: &PageId, of: &[PageId]| of.get(n as usize) == Some(wanted);
        let make = match next {
            Some(n) if continues(n, id, source.ids) => Make::Copy(n),
            Some(n)
                if shapes.is_some_and(|(ours, theirs)| {
                    ours[to] != *id && continues(n, &ours[to], theirs)
                }) =>
            {
                Make::Patch(n)
            }
            _ => match (first.get(id), shape.and_then(|s| by_shape.get(&s))) {
                (Some(&from), _) => Make::Copy(from),
                (None, Some(&from)) => Make::Patch(from),
                (None, None) => Make::Literal,
            },
        };
        runs.push(to as u32, make);
    }
    Layout {
        geometry: target.geometry,
        digest: target.digest,
        source_pages: source.ids.len() as u32,
        runs: runs.0,
    }
}

/// How many pages `source` has when cut into `page_size` pages (0 for an empty source).
pub fn source_pages(source_len: u64, page_size: u32) -> u32 {
    u32::try_from(source_len.div_ceil(u64::from(page_size.max(1)))).unwrap_or(u32::MAX)
}

/// Why a manifest or a delta was refused. Every variant is the sender's fault except
/// [`DeltaError::SourceMismatch`], which means the delta was made against another source.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The bytes are not the format: a bad magic, a truncated field, a stray byte.
    #[error("malformed delta: {what}")]
    Malformed {
        /// What was wrong.
        what: &'static str,
    },
    /// The page size is not a power of two from 512 to 65536.
    #[error("page size {page_size} is not a power of two from 512 to 65536")]
    PageSize {
        /// The page size given.
        page_size: u32,
    },
    /// The image is longer than the quota allows (so its page count is over the quota too).
    #[error("an image of {length} bytes is over the quota of {max_length}")]
    TooLarge {
        /// The declared length.
        length: u64,
        /// The quota.
        max_length: u64,
    },
    /// Two runs describe the same target page.
    #[error("target page {page} is described twice")]
    Duplicate {
        /// The page.
        page: u32,
    },
    /// No run describes a target page.
    #[error("target page {page} is not described")]
    Gap {
        /// The first page missing.
        page: u32,
    },
    /// A run reaches past the target or the source.
    #[error("page {page} is outside the {what}'s {pages} pages")]
    OutOfRange {
        /// The first page out of range.
        page: u32,
        /// The pages there are.
        pages: u32,
        /// Which image.
        what: &'static str,
    },
    /// A literal page does not hash to its id.
    #[error("literal page {page} does not hash to its id")]
    PageMismatch {
        /// The target page.
        page: u32,
    },
    /// The assembled image does not have the SHA-256 the delta claims.
    #[error("the assembled image does not have the claimed SHA-256")]
    DigestMismatch,
    /// The delta was made against a source of another page count.
    #[error("the delta was made against a source of {claimed} pages; this one has {actual}")]
    SourceMismatch {
        /// The page count the delta names.
        claimed: u32,
        /// The source's.
        actual: u32,
    },
}

/// A bounds-checked cursor: every read past the end is [`DeltaError::Malformed`].
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DeltaError> {
        if self.bytes.len() < n {
            return Err(DeltaError::Malformed { what: "truncated" });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DeltaError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DeltaError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DeltaError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, DeltaError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, DeltaError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes
    }
}
