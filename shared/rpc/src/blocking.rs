//! A bounded gate in front of tokio's blocking pool, shared by every service with heavy sync work.
//!
//! PBKDF2 and SQLite work must not run on the async runtime, and an unbounded burst of it must not
//! queue forever: a job waits at most a queue timeout for one of a fixed number of permits and is
//! otherwise refused with UNAVAILABLE/`OVERLOADED`, a retryable answer.
//!
//! A job also stops when nobody waits for it any more. Each job gets a [`Cancel`], tripped when
//! the future awaiting the job is dropped — the client cancelled, its connection dropped, or the
//! call's deadline passed (`crate::deadline` drops the call there) — and the job hands it to the
//! work it runs: `snug_schema::Interrupt` stops SQLite statements and the loops between them, so
//! the job returns within milliseconds and its permit is free again. Before, a job ran to its
//! end for a caller long gone: an ApplyDdl of 5,000 statements held its slot for a minute after
//! the client's deadline, and two of them starved the materialize service. A job whose caller
//! went away while it queued never starts. Work that is bounded and short (a PBKDF2 derivation of
//! at most the accepted iteration count, one AES-GCM pass) is not interrupted; it ends soon anyway.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::sync::Semaphore;
use tonic::Status;

use crate::status;

/// Runs blocking jobs at most `concurrency` at a time.
#[derive(Debug)]
pub struct BlockingPool {
    permits: Arc<Semaphore>,
    concurrency: usize,
    queue_timeout: Duration,
    domain: &'static str,
    jobs: &'static str,
    stopped: Arc<AtomicU64>,
}

/// A job's view of its caller: set once nobody waits for the job's result any more.
#[derive(Debug, Clone)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Returns whether the caller went away; the job should stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Returns the flag itself, for a domain crate's own interrupt (`snug_schema::Interrupt`).
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// What a pool is doing, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Jobs holding a permit now (queued jobs are not counted).
    pub running: usize,
    /// Jobs that saw their caller go away: they stopped early, or never started once they had a
    /// permit.
    pub stopped: u64,
}

/// Sets the job's flag when the future awaiting the job is dropped before the job's result came.
struct CancelOnDrop(Option<Arc<AtomicBool>>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// The number of jobs a pool runs at once when its configuration names none: one per CPU, so
/// CPU-bound jobs keep every core busy and no more.
pub fn concurrency_or_cpus(configured: Option<usize>) -> usize {
    configured.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

impl BlockingPool {
    /// A pool of `concurrency` permits (at least one); `jobs` names the work in the OVERLOADED
    /// message ("key derivations"), `domain` is the service's error domain.
    pub fn new(
        concurrency: usize,
        queue_timeout: Duration,
        domain: &'static str,
        jobs: &'static str,
    ) -> Self {
        let concurrency = concurrency.max(1);
        Self {
            permits: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            queue_timeout,
            domain,
            jobs,
            stopped: Arc::default(),
        }
    }

    /// Runs `job` on the blocking pool once a permit is free, or refuses it as OVERLOADED. The
    /// job gets the [`Cancel`] that tells it its caller went away (see the module docs).
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce(Cancel) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let permit = tokio::time::timeout(
            self.queue_timeout,
            Arc::clone(&self.permits).acquire_owned(),
        )
        .await
        .map_err(|_| self.overloaded())?
        .map_err(|_| self.overloaded())?;
        let flag = Arc::new(AtomicBool::new(false));
        let on_drop = CancelOnDrop(Some(Arc::clone(&flag)));
        let cancel = Cancel(flag);
        let stopped = Arc::clone(&self.stopped);
        let jobs = self.jobs;
        // The permit travels with the job: the thread works until the job returns and counts
        // against the limit until then; a cancelled job returns early, and so frees it early.
        let handle = tokio::task::spawn_blocking(move || {
            let result = (!cancel.is_cancelled()).then(|| job(cancel.clone()));
            if cancel.is_cancelled() {
                stopped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(jobs, "a job stopped early: its caller went away");
            }
            drop(permit);
            result
        });
        let result = handle.await;
        on_drop.disarm();
        match result {
            Ok(Some(value)) => Ok(value),
            // Only a dropped caller sets the flag, and a dropped caller is not here to see this.
            Ok(None) => Err(status::internal(
                self.domain,
                &std::io::Error::other("a job was cancelled while its caller waited"),
            )),
            Err(join) => Err(status::internal(self.domain, &join)),
        }
    }

    /// Like [`run`](Self::run), for a job that fails with a service's own mapped error.
    pub async fn try_run<T, E>(
        &self,
        job: impl FnOnce(Cancel) -> Result<T, E> + Send + 'static,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        E: Into<Status> + Send + 'static,
    {
        self.run(job).await?.map_err(Into::into)
    }

    /// Returns what the pool is doing now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            running: self.concurrency - self.permits.available_permits(),
            stopped: self.stopped.load(Ordering::Relaxed),
        }
    }

    fn overloaded(&self) -> Status {
        status::from_reason(
            &snug_reasons::rpc::OVERLOADED,
            self.domain,
            format!("too many {} are in flight; retry shortly", self.jobs),
            [],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job whose caller goes away sees its cancel, ends, and frees its permit; one whose caller
    /// went away while it queued never runs.
    #[tokio::test]
    async fn a_dropped_caller_cancels_its_job_and_frees_the_slot() {
        let pool = Arc::new(BlockingPool::new(
            1,
            Duration::from_secs(30),
            "snug.test",
            "tests",
        ));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let running = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                pool.run(move |cancel| {
                    let _ = started_tx.send(());
                    // Bounded, so a pool that never cancels fails the test instead of hanging it.
                    let deadline = std::time::Instant::now() + Duration::from_secs(60);
                    while !cancel.is_cancelled() && std::time::Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    cancel.is_cancelled()
                })
                .await
            })
        };
        tokio::task::spawn_blocking(move || started_rx.recv())
            .await
            .expect("join")
            .expect("the job started");
        let queued = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move { pool.run(|_| panic!("a cancelled job never runs")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        queued.abort();
        running.abort();
        let freed = tokio::time::timeout(Duration::from_secs(10), async {
            while pool.stats().running > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(freed.is_ok(), "the slot is free again: {:?}", pool.stats());
        assert_eq!(
            pool.stats().stopped,
            1,
            "the running job stopped; the queued one never ran"
        );
        assert_eq!(
            pool.run(|cancel| cancel.is_cancelled()).await.ok(),
            Some(false)
        );
    }
}
