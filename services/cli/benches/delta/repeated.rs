//! Issue 38 point 4: a device that edits a few rows every 30 s for an hour pushes 120 times;
//! what it moves and what the hub's store grows by, against the pages it changed.
//!
//! Each round makes one small edit on the live file (a note updated in place and a chat message
//! appended, alternately: `shape.rs`'s), exports it as `snug sync push` does and pushes it as
//! the CLI does (the base's page ids and bytes kept from the last push). A page changed is one
//! whose bytes at its page number differ from the last export's, or one past its end. The store's size is
//! the bytes of every file under the hub's sync store directory, before the first push and
//! after the last (the hub keeps its default retention; no reclamation pass runs in between).

use std::path::Path;

use snug_delta::Manifest;
use snug_restore::{HubOrigin, Origin as _, Pushed, SyncedBase};

use super::shape;

/// Pushes in an hour, one every 30 s.
pub(crate) const PUSHES: usize = 120;

/// What the rounds moved and stored.
pub(crate) struct Repeated {
    pub(crate) pushes: usize,
    pub(crate) page_size: u64,
    /// Pages changed, summed over the pushes.
    pub(crate) changed_pages: u64,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    /// Pushes that went by difference.
    pub(crate) by_delta: usize,
    /// The store's bytes on disk before the first push and after the last.
    pub(crate) store: (u64, u64),
    /// The last image's length, for scale.
    pub(crate) image_len: u64,
}

impl Repeated {
    /// The changed pages' bytes: what the targets are measured against.
    pub(crate) fn changed_bytes(&self) -> u64 {
        self.changed_pages * self.page_size
    }
}

/// Bytes of every file under `dir`.
fn size_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| match entry.metadata() {
                    Ok(meta) if meta.is_dir() => size_on_disk(&entry.path()),
                    Ok(meta) => meta.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Pages of `new` that differ from `old`'s at the same number, or that `old` lacks.
fn changed_pages(old: &[u8], new: &[u8], page: usize) -> u64 {
    new.chunks(page)
        .enumerate()
        .filter(|(i, p)| old.get(i * page..i * page + p.len()) != Some(*p))
        .count() as u64
}

/// Runs the rounds on `file` from `(image, revision)`, the hub's current revision and its bytes.
pub(crate) fn run(
    file: &Path,
    built: &shape::Built,
    text: &mut shape::Text,
    (url, store): (&str, &Path),
    (image, current): (Vec<u8>, String),
    export: impl Fn(&Path) -> Vec<u8>,
) -> Repeated {
    let page_size = u64::from(snug_delta::page_size_of(&image));
    let manifest = |image: &[u8]| Manifest::with_shapes(image, page_size as u32).expect("manifest");
    let origin = HubOrigin::new(url, None);
    let edits = [&shape::EDITS[0], &shape::EDITS[2]];
    let store_before = size_on_disk(store);
    let (mut old, mut old_pages, mut current) = (image, None::<Manifest>, current);
    let (mut changed, mut by_delta) = (0, 0);
    for round in 0..PUSHES {
        shape::apply(file, built, edits[round % edits.len()], text);
        let new = export(file);
        changed += changed_pages(&old, &new, page_size as usize);
        let old_manifest = old_pages.take().unwrap_or_else(|| manifest(&old));
        let new_pages = manifest(&new);
        let before = origin.traffic();
        let pushed = origin
            .push_from(
                &new,
                Some(&current),
                Some(SyncedBase {
                    pages: &old_manifest,
                    image: Some(&old),
                }),
                Some(&new_pages),
            )
            .expect("push");
        current = match pushed {
            Pushed::Accepted { revision } => revision,
            Pushed::Conflict { current } => panic!("conflict with {current:?}"),
        };
        // The origin's flag says whether any push so far went by difference: count this one
        // by what it sent, a delta of an edit being far below the image.
        let sent = origin.traffic().sent - before.sent;
        if sent * 4 < new.len() as u64 {
            by_delta += 1;
        }
        (old, old_pages) = (new, Some(new_pages));
    }
    let traffic = origin.traffic();
    Repeated {
        pushes: PUSHES,
        page_size,
        changed_pages: changed,
        sent: traffic.sent,
        received: traffic.received,
        by_delta,
        store: (store_before, size_on_disk(store)),
        image_len: old.len() as u64,
    }
}
