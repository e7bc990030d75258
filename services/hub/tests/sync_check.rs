//! `snug-hub sync check` (issue 23, point 3): the sync store's integrity check for an operator,
//! on a store it opens itself and through a running sync service's CheckStore, with one byte of
//! a pack damaged on disk.

mod support;

use std::{path::Path, process::Output};

use sha2::{Digest as _, Sha256};
use support::{BIN, CHUNK, config, files_holding, image, json, store_image, text};

fn check(data: &Path, extra: &[&str]) -> Output {
    std::process::Command::new(BIN)
        .args(["sync", "check", "--data-dir"])
        .arg(data)
        .args(extra)
        .env_remove("SNUG_SYNC_STORE")
        .output()
        .expect("run snug-hub sync check")
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
    let bytes = image(0, 8 * CHUNK);
    store_image(data, "alice", &bytes).await;

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
    let (served, runtime) = config(data);
    let store = snug_sync_service::open_store(&served, &runtime)
        .await
        .expect("open the store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        snug_sync_service::serve(
            &snug_rpc::server::ServerConfig::for_tests(),
            &served,
            &runtime,
            store,
            listener,
            std::future::pending(),
        )
        .await
    });
    let held = check(data, &[]);
    assert_eq!(held.status.code(), Some(1));
    assert!(
        text(&held.stderr).contains("--sync-addr"),
        "{}",
        text(&held.stderr)
    );
    // The address under its one name, and under the old spelling scripts may still use.
    for flag in ["--sync-addr", "--addr"] {
        let remote = check(data, &[flag, &format!("http://{addr}")]);
        assert_eq!(remote.status.code(), Some(2), "{}", text(&remote.stderr));
        assert_eq!(
            text(&remote.stdout),
            format!("CHUNK_MISMATCH chunk={chunk}\n")
        );
    }
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

/// `snug-hub sync usage|erase --store-id` (issue 20, points 5 and 6) on a store opened here, with
/// no users directory: the usage of one image, its erasure leaving none of its bytes in any of
/// the store's files, and then nothing left to name (issue 36, point 5: never a report of zeros
/// for an id the store holds nothing of).
#[tokio::test]
async fn usage_and_erasure_on_a_store_opened_here() {
    let data = tempfile::tempdir().expect("dir");
    let bytes = image(0, 16 * CHUNK);
    store_image(data.path(), "alice", &bytes).await;
    let needle = &bytes[5 * CHUNK..5 * CHUNK + 64];
    assert!(
        !files_holding(&data.path().join("sync"), needle).is_empty(),
        "the scan finds the image before the erasure"
    );

    let usage = json(&sync_command(
        data.path(),
        &["usage", "--store-id", "alice"],
    ));
    assert_eq!(usage["currentBytes"], bytes.len());
    assert_eq!(usage["revisions"], 1);
    let erased = json(&sync_command(
        data.path(),
        &["erase", "--store-id", "alice"],
    ));
    assert_eq!(erased["revisions"], 1, "{erased}");
    assert_eq!(erased["bytes"], bytes.len(), "{erased}");
    assert_eq!(
        files_holding(&data.path().join("sync"), needle),
        Vec::<std::path::PathBuf>::new(),
        "no byte of the erased image is left"
    );
    // (arguments, exit status, words stderr must hold): the id is gone from the store, and a
    // name needs a users directory, which this data directory does not have.
    let refusals: [(&[&str], i32, &str); 5] = [
        (&["usage", "--store-id", "alice"], 3, "no revision"),
        (&["erase", "--store-id", "alice"], 3, "no revision"),
        (&["usage", "--user", "alice"], 3, "no users directory"),
        (&["erase", "--user", "a\u{7}"], 2, "control characters"),
        (&["erase"], 2, "--user"),
    ];
    for (args, code, words) in refusals {
        let refused = sync_command(data.path(), args);
        assert_eq!(
            refused.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&refused.stderr)
        );
        assert!(
            text(&refused.stderr).contains(words),
            "{args:?}: {}",
            text(&refused.stderr)
        );
        assert_eq!(text(&refused.stdout), "", "{args:?}");
    }
    assert!(
        !data.path().join("gateway").exists(),
        "looking a name up leaves no users file behind"
    );
}
