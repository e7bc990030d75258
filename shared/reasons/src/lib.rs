//! The one vocabulary of Snug Hub's error reasons.
//!
//! Every machine-readable reason the hub gives — a service's `google.rpc.ErrorInfo` reason, the
//! gateway's own, the CLI's JSON `code` — is one [`Reason`] constant here, with everything each
//! surface says about it beside it: the gRPC code a service's status carries, the HTTP answer the
//! gateway gives (status, JSON `code`, `retryable`), and the `snug` CLI's exit code. The services'
//! status mappings (`snug_rpc::status`), the gateway's table and the CLI's exit codes read these
//! constants; the protos' reason tables and the OpenAPI document's codes are checked against them
//! by this crate's tests.
//!
//! A reason's name is unique across the whole hub (a test checks it): one word, one meaning, and
//! one definition even when several services send it. `LOCKED` is defined once, in
//! [`container`], and [`schema`] lists it too, because its CheckImport meets the same cause. Each
//! [`Domain`] lists the reasons one `ErrorInfo` domain can carry, shared ones included, so lookups
//! by name alone ([`find`], the gateway's table) are unambiguous.
//!
//! What this crate deliberately does not do: build statuses or responses (that is `snug-rpc`'s
//! and the gateway's work; this crate has no dependencies, so domain crates may read it), or hold
//! metadata keys and messages, which stay with the code that fills them in. The hub's own refusals
//! that reach an operator rather than a caller (its store's migrations, reclamation and lock, its
//! telemetry settings) are [`hub`]'s.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
pub mod cli;
mod code;
pub mod container;
pub mod gateway;
pub mod hub;
pub mod materialize;
pub mod restore;
pub mod rpc;
pub mod schema;
pub mod sync;

#[cfg(test)]
mod tests;

pub use code::GrpcCode;

/// A domain error as every surface reports it: under one reason of this registry, with the facts
/// a caller can act on.
///
/// The reason is the domain's one choice, so a service's status, the gateway's answer and the
/// CLI's exit are derived from it rather than chosen again per surface: a service sends a reason
/// that has a gRPC code as it is and reports any other one (the CLI's `IO`, `STORAGE`: a failure
/// of the host, not of the request) as INTERNAL, logging the cause (`snug_rpc::status::Mapped::
/// refused`).
pub trait Reasoned: std::error::Error {
    /// The reason this error is reported under.
    fn reason(&self) -> &'static Reason;

    /// `ErrorInfo.metadata`: the facts beside the message (an object's name, a limit), in
    /// lowerCamel keys.
    fn metadata(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The message for a remote caller; the error's `Display` unless it is worded for one.
    fn message(&self) -> String {
        self.to_string()
    }
}

/// One error reason and what every surface says about it.
#[derive(Debug, PartialEq, Eq)]
pub struct Reason {
    /// `UPPER_SNAKE`, at most 63 characters; the `ErrorInfo.reason` and, for the CLI, the JSON
    /// error `code`.
    pub name: &'static str,
    /// The gRPC code of a status carrying this reason; `None` for a reason no service sends (the
    /// gateway's and the CLI's own).
    pub grpc: Option<GrpcCode>,
    /// The gateway's answer; `None` where the gateway has no row of its own, and a status with
    /// this reason is answered by its gRPC code (google.rpc.Code's HTTP mapping).
    pub http: Option<Http>,
    /// The `snug` CLI's exit code where the CLI finds the cause itself.
    pub exit: CliExit,
    /// One line: what the reason means, for people.
    pub summary: &'static str,
}

/// A reason reads as its name, in messages, logs and the tables tests print.
impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A reason equals its name: a status, a ledger row or a JSON body carries the name alone, and
/// what a caller reads there is checked against the reason it should be.
impl PartialEq<str> for Reason {
    fn eq(&self, name: &str) -> bool {
        self.name == name
    }
}

impl PartialEq<&Reason> for String {
    fn eq(&self, reason: &&Reason) -> bool {
        self == reason.name
    }
}

impl PartialEq<Reason> for str {
    fn eq(&self, reason: &Reason) -> bool {
        self == reason.name
    }
}

/// The gateway's HTTP answer to a reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http {
    /// The HTTP status code.
    pub status: u16,
    /// The JSON `code`. Mostly the reason's name; the reference server's word where the
    /// reference already named the same condition (`USERDB_TOO_LARGE`, `NOT_FOUND`).
    pub code: &'static str,
    /// Whether the same request may succeed later unchanged (412 is, after a pull).
    pub retryable: bool,
}

/// The exit codes of the `snug` CLI, shared by every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Anything not covered below (I/O failures, refusals to overwrite).
    Other = 1,
    /// The command line was wrong.
    Usage = 2,
    /// A protected file that no supplied secret opened. The file is healthy.
    Locked = 3,
    /// The input is damaged or not the kind of file the command works on.
    Corrupt = 4,
    /// The input is newer than this build understands.
    Unsupported = 5,
    /// `snug sync`: the origin and the local file both changed since the last sync (or another
    /// device won a race). Nothing was overwritten; pull, or repeat with `--force`.
    Diverged = 6,
    /// `snug sync`: another `snug sync` is working on the same file right now, or another
    /// program has it open in WAL mode with changes not yet in it. Nothing was done; run it
    /// again once that one has finished.
    Busy = 7,
    /// An OUT to be replaced is a protected (SNUGENC1) file and `--replace-protected` was not
    /// given (§11.2 rule 7). Nothing was written.
    ProtectedOutput = 8,
    /// `snug sync`: the origin could not be asked or did not answer usably (nothing listens,
    /// a broken or garbled answer, rate limited, overloaded or down). Nothing was decided and
    /// nothing changed; the same command may succeed later.
    Unavailable = 10,
    /// `snug sync`: the origin refused the credentials (or wants some and none were given).
    /// Nothing changed.
    Unauthorized = 11,
}

/// Which exit code the CLI gives a reason.
///
/// `snug sync` passes a hub's refusal on under the hub's word with that word's exit (the hub
/// refused the bytes of the local file: `HOSTILE_SCHEMA` exits 4 from a hub as from `snug check`),
/// and with 1 where the word has none here (`Never`: `SERVICE_UNAVAILABLE`, `OVERLOADED`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliExit {
    /// The CLI never reports this reason.
    Never,
    /// Always this exit code.
    Always(Exit),
    /// The cause decides, not the word: SQL the user typed that the sandbox refuses is a usage
    /// error (2), the same refusal of a stored schema or a runtime file is a damaged input (4).
    ByCause(&'static [Exit]),
}

impl CliExit {
    /// Returns whether the CLI may give this reason the exit code `exit`.
    pub fn allows(self, exit: Exit) -> bool {
        match self {
            CliExit::Never => false,
            CliExit::Always(only) => only == exit,
            CliExit::ByCause(exits) => exits.contains(&exit),
        }
    }
}

/// An `ErrorInfo` domain and every reason a status in it can carry.
#[derive(Debug)]
pub struct Domain {
    /// The unversioned proto package, e.g. `snug.sync`; `snug.gateway` and `snug.cli` for the
    /// reasons only the gateway or the CLI gives.
    pub name: &'static str,
    /// The reasons, in the order of the domain's documented table.
    pub reasons: &'static [&'static Reason],
}

impl Domain {
    /// Returns the reason of this domain named `name`.
    pub fn find(&self, name: &str) -> Option<&'static Reason> {
        self.reasons.iter().copied().find(|r| r.name == name)
    }
}

/// Every domain.
pub const DOMAINS: &[&Domain] = &[
    &container::DOMAIN,
    &schema::DOMAIN,
    &materialize::DOMAIN,
    &sync::DOMAIN,
    &admin::DOMAIN,
    &gateway::DOMAIN,
    &cli::DOMAIN,
    &restore::DOMAIN,
    &hub::DOMAIN,
];

/// Every reason, each once.
pub const ALL: &[&Reason] = &[
    // Shared by every service.
    &rpc::INVALID_ARGUMENT,
    &rpc::TOO_LARGE,
    &rpc::OVERLOADED,
    &rpc::BODY_ABORTED,
    &rpc::UPLOAD_TOO_SLOW,
    &rpc::SERVICE_TOKEN_REFUSED,
    &rpc::DEADLINE_EXCEEDED,
    &rpc::INTERNAL,
    // snug.container.
    &container::LOCKED,
    &container::CORRUPT,
    &container::UNSUPPORTED_FORMAT_VERSION,
    &container::ITERATIONS_OUT_OF_POLICY,
    &container::NOT_A_CONTAINER,
    &container::ALREADY_PROTECTED,
    &container::NOT_A_USER_DATABASE,
    &container::NO_PASSPHRASE_SLOT,
    &container::NO_RECOVERY_SLOT,
    &container::CUSTODY_NOT_ACKNOWLEDGED,
    &container::WEAK_RECOVERY_KEY,
    // snug.schema.
    &schema::NOT_SQLITE,
    &schema::MALFORMED,
    &schema::HOSTILE_SCHEMA,
    &schema::SCHEMA_TOO_NEW,
    &schema::PROTECTED,
    &schema::CORRUPT_CONTAINER,
    &schema::CONTAINER_NOT_ACCEPTED,
    &schema::SECRETS_PRESENT,
    &schema::APP_NOT_FOUND,
    &schema::VERSION_NOT_FOUND,
    &schema::DOC_NOT_FOUND,
    &schema::THREAD_NOT_FOUND,
    &schema::MESSAGE_NOT_FOUND,
    &schema::APP_EXISTS,
    &schema::APP_TOKEN_COLLISION,
    &schema::VERSION_PINNED,
    &schema::VERSION_CURRENT,
    &schema::NO_FACTORY_VERSION,
    &schema::INVALID_CONTRACT,
    &schema::CORRUPT_ROW,
    // snug.materialize.
    &materialize::INVALID_NAME,
    &materialize::VIRTUAL_TABLE,
    &materialize::INVALID_KV_TABLE,
    &materialize::FORBIDDEN_STATEMENT,
    &materialize::NOT_ONE_STATEMENT,
    &materialize::STATEMENT_FAILED,
    &materialize::DDL_FAILED,
    &materialize::DDL_TOO_LARGE,
    &materialize::BUDGET_EXCEEDED,
    &materialize::RESULT_TOO_LARGE,
    &materialize::READ_ONLY,
    &materialize::NAME_COLLISION,
    &materialize::CORRUPT_SCHEMA,
    &materialize::SCHEMA_MISMATCH,
    &materialize::SHAPE_MISMATCH,
    // snug.sync.
    &sync::PRECONDITION_REQUIRED,
    &sync::REVISION_MISMATCH,
    &sync::STALE_REVISION,
    &sync::QUOTA_EXCEEDED,
    &sync::NOT_FOUND,
    &sync::IDEMPOTENCY_KEY_REUSED,
    &sync::IMAGE_CONFLICT,
    &sync::STORAGE_UNAVAILABLE,
    &sync::STORAGE_CORRUPT,
    &sync::STORAGE_FULL,
    &sync::PUTS_IN_FLIGHT,
    &sync::DELTA_INVALID,
    &sync::DELTA_PAGE_MISMATCH,
    &sync::DELTA_DIGEST_MISMATCH,
    &sync::DELTA_BASE_GONE,
    &sync::USER_ERASED,
    // snug.admin.
    &admin::USER_NOT_FOUND,
    &admin::USER_EXISTS,
    &admin::TOKEN_NOT_FOUND,
    &admin::DIRECTORY_UNAVAILABLE,
    // The gateway's own.
    &gateway::UNAUTHENTICATED,
    &gateway::CSRF_REJECTED,
    &gateway::UNSUPPORTED_MEDIA_TYPE,
    &gateway::UNSUPPORTED_CONTENT_ENCODING,
    &gateway::NO_ROUTE,
    &gateway::METHOD_NOT_ALLOWED,
    &gateway::SERVICE_UNAVAILABLE,
    &gateway::GATEWAY_OVERLOADED,
    &gateway::MISDIRECTED_REQUEST,
    &gateway::BAD_REQUEST,
    &gateway::BODY_INCOMPLETE,
    &gateway::BODY_ENCODING_INVALID,
    &gateway::BAD_GATEWAY,
    &gateway::NOT_DEPLOYED,
    &gateway::RATE_LIMITED,
    // The CLI's own.
    &cli::USAGE,
    &cli::IO,
    &cli::STORAGE,
    &cli::ENTROPY_UNAVAILABLE,
    &cli::OUTPUT_EXISTS,
    &cli::OUTPUT_PROTECTED,
    &cli::UNKNOWN_FORMAT,
    // The install pipeline's and the sync client's.
    &restore::INVALID_REVISION,
    &restore::USERDB_TOO_LARGE,
    &restore::DESTINATION_NO_DIRECTORY,
    &restore::DESTINATION_IS_DIRECTORY,
    &restore::DESTINATION_EXISTS,
    &restore::DESTINATION_NOT_SNUG,
    &restore::LEGACY_BACKUP,
    &restore::DIVERGED,
    &restore::SIZE_MISMATCH,
    &restore::DIGEST_MISMATCH,
    &restore::RESEAL_FAILED,
    &restore::DESTINATION_CHANGED,
    &restore::FILE_IN_USE,
    &restore::PUSH_STATE_NOT_WRITTEN,
    &restore::SYNC_IN_PROGRESS,
    &restore::SYNC_ORIGIN_EMPTY,
    &restore::REVISION_NOT_FOUND,
    &restore::SYNC_AUTH,
    &restore::SYNC_NETWORK,
    &restore::ORIGIN_MOVED,
    &restore::SYNC_BAD_RESPONSE,
    &restore::SYNC_HTTP,
    &restore::ORIGIN_INCONSISTENT,
    &restore::DOWNLOAD_INTERRUPTED,
    &restore::NO_ORIGIN,
    // snug.hub.
    &hub::INVALID_FIELD,
    &hub::LISTING_INCOMPLETE,
    &hub::UNREADABLE_CANDIDATE,
    &hub::STORE_SCHEMA_TOO_NEW,
    &hub::MIGRATION_CHANGED,
    &hub::BYTES_ELSEWHERE,
    &hub::STORE_LOCKED,
    &hub::INVALID_OTLP_ENDPOINT,
    &hub::INVALID_OTLP_CERTIFICATE,
    &hub::OTLP_EXPORTER_FAILED,
];

/// Returns the reason named `name` (names are unique across every domain).
pub fn find(name: &str) -> Option<&'static Reason> {
    ALL.iter().copied().find(|r| r.name == name)
}

/// Returns the names of `reasons`, for `&[&str]` lists kept by older callers.
pub const fn names<const N: usize>(reasons: &[&Reason]) -> [&'static str; N] {
    let mut names = [""; N];
    assert!(reasons.len() == N, "N is the number of reasons");
    let mut i = 0;
    while i < N {
        names[i] = reasons[i].name;
        i += 1;
    }
    names
}

/// Shorthand for the tables: an HTTP answer.
const fn http(status: u16, code: &'static str, retryable: bool) -> Option<Http> {
    Some(Http {
        status,
        code,
        retryable,
    })
}
