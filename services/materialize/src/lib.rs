//! gRPC service `snug.materialize.v1`: a thin adapter from the proto to `snug-materialize`.
//!
//! Requests arrive as header-then-chunks streams (see `snug_rpc::chunks`); the user database is
//! opened in memory by `snug-schema` (migrated and healed in the copy), the domain crate does
//! the app work, and results go back as a result message and, where the call produces a
//! database, its chunks. `status.rs` maps every domain error to a status with an `ErrorInfo`
//! reason.
//!
//! PersistApp carries two payloads in one stream: the header declares both lengths, and the
//! chunks are the user database's bytes followed by the runtime's. One byte sequence keeps the
//! shared chunk receiver (cap enforced while bytes arrive, declared total checked at the end)
//! and lets a chunk straddle the boundary, so a client cuts the concatenation like any payload.
//!
//! SQLite work is blocking and holds up to a few copies of a 64 MiB file, so every job runs on
//! the blocking pool behind a semaphore ([`BlockingPool`]): a burst queues for a bounded time and is
//! then refused with `OVERLOADED`, instead of starving the async runtime or the host's memory.
//! A job stops when its caller goes away (cancelled, or past its deadline): the user database is
//! opened with the job's cancel as its `snug_schema::Interrupt`, which the runtime materialized
//! from it inherits, so an ApplyDdl or ExecuteSql stops within milliseconds and frees its slot.
//!
//! What this crate deliberately does not do: keep any state between calls (a runtime is the
//! caller's to hold between MaterializeApp and PersistApp), touch the local file system, persist
//! a result (the caller writes the bytes it gets back, atomically, where it chooses), or open a
//! SNUGENC1 container (unlocking is `snug.container.v1`'s job).
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map.)
//!
//! PersistApp carries two payloads in one stream: the header declares both lengths and the chunks
//! are the user database followed by the runtime (a chunk may straddle the boundary), so the shared
//! receiver enforces the cap while bytes arrive and each part is checked against its own cap first.
//! When nothing changed, the caller's own bytes come back (`unchanged`), never a re-serialisation;
//! ExecuteSql sends no database at all unless something was written.
//! SQLite work runs on the blocking pool behind a semaphore (`FilePool`,
//! `SNUG_MATERIALIZE_CONCURRENCY`); a request that cannot get a slot within the queue timeout is
//! refused as `OVERLOADED`, and a job stops when its caller goes away.
//! ApplyDdl is linear in its statements and bounded per call (5,000 statements, 1 MiB of text,
//! `DDL_TOO_LARGE` as soon as the header arrives).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod convert;
pub mod error_info;
pub mod status;

use std::{future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use prost::Message as _;
use snug_materialize::{AppDatabase, AppNamespace, ExecuteLimits, Overflow};
use snug_proto::materialize::v1::{
    self as pb,
    materialize_service_server::{MaterializeService, MaterializeServiceServer},
};
use snug_reasons::materialize as reasons;
use snug_rpc::chunks::Chunked as _;
use snug_rpc::{
    blocking::{BlockingPool, Cancel, concurrency_or_cpus},
    budget::UploadBudget,
    chunks::{self, Receiver, ResponseStream},
    runtime::Runtime,
    server::{ServerConfig, Services, parse_duration},
};
use snug_schema::{Clock, Interrupt, MAX_USERDB_BYTES, OpenReport, SystemClock, UserDb};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status, Streaming};

use crate::status::Mapped;

/// The fully qualified gRPC service name, as health checks report it.
pub const SERVICE_NAME: &str = "snug.materialize.v1.MaterializeService";

/// The largest header or unary response: DDL and seed statements travel in a header and result
/// rows in a response, so they get more room than a 1 MiB chunk.
pub const MAX_HEADER_SIZE: usize = 8 * 1024 * 1024;

/// The gRPC message size this service accepts and sends (and clients should accept): one header
/// plus room for framing.
pub const MAX_MESSAGE_SIZE: usize = MAX_HEADER_SIZE + 64 * 1024;

/// Settings of the materialize service, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct MaterializeConfig {
    /// App jobs (materialize, persist, DDL, SQL) run at once (default: the number of CPUs). Each
    /// may hold a few copies of a 64 MiB user database in memory.
    #[arg(long, env = "SNUG_MATERIALIZE_CONCURRENCY")]
    pub materialize_concurrency: Option<usize>,
    /// How long a request waits for a job slot before it is refused as OVERLOADED.
    #[arg(long, env = "SNUG_MATERIALIZE_QUEUE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub materialize_queue_timeout: Duration,
}

impl Default for MaterializeConfig {
    fn default() -> Self {
        Self {
            materialize_concurrency: None,
            materialize_queue_timeout: Duration::from_secs(10),
        }
    }
}

/// The service implementation; cheap to clone.
#[derive(Clone)]
pub struct MaterializeServer {
    budget: UploadBudget,
    pool: Arc<BlockingPool>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MaterializeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaterializeServer")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl MaterializeServer {
    /// Builds the service from its configuration, stamping times with the system clock.
    pub fn new(config: &MaterializeConfig, runtime: &Runtime) -> Self {
        Self::with_clock(config, runtime, Arc::new(SystemClock))
    }

    /// Builds the service with the clock that stamps audit rows and registry updates.
    pub fn with_clock(
        config: &MaterializeConfig,
        runtime: &Runtime,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let concurrency = concurrency_or_cpus(config.materialize_concurrency);
        Self {
            budget: runtime.upload_budget.clone(),
            pool: Arc::new(BlockingPool::new(
                concurrency,
                config.materialize_queue_timeout,
                error_info::DOMAIN,
                "app-database jobs",
            )),
            clock,
        }
    }
}

/// Wraps the service in its generated server, with this service's message limits.
pub fn service(server: MaterializeServer) -> MaterializeServiceServer<MaterializeServer> {
    snug_rpc::with_message_limits!(MaterializeServiceServer::new(server), MAX_MESSAGE_SIZE)
}

/// The routes and health names of this service, for composing into a server.
pub fn services(config: &MaterializeConfig, runtime: &Runtime) -> Services {
    Services::default().with(service(MaterializeServer::new(config, runtime)), &[])
}

/// Serves the materialize service alone on `listener` until `shutdown` completes.
pub async fn serve(
    server_config: &ServerConfig,
    config: &MaterializeConfig,
    runtime: &Runtime,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    snug_rpc::server::serve(server_config, listener, services(config, runtime), shutdown).await
}

/// Refuses a request without an app id before its payload is read.
fn required_app_id(app_id: &str) -> Result<(), Status> {
    if app_id.is_empty() {
        return Err(Mapped::invalid_argument("header.app_id", "the app id is required").into());
    }
    Ok(Mapped::identifier("header.app_id", app_id)?)
}

/// Refuses an empty statement list: every write RPC does something or says why not.
fn required_statements(statements: &[String]) -> Result<(), Status> {
    if statements.is_empty() {
        return Err(Mapped::invalid_argument(
            "header.statements",
            "at least one statement is needed",
        )
        .into());
    }
    Ok(())
}

/// Opens `bytes` as the user's own database in memory (migrate, heal, wipe, seed). The open, and
/// every statement run on the database or on a runtime materialized from it, stops once the
/// job's caller goes away (`cancel`).
fn open(
    bytes: &[u8],
    clock: Arc<dyn Clock>,
    cancel: &Cancel,
) -> Result<(UserDb, OpenReport), Mapped> {
    UserDb::from_bytes_with(bytes, clock, &Interrupt::new(cancel.flag()))
        .map_err(status::open_error)
}

/// The user database to send back, and whether it is exactly the bytes that came in.
///
/// When neither the open nor the operation wrote, the caller gets its own bytes back rather
/// than a re-serialisation, so "unchanged" is byte-for-byte by construction. An open that
/// advanced the storage version dropped tables and wiped credentials; VACUUM rebuilds the image
/// from live records so none of their bytes travel in free pages (as snug.schema.v1 does).
fn user_db_image(
    mut db: UserDb,
    open: &OpenReport,
    sent: Vec<u8>,
    wrote: bool,
) -> Result<(Vec<u8>, bool), Mapped> {
    if !open.wrote && !wrote {
        return Ok((sent, true));
    }
    drop(sent);
    if open.advanced {
        db.connection()
            .execute_batch("VACUUM")
            .map_err(|err| Mapped::internal(&err))?;
    }
    Ok((db.to_bytes().map_err(|err| Mapped::internal(&err))?, false))
}

/// The limits a request asks for, bounded by what the service allows.
fn limits(limits: Option<pb::ExecuteLimits>) -> Result<ExecuteLimits, Mapped> {
    let requested = limits.unwrap_or_default();
    let defaults = ExecuteLimits::default();
    let max_steps_default = defaults
        .max_steps
        .unwrap_or(snug_materialize::DEFAULT_MAX_STEPS);
    let max_bytes = match requested.max_bytes {
        None | Some(0) => defaults.max_bytes,
        Some(n) if n <= MAX_HEADER_SIZE as u64 => n as usize,
        Some(_) => {
            return Err(Mapped::invalid_argument(
                "header.limits.max_bytes",
                format!("max_bytes may be at most {MAX_HEADER_SIZE} (one response)"),
            ));
        }
    };
    // The step budget is the service's protection against a statement that never ends, so a
    // client may lower it but never lift or remove it.
    let max_steps = match requested.max_steps {
        None | Some(0) => max_steps_default,
        Some(n) if n <= max_steps_default => n,
        Some(_) => {
            return Err(Mapped::invalid_argument(
                "header.limits.max_steps",
                format!("max_steps may be at most {max_steps_default}"),
            ));
        }
    };
    let max_rows = match requested.max_rows {
        None | Some(0) => defaults.max_rows,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let overflow = match requested.overflow() {
        pb::Overflow::Unspecified | pb::Overflow::Truncate => Overflow::Truncate,
        pb::Overflow::Fail => Overflow::Fail,
    };
    Ok(ExecuteLimits {
        max_rows,
        max_bytes,
        overflow,
        max_steps: Some(max_steps),
    })
}

/// The runtime's objects in creation order, read from its own catalogue.
fn runtime_objects(runtime: &AppDatabase) -> Result<Vec<pb::AppObject>, Mapped> {
    let conn = runtime.connection();
    let mut stmt = conn
        .prepare(
            "SELECT type, name FROM main.sqlite_master \
             WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid",
        )
        .map_err(|err| Mapped::internal(&err))?;
    let objects = stmt
        .query_map([], |row| {
            Ok(pb::AppObject {
                kind: row.get(0)?,
                name: row.get(1)?,
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|err| Mapped::internal(&err))?;
    Ok(objects)
}

/// The audit sequence numbers of the last `applied` rows of `app_id`, oldest first: ApplyDdl
/// appends `max + 1 …` in one transaction, so they are the newest rows.
fn audit_seqs(db: &UserDb, app_id: &str, applied: usize) -> Result<Vec<i64>, Mapped> {
    let mut stmt = db
        .connection()
        .prepare("SELECT seq FROM snug_app_migrations WHERE app_id = ?1 ORDER BY seq DESC LIMIT ?2")
        .map_err(|err| Mapped::internal(&err))?;
    let mut seqs = stmt
        .query_map((app_id, applied as i64), |row| row.get::<_, i64>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|err| Mapped::internal(&err))?;
    seqs.reverse();
    Ok(seqs)
}

#[tonic::async_trait]
impl MaterializeService for MaterializeServer {
    type MaterializeAppStream = ResponseStream<pb::MaterializeAppResponse>;

    async fn materialize_app(
        &self,
        request: Request<Streaming<pb::MaterializeAppRequest>>,
    ) -> Result<Response<Self::MaterializeAppStream>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let app_id = upload.header.app_id;
        required_app_id(&app_id)?;
        let clock = self.clock.clone();
        let (result, bytes) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (db, open) = open(&upload.bytes, clock, &cancel)?;
                drop(upload.bytes);
                let mut runtime = snug_materialize::materialize(&db, &app_id)
                    .map_err(status::materialize_error)?;
                let objects = runtime_objects(&runtime)?;
                let bytes = runtime.to_bytes().map_err(|err| Mapped::internal(&err))?;
                let result = pb::MaterializeAppResult {
                    token: runtime.token().to_owned(),
                    app_id,
                    objects,
                    open: Some(convert::open_summary(&open)),
                    length: bytes.len() as u64,
                };
                Ok((result, bytes))
            })
            .await?;
        tracing::info!(
            app_id = %result.app_id,
            objects = result.objects.len(),
            length = result.length,
            "materialized an app"
        );
        let result = pb::MaterializeAppResponse::header(result);
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    type PersistAppStream = ResponseStream<pb::PersistAppResponse>;

    async fn persist_app(
        &self,
        request: Request<Streaming<pb::PersistAppRequest>>,
    ) -> Result<Response<Self::PersistAppStream>, Status> {
        let mut stream = request.into_inner();
        // The two payloads arrive as one byte sequence; the receiver enforces the cap of both
        // together as bytes arrive, and each part is checked against its own cap first.
        let (header, mut receiver) = Receiver::start(
            &mut stream,
            error_info::DOMAIN,
            2 * MAX_USERDB_BYTES,
            &self.budget,
            |h: &pb::PersistAppHeader| Some(h.user_db_length.saturating_add(h.runtime_length)),
        )
        .await?;
        required_app_id(&header.app_id)?;
        for (field, len) in [
            ("header.user_db_length", header.user_db_length),
            ("header.runtime_length", header.runtime_length),
        ] {
            if len == 0 {
                return Err(Mapped::invalid_argument(
                    field,
                    "both the user database and the runtime are required (neither may be empty)",
                )
                .into());
            }
            if len > MAX_USERDB_BYTES {
                return Err(Mapped::too_large(
                    format!("{field} is {len} bytes, over the {MAX_USERDB_BYTES}-byte cap"),
                    MAX_USERDB_BYTES,
                )
                .with("field", field.to_owned())
                .into());
            }
        }
        let split = header.user_db_length as usize;
        let mut user = Vec::with_capacity(split);
        let mut runtime_bytes = Vec::with_capacity(header.runtime_length as usize);
        while let Some(chunk) = receiver.next_chunk().await? {
            // A chunk may straddle the boundary between the two payloads.
            let room = split - user.len();
            let (head, tail) = chunk.split_at(room.min(chunk.len()));
            user.extend_from_slice(head);
            runtime_bytes.extend_from_slice(tail);
        }
        let app_id = header.app_id;
        let clock = self.clock.clone();
        let (result, bytes) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (mut db, open) = open(&user, clock, &cancel)?;
                let mut runtime =
                    AppDatabase::from_bytes(&app_id, &runtime_bytes).map_err(status::load_error)?;
                drop(runtime_bytes);
                let report = snug_materialize::persist(&mut db, &mut runtime)
                    .map_err(status::persist_error)?;
                drop(runtime);
                let (bytes, unchanged) = user_db_image(db, &open, user, report.wrote)?;
                let result = pb::PersistAppResult {
                    report: Some(convert::persist_report(report)),
                    open: Some(convert::open_summary(&open)),
                    length: bytes.len() as u64,
                    unchanged,
                };
                Ok((result, bytes))
            })
            .await?;
        tracing::info!(
            unchanged = result.unchanged,
            length = result.length,
            "persisted an app runtime"
        );
        let result = pb::PersistAppResponse::header(result);
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    type ApplyDdlStream = ResponseStream<pb::ApplyDdlResponse>;

    async fn apply_ddl(
        &self,
        request: Request<Streaming<pb::ApplyDdlRequest>>,
    ) -> Result<Response<Self::ApplyDdlStream>, Status> {
        let mut stream = request.into_inner();
        let (header, receiver) = Receiver::start(
            &mut stream,
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        required_app_id(&header.app_id)?;
        required_statements(&header.statements)?;
        // Judged before the user database is read: an oversize list costs the client its upload,
        // not the server a pool slot.
        snug_materialize::check_ddl_bounds(&header.statements)
            .map_err(|err| Status::from(status::ddl_error(err)))?;
        let (user_db, _admission) = receiver.into_bytes().await?;
        let clock = self.clock.clone();
        let (result, bytes) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (mut db, open) = open(&user_db, clock, &cancel)?;
                let report =
                    snug_materialize::apply_ddl(&mut db, &header.app_id, &header.statements)
                        .map_err(status::ddl_error)?;
                let seqs = audit_seqs(&db, &header.app_id, report.applied)?;
                let (bytes, _) = user_db_image(db, &open, user_db, true)?;
                let result = pb::ApplyDdlResult {
                    applied: report.applied as u64,
                    seqs,
                    applied_at: report.applied_at.unwrap_or_default(),
                    report: Some(convert::persist_report(report.persist)),
                    open: Some(convert::open_summary(&open)),
                    length: bytes.len() as u64,
                };
                Ok((result, bytes))
            })
            .await?;
        tracing::info!(
            applied = result.applied,
            length = result.length,
            "applied app DDL"
        );
        let result = pb::ApplyDdlResponse::header(result);
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    type ExportAppStream = ResponseStream<pb::ExportAppResponse>;

    async fn export_app(
        &self,
        request: Request<Streaming<pb::ExportAppRequest>>,
    ) -> Result<Response<Self::ExportAppStream>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let app_id = upload.header.app_id;
        required_app_id(&app_id)?;
        let clock = self.clock.clone();
        let (result, bytes) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (db, _) = open(&upload.bytes, clock, &cancel)?;
                drop(upload.bytes);
                let bytes = snug_materialize::export_app(&db, &app_id)
                    .map_err(status::materialize_error)?;
                let token = AppNamespace::new(&app_id).token().to_owned();
                let result = pb::ExportAppResult {
                    file_name: format!("{token}.snug"),
                    token,
                    app_id,
                    length: bytes.len() as u64,
                };
                Ok((result, bytes))
            })
            .await?;
        tracing::info!(length = result.length, "exported an app");
        let result = pb::ExportAppResponse::header(result);
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    type ExecuteSqlStream = ResponseStream<pb::ExecuteSqlResponse>;

    async fn execute_sql(
        &self,
        request: Request<Streaming<pb::ExecuteSqlRequest>>,
    ) -> Result<Response<Self::ExecuteSqlStream>, Status> {
        let upload = chunks::receive(
            &mut request.into_inner(),
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
            &self.budget,
            |h| h.expected_length,
        )
        .await?;
        let header = upload.header;
        required_app_id(&header.app_id)?;
        required_statements(&header.statements)?;
        let limits = limits(header.limits).map_err(Status::from)?;
        let read_only = header.read_only;
        let clock = self.clock.clone();
        let (result, bytes) = self
            .pool
            .try_run::<_, Mapped>(move |cancel| {
                let (mut db, open) = open(&upload.bytes, clock, &cancel)?;
                let report =
                    snug_materialize::execute(&mut db, &header.app_id, &header.statements, &limits)
                        .map_err(status::execute_error)?;
                if read_only && report.persist.wrote {
                    // The writes reached only the in-memory copy, which is dropped here.
                    return Err(Mapped::new(
                        &reasons::READ_ONLY,
                        "the statements would change the app's data or schema, and the call is \
                         read-only; nothing was kept",
                        [],
                    ));
                }
                let (bytes, user_db_changed) = if read_only {
                    (Vec::new(), false)
                } else {
                    let (bytes, unchanged) =
                        user_db_image(db, &open, upload.bytes, report.persist.wrote)?;
                    if unchanged {
                        (Vec::new(), false)
                    } else {
                        (bytes, true)
                    }
                };
                let result = pb::ExecuteSqlResult {
                    results: report
                        .results
                        .into_iter()
                        .map(convert::statement_result)
                        .collect(),
                    report: Some(convert::persist_report(report.persist)),
                    open: Some(convert::open_summary(&open)),
                    user_db_changed,
                    length: bytes.len() as u64,
                    unregistered_tables: report.unregistered_tables,
                };
                Ok((result, bytes))
            })
            .await?;
        // Checked here rather than left to tonic, so the client gets a typed reason and a hint
        // instead of a transport error.
        let size = result.encoded_len();
        if size > MAX_HEADER_SIZE {
            return Err(Mapped::too_large(
                format!(
                    "the results are {size} bytes, over the {MAX_HEADER_SIZE}-byte response \
                     limit; lower limits.max_rows / max_bytes or split the statements"
                ),
                MAX_HEADER_SIZE as u64,
            )
            .into());
        }
        tracing::info!(
            statements = result.results.len(),
            user_db_changed = result.user_db_changed,
            "executed app SQL"
        );
        let result = pb::ExecuteSqlResponse::header(result);
        Ok(Response::new(chunks::respond(result, Bytes::from(bytes))))
    }

    async fn list_app_tables(
        &self,
        request: Request<Streaming<pb::ListAppTablesRequest>>,
    ) -> Result<Response<pb::ListAppTablesResponse>, Status> {
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
            .try_run::<_, Mapped>(move |cancel| {
                let (db, open) = open(&upload.bytes, clock, &cancel)?;
                drop(upload.bytes);
                let listing =
                    snug_materialize::list_apps_tables(&db).map_err(status::list_error)?;
                Ok(convert::listing(listing, &open))
            })
            .await?;
        let size = response.encoded_len();
        if size > MAX_HEADER_SIZE {
            return Err(Mapped::too_large(
                format!(
                    "the listing is {size} bytes, over the {MAX_HEADER_SIZE}-byte response limit"
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
