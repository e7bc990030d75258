//! Device bootstrap and restore from the origin (issue #8) through the built `snug` binary: a
//! round trip through the whole hub started in-process (push from one device, bootstrap another,
//! never-clobber, a named revision), and a hand-made HTTP origin on 127.0.0.1 that breaks a
//! download off, corrupts it, or declares a storage version this build cannot open.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::Path,
    sync::{Arc, Mutex},
};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use snug_e2e::{Hub, Options, userdb_vector};
use snug_test_support::{Snug, theme};

const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// Runs `snug --json ARGS` with `env`; returns (exit code, JSON).
fn snug(args: &[&str], env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    SNUG.exit_and_json(args, env.iter().copied())
}

/// [`snug`] off the async runtime's threads (the hub runs on them).
async fn snug_async(
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
) -> (i32, serde_json::Value) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        snug(&args, &env)
    })
    .await
    .expect("join")
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn sql(file: &Path, statement: &str) {
    snug_test_support::execute(file, statement);
}

fn secrets(file: &Path) -> Vec<(String, String)> {
    snug_test_support::query_pairs(file, "SELECT key, value FROM snug_secrets ORDER BY key")
}

/// Every row of every table, as text, keyed by table name. Connection rows leave out what a
/// pull's reconciliation (§12.4) sets on every incoming row (`imported`, `updated_at`).
fn rows(file: &Path) -> BTreeMap<String, Vec<String>> {
    let conn = rusqlite::Connection::open(file).expect("open");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    tables
        .into_iter()
        .map(|table| {
            let columns = if table == "snug_connections" {
                "app_id, slot, requirement_json, requirement_version, provenance, confidence, status, \
                 pending_requirement_json, allowed_hosts, approved_at, revoked_at, created_at"
            } else {
                "*"
            };
            let mut stmt = conn.prepare(&format!("SELECT {columns} FROM \"{table}\"")).expect("select");
            let width = stmt.column_count();
            let mut rows: Vec<String> = stmt
                .query_map([], |row| {
                    let cells: Vec<String> = (0..width)
                        .map(|i| format!("{:?}", row.get::<_, rusqlite::types::Value>(i).expect("cell")))
                        .collect();
                    Ok(cells.join("|"))
                })
                .expect("rows")
                .collect::<Result<_, _>>()
                .expect("rows");
            rows.sort();
            (table, rows)
        })
        .collect()
}

/// Every file in `dir` with its length and SHA-256.
fn listing(dir: &Path) -> BTreeMap<String, (usize, String)> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|entry| {
            let entry = entry.expect("entry");
            let bytes = std::fs::read(entry.path()).expect("read");
            (
                entry.file_name().to_string_lossy().into_owned(),
                (bytes.len(), hex::encode(Sha256::digest(&bytes))),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_device_bootstraps_from_the_hub_and_keeps_its_secrets_local() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = vec![("SNUG_TOKEN", token.clone())];
    let dir = tempfile::tempdir().expect("dir");
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).expect("mkdir");
    std::fs::create_dir_all(&b_dir).expect("mkdir");
    let a = a_dir.join("user.snug");
    let b = b_dir.join("user.snug");
    // Device A holds the sample, with two credentials.
    std::fs::write(&a, userdb_vector("sample-v6.user.snug")).expect("write");
    let (a_s, b_s, url) = (a.display().to_string(), b.display().to_string(), hub.url());

    let (code, json) = snug_async(
        strings(&["sync", "push", &a_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    let r1 = json["revision"].as_str().expect("revision").to_owned();

    // Device B has nothing: one command, one download.
    let (code, json) = snug_async(
        strings(&["sync", "bootstrap", &b_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        (json["revision"].as_str(), json["bootstrapped"].as_bool()),
        (Some(r1.as_str()), Some(true))
    );
    assert_eq!(json["storageVersion"], 6);
    // The file, its push state, and the page ids and bytes of the revision for the next delta
    // push (the bytes only for a plain file).
    assert_eq!(
        listing(&b_dir).into_keys().collect::<Vec<_>>(),
        [
            "user.snug",
            "user.snug.sync.base",
            "user.snug.sync.json",
            "user.snug.sync.pages"
        ]
    );
    assert_eq!(snug_test_support::sync_record(&b)["revision"], r1.as_str());

    // Both files hold the same data; the secrets stayed on A. The other differences are the
    // import obligations of a pull: the endpoint re-confirmation (§9 obligation 2) and connection
    // rows reconciled as imported (§12.4, checked here).
    let (mut a_rows, mut b_rows) = (rows(&a), rows(&b));
    assert_eq!(a_rows.remove("snug_secrets").map(|r| r.len()), Some(2));
    assert_eq!(b_rows.remove("snug_secrets"), Some(vec![]));
    let latch = "Text(\"needsEndpointConfirm\")|Text(\"true\")".to_owned();
    let b_settings = b_rows.get_mut("snug_settings").expect("settings");
    assert!(b_settings.contains(&latch), "{b_settings:?}");
    b_settings.retain(|row| *row != latch);
    assert_eq!(a_rows, b_rows);
    let imported: i64 = rusqlite::Connection::open(&b)
        .expect("open")
        .query_row("SELECT min(imported) FROM snug_connections", [], |r| {
            r.get(0)
        })
        .expect("imported");
    assert_eq!(imported, 1);

    // The pulled file is bound to its revision: pushing it sends nothing.
    let (code, json) = snug_async(
        strings(&["sync", "push", &b_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(
        (code, json["reason"].as_str()),
        (0, Some("UNCHANGED")),
        "{json}"
    );
    // A bootstrap never touches an existing file.
    let before = listing(&b_dir);
    let (code, json) = snug_async(
        strings(&["sync", "bootstrap", &b_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (1, Some("DESTINATION_EXISTS")),
        "{json}"
    );
    assert_eq!(listing(&b_dir), before);

    // B stores a credential of its own (no change for the gate), A edits and pushes, B edits
    // without pushing: pulling would clobber B's edit, so it is refused.
    sql(
        &b,
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:openai', 'sk-b-local')",
    );
    let (code, _) = snug_async(
        strings(&["sync", "push", &b_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(code, 0);
    sql(
        &a,
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"from-a\"')",
    );
    let (code, json) = snug_async(
        strings(&["sync", "push", &a_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    let r2 = json["revision"].as_str().expect("revision").to_owned();
    sql(
        &b,
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"unpushed-b\"')",
    );
    let before = listing(&b_dir);
    let (code, json) = snug_async(
        strings(&["sync", "pull", &b_s, "--origin", &url]),
        env.clone(),
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (6, Some("DIVERGED")),
        "{json}"
    );
    assert_eq!(
        listing(&b_dir),
        before,
        "a refused pull leaves the file and its sidecar byte-identical"
    );

    // --force replaces B's edit with A's, and B's own credential stays.
    let (code, json) = snug_async(
        strings(&["sync", "pull", &b_s, "--origin", &url, "--force"]),
        env.clone(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        (json["revision"].as_str(), json["forced"].as_bool()),
        (Some(r2.as_str()), Some(true))
    );
    assert_eq!(theme(&b).as_deref(), Some("\"from-a\""));
    assert_eq!(
        secrets(&b),
        [("byok:openai".to_owned(), "sk-b-local".to_owned())]
    );
    assert_eq!(secrets(&a).len(), 2, "A's credentials never left A");

    // A named revision from history: r1 restored into a third file.
    let c = dir.path().join("c.snug");
    let c_s = c.display().to_string();
    let (code, json) = snug_async(
        strings(&["sync", "pull", &c_s, "--origin", &url, "--revision", &r1]),
        env.clone(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["revision"].as_str(), Some(r1.as_str()));
    assert_eq!(theme(&c), None, "r1 predates A's edit");
    let (code, json) = snug_async(
        strings(&[
            "sync",
            "pull",
            &c_s,
            "--origin",
            &url,
            "--revision",
            "r9-0000000000000000",
        ]),
        env.clone(),
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (1, Some("REVISION_NOT_FOUND")),
        "{json}"
    );
    let (code, json) = snug_async(
        strings(&[
            "sync",
            "pull",
            &c_s,
            "--origin",
            &url,
            "--revision",
            "bad\"rev",
        ]),
        env,
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (2, Some("INVALID_REVISION")),
        "{json}"
    );
}

/// How the hand-made origin answers `GET /userdb/revisions/{rev}`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Behaviour {
    /// The whole image.
    Whole,
    /// The headers and half the image, then the connection is dropped.
    DropHalfway,
    /// The whole length, one byte flipped.
    Corrupt,
    /// `HEAD` declares storage version 7.
    TooNew,
}

/// A tiny HTTP/1.1 origin on 127.0.0.1 serving one revision, recording the requests it got.
struct TestOrigin {
    url: String,
    state: Arc<Mutex<(Behaviour, String, Vec<u8>)>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl TestOrigin {
    fn start(revision: &str, image: Vec<u8>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new((Behaviour::Whole, revision.to_owned(), image)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (shared, log) = (state.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (behaviour, revision, image) = shared.lock().expect("state").clone();
                serve(stream, behaviour, &revision, &image, &log);
            }
        });
        Self {
            url,
            state,
            requests,
        }
    }

    fn set(&self, behaviour: Behaviour, revision: &str, image: Vec<u8>) {
        *self.state.lock().expect("state") = (behaviour, revision.to_owned(), image);
        self.requests.lock().expect("log").clear();
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("log").clone()
    }
}

/// Answers one request and closes the connection. Its request line is logged before any answer
/// is written, so a client that got an answer always finds its request in the log.
fn serve(
    mut stream: TcpStream,
    behaviour: Behaviour,
    revision: &str,
    image: &[u8],
    log: &Mutex<Vec<String>>,
) -> Option<()> {
    let mut request = Vec::new();
    let mut byte = [0u8; 1];
    while !request.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        request.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&request)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    log.lock().expect("log").push(line.clone());
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(image));
    let version = if behaviour == Behaviour::TooNew { 7 } else { 6 };
    let headers = format!(
        "HTTP/1.1 200 OK\r\nETag: \"{revision}\"\r\nContent-Length: {}\r\nRepr-Digest: sha-256=:{digest}:\r\n\
         Snug-Storage-Version: {version}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
        image.len()
    );
    let known = [
        "HEAD /userdb HTTP/1.1".to_owned(),
        format!("GET /userdb/revisions/{revision} HTTP/1.1"),
    ];
    if !known.contains(&line) {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return Some(());
    }
    let _ = stream.write_all(headers.as_bytes());
    if line.starts_with("GET") {
        let _ = match behaviour {
            Behaviour::Whole | Behaviour::TooNew => stream.write_all(image),
            Behaviour::DropHalfway => stream.write_all(&image[..image.len() / 2]),
            Behaviour::Corrupt => {
                let mut flipped = image.to_vec();
                flipped[image.len() / 3] ^= 0x40;
                stream.write_all(&flipped)
            }
        };
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Some(())
}

#[test]
fn a_broken_download_over_http_leaves_the_destination_untouched() {
    let first = userdb_vector("fresh-v6.user.snug");
    let second = userdb_vector("sample-v6.export.snug");
    let origin = TestOrigin::start("r1-00000000000000aa", first);
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("user.snug");
    let file_s = file.display().to_string();
    let pull = |extra: &[&str]| {
        let mut args = vec![
            "sync",
            "pull",
            file_s.as_str(),
            "--origin",
            origin.url.as_str(),
        ];
        args.extend_from_slice(extra);
        snug(&args, &[])
    };

    // A new device bootstraps: one HEAD, one GET of the revision's immutable address.
    let (code, json) = pull(&[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        origin.requests(),
        [
            "HEAD /userdb HTTP/1.1",
            "GET /userdb/revisions/r1-00000000000000aa HTTP/1.1"
        ]
    );
    let synced = listing(dir.path());
    assert_eq!(
        synced.keys().collect::<Vec<_>>(),
        [
            "user.snug",
            "user.snug.sync.base",
            "user.snug.sync.json",
            "user.snug.sync.pages"
        ]
    );

    // The origin moves to r2 and breaks the download off halfway.
    origin.set(
        Behaviour::DropHalfway,
        "r2-00000000000000bb",
        second.clone(),
    );
    // An origin that did not deliver decided nothing: exit 10, as for one that cannot be reached.
    let (code, json) = pull(&[]);
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (10, Some("DOWNLOAD_INTERRUPTED")),
        "{json}"
    );
    assert_eq!(
        listing(dir.path()),
        synced,
        "the file, its sidecar, and no partial file"
    );

    // The bytes arrive whole but are not the recorded ones.
    origin.set(Behaviour::Corrupt, "r2-00000000000000bb", second.clone());
    let (code, json) = pull(&[]);
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (4, Some("DIGEST_MISMATCH")),
        "{json}"
    );
    assert_eq!(listing(dir.path()), synced);

    // A revision newer than this build is refused from its HEAD, before any GET.
    origin.set(Behaviour::TooNew, "r2-00000000000000bb", second.clone());
    let (code, json) = pull(&["--force"]);
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (5, Some("SCHEMA_TOO_NEW")),
        "{json}"
    );
    assert_eq!(origin.requests(), ["HEAD /userdb HTTP/1.1"]);
    assert_eq!(listing(dir.path()), synced);

    // A new device whose first download breaks off is left with nothing at all.
    origin.set(
        Behaviour::DropHalfway,
        "r2-00000000000000bb",
        second.clone(),
    );
    let fresh = tempfile::tempdir().expect("dir");
    let fresh_file = fresh.path().join("user.snug").display().to_string();
    let (code, json) = snug(
        &["sync", "bootstrap", &fresh_file, "--origin", &origin.url],
        &[],
    );
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (10, Some("DOWNLOAD_INTERRUPTED")),
        "{json}"
    );
    assert!(listing(fresh.path()).is_empty());

    // And when the origin behaves again, the pull goes through.
    origin.set(Behaviour::Whole, "r2-00000000000000bb", second);
    let (code, json) = pull(&[]);
    assert_eq!(
        (code, json["revision"].as_str()),
        (0, Some("r2-00000000000000bb")),
        "{json}"
    );
}

#[test]
fn a_directory_origin_declares_the_storage_version_from_the_image_header() {
    let dir = tempfile::tempdir().expect("dir");
    let origin = dir.path().join("origin");
    std::fs::create_dir_all(&origin).expect("mkdir");
    // A newer device left a v7 image in the shared folder.
    let image = userdb_vector("future-v7.user.sqlite");
    std::fs::write(origin.join("user.snug"), &image).expect("image");
    let record = serde_json::json!({
        "revision": "r1-00000000000000cc",
        "sha256": hex::encode(Sha256::digest(&image)),
        "size": image.len(),
    });
    std::fs::write(origin.join("user.snug.rev"), record.to_string()).expect("rev");
    let device = dir.path().join("device");
    std::fs::create_dir_all(&device).expect("mkdir");
    let file = device.join("user.snug").display().to_string();
    let (code, json) = snug(
        &[
            "sync",
            "bootstrap",
            &file,
            "--origin",
            &origin.display().to_string(),
        ],
        &[],
    );
    assert_eq!(
        (code, json["error"]["code"].as_str()),
        (5, Some("SCHEMA_TOO_NEW")),
        "{json}"
    );
    assert!(listing(&device).is_empty(), "nothing was created");
}
