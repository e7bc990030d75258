//! Compressed pages: a changed page sent as a zstd frame whose dictionary is the source's own
//! pages where the change happened (issue 38), so the rows a b-tree split or a rebalance moved
//! between pages cost their references, not their bytes.
//!
//! A literal page travels through the body's zstd coding, which finds nothing of the source: a
//! leaf that split sends the half it kept and the half it gave away, though the receiver holds
//! both in the page they came from. A compressed page names up to [`MAX_REFERENCES`] source pages
//! (the page at its own place, then the places of the other changed pages nearest it, since an
//! edit moves rows among the pages it changes) and carries one zstd frame made with their bytes
//! as its dictionary. Only a sender that holds the receiver's exact source bytes may send one
//! (a device its kept copy of the base, the origin the revision a device's file is), and only
//! where the frame clearly beats the page's own compression: the body's coding compresses a
//! literal page about as well as a frame without a dictionary, and cannot compress a frame.
//!
//! Wire form, after the page's id: the reference count (u8, 1..=[`MAX_REFERENCES`]), each
//! reference (a source page, u32), the frame's length (u32) and the frame. Decoding is bounded:
//! the frame must fill the page exactly, and a frame that does not, or does not decode, is
//! malformed. The dictionary starts with one zero byte, so it is always raw content to zstd,
//! never read as a trained dictionary, whatever the first page holds.

use zstd::zstd_safe::{CCtx, CParameter, DCtx};

use super::*;

/// The most source pages a compressed page's dictionary names: an edit that splits a leaf of a
/// deep b-tree rebalances a page or two on every level, and each level's cells move up and down
/// among them.
pub(crate) const MAX_REFERENCES: usize = 16;
/// The most bytes of source pages a dictionary holds, so larger pages name fewer.
const MAX_DICTIONARY: usize = 64 << 10;
/// Reference count and frame length.
pub(crate) const COMPRESSED_HEADER: usize = 1 + 4;
/// The level frames are made at: the body's own.
const LEVEL: i32 = 3;

/// The bytes a compressed page of `references` and a frame of `frame` bytes takes after its id.
pub(crate) fn compressed_len(references: usize, frame: usize) -> usize {
    COMPRESSED_HEADER + 4 * references + frame
}

/// The source pages a changed target page `to` is compressed against: its own place, then the
/// places of the other changed pages (`changed`, in order) nearest it, each one the receiver
/// holds (`held`), as many as pages of `page_size` fit the dictionary.
pub(crate) fn references(
    to: u32,
    changed: &[u32],
    page_size: u32,
    held: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let most = (MAX_DICTIONARY / page_size.max(1) as usize).clamp(1, MAX_REFERENCES);
    let mut out: Vec<u32> = Vec::with_capacity(most);
    if held(to) {
        out.push(to);
    }
    // `changed` is in order: the nearest lie either side of where `to` would go.
    let at = changed.partition_point(|&p| p < to);
    let (mut left, mut right) = (at, at);
    while out.len() < most && (left > 0 || right < changed.len()) {
        let below = left.checked_sub(1).map(|i| changed[i]);
        let above = changed.get(right).copied();
        let next = match (below, above) {
            (Some(b), Some(a)) if to - b <= a.abs_diff(to) => {
                left -= 1;
                b
            }
            (_, Some(a)) => {
                right += 1;
                a
            }
            (Some(b), None) => {
                left -= 1;
                b
            }
            (None, None) => break,
        };
        if next != to && held(next) {
            out.push(next);
        }
    }
    out
}

/// The dictionary a frame is made and read with: a zero byte, then the referenced pages, the
/// first named last (nearest the page, where zstd's matches cost least).
fn dictionary(pages: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + pages.iter().map(|p| p.len()).sum::<usize>());
    out.push(0);
    for page in pages.iter().rev() {
        out.extend_from_slice(page);
    }
    out
}

/// Compresses pages against source pages; one context serves every page of a delta.
pub(crate) struct Compressor {
    cctx: CCtx<'static>,
}

impl Compressor {
    pub(crate) fn new() -> Option<Self> {
        let mut cctx = CCtx::try_create()?;
        cctx.set_parameter(CParameter::CompressionLevel(LEVEL))
            .ok()?;
        cctx.set_parameter(CParameter::ChecksumFlag(false)).ok()?;
        Some(Self { cctx })
    }

    /// The frame of `page` against `references` of `source` (each page cut by `source_page`),
    /// when it is worth sending: at most three quarters of the page compressed alone, and
    /// smaller than the page with its header. `None` otherwise, or if zstd fails.
    pub(crate) fn frame<'s>(
        &mut self,
        page: &[u8],
        references: &[u32],
        source_page: impl Fn(u32) -> &'s [u8],
    ) -> Option<Vec<u8>> {
        if references.is_empty() {
            return None;
        }
        let alone = self.compress(page, &[0])?;
        let pages: Vec<&[u8]> = references.iter().map(|&r| source_page(r)).collect();
        let dict = dictionary(&pages);
        let frame = self.compress(page, &dict)?;
        let worth = compressed_len(references.len(), frame.len()) * 4 <= alone.len() * 3
            && compressed_len(references.len(), frame.len()) < page.len();
        worth.then_some(frame)
    }

    fn compress(&mut self, page: &[u8], dict: &[u8]) -> Option<Vec<u8>> {
        self.cctx.load_dictionary(dict).ok()?;
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(page.len()));
        self.cctx.compress2(&mut out, page).ok()?;
        Some(out)
    }
}

/// Decompresses compressed pages; one context serves every page of a delta.
pub(crate) struct Decompressor {
    dctx: DCtx<'static>,
}

impl Decompressor {
    pub(crate) fn new() -> Result<Self, DeltaError> {
        Ok(Self {
            dctx: DCtx::try_create().ok_or(BAD_FRAME)?,
        })
    }

    /// Decompresses `frame` against `references` of the source into exactly `len` bytes.
    pub(crate) fn page<'s>(
        &mut self,
        frame: &[u8],
        references: impl Iterator<Item = &'s [u8]>,
        len: usize,
    ) -> Result<Vec<u8>, DeltaError> {
        self.dctx
            .load_dictionary(&dictionary(&references.collect::<Vec<_>>()))
            .map_err(|_| BAD_FRAME)?;
        let mut out = Vec::with_capacity(len);
        match self.dctx.decompress(&mut out, frame) {
            Ok(n) if n == len && out.len() == len => Ok(out),
            _ => Err(BAD_FRAME),
        }
    }
}

const BAD_FRAME: DeltaError = DeltaError::Malformed {
    what: "a compressed page that does not decode to its page",
};
