//! gRPC service `snug.sync.v1`: the hub as a user's sync origin, and the one place a revision
//! is written.
//!
//! The store (`snug-revstore`) does the keeping — compare-and-swap of each user's current
//! revision, quota, durable content-addressed storage, history, ledgers and reclamation; this
//! crate validates requests, owns every write (`write.rs`: PutImage and PutImageDelta receive an
//! image or a delta, validate the image with `snug_schema::validate_sync_image` in this process,
//! zero its free space and store it), answers deltas (`delta.rs`), and maps the store's errors
//! to statuses in `status.rs`. [`open_store`] picks the backend from [`SyncConfig`]: the embedded
//! SQLite store under the data directory (the default, one node) or PostgreSQL (any number of
//! stateless replicas). [`SyncServer::spawn_reclaimer`] runs retention periodically.
//!
//! Identity: every request carries the user id and principal in a `Caller` message, and the
//! service trusts it. Only the gateway, which authenticates users, may reach this service; the
//! deployment's network policy enforces that, not this crate.
//!
//! What this crate deliberately does not do: authenticate, or create an image on first contact.
//!
//! # Design notes
//!
//! `open_store()` opens the backend `SyncConfig` names: the embedded store in
//! `$SNUG_DATA_DIR/sync` by default, or PostgreSQL with the connection string from
//! `SNUG_SYNC_POSTGRES_URL`, which is deliberately not a flag (argv is visible to every local user)
//! and never printed (`Debug` redacts it).
//! A write holds its image whole while it is validated (the verdict needs all of it), admitted
//! against the process's upload budget for its declared length (or the quota) before its first
//! chunk; a declared length over the quota is refused before any chunk, and bytes past it as
//! they arrive. Validation, delta assembly and delta answers run on one bounded pool
//! (`SNUG_SYNC_CONCURRENCY`), stopped for a caller that went away.
//! GetImage re-cuts the store's pieces into ≤ 1 MiB chunks without copying and frames them
//! without copying either (`snug_rpc::framed`); a storage failure mid-stream ends the stream with its
//! status, never as a short success.
//! A background task runs a reclamation pass every `SNUG_SYNC_RECLAIM_INTERVAL`.
//! `status.rs` holds one exhaustive match per `snug-revstore` error enum, and its reasons are the
//! store's own `reason()` strings, so the put ledger, the status and the gateway say the same
//! word; an image the validation refuses keeps the validation's own reason and metadata.
//! **Architecture Invariant:** the service trusts the `Caller` (user id and principal) in each
//! request: the gateway authenticates users and fills it in, and only the gateway may reach this
//! service (the deployment's network policy enforces it).
//! **Architecture Invariant:** no revision is stored without the validation's verdict, and what
//! is stored is the image with the free space the verdict names zeroed; the revision's SHA-256
//! is of those bytes.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod convert;
pub use convert::{erasure_response, usage_response};
mod delta;
pub mod error_info;
pub mod observe;
pub mod status;
mod watch;
mod write;

use std::{fmt, future::Future, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::StreamExt as _;
use snug_proto::sync::v1::{
    self as pb,
    sync_service_server::{SyncService, SyncServiceServer},
};
use snug_revstore::{
    AnyStore, BaseCache, DEFAULT_QUOTA_BYTES, IntegrityReport, OpenError, PgConfig, PgStore,
    RestoreRequest, Retention, RevStore, SqliteStore, StoreConfig,
};
use snug_rpc::chunks::Chunked as _;
use snug_rpc::{
    blocking::{BlockingPool, concurrency_or_cpus},
    chunks::{self, ResponseStream},
    framed,
    runtime::Runtime,
    server::{ServerConfig, Services, parse_duration},
};
use snug_s3::ObjectsConfig;
use tokio::{net::TcpListener, task::JoinHandle};
use tonic::{Request, Response, Status, Streaming};

use crate::error_info::DOMAIN;

/// The fully qualified gRPC service name, as health checks report it.
pub const SERVICE_NAME: &str = "snug.sync.v1.SyncService";

/// The environment variable that holds the PostgreSQL connection string.
pub const POSTGRES_URL_ENV: &str = "SNUG_SYNC_POSTGRES_URL";

/// Which backend keeps the revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Embedded: SQLite metadata plus pack files under the data directory; one node.
    Sqlite,
    /// PostgreSQL, shared by any number of stateless replicas.
    Postgres,
}

/// A PostgreSQL connection string. It may hold a password, so it is never printed: `Debug` shows
/// only that it is set.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    /// Wraps a libpq-style URL or key/value string.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// Reads [`POSTGRES_URL_ENV`]; unset or empty is `None`.
    pub fn from_process_env() -> Option<Self> {
        std::env::var(POSTGRES_URL_ENV)
            .ok()
            .filter(|url| !url.is_empty())
            .map(Self)
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PostgresUrl(<redacted>)")
    }
}

/// Settings of the sync service, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct SyncConfig {
    /// Where revisions are kept: `sqlite` (embedded, under the hub's --data-dir) or `postgres`
    /// (the connection string comes from SNUG_SYNC_POSTGRES_URL).
    #[arg(long = "store", env = "SNUG_SYNC_STORE", value_enum, default_value_t = Backend::Sqlite)]
    pub store: Backend,
    /// The PostgreSQL connection string, from SNUG_SYNC_POSTGRES_URL only. It is deliberately not
    /// a flag: flags are visible to every local user in the process list and end up in logs.
    #[arg(skip = PostgresUrl::from_process_env())]
    pub postgres_url: Option<PostgresUrl>,
    /// PostgreSQL schema holding the store's tables (created if missing); default: the server's
    /// search path.
    #[arg(long = "sync-postgres-schema", env = "SNUG_SYNC_POSTGRES_SCHEMA")]
    pub postgres_schema: Option<String>,
    /// Pooled PostgreSQL connections per replica.
    #[arg(
        long = "sync-postgres-pool-size",
        env = "SNUG_SYNC_POSTGRES_POOL_SIZE",
        default_value_t = 16
    )]
    pub postgres_pool_size: usize,
    /// Keep image bytes in this S3-compatible bucket, `s3://BUCKET/PREFIX`, instead of PostgreSQL
    /// rows (with `--store postgres`). Endpoint, region, path-style and credentials come from the
    /// standard variables (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), a CA file for an https
    /// endpoint from `AWS_CA_BUNDLE`; plain http only to a loopback endpoint or with
    /// `AWS_ALLOW_HTTP=true`.
    #[arg(long = "objects", env = "SNUG_SYNC_OBJECTS", value_parser = objects_from_env)]
    pub objects: Option<ObjectsConfig>,
    /// Per-user quota on one image, in bytes; an image of exactly this size is accepted.
    #[arg(long = "sync-quota-bytes", env = "SNUG_SYNC_QUOTA_BYTES", default_value_t = DEFAULT_QUOTA_BYTES)]
    pub quota_bytes: u64,
    /// The most bytes one user's unfinished puts may hold at once (each its declared length, or
    /// the quota), beyond which a new put is refused PUTS_IN_FLIGHT (503, retry shortly);
    /// default four times the quota. Failed puts' bytes are reclaimed at once; a crashed put's
    /// count until its record is an orphan (`SNUG_SYNC_ORPHAN_AFTER`).
    #[arg(long = "sync-staged-limit-bytes", env = "SNUG_SYNC_STAGED_LIMIT_BYTES")]
    pub staged_limit_bytes: Option<u64>,
    /// Reclamation always keeps each user's newest N revisions (the current one among them).
    #[arg(long = "sync-keep-revisions", env = "SNUG_SYNC_KEEP_REVISIONS", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub keep_revisions: u32,
    /// Reclamation keeps a superseded revision at least this long (e.g. 24h, 30m).
    #[arg(long = "sync-grace", env = "SNUG_SYNC_GRACE", default_value = "24h", value_parser = parse_duration)]
    pub grace: Duration,
    /// A put still unfinished after this long is an orphan; its objects are reclaimed.
    #[arg(long = "sync-orphan-after", env = "SNUG_SYNC_ORPHAN_AFTER", default_value = "24h", value_parser = parse_duration)]
    pub orphan_after: Duration,
    /// How often a reclamation pass runs; 0 turns periodic reclamation off.
    #[arg(long = "sync-reclaim-interval", env = "SNUG_SYNC_RECLAIM_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub reclaim_interval: Duration,
    /// Image jobs (validating a pushed image, assembling and answering deltas) run at once
    /// (default: the number of CPUs); each holds up to a few copies of an image in memory.
    #[arg(long = "sync-concurrency", env = "SNUG_SYNC_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// How long an image job waits for a slot before it is refused as OVERLOADED.
    #[arg(long = "sync-queue-timeout", env = "SNUG_SYNC_QUEUE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub queue_timeout: Duration,
    /// Bytes of the images this replica wrote last (one per user) kept in memory as the bases of
    /// the delta pushes that follow them, so such a push neither reads nor hashes its base again;
    /// 0 keeps none. An entry lives at most 10 minutes and goes at once when its user is erased
    /// through this replica. Within the same bytes, the buffer of a base a push replaced is kept
    /// for the next push to assemble its image in, so that no push maps its image's memory afresh.
    #[arg(long = "sync-base-cache-bytes", env = "SNUG_SYNC_BASE_CACHE_BYTES", default_value_t = DEFAULT_BASE_CACHE_BYTES)]
    pub base_cache_bytes: u64,
}

/// [`SyncConfig::base_cache_bytes`] by default: two of the largest images.
pub const DEFAULT_BASE_CACHE_BYTES: u64 = 128 << 20;

/// How long the base cache keeps an image: past it, another replica's erasure of its user has
/// left no copy in this one's memory.
pub const BASE_CACHE_MAX_AGE: Duration = Duration::from_secs(10 * 60);

impl Default for SyncConfig {
    fn default() -> Self {
        let retention = Retention::default();
        Self {
            store: Backend::Sqlite,
            postgres_url: None,
            postgres_schema: None,
            postgres_pool_size: 16,
            objects: None,
            quota_bytes: DEFAULT_QUOTA_BYTES,
            staged_limit_bytes: None,
            keep_revisions: 5,
            grace: retention.grace,
            orphan_after: retention.orphan_after,
            reclaim_interval: Duration::from_secs(10 * 60),
            concurrency: None,
            queue_timeout: Duration::from_secs(10),
            base_cache_bytes: DEFAULT_BASE_CACHE_BYTES,
        }
    }
}

impl SyncConfig {
    /// The store settings this configuration asks for, on the system clock, sealing with the
    /// runtime's sealer.
    pub fn store_config(&self, runtime: &Runtime) -> StoreConfig {
        StoreConfig {
            quota_bytes: self.quota_bytes,
            staged_limit_bytes: self.staged_limit_bytes,
            retention: Retention {
                keep_newest: self.keep_revisions as usize,
                grace: self.grace,
                orphan_after: self.orphan_after,
            },
            sealer: runtime.sealer.clone(),
            ..StoreConfig::default()
        }
    }
}

/// Why the store could not be opened at startup.
#[derive(Debug, thiserror::Error)]
pub enum OpenStoreError {
    /// `--store postgres` without a connection string.
    #[error("--store postgres needs {POSTGRES_URL_ENV} (a postgresql:// URL or key=value string)")]
    MissingPostgresUrl,
    /// The object store's settings are unusable (a malformed URL, an unreadable CA file).
    #[error("cannot use the object store for the sync store")]
    Objects(#[source] snug_s3::BucketError),
    /// `--objects` names a bucket for the embedded store, which keeps its bytes in pack files.
    #[error(
        "--objects needs --store postgres: the embedded store keeps its bytes under the data directory"
    )]
    ObjectsNeedPostgres,
    /// The embedded store could not be opened.
    #[error("cannot open the embedded sync store in {}", dir.display())]
    Sqlite {
        /// The store's directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: OpenError,
    },
    /// The PostgreSQL store could not be reached or migrated.
    #[error("cannot open the PostgreSQL sync store")]
    Postgres(#[source] OpenError),
}

/// `--objects URL`, with the rest of the bucket's settings from the standard `AWS_*` variables.
fn objects_from_env(url: &str) -> Result<ObjectsConfig, String> {
    if !url.starts_with("s3://") {
        return Err(format!("{url:?} is not s3://BUCKET/PREFIX"));
    }
    // Named one by one rather than every AWS_ variable: these are the settings the hub supports
    // (and k8s/validate.sh checks manifests against), including EKS's web identity.
    let vars = [
        ("AWS_ENDPOINT_URL", std::env::var("AWS_ENDPOINT_URL")),
        ("AWS_REGION", std::env::var("AWS_REGION")),
        ("AWS_DEFAULT_REGION", std::env::var("AWS_DEFAULT_REGION")),
        (
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
            std::env::var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"),
        ),
        ("AWS_ALLOW_HTTP", std::env::var("AWS_ALLOW_HTTP")),
        ("AWS_ACCESS_KEY_ID", std::env::var("AWS_ACCESS_KEY_ID")),
        (
            "AWS_SECRET_ACCESS_KEY",
            std::env::var("AWS_SECRET_ACCESS_KEY"),
        ),
        ("AWS_SESSION_TOKEN", std::env::var("AWS_SESSION_TOKEN")),
        (
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            std::env::var("AWS_WEB_IDENTITY_TOKEN_FILE"),
        ),
        ("AWS_ROLE_ARN", std::env::var("AWS_ROLE_ARN")),
        ("AWS_CA_BUNDLE", std::env::var("AWS_CA_BUNDLE")),
    ];
    let set = vars
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value.ok()?)));
    Ok(ObjectsConfig::new(url).with_env(set))
}

/// Opens (creating and migrating as needed) the store the configuration names; an embedded one
/// keeps its files in the runtime's directory.
pub async fn open_store(
    config: &SyncConfig,
    runtime: &Runtime,
) -> Result<AnyStore, OpenStoreError> {
    let store_config = config.store_config(runtime);
    match config.store {
        Backend::Sqlite if config.objects.is_some() => Err(OpenStoreError::ObjectsNeedPostgres),
        Backend::Sqlite => {
            let dir = runtime.dir.clone();
            let open_dir = dir.clone();
            // Opening creates directories, takes the directory lock and migrates: blocking work.
            let opened =
                tokio::task::spawn_blocking(move || SqliteStore::open(&open_dir, store_config))
                    .await
                    .map_err(|join| OpenError::Storage(join.into()))
                    .and_then(|result| result);
            match opened {
                Ok(store) => {
                    tracing::info!(dir = %dir.display(), "sync store: embedded sqlite");
                    Ok(AnyStore::Sqlite(store))
                }
                Err(source) => Err(OpenStoreError::Sqlite { dir, source }),
            }
        }
        Backend::Postgres => {
            let url = config
                .postgres_url
                .clone()
                .ok_or(OpenStoreError::MissingPostgresUrl)?;
            let pg = PgConfig {
                url: url.0,
                schema: config.postgres_schema.clone(),
                pool_size: config.postgres_pool_size,
            };
            let store = match &config.objects {
                None => PgStore::connect(pg, store_config).await,
                Some(objects) => {
                    let bucket = objects.open().map_err(OpenStoreError::Objects)?;
                    PgStore::connect_with_objects(pg, bucket, store_config).await
                }
            }
            .map_err(OpenStoreError::Postgres)?;
            tracing::info!(
                schema = ?config.postgres_schema,
                objects = config.objects.as_ref().map(|o| o.url.as_str()),
                "sync store: postgres"
            );
            Ok(AnyStore::Postgres(store))
        }
    }
}

/// The service implementation over an open store; cheap to clone.
#[derive(Clone)]
pub struct SyncServer {
    store: AnyStore,
    quota_bytes: u64,
    keep_revisions: u32,
    reclaim_interval: Duration,
    upload_budget: snug_rpc::budget::UploadBudget,
    /// Image jobs: validations, delta assembly and answers (`write.rs`, `delta.rs`).
    pool: Arc<BlockingPool>,
    /// The clock a validation's import check stamps with.
    clock: Arc<dyn snug_schema::Clock>,
    /// The images this replica wrote last, the bases of the delta pushes that follow them.
    bases: Arc<BaseCache>,
}

impl fmt::Debug for SyncServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncServer")
            .field("store", &self.store)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl SyncServer {
    /// Serves `store`, which should have been opened from the same `config` (see [`open_store`]),
    /// so that the quota this service reports and checks up front is the one the store enforces.
    /// Its uploads are admitted against the runtime's budget.
    pub fn new(store: AnyStore, config: &SyncConfig, runtime: &Runtime) -> Self {
        Self {
            store,
            quota_bytes: config.quota_bytes,
            keep_revisions: config.keep_revisions,
            reclaim_interval: config.reclaim_interval,
            upload_budget: runtime.upload_budget.clone(),
            pool: Arc::new(BlockingPool::new(
                concurrency_or_cpus(config.concurrency),
                config.queue_timeout,
                DOMAIN,
                "image jobs",
            )),
            clock: Arc::new(snug_schema::SystemClock),
            bases: Arc::new(BaseCache::new(
                config.base_cache_bytes,
                BASE_CACHE_MAX_AGE,
                Arc::new(snug_revstore::SystemClock),
            )),
        }
    }

    /// Shows the base cache's size in the process's metrics.
    fn note_base_cache(&self) {
        let held = i64::try_from(self.bases.held_bytes()).unwrap_or(i64::MAX);
        snug_rpc::metrics::global().sync_base_cache_bytes.set(held);
    }

    /// The quota a request is held to: the user's own when the request carries one (the hub's
    /// users directory sets it), the configured one otherwise.
    fn quota(&self, requested: Option<u64>) -> u64 {
        requested.unwrap_or(self.quota_bytes)
    }

    /// The store behind the service.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// Starts the periodic reclamation pass on the current tokio runtime; `None` when the interval
    /// is zero. The first pass runs one interval after start, so a restart loop cannot turn into a
    /// reclamation loop.
    pub fn spawn_reclaimer(&self) -> Option<JoinHandle<()>> {
        if self.reclaim_interval.is_zero() {
            return None;
        }
        let store = self.store.clone();
        let every = self.reclaim_interval;
        Some(tokio::spawn(async move {
            let start = tokio::time::Instant::now() + every;
            let mut ticker = tokio::time::interval_at(start, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match store.reclaim().await {
                    Ok(report) => tracing::info!(
                        revisions = report.revisions,
                        images = report.images,
                        chunks = report.chunks,
                        packs = report.packs,
                        publications = report.publications,
                        "reclamation pass"
                    ),
                    // Every refusal deletes nothing; the next pass tries again.
                    Err(err) => tracing::warn!(
                        reason = err.reason().name,
                        error = %err,
                        "reclamation pass refused"
                    ),
                }
            }
        }))
    }
}

impl SyncServer {
    /// GetImage's result and the image's pieces (a storage failure as its status), for both the
    /// generated server's answer and the framed one (see [`service`]).
    async fn get_image_parts(
        &self,
        request: Request<pb::GetImageRequest>,
    ) -> Result<
        (
            pb::GetImageResponse,
            impl futures::Stream<Item = Result<Bytes, Status>> + Send + 'static,
        ),
        Status,
    > {
        let request = request.into_inner();
        let caller = convert::caller(request.caller, "caller")?;
        let download = match request.revision {
            None => self.store.get(&caller.user, &caller.principal).await,
            Some(token) => {
                let revision = convert::revision(token, "revision")?;
                self.store
                    .get_revision(&caller.user, &revision, &caller.principal)
                    .await
            }
        }
        .map_err(status::read_error)?;
        // The first piece is read (and so checked against its chunks' addresses) before the
        // header goes out: a damaged image the first piece already shows is refused with its
        // status, where the gateway can still answer a clean error instead of a 200 it would
        // have to break off. Damage further in ends the stream with the status after the sound
        // bytes before it, never with wrong bytes.
        let mut body = download.body;
        let first = match body.next().await {
            Some(Err(err)) => return Err(status::storage_error(err)),
            first => first,
        };
        let result = pb::GetImageResponse::header(convert::revision_info(download.info));
        Ok((
            result,
            futures::stream::iter(first)
                .chain(body)
                .map(|piece| piece.map_err(status::storage_error)),
        ))
    }
}

/// Wraps the service in its generated server, with the chunk-sized message limits. A download's
/// bytes go out as framed chunks (`snug_rpc::framed`): the same messages, without a copy of each
/// chunk into tonic's encode buffer.
pub fn service(server: SyncServer) -> framed::Override<SyncServiceServer<SyncServer>> {
    let generated = snug_rpc::with_message_limits!(SyncServiceServer::new(server.clone()));
    framed::Override::new(generated, pb::GET_IMAGE_PATH, move |request| {
        let server = server.clone();
        async move {
            let parts = match framed::unary_request::<pb::GetImageRequest>(request).await {
                Ok(request) => server.get_image_parts(request).await,
                Err(status) => Err(status),
            };
            match parts {
                Ok((result, body)) => framed::respond(result, body),
                Err(status) => status.into_http(),
            }
        }
    })
}

/// The routes and health names of this service over `store`, with its reclaimer started (so it
/// must be called on a tokio runtime).
pub fn services(store: AnyStore, config: &SyncConfig, runtime: &Runtime) -> Services {
    let server = SyncServer::new(store, config, runtime);
    server.spawn_reclaimer();
    Services::default().with(service(server), &[observe::classify])
}

/// Serves the sync service alone over `store` on `listener` until `shutdown` completes.
pub async fn serve(
    server_config: &ServerConfig,
    config: &SyncConfig,
    runtime: &Runtime,
    store: AnyStore,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    snug_rpc::server::serve(
        server_config,
        listener,
        services(store, config, runtime),
        shutdown,
    )
    .await
}

#[tonic::async_trait]
impl SyncService for SyncServer {
    async fn provision_user(
        &self,
        request: Request<pb::ProvisionUserRequest>,
    ) -> Result<Response<pb::ProvisionUserResponse>, Status> {
        let caller = convert::caller(request.into_inner().caller, "caller")?;
        let created = self
            .store
            .provision_user(&caller.user)
            .await
            .map_err(status::provision_error)?;
        if created {
            tracing::info!(user = %caller.user, principal = %caller.principal, "provisioned a user");
        }
        Ok(Response::new(pb::ProvisionUserResponse { created }))
    }

    async fn head_image(
        &self,
        request: Request<pb::HeadImageRequest>,
    ) -> Result<Response<pb::HeadImageResponse>, Status> {
        let request = request.into_inner();
        let caller = convert::caller(request.caller, "caller")?;
        let info = match request.revision {
            None => self.store.head(&caller.user).await,
            Some(token) => {
                let revision = convert::revision(token, "revision")?;
                self.store.head_revision(&caller.user, &revision).await
            }
        }
        .map_err(status::read_error)?;
        Ok(Response::new(pb::HeadImageResponse {
            revision: Some(convert::revision_info(info)),
        }))
    }

    type GetImageStream = ResponseStream<pb::GetImageResponse>;

    async fn get_image(
        &self,
        request: Request<pb::GetImageRequest>,
    ) -> Result<Response<Self::GetImageStream>, Status> {
        let (result, body) = self.get_image_parts(request).await?;
        // The store yields pieces of any size (a pack extent may be many MiB), re-cut into ≤ 1 MiB
        // chunks; a storage failure ends the stream with its status: the client never sees a
        // short stream as a success.
        let chunks = chunks::rechunk(body).map(|chunk| chunk.map(pb::GetImageResponse::chunk));
        let stream = futures::stream::once(async move { Ok(result) }).chain(chunks);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn put_image(
        &self,
        request: Request<Streaming<pb::PutImageRequest>>,
    ) -> Result<Response<pb::PutImageResponse>, Status> {
        Ok(Response::new(
            SyncServer::put_image(self, request.into_inner()).await?,
        ))
    }

    async fn put_image_delta(
        &self,
        request: Request<Streaming<pb::PutImageDeltaRequest>>,
    ) -> Result<Response<pb::PutImageResponse>, Status> {
        Ok(Response::new(
            SyncServer::put_image_delta(self, request.into_inner()).await?,
        ))
    }

    async fn list_revisions(
        &self,
        request: Request<pb::ListRevisionsRequest>,
    ) -> Result<Response<pb::ListRevisionsResponse>, Status> {
        let request = request.into_inner();
        let caller = convert::caller(request.caller, "caller")?;
        let revisions = self
            .store
            .list_revisions(&caller.user, convert::limit(request.limit))
            .await
            .map_err(status::storage_error)?;
        Ok(Response::new(pb::ListRevisionsResponse {
            revisions: revisions.into_iter().map(convert::revision_info).collect(),
        }))
    }

    async fn restore_revision(
        &self,
        request: Request<pb::RestoreRevisionRequest>,
    ) -> Result<Response<pb::RestoreRevisionResponse>, Status> {
        let request = request.into_inner();
        let caller = convert::caller(request.caller, "caller")?;
        let from = convert::revision(request.from_revision, "from_revision")?;
        let precondition = convert::precondition(request.precondition, "precondition")?;
        let idempotency_key = convert::idempotency_key(request.idempotency_key, "idempotency_key")?;
        let outcome = self
            .store
            .restore(RestoreRequest {
                user: caller.user,
                from,
                precondition,
                principal: caller.principal,
                idempotency_key,
            })
            .await
            .map_err(status::put_error)?;
        tracing::info!(
            revision = %outcome.info.revision,
            restored_from = ?outcome.info.restored_from,
            replayed = outcome.replayed,
            "restored a revision"
        );
        Ok(Response::new(pb::RestoreRevisionResponse {
            revision: Some(convert::revision_info(outcome.info)),
            replayed: outcome.replayed,
        }))
    }

    async fn list_ledger(
        &self,
        request: Request<pb::ListLedgerRequest>,
    ) -> Result<Response<pb::ListLedgerResponse>, Status> {
        let request = request.into_inner();
        let caller = convert::caller(request.caller, "caller")?;
        let limit = convert::limit(request.limit);
        let (served, writes) = tokio::try_join!(
            self.store.served_ledger(&caller.user, limit),
            self.store.put_ledger(&caller.user, limit),
        )
        .map_err(status::storage_error)?;
        Ok(Response::new(pb::ListLedgerResponse {
            served: served.into_iter().map(convert::served_entry).collect(),
            writes: writes.into_iter().map(convert::write_entry).collect(),
        }))
    }

    type CheckStoreStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<pb::CheckStoreResponse, Status>> + Send>,
    >;

    type PlanImageDeltaStream = ResponseStream<pb::PlanImageDeltaResponse>;

    async fn plan_image_delta(
        &self,
        request: Request<Streaming<pb::PlanImageDeltaRequest>>,
    ) -> Result<Response<Self::PlanImageDeltaStream>, Status> {
        Ok(Response::new(
            SyncServer::plan_image_delta(self, request.into_inner()).await?,
        ))
    }

    type AssembleImageDeltaStream = ResponseStream<pb::AssembleImageDeltaResponse>;

    async fn assemble_image_delta(
        &self,
        request: Request<Streaming<pb::AssembleImageDeltaRequest>>,
    ) -> Result<Response<Self::AssembleImageDeltaStream>, Status> {
        Ok(Response::new(
            SyncServer::assemble_image_delta(self, request.into_inner()).await?,
        ))
    }

    type WatchImageStream = ResponseStream<pb::WatchImageResponse>;

    async fn watch_image(
        &self,
        request: Request<pb::WatchImageRequest>,
    ) -> Result<Response<Self::WatchImageStream>, Status> {
        Ok(Response::new(
            SyncServer::watch_image(self, request.into_inner()).await?,
        ))
    }

    type WatchCommitsStream = ResponseStream<pb::WatchCommitsResponse>;

    async fn watch_commits(
        &self,
        request: Request<pb::WatchCommitsRequest>,
    ) -> Result<Response<Self::WatchCommitsStream>, Status> {
        Ok(Response::new(
            SyncServer::watch_commits(self, request.into_inner()).await?,
        ))
    }

    type GetImageDeltaStream = ResponseStream<pb::GetImageDeltaResponse>;

    async fn get_image_delta(
        &self,
        request: Request<Streaming<pb::GetImageDeltaRequest>>,
    ) -> Result<Response<Self::GetImageDeltaStream>, Status> {
        Ok(Response::new(
            SyncServer::get_image_delta(self, request.into_inner()).await?,
        ))
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        let user = convert::user(request.into_inner().user_id, "user_id")?;
        let usage = self
            .store
            .usage(&user)
            .await
            .map_err(status::storage_error)?;
        Ok(Response::new(convert::usage_response(usage)))
    }

    async fn erase_user(
        &self,
        request: Request<pb::EraseUserRequest>,
    ) -> Result<Response<pb::EraseUserResponse>, Status> {
        let user = convert::user(request.into_inner().user_id, "user_id")?;
        self.bases.forget(&user);
        let report = self.store.erase(&user).await;
        // Again: a push that landed before the erasure may have kept its image meanwhile.
        self.bases.forget(&user);
        self.note_base_cache();
        let report = report.map_err(status::reclaim_error)?;
        tracing::info!(
            user = %user,
            revisions = report.revisions,
            chunks = report.chunks,
            bytes = report.bytes,
            packs = report.packs,
            packs_wiped = report.packs_wiped,
            ledger_rows_scrubbed = report.ledger_rows_scrubbed,
            "erased a user"
        );
        Ok(Response::new(convert::erasure_response(report)))
    }

    async fn check_store(
        &self,
        _request: Request<pb::CheckStoreRequest>,
    ) -> Result<Response<Self::CheckStoreStream>, Status> {
        tracing::info!("an integrity check of the whole store started");
        Ok(Response::new(Box::pin(self.check_stream())))
    }

    async fn get_store_status(
        &self,
        _request: Request<pb::GetStoreStatusRequest>,
    ) -> Result<Response<pb::GetStoreStatusResponse>, Status> {
        let (health, reason) = match self.store.health().await {
            Ok(()) => (pb::StoreHealth::Serving, String::new()),
            Err(err) => {
                // The cause may name hosts or paths: it goes to the log, the caller gets the reason.
                tracing::warn!(reason = err.reason().name, error = %err, "the sync store failed its probe");
                (pb::StoreHealth::Unavailable, err.reason().name.to_owned())
            }
        };
        Ok(Response::new(pb::GetStoreStatusResponse {
            backend: self.store.backend().to_owned(),
            health: health.into(),
            reason,
            quota_bytes: self.quota_bytes,
            keep_revisions: self.keep_revisions,
            store_id: self.store.store_id().to_string(),
        }))
    }
}

/// How often a running CheckStore reports its progress.
const CHECK_PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A running integrity check, aborted when its response stream is dropped (the client
/// cancelled or went away), so a check no one reads stops reading the store.
struct Check(JoinHandle<Result<IntegrityReport, snug_revstore::StorageError>>);

impl Drop for Check {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl SyncServer {
    /// CheckStore's messages: the report so far at most every [`CHECK_PROGRESS_EVERY`], only the
    /// problems not sent yet in each, then the final totals with `done`. The check runs in a
    /// task of its own and stops when the stream is dropped. `snug-hub sync check` reads the same
    /// stream over a store it opened itself.
    pub fn check_stream(
        &self,
    ) -> impl futures::Stream<Item = Result<pb::CheckStoreResponse, Status>> + Send + 'static {
        let (progress, watched) = tokio::sync::watch::channel(IntegrityReport::default());
        let store = self.store.clone();
        let check = Check(tokio::spawn(async move {
            store.check_integrity_watched(&progress).await
        }));
        let message = |report: &IntegrityReport, sent: usize, done: bool| pb::CheckStoreResponse {
            images_checked: report.images_checked,
            bytes_checked: report.bytes_checked,
            problems: report.problems[sent.min(report.problems.len())..]
                .iter()
                .map(convert::integrity_problem)
                .collect(),
            problems_omitted: report.problems_omitted,
            done,
        };
        futures::stream::unfold(Some((check, watched, 0usize)), move |state| async move {
            let (mut check, watched, sent) = state?;
            tokio::select! {
                finished = &mut check.0 => {
                    let item = match finished {
                        Ok(Ok(report)) => Ok(message(&report, sent, true)),
                        Ok(Err(err)) => Err(status::storage_error(err)),
                        Err(join) => Err(snug_rpc::status::internal(DOMAIN, &join)),
                    };
                    Some((item, None))
                }
                () = tokio::time::sleep(CHECK_PROGRESS_EVERY) => {
                    let report = watched.borrow().clone();
                    let item = message(&report, sent, false);
                    Some((Ok(item), Some((check, watched, report.problems.len()))))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
