//! §11.2 rule 7 on every command that writes an OUT (issue #17 point 8): `--force` never replaces
//! a protected (SNUGENC1) file; only `--replace-protected` beside it does. The refusal has its own
//! code and exit code, and the protected file is byte-identical afterwards.

use std::{path::Path, process::Output};

use snug_test_support::{Snug, json, sha256_hex, vectors_dir};

const PASSPHRASE: &str = "correct horse battery staple";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn snug(args: &[String]) -> Output {
    SNUG.command()
        .arg("--json")
        .args(args)
        .env("SNUG_PASSPHRASE", PASSPHRASE)
        .env("SNUG_MIN_ITERATIONS", "1000")
        .output()
        .expect("run snug")
}

#[test]
fn force_never_replaces_a_protected_output_without_replace_protected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let container = vectors_dir().join("containers/c03-deterministic-1000iter.snug");
    let plain = dir.path().join("plain.snug");
    std::fs::copy(vectors_dir().join("userdb/sample-v6.user.snug"), &plain).expect("copy");
    let passphrase_file = dir.path().join("passphrase.txt");
    std::fs::write(&passphrase_file, PASSPHRASE).expect("write");
    let target = dir.path().join("protected.snug");
    let p = |path: &Path| path.display().to_string();

    // Every command that writes an OUT, with the protected file as OUT.
    let commands: Vec<(&str, Vec<String>)> = vec![
        ("init", vec!["init".into(), p(&target)]),
        (
            "unlock",
            vec!["unlock".into(), p(&container), "--out".into(), p(&target)],
        ),
        (
            "unprotect",
            vec![
                "unprotect".into(),
                p(&container),
                "--out".into(),
                p(&target),
            ],
        ),
        (
            "migrate",
            vec!["migrate".into(), p(&plain), "--out".into(), p(&target)],
        ),
        (
            "export",
            vec!["export".into(), p(&plain), "--out".into(), p(&target)],
        ),
        (
            "protect",
            vec![
                "protect".into(),
                p(&plain),
                "--out".into(),
                p(&target),
                "--iterations".into(),
                "1000".into(),
                "--passphrase-file".into(),
                p(&passphrase_file),
            ],
        ),
        (
            "app export",
            vec![
                "app".into(),
                "export".into(),
                p(&plain),
                "--app".into(),
                "starter--chess".into(),
                "--out".into(),
                p(&target),
            ],
        ),
    ];
    for (name, args) in commands {
        std::fs::copy(&container, &target).expect("copy");
        let before = sha256_hex(&target);
        let with = |extra: &[&str]| {
            let mut all = args.clone();
            all.extend(extra.iter().map(|s| (*s).to_owned()));
            all
        };

        // Without --force: the file exists, as for any OUT.
        let output = snug(&with(&[]));
        assert_eq!(output.status.code(), Some(1), "{name}: {}", json(&output));
        assert_eq!(json(&output)["error"]["code"], "OUTPUT_EXISTS", "{name}");
        // --force alone: refused because the OUT is protected, with its own code and exit code.
        let output = snug(&with(&["--force"]));
        let body = json(&output);
        assert_eq!(output.status.code(), Some(8), "{name}: {body}");
        assert_eq!(body["error"]["code"], "OUTPUT_PROTECTED", "{name}");
        assert_eq!(body["exit_code"], 8, "{name}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("--replace-protected")),
            "{name}: {body}"
        );
        assert_eq!(
            sha256_hex(&target),
            before,
            "{name}: the protected file was touched"
        );
        // --replace-protected is a second word for the same act, never a replacement for --force.
        let output = snug(&with(&["--replace-protected"]));
        assert_eq!(output.status.code(), Some(2), "{name}");
        assert_eq!(sha256_hex(&target), before, "{name}");
        // Both: replaced, as asked.
        let output = snug(&with(&["--force", "--replace-protected"]));
        assert_eq!(output.status.code(), Some(0), "{name}: {}", json(&output));
        assert_ne!(sha256_hex(&target), before, "{name}: not replaced");
    }

    // A plain OUT is still replaced by --force alone.
    std::fs::copy(&plain, &target).expect("copy");
    let output = snug(&["init".into(), p(&target), "--force".into()]);
    assert_eq!(output.status.code(), Some(0), "{}", json(&output));
}
