//! The install pipeline keeps a protected revision protected (§11.3, issue #17 point 3), installs
//! into a protected destination resealed in its own container (point 4), and refuses to install into the legacy backup beside an adopted `user.snug` (§10, point 2).

#![allow(clippy::unwrap_used, reason = "tests")]

use std::{io::Write, path::Path, sync::Arc};

use serde_json::json;
use sha2::{Digest as _, Sha256};
use snug_container::{Limits, Passphrase, RecoveryKey, Secrets};
use snug_restore::{Options, Origin, OriginError, Plan, Pushed, Selector, SnapshotInfo, prepare};
use snug_schema::{Clock, SteppingClock, UserDb};

fn clock() -> Arc<dyn Clock> {
    Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000))
}

fn limits() -> Limits {
    Limits {
        min_iterations: 1_000,
        ..Limits::default()
    }
}

/// An origin holding one revision.
struct OneRevision {
    info: SnapshotInfo,
    bytes: Vec<u8>,
}

impl OneRevision {
    fn new(bytes: Vec<u8>) -> Self {
        let info = SnapshotInfo {
            revision: "r1-aa".to_owned(),
            sha256: Sha256::digest(&bytes).into(),
            size: bytes.len() as u64,
            storage_version: None,
        };
        Self { info, bytes }
    }
}

impl Origin for OneRevision {
    fn describe(&self, _: &Selector) -> Result<SnapshotInfo, OriginError> {
        Ok(self.info.clone())
    }

    fn download(&self, _: &SnapshotInfo, sink: &mut dyn Write) -> Result<(), OriginError> {
        sink.write_all(&self.bytes).map_err(OriginError::Sink)
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

fn plain_image() -> Vec<u8> {
    let (mut db, _) = UserDb::create_in_memory(clock()).unwrap();
    db.set_setting("theme", &json!("protected")).unwrap();
    snug_restore::push_image(&db.to_bytes().unwrap(), false, clock())
        .unwrap()
        .bytes
}

fn prepared(origin: &OneRevision, dest: &Path) -> Box<snug_restore::Prepared> {
    match prepare(
        origin,
        dest,
        &Selector::Current,
        Options::default(),
        clock(),
    )
    .unwrap()
    {
        Plan::Install(prepared) => prepared,
        Plan::UpToDate(_) => panic!("nothing to install"),
    }
}

/// Asserts `installed` is `container` resealed: header, slots and wrapped keys unchanged, a
/// fresh payload IV (§11.2 rule 5).
#[track_caller]
fn assert_resealed_from(installed: &[u8], container: &[u8]) {
    let keep = snug_container::inspect(container, &limits())
        .unwrap()
        .payload_iv_offset();
    assert_eq!(
        installed[..keep],
        container[..keep],
        "header and slots unchanged"
    );
    assert_ne!(
        installed[keep..keep + 12],
        container[keep..keep + 12],
        "a fresh payload IV"
    );
}

#[test]
fn a_protected_revision_is_installed_protected_in_its_own_container() {
    let passphrase = Passphrase::new("correct horse battery staple");
    let recovery_key = RecoveryKey::generate();
    let container =
        snug_container::seal(&plain_image(), &passphrase, &recovery_key, 1_000, &limits()).unwrap();
    let origin = OneRevision::new(container.clone());
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("user.snug");

    // Without a secret: locked, and nothing is left behind.
    let downloaded = prepared(&origin, &dest)
        .download(&origin, &mut |_| {})
        .unwrap();
    assert!(downloaded.is_protected().unwrap());
    let err = downloaded.install().unwrap_err();
    assert_eq!(err.reason(), "LOCKED");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let by_recovery_key = Secrets::recovery_key(RecoveryKey::parse(&recovery_key.grouped()));
    let done = prepared(&origin, &dest)
        .download(&origin, &mut |_| {})
        .unwrap()
        .install_unlocking(Some(&by_recovery_key), &limits())
        .unwrap();
    assert!(done.protected);
    let installed = std::fs::read(&dest).unwrap();
    assert_resealed_from(&installed, &container);
    for secrets in [Secrets::passphrase(passphrase), by_recovery_key] {
        let opened = snug_container::open(&installed, &secrets, &limits()).unwrap();
        let (db, _) = UserDb::from_bytes(&opened.plaintext, clock()).unwrap();
        assert_eq!(db.setting("theme").unwrap(), Some(json!("protected")));
    }
}

#[test]
fn the_legacy_backup_beside_user_snug_is_never_a_destination() {
    let origin = OneRevision::new(plain_image());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("user.snug"), plain_image()).unwrap();
    let backup = dir.path().join("user.sqlite");
    std::fs::write(&backup, plain_image()).unwrap();
    let before = std::fs::read(&backup).unwrap();
    let err = prepare(
        &origin,
        &backup,
        &Selector::Current,
        Options::default(),
        clock(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "LEGACY_BACKUP");
    assert_eq!(std::fs::read(&backup).unwrap(), before);
}

/// A pull into a protected destination (issue #17 point 4): refused as `PROTECTED` without a
/// secret and `LOCKED` with a wrong one (the file untouched both times); with its secret the new
/// database is resealed in the destination's own container (same header, salt and slots, a fresh
/// payload IV), so the recovery key written down at protect still opens it, and the local
/// credentials are carried in.
#[test]
fn a_pull_into_a_protected_destination_is_resealed_in_its_own_container() {
    let passphrase = Passphrase::new("correct horse battery staple");
    let recovery_key = RecoveryKey::generate();
    let (mut local, _) = UserDb::create_in_memory(clock()).unwrap();
    local.set_setting("theme", &json!("local")).unwrap();
    local.set_secret("provider.key", "sk-local").unwrap();
    let container = snug_container::seal(
        &local.to_bytes().unwrap(),
        &passphrase,
        &recovery_key,
        1_000,
        &limits(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("user.snug");
    std::fs::write(&dest, &container).unwrap();
    let origin = OneRevision::new(plain_image());
    let force = Options {
        force: true,
        ..Options::default()
    };

    let err = prepare(&origin, &dest, &Selector::Current, force, clock()).unwrap_err();
    assert_eq!(err.reason(), "PROTECTED");
    let wrong = Secrets::passphrase(Passphrase::new("not it"));
    let limits = limits();
    let unlock = |secrets| snug_restore::Unlock {
        secrets,
        limits: &limits,
    };
    let err = snug_restore::prepare_unlocking(
        &origin,
        &dest,
        &Selector::Current,
        force,
        Some(unlock(&wrong)),
        clock(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "LOCKED");
    assert_eq!(std::fs::read(&dest).unwrap(), container, "untouched");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let by_passphrase = Secrets::passphrase(passphrase);
    let Plan::Install(prepared) = snug_restore::prepare_unlocking(
        &origin,
        &dest,
        &Selector::Current,
        force,
        Some(unlock(&by_passphrase)),
        clock(),
    )
    .unwrap() else {
        panic!("nothing to install");
    };
    let done = prepared
        .download(&origin, &mut |_| {})
        .unwrap()
        .install_unlocking(None, &limits)
        .unwrap();
    assert!(done.protected && done.kept_destination_container);
    assert_eq!(done.secrets_kept, 1);
    let installed = std::fs::read(&dest).unwrap();
    assert_resealed_from(&installed, &container);
    let by_recovery_key = Secrets::recovery_key(RecoveryKey::parse(&recovery_key.grouped()));
    for secrets in [by_passphrase, by_recovery_key] {
        let opened = snug_container::open(&installed, &secrets, &limits).unwrap();
        let (db, _) = UserDb::from_bytes(&opened.plaintext, clock()).unwrap();
        assert_eq!(
            db.setting("theme").unwrap(),
            Some(json!("protected")),
            "pulled"
        );
        assert_eq!(
            db.secret("provider.key").unwrap().as_deref(),
            Some("sk-local")
        );
    }
}

/// A protected revision whose header checksum fails is damage whatever its version byte says,
/// and with a valid checksum an unknown version is a newer format (§11.2 rule 6, both orders):
/// the install pipeline reports what the container library finds, and installs nothing.
#[test]
fn a_protected_revision_with_a_damaged_version_byte_is_corrupt_not_newer() {
    let passphrase = Passphrase::new("correct horse battery staple");
    let recovery_key = RecoveryKey::generate();
    let mut damaged =
        snug_container::seal(&plain_image(), &passphrase, &recovery_key, 1_000, &limits()).unwrap();
    damaged[9] = 2;
    let newer = snug_container::with_valid_checksum(&damaged);
    for (bytes, reason) in [(damaged, "CORRUPT"), (newer, "UNSUPPORTED_FORMAT_VERSION")] {
        let origin = OneRevision::new(bytes);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("user.snug");
        let err = prepared(&origin, &dest)
            .download(&origin, &mut |_| {})
            .unwrap()
            .install_unlocking(Some(&Secrets::passphrase(passphrase.clone())), &limits())
            .unwrap_err();
        assert_eq!(err.reason(), reason);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
