//! End-to-end tests of the user-database commands of `snug` (check, migrate, export, init):
//! exit codes, JSON error codes, outputs against the reference vectors, inputs left untouched.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use snug_test_support::{Snug, sha256_hex, vectors_dir};

const PASSPHRASE: &str = "correct horse battery staple";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn userdb(name: &str) -> PathBuf {
    vectors_dir().join("userdb").join(name)
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// One `PRAGMA table_info` row: name, type, not null, default, primary-key position.
type Column = (String, String, bool, Option<String>, i64);

/// `PRAGMA table_info` of every hub table: the shape files must share across implementations.
fn table_shapes(path: &Path) -> BTreeMap<String, Vec<Column>> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open");
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'snug_%' ORDER BY name")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    names
        .into_iter()
        .map(|name| {
            let columns = conn
                .prepare(&format!("PRAGMA table_info(\"{name}\")"))
                .expect("prepare")
                .query_map([], |row| {
                    Ok((
                        row.get(1)?,
                        row.get(2)?,
                        row.get::<_, i64>(3)? == 1,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                })
                .expect("query")
                .collect::<Result<Vec<_>, _>>()
                .expect("columns");
            (name, columns)
        })
        .collect()
}

fn contains(path: &Path, needle: &[u8]) -> bool {
    std::fs::read(path)
        .expect("read")
        .windows(needle.len())
        .any(|w| w == needle)
}

struct Case {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    exit: i32,
    error_code: Option<&'static str>,
}

#[test]
fn exit_codes_follow_the_table_and_inputs_stay_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fresh = userdb("fresh-v6.user.snug");
    let legacy = userdb("legacy-v1.user.sqlite");
    let broken = userdb("broken-stamp-v6.user.sqlite");
    let future = userdb("future-v7.user.sqlite");
    let c01 = vectors_dir().join("containers/c01-reference-random-600k.snug");
    let n01 = vectors_dir().join("containers/n01-flipped-iterations.snug");
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, b"PK\x03\x04 a zip file, not a user database").expect("write");
    let foreign = dir.path().join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .expect("open")
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);")
        .expect("create");
    let truncated = dir.path().join("truncated.snug");
    std::fs::write(&truncated, &std::fs::read(&fresh).expect("read")[..5000]).expect("write");
    let existing = dir.path().join("existing.snug");
    std::fs::write(&existing, b"keep me").expect("write");
    let out = |name: &str| dir.path().join(name).display().to_string();
    let s = |text: &str| text.to_owned();

    let cases = vec![
        Case {
            name: "check healthy",
            args: vec![s("check"), p(&fresh)],
            env: vec![],
            exit: 0,
            error_code: None,
        },
        Case {
            name: "check needs migration",
            args: vec![s("check"), p(&legacy)],
            env: vec![],
            exit: 0,
            error_code: None,
        },
        Case {
            name: "check needs heal",
            args: vec![s("check"), p(&broken)],
            env: vec![],
            exit: 0,
            error_code: None,
        },
        Case {
            name: "check protected",
            args: vec![s("check"), p(&c01)],
            env: vec![],
            exit: 0,
            error_code: None,
        },
        Case {
            name: "check newer",
            args: vec![s("check"), p(&future)],
            env: vec![],
            exit: 5,
            error_code: Some("SCHEMA_TOO_NEW"),
        },
        Case {
            name: "check garbage",
            args: vec![s("check"), p(&garbage)],
            env: vec![],
            exit: 4,
            error_code: Some("NOT_SQLITE"),
        },
        Case {
            name: "check non-snug sqlite",
            args: vec![s("check"), p(&foreign)],
            env: vec![],
            exit: 4,
            error_code: Some("NOT_A_USER_DATABASE"),
        },
        Case {
            name: "check truncated",
            args: vec![s("check"), p(&truncated)],
            env: vec![],
            exit: 4,
            error_code: Some("MALFORMED"),
        },
        Case {
            name: "check damaged container",
            args: vec![s("check"), p(&n01)],
            env: vec![],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "check missing file",
            args: vec![s("check"), out("missing")],
            env: vec![],
            exit: 1,
            error_code: Some("IO"),
        },
        Case {
            name: "migrate newer",
            args: vec![s("migrate"), p(&future), s("--out"), out("a")],
            env: vec![],
            exit: 5,
            error_code: Some("SCHEMA_TOO_NEW"),
        },
        Case {
            name: "migrate garbage",
            args: vec![s("migrate"), p(&garbage), s("--out"), out("b")],
            env: vec![],
            exit: 4,
            error_code: Some("NOT_SQLITE"),
        },
        Case {
            name: "migrate non-snug sqlite",
            args: vec![s("migrate"), p(&foreign), s("--out"), out("c")],
            env: vec![],
            exit: 4,
            error_code: Some("NOT_A_USER_DATABASE"),
        },
        Case {
            name: "migrate truncated",
            args: vec![s("migrate"), p(&truncated), s("--out"), out("d")],
            env: vec![],
            exit: 4,
            error_code: Some("MALFORMED"),
        },
        Case {
            name: "migrate protected without its secret",
            args: vec![s("migrate"), p(&c01), s("--out"), out("e")],
            env: vec![],
            exit: 3,
            error_code: Some("LOCKED"),
        },
        Case {
            name: "migrate onto its input",
            args: vec![s("migrate"), p(&legacy), s("--out"), p(&legacy)],
            env: vec![],
            exit: 2,
            error_code: Some("USAGE"),
        },
        Case {
            name: "migrate onto an existing file",
            args: vec![s("migrate"), p(&legacy), s("--out"), p(&existing)],
            env: vec![],
            exit: 1,
            error_code: Some("OUTPUT_EXISTS"),
        },
        Case {
            name: "export newer",
            args: vec![s("export"), p(&future), s("--out"), out("f")],
            env: vec![],
            exit: 5,
            error_code: Some("SCHEMA_TOO_NEW"),
        },
        Case {
            name: "export garbage",
            args: vec![s("export"), p(&garbage), s("--out"), out("g")],
            env: vec![],
            exit: 4,
            error_code: Some("NOT_SQLITE"),
        },
        Case {
            name: "export locked, wrong passphrase",
            args: vec![s("export"), p(&c01), s("--out"), out("h")],
            env: vec![("SNUG_PASSPHRASE", "wrong")],
            exit: 3,
            error_code: Some("LOCKED"),
        },
        Case {
            name: "export locked, no secret off a terminal",
            args: vec![s("export"), p(&c01), s("--out"), out("i")],
            env: vec![],
            exit: 3,
            error_code: Some("LOCKED"),
        },
        Case {
            name: "export damaged container",
            args: vec![s("export"), p(&n01), s("--out"), out("j")],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "export onto its input",
            args: vec![s("export"), p(&fresh), s("--out"), p(&fresh)],
            env: vec![],
            exit: 2,
            error_code: Some("USAGE"),
        },
        Case {
            name: "init onto an existing file",
            args: vec![s("init"), p(&existing)],
            env: vec![],
            exit: 1,
            error_code: Some("OUTPUT_EXISTS"),
        },
        Case {
            name: "init without OUT",
            args: vec![s("init")],
            env: vec![],
            exit: 2,
            error_code: None,
        },
    ];
    let inputs = [
        &fresh, &legacy, &broken, &future, &c01, &n01, &garbage, &foreign, &truncated, &existing,
    ];
    let before: Vec<(PathBuf, String)> = inputs
        .iter()
        .map(|p| (p.to_path_buf(), sha256_hex(p)))
        .collect();
    for case in &cases {
        let mut args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        args.push("--json");
        let output = SNUG.run(&args, &case.env);
        assert_eq!(
            output.status.code(),
            Some(case.exit),
            "{}: stderr {}",
            case.name,
            String::from_utf8_lossy(&output.stderr)
        );
        if let Some(error_code) = case.error_code {
            let body: serde_json::Value = serde_json::from_slice(&output.stdout).expect(case.name);
            assert_eq!(body["ok"], false, "{}", case.name);
            assert_eq!(body["error"]["code"], error_code, "{}", case.name);
            assert_eq!(body["exit_code"], case.exit, "{}", case.name);
            assert!(
                !output.stderr.is_empty(),
                "{}: a message on stderr",
                case.name
            );
        }
    }
    for (path, hash) in before {
        assert_eq!(sha256_hex(&path), hash, "{} was modified", path.display());
    }
    // Offline, the program too old for a newer file is this one: the remedy is upgrading snug,
    // not a hub.
    let output = SNUG.run(&["migrate", &p(&future), "--out", &out("z"), "--json"], &[]);
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let message = body["error"]["message"].as_str().unwrap_or("").to_owned();
    assert!(
        message.contains("upgrade snug") && !message.contains("hub"),
        "{message}"
    );
    // Refused commands leave no output and no temporary file behind.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "existing.snug",
            "foreign.sqlite",
            "garbage.bin",
            "truncated.snug"
        ]
    );
}

#[test]
fn check_reports_health_and_what_an_open_would_do_without_writing() {
    let healthy = SNUG.json(&["check", &p(&userdb("sample-v6.user.snug"))], &[], 0);
    assert_eq!(healthy["healthy"], true);
    assert_eq!(healthy["inspection"]["storage_version"], 6);
    assert_eq!(healthy["planned_changes"], serde_json::json!([]));

    let legacy_path = userdb("legacy-v1.user.sqlite");
    let legacy = SNUG.json(&["check", &p(&legacy_path)], &[], 0);
    assert_eq!(legacy["healthy"], false);
    assert_eq!(legacy["inspection"]["migrate_from"], 1);
    assert_eq!(legacy["inspection"]["legacy_credentials"], 1);
    let changes = legacy["planned_changes"].to_string();
    assert!(
        changes.contains("migrate storage version 1 → 6"),
        "{changes}"
    );
    assert!(
        changes.contains("snug_app_data"),
        "the dropped v1 table is named: {changes}"
    );

    let broken = SNUG.json(
        &["check", &p(&userdb("broken-stamp-v6.user.sqlite"))],
        &[],
        0,
    );
    assert_eq!(broken["healthy"], false);
    let mut missing: Vec<String> =
        serde_json::from_value(broken["inspection"]["heal"]["missing_tables"].clone())
            .expect("tables");
    missing.sort();
    assert_eq!(missing, ["snug_app_docs", "snug_connections"]);

    // A protected file: its container is checked, no secret asked for.
    let protected = SNUG.json(
        &[
            "check",
            &p(&vectors_dir().join("containers/c01-reference-random-600k.snug")),
        ],
        &[],
        0,
    );
    assert_eq!(protected["protected"], true);
    assert_eq!(protected["container"]["iterations"], 600_000);

    // The human report says the same in words.
    let output = SNUG.run(&["check", &p(&legacy_path)], &[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("storage version 1") && text.contains("wrote nothing"),
        "{text}"
    );

    // `inspect` of a plain file now carries its storage version.
    let inspected = SNUG.json(&["inspect", &p(&legacy_path)], &[], 0);
    assert_eq!(inspected["storage_version"], 1);
}

#[test]
fn migrate_matches_the_reference_outputs_and_never_touches_its_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (input, reference, found, wiped) in [
        (
            "legacy-v1.user.sqlite",
            "legacy-v1.migrated.user.snug",
            1,
            1,
        ),
        (
            "broken-stamp-v6.user.sqlite",
            "broken-stamp-v6.migrated.user.snug",
            6,
            0,
        ),
    ] {
        let input = userdb(input);
        let before = sha256_hex(&input);
        let out = dir.path().join(format!("{found}.snug"));
        let body = SNUG.json(&["migrate", &p(&input), "--out", &p(&out)], &[], 0);
        assert_eq!(body["report"]["found_version"], found);
        assert_eq!(body["report"]["credentials_wiped"], wiped);
        assert_eq!(body["unchanged"], false);
        assert_eq!(
            table_shapes(&out),
            table_shapes(&userdb(reference)),
            "{}",
            input.display()
        );
        assert_eq!(sha256_hex(&input), before, "{} untouched", input.display());
        // The result is healthy: checking it finds nothing to do.
        assert_eq!(SNUG.json(&["check", &p(&out)], &[], 0)["healthy"], true);
    }
    // The wiped legacy credential is in no page of the output, free or live.
    assert!(contains(
        &userdb("legacy-v1.user.sqlite"),
        b"legacy-v3-credential"
    ));
    assert!(!contains(
        &dir.path().join("1.snug"),
        b"legacy-v3-credential"
    ));
    assert!(contains(&dir.path().join("1.snug"), b"v4-shape-credential"));

    // A healthy file is copied byte for byte; an existing OUT needs --force.
    let sample = userdb("sample-v6.user.snug");
    let out = dir.path().join("copy.snug");
    let body = SNUG.json(&["migrate", &p(&sample), "--out", &p(&out)], &[], 0);
    assert_eq!(body["unchanged"], true);
    assert_eq!(sha256_hex(&out), sha256_hex(&sample));
    SNUG.json(&["migrate", &p(&sample), "--out", &p(&out)], &[], 1);
    SNUG.json(
        &[
            "migrate",
            &p(&userdb("legacy-v1.user.sqlite")),
            "--out",
            &p(&out),
            "--force",
        ],
        &[],
        0,
    );
    assert_eq!(
        table_shapes(&out),
        table_shapes(&userdb("legacy-v1.migrated.user.snug"))
    );
}

#[test]
fn export_strips_secrets_unless_asked_and_opens_protected_inputs_with_their_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sample = userdb("sample-v6.user.snug");
    let secret = b"sk-ant-TEST-SECRET-DO-NOT-USE";
    assert!(contains(&sample, secret));

    let stripped = dir.path().join("stripped.snug");
    let body = SNUG.json(&["export", &p(&sample), "--out", &p(&stripped)], &[], 0);
    assert_eq!(body["secrets_removed"], 2);
    assert_eq!(body["include_secrets"], false);
    assert!(!contains(&stripped, secret));
    assert_eq!(
        table_shapes(&stripped),
        table_shapes(&userdb("sample-v6.export.snug"))
    );

    let kept = dir.path().join("kept.snug");
    let body = SNUG.json(
        &[
            "export",
            &p(&sample),
            "--out",
            &p(&kept),
            "--include-secrets",
        ],
        &[],
        0,
    );
    assert_eq!(body["secrets_removed"], 0);
    assert!(contains(&kept, secret));

    // The protected copy of the same database: the secret comes from the usual sources.
    let c01 = vectors_dir().join("containers/c01-reference-random-600k.snug");
    let before = sha256_hex(&c01);
    let from_protected = dir.path().join("from-protected.snug");
    let output = SNUG.run(
        &["export", &p(&c01), "--out", &p(&from_protected), "--json"],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(body["was_protected"], true);
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("not protected"),
        "the plain output is pointed out"
    );
    assert!(!contains(&from_protected, secret));
    assert_eq!(table_shapes(&from_protected), table_shapes(&stripped));
    assert_eq!(sha256_hex(&c01), before);

    // An old source is migrated in the copy only; its legacy credential is wiped there.
    let legacy = userdb("legacy-v1.user.sqlite");
    let out = dir.path().join("legacy-export.snug");
    let body = SNUG.json(
        &[
            "export",
            &p(&legacy),
            "--out",
            &p(&out),
            "--include-secrets",
        ],
        &[],
        0,
    );
    assert_eq!(body["source"]["advanced"], true);
    assert!(!contains(&out, b"legacy-v3-credential"));
}

#[test]
fn init_creates_a_healthy_current_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("user.snug");
    let body = SNUG.json(&["init", &p(&out)], &[], 0);
    assert_eq!(body["storage_version"], 6);
    let db_id = body["db_id"].as_str().expect("id").to_owned();
    assert_eq!(db_id.len(), 36, "{db_id}");
    let check = SNUG.json(&["check", &p(&out)], &[], 0);
    assert_eq!(check["healthy"], true);
    assert_eq!(
        table_shapes(&out),
        table_shapes(&userdb("fresh-v6.user.snug"))
    );

    // Never over an existing file by accident; with --force, a new database with a new id.
    SNUG.json(&["init", &p(&out)], &[], 1);
    let again = SNUG.json(&["init", &p(&out), "--force"], &[], 0);
    assert_ne!(again["db_id"], db_id);
}
