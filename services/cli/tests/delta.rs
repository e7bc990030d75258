//! `snug sync` by difference (issue 21): against a hub that offers delta routes, a push after a
//! one-row edit and the other device's pull move a few pages, and `--json` says how many bytes
//! went each way; a first push, a bootstrap and a directory origin move whole files.

use std::path::{Path, PathBuf};

use snug_e2e::{Hub, Options, userdb_with_filler};
use snug_test_support::Snug;

const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

async fn sync(
    command: &str,
    file: &Path,
    origin: &str,
    env: Vec<(&'static str, String)>,
) -> serde_json::Value {
    sync_with(command, file, origin, &[], env).await
}

async fn sync_with(
    command: &str,
    file: &Path,
    origin: &str,
    extra: &[&str],
    env: Vec<(&'static str, String)>,
) -> serde_json::Value {
    let args: Vec<String> = [
        "sync",
        command,
        &file.display().to_string(),
        "--origin",
        origin,
    ]
    .iter()
    .chain(extra)
    .map(|s| (*s).to_owned())
    .collect();
    let (code, json) = tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, env))
        .await
        .expect("join");
    assert_eq!(code, 0, "{json}");
    json
}

/// One row inserted, as an app would.
fn edit(file: &Path, key: &str) {
    let conn = rusqlite::Connection::open(file).expect("open");
    conn.execute(
        "INSERT INTO snug_settings (key, value) VALUES (?1, '\"a row\"')",
        [key],
    )
    .expect("edit");
}

fn transfer(json: &serde_json::Value) -> (u64, u64, bool) {
    let t = &json["transfer"];
    (
        t["bytesSent"].as_u64().expect("bytesSent"),
        t["bytesReceived"].as_u64().expect("bytesReceived"),
        t["delta"].as_bool().expect("delta"),
    )
}

/// A hub, and alice's database of `filler` bytes pushed from device A and bootstrapped on B.
struct Devices {
    hub: Hub,
    token: String,
    dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    /// The `--json` answers of A's first push and B's bootstrap.
    first: serde_json::Value,
    booted: serde_json::Value,
}

impl Devices {
    async fn start(filler: usize) -> Self {
        let hub = Hub::start(Options::default()).await;
        let token = hub.add_user("alice");
        let dir = tempfile::tempdir().expect("dir");
        let (a, b) = (dir.path().join("a.snug"), dir.path().join("b.snug"));
        std::fs::write(&a, userdb_with_filler(filler).0).expect("write");
        let env = vec![("SNUG_TOKEN", token.clone())];
        let first = sync("push", &a, &hub.url(), env.clone()).await;
        let booted = sync("bootstrap", &b, &hub.url(), env).await;
        Self {
            hub,
            token,
            dir,
            a,
            b,
            first,
            booted,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("SNUG_TOKEN", self.token.clone())]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_pull_go_by_difference_with_a_hub_and_whole_files_otherwise() {
    let devices = Devices::start(2 << 20).await;
    let (hub, env, dir) = (&devices.hub, || devices.env(), devices.dir.path());
    let (a, b) = (devices.a.clone(), devices.b.clone());
    let (first, booted) = (&devices.first, &devices.booted);

    // The first push and a new device's bootstrap have no base: whole files.
    let length = first["length"].as_u64().expect("length");
    let (sent, _, delta) = transfer(first);
    assert_eq!((sent, delta), (length, false), "{first}");
    let (_, received, delta) = transfer(booted);
    assert_eq!((received, delta), (length, false), "{booted}");

    // Each sync keeps the page ids of the image it synced, for the next push.
    for file in [&a, &b] {
        let mut pages = file.as_os_str().to_owned();
        pages.push(".sync.pages");
        assert!(Path::new(&pages).exists(), "{}", file.display());
    }
    // A one-row edit: a few pages up (no manifest: A kept the base's page ids), a few down.
    edit(&a, "delta:one");
    let pushed = sync("push", &a, &hub.url(), env()).await;
    assert_eq!(pushed["pushed"], true, "{pushed}");
    let (sent, received, delta) = transfer(&pushed);
    assert!(delta, "{pushed}");
    assert!(sent * 10 < length && received < 64 * 1024, "{pushed}");
    let pulled = sync("pull", &b, &hub.url(), env()).await;
    assert_eq!(
        (pulled["pulled"].clone(), pulled["revision"].clone()),
        (true.into(), pushed["revision"].clone()),
        "{pulled}"
    );
    let (sent, received, delta) = transfer(&pulled);
    assert!(delta, "{pulled}");
    // B's file is the revision it bootstrapped but for the setting its install re-armed
    // (`needsEndpointConfirm`); the revision's own bytes, kept beside it, are the source: it
    // names that revision and sends nothing. Without them it names its file sparse against the
    // pages it recorded (below).
    assert!(received * 10 < length, "{pulled}");
    assert_eq!(sent, 0, "{pulled}");
    assert_eq!(pulled["sha256"], pushed["sha256"]);
    let conn = rusqlite::Connection::open(&b).expect("open");
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM snug_settings WHERE key = 'delta:one'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(rows, 1, "the pulled file holds the edit");

    // A row larger than a page into a table before the filler's: the export's VACUUM moves
    // every later page, and the filler's overflow pages, which only name moved pages, travel as
    // patches both ways (by their ids alone they would be most of the file).
    let conn = rusqlite::Connection::open(&b).expect("open");
    conn.execute(
        "INSERT INTO snug_profile (key, value) VALUES ('delta:moved', ?1)",
        [format!("\"{}\"", "m".repeat(6_000))],
    )
    .expect("edit");
    drop(conn);
    let pushed = sync("push", &b, &hub.url(), env()).await;
    assert_eq!(pushed["pushed"], true, "{pushed}");
    let (sent, received, delta) = transfer(&pushed);
    assert!(
        delta && sent * 20 < length && received < 64 * 1024,
        "{pushed}"
    );
    let pulled = sync("pull", &a, &hub.url(), env()).await;
    assert_eq!(pulled["revision"], pushed["revision"], "{pulled}");
    let (sent, received, delta) = transfer(&pulled);
    assert!(delta && sent == 0 && received * 20 < length, "{pulled}");
    assert_eq!(pulled["sha256"], pushed["sha256"]);

    // Page ids recorded before shapes were (ids alone) still serve the next push, which goes
    // by difference with the ids alone.
    let revision = pulled["revision"].as_str().expect("revision");
    let sha256 = pulled["sha256"].as_str().expect("sha256");
    let origin = snug_restore::OriginId::parse(pulled["origin"].as_str().expect("origin"))
        .expect("the hub's identity");
    let shaped =
        snug_restore::push_state::load_pages(&a, &origin, revision, sha256).expect("recorded");
    assert!(shaped.shapes.is_some());
    // The page ids are this origin's: another origin's revision of the same name is not them.
    let elsewhere =
        snug_restore::OriginId::parse("dir:0123456789abcdef0123456789abcdef").expect("identity");
    assert!(snug_restore::push_state::load_pages(&a, &elsewhere, revision, sha256).is_none());
    let ids_alone = snug_delta::Manifest {
        shapes: None,
        ..shaped
    };
    snug_restore::push_state::save_manifest(&a, &origin, revision, &ids_alone).expect("recorded");
    let recorded = snug_restore::push_state::load_pages(&a, &origin, revision, sha256);
    assert_eq!(recorded.and_then(|m| m.shapes), None);
    edit(&a, "delta:ids-alone");
    let pushed = sync("push", &a, &hub.url(), env()).await;
    let (sent, received, delta) = transfer(&pushed);
    assert!(
        delta && sent * 10 < length && received < 64 * 1024,
        "{pushed}"
    );

    // A directory origin keeps whole files and moves nothing over a network.
    let origin = dir.join("origin");
    let origin = origin.display().to_string();
    let (code, _) = {
        let args = vec![
            "sync".to_owned(),
            "origin".to_owned(),
            origin.clone(),
            "--init".to_owned(),
        ];
        let env: Vec<(&str, String)> = Vec::new();
        tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, env))
            .await
            .expect("join")
    };
    assert_eq!(code, 0);
    let c = dir.join("c.snug");
    std::fs::write(&c, userdb_with_filler(1 << 20).0).expect("write");
    let pushed = sync("push", &c, &format!("file://{origin}"), vec![]).await;
    edit(&c, "delta:two");
    let pushed_again = sync("push", &c, &format!("file://{origin}"), vec![]).await;
    for json in [pushed, pushed_again] {
        assert_eq!(transfer(&json), (0, 0, false), "{json}");
    }
}

/// A new app version (§8.1: a version's complete HTML, here 120 KiB that compresses well)
/// travels compressed both ways (issue 38): its literal pages cost their zstd size, not their
/// bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_literal_pages_of_an_edit_travel_compressed_both_ways() {
    let devices = Devices::start(2 << 20).await;
    let (hub, env) = (&devices.hub, || devices.env());
    let (a, b) = (devices.a.clone(), devices.b.clone());

    let html: String = (0..3_000)
        .map(|i| format!("<li class=\"item\" data-n=\"{i}\">row {i}</li>\n"))
        .collect();
    assert!(html.len() > 120 * 1024, "{}", html.len());
    let conn = rusqlite::Connection::open(&a).expect("open");
    conn.execute(
        "INSERT INTO snug_settings (key, value) VALUES ('delta:html', ?1)",
        [serde_json::Value::String(html.clone()).to_string()],
    )
    .expect("edit");
    drop(conn);
    let pushed = sync("push", &a, &hub.url(), env()).await;
    let (sent, _, delta) = transfer(&pushed);
    assert!(delta, "{pushed}");
    // Sent as they are, the pages holding the row would be more than the row.
    assert!(sent * 4 < html.len() as u64, "{sent} bytes sent: {pushed}");
    let pulled = sync("pull", &b, &hub.url(), env()).await;
    let (_, received, delta) = transfer(&pulled);
    assert!(delta, "{pulled}");
    assert!(
        received * 4 < html.len() as u64,
        "{received} bytes received: {pulled}"
    );
    assert_eq!(pulled["sha256"], pushed["sha256"]);
    let conn = rusqlite::Connection::open(&b).expect("open");
    let value: String = conn
        .query_row(
            "SELECT value FROM snug_settings WHERE key = 'delta:html'",
            [],
            |r| r.get(0),
        )
        .expect("the row");
    assert_eq!(value, serde_json::Value::String(html).to_string());
}

/// Without the base's page ids, and from a file that is no revision, a sync learns the hub's
/// pages from a summary (issue 38): kilobytes, where the whole manifest it sent before is eight
/// bytes a page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_that_knows_nothing_of_the_hubs_pages_learns_them_for_kilobytes() {
    let devices = Devices::start(32 << 20).await;
    let (hub, env) = (&devices.hub, || devices.env());
    let (a, b) = (devices.a.clone(), devices.b.clone());
    let length = devices.first["length"].as_u64().expect("length");
    // What the whole manifest of the file would cost: eight bytes a page.
    let manifest = length / 4096 * 8;

    // A push without the base's page ids (their cache gone).
    edit(&a, "delta:no-pages");
    let mut pages = a.as_os_str().to_owned();
    pages.push(".sync.pages");
    std::fs::remove_file(&pages).expect("remove the page ids");
    let pushed = sync("push", &a, &hub.url(), env()).await;
    let (sent, received, delta) = transfer(&pushed);
    assert!(delta, "{pushed}");
    assert!(sent * 2 < manifest && received * 4 < manifest, "{pushed}");

    // A pull over local changes (--force), so from a file that is no revision.
    edit(&b, "delta:local");
    let pulled = sync_with("pull", &b, &hub.url(), &["--force"], env()).await;
    assert_eq!(pulled["revision"], pushed["revision"], "{pulled}");
    let (sent, received, delta) = transfer(&pulled);
    assert!(delta, "{pulled}");
    assert!(sent * 4 < manifest && received * 2 < manifest, "{pulled}");
    assert_eq!(pulled["sha256"], pushed["sha256"]);
}

/// A file that is no longer byte for byte the revision it last synced as (changed since, or
/// rewritten by its own install) is named sparse against that revision's recorded pages, in
/// one round: no summary first, and no delta against bytes it does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_names_a_changed_file_sparse_against_the_revision_it_last_synced() {
    use snug_delta::{Manifest, Sparse};
    use snug_restore::{HubOrigin, LocalCopy, Origin as _, Selector};

    let devices = Devices::start(8 << 20).await;
    let (hub, env) = (&devices.hub, || devices.env());
    let first = devices.first.clone();
    let origin = snug_restore::OriginId::parse(first["origin"].as_str().expect("origin"))
        .expect("the hub's identity");
    let r1 = first["revision"].as_str().expect("revision").to_owned();
    let sha1 = first["sha256"].as_str().expect("sha256").to_owned();
    let recorded = snug_restore::push_state::load_pages(&devices.a, &origin, &r1, &sha1)
        .expect("the pages of r1, recorded by the push");
    edit(&devices.a, "delta:pushed");
    sync("push", &devices.a, &hub.url(), env()).await;

    // B's copy of r1 with a change of its own (the first page, say, its header).
    let mut theirs = snug_e2e::stored_form(&std::fs::read(&devices.b).expect("b"));
    theirs[100] ^= 1;
    let mine = Manifest::with_shapes(&theirs, 4096).expect("manifest");
    let sparse = Sparse::against(&mine, &Sparse::summary(&recorded, 64)).encode();
    let token = devices.token.clone();
    let url = hub.url();
    let (traffic, pulled) = tokio::task::spawn_blocking(move || {
        let origin = HubOrigin::new(&url, Some(token));
        let snapshot = origin.describe(&Selector::Current).expect("head");
        let mut sink = Vec::new();
        let local = LocalCopy {
            bytes: &theirs,
            revision: None,
            synced: Some((&r1, &recorded)),
        };
        origin
            .download_from(&snapshot, Some(local), &mut sink)
            .expect("pull");
        (origin.traffic(), snug_delta::sha256(&sink))
    })
    .await
    .expect("join");
    assert!(traffic.delta, "{traffic:?}");
    // One round: the sparse manifest is all that went up, a fraction of the whole manifest's
    // eight bytes a page.
    assert_eq!(traffic.sent, sparse.len() as u64, "{traffic:?}");
    assert!(traffic.sent * 8 < ((8 << 20) / 4096) * 8, "{traffic:?}");
    let pushed_sha = hex::decode(
        snug_restore::push_state::load(&devices.a)
            .expect("state")
            .at(&origin)
            .expect("a's record")
            .sha256
            .clone(),
    )
    .expect("hex");
    assert_eq!(pulled.to_vec(), pushed_sha);
}

/// Rows of 200 B–12 KiB under keys that sort after `a…`, as settings of an app hold them.
fn mixed_rows(file: &Path, n: usize) {
    let conn = rusqlite::Connection::open(file).expect("open");
    let tx = conn.unchecked_transaction().expect("tx");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        let len = 200 + (i * 7919) % (12 << 10);
        let mut value = String::with_capacity(len + 16);
        while value.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            value.push_str(&format!("{state:016x}"));
        }
        value.truncate(len);
        tx.execute(
            "INSERT INTO snug_settings (key, value) VALUES (?1, ?2)",
            (
                format!("k{i:05}"),
                serde_json::Value::String(value).to_string(),
            ),
        )
        .expect("row");
    }
    tx.commit().expect("commit");
}

/// Eight short rows whose keys sort first: the first leaf of the keys' b-tree splits.
fn short_rows_first(file: &Path, prefix: &str) {
    let conn = rusqlite::Connection::open(file).expect("open");
    for i in 0..8 {
        conn.execute(
            "INSERT INTO snug_settings (key, value) VALUES (?1, '\"short\"')",
            [format!("{prefix}{i:04}")],
        )
        .expect("short row");
    }
}

/// With the base it last synced kept beside the file (`<file>.sync.base`, readable by its owner
/// alone), a push sends the pages an edit changed compressed against the base's own pages, so
/// rows a split moved between pages do not travel again; a pull from a file that is its
/// revision page for page gets the same from the hub (issue 38). Without the copy, or with a
/// damaged one, the push still lands, sending more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_a_split_rewrote_travel_as_their_new_rows_both_ways() {
    let devices = Devices::start(1 << 20).await;
    let (hub, env) = (&devices.hub, || devices.env());
    let (a, b) = (devices.a.clone(), devices.b.clone());
    let base_of = |file: &Path| {
        let mut base = file.as_os_str().to_owned();
        base.push(".sync.base");
        PathBuf::from(base)
    };
    mixed_rows(&a, 1_500);
    sync("push", &a, &hub.url(), env()).await;
    sync("pull", &b, &hub.url(), env()).await;
    for file in [&a, &b] {
        let meta = std::fs::metadata(base_of(file)).expect("a base copy");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o600,
                "{}",
                file.display()
            );
        }
        let _ = meta;
    }

    short_rows_first(&a, "a");
    let pushed = sync("push", &a, &hub.url(), env()).await;
    let (with_base, _, delta) = transfer(&pushed);
    assert!(delta, "{pushed}");
    let pulled = sync("pull", &b, &hub.url(), env()).await;
    let (_, received, delta) = transfer(&pulled);
    assert!(delta, "{pulled}");
    assert_eq!(pulled["sha256"], pushed["sha256"]);

    // The same edit again, once with the copy gone and once with it damaged.
    std::fs::remove_file(base_of(&a)).expect("remove the base copy");
    short_rows_first(&a, "b");
    let (without, _, _) = transfer(&sync("push", &a, &hub.url(), env()).await);
    let mut damaged = std::fs::read(base_of(&a)).expect("kept again by the push");
    let at = damaged.len() / 2;
    damaged[at] ^= 0xff;
    std::fs::write(base_of(&a), damaged).expect("damage");
    short_rows_first(&a, "c");
    let again = sync("push", &a, &hub.url(), env()).await;
    let (damaged_sent, _, delta) = transfer(&again);
    assert!(delta, "{again}");
    eprintln!(
        "8 short rows first: {with_base} bytes up with the base kept, {received} down, \
         {without} up without it, {damaged_sent} with it damaged"
    );
    assert!(
        with_base * 2 < without,
        "{with_base} with the base, {without} without"
    );
    assert!(
        received * 2 < without,
        "{received} pulled, {without} pushed without the base"
    );
    assert!(
        damaged_sent * 10 > without * 8,
        "{damaged_sent} damaged, {without} without"
    );
    let last = sync("pull", &b, &hub.url(), env()).await;
    assert_eq!(last["sha256"], again["sha256"]);
    let conn = rusqlite::Connection::open(&b).expect("open");
    let short: i64 = conn
        .query_row(
            "SELECT count(*) FROM snug_settings WHERE value = '\"short\"'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(short, 24);
}

/// A protected file keeps no plaintext copy beside it: its push to a hub (which receives the
/// secrets-free plaintext) leaves no `<file>.sync.base`, and removes one left from before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_file_keeps_no_base_copy() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let dir = tempfile::tempdir().expect("dir");
    let (plain, protected) = (dir.path().join("plain.snug"), dir.path().join("p.snug"));
    std::fs::write(&plain, userdb_with_filler(1 << 20).0).expect("write");
    let passphrase = ("SNUG_PASSPHRASE", "correct horse battery staple".to_owned());
    let args: Vec<String> = [
        "protect",
        &plain.display().to_string(),
        "--out",
        &protected.display().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let env = vec![passphrase.clone()];
    let (code, json) = tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, env))
        .await
        .expect("join");
    assert_eq!(code, 0, "{json}");
    let mut base = protected.as_os_str().to_owned();
    base.push(".sync.base");
    std::fs::write(&base, b"left from before").expect("write");
    let pushed = sync(
        "push",
        &protected,
        &hub.url(),
        vec![("SNUG_TOKEN", token), passphrase],
    )
    .await;
    assert_eq!(pushed["pushed"], true, "{pushed}");
    assert!(
        !Path::new(&base).exists(),
        "a plaintext copy beside a protected file"
    );
}
