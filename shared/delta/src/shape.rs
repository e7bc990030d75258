//! A page's shape: its bytes with every field that names another page zeroed, so that a page
//! that only moved its neighbours is found again after they moved.
//!
//! An export is VACUUMed, so a row inserted early moves every later page by one or more page
//! numbers, and every page that *names* a moved page changes by those few bytes: an overflow
//! page starts with its successor's number, a leaf cell that spills ends its local payload with
//! its first overflow page's, an interior page names each child. Their ids no longer match
//! anything in the base, though all their other bytes do. A page's **shape** is the first 8
//! bytes of the SHA-256 of the page with those fields zeroed, followed by the fields' offsets
//! (so two pages share a shape only if their fields sit at the same places); a page with no
//! such field has its id as its shape. A target page whose shape a source page shares is sent
//! as that source page plus the bytes of its fields (a [`crate::Run::Patch`]).
//!
//! The fields are found by reading the page as SQLite's file format lays it out
//! (<https://www.sqlite.org/fileformat2.html>, §1.6 and §1.7): the 100-byte database header on
//! page 1; a b-tree page's right-most pointer, each interior cell's left child and each spilling
//! cell's overflow pointer, the local payload size computed as §1.6 says; any other page's first
//! four bytes (an overflow page's next page; in a VACUUMed file there are no free-list pages).
//! Nothing here is trusted: a page that does not parse has no fields, and a wrong guess only
//! costs a literal page, since the receiver checks every patched page against its id.

use std::ops::Range;

use sha2::{Digest as _, Sha256};
use snug_files::format::{local_payload, sqlite_varint as varint};

use crate::{ID_LEN, PageId};

/// The database header's length on page 1.
pub(crate) const DB_HEADER: usize = 100;

/// What a page's fields depend on beyond the page itself: the usable size of a page (the page
/// size less the reserved bytes the database header names at offset 20).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Format {
    usable: usize,
}

impl Format {
    /// The format of `image` cut into `page_size` pages.
    pub(crate) fn of(image: &[u8], page_size: u32) -> Self {
        let reserved = image.get(20).copied().unwrap_or(0) as usize;
        Self {
            usable: (page_size as usize).saturating_sub(reserved),
        }
    }
}

/// The byte ranges of page `index` that name other pages, sorted and disjoint; empty for a page
/// that does not parse.
pub(crate) fn fields(format: Format, index: u32, page: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    if fields_into(format, index, page, &mut out).is_none() {
        out.clear();
    }
    out.sort_by_key(|r| r.start);
    // Overlapping fields only occur in a page that lies about its cells; such a page has none.
    if out.windows(2).any(|w| w[0].end > w[1].start)
        || out.last().is_some_and(|r| r.end > page.len())
    {
        out.clear();
    }
    out
}

fn fields_into(format: Format, index: u32, page: &[u8], out: &mut Vec<Range<usize>>) -> Option<()> {
    let usable = format.usable.min(page.len());
    let h = if index == 0 {
        out.push(0..DB_HEADER.min(page.len()));
        DB_HEADER
    } else {
        0
    };
    let kind = *page.get(h)?;
    let interior = match kind {
        0x02 | 0x05 => true,
        0x0a | 0x0d => false,
        // Page 1 is always a b-tree page; any other page that is not one is an overflow page
        // whose first four bytes are its successor's number.
        _ if index == 0 => return None,
        _ => {
            out.push(0..4.min(page.len()));
            return Some(());
        }
    };
    let cells = usize::from(u16::from_be_bytes([*page.get(h + 3)?, *page.get(h + 4)?]));
    let header = if interior { 12 } else { 8 };
    if interior {
        out.push(h + 8..h + 12);
    }
    for cell in 0..cells {
        let at = h + header + 2 * cell;
        let start = usize::from(u16::from_be_bytes([*page.get(at)?, *page.get(at + 1)?]));
        if start >= usable {
            return None;
        }
        let mut cursor = start;
        if interior {
            out.push(cursor..cursor + 4);
            cursor += 4;
        }
        if kind == 0x05 {
            continue;
        }
        let (payload, n) = varint(page.get(cursor..usable)?)?;
        cursor += n;
        if kind == 0x0d {
            let (_, n) = varint(page.get(cursor..usable)?)?;
            cursor += n;
        }
        let local = local_payload(kind, format.usable as u64, payload)?;
        if local < payload {
            let pointer = cursor.checked_add(usize::try_from(local).ok()?)?;
            if pointer + 4 > usable {
                return None;
            }
            out.push(pointer..pointer + 4);
        }
    }
    Some(())
}

/// Page `index`'s shape, given its id (see the module docs).
pub(crate) fn shape(format: Format, index: u32, page: &[u8], id: PageId) -> PageId {
    let fields = fields(format, index, page);
    if fields.is_empty() {
        return id;
    }
    let mut masked = page.to_vec();
    let mut hasher = Sha256::new();
    for field in &fields {
        masked[field.clone()].fill(0);
    }
    hasher.update(&masked);
    for field in &fields {
        hasher.update((field.start as u32).to_le_bytes());
        hasher.update((field.end as u32).to_le_bytes());
    }
    let mut out = [0; ID_LEN];
    out.copy_from_slice(&hasher.finalize()[..ID_LEN]);
    PageId(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflow_page_names_its_successor_in_its_first_four_bytes() {
        let format = Format { usable: 512 };
        let mut page = vec![0x5a; 512];
        page[..4].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(fields(format, 3, &page), vec![0..4]);
    }

    #[test]
    fn a_page_that_lies_about_its_cells_has_no_fields() {
        let format = Format { usable: 512 };
        // An interior table page claiming 300 cells whose pointers run off the page.
        let mut page = vec![0; 512];
        page[0] = 0x05;
        page[3..5].copy_from_slice(&300u16.to_be_bytes());
        assert!(fields(format, 2, &page).is_empty());
        // A cell pointer past the usable size.
        page[3..5].copy_from_slice(&1u16.to_be_bytes());
        page[12..14].copy_from_slice(&600u16.to_be_bytes());
        assert!(fields(format, 2, &page).is_empty());
    }
}
