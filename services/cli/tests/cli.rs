//! End-to-end tests of the `snug` binary: outputs, exit codes, and inputs left untouched.

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use snug_test_support::{Snug, json, sha256_hex, vectors_dir};

const PASSPHRASE: &str = "correct horse battery staple";
const RECOVERY_KEY: &str = "ABCDE-FGHJK-MNPQR-STVWX-YZ234-56";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn code(output: &Output) -> i32 {
    output.status.code().expect("exit code")
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
    let containers = vectors_dir().join("containers");
    let c01 = containers.join("c01-reference-random-600k.snug");
    let c03 = containers.join("c03-deterministic-1000iter.snug");
    let n01 = containers.join("n01-flipped-iterations.snug");
    let n03 = containers.join("n03-truncated-body.snug");
    let n05 = containers.join("n05-payload-bitflip.snug");
    let n12 = containers.join("n12-not-a-container.snug");
    let plain = vectors_dir().join("userdb/fresh-v6.user.snug");
    // §11.2 rule 6 in both orders: a version byte of 2 under a valid header checksum is a newer
    // format; the same byte under the old checksum is damage.
    let newer = dir.path().join("newer.snug");
    let damaged_version = dir.path().join("damaged-version.snug");
    let mut bytes = std::fs::read(&c03).expect("c03");
    bytes[9] = 2;
    std::fs::write(&damaged_version, &bytes).expect("write");
    std::fs::write(&newer, snug_container::with_valid_checksum(&bytes)).expect("write");
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, b"PK\x03\x04 a zip file, not a user database").expect("write");
    let half = dir.path().join("half.snug");
    let whole = std::fs::read(&plain).expect("plain");
    std::fs::write(&half, &whole[..whole.len() / 2]).expect("write");
    let out = |name: &str| dir.path().join(name).display().to_string();
    let p = |path: &Path| path.display().to_string();

    let cases = vec![
        Case {
            name: "inspect container",
            args: vec!["inspect".into(), p(&c01)],
            env: vec![],
            exit: 0,
            error_code: None,
        },
        Case {
            name: "inspect plain",
            args: vec!["inspect".into(), p(&plain)],
            env: vec![],
            exit: 0,
            error_code: None,
        },
        Case {
            name: "inspect damaged header",
            args: vec!["inspect".into(), p(&n01)],
            env: vec![],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "inspect truncated",
            args: vec!["inspect".into(), p(&n03)],
            env: vec![],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "inspect unknown format",
            args: vec!["inspect".into(), p(&garbage)],
            env: vec![],
            exit: 4,
            error_code: Some("UNKNOWN_FORMAT"),
        },
        Case {
            name: "unlock sqlite-looking bytes",
            args: vec!["unlock".into(), p(&n12), "--out".into(), out("i")],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 4,
            error_code: Some("NOT_A_CONTAINER"),
        },
        Case {
            name: "inspect newer version",
            args: vec!["inspect".into(), p(&newer)],
            env: vec![],
            exit: 5,
            error_code: Some("UNSUPPORTED_FORMAT_VERSION"),
        },
        Case {
            name: "inspect a damaged version byte",
            args: vec!["inspect".into(), p(&damaged_version)],
            env: vec![],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "unlock a damaged version byte",
            args: vec![
                "unlock".into(),
                p(&damaged_version),
                "--out".into(),
                out("dv"),
            ],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "weak kdf is out of policy by default, not corrupt",
            args: vec!["inspect".into(), p(&c03)],
            env: vec![],
            exit: 5,
            error_code: Some("ITERATIONS_OUT_OF_POLICY"),
        },
        Case {
            name: "unlock wrong passphrase",
            args: vec!["unlock".into(), p(&c01), "--out".into(), out("a")],
            env: vec![("SNUG_PASSPHRASE", "wrong")],
            exit: 3,
            error_code: Some("LOCKED"),
        },
        Case {
            name: "unlock no secret off a terminal",
            args: vec!["unlock".into(), p(&c01), "--out".into(), out("b")],
            env: vec![],
            exit: 3,
            error_code: Some("LOCKED"),
        },
        Case {
            name: "unlock payload bit flip",
            args: vec!["unlock".into(), p(&n05), "--out".into(), out("c")],
            env: vec![
                ("SNUG_PASSPHRASE", PASSPHRASE),
                ("SNUG_MIN_ITERATIONS", "1000"),
            ],
            exit: 4,
            error_code: Some("CORRUPT"),
        },
        Case {
            name: "unlock a plain file",
            args: vec!["unlock".into(), p(&plain), "--out".into(), out("d")],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 4,
            error_code: Some("NOT_A_CONTAINER"),
        },
        Case {
            name: "unlock onto its input",
            args: vec!["unlock".into(), p(&c01), "--out".into(), p(&c01)],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 2,
            error_code: Some("USAGE"),
        },
        Case {
            name: "unknown flag",
            args: vec!["inspect".into(), "--nope".into(), p(&c01)],
            env: vec![],
            exit: 2,
            error_code: None,
        },
        Case {
            name: "missing file",
            args: vec!["inspect".into(), out("missing")],
            env: vec![],
            exit: 1,
            error_code: Some("IO"),
        },
        Case {
            name: "protect a container",
            args: vec!["protect".into(), p(&c01), "--out".into(), out("e")],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 1,
            error_code: Some("ALREADY_PROTECTED"),
        },
        Case {
            name: "protect garbage",
            args: vec!["protect".into(), p(&garbage), "--out".into(), out("f")],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 4,
            error_code: Some("NOT_A_USER_DATABASE"),
        },
        Case {
            name: "protect half a database",
            args: vec!["protect".into(), p(&half), "--out".into(), out("f2")],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 4,
            error_code: Some("NOT_A_USER_DATABASE"),
        },
        Case {
            name: "protect with a weak kdf",
            args: vec![
                "protect".into(),
                p(&plain),
                "--out".into(),
                out("g"),
                "--iterations".into(),
                "10".into(),
            ],
            env: vec![("SNUG_PASSPHRASE", PASSPHRASE)],
            exit: 2,
            error_code: Some("USAGE"),
        },
        Case {
            name: "protect without a passphrase off a terminal",
            args: vec!["protect".into(), p(&plain), "--out".into(), out("h")],
            env: vec![],
            exit: 2,
            error_code: Some("USAGE"),
        },
    ];
    let before: Vec<(PathBuf, String)> = [
        &c01,
        &c03,
        &n01,
        &n03,
        &n05,
        &n12,
        &plain,
        &newer,
        &damaged_version,
        &garbage,
        &half,
    ]
    .iter()
    .map(|p| (p.to_path_buf(), sha256_hex(p)))
    .collect();
    for case in &cases {
        let mut args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        args.push("--json");
        let output = SNUG.run(&args, &case.env);
        assert_eq!(
            code(&output),
            case.exit,
            "{}: stderr {}",
            case.name,
            String::from_utf8_lossy(&output.stderr)
        );
        if let Some(error_code) = case.error_code {
            let body = json(&output);
            assert_eq!(body["error"]["code"], error_code, "{}", case.name);
            assert_eq!(body["exit_code"], case.exit, "{}", case.name);
            assert!(
                !String::from_utf8_lossy(&output.stderr).is_empty(),
                "{}",
                case.name
            );
        }
    }
    for (path, hash) in before {
        assert_eq!(sha256_hex(&path), hash, "{} was modified", path.display());
    }
    // Nothing was supplied, so nothing was tried: the message says so, and how to give one.
    let output = SNUG.run(&["unlock", &p(&c01), "--out", &out("j"), "--json"], &[]);
    let message = json(&output)["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("no secret was supplied")
            && message.contains("--passphrase-file")
            && message.contains("SNUG_PASSPHRASE"),
        "{message}"
    );
    // Failed commands leave no output and no temporary file behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| {
            ![
                "newer.snug",
                "damaged-version.snug",
                "garbage.bin",
                "half.snug",
            ]
            .contains(&n.to_string_lossy().as_ref())
        })
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

#[test]
fn reference_vector_unlocks_with_either_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c01 = vectors_dir().join("containers/c01-reference-random-600k.snug");
    let expected = sha256_hex(&vectors_dir().join("userdb/sample-v6.user.snug"));
    for (name, env) in [
        ("by-passphrase", ("SNUG_PASSPHRASE", PASSPHRASE)),
        ("by-key", ("SNUG_RECOVERY_KEY", RECOVERY_KEY)),
        (
            "by-sloppy-key",
            ("SNUG_RECOVERY_KEY", "abcde fghjk mnpqr stvwx yz234 56"),
        ),
    ] {
        let out = dir.path().join(name);
        let output = SNUG.run(
            &[
                "unlock",
                &c01.display().to_string(),
                "--out",
                &out.display().to_string(),
            ],
            &[env],
        );
        assert_eq!(
            code(&output),
            0,
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(sha256_hex(&out), expected, "{name}");
    }
    // Secrets from files work too, with the trailing newline an editor leaves.
    let key_file = dir.path().join("key.txt");
    std::fs::write(&key_file, format!("{RECOVERY_KEY}\n")).expect("write");
    let out = dir.path().join("by-file");
    let output = SNUG.run(
        &[
            "unlock",
            &c01.display().to_string(),
            "--out",
            &out.display().to_string(),
            "--recovery-key-file",
            &key_file.display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(code(&output), 0);
    assert_eq!(json(&output)["opened_by"], "recovery-key");
}

#[test]
fn protect_passwd_rotate_unprotect_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = vectors_dir().join("userdb/sample-v6.user.snug");
    let plain_hash = sha256_hex(&plain);
    let sealed = dir.path().join("user.snug");
    let sealed_arg = sealed.display().to_string();

    let output = SNUG.run(
        &[
            "protect",
            &plain.display().to_string(),
            "--out",
            &sealed_arg,
            "--json",
        ],
        &[("SNUG_PASSPHRASE", "first passphrase")],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no escrow and no reset"),
        "custody rule stated: {stderr}"
    );
    let body = json(&output);
    let first_key = body["recovery_key"].as_str().expect("key").to_owned();
    assert_eq!(first_key.len(), 32);
    assert_eq!(body["iterations"], 600_000);
    assert_eq!(sha256_hex(&plain), plain_hash, "input untouched");

    // An existing output is not clobbered without --force.
    let output = SNUG.run(
        &[
            "protect",
            &plain.display().to_string(),
            "--out",
            &sealed_arg,
            "--json",
        ],
        &[("SNUG_PASSPHRASE", "first passphrase")],
    );
    assert_eq!(code(&output), 1);
    assert_eq!(json(&output)["error"]["code"], "OUTPUT_EXISTS");

    // passwd in place: the wrong current passphrase is locked and changes nothing.
    let before = sha256_hex(&sealed);
    let output = SNUG.run(
        &["passwd", &sealed_arg, "--json"],
        &[
            ("SNUG_PASSPHRASE", "not it"),
            ("SNUG_NEW_PASSPHRASE", "second passphrase"),
        ],
    );
    assert_eq!(code(&output), 3);
    assert_eq!(sha256_hex(&sealed), before);
    let output = SNUG.run(
        &["passwd", &sealed_arg],
        &[
            ("SNUG_PASSPHRASE", "first passphrase"),
            ("SNUG_NEW_PASSPHRASE", "second passphrase"),
        ],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let output = SNUG.run(
        &["rotate-recovery-key", &sealed_arg, "--json"],
        &[("SNUG_RECOVERY_KEY", &first_key)],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let second_key = json(&output)["recovery_key"]
        .as_str()
        .expect("key")
        .to_owned();
    assert_ne!(first_key, second_key);

    let unlock = |env: (&str, &str), name: &str| {
        let out = dir.path().join(name);
        let output = SNUG.run(
            &[
                "unprotect",
                &sealed_arg,
                "--out",
                &out.display().to_string(),
            ],
            &[env],
        );
        (code(&output), out)
    };
    assert_eq!(unlock(("SNUG_PASSPHRASE", "first passphrase"), "x1").0, 3);
    assert_eq!(unlock(("SNUG_RECOVERY_KEY", &first_key), "x2").0, 3);
    let (status, out) = unlock(("SNUG_PASSPHRASE", "second passphrase"), "x3");
    assert_eq!(status, 0);
    assert_eq!(sha256_hex(&out), plain_hash);
    let (status, out) = unlock(("SNUG_RECOVERY_KEY", &second_key), "x4");
    assert_eq!(status, 0);
    assert_eq!(sha256_hex(&out), plain_hash);

    // A recovery key the user chose (issue #17 point 10): only at full strength. A 26-symbol
    // (legacy-length) or malformed key is refused with exit 2 and the file is left as it was.
    let chosen_file = dir.path().join("chosen-key.txt");
    let rotate_to = |key: &str| {
        std::fs::write(&chosen_file, format!("{key}\n")).expect("write key");
        SNUG.run(
            &[
                "rotate-recovery-key",
                &sealed_arg,
                "--new-recovery-key-file",
                &chosen_file.display().to_string(),
                "--json",
            ],
            &[("SNUG_PASSPHRASE", "second passphrase")],
        )
    };
    let before = sha256_hex(&sealed);
    let full = second_key.replace('-', "");
    for (key, expected) in [
        (&full[..26], "WEAK_RECOVERY_KEY"),
        ("not a recovery key", "USAGE"),
    ] {
        let output = rotate_to(key);
        assert_eq!(code(&output), 2, "{key}");
        assert_eq!(json(&output)["error"]["code"], expected, "{key}");
        assert_eq!(sha256_hex(&sealed), before, "{key}: the file is unchanged");
    }
    let chosen: String = full.chars().rev().collect();
    let output = rotate_to(&chosen.to_lowercase());
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body = json(&output);
    assert_eq!(body["recovery_key_supplied"], true);
    assert!(
        body.get("recovery_key").is_none(),
        "a chosen key is not echoed"
    );
    assert_eq!(unlock(("SNUG_RECOVERY_KEY", &second_key), "x5").0, 3);
    let (status, out) = unlock(("SNUG_RECOVERY_KEY", &chosen), "x6");
    assert_eq!(status, 0);
    assert_eq!(sha256_hex(&out), plain_hash);
}

#[test]
fn weak_kdf_files_open_only_when_the_minimum_is_lowered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c03 = vectors_dir().join("containers/c03-deterministic-1000iter.snug");
    let out = dir.path().join("plain");
    let args = [
        "unlock",
        &c03.display().to_string(),
        "--out",
        &out.display().to_string(),
    ];
    let output = SNUG.run(&args, &[("SNUG_PASSPHRASE", PASSPHRASE)]);
    assert_eq!(code(&output), 5);
    let output = SNUG.run(
        &args,
        &[
            ("SNUG_PASSPHRASE", PASSPHRASE),
            ("SNUG_MIN_ITERATIONS", "1000"),
        ],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        sha256_hex(&out),
        "28b374162ba96629492af39570f13dee3af9a544f834ce20293fc47e465eedb0"
    );
}
