//! The hub as it ships (issue 7), through snug-testcontainers: the image built from this checkout
//! (once; reused while the binary and the Dockerfile are unchanged), started as five containers
//! on a Docker network of their own, with the /userdb conformance cases sent to the gateway's
//! port on 127.0.0.1; a schema container stopped mid-run and a sync container restarted between
//! two PUTs; and the all-in-one container, read-only and non-root, with its health check.
//!
//! Without a Docker Engine the tests say so on stderr and pass, unless `SNUG_REQUIRE_DOCKER=1`
//! (set by `.ci/run`), where a missing engine fails the run. `SNUG_HUB_IMAGE=name:tag` tests an
//! existing image instead of building one.

use std::{io::Write as _, time::Duration};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use snug_e2e::{
    Answer, Http, OCTET, Payload, assert_error, assert_stale_revision, bearer, etag_revision,
    get_userdb, put_userdb, userdb_vector,
};
use snug_testcontainers::{AllInOne, HubImage, HubOptions, Service, SplitHub};
use tokio::sync::OnceCell;

/// The image every test of this binary uses, built at most once.
static IMAGE: OnceCell<HubImage> = OnceCell::const_new();

/// The image, or `None` (after saying why on stderr) when Docker is missing and may be.
async fn image(test: &str) -> Option<HubImage> {
    if let Err(err) = snug_testcontainers::docker_available().await {
        let required = std::env::var("SNUG_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(!required, "SNUG_REQUIRE_DOCKER=1 but {err}");
        // Straight to the process's stderr, past the harness's capture: a skip must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "{test} SKIPPED: {err} (SNUG_REQUIRE_DOCKER=1 makes this a failure)"
        );
        return None;
    }
    let image = IMAGE
        .get_or_try_init(HubImage::resolve)
        .await
        .unwrap_or_else(|err| panic!("the hub image: {err}"));
    Some(image.clone())
}

/// Options for a test deployment: deadlines short enough that a dead service is noticed fast.
fn options() -> HubOptions {
    HubOptions::default()
        .with_env("SNUG_RPC_DEADLINE", "5s")
        .with_env("SNUG_RPC_CONNECT_TIMEOUT", "1s")
}

/// A plain, secrets-free v6 user database (the reference's default export of its sample), as
/// the hub stores it (free space zeroed), so that it is stored and served as sent.
fn first_image() -> Vec<u8> {
    snug_e2e::stored_form(&userdb_vector("sample-v6.export.snug"))
}

/// Another one.
fn second_image() -> Vec<u8> {
    snug_e2e::stored_form(&userdb_vector("fresh-v6.export.snug"))
}

/// Asserts a 200 GET carries exactly `bytes` as revision `revision`, with every header §9.3 needs.
fn assert_image(answer: &Answer, revision: &str, bytes: &[u8]) {
    assert_eq!(
        answer.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.body.as_ref(), bytes, "the bytes are never rewritten");
    assert_eq!(answer.header("etag"), format!("\"{revision}\""));
    assert_eq!(answer.header("content-type"), "application/octet-stream");
    assert_eq!(answer.header("x-content-type-options"), "nosniff");
    assert_eq!(answer.header("cache-control"), "no-store");
    assert_eq!(answer.header("content-length"), bytes.len().to_string());
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(bytes));
    assert_eq!(answer.header("repr-digest"), format!("sha-256=:{digest}:"));
}

async fn start_split(test: &str) -> Option<SplitHub> {
    let image = image(test).await?;
    Some(
        SplitHub::start(&image, options())
            .await
            .unwrap_or_else(|err| panic!("the split deployment: {err}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_split_deployment_serves_the_userdb_conformance_cases() {
    let Some(hub) = start_split("the_split_deployment_serves_the_userdb_conformance_cases").await
    else {
        return;
    };
    let http = Http::new(hub.gateway_addr());
    let token = hub.add_user("alice").await.expect("users add");
    let image = first_image();

    assert_error(&get_userdb(&http, &token).await, 404, "NOT_FOUND");

    let created = put_userdb(&http, &token, ("if-none-match", "*"), image.clone()).await;
    assert_eq!(
        created.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&created.body)
    );
    let first = etag_revision(&created);
    assert_image(&get_userdb(&http, &token).await, &first, &image);

    let updated = put_userdb(
        &http,
        &token,
        ("if-match", &format!("\"{first}\"")),
        second_image(),
    )
    .await;
    assert_eq!(updated.status, 204);
    let second = etag_revision(&updated);
    assert_ne!(second, first);

    // A stale If-Match: 412 with the current revision, in the ETag and the body.
    let stale = put_userdb(
        &http,
        &token,
        ("if-match", &format!("\"{first}\"")),
        image.clone(),
    )
    .await;
    assert_eq!(stale.status, 412);
    assert_stale_revision(&stale, &second);

    let auth = bearer(&token);
    let bare = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), OCTET],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_error(&bare, 428, "PRECONDITION_REQUIRED");

    let text = http
        .send(
            "PUT",
            "/userdb",
            &[
                ("authorization", &auth),
                ("content-type", "text/plain"),
                ("if-match", &second),
            ],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_error(&text, 415, "UNSUPPORTED_MEDIA_TYPE");

    let not_sqlite = put_userdb(
        &http,
        &token,
        ("if-match", &second),
        b"definitely not a database, just some text".to_vec(),
    )
    .await;
    assert_error(&not_sqlite, 400, "NOT_SQLITE");

    for headers in [vec![], vec![("authorization", "Bearer snug_not_a_token")]] {
        let answer = http.send("GET", "/userdb", &headers, Payload::Empty).await;
        assert_error(&answer, 401, "UNAUTHENTICATED");
    }

    // The refusals stored nothing.
    assert_image(&get_userdb(&http, &token).await, &second, &second_image());

    // Every role's own health check probes what that role serves.
    for (service, expect) in [
        (Service::Gateway, "http "),
        (Service::Schema, "grpc "),
        (Service::Sync, "grpc "),
    ] {
        let probe = hub
            .exec(service, &["/snug-hub", "healthcheck"])
            .await
            .expect("healthcheck");
        assert_eq!(probe.code, 0, "{service:?}: {probe:?}");
        assert!(
            probe.stdout.starts_with(expect) && probe.stdout.lines().count() == 1,
            "{service:?}: {:?}",
            probe.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_needs_no_schema_container_and_a_stopped_sync_container_gives_503() {
    let Some(hub) =
        start_split("the_gateway_needs_no_schema_container_and_a_stopped_sync_container_gives_503")
            .await
    else {
        return;
    };
    let http = Http::new(hub.gateway_addr());
    let token = hub.add_user("alice").await.expect("users add");
    let first =
        etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first_image()).await);

    // Schema stopped: the sync service validates every image it stores, so a PUT is still
    // validated and accepted, and the gateway is still ready.
    hub.stop_service(Service::Schema)
        .await
        .expect("stop schema");
    let accepted = put_userdb(&http, &token, ("if-match", &first), second_image()).await;
    assert_eq!(
        accepted.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&accepted.body)
    );
    let second = etag_revision(&accepted);
    let refused = put_userdb(
        &http,
        &token,
        ("if-match", &second),
        b"definitely not a database".to_vec(),
    )
    .await;
    assert_error(&refused, 400, "NOT_SQLITE");
    assert_eq!(
        http.send("GET", "/readyz", &[], Payload::Empty)
            .await
            .status,
        200
    );

    // Sync stopped mid-run: a PUT is refused, promptly and retryably, and nothing is stored.
    hub.stop_service(Service::Sync).await.expect("stop sync");
    let started = std::time::Instant::now();
    let refused = put_userdb(&http, &token, ("if-match", &second), first_image()).await;
    assert_error(&refused, 503, "SERVICE_UNAVAILABLE");
    assert_eq!(refused.json()["retryable"], true);
    let retry_after: u64 = refused
        .header("retry-after")
        .parse()
        .expect("Retry-After in seconds");
    assert!(retry_after >= 1, "{retry_after}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no hang: {:?}",
        started.elapsed()
    );
    assert_eq!(
        http.send("GET", "/readyz", &[], Payload::Empty)
            .await
            .status,
        503
    );

    // Sync started again: the revisions are on its volume, so the next PUT based on the last
    // one is accepted rather than refused as a mismatch.
    hub.start_service(Service::Sync).await.expect("start sync");
    let after =
        snug_e2e::put_userdb_until_served(&http, &token, ("if-match", &second), &first_image())
            .await;
    assert_eq!(
        after.status,
        204,
        "{:?}\nsync logs:\n{}",
        String::from_utf8_lossy(&after.body),
        hub.logs(Service::Sync).await
    );
    let third = etag_revision(&after);
    assert_image(&get_userdb(&http, &token).await, &third, &first_image());
    let revisions = http
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(revisions.status, 200);
    let listed: Vec<String> = revisions.json()["revisions"]
        .as_array()
        .expect("a revision list")
        .iter()
        .filter_map(|entry| entry["revision"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        listed,
        [third, second, first],
        "one linear history across both restarts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_all_in_one_container_runs_read_only_as_non_root() {
    let Some(image) = image("the_all_in_one_container_runs_read_only_as_non_root").await else {
        return;
    };
    let hub = AllInOne::start(&image, options())
        .await
        .expect("the all-in-one hub");
    let http = Http::new(hub.http_addr());
    let token = hub.add_user("alice").await.expect("users add");
    let created = put_userdb(&http, &token, ("if-none-match", "*"), first_image()).await;
    assert_eq!(
        created.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&created.body)
    );
    assert_image(
        &get_userdb(&http, &token).await,
        &etag_revision(&created),
        &first_image(),
    );

    // The whole hub's probe asks both sides.
    let probe = hub
        .exec(&["/snug-hub", "healthcheck"])
        .await
        .expect("healthcheck");
    assert_eq!(probe.code, 0, "{probe:?}");
    let kinds: Vec<&str> = probe
        .stdout
        .lines()
        .filter_map(|line| line.split(' ').next())
        .collect();
    assert_eq!(kinds, ["grpc", "http"], "{:?}", probe.stdout);

    // The process runs as uid and gid 65532, as the kernel sees it from the host.
    let docker = testcontainers::bollard::Docker::connect_with_defaults().expect("docker");
    let inspected = docker
        .inspect_container(hub.container_id(), None)
        .await
        .expect("inspect");
    assert_eq!(
        inspected
            .host_config
            .as_ref()
            .and_then(|c| c.readonly_rootfs),
        Some(true)
    );
    let pid = inspected
        .state
        .and_then(|state| state.pid)
        .expect("a running process");
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    for field in ["Uid:", "Gid:"] {
        let ids: Vec<&str> = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .expect("the id line")
            .split_whitespace()
            .collect();
        assert_eq!(
            ids, ["65532"; 4],
            "{field} real, effective, saved and filesystem ids"
        );
    }
    let capabilities = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .expect("CapEff")
        .trim();
    assert_eq!(
        u64::from_str_radix(capabilities, 16),
        Ok(0),
        "no effective capability"
    );

    // The root filesystem refuses writes: the users file cannot be made anywhere but the volume.
    let elsewhere = hub
        .exec(&["/snug-hub", "users", "--data-dir", "/srv", "add", "bob"])
        .await
        .expect("exec");
    assert_ne!(elsewhere.code, 0, "{elsewhere:?}");
    assert!(
        elsewhere.stderr.contains("Read-only file system"),
        "{:?}",
        elsewhere.stderr
    );
}

/// The image needs no writable `/tmp` (issue 23, point 1): nothing is mounted there, and its
/// root is read-only (`docker run --read-only IMAGE serve`) or writable but without a `/tmp` the
/// hub's user may write (`docker run IMAGE serve`: the image is FROM scratch). SQLite keeps its
/// temporary files (statement journals, sorts) in memory (`SQLITE_TEMP_STORE=3`), so the store's
/// commits, whose statement journals outgrow memory once the tables are a few images large,
/// never look for a directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_all_in_one_container_stores_large_images_without_a_tmp_directory() {
    let test = "the_all_in_one_container_stores_large_images_without_a_tmp_directory";
    let Some(image) = image(test).await else {
        return;
    };
    for writable_root in [false, true] {
        let hub = AllInOne::start(
            &image,
            HubOptions {
                writable_root,
                ..options()
            },
        )
        .await
        .expect("the all-in-one hub");
        let docker = testcontainers::bollard::Docker::connect_with_defaults().expect("docker");
        let inspected = docker
            .inspect_container(hub.container_id(), None)
            .await
            .expect("inspect");
        let mounted: Vec<String> = inspected
            .mounts
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.destination)
            .collect();
        assert_eq!(mounted, ["/data"], "only the volume is mounted");
        let host = inspected.host_config.expect("host config");
        assert_eq!(host.readonly_rootfs, Some(!writable_root));
        assert!(host.tmpfs.unwrap_or_default().is_empty(), "no tmpfs");
        let http = Http::new(hub.http_addr());
        let token = hub.add_user("alice").await.expect("users add");
        let mut current: Option<String> = None;
        // Images that share no filler page: each commit adds ~6,000 chunk rows, and from the
        // third on its statement journal outgrows memory (an image without SQLITE_TEMP_STORE=3
        // answers 503 STORAGE_UNAVAILABLE from there on, "disk I/O error" in its log).
        for round in 0..5u64 {
            let (bytes, _) = snug_e2e::userdb_with_seeded_filler(24 << 20, 0x5eed + round);
            let condition = match &current {
                None => ("if-none-match", "*".to_owned()),
                Some(revision) => ("if-match", format!("\"{revision}\"")),
            };
            let stored =
                put_userdb(&http, &token, (condition.0, &condition.1), bytes.clone()).await;
            assert_eq!(
                stored.status,
                204,
                "writable root {writable_root}, image {round}: {:?}\n{}",
                String::from_utf8_lossy(&stored.body),
                hub.logs().await
            );
            let revision = etag_revision(&stored);
            assert_image(&get_userdb(&http, &token).await, &revision, &bytes);
            current = Some(revision);
        }
    }
}

/// Issue 20, point 7: the image with its defaults in a 1 GiB container (`docker run --memory 1g`,
/// no swap) takes 48 concurrent 60 MiB uploads without being OOM-killed: each is answered 204 or
/// a retryable 503, every 204 is stored as sent, and each refused one lands when retried. Without
/// the upload budgets every upload in flight held its whole image (and the services a few copies
/// more), and 32 of them killed the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_with_its_defaults_survives_48_concurrent_60_mib_uploads_in_1_gib() {
    const UPLOADS: usize = 48;
    let test = "the_image_with_its_defaults_survives_48_concurrent_60_mib_uploads_in_1_gib";
    let Some(image) = image(test).await else {
        return;
    };
    let hub = AllInOne::start(
        &image,
        HubOptions {
            memory_limit: Some(1 << 30),
            startup_timeout: Duration::from_secs(120),
            ..HubOptions::default()
        },
    )
    .await
    .expect("the all-in-one hub");
    let mut tokens = Vec::with_capacity(UPLOADS);
    for i in 0..UPLOADS {
        tokens.push(hub.add_user(&format!("u{i}")).await.expect("users add"));
    }
    let (bytes, _) = snug_e2e::userdb_with_filler(60 << 20);
    let bytes = snug_e2e::stored_form(&bytes);
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&bytes));
    let http = Http::new(hub.http_addr());
    let answers = futures::future::join_all(tokens.iter().map(|token| {
        let http = &http;
        let bytes = bytes.clone();
        async move { put_userdb(http, token, ("if-none-match", "*"), bytes).await }
    }))
    .await;
    let mut refused = Vec::new();
    for (token, answer) in tokens.iter().zip(&answers) {
        match answer.status {
            204 => assert_stored(&http, token, &etag_revision(answer), &digest).await,
            503 => {
                assert_eq!(answer.json()["retryable"], true);
                assert_eq!(answer.header("retry-after"), "1");
                refused.push(token);
            }
            other => panic!(
                "an upload was answered {other}: {}\n{}",
                String::from_utf8_lossy(&answer.body),
                hub.logs().await
            ),
        }
    }
    let docker = testcontainers::bollard::Docker::connect_with_defaults().expect("docker");
    let state = docker
        .inspect_container(hub.container_id(), None)
        .await
        .expect("inspect")
        .state
        .expect("state");
    assert_eq!(state.oom_killed, Some(false), "OOM-killed");
    assert_eq!(state.running, Some(true), "the hub is still running");
    // Nothing refused is lost for good: each lands when its client retries.
    for token in &refused {
        let answer =
            snug_e2e::put_userdb_until_served(&http, token, ("if-none-match", "*"), &bytes).await;
        assert_eq!(answer.status, 204, "{:?}", answer.json());
        assert_stored(&http, token, &etag_revision(&answer), &digest).await;
    }
    eprintln!(
        "{test}: {} of {UPLOADS} stored at once, {} refused 503 and stored on retry",
        UPLOADS - refused.len(),
        refused.len()
    );
}

/// Asserts `token`'s current image is `revision`, whose bytes hash to `digest` (from a HEAD:
/// the store verified them on the way in, and a GET of each would move 3 GB).
async fn assert_stored(http: &Http, token: &str, revision: &str, digest: &str) {
    let head = http
        .send(
            "HEAD",
            "/userdb",
            &[("authorization", &bearer(token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("etag"), format!("\"{revision}\""));
    assert_eq!(head.header("repr-digest"), format!("sha-256=:{digest}:"));
}
