//! `snug sync`: the client side of the sync origin (spec §9.3–§9.4, notes §(d) "Sync loop"), one
//! step at a time from the command line.
//!
//! Two kinds of origin share one contract (`info / pull / push(bytes, base)`):
//! - a hub (`--origin https://hub.example`): `GET`/`PUT /userdb` with revision compare-and-swap;
//!   what is pushed is always the secrets-stripped plain export, never a container (§11.3);
//! - a personal origin that is a plain directory (`--origin file:///path` or a path): `user.snug`
//!   beside `user.snug.rev`, compare-and-swap under a lock file, so two devices sharing a folder
//!   (a USB stick, a synced folder) get the same conflict rules without any hub.
//!
//! The push state (last pushed revision and hash) lives in the `<file>.sync.json` sidecar, never in
//! the file (snug-materialize's `push_state`). Push is gated by the SHA-256 of the export: an
//! unchanged file sends nothing, not even a request. Divergence (both sides changed since the
//! last sync, or a lost race) is reported with exit code 6 and code `DIVERGED` and never resolved
//! silently: `--force` is the explicit last-writer-wins.

use std::{
    fs::File,
    io::Read as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use base64::Engine as _;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use snug_container::Limits;
use snug_materialize::push_state::{self, PushState};
use snug_schema::{ExportOptions, FileFormat, ImportError, ImportOptions, SystemClock, UserDb};

use crate::{
    Outcome,
    failure::{Exit, Failure},
    files,
    secrets::{self, SecretArgs},
};

/// The largest image a pull accepts (MAX_USERDB_BYTES).
const MAX_IMAGE: u64 = snug_schema::MAX_USERDB_BYTES;

/// The image and revision file names of a directory origin.
const DIR_IMAGE: &str = "user.snug";
const DIR_REVISION: &str = "user.snug.rev";
const DIR_LOCK: &str = "user.snug.lock";

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
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Pulls the origin's copy into FILE, keeping FILE's own credentials. Refuses (exit 6) when
    /// FILE has unpushed changes and the origin moved too, unless --force.
    Pull {
        /// The user database to update (created if missing).
        file: PathBuf,
        #[command(flatten)]
        origin: OriginArgs,
        /// Replace FILE's changes with the origin's copy (last writer wins).
        #[arg(long)]
        force: bool,
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
    match command {
        SyncCommand::Push { file, origin, force, include_secrets, secrets } => {
            push(&file, &open_origin(&origin)?, force, include_secrets, &secrets, limits)
        }
        SyncCommand::Pull { file, origin, force } => pull(&file, &open_origin(&origin)?, force),
        SyncCommand::Origin { path, init } => origin_info(&path, init),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Now as RFC 3339 UTC (the sidecar's `lastSyncAt`).
fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

fn diverged(message: impl Into<String>) -> Failure {
    Failure::new(Exit::Diverged, "DIVERGED", message)
}

fn state_failure(err: push_state::PushStateError) -> Failure {
    Failure::new(Exit::Other, err.reason(), format!("{err}: {}", std::error::Error::source(&err).map(|s| s.to_string()).unwrap_or_default()))
}

fn import_failure(err: ImportError) -> Failure {
    let exit = match &err {
        ImportError::SchemaTooNew { .. } => Exit::Unsupported,
        ImportError::Locked => Exit::Locked,
        ImportError::TooLarge { .. } => Exit::Other,
        _ => Exit::Corrupt,
    };
    Failure::new(exit, err.reason(), format!("the origin's copy was refused: {err}"))
}

/// The origin's current revision, as `head` reports it.
#[derive(Debug, Clone)]
struct Remote {
    revision: String,
    /// SHA-256 hex of the origin's bytes, when the origin says.
    sha256: Option<String>,
}

/// What a pull found.
enum Pulled {
    /// The origin holds nothing.
    Empty,
    /// The origin's revision is the one asked about.
    NotModified,
    /// The origin's bytes, verified against its digest.
    Image { revision: String, bytes: Vec<u8> },
}

/// What a push did.
enum Pushed {
    Accepted { revision: String },
    /// The origin's revision was not the base: somebody else wrote first.
    Conflict { current: Option<String> },
}

/// A sync origin (the reference's SyncProvider contract).
enum Origin {
    Hub(HubOrigin),
    Directory(DirOrigin),
}

impl Origin {
    fn describe(&self) -> String {
        match self {
            Origin::Hub(hub) => hub.url.clone(),
            Origin::Directory(dir) => dir.dir.display().to_string(),
        }
    }

    /// Hubs hold the secrets-stripped plaintext (§9, §11.3); personal origins may carry secrets
    /// on explicit opt-in.
    fn secrets_allowed(&self) -> bool {
        matches!(self, Origin::Directory(_))
    }

    fn head(&self) -> Result<Option<Remote>, Failure> {
        match self {
            Origin::Hub(hub) => hub.head(),
            Origin::Directory(dir) => dir.head(),
        }
    }

    fn pull(&self, known: Option<&str>) -> Result<Pulled, Failure> {
        match self {
            Origin::Hub(hub) => hub.pull(known),
            Origin::Directory(dir) => dir.pull(known),
        }
    }

    fn push(&self, bytes: &[u8], base: Option<&str>) -> Result<Pushed, Failure> {
        match self {
            Origin::Hub(hub) => hub.push(bytes, base),
            Origin::Directory(dir) => dir.push(bytes, base),
        }
    }
}

fn open_origin(args: &OriginArgs) -> Result<Origin, Failure> {
    let origin = args.origin.trim();
    if origin.starts_with("http://") || origin.starts_with("https://") {
        let token = match &args.token_file {
            Some(path) => Some(files::read(path).map(|b| String::from_utf8_lossy(&b).trim().to_owned())?),
            None => std::env::var("SNUG_TOKEN").ok().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()),
        };
        return Ok(Origin::Hub(HubOrigin::new(origin, token)));
    }
    Ok(Origin::Directory(DirOrigin::new(dir_path(origin)?)))
}

fn dir_path(origin: &str) -> Result<PathBuf, Failure> {
    match origin.strip_prefix("file://") {
        Some(path) if path.starts_with('/') => Ok(PathBuf::from(path)),
        Some(_) => Err(Failure::usage(format!("{origin}: a file origin is file:///absolute/path"))),
        None if origin.contains("://") => Err(Failure::usage(format!("{origin}: origins are http(s)://, file:// or a directory path"))),
        None => Ok(PathBuf::from(origin)),
    }
}

/// Reads FILE and returns the bytes a push sends: the export, plain, secrets stripped unless the
/// origin takes them and the user asked. A protected FILE is opened with its secret.
fn export_for_push(file: &Path, include_secrets: bool, args: &SecretArgs, limits: &Limits) -> Result<Vec<u8>, Failure> {
    let bytes = files::read(file)?;
    let plaintext = match snug_schema::detect_format(&bytes) {
        FileFormat::Sqlite => bytes,
        FileFormat::Protected => {
            snug_container::inspect(&bytes, limits)?;
            let secrets = secrets::opening_secrets(args)?;
            snug_container::open_owned(bytes, &secrets, limits)?.plaintext
        }
        FileFormat::Unknown => return Err(Failure::from(snug_schema::OpenError::NotSqlite)),
    };
    let (mut db, _) = UserDb::from_bytes(&plaintext, Arc::new(SystemClock))?;
    let (image, _) = snug_schema::export_bytes(&mut db, ExportOptions { include_secrets })?;
    Ok(image)
}

/// `snug sync push FILE --origin O`.
fn push(file: &Path, origin: &Origin, force: bool, include_secrets: bool, args: &SecretArgs, limits: &Limits) -> Result<Outcome, Failure> {
    if include_secrets && !origin.secrets_allowed() {
        return Err(Failure::usage("--include-secrets is for directory origins: a hub origin holds the secrets-stripped copy only (§11.3)"));
    }
    let image = export_for_push(file, include_secrets, args, limits)?;
    let hash = sha256_hex(&image);
    let state = push_state::load(file).map_err(state_failure)?;
    let unchanged = state.last_pushed_hash.as_deref() == Some(hash.as_str());
    if unchanged && !force {
        // The gate: nothing changed since the last push, so nothing is sent, not even a request.
        return Ok(Outcome {
            text: format!("{} is unchanged since the last push (revision {}); nothing pushed", file.display(), state.last_pushed_revision.as_deref().unwrap_or("?")),
            json: json!({ "ok": true, "pushed": false, "reason": "UNCHANGED", "revision": state.last_pushed_revision }),
        });
    }
    let remote = origin.head()?;
    let base = match &remote {
        None => None,
        Some(remote) if state.last_pushed_revision.as_deref() == Some(remote.revision.as_str()) => Some(remote.revision.clone()),
        Some(remote) if remote.sha256.as_deref() == Some(hash.as_str()) => {
            // The origin already holds exactly these bytes (pushed from elsewhere, or a push whose
            // answer was lost): adopt its revision instead of writing it again.
            save_state(file, &remote.revision, &hash)?;
            return Ok(Outcome {
                text: format!("{} already holds this file as revision {}; nothing pushed", origin.describe(), remote.revision),
                json: json!({ "ok": true, "pushed": false, "reason": "ALREADY_AT_ORIGIN", "revision": remote.revision }),
            });
        }
        Some(remote) if force => Some(remote.revision.clone()),
        Some(remote) => {
            let since = state
                .last_pushed_revision
                .as_deref()
                .map_or("this device never synced with it".to_owned(), |r| format!("this device last synced revision {r}"));
            return Err(diverged(format!(
                "{} moved to revision {} ({since}) and {} changed too; pull to get the origin's copy, or push --force to overwrite it",
                origin.describe(),
                remote.revision,
                file.display()
            )));
        }
    };
    match origin.push(&image, base.as_deref())? {
        Pushed::Accepted { revision } => {
            save_state(file, &revision, &hash)?;
            Ok(Outcome {
                text: format!("Pushed {} to {} as revision {revision} ({} bytes)", file.display(), origin.describe(), image.len()),
                json: json!({ "ok": true, "pushed": true, "revision": revision, "length": image.len(), "sha256": hash, "forced": force && base.is_some() }),
            })
        }
        Pushed::Conflict { current } => Err(diverged(format!(
            "{} changed while pushing (now {}); nothing was overwritten — pull, or push --force",
            origin.describe(),
            current.as_deref().unwrap_or("no image")
        ))),
    }
}

fn save_state(file: &Path, revision: &str, hash: &str) -> Result<(), Failure> {
    let state = PushState {
        last_pushed_revision: Some(revision.to_owned()),
        last_pushed_hash: Some(hash.to_owned()),
        last_sync_at: Some(now_rfc3339()),
    };
    push_state::save(file, &state).map_err(state_failure)?;
    Ok(())
}

/// `snug sync pull FILE --origin O`.
fn pull(file: &Path, origin: &Origin, force: bool) -> Result<Outcome, Failure> {
    let state = push_state::load(file).map_err(state_failure)?;
    let local = match std::fs::read(file) {
        Ok(bytes) => Some(bytes),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(Failure::io("read", file, err)),
    };
    let mut local_db = match &local {
        None => None,
        Some(bytes) => match snug_schema::detect_format(bytes) {
            FileFormat::Sqlite => Some(UserDb::from_bytes(bytes, Arc::new(SystemClock))?.0),
            FileFormat::Protected => {
                return Err(Failure::new(
                    Exit::Locked,
                    "PROTECTED",
                    format!("{} is protected; pull into a plain file (snug unlock it first), then protect it again", file.display()),
                ));
            }
            FileFormat::Unknown => return Err(Failure::from(snug_schema::OpenError::NotSqlite)),
        },
    };
    // What a push would send now, to tell whether the local file changed since the last sync.
    let local_hash = match local_db {
        Some(ref mut db) => Some(export_hash(db)?),
        None => None,
    };
    let local_changed = local_hash.is_some() && local_hash != state.last_pushed_hash;
    let known = if local.is_some() { state.last_pushed_revision.as_deref() } else { None };
    let (revision, bytes) = match origin.pull(known)? {
        Pulled::Empty => {
            return Err(Failure::new(Exit::Other, "SYNC_ORIGIN_EMPTY", format!("{} holds no copy yet; push one first", origin.describe())));
        }
        Pulled::NotModified => {
            let note = if local_changed { "; the local file has unpushed changes (snug sync push)" } else { "" };
            return Ok(Outcome {
                text: format!("{} is up to date with {} (revision {}){note}", file.display(), origin.describe(), known.unwrap_or("?")),
                json: json!({ "ok": true, "pulled": false, "reason": "UP_TO_DATE", "revision": known, "localChanges": local_changed }),
            });
        }
        Pulled::Image { revision, bytes } => (revision, bytes),
    };
    if local_changed && !force && local_hash.as_deref() != Some(sha256_hex(&bytes).as_str()) {
        let since = state
            .last_pushed_revision
            .as_deref()
            .map_or("it was never synced with this origin".to_owned(), |r| format!("its last sync was revision {r}"));
        return Err(diverged(format!(
            "{} has changes that were never pushed ({since}) and {} moved to revision {revision}; push --force to keep the local file, or pull --force to take the origin's",
            file.display(),
            origin.describe()
        )));
    }
    // The origin's copy is imported as from the user's own origin (runtime contracts kept), and
    // the local credentials are put back: a hub copy never has any, and local wins (reference
    // pull-merge).
    let options = ImportOptions { secrets: None, trusted_origin: true, container_limits: Limits::default() };
    let (mut merged, _) = snug_schema::import(&bytes, local_db.as_ref(), &options, Arc::new(SystemClock)).map_err(import_failure)?;
    let mut kept = 0usize;
    if let Some(local_db) = &local_db {
        for key in local_db.secret_keys().map_err(kv_failure)? {
            if let Some(value) = local_db.secret(&key).map_err(kv_failure)? {
                merged.set_secret(&key, &value).map_err(kv_failure)?;
                kept += 1;
            }
        }
    }
    let image = merged.to_bytes().map_err(|err| Failure::new(Exit::Other, "STORAGE", format!("sqlite failed: {err}")))?;
    // Re-anchor on what a push of the merged file would send, so an untouched file stays gated.
    let hash = export_hash(&mut merged)?;
    files::write(file, &image)?;
    save_state(file, &revision, &hash)?;
    Ok(Outcome {
        text: format!(
            "Pulled revision {revision} from {} into {} ({} bytes, {kept} local credential(s) kept){}",
            origin.describe(),
            file.display(),
            image.len(),
            if local_changed { "; local changes were replaced (--force)" } else { "" }
        ),
        json: json!({ "ok": true, "pulled": true, "revision": revision, "length": image.len(), "secretsKept": kept, "forced": local_changed }),
    })
}

fn kv_failure(err: snug_schema::KvError) -> Failure {
    Failure::new(Exit::Other, err.reason(), err.to_string())
}

/// SHA-256 of the default export of `db` (what `push` would send to a hub), computed on a copy
/// so the caller's database is left exactly as it was.
fn export_hash(db: &mut UserDb) -> Result<String, Failure> {
    let bytes = db.to_bytes().map_err(|err| Failure::new(Exit::Other, "STORAGE", format!("sqlite failed: {err}")))?;
    let mut copy = UserDb::from_bytes(&bytes, Arc::new(SystemClock))?.0;
    drop(bytes);
    let (export, _) = snug_schema::export_bytes(&mut copy, ExportOptions { include_secrets: false })?;
    Ok(sha256_hex(&export))
}

/// `snug sync origin PATH`.
fn origin_info(path: &str, init: bool) -> Result<Outcome, Failure> {
    let dir = DirOrigin::new(dir_path(path)?);
    if init {
        std::fs::create_dir_all(&dir.dir).map_err(|e| Failure::io("create", &dir.dir, e))?;
    } else if !dir.dir.is_dir() {
        return Err(Failure::new(Exit::Other, "NO_ORIGIN", format!("{} is not a directory (pass --init to create it)", dir.dir.display())));
    }
    match dir.head()? {
        None => Ok(Outcome {
            text: format!("{}: a directory origin with no copy yet", dir.dir.display()),
            json: json!({ "ok": true, "kind": "directory", "path": dir.dir, "revision": null }),
        }),
        Some(remote) => Ok(Outcome {
            text: format!("{}: revision {} (sha256 {})", dir.dir.display(), remote.revision, remote.sha256.as_deref().unwrap_or("?")),
            json: json!({ "ok": true, "kind": "directory", "path": dir.dir, "revision": remote.revision, "sha256": remote.sha256 }),
        }),
    }
}

/// A hub origin over HTTP.
struct HubOrigin {
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// The JSON error codes of a hub that are passed on as this command's code (the same words as
/// the hub's, so scripts need one vocabulary).
const HUB_CODES: &[&str] = &[
    "NOT_SQLITE", "MALFORMED", "NOT_A_USER_DATABASE", "HOSTILE_SCHEMA", "SCHEMA_TOO_NEW", "CONTAINER_NOT_ACCEPTED",
    "SECRETS_PRESENT", "USERDB_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE", "PRECONDITION_REQUIRED", "SERVICE_UNAVAILABLE",
    "STORAGE_UNAVAILABLE", "OVERLOADED",
];

impl HubOrigin {
    fn new(origin: &str, token: Option<String>) -> Self {
        let base = origin.trim_end_matches('/');
        let url = if base.ends_with("/userdb") { base.to_owned() } else { format!("{base}/userdb") };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // Every status is an answer to interpret here, not an error.
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(300)))
            .build()
            .into();
        Self { url, token, agent }
    }

    fn authorize<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(token) => request.header("authorization", format!("Bearer {token}")),
            None => request,
        }
    }

    fn network(&self, err: ureq::Error) -> Failure {
        Failure::new(Exit::Other, "SYNC_NETWORK", format!("cannot reach {}: {err}", self.url))
    }

    /// Turns an unexpected answer into a failure, keeping the hub's code where it is one of ours.
    fn refused(&self, status: u16, body: &str) -> Failure {
        if status == 401 || status == 403 {
            return Failure::new(Exit::Other, "SYNC_AUTH", format!("{} refused the credentials ({status}); set SNUG_TOKEN or --token-file", self.url));
        }
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let code = parsed.as_ref().and_then(|v| v["code"].as_str()).unwrap_or("");
        let message = parsed.as_ref().and_then(|v| v["message"].as_str()).unwrap_or(body);
        let code = HUB_CODES.iter().find(|c| **c == code).copied().unwrap_or("SYNC_HTTP");
        let exit = if code == "SCHEMA_TOO_NEW" { Exit::Unsupported } else { Exit::Other };
        Failure::new(exit, code, format!("{} answered {status}: {message}", self.url))
    }

    fn etag(response: &ureq::http::Response<ureq::Body>) -> Option<String> {
        let value = response.headers().get("etag")?.to_str().ok()?.trim();
        let value = value.strip_prefix("W/").unwrap_or(value);
        Some(value.trim_matches('"').to_owned()).filter(|v| !v.is_empty())
    }

    /// The SHA-256 hex from `Repr-Digest: sha-256=:<base64>:`.
    fn digest(response: &ureq::http::Response<ureq::Body>) -> Option<String> {
        let value = response.headers().get("repr-digest")?.to_str().ok()?;
        let encoded = value.split(',').map(str::trim).find_map(|item| item.strip_prefix("sha-256=:"))?.strip_suffix(':')?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
        (bytes.len() == 32).then(|| hex::encode(bytes))
    }

    fn head(&self) -> Result<Option<Remote>, Failure> {
        let response = self.authorize(self.agent.head(&self.url)).call().map_err(|e| self.network(e))?;
        match response.status().as_u16() {
            200 => {
                let revision = Self::etag(&response).ok_or_else(|| bad_response(&self.url, "an answer without an ETag"))?;
                Ok(Some(Remote { revision, sha256: Self::digest(&response) }))
            }
            404 => Ok(None),
            status => Err(self.refused(status, "")),
        }
    }

    fn pull(&self, known: Option<&str>) -> Result<Pulled, Failure> {
        let mut request = self.authorize(self.agent.get(&self.url));
        if let Some(known) = known {
            request = request.header("if-none-match", format!("\"{known}\""));
        }
        let mut response = request.call().map_err(|e| self.network(e))?;
        let status = response.status().as_u16();
        match status {
            200 => {
                let revision = Self::etag(&response).ok_or_else(|| bad_response(&self.url, "an image without an ETag"))?;
                let digest = Self::digest(&response);
                let bytes = response
                    .body_mut()
                    .with_config()
                    .limit(MAX_IMAGE)
                    .read_to_vec()
                    .map_err(|e| self.network(e))?;
                // End-to-end check: the bytes are the ones the origin hashed when it accepted them.
                if let Some(digest) = digest
                    && digest != sha256_hex(&bytes)
                {
                    return Err(bad_response(&self.url, "bytes that do not match their Repr-Digest"));
                }
                if bytes.is_empty() {
                    return Ok(Pulled::Empty);
                }
                Ok(Pulled::Image { revision, bytes })
            }
            304 => Ok(Pulled::NotModified),
            404 | 204 => Ok(Pulled::Empty),
            status => {
                let body = response.body_mut().read_to_string().unwrap_or_default();
                Err(self.refused(status, &body))
            }
        }
    }

    fn push(&self, bytes: &[u8], base: Option<&str>) -> Result<Pushed, Failure> {
        let request = self.authorize(self.agent.put(&self.url)).header("content-type", "application/octet-stream");
        let request = match base {
            Some(base) => request.header("if-match", format!("\"{base}\"")),
            None => request.header("if-none-match", "*"),
        };
        let mut response = request.send(bytes).map_err(|e| self.network(e))?;
        match response.status().as_u16() {
            204 | 200 | 201 => {
                let revision = Self::etag(&response).ok_or_else(|| bad_response(&self.url, "an accepted write without an ETag"))?;
                Ok(Pushed::Accepted { revision })
            }
            409 | 412 => {
                let etag = Self::etag(&response);
                let body = response.body_mut().read_to_string().unwrap_or_default();
                let revision = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["revision"].as_str().map(str::to_owned));
                Ok(Pushed::Conflict { current: etag.or(revision) })
            }
            status => {
                let body = response.body_mut().read_to_string().unwrap_or_default();
                Err(self.refused(status, &body))
            }
        }
    }
}

fn bad_response(url: &str, what: &str) -> Failure {
    Failure::new(Exit::Other, "SYNC_BAD_RESPONSE", format!("{url} sent {what}"))
}

/// A personal origin in a plain directory: `user.snug` and `user.snug.rev`, compare-and-swap under
/// an exclusive lock on `user.snug.lock`.
///
/// A push writes the image (atomically) and then the revision file (atomically); the revision file
/// is the commit point and names the image's SHA-256. A push interrupted between the two leaves an
/// image that does not match its revision file: readers report that as `ORIGIN_INCONSISTENT`
/// rather than trusting either, and the interrupted device's retry (same base) completes it.
struct DirOrigin {
    dir: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RevisionFile {
    revision: String,
    sha256: String,
    size: u64,
}

impl DirOrigin {
    fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn lock(&self, exclusive: bool) -> Result<File, Failure> {
        let path = self.dir.join(DIR_LOCK);
        if !self.dir.is_dir() {
            return Err(Failure::new(Exit::Other, "NO_ORIGIN", format!("{} is not a directory (snug sync origin {} --init)", self.dir.display(), self.dir.display())));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Failure::io("open", &path, e))?;
        let locked = if exclusive { file.lock() } else { file.lock_shared() };
        locked.map_err(|e| Failure::io("lock", &path, e))?;
        Ok(file)
    }

    fn current(&self) -> Result<Option<RevisionFile>, Failure> {
        let path = self.dir.join(DIR_REVISION);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|_| Failure::new(Exit::Corrupt, "ORIGIN_INCONSISTENT", format!("{} is not a revision file", path.display()))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                if self.dir.join(DIR_IMAGE).exists() {
                    return Err(Failure::new(
                        Exit::Other,
                        "ORIGIN_INCONSISTENT",
                        format!("{} has {DIR_IMAGE} but no {DIR_REVISION}: a first push was interrupted; push again", self.dir.display()),
                    ));
                }
                Ok(None)
            }
            Err(err) => Err(Failure::io("read", &path, err)),
        }
    }

    fn head(&self) -> Result<Option<Remote>, Failure> {
        if !self.dir.is_dir() {
            return Ok(None);
        }
        let _lock = self.lock(false)?;
        Ok(self.current()?.map(|rev| Remote { revision: rev.revision, sha256: Some(rev.sha256) }))
    }

    fn pull(&self, known: Option<&str>) -> Result<Pulled, Failure> {
        let _lock = self.lock(false)?;
        let Some(rev) = self.current()? else {
            return Ok(Pulled::Empty);
        };
        if known == Some(rev.revision.as_str()) {
            return Ok(Pulled::NotModified);
        }
        let path = self.dir.join(DIR_IMAGE);
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| f.take(MAX_IMAGE + 1).read_to_end(&mut bytes))
            .map_err(|e| Failure::io("read", &path, e))?;
        if sha256_hex(&bytes) != rev.sha256 {
            return Err(Failure::new(
                Exit::Other,
                "ORIGIN_INCONSISTENT",
                format!("{} does not match {DIR_REVISION}: a push was interrupted; retry after it is repeated", path.display()),
            ));
        }
        Ok(Pulled::Image { revision: rev.revision, bytes })
    }

    fn push(&self, bytes: &[u8], base: Option<&str>) -> Result<Pushed, Failure> {
        let _lock = self.lock(true)?;
        let current = match self.current() {
            Ok(current) => current,
            // An interrupted first push left an image and no revision file: a first push may
            // complete it.
            Err(failure) if failure.code == "ORIGIN_INCONSISTENT" && base.is_none() && !self.dir.join(DIR_REVISION).exists() => None,
            Err(failure) => return Err(failure),
        };
        let matches = match (&current, base) {
            (None, None) => true,
            (Some(current), Some(base)) => current.revision == base,
            _ => false,
        };
        if !matches {
            return Ok(Pushed::Conflict { current: current.map(|c| c.revision) });
        }
        let count = current
            .as_ref()
            .and_then(|c| c.revision.strip_prefix('r')?.split('-').next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|_| Failure::new(Exit::Other, "ENTROPY_UNAVAILABLE", "the system random number generator failed"))?;
        let revision = format!("r{}-{}", count + 1, hex::encode(random));
        let image_path = self.dir.join(DIR_IMAGE);
        files::write(&image_path, bytes)?;
        let record = RevisionFile { revision: revision.clone(), sha256: sha256_hex(bytes), size: bytes.len() as u64 };
        let record = serde_json::to_vec_pretty(&record).unwrap_or_default();
        files::write(&self.dir.join(DIR_REVISION), &record)?;
        Ok(Pushed::Accepted { revision })
    }
}
