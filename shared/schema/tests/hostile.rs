//! Malformed, truncated and hostile files get typed errors, never a panic and never a write.

#![allow(clippy::unwrap_used, reason = "tests")]

use snug_reasons::Reasoned as _;

use std::sync::Arc;

use proptest::prelude::*;
use rusqlite::Connection;
use snug_schema::{
    ImportError, ImportOptions, NewApp, OpenError, SaveVersion, SteppingClock, UserDb, import,
    inspect_bytes,
};

fn clock() -> Arc<SteppingClock> {
    Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000))
}

/// A small valid user database with an app, a secret and app data.
fn valid_image() -> Vec<u8> {
    let (mut db, _) = UserDb::create_in_memory(clock()).unwrap();
    db.install_app(&NewApp {
        app_id: Some("a".to_owned()),
        html: "<p>hello</p>".repeat(50),
        ..NewApp::default()
    })
    .unwrap();
    db.save_app_version("a", "v2", &SaveVersion::default())
        .unwrap();
    db.set_secret("byok:anthropic", "sk-test").unwrap();
    db.connection()
        .execute_batch("CREATE TABLE app_x61__t (v); INSERT INTO app_x61__t VALUES (1), (2);")
        .unwrap();
    db.to_bytes().unwrap()
}

/// Applies raw SQL to an image on a connection without the defensive settings (as an attacker
/// crafting a file would), returning the new image.
fn craft(image: &[u8], sql: &str) -> Vec<u8> {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.deserialize_read_exact(rusqlite::MAIN_DB, image, image.len(), false)
        .unwrap();
    conn.execute_batch(sql).unwrap();
    conn.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
}

#[track_caller]
fn check_import(bytes: &[u8], reason: &str) {
    let err = import(bytes, None, &ImportOptions::default(), clock()).unwrap_err();
    assert_eq!(err.reason().name, reason, "{err:?}");
}

#[test]
fn crafted_schemas_get_typed_refusals() {
    let image = valid_image();
    let cases = [
        (
            "CREATE TRIGGER leak AFTER INSERT ON snug_secrets BEGIN INSERT INTO snug_profile VALUES (new.key, new.value); END",
            "HOSTILE_SCHEMA",
        ),
        (
            "CREATE VIEW snug_peek AS SELECT * FROM snug_secrets",
            "HOSTILE_SCHEMA",
        ),
        ("CREATE TABLE notes (x)", "HOSTILE_SCHEMA"),
        ("CREATE TABLE app_zz__t (x)", "HOSTILE_SCHEMA"),
        ("CREATE INDEX spy ON snug_secrets (value)", "HOSTILE_SCHEMA"),
        (
            "PRAGMA writable_schema = ON; \
          INSERT INTO sqlite_master VALUES ('table', 'vt', 'vt', 0, 'CREATE VIRTUAL TABLE vt USING no_such_module(x)'); \
          PRAGMA writable_schema = OFF;",
            "HOSTILE_SCHEMA",
        ),
        ("DROP TABLE snug_meta", "NOT_A_USER_DATABASE"),
        ("PRAGMA user_version = 7", "SCHEMA_TOO_NEW"),
        ("PRAGMA user_version = -1", "MALFORMED"),
    ];
    for (sql, reason) in cases {
        let bytes = craft(&image, sql);
        check_import(&bytes, reason);
        match inspect_bytes(&bytes) {
            Ok(inspection) => assert_eq!(
                inspection.import_refusal.map(|r| r.reason),
                Some(reason),
                "{sql}"
            ),
            Err(err) => assert_eq!(err.reason().name, reason, "{sql}"),
        }
    }
}

#[test]
fn damaged_files_get_typed_errors() {
    let image = valid_image();
    let page = 4096;
    let mut zeroed_page = image.clone();
    zeroed_page[page * 2..page * 3].fill(0);
    let mut bad_page_size = image.clone();
    bad_page_size[16..18].copy_from_slice(&3000u16.to_be_bytes());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "NOT_SQLITE"),
        ("zeroes", vec![0; page * 4], "NOT_SQLITE"),
        ("text", b"hello world".to_vec(), "NOT_SQLITE"),
        ("magic only", image[..16].to_vec(), "MALFORMED"),
        ("half a page", image[..page / 2].to_vec(), "MALFORMED"),
        (
            "one byte short",
            image[..image.len() - 1].to_vec(),
            "MALFORMED",
        ),
        ("bad page size", bad_page_size, "MALFORMED"),
        ("a zeroed page", zeroed_page, "MALFORMED"),
        (
            "truncated at a page",
            image[..page * 3].to_vec(),
            "MALFORMED",
        ),
    ];
    for (label, bytes, reason) in cases {
        let err = import(&bytes, None, &ImportOptions::default(), clock()).unwrap_err();
        assert_eq!(err.reason().name, reason, "{label}: {err:?}");
        let err = UserDb::from_bytes(&bytes, clock()).unwrap_err();
        assert_eq!(err.reason().name, reason, "{label}: {err:?}");
    }
}

#[test]
fn a_wal_flagged_image_is_read_without_changing_the_callers_bytes() {
    let mut image = valid_image();
    image[18] = 2;
    image[19] = 2;
    let copy = image.clone();
    let (db, _) = import(&image, None, &ImportOptions::default(), clock()).unwrap();
    assert_eq!(db.apps().unwrap().len(), 1);
    assert_eq!(image, copy);
}

#[test]
fn hostile_files_on_disk_are_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("user.snug");
    let bytes = craft(
        &valid_image(),
        "CREATE TRIGGER t AFTER DELETE ON snug_apps BEGIN DELETE FROM snug_secrets; END",
    );
    std::fs::write(&path, &bytes).unwrap();
    let err = UserDb::open_path(&path, clock()).unwrap_err();
    assert!(matches!(err, OpenError::HostileSchema { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// Applies `flips` (offset, xor) to the image and optionally truncates it.
fn mutate(image: &[u8], flips: &[(usize, u8)], truncate_to: Option<usize>) -> Vec<u8> {
    let mut bytes = image.to_vec();
    for (offset, xor) in flips {
        let idx = offset % bytes.len();
        bytes[idx] ^= xor.max(&1);
    }
    if let Some(len) = truncate_to {
        bytes.truncate(len % (bytes.len() + 1));
    }
    bytes
}

fn image() -> &'static [u8] {
    static IMAGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    IMAGE.get_or_init(valid_image)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn mutated_images_never_panic(
        flips in proptest::collection::vec((0usize..1 << 20, any::<u8>()), 1..8),
        truncate_to in proptest::option::weighted(0.2, 0usize..1 << 20),
        header_only in any::<bool>(),
    ) {
        let base = image();
        // Half the cases aim at the first page, where the header and schema live.
        let flips: Vec<(usize, u8)> =
            flips.into_iter().map(|(o, x)| (if header_only { o % 4096 } else { o }, x)).collect();
        let bytes = mutate(base, &flips, truncate_to);
        match import(&bytes, None, &ImportOptions::default(), clock()) {
            Ok((db, _)) => prop_assert!(db.apps().is_ok() || db.apps().is_err()),
            Err(err) => prop_assert!(!err.reason().name.is_empty()),
        }
        match UserDb::from_bytes(&bytes, clock()) {
            Ok((mut db, _)) => { let _ = db.to_bytes(); }
            Err(err) => prop_assert!(!err.reason().name.is_empty()),
        }
        let _ = inspect_bytes(&bytes);
    }

    #[test]
    fn mutated_files_on_disk_never_panic(flips in proptest::collection::vec((0usize..1 << 17, any::<u8>()), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("user.snug");
        let bytes = mutate(image(), &flips, None);
        std::fs::write(&path, &bytes).unwrap();
        if let Err(err) = UserDb::open_path(&path, clock()) {
            prop_assert!(!err.reason().name.is_empty());
            if matches!(err, OpenError::HostileSchema { .. } | OpenError::SchemaTooNew { .. } | OpenError::NotSqlite) {
                prop_assert_eq!(std::fs::read(&path).unwrap(), bytes);
            }
        }
    }
}

#[test]
fn import_errors_are_exhaustively_mappable() {
    // A service's mapping is an exhaustive match; this one compiles only while it covers every variant.
    fn code(err: &ImportError) -> u8 {
        match err {
            ImportError::Locked => 1,
            ImportError::CorruptContainer(_) => 2,
            ImportError::TooLarge { .. } => 3,
            ImportError::NotSqlite => 4,
            ImportError::Malformed { .. } | ImportError::Unreadable(_) => 4,
            ImportError::NotAUserDatabase => 4,
            ImportError::SchemaTooNew { .. } => 5,
            ImportError::HostileSchema { .. } | ImportError::AppTokenCollision { .. } => 6,
            ImportError::Entropy(_) | ImportError::Sqlite(_) => 7,
        }
    }
    assert_eq!(code(&ImportError::Locked), 1);
}
