//! Image bytes in an object store (feature `postgres`): pack objects written create-once, read
//! back and verified, and read by range.
//!
//! Beside PostgreSQL metadata ([`crate::PgStore::connect_with_objects`] with a [`Bucket`] over any
//! [`ObjectStorage`]: in production the S3 client `snug-s3` builds, so this crate holds no HTTP
//! client), the chunks of
//! images live in pack objects named `<prefix>/packs/<name>.pack` ([`crate::pack`]: the name is
//! the SHA-256 of the chunk digests the pack holds, so it determines the bytes). A put writes its
//! new chunks in packs of up to [`PACK_BYTES`]; each pack is named in the put's publication record
//! before it is written, written create-once (`If-None-Match: *` where the server supports it; an
//! occupant, or a server that ignores the header, is compared rather than trusted), then read back
//! whole and every chunk checked against its address, all before the pointer moves. Downloads read
//! coalesced ranges and check every chunk before it is handed on, so a missing or damaged object
//! is a typed error, never wrong bytes.

use std::{error::Error as StdError, fmt, ops::Range, sync::Arc};

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::{
    chunk,
    error::{PutError, ReclaimError, StorageError},
    pack,
    types::{Digest, Timestamp},
};

/// The most chunk bytes one pack object holds. A put of a large image writes several, uploading
/// one while the next fills, so memory per put stays bounded and the upload overlaps the stream.
pub const PACK_BYTES: usize = 16 << 20;

/// A failed object-store request: the store could not be reached or answered with an error.
#[derive(Debug)]
pub struct ObjectError(pub Box<dyn StdError + Send + Sync>);

impl fmt::Display for ObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "object store request failed: {}", self.0)
    }
}

impl StdError for ObjectError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}

/// What a conditional write found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// The object was written.
    Written,
    /// Something was already there; nothing was written.
    Occupied,
    /// The server does not do conditional writes; nothing was written.
    Unsupported,
}

/// An object listed under a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// When it was last written.
    pub modified: Timestamp,
}

/// The object-store requests the store's pack objects need; keys are `/`-separated paths in one
/// bucket. A missing object is `Ok(None)`, never an error.
pub trait ObjectStorage: Send + Sync + fmt::Debug + 'static {
    /// Writes `bytes` at `key` only if nothing is there (`If-None-Match: *`).
    fn put_if_absent(&self, key: &str, bytes: Bytes)
    -> BoxFuture<'_, Result<Created, ObjectError>>;
    /// Writes `bytes` at `key` unconditionally.
    fn put(&self, key: &str, bytes: Bytes) -> BoxFuture<'_, Result<(), ObjectError>>;
    /// The whole object.
    fn get(&self, key: &str) -> BoxFuture<'_, Result<Option<Bytes>, ObjectError>>;
    /// One byte range of the object.
    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Option<Bytes>, ObjectError>>;
    /// The object's size.
    fn size(&self, key: &str) -> BoxFuture<'_, Result<Option<u64>, ObjectError>>;
    /// Every object under `prefix` (recursively), complete or an error.
    fn list(&self, prefix: &str) -> BoxFuture<'_, Result<Vec<Listed>, ObjectError>>;
    /// Deletes the object; a missing one counts as deleted.
    fn delete(&self, key: &str) -> BoxFuture<'_, Result<(), ObjectError>>;
}

/// The bucket the store keeps its pack objects in.
#[derive(Clone)]
pub struct Bucket {
    storage: Arc<dyn ObjectStorage>,
    /// `<prefix>/packs`, where every pack object lives.
    packs: String,
    /// `s3://BUCKET/PREFIX`, recorded in the metadata so a store is never opened against another
    /// bucket by mistake.
    location: String,
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: ObjectError) -> StorageError {
    StorageError::unavailable(e)
}

impl Bucket {
    /// The store's objects under `prefix` of the bucket `storage` is bound to; `location` names it
    /// (`s3://BUCKET/PREFIX`).
    pub fn new(storage: Arc<dyn ObjectStorage>, location: String, prefix: &str) -> Self {
        let prefix = prefix.trim_matches('/');
        let packs = if prefix.is_empty() {
            "packs".to_owned()
        } else {
            format!("{prefix}/packs")
        };
        Self {
            storage,
            packs,
            location,
        }
    }

    /// `s3://BUCKET/PREFIX`.
    pub(crate) fn location(&self) -> &str {
        &self.location
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.packs)
    }

    /// Writes a pack create-once, then reads it back whole and checks every chunk.
    ///
    /// `chunks` are the digests, offsets and lengths of the chunks in `bytes`, whose name is
    /// [`pack::pack_name`] of them.
    pub(crate) async fn create_pack(
        &self,
        name: &str,
        bytes: Bytes,
        chunks: &[(Digest, u64, u32)],
    ) -> Result<(), PutError> {
        let key = self.key(name);
        match self
            .storage
            .put_if_absent(&key, bytes.clone())
            .await
            .map_err(unavailable)?
        {
            // Written, or occupied: the occupant is compared below, like anything read back.
            Created::Written | Created::Occupied => {}
            // A server without conditional writes: write, then compare what is there.
            Created::Unsupported => self
                .storage
                .put(&key, bytes.clone())
                .await
                .map_err(unavailable)?,
        }
        let Some(stored) = self.storage.get(&key).await.map_err(unavailable)? else {
            // Written a moment ago and not found: the store lags its own writes. Nothing is
            // wrong with the bytes; the put may be retried.
            return Err(StorageError::unavailable(format!(
                "pack {name} was written but cannot be read back yet; retry"
            ))
            .into());
        };
        if stored.len() != bytes.len() || check_pack(&stored, chunks).is_err() {
            // Content-addressed: an occupant with other bytes is damage or a collision, never
            // something to overwrite.
            return Err(PutError::ImageConflict {
                identity: format!("pack {name}"),
            });
        }
        Ok(())
    }

    /// The size of a stored pack, or `None` if it is missing.
    pub(crate) async fn size(&self, name: &str) -> Result<Option<u64>, StorageError> {
        self.storage
            .size(&self.key(name))
            .await
            .map_err(unavailable)
    }

    /// Reads one range of a pack. A missing pack or a short read is damage, not absence: the
    /// metadata says the bytes are there.
    pub(crate) async fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let want = range.end - range.start;
        match self
            .storage
            .get_range(&self.key(name), range)
            .await
            .map_err(unavailable)?
        {
            Some(bytes) if bytes.len() as u64 == want => Ok(bytes),
            _ => Err(StorageError::Corrupt {
                object: format!("pack {name}"),
            }),
        }
    }

    /// Every pack object with when it was last written, complete or an error: reclamation
    /// deletes nothing on a partial listing or one holding an object it cannot identify.
    pub(crate) async fn list(&self) -> Result<Vec<(String, Timestamp)>, ReclaimError> {
        let listed = self
            .storage
            .list(&self.packs)
            .await
            .map_err(|_| ReclaimError::IncompleteListing)?;
        let mut out = Vec::with_capacity(listed.len());
        for object in listed {
            let name = object
                .key
                .strip_prefix(&self.packs)
                .and_then(|rest| rest.strip_prefix('/'))
                .filter(|name| !name.contains('/') && pack::is_pack_name(name));
            let Some(name) = name else {
                return Err(ReclaimError::UnreadableCandidate { name: object.key });
            };
            out.push((name.to_owned(), object.modified));
        }
        Ok(out)
    }

    /// Rewrites a pack with the byte `ranges` (offset, length) zeroed, keeping its name and
    /// length: an erasure's deleted chunks in a pack that also holds chunks still named
    /// ([`crate::reclaim::Pass::wipe`]). One that is already gone is left gone. A bucket that
    /// keeps earlier object versions keeps the old bytes there: erasure needs versioning off.
    pub(crate) async fn wipe(&self, name: &str, ranges: &[(u64, u32)]) -> Result<(), StorageError> {
        let key = self.key(name);
        let Some(stored) = self.storage.get(&key).await.map_err(unavailable)? else {
            return Ok(());
        };
        let mut bytes = stored.to_vec();
        for (offset, len) in ranges {
            let start = *offset as usize;
            if let Some(range) = bytes.get_mut(start..start + *len as usize) {
                range.fill(0);
            }
        }
        self.storage
            .put(&key, Bytes::from(bytes))
            .await
            .map_err(unavailable)
    }

    /// Deletes a pack; one that is already gone counts as deleted.
    pub(crate) async fn delete(&self, name: &str) -> Result<(), StorageError> {
        self.storage
            .delete(&self.key(name))
            .await
            .map_err(unavailable)
    }

    /// Checks that the bucket answers.
    pub(crate) async fn health(&self) -> Result<(), StorageError> {
        self.storage
            .size(&self.key("health-probe"))
            .await
            .map(|_| ())
            .map_err(unavailable)
    }
}

/// Checks each chunk of a pack's bytes against its address.
fn check_pack(bytes: &[u8], chunks: &[(Digest, u64, u32)]) -> Result<(), StorageError> {
    for (digest, offset, len) in chunks {
        let start = *offset as usize;
        let piece =
            bytes
                .get(start..start + *len as usize)
                .ok_or_else(|| StorageError::Corrupt {
                    object: format!("chunk {digest}"),
                })?;
        chunk::check(digest, piece)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! What a pack's read-back makes of what the object store answers: cases a real store gives
    //! only now and then (a lagging read after a write, an occupant with other bytes), so an
    //! in-memory storage answers them on demand. The conformance suite runs the rest on Garage.

    use std::{collections::HashMap, sync::Mutex};

    use super::*;

    /// Keeps objects in memory; `lagging` keys read as missing.
    #[derive(Debug, Default)]
    struct Memory {
        objects: Mutex<HashMap<String, Bytes>>,
        lagging: Mutex<Vec<String>>,
    }

    impl Memory {
        fn objects(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
            self.objects.lock().unwrap_or_else(|p| p.into_inner())
        }
    }

    impl ObjectStorage for Memory {
        fn put_if_absent(
            &self,
            key: &str,
            bytes: Bytes,
        ) -> BoxFuture<'_, Result<Created, ObjectError>> {
            let mut objects = self.objects();
            let created = if objects.contains_key(key) {
                Created::Occupied
            } else {
                objects.insert(key.to_owned(), bytes);
                Created::Written
            };
            Box::pin(async move { Ok(created) })
        }

        fn put(&self, key: &str, bytes: Bytes) -> BoxFuture<'_, Result<(), ObjectError>> {
            self.objects().insert(key.to_owned(), bytes);
            Box::pin(async { Ok(()) })
        }

        fn get(&self, key: &str) -> BoxFuture<'_, Result<Option<Bytes>, ObjectError>> {
            let lagging = self
                .lagging
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|k| k == key);
            let found = (!lagging)
                .then(|| self.objects().get(key).cloned())
                .flatten();
            Box::pin(async move { Ok(found) })
        }

        fn get_range(
            &self,
            key: &str,
            range: Range<u64>,
        ) -> BoxFuture<'_, Result<Option<Bytes>, ObjectError>> {
            let found = self
                .objects()
                .get(key)
                .map(|b| b.slice(range.start as usize..range.end as usize));
            Box::pin(async move { Ok(found) })
        }

        fn size(&self, key: &str) -> BoxFuture<'_, Result<Option<u64>, ObjectError>> {
            let size = self.objects().get(key).map(|b| b.len() as u64);
            Box::pin(async move { Ok(size) })
        }

        fn list(&self, _prefix: &str) -> BoxFuture<'_, Result<Vec<Listed>, ObjectError>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn delete(&self, key: &str) -> BoxFuture<'_, Result<(), ObjectError>> {
            self.objects().remove(key);
            Box::pin(async { Ok(()) })
        }
    }

    /// A pack of two chunks: its name, bytes and chunk list.
    fn pack() -> (String, Bytes, Vec<(Digest, u64, u32)>) {
        let (a, b) = (vec![1u8; 100], vec![2u8; 50]);
        let chunks = vec![(Digest::of(&a), 0, 100), (Digest::of(&b), 100, 50)];
        let bytes = Bytes::from([a, b].concat());
        (pack::pack_name(&chunks), bytes, chunks)
    }

    #[tokio::test]
    async fn a_pack_read_back_is_retryable_when_the_store_lags_and_conflicts_when_it_differs() {
        let storage = Arc::new(Memory::default());
        let bucket = Bucket::new(storage.clone(), "s3://test".to_owned(), "p");
        let (name, bytes, chunks) = pack();
        bucket
            .create_pack(&name, bytes.clone(), &chunks)
            .await
            .expect("written and read back");

        // Written, and not readable yet: retryable, not a conflict.
        let (_, other_bytes, _) = pack();
        let lagging = format!("p/packs/lagging-{name}");
        storage.lagging.lock().expect("lock").push(lagging.clone());
        match bucket
            .create_pack(&format!("lagging-{name}"), other_bytes, &chunks)
            .await
        {
            Err(PutError::Storage(StorageError::Unavailable(_))) => {}
            other => panic!("a lagging read-back was {other:?}"),
        }

        // An occupant with other bytes of the same length: damage, never overwritten.
        let mut damaged = bytes.to_vec();
        damaged[7] ^= 1;
        storage
            .objects()
            .insert(format!("p/packs/{name}"), Bytes::from(damaged.clone()));
        match bucket.create_pack(&name, bytes, &chunks).await {
            Err(PutError::ImageConflict { .. }) => {}
            other => panic!("an occupant with other bytes was {other:?}"),
        }
        assert_eq!(storage.objects()[&format!("p/packs/{name}")], damaged);
    }
}
