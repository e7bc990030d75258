//! Free-space scrubbing (spec §9.2, §11.3): zero every byte of a SQLite image that is not live
//! content, so deleted records (a credential deleted without VACUUM) never travel or rest.
//!
//! A page-level parser of the SQLite file format, with no SQLite underneath: it walks the schema
//! table from page 1, every b-tree from its root, every overflow chain from its cell, and the
//! free list, and accounts for every page. What it zeroes:
//!
//! - on a b-tree page: the gap between the cell pointer array and the cell content area, the body
//!   of each freeblock (its 4-byte link and size stay), and the fragments (gaps of at most three
//!   bytes that belong to no cell and no freeblock);
//! - on the last page of an overflow chain: the bytes after the payload's end;
//! - on a free-list trunk page: everything after the leaf-page array;
//! - on a free-list leaf page: the whole usable area.
//!
//! It zeroes bytes, never structure: headers, cell pointers, cells, freeblock links, link fields
//! and the per-page reserved region are left as they are, so the page count, the free list and
//! every b-tree read the same afterwards. Anything it cannot account for exactly (a page no
//! b-tree or list reaches, overlapping cells, a fragment count that differs from the one SQLite
//! keeps, a cycle) is refused with [`ScrubError`] and nothing is zeroed: a scrub that guesses
//! could destroy live records. The checks mirror the ones `PRAGMA integrity_check` makes, so a
//! file that passes it is scrubbed, not refused.
//!
//! The scrub is deterministic and idempotent: a scrubbed image reports no free space holding a
//! non-zero byte, which is what lets a hub store the scrubbed image and a client that pushed an
//! already scrubbed export see its own hash come back.

use std::ops::Range;

use serde::Serialize;

/// Why an image's free space could not be accounted for; nothing was zeroed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScrubError {
    /// The 100-byte header, the page size or the length does not describe a whole SQLite file.
    #[error("the SQLite header cannot be used to walk the file: {problem}")]
    Header {
        /// What is wrong.
        problem: String,
    },
    /// A page's structure cannot be accounted for.
    #[error("page {page} cannot be accounted for: {problem}")]
    Page {
        /// The 1-based page number.
        page: u32,
        /// What is wrong.
        problem: String,
    },
}

/// What a scrub found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScrubReport {
    /// Bytes that were not zero in free space and are now.
    pub bytes_zeroed: u64,
    /// The byte ranges that held a non-zero byte, ascending and disjoint (absolute offsets).
    pub ranges: Vec<Range<u64>>,
}

/// Returns the byte ranges of `image`'s free space that hold a non-zero byte: ascending,
/// disjoint, adjacent ranges merged. An image with an empty answer is already scrubbed.
pub fn dirty_free_space(image: &[u8]) -> Result<Vec<Range<u64>>, ScrubError> {
    let free = free_space(image)?;
    let mut dirty: Vec<Range<u64>> = Vec::new();
    for range in free {
        let bytes = &image[range.clone()];
        // An all-zero range (the common case in a scrubbed image) is scanned once.
        let Some(first) = bytes.iter().position(|&b| b != 0) else {
            continue;
        };
        let last = bytes.iter().rposition(|&b| b != 0).unwrap_or(first);
        let start = (range.start + first) as u64;
        let end = (range.start + last + 1) as u64;
        match dirty.last_mut() {
            Some(previous) if previous.end == start => previous.end = end,
            _ => dirty.push(start..end),
        }
    }
    Ok(dirty)
}

/// Zeroes `image`'s free space in place; on an error nothing is changed.
pub fn scrub_free_space_in_place(image: &mut [u8]) -> Result<ScrubReport, ScrubError> {
    let ranges = dirty_free_space(image)?;
    let mut bytes_zeroed = 0;
    for range in &ranges {
        let slice = &mut image[range.start as usize..range.end as usize];
        bytes_zeroed += slice.iter().filter(|&&b| b != 0).count() as u64;
        slice.fill(0);
    }
    Ok(ScrubReport {
        bytes_zeroed,
        ranges,
    })
}

/// Returns a copy of `image` with its free space zeroed; live content is unchanged.
pub fn scrub_free_space(image: &[u8]) -> Result<Vec<u8>, ScrubError> {
    let mut out = image.to_vec();
    scrub_free_space_in_place(&mut out)?;
    Ok(out)
}

/// The offset of the 1 GiB lock-byte page, which SQLite never uses for content.
const PENDING_BYTE: usize = 0x4000_0000;
/// B-trees deeper than this are refused: a 64 MiB file with 512-byte pages is far shallower.
const MAX_DEPTH: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Unseen,
    BTree,
    Overflow,
    FreeTrunk,
    FreeLeaf,
    PointerMap,
    LockByte,
}

struct Walk<'a> {
    image: &'a [u8],
    page_size: usize,
    usable: usize,
    n_pages: u32,
    roles: Vec<Role>,
    free: Vec<Range<usize>>,
}

fn header_error(problem: impl Into<String>) -> ScrubError {
    ScrubError::Header {
        problem: problem.into(),
    }
}

fn page_error(page: u32, problem: impl Into<String>) -> ScrubError {
    ScrubError::Page {
        page,
        problem: problem.into(),
    }
}

fn u16_at(bytes: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Reads a SQLite varint from `bytes[at..limit]`: its value and its length.
fn varint(bytes: &[u8], at: usize, limit: usize) -> Option<(u64, usize)> {
    snug_files::format::sqlite_varint(bytes.get(at..limit.min(bytes.len()))?)
}

/// Lists every free byte range of `image` (absolute offsets), zero or not.
fn free_space(image: &[u8]) -> Result<Vec<Range<usize>>, ScrubError> {
    let mut walk = Walk::new(image)?;
    walk.mark_special_pages()?;
    walk.free_list()?;
    let roots = walk.btree(1, true, 0, true)?;
    for root in roots {
        if root == 0 {
            continue;
        }
        walk.btree_root(root)?;
    }
    if let Some(unseen) = walk.roles.iter().skip(1).position(|&r| r == Role::Unseen) {
        return Err(page_error(
            unseen as u32 + 1,
            "no b-tree, overflow chain or free list reaches it",
        ));
    }
    walk.free.sort_by_key(|r| r.start);
    Ok(walk.free)
}

impl<'a> Walk<'a> {
    fn new(image: &'a [u8]) -> Result<Self, ScrubError> {
        if image.len() < 100 || &image[..16] != b"SQLite format 3\0" {
            return Err(header_error("not a SQLite image"));
        }
        let page_size = match u16_at(image, 16) {
            1 => 65536,
            n if n >= 512 && n.is_power_of_two() => n,
            n => return Err(header_error(format!("invalid page size {n}"))),
        };
        if image[21] != 64 || image[22] != 32 || image[23] != 32 {
            return Err(header_error("the payload fractions are not 64, 32, 32"));
        }
        let usable = page_size - usize::from(image[20]);
        if usable < 480 {
            return Err(header_error(format!("usable page size {usable} below 480")));
        }
        if !image.len().is_multiple_of(page_size) {
            return Err(header_error(format!(
                "{} bytes is not a whole number of {page_size}-byte pages",
                image.len()
            )));
        }
        let n_pages = u32::try_from(image.len() / page_size)
            .map_err(|_| header_error("more pages than SQLite can number"))?;
        let declared = u32_at(image, 28);
        if declared != 0 && image[24..28] == image[92..96] && declared != n_pages {
            // SQLite would ignore the pages past the declared count: bytes nothing reads, and
            // nothing this walk could vouch for.
            return Err(header_error(format!(
                "the header declares {declared} pages, the image holds {n_pages}"
            )));
        }
        let mut roles = vec![Role::Unseen; n_pages as usize + 1];
        roles[0] = Role::LockByte; // no page 0; keeps the index arithmetic 1-based
        Ok(Walk {
            image,
            page_size,
            usable,
            n_pages,
            roles,
            free: Vec::new(),
        })
    }

    fn page(&self, page: u32) -> &'a [u8] {
        let start = (page as usize - 1) * self.page_size;
        &self.image[start..start + self.page_size]
    }

    fn offset(&self, page: u32) -> usize {
        (page as usize - 1) * self.page_size
    }

    fn claim(&mut self, page: u32, role: Role, by: u32) -> Result<(), ScrubError> {
        if page == 0 || page > self.n_pages {
            return Err(page_error(
                by,
                format!("refers to page {page} of {}", self.n_pages),
            ));
        }
        match self.roles[page as usize] {
            Role::Unseen => {
                self.roles[page as usize] = role;
                Ok(())
            }
            existing => Err(page_error(
                page,
                format!("used twice (as {existing:?}, then as {role:?} from page {by})"),
            )),
        }
    }

    /// The lock-byte page and, in an auto-vacuum file, the pointer-map pages: structure only.
    fn mark_special_pages(&mut self) -> Result<(), ScrubError> {
        let lock_page = (PENDING_BYTE / self.page_size) as u64 + 1;
        if lock_page <= u64::from(self.n_pages) {
            self.roles[lock_page as usize] = Role::LockByte;
        }
        if u32_at(self.image, 52) != 0 {
            let interval = self.usable / 5 + 1;
            let mut page = 2usize;
            while page <= self.n_pages as usize {
                let map = if page as u64 == lock_page {
                    page + 1
                } else {
                    page
                };
                if map > self.n_pages as usize {
                    break;
                }
                self.claim(map as u32, Role::PointerMap, 1)?;
                page += interval;
            }
        }
        Ok(())
    }

    fn free_list(&mut self) -> Result<(), ScrubError> {
        let declared = u64::from(u32_at(self.image, 36));
        let mut trunk = u32_at(self.image, 32);
        let mut by = 1;
        let mut counted: u64 = 0;
        while trunk != 0 {
            self.claim(trunk, Role::FreeTrunk, by)?;
            counted += 1;
            let bytes = self.page(trunk);
            let leaves = u32_at(bytes, 4) as usize;
            if leaves > self.usable / 4 - 2 {
                return Err(page_error(
                    trunk,
                    format!("a free-list trunk listing {leaves} leaves"),
                ));
            }
            for i in 0..leaves {
                let leaf = u32_at(bytes, 8 + 4 * i);
                self.claim(leaf, Role::FreeLeaf, trunk)?;
                let start = self.offset(leaf);
                self.free.push(start..start + self.usable);
                counted += 1;
            }
            let start = self.offset(trunk);
            self.free.push(start + 8 + 4 * leaves..start + self.usable);
            by = trunk;
            trunk = u32_at(bytes, 0);
        }
        if counted != declared {
            return Err(page_error(
                1,
                format!("the header counts {declared} free pages, the free list holds {counted}"),
            ));
        }
        Ok(())
    }

    /// Walks a b-tree from a root named in the schema table.
    fn btree_root(&mut self, root: u32) -> Result<(), ScrubError> {
        if root > self.n_pages {
            return Err(page_error(
                1,
                format!("the schema names root page {root} of {}", self.n_pages),
            ));
        }
        let kind = self.page(root)[0];
        let table = match kind {
            0x05 | 0x0d => true,
            0x02 | 0x0a => false,
            _ => {
                return Err(page_error(root, format!("a root page of type {kind:#04x}")));
            }
        };
        self.claim(root, Role::BTree, 1)?;
        self.btree(root, table, 0, false).map(|_| ())
    }

    /// Walks the b-tree page `page` (already claimed, except page 1) and its subtree. With
    /// `schema`, returns the root pages the schema table's rows name.
    fn btree(
        &mut self,
        page: u32,
        table: bool,
        depth: usize,
        schema: bool,
    ) -> Result<Vec<u32>, ScrubError> {
        if depth > MAX_DEPTH {
            return Err(page_error(page, "a b-tree deeper than any real file"));
        }
        if page == 1 {
            self.claim(1, Role::BTree, 1)?;
        }
        let bytes = self.page(page);
        let base = self.offset(page);
        let h = if page == 1 { 100 } else { 0 };
        let kind = bytes[h];
        let (interior, is_table) = match kind {
            0x02 => (true, false),
            0x05 => (true, true),
            0x0a => (false, false),
            0x0d => (false, true),
            _ => return Err(page_error(page, format!("b-tree page type {kind:#04x}"))),
        };
        if is_table != table {
            return Err(page_error(page, "a table page in an index or the reverse"));
        }
        let usable = self.usable;
        let header_len = if interior { 12 } else { 8 };
        let n_cells = u16_at(bytes, h + 3);
        let content_start = match u16_at(bytes, h + 5) {
            0 => 65536,
            n => n,
        };
        let pointers_end = h + header_len + 2 * n_cells;
        if pointers_end > content_start || content_start > usable {
            return Err(page_error(
                page,
                format!(
                    "{n_cells} cell pointers end at {pointers_end}, content starts at \
                     {content_start} of {usable}"
                ),
            ));
        }
        self.free.push(base + pointers_end..base + content_start);

        // Every cell and freeblock as (start, end, is_freeblock), to account for every byte of
        // the content area as SQLite's integrity_check does.
        let mut extents: Vec<(usize, usize, bool)> = Vec::with_capacity(n_cells + 4);
        let mut children: Vec<u32> = Vec::new();
        let mut overflows: Vec<(u32, u64)> = Vec::new();
        let mut roots: Vec<u32> = Vec::new();
        for i in 0..n_cells {
            let at = u16_at(bytes, h + header_len + 2 * i);
            if at < content_start || at >= usable {
                return Err(page_error(
                    page,
                    format!("cell {i} at {at} outside the content"),
                ));
            }
            let cell = parse_cell(bytes, at, usable, kind)
                .ok_or_else(|| page_error(page, format!("cell {i} at {at} runs off the page")))?;
            extents.push((at, at + cell.size, false));
            if let Some(child) = cell.child {
                children.push(child);
            }
            if let Some(first) = cell.overflow {
                overflows.push((first, cell.payload - cell.local as u64));
            }
            if schema && !interior {
                let payload = self.payload(page, bytes, at, &cell)?;
                roots.push(schema_root(&payload).ok_or_else(|| {
                    page_error(page, format!("schema row in cell {i} is not a record"))
                })?);
            }
        }
        let mut next = u16_at(bytes, h + 1);
        let mut floor = 0;
        while next != 0 {
            if next < floor || next + 4 > usable {
                return Err(page_error(
                    page,
                    format!("freeblock at {next} out of order"),
                ));
            }
            let size = u16_at(bytes, next + 2);
            if size < 4 || next + size > usable {
                return Err(page_error(
                    page,
                    format!("freeblock at {next} of size {size}"),
                ));
            }
            extents.push((next, next + size, true));
            floor = next + size + 1;
            next = u16_at(bytes, next);
        }
        extents.sort_unstable();
        let mut previous_end = content_start;
        let mut fragments = 0;
        for &(start, end, freeblock) in &extents {
            if start < previous_end {
                return Err(page_error(page, format!("byte {start} has two uses")));
            }
            fragments += start - previous_end;
            self.free.push(base + previous_end..base + start);
            if freeblock {
                self.free.push(base + start + 4..base + end);
            }
            previous_end = end;
        }
        fragments += usable - previous_end;
        self.free.push(base + previous_end..base + usable);
        if fragments != usize::from(bytes[h + 7]) {
            return Err(page_error(
                page,
                format!(
                    "{fragments} fragmented bytes, the header counts {}",
                    bytes[h + 7]
                ),
            ));
        }

        for (first, remaining) in overflows {
            self.overflow_chain(page, first, remaining)?;
        }
        if interior {
            children.push(u32_at(bytes, h + 8));
        }
        for child in children {
            self.claim(child, Role::BTree, page)?;
            roots.extend(self.btree(child, table, depth + 1, schema)?);
        }
        Ok(roots)
    }

    /// Claims the overflow chain starting at `first` carrying `remaining` payload bytes, and
    /// frees the unused tail of its last page.
    fn overflow_chain(
        &mut self,
        by: u32,
        first: u32,
        mut remaining: u64,
    ) -> Result<(), ScrubError> {
        let per_page = (self.usable - 4) as u64;
        let mut page = first;
        let mut from = by;
        loop {
            self.claim(page, Role::Overflow, from)?;
            if remaining <= per_page {
                let base = self.offset(page);
                self.free
                    .push(base + 4 + remaining as usize..base + self.usable);
                return Ok(());
            }
            remaining -= per_page;
            from = page;
            page = u32_at(self.page(page), 0);
        }
    }

    /// Reassembles a cell's whole payload, following its overflow chain read-only.
    fn payload(
        &self,
        page: u32,
        bytes: &[u8],
        at: usize,
        cell: &Cell,
    ) -> Result<Vec<u8>, ScrubError> {
        let start = at + cell.header;
        let mut payload = bytes[start..start + cell.local].to_vec();
        let mut next = cell.overflow.unwrap_or(0);
        let per_page = self.usable - 4;
        let mut hops = 0u32;
        while (payload.len() as u64) < cell.payload {
            if next == 0 || next > self.n_pages || hops > self.n_pages {
                return Err(page_error(page, "a schema row's overflow chain ends early"));
            }
            let overflow = self.page(next);
            let take = per_page.min((cell.payload - payload.len() as u64) as usize);
            payload.extend_from_slice(&overflow[4..4 + take]);
            next = u32_at(overflow, 0);
            hops += 1;
        }
        Ok(payload)
    }
}

/// One cell as the b-tree layer sees it.
struct Cell {
    /// Bytes on the page, including the 4-byte overflow pointer (at least 4).
    size: usize,
    /// Bytes from the cell's start to its payload.
    header: usize,
    /// Total payload bytes.
    payload: u64,
    /// Payload bytes stored on the page.
    local: usize,
    /// The first overflow page, when the payload spills.
    overflow: Option<u32>,
    /// The left child, on an interior page.
    child: Option<u32>,
}

/// Parses the cell at `at` on a page of type `kind` (SQLite's btreeParseCellPtr family).
fn parse_cell(bytes: &[u8], at: usize, usable: usize, kind: u8) -> Option<Cell> {
    let mut cursor = at;
    let child = if kind == 0x02 || kind == 0x05 {
        if cursor + 4 > usable {
            return None;
        }
        cursor += 4;
        Some(u32_at(bytes, at))
    } else {
        None
    };
    if kind == 0x05 {
        let (_, len) = varint(bytes, cursor, usable)?;
        return Some(Cell {
            size: cursor + len - at,
            header: cursor + len - at,
            payload: 0,
            local: 0,
            overflow: None,
            child,
        });
    }
    let (payload, len) = varint(bytes, cursor, usable)?;
    cursor += len;
    if kind == 0x0d {
        let (_, len) = varint(bytes, cursor, usable)?;
        cursor += len;
    }
    if payload > i32::MAX as u64 {
        return None;
    }
    let local = snug_files::format::local_payload(kind, usable as u64, payload)? as usize;
    let spills = (local as u64) < payload;
    let end = cursor + local + if spills { 4 } else { 0 };
    if end > usable {
        return None;
    }
    let overflow = spills.then(|| u32_at(bytes, cursor + local));
    Some(Cell {
        size: (end - at).max(4),
        header: cursor - at,
        payload,
        local,
        overflow,
        child,
    })
}

/// The `rootpage` column (the fourth) of a schema-table record; 0 for a NULL.
fn schema_root(record: &[u8]) -> Option<u32> {
    let (header_len, mut cursor) = varint(record, 0, record.len())?;
    let header_len = usize::try_from(header_len).ok()?;
    if header_len > record.len() {
        return None;
    }
    let mut body = header_len;
    for column in 0..4 {
        let (serial, len) = varint(record, cursor, header_len)?;
        cursor += len;
        let size = match serial {
            0 | 8 | 9 => 0,
            1..=4 => serial as usize,
            5 => 6,
            6 | 7 => 8,
            10 | 11 => return None,
            n => ((n - 12) / 2) as usize,
        };
        if column == 3 {
            let value = record.get(body..body + size)?;
            let root = match serial {
                0 | 8 => 0,
                9 => 1,
                1..=6 => {
                    let mut v: i64 = if value[0] & 0x80 != 0 { -1 } else { 0 };
                    for &b in value {
                        v = (v << 8) | i64::from(b);
                    }
                    v
                }
                _ => return None,
            };
            return u32::try_from(root).ok();
        }
        body += size;
    }
    None
}

#[cfg(test)]
mod tests;
