//! Tests of export: default-deny by class and no secret byte anywhere (reference U11, U12).

#![allow(clippy::unwrap_used, reason = "tests")]

use serde_json::json;

use super::*;
use crate::test_support::{clock, new_db};

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// A database whose secrets span inline cells, overflow pages and a multi-page table, with a
/// foreign table beside the app data.
fn db_with_secrets() -> (UserDb, Vec<String>) {
    let mut db = new_db();
    let mut secrets = Vec::new();
    for n in 0..200 {
        let value = format!(
            "SECRET-{n:04}-{}",
            "s".repeat(if n % 50 == 0 { 9000 } else { 40 })
        );
        db.set_secret(&format!("auth:app:slot{n}:key"), &value)
            .unwrap();
        secrets.push(format!("SECRET-{n:04}-"));
    }
    db.set_setting("mode", &json!("byok")).unwrap();
    db.connection()
        .execute_batch(
            "CREATE TABLE notes (x); INSERT INTO notes VALUES ('FOREIGN-NOTE');
             CREATE TABLE app_x61__items (v); INSERT INTO app_x61__items VALUES ('APP-ROW');",
        )
        .unwrap();
    (db, secrets)
}

#[test]
fn export_file_strips_secrets_and_foreign_tables_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let (db, secrets) = db_with_secrets();
    let src = dir.path().join("user.snug");
    db.save_to(&src).unwrap();
    let source = std::fs::read(&src).unwrap();
    assert!(secrets.iter().all(|s| contains(&source, s)));

    let out = dir.path().join("export.snug");
    let report = export_file(&src, &out, ExportOptions::default()).unwrap();
    assert_eq!(
        (
            report.secrets_removed,
            report.tables_dropped.as_slice(),
            report.source_version
        ),
        (200, &["notes".to_owned()][..], 6)
    );
    let exported = std::fs::read(&out).unwrap();
    for secret in &secrets {
        assert!(!contains(&exported, secret), "{secret} survived");
    }
    assert!(!contains(&exported, "FOREIGN-NOTE"));
    assert!(contains(&exported, "APP-ROW"), "app data is portable");
    assert_eq!(std::fs::read(&src).unwrap(), source);
    let (exported_db, report) = UserDb::open_path(&out, clock()).unwrap();
    assert!(!report.wrote, "an export is a healthy v6 file");
    assert!(exported_db.secret_keys().unwrap().is_empty());
    assert_eq!(exported_db.setting("mode").unwrap(), Some(json!("byok")));

    let with = dir.path().join("with.snug");
    let report = export_file(
        &src,
        &with,
        ExportOptions {
            include_secrets: true,
        },
    )
    .unwrap();
    assert_eq!(report.secrets_removed, 0);
    let with_bytes = std::fs::read(&with).unwrap();
    assert!(secrets.iter().all(|s| contains(&with_bytes, s)));
    assert!(
        !contains(&with_bytes, "FOREIGN-NOTE"),
        "foreign tables never travel"
    );

    assert!(matches!(
        export_file(&src, &with, ExportOptions::default()),
        Err(ExportError::OutputExists { .. })
    ));
}

#[test]
fn export_bytes_leaves_no_secret_even_from_the_sources_free_pages() {
    let (mut db, secrets) = db_with_secrets();
    // Deleting without secure_delete leaves the bytes in free pages of the source image.
    db.connection()
        .execute(
            "DELETE FROM snug_secrets WHERE key LIKE 'auth:app:slot1%'",
            [],
        )
        .unwrap();
    let (bytes, report) = export_bytes(&mut db, ExportOptions::default()).unwrap();
    assert_eq!(report.bytes, bytes.len() as u64);
    for secret in &secrets {
        assert!(!contains(&bytes, secret), "{secret} survived");
    }
    let (mut with_db, _) = UserDb::from_bytes(
        &export_bytes(
            &mut db,
            ExportOptions {
                include_secrets: true,
            },
        )
        .unwrap()
        .0,
        clock(),
    )
    .unwrap();
    assert_eq!(with_db.secret_keys().unwrap().len(), 200 - 111);
    assert!(with_db.to_bytes().is_ok());
}

#[test]
fn an_old_source_is_migrated_in_the_copy_only() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = db_with_secrets();
    db.connection()
        .execute_batch("ALTER TABLE snug_app_versions DROP COLUMN runtime_contract_json; PRAGMA user_version = 5")
        .unwrap();
    let src = dir.path().join("old.sqlite");
    db.save_to(&src).unwrap();
    let source = std::fs::read(&src).unwrap();
    let out = dir.path().join("export.snug");
    let report = export_file(&src, &out, ExportOptions::default()).unwrap();
    assert_eq!(report.source_version, 5);
    assert_eq!(std::fs::read(&src).unwrap(), source);
    let (_, reopened) = UserDb::open_path(&out, clock()).unwrap();
    assert!(!reopened.wrote);
}

/// The pages of `image` (4 KiB or the header's page size).
fn pages(image: &[u8]) -> Vec<&[u8]> {
    let size = match u16::from_be_bytes([image[16], image[17]]) {
        1 => 65_536,
        n => usize::from(n),
    };
    image.chunks(size).collect()
}

/// A database with a few thousand rows in an app table, some of them larger than a page, and
/// secrets, as a device's file is after a while.
fn device_db() -> (UserDb, Vec<String>) {
    let (db, secrets) = db_with_secrets();
    let conn = db.connection();
    for n in 0..3_000 {
        let size = if n % 97 == 0 { 6_000 } else { 120 };
        conn.execute(
            "INSERT INTO app_x61__items VALUES (?1)",
            [format!("ROW-{n:05}-{}", "r".repeat(size))],
        )
        .unwrap();
    }
    (db, secrets)
}

#[test]
fn the_sync_copy_strips_every_secret_byte_and_leaves_no_free_space_to_zero() {
    let (mut db, secrets) = device_db();
    // Deleted without secure_delete: the bytes stay in the live file's free space.
    db.connection()
        .execute(
            "DELETE FROM snug_secrets WHERE key LIKE 'auth:app:slot1%'",
            [],
        )
        .unwrap();
    db.connection()
        .execute("DELETE FROM app_x61__items WHERE v LIKE 'ROW-___50-%'", [])
        .unwrap();
    let (bytes, report) = sync_copy_bytes(&mut db, ExportOptions::default()).unwrap();
    assert_eq!(report.bytes, bytes.len() as u64);
    assert!(
        !report.vacuumed,
        "little is free: the page numbers are kept"
    );
    for secret in &secrets {
        assert!(!contains(&bytes, secret), "{secret} survived");
    }
    assert!(!contains(&bytes, "FOREIGN-NOTE"));
    assert!(
        !contains(&bytes, "ROW-00050-"),
        "a deleted row's bytes survived"
    );
    assert!(contains(&bytes, "ROW-00051-"));
    // What a hub accepts as it is: nothing to zero, no secrets.
    let verdict = crate::validate_sync_image(&bytes, clock(), &|| true).unwrap();
    assert!(verdict.free_space.is_empty(), "{:?}", verdict.free_space);
    // The same file gives the same bytes.
    assert_eq!(
        sync_copy_bytes(&mut db, ExportOptions::default())
            .unwrap()
            .0,
        bytes
    );
}

#[test]
fn a_small_edit_changes_few_pages_of_the_sync_copy_and_many_of_the_export() {
    let (mut db, _) = device_db();
    let before = sync_copy_bytes(&mut db, ExportOptions::default())
        .unwrap()
        .0;
    let exported = export_bytes(&mut db, ExportOptions::default()).unwrap().0;
    // A row larger than a page early in the file: an export renumbers every later page.
    db.connection()
        .execute(
            "UPDATE app_x61__items SET v = v || ?1 WHERE rowid = 3",
            [format!("-{}", "g".repeat(9_000))],
        )
        .unwrap();
    let after = sync_copy_bytes(&mut db, ExportOptions::default())
        .unwrap()
        .0;
    let exported_after = export_bytes(&mut db, ExportOptions::default()).unwrap().0;
    let changed = |old: &[u8], new: &[u8]| {
        let (old, new) = (pages(old), pages(new));
        new.iter()
            .enumerate()
            .filter(|(n, page)| old.get(*n) != Some(*page))
            .count()
    };
    let (copy, export) = (
        changed(&before, &after),
        changed(&exported, &exported_after),
    );
    assert!(copy <= 8, "{copy} pages of the sync copy changed");
    assert!(
        export > 4 * copy,
        "the export changed {export} pages, the copy {copy}"
    );
}

#[test]
fn a_sync_copy_mostly_free_is_compacted() {
    let (mut db, _) = device_db();
    db.connection()
        .execute("DELETE FROM app_x61__items WHERE rowid > 100", [])
        .unwrap();
    let (bytes, report) = sync_copy_bytes(&mut db, ExportOptions::default()).unwrap();
    assert!(report.vacuumed);
    let exported = export_bytes(&mut db, ExportOptions::default()).unwrap().0;
    assert_eq!(bytes.len(), exported.len(), "as small as the export");
}
