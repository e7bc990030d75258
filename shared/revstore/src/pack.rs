//! The layout of a pack, shared by the embedded store's pack files and the object store's pack
//! objects: how a pack is named, where a chunk sits in one, and the extents an image reads.
//!
//! A pack holds the new chunks of one put back to back. Its name is the SHA-256 of the digests
//! of the chunks it holds, in order, so the name determines the content and a second pack with
//! the same name can only be the same bytes (create-once compares them anyway). An image keeps,
//! beside its manifest (the chunk digests in order), its chunks' locations coalesced into extents:
//! a first revision is one extent, a revision with 1% of its pages changed a few hundred, so a
//! download reads a few ranges instead of one per page.

use sha2::{Digest as _, Sha256};

use crate::types::Digest;

/// Suffix of pack names; anything else where packs are kept makes reclamation refuse.
pub(crate) const PACK_SUFFIX: &str = ".pack";

/// The content address of a pack holding `chunks` in this order.
pub(crate) fn pack_name(chunks: &[(Digest, u64, u32)]) -> String {
    let mut h = Sha256::new();
    for (digest, _, _) in chunks {
        h.update(digest.as_bytes());
    }
    format!("{}{PACK_SUFFIX}", hex::encode(h.finalize()))
}

/// Whether `name` is a well-formed pack file name.
pub(crate) fn is_pack_name(name: &str) -> bool {
    name.strip_suffix(PACK_SUFFIX)
        .is_some_and(|stem| stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Where one chunk of an image is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkLoc {
    pub(crate) pack: i64,
    pub(crate) offset: u64,
    pub(crate) len: u32,
}

/// A run of consecutive bytes in one pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) pack: i64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// Merges per-chunk locations into runs: a first revision is a single extent, and a revision with
/// 1% of its pages changed is a few hundred.
pub(crate) fn coalesce(locs: &[ChunkLoc]) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::new();
    for loc in locs {
        match out.last_mut() {
            Some(last) if last.pack == loc.pack && last.offset + last.len == loc.offset => {
                last.len += u64::from(loc.len)
            }
            _ => out.push(Extent {
                pack: loc.pack,
                offset: loc.offset,
                len: u64::from(loc.len),
            }),
        }
    }
    out
}

pub(crate) fn encode_extents(extents: &[Extent]) -> Vec<u8> {
    let mut out = Vec::with_capacity(extents.len() * 24);
    for e in extents {
        out.extend_from_slice(&e.pack.to_le_bytes());
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
    }
    out
}

pub(crate) fn decode_extents(bytes: &[u8]) -> Option<Vec<Extent>> {
    if !bytes.len().is_multiple_of(24) {
        return None;
    }
    let word = |b: &[u8]| <[u8; 8]>::try_from(b).ok();
    bytes
        .chunks_exact(24)
        .map(|c| {
            Some(Extent {
                pack: i64::from_le_bytes(word(&c[0..8])?),
                offset: u64::from_le_bytes(word(&c[8..16])?),
                len: u64::from_le_bytes(word(&c[16..24])?),
            })
        })
        .collect()
}

/// Splits extents back into per-chunk locations, given the chunk size and the image size.
pub(crate) fn expand(extents: &[Extent], chunk_size: u64) -> Vec<ChunkLoc> {
    let mut out = Vec::new();
    for e in extents {
        let mut off = 0;
        while off < e.len {
            let len = chunk_size.min(e.len - off);
            out.push(ChunkLoc {
                pack: e.pack,
                offset: e.offset + off,
                len: len as u32,
            });
            off += len;
        }
    }
    out
}

/// An image's extents with every chunk in `fresh` pointed at its fresh copy, when a put wrote a
/// damaged chunk afresh and the index moved to the copy (so every image holding the chunk is
/// healed, and the damaged copy's pack can go once nothing else is in it); `None` when the image
/// holds none of them where it is not already, or its extents do not cover its manifest.
pub(crate) fn repoint(
    extents: &[Extent],
    manifest: &[Digest],
    chunk_size: u64,
    fresh: &std::collections::HashMap<Digest, ChunkLoc>,
) -> Option<Vec<Extent>> {
    let mut locs = expand(extents, chunk_size);
    if locs.len() != manifest.len() {
        return None;
    }
    let mut moved = false;
    for (loc, digest) in locs.iter_mut().zip(manifest) {
        if let Some(copy) = fresh.get(digest).filter(|copy| *copy != loc) {
            *loc = *copy;
            moved = true;
        }
    }
    moved.then(|| coalesce(&locs))
}

/// [`repoint`] over an image's manifest and its extents as stored: the new encoded extents, or
/// `None` when there is nothing to move or the extents do not decode.
pub(crate) fn repoint_row(
    manifest: &[Digest],
    extents: Option<&[u8]>,
    chunk_size: u64,
    fresh: &std::collections::HashMap<Digest, ChunkLoc>,
) -> Option<Vec<u8>> {
    let extents = decode_extents(extents?)?;
    repoint(&extents, manifest, chunk_size, fresh).map(|moved| encode_extents(&moved))
}

/// The leading chunks of an image that together hold at least its first `len` bytes (all of
/// them when the image is shorter).
pub(crate) fn prefix(locs: &[ChunkLoc], len: u64) -> &[ChunkLoc] {
    let mut covered = 0u64;
    let mut n = 0;
    while n < locs.len() && covered < len {
        covered += u64::from(locs[n].len);
        n += 1;
    }
    &locs[..n]
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn loc(pack: i64, offset: u64) -> ChunkLoc {
        ChunkLoc {
            pack,
            offset,
            len: 4,
        }
    }

    #[test]
    fn repointing_moves_only_the_fresh_chunks_and_keeps_the_rest_coalesced() {
        let digests: Vec<Digest> = (0u8..4).map(|i| Digest::of(&[i])).collect();
        // Four chunks back to back in pack 1; the third is written afresh in pack 9.
        let extents = coalesce(&[loc(1, 0), loc(1, 4), loc(1, 8), loc(1, 12)]);
        assert_eq!(extents.len(), 1);
        let fresh = HashMap::from([(digests[2], loc(9, 40))]);
        let moved = repoint(&extents, &digests, 4, &fresh).expect("moved");
        assert_eq!(
            expand(&moved, 4),
            [loc(1, 0), loc(1, 4), loc(9, 40), loc(1, 12)]
        );
        assert_eq!(moved.len(), 3);
        // Already there, or not held at all: nothing to do.
        assert_eq!(repoint(&moved, &digests, 4, &fresh), None);
        let elsewhere = HashMap::from([(Digest::of(b"other"), loc(9, 0))]);
        assert_eq!(repoint(&extents, &digests, 4, &elsewhere), None);
        // Extents that do not cover the manifest are not rewritten.
        assert_eq!(repoint(&extents, &digests[..3], 4, &fresh), None);
    }
}
