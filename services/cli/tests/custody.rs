//! §11.3 custody on sync (issue #17 point 3): a protected file reaches a personal (directory)
//! origin protected, as its own container resealed (header and slots unchanged, a fresh payload
//! IV), opens there with both secrets and is pulled back protected; plaintext reaches a personal
//! origin only with `--plaintext-to-origin`, stated in the output; a hub keeps receiving the
//! secrets-stripped plaintext, and a pull from it into a protected file reseals the pull in that
//! file's own container (point 4).

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use snug_e2e::{Hub, Options};
use snug_test_support::{Snug, body, sample_copy};

const PASSPHRASE: &str = "correct horse battery staple";
/// Two slots: 38 + 2 × 61 header bytes, then 2 × 48 bytes of wrapped keys; the payload IV next.
const PAYLOAD_IV: std::ops::Range<usize> = 256..268;
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// The reference's sample user database (two credentials) protected at 1000 iterations under
/// PASSPHRASE, at `dir/user.snug`; returns it and its recovery key.
fn protected_sample(dir: &Path) -> (PathBuf, String) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let plain = sample_copy(dir, "plain.snug");
    let passphrase_file = dir.join("passphrase.txt");
    std::fs::write(&passphrase_file, PASSPHRASE).expect("write");
    let path = dir.join("user.snug");
    let body = ok(&snug(
        &[
            "protect",
            p(&plain),
            "--out",
            p(&path),
            "--iterations",
            "1000",
            "--passphrase-file",
            p(&passphrase_file),
        ],
        &[],
        false,
    ));
    std::fs::remove_file(&plain).expect("remove");
    let recovery_key = body["recovery_key"].as_str().expect("key").to_owned();
    (path, recovery_key)
}

/// Runs `snug ARGS` (JSON unless `text`) with one secret in the environment.
fn snug(args: &[&str], env: &[(&str, &str)], text: bool) -> Output {
    let mut command = SNUG.command();
    if !text {
        command.arg("--json");
    }
    command
        .args(args)
        .env("SNUG_MIN_ITERATIONS", "1000")
        .envs(env.iter().copied())
        .output()
        .expect("run snug")
}

#[track_caller]
fn ok(output: &Output) -> serde_json::Value {
    body(output, 0)
}

const BY_PASSPHRASE: &[(&str, &str)] = &[("SNUG_PASSPHRASE", PASSPHRASE)];

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn secret_rows(plain: &Path) -> i64 {
    let conn = rusqlite::Connection::open(plain).expect("open");
    conn.query_row("SELECT count(*) FROM snug_secrets", [], |r| r.get(0))
        .expect("count")
}

/// Asserts `copy` is `original`'s container resealed: same header, slots and wrapped keys, a
/// different payload IV, and that both secrets open it (to a database without credentials).
#[track_caller]
fn assert_resealed_from(copy: &Path, original: &[u8], recovery_key: &str, scratch: &Path) {
    let bytes = std::fs::read(copy).expect("read");
    assert!(
        bytes.starts_with(b"SNUGENC1\n"),
        "{} is not protected",
        copy.display()
    );
    assert_eq!(
        bytes[..PAYLOAD_IV.start],
        original[..PAYLOAD_IV.start],
        "header, slot table and wrapped keys are unchanged"
    );
    assert_ne!(
        bytes[PAYLOAD_IV], original[PAYLOAD_IV],
        "a fresh payload IV"
    );
    let by_recovery_key = [("SNUG_RECOVERY_KEY", recovery_key)];
    for (name, secret) in [
        ("passphrase", BY_PASSPHRASE),
        ("recovery", &by_recovery_key[..]),
    ] {
        let plain = scratch.join(format!("opened-by-{name}.snug"));
        let _ = std::fs::remove_file(&plain);
        let body = ok(&snug(
            &["unlock", p(copy), "--out", p(&plain)],
            secret,
            false,
        ));
        assert_eq!(
            body["opened_by"],
            if name == "passphrase" {
                "passphrase"
            } else {
                "recovery-key"
            }
        );
        assert_eq!(secret_rows(&plain), 0, "the pushed image is the export");
    }
}

#[test]
fn a_protected_file_reaches_a_directory_origin_protected_and_comes_back_protected() {
    let root = tempfile::tempdir().expect("dir");
    let origin = root.path().join("origin");
    ok(&snug(&["sync", "origin", p(&origin), "--init"], &[], false));
    let (a, recovery_key) = protected_sample(&root.path().join("a"));
    let original = std::fs::read(&a).expect("read");

    let body = ok(&snug(
        &["sync", "push", p(&a), "--origin", p(&origin)],
        BY_PASSPHRASE,
        false,
    ));
    assert_eq!(
        (body["pushed"].clone(), body["protected"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(
        std::fs::read(&a).expect("read"),
        original,
        "pushing never changes FILE"
    );
    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).expect("mkdir");
    assert_resealed_from(
        &origin.join("user.snug"),
        &original,
        &recovery_key,
        &scratch,
    );

    // A second device pulls it back: installed protected, the same container, both secrets.
    let b = root.path().join("b").join("user.snug");
    std::fs::create_dir_all(b.parent().expect("parent")).expect("mkdir");
    let body = ok(&snug(
        &["sync", "bootstrap", p(&b), "--origin", p(&origin)],
        &[("SNUG_RECOVERY_KEY", &recovery_key)],
        false,
    ));
    assert_eq!(body["protected"], true, "{body}");
    assert_resealed_from(&b, &original, &recovery_key, &scratch);
    // Bound to the revision by the plaintext's hash: an untouched pulled file is not pushed back.
    let body = ok(&snug(
        &["sync", "push", p(&b), "--origin", p(&origin)],
        BY_PASSPHRASE,
        false,
    ));
    assert_eq!(body["reason"], "UNCHANGED", "{body}");
    // Without a secret the protected revision is not installed, and nothing is written.
    let c = root.path().join("c").join("user.snug");
    std::fs::create_dir_all(c.parent().expect("parent")).expect("mkdir");
    let output = snug(
        &["sync", "bootstrap", p(&c), "--origin", p(&origin)],
        &[],
        false,
    );
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(!c.exists());

    // Plaintext only when asked, and the output says so.
    let plain_origin = root.path().join("plain-origin");
    ok(&snug(
        &["sync", "origin", p(&plain_origin), "--init"],
        &[],
        false,
    ));
    let (d, _) = protected_sample(&root.path().join("d"));
    let output = snug(
        &[
            "sync",
            "push",
            p(&d),
            "--origin",
            p(&plain_origin),
            "--plaintext-to-origin",
        ],
        BY_PASSPHRASE,
        true,
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("plaintext") && text.contains("not protected"),
        "the output states it: {text}"
    );
    let stored = std::fs::read(plain_origin.join("user.snug")).expect("read");
    assert!(stored.starts_with(SQLITE_MAGIC));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_keeps_receiving_the_secrets_stripped_plaintext_of_a_protected_file() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let root = tempfile::tempdir().expect("dir");
    let (a, _) = protected_sample(&root.path().join("a"));
    let url = hub.url();
    let push = |extra: &'static [&'static str]| {
        let (a, url, token) = (a.clone(), url.clone(), token.clone());
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["sync", "push", p(&a), "--origin", &url];
            args.extend(extra);
            SNUG.command()
                .arg("--json")
                .args(&args)
                .env("SNUG_PASSPHRASE", PASSPHRASE)
                .env("SNUG_TOKEN", token)
                .env("SNUG_MIN_ITERATIONS", "1000")
                .output()
                .expect("run snug")
        })
    };
    let output = push(&["--plaintext-to-origin"]).await.expect("join");
    assert_eq!(
        output.status.code(),
        Some(2),
        "the flag is for personal origins"
    );
    let body = ok(&push(&[]).await.expect("join"));
    assert_eq!(body["protected"], false, "{body}");

    let http = snug_e2e::Http::new(hub.http);
    let auth = format!("Bearer {token}");
    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            snug_e2e::Payload::Empty,
        )
        .await;
    assert!(
        got.body.starts_with(SQLITE_MAGIC),
        "the hub holds plaintext"
    );
    let copy = root.path().join("hub-copy.snug");
    std::fs::write(&copy, &got.body).expect("write");
    assert_eq!(secret_rows(&copy), 0, "and no credentials");

    // Another (plain) device pushes a change; the pull into the protected file reseals it in its
    // own container (issue #17 point 4): no new salt or recovery key, its credentials kept.
    let b = root.path().join("b").join("user.snug");
    std::fs::create_dir_all(b.parent().expect("parent")).expect("mkdir");
    let run = |args: Vec<String>, env: Vec<(&'static str, String)>| {
        let token = token.clone();
        tokio::task::spawn_blocking(move || {
            SNUG.command()
                .arg("--json")
                .args(&args)
                .env("SNUG_TOKEN", token)
                .env("SNUG_MIN_ITERATIONS", "1000")
                .envs(env)
                .output()
                .expect("run snug")
        })
    };
    let args = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    ok(&run(
        args(&["sync", "bootstrap", p(&b), "--origin", &url]),
        vec![],
    )
    .await
    .expect("join"));
    ok(&run(
        args(&["settings", "set", p(&b), "theme", "\"from-b\""]),
        vec![],
    )
    .await
    .expect("join"));
    ok(
        &run(args(&["sync", "push", p(&b), "--origin", &url]), vec![])
            .await
            .expect("join"),
    );

    let before = std::fs::read(&a).expect("read");
    let output = run(args(&["sync", "pull", p(&a), "--origin", &url]), vec![])
        .await
        .expect("join");
    assert_eq!(output.status.code(), Some(3), "no secret: locked");
    assert_eq!(std::fs::read(&a).expect("read"), before, "and untouched");
    let output = run(
        args(&["sync", "pull", p(&a), "--origin", &url]),
        vec![("SNUG_PASSPHRASE", "not it".to_owned())],
    )
    .await
    .expect("join");
    assert_eq!(output.status.code(), Some(3), "a wrong secret: locked");
    assert_eq!(std::fs::read(&a).expect("read"), before, "and untouched");
    let body = ok(&run(
        args(&["sync", "pull", p(&a), "--origin", &url]),
        vec![("SNUG_PASSPHRASE", PASSPHRASE.to_owned())],
    )
    .await
    .expect("join"));
    assert_eq!(body["protected"], true, "{body}");
    assert_eq!(body["secretsKept"], 2, "{body}");
    let after = std::fs::read(&a).expect("read");
    assert!(after.starts_with(b"SNUGENC1\n"), "still protected");
    assert_eq!(
        after[..PAYLOAD_IV.start],
        before[..PAYLOAD_IV.start],
        "header, slot table and wrapped keys are unchanged"
    );
    assert_ne!(after[PAYLOAD_IV], before[PAYLOAD_IV], "a fresh payload IV");
    let body = ok(&run(
        args(&["settings", "get", p(&a), "theme"]),
        vec![("SNUG_PASSPHRASE", PASSPHRASE.to_owned())],
    )
    .await
    .expect("join"));
    assert_eq!(
        body["value_json"], "\"from-b\"",
        "the pulled contents: {body}"
    );
    // Bound to the revision: nothing to push back.
    let body = ok(&run(
        args(&["sync", "push", p(&a), "--origin", &url]),
        vec![("SNUG_PASSPHRASE", PASSPHRASE.to_owned())],
    )
    .await
    .expect("join"));
    assert_eq!(body["reason"], "UNCHANGED", "{body}");
}
