//! An upload held open across `snug-hub users remove NAME --erase` (issue 36 point 3), through
//! the built binary as an operator runs it: the PUT was authenticated before the erasure and its
//! last bytes arrive after the command has answered; it is refused, and no file of the hub holds
//! the bytes it carried or the image that was erased.

mod support;

use std::time::{Duration, Instant};

use snug_e2e::{Http, Payload, bearer};
use support::{Process, files_holding, text};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

fn operator(args: &[&str]) -> std::process::Output {
    support::run(args, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_held_across_users_remove_erase_is_refused_and_leaves_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_str().expect("utf-8").to_owned();
    let added = operator(&["users", "add", "alice", "--data-dir", &dir]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let token = String::from_utf8(added.stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    let env: Vec<(&str, String)> = vec![
        ("SNUG_LOG_FORMAT", "json".to_owned()),
        ("RUST_LOG", "info".to_owned()),
        ("SNUG_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_HTTP_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_AUTH", "on".to_owned()),
        ("SNUG_CORS_ORIGINS", "https://app.example".to_owned()),
        ("SNUG_SHUTDOWN_GRACE", "2s".to_owned()),
        ("SNUG_DATA_DIR", dir.clone()),
    ];
    let mut hub = Process::spawn("hub", &["serve"], &env);
    let http_addr: std::net::SocketAddr = hub
        .logged("HTTP gateway listening", "addr")
        .await
        .parse()
        .expect("the HTTP address");
    let grpc = hub.logged("gRPC server listening", "addr").await;

    // Alice's first image, then an edit of it carrying a marker no other byte sequence has.
    let (first, _) = snug_e2e::userdb_with_seeded_filler(1 << 20, 0x5eed_0001);
    let http = Http::new(http_addr);
    let put = http
        .send(
            "PUT",
            "/userdb",
            &[
                ("authorization", &bearer(&token)),
                ("content-type", "application/octet-stream"),
                ("if-none-match", "*"),
            ],
            Payload::Whole(first.clone()),
        )
        .await;
    assert_eq!(put.status, 204, "{:?}", put.json());
    let etag = put.header("etag").to_owned();
    let marker = "held-across-the-erasure-4f1c9a7e2b";
    let next = snug_test_support::userdb::edited(
        &first,
        &format!("INSERT INTO snug_settings (key, value) VALUES ('{marker}', '\"{marker}\"');"),
    );

    // The second PUT is authenticated and half sent when the operator erases alice.
    let mut held = TcpStream::connect(http_addr).await.expect("connect");
    let head = format!(
        "PUT /userdb HTTP/1.1\r\nhost: {http_addr}\r\nauthorization: Bearer {token}\r\n\
         content-type: application/octet-stream\r\nif-match: {etag}\r\ncontent-length: {}\r\n\r\n",
        next.len()
    );
    held.write_all(head.as_bytes()).await.expect("head");
    let half = next.len() / 2;
    held.write_all(&next[..half]).await.expect("first half");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let removed = operator(&[
        "users",
        "remove",
        "alice",
        "--erase",
        "--yes",
        "--data-dir",
        &dir,
        "--sync-addr",
        &format!("http://{grpc}"),
    ]);
    assert!(removed.status.success(), "{}", text(&removed.stderr));

    // The rest arrives after the command answered: refused, nothing stored.
    let started = Instant::now();
    held.write_all(&next[half..]).await.expect("second half");
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n")
        && started.elapsed() < Duration::from_secs(30)
    {
        let n = held.read(&mut buf).await.expect("read");
        assert!(n > 0, "the connection closed before an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let status = String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    // Authenticated before the erasure, so not 401: the store refuses the erased id's write
    // as it refuses an unknown user's.
    assert!(
        status.starts_with("HTTP/1.1 404"),
        "the write of an erased user is refused: {status}"
    );
    // A moment for anything in flight to land, had it been let through.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = hub.terminate().await;
    let needles: [(&str, &[u8]); 2] = [
        ("the held upload's marker", marker.as_bytes()),
        (
            "the erased image",
            &first[first.len() / 2..first.len() / 2 + 64],
        ),
    ];
    for (what, needle) in needles {
        assert_eq!(
            files_holding(data.path(), needle),
            Vec::<std::path::PathBuf>::new(),
            "{what} is in a file of the hub"
        );
    }
}
