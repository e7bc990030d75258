//! `HubOrigin` against a hub from before delta sync (issue 21): every delta route answers 404,
//! and pushes and pulls fall back to the whole file, counted exactly. A minimal `/userdb` server
//! on loopback stands for the old hub (outside `src/`, where the crate opens no sockets itself).

use std::io::Write as _;

use expect_test::expect;
use snug_restore::{HubOrigin, LocalCopy, Origin, Pushed, SnapshotInfo};

/// A hub from before delta sync (issue 21): `PUT /userdb` and `GET /userdb/revisions/{rev}`
/// only, every other path 404 `NO_ROUTE`. Serves one keep-alive connection at a time until the
/// test ends, and records each request line.
fn old_hub(image: Vec<u8>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead as _, BufReader, Read as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut writer = stream.try_clone().expect("clone");
            let mut reader = BufReader::new(stream);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim().to_owned();
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).expect("header");
                    let header = header.trim().to_ascii_lowercase();
                    if header.is_empty() {
                        break;
                    }
                    if let Some(value) = header.strip_prefix("content-length:") {
                        length = value.trim().parse().expect("length");
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("body");
                let target = line.split(' ').take(2).collect::<Vec<_>>().join(" ");
                log.lock().expect("log").push(target.clone());
                let (status, etag, payload) = match target.as_str() {
                    "PUT /userdb" => ("204 No Content", Some("r2-bbbb"), Vec::new()),
                    "GET /userdb/revisions/r2-bbbb" => ("200 OK", Some("r2-bbbb"), image.clone()),
                    _ => (
                        "404 Not Found",
                        None,
                        br#"{"code":"NO_ROUTE","message":"no such route","retryable":false}"#
                            .to_vec(),
                    ),
                };
                let mut head =
                    format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", payload.len());
                if let Some(etag) = etag {
                    head.push_str(&format!("etag: \"{etag}\"\r\n"));
                }
                head.push_str("\r\n");
                writer.write_all(head.as_bytes()).expect("head");
                writer.write_all(&payload).expect("payload");
            }
        }
    });
    (url, seen)
}

#[test]
fn a_hub_without_delta_routes_gets_whole_files() {
    let image: Vec<u8> = (0..20_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let (url, seen) = old_hub(image.clone());
    let origin = HubOrigin::new(&url, None);
    let base_pages = snug_delta::Manifest::with_shapes(&image, 4096).expect("manifest");
    let pushed = origin.push(&image, Some("r1-aaaa")).expect("push");
    let again = origin
        .push_from(&image, Some("r1-aaaa"), Some(&base_pages), None)
        .expect("push with page ids");
    for pushed in [pushed, again] {
        assert_eq!(
            pushed,
            Pushed::Accepted {
                revision: "r2-bbbb".to_owned()
            }
        );
    }
    let snapshot = SnapshotInfo {
        revision: "r2-bbbb".to_owned(),
        sha256: snug_delta::sha256(&image),
        size: image.len() as u64,
        storage_version: None,
    };
    let mut sink = Vec::new();
    let local = LocalCopy {
        bytes: &image[..4096],
        revision: Some("r1-aaaa"),
    };
    origin
        .download_from(&snapshot, Some(local), &mut sink)
        .expect("download");
    assert_eq!(sink, image);
    let traffic = origin.traffic();
    assert!(!traffic.delta, "{traffic:?}");
    // Each push: the refused attempt (a 20-page manifest, 208 bytes; or a one-run delta, 69),
    // then the whole image; the pull: no body against the base, then a one-page manifest (56).
    let whole = image.len() as u64;
    assert_eq!(
        traffic.sent,
        (208 + whole) + (69 + 208 + whole) + 56,
        "{traffic:?}"
    );
    expect![[r#"
        [
            "POST /userdb/revisions/r1-aaaa/plan",
            "PUT /userdb",
            "PUT /userdb/delta",
            "POST /userdb/revisions/r1-aaaa/plan",
            "PUT /userdb",
            "POST /userdb/delta?base=r1-aaaa",
            "POST /userdb/delta",
            "GET /userdb/revisions/r2-bbbb",
        ]
    "#]]
    .assert_debug_eq(&*seen.lock().expect("log"));
}
