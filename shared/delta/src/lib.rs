//! Delta sync's codec: a small change to a user database costs a small transfer (issue 21).
//!
//! An image is cut into pages of a size the client chooses (its SQLite page size); a page is
//! named by a [`PageId`], the first 8 bytes of its SHA-256. Two wire formats, both binary,
//! little-endian, with fixed-width fields:
//!
//! - a [`Manifest`] names an image: its length, page size, SHA-256 and every page's id. A client
//!   sends one to push (the new image's pages) or to pull (the pages of the file it has).
//! - a [`Delta`] describes how to build an image from a *source* (the base revision on a push,
//!   the client's own file on a pull): runs that tile the target's pages in order, each either
//!   copied from a range of source pages or literal, followed by the literal pages, each with
//!   its id. Without its literal pages (a [`Layout`]) it is the origin's answer to a push
//!   manifest: which pages to copy from the base and which it lacks.
//!
//! [`plan`] matches a manifest against a source's page ids; [`Delta::assemble`] builds the
//! image from a source and checks every literal page against its id and the whole image against
//! the SHA-256 the delta claims, so a prefix collision or a lie is caught before any byte is
//! used. Parsing is strict and bounded by [`Limits`] (the per-user quota): a hostile input
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

#[cfg(test)]
mod tests;

/// Bytes in a [`PageId`].
pub const ID_LEN: usize = 8;
/// Smallest accepted page size (SQLite's smallest).
pub const MIN_PAGE_SIZE: u32 = 512;
/// Largest accepted page size (SQLite's largest).
pub const MAX_PAGE_SIZE: u32 = 65536;

const MANIFEST_MAGIC: &[u8; 4] = b"SDM1";
const DELTA_MAGIC: &[u8; 4] = b"SDD1";
/// Magic, page size, length, SHA-256.
const MANIFEST_HEADER: usize = 4 + 4 + 8 + 32;
/// Magic, page size, length, SHA-256, source pages, run count.
const DELTA_HEADER: usize = 4 + 4 + 8 + 32 + 4 + 4;
/// Kind, to, count, from.
const RUN_LEN: usize = 1 + 4 + 4 + 4;

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

    /// The largest encoded manifest these limits accept (a transport can refuse a bigger body
    /// before reading it).
    pub fn max_manifest_len(&self) -> u64 {
        MANIFEST_HEADER as u64 + self.max_pages() * ID_LEN as u64
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
}

/// An image named page by page: what a client sends to push or to pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The image's length and page size.
    pub geometry: Geometry,
    /// The SHA-256 of the whole image.
    pub digest: [u8; 32],
    /// One id per page, in order.
    pub ids: Vec<PageId>,
}

impl Manifest {
    /// Names `image`, cut into pages of `page_size`.
    pub fn of(image: &[u8], page_size: u32) -> Result<Self, DeltaError> {
        let limits = Limits {
            max_length: image.len() as u64,
        };
        let geometry = Geometry::new(image.len() as u64, page_size, &limits)?;
        Ok(Self {
            geometry,
            digest: sha256(image),
            ids: page_ids(image, page_size),
        })
    }

    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MANIFEST_HEADER + self.ids.len() * ID_LEN);
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&self.geometry.page_size.to_le_bytes());
        out.extend_from_slice(&self.geometry.length.to_le_bytes());
        out.extend_from_slice(&self.digest);
        for id in &self.ids {
            out.extend_from_slice(&id.0);
        }
        out
    }

    /// Parses the wire form strictly: exactly one id per page, nothing after the last.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Self, DeltaError> {
        let mut r = Reader::new(bytes);
        if r.take(4)? != MANIFEST_MAGIC {
            return Err(DeltaError::Malformed {
                what: "not a delta manifest (magic)",
            });
        }
        let page_size = r.u32()?;
        let length = r.u64()?;
        let digest = r.array::<32>()?;
        let geometry = Geometry::new(length, page_size, limits)?;
        let pages = geometry.pages() as usize;
        if r.rest().len() != pages * ID_LEN {
            return Err(DeltaError::Malformed {
                what: "a manifest whose id count is not its page count",
            });
        }
        let ids = r
            .rest()
            .chunks_exact(ID_LEN)
            .map(|c| {
                let mut id = [0; ID_LEN];
                id.copy_from_slice(c);
                PageId(id)
            })
            .collect();
        Ok(Self {
            geometry,
            digest,
            ids,
        })
    }
}

/// Every page's id, `image` cut into pages of `page_size`.
pub fn page_ids(image: &[u8], page_size: u32) -> Vec<PageId> {
    image.chunks(page_size as usize).map(PageId::of).collect()
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
}

impl Run {
    fn to(&self) -> u32 {
        match *self {
            Run::Copy { to, .. } | Run::Literal { to, .. } => to,
        }
    }

    fn count(&self) -> u32 {
        match *self {
            Run::Copy { count, .. } | Run::Literal { count, .. } => count,
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
    /// The target pages sent literally, in order.
    pub fn literal_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs.iter().flat_map(|run| match *run {
            Run::Literal { to, count } => to..to + count,
            Run::Copy { .. } => 0..0,
        })
    }

    /// How many pages are sent literally.
    pub fn literal_count(&self) -> u64 {
        self.runs
            .iter()
            .map(|run| match run {
                Run::Literal { count, .. } => u64::from(*count),
                Run::Copy { .. } => 0,
            })
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
        if r.take(4)? != DELTA_MAGIC {
            return Err(DeltaError::Malformed {
                what: "not a delta (magic)",
            });
        }
        let page_size = r.u32()?;
        let length = r.u64()?;
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
            if let Run::Copy { from, .. } = run
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

/// Matches `target`'s pages against a source's page ids: every target page whose id the source
/// holds is copied (continuing the previous copy where the source's next page matches, so a
/// shifted range stays one run), every other one is literal.
pub fn plan(target: &Manifest, source: &[PageId]) -> Layout {
    let mut first: HashMap<PageId, u32> = HashMap::with_capacity(source.len());
    for (idx, id) in source.iter().enumerate() {
        first.entry(*id).or_insert(idx as u32);
    }
    let mut runs: Vec<Run> = Vec::new();
    for (to, id) in target.ids.iter().enumerate() {
        let to = to as u32;
        if let Some(Run::Copy { from, count, .. }) = runs.last_mut() {
            let next = *from + *count;
            if source.get(next as usize) == Some(id) {
                *count += 1;
                continue;
            }
        }
        match first.get(id) {
            Some(&from) => runs.push(Run::Copy { to, from, count: 1 }),
            None => match runs.last_mut() {
                Some(Run::Literal { count, .. }) => *count += 1,
                _ => runs.push(Run::Literal { to, count: 1 }),
            },
        }
    }
    Layout {
        geometry: target.geometry,
        digest: target.digest,
        source_pages: source.len() as u32,
        runs,
    }
}

/// A layout with its literal pages: a push body, or a pull answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    /// How the image is built.
    pub layout: Layout,
    /// Each literal page's id followed by its bytes, in target order.
    pub literals: Vec<u8>,
}

impl Delta {
    /// Fills `layout`'s literal pages from `image` (the target itself).
    pub fn build(layout: Layout, image: &[u8]) -> Self {
        let mut literals = Vec::new();
        for page in layout.literal_pages() {
            let bytes = &image[layout.geometry.page_range(page)];
            literals.extend_from_slice(&PageId::of(bytes).0);
            literals.extend_from_slice(bytes);
        }
        Self { layout, literals }
    }

    /// The wire form: the layout, then the literal pages.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.layout.encode();
        out.extend_from_slice(&self.literals);
        out
    }

    /// Parses a delta against a source of `source_len` bytes: its layout strictly, and then
    /// exactly as many literal bytes as its literal pages take.
    pub fn parse(bytes: &[u8], limits: &Limits, source_len: u64) -> Result<Self, DeltaError> {
        let (layout, rest) = Layout::parse(bytes, limits, source_len)?;
        let expected: u64 = layout
            .literal_pages()
            .map(|page| (ID_LEN + layout.geometry.page_len(page)) as u64)
            .sum();
        if rest.len() as u64 != expected {
            return Err(DeltaError::Malformed {
                what: "literal pages that are not exactly what the layout names",
            });
        }
        Ok(Self {
            layout,
            literals: rest.to_vec(),
        })
    }

    /// Builds the image from `source` (cut into the layout's page size), checking every literal
    /// page against its id, every copied page's length, and the whole image against the
    /// layout's SHA-256. Nothing is returned unless every check passes.
    pub fn assemble(&self, source: &[u8]) -> Result<Vec<u8>, DeltaError> {
        let layout = &self.layout;
        let geometry = layout.geometry;
        let source_geometry = Geometry {
            length: source.len() as u64,
            page_size: geometry.page_size,
        };
        let source_pages = source_pages(source.len() as u64, geometry.page_size);
        if source_pages != layout.source_pages {
            return Err(DeltaError::SourceMismatch {
                claimed: layout.source_pages,
                actual: source_pages,
            });
        }
        let mut image = Vec::with_capacity(geometry.length as usize);
        let mut literals = self.literals.as_slice();
        for run in &layout.runs {
            for k in 0..run.count() {
                let to = run.to() + k;
                let want = geometry.page_len(to);
                match *run {
                    Run::Copy { from, .. } => {
                        let page = &source[source_geometry.page_range(from + k)];
                        if page.len() != want {
                            // Only a source's short last page can differ, and only the
                            // target's last page may be short.
                            return Err(DeltaError::OutOfRange {
                                page: from + k,
                                pages: source_pages,
                                what: "source (a short page)",
                            });
                        }
                        image.extend_from_slice(page);
                    }
                    Run::Literal { .. } => {
                        if literals.len() < ID_LEN + want {
                            return Err(DeltaError::Malformed {
                                what: "literal pages end early",
                            });
                        }
                        let (id, rest) = literals.split_at(ID_LEN);
                        let (page, rest) = rest.split_at(want);
                        if PageId::of(page).0 != id {
                            return Err(DeltaError::PageMismatch { page: to });
                        }
                        image.extend_from_slice(page);
                        literals = rest;
                    }
                }
            }
        }
        if !literals.is_empty() {
            return Err(DeltaError::Malformed {
                what: "literal bytes after the last page",
            });
        }
        if sha256(&image) != layout.digest {
            return Err(DeltaError::DigestMismatch);
        }
        Ok(image)
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
