//! Reseal over gRPC: an edit of a protected file keeps its header and slots, draws a fresh payload IV, and both secrets open the result; a wrong secret is LOCKED and a damaged container CORRUPT.

use super::*;

/// Sends `container` then `plaintext` as one Reseal stream cut into pieces of `piece` bytes,
/// so a chunk straddles the boundary between the two.
async fn reseal(
    client: &mut ContainerServiceClient<Channel>,
    container: &Bytes,
    container_length: u64,
    plaintext: &Bytes,
    secrets: pb::Secrets,
) -> Result<(pb::ResealResult, Bytes), Status> {
    let header = pb::ResealRequest::header(pb::ResealHeader {
        secrets: Some(secrets),
        container_length,
        plaintext_length: Some(plaintext.len() as u64),
        iteration_policy: None,
    });
    let body = Bytes::from([container.as_ref(), plaintext.as_ref()].concat());
    let piece = 777;
    let chunks: Vec<_> = (0..body.len())
        .step_by(piece)
        .map(|at| pb::ResealRequest::chunk(body.slice(at..(at + piece).min(body.len()))))
        .collect();
    let request = futures::stream::iter(std::iter::once(header).chain(chunks));
    let mut stream = client.reseal(request).await?.into_inner();
    chunks::download(&mut stream, u64::MAX, |r| r.container_length).await
}

#[tokio::test]
async fn reseal_keeps_header_and_slots_and_both_secrets_open_the_edit() {
    let mut client = start(test_config()).await;
    let (recovery_key, container) = protect(&mut client, sqlite_bytes(2000), PASSPHRASE)
        .await
        .expect("protect");
    let edited = sqlite_bytes(5000);
    let (result, resealed) = reseal(
        &mut client,
        &container,
        container.len() as u64,
        &edited,
        secrets(None, Some(&recovery_key)),
    )
    .await
    .expect("reseal");
    assert_eq!(result.opened_by(), pb::SlotKind::RecoveryKey);
    assert_eq!(result.container_length, resealed.len() as u64);
    // Header (160 bytes), wrapped keys (2 × 48): byte for byte; then a fresh payload IV.
    let kept = 160 + 2 * 48;
    assert_eq!(resealed[..kept], container[..kept]);
    assert_ne!(resealed[kept..kept + 12], container[kept..kept + 12]);
    for secrets in [
        secrets(Some(PASSPHRASE), None),
        secrets(None, Some(&recovery_key)),
    ] {
        let (_, plaintext) = unlock(&mut client, resealed.clone(), secrets)
            .await
            .expect("opens");
        assert_eq!(plaintext, edited);
    }
    // Resealing the same edit twice never repeats the IV.
    let (_, again) = reseal(
        &mut client,
        &resealed,
        resealed.len() as u64,
        &edited,
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect("reseal again");
    assert_eq!(again[..kept], container[..kept]);
    assert_ne!(again[kept..kept + 12], resealed[kept..kept + 12]);
}

#[tokio::test]
async fn reseal_refusals_get_typed_reasons() {
    let mut client = start(test_config()).await;
    let (_, container) = protect(&mut client, sqlite_bytes(300), PASSPHRASE)
        .await
        .expect("protect");
    let edited = sqlite_bytes(400);
    let len = container.len() as u64;

    let status = reseal(
        &mut client,
        &container,
        len,
        &edited,
        secrets(Some("wrong"), None),
    )
    .await
    .expect_err("locked");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(reason(&status), &snug_reasons::container::LOCKED);

    let mut damaged = container.to_vec();
    let last = damaged.len() - 20;
    damaged[last] ^= 1;
    let status = reseal(
        &mut client,
        &Bytes::from(damaged),
        len,
        &edited,
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("corrupt payload");
    assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
    assert_eq!(
        snug_rpc::status::metadata_of(&status, "detail").as_deref(),
        Some("payload_authentication_failed")
    );
    let mut damaged = container.to_vec();
    damaged[13] ^= 0x40;
    let status = reseal(
        &mut client,
        &Bytes::from(damaged),
        len,
        &edited,
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("corrupt header");
    assert_eq!(reason(&status), &snug_reasons::container::CORRUPT);
    let status = reseal(
        &mut client,
        &sqlite_bytes(300),
        sqlite_bytes(300).len() as u64,
        &edited,
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("not a container");
    assert_eq!(reason(&status), &snug_reasons::container::NOT_A_CONTAINER);

    // The new plaintext must be a plain user database.
    let status = reseal(
        &mut client,
        &container,
        len,
        &container,
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("a container as plaintext");
    assert_eq!(reason(&status), &snug_reasons::container::ALREADY_PROTECTED);
    let status = reseal(
        &mut client,
        &container,
        len,
        &Bytes::from_static(b"not sqlite"),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("garbage plaintext");
    assert_eq!(
        reason(&status),
        &snug_reasons::container::NOT_A_USER_DATABASE
    );
    let status = reseal(
        &mut client,
        &container,
        len,
        &edited.slice(..edited.len() / 2),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("half a database as plaintext");
    assert_eq!(
        reason(&status),
        &snug_reasons::container::NOT_A_USER_DATABASE
    );
    // A container length past the end of the stream is a bad request.
    let status = reseal(
        &mut client,
        &container,
        len + edited.len() as u64 + 1,
        &Bytes::new(),
        secrets(Some(PASSPHRASE), None),
    )
    .await
    .expect_err("container_length too long");
    assert_eq!(reason(&status), &snug_reasons::container::INVALID_ARGUMENT);
}
