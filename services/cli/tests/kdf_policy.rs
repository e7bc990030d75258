//! End-to-end tests of a protected file whose KDF iteration count is outside the accepted range: exit 5 with the file untouched, `--min-iterations`/`--max-iterations` to open it, and `snug passwd --upgrade-kdf` to rewrite it for both secrets.

use std::path::{Path, PathBuf};

use snug_test_support::{Snug, sha256_hex, vectors_dir};

const PASSPHRASE: &str = "correct horse battery staple";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// Protects the sample user database at `iterations` into DIR/NAME; returns the file and its
/// recovery key.
fn protected(dir: &Path, name: &str, iterations: u32) -> (PathBuf, String) {
    let file = dir.join(name);
    let iterations = iterations.to_string();
    let body = SNUG.json(
        &[
            "--min-iterations",
            &iterations,
            "--max-iterations",
            &iterations,
            "protect",
            &vectors_dir()
                .join("userdb/sample-v6.user.snug")
                .display()
                .to_string(),
            "--out",
            &file.display().to_string(),
            "--iterations",
            &iterations,
        ],
        &[("SNUG_PASSPHRASE", PASSPHRASE)],
        0,
    );
    let key = body["recovery_key"].as_str().expect("key").to_owned();
    (file, key)
}

#[test]
fn a_weak_file_is_refused_with_exit_5_on_every_reader_and_opens_with_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = protected(dir.path(), "weak.snug", 1_000);
    let f = file.display().to_string();
    let before = sha256_hex(&file);
    let out = dir.path().join("out").display().to_string();
    let pass = [("SNUG_PASSPHRASE", PASSPHRASE)];
    let readers: [&[&str]; 6] = [
        &["inspect", &f],
        &["check", &f],
        &["unlock", &f, "--out", &out],
        &["export", &f, "--out", &out],
        &["app", "list", &f],
        &["passwd", &f],
    ];
    for args in readers {
        let body = SNUG.json(args, &pass, 5);
        assert_eq!(
            body["error"]["code"], "ITERATIONS_OUT_OF_POLICY",
            "{args:?}"
        );
        let message = body["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("1000") && message.contains("--min-iterations 1000"),
            "{args:?}: {message}"
        );
        assert_eq!(sha256_hex(&file), before, "{args:?} changed the file");
        assert!(!Path::new(&out).exists(), "{args:?} wrote an output");
    }
    let body = SNUG.json(
        &["--min-iterations", "1000", "unlock", &f, "--out", &out],
        &pass,
        0,
    );
    assert_eq!(body["opened_by"], "passphrase");
    assert_eq!(
        sha256_hex(Path::new(&out)),
        sha256_hex(&vectors_dir().join("userdb/sample-v6.user.snug"))
    );
    assert_eq!(sha256_hex(&file), before);
}

#[test]
fn a_raised_file_opens_with_the_maximum_raised() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, key) = protected(dir.path(), "raised.snug", 20_000);
    let f = file.display().to_string();
    let before = sha256_hex(&file);
    let body = SNUG.json(&["--max-iterations", "15000", "inspect", &f], &[], 5);
    assert_eq!(body["error"]["code"], "ITERATIONS_OUT_OF_POLICY");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("--max-iterations 20000")
    );
    let out = dir.path().join("out").display().to_string();
    SNUG.json(
        &["unlock", &f, "--out", &out],
        &[("SNUG_RECOVERY_KEY", &key)],
        0,
    );
    assert_eq!(sha256_hex(&file), before);
}

#[test]
fn zero_iterations_is_corrupt_whatever_the_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, _) = protected(dir.path(), "zero.snug", 1_000);
    let mut bytes = std::fs::read(&file).expect("read");
    bytes[12..16].copy_from_slice(&[0; 4]);
    let checksum = fnv1a_with_checksum_zeroed(&bytes[..160]);
    bytes[34..38].copy_from_slice(&checksum.to_be_bytes());
    std::fs::write(&file, &bytes).expect("write");
    let f = file.display().to_string();
    for args in [
        vec!["inspect", f.as_str()],
        vec!["--min-iterations", "0", "inspect", f.as_str()],
    ] {
        let body = SNUG.json(&args, &[], 4);
        assert_eq!(body["error"]["code"], "CORRUPT", "{args:?}");
    }
}

/// The §11.1 header checksum, written out here so the test does not lean on the crate it checks.
fn fnv1a_with_checksum_zeroed(header: &[u8]) -> u32 {
    header
        .iter()
        .enumerate()
        .fold(0x811c_9dc5u32, |hash, (idx, &byte)| {
            let byte = if (34..38).contains(&idx) { 0 } else { byte };
            (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
        })
}

#[test]
fn passwd_upgrade_kdf_needs_both_secrets_and_leaves_a_file_both_open_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, key) = protected(dir.path(), "upgrade.snug", 1_000);
    let f = file.display().to_string();
    let before = sha256_hex(&file);
    let upgrade = [
        "--min-iterations",
        "1000",
        "passwd",
        &f,
        "--upgrade-kdf",
        "--iterations",
        "20000",
    ];

    // The passphrase alone is not enough: every slot is re-derived.
    let output = SNUG.run(&upgrade, &[("SNUG_PASSPHRASE", PASSPHRASE)]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("both the passphrase and the recovery key"),
        "{stderr}"
    );
    assert_eq!(sha256_hex(&file), before);
    // A wrong recovery key is locked, and changes nothing.
    let wrong = "ABCDE-FGHJK-MNPQR-STVWX-YZ234-56";
    let body = SNUG.json(
        &upgrade,
        &[
            ("SNUG_PASSPHRASE", PASSPHRASE),
            ("SNUG_RECOVERY_KEY", wrong),
        ],
        3,
    );
    assert_eq!(body["error"]["code"], "LOCKED");
    assert_eq!(sha256_hex(&file), before);
    // A count a default reader would refuse is not written.
    let body = SNUG.json(
        &[
            "--min-iterations",
            "1000",
            "passwd",
            &f,
            "--upgrade-kdf",
            "--iterations",
            "1000",
        ],
        &[("SNUG_PASSPHRASE", PASSPHRASE), ("SNUG_RECOVERY_KEY", &key)],
        2,
    );
    assert_eq!(body["error"]["code"], "USAGE");
    assert_eq!(sha256_hex(&file), before);

    let body = SNUG.json(
        &upgrade,
        &[("SNUG_PASSPHRASE", PASSPHRASE), ("SNUG_RECOVERY_KEY", &key)],
        0,
    );
    assert_eq!(body["iterations"], 20_000);
    assert_eq!(body["previous_iterations"], 1_000);
    let plain = sha256_hex(&vectors_dir().join("userdb/sample-v6.user.snug"));
    // No flag needed any more, and both secrets open it.
    let info = SNUG.json(&["inspect", &f], &[], 0);
    assert_eq!(info["iterations"], 20_000);
    for (name, env) in [
        ("by-passphrase", ("SNUG_PASSPHRASE", PASSPHRASE)),
        ("by-key", ("SNUG_RECOVERY_KEY", key.as_str())),
    ] {
        let out = dir.path().join(name);
        SNUG.json(
            &["unlock", &f, "--out", &out.display().to_string()],
            &[env],
            0,
        );
        assert_eq!(sha256_hex(&out), plain, "{name}");
    }
}
