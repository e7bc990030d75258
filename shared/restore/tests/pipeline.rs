//! The install pipeline against a fake origin that injects each failure of issue #8 point 2:
//! corrupted bytes, a revision newer than this build (declared, and only in its header), a
//! destination changed between prepare and install, a download killed midway, a migration
//! failure, a wrong destination, a divergence. Every failure must leave the destination's
//! directory exactly as it was: the file and its sidecar byte-identical and no temporary file.

use std::{
    cell::{Cell, RefCell},
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
};

use proptest::prelude::*;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use snug_restore::{
    Options, Origin, OriginError, Plan, Pushed, RestoreError, Restored, Selector, SnapshotInfo,
    canonical_export, content_hash, prepare, push_image, restore,
};
use snug_schema::{Clock, ExportOptions, SteppingClock, UserDb};
use snug_test_support::theme;

fn clock() -> Arc<dyn Clock> {
    Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000))
}

/// A user database as an origin holds it (what a push sends), with `theme` set to `value`.
fn image(value: &str) -> Vec<u8> {
    let (mut db, _) = UserDb::create_in_memory(clock()).expect("create");
    db.set_setting("theme", &json!(value)).expect("setting");
    push_image(&db.to_bytes().expect("bytes"), false, clock())
        .expect("export")
        .bytes
}

fn info(revision: &str, bytes: &[u8], storage_version: Option<u32>) -> SnapshotInfo {
    SnapshotInfo {
        revision: revision.to_owned(),
        sha256: Sha256::digest(bytes).into(),
        size: bytes.len() as u64,
        storage_version,
    }
}

/// How the fake origin misbehaves while downloading.
#[derive(Clone, Default)]
enum Fault {
    #[default]
    None,
    /// Flips one byte of what it sends.
    Corrupt(usize),
    /// Sends this many bytes, then reports the connection lost.
    KillAfter(usize),
    /// Sends these bytes after the image.
    Trailing(Vec<u8>),
    /// Sends the image without its last byte and reports success.
    Short,
}

/// An origin holding a history of revisions (the last is current).
#[derive(Default)]
struct FakeOrigin {
    revisions: Vec<(SnapshotInfo, Vec<u8>)>,
    fault: Fault,
    describes: Cell<usize>,
    downloads: Cell<usize>,
    /// Names of the temporary files seen in this directory while a download was running.
    watch: Option<PathBuf>,
    seen_during_download: RefCell<Vec<String>>,
}

impl FakeOrigin {
    fn with(revisions: &[(&str, Vec<u8>)]) -> Self {
        Self {
            revisions: revisions
                .iter()
                .map(|(rev, bytes)| (info(rev, bytes, Some(6)), bytes.clone()))
                .collect(),
            ..Self::default()
        }
    }

    /// Makes `bytes` the current revision, as another device's push would.
    fn add_revision(&mut self, revision: &str, bytes: Vec<u8>) {
        self.revisions
            .push((info(revision, &bytes, Some(6)), bytes));
    }
}

impl Origin for FakeOrigin {
    fn describe(&self, which: &Selector) -> Result<SnapshotInfo, OriginError> {
        self.describes.set(self.describes.get() + 1);
        let found = match which {
            Selector::Current => self.revisions.last().ok_or(OriginError::Empty)?,
            Selector::Revision(rev) => self
                .revisions
                .iter()
                .find(|(info, _)| &info.revision == rev)
                .ok_or_else(|| OriginError::UnknownRevision {
                    revision: rev.clone(),
                })?,
        };
        Ok(found.0.clone())
    }

    fn download(&self, snapshot: &SnapshotInfo, sink: &mut dyn Write) -> Result<(), OriginError> {
        self.downloads.set(self.downloads.get() + 1);
        let mut bytes = self
            .revisions
            .iter()
            .find(|(info, _)| info.revision == snapshot.revision)
            .map(|(_, bytes)| bytes.clone())
            .ok_or_else(|| OriginError::UnknownRevision {
                revision: snapshot.revision.clone(),
            })?;
        if let Some(dir) = &self.watch {
            self.seen_during_download
                .borrow_mut()
                .extend(temp_files(dir));
        }
        match &self.fault {
            Fault::None => {}
            Fault::Corrupt(at) => {
                let at = at % bytes.len();
                bytes[at] ^= 0x01;
            }
            Fault::KillAfter(n) => {
                // Written in pieces, as a network delivers it.
                for piece in bytes[..*n].chunks(1000) {
                    sink.write_all(piece).map_err(OriginError::Sink)?;
                }
                return Err(OriginError::Interrupted {
                    detail: "connection reset by peer".into(),
                });
            }
            Fault::Trailing(extra) => bytes.extend_from_slice(extra),
            Fault::Short => {
                bytes.pop();
            }
        }
        for piece in bytes.chunks(4096) {
            sink.write_all(piece).map_err(OriginError::Sink)?;
        }
        Ok(())
    }

    // The pipeline only pulls.
    fn push(&self, _: &[u8], _: Option<&str>) -> Result<Pushed, OriginError> {
        Err(OriginError::Other {
            reason: &snug_reasons::materialize::READ_ONLY,
            status: 0,
            detail: "a test origin takes no pushes".to_owned(),
        })
    }
}

/// Every file in `dir` with its length and SHA-256 (equal listings: byte-identical files).
fn listing(dir: &Path) -> BTreeMap<String, (usize, String)> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|entry| {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let bytes = if entry.path().is_dir() {
                b"<dir>".to_vec()
            } else {
                std::fs::read(entry.path()).expect("read")
            };
            (name, (bytes.len(), hex::encode(Sha256::digest(&bytes))))
        })
        .collect()
}

fn temp_files(dir: &Path) -> Vec<String> {
    listing(dir)
        .into_keys()
        .filter(|name| name.ends_with(".tmp"))
        .collect()
}

fn run(
    origin: &FakeOrigin,
    dest: &Path,
    selector: &Selector,
    options: Options,
) -> Result<Restored, RestoreError> {
    restore(origin, dest, selector, options, clock(), &mut |_| {})
}

fn installed(result: Result<Restored, RestoreError>) -> snug_restore::Installed {
    match result {
        Ok(Restored::Installed(installed)) => installed,
        other => panic!("expected an install, got {other:?}"),
    }
}

/// The destination's record at the fake origin, which states no identity and is known by its
/// name.
fn sidecar(dest: &Path) -> serde_json::Value {
    let mut name = dest.as_os_str().to_owned();
    name.push(".sync.json");
    let bytes = std::fs::read(PathBuf::from(name)).expect("sidecar");
    let state: serde_json::Value = serde_json::from_slice(&bytes).expect("the sidecar is JSON");
    assert_eq!(state["format"], "snug-sync-state/2");
    state["origins"]["url:the origin"].clone()
}

fn sql(file: &Path, statement: &str) {
    snug_test_support::execute(file, statement);
}

fn secrets(file: &Path) -> Vec<(String, String)> {
    snug_test_support::query_pairs(file, "SELECT key, value FROM snug_secrets ORDER BY key")
}

/// A device that bootstrapped from `origin` and then stored a credential of its own (which is no
/// change for the push gate: secrets never leave the device).
fn synced_device(origin: &FakeOrigin) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("dir");
    let dest = dir.path().join("user.snug");
    installed(run(origin, &dest, &Selector::Current, Options::default()));
    sql(
        &dest,
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:anthropic', 'sk-local')",
    );
    (dir, dest)
}

/// Runs `failing` and checks it failed with `reason` and left the directory exactly as it was.
#[track_caller]
fn assert_untouched(
    dir: &Path,
    reason: &str,
    failing: impl FnOnce() -> Result<Restored, RestoreError>,
) {
    // A download waiting to be installed is the pipeline's own file, gone once it fails.
    let mut before = listing(dir);
    before.retain(|name, _| !name.ends_with(".tmp"));
    match failing() {
        Err(err) => assert_eq!(err.reason(), reason, "{err}"),
        Ok(done) => panic!("expected {reason}, got {done:?}"),
    }
    assert_eq!(
        listing(dir),
        before,
        "the directory changed (destination, sidecar or a leftover file)"
    );
    assert!(temp_files(dir).is_empty());
}

#[test]
fn a_new_device_bootstraps_with_one_download_and_is_bound_to_the_revision() {
    let dir = tempfile::tempdir().expect("dir");
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    origin.watch = Some(dir.path().to_owned());
    let dest = dir.path().join("user.snug");
    let mut seen = Vec::new();
    let done = installed(restore(
        &origin,
        &dest,
        &Selector::Current,
        Options::default(),
        clock(),
        &mut |p| seen.push(p),
    ));
    assert_eq!((origin.describes.get(), origin.downloads.get()), (1, 1));
    assert!(done.bootstrapped && !done.replaced_local_changes && done.secrets_kept == 0);
    assert_eq!(done.revision, "r1-aa");
    assert_eq!(theme(&dest).as_deref(), Some("\"light\""));

    // The download went to a temporary file beside the destination, which is gone now.
    assert_eq!(origin.seen_during_download.borrow().len(), 1);
    assert!(origin.seen_during_download.borrow()[0].starts_with(".user.snug."));
    assert_eq!(
        listing(dir.path()).into_keys().collect::<Vec<_>>(),
        ["user.snug", "user.snug.sync.json"]
    );
    let last = seen.last().expect("progress");
    assert_eq!(
        (last.received, last.total),
        (done.downloaded, done.downloaded)
    );
    assert!(
        seen.windows(2).all(|w| w[0].received < w[1].received),
        "progress only grows"
    );

    // Bound: the sidecar names the revision and the hash the push gate computes for the file.
    let bytes = std::fs::read(&dest).expect("read");
    let state = sidecar(&dest);
    assert_eq!(state["revision"], "r1-aa");
    assert_eq!(
        state["contentHash"],
        push_image(&bytes, false, clock())
            .expect("gate")
            .content_hash
    );
    assert_eq!(state["contentHash"], done.content_hash);
    assert_eq!(state["sha256"], done.sha256);
    assert_eq!(state["syncedAt"], "2026-01-01T00:00:00.000Z");

    // The same revision again is up to date: nothing is downloaded.
    let again = run(&origin, &dest, &Selector::Current, Options::default()).expect("pull");
    assert_eq!(
        again,
        Restored::UpToDate(snug_restore::UpToDate {
            revision: "r1-aa".into(),
            local_changes: false
        })
    );
    assert_eq!(origin.downloads.get(), 1);
}

#[test]
fn a_pull_keeps_local_secrets_and_re_arms_endpoint_confirmation() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    origin.add_revision("r2-bb", image("dark"));
    let done = installed(run(&origin, &dest, &Selector::Current, Options::default()));
    assert_eq!(
        (
            done.secrets_kept,
            done.bootstrapped,
            done.replaced_local_changes
        ),
        (1, false, false)
    );
    assert_eq!(theme(&dest).as_deref(), Some("\"dark\""));
    assert_eq!(
        secrets(&dest),
        [("byok:anthropic".to_owned(), "sk-local".to_owned())]
    );
    let conn = rusqlite::Connection::open(&dest).expect("open");
    let confirm: String = conn
        .query_row(
            "SELECT value FROM snug_settings WHERE key = 'needsEndpointConfirm'",
            [],
            |r| r.get(0),
        )
        .expect("latch");
    assert_eq!(
        confirm, "true",
        "a pulled file's endpoint settings need re-confirmation (§9 obligation 2)"
    );
    assert_eq!(sidecar(&dest)["revision"], "r2-bb");
    assert!(temp_files(dir.path()).is_empty());
}

#[test]
fn corrupted_bytes_are_refused_and_change_nothing() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    origin.add_revision("r2-bb", image("dark"));
    origin.fault = Fault::Corrupt(5000);
    assert_untouched(dir.path(), "DIGEST_MISMATCH", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    origin.fault = Fault::Short;
    assert_untouched(dir.path(), "SIZE_MISMATCH", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    origin.fault = Fault::Trailing(b"more".to_vec());
    assert_untouched(dir.path(), "SIZE_MISMATCH", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
}

#[test]
fn a_declared_newer_revision_is_refused_before_any_download() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    let downloads = origin.downloads.get();
    let newer = image("from the future");
    origin
        .revisions
        .push((info("r2-bb", &newer, Some(7)), newer));
    assert_untouched(dir.path(), "SCHEMA_TOO_NEW", || {
        run(
            &origin,
            &dest,
            &Selector::Current,
            Options {
                force: true,
                ..Options::default()
            },
        )
    });
    assert_eq!(
        origin.downloads.get(),
        downloads,
        "refused before download was called"
    );

    // A new device is refused the same way, and no file appears.
    let fresh = tempfile::tempdir().expect("dir");
    assert_untouched(fresh.path(), "SCHEMA_TOO_NEW", || {
        run(
            &origin,
            &fresh.path().join("user.snug"),
            &Selector::Current,
            Options::default(),
        )
    });
    assert_eq!(origin.downloads.get(), downloads);
}

#[test]
fn an_undeclared_newer_revision_is_refused_on_its_header() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    let mut newer = image("from the future");
    newer[60..64].copy_from_slice(&7u32.to_be_bytes());
    // An origin that keeps no metadata cannot say; the header says after the download.
    origin.revisions.push((info("r2-bb", &newer, None), newer));
    assert_untouched(dir.path(), "SCHEMA_TOO_NEW", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    assert_eq!(origin.downloads.get(), 2);
}

#[test]
fn a_destination_changed_between_prepare_and_install_is_not_replaced() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    origin.add_revision("r2-bb", image("dark"));
    let prepare_now = || match prepare(
        &origin,
        &dest,
        &Selector::Current,
        Options::default(),
        clock(),
    )
    .expect("prepare")
    {
        Plan::Install(prepared) => prepared,
        Plan::UpToDate(_) => panic!("r2 is new"),
    };

    // The file is edited after the download.
    let downloaded = prepare_now()
        .download(&origin, &mut |_| {})
        .expect("download");
    assert!(downloaded.temp_path().exists());
    sql(
        &dest,
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"edited meanwhile\"')",
    );
    assert_untouched(dir.path(), "DESTINATION_CHANGED", || {
        downloaded.install().map(Restored::Installed)
    });
    assert_eq!(theme(&dest).as_deref(), Some("\"edited meanwhile\""));

    // Only the sidecar changes (a push from another process recorded a revision).
    let (dir, dest) = synced_device(&origin);
    let downloaded = match prepare(
        &origin,
        &dest,
        &Selector::Revision("r1-aa".into()),
        Options::default(),
        clock(),
    )
    .expect("prepare")
    {
        Plan::Install(prepared) => prepared.download(&origin, &mut |_| {}).expect("download"),
        Plan::UpToDate(_) => panic!("the device is at r2"),
    };
    let mut name = dest.as_os_str().to_owned();
    name.push(".sync.json");
    std::fs::write(
        PathBuf::from(name),
        b"SNUGSYNC1\n{\"lastPushedRevision\":\"r3-cc\"}",
    )
    .expect("sidecar");
    assert_untouched(dir.path(), "DESTINATION_CHANGED", || {
        downloaded.install().map(Restored::Installed)
    });

    // A file that appears where there was none is never clobbered.
    let fresh = tempfile::tempdir().expect("dir");
    let dest = fresh.path().join("user.snug");
    let prepared = match prepare(
        &origin,
        &dest,
        &Selector::Current,
        Options::default(),
        clock(),
    )
    .expect("prepare")
    {
        Plan::Install(prepared) => prepared,
        Plan::UpToDate(_) => panic!("nothing here"),
    };
    assert!(prepared.bootstraps());
    let downloaded = prepared.download(&origin, &mut |_| {}).expect("download");
    std::fs::write(&dest, b"created by someone else").expect("write");
    assert_untouched(fresh.path(), "DESTINATION_CHANGED", || {
        downloaded.install().map(Restored::Installed)
    });
}

#[test]
fn a_download_killed_midway_leaves_no_partial_file() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    origin.add_revision("r2-bb", image("dark"));
    origin.fault = Fault::KillAfter(10_000);
    assert_untouched(dir.path(), "DOWNLOAD_INTERRUPTED", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    let fresh = tempfile::tempdir().expect("dir");
    assert_untouched(fresh.path(), "DOWNLOAD_INTERRUPTED", || {
        run(
            &origin,
            &fresh.path().join("user.snug"),
            &Selector::Current,
            Options::default(),
        )
    });
    // Dropping a download between the steps removes its file too.
    origin.fault = Fault::None;
    let fresh = tempfile::tempdir().expect("dir");
    let before = listing(fresh.path());
    match prepare(
        &origin,
        &fresh.path().join("user.snug"),
        &Selector::Current,
        Options::default(),
        clock(),
    )
    .expect("prepare")
    {
        Plan::Install(prepared) => drop(prepared.download(&origin, &mut |_| {}).expect("download")),
        Plan::UpToDate(_) => panic!("nothing here"),
    }
    assert_eq!(listing(fresh.path()), before);
}

/// A storage-version-1 file whose `snug_app_versions` lost its `app_id` column: the ladder's
/// v1→v2 step (which pins each app's oldest version by `app_id`) fails on it.
fn unmigratable_v1() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v1.sqlite");
    sql(
        &path,
        "CREATE TABLE snug_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE snug_profile (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE snug_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE snug_apps (app_id TEXT PRIMARY KEY, display_name TEXT NOT NULL, description TEXT,
             icon_emoji TEXT, icon_color TEXT, uses_db INTEGER NOT NULL DEFAULT 0, current_version INTEGER NOT NULL,
             created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
         CREATE TABLE snug_app_versions (application TEXT NOT NULL, version INTEGER NOT NULL, html TEXT NOT NULL,
             note TEXT, created_at TEXT NOT NULL, PRIMARY KEY (application, version));
         INSERT INTO snug_meta VALUES ('db_id', '0b0e9d8c-0000-4000-8000-000000000001');
         PRAGMA user_version = 1;",
    );
    std::fs::read(&path).expect("read")
}

#[test]
fn a_revision_that_fails_migration_is_refused_and_changes_nothing() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    let broken = unmigratable_v1();
    origin
        .revisions
        .push((info("r2-bb", &broken, Some(1)), broken));
    let before = listing(dir.path());
    let err = match run(&origin, &dest, &Selector::Current, Options::default()) {
        Err(err @ RestoreError::Refused { .. }) => err,
        other => panic!("expected a refusal from the open pipeline, got {other:?}"),
    };
    assert!(err.to_string().contains("r2-bb"), "{err}");
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn a_wrong_destination_is_refused_before_the_origin_is_asked() {
    let origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let dir = tempfile::tempdir().expect("dir");
    let any = Options {
        force: true,
        ..Options::default()
    };
    std::fs::create_dir(dir.path().join("folder")).expect("mkdir");
    assert_untouched(dir.path(), "DESTINATION_IS_DIRECTORY", || {
        run(&origin, &dir.path().join("folder"), &Selector::Current, any)
    });
    assert_untouched(dir.path(), "DESTINATION_NO_DIRECTORY", || {
        run(
            &origin,
            &dir.path().join("missing/user.snug"),
            &Selector::Current,
            any,
        )
    });
    std::fs::write(dir.path().join("notes.txt"), b"my notes, not a database").expect("write");
    assert_untouched(dir.path(), "DESTINATION_NOT_SNUG", || {
        run(
            &origin,
            &dir.path().join("notes.txt"),
            &Selector::Current,
            any,
        )
    });
    let mut protected = b"SNUGENC1\n".to_vec();
    protected.resize(200, 0);
    std::fs::write(dir.path().join("locked.snug"), &protected).expect("write");
    assert_untouched(dir.path(), "PROTECTED", || {
        run(
            &origin,
            &dir.path().join("locked.snug"),
            &Selector::Current,
            any,
        )
    });
    let mut damaged = image("light");
    damaged.truncate(damaged.len() - 100);
    std::fs::write(dir.path().join("damaged.snug"), &damaged).expect("write");
    assert_untouched(dir.path(), "MALFORMED", || {
        run(
            &origin,
            &dir.path().join("damaged.snug"),
            &Selector::Current,
            any,
        )
    });
    let mut newer = image("light");
    newer[60..64].copy_from_slice(&7u32.to_be_bytes());
    std::fs::write(dir.path().join("newer.snug"), &newer).expect("write");
    assert_untouched(dir.path(), "SCHEMA_TOO_NEW", || {
        run(
            &origin,
            &dir.path().join("newer.snug"),
            &Selector::Current,
            any,
        )
    });
    assert_eq!((origin.describes.get(), origin.downloads.get()), (0, 0));

    // A bootstrap refuses any existing file.
    let (dir, dest) = synced_device(&origin);
    let only_new = Options {
        only_if_absent: true,
        ..Options::default()
    };
    assert_untouched(dir.path(), "DESTINATION_EXISTS", || {
        run(&origin, &dest, &Selector::Current, only_new)
    });
    assert_untouched(dir.path(), "INVALID_REVISION", || {
        run(&origin, &dest, &Selector::Revision("r1 aa".into()), any)
    });
}

#[test]
fn unpushed_changes_are_never_clobbered_without_force() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    sql(
        &dest,
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"unpushed\"')",
    );
    // Same revision: up to date, and the changes are reported, not replaced.
    match run(&origin, &dest, &Selector::Current, Options::default()).expect("pull") {
        Restored::UpToDate(up) => assert!(up.local_changes),
        other => panic!("{other:?}"),
    }
    origin.add_revision("r2-bb", image("dark"));
    let downloads = origin.downloads.get();
    assert_untouched(dir.path(), "DIVERGED", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    assert_eq!(
        origin.downloads.get(),
        downloads,
        "a divergence is found before downloading"
    );

    // Both kept: the origin's copy goes beside the file, which stays exactly as it was.
    let before = listing(dir.path());
    let replaced = std::fs::read(&dest).expect("read");
    let both = installed(run(
        &origin,
        &dest,
        &Selector::Current,
        Options {
            keep_both: true,
            ..Options::default()
        },
    ));
    assert!(both.beside && !both.replaced_local_changes && both.kept.is_none());
    assert_eq!(
        both.destination,
        dir.path().join("user.snug.origin-r2-bb.snug")
    );
    assert_eq!(theme(&both.destination).as_deref(), Some("\"dark\""));
    assert_eq!(
        secrets(&both.destination),
        [("byok:anthropic".to_owned(), "sk-local".to_owned())],
        "the copy carries the file's credentials"
    );
    let after = listing(dir.path());
    for (name, file) in &before {
        assert_eq!(after.get(name), Some(file), "{name} is untouched");
    }
    // The copy is bound to the revision it is, and a second keep-both refuses to overwrite it.
    let mut copy_sidecar = both.destination.as_os_str().to_owned();
    copy_sidecar.push(".sync.json");
    assert!(PathBuf::from(copy_sidecar).exists());
    assert_untouched(dir.path(), "DESTINATION_EXISTS", || {
        run(
            &origin,
            &dest,
            &Selector::Current,
            Options {
                keep_both: true,
                ..Options::default()
            },
        )
    });

    let done = installed(run(
        &origin,
        &dest,
        &Selector::Current,
        Options {
            force: true,
            ..Options::default()
        },
    ));
    assert!(done.replaced_local_changes);
    assert_eq!(theme(&dest).as_deref(), Some("\"dark\""));
    assert_eq!(
        secrets(&dest),
        [("byok:anthropic".to_owned(), "sk-local".to_owned())],
        "secrets survive a forced pull"
    );
    // Nothing replaced without a copy: the file as it was, byte for byte, named for the
    // revision it last synced as.
    let kept = done.kept.expect("a copy of the replaced file");
    assert_eq!(std::fs::read(&kept).expect("read"), replaced);
    let kept_name = kept
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        kept_name.starts_with("user.snug.replaced-r1-aa-"),
        "{kept_name}"
    );
    assert!(kept_name.ends_with(".snug"), "{kept_name}");
    assert_eq!(theme(&kept).as_deref(), Some("\"unpushed\""));
    assert!(temp_files(dir.path()).is_empty());

    // A file never synced with this origin is a local change too.
    let other = tempfile::tempdir().expect("dir");
    let dest = other.path().join("user.snug");
    std::fs::write(&dest, image("mine")).expect("write");
    assert_untouched(other.path(), "DIVERGED", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    // …unless it already equals the origin's copy.
    std::fs::write(&dest, &origin.revisions[1].1).expect("write");
    let done = installed(run(&origin, &dest, &Selector::Current, Options::default()));
    assert!(!done.replaced_local_changes);
    assert_eq!(done.kept, None, "nothing the origin lacks was replaced");
}

#[test]
fn a_named_revision_from_history_is_installed() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (_dir, dest) = synced_device(&origin);
    origin.add_revision("r2-bb", image("dark"));
    installed(run(&origin, &dest, &Selector::Current, Options::default()));
    let done = installed(run(
        &origin,
        &dest,
        &Selector::Revision("r1-aa".into()),
        Options::default(),
    ));
    assert_eq!(done.revision, "r1-aa");
    assert_eq!(theme(&dest).as_deref(), Some("\"light\""));
    assert_eq!(sidecar(&dest)["revision"], "r1-aa");
    let err = run(
        &origin,
        &dest,
        &Selector::Revision("r9-ff".into()),
        Options::default(),
    )
    .expect_err("unknown");
    assert_eq!(err.reason(), "REVISION_NOT_FOUND");
}

#[test]
fn an_empty_origin_and_an_oversized_revision_are_refused() {
    let mut origin = FakeOrigin::default();
    let dir = tempfile::tempdir().expect("dir");
    let dest = dir.path().join("user.snug");
    assert_untouched(dir.path(), "SYNC_ORIGIN_EMPTY", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    let huge = SnapshotInfo {
        size: snug_schema::MAX_USERDB_BYTES + 1,
        ..info("r1-aa", b"", Some(6))
    };
    origin.revisions.push((huge, Vec::new()));
    assert_untouched(dir.path(), "USERDB_TOO_LARGE", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
    assert_eq!(origin.downloads.get(), 0);
}

#[test]
fn a_legacy_user_sqlite_is_read_and_never_written() {
    let origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let dir = tempfile::tempdir().expect("dir");
    let legacy = dir.path().join("user.sqlite");
    std::fs::write(&legacy, &origin.revisions[0].1).expect("write");
    sql(
        &legacy,
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:openai', 'sk-legacy')",
    );
    let legacy_bytes = std::fs::read(&legacy).expect("read");
    let dest = dir.path().join("user.snug");
    // Its content equals the origin's, so this is no divergence; its secret comes along.
    let done = installed(run(&origin, &dest, &Selector::Current, Options::default()));
    assert!(!done.bootstrapped);
    assert_eq!(
        secrets(&dest),
        [("byok:openai".to_owned(), "sk-legacy".to_owned())]
    );
    assert_eq!(
        std::fs::read(&legacy).expect("read"),
        legacy_bytes,
        "the legacy file is never written"
    );
}

#[test]
fn the_push_gate_ignores_secrets_and_sees_content() {
    let bytes = image("light");
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("user.snug");
    std::fs::write(&file, &bytes).expect("write");
    let before = content_hash(&bytes, clock()).expect("hash");
    // What a push sends is a fixed point: copying it again gives the same bytes, so a file that
    // holds exactly the origin's copy sends the origin's recorded SHA-256. The content hash is
    // the canonical export's, itself a fixed point.
    assert_eq!(
        push_image(&bytes, false, clock()).expect("image").bytes,
        bytes
    );
    let export = canonical_export(&bytes, clock()).expect("export");
    assert_eq!(before, hex::encode(Sha256::digest(&export)));
    assert_eq!(canonical_export(&export, clock()).expect("export"), export);
    sql(
        &file,
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:anthropic', 'sk')",
    );
    let with_secret = std::fs::read(&file).expect("read");
    assert_eq!(content_hash(&with_secret, clock()).expect("hash"), before);
    assert_ne!(
        push_image(&with_secret, true, clock())
            .expect("image")
            .sha256,
        push_image(&with_secret, false, clock())
            .expect("image")
            .sha256,
        "asked-for secrets travel"
    );
    sql(
        &file,
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"dark\"')",
    );
    assert_ne!(
        content_hash(&std::fs::read(&file).expect("read"), clock()).expect("hash"),
        before
    );
    assert_eq!(
        content_hash(b"not a database", clock())
            .expect_err("refused")
            .reason(),
        "NOT_SQLITE"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any content round-trips: what is installed holds the origin's settings, is bound to the
    /// push gate's hash of itself, and keeps the local secret.
    #[test]
    fn any_content_round_trips(settings in proptest::collection::btree_map("[a-z]{1,12}", ".{0,40}", 0..8)) {
        let (mut db, _) = UserDb::create_in_memory(clock()).expect("create");
        for (key, value) in &settings {
            db.set_setting(key, &json!(value)).expect("setting");
        }
        let bytes = snug_schema::export_bytes(&mut db, ExportOptions::default()).expect("export").0;
        let mut origin = FakeOrigin::with(&[("r1-aa", image("base"))]);
        let (dir, dest) = synced_device(&origin);
        origin.add_revision("r2-bb", bytes);
        let done = installed(run(&origin, &dest, &Selector::Current, Options::default()));
        let (pulled, _) = UserDb::open_path(&dest, clock()).expect("open");
        for (key, value) in &settings {
            prop_assert_eq!(pulled.setting(key).expect("read"), Some(json!(value)));
        }
        let on_disk = std::fs::read(&dest).expect("read");
        prop_assert_eq!(content_hash(&on_disk, clock()).expect("hash"), done.content_hash);
        prop_assert_eq!(secrets(&dest).len(), 1);
        prop_assert!(temp_files(dir.path()).is_empty());
    }

    /// Any single flipped byte anywhere in the download is caught, and nothing changes.
    #[test]
    fn any_flipped_byte_is_caught(at in 0usize..200_000) {
        let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
        let (dir, dest) = synced_device(&origin);
        origin.add_revision("r2-bb", image("dark"));
        origin.fault = Fault::Corrupt(at);
        let before = listing(dir.path());
        let err = run(&origin, &dest, &Selector::Current, Options::default()).expect_err("corrupt");
        prop_assert_eq!(err.reason(), "DIGEST_MISMATCH");
        prop_assert_eq!(listing(dir.path()), before);
    }
}

/// A sidecar an earlier release wrote names no origin (issue 35): it counts only for an origin
/// whose head is exactly its revision with its SHA-256; against any other the file has never
/// synced, so a pull refuses rather than replacing it.
#[test]
fn an_earlier_releases_sidecar_counts_only_where_its_revision_and_hash_match() {
    let bytes = image("light");
    let legacy = |dest: &Path, revision: &str, hash: &str| {
        let mut name = dest.as_os_str().to_owned();
        name.push(".sync.json");
        std::fs::write(
            PathBuf::from(name),
            format!(
                "SNUGSYNC1\n{{\"lastPushedRevision\":\"{revision}\",\"lastPushedHash\":\"{hash}\",\"lastSyncAt\":\"2026-01-01T00:00:00.000Z\"}}"
            ),
        )
        .expect("sidecar");
    };
    let hash = hex::encode(Sha256::digest(&bytes));
    // The origin it belongs to: the file is that revision, up to date.
    let origin = FakeOrigin::with(&[("r1-aa", bytes.clone())]);
    let dir = tempfile::tempdir().expect("dir");
    let dest = dir.path().join("user.snug");
    std::fs::write(&dest, &bytes).expect("write");
    sql(
        &dest,
        "UPDATE snug_settings SET value = '\"edited\"' WHERE key = 'theme'",
    );
    legacy(&dest, "r1-aa", &hash);
    match run(&origin, &dest, &Selector::Current, Options::default()).expect("pull") {
        Restored::UpToDate(up) => assert!(up.local_changes, "the edit is reported, not replaced"),
        other => panic!("{other:?}"),
    }
    // Another origin whose head has the same revision token but other bytes: never synced
    // there, so the edited file is not replaced.
    let elsewhere = FakeOrigin::with(&[("r1-aa", image("dark"))]);
    assert_untouched(dir.path(), "DIVERGED", || {
        run(&elsewhere, &dest, &Selector::Current, Options::default())
    });
}

/// A file another program has open in WAL mode, with a committed change still in its log: its
/// bytes on disk are not its content, and a file put in its place would get the log's frames
/// written into it by the next connection. Refused, with everything left as it was.
#[test]
fn a_file_open_in_wal_mode_with_changes_in_its_log_is_not_replaced() {
    let mut origin = FakeOrigin::with(&[("r1-aa", image("light"))]);
    let (dir, dest) = synced_device(&origin);
    origin.add_revision("r2-bb", image("dark"));
    let conn = rusqlite::Connection::open(&dest).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
         INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"in the log\"');",
    )
    .expect("a change in the log");
    let downloads = origin.downloads.get();
    for options in [
        Options::default(),
        Options {
            force: true,
            ..Options::default()
        },
    ] {
        assert_untouched(dir.path(), "FILE_IN_USE", || {
            run(&origin, &dest, &Selector::Current, options)
        });
    }
    assert_eq!(
        origin.downloads.get(),
        downloads,
        "refused before downloading"
    );
    // Once the program is done with it, the change is in the file, and seen as one.
    drop(conn);
    assert_untouched(dir.path(), "DIVERGED", || {
        run(&origin, &dest, &Selector::Current, Options::default())
    });
}
