//! Tests of the push-state sidecar: format, tolerance, naming and that saving never touches the
//! user file.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use snug_schema::{SteppingClock, UserDb};

use super::*;

/// A new user database at `dir/user.snug`, open in place.
fn sample_file(dir: &Path) -> (UserDb, PathBuf) {
    let clock = Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000));
    let path = dir.join("user.snug");
    let bytes = UserDb::create_in_memory(clock.clone())
        .unwrap()
        .0
        .to_bytes()
        .unwrap();
    std::fs::write(&path, bytes).unwrap();
    (UserDb::open_path(&path, clock).unwrap().0, path)
}

/// Hex SHA-256 of a file.
fn sha256_file(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

#[track_caller]
fn check(bytes: &[u8], expect: Expect) {
    expect.assert_debug_eq(&PushState::decode(bytes));
}

#[test]
fn reasons_are_stable_words() {
    let io = PushStateError::Io {
        path: "p".into(),
        source: std::io::Error::other("x"),
    };
    let backup = PushStateError::LegacyBackup { path: "p".into() };
    assert_eq!([io.reason(), backup.reason()], ["IO", "LEGACY_BACKUP"]);
}

#[test]
fn decoding_tolerates_bare_json_and_forgets_garbage() {
    check(
        b"SNUGSYNC1\n{\"lastPushedRevision\":\"r2-abc\",\"lastPushedHash\":\"00ff\",\"lastSyncAt\":\"2026-01-01T00:00:00.000Z\"}",
        expect![[r#"
            PushState {
                last_pushed_revision: Some(
                    "r2-abc",
                ),
                last_pushed_hash: Some(
                    "00ff",
                ),
                last_sync_at: Some(
                    "2026-01-01T00:00:00.000Z",
                ),
            }
        "#]],
    );
    check(
        b"{\"lastPushedHash\":\"00ff\"}",
        expect![[r#"
        PushState {
            last_pushed_revision: None,
            last_pushed_hash: Some(
                "00ff",
            ),
            last_sync_at: None,
        }
    "#]],
    );
    check(
        b"{\"lastPushedHash\":7,\"lastSyncAt\":\"t\",\"other\":[]}",
        expect![[r#"
        PushState {
            last_pushed_revision: None,
            last_pushed_hash: None,
            last_sync_at: Some(
                "t",
            ),
        }
    "#]],
    );
    check(
        b"SNUGSYNC1\n",
        expect![[r#"
        PushState {
            last_pushed_revision: None,
            last_pushed_hash: None,
            last_sync_at: None,
        }
    "#]],
    );
    check(
        b"SNUGSYNC1\n[1,2]",
        expect![[r#"
        PushState {
            last_pushed_revision: None,
            last_pushed_hash: None,
            last_sync_at: None,
        }
    "#]],
    );
    check(
        b"\xff\xfe garbage",
        expect![[r#"
        PushState {
            last_pushed_revision: None,
            last_pushed_hash: None,
            last_sync_at: None,
        }
    "#]],
    );
    check(
        b"",
        expect![[r#"
        PushState {
            last_pushed_revision: None,
            last_pushed_hash: None,
            last_sync_at: None,
        }
    "#]],
    );
}

#[test]
fn encoding_is_the_magic_and_compact_json() {
    let state = PushState {
        last_pushed_revision: Some("r7-x".into()),
        last_pushed_hash: None,
        last_sync_at: Some("2026-01-01T00:00:00.000Z".into()),
    };
    let bytes = state.encode();
    expect![[r#"
        SNUGSYNC1
        {"lastPushedRevision":"r7-x","lastSyncAt":"2026-01-01T00:00:00.000Z"}"#]]
    .assert_eq(&String::from_utf8(bytes.clone()).unwrap());
    assert_eq!(PushState::decode(&bytes), state);
    assert_eq!(PushState::default().encode(), b"SNUGSYNC1\n{}");
    assert!(PushState::decode(b"SNUGSYNC1\n{}").is_empty());
}

#[test]
fn the_sidecar_follows_read_and_adopt() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join("user.snug");
    let legacy_sidecar = dir.path().join("user.sqlite.sync.json");
    let state = PushState {
        last_pushed_hash: Some("abc".into()),
        ..PushState::default()
    };
    std::fs::write(&legacy_sidecar, state.encode()).unwrap();
    // A sidecar written beside user.sqlite is found from either name until adopted.
    assert_eq!(load(&canonical).unwrap(), state);
    assert_eq!(load(&dir.path().join("user.sqlite")).unwrap(), state);
    let newer = PushState {
        last_pushed_hash: Some("def".into()),
        ..PushState::default()
    };
    let written = save(&dir.path().join("user.sqlite"), &newer).unwrap();
    assert_eq!(written, dir.path().join("user.snug.sync.json"));
    assert_eq!(load(&canonical).unwrap(), newer);
    assert_eq!(
        std::fs::read(&legacy_sidecar).unwrap(),
        state.encode(),
        "never renamed or rewritten"
    );

    // Other names: <f>.sync.json, and <stem>.sqlite.sync.json read for <stem>.snug.
    let other = dir.path().join("notes.snug");
    assert_eq!(
        sidecar_location(&other).unwrap().write,
        dir.path().join("notes.snug.sync.json")
    );
    assert_eq!(sidecar_location(&other).unwrap().read, None);
    std::fs::write(dir.path().join("notes.sqlite.sync.json"), state.encode()).unwrap();
    assert_eq!(load(&other).unwrap(), state);
    assert_eq!(
        load(&dir.path().join("missing.db")).unwrap(),
        PushState::default()
    );
    assert_eq!(
        sidecar_location(Path::new("user.snug")).unwrap().write,
        Path::new(".").join("user.snug.sync.json")
    );
    // One lock per sidecar, whichever name of the user file a client was given.
    assert_eq!(
        lock_location(&other),
        dir.path().join("notes.snug.sync.lock")
    );
    for name in ["user.snug", "user.sqlite"] {
        assert_eq!(
            lock_location(&dir.path().join(name)),
            dir.path().join("user.snug.sync.lock"),
            "{name}"
        );
    }
}

#[test]
fn a_legacy_backup_has_no_push_state_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join("user.snug");
    let legacy = dir.path().join("user.sqlite");
    std::fs::write(&legacy, b"x").unwrap();
    let lineage = PushState {
        last_pushed_revision: Some("r5-aa".into()),
        last_pushed_hash: Some("abc".into()),
        ..PushState::default()
    };
    std::fs::write(dir.path().join("user.sqlite.sync.json"), lineage.encode()).unwrap();
    // Before adoption both names are one user file with one state and one lock.
    assert_eq!(load(&legacy).unwrap(), lineage);
    assert_eq!(
        lock_location(&legacy),
        dir.path().join("user.snug.sync.lock")
    );

    // Adopted: user.snug continues the lineage; user.sqlite is a backup that never synced.
    std::fs::write(&canonical, b"x").unwrap();
    assert_eq!(load(&canonical).unwrap(), lineage);
    assert_eq!(sidecar_location(&legacy), None);
    assert!(load(&legacy).unwrap().is_empty());
    let err = save(&legacy, &lineage).unwrap_err();
    assert_eq!(err.reason(), "LEGACY_BACKUP");
    assert_eq!(
        lock_location(&legacy),
        dir.path().join("user.sqlite.sync.lock"),
        "a file of its own, with a lock of its own"
    );
    // Once user.snug has its own sidecar, the legacy one is still nobody's state but history.
    let newer = PushState {
        last_pushed_revision: Some("r6-bb".into()),
        ..PushState::default()
    };
    save(&canonical, &newer).unwrap();
    assert_eq!(load(&canonical).unwrap(), newer);
    assert!(load(&legacy).unwrap().is_empty());
    assert_eq!(
        std::fs::read(dir.path().join("user.sqlite.sync.json")).unwrap(),
        lineage.encode(),
        "the legacy sidecar is never rewritten"
    );
}

#[test]
fn saving_never_changes_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, path) = sample_file(dir.path());
    let before = sha256_file(&path);
    let state = PushState {
        last_pushed_revision: Some("r1-x".into()),
        last_pushed_hash: Some(before.clone()),
        last_sync_at: Some("2026-01-01T00:00:00.000Z".into()),
    };
    save(&path, &state).unwrap();
    assert_eq!(sha256_file(&path), before);
    assert_eq!(load(&path).unwrap(), state);
    assert!(
        std::fs::read(dir.path().join("user.snug.sync.json"))
            .unwrap()
            .starts_with(SYNC_MAGIC)
    );
    // A corrupt sidecar reads as never pushed.
    std::fs::write(
        dir.path().join("user.snug.sync.json"),
        b"SNUGSYNC1\n{broken",
    )
    .unwrap();
    assert!(load(&path).unwrap().is_empty());
}

#[test]
fn the_sync_lock_is_exclusive_per_user_file_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join("user.snug");
    let held = SyncLock::try_acquire(&canonical).unwrap();
    assert_eq!(held.path(), dir.path().join("user.snug.sync.lock"));
    // Every name of one user file is one lock.
    let err = SyncLock::try_acquire(&dir.path().join("user.sqlite")).unwrap_err();
    assert_eq!(err.reason(), "SYNC_IN_PROGRESS");
    assert!(matches!(err, SyncLockError::Busy { path } if path == held.path()));
    let other = SyncLock::try_acquire(&dir.path().join("notes.snug")).unwrap();
    drop((held, other));
    let left = || std::fs::read_dir(dir.path()).unwrap().count();
    // Elsewhere the lock file is left behind, since removing a held file is not portable.
    if cfg!(unix) {
        assert_eq!(left(), 0, "a released lock removes its file");
    }
    let again = SyncLock::try_acquire(&canonical).unwrap();
    assert!(left() >= 1);
    drop(again);
}
