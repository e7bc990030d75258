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
