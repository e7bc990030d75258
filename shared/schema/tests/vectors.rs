//! Data-driven checks against every user-database vector made by the reference implementation.
//!
//! The vectors live in `shared/vectors/reference` beside the workspace (override with
//! `SNUG_VECTORS_DIR`); a missing directory fails the run rather than skipping it.

#![allow(clippy::unwrap_used, reason = "tests")]

use snug_reasons::Reasoned as _;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use rusqlite::Connection;
use serde_json::Value;
use sha2::{Digest, Sha256};
use snug_schema::{
    ExportOptions, ImportError, ImportOptions, OpenError, SteppingClock, UserDb, export_bytes,
    export_file, import, inspect_bytes, migrate_bytes, migrate_file,
};
use snug_test_support::vectors_dir;

fn manifest() -> Value {
    let text = std::fs::read_to_string(vectors_dir().join("manifest.json"))
        .expect("manifest.json readable");
    serde_json::from_str(&text).expect("manifest.json is JSON")
}

fn userdb_entry(name: &str) -> Value {
    manifest()["userdb"]
        .as_array()
        .expect("userdb list")
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("no userdb vector {name}"))
        .clone()
}

fn read_vector(file: &str) -> Vec<u8> {
    std::fs::read(vectors_dir().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn clock() -> Arc<SteppingClock> {
    Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000))
}

/// Renders `PRAGMA table_info` the way the manifest's `columns` blocks do.
fn table_info(conn: &Connection, table: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)")
        .unwrap();
    stmt.query_map([table], |row| {
        let mut line = format!("{} {}", row.get::<_, String>(0)?, row.get::<_, String>(1)?);
        if row.get::<_, i64>(2)? != 0 {
            line.push_str(" NOT NULL");
        }
        if let Some(default) = row.get::<_, Option<String>>(3)? {
            line.push_str(&format!(" DEFAULT {default}"));
        }
        let pk: i64 = row.get(4)?;
        if pk != 0 {
            line.push_str(&format!(" PK{pk}"));
        }
        Ok(line)
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn columns_of(conn: &Connection) -> BTreeMap<String, Vec<String>> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    names
        .into_iter()
        .map(|name| (name.clone(), table_info(conn, &name)))
        .collect()
}

fn expected_columns(inspect: &Value) -> BTreeMap<String, Vec<String>> {
    inspect["columns"]
        .as_object()
        .expect("columns block")
        .iter()
        .map(|(table, cols)| {
            (
                table.clone(),
                cols.as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

fn row_counts(conn: &Connection) -> BTreeMap<String, i64> {
    columns_of(conn)
        .into_keys()
        .filter(|name| name != "sqlite_sequence")
        .map(|name| {
            let n = conn
                .query_row(&format!("SELECT count(*) FROM \"{name}\""), [], |row| {
                    row.get(0)
                })
                .unwrap();
            (name, n)
        })
        .collect()
}

fn expected_row_counts(inspect: &Value) -> BTreeMap<String, i64> {
    inspect["row_counts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
        .collect()
}

fn secret_keys(conn: &Connection) -> Vec<String> {
    conn.prepare("SELECT key FROM snug_secrets ORDER BY key")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn versions(conn: &Connection) -> Vec<(String, i64, i64)> {
    conn.prepare("SELECT app_id, version, pinned FROM snug_app_versions ORDER BY app_id, version")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn expected_versions(entry: &Value) -> Vec<(String, i64, i64)> {
    entry["migrated_versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v[0].as_str().unwrap().to_owned(),
                v[1].as_i64().unwrap(),
                v[2].as_i64().unwrap(),
            )
        })
        .collect()
}

fn expected_strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

fn open_vector(bytes: &[u8]) -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.deserialize_read_exact(rusqlite::MAIN_DB, bytes, bytes.len(), true)
        .unwrap();
    conn
}

/// Copies a vector file into a fresh temp dir under `name` and returns (dir, path).
fn copy_to_temp(file: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, read_vector(file)).unwrap();
    (dir, path)
}

#[test]
fn every_vector_file_matches_its_manifest_hash() {
    for entry in manifest()["userdb"].as_array().unwrap() {
        for key in [
            "at_rest",
            "export",
            "export_default",
            "export_with_secrets",
            "input",
            "migrated",
        ] {
            if let Some(file) = entry.get(key) {
                let bytes = read_vector(file["file"].as_str().unwrap());
                assert_eq!(
                    sha256_hex(&bytes),
                    file["sha256"].as_str().unwrap(),
                    "{}",
                    file["file"]
                );
            }
        }
    }
}

#[test]
fn a_fresh_database_has_the_fresh_v6_schema_text_order_and_shapes() {
    let entry = userdb_entry("fresh-v6");
    let (mut db, report) = UserDb::create_in_memory(clock()).unwrap();
    assert!(report.advanced && report.seeded_meta && !report.heal.healed());
    assert_eq!(
        report.found_version,
        entry["migration"]["found"].as_i64().unwrap()
    );

    let reference = open_vector(&read_vector(entry["at_rest"]["file"].as_str().unwrap()));
    let master = |conn: &Connection| -> Vec<(String, String, Option<String>)> {
        conn.prepare("SELECT type, name, sql FROM sqlite_master ORDER BY rowid")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(
        master(db.connection()),
        master(&reference),
        "sqlite_master text and creation order"
    );
    assert_eq!(
        columns_of(db.connection()),
        expected_columns(&entry["inspect"])
    );
    assert_eq!(
        row_counts(db.connection()),
        expected_row_counts(&entry["inspect"])
    );
    let user_version: i64 = db
        .connection()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, 6);

    let meta_id = db.db_id().unwrap().unwrap();
    assert!(snug_schema::is_uuid_shaped(&meta_id));
    assert_eq!(
        db.meta("created_at").unwrap().as_deref(),
        Some("2026-01-01T00:00:00.000Z")
    );

    // The reference's default export of a fresh file has the same shapes.
    let (export, _) = export_bytes(&mut db, ExportOptions::default()).unwrap();
    let reference_export = open_vector(&read_vector(entry["export"]["file"].as_str().unwrap()));
    assert_eq!(
        columns_of(&open_vector(&export)),
        columns_of(&reference_export)
    );
}

#[test]
fn every_current_vector_opens_in_place_with_zero_bytes_written() {
    for (file, name) in [
        ("userdb/fresh-v6.user.snug", "user.snug"),
        ("userdb/sample-v6.user.snug", "user.snug"),
        ("userdb/fresh-v6.export.snug", "user.snug"),
        ("userdb/sample-v6.export.snug", "user.snug"),
        ("userdb/sample-v6.export-with-secrets.snug", "user.snug"),
        ("userdb/legacy-v1.migrated.user.snug", "user.snug"),
        ("userdb/broken-stamp-v6.migrated.user.snug", "user.snug"),
    ] {
        let (dir, path) = copy_to_temp(file, name);
        let before = sha256_hex(&std::fs::read(&path).unwrap());
        let (db, report) =
            UserDb::open_path(&path, clock()).unwrap_or_else(|err| panic!("{file}: {err}"));
        assert!(!report.wrote, "{file}: {report:?}");
        assert!(db.apps().is_ok());
        drop(db);
        assert_eq!(
            sha256_hex(&std::fs::read(&path).unwrap()),
            before,
            "{file} was modified"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            leftovers,
            [std::ffi::OsString::from(name)],
            "{file}: no journal or side file"
        );
    }
}

#[test]
fn legacy_v1_migrates_to_the_reference_migrated_shapes() {
    let entry = userdb_entry("legacy-v1");
    let input = read_vector(entry["input"]["file"].as_str().unwrap());
    let migrated_reference = open_vector(&read_vector(entry["migrated"]["file"].as_str().unwrap()));

    let check = |conn: &Connection, how: &str| {
        assert_eq!(
            columns_of(conn),
            expected_columns(&entry["migrated_inspect"]),
            "{how}: table_info"
        );
        assert_eq!(
            columns_of(conn),
            columns_of(&migrated_reference),
            "{how}: table_info vs file"
        );
        assert_eq!(
            row_counts(conn),
            expected_row_counts(&entry["migrated_inspect"]),
            "{how}: rows"
        );
        assert_eq!(
            secret_keys(conn),
            expected_strings(&entry["migrated_secret_keys"]),
            "{how}: secrets"
        );
        assert_eq!(versions(conn), expected_versions(&entry), "{how}: versions");
        let db_id: String = conn
            .query_row("SELECT value FROM snug_meta WHERE key = 'db_id'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(db_id, "legacy-db-id", "{how}: existing meta is kept");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 6, "{how}");
    };
    let check_report = |report: &snug_schema::OpenReport, how: &str| {
        assert_eq!(
            report.found_version,
            entry["migration"]["found"].as_i64().unwrap(),
            "{how}"
        );
        assert_eq!(
            report.advanced,
            entry["migration"]["advanced"].as_bool().unwrap(),
            "{how}"
        );
        assert_eq!(
            report.heal.healed(),
            entry["healed"].as_bool().unwrap(),
            "{how}"
        );
        assert_eq!(
            report.credentials_wiped as i64,
            entry["legacy_secrets_wiped"].as_i64().unwrap(),
            "{how}"
        );
        assert!(!report.seeded_meta, "{how}");
    };

    let (bytes, report) = migrate_bytes(&input, clock()).unwrap();
    check_report(&report, "migrate_bytes");
    check(&open_vector(&bytes), "migrate_bytes");

    let (dir, src) = copy_to_temp(entry["input"]["file"].as_str().unwrap(), "user.sqlite");
    let dst = dir.path().join("migrated.snug");
    let report = migrate_file(&src, &dst, clock()).unwrap();
    check_report(&report, "migrate_file");
    assert_eq!(
        std::fs::read(&src).unwrap(),
        input,
        "migrate_file never touches its input"
    );
    check(&Connection::open(&dst).unwrap(), "migrate_file");

    let (_dir, path) = copy_to_temp(entry["input"]["file"].as_str().unwrap(), "user.snug");
    let (db, report) = UserDb::open_path(&path, clock()).unwrap();
    check_report(&report, "open_path");
    check(db.connection(), "open_path");
    drop(db);
    let (_, again) = UserDb::open_path(&path, clock()).unwrap();
    assert!(
        !again.wrote,
        "the migrated file is healthy on the next open: {again:?}"
    );
}

#[test]
fn broken_stamp_heals_without_a_wipe() {
    let entry = userdb_entry("broken-stamp-v6");
    let (_dir, path) = copy_to_temp(entry["input"]["file"].as_str().unwrap(), "user.snug");
    let (db, report) = UserDb::open_path(&path, clock()).unwrap();
    assert_eq!(report.found_version, 6);
    assert!(!report.advanced);
    assert_eq!(report.heal.healed(), entry["healed"].as_bool().unwrap());
    assert_eq!(report.heal.tables, ["snug_app_docs", "snug_connections"]);
    assert!(report.heal.columns.is_empty() && !report.heal.index);
    assert_eq!(report.credentials_wiped, 0);
    assert!(report.wrote);
    assert_eq!(
        columns_of(db.connection()),
        expected_columns(&entry["migrated_inspect"])
    );
    assert_eq!(
        row_counts(db.connection()),
        expected_row_counts(&entry["migrated_inspect"])
    );
    assert_eq!(
        secret_keys(db.connection()),
        expected_strings(&entry["migrated_secret_keys"])
    );
    assert_eq!(versions(db.connection()), expected_versions(&entry));
    let reference = open_vector(&read_vector(entry["migrated"]["file"].as_str().unwrap()));
    assert_eq!(columns_of(db.connection()), columns_of(&reference));
}

#[test]
fn future_v7_is_refused_everywhere_with_its_bytes_untouched() {
    let entry = userdb_entry("future-v7");
    let file = entry["input"]["file"].as_str().unwrap();
    let bytes = read_vector(file);
    let found = entry["found_version"].as_i64().unwrap();
    let too_new = |err: &OpenError| matches!(err, OpenError::SchemaTooNew { found: f, supported: 6 } if *f == found);

    let (dir, path) = copy_to_temp(file, "user.snug");
    let err = UserDb::open_path(&path, clock()).unwrap_err();
    assert!(too_new(&err), "{err:?}");
    assert_eq!(err.reason().name, "SCHEMA_TOO_NEW");
    let err = UserDb::open_dir(dir.path(), clock()).unwrap_err();
    assert!(too_new(&err), "{err:?}");
    assert!(too_new(&UserDb::from_bytes(&bytes, clock()).unwrap_err()));
    assert!(too_new(&migrate_bytes(&bytes, clock()).unwrap_err()));
    let out = dir.path().join("out.snug");
    assert!(too_new(&migrate_file(&path, &out, clock()).unwrap_err()));
    assert!(!out.exists());
    match export_file(&path, &out, ExportOptions::default()).unwrap_err() {
        snug_schema::ExportError::Source(err) => assert!(too_new(&err)),
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());
    let err = import(&bytes, None, &ImportOptions::default(), clock()).unwrap_err();
    assert!(
        matches!(
            err,
            ImportError::SchemaTooNew {
                found: 7,
                supported: 6
            }
        ),
        "{err:?}"
    );
    let inspection = inspect_bytes(&bytes).unwrap();
    assert_eq!(
        inspection.open_refusal.map(|r| r.reason),
        Some("SCHEMA_TOO_NEW")
    );
    assert_eq!(
        sha256_hex(&std::fs::read(&path).unwrap()),
        entry["input"]["sha256"].as_str().unwrap()
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from("user.snug")]);
}

const SAMPLE_SECRETS: [&str; 2] = ["sk-ant-TEST-SECRET-DO-NOT-USE", "v4-slot-credential"];

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn the_default_export_of_sample_v6_carries_no_secret_byte() {
    let entry = userdb_entry("sample-v6");
    let file = entry["at_rest"]["file"].as_str().unwrap();
    let source = read_vector(file);
    assert!(
        SAMPLE_SECRETS
            .iter()
            .all(|secret| contains(&source, secret)),
        "the vector holds the secrets"
    );

    let (dir, path) = copy_to_temp(file, "user.snug");
    let out = dir.path().join("export.snug");
    let report = export_file(&path, &out, ExportOptions::default()).unwrap();
    assert_eq!(report.secrets_removed, 2);
    let exported = std::fs::read(&out).unwrap();
    for secret in SAMPLE_SECRETS {
        assert!(!contains(&exported, secret), "export_file leaked {secret}");
    }
    assert_eq!(report.bytes, exported.len() as u64);
    let conn = open_vector(&exported);
    assert_eq!(
        row_counts(&conn),
        expected_row_counts(&entry["inspect_export_default"])
    );
    assert_eq!(
        columns_of(&conn),
        expected_columns(&entry["inspect_export_default"])
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        source,
        "export never touches its source"
    );

    let with = dir.path().join("with-secrets.snug");
    export_file(
        &path,
        &with,
        ExportOptions {
            include_secrets: true,
        },
    )
    .unwrap();
    let with_bytes = std::fs::read(&with).unwrap();
    assert!(
        SAMPLE_SECRETS
            .iter()
            .all(|secret| contains(&with_bytes, secret))
    );
    assert_eq!(
        row_counts(&open_vector(&with_bytes)),
        expected_row_counts(&entry["inspect"])
    );

    let (mut db, _) = UserDb::from_bytes(&source, clock()).unwrap();
    let (bytes, report) = export_bytes(&mut db, ExportOptions::default()).unwrap();
    assert_eq!(report.secrets_removed, 2);
    for secret in SAMPLE_SECRETS {
        assert!(!contains(&bytes, secret), "export_bytes leaked {secret}");
    }
    assert_eq!(
        row_counts(&open_vector(&bytes)),
        expected_row_counts(&entry["inspect_export_default"])
    );
}

#[test]
fn the_reference_exports_import_and_round_trip() {
    let entry = userdb_entry("sample-v6");
    let sample = read_vector(entry["at_rest"]["file"].as_str().unwrap());
    let (local, _) = UserDb::from_bytes(&sample, clock()).unwrap();
    for key in ["export_default", "export_with_secrets"] {
        let bytes = read_vector(entry[key]["file"].as_str().unwrap());
        let (db, report) =
            import(&bytes, Some(&local), &ImportOptions::default(), clock()).unwrap();
        assert_eq!(report.found_version, 6);
        assert!(!report.advanced && !report.healed.healed() && report.credentials_wiped == 0);
        assert!(
            report.dropped_connections.is_empty(),
            "{:?}",
            report.dropped_connections
        );
        assert!(
            report.dropped_runtime_contracts.is_empty(),
            "the local file knows these contracts"
        );
        assert_eq!(
            report.demoted_connections, 1,
            "a declared row stays declared (imported)"
        );
        assert!(db.needs_endpoint_confirm().unwrap());
        assert_eq!(db.apps().unwrap().len(), 2);
        assert_eq!(
            db.docs("a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c")
                .unwrap()
                .len(),
            2
        );
    }
}

#[test]
fn the_per_app_runtime_vectors_are_not_user_databases() {
    let entry = userdb_entry("sample-v6");
    for runtime in entry["app_runtime_exports"].as_object().unwrap().values() {
        let bytes = read_vector(runtime["file"].as_str().unwrap());
        let err = import(&bytes, None, &ImportOptions::default(), clock()).unwrap_err();
        assert!(matches!(err, ImportError::NotAUserDatabase), "{err:?}");
        assert!(matches!(
            UserDb::from_bytes(&bytes, clock()).unwrap_err(),
            OpenError::NotAUserDatabase
        ));
    }
}

fn container_secrets(value: &Value) -> snug_container::Secrets {
    snug_container::Secrets {
        passphrase: value
            .get("passphrase")
            .and_then(Value::as_str)
            .map(snug_container::Passphrase::new),
        recovery_key: value
            .get("recoveryKey")
            .and_then(Value::as_str)
            .map(snug_container::RecoveryKey::parse),
    }
}

#[test]
fn protected_vectors_import_only_with_their_secret() {
    let sample = read_vector("userdb/sample-v6.user.snug");
    let (local, _) = UserDb::from_bytes(&sample, clock()).unwrap();
    let dir = vectors_dir().join("containers");
    for name in [
        "c01-reference-random-600k",
        "n01-flipped-iterations",
        "n03-truncated-body",
        "n05-payload-bitflip",
        "n08-slotcount-0",
        "n10-header-tamper-checksum-recomputed",
        "n12-not-a-container",
    ] {
        let bytes = std::fs::read(dir.join(format!("{name}.snug"))).unwrap();
        let spec: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        // One PBKDF2 per attempted slot at 600,000 iterations: the passphrase and no-secret checks suffice.
        for check in spec["checks"].as_array().unwrap().iter().take(2) {
            let secrets = container_secrets(&check["secrets"]);
            // The damaged vectors use 1,000 iterations; the default floor would call them corrupt
            // before any slot is tried, which hides the locked-versus-corrupt verdicts under test.
            let limits = snug_container::Limits {
                min_iterations: 1_000,
                ..snug_container::Limits::default()
            };
            let options = ImportOptions {
                secrets: Some(&secrets),
                trusted_origin: false,
                container_limits: limits,
            };
            let result = import(&bytes, Some(&local), &options, clock());
            let label = format!("{name} / {}", check["label"]);
            match (check["expected_status"].as_str().unwrap(), result) {
                ("ok", Ok((db, report))) => {
                    assert!(report.was_protected, "{label}");
                    assert_eq!(db.apps().unwrap().len(), 2, "{label}");
                }
                ("locked", Err(err)) => assert_eq!(err.reason().name, "LOCKED", "{label}: {err:?}"),
                ("corrupt", Err(err)) if name.starts_with("n12") => {
                    assert_eq!(
                        err.reason().name,
                        "MALFORMED",
                        "{label}: SQLite magic, 63 bytes"
                    )
                }
                ("corrupt", Err(err)) => {
                    assert_eq!(err.reason().name, "CORRUPT_CONTAINER", "{label}: {err:?}")
                }
                (expected, other) => panic!(
                    "{label}: expected {expected}, got {:?}",
                    other.map(|(_, r)| r)
                ),
            }
        }
        let limits = snug_container::Limits {
            min_iterations: 1_000,
            ..snug_container::Limits::default()
        };
        let no_secret = ImportOptions {
            container_limits: limits,
            ..ImportOptions::default()
        };
        let locked = import(&bytes, None, &no_secret, clock());
        if name.starts_with('c') || name.starts_with("n10") {
            assert!(
                matches!(locked, Err(ImportError::Locked)),
                "{name} without a secret stays locked"
            );
        }
    }
}

#[test]
fn legacy_v1_import_is_migrated_healed_and_wiped() {
    let bytes = read_vector("userdb/legacy-v1.user.sqlite");
    let (db, report) = import(&bytes, None, &ImportOptions::default(), clock()).unwrap();
    assert_eq!(
        (
            report.found_version,
            report.advanced,
            report.credentials_wiped
        ),
        (1, true, 1)
    );
    assert_eq!(
        secret_keys(db.connection()),
        expected_strings(&userdb_entry("legacy-v1")["migrated_secret_keys"])
    );
}
