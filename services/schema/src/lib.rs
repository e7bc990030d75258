//! gRPC service `snug.schema.v1`: a thin adapter from the proto to `snug-schema`.
//!
//! Requests arrive as header-then-chunks streams (see `snug_rpc::chunks`); the file is opened in
//! memory by the domain crate, which does all the work; results go back as a result message and,
//! where the call produces a file, its chunks. `status.rs` maps every domain error to a status
//! with an `ErrorInfo` reason.
//!
//! SQLite work is blocking and holds up to a few copies of a 64 MiB file, so every job runs on
//! the blocking pool behind a semaphore ([`BlockingPool`]): a burst queues for a bounded time and is
//! then refused with `OVERLOADED`, instead of starving the async runtime or the host's memory.
//! A job stops when its caller goes away (cancelled, or past its deadline): the user database is
//! opened with the job's cancel as its `snug_schema::Interrupt`, so migrations, VACUUM and the
//! operations stop in SQLite, and the loops over operations and queries stop between steps.
//!
//! What this crate deliberately does not do: keep any state between calls, touch the local file
//! system, persist a result (the caller writes the bytes it gets back, atomically, where it
//! chooses), log a secret, or open a SNUGENC1 container anywhere but the incoming file of
//! CheckImport and ImportUserDatabase (unlocking is `snug.container.v1`'s job).
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! `snug.schema.v1.SchemaService` over `snug-schema`: InspectUserDatabase, MigrateUserDatabase,
//! ExportUserDatabase, CheckImport, ValidateSyncImage (the check behind the gateway's
//! `PUT /userdb`), and, for hubs in other languages, ImportUserDatabase (`import.rs`: the incoming
//! file then, optionally, the hub's current file in one chunk stream, or the hub's approved grants
//! and contracts in the header; `snug_schema::import_against`, as the pull and `snug import` run it)
//! and ApplyOperations / Query, the hub-namespace operations.
//! Stateless: every call carries the file as header-then-chunks, the file is opened in memory, and
//! results come back as new bytes; the service never persists anything and never touches the local
//! file system.
//! SQLite work runs on the blocking pool behind a semaphore (`FilePool`, `SNUG_SCHEMA_CONCURRENCY`);
//! a request that cannot get a slot within the queue timeout is refused as `OVERLOADED`.
//! `status.rs` holds one exhaustive match per `snug-schema` error enum; host failures (SQLite I/O,
//! the CSPRNG) are `INTERNAL`, logged with their cause.
//! **Architecture Invariant:** ApplyOperations is all-or-nothing without a transaction of its own:
//! the operations run on an in-memory copy that is dropped unreturned on the first error.
//! **Architecture Invariant:** ValidateSyncImage never rewrites bytes: it accepts a plain Snug user
//! database an import would take, with no row in `snug_secrets`, or refuses it with a reason.
//! Its one stated exception (§9.2, §11.3: the hub never keeps or serves bytes that are not live
//! content): the response lists the ranges of the image's SQLite free space (freeblocks, the
//! unallocated area of each page, free-list pages, the unused tail of an overflow chain) that hold
//! a non-zero byte, and its `sha256` is of the image with them zeroed, the bytes the gateway stores.
//! A delete without VACUUM leaves the deleted record there (a credential, from `snug_secrets`), and
//! a structural test cannot tell such an image from a conforming export (the reference's own
//! `sample-v6.export.snug` holds copies of live cells left by page balancing), so every image is
//! scrubbed rather than some refused. The walk is `snug_schema::scrub_free_space`, a parser of the
//! file format that accounts for every page and every byte of each b-tree page exactly as
//! `integrity_check` does and zeroes bytes, never structure; what it cannot account for (pages past
//! the declared size, an unreachable page, a fragment count that disagrees) is `MALFORMED` with
//! `detail` `free_space_unaccounted`, never guessed at. Exports (`export_bytes`, `export_file`, the
//! CLI's push) come out scrubbed, so a client's hash of what it pushed is the hash the hub stores.
//! Headers and unary responses may be 8 MiB (an app's HTML travels in an operation), not 1 MiB like
//! chunks; a Query whose answers exceed that is refused as `TOO_LARGE` rather than failing in the
//! transport, and ListChatMessages pages.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod convert;
pub mod error_info;
mod import;
mod operations;
pub mod status;

use std::{future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use prost::Message as _;
use snug_container::{Limits, Passphrase, RecoveryKey, Secrets};
use snug_proto::schema::v1::{
    self as pb,
    schema_service_server::{SchemaService, SchemaServiceServer},
};
use snug_rpc::chunks::Chunked as _;
use snug_rpc::{
    blocking::{BlockingPool, Cancel, concurrency_or_cpus},
    budget::UploadBudget,
    chunks::{self, ResponseStream},
    runtime::Runtime,
    server::{ServerConfig, Services, parse_duration},
};
use snug_schema::{
    Clock, ExportOptions, ImportOptions, Interrupt, MAX_USERDB_BYTES, SystemClock, UserDb,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status, Streaming};

use crate::status::Mapped;

/// The fully qualified gRPC service name, as health checks report it.
pub const SERVICE_NAME: &str = "snug.schema.v1.SchemaService";

/// The largest header or unary response: an operation header carries whole app HTML, and a
/// query response whole docs and versions, so they get more room than a 1 MiB chunk.
pub const MAX_HEADER_SIZE: usize = 8 * 1024 * 1024;

/// The gRPC message size this service accepts and sends (and clients should accept): one header
/// plus room for framing.
pub const MAX_MESSAGE_SIZE: usize = MAX_HEADER_SIZE + 64 * 1024;

/// Settings of the schema service, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct SchemaConfig {
    /// File jobs (open, migrate, export, operations) run at once (default: the number of CPUs).
    /// Each may hold a few copies of a 64 MiB file in memory.
    #[arg(long, env = "SNUG_SCHEMA_CONCURRENCY")]
    pub schema_concurrency: Option<usize>,
    /// How long a request waits for a job slot before it is refused as OVERLOADED.
    #[arg(long, env = "SNUG_SCHEMA_QUEUE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub schema_queue_timeout: Duration,
}

impl Default for SchemaConfig {
    fn default() -> Self {
        Self {
            schema_concurrency: None,
            schema_queue_timeout: Duration::from_secs(10),
        }
    }
}

/// The service implementation; cheap to clone.
#[derive(Clone)]
pub struct SchemaServer {
    budget: UploadBudget,
    pool: Arc<BlockingPool>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SchemaServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaServer")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl SchemaServer {
    /// Builds the service from its configuration, stamping times with the system clock.
    pub fn new(config: &SchemaConfig, runtime: &Runtime) -> Self {
        Self::with_clock(config, runtime, Arc::new(SystemClock))
    }

    /// Builds the service with the clock that stamps new rows (`created_at`, `updated_at`).
    pub fn with_clock(config: &SchemaConfig, runtime: &Runtime, clock: Arc<dyn Clock>) -> Self {
        let concurrency = concurrency_or_cpus(config.schema_concurrency);
        Self {
            budget: runtime.upload_budget.clone(),
            pool: Arc::new(BlockingPool::new(
                concurrency,
                config.schema_queue_timeout,
                error_info::DOMAIN,
                "user-database jobs",
            )),
            clock,
        }
    }
}

/// Wraps the service in its generated server, with this service's message limits.
pub fn service(server: SchemaServer) -> SchemaServiceServer<SchemaServer> {
    snug_rpc::with_message_limits!(SchemaServiceServer::new(server), MAX_MESSAGE_SIZE)
}

/// The routes and health names of this service, for composing into a server.
pub fn services(config: &SchemaConfig, runtime: &Runtime) -> Services {
    Services::default().with(service(SchemaServer::new(config, runtime)), &[])
}

/// Serves the schema service alone on `listener` until `shutdown` completes.
pub async fn serve(
    server_config: &ServerConfig,
    config: &SchemaConfig,
    runtime: &Runtime,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    snug_rpc::server::serve(server_config, listener, services(config, runtime), shutdown).await
}

/// Limits for a container met by CheckImport: the default PBKDF2 range, the plaintext cap.
fn container_limits() -> Limits {
    Limits::default()
}

fn secrets(secrets: Option<snug_proto::container::v1::Secrets>) -> Secrets {
    let secrets = secrets.unwrap_or_default();
    Secrets {
        passphrase: secrets.passphrase.map(Passphrase::new),
        recovery_key: secrets.recovery_key.as_deref().map(RecoveryKey::parse),
    }
}

/// Compacts an opened database and returns its image. Used after an open that advanced the
/// version: the v1 blob table and wiped credentials were deleted, and VACUUM rebuilds the file
/// from live records so none of their bytes travel in free pages; the scrub then zeroes the
/// copies of live cells that page balancing leaves in free space, as an export's are.
fn compacted_image(db: &mut UserDb) -> Result<Vec<u8>, Mapped> {
    db.connection()
        .execute_batch("VACUUM")
        .map_err(|err| Mapped::internal(&err))?;
    let mut image = db.to_bytes().map_err(|err| Mapped::internal(&err))?;
    snug_schema::scrub_free_space_in_place(&mut image).map_err(|err| Mapped::internal(&err))?;
    Ok(image)
}

/// Opens `bytes` as the user's own database in memory (migrate, heal, wipe, seed). The open, and
/// every statement run on the database afterwards, stops once the job's caller goes away.
fn open(
    bytes: &[u8],
    clock: Arc<dyn Clock>,
    cancel: &Cancel,
) -> Result<(UserDb, snug_schema::OpenReport), Mapped> {
    UserDb::from_bytes_with(bytes, clock, &Interrupt::new(cancel.flag())).map_err(status::refused)
}

/// Stops a job between its steps once its caller has gone away. Nobody receives the error: it
/// only ends the job early.
fn still_wanted(cancel: &Cancel) -> Result<(), Mapped> {
    if cancel.is_cancelled() {
        return Err(Mapped::internal(&snug_schema::interrupted()));
    }
    Ok(())
}

/// Validates a sync image; see `ValidateSyncImage` in the proto. The verdict is
/// `snug_schema::validate_sync_image`'s, the one the sync service writes every revision under.
fn validate_sync_image(
    bytes: &[u8],
    clock: Arc<dyn Clock>,
    cancel: &Cancel,
) -> Result<pb::ValidateSyncImageResponse, Mapped> {
    let verdict = snug_schema::validate_sync_image(bytes, clock, &|| !cancel.is_cancelled())
        .map_err(status::refused)?;
    Ok(pb::ValidateSyncImageResponse {
        storage_version: verdict.storage_version,
        length: verdict.length,
        sha256: Bytes::copy_from_slice(&verdict.sha256),
        free_space: verdict
            .free_space
            .into_iter()
            .map(|range| pb::ByteRange {
                offset: range.start,
                length: range.end - range.start,
            })
            .collect(),
    })
}

#[tonic::async_trait]
impl SchemaService for SchemaServer {
    async fn inspect_user_database(
        &self,
        request: Request<Streaming<pb::InspectUserDatabaseRequest>>,
    ) -> Result<Response<pb::InspectUserDatabaseResponse>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let response = self
            .pool
            // One bounded pass over at most 64 MiB: it runs to its end.
            .try_run::<_, Mapped>(move |_| {
                let inspection =
                    snug_schema::inspect_bytes(&upload.bytes).map_err(status::refused)?;
                Ok(convert::inspection(inspection, upload.bytes.len() as u64))
            })
            .await?;
        Ok(Response::new(response))
    }

    type MigrateUserDatabaseStream = ResponseStream<pb::MigrateUserDatabaseResponse>;

    async fn migrate_user_database(
        &self,
        request: Request<Streaming<pb::MigrateUserDatabaseRequest>>,
    ) -> Result<Response<Self::MigrateUserDatabaseStream>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let clock = self.clock.clone();
        let (report, bytes, unchanged) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (mut db, report) = open(&upload.bytes, clock, &cancel)?;
                db.check_app_isolation().map_err(status::refused)?;
                if !report.wrote {
                    // Nothing to do: the caller gets its own bytes back, not a re-serialisation.
                    return Ok((report, upload.bytes, true));
                }
                drop(upload.bytes);
                Ok((report, compacted_image(&mut db)?, false))
            })
            .await?;
        tracing::info!(
            found_version = report.found_version,
            advanced = report.advanced,
            healed = report.heal.healed(),
            "migrated a user database"
        );
        let result = pb::MigrateUserDatabaseResponse::header(pb::MigrateUserDatabaseResult {
            report: Some(convert::open_report(report)),
            length: bytes.len() as u64,
            unchanged,
        });
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    type ExportUserDatabaseStream = ResponseStream<pb::ExportUserDatabaseResponse>;

    async fn export_user_database(
        &self,
        request: Request<Streaming<pb::ExportUserDatabaseRequest>>,
    ) -> Result<Response<Self::ExportUserDatabaseStream>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let options = ExportOptions {
            include_secrets: upload.header.include_secrets,
        };
        let clock = self.clock.clone();
        let (source, bytes, export) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (mut db, source) = open(&upload.bytes, clock, &cancel)?;
                drop(upload.bytes);
                let (bytes, export) =
                    snug_schema::export_bytes(&mut db, options).map_err(status::refused)?;
                Ok((source, bytes, export))
            })
            .await?;
        tracing::info!(
            include_secrets = options.include_secrets,
            secrets_removed = export.secrets_removed,
            "exported a user database"
        );
        let result = pb::ExportUserDatabaseResponse::header(pb::ExportUserDatabaseResult {
            source: Some(convert::open_report(source)),
            secrets_removed: export.secrets_removed as u64,
            tables_dropped: export.tables_dropped,
            length: bytes.len() as u64,
        });
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    async fn check_import(
        &self,
        request: Request<Streaming<pb::CheckImportRequest>>,
    ) -> Result<Response<pb::CheckImportResponse>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            container_limits().max_container_len(),
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let secrets = secrets(upload.header.secrets);
        let trusted_origin = upload.header.trusted_origin;
        let clock = self.clock.clone();
        let report = self
            .pool
            // An import on a scratch copy of at most 64 MiB, bounded: it runs to its end (the
            // pool does not start it once its caller has gone).
            .try_run::<_, Mapped>(move |_| {
                let options = ImportOptions {
                    secrets: Some(&secrets),
                    trusted_origin,
                    container_limits: container_limits(),
                };
                snug_schema::import_check(&upload.bytes, &options, clock).map_err(status::refused)
            })
            .await?;
        Ok(Response::new(convert::import_report(report)))
    }

    type ImportUserDatabaseStream = ResponseStream<pb::ImportUserDatabaseResponse>;

    async fn import_user_database(
        &self,
        request: Request<Streaming<pb::ImportUserDatabaseRequest>>,
    ) -> Result<Response<Self::ImportUserDatabaseStream>, Status> {
        let (header, bytes, _admission) =
            import::receive(&mut request.into_inner(), &self.budget).await?;
        let clock = self.clock.clone();
        let (report, bytes) = self
            .pool
            // Bounded as CheckImport is.
            .try_run::<_, Mapped>(move |_| import::run(header, bytes, clock))
            .await?;
        tracing::info!(
            found_version = report.found_version,
            restored_grants = report.restored_grants,
            demoted_connections = report.demoted_connections,
            dropped_connections = report.dropped_connections.len(),
            dropped_runtime_contracts = report.dropped_runtime_contracts.len(),
            "imported a user database"
        );
        let result = pb::ImportUserDatabaseResponse::header(pb::ImportUserDatabaseResult {
            report: Some(convert::import_report(report)),
            length: bytes.len() as u64,
        });
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    async fn validate_sync_image(
        &self,
        request: Request<Streaming<pb::ValidateSyncImageRequest>>,
    ) -> Result<Response<pb::ValidateSyncImageResponse>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let clock = self.clock.clone();
        let response = self
            .pool
            .try_run::<_, Mapped>(move |cancel| validate_sync_image(&upload.bytes, clock, &cancel))
            .await?;
        Ok(Response::new(response))
    }

    type ApplyOperationsStream = ResponseStream<pb::ApplyOperationsResponse>;

    async fn apply_operations(
        &self,
        request: Request<Streaming<pb::ApplyOperationsRequest>>,
    ) -> Result<Response<Self::ApplyOperationsStream>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        if upload.header.operations.is_empty() {
            return Err(Mapped::invalid_argument(
                "header.operations",
                "at least one operation is needed (MigrateUserDatabase opens without one)",
            )
            .into());
        }
        let operations = upload.header.operations;
        let clock = self.clock.clone();
        let (open_report, results, bytes) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (mut db, report) = open(&upload.bytes, clock, &cancel)?;
                drop(upload.bytes);
                let results = operations
                    .into_iter()
                    .enumerate()
                    .map(|(index, operation)| {
                        still_wanted(&cancel)?;
                        operations::apply(&mut db, index, operation)
                    })
                    .collect::<Result<Vec<_>, Mapped>>()?;
                let bytes = if report.advanced {
                    compacted_image(&mut db)?
                } else {
                    db.to_bytes().map_err(|err| Mapped::internal(&err))?
                };
                Ok((report, results, bytes))
            })
            .await?;
        tracing::info!(
            operations = results.len(),
            length = bytes.len(),
            "applied hub-namespace operations"
        );
        let result = pb::ApplyOperationsResponse::header(pb::ApplyOperationsResult {
            open: Some(convert::open_report(open_report)),
            results,
            length: bytes.len() as u64,
        });
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    async fn query(
        &self,
        request: Request<Streaming<pb::QueryRequest>>,
    ) -> Result<Response<pb::QueryResponse>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        if upload.header.queries.is_empty() {
            return Err(
                Mapped::invalid_argument("header.queries", "at least one query is needed").into(),
            );
        }
        let queries = upload.header.queries;
        let clock = self.clock.clone();
        let response = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (db, report) = open(&upload.bytes, clock, &cancel)?;
                drop(upload.bytes);
                let results = queries
                    .into_iter()
                    .enumerate()
                    .map(|(index, query)| {
                        still_wanted(&cancel)?;
                        operations::answer(&db, index, query)
                    })
                    .collect::<Result<Vec<_>, Mapped>>()?;
                Ok(pb::QueryResponse {
                    open: Some(convert::open_report(report)),
                    results,
                })
            })
            .await?;
        // Checked here rather than left to tonic, so the client gets a typed reason and a hint
        // instead of a transport error.
        let size = response.encoded_len();
        if size > MAX_HEADER_SIZE {
            return Err(Mapped::too_large(
                format!(
                    "the answers are {size} bytes, over the {MAX_HEADER_SIZE}-byte response limit; \
                     split the queries or page ListChatMessages"
                ),
                MAX_HEADER_SIZE as u64,
            )
            .into());
        }
        Ok(Response::new(response))
    }
}

#[cfg(test)]
mod tests;
