//! gRPC service `snug.container.v1`: a thin adapter from the proto to `snug-container`.
//!
//! Requests arrive as header-then-chunks streams (see `snug_rpc::chunks`), the domain crate does
//! the work, and `status.rs` maps its errors to statuses with `ErrorInfo` reasons. PBKDF2 at
//! 600,000 iterations costs ~85 ms of one core, so every operation that derives a key runs on the
//! blocking pool behind a semaphore ([`KdfPool`]): a burst of unlocks queues for a bounded time
//! and is then refused with `OVERLOADED` instead of starving the async runtime.
//!
//! What this crate deliberately does not do: keep any state between calls, log or store a secret,
//! or touch files.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error_info;
pub mod observe;
pub mod status;

use std::{
    future::Future,
    io::Read as _,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt as _;
use snug_container::{
    Authenticated, Format, Limits, OpenError, Opening, Passphrase, PayloadDecryptor, RecoveryKey,
    Secrets, SlotKind,
};
use snug_proto::container::v1::{
    self as pb,
    container_service_server::{ContainerService, ContainerServiceServer},
};
use snug_reasons::container as reasons;
use snug_rpc::chunks::Chunked;
use snug_rpc::{
    budget::UploadBudget,
    chunks::{self, Receiver, ResponseStream},
    framed,
    runtime::Runtime,
    server::{ServerConfig, Services, parse_duration},
    status::from_reason,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status, Streaming};

use crate::error_info::DOMAIN;

/// The most leading bytes any container check reads: header, wrapped keys and payload IV of eight
/// slots (the largest overhead without the tag).
const MAX_PREFIX_LEN: usize = snug_container::MAX_OVERHEAD as usize - snug_container::TAG_LEN;

/// The fully qualified gRPC service name, as health checks report it.
pub const SERVICE_NAME: &str = "snug.container.v1.ContainerService";

/// The default of [`ContainerConfig::iterations_ceiling`]: ten times the default maximum, about
/// 15 s of one core per derivation.
pub const DEFAULT_ITERATIONS_CEILING: u32 = 100_000_000;

/// Settings of the container service, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct ContainerConfig {
    /// Smallest PBKDF2 iteration count accepted when opening or creating a container; files
    /// below it are refused as ITERATIONS_OUT_OF_POLICY (healthy, not opened cheaply) unless a
    /// request's `iteration_policy` lowers it.
    #[arg(long, env = "SNUG_CONTAINER_MIN_ITERATIONS", default_value_t = 10_000)]
    pub min_iterations: u32,
    /// Largest PBKDF2 iteration count accepted; beyond it a header is a CPU sink, not a file.
    #[arg(
        long,
        env = "SNUG_CONTAINER_MAX_ITERATIONS",
        default_value_t = 10_000_000
    )]
    pub max_iterations: u32,
    /// The most a request's `iteration_policy.max_iterations` may raise the accepted count to:
    /// every iteration is CPU spent before any secret is checked.
    #[arg(
        long,
        env = "SNUG_CONTAINER_ITERATIONS_CEILING",
        default_value_t = DEFAULT_ITERATIONS_CEILING
    )]
    pub iterations_ceiling: u32,
    /// Key derivations run at once (default: the number of CPUs).
    #[arg(long, env = "SNUG_CONTAINER_KDF_CONCURRENCY")]
    pub kdf_concurrency: Option<usize>,
    /// How long a request waits for a key-derivation slot before it is refused as OVERLOADED.
    #[arg(long, env = "SNUG_CONTAINER_KDF_QUEUE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub kdf_queue_timeout: Duration,
    /// Unlock buffers (up to 64 MiB each) kept for reuse between requests; 0 keeps none. A
    /// reused buffer's pages are already mapped, which saves faulting in 64 MiB per unlock.
    #[arg(long, env = "SNUG_CONTAINER_BUFFER_POOL", default_value_t = 2)]
    pub buffer_pool: usize,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        Self {
            min_iterations: Limits::default().min_iterations,
            max_iterations: Limits::default().max_iterations,
            iterations_ceiling: DEFAULT_ITERATIONS_CEILING,
            kdf_concurrency: None,
            kdf_queue_timeout: Duration::from_secs(10),
            buffer_pool: 2,
        }
    }
}

impl ContainerConfig {
    fn limits(&self) -> Limits {
        Limits {
            min_iterations: self.min_iterations,
            max_iterations: self.max_iterations,
            ..Limits::default()
        }
    }
}

/// Runs CPU-heavy crypto on the blocking pool, at most `permits` jobs at a time.
#[derive(Debug)]
pub struct KdfPool(snug_rpc::blocking::BlockingPool);

impl KdfPool {
    /// A pool running `concurrency` jobs at once; a job waits at most `queue_timeout` to start.
    pub fn new(concurrency: usize, queue_timeout: Duration) -> Self {
        Self(snug_rpc::blocking::BlockingPool::new(
            concurrency,
            queue_timeout,
            DOMAIN,
            "key derivations",
        ))
    }

    /// Runs `job` once a permit is free. The job is not interrupted once started: one PBKDF2
    /// derivation is bounded by the accepted iteration count (10,000,000 by default, about 1.3 s
    /// of one core; a request's policy may raise it to the configured ceiling) and the pass over
    /// the payload by the 64 MiB cap, and neither can be resumed, so stopping one halfway saves
    /// little. A job whose caller went away before it started never starts.
    async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        self.0.run(move |_| job()).await
    }
}

/// Unlock buffers kept between requests, so the pages that receive an upload are already mapped.
///
/// A fresh 64 MiB allocation is its own `mmap`, and the kernel faults in and zeroes every page
/// on first touch (30–65 ms of CPU on the reference machine, STACK.md §14), then unmaps it on
/// free; reusing the allocation skips both. Uploads are opened authenticate-first
/// ([`Opening::authenticate_first`]): the plaintext is decrypted into the response's own chunks,
/// so these buffers only ever hold what clients uploaded (ciphertext) and are kept unwiped.
#[derive(Debug)]
struct BufferPool {
    buffers: std::sync::Mutex<Vec<Vec<u8>>>,
    max_buffers: usize,
    /// The largest container the limits accept: a buffer never needs more.
    max_capacity: usize,
}

impl BufferPool {
    fn new(max_buffers: usize, limits: &Limits) -> Self {
        Self {
            buffers: std::sync::Mutex::new(Vec::new()),
            max_buffers,
            max_capacity: limits.max_container_len() as usize,
        }
    }

    /// Returns a kept buffer, or an empty one (which grows on first use).
    fn take(&self) -> Vec<u8> {
        self.buffers
            .lock()
            .ok()
            .and_then(|mut buffers| buffers.pop())
            .unwrap_or_default()
    }

    /// Keeps `buffer` (which held an upload, never plaintext) if there is room and it is not
    /// oversized.
    fn give_back(&self, buffer: Vec<u8>) {
        if self.max_buffers == 0 || buffer.capacity() > self.max_capacity {
            return;
        }
        if let Ok(mut buffers) = self.buffers.lock()
            && buffers.len() < self.max_buffers
        {
            buffers.push(buffer);
        }
    }
}

/// How many plaintext chunks the decryption of a response may run ahead of its sending: enough
/// to keep the sender fed, few enough that a slow client holds little memory.
const DECRYPTED_AHEAD: usize = 4;

/// A response's plaintext chunks, decrypted as they are sent.
type PlaintextChunks = Pin<Box<dyn futures::Stream<Item = Result<Bytes, Status>> + Send>>;

/// The service implementation; cheap to clone.
#[derive(Debug, Clone)]
pub struct ContainerServer {
    budget: UploadBudget,
    limits: Limits,
    iterations_ceiling: u32,
    pool: Arc<KdfPool>,
    buffers: Arc<BufferPool>,
}

impl ContainerServer {
    /// Builds the service from its configuration, its uploads admitted against the runtime's
    /// budget.
    pub fn new(config: &ContainerConfig, runtime: &Runtime) -> Self {
        let concurrency = config.kdf_concurrency.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        });
        Self {
            budget: runtime.upload_budget.clone(),
            limits: config.limits(),
            iterations_ceiling: config.iterations_ceiling,
            pool: Arc::new(KdfPool::new(concurrency, config.kdf_queue_timeout)),
            buffers: Arc::new(BufferPool::new(config.buffer_pool, &config.limits())),
        }
    }
}

impl ContainerServer {
    /// Returns the limits one request's container is judged by: the server's, with the
    /// iteration range the request's `policy` asks for (the maximum at most the ceiling).
    fn limits_for(&self, policy: Option<pb::IterationPolicy>) -> Result<Limits, Status> {
        let Some(policy) = policy else {
            return Ok(self.limits);
        };
        let mut limits = self.limits;
        if policy.min_iterations != 0 {
            limits.min_iterations = policy.min_iterations;
        }
        if policy.max_iterations != 0 {
            if policy.max_iterations > self.iterations_ceiling {
                return Err(snug_rpc::status::invalid_argument(
                    DOMAIN,
                    "iteration_policy.max_iterations",
                    format!(
                        "max_iterations {} is over this server's ceiling of {}",
                        policy.max_iterations, self.iterations_ceiling
                    ),
                ));
            }
            limits.max_iterations = policy.max_iterations;
        }
        if limits.min_iterations > limits.max_iterations {
            return Err(snug_rpc::status::invalid_argument(
                DOMAIN,
                "iteration_policy",
                format!(
                    "the accepted range {}..={} is empty",
                    limits.min_iterations, limits.max_iterations
                ),
            ));
        }
        Ok(limits)
    }
}

/// What an unlock derivation running on the [`KdfPool`] resolves to.
type Derivation =
    Pin<Box<dyn Future<Output = Result<Result<PayloadDecryptor, OpenError>, Status>> + Send>>;

impl ContainerServer {
    /// Receives a container upload and authenticates it while it arrives, with the verdict
    /// `open_owned` would give for the whole upload.
    ///
    /// The key derivation starts on the [`KdfPool`] as soon as the header, wrapped keys and
    /// payload IV are in (the first chunk), so PBKDF2 runs while the rest of the upload streams
    /// in. Once the key is known, each arriving chunk is hashed (GCM's GHASH) in the one buffer
    /// that receives the upload, so when the last chunk lands only its own bytes and the tag
    /// remain. Decryption waits for the tag ([`Opening::authenticate_first`]) and then runs as
    /// the plaintext is sent ([`ContainerServer::release`]), so sending overlaps it. Chunks are
    /// handed to the [`Opening`] in batches on the blocking pool, never on the async runtime:
    /// catching up the chunks that arrived during PBKDF2 is milliseconds of GHASH.
    async fn open_upload<M: Chunked>(
        &self,
        mut receiver: Receiver<'_, M>,
        secrets: Secrets,
        limits: &Limits,
    ) -> Result<Authenticated, Status> {
        // `None` while a batch job has it.
        let mut opening = Some(
            Opening::with_buffer(
                secrets,
                limits,
                receiver.declared_len(),
                self.buffers.take(),
            )
            .authenticate_first(),
        );
        let mut queued: Vec<Bytes> = Vec::new();
        let mut derivation: Option<Derivation> = None;
        let mut derived: Option<Result<PayloadDecryptor, OpenError>> = None;
        let mut batch: Option<tokio::task::JoinHandle<Opening>> = None;
        let mut ended = false;
        // For the debug event below: where the time of an unlock went.
        let started = Instant::now();
        let mut key_ready = None;
        let mut upload_ended = None;
        // The prefix (at most 922 bytes) is pushed right here on the runtime rather than in a
        // batch: it is tiny, and the key derivation it unlocks is the longest step of all, so
        // it should not wait for a blocking thread to copy the rest of the first chunk.
        let mut inline_budget = MAX_PREFIX_LEN;
        let opening = loop {
            if let Some(mut current) = opening.take() {
                for chunk in queued.iter_mut() {
                    if inline_budget == 0 {
                        break;
                    }
                    let head = chunk.split_to(inline_budget.min(chunk.len()));
                    inline_budget -= head.len();
                    current.push(&head);
                }
                queued.retain(|chunk| !chunk.is_empty());
                if let Some(unlocker) = current.take_unlocker() {
                    let pool = Arc::clone(&self.pool);
                    derivation = Some(Box::pin(async move {
                        pool.run(move || unlocker.unlock()).await
                    }));
                }
                if queued.is_empty() && derived.is_none() {
                    if ended && derivation.is_none() {
                        break current;
                    }
                    opening = Some(current);
                } else {
                    let chunks = std::mem::take(&mut queued);
                    let result = derived.take();
                    batch = Some(tokio::task::spawn_blocking(move || {
                        if let Some(result) = result {
                            current.set_decryptor(result);
                        }
                        for chunk in &chunks {
                            current.push(chunk);
                        }
                        current
                    }));
                }
            }
            // At least one branch is live here: either a batch holds the opening, or the
            // upload or the derivation is still running (otherwise the loop ended above).
            tokio::select! {
                chunk = receiver.next_chunk(), if !ended => match chunk? {
                    Some(chunk) => queued.push(chunk),
                    None => {
                        ended = true;
                        upload_ended = Some(started.elapsed());
                    }
                },
                result = poll_some(&mut derivation), if derivation.is_some() => {
                    derivation = None;
                    derived = Some(result?);
                    key_ready = Some(started.elapsed());
                }
                current = poll_some(&mut batch), if batch.is_some() => {
                    batch = None;
                    opening = Some(current.map_err(|join| snug_rpc::status::internal(DOMAIN, &join))?);
                }
            }
        };
        // Only the tail (under one chunk) and the tag are left; the key was derived above.
        let authenticated = tokio::task::spawn_blocking(move || opening.finish_authenticated())
            .await
            .map_err(|join| snug_rpc::status::internal(DOMAIN, &join))?
            .map_err(status::open_error)?;
        tracing::debug!(
            upload_ms = upload_ended.map(|d| d.as_secs_f64() * 1e3),
            key_ms = key_ready.map(|d| d.as_secs_f64() * 1e3),
            verified_ms = started.elapsed().as_secs_f64() * 1e3,
            plaintext_len = authenticated.plaintext_len(),
            "authenticated an upload as it arrived"
        );
        Ok(authenticated)
    }

    /// Releases an authenticated payload: its chunks are decrypted on the blocking pool, at most
    /// [`DECRYPTED_AHEAD`] ahead of the sender, each into its own allocation, so the first
    /// chunk leaves as soon as the tag has verified and the rest is decrypted while it is on its
    /// way. Returns the plaintext's format (from its first bytes) and the chunks. The upload's
    /// buffer returns to the pool once the last chunk is decrypted, or the caller goes away.
    async fn release(&self, authenticated: Authenticated) -> (Format, PlaintextChunks) {
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<Bytes>(DECRYPTED_AHEAD);
        let buffers = Arc::clone(&self.buffers);
        tokio::task::spawn_blocking(move || {
            let mut authenticated = authenticated;
            let mut left = authenticated.plaintext_len();
            while left > 0 {
                let mut chunk = vec![0u8; left.min(chunks::CHUNK_SIZE)];
                match authenticated.read(&mut chunk) {
                    Ok(n) if n == chunk.len() => left -= n,
                    // `Authenticated` fills what it is given until the end; anything else ends
                    // the response short, which the client sees against `plaintext_length`.
                    _ => break,
                }
                if sender.blocking_send(Bytes::from(chunk)).is_err() {
                    // The call was dropped: nobody is left to send the rest to.
                    break;
                }
            }
            buffers.give_back(authenticated.into_buffer());
        });
        let first = receiver.recv().await;
        let format = snug_container::detect(first.as_deref().unwrap_or_default());
        let rest = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|chunk| (chunk, receiver))
        });
        let chunks = futures::stream::iter(first).chain(rest).map(Ok);
        (format, Box::pin(chunks))
    }
}

/// Awaits the future in `slot`, which the caller's `select!` guard has checked is there.
async fn poll_some<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

impl ContainerServer {
    /// Unlock's result and plaintext, for both the generated server's answer and the framed one
    /// (see [`service`]).
    async fn unlock_parts(
        &self,
        request: Request<Streaming<pb::UnlockRequest>>,
    ) -> Result<(pb::UnlockResponse, PlaintextChunks), Status> {
        let mut stream = request.into_inner();
        let (header, receiver) = Receiver::start(
            &mut stream,
            DOMAIN,
            self.limits.max_container_len(),
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let limits = self.limits_for(header.iteration_policy)?;
        let authenticated = self
            .open_upload(receiver, secrets(header.secrets), &limits)
            .await?;
        let opened_by = slot_kind(authenticated.opened_by()).into();
        let plaintext_length = authenticated.plaintext_len() as u64;
        let (plaintext_format, plaintext) = self.release(authenticated).await;
        let result = pb::UnlockResponse::header(pb::UnlockResult {
            opened_by,
            plaintext_length,
            plaintext_format: format(plaintext_format).into(),
        });
        Ok((result, plaintext))
    }
}

/// Wraps the service in its generated server, with the chunk-sized message limits. Unlock's
/// plaintext, the largest answer, goes out as framed chunks (`snug_rpc::framed`): the same
/// messages, without a copy of each chunk into tonic's encode buffer.
pub fn service(
    server: ContainerServer,
) -> framed::Override<ContainerServiceServer<ContainerServer>> {
    let generated = snug_rpc::with_message_limits!(ContainerServiceServer::new(server.clone()));
    framed::Override::new(generated, pb::UNLOCK_PATH, move |request| {
        let server = server.clone();
        async move {
            let request = framed::streaming_request::<pb::UnlockRequest>(request);
            match server.unlock_parts(request).await {
                Ok((result, plaintext)) => framed::respond(result, plaintext),
                Err(status) => status.into_http(),
            }
        }
    })
}

/// The routes and health names of this service, for composing into a server.
pub fn services(config: &ContainerConfig, runtime: &Runtime) -> Services {
    Services::default().with(
        service(ContainerServer::new(config, runtime)),
        &[observe::classify],
    )
}

/// Serves the container service alone on `listener` until `shutdown` completes.
pub async fn serve(
    server_config: &ServerConfig,
    config: &ContainerConfig,
    runtime: &Runtime,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    snug_rpc::server::serve(server_config, listener, services(config, runtime), shutdown).await
}

fn secrets(secrets: Option<pb::Secrets>) -> Secrets {
    let secrets = secrets.unwrap_or_default();
    Secrets {
        passphrase: secrets.passphrase.map(Passphrase::new),
        recovery_key: secrets.recovery_key.as_deref().map(RecoveryKey::parse),
    }
}

fn slot_kind(kind: SlotKind) -> pb::SlotKind {
    match kind {
        SlotKind::Passphrase => pb::SlotKind::Passphrase,
        SlotKind::RecoveryKey => pb::SlotKind::RecoveryKey,
        SlotKind::Unknown(_) => pb::SlotKind::Unknown,
    }
}

fn format(format: Format) -> pb::Format {
    match format {
        Format::Sqlite => pb::Format::Sqlite,
        Format::Container => pb::Format::Snugenc1,
        Format::Unknown => pb::Format::Unknown,
    }
}

/// Refuses a plaintext that is not a SQLite user database (Protect's and Reseal's input).
fn user_database(plaintext: &[u8]) -> Result<(), Status> {
    snug_container::check_plaintext(plaintext)
        .map_err(|err| from_reason(err.reason(), DOMAIN, err.to_string(), []))
}

#[tonic::async_trait]
impl ContainerService for ContainerServer {
    async fn detect_format(
        &self,
        request: Request<pb::DetectFormatRequest>,
    ) -> Result<Response<pb::DetectFormatResponse>, Status> {
        let leading = request.into_inner().leading_bytes;
        Ok(Response::new(pb::DetectFormatResponse {
            format: format(snug_container::detect(&leading)).into(),
        }))
    }

    async fn inspect_container(
        &self,
        request: Request<Streaming<pb::InspectContainerRequest>>,
    ) -> Result<Response<pb::InspectContainerResponse>, Status> {
        let mut stream = request.into_inner();
        // Every check reads only the first bytes and the length: the rest is counted, not kept.
        let mut prefix = Vec::with_capacity(MAX_PREFIX_LEN);
        let mut container_len = 0u64;
        let limit = self.limits.max_container_len();
        let mut policy = None;
        let mut first = true;
        while let Some(message) = chunks::message(&mut stream, DOMAIN).await? {
            if std::mem::take(&mut first) {
                policy = message.iteration_policy;
            }
            if message.chunk.len() > chunks::CHUNK_SIZE {
                return Err(snug_rpc::status::invalid_argument(
                    DOMAIN,
                    "chunk",
                    "a chunk may hold at most 1 MiB",
                ));
            }
            container_len += message.chunk.len() as u64;
            if container_len > limit {
                return Err(snug_rpc::status::too_large(DOMAIN, limit));
            }
            let keep = (MAX_PREFIX_LEN - prefix.len()).min(message.chunk.len());
            prefix.extend_from_slice(&message.chunk[..keep]);
        }
        let limits = self.limits_for(policy)?;
        let info = snug_container::inspect_prefix(&prefix, container_len, &limits)
            .map_err(status::corrupt)?;
        Ok(Response::new(pb::InspectContainerResponse {
            version: info.header.version.into(),
            kdf_id: info.header.kdf_id.into(),
            iterations: info.header.iterations,
            salt: Bytes::copy_from_slice(&info.header.salt),
            slots: info
                .header
                .slots
                .iter()
                .map(|slot| pb::SlotInfo {
                    kind: slot_kind(slot.kind).into(),
                    raw_kind: slot.kind.to_byte().into(),
                    iv: Bytes::copy_from_slice(&slot.iv),
                })
                .collect(),
            header_checksum: info.header.checksum,
            header_length: info.header_len as u64,
            container_length: info.container_len,
            plaintext_length: info.plaintext_len,
        }))
    }

    type ProtectStream = ResponseStream<pb::ProtectResponse>;

    async fn protect(
        &self,
        request: Request<Streaming<pb::ProtectRequest>>,
    ) -> Result<Response<Self::ProtectStream>, Status> {
        let mut stream = request.into_inner();
        let upload = chunks::receive(
            &mut stream,
            DOMAIN,
            self.limits.max_plaintext,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let header = upload.header;
        if !header.custody_rule_acknowledged {
            return Err(from_reason(
                &reasons::CUSTODY_NOT_ACKNOWLEDGED,
                DOMAIN,
                "protect requires custody_rule_acknowledged: the user must be told first that a \
                 file whose passphrase and recovery key are both lost is unrecoverable (no escrow, \
                 no reset)",
                [],
            ));
        }
        user_database(&upload.bytes)?;
        let iterations = match header.iterations {
            0 => snug_container::DEFAULT_ITERATIONS,
            n => n,
        };
        let passphrase = Passphrase::new(header.passphrase);
        let limits = self.limits;
        let (container, recovery_key) = self
            .pool
            .run(move || {
                let recovery_key = RecoveryKey::generate();
                // The upload buffer becomes the container: no second copy of the plaintext.
                snug_container::seal_owned(
                    upload.bytes,
                    &passphrase,
                    &recovery_key,
                    iterations,
                    &limits,
                )
                .map(|container| (container, recovery_key))
            })
            .await?
            .map_err(status::seal_error)?;
        tracing::info!(
            container_len = container.len(),
            iterations,
            "protected a user file"
        );
        let result = pb::ProtectResponse::header(pb::ProtectResult {
            recovery_key: recovery_key.grouped(),
            container_length: container.len() as u64,
        });
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(container),
        )))
    }

    type UnlockStream = ResponseStream<pb::UnlockResponse>;

    async fn unlock(
        &self,
        request: Request<Streaming<pb::UnlockRequest>>,
    ) -> Result<Response<Self::UnlockStream>, Status> {
        let (result, plaintext) = self.unlock_parts(request).await?;
        Ok(Response::new(chunks::respond_stream(result, plaintext)))
    }

    type ChangePassphraseStream = ResponseStream<pb::ChangePassphraseResponse>;

    async fn change_passphrase(
        &self,
        request: Request<Streaming<pb::ChangePassphraseRequest>>,
    ) -> Result<Response<Self::ChangePassphraseStream>, Status> {
        let mut stream = request.into_inner();
        let upload = chunks::receive(
            &mut stream,
            DOMAIN,
            self.limits.max_container_len(),
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let limits = self.limits_for(upload.header.iteration_policy)?;
        let current = Passphrase::new(upload.header.current_passphrase);
        let new = Passphrase::new(upload.header.new_passphrase);
        let container = self
            .pool
            .run(move || snug_container::change_passphrase(&upload.bytes, &current, &new, &limits))
            .await?
            .map_err(status::rewrap_error)?;
        let result = pb::ChangePassphraseResponse::header(pb::ChangePassphraseResult {
            container_length: container.len() as u64,
        });
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(container),
        )))
    }

    type RotateRecoveryKeyStream = ResponseStream<pb::RotateRecoveryKeyResponse>;

    async fn rotate_recovery_key(
        &self,
        request: Request<Streaming<pb::RotateRecoveryKeyRequest>>,
    ) -> Result<Response<Self::RotateRecoveryKeyStream>, Status> {
        let mut stream = request.into_inner();
        let upload = chunks::receive(
            &mut stream,
            DOMAIN,
            self.limits.max_container_len(),
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let limits = self.limits_for(upload.header.iteration_policy)?;
        let secrets = secrets(upload.header.secrets);
        let chosen = upload
            .header
            .new_recovery_key
            .as_deref()
            .map(snug_container::RecoveryKey::parse);
        let (container, recovery_key) = self
            .pool
            .run(move || match chosen {
                None => snug_container::rotate_recovery_key(&upload.bytes, &secrets, &limits),
                Some(key) => {
                    snug_container::rotate_recovery_key_to(&upload.bytes, &secrets, &key, &limits)
                        .map(|rotated| (rotated, key))
                }
            })
            .await?
            .map_err(status::rewrap_error)?;
        let result = pb::RotateRecoveryKeyResponse::header(pb::RotateRecoveryKeyResult {
            recovery_key: recovery_key.grouped(),
            container_length: container.len() as u64,
        });
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(container),
        )))
    }

    type ResealStream = ResponseStream<pb::ResealResponse>;

    async fn reseal(
        &self,
        request: Request<Streaming<pb::ResealRequest>>,
    ) -> Result<Response<Self::ResealStream>, Status> {
        let mut stream = request.into_inner();
        let max_container = self.limits.max_container_len();
        let upload = chunks::receive(
            &mut stream,
            DOMAIN,
            max_container.saturating_add(self.limits.max_plaintext),
            &self.budget,
            |h| {
                h.plaintext_length
                    .map(|len| len.saturating_add(h.container_length))
            },
        )
        .await?;
        let header = upload.header;
        let limits = self.limits_for(header.iteration_policy)?;
        if header.container_length > max_container {
            return Err(snug_rpc::status::too_large(DOMAIN, max_container));
        }
        let mut container = upload.bytes;
        let Ok(split) = usize::try_from(header.container_length) else {
            return Err(snug_rpc::status::too_large(DOMAIN, max_container));
        };
        if split > container.len() {
            return Err(snug_rpc::status::invalid_argument(
                DOMAIN,
                "header.container_length",
                format!(
                    "container_length is {split} but only {} bytes arrived",
                    container.len()
                ),
            ));
        }
        let plaintext = container.split_off(split);
        if plaintext.len() as u64 > self.limits.max_plaintext {
            return Err(snug_rpc::status::too_large(
                DOMAIN,
                self.limits.max_plaintext,
            ));
        }
        user_database(&plaintext)?;
        let secrets = secrets(header.secrets);
        let (resealed, opened_by) = self
            .pool
            .run(move || {
                snug_container::reseal_with_secrets(&container, &secrets, plaintext, &limits)
            })
            .await?
            .map_err(status::reseal_error)?;
        let result = pb::ResealResponse::header(pb::ResealResult {
            opened_by: slot_kind(opened_by).into(),
            container_length: resealed.len() as u64,
        });
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(resealed),
        )))
    }

    type RemoveProtectionStream = ResponseStream<pb::RemoveProtectionResponse>;

    async fn remove_protection(
        &self,
        request: Request<Streaming<pb::RemoveProtectionRequest>>,
    ) -> Result<Response<Self::RemoveProtectionStream>, Status> {
        let mut stream = request.into_inner();
        let (header, receiver) = Receiver::start(
            &mut stream,
            DOMAIN,
            self.limits.max_container_len(),
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let limits = self.limits_for(header.iteration_policy)?;
        let authenticated = self
            .open_upload(receiver, secrets(header.secrets), &limits)
            .await?;
        let result = pb::RemoveProtectionResponse::header(pb::RemoveProtectionResult {
            opened_by: slot_kind(authenticated.opened_by()).into(),
            plaintext_length: authenticated.plaintext_len() as u64,
        });
        let (_, plaintext) = self.release(authenticated).await;
        Ok(Response::new(chunks::respond_stream(result, plaintext)))
    }
}

#[cfg(test)]
mod tests;
