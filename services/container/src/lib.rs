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

pub mod reason;
pub mod status;

use std::{future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use snug_container::{Format, Limits, Passphrase, RecoveryKey, Secrets, SlotKind};
use snug_proto::container::v1::{
    self as pb,
    container_service_server::{ContainerService, ContainerServiceServer},
};
use snug_rpc::{
    chunks::{self, MAX_MESSAGE_SIZE, Part, ResponseStream},
    server::{ServerConfig, Services, parse_duration},
    status::error,
};
use tokio::{net::TcpListener, sync::Semaphore};
use tonic::{Code, Request, Response, Status, Streaming};

use crate::reason::DOMAIN;

/// The fully qualified gRPC service name, as health checks report it.
pub const SERVICE_NAME: &str = "snug.container.v1.ContainerService";

/// Settings of the container service, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct ContainerConfig {
    /// Smallest PBKDF2 iteration count accepted when opening or creating a container; files
    /// below it are reported corrupt rather than opened cheaply.
    #[arg(long, env = "SNUG_CONTAINER_MIN_ITERATIONS", default_value_t = 10_000)]
    pub min_iterations: u32,
    /// Largest PBKDF2 iteration count accepted; beyond it a header is a CPU sink, not a file.
    #[arg(long, env = "SNUG_CONTAINER_MAX_ITERATIONS", default_value_t = 10_000_000)]
    pub max_iterations: u32,
    /// Key derivations run at once (default: the number of CPUs).
    #[arg(long, env = "SNUG_CONTAINER_KDF_CONCURRENCY")]
    pub kdf_concurrency: Option<usize>,
    /// How long a request waits for a key-derivation slot before it is refused as OVERLOADED.
    #[arg(long, env = "SNUG_CONTAINER_KDF_QUEUE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub kdf_queue_timeout: Duration,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        Self {
            min_iterations: Limits::default().min_iterations,
            max_iterations: Limits::default().max_iterations,
            kdf_concurrency: None,
            kdf_queue_timeout: Duration::from_secs(10),
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
pub struct KdfPool {
    permits: Semaphore,
    queue_timeout: Duration,
}

impl KdfPool {
    /// A pool running `concurrency` jobs at once; a job waits at most `queue_timeout` to start.
    pub fn new(concurrency: usize, queue_timeout: Duration) -> Self {
        Self {
            permits: Semaphore::new(concurrency.max(1)),
            queue_timeout,
        }
    }

    async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Status> {
        let permit = tokio::time::timeout(self.queue_timeout, self.permits.acquire())
            .await
            .map_err(|_| overloaded())?
            .map_err(|_| overloaded())?;
        let result = tokio::task::spawn_blocking(job)
            .await
            .map_err(|join| snug_rpc::status::internal(DOMAIN, &join));
        drop(permit);
        result
    }
}

fn overloaded() -> Status {
    error(
        Code::Unavailable,
        reason::OVERLOADED,
        DOMAIN,
        "too many key derivations are in flight; retry shortly",
        [],
    )
}

/// The service implementation; cheap to clone.
#[derive(Debug, Clone)]
pub struct ContainerServer {
    limits: Limits,
    pool: Arc<KdfPool>,
}

impl ContainerServer {
    /// Builds the service from its configuration.
    pub fn new(config: &ContainerConfig) -> Self {
        let concurrency = config.kdf_concurrency.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        });
        Self {
            limits: config.limits(),
            pool: Arc::new(KdfPool::new(concurrency, config.kdf_queue_timeout)),
        }
    }
}

/// Wraps the service in its generated server, with the chunk-sized message limits.
pub fn service(server: ContainerServer) -> ContainerServiceServer<ContainerServer> {
    ContainerServiceServer::new(server)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE)
}

/// The routes and health names of this service, for composing into a server.
pub fn services(config: &ContainerConfig) -> Services {
    Services {
        routes: tonic::service::Routes::new(service(ContainerServer::new(config))),
        names: vec![SERVICE_NAME],
    }
}

/// Serves the container service alone on `listener` until `shutdown` completes.
pub async fn serve(
    server_config: &ServerConfig,
    config: &ContainerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    snug_rpc::server::serve(server_config, listener, services(config), shutdown).await
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

/// Generates the split functions that classify each request's `oneof`.
macro_rules! split_fn {
    ($name:ident, $module:ident, $header:ty) => {
        fn $name(message: pb::$module::Message) -> Part<$header> {
            match message {
                pb::$module::Message::Header(header) => Part::Header(header),
                pb::$module::Message::Chunk(chunk) => Part::Chunk(chunk),
            }
        }
    };
}
split_fn!(protect_part, protect_request, pb::ProtectHeader);
split_fn!(unlock_part, unlock_request, pb::UnlockHeader);
split_fn!(change_part, change_passphrase_request, pb::ChangePassphraseHeader);
split_fn!(rotate_part, rotate_recovery_key_request, pb::RotateRecoveryKeyHeader);
split_fn!(remove_part, remove_protection_request, pb::RemoveProtectionHeader);

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
        let mut bytes = Vec::new();
        let limit = self.limits.max_container_len();
        while let Some(message) = stream.message().await? {
            if message.chunk.len() > chunks::CHUNK_SIZE {
                return Err(snug_rpc::status::invalid_argument(
                    DOMAIN,
                    "chunk",
                    "a chunk may hold at most 1 MiB",
                ));
            }
            if (bytes.len() + message.chunk.len()) as u64 > limit {
                return Err(snug_rpc::status::too_large(DOMAIN, limit));
            }
            bytes.extend_from_slice(&message.chunk);
        }
        let info = snug_container::inspect(&bytes, &self.limits).map_err(status::corrupt)?;
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
            |m: pb::ProtectRequest| m.message.map(protect_part),
            |h| h.expected_length,
        )
        .await?;
        let header = upload.header;
        if !header.custody_rule_acknowledged {
            return Err(error(
                Code::FailedPrecondition,
                reason::CUSTODY_NOT_ACKNOWLEDGED,
                DOMAIN,
                "protect requires custody_rule_acknowledged: the user must be told first that a \
                 file whose passphrase and recovery key are both lost is unrecoverable (no escrow, \
                 no reset)",
                [],
            ));
        }
        match snug_container::detect(&upload.bytes) {
            Format::Sqlite => {}
            Format::Container => {
                return Err(error(
                    Code::InvalidArgument,
                    reason::ALREADY_PROTECTED,
                    DOMAIN,
                    "the file is already a protected Snug file",
                    [],
                ));
            }
            Format::Unknown => {
                return Err(error(
                    Code::InvalidArgument,
                    reason::NOT_A_USER_DATABASE,
                    DOMAIN,
                    "only a SQLite user database can be protected",
                    [],
                ));
            }
        }
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
                snug_container::seal(&upload.bytes, &passphrase, &recovery_key, iterations, &limits)
                    .map(|container| (container, recovery_key))
            })
            .await?
            .map_err(status::seal_error)?;
        tracing::info!(container_len = container.len(), iterations, "protected a user file");
        let result = pb::ProtectResponse {
            message: Some(pb::protect_response::Message::Result(pb::ProtectResult {
                recovery_key: recovery_key.grouped(),
                container_length: container.len() as u64,
            })),
        };
        Ok(Response::new(chunks::respond(result, Bytes::from(container), |c| {
            pb::ProtectResponse {
                message: Some(pb::protect_response::Message::Chunk(c)),
            }
        })))
    }

    type UnlockStream = ResponseStream<pb::UnlockResponse>;

    async fn unlock(
        &self,
        request: Request<Streaming<pb::UnlockRequest>>,
    ) -> Result<Response<Self::UnlockStream>, Status> {
        let mut stream = request.into_inner();
        let upload = chunks::receive(
            &mut stream,
            DOMAIN,
            self.limits.max_container_len(),
            |m: pb::UnlockRequest| m.message.map(unlock_part),
            |h| h.expected_length,
        )
        .await?;
        let secrets = secrets(upload.header.secrets);
        let limits = self.limits;
        let unlocked = self
            .pool
            .run(move || snug_container::open_owned(upload.bytes, &secrets, &limits))
            .await?
            .map_err(status::open_error)?;
        let result = pb::UnlockResponse {
            message: Some(pb::unlock_response::Message::Result(pb::UnlockResult {
                opened_by: slot_kind(unlocked.opened_by).into(),
                plaintext_length: unlocked.plaintext.len() as u64,
                plaintext_format: format(snug_container::detect(&unlocked.plaintext)).into(),
            })),
        };
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(unlocked.plaintext),
            |c| pb::UnlockResponse {
                message: Some(pb::unlock_response::Message::Chunk(c)),
            },
        )))
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
            |m: pb::ChangePassphraseRequest| m.message.map(change_part),
            |h| h.expected_length,
        )
        .await?;
        let current = Passphrase::new(upload.header.current_passphrase);
        let new = Passphrase::new(upload.header.new_passphrase);
        let limits = self.limits;
        let container = self
            .pool
            .run(move || snug_container::change_passphrase(&upload.bytes, &current, &new, &limits))
            .await?
            .map_err(status::rewrap_error)?;
        let result = pb::ChangePassphraseResponse {
            message: Some(pb::change_passphrase_response::Message::Result(
                pb::ChangePassphraseResult {
                    container_length: container.len() as u64,
                },
            )),
        };
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(container),
            |c| pb::ChangePassphraseResponse {
                message: Some(pb::change_passphrase_response::Message::Chunk(c)),
            },
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
            |m: pb::RotateRecoveryKeyRequest| m.message.map(rotate_part),
            |h| h.expected_length,
        )
        .await?;
        let secrets = secrets(upload.header.secrets);
        let limits = self.limits;
        let (container, recovery_key) = self
            .pool
            .run(move || snug_container::rotate_recovery_key(&upload.bytes, &secrets, &limits))
            .await?
            .map_err(status::rewrap_error)?;
        let result = pb::RotateRecoveryKeyResponse {
            message: Some(pb::rotate_recovery_key_response::Message::Result(
                pb::RotateRecoveryKeyResult {
                    recovery_key: recovery_key.grouped(),
                    container_length: container.len() as u64,
                },
            )),
        };
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(container),
            |c| pb::RotateRecoveryKeyResponse {
                message: Some(pb::rotate_recovery_key_response::Message::Chunk(c)),
            },
        )))
    }

    type RemoveProtectionStream = ResponseStream<pb::RemoveProtectionResponse>;

    async fn remove_protection(
        &self,
        request: Request<Streaming<pb::RemoveProtectionRequest>>,
    ) -> Result<Response<Self::RemoveProtectionStream>, Status> {
        let mut stream = request.into_inner();
        let upload = chunks::receive(
            &mut stream,
            DOMAIN,
            self.limits.max_container_len(),
            |m: pb::RemoveProtectionRequest| m.message.map(remove_part),
            |h| h.expected_length,
        )
        .await?;
        let secrets = secrets(upload.header.secrets);
        let limits = self.limits;
        let unlocked = self
            .pool
            .run(move || snug_container::open_owned(upload.bytes, &secrets, &limits))
            .await?
            .map_err(status::open_error)?;
        let result = pb::RemoveProtectionResponse {
            message: Some(pb::remove_protection_response::Message::Result(
                pb::RemoveProtectionResult {
                    opened_by: slot_kind(unlocked.opened_by).into(),
                    plaintext_length: unlocked.plaintext.len() as u64,
                },
            )),
        };
        Ok(Response::new(chunks::respond(
            result,
            Bytes::from(unlocked.plaintext),
            |c| pb::RemoveProtectionResponse {
                message: Some(pb::remove_protection_response::Message::Chunk(c)),
            },
        )))
    }
}

#[cfg(test)]
mod tests;
