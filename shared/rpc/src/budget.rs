//! The upload budget: how many bytes of uploads one process holds in memory at once.
//!
//! Every upload a service buffers (a header-then-chunks stream: a pushed image the sync service
//! validates, a file the schema service opens) is admitted against one [`UploadBudget`] before
//! its first body byte is read, for its declared length (or its limit, when it declares none). While the budget is
//! spent, an upload waits up to the budget's wait and is then refused as busy (retryable), so a
//! burst of large uploads costs bounded memory instead of an OOM kill that takes every other
//! request with it. Admission is up front, for the whole length, never piecemeal: uploads that
//! each held part of the budget and waited for the rest could wait on each other for ever.
//!
//! An upload larger than the whole budget is admitted once it is the only one holding any of it,
//! so a budget smaller than the quota slows large uploads but never refuses them all.
//!
//! The budget is a value the composition root builds (`services/hub`) and hands to whoever
//! buffers uploads: the process's services (the gateway holds none: it streams each body on to
//! the service that stores it, so no upload waits on another's share).

use std::{fmt, sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
}

impl fmt::Debug for UploadBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UploadBudget")
            .field("bytes", &self.bytes())
            .field("available", &self.available())
            .field("wait", &self.wait)
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
    _permit: OwnedSemaphorePermit,
}

/// The budget stayed spent for the whole wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// The bytes the refused upload asked for.
    pub wanted: u64,
    /// The whole budget.
    pub budget: u64,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "uploads in flight hold the whole upload budget ({} MiB); retry shortly",
            self.budget >> 20
        )
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
        }
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
        let units = bytes.div_ceil(UNIT).clamp(1, u64::from(self.units)) as u32;
        let busy = Busy {
            wanted: bytes,
            budget: self.bytes(),
        };
        match tokio::time::timeout(
            self.wait,
            Arc::clone(&self.permits).acquire_many_owned(units),
        )
        .await
        {
            Ok(Ok(permit)) => Ok(Admission { _permit: permit }),
            // The semaphore is never closed; a closed one admits nobody.
            Ok(Err(_)) | Err(_) => Err(busy),
        }
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
}
