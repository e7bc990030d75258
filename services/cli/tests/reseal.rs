//! End-to-end tests of editing a protected file (issue #17 point 4): `snug app sql` writes, `snug app persist` and `snug migrate` (in place or to `--out`) reseal it in its own container, so it stays SNUGENC1 with the same header and slots, and the recovery key from `snug protect` keeps opening it.

use std::path::{Path, PathBuf};

use snug_test_support::{Snug, vectors_dir};

const PASSPHRASE: &str = "correct horse battery staple";
const CHESS_APP: &str = "starter--chess";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// The bytes of a two-slot container before its payload IV: header (160) and wrapped keys (96).
const KEPT: usize = 160 + 2 * 48;

/// Asserts `after` is `before`'s container resealed: still SNUGENC1, the same header, salt and
/// slots, a fresh payload IV (§11.2 rule 5).
#[track_caller]
fn assert_resealed(after: &[u8], before: &[u8]) {
    assert!(after.starts_with(b"SNUGENC1\n"), "still protected");
    assert_eq!(after[..KEPT], before[..KEPT], "same header, salt and slots");
    assert_ne!(
        after[KEPT..KEPT + 12],
        before[KEPT..KEPT + 12],
        "a fresh payload IV"
    );
}

/// The storage version of protected `file` as `key` unlocks it (into `dir`).
fn unlocked_storage_version(file: &str, key: &str, dir: &Path) -> i64 {
    let unlocked = dir.join("unlocked.snug");
    let _ = std::fs::remove_file(&unlocked);
    SNUG.json(
        &["unlock", file, "--out", &unlocked.display().to_string()],
        &[("SNUG_RECOVERY_KEY", key)],
        0,
    );
    rusqlite::Connection::open(&unlocked)
        .expect("open")
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version")
}

fn moves(file: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let body = SNUG.json(
        &[
            "app",
            "sql",
            file,
            "--app",
            CHESS_APP,
            "SELECT count(*) AS n FROM moves",
        ],
        env,
        0,
    );
    body["results"][0]["rows"][0][0].clone()
}

#[test]
fn app_sql_write_reseals_and_the_recovery_key_still_opens_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("user.snug");
    let f = file.display().to_string();
    let body = SNUG.json(
        &[
            "protect",
            &vectors_dir()
                .join("userdb/sample-v6.user.snug")
                .display()
                .to_string(),
            "--out",
            &f,
            "--iterations",
            "10000",
        ],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
        0,
    );
    let key = body["recovery_key"].as_str().expect("key").to_owned();
    let by_key = [("SNUG_RECOVERY_KEY", key.as_str())];
    let before = std::fs::read(&file).expect("read");
    let count_before = moves(&f, &by_key);
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "a read writes nothing"
    );

    // Written with the passphrase, read back with the recovery key written down at protect.
    let body = SNUG.json(
        &[
            "app",
            "sql",
            &f,
            "--app",
            CHESS_APP,
            "INSERT INTO moves VALUES ('e4')",
        ],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
        0,
    );
    assert_eq!(body["wrote"], true);
    let after = std::fs::read(&file).expect("read");
    assert_resealed(&after, &before);
    let count_after = moves(&f, &by_key);
    assert_eq!(
        count_after.as_i64().expect("count"),
        count_before.as_i64().expect("count") + 1,
        "the content changed"
    );
    assert_eq!(moves(&f, &[("SNUG_PASSPHRASE", PASSPHRASE)]), count_after);

    // A wrong secret is locked and leaves the file as it was.
    let body = SNUG.json(
        &[
            "app",
            "sql",
            &f,
            "--app",
            CHESS_APP,
            "INSERT INTO moves VALUES ('e5')",
        ],
        &[("SNUG_PASSPHRASE", "not it")],
        3,
    );
    assert_eq!(body["error"]["code"], "LOCKED");
    assert_eq!(std::fs::read(&file).expect("read"), after);

    // persist with the recovery key reseals too.
    let runtime = dir.path().join("chess.sqlite");
    let r = runtime.display().to_string();
    SNUG.json(
        &["app", "export", &f, "--app", CHESS_APP, "--out", &r],
        &by_key,
        0,
    );
    add_a_move(&runtime);
    let body = SNUG.json(
        &["app", "persist", &f, "--app", CHESS_APP, "--from", &r],
        &by_key,
        0,
    );
    assert_eq!(body["unchanged"], false);
    let persisted = std::fs::read(&file).expect("read");
    assert_eq!(persisted[..KEPT], before[..KEPT]);
    assert_eq!(
        moves(&f, &by_key).as_i64().expect("count"),
        count_after.as_i64().expect("count") + 1
    );
}

/// Adds a move to an exported app database, as the app would while it runs.
fn add_a_move(runtime: &Path) {
    let connection = rusqlite::Connection::open(runtime).expect("open runtime");
    let changed = connection
        .execute("INSERT INTO moves VALUES ('d4')", [])
        .expect("insert");
    assert_eq!(changed, 1);
}

/// The v5 ladder fixture (written from the reference notes) protected under PASSPHRASE at
/// `dir/user.snug`; returns the file and the recovery key `snug protect` printed.
fn protected_v5(dir: &Path) -> (PathBuf, String) {
    let plain = dir.join("v5.sqlite");
    rusqlite::Connection::open(&plain)
        .expect("create")
        .execute_batch(include_str!("../../../shared/schema/tests/ladder/v5.sql"))
        .expect("fixture");
    let file = dir.join("user.snug");
    let body = SNUG.json(
        &[
            "protect",
            &plain.display().to_string(),
            "--out",
            &file.display().to_string(),
            "--iterations",
            "10000",
        ],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
        0,
    );
    let key = body["recovery_key"].as_str().expect("key").to_owned();
    (file, key)
}

/// `snug migrate --in-place` on a protected v5 file (the ladder fixture written from the reference
/// notes): it comes back at storage version 6, still SNUGENC1 in its own container, and the
/// recovery key from `snug protect` opens it; a second run writes nothing.
#[test]
fn migrate_in_place_reseals_a_protected_file_and_keeps_its_recovery_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, key) = protected_v5(dir.path());
    let f = file.display().to_string();
    let before = std::fs::read(&file).expect("read");

    // Without a secret: locked, and the file is as it was.
    let body = SNUG.json(&["migrate", &f, "--in-place"], &[], 3);
    assert_eq!(body["error"]["code"], "LOCKED", "{body}");
    assert_eq!(std::fs::read(&file).expect("read"), before);

    let body = SNUG.json(
        &["migrate", &f, "--in-place"],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
        0,
    );
    assert_eq!(body["unchanged"], false, "{body}");
    assert_eq!(body["protected"], true, "{body}");
    let after = std::fs::read(&file).expect("read");
    assert_resealed(&after, &before);

    assert_eq!(
        unlocked_storage_version(&f, &key, dir.path()),
        6,
        "migrated to storage version 6"
    );

    let body = SNUG.json(
        &["migrate", &f, "--in-place"],
        &[("SNUG_RECOVERY_KEY", key.as_str())],
        0,
    );
    assert_eq!(body["unchanged"], true, "{body}");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        after,
        "nothing to do, nothing written"
    );

    // --in-place and --out together are a usage error.
    let output = SNUG.run(&["migrate", &f, "--in-place", "--out", "x.snug"], &[]);
    assert_eq!(output.status.code(), Some(2));
}

/// `snug migrate IN --out OUT` on a protected v5 file: OUT is the migrated database in IN's own
/// container (same header, salt and slots, a fresh payload IV), so the recovery key from
/// `snug protect` opens it; IN is untouched, and a current protected file is copied as it is.
#[test]
fn migrate_out_of_a_protected_file_writes_it_resealed_in_the_same_container() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, key) = protected_v5(dir.path());
    let f = file.display().to_string();
    let before = std::fs::read(&file).expect("read");

    let out = dir.path().join("migrated.snug");
    let o = out.display().to_string();
    let body = SNUG.json(
        &["migrate", &f, "--out", &o],
        &[("SNUG_PASSPHRASE", "not it")],
        3,
    );
    assert_eq!(body["error"]["code"], "LOCKED", "{body}");
    assert!(!out.exists(), "a refused migrate writes no output");

    let body = SNUG.json(
        &["migrate", &f, "--out", &o],
        &[("SNUG_RECOVERY_KEY", key.as_str())],
        0,
    );
    assert_eq!(body["unchanged"], false, "{body}");
    assert_eq!(body["protected"], true, "{body}");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "IN is only read"
    );
    let migrated = std::fs::read(&out).expect("read");
    assert_resealed(&migrated, &before);
    assert_eq!(
        unlocked_storage_version(&o, &key, dir.path()),
        6,
        "migrated to storage version 6"
    );

    // A current protected file: OUT is a byte-identical copy.
    let copy = dir.path().join("copy.snug");
    let body = SNUG.json(
        &["migrate", &o, "--out", &copy.display().to_string()],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
        0,
    );
    assert_eq!(body["unchanged"], true, "{body}");
    assert_eq!(std::fs::read(&copy).expect("read"), migrated);
}
