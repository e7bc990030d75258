//! `snug sync`: the client side of the sync origin (spec §9.3–§9.4, notes §(d) "Sync loop"), one
//! step at a time from the command line.
//!
//! This file is command logic only: arguments, messages, exit codes and the order of steps. The
//! origin is `snug_restore::Origin` (`describe / download / push(bytes, base)`), and `--origin`
//! picks one of its two implementations there:
//! - a hub (`--origin https://hub.example`, `snug_restore::HubOrigin`): what is pushed is always
//!   the secrets-stripped plain export, never a container (§11.3);
//! - a personal origin that is a plain directory (`--origin file:///path` or a path,
//!   `snug_restore::DirOrigin`), so two devices sharing a folder (a USB stick, a synced folder)
//!   get the same conflict rules without any hub. A protected FILE arrives there protected: its
//!   own container resealed over the export (header and slots unchanged, a fresh payload IV), so
//!   both its secrets open it there and a pull installs it protected; plaintext only with
//!   `--plaintext-to-origin`, and the output says so.
//!
//! Pull and bootstrap are `snug-restore`'s install pipeline (the Coven discipline of issue #8):
//! the revision's metadata is read first (a storage version newer than this build is refused
//! before anything is downloaded), the bytes land in a temporary file beside FILE and are checked
//! against the recorded SHA-256, opened, migrated and healed, FILE's local credentials are carried
//! in, and FILE is replaced atomically and bound to the revision in its sidecar. A protected FILE
//! is opened with its secret and the pull resealed in its own container (no new salt or recovery
//! key); the download itself lands beside it as the origin sent it.
//!
//! The push state (last pushed revision and hash) lives in the `<file>.sync.json` sidecar, never in
//! the file (`snug_restore::push_state`). Push is gated by the SHA-256 of the export
//! (`snug_restore::push_image`, the same function pull binds with): an unchanged file sends
//! nothing, not even a request. Divergence (both sides changed since the last sync, or a lost
//! race) is reported with exit code 6 and code `DIVERGED` and never resolved silently: `--force`
//! is the explicit last-writer-wins. One `snug sync` at a time works on a file: another one on the
//! same file meanwhile is refused with exit code 7 and code `SYNC_IN_PROGRESS` (`<file>.sync.lock`).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use serde_json::json;
use snug_container::{Limits, Resealable};
use snug_restore::{
    DirOrigin, HubOrigin, Origin, OriginError, Plan, Pushed, RestoreError, Selector, SnapshotInfo,
    push_state::{self, PushState, SyncLock, SyncLockError},
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

#[derive(Debug, clap::Subcommand)]
pub(crate) enum SyncCommand {
    /// Pushes FILE's export to the origin, if it changed since the last push. Refuses (exit 6)
    /// when the origin moved meanwhile, unless --force.
    Push {
        /// The user database (plain, or protected with its secret).
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// Overwrite the origin's copy even if it changed since this device's last sync
        /// (last writer wins).
        #[arg(long)]
        force: bool,
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
    /// credentials; creates FILE on a new device. Refuses (exit 6) when FILE has unpushed
    /// changes, unless --force; refuses (exit 5) a revision newer than this build before
    /// downloading it.
    Pull {
        /// The user database to update (created if missing).
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// A revision from the origin's history instead of the current one.
        #[arg(long, value_name = "REV")]
        revision: Option<String>,
        /// Replace FILE's unpushed changes with the origin's copy (last writer wins).
        #[arg(long)]
        force: bool,
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
    /// Reports a directory origin's current revision; with --init, creates the directory.
    Origin {
        /// The directory (or file:// URL).
        path: String,
        /// Create the directory if it does not exist.
        #[arg(long)]
        init: bool,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct OriginArgs {
    /// The origin: a hub URL (https://hub.example), file:///path, or a directory path.
    #[arg(long)]
    origin: String,
    /// A file holding the hub's bearer token. Also: SNUG_TOKEN.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

/// Runs a sync command.
pub(crate) fn run(command: SyncCommand, limits: &Limits) -> Result<Outcome, Failure> {
    // Push, pull and bootstrap each read FILE and its sidecar and then write one or both; two at
    // once on the same file could leave one's file bound to the other's revision.
    let _lock = match &command {
        SyncCommand::Push { file, .. }
        | SyncCommand::Pull { file, .. }
        | SyncCommand::Bootstrap { file, .. } => Some(lock_local(file)?),
        SyncCommand::Origin { .. } => None,
    };
    match command {
        SyncCommand::Push {
            file,
            origin,
            force,
            include_secrets,
            plaintext_to_origin,
            secrets,
        } => push(
            &file,
            open_origin(&origin)?.as_ref(),
            PushOptions {
                force,
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
            secrets,
        } => {
            let options = snug_restore::Options {
                force,
                only_if_absent: false,
            };
            let origin = open_origin(&origin)?;
            pull(
                &file,
                origin.as_ref(),
                selector(revision),
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
            };
            let origin = open_origin(&origin)?;
            pull(
                &file,
                origin.as_ref(),
                selector(revision),
                options,
                &secrets,
                limits,
            )
        }
        SyncCommand::Origin { path, init } => origin_info(&path, init),
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
    Failure::new(Exit::Diverged, "DIVERGED", message)
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
fn registry_exit(reason: &str) -> Exit {
    match snug_reasons::find(reason).map(|reason| reason.exit) {
        Some(snug_reasons::CliExit::Always(exit)) => exit,
        _ => Exit::Other,
    }
}

/// An origin's failure as this command's: the code is the origin error's stable reason, and the
/// message names the origin.
fn origin_failure(origin: &str, err: &OriginError) -> Failure {
    // One word, one exit: a code the origin passes on (a hub's refusal of the pushed file,
    // `SCHEMA_TOO_NEW`, a directory's `NO_ORIGIN`) exits as it does wherever the CLI finds it.
    let exit = registry_exit(err.reason());
    // How to fix it from this command line.
    let hint = match err {
        OriginError::Unauthorized { .. } => "; set SNUG_TOKEN or --token-file".to_owned(),
        OriginError::NoOrigin { .. } => format!(" (snug sync origin {origin} --init)"),
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
    Failure::new(exit, err.reason(), with_causes(&err))
}

/// The origin's current revision, or `None` when it holds no copy yet.
fn head(origin: &dyn Origin) -> Result<Option<SnapshotInfo>, Failure> {
    origin
        .head()
        .map_err(|err| origin_failure(&origin.name(), &err))
}

fn open_origin(args: &OriginArgs) -> Result<Box<dyn Origin>, Failure> {
    let origin = args.origin.trim();
    if origin.starts_with("http://") || origin.starts_with("https://") {
        let token = match &args.token_file {
            Some(path) => {
                Some(files::read(path).map(|b| String::from_utf8_lossy(&b).trim().to_owned())?)
            }
            None => std::env::var("SNUG_TOKEN")
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        };
        return Ok(Box::new(HubOrigin::new(origin, token)));
    }
    Ok(Box::new(DirOrigin::new(dir_path(origin)?)))
}

fn dir_path(origin: &str) -> Result<PathBuf, Failure> {
    match origin.strip_prefix("file://") {
        Some(path) if path.starts_with('/') => Ok(PathBuf::from(path)),
        Some(_) => Err(Failure::usage(format!(
            "{origin}: a file origin is file:///absolute/path"
        ))),
        None if origin.contains("://") => Err(Failure::usage(format!(
            "{origin}: origins are http(s)://, file:// or a directory path"
        ))),
        None => Ok(PathBuf::from(origin)),
    }
}

/// How `snug sync push` was asked to push.
#[derive(Debug, Clone, Copy)]
struct PushOptions {
    force: bool,
    include_secrets: bool,
    plaintext_to_origin: bool,
}

/// Reads FILE (a protected one with its secret, through `protected::read`) and returns what a push
/// sends: the export, plain, secrets stripped unless the origin takes them and the user asked,
/// and for a protected FILE what reseals it in FILE's own container.
fn export_for_push(
    file: &Path,
    include_secrets: bool,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<(snug_restore::PushImage, Option<Resealable>), Failure> {
    let unsealed = protected::read(file, args, limits)?;
    let plaintext = zeroize::Zeroizing::new(unsealed.plaintext);
    let image =
        snug_restore::push_image(&plaintext, include_secrets, clock()).map_err(
            |err| match err {
                snug_restore::GateError::Open(err) => Failure::from(err),
                snug_restore::GateError::Export(err) => Failure::from(err),
            },
        )?;
    Ok((image, unsealed.seal))
}

/// `snug sync push FILE --origin O`.
fn push(
    file: &Path,
    origin: &dyn Origin,
    options: PushOptions,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let PushOptions {
        force,
        include_secrets,
        plaintext_to_origin,
    } = options;
    if include_secrets && !origin.is_personal() {
        return Err(Failure::usage(
            "--include-secrets is for directory origins: a hub origin holds the secrets-stripped copy only (§11.3)",
        ));
    }
    if plaintext_to_origin && !origin.is_personal() {
        return Err(Failure::usage(
            "--plaintext-to-origin is for directory origins: a hub origin always holds the secrets-stripped plaintext (§11.3)",
        ));
    }
    let (
        snug_restore::PushImage {
            bytes: image,
            sha256: hash,
        },
        sealed,
    ) = export_for_push(file, include_secrets, args, limits)?;
    // A personal origin receives a protected file as it is protected (§11.3): the push image
    // resealed in FILE's own container, header and slots unchanged and a fresh payload IV, so
    // both secrets open it there. A hub holds the secrets-stripped plaintext, and a personal
    // origin plaintext only when asked. The gate's hash stays the plaintext image's, so a
    // reseal (a new IV every time) is never mistaken for a change.
    let was_protected = sealed.is_some();
    let (image, protected) = match sealed {
        Some(sealed) if origin.is_personal() && !plaintext_to_origin => {
            (sealed.reseal(image, limits)?, true)
        }
        _ => (image, false),
    };
    let plaintext_to_origin = was_protected && !protected && origin.is_personal();
    let plaintext_note = if plaintext_to_origin {
        "; sent in plaintext (--plaintext-to-origin): the copy at the origin is not protected"
    } else if protected {
        "; protected: resealed in the file's own container, so its passphrase and recovery key open it there"
    } else {
        ""
    };
    let state = push_state::load(file).map_err(state_failure)?;
    // A legacy backup has no push state (§10): it is compared with the origin afresh every time,
    // like a file that never synced, and nothing is recorded for it.
    let backup = snug_schema::resolve_given(file).standing == snug_schema::Standing::Backup;
    let unchanged = state.last_pushed_hash.as_deref() == Some(hash.as_str());
    if unchanged && !force {
        // The gate: nothing changed since the last push, so nothing is sent, not even a request.
        return Ok(Outcome {
            text: format!(
                "{} is unchanged since the last push (revision {}); nothing pushed",
                file.display(),
                state.last_pushed_revision.as_deref().unwrap_or("?")
            ),
            json: json!({ "ok": true, "pushed": false, "reason": "UNCHANGED", "revision": state.last_pushed_revision }),
        });
    }
    let remote = head(origin)?;
    let base = match &remote {
        None => None,
        Some(remote) if state.last_pushed_revision.as_deref() == Some(remote.revision.as_str()) => {
            Some(remote.revision.clone())
        }
        Some(remote) if remote.sha256_hex() == hash => {
            // The origin already holds exactly these bytes (pushed from elsewhere, or a push whose
            // answer was lost): adopt its revision instead of writing it again.
            if !backup {
                save_state(file, &remote.revision, &hash)?;
            }
            return Ok(Outcome {
                text: format!(
                    "{} already holds this file as revision {}; nothing pushed",
                    origin.name(),
                    remote.revision
                ),
                json: json!({ "ok": true, "pushed": false, "reason": "ALREADY_AT_ORIGIN", "revision": remote.revision }),
            });
        }
        Some(remote) if force => Some(remote.revision.clone()),
        Some(remote) => {
            let since = state
                .last_pushed_revision
                .as_deref()
                .map_or("this device never synced with it".to_owned(), |r| {
                    format!("this device last synced revision {r}")
                });
            return Err(diverged(format!(
                "{} moved to revision {} ({since}) and {} changed too; pull to get the origin's copy, or push --force to overwrite it",
                origin.name(),
                remote.revision,
                file.display()
            )));
        }
    };
    // The manifest of the base as this device last synced it lets a hub take only the changed
    // pages without first hearing every page of the new image (issue 21).
    // They must be the pages of the origin's copy of the base: its recorded SHA-256 says so.
    let base_pages = match (&base, &remote) {
        (Some(base), Some(remote)) if !backup => {
            push_state::load_pages(file, base, &remote.sha256_hex())
        }
        _ => None,
    };
    // The new image's manifest, kept for the next push, is made once and serves this push too.
    let pages = (!backup && !protected)
        .then(|| snug_delta::Manifest::with_shapes(&image, snug_delta::page_size_of(&image)).ok())
        .flatten();
    let pushed = origin
        .push_from(&image, base.as_deref(), base_pages.as_ref(), pages.as_ref())
        .map_err(|err| origin_failure(&origin.name(), &err))?;
    match pushed {
        Pushed::Accepted { revision } => {
            let note = if backup {
                "; it is the backup beside user.snug, so no push state was recorded for it"
            } else {
                save_state(file, &revision, &hash)?;
                if let Some(pages) = &pages {
                    // A cache: a push that cannot record it has still landed.
                    let _ = push_state::save_manifest(file, &revision, pages);
                }
                ""
            };
            Ok(Outcome {
                text: format!(
                    "Pushed {} to {} as revision {revision} ({} bytes){plaintext_note}{note}",
                    file.display(),
                    origin.name(),
                    image.len()
                ),
                json: json!({ "ok": true, "pushed": true, "revision": revision, "length": image.len(), "sha256": hash, "forced": force && base.is_some(), "recorded": !backup, "protected": protected, "plaintextToOrigin": plaintext_to_origin, "transfer": transfer(origin) }),
            })
        }
        Pushed::Conflict { current } => Err(diverged(format!(
            "{} changed while pushing (now {}); nothing was overwritten — pull, or push --force",
            origin.name(),
            current.as_deref().unwrap_or("no image")
        ))),
    }
}

fn save_state(file: &Path, revision: &str, hash: &str) -> Result<(), Failure> {
    let state = PushState {
        last_pushed_revision: Some(revision.to_owned()),
        last_pushed_hash: Some(hash.to_owned()),
        last_sync_at: Some(SystemClock.timestamp()),
    };
    push_state::save(file, &state).map_err(state_failure)?;
    Ok(())
}

/// `snug sync pull FILE --origin O` and `snug sync bootstrap FILE --origin O`: the install
/// pipeline, step by step, with a progress bar while the bytes arrive.
fn pull(
    file: &Path,
    origin: &dyn Origin,
    selector: Selector,
    options: snug_restore::Options,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let name = origin.name();
    let fail = |err| restore_failure(&name, err);
    // A protected FILE is refused before the origin is asked anything, so the secret is asked
    // for only then, and the same secret opens a protected revision.
    let mut secrets = None;
    let planned = match snug_restore::prepare(origin, file, &selector, options, clock()) {
        Err(RestoreError::Protected { .. }) => {
            let given = secrets.insert(secrets::opening_secrets(args)?);
            let unlock = snug_restore::Unlock {
                secrets: given,
                limits,
            };
            snug_restore::prepare_unlocking(origin, file, &selector, options, Some(unlock), clock())
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
        // A cache: a pull that cannot record it has still landed.
        let _ = push_state::save_pages(&done.destination, &done.revision, &bytes);
    }
    // The file written: FILE, or `user.snug` when FILE stood for a legacy file (§10 adoption).
    let file = done.destination.as_path();
    let mut text = if done.bootstrapped {
        format!(
            "Created {} from revision {} of {name} ({} bytes)",
            file.display(),
            done.revision,
            done.length
        )
    } else {
        format!(
            "Pulled revision {} from {name} into {} ({} bytes, {} local credential(s) kept){}",
            done.revision,
            file.display(),
            done.length,
            done.secrets_kept,
            if done.replaced_local_changes {
                "; local changes were replaced (--force)"
            } else {
                ""
            }
        )
    };
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
            "revision": done.revision,
            "sha256": done.sha256,
            "downloaded": done.downloaded,
            "length": done.length,
            "storageVersion": done.found_version,
            "migrated": done.migrated,
            "secretsKept": done.secrets_kept,
            "forced": done.replaced_local_changes,
            "bootstrapped": done.bootstrapped,
            "protected": done.protected,
            "transfer": transfer(origin),
        }),
    })
}

/// What the origin moved for this command (issue 21): body bytes sent and received, and
/// whether it went by difference.
fn transfer(origin: &dyn Origin) -> serde_json::Value {
    let traffic = origin.traffic();
    json!({ "bytesSent": traffic.sent, "bytesReceived": traffic.received, "delta": traffic.delta })
}

/// `snug sync origin PATH`.
fn origin_info(path: &str, init: bool) -> Result<Outcome, Failure> {
    let dir = DirOrigin::new(dir_path(path)?);
    if init {
        std::fs::create_dir_all(dir.dir()).map_err(|e| Failure::io("create", dir.dir(), e))?;
    } else if !dir.dir().is_dir() {
        return Err(Failure::new(
            Exit::Other,
            "NO_ORIGIN",
            format!(
                "{} is not a directory (pass --init to create it)",
                dir.dir().display()
            ),
        ));
    }
    let path = dir.dir().to_owned();
    match head(&dir)? {
        None => Ok(Outcome {
            text: format!("{}: a directory origin with no copy yet", path.display()),
            json: json!({ "ok": true, "kind": "directory", "path": path, "revision": null }),
        }),
        Some(remote) => Ok(Outcome {
            text: format!(
                "{}: revision {} (sha256 {})",
                path.display(),
                remote.revision,
                remote.sha256_hex()
            ),
            json: json!({ "ok": true, "kind": "directory", "path": path, "revision": remote.revision, "sha256": remote.sha256_hex() }),
        }),
    }
}

#[cfg(test)]
mod tests;
