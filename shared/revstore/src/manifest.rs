//! How a stored image's manifest is kept: whole, or as the chunks it changes against an earlier
//! stored image (issue 38 point 4), so a revision that rewrote a few pages costs a few entries.
//!
//! A whole manifest is every chunk address in image order, 32 bytes each, as stores have always
//! kept it. An image committed while the user had a current image is kept *against* that image:
//! its row names the base image and its body is the image's chunk count (8 bytes, little endian)
//! and, in increasing index order, each chunk that differs from the base's at the same index
//! (4-byte index, 32-byte address), every index past the base's end included. Resolving an image
//! walks its bases to a whole manifest and applies the changes back down: a chain of at most
//! [`MAX_CHAIN`] patches, so a read costs one bounded query however long the history. A patch
//! that would be larger than half the whole manifest is stored whole instead.
//!
//! Every address an image names is in its own row or in its bases' rows, and a base row stays
//! as long as an image stands on it: before a store deletes an image, it [`rebase`]s the images
//! kept against it onto the deleted image's own base (or whole). So the union of every stored
//! row's [`entries`] is the union of every stored image's chunks, which is what reclamation
//! marks live, and no image ever names a row that is gone.

use std::collections::BTreeMap;

use crate::types::Digest;

/// The most patches between an image and the whole manifest it is resolved from: a 64 MiB image
/// of 4 KiB chunks keeps one whole 512 KiB manifest per 256 revisions, 2 KiB a revision.
pub(crate) const MAX_CHAIN: usize = 256;

const ENTRY: usize = 4 + 32;
const HEADER: usize = 8;

/// A stored manifest as a backend keeps it: the image it is kept against, and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) base: Option<Digest>,
    pub(crate) body: Vec<u8>,
}

/// An image's chunk addresses in image order, and how many patches its row stands on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub(crate) chunks: Vec<Digest>,
    pub(crate) depth: usize,
}

/// A decoded row.
enum Form {
    Whole(Vec<Digest>),
    Patch {
        len: usize,
        changes: Vec<(usize, Digest)>,
    },
}

impl Row {
    /// A whole manifest.
    pub(crate) fn whole(chunks: &[Digest]) -> Self {
        Self {
            base: None,
            body: crate::chunk::encode_manifest(chunks),
        }
    }

    fn patch(base: Digest, len: usize, changes: &[(usize, Digest)]) -> Self {
        let mut body = Vec::with_capacity(HEADER + changes.len() * ENTRY);
        body.extend_from_slice(&(len as u64).to_le_bytes());
        for (index, address) in changes {
            body.extend_from_slice(&(*index as u32).to_le_bytes());
            body.extend_from_slice(&address.0);
        }
        Self {
            base: Some(base),
            body,
        }
    }

    fn decode(&self) -> Option<Form> {
        if self.base.is_none() {
            return crate::chunk::decode_manifest(&self.body).map(Form::Whole);
        }
        let (len, entries) = self.body.split_first_chunk::<HEADER>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        if !entries.len().is_multiple_of(ENTRY) {
            return None;
        }
        let mut changes = Vec::with_capacity(entries.len() / ENTRY);
        for entry in entries.chunks_exact(ENTRY) {
            let (index, address) = entry.split_first_chunk::<4>()?;
            let index = u32::from_le_bytes(*index) as usize;
            // Strictly increasing and inside the image: anything else is not a row we wrote.
            if index >= len || changes.last().is_some_and(|(last, _)| *last >= index) {
                return None;
            }
            changes.push((index, Digest::from_slice(address)?));
        }
        Some(Form::Patch { len, changes })
    }
}

/// Every chunk address `row` itself names; `None` when it is not a well-formed row.
pub(crate) fn entries(row: &Row) -> Option<Vec<Digest>> {
    Some(match row.decode()? {
        Form::Whole(chunks) => chunks,
        Form::Patch { changes, .. } => changes.into_iter().map(|(_, a)| a).collect(),
    })
}

/// The row to store for an image of `chunks` committed while `against` (a stored image and its
/// resolved manifest) was the user's current image; whole when there is none, when its chain is
/// already [`MAX_CHAIN`] long, or when the changes are too many for a patch to pay.
pub(crate) fn store(chunks: &[Digest], against: Option<(&Digest, &Resolved)>) -> Row {
    let Some((base, resolved)) = against.filter(|(_, r)| r.depth < MAX_CHAIN) else {
        return Row::whole(chunks);
    };
    let changes: Vec<(usize, Digest)> = chunks
        .iter()
        .enumerate()
        .filter(|(i, c)| resolved.chunks.get(*i) != Some(c))
        .map(|(i, c)| (i, *c))
        .collect();
    if u32::try_from(chunks.len()).is_err()
        || HEADER + changes.len() * ENTRY > chunks.len() * 32 / 2
    {
        return Row::whole(chunks);
    }
    Row::patch(*base, chunks.len(), &changes)
}

/// Resolves the image at the head of `chain`: its row, then its base's row, and so on to a whole
/// manifest, as a backend's one query returns them. `None` when the rows do not form such a
/// chain (a missing or malformed row, a chain longer than [`MAX_CHAIN`]): the image is corrupt.
pub(crate) fn resolve(chain: &[(Digest, Row)]) -> Option<Resolved> {
    if chain.is_empty() || chain.len() > MAX_CHAIN + 1 {
        return None;
    }
    for pair in chain.windows(2) {
        if pair[0].1.base != Some(pair[1].0) {
            return None;
        }
    }
    let (root, patches) = chain.split_last()?;
    let Form::Whole(mut chunks) = root.1.decode()? else {
        return None;
    };
    for (_, row) in patches.iter().rev() {
        let Form::Patch { len, changes } = row.decode()? else {
            return None;
        };
        chunks = apply(&chunks, len, &changes)?;
    }
    Some(Resolved {
        chunks,
        depth: patches.len(),
    })
}

/// `base` with `changes` applied, `len` long; `None` when an index past `base`'s end is not
/// among the changes.
fn apply(base: &[Digest], len: usize, changes: &[(usize, Digest)]) -> Option<Vec<Digest>> {
    let mut out: Vec<Option<Digest>> = base.iter().take(len).copied().map(Some).collect();
    out.resize(len, None);
    for (index, address) in changes {
        *out.get_mut(*index)? = Some(*address);
    }
    out.into_iter().collect()
}

/// `child`'s row once `parent`, the image it is kept against, is deleted: kept against
/// `parent`'s own base with both rows' changes, or whole when `parent` is whole. `None` when
/// either row is malformed or `child` is not kept against `parent`'s digest `parent_digest`.
pub(crate) fn rebase(parent_digest: &Digest, parent: &Row, child: &Row) -> Option<Row> {
    if child.base != Some(*parent_digest) {
        return None;
    }
    let Form::Patch { len, changes } = child.decode()? else {
        return None;
    };
    match parent.decode()? {
        Form::Whole(chunks) => Some(Row::whole(&apply(&chunks, len, &changes)?)),
        Form::Patch {
            changes: inherited, ..
        } => {
            let mut merged: BTreeMap<usize, Digest> =
                inherited.into_iter().filter(|(i, _)| *i < len).collect();
            merged.extend(changes);
            let merged: Vec<(usize, Digest)> = merged.into_iter().collect();
            Some(Row::patch(parent.base?, len, &merged))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
