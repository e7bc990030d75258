//! In-process tests of `snug.container.v1`: a real server on loopback, a generated client.

use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use snug_proto::container::v1::{self as pb, container_service_client::ContainerServiceClient};
use snug_rpc::chunks::Chunked as _;
use snug_rpc::chunks::{self, CHUNK_SIZE, MAX_MESSAGE_SIZE};
use tonic::{Code, Status, transport::Channel};

use super::*;

mod policy;
mod reseal;
mod rotate;

const ITERATIONS: u32 = 1_000;
const PASSPHRASE: &str = "correct horse battery staple";

fn test_config() -> ContainerConfig {
    ContainerConfig {
        // Tests seal with 1,000 iterations; the 600,000 default is exercised by the c01 vector.
        min_iterations: 1_000,
        ..ContainerConfig::default()
    }
}

async fn start(config: ContainerConfig) -> ContainerServiceClient<Channel> {
    start_with(config, snug_rpc::runtime::Runtime::default()).await
}

/// [`start`], its uploads admitted against `runtime`'s budget.
async fn start_with(
    config: ContainerConfig,
    runtime: snug_rpc::runtime::Runtime,
) -> ContainerServiceClient<Channel> {
    ContainerServiceClient::new(start_channel(config, runtime).await)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE)
}

async fn start_channel(config: ContainerConfig, runtime: snug_rpc::runtime::Runtime) -> Channel {
    snug_rpc::server::on_loopback(|listener| async move {
        let server_config = ServerConfig::for_tests();
        serve(
            &server_config,
            &config,
            &runtime,
            listener,
            std::future::pending(),
        )
        .await
    })
    .await
    .expect("start the service")
}

/// At least `len` bytes shaped as a whole SQLite database (what Protect accepts): a header
/// naming 512-byte pages and their count, then a pattern. `len` is rounded up to whole pages.
fn sqlite_bytes(len: usize) -> Bytes {
    const PAGE: usize = 512;
    let pages = len.div_ceil(PAGE).max(1);
    let mut bytes: Vec<u8> = (0..pages * PAGE).map(|i| (i * 7 % 251) as u8).collect();
    write_sqlite_header(&mut bytes, PAGE);
    Bytes::from(bytes)
}

/// Writes a SQLite header for `bytes.len() / page` pages of `page` bytes over the first 100 bytes.
fn write_sqlite_header(bytes: &mut [u8], page: usize) {
    let pages = (bytes.len() / page) as u32;
    bytes[..16].copy_from_slice(snug_container::SQLITE_MAGIC);
    bytes[16..18].copy_from_slice(&(page as u16).to_be_bytes());
    bytes[18..20].copy_from_slice(&[1, 1]);
    bytes[24..28].copy_from_slice(&1u32.to_be_bytes());
    bytes[28..32].copy_from_slice(&pages.to_be_bytes());
    bytes[92..96].copy_from_slice(&1u32.to_be_bytes());
}

fn reason(status: &Status) -> String {
    snug_rpc::status::reason_of(status).unwrap_or_default()
}

async fn protect(
    client: &mut ContainerServiceClient<Channel>,
    plaintext: Bytes,
    passphrase: &str,
) -> Result<(String, Bytes), Status> {
    let header = pb::ProtectRequest::header(pb::ProtectHeader {
        passphrase: passphrase.to_owned(),
        iterations: ITERATIONS,
        custody_rule_acknowledged: true,
        expected_length: Some(plaintext.len() as u64),
    });
    let request = chunks::upload(header, plaintext);
    let mut stream = client.protect(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.container_length).await?;
    assert_eq!(result.container_length, bytes.len() as u64);
    Ok((result.recovery_key, bytes))
}

fn secrets(passphrase: Option<&str>, recovery_key: Option<&str>) -> pb::Secrets {
    pb::Secrets {
        passphrase: passphrase.map(str::to_owned),
        recovery_key: recovery_key.map(str::to_owned),
    }
}

/// An Unlock request: the header with `secrets`, then `container` in chunks.
fn unlock_request(
    container: Bytes,
    secrets: pb::Secrets,
) -> impl futures::Stream<Item = pb::UnlockRequest> + Send + 'static {
    let header = pb::UnlockRequest::header(pb::UnlockHeader {
        secrets: Some(secrets),
        expected_length: None,
        iteration_policy: None,
    });
    chunks::upload(header, container)
}

async fn unlock(
    client: &mut ContainerServiceClient<Channel>,
    container: Bytes,
    secrets: pb::Secrets,
) -> Result<(pb::UnlockResult, Bytes), Status> {
    let request = unlock_request(container, secrets);
    let mut stream = client.unlock(request).await?.into_inner();
    chunks::download(&mut stream, u64::MAX, |r| r.plaintext_length).await
}

#[tokio::test]
async fn protect_then_unlock_with_either_secret() {
    let mut client = start(test_config()).await;
    // Larger than one chunk, so both directions stream several messages.
    let plaintext = sqlite_bytes(3 * CHUNK_SIZE + 123);
    let (recovery_key, container) = protect(&mut client, plaintext.clone(), PASSPHRASE)
        .await
        .expect("protect");
    assert!(container.starts_with(snug_container::MAGIC));
    assert_eq!(
        recovery_key.len(),
        32,
        "grouped 27-symbol key: {recovery_key}"
    );

    let (result, bytes) = unlock(
        &mut client,
        container.clone(),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect("unlock with passphrase");
    assert_eq!(bytes, plaintext);
    assert_eq!(result.opened_by(), pb::SlotKind::Passphrase);
    assert_eq!(result.plaintext_format(), pb::Format::Sqlite);

    let typed = recovery_key.to_lowercase().replace('-', " ");
    let (result, bytes) = unlock(&mut client, container.clone(), secrets(None, Some(&typed)))
        .await
        .expect("unlock with recovery key");
    assert_eq!(bytes, plaintext);
    assert_eq!(result.opened_by(), pb::SlotKind::RecoveryKey);
}

#[tokio::test]
async fn wrong_or_missing_secret_is_locked_not_corrupt() {
    let mut client = start(test_config()).await;
    let (_, container) = protect(&mut client, sqlite_bytes(100), PASSPHRASE)
        .await
        .expect("protect");
    for secrets in [
        secrets(Some("Correct horse battery staple"), None),
        secrets(Some(""), None),
        secrets(None, None),
        secrets(None, Some(PASSPHRASE)),
    ] {
        let status = unlock(&mut client, container.clone(), secrets)
            .await
            .expect_err("locked");
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(reason(&status), &snug_reasons::container::LOCKED);
    }
}

#[tokio::test]
async fn damaged_and_foreign_inputs_get_typed_reasons() {
    let mut client = start(test_config()).await;
    let (_, container) = protect(&mut client, sqlite_bytes(100), PASSPHRASE)
        .await
        .expect("protect");

    // A flipped iteration byte fails the header checksum: corrupt, with the detail named.
    let mut damaged = container.to_vec();
    damaged[13] ^= 0x40;
    let status = unlock(
        &mut client,
        Bytes::from(damaged),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("corrupt");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
    assert_eq!(
        snug_rpc::status::metadata_of(&status, "detail").as_deref(),
        Some("header_checksum_mismatch")
    );

    // A payload bit flip is found only after a slot opens: still corrupt, never locked.
    let mut damaged = container.to_vec();
    let last = damaged.len() - 20;
    damaged[last] ^= 1;
    let status = unlock(
        &mut client,
        Bytes::from(damaged),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("corrupt payload");
    assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);

    // A plain database is not a container.
    let status = unlock(
        &mut client,
        sqlite_bytes(10),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("not a container");
    assert_eq!(reason(&status), &snug_reasons::container::NOT_A_CONTAINER);

    // A newer container version is unsupported rather than damaged, but only under a valid
    // header checksum; under a failing one the version byte is damage (§11.2 rule 6).
    let mut damaged = container.to_vec();
    damaged[9] = 2;
    let newer = snug_container::with_valid_checksum(&damaged);
    let status = unlock(
        &mut client,
        Bytes::from(newer),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("unsupported");
    assert_eq!(
        reason(&status),
        &snug_reasons::container::UNSUPPORTED_FORMAT_VERSION
    );
    let status = unlock(
        &mut client,
        Bytes::from(damaged),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("damaged");
    assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
    assert_eq!(
        snug_rpc::status::metadata_of(&status, "detail").as_deref(),
        Some("header_checksum_mismatch")
    );
}

/// Sends `container` cut at `cuts` (offsets into it), declaring `declared` as its length.
async fn unlock_in_pieces(
    client: &mut ContainerServiceClient<Channel>,
    container: &Bytes,
    cuts: &[usize],
    declared: Option<u64>,
) -> Result<(pb::UnlockResult, Bytes), Status> {
    let mut messages = vec![pb::UnlockRequest::header(pb::UnlockHeader {
        secrets: Some(secrets(Some(PASSPHRASE), None)),
        expected_length: declared,
        iteration_policy: None,
    })];
    let mut start = 0;
    for &cut in cuts.iter().chain([&container.len()]) {
        for piece in chunks::split_into_chunks(container.slice(start..cut)) {
            messages.push(pb::UnlockRequest::chunk(piece));
        }
        start = cut;
    }
    let mut stream = client
        .unlock(futures::stream::iter(messages))
        .await?
        .into_inner();
    chunks::download(&mut stream, u64::MAX, |r| r.plaintext_length).await
}

#[tokio::test]
async fn uploads_opened_as_they_arrive_give_the_whole_upload_verdict() {
    let mut client = start(test_config()).await;
    let plaintext = sqlite_bytes(2 * CHUNK_SIZE + 4321);
    let (_, container) = protect(&mut client, plaintext.clone(), PASSPHRASE)
        .await
        .expect("protect");
    let len = container.len();
    // Cuts inside the fixed header, inside the slot table, right after the payload IV (268),
    // inside the payload and inside the tag.
    let cut_sets: [&[usize]; 4] = [
        &[],
        &[1, 37, 200, 268],
        &[267, 269, 1000],
        &[len - 20, len - 3],
    ];
    for cuts in cut_sets {
        for declared in [None, Some(len as u64)] {
            let (result, bytes) = unlock_in_pieces(&mut client, &container, cuts, declared)
                .await
                .expect("unlock");
            assert_eq!(bytes, plaintext, "cuts {cuts:?}, declared {declared:?}");
            assert_eq!(result.plaintext_length, plaintext.len() as u64);
        }
    }

    // A damaged tag or last payload byte: corrupt, and not one plaintext byte is streamed.
    for at in [len - 1, len - 17] {
        let mut damaged = container.to_vec();
        damaged[at] ^= 0x80;
        let status = unlock_in_pieces(&mut client, &Bytes::from(damaged), &[500], Some(len as u64))
            .await
            .expect_err("corrupt");
        assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
        assert_eq!(
            snug_rpc::status::metadata_of(&status, "detail").as_deref(),
            Some("payload_authentication_failed")
        );
    }

    // Truncated after a slot would open: corrupt (structure is judged before the secret).
    let status = unlock_in_pieces(&mut client, &container.slice(..280), &[], None)
        .await
        .expect_err("truncated");
    assert_eq!(
        snug_rpc::status::metadata_of(&status, "detail").as_deref(),
        Some("truncated_body")
    );

    // A declared length that the stream does not keep is a malformed request.
    for declared in [len as u64 + 5, len as u64 - 5] {
        let status = unlock_in_pieces(&mut client, &container, &[], Some(declared))
            .await
            .expect_err("length mismatch");
        assert_eq!(
            reason(&status),
            &snug_reasons::container::INVALID_ARGUMENT,
            "declared {declared}"
        );
    }
}

#[tokio::test]
async fn unlocks_in_a_row_reuse_buffers_without_mixing_contents() {
    // One pooled buffer, so every unlock after the first receives into the previous one's.
    let config = ContainerConfig {
        buffer_pool: 1,
        ..test_config()
    };
    let mut client = start(config).await;
    let mut sealed = Vec::new();
    for (i, len) in [3 * CHUNK_SIZE, 100, 2 * CHUNK_SIZE + 7]
        .into_iter()
        .enumerate()
    {
        // Distinct contents after the SQLite magic.
        let mut plaintext = sqlite_bytes(len).to_vec();
        plaintext[100..]
            .iter_mut()
            .for_each(|b| *b = b.wrapping_add(i as u8 + 1));
        let plaintext = Bytes::from(plaintext);
        let (_, container) = protect(&mut client, plaintext.clone(), PASSPHRASE)
            .await
            .expect("protect");
        sealed.push((plaintext, container));
    }
    for _ in 0..2 {
        for (plaintext, container) in &sealed {
            let (_, bytes) = unlock(
                &mut client,
                container.clone(),
                secrets(Some(PASSPHRASE), None),
            )
            .await
            .expect("unlock");
            assert_eq!(&bytes, plaintext);
        }
    }
}

#[tokio::test]
async fn a_client_leaving_mid_download_leaves_the_next_unlock_whole() {
    let config = ContainerConfig {
        buffer_pool: 1,
        ..test_config()
    };
    let mut client = start(config).await;
    // Larger than the chunks decrypted ahead of the sender, so the decryption is still running
    // when the client goes away.
    let first = sqlite_bytes(12 * CHUNK_SIZE + 5);
    let (_, first_container) = protect(&mut client, first.clone(), PASSPHRASE)
        .await
        .expect("protect");
    let request = unlock_request(first_container, secrets(Some(PASSPHRASE), None));
    let mut stream = client.unlock(request).await.expect("unlock").into_inner();
    let Some(pb::UnlockResponse {
        message: Some(pb::unlock_response::Message::Result(result)),
    }) = stream.message().await.expect("first message")
    else {
        panic!("the result comes first");
    };
    assert_eq!(result.plaintext_length, first.len() as u64);
    drop(stream);

    let mut second = sqlite_bytes(3 * CHUNK_SIZE).to_vec();
    second[100..]
        .iter_mut()
        .for_each(|b| *b = b.wrapping_add(7));
    let second = Bytes::from(second);
    let (_, second_container) = protect(&mut client, second.clone(), PASSPHRASE)
        .await
        .expect("protect");
    for _ in 0..2 {
        let (result, bytes) = unlock(
            &mut client,
            second_container.clone(),
            secrets(Some(PASSPHRASE), None),
        )
        .await
        .expect("unlock");
        assert_eq!(bytes, second);
        assert_eq!(result.plaintext_format(), pb::Format::Sqlite);
    }
}

#[tokio::test]
async fn protect_refuses_containers_non_databases_and_unacknowledged_custody() {
    let mut client = start(test_config()).await;
    let (_, container) = protect(&mut client, sqlite_bytes(10), PASSPHRASE)
        .await
        .expect("protect");
    let status = protect(&mut client, container, PASSPHRASE)
        .await
        .expect_err("already protected");
    assert_eq!(reason(&status), &snug_reasons::container::ALREADY_PROTECTED);

    // Not SQLite, half a database, a database with a page too many, and an invalid page size:
    // each refused as what it is, never sealed.
    let whole = sqlite_bytes(8 * 512);
    let mut padded = whole.to_vec();
    padded.extend_from_slice(&[0; 512]);
    let mut bad_page_size = whole.to_vec();
    bad_page_size[16..18].copy_from_slice(&1000u16.to_be_bytes());
    for (what, bytes) in [
        ("not SQLite", Bytes::from_static(b"hello")),
        ("the magic alone", Bytes::from_static(b"SQLite format 3\0")),
        ("half a database", whole.slice(..4 * 512)),
        ("a page too many", Bytes::from(padded)),
        ("an invalid page size", Bytes::from(bad_page_size)),
        ("not whole pages", whole.slice(..4 * 512 + 7)),
    ] {
        let status = protect(&mut client, bytes, PASSPHRASE)
            .await
            .expect_err(what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}");
        assert_eq!(
            reason(&status),
            &snug_reasons::container::NOT_A_USER_DATABASE,
            "{what}"
        );
    }

    let status = protect(&mut client, sqlite_bytes(10), "")
        .await
        .expect_err("empty passphrase");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);

    let header = pb::ProtectRequest::header(pb::ProtectHeader {
        passphrase: PASSPHRASE.to_owned(),
        iterations: ITERATIONS,
        custody_rule_acknowledged: false,
        expected_length: None,
    });
    let request = chunks::upload(header, sqlite_bytes(10));
    let status = client.protect(request).await.expect_err("custody");
    assert_eq!(
        reason(&status),
        &snug_reasons::container::CUSTODY_NOT_ACKNOWLEDGED
    );

    // Below the configured minimum iteration count is refused, not silently raised.
    let header = pb::ProtectRequest::header(pb::ProtectHeader {
        passphrase: PASSPHRASE.to_owned(),
        iterations: 10,
        custody_rule_acknowledged: true,
        expected_length: None,
    });
    let request = chunks::upload(header, sqlite_bytes(10));
    let status = client.protect(request).await.expect_err("weak kdf");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
}

#[tokio::test]
async fn oversize_uploads_are_refused_early_with_resource_exhausted() {
    let mut client = start(test_config()).await;
    // Declared too large: refused after the header, before any chunk is needed.
    let header = pb::UnlockRequest::header(pb::UnlockHeader {
        secrets: Some(secrets(Some(PASSPHRASE), None)),
        expected_length: Some(snug_container::MAX_USERDB_BYTES * 2),
        iteration_policy: None,
    });
    let status = client
        .unlock(futures::stream::iter([header]))
        .await
        .expect_err("declared too large");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(reason(&status), &snug_reasons::container::TOO_LARGE);

    // Undeclared: the stream is cut off as soon as it crosses the cap.
    let over = snug_container::MAX_USERDB_BYTES as usize + 2 * CHUNK_SIZE;
    let status = protect(&mut client, sqlite_bytes(over), PASSPHRASE)
        .await
        .expect_err("streamed too large");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(reason(&status), &snug_reasons::container::TOO_LARGE);
}

#[tokio::test]
async fn malformed_streams_are_invalid_arguments() {
    let mut client = start(test_config()).await;
    // Chunks before any header.
    let chunk = pb::UnlockRequest::chunk(Bytes::from_static(b"x"));
    let status = client
        .unlock(futures::stream::iter([chunk]))
        .await
        .expect_err("headerless");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
    // An empty stream.
    let status = client
        .unlock(futures::stream::iter(Vec::<pb::UnlockRequest>::new()))
        .await
        .expect_err("empty");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
    // A message with no field set.
    let status = client
        .unlock(futures::stream::iter([pb::UnlockRequest { message: None }]))
        .await
        .expect_err("empty message");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
}

#[tokio::test]
async fn passphrase_change_and_recovery_rotation_keep_the_other_secret() {
    let mut client = start(test_config()).await;
    let plaintext = sqlite_bytes(2000);
    let (recovery_key, container) = protect(&mut client, plaintext.clone(), PASSPHRASE)
        .await
        .expect("protect");

    let header = pb::ChangePassphraseRequest::header(pb::ChangePassphraseHeader {
        current_passphrase: PASSPHRASE.to_owned(),
        new_passphrase: "new passphrase".to_owned(),
        expected_length: None,
        iteration_policy: None,
    });
    let request = chunks::upload(header, container.clone());
    let mut stream = client
        .change_passphrase(request)
        .await
        .expect("change")
        .into_inner();
    let (_, changed) = chunks::download(&mut stream, u64::MAX, |r| r.container_length)
        .await
        .expect("changed");
    assert_eq!(changed.len(), container.len());
    // The payload (IV, ciphertext, tag) is untouched by a passphrase change.
    assert_eq!(changed[256..], container[256..]);
    assert!(
        unlock(
            &mut client,
            changed.clone(),
            secrets(Some(PASSPHRASE), None)
        )
        .await
        .is_err()
    );
    assert!(
        unlock(
            &mut client,
            changed.clone(),
            secrets(Some("new passphrase"), None)
        )
        .await
        .is_ok()
    );
    assert!(
        unlock(
            &mut client,
            changed.clone(),
            secrets(None, Some(&recovery_key))
        )
        .await
        .is_ok()
    );

    let header = pb::RotateRecoveryKeyRequest::header(pb::RotateRecoveryKeyHeader {
        secrets: Some(secrets(Some("new passphrase"), None)),
        expected_length: None,
        iteration_policy: None,
        new_recovery_key: None,
    });
    let request = chunks::upload(header, changed.clone());
    let mut stream = client
        .rotate_recovery_key(request)
        .await
        .expect("rotate")
        .into_inner();
    let (result, rotated) = chunks::download(&mut stream, u64::MAX, |r| r.container_length)
        .await
        .expect("rotated");
    assert_ne!(result.recovery_key, recovery_key);
    assert_eq!(rotated[256..], changed[256..]);
    let status = unlock(
        &mut client,
        rotated.clone(),
        secrets(None, Some(&recovery_key)),
    )
    .await
    .expect_err("old recovery key");
    assert_eq!(reason(&status), &snug_reasons::container::LOCKED);
    let (_, bytes) = unlock(
        &mut client,
        rotated.clone(),
        secrets(None, Some(&result.recovery_key)),
    )
    .await
    .expect("new recovery key");
    assert_eq!(bytes, plaintext);

    let header = pb::RemoveProtectionRequest::header(pb::RemoveProtectionHeader {
        secrets: Some(secrets(Some("new passphrase"), None)),
        expected_length: None,
        iteration_policy: None,
    });
    let request = chunks::upload(header, rotated);
    let mut stream = client
        .remove_protection(request)
        .await
        .expect("remove")
        .into_inner();
    let (_, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.plaintext_length)
        .await
        .expect("plaintext");
    assert_eq!(bytes, plaintext);
}

#[tokio::test]
async fn detect_and_inspect_need_no_secret() {
    let mut client = start(test_config()).await;
    for (leading, expected) in [
        (snug_container::SQLITE_MAGIC.to_vec(), pb::Format::Sqlite),
        (snug_container::MAGIC.to_vec(), pb::Format::Snugenc1),
        (b"PK\x03\x04".to_vec(), pb::Format::Unknown),
        (Vec::new(), pb::Format::Unknown),
    ] {
        let response = client
            .detect_format(pb::DetectFormatRequest {
                leading_bytes: leading.into(),
            })
            .await
            .expect("detect")
            .into_inner();
        assert_eq!(response.format(), expected);
    }

    let (_, container) = protect(&mut client, sqlite_bytes(500), PASSPHRASE)
        .await
        .expect("protect");
    let request = futures::stream::iter(
        chunks::split_into_chunks(container.clone())
            .map(|chunk| pb::InspectContainerRequest {
                chunk,
                iteration_policy: None,
            })
            .collect::<Vec<_>>(),
    );
    let info = client
        .inspect_container(request)
        .await
        .expect("inspect")
        .into_inner();
    assert_eq!(info.version, 1);
    assert_eq!(info.kdf_id, 1);
    assert_eq!(info.iterations, ITERATIONS);
    assert_eq!(info.header_length, 160);
    assert_eq!(info.container_length, container.len() as u64);
    assert_eq!(info.plaintext_length, 512, "500 bytes in whole pages");
    let kinds: Vec<_> = info.slots.iter().map(|s| s.kind()).collect();
    assert_eq!(kinds, [pb::SlotKind::Passphrase, pb::SlotKind::RecoveryKey]);

    let truncated = container.slice(..200);
    let status = client
        .inspect_container(futures::stream::iter([pb::InspectContainerRequest {
            chunk: truncated,
            iteration_policy: None,
        }]))
        .await
        .expect_err("truncated");
    assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
    assert_eq!(
        snug_rpc::status::metadata_of(&status, "detail").as_deref(),
        Some("truncated_body")
    );
}

#[tokio::test]
async fn reference_container_at_600k_iterations_unlocks_over_grpc() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/vectors/reference/containers");
    let container = std::fs::read(dir.join("c01-reference-random-600k.snug"))
        .expect("the shared reference vectors are beside the repository");
    // The default configuration: 600,000 iterations is inside the accepted range.
    let mut client = start(ContainerConfig::default()).await;
    let (_, plaintext) = unlock(
        &mut client,
        Bytes::from(container),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect("unlock");
    assert_eq!(
        hex::encode(Sha256::digest(&plaintext)),
        "9ac4340874202fd7ac0acfee28019a90612430738c4d5311d3a9ae817f7ed6ea"
    );
}

#[tokio::test]
async fn a_burst_beyond_the_kdf_pool_is_refused_as_overloaded() {
    let config = ContainerConfig {
        min_iterations: 1_000,
        kdf_concurrency: Some(1),
        kdf_queue_timeout: Duration::from_millis(1),
        ..ContainerConfig::default()
    };
    // These unlocks declare no length, so each is admitted for the whole container limit: a
    // budget for all eight keeps the burst at the KDF pool, which this test is about.
    let runtime = snug_rpc::runtime::Runtime::default().with_budget(
        snug_rpc::budget::UploadBudget::new(1 << 30, Duration::from_secs(5)),
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/vectors/reference/containers");
    let container =
        Bytes::from(std::fs::read(dir.join("c01-reference-random-600k.snug")).expect("vector"));
    let client = start_with(config, runtime).await;
    // Eight 600k-iteration unlocks against one slot with a 1 ms queue: most must be shed with a
    // typed, retryable reason, and none may hang or fail any other way.
    let results = futures::future::join_all((0..8).map(|_| {
        let mut client = client.clone();
        let container = container.clone();
        async move { unlock(&mut client, container, secrets(Some(PASSPHRASE), None)).await }
    }))
    .await;
    let overloaded = results
        .iter()
        .filter(|r| matches!(r, Err(s) if s.code() == Code::Unavailable && reason(s) == &snug_reasons::container::OVERLOADED))
        .count();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert!(ok >= 1, "at least one unlock runs");
    assert!(overloaded >= 1, "the burst is shed");
    assert_eq!(ok + overloaded, 8);
}

#[test]
fn reasons_are_upper_snake_unique_and_short() {
    let mut seen = std::collections::HashSet::new();
    for reason in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(reason.len() <= 63, "{reason}");
        assert!(
            reason.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
            "{reason}"
        );
        assert!(seen.insert(reason), "duplicate {reason}");
    }
}

/// Sends its messages' bytes as they are, so a test can send what no generated client would.
#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let len = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, len)))
    }
}

#[tokio::test]
async fn undecodable_messages_are_invalid_arguments_with_a_reason() {
    let channel = start_channel(test_config(), snug_rpc::runtime::Runtime::default()).await;
    // Field 1 announces 5 bytes and carries 1; a header whose passphrase (a `string`) is not UTF-8.
    let cases: [(&str, &str, Bytes); 2] = [
        (
            "truncated",
            "/snug.container.v1.ContainerService/DetectFormat",
            Bytes::from_static(&[0x0a, 0x05, 0x01]),
        ),
        (
            "invalid UTF-8 in a string field",
            "/snug.container.v1.ContainerService/Protect",
            Bytes::from_static(&[0x0a, 0x04, 0x0a, 0x02, 0xff, 0xfe]),
        ),
    ];
    for (what, path, message) in cases {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.expect("ready");
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        let status = if path.as_str().ends_with("Protect") {
            grpc.streaming(
                tonic::Request::new(futures::stream::iter([message])),
                path,
                RawCodec,
            )
            .await
            .map(|_| ())
        } else {
            grpc.unary(tonic::Request::new(message), path, RawCodec)
                .await
                .map(|_| ())
        }
        .expect_err(what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        assert_eq!(
            reason(&status),
            &snug_reasons::container::INVALID_ARGUMENT,
            "{what}"
        );
        assert_eq!(
            snug_rpc::status::metadata_of(&status, "field").as_deref(),
            Some("(message)"),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_stream_message_over_the_decode_limit_is_too_large() {
    let channel = start_channel(test_config(), snug_rpc::runtime::Runtime::default()).await;
    // A client that encodes what no well-behaved sender would: one message past the server's
    // decode limit.
    let mut client = ContainerServiceClient::new(channel).max_encoding_message_size(usize::MAX);
    let header = pb::ProtectRequest::header(pb::ProtectHeader {
        passphrase: PASSPHRASE.to_owned(),
        iterations: ITERATIONS,
        custody_rule_acknowledged: true,
        expected_length: None,
    });
    let oversize = pb::ProtectRequest::chunk(Bytes::from(vec![0u8; MAX_MESSAGE_SIZE + 1024]));
    let status = client
        .protect(futures::stream::iter([header, oversize]))
        .await
        .expect_err("a message over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(&status), &snug_reasons::container::TOO_LARGE);
}

/// Issue 23, point 6: the refusals tonic makes of a unary request before any code of ours runs
/// are typed as well — a body without its message, and a message over the decode limit — by
/// the shared runtime (domain `snug.rpc`), where tonic said INTERNAL and OUT_OF_RANGE.
#[tokio::test]
async fn a_unary_request_without_its_message_or_over_the_limit_is_refused_typed() {
    let channel = start_channel(test_config(), snug_rpc::runtime::Runtime::default()).await;
    let path = "/snug.container.v1.ContainerService/DetectFormat";
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let empty = grpc
        .client_streaming(
            tonic::Request::new(futures::stream::empty::<Bytes>()),
            tonic::codegen::http::uri::PathAndQuery::from_static(path),
            RawCodec,
        )
        .await
        .map(|_| ())
        .expect_err("no message");
    grpc.ready().await.expect("ready");
    let oversize = grpc
        .unary(
            tonic::Request::new(Bytes::from(vec![0u8; MAX_MESSAGE_SIZE + 1024])),
            tonic::codegen::http::uri::PathAndQuery::from_static(path),
            RawCodec,
        )
        .await
        .map(|_| ())
        .expect_err("over the limit");
    let described = |status: &Status| {
        let info = tonic_types::StatusExt::get_details_error_info(status);
        (
            status.code(),
            info.as_ref().map(|i| i.reason.clone()),
            info.as_ref().map(|i| i.domain.clone()),
            snug_rpc::status::metadata_of(status, "field")
                .or_else(|| snug_rpc::status::metadata_of(status, "limit")),
        )
    };
    assert_eq!(
        described(&empty),
        (
            Code::InvalidArgument,
            Some("INVALID_ARGUMENT".to_owned()),
            Some("snug.rpc".to_owned()),
            Some("(message)".to_owned())
        ),
        "{empty:?}"
    );
    assert_eq!(
        described(&oversize),
        (
            Code::ResourceExhausted,
            Some("TOO_LARGE".to_owned()),
            Some("snug.rpc".to_owned()),
            Some(MAX_MESSAGE_SIZE.to_string())
        ),
        "{oversize:?}"
    );
}
