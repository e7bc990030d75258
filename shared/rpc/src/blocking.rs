//! A bounded gate in front of tokio's blocking pool, shared by every service with heavy sync work.
//!
//! PBKDF2 and SQLite work must not run on the async runtime, and an unbounded burst of it must not
//! queue forever: a job waits at most a queue timeout for one of a fixed number of permits and is
//! otherwise refused with UNAVAILABLE/`OVERLOADED`, a retryable answer.

use std::{sync::Arc, time::Duration};

use tokio::sync::Semaphore;
use tonic::Status;

use crate::status;

/// Runs blocking jobs at most `concurrency` at a time.
#[derive(Debug)]
pub struct BlockingPool {
    permits: Arc<Semaphore>,
    queue_timeout: Duration,
    domain: &'static str,
    jobs: &'static str,
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
        Self {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            queue_timeout,
            domain,
            jobs,
        }
    }

    /// Runs `job` on the blocking pool once a permit is free, or refuses it as OVERLOADED.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        let permit = tokio::time::timeout(
            self.queue_timeout,
            Arc::clone(&self.permits).acquire_owned(),
        )
        .await
        .map_err(|_| self.overloaded())?
        .map_err(|_| self.overloaded())?;
        // The permit travels with the job: a cancelled request stops waiting for it, but the
        // thread works until the job ends and must count against the limit until then.
        tokio::task::spawn_blocking(move || {
            let result = job();
            drop(permit);
            result
        })
        .await
        .map_err(|join| status::internal(self.domain, &join))
    }

    /// Like [`run`](Self::run), for a job that fails with a service's own mapped error.
    pub async fn try_run<T, E>(
        &self,
        job: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        E: Into<Status> + Send + 'static,
    {
        self.run(job).await?.map_err(Into::into)
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
