//! `snug-hub`: runs Snug Hub's services, all in one process or one by name.
//!
//! `snug-hub serve` is the whole hub on its embedded defaults; `snug-hub serve container` (or
//! `schema`, `materialize`, `sync`) runs only that service, for deployments that split the
//! capabilities into separate processes or pods. Both use the same service code (`services/*`
//! crates), so there is no second implementation of anything here: this file only parses
//! configuration and composes routes.
//! The whole hub also serves the HTTP gateway (`gateway.rs`); `snug-hub serve gateway` runs the
//! gateway alone against services elsewhere, and `snug-hub users` manages who may call it.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map.)
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `SNUG_LISTEN` | `127.0.0.1:50051` | gRPC listen address |
//! | `SNUG_SERVICE_TOKEN` | — (no token: a warning when `SNUG_LISTEN` is beyond loopback) | the hub's service token, at least 32 characters, the same in every component; environment (or `--service-token`), never printed: every gRPC service requires it as `authorization: Bearer <token>` of every call but health checks (`SERVICE_TOKEN_REFUSED`), and the gateway, the admin API and `users`/`sync --sync-addr` present it |
//! | `SNUG_REQUEST_TIMEOUT` | `60s` | per-request deadline (a shorter client `grpc-timeout` wins) |
//! | `SNUG_CONCURRENCY_LIMIT` | `64` | gRPC requests in flight across connections; beyond it, shed with UNAVAILABLE/`OVERLOADED` (health checks exempt) |
//! | `SNUG_SHUTDOWN_GRACE` | `20s` | drain time after SIGTERM |
//! | `SNUG_UPLOAD_BUDGET_MIB` | `128` | MiB of uploads buffered at once, one budget for the services of a process (container, schema, materialize, and the sync service, which holds a pushed image while it validates it; the gateway streams bodies on and holds none); an upload is admitted for its declared length (its limit when undeclared) before its first byte is read |
//! | `SNUG_UPLOAD_BUDGET_WAIT` | `5s` | how long an upload waits for room in its budget before it is refused: gRPC UNAVAILABLE/`OVERLOADED`, HTTP 503 `OVERLOADED` with `Retry-After` |
//! | `SNUG_UPLOAD_MIN_RATE_KIB` | `64` | KiB a second an upload must send on average after its grace, at the gateway and in every service, or it is cut off (HTTP 400 `BODY_INCOMPLETE`, gRPC `DEADLINE_EXCEEDED`) and its share of the upload budget freed; 0 turns the rule off |
//! | `SNUG_UPLOAD_GRACE` | `10s` | how long an upload may take before its minimum rate counts |
//! | `SNUG_LOG_FORMAT` | `text` | `text` or `json` log lines on stderr, for every `snug-hub` command (`--log-format`); filter with `RUST_LOG`; lines inside a traced request carry `trace_id` and `span_id` |
//! | `SNUG_ADMIN_LISTEN` | — (off) | admin port of `snug-hub serve`: `GET /metrics` in the Prometheus text format; where the gateway runs (`serve`, `serve gateway`) with auth on, also the admin API `snug.admin.v1` (gRPC, h2c) |
//! | `SNUG_ADMIN_TOKEN_SHA256` | — (the admin API refuses every call) | SHA-256 (hex) of the admin token the admin API accepts as `authorization: Bearer …`; from a Secret; `snug-hub admin-token` makes a token and prints both |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | — (off) | OTLP/gRPC collector to export traces to: `https://host:4317` (TLS, the collector's certificate and host name verified) or plaintext `http://host:4317`; unset or empty: no exporter, no background task |
//! | `OTEL_EXPORTER_OTLP_CERTIFICATE` | compiled-in Mozilla roots | PEM file of the CAs an `https://` collector's certificate must chain to; refused with an `http://` endpoint |
//! | `OTEL_SERVICE_NAME` | `snug-hub`, `snug-hub-<service>` | `service.name` of the exported spans (the default names the role: `snug-hub-gateway`, `snug-hub-sync`, …) |
//! | `SNUG_CONTAINER_MIN_ITERATIONS` | `10000` | smallest PBKDF2 count opened or created |
//! | `SNUG_CONTAINER_MAX_ITERATIONS` | `10000000` | largest PBKDF2 count opened or created |
//! | `SNUG_CONTAINER_ITERATIONS_CEILING` | `100000000` | the most a request's `iteration_policy.max_iterations` may raise the accepted count to |
//! | `SNUG_CONTAINER_KDF_CONCURRENCY` | CPUs | key derivations at once |
//! | `SNUG_CONTAINER_KDF_QUEUE_TIMEOUT` | `10s` | wait for a derivation slot before `OVERLOADED` |
//! | `SNUG_CONTAINER_BUFFER_POOL` | `2` | 64 MiB receive buffers kept for reuse (they only ever hold uploaded ciphertext), so unlocks do not fault in fresh pages |
//! | `SNUG_SCHEMA_CONCURRENCY` | CPUs | user-database jobs (open, migrate, export, operations) at once |
//! | `SNUG_SCHEMA_QUEUE_TIMEOUT` | `10s` | wait for a job slot before `OVERLOADED` |
//! | `SNUG_MATERIALIZE_CONCURRENCY` | CPUs | app jobs (materialize, persist, DDL, SQL) at once; each may hold a few copies of a 64 MiB user database |
//! | `SNUG_MATERIALIZE_QUEUE_TIMEOUT` | `10s` | wait for an app-job slot before `OVERLOADED` |
//! | `SNUG_SYNC_STORE` | `sqlite` | sync backend: `sqlite` (embedded, one node) or `postgres` (`--store`) |
//! | `SNUG_DATA_DIR` | `./snug-data` | the hub's data directory: the embedded sync store in `sync/`, the gateway's users file (`SNUG_USERS_STORE=sqlite`) and session key in `gateway/` |
//! | `SNUG_SYNC_POSTGRES_URL` | — | PostgreSQL connection string for `--store postgres`; environment only, never printed; TLS as in libpq: `sslmode=disable\|prefer\|require\|verify-ca\|verify-full` (default `prefer`; use `verify-full`) and `sslrootcert=/path/ca.pem` or `system` |
//! | `SNUG_SYNC_POSTGRES_SCHEMA` | search path | schema for the store's tables (created if missing) |
//! | `SNUG_SYNC_POSTGRES_POOL_SIZE` | `16` | pooled PostgreSQL connections per replica, plus one session that LISTENs for every replica's commits (direct, or through a pooler in session mode) |
//! | `SNUG_SYNC_OBJECTS` | — (bytes in PostgreSQL rows) | `s3://BUCKET/PREFIX`: with `--store postgres`, image bytes go to this S3-compatible bucket as pack objects; the bucket is reached with the standard `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_VIRTUAL_HOSTED_STYLE_REQUEST` (path-style unless `true`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and `AWS_CA_BUNDLE` (a CA file for https); plain http only to a loopback endpoint or with `AWS_ALLOW_HTTP=true` |
//! | `SNUG_SYNC_QUOTA_BYTES` | `67108864` | per-user quota on one image; exactly this size is accepted |
//! | `SNUG_SYNC_STAGED_LIMIT_BYTES` | 4 × the quota | most bytes one user's unfinished puts may hold at once (each its declared length); beyond it a put is refused `PUTS_IN_FLIGHT` (503, retryable); a failed put's bytes are reclaimed at once, a crashed put's count until `SNUG_SYNC_ORPHAN_AFTER` |
//! | `SNUG_SYNC_KEEP_REVISIONS` | `5` | newest revisions per user that reclamation always keeps (≥ 1) |
//! | `SNUG_SYNC_GRACE` | `24h` | a superseded revision is kept at least this long |
//! | `SNUG_SYNC_ORPHAN_AFTER` | `24h` | an unfinished put's objects are reclaimed after this long |
//! | `SNUG_SYNC_RECLAIM_INTERVAL` | `10m` | time between reclamation passes; `0` turns them off |
//! | `SNUG_SYNC_CONCURRENCY` | CPUs | image jobs at once: validating a pushed image, assembling a pushed delta, answering a pull's delta; each may hold a few copies of an image |
//! | `SNUG_SYNC_QUEUE_TIMEOUT` | `10s` | wait for an image job slot before `OVERLOADED` |
//! | `SNUG_SYNC_BASE_CACHE_BYTES` | `134217728` | bytes of the images this replica wrote last (one per user, each kept at most 10 min, dropped at once when its user is erased here) held in memory as the bases of the delta pushes that follow, which then neither read nor hash their base, and within it the buffer of a replaced base for the next push to assemble in; `0` keeps none. Count it in the replica's memory beside the upload budget |
//! | `SNUG_HTTP_LISTEN` | `127.0.0.1:8080` | the gateway's HTTP address |
//! | `SNUG_AUTH` | off on loopback, on elsewhere | `on` (tokens, sessions) or `off` (the local user; loopback only) |
//! | `SNUG_CORS_ORIGINS` | — | comma-separated browser origins; required with auth on |
//! | `SNUG_SESSION_SECRET` | `<data dir>/gateway/session.key` | session HMAC key, ≥ 32 characters; environment only; required with `SNUG_USERS_STORE=postgres` (every replica must sign and check sessions with one key) |
//! | `SNUG_USERS_STORE` | `sqlite` | the users directory of the gateway and `snug-hub users`: `sqlite` (`<data dir>/gateway/users.db`, one gateway) or `postgres` (shared by any number of gateway replicas; `--users-store`) |
//! | `SNUG_USERS_POSTGRES_URL` | — | PostgreSQL connection string for `SNUG_USERS_STORE=postgres`; environment only, never printed; the same DSN and TLS rules as `SNUG_SYNC_POSTGRES_URL` (use `sslmode=verify-full`) |
//! | `SNUG_USERS_POSTGRES_SCHEMA` | search path | schema for the users directory's tables (`hub_users`, `hub_tokens`, `hub_identities`, `hub_sessions`; created if missing, and tables a later release adds are created at the next start) |
//! | `SNUG_USERS_POSTGRES_POOL_SIZE` | `8` | pooled PostgreSQL connections to the users directory per gateway |
//! | `SNUG_OIDC_ISSUER` | — (OpenID Connect off) | comma-separated issuer URLs whose tokens (JWTs) the hub accepts beside its own, each exactly its tokens' `iss`; https, or http on a loopback address only; needs auth on |
//! | `SNUG_OIDC_AUDIENCE` | — (required with an issuer) | the audience tokens must carry in `aud` |
//! | `SNUG_OIDC_USER_CLAIM` | `sub` | the claim naming the user; the stored identity is issuer + that claim |
//! | `SNUG_OIDC_REQUIRED_CLAIM` | — | `name=value` (e.g. `groups=snug-users`): only tokens whose claim is, or (an array) contains, the value may use the hub |
//! | `SNUG_OIDC_CLIENT_ID` | the audience | the OAuth client of the browser login (`GET /auth/login`) |
//! | `SNUG_OIDC_CLIENT_SECRET` | — (a public client with PKCE) | the client's secret; environment only |
//! | `SNUG_PUBLIC_URL` | — (no browser login) | the hub's external base URL; the login's redirect URI is this + `/auth/callback` |
//! | `SNUG_OIDC_SESSION_MAX_AGE` | `12h` | longest a browser session made from an issuer's token (the login at `/auth/login`, or `POST /auth/session` with a JWT) is admitted after that token was presented, checked on every request against this setting (at most the 7 days of every session; not `0`); then the browser logs in again and the issuer's claims, `SNUG_OIDC_REQUIRED_CLAIM` included, are checked again |
//! | `SNUG_OIDC_JWKS_MIN_INTERVAL` | `30s` | the window of one issuer's key fetches, at most three per window (an unknown `kid` asks for one; keys are also refreshed when 15 minutes old) |
//! | `SNUG_SYNC_ADDR`, `SNUG_MATERIALIZE_ADDR` | — (`serve`: unused, the services are in-process) | services for `snug-hub serve gateway` (no materialize address: export answers 501); `SNUG_SYNC_ADDR` (`--sync-addr`) is also the sync service `users` and `sync check\|usage\|erase` ask instead of opening the store |
//! | `SNUG_SCHEMA_ADDR` | — | ignored, with a warning: `serve gateway` no longer calls the schema service (the sync service validates every image it stores); kept so that an older deployment's setting is named, not silently dropped |
//! | `SNUG_RPC_DEADLINE` | `30s` | deadline of every gRPC call the gateway makes |
//! | `SNUG_RPC_CONNECT_TIMEOUT` | `2s` | TCP connect timeout to a service |
//! | `SNUG_HTTP_CONCURRENCY_LIMIT` | `256` | HTTP requests handled at once; beyond it, 503 |
//! | `SNUG_EVENTS_MAX_STREAMS` | `10000` | event streams one gateway keeps open at most (each idle one holds a few KiB); one more is refused with 503 `OVERLOADED` |
//! | `SNUG_EVENTS_MAX_STREAMS_PER_USER` | `32` | event streams one user keeps open at most; one more is refused with 429 `RATE_LIMITED` |
//! | `SNUG_EVENTS_MAX_STREAMS_PER_ADDRESS` | `128` | event streams one client address keeps open at most (behind trusted proxies, by `X-Forwarded-For`); one more is refused with 429 `RATE_LIMITED` |
//! | `SNUG_EVENTS_STREAM_LIFETIME` | `5m` | how long one event stream (`GET /userdb/events`) lasts before the hub ends it (retryable) and the client reconnects with `Last-Event-ID`, missing nothing: the bound within which a revoked token or a disabled or removed user loses its streams |
//! | `SNUG_UPLOAD_IDLE_TIMEOUT` | `30s` | an upload that sends nothing this long is abandoned |
//! | `SNUG_HTTP_HEADER_TIMEOUT` | `10s` | a connection whose first request's headers have not all arrived this long after its accept (sent or not), or a kept-alive one's next request's, is closed |
//! | `SNUG_HTTP_IDLE_TIMEOUT` | `60s` | a connection that starts no request this long after its last one ended is closed (HTTP/2: GOAWAY; pinged at half of it) |
//! | `SNUG_HTTP_MAX_CONNECTIONS` | `4096` | open HTTP connections at most; at the cap silent ones are closed first, and only when every one is busy do new ones wait in the listen backlog |
//! | `SNUG_HTTP_MAX_CONNECTIONS_PER_ADDRESS` | `256` | open HTTP connections from one client address at most (a trusted proxy's not counted) |
//! | `SNUG_RATE_LIMIT_BURST` | `60` with auth on, off with auth off | requests a client address, and separately an authenticated user, may make in a burst; `0` turns rate limits off |
//! | `SNUG_RATE_LIMIT_PER_SECOND` | `1` with auth on, off with auth off | the rate the burst refills at; beyond it `429 RATE_LIMITED` with `Retry-After`; `0` turns rate limits off |
//! | `SNUG_TRUSTED_PROXIES` | — | comma-separated addresses or networks (`10.0.0.0/8`) of proxies whose `X-Forwarded-For` names the client for rate limits; ignored from anyone else |
//! | `SNUG_ZERO_COPY_CACHE_MIB` | `128` | `serve` only: MiB of large images (over 256 KiB) the sync store may keep sealed, so the gateway sends them with `sendfile`; each costs twice its size in memory; `0` keeps none |
//! | `SNUG_HEALTHCHECK_ADDR` | — | `snug-hub healthcheck` only: probe this gRPC address and nothing else, whatever the role |
//!
//! Global options: `--data-dir`, `--sync-addr` and `--json` (like `--log-format` and the OTLP
//! settings) are accepted before or after the subcommand, one spelling each (`--addr`, the old
//! spelling of `--sync-addr` in `sync check|usage|erase`, stays as a hidden alias). Every
//! operator command that names a user takes the name or the id, resolved by the admin API's one
//! rule, and refuses an unknown one with the registry's reason and exit status (`operator.rs`,
//! `erase.rs`); `users remove --erase` asks for the user's name on a terminal and needs `--yes`
//! off one.
//!
//! In `snug-hub serve` the gateway calls the process's own services in-process
//! (`snug_rpc::server::local`: the same generated clients and servers, the same observation layer
//! and concurrency limit as the gRPC port, minus the socket and HTTP/2 framing); the gRPC port
//! serves everyone else. The sync service trusts the caller it is given, so the gRPC port must stay
//! unreachable to anyone but the gateway: on loopback (the default) or behind network policy.
//!
//! The CLI reads `SNUG_MIN_ITERATIONS` / `SNUG_MAX_ITERATIONS` (`--min-iterations` /
//! `--max-iterations`, default 10,000..=10,000,000) to open files made with a weak or a raised
//! setting (outside the range: `ITERATIONS_OUT_OF_POLICY`, exit 5, the file untouched), and
//! `SNUG_TOKEN` (or `--token-file`) for `snug sync` against a hub.

mod check;
mod erase;
mod gateway;
mod healthcheck;
mod operator;
#[cfg(test)]
mod tests;
mod users;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use snug_container_service::ContainerConfig;
use snug_files::sealed::Sealer;
use snug_materialize_service::{MaterializeConfig, MaterializeServer};
use snug_rpc::telemetry::{Telemetry, TelemetryConfig};
use snug_rpc::{
    runtime::Runtime,
    server::{ServerConfig, Services, serve, shutdown_signal},
    service_token::ServiceToken,
};
use snug_schema_service::{SchemaConfig, SchemaServer};
use snug_sync_service::{SyncConfig, SyncServer};

#[derive(Debug, Parser)]
#[command(
    name = "snug-hub",
    version,
    about = "Snug Hub: the hub side of the Snug Protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    telemetry: TelemetryConfig,
    #[command(flatten)]
    global: Global,
}

/// The options every command takes, before or after its name (`global`): one spelling each,
/// whichever command reads it. A command that keeps no files or calls no sync service ignores
/// the data directory and the address, which containers set for every command through the
/// environment; `--json`, which nothing sets behind the operator's back, is refused where there
/// is no report to give.
#[derive(Debug, Clone, clap::Args)]
struct Global {
    #[command(flatten)]
    data: DataDir,
    /// The sync service (e.g. http://127.0.0.1:50051): the one `serve gateway` calls, and the one
    /// `users` (usage, erasure) and `sync check|usage|erase` ask instead of opening the store
    /// here, as they must while a hub has it open.
    #[arg(long = "sync-addr", env = "SNUG_SYNC_ADDR", global = true)]
    sync_addr: Option<String>,
    /// The hub's service token (from a Secret, the same in every component): `serve` requires it
    /// of every gRPC call but health checks when set, and the gateway, the admin API and these
    /// commands present it to the services they call. At least 32 characters
    /// (`openssl rand -hex 32`).
    // Parsed after clap, whose refusal would echo the value.
    #[arg(
        long = "service-token",
        env = "SNUG_SERVICE_TOKEN",
        global = true,
        hide_env_values = true
    )]
    service_token: Option<String>,
    /// Print the report (`users`, `sync`, `admin-token`), or the refusal, as one JSON object on
    /// stdout.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once at startup; boxing the configs buys nothing"
)]
enum Command {
    /// Serves the hub: every service in one process, or the one named.
    Serve(ServeArgs),
    /// Manages who may use the HTTP gateway: users, their bearer tokens, disabled flags and
    /// quotas, in the users directory the gateway reads (<data-dir>/gateway/users.db, or
    /// PostgreSQL with SNUG_USERS_STORE=postgres).
    Users {
        #[command(flatten)]
        users: snug_gateway::config::UsersConfig,
        #[command(flatten)]
        sync: SyncConfig,
        #[command(subcommand)]
        command: users::UsersCommand,
    },
    /// Makes an admin token for the admin API (snug.admin.v1 on SNUG_ADMIN_LISTEN): the token on
    /// stdout, and on stderr the SHA-256 the hub keeps (SNUG_ADMIN_TOKEN_SHA256).
    AdminToken,
    /// Operates on the sync store.
    Sync {
        #[command(subcommand)]
        command: SyncCommand,
    },
    /// Asks a running `snug-hub serve` whether it is serving what its role serves; exits 0 if so.
    ///
    /// Images built FROM scratch have no shell or probe binary, so health checks call this.
    Healthcheck(healthcheck::HealthcheckArgs),
}

/// `snug-hub sync …`.
#[derive(Debug, Subcommand)]
enum SyncCommand {
    /// Checks every retained image of the sync store: every chunk against its address, every
    /// image against its SHA-256. Exits 0 when sound, 2 when it found problems, 1 when it could
    /// not run.
    Check {
        #[command(flatten)]
        addr: operator::OldSyncAddr,
        #[command(flatten)]
        sync: SyncConfig,
    },
    /// Prints one user's usage of the sync store as JSON: the current image's bytes, the bytes
    /// only earlier retained revisions hold, and the history's length. An unknown user is
    /// refused (exit 3).
    Usage {
        #[command(flatten)]
        args: erase::UserArgs,
        #[command(flatten)]
        addr: operator::OldSyncAddr,
        #[command(flatten)]
        users: snug_gateway::config::UsersConfig,
        #[command(flatten)]
        sync: SyncConfig,
    },
    /// Erases one user from the sync store: their images, history, unfinished uploads, the
    /// chunks no other user's image holds, and the principals of their ledger rows; prints what
    /// it deleted as JSON. Idempotent for a user the directory names; an unknown user is refused
    /// (exit 3) and nothing is erased. The users directory is `snug-hub users`'s.
    Erase {
        #[command(flatten)]
        args: erase::UserArgs,
        #[command(flatten)]
        addr: operator::OldSyncAddr,
        #[command(flatten)]
        users: snug_gateway::config::UsersConfig,
        #[command(flatten)]
        sync: SyncConfig,
    },
}

/// What `snug-hub serve` runs, and every component's settings (each reads only its own).
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Which service to run alone; omit it to run the whole hub in one process.
    #[arg(value_enum)]
    service: Option<ServiceName>,
    #[command(flatten)]
    server: ServerConfig,
    #[command(flatten)]
    container: ContainerConfig,
    #[command(flatten)]
    schema: SchemaConfig,
    #[command(flatten)]
    materialize: MaterializeConfig,
    #[command(flatten)]
    sync: SyncConfig,
    #[command(flatten)]
    gateway: snug_gateway::config::GatewayConfig,
}

/// The hub's data directory: the embedded sync store in `sync/`, the gateway's users and session
/// key in `gateway/`. A component that keeps no files ignores it.
#[derive(Debug, Clone, clap::Args)]
struct DataDir {
    /// The hub's data directory.
    #[arg(
        long = "data-dir",
        env = "SNUG_DATA_DIR",
        default_value = "./snug-data",
        global = true
    )]
    data_dir: std::path::PathBuf,
}

impl DataDir {
    /// The data directory itself.
    fn root(&self) -> std::path::PathBuf {
        self.data_dir.clone()
    }

    /// Where the embedded sync store keeps its files.
    fn sync(&self) -> std::path::PathBuf {
        self.data_dir.join("sync")
    }

    /// Where the gateway keeps its users file and session key.
    fn gateway(&self) -> std::path::PathBuf {
        self.data_dir.join("gateway")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ServiceName {
    /// snug.container.v1: the SNUGENC1 container capability.
    Container,
    /// snug.schema.v1: the user database at storage version 6 (migration, export, hub namespace).
    Schema,
    /// snug.materialize.v1: per-app native tables (materialize, persist, DDL, export, sandboxed SQL).
    Materialize,
    /// snug.sync.v1: the hub as a user's sync origin (revisions with compare-and-swap).
    Sync,
    /// The HTTP gateway (/userdb) alone, against the sync service at SNUG_SYNC_ADDR.
    Gateway,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.global.json;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("snug-hub: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            tracing::error!(error = ?err, "snug-hub failed");
            operator::Refusal::failed(&err).report("snug-hub", json)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let Global {
        data,
        sync_addr,
        service_token,
        json,
    } = cli.global;
    if json && matches!(cli.command, Command::Serve(_) | Command::Healthcheck(_)) {
        return Ok(operator::Refusal::usage(
            "--json: `serve` and `healthcheck` give no report (log lines are JSON with --log-format json)",
        )
        .report("snug-hub", json));
    }
    let service_token = match service_token.as_deref().map(str::parse::<ServiceToken>) {
        None => None,
        Some(Ok(token)) => Some(token),
        Some(Err(refused)) => {
            return Ok(operator::Refusal::usage(refused.to_string()).report("snug-hub", json));
        }
    };
    match cli.command {
        Command::Serve(mut args) => {
            // And the one address of the sync service, which only the gateway alone calls.
            args.gateway.sync_addr = sync_addr;
            // And the one service token: required by its servers, presented by its clients.
            args.server.service_token = service_token;
            // The process's runtime: the one upload budget its services share (they never call
            // each other; the gateway holds no upload: it streams each body to the service that
            // stores it), and the one sealer: where the gateway shares the process with the sync
            // store, the store seals the images it keeps and the gateway sends them from the
            // sealed memfds. Anywhere else sealing would only cost memory, so it stays off.
            let mut runtime = Runtime::for_server(&args.server, data.root());
            if args.service.is_none() {
                runtime.sealer = Sealer::new(args.gateway.zero_copy_cache_bytes());
            }
            let telemetry = snug_rpc::telemetry::init(&cli.telemetry, role_name(args.service))?;
            let served = async {
                // The gateway roles serve the admin API beside the metrics (they hold the users
                // directory); the others, the metrics only.
                if !matches!(args.service, None | Some(ServiceName::Gateway)) {
                    start_admin(args.server.admin_listen, None).await?;
                }
                serve_role(&args, &data, &runtime).await
            }
            .await;
            // Spans still buffered (the last requests before SIGTERM) are exported before exit.
            telemetry.shutdown().await;
            served
        }
        Command::Healthcheck(args) => {
            let _logs = logs_only(&cli.telemetry);
            healthcheck::run(args).await
        }
        Command::Sync {
            command: SyncCommand::Check { addr, sync },
        } => {
            let _logs = logs_only(&cli.telemetry);
            let args = check::CheckArgs {
                addr: addr.or(sync_addr),
                token: service_token,
                json,
            };
            check::run(args, &sync, &operator::sync_runtime(&data)).await
        }
        Command::Sync {
            command:
                SyncCommand::Usage {
                    args,
                    addr,
                    users,
                    sync,
                },
        } => {
            let _logs = logs_only(&cli.telemetry);
            let user = UserCommand {
                args,
                sync_addr: addr.or(sync_addr),
                service_token: service_token.clone(),
                users,
                sync,
                data,
                report: UserReport::Usage,
            };
            user.run(json).await
        }
        Command::Sync {
            command:
                SyncCommand::Erase {
                    args,
                    addr,
                    users,
                    sync,
                },
        } => {
            let _logs = logs_only(&cli.telemetry);
            let user = UserCommand {
                args,
                sync_addr: addr.or(sync_addr),
                service_token: service_token.clone(),
                users,
                sync,
                data,
                report: UserReport::Erasure,
            };
            user.run(json).await
        }
        Command::Users {
            users,
            sync,
            command,
        } => {
            let _logs = logs_only(&cli.telemetry);
            users::users(
                command,
                &users,
                &data.gateway(),
                sync_addr.as_deref(),
                service_token.as_ref(),
                (&sync, &operator::sync_runtime(&data)),
                json,
            )
            .await
        }
        Command::AdminToken => users::admin_token(json),
    }
}

/// `snug-hub sync usage` or `snug-hub sync erase`, parsed.
struct UserCommand {
    args: erase::UserArgs,
    sync_addr: Option<String>,
    service_token: Option<ServiceToken>,
    users: snug_gateway::config::UsersConfig,
    sync: SyncConfig,
    data: DataDir,
    report: UserReport,
}

/// What `UserCommand` reports: the usage, or what an erasure deleted.
#[derive(Debug, Clone, Copy)]
enum UserReport {
    Usage,
    Erasure,
}

impl UserCommand {
    /// Runs the command and prints its report, or its refusal.
    async fn run(self, json: bool) -> anyhow::Result<ExitCode> {
        let gateway_dir = self.data.gateway();
        let reach = erase::Reach {
            users: &self.users,
            gateway_dir: &gateway_dir,
            sync: operator::sync_client(
                self.sync_addr.as_deref(),
                self.service_token.as_ref(),
                (&self.sync, &operator::sync_runtime(&self.data)),
            )
            .await?,
        };
        let report = match self.report {
            UserReport::Usage => erase::usage(self.args, &reach).await,
            UserReport::Erasure => erase::erase(self.args, &reach).await,
        };
        Ok(match report {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(refusal) => refusal.report("snug-hub sync", json),
        })
    }
}

/// The default `service.name` of each role's spans.
fn role_name(service: Option<ServiceName>) -> &'static str {
    match service {
        None => "snug-hub",
        Some(ServiceName::Container) => "snug-hub-container",
        Some(ServiceName::Schema) => "snug-hub-schema",
        Some(ServiceName::Materialize) => "snug-hub-materialize",
        Some(ServiceName::Sync) => "snug-hub-sync",
        Some(ServiceName::Gateway) => "snug-hub-gateway",
    }
}

/// Log lines in the configured format, never a trace exporter: the short-lived commands have no
/// requests to trace, and a health probe every few seconds must stay cheap.
fn logs_only(config: &TelemetryConfig) -> Option<Telemetry> {
    snug_rpc::telemetry::init(&TelemetryConfig::logs_only(config.log_format), "snug-hub").ok()
}

/// Serves `GET /metrics` and the gRPC services of `grpc` (the admin API) on the admin address, if
/// one is configured, until SIGTERM.
pub(crate) async fn start_admin(
    addr: Option<std::net::SocketAddr>,
    grpc: Option<snug_rpc::server::LocalChannel>,
) -> anyhow::Result<()> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (SNUG_ADMIN_LISTEN)"))?;
    tokio::spawn(async move {
        if let Err(err) = snug_rpc::admin::serve(listener, grpc, shutdown_signal()).await {
            tracing::error!(error = %err, "the admin port failed");
        }
    });
    Ok(())
}

/// Runs what `snug-hub serve [SERVICE]` names until SIGTERM.
async fn serve_role(
    args: &ServeArgs,
    data: &DataDir,
    runtime: &Runtime,
) -> anyhow::Result<ExitCode> {
    let ServeArgs {
        service,
        server,
        container,
        schema,
        materialize,
        sync,
        gateway,
    } = args;
    let service = *service;
    if service == Some(ServiceName::Gateway) {
        gateway::serve_gateway(server, gateway, &data.gateway()).await?;
        return Ok(ExitCode::SUCCESS);
    }
    // Each component that keeps files keeps them in its own subdirectory: the composition root
    // owns the data directory's layout.
    let sync_runtime = runtime.in_dir(data.sync());
    let services = compose(
        service,
        (container, schema, materialize, sync),
        runtime,
        &sync_runtime,
    )
    .await?;
    if service.is_none() {
        gateway::serve_with_gateway(
            server,
            services,
            gateway,
            &data.gateway(),
            runtime.sealer.clone(),
        )
        .await?;
        return Ok(ExitCode::SUCCESS);
    }
    let listener = tokio::net::TcpListener::bind(server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", server.listen))?;
    serve(server, listener, services, shutdown_signal())
        .await
        .context("the gRPC server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// Chooses the services one process hosts; opens the sync store when sync is among them.
async fn compose(
    only: Option<ServiceName>,
    (container, schema, materialize, sync): (
        &ContainerConfig,
        &SchemaConfig,
        &MaterializeConfig,
        &SyncConfig,
    ),
    runtime: &Runtime,
    sync_runtime: &Runtime,
) -> anyhow::Result<Services> {
    Ok(match only {
        Some(ServiceName::Gateway) => {
            anyhow::bail!("the gateway is served over HTTP, not composed into gRPC")
        }
        Some(ServiceName::Container) => snug_container_service::services(container, runtime),
        Some(ServiceName::Schema) => snug_schema_service::services(schema, runtime),
        Some(ServiceName::Materialize) => snug_materialize_service::services(materialize, runtime),
        Some(ServiceName::Sync) => snug_sync_service::services(
            snug_sync_service::open_store(sync, sync_runtime).await?,
            sync,
            sync_runtime,
        ),
        None => {
            // One router for every service: tonic routes by the service name in the path, so the
            // services are added to the same `Routes` rather than merging two routers (each has
            // its own fallback, and axum refuses to merge two fallbacks).
            // With no configuration this is the embedded store under ./snug-data/sync.
            let store = snug_sync_service::open_store(sync, sync_runtime).await?;
            let sync_server = SyncServer::new(store, sync, sync_runtime);
            sync_server.spawn_reclaimer();
            snug_container_service::services(container, runtime)
                .with(
                    snug_schema_service::service(SchemaServer::new(schema, runtime)),
                    &[],
                )
                .with(
                    snug_materialize_service::service(MaterializeServer::new(materialize, runtime)),
                    &[],
                )
                .with(
                    snug_sync_service::service(sync_server),
                    &[snug_sync_service::observe::classify],
                )
        }
    })
}
