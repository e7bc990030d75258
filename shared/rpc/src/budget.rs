//! The upload budget: how many bytes of uploads one process holds in memory at once.
//!
//! Every upload a service buffers (a header-then-chunks stream: a pushed image the sync service
//! validates, a file the schema service opens) is admitted against one [`UploadBudget`] before
//! its first body byte is read, for its declared length (or its limit, when it declares none).
//! While the budget is spent, an upload waits up to the budget's wait and is then refused as busy (retryable), so a
//! burst of large uploads costs bounded memory instead of an OOM kill that takes every other
//! request with it. Admission is up front, for the whole length, never piecemeal: uploads that
//! each held part of the budget and waited for the rest could wait on each other for ever.
//!
//! An upload larger than the whole budget is admitted once it is the only one holding any of it,
//! so a budget smaller than the quota slows large uploads but never refuses them all.
//!
//! No client can hold the budget for long, or most of it at once: waiting is first come, first
//! served (the semaphore is fair, so a large upload is not starved by small ones); an upload
//! must keep its [`Pace`](crate::pace::Pace), which the budget carries to whoever reads the
//! upload, or it is cut off and its share freed; and an upload admitted for its owners (its
//! user, and the client address it came from) waits aside, out of the line for the budget, while
//! any of them already holds half of it, so neither one user nor one address can take it all
//! from the others, nor hold up their uploads by queueing more (an owner holding nothing is
//! always let in line). It gets in when its owners' earlier uploads end, or is refused after the
//! same wait as any other.
//!
//! The budget is a value the composition root builds (`services/hub`) and hands to whoever
//! buffers uploads: the process's services (the gateway holds none: it streams each body on to
//! the service that stores it, so no upload waits on another's share).

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The budget's unit: uploads are rounded up to whole units, which keeps permit counts small.
const UNIT: u64 = 64 * 1024;

/// The default size of a budget, in MiB: two uploads at the default 64 MiB quota. Each buffered
/// byte may cost a component a few more (the schema service opens a validated image as a
/// database), so this keeps the all-in-one hub's peak well inside a 1 GiB container.
pub const DEFAULT_MIB: u64 = 128;

/// How long an upload waits for room by default before it is refused.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// Bytes of uploads held in memory at once, shared by clones.
#[derive(Clone)]
pub struct UploadBudget {
    permits: Arc<Semaphore>,
    /// The whole budget, in units.
    units: u32,
    wait: Duration,
    pace: crate::pace::Pace,
    /// Units each owner holds now.
    shares: Arc<Shares>,
}

impl fmt::Debug for UploadBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UploadBudget")
            .field("bytes", &self.bytes())
            .field("available", &self.available())
            .field("wait", &self.wait)
            .field("pace", &self.pace)
            .finish()
    }
}

impl Default for UploadBudget {
    /// [`DEFAULT_MIB`], waiting [`DEFAULT_WAIT`]: what a component gets when nobody configures it.
    fn default() -> Self {
        Self::new(DEFAULT_MIB << 20, DEFAULT_WAIT)
    }
}

/// An upload's share of the budget, given back when dropped.
#[derive(Debug)]
#[must_use = "the upload holds its share only while this lives"]
pub struct Admission {
    permit: OwnedSemaphorePermit,
    owned: Owned,
}

impl Admission {
    /// Gives back all of this share but what `bytes` take (at least one unit), for a request
    /// past its peak that keeps only part of what it was admitted for (a delta, once built,
    /// without the images it was built from).
    pub fn shrink_to(&mut self, bytes: u64) {
        let held = self.permit.num_permits();
        let keep = usize::try_from(bytes.div_ceil(UNIT).max(1)).unwrap_or(usize::MAX);
        let Some(excess) = held.checked_sub(keep).filter(|n| *n > 0) else {
            return;
        };
        drop(self.permit.split(excess));
        self.owned.give_back(excess as u32);
    }
}

/// The owners' part of an admission (each owner holds all of its units), given back with it.
#[derive(Debug)]
struct Owned {
    shares: Arc<Shares>,
    names: Vec<String>,
    units: u32,
}

impl Owned {
    /// Gives `units` of the admission back for every owner.
    fn give_back(&mut self, units: u32) {
        let units = units.min(self.units);
        self.units -= units;
        let mut owners = self.shares.lock();
        for name in &self.names {
            if let Some(held) = owners.get_mut(name) {
                *held = held.saturating_sub(units);
                if *held == 0 {
                    owners.remove(name);
                }
            }
        }
        drop(owners);
        if units > 0 {
            self.shares.given_back.notify_waiters();
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.give_back(self.units);
    }
}

/// The budget stayed spent for the whole wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// The bytes the refused upload asked for.
    pub wanted: u64,
    /// The whole budget.
    pub budget: u64,
    /// Refused because its owner already holds its share, not because the budget is spent.
    pub share: bool,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let budget = match self.budget {
            b if b >= 1 << 20 => format!("{} MiB", b >> 20),
            b => format!("{} KiB", b >> 10),
        };
        if self.share {
            write!(
                f,
                "the requests in flight of this user, or from this client address, already hold \
                 their share of the upload budget (half of {budget}); retry when they are done"
            )
        } else {
            write!(
                f,
                "uploads in flight hold the whole upload budget ({budget}); retry shortly"
            )
        }
    }
}

impl UploadBudget {
    /// A budget of `bytes` (at least one unit, at most 4 TiB) where an upload waits up to `wait`.
    pub fn new(bytes: u64, wait: Duration) -> Self {
        let units = bytes.div_ceil(UNIT).clamp(1, u64::from(u32::MAX >> 3)) as u32;
        Self {
            permits: Arc::new(Semaphore::new(units as usize)),
            units,
            wait,
            pace: crate::pace::Pace::default(),
            shares: Arc::default(),
        }
    }

    /// This budget, its uploads held to `pace`.
    pub fn paced(mut self, pace: crate::pace::Pace) -> Self {
        self.pace = pace;
        self
    }

    /// The pace every upload admitted here must keep.
    pub fn pace(&self) -> crate::pace::Pace {
        self.pace
    }

    /// A budget of `mib` MiB.
    pub fn from_mib(mib: u64, wait: Duration) -> Self {
        Self::new(mib.saturating_mul(1 << 20), wait)
    }

    /// The whole budget in bytes.
    pub fn bytes(&self) -> u64 {
        u64::from(self.units) * UNIT
    }

    /// Bytes not held by any upload now.
    pub fn available(&self) -> u64 {
        self.permits.available_permits() as u64 * UNIT
    }

    /// Admits an upload of `bytes`, waiting for room up to the budget's wait.
    pub async fn admit(&self, bytes: u64) -> Result<Admission, Busy> {
        self.admit_for(&[], bytes).await
    }

    /// [`UploadBudget::admit`] for `owners` (a user, the client's address), each held to half
    /// the budget: while one of them holds its share (or would pass it with this upload,
    /// holding any), the upload waits aside for its owners' own uploads to end, within the same
    /// wait, and is then refused as over its share. Waiting aside keeps it out of the line for
    /// the budget, so an owner over its share never holds up anyone else's upload.
    pub async fn admit_for(&self, owners: &[String], bytes: u64) -> Result<Admission, Busy> {
        let units = bytes.div_ceil(UNIT).clamp(1, u64::from(self.units)) as u32;
        let busy = Busy {
            wanted: bytes,
            budget: self.bytes(),
            share: false,
        };
        let deadline = tokio::time::Instant::now() + self.wait;
        // Counted before the wait for the budget, so an owner's uploads queued together are one
        // share too.
        let owned = loop {
            let given_back = self.shares.given_back.notified();
            if let Some(owned) = self.shares.take(owners, units, (self.units / 2).max(1)) {
                break owned;
            }
            if tokio::time::timeout_at(deadline, given_back).await.is_err() {
                return Err(Busy {
                    share: true,
                    ..busy
                });
            }
        };
        match tokio::time::timeout_at(
            deadline,
            Arc::clone(&self.permits).acquire_many_owned(units),
        )
        .await
        {
            Ok(Ok(permit)) => Ok(Admission { permit, owned }),
            // The semaphore is never closed; a closed one admits nobody.
            Ok(Err(_)) | Err(_) => Err(busy),
        }
    }
}

/// What each owner holds of the budget, and a signal whenever some of it is given back.
#[derive(Debug, Default)]
struct Shares {
    held: Mutex<HashMap<String, u32>>,
    given_back: Notify,
}

impl Shares {
    /// Takes `units` for every one of `owners`, unless one of them holds some and would pass
    /// `share` with them (an owner holding nothing is always let in line, whatever the size).
    fn take(self: &Arc<Self>, owners: &[String], units: u32, share: u32) -> Option<Owned> {
        let mut held = self.lock();
        let over = owners.iter().any(|owner| {
            let holds = held.get(owner).copied().unwrap_or(0);
            holds > 0 && holds.saturating_add(units) > share
        });
        if over {
            return None;
        }
        for owner in owners {
            *held.entry(owner.clone()).or_default() += units;
        }
        Some(Owned {
            shares: Arc::clone(self),
            names: owners.to_vec(),
            units,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[tokio::test]
    async fn uploads_wait_for_room_and_are_refused_when_none_comes() {
        let budget = UploadBudget::new(100 * MIB, Duration::from_millis(50));
        let first = budget.admit(60 * MIB).await.expect("room for the first");
        // A second 60 MiB upload does not fit beside it: refused after the wait, holding nothing.
        let refused = budget.admit(60 * MIB).await.expect_err("no room");
        assert_eq!(refused.budget, 100 * MIB);
        assert_eq!(budget.available(), 40 * MIB);
        // A small one still fits.
        let small = budget.admit(MIB).await.expect("room for a small one");
        drop((first, small));
        assert_eq!(budget.available(), 100 * MIB);
    }

    #[tokio::test]
    async fn a_waiting_upload_is_admitted_when_room_is_given_back() {
        let budget = UploadBudget::new(64 * MIB, Duration::from_secs(30));
        let held = budget.admit(64 * MIB).await.expect("room");
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit(64 * MIB).await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "it waits while the budget is held");
        drop(held);
        waiting
            .await
            .expect("task")
            .expect("admitted once room came back");
    }

    /// An upload over the whole budget is admitted alone, never refused for ever.
    #[tokio::test]
    async fn an_upload_larger_than_the_budget_is_admitted_alone() {
        let budget = UploadBudget::new(MIB, Duration::from_millis(50));
        let big = budget.admit(64 * MIB).await.expect("admitted alone");
        assert_eq!(budget.available(), 0);
        budget.admit(1).await.expect_err("nothing fits beside it");
        drop(big);
        assert_eq!(budget.available(), MIB);
        // Rounding: a budget is whole units, and so is every admission.
        assert_eq!(UploadBudget::new(1, Duration::ZERO).bytes(), 64 * 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn one_owner_holds_at_most_half_and_others_still_get_in() {
        let budget = UploadBudget::new(128 * MIB, Duration::from_secs(5));
        let mallory = || ["mallory".to_owned()];
        // A first upload of any size is let in line, even past half.
        let first = budget
            .admit_for(&mallory(), 64 * MIB)
            .await
            .expect("the first");
        // A second of the same owner would pass half: it waits aside, whatever room is left...
        let second = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit_for(&mallory(), MIB).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!second.is_finished(), "over its share, it waits");
        // ...and another owner is not held up behind it.
        let other = budget
            .admit_for(&["alice".into()], 64 * MIB)
            .await
            .expect("another owner");
        // Once the owner's first upload ends, the second gets in.
        drop(first);
        let second = second.await.expect("task").expect("admitted in turn");
        drop((second, other));
        // Still over its share when the wait ends: refused as over its share.
        let again = budget.admit_for(&mallory(), 32 * MIB).await;
        let more = budget.admit_for(&mallory(), 32 * MIB).await;
        assert!(again.is_ok() && more.is_ok());
        let started = tokio::time::Instant::now();
        let refused = budget.admit_for(&mallory(), MIB).await;
        assert!(refused.is_err_and(|busy| busy.share));
        assert_eq!(started.elapsed(), Duration::from_secs(5), "after the wait");
        assert_eq!(
            budget.available(),
            64 * MIB,
            "the refused one holds nothing"
        );
    }

    /// One address's uploads hold at most half too, whoever's they are (issue 36 point 2).
    #[tokio::test]
    async fn one_address_holds_at_most_half_whatever_the_users() {
        let budget = UploadBudget::new(128 * MIB, Duration::from_millis(50));
        let owners = |user: &str, address: &str| [user.to_owned(), address.to_owned()];
        let first = budget
            .admit_for(&owners("user:a", "address:192.0.2.7"), 64 * MIB)
            .await
            .expect("the first");
        let refused = budget
            .admit_for(&owners("user:b", "address:192.0.2.7"), MIB)
            .await;
        assert!(
            refused.is_err_and(|busy| busy.share),
            "another user, the same address"
        );
        let other = budget
            .admit_for(&owners("user:b", "address:198.51.100.1"), 32 * MIB)
            .await
            .expect("the same user's share is hers, from another address");
        drop(first);
        assert!(
            budget
                .admit_for(&owners("user:c", "address:192.0.2.7"), 32 * MIB)
                .await
                .is_ok(),
            "the address's share came back with its upload"
        );
        drop(other);
    }

    #[tokio::test]
    async fn a_shrunk_admission_gives_back_the_rest_and_its_owners_share() {
        let budget = UploadBudget::new(128 * MIB, Duration::from_millis(50));
        let mut built = budget
            .admit_for(&["alice".into()], 96 * MIB)
            .await
            .expect("room");
        assert!(budget.admit_for(&["alice".into()], MIB).await.is_err());
        built.shrink_to(MIB + 1);
        assert_eq!(budget.available(), 128 * MIB - MIB - 64 * 1024);
        // Growing is no shrinking: the share stays as it is.
        built.shrink_to(100 * MIB);
        assert_eq!(budget.available(), 128 * MIB - MIB - 64 * 1024);
        // The owner holds what is left, so it may hold more again.
        let more = budget
            .admit_for(&["alice".into()], 32 * MIB)
            .await
            .expect("within half");
        built.shrink_to(0);
        assert_eq!(
            budget.available(),
            96 * MIB - 64 * 1024,
            "at least a unit is kept"
        );
        drop((built, more));
        assert_eq!(budget.available(), 128 * MIB);
        assert!(budget.admit_for(&["alice".into()], 64 * MIB).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_is_first_come_first_served() {
        let budget = UploadBudget::new(100 * MIB, Duration::from_secs(60));
        let holder = budget.admit(100 * MIB).await.expect("the whole budget");
        // A large upload queues first, then a small one: the small one does not pass it.
        let large = tokio::spawn({
            let budget = budget.clone();
            async move {
                budget
                    .admit(80 * MIB)
                    .await
                    .map(|_| tokio::time::Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let small = tokio::spawn({
            let budget = budget.clone();
            async move {
                budget
                    .admit(MIB)
                    .await
                    .map(|a| (tokio::time::Instant::now(), a))
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !small.is_finished(),
            "the small one waits behind the large one"
        );
        drop(holder);
        let large = large.await.expect("task").expect("admitted");
        let (small, _) = small.await.expect("task").expect("admitted");
        assert!(large <= small);
    }
}
