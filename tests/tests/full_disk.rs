//! A full disk under the hub's embedded store, through the gateway (issue 19 point 3): the sync
//! store's directory on an 8 MiB tmpfs, `PUT /userdb` until the disk is full. The PUT that meets
//! it is `507 STORAGE_FULL`, not retryable and without `Retry-After` (an operator must make room;
//! a client retrying each second helps no one), the same write over gRPC is `RESOURCE_EXHAUSTED`
//! with reason `STORAGE_FULL`, and `GET /userdb` still serves the last accepted image.
//!
//! Needs root to mount the tmpfs and skips visibly without it (`snug_test_support::tmpfs`).

use snug_e2e::{Hub, Options, Payload, etag_revision, get_userdb, put_userdb};
use snug_test_support::tmpfs::Tmpfs;

/// A valid user database of at most `len` bytes whose filler differs for every `seed`, so no two
/// share chunks and each PUT takes its own room, in the form the hub stores.
fn distinct_image(seed: u64, len: usize) -> Vec<u8> {
    snug_e2e::userdb_with_seeded_filler(len, seed).0
}

/// A PutImage straight to the sync service: `user`'s image must be `current`.
async fn grpc_put(
    hub: &Hub,
    user: &str,
    current: &str,
    bytes: Vec<u8>,
) -> Result<(), tonic::Status> {
    use snug_proto::sync::v1::{
        self as pb, put_image_request::Message, sync_service_client::SyncServiceClient,
    };
    let mut client = SyncServiceClient::connect(format!("http://{}", hub.grpc))
        .await
        .expect("connect");
    let header = pb::PutImageRequest {
        message: Some(Message::Header(pb::PutImageHeader {
            caller: Some(pb::Caller {
                user_id: user.to_owned(),
                principal: "test/direct".to_owned(),
                ..Default::default()
            }),
            precondition: Some(pb::Precondition {
                condition: Some(pb::precondition::Condition::MustMatch(current.to_owned())),
            }),
            idempotency_key: None,
            expected_length: Some(bytes.len() as u64),
            quota_bytes: None,
        })),
    };
    let chunks = bytes
        .chunks(64 << 10)
        .map(|c| pb::PutImageRequest {
            message: Some(Message::Chunk(c.to_vec().into())),
        })
        .collect::<Vec<_>>();
    client
        .put_image(futures::stream::iter(std::iter::once(header).chain(chunks)))
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_507_storage_full_and_the_last_image_stays_served() {
    // Declared first, so it is dropped (unmounted) last, after the hub, also on a panic.
    let Some(disk) = Tmpfs::mount_if_possible(8 << 20) else {
        return;
    };
    let sync_dir = disk.path().join("sync");
    std::fs::create_dir(&sync_dir).expect("sync dir");
    let hub = Hub::start(Options {
        sync_dir: Some(sync_dir),
        ..Options::default()
    })
    .await;
    let http = snug_e2e::Http::new(hub.http);
    let token = hub.add_user("alice");

    let mut last: Option<(String, Vec<u8>)> = None;
    let mut puts = 0_u64;
    let (refusal, refused) = loop {
        let image = distinct_image(puts + 1, 600 << 10);
        let condition = match &last {
            Some((revision, _)) => ("if-match", format!("\"{revision}\"")),
            None => ("if-none-match", "*".to_owned()),
        };
        let answer = put_userdb(&http, &token, (condition.0, &condition.1), image.clone()).await;
        if answer.status != 204 {
            break (answer, image);
        }
        last = Some((etag_revision(&answer), image));
        puts += 1;
        assert!(puts < 32, "32 PUTs of 600 KiB fit on an 8 MiB disk");
    };
    eprintln!("the disk filled after {puts} PUTs");
    assert!(
        std::fs::read_dir(disk.path().join("sync").join("packs"))
            .is_ok_and(|mut packs| packs.next().is_some()),
        "the store's packs are on the tmpfs"
    );
    let (revision, image) = last.expect("at least one PUT fits on the disk");
    snug_e2e::assert_error(&refusal, 507, "STORAGE_FULL");
    let json = refusal.json();
    assert_eq!(json["retryable"], false, "{json}");
    assert!(
        refusal.headers.get("retry-after").is_none(),
        "a full disk must not tell clients to retry: {:?}",
        refusal.headers
    );

    // The last accepted image is still served, byte-identical.
    let got = get_userdb(&http, &token).await;
    assert_eq!(got.status, 200);
    assert_eq!(etag_revision(&got), revision);
    assert!(
        got.body == image,
        "GET /userdb serves the last accepted image"
    );

    // The same write over gRPC: RESOURCE_EXHAUSTED with reason STORAGE_FULL.
    let status = grpc_put(&hub, &snug_e2e::user_id(&hub, "alice"), &revision, refused)
        .await
        .expect_err("a put on a full disk");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        snug_rpc::status::reason_of(&status).as_deref(),
        Some("STORAGE_FULL"),
        "{status:?}"
    );

    // Ready while the connection answers, until a third write in a row fails: then readiness is
    // off and says why, so a load balancer stops sending writes that every one would fail.
    let ready = http.send("GET", "/readyz", &[], Payload::Empty).await;
    assert_eq!(ready.status, 200, "two failures: {:?}", ready.json());
    let third = put_userdb(
        &http,
        &token,
        ("if-match", &format!("\"{revision}\"")),
        distinct_image(1000, 600 << 10),
    )
    .await;
    snug_e2e::assert_error(&third, 507, "STORAGE_FULL");
    let unready = http.send("GET", "/readyz", &[], Payload::Empty).await;
    assert_eq!(unready.status, 503, "{:?}", unready.json());
    let message = unready.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("syncStore: STORAGE_FULL"), "{message}");
    drop(hub);
    drop(disk);
}
