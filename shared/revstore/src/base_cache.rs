//! The images a process just wrote, kept as the bases of the delta pushes that follow them
//! (issue 38 point 3).
//!
//! A device pushing small edits sends each delta against the revision it pushed last. Reading
//! that base back from the store costs a read of every chunk, a hash of every chunk (the check
//! that makes its addresses trustworthy) and a copy: for a 64 MiB image, more than the rest of
//! the push. A [`BaseCache`] keeps, per user, the newest image this process wrote
//! ([`Held`](crate::Held)): the bytes a put stored under the addresses it committed, which is
//! exactly what a read would return and check. Revisions are immutable, so an entry is never
//! stale, only dropped: when it is replaced by the user's next write, when the bytes it holds
//! pass the limit (least recently used first), when it is older than its maximum age, and at
//! once when the user is erased through this process ([`BaseCache::forget`]); the maximum age
//! bounds how long another replica's erasure leaves a copy in this one's memory. A push whose
//! base is not here reads it from the store, as before.
//!
//! The cache also keeps one **spare**: the buffer of a base its user no longer needs
//! ([`BaseCache::recycle`]), handed to the next push to assemble its image in
//! ([`BaseCache::buffer`]). A fresh 64 MiB allocation is mapped page by page as it is first
//! written, a fault per 4 KiB that costs more than the copy it serves; a recycled buffer is
//! mapped already. The spare counts against the same limit, goes first when a base needs the
//! room, and is dropped with its user and at the same maximum age, since it still holds that
//! user's bytes until it is written over.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use crate::{BaseImage, Clock, Revision, Timestamp, UserId};

/// Recently written images by user, within a byte limit and a maximum age.
#[derive(Debug)]
pub struct BaseCache {
    limit_bytes: u64,
    max_age: Duration,
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<UserId, Entry>,
    spare: Option<Spare>,
    /// The footprints of the entries and the spare's capacity.
    held: u64,
    /// Bumped by every use, so the least recently used entry has the smallest `used`.
    uses: u64,
}

impl Inner {
    /// Drops the spare, if any.
    fn drop_spare(&mut self) {
        if let Some(spare) = self.spare.take() {
            self.held -= spare.footprint();
        }
    }
}

/// A buffer whose image is no longer anyone's base, to be written over.
struct Spare {
    /// Whose bytes it still holds.
    user: UserId,
    buffer: Vec<u8>,
    kept_at: Timestamp,
}

impl Spare {
    fn footprint(&self) -> u64 {
        self.buffer.capacity() as u64
    }
}

impl std::fmt::Debug for Spare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spare")
            .field("user", &self.user)
            .field("capacity", &self.buffer.capacity())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Entry {
    base: Arc<BaseImage>,
    kept_at: Timestamp,
    used: u64,
}

/// The memory an image takes in the cache: its bytes and its addresses.
fn footprint(base: &BaseImage) -> u64 {
    (base.bytes.len() + base.chunks.len() * 32) as u64
}

impl BaseCache {
    /// A cache of at most `limit_bytes` (0: keeps nothing), each entry at most `max_age` old.
    pub fn new(limit_bytes: u64, max_age: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            limit_bytes,
            max_age,
            clock,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere leaves only whole entries behind: the map is always consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The user's image of `revision`, if this cache holds it.
    pub fn get(&self, user: &UserId, revision: &Revision) -> Option<Arc<BaseImage>> {
        let now = self.clock.now();
        let mut inner = self.lock();
        inner.uses += 1;
        let uses = inner.uses;
        let entry = inner.entries.get_mut(user)?;
        if entry.base.info.revision != *revision {
            return None;
        }
        if now.minus(self.max_age) > entry.kept_at {
            let gone = inner.entries.remove(user).map_or(0, |e| footprint(&e.base));
            inner.held -= gone;
            return None;
        }
        entry.used = uses;
        Some(entry.base.clone())
    }

    /// Keeps `image` as the user's, in place of the one it held; an image larger than the limit
    /// is not kept (nor is the one it replaces).
    pub fn keep(&self, user: &UserId, image: BaseImage) {
        let size = footprint(&image);
        let now = self.clock.now();
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(user) {
            inner.held -= footprint(&old.base);
        }
        if size > self.limit_bytes {
            return;
        }
        let cutoff = now.minus(self.max_age);
        inner.entries.retain(|_, e| e.kept_at >= cutoff);
        if inner.spare.as_ref().is_some_and(|s| s.kept_at < cutoff) {
            inner.spare = None;
        }
        inner.held = inner
            .entries
            .values()
            .map(|e| footprint(&e.base))
            .sum::<u64>()
            + inner.spare.as_ref().map_or(0, Spare::footprint);
        // The spare only spares page faults; a base spares a read of the store.
        if inner.held + size > self.limit_bytes {
            inner.drop_spare();
        }
        while inner.held + size > self.limit_bytes {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(u, _)| u.clone())
            else {
                break;
            };
            let gone = inner
                .entries
                .remove(&oldest)
                .map_or(0, |e| footprint(&e.base));
            inner.held -= gone;
        }
        inner.uses += 1;
        let used = inner.uses;
        inner.held += size;
        inner.entries.insert(
            user.clone(),
            Entry {
                base: Arc::new(image),
                kept_at: now,
                used,
            },
        );
    }

    /// Keeps the buffer of `base`, which its user no longer needs as a base, as the spare a
    /// later image is assembled in, when nothing else holds it and the limit leaves it room
    /// beside the bases (in place of the spare before).
    pub fn recycle(&self, user: &UserId, base: Arc<BaseImage>) {
        let Ok(base) = Arc::try_unwrap(base) else {
            return;
        };
        let Ok(bytes) = base.bytes.try_into_mut() else {
            return;
        };
        let spare = Spare {
            user: user.clone(),
            buffer: Vec::from(bytes),
            kept_at: self.clock.now(),
        };
        let mut inner = self.lock();
        inner.drop_spare();
        if inner.held + spare.footprint() <= self.limit_bytes {
            inner.held += spare.footprint();
            inner.spare = Some(spare);
        }
    }

    /// An empty buffer to assemble an image of `len` bytes in: the spare when its capacity fits
    /// (at least `len`, at most twice), else a new one.
    pub fn buffer(&self, len: usize) -> Vec<u8> {
        let cutoff = self.clock.now().minus(self.max_age);
        let mut inner = self.lock();
        let Some(spare) = inner.spare.take() else {
            return Vec::with_capacity(len);
        };
        inner.held -= spare.footprint();
        if spare.kept_at < cutoff {
            drop(inner);
            drop(spare);
            return Vec::with_capacity(len);
        }
        let capacity = spare.buffer.capacity();
        if capacity < len || capacity / 2 > len {
            inner.held += spare.footprint();
            inner.spare = Some(spare);
            return Vec::with_capacity(len);
        }
        drop(inner);
        let mut buffer = spare.buffer;
        buffer.clear();
        buffer
    }

    /// Drops whatever the cache holds of the user (their erasure).
    pub fn forget(&self, user: &UserId) {
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(user) {
            inner.held -= footprint(&old.base);
        }
        if inner.spare.as_ref().is_some_and(|s| s.user == *user) {
            inner.drop_spare();
        }
    }

    /// The bytes the cache holds.
    pub fn held_bytes(&self) -> u64 {
        self.lock().held
    }
}

#[cfg(test)]
mod tests;
