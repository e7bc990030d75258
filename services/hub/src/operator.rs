//! What the operator's commands (`snug-hub users`, `snug-hub sync …`, `snug-hub admin-token`)
//! share: the sync service reached (over `--sync-addr`, or in-process over a store opened here),
//! the users directory opened, and one way to refuse.
//!
//! A refusal names the registry's reason (`snug-reasons`) and exits with the status the registry
//! gives it: the admin API's reasons through [`snug_reasons::admin::USERS_EXIT`] (2 a malformed
//! request, 3 no such user or token, 4 the name is taken), `USAGE` with the command line's 2,
//! and 1 for everything else. With `--json` the refusal is also one JSON object on stdout, in the
//! shape the `snug` CLI gives (`{"ok": false, "error": {"code", "message"}, "exit_code"}`);
//! `code` is `null` when the command could not run at all (a store or directory that cannot be
//! opened, exit 1), since no reason of the registry is that cause.

use std::{path::Path, process::ExitCode, time::Duration};

use anyhow::Context as _;
use snug_admin_service::SyncClient;
use snug_gateway::config::UsersConfig;
use snug_proto::sync::v1::sync_service_client::SyncServiceClient;
use snug_reasons::Reason;
use snug_rpc::{runtime::Runtime, server::ServerConfig, service_token::ServiceToken};
use snug_sync_service::SyncConfig;
use snug_users::Directory;

/// How long an operator command waits for the sync service: an erasure of a large history may
/// take minutes, and an operator would rather wait than retry one half-done.
pub(crate) const SYNC_DEADLINE: Duration = Duration::from_secs(600);

/// A command that was refused: the registry's reason, what to tell the operator, and the exit
/// status.
#[derive(Debug)]
pub(crate) struct Refusal {
    reason: Option<&'static Reason>,
    message: String,
    exit: u8,
}

impl Refusal {
    /// The command line asked for something this command will not do as asked.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            reason: Some(&snug_reasons::cli::USAGE),
            message: message.into(),
            exit: snug_reasons::Exit::Usage as u8,
        }
    }

    /// A refusal for `reason`, with the exit status the registry gives it.
    pub(crate) fn of(reason: &'static Reason, message: impl Into<String>) -> Self {
        Self {
            reason: Some(reason),
            message: message.into(),
            exit: snug_reasons::admin::users_exit(reason.name),
        }
    }

    /// The command could not run (exit 1, no reason).
    pub(crate) fn failed(err: &anyhow::Error) -> Self {
        Self {
            reason: None,
            message: format!("{err:#}"),
            exit: 1,
        }
    }

    /// Prints the refusal (on stderr, and as JSON on stdout with `--json`) and returns its exit
    /// status. `command` prefixes the line on stderr.
    pub(crate) fn report(self, command: &str, json: bool) -> ExitCode {
        let code = self.reason.map(|reason| reason.name);
        if json {
            let body = serde_json::json!({
                "ok": false,
                "error": { "code": code, "message": self.message },
                "exit_code": self.exit,
            });
            println!("{body}");
        }
        match code {
            Some(code) => eprintln!("{command}: {} ({code})", self.message),
            None => eprintln!("{command}: {}", self.message),
        }
        ExitCode::from(self.exit)
    }
}

impl From<tonic::Status> for Refusal {
    /// A refusal of the admin API or the sync service, by the reason its `ErrorInfo` carries.
    fn from(status: tonic::Status) -> Self {
        use tonic_types::StatusExt as _;
        let reason = status
            .get_error_details()
            .error_info()
            .and_then(|info| snug_reasons::find(&info.reason));
        Self {
            reason,
            message: status.message().to_owned(),
            exit: reason.map_or(1, |reason| snug_reasons::admin::users_exit(reason.name)),
        }
    }
}

/// A client of the sync service: over the network at `addr` (presenting `token`), or served in-process over the store
/// `sync` names, opened here as `snug-hub serve sync` would open it (which a running hub's lock
/// refuses).
pub(crate) async fn sync_client(
    addr: Option<&str>,
    token: Option<&ServiceToken>,
    (sync, runtime): (&SyncConfig, &Runtime),
) -> anyhow::Result<SyncClient> {
    let channel = match addr {
        Some(addr) => snug_gateway::backend::channel(addr, Duration::from_secs(5), token)
            .with_context(|| format!("{addr:?} is not a service address"))?,
        None => {
            let store = snug_sync_service::open_store(sync, runtime).await.context(
                "cannot open the sync store (while a hub has it open, pass --sync-addr)",
            )?;
            let services = snug_sync_service::services(store, sync, runtime);
            snug_gateway::backend::local(
                snug_rpc::server::local(&ServerConfig::for_tests(), services).await,
            )
        }
    };
    Ok(SyncServiceClient::new(channel))
}

/// `--addr`, the old spelling of the global `--sync-addr` in `snug-hub sync check|usage|erase`,
/// kept hidden so the scripts written for it keep working. Given on the command line, it wins
/// over `SNUG_SYNC_ADDR` as `--sync-addr` would.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OldSyncAddr {
    #[arg(long = "addr", hide = true)]
    addr: Option<String>,
}

impl OldSyncAddr {
    /// The sync service's address: this spelling's if given, else `sync_addr`.
    pub(crate) fn or(self, sync_addr: Option<String>) -> Option<String> {
        self.addr.or(sync_addr)
    }
}

/// Opens the users directory `config` names: the SQLite file in `dir` (created if missing), or
/// PostgreSQL.
pub(crate) async fn directory(config: &UsersConfig, dir: &Path) -> anyhow::Result<Directory> {
    let location = config
        .directory(dir)
        .context("the users directory's settings are unusable")?;
    Directory::open(&location)
        .await
        .with_context(|| match config.store {
            snug_gateway::config::UsersStore::Sqlite => {
                format!("cannot open the users file in {}", dir.display())
            }
            snug_gateway::config::UsersStore::Postgres => {
                "cannot open the users directory in PostgreSQL".to_owned()
            }
        })
}

/// Whether a users directory exists to be opened: PostgreSQL always (its tables are made on
/// first use by the gateway or `snug-hub users`), the SQLite file only if it is there. A command
/// that only looks a user up must not leave an empty users file behind in a data directory that
/// has none (a split deployment's sync pod, a restored store).
pub(crate) fn directory_exists(config: &UsersConfig, dir: &Path) -> bool {
    match config.store {
        snug_gateway::config::UsersStore::Sqlite => dir.join(snug_users::USERS_FILE).exists(),
        snug_gateway::config::UsersStore::Postgres => true,
    }
}

/// What an erasure did, as every operator command reports it (`sync erase` from the sync
/// service's EraseUser, `users remove --erase` from the admin API's RemoveUser): one shape, so
/// the two never drift apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Erased {
    revisions: u64,
    publications: u64,
    images: u64,
    chunks: u64,
    bytes: u64,
    packs: u64,
    packs_wiped: u64,
    ledger_rows_scrubbed: u64,
    ranges_wiped: u64,
    wipes_pending: u64,
}

macro_rules! erased_from {
    ($($message:ty),*) => {$(
        impl From<&$message> for Erased {
            fn from(m: &$message) -> Self {
                Self {
                    revisions: m.revisions,
                    publications: m.publications,
                    images: m.images,
                    chunks: m.chunks,
                    bytes: m.bytes,
                    packs: m.packs,
                    packs_wiped: m.packs_wiped,
                    ledger_rows_scrubbed: m.ledger_rows_scrubbed,
                    ranges_wiped: m.ranges_wiped,
                    wipes_pending: m.wipes_pending,
                }
            }
        }
    )*};
}

erased_from!(
    snug_proto::sync::v1::EraseUserResponse,
    snug_proto::admin::v1::Erasure
);

impl Erased {
    /// Whether every byte of the user is gone: no wipe of a shared pack is still pending.
    pub(crate) fn complete(&self) -> bool {
        self.wipes_pending == 0
    }

    /// The report's JSON fields.
    pub(crate) fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::json!({
            "revisions": self.revisions,
            "publications": self.publications,
            "images": self.images,
            "chunks": self.chunks,
            "bytes": self.bytes,
            "packs": self.packs,
            "packsWiped": self.packs_wiped,
            "ledgerRowsScrubbed": self.ledger_rows_scrubbed,
            "rangesWiped": self.ranges_wiped,
            "wipesPending": self.wipes_pending,
            "complete": self.complete(),
        })
        .as_object()
        .cloned()
        .unwrap_or_default()
    }

    /// The report as one line for people, saying plainly when the erasure is not complete.
    pub(crate) fn text(&self) -> String {
        let mut text = format!(
            "erased: {} revision(s), {} unfinished write(s), {} image(s), {} chunk(s), {} bytes, \
             {} pack(s) deleted, {} pack(s) wiped ({} range(s)), {} ledger row(s) scrubbed",
            self.revisions,
            self.publications,
            self.images,
            self.chunks,
            self.bytes,
            self.packs,
            self.packs_wiped,
            self.ranges_wiped,
            self.ledger_rows_scrubbed,
        );
        if !self.complete() {
            text.push_str(&format!(
                "\nINCOMPLETE: {} byte range(s) of shared packs still hold the user's bytes (a wipe \
                 failed); the sync store retries them in every reclamation pass and on the next \
                 `snug-hub sync erase`; `snug-hub sync check` lists them until they are done",
                self.wipes_pending
            ));
        }
        text
    }
}

/// The runtime an operator command opens the sync store with, as `snug-hub serve sync` would:
/// its files in the data directory's `sync/`, the default budget, no sealing.
pub(crate) fn sync_runtime(data: &crate::DataDir) -> Runtime {
    Runtime {
        dir: data.sync(),
        ..Runtime::default()
    }
}
