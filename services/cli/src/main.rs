//! `snug`: the offline command-line tool for Snug user files. No hub needed; only `snug sync`
//! talks to a network (a hub origin over HTTP).
//!
//! Container commands (inspect, protect, unlock, passwd, rotate-recovery-key, unprotect) live in
//! `container.rs`; user-database commands (check, migrate, export, init) in `schema.rs`; the sync
//! client (push, pull, bootstrap, origin) in `sync/`, with its download progress bar in
//! `progress.rs`; per-app tables (list, export, sql, persist) in `app.rs`; `snug import` in
//! `import.rs`; the hub-namespace operations (app rows and versions, docs, chat, settings,
//! profile, sync config, secrets) in `hubns/`, one file per command family.
//!
//! Every command works on local files through the domain crates directly (never through gRPC),
//! writes its outputs atomically (temp file, fsync, rename), never modifies an input except the
//! in-place commands (which replace it atomically), and reports failures with a message, a
//! stable code (`--json`) and a distinct exit code:
//! 0 ok, 1 other, 2 usage, 3 locked, 4 corrupt, 5 unsupported, 6 diverged (sync), 7 busy
//! (another `snug sync` on the same file), 8 a protected OUT that `--force` alone does not replace
//! (`--replace-protected`).
//!
//! Secrets come from a file flag, the environment or a prompt, never from argv. The environment
//! (`tests/tests/tidy.rs` checks this table against the code):
//!
//! | variable | meaning |
//! |---|---|
//! | `SNUG_PASSPHRASE` | the passphrase that opens a protected file |
//! | `SNUG_RECOVERY_KEY` | the recovery key that opens a protected file |
//! | `SNUG_NEW_PASSPHRASE` | `protect` and `passwd`: the passphrase to set |
//! | `SNUG_MIN_ITERATIONS` | `--min-iterations`: the smallest PBKDF2 count opened (default 10000) |
//! | `SNUG_MAX_ITERATIONS` | `--max-iterations`: the largest PBKDF2 count opened (default 10000000) |
//! | `SNUG_TOKEN` | `snug sync` against a hub: the bearer token |
//! | `SNUG_SECRET_VALUE` | `snug secrets set`: the value to store |
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map.)
//!
//! `snug app` (`app.rs`: list, export, sql, persist) reads FILE whole and works on an in-memory
//! copy through `snug-materialize`; `sql` and `persist` replace FILE atomically only when the app's
//! data or schema changed (a read, a no-op write or an unchanged runtime leaves it byte-identical).
//! A protected FILE is read with its secret, and `sql`/`persist` write it back resealed
//! (`protected.rs` over `snug_container::reseal_owned`: header, salt, slots and wrapped keys byte for
//! byte, a fresh payload IV; `snug migrate --in-place` likewise), so no edit ever draws a new recovery key; `snug.container.v1` Reseal
//! does the same for other callers (`reseal_with_secrets`).
//!
//! `snug import IN --into FILE` (`import.rs`) is `snug_schema::import_against` with FILE's baseline
//! (none when FILE is absent): FILE is replaced atomically only once the import succeeded.
//! The hub-namespace commands (`hubns/`) are what ApplyOperations and Query offer other hubs:
//! `snug app install|save|versions|show|revert|reset|delete-version|meta|delete|model`,
//! `snug docs seed|set|get|list|delete`, `snug chat append|prune|pin|delete|threads|messages`,
//! `snug settings|profile|sync-config get|set|delete|list`, `snug settings sidecar-identities` and
//! `snug secrets list|set|delete` (values from a file or `SNUG_SECRET_VALUE`, never argv).
//! Writers rewrite FILE only when the operation changed something and refuse a protected FILE
//! (`PROTECTED`, 3); a name the file lacks or a state that forbids the operation is 2, a row no
//! conforming hub writes 4.
//!
//! `snug sync` (`sync/`: push, pull, bootstrap, origin) is the client side of §9.4 over
//! `snug-restore`'s one origin contract (describe / download / push(bytes, base)) and its two
//! origins, a hub over HTTP (`HubOrigin`; the CLI still links no tonic) and a plain directory
//! (`DirOrigin`); how each works is in their module docs (`shared/restore/src/origin/`).
//! The push state is snug-restore's `push_state` sidecar (`<file>.sync.json`, `SNUGSYNC1\n` +
//! JSON), and beside it `<file>.sync.pages`, the page ids of the image last synced, with which a
//! push to a hub sends only the changed pages (issue 21; a cache: a missing or stale one costs a
//! plan round or the whole file, never a wrong image), and for a plain file `<file>.sync.base`,
//! that image itself, against whose pages a push compresses the pages an edit changed (issue 38;
//! the same kind of cache). `--json` answers of push and pull carry
//! `transfer` (`bytesSent`, `bytesReceived`, `delta`).
//! What a FILE argument stands for is decided once, by `snug_schema::resolve_given` (§10), for every
//! command: a lone legacy `user.sqlite` (given as `user.snug` or as itself) is read, and a write creates
//! `user.snug` and never touches the legacy file; once `user.snug` exists, `user.sqlite` is the user's
//! backup, a file of its own with no push state (its legacy sidecar is the lineage `user.snug`
//! continues), so pushing it is pushing a file that never synced (exit 6 unless `--force`, and nothing
//! is recorded), and pulling into it is refused (`LEGACY_BACKUP`, exit 2).
//! Push sends `snug_restore::push_image` (the default export: secrets stripped, a hub never gets
//! them, a directory only with `--include-secrets`), gated by its SHA-256: an unchanged file sends
//! nothing, not even a request.
//! A protected FILE reaches a directory origin protected (§11.3): that export resealed in FILE's own
//! container (`snug_container::reseal_owned`: header, slots and wrapped keys unchanged, a fresh payload
//! IV), so both secrets open it there; plaintext only with `--plaintext-to-origin`, said in the output.
//! The gate's hash stays the plaintext export's, so a reseal's new IV is never a change.
//! A hub always gets the secrets-stripped plaintext.
//! A pull of a protected revision (`Downloaded::install_unlocking`, the secret asked for only then)
//! installs it protected, resealed in the revision's container, never in plaintext on disk.
//! Pull (`--revision REV` for one from history; `--force` to replace unpushed changes) and
//! `bootstrap` (a new device: FILE must not exist) are `snug-restore`'s pipeline over either origin:
//! the revision is described (storage version included) before a byte is downloaded, and the bytes
//! are that revision or a refusal (`ORIGIN_MOVED`, `ORIGIN_INCONSISTENT`). A hand-drawn progress
//! bar (`progress.rs`) goes to stderr only when stderr is a terminal. Exit codes: 5 too new (before
//! any download when declared), 6 diverged, 4 damaged or mismatched bytes, 3 a protected FILE, 2 a
//! wrong destination or revision token, 1 anything else (an interrupted download is
//! `DOWNLOAD_INTERRUPTED`).
//! **Architecture Invariant:** divergence (both sides changed since the anchor, or a lost race: 412)
//! is exit 6 / `DIVERGED` and changes nothing on either side; only `--force` is last-writer-wins.

mod app;
mod container;
mod failure;
mod files;
mod hubns;
mod import;
mod progress;
mod protected;
mod schema;
mod secrets;
mod sync;

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use snug_container::{DEFAULT_ITERATIONS, Limits};

use crate::{
    failure::{Exit, Failure},
    secrets::SecretArgs,
};

#[derive(Debug, Parser)]
#[command(
    name = "snug",
    version,
    about = "Work with Snug user files (user.snug) offline: check, migrate, export, protect, unlock",
    after_help = "Exit codes: 0 ok, 1 other error, 2 usage, 3 locked, 4 corrupt, 5 unsupported (newer than this build,\n\
                  or a KDF setting outside --min-iterations/--max-iterations),\n\
                  6 diverged (snug sync: both sides changed; nothing was overwritten), 7 busy (another snug sync on the file),\n\
                  8 OUT is a protected file (--force never replaces one; add --replace-protected),\n\
                  10 the origin could not be reached or did not answer usably (nothing changed; retry later),\n\
                  11 the origin refused the credentials or wants some (SNUG_TOKEN, --token-file).\n\
                  Secrets are never taken from arguments: use --passphrase-file / --recovery-key-file,\n\
                  SNUG_PASSPHRASE / SNUG_RECOVERY_KEY, or answer the prompt on a terminal."
)]
struct Cli {
    /// Print one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Smallest PBKDF2 iteration count accepted when opening a protected file. A file below it is
    /// refused as out of policy (exit 5; healthy, untouched); lower it to open a file you know was
    /// made with a weak setting, and `snug passwd FILE --upgrade-kdf` to rewrite it.
    #[arg(long, global = true, env = "SNUG_MIN_ITERATIONS", default_value_t = Limits::default().min_iterations)]
    min_iterations: u32,
    /// Largest PBKDF2 iteration count accepted when opening a protected file (every iteration is
    /// spent before the secret is checked). A file above it is refused as out of policy (exit 5).
    #[arg(long, global = true, env = "SNUG_MAX_ITERATIONS", default_value_t = Limits::default().max_iterations)]
    max_iterations: u32,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Reports a file's format and, for a protected file, its header — no secret needed.
    Inspect {
        /// The file to inspect.
        file: PathBuf,
    },
    /// Protects a plain user database with a passphrase and a new recovery key (SNUGENC1).
    Protect {
        /// The plain user database.
        input: PathBuf,
        /// Where to write the protected file.
        #[arg(long)]
        out: PathBuf,
        /// PBKDF2 iteration count.
        #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
        iterations: u32,
        /// A file holding the new passphrase. Also: SNUG_PASSPHRASE.
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
        #[command(flatten)]
        replace: files::Replace,
    },
    /// Writes the plaintext of a protected file to OUT; the protected file is unchanged.
    Unlock {
        /// The protected file.
        input: PathBuf,
        /// Where to write the plain user database.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
        #[command(flatten)]
        replace: files::Replace,
    },
    /// Changes the passphrase of a protected file in place; the recovery key keeps working.
    /// With --upgrade-kdf, rewrites it at another PBKDF2 iteration count instead.
    Passwd {
        /// The protected file, replaced atomically.
        file: PathBuf,
        /// The current passphrase (file); also SNUG_PASSPHRASE. With --upgrade-kdf, the recovery
        /// key too (--recovery-key-file; also SNUG_RECOVERY_KEY).
        #[command(flatten)]
        secrets: SecretArgs,
        /// A file holding the new passphrase. Also: SNUG_NEW_PASSPHRASE.
        #[arg(long, value_name = "FILE", conflicts_with = "upgrade_kdf")]
        new_passphrase_file: Option<PathBuf>,
        /// Rewrites the file at --iterations (default: the count new files get) with a fresh
        /// salt, keeping the passphrase and the recovery key. Every slot is re-derived, so this
        /// needs BOTH the passphrase and the recovery key.
        #[arg(long)]
        upgrade_kdf: bool,
        /// The PBKDF2 iteration count --upgrade-kdf writes.
        #[arg(long, default_value_t = DEFAULT_ITERATIONS, requires = "upgrade_kdf")]
        iterations: u32,
    },
    /// Replaces the recovery key of a protected file in place and prints the new one once.
    RotateRecoveryKey {
        /// The protected file, replaced atomically.
        file: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
        /// Use the recovery key in this file instead of generating one. Only a full-strength key
        /// (the 27 symbols of a generated one; case and separators ignored) is accepted.
        #[arg(long, value_name = "PATH")]
        new_recovery_key_file: Option<PathBuf>,
    },
    /// Removes protection: writes the plain user database to OUT.
    Unprotect {
        /// The protected file.
        input: PathBuf,
        /// Where to write the plain user database.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
        #[command(flatten)]
        replace: files::Replace,
    },
    /// Reports a user database's storage version, tables and health, and what opening it would
    /// change (migration, heal, legacy credential wipe), without writing anything.
    Check {
        /// The user database (or a protected file, whose container header is checked).
        file: PathBuf,
    },
    /// Writes the user database brought to storage version 6 (migrated and healed) to OUT; the
    /// input is only read. With --in-place, replaces the input instead (atomically, and only when
    /// something changed); a protected input is opened with its secret and written back resealed
    /// in its own container, so its passphrase and recovery key keep opening it.
    Migrate {
        /// The user database, plain or protected (opened with its secret; the result is
        /// resealed in its own container).
        input: PathBuf,
        /// Where to write the migrated database.
        #[arg(
            long,
            required_unless_present = "in_place",
            conflicts_with = "in_place"
        )]
        out: Option<PathBuf>,
        /// Migrate the input itself.
        #[arg(long)]
        in_place: bool,
        #[command(flatten)]
        secrets: SecretArgs,
        #[command(flatten)]
        replace: files::Replace,
    },
    /// Writes a portable export to OUT: credentials stripped (unless --include-secrets) and no
    /// stripped byte left in free pages. A protected input is opened with its secret; the export
    /// is plain.
    Export {
        /// The user database, plain or protected.
        input: PathBuf,
        /// Where to write the export.
        #[arg(long)]
        out: PathBuf,
        /// Keep the credentials in `snug_secrets` (for your own backups only).
        #[arg(long)]
        include_secrets: bool,
        #[command(flatten)]
        secrets: SecretArgs,
        #[command(flatten)]
        replace: files::Replace,
    },
    /// Creates a new, empty user database at storage version 6.
    Init {
        /// Where to write it.
        out: PathBuf,
        #[command(flatten)]
        replace: files::Replace,
    },
    /// Imports a file as the user database FILE (§9.2): checked, migrated, its connections
    /// reconciled against FILE's approved grants, runtime contracts FILE does not hold cleared,
    /// endpoint re-confirmation re-armed. FILE is replaced (or created) atomically; its own
    /// credentials are not carried over. IN is only read and may be protected.
    Import {
        /// The file to import: a user database, plain or protected.
        input: PathBuf,
        /// The user database it becomes (replaced atomically; created when absent).
        #[arg(long, value_name = "FILE")]
        into: PathBuf,
        /// IN comes from the user's own sync origin: keep its runtime contracts.
        #[arg(long)]
        trusted_origin: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Syncs a user database with an origin: a hub (https://…) or a plain directory (exit 6:
    /// diverged).
    #[command(subcommand)]
    Sync(sync::SyncCommand),
    /// One app's tables in a user database: list, export, sql, persist (exit 2: bad SQL or
    /// unknown app).
    #[command(subcommand)]
    App(app::AppCommand),
    /// One app's docs (its wiki): seed (absent slugs only), set, get, list, delete.
    #[command(subcommand)]
    Docs(hubns::DocsCommand),
    /// Chat history: append, prune, pin, delete, threads, messages.
    #[command(subcommand)]
    Chat(hubns::ChatCommand),
    /// `snug_settings` values (JSON): get, set, delete, list, sidecar-identities.
    #[command(subcommand)]
    Settings(hubns::SettingsCommand),
    /// `snug_profile` values (JSON): get, set, delete, list.
    #[command(subcommand)]
    Profile(hubns::KvCommand),
    /// `snug_sync` values (sync-origin config, JSON, no credentials): get, set, delete, list.
    #[command(subcommand)]
    SyncConfig(hubns::KvCommand),
    /// Credentials in `snug_secrets`: list (keys only), set (from a file), delete.
    #[command(subcommand)]
    Secrets(hubns::SecretsCommand),
}

/// What a successful command reports: text for people, JSON for scripts.
pub(crate) struct Outcome {
    pub(crate) text: String,
    pub(crate) json: serde_json::Value,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // Help and version are successes; everything else clap reports is a usage error.
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(Exit::Usage as u8)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let json = cli.json;
    match run(cli) {
        Ok(outcome) => {
            let mut stdout = std::io::stdout().lock();
            let _ = if json {
                writeln!(stdout, "{}", outcome.json)
            } else if outcome.text.is_empty() {
                Ok(())
            } else {
                writeln!(stdout, "{}", outcome.text)
            };
            ExitCode::SUCCESS
        }
        Err(failure) => {
            if json {
                let body = serde_json::json!({
                    "ok": false,
                    "error": { "code": failure.reason.name, "message": failure.message },
                    "exit_code": failure.exit as u8,
                });
                let _ = writeln!(std::io::stdout().lock(), "{body}");
            }
            let _ = writeln!(std::io::stderr().lock(), "snug: {}", failure.message);
            ExitCode::from(failure.exit as u8)
        }
    }
}

fn run(cli: Cli) -> Result<Outcome, Failure> {
    let limits = Limits {
        min_iterations: cli.min_iterations,
        max_iterations: cli.max_iterations,
        ..Limits::default()
    };
    match cli.command {
        Command::Inspect { file } => container::inspect(&file, &limits),
        Command::Protect {
            input,
            out,
            iterations,
            passphrase_file,
            replace,
        } => container::protect(
            &input,
            &out,
            iterations,
            passphrase_file.as_deref(),
            replace,
            &limits,
        ),
        Command::Unlock {
            input,
            out,
            secrets,
            replace,
        } => container::unlock(&input, &out, &secrets, replace, &limits, "unlocked"),
        Command::Unprotect {
            input,
            out,
            secrets,
            replace,
        } => container::unlock(&input, &out, &secrets, replace, &limits, "unprotected"),
        Command::Passwd {
            file,
            secrets,
            upgrade_kdf: true,
            iterations,
            ..
        } => container::upgrade_kdf(&file, &secrets, iterations, &limits),
        Command::Passwd {
            file,
            secrets,
            new_passphrase_file,
            ..
        } => container::passwd(&file, &secrets, new_passphrase_file.as_deref(), &limits),
        Command::RotateRecoveryKey {
            file,
            secrets,
            new_recovery_key_file,
        } => container::rotate_recovery_key(
            &file,
            &secrets,
            new_recovery_key_file.as_deref(),
            &limits,
            cli.json,
        ),
        Command::Check { file } => schema::check(&file, &limits),
        Command::Migrate {
            input,
            out,
            secrets,
            replace,
            ..
        } => {
            let to = match &out {
                Some(out) => schema::MigrateTo::Out(out, replace),
                None => schema::MigrateTo::InPlace,
            };
            schema::migrate(&input, to, &secrets, &limits)
        }
        Command::Export {
            input,
            out,
            include_secrets,
            secrets,
            replace,
        } => schema::export(&input, &out, include_secrets, &secrets, replace, &limits),
        Command::Init { out, replace } => schema::init(&out, replace),
        Command::Import {
            input,
            into,
            trusted_origin,
            secrets,
        } => import::import(&input, &into, trusted_origin, &secrets, &limits),
        Command::Sync(command) => sync::run(command, &limits, cli.json),
        Command::App(command) => app::run(command, &limits),
        Command::Docs(command) => hubns::run_docs(command, &limits),
        Command::Chat(command) => hubns::run_chat(command, &limits),
        Command::Settings(command) => hubns::run_settings(command, &limits),
        Command::Profile(command) => hubns::run_kv(snug_schema::KvTable::Profile, command, &limits),
        Command::SyncConfig(command) => hubns::run_kv(snug_schema::KvTable::Sync, command, &limits),
        Command::Secrets(command) => hubns::run_secrets(command, &limits),
    }
}
