//! `snug-hub sync check` (issue 23, point 3): the sync store's integrity check for an operator,
//! on a store it opens itself and through a running sync service's CheckStore, with one byte of
//! a pack damaged on disk.

use std::{path::Path, process::Output};

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use snug_revstore::{Precondition, Principal, PutRequest, RevStore as _, UserId};
use snug_sync_service::SyncConfig;

const BIN: &str = env!("CARGO_BIN_EXE_snug-hub");

/// Chunks of the embedded store (one SQLite page).
const CHUNK: usize = 4096;

fn check(data: &Path, extra: &[&str]) -> Output {
    std::process::Command::new(BIN)
        .args(["sync", "check", "--data-dir"])
        .arg(data)
        .args(extra)
        .env_remove("SNUG_SYNC_STORE")
        .output()
        .expect("run snug-hub sync check")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Distinct pseudo-random chunks.
fn image(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut n = 0u64;
    while out.len() < len {
        out.extend_from_slice(&Sha256::digest(n.to_le_bytes()));
        n += 1;
    }
    out.truncate(len);
    out
}

fn config(data: &Path) -> SyncConfig {
    SyncConfig {
        sqlite_dir: data.join("sync"),
        reclaim_interval: std::time::Duration::ZERO,
        ..SyncConfig::default()
    }
}

/// Stores `bytes` as alice's first image in the embedded store under `data`, then closes it.
async fn store_image(data: &Path, bytes: &[u8]) {
    let store = snug_sync_service::open_store(&config(data))
        .await
        .expect("open the store");
    let alice = UserId::new("alice").expect("user");
    store.provision_user(&alice).await.expect("provision");
    let body = futures::stream::iter([Ok(Bytes::copy_from_slice(bytes))]);
    store
        .put(
            PutRequest {
                user: alice,
                precondition: Precondition::MustNotExist,
                principal: Principal::new("test").expect("principal"),
                idempotency_key: None,
                expected_length: None,
                quota_bytes: None,
            },
            body,
        )
        .await
        .expect("put");
    drop(store);
    released(&data.join("sync").join("LOCK")).await;
}

/// Waits until the store's lock is free: the store's background work (a checkpoint, the served
/// ledger's writer) holds it a moment past the handle's drop, as it would in a hub shutting down.
async fn released(lock: &Path) {
    let file = std::fs::File::open(lock).expect("open the store's lock file");
    for _ in 0..200 {
        if file.try_lock().is_ok() {
            file.unlock().expect("unlock");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the store's lock is still held 10s after its handle was dropped");
}

/// Flips one byte at `at` of the store's only pack (one image of distinct chunks: image order).
fn damage(data: &Path, at: u64) {
    use std::os::unix::fs::FileExt as _;
    let pack = std::fs::read_dir(data.join("sync/packs"))
        .expect("packs")
        .next()
        .expect("a pack")
        .expect("entry")
        .path();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(pack)
        .expect("open");
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).expect("read");
    file.write_all_at(&[byte[0] ^ 1], at).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_pack_is_reported_by_the_check_on_either_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path();
    let bytes = image(8 * CHUNK);
    store_image(data, &bytes).await;

    let sound = check(data, &[]);
    assert_eq!(sound.status.code(), Some(0), "{}", text(&sound.stderr));
    assert!(text(&sound.stderr).contains("the store is sound"));
    assert_eq!(text(&sound.stdout), "");

    let at = 5 * CHUNK + 99;
    damage(data, at as u64);
    let chunk = hex::encode(Sha256::digest(&bytes[5 * CHUNK..6 * CHUNK]));
    let damaged = check(data, &[]);
    assert_eq!(damaged.status.code(), Some(2), "{}", text(&damaged.stderr));
    assert_eq!(
        text(&damaged.stdout),
        format!("CHUNK_MISMATCH chunk={chunk}\n")
    );

    let json = check(data, &["--json"]);
    assert_eq!(json.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(report["imagesChecked"], 1);
    assert_eq!(report["problems"][0]["kind"], "CHUNK_MISMATCH");
    assert_eq!(report["problems"][0]["chunk"], chunk.as_str());
    assert_eq!(report["problemsOmitted"], 0);

    // A running sync service holds the store: opening it here is refused (exit 1, saying what to
    // do), and the same report comes through its CheckStore.
    let store = snug_sync_service::open_store(&config(data))
        .await
        .expect("open the store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = config(data);
    tokio::spawn(async move {
        snug_sync_service::serve(
            &snug_rpc::server::ServerConfig::for_tests(),
            &served,
            store,
            listener,
            std::future::pending(),
        )
        .await
    });
    let held = check(data, &[]);
    assert_eq!(held.status.code(), Some(1));
    assert!(
        text(&held.stderr).contains("--addr"),
        "{}",
        text(&held.stderr)
    );
    let remote = check(data, &["--addr", &format!("http://{addr}")]);
    assert_eq!(remote.status.code(), Some(2), "{}", text(&remote.stderr));
    assert_eq!(
        text(&remote.stdout),
        format!("CHUNK_MISMATCH chunk={chunk}\n")
    );
}

fn sync_command(data: &Path, args: &[&str]) -> Output {
    std::process::Command::new(BIN)
        .arg("sync")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("SNUG_SYNC_STORE")
        .output()
        .expect("run snug-hub sync")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// Every file under `dir`, recursively, that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    // A file the store's background work removed since the listing holds nothing.
    let gone = |err: &std::io::Error| err.kind() == std::io::ErrorKind::NotFound;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        let kind = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta.file_type(),
            Err(err) if gone(&err) => continue,
            Err(err) => panic!("{}: {err}", path.display()),
        };
        if kind.is_dir() {
            found.extend(files_holding(&path, needle));
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let content = match std::fs::read(&path) {
            Ok(content) => content,
            Err(err) if gone(&err) => continue,
            Err(err) => panic!("{}: {err}", path.display()),
        };
        if content.windows(needle.len()).any(|w| w == needle) {
            found.push(path);
        }
    }
    found
}

/// `snug-hub sync usage|erase --user` (issue 20, points 5 and 6) on a store opened here: the
/// usage of one image, its erasure leaving none of its bytes in any of the store's files, and
/// a second erasure reporting zeros.
#[tokio::test]
async fn usage_and_erasure_on_a_store_opened_here() {
    let data = tempfile::tempdir().expect("dir");
    let bytes = image(16 * CHUNK);
    store_image(data.path(), &bytes).await;
    let needle = &bytes[5 * CHUNK..5 * CHUNK + 64];
    assert!(
        !files_holding(&data.path().join("sync"), needle).is_empty(),
        "the scan finds the image before the erasure"
    );

    let usage = json(&sync_command(data.path(), &["usage", "--user", "alice"]));
    assert_eq!(usage["currentBytes"], bytes.len());
    assert_eq!(usage["revisions"], 1);
    let erased = json(&sync_command(data.path(), &["erase", "--user", "alice"]));
    assert_eq!(erased["revisions"], 1, "{erased}");
    assert_eq!(erased["bytes"], bytes.len(), "{erased}");
    assert_eq!(
        files_holding(&data.path().join("sync"), needle),
        Vec::<std::path::PathBuf>::new(),
        "no byte of the erased image is left"
    );
    let usage = json(&sync_command(data.path(), &["usage", "--user", "alice"]));
    assert_eq!(
        (usage["currentBytes"].clone(), usage["revisions"].clone()),
        (0.into(), 0.into())
    );
    let again = json(&sync_command(data.path(), &["erase", "--user", "alice"]));
    assert_eq!(
        (again["revisions"].clone(), again["bytes"].clone()),
        (0.into(), 0.into())
    );

    let refused = sync_command(data.path(), &["erase", "--user", ""]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("user id"),
        "{}",
        text(&refused.stderr)
    );
}
