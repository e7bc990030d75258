//! `snug sync`: the client side of the sync origin (spec §9.3–§9.4, notes §(d) "Sync loop"), one
//! step at a time from the command line.
//!
//! This file is command logic only: arguments, messages, exit codes and the order of steps. The
//! origin is `snug_restore::Origin`, and `--origin` picks one of its two implementations there:
//! - a hub (`--origin https://hub.example`, `snug_restore::HubOrigin`): what is pushed is always
//!   the secrets-stripped plain export, never a container (§11.3);
//! - a personal origin that is a plain directory (`--origin file:///path` or a path,
//!   `snug_restore::DirOrigin`), so two devices sharing a folder (a USB stick, a synced folder)
//!   get the same conflict rules without any hub. A protected FILE arrives there protected: its
//!   own container resealed over the export (header and slots unchanged, a fresh payload IV), so
//!   both its secrets open it there and a pull installs it protected; plaintext only with
//!   `--plaintext-to-origin`, and the output says so.
//!
//! `--origin` may be left out once a file has synced: the sync state remembers the origin it last
//! synced with. Something that looks like a hub address without a scheme (`127.0.0.1:8080`) is
//! refused with what to type, not taken for a directory.
//!
//! Every answer is checked with the origin in the same run (issue 35): a push first asks the
//! origin for its head (and its identity) and decides with `snug_restore::decide::push`, so
//! "unchanged" is said only when the origin confirms the revision the file last synced as
//! there; an origin that cannot be reached, refuses or garbles its answer is an error with exit
//! code 10 (11 for refused credentials), never "nothing to do". The sync state keeps one record
//! per origin identity, so one origin's revisions are never read as another's.
//!
//! Pull and bootstrap are `snug-restore`'s install pipeline (the Coven discipline of issue #8):
//! the revision's metadata is read first (a storage version newer than this build is refused
//! before anything is downloaded), the bytes land in a temporary file beside FILE and are checked
//! against the recorded SHA-256, opened, migrated and healed, FILE's local credentials are carried
//! in, and FILE is replaced atomically and bound to the revision in its sidecar. A protected FILE
//! is opened with its secret and the pull resealed in its own container (no new salt or recovery
//! key); the download itself lands beside it as the origin sent it.
//!
//! Nothing of the user's is replaced without a copy: a forced pull over changes the origin lacks
//! first keeps FILE's bytes beside it (`snug_restore::keep`), `--keep-both` installs the origin's
//! copy beside FILE and leaves FILE alone, a forced push names the head it overwrote (kept in a
//! hub's history, and kept as a copy by a directory origin first), and restoring an older revision
//! (`push --restore`, `snug sync restore`) is a copy-forward: a new head, the old one kept.
//!
//! Divergence (both sides changed since the last sync, a file behind its origin, or a lost race)
//! is reported with exit code 6 and code `DIVERGED` and never resolved silently. One `snug sync`
//! at a time works on a file: another one on the same file meanwhile is refused with exit code 7
//! and code `SYNC_IN_PROGRESS` (`<file>.sync.lock`).

mod push;
mod watch;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use serde_json::json;
use snug_container::{Limits, Resealable};
use snug_restore::{
    DirOrigin, HubOrigin, Origin, OriginError, OriginId, Plan, Pushed, RestoreError, Selector,
    SnapshotInfo, SyncedBase,
    decide::{self, PushFacts, PushKind, PushPlan, Refusal},
    push_state::{self, OriginState, SyncLock, SyncLockError, SyncState},
};
use snug_schema::{Clock as _, ImportError, SystemClock};

use crate::{
    Outcome,
    failure::{Exit, Failure, open_exit, with_causes},
    files,
    progress::ProgressBar,
    protected,
    secrets::{self, SecretArgs},
};

use self::push::{PushOptions, push};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum SyncCommand {
    /// Pushes FILE's export to the origin, if it changed since the last push there. Refuses
    /// (exit 6) when the origin moved meanwhile, unless --force or (FILE unchanged) --restore.
    Push {
        /// The user database (plain, or protected with its secret).
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// Overwrite the origin's copy even if it changed since this device's last sync
        /// (last writer wins). The head overwritten is named, and stays in a hub's history; a
        /// directory origin keeps a copy of it first.
        #[arg(long)]
        force: bool,
        /// FILE holds an older revision (pulled with --revision) and is unchanged since: make its
        /// content the origin's new head, a copy-forward that keeps the newer revisions.
        #[arg(long, conflicts_with = "force")]
        restore: bool,
        /// Directory origins only: keep the credentials in the pushed copy. A hub never gets them.
        #[arg(long)]
        include_secrets: bool,
        /// Directory origins only: send a protected FILE's plaintext instead of its container
        /// resealed (the copy at the origin is then not protected). A hub always gets plaintext.
        #[arg(long)]
        plaintext_to_origin: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Installs the origin's current revision (or --revision) into FILE, keeping FILE's own
    /// credentials; creates FILE on a new device. Refuses (exit 6) when FILE has changes the
    /// origin lacks, unless --force (FILE is kept beside it first) or --keep-both; refuses
    /// (exit 5) a revision newer than this build before downloading it.
    Pull {
        /// The user database to update (created if missing).
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// A revision from the origin's history instead of the current one.
        #[arg(long, value_name = "REV")]
        revision: Option<String>,
        /// Replace FILE's unpushed changes with the origin's copy (last writer wins); FILE's
        /// bytes are kept beside it first, as FILE.replaced-<revision>-<time>.snug.
        #[arg(long)]
        force: bool,
        /// When FILE has changes the origin lacks, install the origin's copy beside it
        /// (FILE.origin-<revision>.snug) and leave FILE as it is, instead of refusing.
        #[arg(long, conflicts_with = "force")]
        keep_both: bool,
        /// Opens a protected FILE (the pull is resealed in its own container, so its passphrase
        /// and recovery key keep opening it) and a protected revision.
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// A new device: creates FILE from the origin's current revision (or --revision) with one
    /// download. Refuses if FILE exists (use pull to update a file).
    Bootstrap {
        /// The user database to create.
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// A revision from the origin's history instead of the current one.
        #[arg(long, value_name = "REV")]
        revision: Option<String>,
        /// Opens a protected revision (a personal origin keeps protected files protected).
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Makes a retained revision the origin's new head (a copy-forward: the newer revisions stay
    /// in its history), then pulls it into FILE. Refuses (exit 6) when FILE has changes the
    /// origin lacks, unless --force (FILE is kept beside it first).
    Restore {
        /// The user database synced with the origin.
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// The revision to make current again.
        #[arg(long, value_name = "REV")]
        revision: String,
        /// Replace FILE's unpushed changes (FILE is kept beside it first).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Keeps FILE up to date as revisions appear at the origin: each new one is pulled as
    /// `snug sync pull` pulls it (never over FILE's unpushed changes: exit 6), and with --push
    /// FILE's own changes are pushed once it has stayed unchanged for --debounce. A hub tells it
    /// at once (its event stream); a directory is asked once a second. Runs until interrupted,
    /// which leaves FILE whole.
    Watch {
        /// The user database to keep up to date (created from the origin if missing).
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// Also push FILE's own changes.
        #[arg(long)]
        push: bool,
        /// Seconds FILE must stay unchanged before --push sends it.
        #[arg(long, value_name = "SECONDS", default_value_t = 2)]
        debounce: u64,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Reports an origin's identity and current revision: a directory (with --init, creates it
    /// and its identity) or a hub.
    Origin {
        /// The origin: a directory path, file:///path, or a hub's http(s):// URL.
        origin: String,
        /// Directories only: create the directory (and its identity) if it does not exist.
        #[arg(long)]
        init: bool,
        /// A file holding the hub's bearer token. Also: SNUG_TOKEN.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct OriginArgs {
    /// The origin: a hub URL (https://hub.example), file:///path, or a directory path. Left
    /// out: the origin FILE last synced with.
    #[arg(long)]
    origin: Option<String>,
    /// A file holding the hub's bearer token. Also: SNUG_TOKEN.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

/// Runs a sync command (`json`: a command that reports as it goes, `watch`, says each step as
/// one JSON object per line).
pub(crate) fn run(command: SyncCommand, limits: &Limits, json: bool) -> Result<Outcome, Failure> {
    // Push, pull, bootstrap and restore each read FILE and its sidecar and then write one or
    // both; two at once on the same file could leave one's file bound to the other's revision.
    let _lock = match &command {
        SyncCommand::Push { file, .. }
        | SyncCommand::Pull { file, .. }
        | SyncCommand::Bootstrap { file, .. }
        | SyncCommand::Restore { file, .. }
        | SyncCommand::Watch { file, .. } => Some(lock_local(file)?),
        SyncCommand::Origin { .. } => None,
    };
    match command {
        SyncCommand::Push {
            file,
            origin,
            force,
            restore,
            include_secrets,
            plaintext_to_origin,
            secrets,
        } => push(
            &file,
            open_origin(&file, &origin)?.as_ref(),
            PushOptions {
                force,
                restore,
                include_secrets,
                plaintext_to_origin,
            },
            &secrets,
            limits,
        ),
        SyncCommand::Pull {
            file,
            origin,
            revision,
            force,
            keep_both,
            secrets,
        } => {
            let options = snug_restore::Options {
                force,
                only_if_absent: false,
                keep_both,
            };
            let origin = open_origin(&file, &origin)?;
            pull(
                &file,
                origin.as_ref(),
                &selector(revision),
                options,
                &secrets,
                limits,
            )
        }
        SyncCommand::Bootstrap {
            file,
            origin,
            revision,
            secrets,
        } => {
            let options = snug_restore::Options {
                force: false,
                only_if_absent: true,
                keep_both: false,
            };
            let origin = open_origin(&file, &origin)?;
            pull(
                &file,
                origin.as_ref(),
                &selector(revision),
                options,
                &secrets,
                limits,
            )
        }
        SyncCommand::Restore {
            file,
            origin,
            revision,
            force,
            secrets,
        } => {
            let origin = open_origin(&file, &origin)?;
            restore(&file, origin.as_ref(), &revision, force, &secrets, limits)
        }
        SyncCommand::Watch {
            file,
            origin,
            push,
            debounce,
            secrets,
        } => {
            let listener = open_origin(&file, &origin)?;
            let origin = open_origin(&file, &origin)?;
            let watching = watch::Watching {
                push_too: push,
                debounce: std::time::Duration::from_secs(debounce),
                json,
            };
            watch::watch(&file, origin.as_ref(), listener, watching, &secrets, limits)
        }
        SyncCommand::Origin {
            origin,
            init,
            token_file,
        } => origin_info(&origin, init, token_file.as_deref()),
    }
}

/// Takes FILE's sync lock (`<file>.sync.lock`), held for one `snug sync` command on FILE, or
/// refuses at once with exit code 7 when another `snug sync` holds it.
fn lock_local(file: &Path) -> Result<SyncLock, Failure> {
    SyncLock::try_acquire(file).map_err(|err| match err {
        SyncLockError::Busy { ref path } => Failure::new(
            Exit::Busy,
            err.reason(),
            format!(
                "another snug sync is working on {} ({} is held); nothing was done, run this again once it has finished",
                file.display(),
                path.display()
            ),
        ),
        SyncLockError::Io {
            action,
            path,
            source,
        } => Failure::io(action, &path, source),
    })
}

fn selector(revision: Option<String>) -> Selector {
    revision.map_or(Selector::Current, Selector::Revision)
}

fn clock() -> Arc<SystemClock> {
    Arc::new(SystemClock)
}

fn diverged(message: impl Into<String>) -> Failure {
    Failure::of(&snug_reasons::restore::DIVERGED, message)
}

fn state_failure(err: push_state::PushStateError) -> Failure {
    Failure::new(Exit::Other, err.reason(), with_causes(&err))
}

/// The exit code of an import refusal: the file's age, protection or damage decides.
fn import_exit(err: &ImportError) -> Exit {
    match err {
        ImportError::SchemaTooNew { .. } => Exit::Unsupported,
        ImportError::Locked => Exit::Locked,
        ImportError::TooLarge { .. } | ImportError::Entropy(_) | ImportError::Sqlite(_) => {
            Exit::Other
        }
        _ => Exit::Corrupt,
    }
}

/// The exit code the registry gives `reason` wherever the CLI finds it, and 1 where it has none
/// of its own (`Never`) or several (`ByCause`: the caller decides those).
fn registry_exit(reason: &snug_reasons::Reason) -> Exit {
    match reason.exit {
        snug_reasons::CliExit::Always(exit) => exit,
        _ => Exit::Other,
    }
}

/// An origin's failure as this command's: the code is the origin error's stable reason, and the
/// message names the origin and what to do.
fn origin_failure(origin: &str, err: &OriginError) -> Failure {
    // An origin that could not be asked, or did not answer usably, decided nothing: one exit
    // code for all of those, whatever word the hub used (`SERVICE_UNAVAILABLE`, `OVERLOADED`).
    let exit = if err.is_unavailable() {
        Exit::Unavailable
    } else {
        // One word, one exit: a code the origin passes on (a hub's refusal of the pushed file,
        // `SCHEMA_TOO_NEW`, a directory's `NO_ORIGIN`) exits as it does wherever the CLI finds it.
        registry_exit(err.reason())
    };
    let hint = match err {
        OriginError::NoOrigin { .. } => format!(" (snug sync origin {origin} --init creates it)"),
        OriginError::Unreachable { .. } => {
            "; nothing was changed: check the address and that the hub is running".to_owned()
        }
        _ => String::new(),
    };
    Failure::new(
        exit,
        err.reason(),
        format!("{origin}: {}{hint}", with_causes(err)),
    )
}

/// A pipeline failure as this command's. The pipeline's own words exit as the registry says
/// (5 too new, 6 diverged, 4 damaged or mismatched bytes, 3 a protected FILE, 2 a wrong command
/// line, 1 anything else); a failure that wraps another's decides by that cause.
fn restore_failure(origin: &str, err: RestoreError) -> Failure {
    let exit = match &err {
        RestoreError::Origin(inner) => return origin_failure(origin, inner),
        RestoreError::Unreadable { source, .. }
        | RestoreError::Gate(snug_restore::GateError::Open(source)) => open_exit(source).0,
        RestoreError::Refused { source, .. } => import_exit(source),
        // A protected revision or FILE that did not open: locked, damaged or newer, as anywhere.
        RestoreError::Container { source, .. } | RestoreError::LocalContainer { source, .. } => {
            Failure::from(source.clone()).exit
        }
        // The credentials' and the export's own words mean the local file elsewhere; here they
        // are a failure to finish the install.
        RestoreError::Secrets(_) | RestoreError::Gate(_) => Exit::Other,
        _ => registry_exit(err.reason()),
    };
    let hint = match &err {
        RestoreError::Diverged { .. } => {
            "; pull --keep-both to get the origin's copy beside it, push --force to overwrite the \
             origin, or pull --force to replace the file (a copy of it is kept)"
        }
        _ => "",
    };
    Failure::new(exit, err.reason(), format!("{}{hint}", with_causes(&err)))
}

/// How the user named the origin, and what it is.
enum Address {
    Hub(String),
    Directory(PathBuf),
}

/// Reads `--origin`, refusing what cannot be one with what was understood and what to type.
fn address(origin: &str) -> Result<Address, Failure> {
    let origin = origin.trim();
    if origin.starts_with("http://") || origin.starts_with("https://") {
        return Ok(Address::Hub(origin.to_owned()));
    }
    match origin.strip_prefix("file://") {
        Some(path) if path.starts_with('/') => return Ok(Address::Directory(PathBuf::from(path))),
        Some(_) => {
            return Err(Failure::usage(format!(
                "{origin}: a file origin is file:///absolute/path"
            )));
        }
        None if origin.contains("://") => {
            return Err(Failure::usage(format!(
                "{origin}: an origin is a hub's http(s):// URL, file:///path, or a directory path"
            )));
        }
        None => {}
    }
    let path = PathBuf::from(origin);
    if looks_like_host(origin) && !path.exists() {
        return Err(Failure::usage(format!(
            "{origin} looks like a hub's address without its scheme, and no directory of that \
             name exists: use http://{origin} (or https://{origin}) for a hub, or ./{origin} for \
             a directory"
        )));
    }
    Ok(Address::Directory(path))
}

/// `host:port` (or `host:port/path`): what a hub's address looks like without its scheme.
fn looks_like_host(origin: &str) -> bool {
    let authority = origin.split('/').next().unwrap_or("");
    let Some((host, port)) = authority.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'))
}

fn token(token_file: Option<&Path>) -> Result<Option<String>, Failure> {
    Ok(match token_file {
        Some(path) => {
            Some(files::read(path).map(|b| String::from_utf8_lossy(&b).trim().to_owned())?)
        }
        None => std::env::var("SNUG_TOKEN")
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty()),
    })
}

fn origin_at(origin: &str, token_file: Option<&Path>) -> Result<Box<dyn Origin + Send>, Failure> {
    Ok(match address(origin)? {
        Address::Hub(url) => Box::new(HubOrigin::new(&url, token(token_file)?)),
        // A directory is remembered by its absolute path, so `--origin` left out later works
        // from any working directory.
        Address::Directory(path) => {
            Box::new(DirOrigin::new(std::fs::canonicalize(&path).unwrap_or(path)))
        }
    })
}

/// The origin `--origin` names, or the one FILE last synced with.
fn open_origin(file: &Path, args: &OriginArgs) -> Result<Box<dyn Origin + Send>, Failure> {
    let origin = match &args.origin {
        Some(origin) => origin.clone(),
        None => push_state::load(file)
            .map_err(state_failure)?
            .last_origin
            .ok_or_else(|| {
                Failure::usage(format!(
                    "{} has not synced with an origin yet: give --origin (a hub's https:// URL \
                     or a directory)",
                    file.display()
                ))
            })?,
    };
    origin_at(&origin, args.token_file.as_deref())
}

/// The origin's current revision, or `None` when it holds no copy yet, and who it is: asked in
/// this run, so every answer after it is the origin's, not the sidecar's.
fn confirm(origin: &dyn Origin) -> Result<(Option<SnapshotInfo>, OriginId), Failure> {
    let fail = |err: OriginError| origin_failure(&origin.name(), &err);
    let head = origin.head().map_err(fail)?;
    let identity = origin.identity().map_err(fail)?;
    Ok((head, identity))
}

/// `snug sync pull FILE --origin O` and `snug sync bootstrap FILE --origin O`: the install
/// pipeline, step by step, with a progress bar while the bytes arrive.
fn pull(
    file: &Path,
    origin: &dyn Origin,
    selector: &Selector,
    options: snug_restore::Options,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let name = origin.name();
    let fail = |err| restore_failure(&name, err);
    // A protected FILE is refused before the origin is asked anything, so the secret is asked
    // for only then, and the same secret opens a protected revision.
    let mut secrets = None;
    let planned = match snug_restore::prepare(origin, file, selector, options, clock()) {
        Err(RestoreError::Protected { .. }) => {
            let given = secrets.insert(secrets::opening_secrets(args)?);
            let unlock = snug_restore::Unlock {
                secrets: given,
                limits,
            };
            snug_restore::prepare_unlocking(origin, file, selector, options, Some(unlock), clock())
        }
        planned => planned,
    };
    let prepared = match planned.map_err(fail)? {
        Plan::UpToDate(up) => {
            let note = if up.local_changes {
                "; the local file has unpushed changes (snug sync push)"
            } else {
                ""
            };
            return Ok(Outcome {
                text: format!(
                    "{} is up to date with {name} (revision {}){note}",
                    file.display(),
                    up.revision
                ),
                json: json!({ "ok": true, "pulled": false, "reason": "UP_TO_DATE", "revision": up.revision, "localChanges": up.local_changes }),
            });
        }
        Plan::Install(prepared) => prepared,
    };
    let identity = prepared.origin().clone();
    let mut bar = ProgressBar::on_stderr(format!("revision {}", prepared.snapshot().revision));
    let downloaded = prepared
        .download(origin, &mut |progress| bar.update(progress))
        .map_err(fail)?;
    drop(bar);
    // A protected revision is opened with the user's secret and installed protected; the secret
    // is asked for only when the download turns out to need one.
    if secrets.is_none() && downloaded.is_protected().map_err(fail)? {
        secrets = Some(secrets::opening_secrets(args)?);
    }
    // The revision's bytes, for the page ids the next push starts from (issue 21).
    let revision_bytes = std::fs::read(downloaded.temp_path()).ok();
    let done = downloaded
        .install_unlocking(secrets.as_ref(), limits)
        .map_err(fail)?;
    if let Some(bytes) = revision_bytes {
        // A cache: a pull that cannot record it has still landed. A plain file keeps the
        // revision's bytes too, the base its next push compresses changed pages against.
        let saved = push_state::save_pages(&done.destination, &identity, &done.revision, &bytes);
        let plain = snug_container::detect(&bytes) == snug_container::Format::Sqlite;
        if saved.is_err() || !plain || done.protected {
            push_state::forget_base(&done.destination);
        } else if origin.syncs_by_difference() {
            let _ = push_state::save_base(&done.destination, &bytes);
        }
    }
    // The file written: FILE, `user.snug` when FILE stood for a legacy file (§10 adoption), or
    // the copy beside FILE (`--keep-both`).
    let written = done.destination.as_path();
    let mut text = if done.beside {
        format!(
            "{} has changes {name} lacks, so it was left as it is; revision {} of {name} is \
             beside it as {} ({} bytes, {} local credential(s) carried)",
            file.display(),
            done.revision,
            written.display(),
            done.length,
            done.secrets_kept
        )
    } else if done.bootstrapped {
        format!(
            "Created {} from revision {} of {name} ({} bytes)",
            written.display(),
            done.revision,
            done.length
        )
    } else {
        format!(
            "Pulled revision {} from {name} into {} ({} bytes, {} local credential(s) kept)",
            done.revision,
            written.display(),
            done.length,
            done.secrets_kept,
        )
    };
    if let Some(kept) = &done.kept {
        text.push_str(&format!(
            "; its unpushed changes were replaced (--force), and the file as it was is kept at {}",
            kept.display()
        ));
    }
    if done.kept_destination_container {
        text.push_str("; kept protected: resealed in its own container, so its passphrase and recovery key still open it");
    } else if done.protected {
        text.push_str("; kept protected: the revision's passphrase and recovery key open it");
    }
    Ok(Outcome {
        text,
        json: json!({
            "ok": true,
            "pulled": true,
            "file": written,
            "revision": done.revision,
            "sha256": done.sha256,
            "downloaded": done.downloaded,
            "length": done.length,
            "storageVersion": done.found_version,
            "migrated": done.migrated,
            "secretsKept": done.secrets_kept,
            "forced": done.replaced_local_changes,
            "kept": done.kept,
            "keptBoth": done.beside,
            "bootstrapped": done.bootstrapped,
            "protected": done.protected,
            "origin": identity.as_str(),
            "transfer": transfer(origin),
        }),
    })
}

/// `snug sync restore FILE --revision R`: the origin makes R its new head (a copy-forward), then
/// FILE gets it. FILE is checked first, so a file with changes the origin lacks is refused
/// before the origin is changed.
fn restore(
    file: &Path,
    origin: &dyn Origin,
    revision: &str,
    force: bool,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let name = origin.name();
    let selector = Selector::Revision(revision.to_owned());
    let options = snug_restore::Options {
        force,
        only_if_absent: false,
        keep_both: false,
    };
    // The never-clobber check against the revision, before anything changes at the origin.
    let checked = match snug_restore::prepare(origin, file, &selector, options, clock()) {
        Err(RestoreError::Protected { .. }) => {
            let given = secrets::opening_secrets(args)?;
            let unlock = snug_restore::Unlock {
                secrets: &given,
                limits,
            };
            snug_restore::prepare_unlocking(origin, file, &selector, options, Some(unlock), clock())
        }
        checked => checked,
    };
    let snapshot = match checked.map_err(|err| restore_failure(&name, err))? {
        Plan::UpToDate(up) => origin
            .describe(&Selector::Revision(up.revision))
            .map_err(|err| origin_failure(&name, &err))?,
        Plan::Install(prepared) => prepared.snapshot().clone(),
    };
    let (head, _) = confirm(origin)?;
    let Some(head) = head else {
        return Err(origin_failure(&name, &OriginError::Empty));
    };
    let restored = if head.revision == snapshot.revision {
        None
    } else {
        match origin
            .restore(&snapshot, &head.revision)
            .map_err(|err| origin_failure(&name, &err))?
        {
            Pushed::Accepted { revision } => Some(revision),
            Pushed::Conflict { current } => {
                return Err(diverged(format!(
                    "{name} changed while restoring (now {}); nothing was restored — run this \
                     again",
                    current.as_deref().unwrap_or("no image")
                )));
            }
        }
    };
    let pulled = pull(file, origin, &Selector::Current, options, args, limits)?;
    let (text, head_now) = match &restored {
        Some(new) => (
            format!(
                "Restored revision {} at {name} as its new revision {new} (a copy-forward: {} \
                 stays in its history). {}",
                snapshot.revision, head.revision, pulled.text
            ),
            new.clone(),
        ),
        None => (
            format!(
                "Revision {} is already {name}'s current one; nothing restored. {}",
                snapshot.revision, pulled.text
            ),
            head.revision.clone(),
        ),
    };
    Ok(Outcome {
        text,
        json: json!({
            "ok": true,
            "restored": restored.is_some(),
            "restoredFrom": snapshot.revision,
            "revision": head_now,
            "superseded": restored.as_ref().map(|_| head.revision.clone()),
            "pull": pulled.json,
        }),
    })
}

/// What the origin moved for this command (issue 21): body bytes sent and received, and
/// whether it went by difference.
fn transfer(origin: &dyn Origin) -> serde_json::Value {
    let traffic = origin.traffic();
    json!({ "bytesSent": traffic.sent, "bytesReceived": traffic.received, "delta": traffic.delta })
}

/// `snug sync origin ORIGIN`: who the origin is and what it holds.
fn origin_info(origin: &str, init: bool, token_file: Option<&Path>) -> Result<Outcome, Failure> {
    let (origin, kind): (Box<dyn Origin>, &str) = match address(origin)? {
        Address::Hub(url) => {
            if init {
                return Err(Failure::usage(format!(
                    "{url} is a hub: --init creates directory origins; a hub takes the first \
                     push as it is"
                )));
            }
            (Box::new(HubOrigin::new(&url, token(token_file)?)), "hub")
        }
        Address::Directory(path) => {
            let dir = DirOrigin::new(path);
            if init {
                std::fs::create_dir_all(dir.dir())
                    .map_err(|e| Failure::io("create", dir.dir(), e))?;
                dir.init()
                    .map_err(|err| origin_failure(&dir.name(), &err))?;
            } else if !dir.dir().is_dir() {
                return Err(Failure::of(
                    &snug_reasons::restore::NO_ORIGIN,
                    format!(
                        "{} is not a directory (pass --init to create it)",
                        dir.dir().display()
                    ),
                ));
            }
            (Box::new(dir), "directory")
        }
    };
    let name = origin.name();
    let (head, identity) = confirm(origin.as_ref())?;
    match head {
        None => Ok(Outcome {
            text: format!("{name}: a {kind} origin ({identity}) with no copy yet"),
            json: json!({ "ok": true, "kind": kind, "origin": name, "identity": identity.as_str(), "revision": null }),
        }),
        Some(head) => Ok(Outcome {
            text: format!(
                "{name}: a {kind} origin ({identity}) at revision {} (sha256 {}, {} bytes)",
                head.revision,
                head.sha256_hex(),
                head.size
            ),
            json: json!({ "ok": true, "kind": kind, "origin": name, "identity": identity.as_str(), "revision": head.revision, "sha256": head.sha256_hex(), "size": head.size }),
        }),
    }
}

#[cfg(test)]
mod tests;
