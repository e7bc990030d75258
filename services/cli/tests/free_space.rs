//! `snug sync push`/`pull` and free space (§9.2, §11.3, issue 17 point 6): the export a push
//! sends has its free space zeroed, so the hub stores exactly the bytes the CLI hashed (its push
//! state and the hub's `Repr-Digest` agree) and no deleted or stripped credential reaches the hub
//! or the device that pulls.

use std::path::Path;

use sha2::{Digest as _, Sha256};
use snug_e2e::{Hub, Options, userdb_vector};
use snug_test_support::{Snug, files};

const DELETED: &str = "sk-ant-CLI-DELETED-CREDENTIAL-0xFACADE";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Runs `snug --json ARGS` with the token, off the async runtime's threads.
async fn snug(args: Vec<String>, token: String) -> (i32, serde_json::Value) {
    tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, [("SNUG_TOKEN", token)]))
        .await
        .expect("join")
}

fn sync_args(command: &str, file: &Path, origin: &str) -> Vec<String> {
    [
        "sync",
        command,
        &file.display().to_string(),
        "--origin",
        origin,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Live credentials (the sample's two) and one deleted without VACUUM.
fn device_file(path: &Path) -> Vec<u8> {
    std::fs::write(path, userdb_vector("sample-v6.user.snug")).expect("write");
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch("PRAGMA secure_delete = OFF;")
        .expect("pragma");
    conn.execute(
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:deleted', ?1)",
        [DELETED],
    )
    .expect("insert");
    conn.execute("DELETE FROM snug_secrets WHERE key = 'byok:deleted'", [])
        .expect("delete");
    drop(conn);
    let bytes = std::fs::read(path).expect("read");
    assert!(contains(&bytes, DELETED.as_bytes()), "left in free space");
    bytes
}

fn live_secret_values(path: &Path) -> Vec<Vec<u8>> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let mut stmt = conn
        .prepare("SELECT CAST(value AS BLOB) FROM snug_secrets")
        .expect("prepare");
    stmt.query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("values")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_stores_the_bytes_it_hashed_and_no_credential() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let http = snug_e2e::Http::new(hub.http);
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a").join("user.snug");
    let b = dir.path().join("b").join("user.snug");
    std::fs::create_dir_all(a.parent().expect("parent")).expect("mkdir");
    std::fs::create_dir_all(b.parent().expect("parent")).expect("mkdir");
    let local = device_file(&a);
    let live = live_secret_values(&a);
    assert_eq!(live.len(), 2);

    let (code, json) = snug(sync_args("push", &a, &hub.url()), token.clone()).await;
    assert_eq!(code, 0, "{json}");
    let pushed_hash = json["sha256"].as_str().expect("sha256").to_owned();
    assert_eq!(
        std::fs::read(&a).expect("read"),
        local,
        "the push only reads"
    );

    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &format!("Bearer {token}"))],
            snug_e2e::Payload::Empty,
        )
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        hex::encode(Sha256::digest(&got.body)),
        pushed_hash,
        "the hub stores the bytes the CLI hashed"
    );
    let mut credentials: Vec<Vec<u8>> = live.clone();
    credentials.push(DELETED.as_bytes().to_vec());
    for (path, bytes) in files(hub.data_dir())
        .into_iter()
        .chain([("GET /userdb".to_owned(), got.body.to_vec())])
    {
        for credential in &credentials {
            assert!(!contains(&bytes, credential), "{path} holds a credential");
        }
    }

    // Another device pulls it; its copy holds no credential byte, and it is in step: nothing to
    // push, and the device that pushed has nothing to pull.
    let (code, json) = snug(sync_args("pull", &b, &hub.url()), token.clone()).await;
    assert_eq!(code, 0, "{json}");
    let pulled = std::fs::read(&b).expect("pulled");
    for credential in &credentials {
        assert!(!contains(&pulled, credential));
    }
    let (code, json) = snug(sync_args("push", &b, &hub.url()), token.clone()).await;
    assert_eq!((code, json["pushed"].clone()), (0, false.into()), "{json}");
    let (code, json) = snug(sync_args("push", &a, &hub.url()), token.clone()).await;
    assert_eq!(
        (code, json["reason"].clone()),
        (0, "UNCHANGED".into()),
        "{json}"
    );
}
