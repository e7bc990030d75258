//! The install pipeline in three single-use steps: [`prepare`] (select, refuse what this build
//! cannot open, check the destination, never clobber), [`Prepared::download`] (a temporary file
//! in the destination's directory, capped, verified) and [`Downloaded::install`] (open, migrate,
//! carry the local secrets, re-check, replace atomically, bind to the revision).
//!
//! Each step consumes the previous one, so a downloaded image cannot be installed at another
//! path or after another check than the one it was prepared with (Coven's single-use
//! `PreparedSnapshotBootstrap`). Dropping a step at any point removes its temporary file.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Read, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::SystemTime,
};

use sha2::{Digest as _, Sha256};
use snug_container::Resealable;
use snug_files::{TempSibling, sync_parent_dir};
use snug_schema::{
    Clock, FileFormat, ImportOptions, MAX_USERDB_BYTES, STORAGE_VERSION, Standing, UserDb,
};
use zeroize::Zeroizing;

use crate::{
    error::RestoreError,
    gate, keep,
    origin::{
        LocalCopy, Origin, OriginError, OriginId, Selector, SnapshotInfo, header_storage_version,
    },
    push_state::{OriginState, SyncState, sidecar_location},
};

mod installing;

pub use installing::{Downloaded, Installed};

/// How a restore treats the destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Replace local changes that were never pushed (last writer wins). Without it a destination
    /// with such changes is refused as [`RestoreError::Diverged`].
    pub force: bool,
    /// Only create a new file: refuse ([`RestoreError::DestinationExists`]) when the destination
    /// (or the legacy `user.sqlite` it would adopt) exists. A new device's bootstrap.
    pub only_if_absent: bool,
    /// Where the destination has changes the origin lacks, install the revision beside it
    /// instead (`<file name>.origin-<revision>.snug`, carrying the destination's credentials and
    /// protection, with its own sync state) and leave the destination as it is: the way out of
    /// a divergence that loses nothing. Without such changes the pull goes ahead as usual.
    pub keep_both: bool,
}

/// How far a download has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes received so far.
    pub received: u64,
    /// The revision's declared length.
    pub total: u64,
}

/// What [`prepare`] decided.
#[derive(Debug)]
pub enum Plan {
    /// The destination already holds the selected revision; nothing needs downloading.
    UpToDate(UpToDate),
    /// The selected revision is to be downloaded and installed.
    Install(Box<Prepared>),
}

/// The destination already holds the selected revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpToDate {
    /// The revision.
    pub revision: String,
    /// Whether the destination has changes not yet pushed (they stay; push them).
    pub local_changes: bool,
}

/// What one file looked like when it was checked: enough to tell whether anyone wrote it since.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    len: u64,
    modified: Option<SystemTime>,
    /// Device and inode: a file replaced by rename is another file, even with the same bytes.
    file_id: Option<(u64, u64)>,
    sha256: [u8; 32],
}

/// A file as read: its identity and (up to one byte past the cap) its bytes.
struct Observed {
    identity: Identity,
    bytes: Vec<u8>,
}

#[cfg(unix)]
fn file_id(meta: &fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_meta: &fs::Metadata) -> Option<(u64, u64)> {
    None
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> RestoreError {
    let path = path.to_owned();
    move |source| RestoreError::Io {
        action,
        path,
        source,
    }
}

/// Reads `path` if it exists. Reads at most one byte past the cap: a larger file is not a user
/// database, and its identity still differs from any file that is one.
fn observe(path: &Path) -> Result<Option<Observed>, RestoreError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(io_error("read", path)(err)),
    };
    refuse_in_use(path)?;
    let meta = file.metadata().map_err(io_error("read", path))?;
    if meta.is_dir() {
        return Err(RestoreError::IsDirectory {
            path: path.to_owned(),
        });
    }
    let mut bytes = Vec::new();
    Read::by_ref(&mut file)
        .take(MAX_USERDB_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error("read", path))?;
    let identity = Identity {
        len: meta.len(),
        modified: meta.modified().ok(),
        file_id: file_id(&meta),
        sha256: Sha256::digest(&bytes).into(),
    };
    Ok(Some(Observed { identity, bytes }))
}

/// Refuses a file another program has open in WAL mode with a log that holds frames: its bytes
/// alone are not what SQLite reads (a push would send the file without those changes), and a
/// file installed over it would get those frames written into it by the next connection. An
/// empty or absent log is no one's change.
pub fn refuse_in_use(path: &Path) -> Result<(), RestoreError> {
    let wal = snug_schema::wal_path(path);
    match snug_schema::pending_log(path) {
        Ok(None) => Ok(()),
        Ok(Some(wal_bytes)) => Err(RestoreError::InUse {
            path: path.to_owned(),
            wal,
            wal_bytes,
        }),
        Err(err) => Err(io_error("read", &wal)(err)),
    }
}

/// The sidecar as it was seen: where it was read from and its raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SidecarSeen {
    read: Option<PathBuf>,
    bytes: Option<Vec<u8>>,
}

impl SidecarSeen {
    fn observe(destination: &Path) -> Result<Self, RestoreError> {
        let read = sidecar_location(destination).and_then(|sidecar| sidecar.read);
        let bytes = match &read {
            None => None,
            Some(path) => match fs::read(path) {
                Ok(bytes) => Some(bytes),
                Err(err) if err.kind() == io::ErrorKind::NotFound => None,
                Err(err) => return Err(io_error("read", path)(err)),
            },
        };
        Ok(Self { read, bytes })
    }

    /// The sync state, read exactly as `push_state::load` reads it.
    fn state(&self) -> SyncState {
        self.bytes
            .as_deref()
            .map(SyncState::decode)
            .unwrap_or_default()
    }
}

/// The local copy the destination stands for.
struct Local {
    /// The destination, or the legacy `user.sqlite` beside a missing `user.snug` (§10: read it
    /// until `user.snug` exists; never write it).
    read: PathBuf,
    identity: Identity,
    /// The local copy opened in memory: its approved grants guide the import and its secrets
    /// are carried into the new file.
    db: UserDb,
    /// The push gate's hash of the local copy.
    content_hash: String,
    /// The SHA-256 of [`Local::export`], what a push of the local copy would send.
    export_sha256: String,
    /// The local copy's sync copy (what a push would send): the pages a delta pull rebuilds the
    /// revision from (issue 21). Secrets-free, like the revisions it is compared with.
    export: Vec<u8>,
    /// `Some` for a protected local copy: its container (header and wrapped keys kept) and the
    /// file key its secret unwrapped. The installed file is resealed in it.
    seal: Option<Resealable>,
}

/// What opens a protected local copy for [`prepare_unlocking`]: the user's secret, and the
/// container limits (iteration policy, size) it is opened within.
#[derive(Clone, Copy)]
pub struct Unlock<'a> {
    /// The passphrase or recovery key.
    pub secrets: &'a snug_container::Secrets,
    /// The limits the container is opened within.
    pub limits: &'a snug_container::Limits,
}

/// A revision selected and checked against the destination, ready to download. Single use.
pub struct Prepared {
    destination: PathBuf,
    snapshot: SnapshotInfo,
    local: Option<Local>,
    sidecar: SidecarSeen,
    /// The origin's identity and address, whose record the install writes.
    origin: (OriginId, String),
    /// The destination's sync state as prepared (an earlier release's record adopted where it
    /// belongs to this origin), and its record at this origin.
    state: SyncState,
    synced: Option<OriginState>,
    replaces_local_changes: bool,
    /// `Some`: the destination has changes the origin lacks and is left alone; the revision goes
    /// to this path instead (`Options::keep_both`).
    beside: Option<PathBuf>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("destination", &self.destination)
            .field("snapshot", &self.snapshot)
            .field("local", &self.local.as_ref().map(|l| &l.read))
            .field("replaces_local_changes", &self.replaces_local_changes)
            .finish_non_exhaustive()
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A revision token goes into URLs, headers and the sidecar: RFC 9110 entity-tag characters
/// only, and not absurdly long.
fn check_selector(selector: &Selector) -> Result<(), RestoreError> {
    if let Some(revision) = selector.revision() {
        let plausible = !revision.is_empty()
            && revision.len() <= 256
            && revision.bytes().all(|b| b.is_ascii_graphic() && b != b'"');
        if !plausible {
            return Err(RestoreError::InvalidRevision {
                revision: revision.to_owned(),
            });
        }
    }
    Ok(())
}

/// Finds the local copy `destination` stands for and where the install goes, by §10
/// (`snug_schema::resolve_given`): the file itself, or a legacy `user.sqlite` not adopted yet
/// (given as `user.snug` or as itself), which is read and never written: the install creates
/// `user.snug`. A `user.sqlite` beside an existing `user.snug` is the user's backup and refused.
fn locate(destination: &Path) -> Result<(PathBuf, Option<(PathBuf, Observed)>), RestoreError> {
    let given = snug_schema::resolve_given(destination);
    if given.standing == Standing::Backup {
        return Err(RestoreError::LegacyBackup {
            path: destination.to_owned(),
        });
    }
    let local = match given.read {
        None => None,
        Some(read) => observe(&read)?.map(|observed| (read, observed)),
    };
    Ok((given.write, local))
}

/// Opens the local copy as the push gate would, refusing anything that is not a Snug user
/// database; a protected one opens with `unlock` and is refused as [`RestoreError::Protected`]
/// without it.
fn open_local(
    read: PathBuf,
    observed: Observed,
    unlock: Option<Unlock<'_>>,
    clock: Arc<dyn Clock>,
) -> Result<Local, RestoreError> {
    if observed.bytes.len() as u64 > MAX_USERDB_BYTES {
        return Err(RestoreError::NotSnugFile {
            path: read,
            found: "larger than a user database may be",
        });
    }
    let Observed { identity, bytes } = observed;
    let (plaintext, seal) =
        match snug_schema::detect_format(&bytes) {
            FileFormat::Sqlite => (Zeroizing::new(bytes), None),
            FileFormat::Protected => {
                let Some(unlock) = unlock else {
                    return Err(RestoreError::Protected { path: read });
                };
                let (unlocked, seal) = Resealable::open(bytes, unlock.secrets, unlock.limits)
                    .map_err(|source| RestoreError::LocalContainer {
                        path: read.clone(),
                        source,
                    })?;
                (Zeroizing::new(unlocked.plaintext), Some(seal))
            }
            FileFormat::Unknown => {
                return Err(RestoreError::NotSnugFile {
                    path: read,
                    found: "not SQLite",
                });
            }
        };
    let mut db = match UserDb::from_bytes(&plaintext, clock) {
        Ok((db, _)) => db,
        Err(source) => return Err(RestoreError::Unreadable { path: read, source }),
    };
    let image = gate::image_of(&mut db, false)?;
    Ok(Local {
        read,
        identity,
        db,
        content_hash: image.content_hash,
        export_sha256: image.sha256,
        export: image.bytes,
        seal,
    })
}

/// Selects the revision, refuses what this build cannot open (before any download), checks the
/// destination and applies the never-clobber rule.
///
/// Nothing is written: the destination, its sidecar and its directory are only read. A protected
/// destination is refused as [`RestoreError::Protected`] before the origin is asked anything;
/// [`prepare_unlocking`] opens it with its secret.
pub fn prepare(
    origin: &dyn Origin,
    destination: &Path,
    selector: &Selector,
    options: Options,
    clock: Arc<dyn Clock>,
) -> Result<Plan, RestoreError> {
    prepare_unlocking(origin, destination, selector, options, None, clock)
}

/// [`prepare`], opening a protected destination with `unlock`: its plaintext is what the
/// never-clobber rule compares and whose credentials are carried, and the install reseals the
/// new database in the destination's own container (header, salt and slots unchanged, a fresh
/// payload IV, §11.2 rule 5), so the passphrase and recovery key that opened it keep opening it
/// and the pulled contents never land there in plaintext.
pub fn prepare_unlocking(
    origin: &dyn Origin,
    destination: &Path,
    selector: &Selector,
    options: Options,
    unlock: Option<Unlock<'_>>,
    clock: Arc<dyn Clock>,
) -> Result<Plan, RestoreError> {
    check_selector(selector)?;
    if !parent_dir(destination).is_dir() {
        return Err(RestoreError::NoDirectory {
            path: destination.to_owned(),
        });
    }
    let (destination, local) = locate(destination)?;
    let destination = destination.as_path();
    let local = match local {
        None => None,
        Some((read, _)) if options.only_if_absent => {
            return Err(RestoreError::DestinationExists { path: read });
        }
        Some((read, observed)) => Some(open_local(read, observed, unlock, clock.clone())?),
    };
    let sidecar = SidecarSeen::observe(destination)?;

    let snapshot = origin.describe(selector)?;
    if let Some(asked) = selector.revision()
        && asked != snapshot.revision
    {
        return Err(OriginError::BadResponse {
            detail: format!("revision {} when asked for {asked}", snapshot.revision),
        }
        .into());
    }
    if let Some(found) = snapshot.storage_version
        && i64::from(found) > STORAGE_VERSION
    {
        return Err(RestoreError::SchemaTooNew {
            revision: snapshot.revision,
            found: i64::from(found),
            supported: STORAGE_VERSION,
        });
    }
    if snapshot.size > MAX_USERDB_BYTES {
        return Err(RestoreError::TooLarge {
            revision: snapshot.revision,
            size: snapshot.size,
            max: MAX_USERDB_BYTES,
        });
    }

    // The destination's record at this origin, and only this origin (issue 35): an earlier
    // release's origin-less record counts only where the origin's head is exactly what it
    // recorded.
    let origin_id = origin.identity()?;
    let mut state = sidecar.state();
    if state.at(&origin_id).is_none() && state.unclaimed.is_some() {
        let head = match selector {
            Selector::Current => Some(snapshot.clone()),
            Selector::Revision(_) => origin.head()?,
        };
        state.adopt(&origin_id, &origin.name(), head.as_ref());
    }
    let synced = state.at(&origin_id).cloned();
    let local_changes = local.as_ref().is_some_and(|l| {
        synced.as_ref().map(|s| s.content_hash.as_str()) != Some(l.content_hash.as_str())
    });
    if local.is_some()
        && synced.as_ref().map(|s| s.revision.as_str()) == Some(snapshot.revision.as_str())
        && !(local_changes && options.force)
    {
        return Ok(Plan::UpToDate(UpToDate {
            revision: snapshot.revision,
            local_changes,
        }));
    }
    // Local changes that already equal the origin's bytes are not lost by installing them: the
    // revision is what a push of the local copy sends, or (pushed by a release before issue 38)
    // its canonical export.
    let replaces_local_changes = local_changes
        && local.as_ref().is_some_and(|l| {
            let head = snapshot.sha256_hex();
            l.export_sha256 != head && l.content_hash != head
        });
    let mut destination = destination.to_owned();
    let mut sidecar = sidecar;
    let mut beside = None;
    if replaces_local_changes && !options.force {
        if !options.keep_both {
            return Err(RestoreError::Diverged {
                path: local.map_or_else(|| destination.clone(), |l| l.read),
                revision: snapshot.revision,
                last_synced: synced.map(|s| s.revision),
            });
        }
        // Both kept: the revision goes to a file of its own, with a sync state of its own.
        let copy = beside_name(&destination, &snapshot.revision);
        if fs::symlink_metadata(&copy).is_ok() {
            return Err(RestoreError::DestinationExists { path: copy });
        }
        sidecar = SidecarSeen::observe(&copy)?;
        state = sidecar.state();
        destination = copy.clone();
        beside = Some(copy);
    }
    Ok(Plan::Install(Box::new(Prepared {
        destination,
        snapshot,
        local,
        sidecar,
        origin: (origin_id, origin.name()),
        state,
        synced,
        replaces_local_changes: replaces_local_changes && beside.is_none(),
        beside,
        clock,
    })))
}

/// Where `Options::keep_both` installs the origin's copy of `revision` beside `destination`:
/// `<file name>.origin-<revision>.snug` (§10: a derived name follows the file).
fn beside_name(destination: &Path, revision: &str) -> PathBuf {
    let name = destination
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| snug_schema::USER_FILE.to_owned());
    // A revision token has been checked to be an entity-tag; a path separator would still
    // have no place in a file name.
    let revision: String = revision
        .chars()
        .map(|c| if c == '/' || c == '\\' { '_' } else { c })
        .collect();
    destination.with_file_name(format!("{name}.origin-{revision}.snug"))
}

impl Prepared {
    /// The revision to be installed, as the origin described it.
    pub fn snapshot(&self) -> &SnapshotInfo {
        &self.snapshot
    }

    /// The file that will be replaced (or created).
    pub fn destination(&self) -> &Path {
        &self.destination
    }

    /// Whether there is no local copy: a new device's bootstrap.
    pub fn bootstraps(&self) -> bool {
        self.local.is_none()
    }

    /// Whether installing replaces local changes that were never pushed (only with `force`; a
    /// copy of the replaced file is kept beside it).
    pub fn replaces_local_changes(&self) -> bool {
        self.replaces_local_changes
    }

    /// The identity of the origin the revision comes from.
    pub fn origin(&self) -> &OriginId {
        &self.origin.0
    }

    /// Downloads the revision into a new temporary file in the destination's directory and
    /// verifies it: no more than the declared length (itself within the cap) is accepted, and
    /// the length and SHA-256 must equal what the origin recorded. `progress` is told of every
    /// byte that lands.
    pub fn download(
        self,
        origin: &dyn Origin,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Downloaded, RestoreError> {
        let temp = TempSibling::create(&self.destination).map_err(io_error(
            "create a temporary file beside",
            &self.destination,
        ))?;
        let file = OpenOptions::new()
            .write(true)
            .open(temp.path())
            .map_err(io_error("open", temp.path()))?;
        let mut sink = Sink {
            file: BufWriter::with_capacity(1 << 20, file),
            hasher: Sha256::new(),
            received: 0,
            declared: self.snapshot.size,
            overflow: None,
            failed: None,
            progress,
        };
        // An origin that offers delta pulls rebuilds the revision from the local copy's pages
        // (issue 21); the sink checks the length and SHA-256 whichever way the bytes came.
        let synced = self.synced.as_ref();
        // The pages of the revision this file last synced as, as they were recorded: a file
        // changed since (or rewritten by its own install) names only the pages that differ.
        let synced_pages = self.local.as_ref().zip(synced).and_then(|(l, s)| {
            crate::push_state::load_pages(&l.read, &self.origin.0, &s.revision, &s.sha256)
        });
        // The revision's bytes as this device kept them (issue 38), when they are: a source the
        // hub holds exactly, page for page, whatever this device's own file has of its own.
        let kept = self
            .local
            .as_ref()
            .zip(synced_pages.as_ref())
            .filter(|_| origin.syncs_by_difference())
            .and_then(|(l, pages)| crate::push_state::load_base(&l.read, pages));
        let local = self
            .local
            .as_ref()
            .map(|l| match (&kept, synced, &synced_pages) {
                (Some(kept), Some(s), Some(pages)) => LocalCopy {
                    bytes: kept,
                    revision: Some(s.revision.as_str()),
                    synced: Some((s.revision.as_str(), pages)),
                },
                _ => LocalCopy {
                    bytes: &l.export,
                    // Unchanged since its last sync with this origin: the origin's copy of that revision
                    // stands for this file (where it is not byte for byte, the rebuilt image's check
                    // says so, and the pull names the file sparse against that revision's pages).
                    revision: synced
                        .filter(|s| s.content_hash == l.content_hash)
                        .map(|s| s.revision.as_str()),
                    synced: synced
                        .zip(synced_pages.as_ref())
                        .map(|(s, p)| (s.revision.as_str(), p)),
                },
            });
        let delivered = origin.download_from(&self.snapshot, local, &mut sink);
        let revision = &self.snapshot.revision;
        // What the pipeline saw itself outranks what the origin says about it: a refused write
        // reaches the origin as an I/O error it reports in its own words.
        if let Some(received) = sink.overflow {
            return Err(RestoreError::SizeMismatch {
                revision: revision.clone(),
                declared: self.snapshot.size,
                received,
            });
        }
        if let Some(source) = sink.failed.take() {
            return Err(RestoreError::Io {
                action: "write",
                path: temp.path().to_owned(),
                source,
            });
        }
        delivered?;
        if sink.received != self.snapshot.size {
            return Err(RestoreError::SizeMismatch {
                revision: revision.clone(),
                declared: self.snapshot.size,
                received: sink.received,
            });
        }
        let actual: [u8; 32] = sink.hasher.finalize().into();
        if actual != self.snapshot.sha256 {
            return Err(RestoreError::DigestMismatch {
                revision: revision.clone(),
                expected: self.snapshot.sha256_hex(),
                actual: hex::encode(actual),
            });
        }
        let file = sink
            .file
            .into_inner()
            .map_err(|err| io_error("write", temp.path())(err.into_error()))?;
        file.sync_all().map_err(io_error("write", temp.path()))?;
        Ok(Downloaded {
            prepared: self,
            temp,
        })
    }
}

/// Where a download's bytes go: the temporary file, hashed and counted as they land, refusing
/// anything past the declared length.
struct Sink<'p> {
    file: BufWriter<File>,
    hasher: Sha256,
    received: u64,
    declared: u64,
    /// How many bytes had arrived when the declared length was passed.
    overflow: Option<u64>,
    failed: Option<io::Error>,
    progress: &'p mut dyn FnMut(Progress),
}

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.overflow.is_some() || self.failed.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the download was already refused",
            ));
        }
        let after = self.received + buf.len() as u64;
        if after > self.declared {
            self.overflow = Some(after);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more bytes than the origin declared",
            ));
        }
        if let Err(err) = self.file.write_all(buf) {
            let echo = io::Error::new(err.kind(), err.to_string());
            self.failed = Some(err);
            return Err(echo);
        }
        self.hasher.update(buf);
        self.received = after;
        (self.progress)(Progress {
            received: self.received,
            total: self.declared,
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Prepared {
    /// Keeps the local copy's bytes, as they are on disk, beside it before a forced install
    /// replaces its unpushed changes; the copy is named for the revision it last synced as.
    fn keep_local(&self) -> Result<PathBuf, RestoreError> {
        let local = self
            .local
            .as_ref()
            .ok_or_else(|| RestoreError::DestinationChanged {
                path: self.destination.clone(),
            })?;
        let bytes = fs::read(&local.read).map_err(io_error("read", &local.read))?;
        let sha256: [u8; 32] = Sha256::digest(&bytes).into();
        if sha256 != local.identity.sha256 {
            return Err(RestoreError::DestinationChanged {
                path: local.read.clone(),
            });
        }
        let revision = self
            .synced
            .as_ref()
            .map_or(keep::UNSYNCED, |s| s.revision.as_str());
        keep::keep_beside(&local.read, revision, &bytes, self.clock.as_ref())
            .map_err(io_error("keep a copy of", &local.read))
    }

    /// Fails unless the local copy, the destination's absence (when there was no file) and the
    /// sidecar are exactly as prepared.
    fn check_unchanged(&self) -> Result<(), RestoreError> {
        let changed = |path: &Path| RestoreError::DestinationChanged {
            path: path.to_owned(),
        };
        if let Some(local) = &self.local {
            // A file that can no longer be read as it was (replaced by a directory, its
            // permissions changed) is changed too.
            let now = observe(&local.read)
                .ok()
                .flatten()
                .map(|observed| observed.identity);
            if now.as_ref() != Some(&local.identity) {
                return Err(changed(&local.read));
            }
        }
        let writes_over_local = self
            .local
            .as_ref()
            .is_some_and(|local| local.read == self.destination);
        if !writes_over_local && fs::symlink_metadata(&self.destination).is_ok() {
            return Err(changed(&self.destination));
        }
        if SidecarSeen::observe(&self.destination)? != self.sidecar {
            let sidecar = sidecar_location(&self.destination)
                .map_or_else(|| self.destination.clone(), |s| s.read.unwrap_or(s.write));
            return Err(changed(&sidecar));
        }
        Ok(())
    }

    /// Moves the finished temporary file to the destination. Over an existing local copy this is
    /// a rename; where there was no file, a hard link, which fails instead of clobbering a file
    /// that appeared since the check (file systems without links fall back to a checked rename).
    fn replace(&self, temp: TempSibling) -> Result<(), RestoreError> {
        let destination = &self.destination;
        let writes_over_local = self
            .local
            .as_ref()
            .is_some_and(|local| local.read == *destination);
        if writes_over_local {
            fs::rename(temp.path(), destination).map_err(io_error("replace", destination))?;
            temp.disarm();
            return Ok(());
        }
        match fs::hard_link(temp.path(), destination) {
            // The temporary name is removed when `temp` drops; the link keeps the file.
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                Err(RestoreError::DestinationChanged {
                    path: destination.clone(),
                })
            }
            Err(_) if fs::symlink_metadata(destination).is_err() => {
                fs::rename(temp.path(), destination).map_err(io_error("create", destination))?;
                temp.disarm();
                Ok(())
            }
            Err(_) => Err(RestoreError::DestinationChanged {
                path: destination.clone(),
            }),
        }
    }
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// Nothing needed downloading.
    UpToDate(UpToDate),
    /// A revision was installed.
    Installed(Installed),
}

/// The whole pipeline in one call: [`prepare`], then (unless up to date)
/// [`Prepared::download`] and [`Downloaded::install`].
pub fn restore(
    origin: &dyn Origin,
    destination: &Path,
    selector: &Selector,
    options: Options,
    clock: Arc<dyn Clock>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Restored, RestoreError> {
    match prepare(origin, destination, selector, options, clock)? {
        Plan::UpToDate(up_to_date) => Ok(Restored::UpToDate(up_to_date)),
        Plan::Install(prepared) => Ok(Restored::Installed(
            prepared.download(origin, progress)?.install()?,
        )),
    }
}
