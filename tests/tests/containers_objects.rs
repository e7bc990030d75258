//! The split deployment on its replicated store (issue 19, point 5), through snug-testcontainers:
//! the sync service on PostgreSQL plus a Garage bucket, each in a container of its own on the
//! deployment's network. A user database PUT through the gateway comes back byte-identical and
//! its bytes are pack objects in the bucket; with Garage stopped a PUT is refused as 503
//! `STORAGE_UNAVAILABLE` and the current revision stays, and once it is started again a retry is
//! stored; the same for PostgreSQL.
//!
//! Skips (visibly) without Docker, without a `garage` binary or without Debian's PostgreSQL 15
//! (the images are built from both), unless `SNUG_REQUIRE_DOCKER=1` or `SNUG_REQUIRE_GARAGE=1`
//! (both set by `.ci/run`). `SNUG_HUB_IMAGE=name:tag` tests an existing hub image.

use std::{io::Write as _, path::Path, time::Duration};

use snug_e2e::{Answer, Http, assert_error, etag_revision, get_userdb, put_userdb};
use snug_test_support::garage::Garage;
use snug_testcontainers::{BUCKET, Backing, HubImage, HubOptions, SplitHub, SyncBackend};

/// Says on stderr why the test does not run, past the harness's capture: a skip must be seen.
fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "{test} SKIPPED: {why}");
}

/// The hub image, or `None` when something the deployment needs is missing and may be.
async fn image(test: &str) -> Option<HubImage> {
    if let Err(err) = snug_testcontainers::docker_available().await {
        let required = std::env::var("SNUG_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(!required, "SNUG_REQUIRE_DOCKER=1 but {err}");
        skip(
            test,
            &format!("{err} (SNUG_REQUIRE_DOCKER=1 makes this a failure)"),
        );
        return None;
    }
    let required = std::env::var("SNUG_REQUIRE_GARAGE").is_ok_and(|v| v == "1");
    let postgres = Path::new("/usr/lib/postgresql/15/bin/postgres").is_file();
    for (present, what) in [
        (
            Garage::binary().is_some(),
            "no garage binary (SNUG_TEST_GARAGE, PATH, /var/tmp/snug-hub-tools/bin/garage)",
        ),
        (
            postgres,
            "no Debian PostgreSQL 15 (/usr/lib/postgresql/15/bin)",
        ),
    ] {
        if !present {
            assert!(!required, "SNUG_REQUIRE_GARAGE=1 but {what}");
            skip(
                test,
                &format!("{what} (SNUG_REQUIRE_GARAGE=1 makes this a failure)"),
            );
            return None;
        }
    }
    Some(
        HubImage::resolve()
            .await
            .unwrap_or_else(|err| panic!("the hub image: {err}")),
    )
}

/// A user database of about 1 MiB (many chunks, so several ranges of a pack object), as the hub
/// stores it.
fn first_image() -> Vec<u8> {
    snug_e2e::stored_form(&snug_e2e::userdb_with_filler(1 << 20).0)
}

/// Another one: the reference's default export of its sample.
fn second_image() -> Vec<u8> {
    snug_e2e::stored_form(&snug_e2e::userdb_vector("sample-v6.export.snug"))
}

/// Asserts a 200 GET carries exactly `bytes` as revision `revision`.
#[track_caller]
fn assert_image(answer: &Answer, revision: &str, bytes: &[u8]) {
    assert_eq!(
        answer.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.header("etag"), format!("\"{revision}\""));
    assert!(
        answer.body.as_ref() == bytes,
        "the bytes come back as sent: {} bytes, {} expected",
        answer.body.len(),
        bytes.len()
    );
}

/// The bucket's object count and total size, as the node's own CLI reports them (`Objects: N`
/// and `Size: … (N B)`), asked inside the Garage container.
async fn bucket_contents(hub: &SplitHub) -> (u64, String) {
    let info = hub
        .exec_store(Backing::Garage, &["/garage", "bucket", "info", BUCKET])
        .await
        .expect("garage bucket info");
    assert_eq!(info.code, 0, "{info:?}");
    let field = |name: &str| {
        info.stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(name))
            .map(|rest| rest.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name:?} in {:?}", info.stdout))
    };
    let objects = field("Objects:")
        .parse()
        .unwrap_or_else(|err| panic!("Objects: {err} in {:?}", info.stdout));
    (objects, field("Size:"))
}

/// A PUT while `backing` is stopped: refused promptly and retryably as `STORAGE_UNAVAILABLE`.
async fn assert_put_refused(http: &Http, token: &str, current: &str, backing: Backing) {
    let started = std::time::Instant::now();
    let refused = put_userdb(
        http,
        token,
        ("if-match", &format!("\"{current}\"")),
        second_image(),
    )
    .await;
    assert_error(&refused, 503, "STORAGE_UNAVAILABLE");
    assert_eq!(refused.json()["retryable"], true, "{backing:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{backing:?} stopped: no hang, {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_split_deployment_keeps_images_in_postgres_and_the_bucket_and_survives_their_restarts()
{
    let test =
        "the_split_deployment_keeps_images_in_postgres_and_the_bucket_and_survives_their_restarts";
    let Some(image) = image(test).await else {
        return;
    };
    let options = HubOptions::default()
        .with_env("SNUG_RPC_DEADLINE", "15s")
        .with_env("SNUG_RPC_CONNECT_TIMEOUT", "1s")
        .with_sync_backend(SyncBackend::PostgresObjects);
    let hub = SplitHub::start(&image, options)
        .await
        .unwrap_or_else(|err| panic!("the split deployment on PostgreSQL and Garage: {err}"));
    assert_eq!(hub.sync_backend(), SyncBackend::PostgresObjects);
    for backing in Backing::ALL {
        let addr = hub.store_addr(backing).expect("a published port");
        assert!(addr.ip().is_loopback(), "{backing:?} on {addr}");
    }
    let http = Http::new(hub.gateway_addr());
    let token = hub.add_user("alice").await.expect("users add");
    let (objects_before, _) = bucket_contents(&hub).await;
    assert_eq!(objects_before, 0, "a new bucket");

    let first = first_image();
    let created = put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await;
    assert_eq!(
        created.status,
        204,
        "{:?}\nsync logs:\n{}",
        String::from_utf8_lossy(&created.body),
        hub.logs(snug_testcontainers::Service::Sync).await
    );
    let first_revision = etag_revision(&created);
    assert_image(&get_userdb(&http, &token).await, &first_revision, &first);
    let (objects, size) = bucket_contents(&hub).await;
    assert!(
        objects >= 1,
        "the image's pack is in the bucket: {objects} objects, {size}"
    );

    // Garage stopped: the bytes of a new image have nowhere to go, so the PUT is refused, and the
    // current revision is still the first.
    hub.stop_store(Backing::Garage).await.expect("stop garage");
    assert_put_refused(&http, &token, &first_revision, Backing::Garage).await;
    hub.start_store(Backing::Garage)
        .await
        .expect("start garage");
    let after_garage = snug_e2e::put_userdb_until_served(
        &http,
        &token,
        ("if-match", &format!("\"{first_revision}\"")),
        &second_image(),
    )
    .await;
    assert_eq!(
        after_garage.status,
        204,
        "{:?}\nsync logs:\n{}",
        String::from_utf8_lossy(&after_garage.body),
        hub.logs(snug_testcontainers::Service::Sync).await
    );
    let second_revision = etag_revision(&after_garage);
    assert_image(
        &get_userdb(&http, &token).await,
        &second_revision,
        &second_image(),
    );
    let (objects_after, size_after) = bucket_contents(&hub).await;
    assert!(
        objects_after > objects,
        "the second image's pack is in the bucket too: {objects_after} objects, {size_after}"
    );

    // PostgreSQL stopped: no pointer can move, so the PUT is refused the same way; once it is
    // back, the retry is stored on top of the second revision, which survived the restart.
    hub.stop_store(Backing::Postgres)
        .await
        .expect("stop postgres");
    assert_put_refused(&http, &token, &second_revision, Backing::Postgres).await;
    hub.start_store(Backing::Postgres)
        .await
        .expect("start postgres");
    let after_postgres = snug_e2e::put_userdb_until_served(
        &http,
        &token,
        ("if-match", &format!("\"{second_revision}\"")),
        &first,
    )
    .await;
    assert_eq!(
        after_postgres.status,
        204,
        "{:?}\nsync logs:\n{}",
        String::from_utf8_lossy(&after_postgres.body),
        hub.logs(snug_testcontainers::Service::Sync).await
    );
    assert_image(
        &get_userdb(&http, &token).await,
        &etag_revision(&after_postgres),
        &first,
    );
}
