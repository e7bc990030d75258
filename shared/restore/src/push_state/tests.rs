//! Tests of the push-state sidecar: format, tolerance, naming and that saving never touches the
//! user file.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use snug_schema::{SteppingClock, UserDb};

use crate::SnapshotInfo;

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
    expect.assert_eq(&String::from_utf8(SyncState::decode(bytes).encode()).unwrap());
}

/// A state recording one sync with the origin `id`.
fn synced(id: &str, revision: &str, hash: &str) -> SyncState {
    let mut state = SyncState::default();
    state.record(
        &OriginId::parse(id).unwrap(),
        OriginState {
            address: "http://127.0.0.1:8080/userdb".into(),
            revision: revision.into(),
            sha256: hash.into(),
            content_hash: hash.into(),
            synced_at: "2026-01-01T00:00:00.000Z".into(),
        },
    );
    state
}

const HUB: &str = "hub:0123456789abcdef0123456789abcdef";
const DIR: &str = "dir:fedcba9876543210fedcba9876543210";

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
fn an_earlier_releases_record_is_read_as_unclaimed_and_garbage_forgotten() {
    check(
        b"SNUGSYNC1\n{\"lastPushedRevision\":\"r2-abc\",\"lastPushedHash\":\"00ff\",\"lastSyncAt\":\"2026-01-01T00:00:00.000Z\"}",
        expect![[r#"{"format":"snug-sync-state/2","origins":{},"unclaimed":{"lastPushedRevision":"r2-abc","lastPushedHash":"00ff","lastSyncAt":"2026-01-01T00:00:00.000Z"}}"#]],
    );
    // Half a record names no revision to adopt: nothing is claimed.
    check(
        b"{\"lastPushedHash\":\"00ff\"}",
        expect![[r#"{"format":"snug-sync-state/2","origins":{}}"#]],
    );
    check(
        b"{\"lastPushedHash\":7,\"lastSyncAt\":\"t\",\"other\":[]}",
        expect![[r#"{"format":"snug-sync-state/2","origins":{}}"#]],
    );
    for garbage in [
        &b"SNUGSYNC1\n"[..],
        b"SNUGSYNC1\n[1,2]",
        b"\xff\xfe garbage",
        b"",
    ] {
        assert!(SyncState::decode(garbage).is_empty(), "{garbage:?}");
    }
    // A record under something that is no origin identity, or not a record, is left out; the
    // rest is kept.
    check(
        br#"{"format":"snug-sync-state/2","origins":{"nobody":{"address":"a","revision":"r1","sha256":"x","contentHash":"x","syncedAt":"t"},"hub:0123456789abcdef0123456789abcdef":{"revision":7},"dir:fedcba9876543210fedcba9876543210":{"address":"/d","revision":"r1-a","sha256":"x","contentHash":"y","syncedAt":"t"}}}"#,
        expect![[r#"{"format":"snug-sync-state/2","origins":{"dir:fedcba9876543210fedcba9876543210":{"address":"/d","revision":"r1-a","sha256":"x","contentHash":"y","syncedAt":"t"}}}"#]],
    );
}

#[test]
fn each_origin_has_its_own_record_and_the_json_round_trips() {
    let mut state = synced(HUB, "r1-aa", "11");
    let other = synced(DIR, "r1-aa", "22");
    let dir_id = OriginId::parse(DIR).unwrap();
    state.record(&dir_id, other.at(&dir_id).unwrap().clone());
    let bytes = state.encode();
    assert!(bytes.starts_with(b"{"), "the sidecar is JSON");
    assert_eq!(SyncState::decode(&bytes), state);
    let hub = OriginId::parse(HUB).unwrap();
    assert_eq!(state.at(&hub).unwrap().content_hash, "11");
    assert_eq!(
        state.at(&dir_id).unwrap().content_hash,
        "22",
        "the same revision token, another origin"
    );
    assert_eq!(
        state.at(&OriginId::parse("url:http://elsewhere/userdb").unwrap()),
        None
    );
    assert_eq!(state.origins().count(), 2);
    assert_eq!(
        state.last_origin.as_deref(),
        Some("http://127.0.0.1:8080/userdb")
    );
}

#[test]
fn an_unclaimed_record_is_adopted_only_where_the_head_is_its_revision_and_hash() {
    let legacy = b"SNUGSYNC1\n{\"lastPushedRevision\":\"r2-abc\",\"lastPushedHash\":\"1111111111111111111111111111111111111111111111111111111111111111\"}";
    let head = |revision: &str, byte: u8| SnapshotInfo {
        revision: revision.into(),
        sha256: [byte; 32],
        size: 1,
        storage_version: None,
    };
    let hub = OriginId::parse(HUB).unwrap();
    for wrong in [None, Some(head("r2-abc", 0x22)), Some(head("r3-abc", 0x11))] {
        let mut state = SyncState::decode(legacy);
        assert!(!state.adopt(&hub, "h", wrong.as_ref()), "{wrong:?}");
        assert_eq!(state.at(&hub), None);
        assert!(
            state.unclaimed.is_some(),
            "kept for the origin it belongs to"
        );
    }
    let mut state = SyncState::decode(legacy);
    assert!(state.adopt(&hub, "h", Some(&head("r2-abc", 0x11))));
    assert_eq!(state.at(&hub).unwrap().revision, "r2-abc");
    assert_eq!(state.unclaimed, None, "one origin claims it");
    let dir = OriginId::parse(DIR).unwrap();
    assert!(!state.adopt(&dir, "d", Some(&head("r2-abc", 0x11))));
}

#[test]
fn the_sidecar_follows_read_and_adopt() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join("user.snug");
    let legacy_sidecar = dir.path().join("user.sqlite.sync.json");
    let state = synced(HUB, "r1-aa", "abc");
    std::fs::write(&legacy_sidecar, state.encode()).unwrap();
    // A sidecar written beside user.sqlite is found from either name until adopted.
    assert_eq!(load(&canonical).unwrap(), state);
    assert_eq!(load(&dir.path().join("user.sqlite")).unwrap(), state);
    let newer = synced(HUB, "r2-bb", "def");
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
        SyncState::default()
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
fn a_legacy_backup_has_no_sync_state_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join("user.snug");
    let legacy = dir.path().join("user.sqlite");
    std::fs::write(&legacy, b"x").unwrap();
    let lineage = synced(DIR, "r5-aa", "abc");
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
    let newer = synced(DIR, "r6-bb", "abc");
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
    let state = synced(HUB, "r1-x", &before);
    save(&path, &state).unwrap();
    assert_eq!(sha256_file(&path), before);
    assert_eq!(load(&path).unwrap(), state);
    let written = std::fs::read(dir.path().join("user.snug.sync.json")).unwrap();
    assert!(
        serde_json::from_slice::<serde_json::Value>(&written).is_ok(),
        "the sidecar is JSON"
    );
    // A corrupt sidecar reads as never synced.
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
