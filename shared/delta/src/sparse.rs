//! A sparse manifest: an image named group by group, a group of pages either by one hash (its
//! pages are another side's, whose hash it is) or in full (issue 38: a fallback costs kilobytes,
//! not a manifest of every page).
//!
//! Pages are grouped by position, [`Sparse::group`] pages at a time. A group's hash is the first
//! 8 bytes of the SHA-256 of its pages' ids in order, so two sides compare a group by 8 bytes. The
//! exchange, where a client knows nothing of the hub's pages:
//!
//! 1. the client sends a [`Sparse::summary`] of its image: every group by hash (a few KiB for a
//!    64 MiB image);
//! 2. the hub answers the revision's manifest [`Sparse::against`] it: a group whose hash matches
//!    is named by it, every other one in full;
//! 3. the client [`Sparse::expand`]s that against its own manifest: a group named by a hash it
//!    sent is its own pages, so it now knows the revision's whole manifest, and plans a push
//!    itself, or, to pull, sends its own manifest sparse against the revision's, which the hub
//!    expands the same way.
//!
//! Position is what makes this cheap: a sync copy keeps the live file's page numbers (issue 38
//! point 1), so an edit changes few groups. An image whose pages all moved costs its groups in
//! full, a little more than a plain manifest. A group hash that matches by accident (64 bits)
//! yields a wrong manifest, which the image's SHA-256 catches when the delta is assembled.
//!
//! Wire form (`SDM3`), little-endian: magic, page size (u32), length (u64), SHA-256, pages per
//! group (u32), flags (u8: bit 0, shapes), then one entry per group: a tag byte, `0` and the
//! group's hash, or `1` and its pages' ids (then, with shapes, their shapes).

use sha2::{Digest as _, Sha256};

use super::*;

const SPARSE_MAGIC: &[u8; 4] = b"SDM3";
/// Magic, page size, length, SHA-256, pages per group, flags.
pub(crate) const SPARSE_HEADER: usize = 4 + 4 + 8 + 32 + 4 + 1;
const SHAPED: u8 = 1;
const BY_HASH: u8 = 0;
const IN_FULL: u8 = 1;

/// The most pages a group may have: a group hashes at most 512 KiB of ids.
pub const MAX_GROUP: u32 = 1 << 16;

/// The 8-byte hash of a group's page ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupHash(pub [u8; ID_LEN]);

impl GroupHash {
    fn of(ids: &[PageId]) -> Self {
        let mut hasher = Sha256::new();
        for id in ids {
            hasher.update(id.0);
        }
        let mut hash = [0; ID_LEN];
        hash.copy_from_slice(&hasher.finalize()[..ID_LEN]);
        Self(hash)
    }
}

/// One group of a sparse manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Group {
    /// Named by the hash of its ids: the other side's pages.
    ByHash(GroupHash),
    /// Its pages' ids, and their shapes when the manifest has shapes.
    InFull {
        /// One id per page of the group.
        ids: Vec<PageId>,
        /// One shape per page, with shapes.
        shapes: Option<Vec<PageId>>,
    },
}

/// An image named group by group (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sparse {
    /// The image's length and page size.
    pub geometry: Geometry,
    /// The SHA-256 of the whole image.
    pub digest: [u8; 32],
    /// Pages per group; the last group may be short.
    pub group: u32,
    /// Whether groups in full carry shapes (and groups by hash stand for shapes too).
    pub shaped: bool,
    /// One entry per group, in order.
    pub groups: Vec<Group>,
}

/// The page range of group `index` of `group` pages among `pages`.
fn span(index: usize, group: u32, pages: usize) -> std::ops::Range<usize> {
    let start = (index * group as usize).min(pages);
    start..(start + group as usize).min(pages)
}

impl Manifest {
    /// The hash of each group of `group` pages, in order.
    pub fn group_hashes(&self, group: u32) -> Vec<GroupHash> {
        self.ids
            .chunks(group.max(1) as usize)
            .map(GroupHash::of)
            .collect()
    }
}

impl Sparse {
    /// `manifest` with every group named by its hash.
    pub fn summary(manifest: &Manifest, group: u32) -> Self {
        Self {
            geometry: manifest.geometry,
            digest: manifest.digest,
            group,
            shaped: manifest.shapes.is_some(),
            groups: manifest
                .group_hashes(group)
                .into_iter()
                .map(Group::ByHash)
                .collect(),
        }
    }

    /// `manifest` sparse against `theirs`: each group whose hash is the hash of `theirs`' group
    /// at the same place is named by it, every other one in full (with shapes when `manifest`
    /// has them), in `theirs`' grouping.
    pub fn against(manifest: &Manifest, theirs: &Sparse) -> Self {
        let group = theirs.group;
        let pages = manifest.ids.len();
        let same_pages = manifest.geometry.page_size == theirs.geometry.page_size;
        let groups = manifest
            .group_hashes(group)
            .into_iter()
            .enumerate()
            .map(|(index, hash)| {
                let matches =
                    same_pages && theirs.groups.get(index).is_some_and(|g| g.hash() == hash);
                if matches {
                    return Group::ByHash(hash);
                }
                let pages = span(index, group, pages);
                Group::InFull {
                    ids: manifest.ids[pages.clone()].to_vec(),
                    shapes: manifest.shapes.as_ref().map(|s| s[pages].to_vec()),
                }
            })
            .collect();
        Self {
            geometry: manifest.geometry,
            digest: manifest.digest,
            group,
            shaped: manifest.shapes.is_some(),
            groups,
        }
    }

    /// The whole manifest, groups by hash taken from `known` (the manifest whose hashes they
    /// are): refused when such a group is not `known`'s at that place, or when this manifest
    /// has shapes and `known` has none.
    pub fn expand(&self, known: &Manifest) -> Result<Manifest, DeltaError> {
        let mismatch = DeltaError::Malformed {
            what: "a group named by a hash that is not the known image's",
        };
        if self.shaped && known.shapes.is_none() {
            return Err(DeltaError::Malformed {
                what: "a sparse manifest with shapes expanded against one without",
            });
        }
        if self.geometry.page_size != known.geometry.page_size
            && self.groups.iter().any(|g| matches!(g, Group::ByHash(_)))
        {
            return Err(mismatch);
        }
        let pages = self.geometry.pages() as usize;
        let mut ids = Vec::with_capacity(pages);
        let mut shapes = self.shaped.then(|| Vec::with_capacity(pages));
        for (index, group) in self.groups.iter().enumerate() {
            let span = span(index, self.group, pages);
            match group {
                Group::InFull {
                    ids: theirs,
                    shapes: their_shapes,
                } => {
                    ids.extend_from_slice(theirs);
                    if let (Some(shapes), Some(theirs)) = (shapes.as_mut(), their_shapes) {
                        shapes.extend_from_slice(theirs);
                    }
                }
                Group::ByHash(hash) => {
                    let known_ids = known.ids.get(span.clone()).ok_or(mismatch.clone())?;
                    if known_ids.len() != span.len() || GroupHash::of(known_ids) != *hash {
                        return Err(mismatch);
                    }
                    ids.extend_from_slice(known_ids);
                    if let (Some(shapes), Some(known)) = (shapes.as_mut(), known.shapes.as_ref()) {
                        shapes.extend_from_slice(&known[span]);
                    }
                }
            }
        }
        Ok(Manifest {
            geometry: self.geometry,
            digest: self.digest,
            ids,
            shapes,
        })
    }

    /// How many pages are named in full.
    pub fn pages_in_full(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| match g {
                Group::InFull { ids, .. } => ids.len() as u64,
                Group::ByHash(_) => 0,
            })
            .sum()
    }

    /// Whether `bytes` start as a sparse manifest (the other forms have other magics).
    pub fn is_sparse(bytes: &[u8]) -> bool {
        bytes.starts_with(SPARSE_MAGIC)
    }

    /// The wire form (module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SPARSE_HEADER + self.groups.len() * (1 + ID_LEN));
        out.extend_from_slice(SPARSE_MAGIC);
        out.extend_from_slice(&self.geometry.page_size.to_le_bytes());
        out.extend_from_slice(&self.geometry.length.to_le_bytes());
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&self.group.to_le_bytes());
        out.push(if self.shaped { SHAPED } else { 0 });
        for group in &self.groups {
            match group {
                Group::ByHash(hash) => {
                    out.push(BY_HASH);
                    out.extend_from_slice(&hash.0);
                }
                Group::InFull { ids, shapes } => {
                    out.push(IN_FULL);
                    for id in ids.iter().chain(shapes.iter().flatten()) {
                        out.extend_from_slice(&id.0);
                    }
                }
            }
        }
        out
    }

    /// Parses the wire form strictly: one entry per group, a group in full with exactly its
    /// pages' ids (and shapes), nothing after the last.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Self, DeltaError> {
        let mut r = Reader::new(bytes);
        if r.take(4)? != SPARSE_MAGIC {
            return Err(DeltaError::Malformed {
                what: "not a sparse manifest (magic)",
            });
        }
        let page_size = r.u32()?;
        let length = r.u64()?;
        let digest = r.array::<32>()?;
        let group = r.u32()?;
        let flags = r.u8()?;
        let geometry = Geometry::new(length, page_size, limits)?;
        if !(1..=MAX_GROUP).contains(&group) {
            return Err(DeltaError::Malformed {
                what: "a group size of 0 or over 65536 pages",
            });
        }
        if flags & !SHAPED != 0 {
            return Err(DeltaError::Malformed {
                what: "unknown sparse manifest flags",
            });
        }
        let shaped = flags & SHAPED != 0;
        let pages = geometry.pages() as usize;
        let count = pages.div_ceil(group as usize);
        // Every entry takes at least 9 bytes: checked before the allocation, bounded by the
        // quota through the page count.
        if r.rest().len() < count * (1 + ID_LEN) {
            return Err(DeltaError::Malformed { what: "truncated" });
        }
        let mut groups = Vec::with_capacity(count);
        let read_ids = |r: &mut Reader<'_>, n: usize| -> Result<Vec<PageId>, DeltaError> {
            Ok(r.take(n * ID_LEN)?
                .chunks_exact(ID_LEN)
                .map(|c| {
                    let mut id = [0; ID_LEN];
                    id.copy_from_slice(c);
                    PageId(id)
                })
                .collect())
        };
        for index in 0..count {
            let n = span(index, group, pages).len();
            groups.push(match r.u8()? {
                BY_HASH => Group::ByHash(GroupHash(r.array()?)),
                IN_FULL => {
                    let ids = read_ids(&mut r, n)?;
                    let shapes = if shaped {
                        Some(read_ids(&mut r, n)?)
                    } else {
                        None
                    };
                    Group::InFull { ids, shapes }
                }
                _ => {
                    return Err(DeltaError::Malformed {
                        what: "an unknown group tag",
                    });
                }
            });
        }
        if !r.rest().is_empty() {
            return Err(DeltaError::Malformed {
                what: "bytes after the last group",
            });
        }
        Ok(Self {
            geometry,
            digest,
            group,
            shaped,
            groups,
        })
    }
}

impl Group {
    /// The group's hash: given, or of its ids.
    pub fn hash(&self) -> GroupHash {
        match self {
            Group::ByHash(hash) => *hash,
            Group::InFull { ids, .. } => GroupHash::of(ids),
        }
    }
}

#[cfg(test)]
mod tests;
