//! The gateway's settings (flags and `SNUG_*` environment variables) and the startup checks that
//! refuse an unsafe combination before a socket is opened.

use std::{fmt, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use snug_rpc::server::parse_duration;
use snug_users::{DirectoryConfig, PgConfig};

use crate::{
    rate::{self, Network, RateLimits},
    session::{KeyError, SessionKey},
};

/// The environment variable holding the session HMAC secret. Deliberately not a flag: flags are
/// visible to every local user in the process list.
pub const SESSION_SECRET_ENV: &str = "SNUG_SESSION_SECRET";

/// The environment variable holding the users directory's PostgreSQL connection string.
/// Deliberately not a flag, for the same reason.
pub const USERS_POSTGRES_URL_ENV: &str = "SNUG_USERS_POSTGRES_URL";

/// Where the users directory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UsersStore {
    /// `<data dir>/gateway/users.db`: one gateway.
    Sqlite,
    /// PostgreSQL at SNUG_USERS_POSTGRES_URL: any number of gateway replicas.
    Postgres,
}

/// A PostgreSQL connection string. It may hold a password, so it is never printed.
#[derive(Clone)]
pub struct PostgresUrl(pub String);

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PostgresUrl(<redacted>)")
    }
}

/// Where the users directory lives, from flags or the environment: the gateway's and
/// `snug-hub users`' (the same settings, so the command reaches the directory the gateway reads).
#[derive(Debug, Clone, clap::Args)]
// The ids are explicit: `snug-hub serve` and `snug-hub users` flatten this beside SyncConfig,
// whose `store`, `postgres_schema` and `postgres_pool_size` would otherwise collide.
pub struct UsersConfig {
    /// The users directory: `sqlite` (the file users.db in the gateway's data directory; one
    /// gateway) or `postgres` (shared by any number of gateway replicas; the connection string
    /// comes from SNUG_USERS_POSTGRES_URL).
    #[arg(id = "users_store", long = "users-store", env = "SNUG_USERS_STORE", value_enum, default_value_t = UsersStore::Sqlite)]
    pub store: UsersStore,
    /// The PostgreSQL connection string, from SNUG_USERS_POSTGRES_URL only (never a flag, never
    /// printed); TLS as the sync store's (libpq's sslmode and sslrootcert).
    #[arg(skip = std::env::var(USERS_POSTGRES_URL_ENV).ok().filter(|s| !s.is_empty()).map(PostgresUrl))]
    pub postgres_url: Option<PostgresUrl>,
    /// PostgreSQL schema holding the directory's tables (created if missing); default: the
    /// server's search path.
    #[arg(
        id = "users_postgres_schema",
        long = "users-postgres-schema",
        env = "SNUG_USERS_POSTGRES_SCHEMA"
    )]
    pub postgres_schema: Option<String>,
    /// Pooled PostgreSQL connections to the users directory per gateway.
    #[arg(
        id = "users_postgres_pool_size",
        long = "users-postgres-pool-size",
        env = "SNUG_USERS_POSTGRES_POOL_SIZE",
        default_value_t = 8
    )]
    pub postgres_pool_size: usize,
}

impl Default for UsersConfig {
    fn default() -> Self {
        Self {
            store: UsersStore::Sqlite,
            postgres_url: None,
            postgres_schema: None,
            postgres_pool_size: 8,
        }
    }
}

impl UsersConfig {
    /// The directory these settings name; `gateway_dir` holds the SQLite file.
    pub fn directory(&self, gateway_dir: &std::path::Path) -> Result<DirectoryConfig, ConfigError> {
        Ok(match self.store {
            UsersStore::Sqlite => DirectoryConfig::Sqlite {
                dir: gateway_dir.to_path_buf(),
            },
            UsersStore::Postgres => {
                let url = self
                    .postgres_url
                    .clone()
                    .ok_or(ConfigError::MissingUsersPostgresUrl)?;
                if let Some(schema) = &self.postgres_schema
                    && !snug_users::valid_schema(schema)
                {
                    return Err(ConfigError::BadUsersSchema(schema.clone()));
                }
                DirectoryConfig::Postgres(PgConfig {
                    url: url.0,
                    schema: self.postgres_schema.clone(),
                    pool_size: self.postgres_pool_size.max(2),
                })
            }
        })
    }
}

/// Whether requests must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// Bearer tokens or cookie sessions; users come from `snug-hub users`.
    On,
    /// Every request is the single local user `local`. Loopback only.
    Off,
}

/// Settings of the gateway, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayConfig {
    /// Address the HTTP server listens on.
    #[arg(
        long = "http-listen",
        env = "SNUG_HTTP_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub http_listen: SocketAddr,
    /// `on` (tokens and sessions) or `off` (everyone is the local user; loopback only). Default:
    /// off on a loopback address, on otherwise.
    #[arg(long = "auth", env = "SNUG_AUTH", value_enum)]
    pub auth: Option<AuthMode>,
    /// Browser origins allowed to call the hub with credentials, comma-separated
    /// (`https://app.example,http://localhost:5173`). Required when auth is on.
    #[arg(
        long = "cors-origins",
        env = "SNUG_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// No longer used: the gateway does not call the schema service (the sync service validates
    /// every image it stores). Accepted, with a warning, so existing deployments still start.
    #[arg(long = "schema-addr", env = "SNUG_SCHEMA_ADDR", hide = true)]
    pub schema_addr: Option<String>,
    /// The sync service (`http://host:port`); `snug-hub serve` fills in its own. Not a flag of
    /// its own: `snug-hub`'s global `--sync-addr` (`SNUG_SYNC_ADDR`), which the operator commands
    /// read too, is copied here, so the address has one name however it is used.
    #[arg(skip)]
    pub sync_addr: Option<String>,
    /// The materialization service, for per-app export once it exists.
    #[arg(long = "materialize-addr", env = "SNUG_MATERIALIZE_ADDR")]
    pub materialize_addr: Option<String>,
    /// Deadline of every gRPC call the gateway makes (for a download: until its first bytes,
    /// then between chunks). A service slower than this is answered with 503.
    #[arg(long = "rpc-deadline", env = "SNUG_RPC_DEADLINE", default_value = "30s", value_parser = parse_duration)]
    pub rpc_deadline: Duration,
    /// How long to wait for a TCP connection to a service.
    #[arg(long = "rpc-connect-timeout", env = "SNUG_RPC_CONNECT_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub rpc_connect_timeout: Duration,
    /// HTTP requests handled at once; beyond it requests are shed with 503 at once.
    #[arg(
        long = "http-concurrency-limit",
        env = "SNUG_HTTP_CONCURRENCY_LIMIT",
        default_value_t = 256
    )]
    pub http_concurrency_limit: usize,
    /// How long one event stream (`GET /userdb/events`) lasts before the hub ends it and the
    /// client reconnects with `Last-Event-ID`, missing nothing: the bound within which a revoked
    /// token, a disabled user or a removed one loses its streams, and within which streams
    /// spread over new replicas.
    #[arg(long = "events-stream-lifetime", env = "SNUG_EVENTS_STREAM_LIFETIME", default_value = "5m", value_parser = parse_duration)]
    pub events_stream_lifetime: Duration,
    /// Event streams this gateway keeps open at most; one more is refused with 503
    /// `OVERLOADED`.
    #[arg(
        long = "events-max-streams",
        env = "SNUG_EVENTS_MAX_STREAMS",
        default_value_t = 10_000
    )]
    pub events_max_streams: usize,
    /// Event streams one user keeps open at most (their devices and tabs); one more is
    /// refused with 429 `RATE_LIMITED`.
    #[arg(
        long = "events-max-streams-per-user",
        env = "SNUG_EVENTS_MAX_STREAMS_PER_USER",
        default_value_t = 32
    )]
    pub events_max_streams_per_user: usize,
    /// Event streams one client address keeps open at most (a trusted proxy's clients counted
    /// by `X-Forwarded-For`); one more is refused with 429 `RATE_LIMITED`.
    #[arg(
        long = "events-max-streams-per-address",
        env = "SNUG_EVENTS_MAX_STREAMS_PER_ADDRESS",
        default_value_t = 128
    )]
    pub events_max_streams_per_address: usize,
    /// An upload that sends nothing for this long is abandoned (slow-loris guard).
    #[arg(long = "upload-idle-timeout", env = "SNUG_UPLOAD_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub upload_idle_timeout: Duration,
    /// MiB of large images (over 256 KiB) a store in this process may keep in memory to send
    /// them without copying, as `snug-hub serve` runs; each kept image costs twice its size (a
    /// heap copy and a sealed memfd). 0 keeps none. Small images are kept regardless.
    #[arg(
        long = "zero-copy-cache-mib",
        env = "SNUG_ZERO_COPY_CACHE_MIB",
        default_value_t = 128
    )]
    pub zero_copy_cache_mib: usize,
    /// Requests a client address (and, separately, an authenticated user) may make in a burst;
    /// the bucket refills at SNUG_RATE_LIMIT_PER_SECOND. Default: 60 with auth on, off with auth
    /// off. 0 turns rate limits off.
    #[arg(long = "rate-limit-burst", env = "SNUG_RATE_LIMIT_BURST")]
    pub rate_limit_burst: Option<u32>,
    /// Requests a second a client address (and an authenticated user) may make, sustained.
    /// Default: 1 with auth on, off with auth off. 0 turns rate limits off.
    #[arg(long = "rate-limit-per-second", env = "SNUG_RATE_LIMIT_PER_SECOND")]
    pub rate_limit_per_second: Option<f64>,
    /// Proxies (addresses or networks, comma-separated: `10.0.0.0/8,fd00::/8`) whose
    /// `X-Forwarded-For` names the client a request is rate-limited as; from anyone else the
    /// header is ignored. Default: none.
    #[arg(
        long = "trusted-proxies",
        env = "SNUG_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<String>,
    /// A connection whose request headers have not all arrived this long after it was accepted
    /// (whether or not it sent a byte, HTTP/1 or HTTP/2), or after it started waiting for the
    /// next request's, is closed.
    #[arg(long = "http-header-timeout", env = "SNUG_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_header_timeout: Duration,
    /// A connection that served a request and starts no other this long after its last one
    /// ended is closed (HTTP/2: with GOAWAY; its peer is also pinged at half this interval).
    #[arg(long = "http-idle-timeout", env = "SNUG_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub http_idle_timeout: Duration,
    /// Open HTTP connections at most. At the cap a silent connection (no request in flight,
    /// never-started ones first) is closed to admit a new one; only when every one has a request
    /// in flight do new connections wait in the listen backlog.
    #[arg(
        long = "http-max-connections",
        env = "SNUG_HTTP_MAX_CONNECTIONS",
        default_value_t = 4096
    )]
    pub http_max_connections: usize,
    /// Open HTTP connections from one client address at most (a trusted proxy's are not
    /// counted); one more is closed at once.
    #[arg(
        long = "http-max-connections-per-address",
        env = "SNUG_HTTP_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 256
    )]
    pub http_max_connections_per_address: usize,
    /// OpenID Connect: issuers, audience, claims, browser login (`oidc.rs`).
    #[command(flatten)]
    pub oidc: OidcArgs,
    /// `SNUG_SESSION_SECRET`, from the environment only.
    #[arg(skip = std::env::var(SESSION_SECRET_ENV).ok().filter(|s| !s.is_empty()))]
    pub session_secret: Option<String>,
    /// Where the users directory lives.
    #[command(flatten)]
    pub users: UsersConfig,
}

impl GatewayConfig {
    /// Defaults for tests and embedding: loopback on an ephemeral port, auth off.
    pub fn for_tests() -> Self {
        Self {
            http_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            auth: None,
            cors_origins: Vec::new(),
            schema_addr: None,
            sync_addr: None,
            materialize_addr: None,
            rpc_deadline: Duration::from_secs(30),
            rpc_connect_timeout: Duration::from_secs(2),
            http_concurrency_limit: 256,
            events_stream_lifetime: Duration::from_secs(300),
            events_max_streams: 10_000,
            events_max_streams_per_user: 32,
            events_max_streams_per_address: 128,
            upload_idle_timeout: Duration::from_secs(30),
            zero_copy_cache_mib: 128,
            rate_limit_burst: None,
            rate_limit_per_second: None,
            trusted_proxies: Vec::new(),
            http_header_timeout: Duration::from_secs(10),
            http_idle_timeout: Duration::from_secs(60),
            http_max_connections: 4096,
            http_max_connections_per_address: 256,
            oidc: OidcArgs::default(),
            session_secret: None,
            users: UsersConfig::default(),
        }
    }

    /// Bytes of large images a store in this process may keep sealed for zero-copy downloads: the
    /// budget of the sealer the composition root builds for the store and the gateway.
    pub fn zero_copy_cache_bytes(&self) -> usize {
        self.zero_copy_cache_mib.saturating_mul(1 << 20)
    }

    /// The auth mode in force: explicit, or off exactly when listening on loopback.
    pub fn auth_mode(&self) -> AuthMode {
        self.auth.unwrap_or(if self.http_listen.ip().is_loopback() {
            AuthMode::Off
        } else {
            AuthMode::On
        })
    }
}

/// Why the gateway refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Auth on and no origin list: browsers could not use the hub, and a wildcard would be unsafe.
    #[error(
        "authentication is on but SNUG_CORS_ORIGINS is empty; list the browser origins allowed to call the hub (or set SNUG_AUTH=off on a loopback address)"
    )]
    NoOrigins,
    /// An origin that is not `scheme://host[:port]`.
    #[error(
        "{0:?} is not an origin like https://app.example or http://localhost:5173 (no path, no wildcard)"
    )]
    BadOrigin(String),
    /// Auth off on an address other machines can reach.
    #[error(
        "SNUG_AUTH=off is only allowed on a loopback address, not {0}: anyone who can reach it would own every image"
    )]
    UnauthenticatedExposure(SocketAddr),
    /// A service address is missing.
    #[error("the gateway needs {0} (flag or environment variable)")]
    MissingAddress(&'static str),
    /// A service address is not a URL.
    #[error("{0:?} is not a service address like http://127.0.0.1:50051")]
    BadAddress(String),
    /// A trusted proxy that is not an address or network.
    #[error("SNUG_TRUSTED_PROXIES: {0}")]
    BadProxy(String),
    /// A rate that is not a finite, non-negative number.
    #[error("SNUG_RATE_LIMIT_PER_SECOND must be a finite number ≥ 0, not {0}")]
    BadRate(f64),
    /// The session key could not be had.
    #[error(transparent)]
    SessionKey(#[from] KeyError),
    /// `SNUG_USERS_STORE=postgres` without its connection string.
    #[error(
        "SNUG_USERS_STORE=postgres needs SNUG_USERS_POSTGRES_URL (a postgresql:// URL or key=value string)"
    )]
    MissingUsersPostgresUrl,
    /// A users schema name that is not a plain identifier.
    #[error(
        "SNUG_USERS_POSTGRES_SCHEMA {0:?} is not a schema name (lowercase letters, digits and _, at most 63)"
    )]
    BadUsersSchema(String),
    /// A shared users directory with a session key each replica would make up for itself: a
    /// session started on one replica would be refused by the others.
    #[error(
        "SNUG_USERS_STORE=postgres (gateway replicas sharing one users directory) needs SNUG_SESSION_SECRET, the one session key every replica signs and checks sessions with; a key generated per replica would refuse sessions started on another"
    )]
    SharedUsersNeedSessionSecret,
}

/// Checks an origin list entry: `http` or `https`, a host, an optional port, nothing else.
pub fn parse_origin(text: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadOrigin(text.to_owned());
    let trimmed = text.trim().trim_end_matches('/');
    let (scheme, rest) = trimmed.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() {
        return Err(bad());
    }
    let valid = rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !valid || rest.contains('*') {
        return Err(bad());
    }
    // Browsers send the origin in lowercase.
    Ok(format!("{scheme}://{}", rest.to_ascii_lowercase()))
}

/// The checked configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Whether requests authenticate.
    pub auth: AuthMode,
    /// Allowed browser origins, normalised.
    pub cors_origins: Vec<String>,
    /// The session key (auth on only).
    pub session_key: Option<SessionKey>,
    /// Where the users file and the generated session key live.
    pub dir: PathBuf,
    /// Per-call deadline.
    pub rpc_deadline: Duration,
    /// TCP connect timeout to services.
    pub rpc_connect_timeout: Duration,
    /// HTTP requests in flight.
    pub http_concurrency_limit: usize,
    /// How long one event stream lasts.
    pub events_stream_lifetime: Duration,
    /// The caps on open event streams.
    pub events: Caps,
    /// Request body idle timeout.
    pub upload_idle_timeout: Duration,
    /// Rate limits per client address and per principal; `None` when off.
    pub rate_limits: Option<Arc<RateLimits>>,
    /// What every HTTP connection is held to.
    pub connections: crate::connections::Limits,
    /// The users directory (auth on only).
    pub users: Option<DirectoryConfig>,
}

impl Settings {
    /// Checks `config`; `dir` is the gateway's directory (`<data dir>/gateway`).
    pub fn resolve(config: &GatewayConfig, dir: PathBuf) -> Result<Self, ConfigError> {
        let auth = config.auth_mode();
        let cors_origins = config
            .cors_origins
            .iter()
            .filter(|o| !o.trim().is_empty())
            .map(|o| parse_origin(o))
            .collect::<Result<Vec<_>, _>>()?;
        let (session_key, users) = match auth {
            AuthMode::Off => {
                if !config.http_listen.ip().is_loopback() {
                    return Err(ConfigError::UnauthenticatedExposure(config.http_listen));
                }
                (None, None)
            }
            AuthMode::On => {
                if cors_origins.is_empty() {
                    return Err(ConfigError::NoOrigins);
                }
                let users = config.users.directory(&dir)?;
                let key = match (&config.session_secret, &users) {
                    (Some(secret), _) => SessionKey::from_secret(secret)?,
                    (None, DirectoryConfig::Postgres(_)) => {
                        return Err(ConfigError::SharedUsersNeedSessionSecret);
                    }
                    (None, DirectoryConfig::Sqlite { .. }) => SessionKey::load_or_create(&dir)?,
                };
                (Some(key), Some(users))
            }
        };
        let trusted = config
            .trusted_proxies
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| Network::parse(p).map_err(ConfigError::BadProxy))
            .collect::<Result<Vec<_>, _>>()?;
        let rate_limits = rate_limits(config, auth, trusted.clone())?;
        Ok(Self {
            rate_limits,
            connections: crate::connections::Limits {
                max: config.http_max_connections.max(1),
                per_address: config.http_max_connections_per_address.max(1),
                header_timeout: config.http_header_timeout,
                idle_timeout: config.http_idle_timeout,
                trusted,
            },
            users,
            auth,
            cors_origins,
            session_key,
            dir,
            rpc_deadline: config.rpc_deadline,
            rpc_connect_timeout: config.rpc_connect_timeout,
            http_concurrency_limit: config.http_concurrency_limit.max(1),
            events_stream_lifetime: config.events_stream_lifetime.max(Duration::from_secs(1)),
            events: Caps {
                max: config.events_max_streams.max(1),
                per_user: config.events_max_streams_per_user.max(1),
                per_address: config.events_max_streams_per_address.max(1),
            },
            upload_idle_timeout: config.upload_idle_timeout,
        })
    }
}

/// The rate limits in force: on by default with auth on (the reference's 60 refilling one a
/// second), off by default with auth off, off whenever either setting is 0.
fn rate_limits(
    config: &GatewayConfig,
    auth: AuthMode,
    trusted: Vec<Network>,
) -> Result<Option<Arc<RateLimits>>, ConfigError> {
    // With auth off they are on only when asked for; the setting not given is then the default.
    let asked = config.rate_limit_burst.is_some() || config.rate_limit_per_second.is_some();
    let (burst, per_second) = match (auth, asked) {
        (AuthMode::On, _) | (AuthMode::Off, true) => {
            (rate::DEFAULT_BURST, rate::DEFAULT_PER_SECOND)
        }
        (AuthMode::Off, false) => (0, 0.0),
    };
    let burst = config.rate_limit_burst.unwrap_or(burst);
    let per_second = config.rate_limit_per_second.unwrap_or(per_second);
    if !per_second.is_finite() || per_second < 0.0 {
        return Err(ConfigError::BadRate(per_second));
    }
    Ok(RateLimits::new(burst, per_second, trusted).map(Arc::new))
}

/// The most event streams open at once: in all, per user, per client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// In all (503 `OVERLOADED` beyond).
    pub max: usize,
    /// Per user (429 `RATE_LIMITED` beyond).
    pub per_user: usize,
    /// Per client address (429 `RATE_LIMITED` beyond).
    pub per_address: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str, auth: Option<AuthMode>, origins: &[&str]) -> GatewayConfig {
        GatewayConfig {
            http_listen: listen.parse().expect("addr"),
            auth,
            cors_origins: origins.iter().map(|s| (*s).to_owned()).collect(),
            session_secret: Some("x".repeat(32)),
            ..GatewayConfig::for_tests()
        }
    }

    fn resolve(c: &GatewayConfig) -> Result<Settings, ConfigError> {
        Settings::resolve(c, std::env::temp_dir())
    }

    #[test]
    fn auth_defaults_off_on_loopback_and_on_elsewhere() {
        assert_eq!(
            config("127.0.0.1:8080", None, &[]).auth_mode(),
            AuthMode::Off
        );
        assert_eq!(config("[::1]:8080", None, &[]).auth_mode(), AuthMode::Off);
        assert_eq!(config("0.0.0.0:8080", None, &[]).auth_mode(), AuthMode::On);
    }

    #[test]
    fn unsafe_combinations_refuse_to_start() {
        assert!(matches!(
            resolve(&config("0.0.0.0:8080", None, &[])),
            Err(ConfigError::NoOrigins)
        ));
        assert!(matches!(
            resolve(&config("127.0.0.1:8080", Some(AuthMode::On), &[])),
            Err(ConfigError::NoOrigins)
        ));
        assert!(matches!(
            resolve(&config("0.0.0.0:8080", Some(AuthMode::Off), &[])),
            Err(ConfigError::UnauthenticatedExposure(_))
        ));
        assert!(matches!(
            resolve(&config("0.0.0.0:8080", None, &["*"])),
            Err(ConfigError::BadOrigin(_))
        ));
        let mut short = config("0.0.0.0:8080", None, &["https://a.example"]);
        short.session_secret = Some("too short".to_owned());
        assert!(matches!(
            resolve(&short),
            Err(ConfigError::SessionKey(KeyError::TooShort))
        ));
        let ok = resolve(&config(
            "0.0.0.0:8080",
            None,
            &["https://A.example/", " http://localhost:5173"],
        ))
        .expect("ok");
        assert_eq!(
            ok.cors_origins,
            ["https://a.example", "http://localhost:5173"]
        );
    }

    #[test]
    fn a_shared_users_directory_needs_its_url_and_the_session_secret() {
        let shared =
            |secret: Option<&str>, url: Option<&str>, schema: Option<&str>| GatewayConfig {
                session_secret: secret.map(str::to_owned),
                users: UsersConfig {
                    store: UsersStore::Postgres,
                    postgres_url: url.map(|u| PostgresUrl(u.to_owned())),
                    postgres_schema: schema.map(str::to_owned),
                    postgres_pool_size: 4,
                },
                ..config("0.0.0.0:8080", None, &["https://a.example"])
            };
        let url = Some("postgresql://hub@db/hub");
        assert!(matches!(
            resolve(&shared(None, url, None)),
            Err(ConfigError::SharedUsersNeedSessionSecret)
        ));
        assert!(matches!(
            resolve(&shared(Some(&"s".repeat(32)), None, None)),
            Err(ConfigError::MissingUsersPostgresUrl)
        ));
        assert!(matches!(
            resolve(&shared(Some(&"s".repeat(32)), url, Some("Bad;name"))),
            Err(ConfigError::BadUsersSchema(_))
        ));
        let ok = resolve(&shared(Some(&"s".repeat(32)), url, Some("hub_users"))).expect("ok");
        match ok.users {
            Some(DirectoryConfig::Postgres(pg)) => {
                assert_eq!(pg.schema.as_deref(), Some("hub_users"));
                assert!(
                    !format!("{pg:?}").contains("hub@db"),
                    "the URL is never printed"
                );
            }
            other => panic!("{other:?}"),
        }
        // With auth off no directory is opened, whatever the store.
        let off = GatewayConfig {
            users: UsersConfig {
                store: UsersStore::Postgres,
                ..UsersConfig::default()
            },
            ..config("127.0.0.1:8080", None, &[])
        };
        assert!(resolve(&off).expect("ok").users.is_none());
    }

    #[test]
    fn rate_limits_are_on_with_auth_and_off_without_unless_set() {
        let on = config("0.0.0.0:8080", None, &["https://a.example"]);
        assert!(resolve(&on).expect("ok").rate_limits.is_some());
        let off = config("127.0.0.1:8080", None, &[]);
        assert!(resolve(&off).expect("ok").rate_limits.is_none());
        let chosen = GatewayConfig {
            rate_limit_burst: Some(5),
            ..config("127.0.0.1:8080", None, &[])
        };
        assert!(resolve(&chosen).expect("ok").rate_limits.is_some());
        let zero = GatewayConfig {
            rate_limit_per_second: Some(0.0),
            ..on.clone()
        };
        assert!(resolve(&zero).expect("ok").rate_limits.is_none());
        let negative = GatewayConfig {
            rate_limit_per_second: Some(-1.0),
            ..on.clone()
        };
        assert!(matches!(resolve(&negative), Err(ConfigError::BadRate(_))));
        let proxies = GatewayConfig {
            trusted_proxies: vec!["10.0.0.0/8".into(), "not-an-address".into()],
            ..on
        };
        assert!(matches!(resolve(&proxies), Err(ConfigError::BadProxy(_))));
    }

    #[test]
    fn origins_are_scheme_host_port_only() {
        for bad in [
            "a.example",
            "ftp://a.example",
            "https://a.example/path",
            "https://*.example",
            "https://",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_origin("http://[::1]:8080").expect("ok"),
            "http://[::1]:8080"
        );
    }
}

/// The environment variable holding the OAuth client secret of the browser login (never a flag).
pub const CLIENT_SECRET_ENV: &str = "SNUG_OIDC_CLIENT_SECRET";

/// The OpenID Connect settings, from flags or the environment.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OidcArgs {
    /// Issuer URLs whose tokens the hub accepts, comma-separated, each exactly as its tokens'
    /// `iss` says (https, or http on a loopback address). Empty: OpenID Connect is off.
    #[arg(long = "oidc-issuer", env = "SNUG_OIDC_ISSUER", value_delimiter = ',')]
    pub issuers: Vec<String>,
    /// The audience tokens must carry in `aud` (required with an issuer).
    #[arg(long = "oidc-audience", env = "SNUG_OIDC_AUDIENCE")]
    pub audience: Option<String>,
    /// The claim naming the user (default `sub`); with the issuer, the stored identity.
    #[arg(long = "oidc-user-claim", env = "SNUG_OIDC_USER_CLAIM")]
    pub user_claim: Option<String>,
    /// `name=value`: only tokens whose claim `name` is `value` (or, for an array claim such as
    /// `groups`, contains it) may use the hub.
    #[arg(long = "oidc-required-claim", env = "SNUG_OIDC_REQUIRED_CLAIM")]
    pub required_claim: Option<String>,
    /// The OAuth client id of the browser login (default: the audience).
    #[arg(long = "oidc-client-id", env = "SNUG_OIDC_CLIENT_ID")]
    pub client_id: Option<String>,
    /// The hub's external base URL (`https://hub.example`): the browser login's redirect URI is
    /// this plus `/auth/callback`. Without it there is no browser login.
    #[arg(long = "public-url", env = "SNUG_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The window of one issuer's key fetches: at most three per window (`oidc::REFETCH_BURST`),
    /// so a flood of unknown `kid`s costs the issuer at most three requests per interval.
    #[arg(long = "oidc-jwks-min-interval", env = "SNUG_OIDC_JWKS_MIN_INTERVAL", value_parser = snug_rpc::server::parse_duration)]
    pub jwks_min_interval: Option<Duration>,
    /// Longest a session made from an issuer's token (the browser login, or `POST /auth/session`
    /// with a JWT) is admitted after that token was presented (default 12h, never over the
    /// seven days of any session); then the browser logs in again, and the issuer's claims,
    /// the required one included, are checked again.
    #[arg(long = "oidc-session-max-age", env = "SNUG_OIDC_SESSION_MAX_AGE", value_parser = snug_rpc::server::parse_duration)]
    pub session_max_age: Option<Duration>,
    /// `SNUG_OIDC_CLIENT_SECRET`, from the environment only (a confidential client); without it
    /// the browser login is a public client with PKCE.
    #[arg(skip = std::env::var(CLIENT_SECRET_ENV).ok().filter(|s| !s.is_empty()))]
    pub client_secret: Option<String>,
}
