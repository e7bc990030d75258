//! `HubOrigin` against older hubs: one from before delta sync (issue 21), whose every delta
//! route answers 404, so pushes and pulls fall back to the whole file, counted exactly; and one
//! from before summaries and coded bodies (issue 38), which still gets deltas. A minimal
//! `/userdb` server on loopback stands for each (outside `src/`, where the crate opens no
//! sockets itself).

use std::io::Write as _;

use expect_test::expect;
use snug_restore::{HubOrigin, LocalCopy, Origin, Pushed, SnapshotInfo, SyncedBase};

fn synced<'a>(pages: &'a snug_delta::Manifest, image: Option<&'a [u8]>) -> SyncedBase<'a> {
    SyncedBase { pages, image }
}

/// What a fake hub answers a request: status line, ETag, body.
type Answer = (&'static str, Option<String>, Vec<u8>);

/// A request as a fake hub sees it: `METHOD /path`, lowercased headers, body.
struct Request {
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A fake hub on loopback answering with `answer`: serves one keep-alive connection at a time
/// until the test ends, and records each request's `METHOD /path`.
fn fake_hub(
    answer: impl Fn(&Request) -> Answer + Send + 'static,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
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
                let mut headers = Vec::new();
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).expect("header");
                    let header = header.trim().to_ascii_lowercase();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        headers.push((name.trim().to_owned(), value.trim().to_owned()));
                    }
                }
                let length = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .map_or(0, |(_, v)| v.parse().expect("length"));
                if headers
                    .iter()
                    .any(|(n, v)| n == "expect" && v == "100-continue")
                {
                    writer
                        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                        .expect("continue");
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("body");
                let target = line.split(' ').take(2).collect::<Vec<_>>().join(" ");
                log.lock().expect("log").push(target.clone());
                let (status, etag, payload) = answer(&Request {
                    target,
                    headers,
                    body,
                });
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

fn refusal(code: &str) -> Vec<u8> {
    format!(r#"{{"code":"{code}","message":"refused","retryable":false}}"#).into_bytes()
}

/// A hub from before delta sync (issue 21): `PUT /userdb` and `GET /userdb/revisions/{rev}`
/// only, every other path 404 `NO_ROUTE`.
fn old_hub(image: Vec<u8>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    fake_hub(move |request| match request.target.as_str() {
        "PUT /userdb" => ("204 No Content", Some("r2-bbbb".to_owned()), Vec::new()),
        "GET /userdb/revisions/r2-bbbb" => ("200 OK", Some("r2-bbbb".to_owned()), image.clone()),
        _ => ("404 Not Found", None, refusal("NO_ROUTE")),
    })
}

#[test]
fn a_hub_without_delta_routes_gets_whole_files() {
    let image: Vec<u8> = (0..20_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let (url, seen) = old_hub(image.clone());
    let origin = HubOrigin::new(&url, None);
    let base_pages = snug_delta::Manifest::with_shapes(&image, 4096).expect("manifest");
    let pushed = origin.push(&image, Some("r1-aaaa")).expect("push");
    let again = origin
        .push_from(
            &image,
            Some("r1-aaaa"),
            Some(synced(&base_pages, None)),
            None,
        )
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
        synced: None,
    };
    origin
        .download_from(&snapshot, Some(local), &mut sink)
        .expect("download");
    assert_eq!(sink, image);
    let traffic = origin.traffic();
    assert!(!traffic.delta, "{traffic:?}");
    // Each push: the refused attempt (a summary of one group, 62 bytes; or a one-run delta
    // compressed), then the whole image; the pull: no body against the base, then a summary.
    let whole = image.len() as u64;
    let one_run = snug_delta::Delta::build(
        snug_delta::plan(&base_pages, &base_pages.source()),
        &image,
        None,
    )
    .encode();
    let one_run = zstd::bulk::compress(&one_run, 3).expect("compress").len() as u64;
    assert_eq!(
        traffic.sent,
        (62 + whole) + (one_run + 62 + whole) + 62,
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
            "POST /userdb/revisions/r2-bbbb/plan",
            "GET /userdb/revisions/r2-bbbb",
        ]
    "#]]
    .assert_debug_eq(&*seen.lock().expect("log"));
}

/// A hub of issue 21, before summaries and coded bodies: it plans whole manifests only, reads
/// any body as it is (a zstd delta is then a malformed delta), and refuses a summary as a
/// malformed manifest. A push learns that once and goes by difference all the same.
#[test]
fn a_hub_before_summaries_and_codings_still_gets_deltas() {
    let base: Vec<u8> = (0..40_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let mut new = base.clone();
    new[100_000..100_016].copy_from_slice(b"an edited page!!");
    let limits = snug_delta::Limits {
        max_length: 1 << 20,
    };
    let stored = std::sync::Arc::new(std::sync::Mutex::new(None));
    let kept = stored.clone();
    let theirs = base.clone();
    let (url, seen) = fake_hub(move |request| {
        let malformed = ("400 Bad Request", None, refusal("DELTA_INVALID"));
        match request.target.as_str() {
            "POST /userdb/revisions/r1-aaaa/plan" => {
                assert!(request.header("content-encoding").is_none());
                match snug_delta::Manifest::parse(&request.body, &limits) {
                    Ok(manifest) => {
                        let ids = snug_delta::page_ids(&theirs, manifest.geometry.page_size);
                        let layout = snug_delta::plan(&manifest, &snug_delta::Source::ids(&ids));
                        ("200 OK", None, layout.encode())
                    }
                    Err(_) => malformed,
                }
            }
            "PUT /userdb/delta" => {
                let assembled =
                    snug_delta::Delta::parse(&request.body, &limits, theirs.len() as u64)
                        .and_then(|delta| delta.assemble(&theirs));
                match assembled {
                    Ok(image) => {
                        *kept.lock().expect("kept") = Some(image);
                        ("204 No Content", Some("r2-bbbb".to_owned()), Vec::new())
                    }
                    Err(_) => malformed,
                }
            }
            _ => ("404 Not Found", None, refusal("NO_ROUTE")),
        }
    });
    let origin = HubOrigin::new(&url, None);
    let pushed = origin.push(&new, Some("r1-aaaa")).expect("push");
    assert_eq!(
        pushed,
        Pushed::Accepted {
            revision: "r2-bbbb".to_owned()
        }
    );
    assert_eq!(stored.lock().expect("stored").as_deref(), Some(&new[..]));
    // Once refused, the coding is not tried again by this origin.
    let base_pages = snug_delta::Manifest::with_shapes(&base, 4096).expect("manifest");
    origin
        .push_from(&new, Some("r1-aaaa"), Some(synced(&base_pages, None)), None)
        .expect("push with page ids");
    let traffic = origin.traffic();
    assert!(traffic.delta, "{traffic:?}");
    assert!(traffic.sent < 4 * 4096 + 2 * 1024, "{traffic:?}");
    expect![[r#"
        [
            "POST /userdb/revisions/r1-aaaa/plan",
            "POST /userdb/revisions/r1-aaaa/plan",
            "PUT /userdb/delta",
            "PUT /userdb/delta",
            "PUT /userdb/delta",
        ]
    "#]]
    .assert_debug_eq(&*seen.lock().expect("log"));
}

/// A hub from before compressed pages (issue 38) refuses the run kind as a malformed delta: a
/// push that holds its base's bytes sends the changed pages as they are, and lands.
#[test]
fn a_hub_before_compressed_pages_gets_the_pages_as_they_are() {
    let base: Vec<u8> = (0..40_000u32)
        .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
        .collect();
    // Page 24's rows moved 100 bytes along, and a few new bytes where they were.
    let mut new = base.clone();
    let page = 24 * 4096;
    new.copy_within(page..page + 3996, page + 100);
    new[page..page + 100].fill(7);
    let limits = snug_delta::Limits {
        max_length: 1 << 20,
    };
    let stored = std::sync::Arc::new(std::sync::Mutex::new(None));
    let kept = stored.clone();
    let theirs = base.clone();
    let (url, seen) = fake_hub(move |request| match request.target.as_str() {
        "PUT /userdb/delta" => {
            let body = match request.header("content-encoding") {
                Some("zstd") => zstd::decode_all(&request.body[..]).expect("zstd"),
                _ => request.body.clone(),
            };
            let delta = snug_delta::Delta::parse(&body, &limits, theirs.len() as u64)
                .expect("a delta this build parses");
            if delta.layout.compressed_count() > 0 {
                return ("400 Bad Request", None, refusal("DELTA_INVALID"));
            }
            *kept.lock().expect("kept") = Some(delta.assemble(&theirs).expect("assemble"));
            ("204 No Content", Some("r2-bbbb".to_owned()), Vec::new())
        }
        _ => ("404 Not Found", None, refusal("NO_ROUTE")),
    });
    let origin = HubOrigin::new(&url, None);
    let base_pages = snug_delta::Manifest::with_shapes(&base, 4096).expect("manifest");
    let pushed = origin
        .push_from(
            &new,
            Some("r1-aaaa"),
            Some(synced(&base_pages, Some(&base))),
            None,
        )
        .expect("push");
    assert_eq!(
        pushed,
        Pushed::Accepted {
            revision: "r2-bbbb".to_owned()
        }
    );
    assert_eq!(stored.lock().expect("stored").as_deref(), Some(&new[..]));
    expect![[r#"
        [
            "PUT /userdb/delta",
            "PUT /userdb/delta",
        ]
    "#]]
    .assert_debug_eq(&*seen.lock().expect("log"));
}
