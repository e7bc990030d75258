//! Credentials this gateway has checked, kept until the users directory hears a change that may
//! take access away (issue 40 point 6): a poll with a known token reads nothing.
//!
//! An entry is kept at the directory's revocation generation read *before* the directory was
//! asked, and used only while that is still the generation and every change is heard
//! (`snug_users::Revocations`): a revocation committing meanwhile makes the entry useless the
//! moment it is heard, however the read and the revocation interleaved. Refusals are never kept,
//! so a new token works at once. What a kept credential still must pass is checked on every use
//! by its caller (a session's expiry, its OpenID Connect bound). Keys are SHA-256 of the
//! credential, so the map holds no token.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use sha2::{Digest as _, Sha256};
use snug_users::Revocations;
use tokio::sync::watch;

/// The most credentials of one kind kept; beyond, an eighth are forgotten.
const CAPACITY: usize = 65_536;

/// Kept credentials of one kind (`T`: what the directory said of one).
#[derive(Debug)]
pub struct Kept<T> {
    revocations: watch::Receiver<Revocations>,
    entries: Mutex<HashMap<[u8; 32], (u64, T)>>,
}

/// The key of a credential: its kind and text, hashed.
pub fn key(kind: &str, credential: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    hasher.update([0]);
    hasher.update(credential.as_bytes());
    hasher.finalize().into()
}

/// Where a lookup stands: the generation a fill must be kept at, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fill(Option<u64>);

impl<T: Clone> Kept<T> {
    /// Nothing kept yet; entries trusted as `revocations` says.
    pub fn new(revocations: watch::Receiver<Revocations>) -> Self {
        Self {
            revocations,
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<[u8; 32], (u64, T)>> {
        // Every change below completes under the lock: a poisoned map is still whole.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What is kept for `key` and may be trusted, or where a fill stands.
    pub fn get(&self, key: &[u8; 32]) -> Result<T, Fill> {
        let now = *self.revocations.borrow();
        if !now.live {
            return Err(Fill(None));
        }
        let mut entries = self.entries();
        match entries.get(key) {
            Some((generation, value)) if *generation == now.generation => Ok(value.clone()),
            Some(_) => {
                entries.remove(key);
                Err(Fill(Some(now.generation)))
            }
            None => Err(Fill(Some(now.generation))),
        }
    }

    /// Keeps what the directory said of `key`, read after `fill`, unless a revocation was heard
    /// since.
    pub fn keep(&self, key: [u8; 32], fill: Fill, value: T) {
        let Fill(Some(generation)) = fill else {
            return;
        };
        let now = *self.revocations.borrow();
        if !now.live || now.generation != generation {
            return;
        }
        let mut entries = self.entries();
        if entries.len() >= CAPACITY {
            let mut n = 0;
            entries.retain(|_, _| {
                n += 1;
                n > CAPACITY / 8
            });
        }
        entries.insert(key, (generation, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revocations(generation: u64, live: bool) -> Revocations {
        Revocations { generation, live }
    }

    #[test]
    fn a_kept_credential_is_trusted_until_a_revocation_is_heard() {
        let (heard, watching) = watch::channel(revocations(0, true));
        let kept: Kept<&str> = Kept::new(watching);
        let alice = key("bearer", "snug_alice");
        let fill = kept.get(&alice).expect_err("nothing kept");
        kept.keep(alice, fill, "alice");
        assert_eq!(kept.get(&alice), Ok("alice"));
        assert!(
            kept.get(&key("session", "snug_alice")).is_err(),
            "kinds apart"
        );
        heard.send_replace(revocations(1, true));
        assert!(kept.get(&alice).is_err(), "a revocation forgets it");
        // Not live: nothing trusted, nothing kept.
        heard.send_replace(revocations(1, false));
        let fill = kept.get(&alice).expect_err("not trusted");
        kept.keep(alice, fill, "alice");
        heard.send_replace(revocations(1, true));
        assert!(kept.get(&alice).is_err());
    }

    #[test]
    fn a_read_that_raced_a_revocation_is_not_kept() {
        let (heard, watching) = watch::channel(revocations(4, true));
        let kept: Kept<&str> = Kept::new(watching);
        let alice = key("bearer", "snug_alice");
        let fill = kept.get(&alice).expect_err("nothing kept");
        // The directory answered before the revocation committed; the cache hears it after.
        heard.send_replace(revocations(5, true));
        kept.keep(alice, fill, "alice");
        assert!(kept.get(&alice).is_err());
    }

    #[test]
    fn the_kept_credentials_stay_within_capacity() {
        let (_heard, watching) = watch::channel(revocations(0, true));
        let kept: Kept<u32> = Kept::new(watching);
        for n in 0..CAPACITY as u32 + 10 {
            let k = key("bearer", &n.to_string());
            let fill = kept.get(&k).expect_err("new");
            kept.keep(k, fill, n);
        }
        assert!(kept.entries().len() <= CAPACITY);
    }
}
