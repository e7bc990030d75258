//! The framed responses are what tonic would send: byte for byte, and with the same statuses.

use http_body_util::BodyExt as _;
use snug_proto::container::v1 as pb;

use super::*;

fn result() -> pb::UnlockResponse {
    pb::UnlockResponse {
        message: Some(pb::unlock_response::Message::Result(pb::UnlockResult {
            opened_by: pb::SlotKind::Passphrase.into(),
            plaintext_length: 12_345,
            plaintext_format: pb::Format::Sqlite.into(),
        })),
    }
}

fn chunk(c: Bytes) -> pb::UnlockResponse {
    pb::UnlockResponse {
        message: Some(pb::unlock_response::Message::Chunk(c)),
    }
}

/// What tonic's encoder writes for `messages`: each one's gRPC header and its prost encoding.
fn tonic_bytes(messages: &[pb::UnlockResponse]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        let encoded = m.encode_to_vec();
        out.push(0);
        out.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        out.extend_from_slice(&encoded);
    }
    out
}

fn payload(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i * 7 + 3) as u8).collect::<Vec<_>>())
}

async fn collect(response: http::Response<Body>) -> (Vec<u8>, http::HeaderMap) {
    let collected = response.into_body().collect().await.expect("body");
    let trailers = collected.trailers().cloned().expect("trailers");
    (collected.to_bytes().to_vec(), trailers)
}

#[tokio::test]
async fn framed_chunks_are_tonics_bytes_at_every_size() {
    let size = chunks::CHUNK_SIZE;
    for len in [
        0,
        1,
        127,
        128,
        16_383,
        16_384,
        size - 1,
        size,
        size + 1,
        3 * size + 7,
    ] {
        let bytes = payload(len);
        // The payload arrives as pieces of any size; chunks never straddle two pieces.
        let pieces: Vec<Result<Bytes, Status>> = if len > 10 {
            vec![Ok(bytes.slice(..len / 3)), Ok(bytes.slice(len / 3..))]
        } else {
            vec![Ok(bytes.clone())]
        };
        let mut expected = vec![result()];
        for piece in pieces.iter().map(|p| p.as_ref().expect("piece").clone()) {
            expected.extend(chunks::split_into_chunks(piece).map(chunk));
        }
        let response = respond(result(), futures::stream::iter(pieces), chunk);
        assert_eq!(
            response.headers()["content-type"],
            "application/grpc",
            "{len}"
        );
        let (body, trailers) = collect(response).await;
        assert!(body == tonic_bytes(&expected), "payload of {len} bytes");
        assert_eq!(trailers["grpc-status"], "0", "{len}");
    }
}

#[test]
fn the_chunk_key_is_found_only_for_a_lone_bytes_field() {
    assert_eq!(chunk_tag(&chunk).as_deref(), Some(&[0x12][..]));
    // A builder that adds anything else is framed by prost instead.
    let not_alone = |c: Bytes| pb::UnlockResponse {
        message: Some(pb::unlock_response::Message::Result(pb::UnlockResult {
            plaintext_length: c.len() as u64,
            ..Default::default()
        })),
    };
    assert_eq!(chunk_tag(&not_alone), None);
}

#[tokio::test]
async fn a_builder_that_is_not_a_lone_chunk_is_encoded_like_any_message() {
    let odd = |c: Bytes| pb::UnlockResponse {
        message: Some(pb::unlock_response::Message::Result(pb::UnlockResult {
            plaintext_length: c.len() as u64,
            ..Default::default()
        })),
    };
    let bytes = payload(chunks::CHUNK_SIZE + 10);
    let mut expected = vec![result()];
    expected.extend(chunks::split_into_chunks(bytes.clone()).map(odd));
    let response = respond(result(), futures::stream::iter([Ok(bytes)]), odd);
    let (body, _) = collect(response).await;
    assert!(body == tonic_bytes(&expected));
}

#[tokio::test]
async fn a_failed_piece_ends_the_body_with_its_status() {
    let status = crate::status::error(
        tonic::Code::Unavailable,
        "STORAGE_UNAVAILABLE",
        "snug.test",
        "the store failed",
        [],
    );
    let pieces = futures::stream::iter([Ok(payload(100)), Err(status), Ok(payload(100))]);
    let (body, trailers) = collect(respond(result(), pieces, chunk)).await;
    // The result and the first piece went out; nothing after the failure did.
    assert!(body == tonic_bytes(&[result(), chunk(payload(100))]));
    let trailed = Status::from_header_map(&trailers).expect("a status in the trailers");
    assert_eq!(trailed.code(), tonic::Code::Unavailable);
    assert_eq!(
        crate::status::reason_of(&trailed).as_deref(),
        Some("STORAGE_UNAVAILABLE")
    );
}
