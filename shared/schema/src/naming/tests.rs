//! Tests of the §10 naming rule and of read-and-adopt through `UserDb::open_dir`.

#![allow(clippy::unwrap_used, reason = "tests")]

use snug_reasons::Reasoned as _;

use std::path::Path;

use serde_json::json;

use super::*;
use crate::UserDb;
use crate::test_support::clock;

fn touch(path: &Path) {
    std::fs::write(path, b"x").unwrap();
}

#[test]
fn canonical_wins_legacy_is_read_writes_go_to_canonical() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join(USER_FILE);
    let legacy = dir.path().join(LEGACY_USER_FILE);
    assert_eq!(
        resolve_user_file(dir.path()),
        UserFile {
            read: None,
            write: canonical.clone()
        }
    );
    touch(&legacy);
    let resolved = resolve_user_file(dir.path());
    assert_eq!(
        resolved,
        UserFile {
            read: Some(legacy.clone()),
            write: canonical.clone()
        }
    );
    assert!(resolved.is_adopting());
    touch(&canonical);
    let resolved = resolve_user_file(dir.path());
    assert_eq!(
        resolved,
        UserFile {
            read: Some(canonical.clone()),
            write: canonical.clone()
        }
    );
    assert!(!resolved.is_adopting());
}

#[test]
fn derived_names_follow_the_same_rule_independently() {
    let dir = tempfile::tempdir().unwrap();
    touch(&dir.path().join(USER_FILE));
    touch(&dir.path().join("user.sqlite.sync.json"));
    let sidecar = resolve_derived(dir.path(), SYNC_SIDECAR_SUFFIX);
    assert_eq!(
        sidecar.read,
        Some(dir.path().join("user.sqlite.sync.json")),
        "the legacy sidecar is still found"
    );
    assert_eq!(sidecar.write, dir.path().join("user.snug.sync.json"));
}

#[test]
fn a_given_path_stands_for_its_file_its_adopted_file_or_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let canonical = dir.path().join(USER_FILE);
    let legacy = dir.path().join(LEGACY_USER_FILE);
    let given = |path: &Path| {
        let g = resolve_given(path);
        (g.read, g.write, g.standing)
    };
    // Nothing yet: each name stands for itself.
    assert_eq!(
        given(&canonical),
        (None, canonical.clone(), Standing::AsNamed)
    );
    assert_eq!(given(&legacy), (None, legacy.clone(), Standing::AsNamed));
    // A lone legacy file, given under either name: read it, write user.snug.
    touch(&legacy);
    for path in [&canonical, &legacy] {
        assert_eq!(
            given(path),
            (Some(legacy.clone()), canonical.clone(), Standing::Adopting),
            "{}",
            path.display()
        );
    }
    // Adopted: user.snug is the user file, user.sqlite the backup, a file of its own.
    touch(&canonical);
    assert_eq!(
        given(&canonical),
        (
            Some(canonical.clone()),
            canonical.clone(),
            Standing::AsNamed
        )
    );
    assert_eq!(
        given(&legacy),
        (Some(legacy.clone()), legacy.clone(), Standing::Backup)
    );
    // Other names are never related to each other.
    let other = dir.path().join("notes.snug");
    touch(&dir.path().join("notes.sqlite"));
    assert_eq!(given(&other), (None, other.clone(), Standing::AsNamed));
}

#[test]
fn extensions_are_a_hint_and_formats_come_from_bytes() {
    assert!(has_user_file_extension("snug-user.snug"));
    assert!(has_user_file_extension("backup.SQLITE"));
    assert!(!has_user_file_extension("user.db"));
    assert_eq!(detect_format(b"SQLite format 3\0rest"), FileFormat::Sqlite);
    assert_eq!(detect_format(b"SNUGENC1\n\x01"), FileFormat::Protected);
    assert_eq!(detect_format(b"SQLite"), FileFormat::Unknown);
}

fn sha(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn a_lone_legacy_file_is_read_and_adopted_on_the_first_write_only() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join(LEGACY_USER_FILE);
    let canonical = dir.path().join(USER_FILE);
    UserDb::create_in_memory(clock())
        .unwrap()
        .0
        .save_to(&legacy)
        .unwrap();
    let legacy_bytes = sha(&legacy);

    let (mut db, report) = UserDb::open_dir(dir.path(), clock()).unwrap();
    assert!(!report.wrote);
    assert_eq!(db.pending_adoption(), Some(legacy.as_path()));
    assert!(
        !canonical.exists(),
        "reading does not create the canonical file"
    );
    assert!(db.apps().unwrap().is_empty());

    db.set_setting("mode", &json!("byok")).unwrap();
    assert!(canonical.exists() && db.pending_adoption().is_none());
    assert_eq!(db.path(), Some(canonical.as_path()));
    assert_eq!(
        sha(&legacy),
        legacy_bytes,
        "the legacy file is never modified, renamed or deleted"
    );
    drop(db);

    let (db, report) = UserDb::open_dir(dir.path(), clock()).unwrap();
    assert!(!report.wrote);
    assert_eq!(db.path(), Some(canonical.as_path()));
    assert_eq!(
        db.setting("mode").unwrap(),
        Some(json!("byok")),
        "the canonical file now wins"
    );
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, [USER_FILE, LEGACY_USER_FILE]);
}

#[test]
fn a_legacy_file_that_needs_migration_is_adopted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join(LEGACY_USER_FILE);
    let (db, _) = UserDb::create_in_memory(clock()).unwrap();
    db.connection().execute_batch("ALTER TABLE snug_app_versions DROP COLUMN runtime_contract_json; PRAGMA user_version = 5").unwrap();
    db.save_to(&legacy).unwrap();
    let legacy_bytes = sha(&legacy);
    let (db, report) = UserDb::open_dir(dir.path(), clock()).unwrap();
    assert!(report.advanced && report.wrote);
    assert_eq!(db.path(), Some(dir.path().join(USER_FILE).as_path()));
    assert_eq!(sha(&legacy), legacy_bytes);
    let version: i64 = db
        .connection()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 6);
}

#[test]
fn an_empty_or_protected_file_is_never_replaced_by_a_fresh_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(USER_FILE);
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        UserDb::open_path(&path, clock()).unwrap_err().reason().name,
        "NOT_SQLITE"
    );
    std::fs::write(&path, b"SNUGENC1\n\x01\x00\x01").unwrap();
    assert_eq!(
        UserDb::open_dir(dir.path(), clock())
            .unwrap_err()
            .reason()
            .name,
        "PROTECTED"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"SNUGENC1\n\x01\x00\x01");
}

#[test]
fn an_open_that_fails_on_a_new_path_leaves_no_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing_parent = dir.path().join("no/such/dir/user.snug");
    assert!(UserDb::open_path(&missing_parent, clock()).is_err());
    let fresh = dir.path().join(USER_FILE);
    let (_, report) = UserDb::open_path(&fresh, clock()).unwrap();
    assert!(report.seeded_meta && fresh.exists());
}

#[test]
fn user_databases_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<UserDb>();
}
