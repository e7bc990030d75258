//! The framed responses are what tonic would send: byte for byte, and with the same statuses.

use http_body_util::BodyExt as _;
use snug_proto::container::v1 as pb;

use super::*;

fn result() -> pb::UnlockResponse {
    pb::UnlockResponse::header(pb::UnlockResult {
        opened_by: pb::SlotKind::Passphrase.into(),
        plaintext_length: 12_345,
        plaintext_format: pb::Format::Sqlite.into(),
    })
}

fn chunk(c: Bytes) -> pb::UnlockResponse {
    pb::UnlockResponse::chunk(c)
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
        let response = respond(result(), futures::stream::iter(pieces));
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
    assert_eq!(
        chunk_tag::<pb::UnlockResponse>().as_deref(),
        Some(&[0x12][..])
    );
    // A builder that adds anything else is framed by prost instead.
    let not_alone = |c: Bytes| {
        pb::UnlockResponse::header(pb::UnlockResult {
            plaintext_length: c.len() as u64,
            ..Default::default()
        })
    };
    assert_eq!(chunk_tag_of(&not_alone), None);
}

#[tokio::test]
async fn a_builder_that_is_not_a_lone_chunk_is_encoded_like_any_message() {
    let odd = |c: Bytes| {
        pb::UnlockResponse::header(pb::UnlockResult {
            plaintext_length: c.len() as u64,
            ..Default::default()
        })
    };
    let bytes = payload(chunks::CHUNK_SIZE + 10);
    let mut expected = vec![result()];
    expected.extend(chunks::split_into_chunks(bytes.clone()).map(odd));
    let response = respond_with(result(), futures::stream::iter([Ok(bytes)]), odd);
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
    let (body, trailers) = collect(respond(result(), pieces)).await;
    // The result and the first piece went out; nothing after the failure did.
    assert!(body == tonic_bytes(&[result(), chunk(payload(100))]));
    let trailed = Status::from_header_map(&trailers).expect("a status in the trailers");
    assert_eq!(trailed.code(), tonic::Code::Unavailable);
    assert_eq!(
        crate::status::reason_of(&trailed).as_deref(),
        Some("STORAGE_UNAVAILABLE")
    );
}

/// Splits `bytes` at pseudo-random points (seeded), as a transport may deliver them.
fn split_randomly(bytes: &[u8], seed: u64) -> Vec<Bytes> {
    let mut state = seed | 1;
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Mostly small pieces, sometimes large ones, so every parser state meets a boundary.
        let len = match state % 4 {
            0 => 1 + (state >> 8) as usize % 3,
            1 => 1 + (state >> 8) as usize % 16,
            2 => 1 + (state >> 8) as usize % 5_000,
            _ => 1 + (state >> 8) as usize % 300_000,
        };
        let end = (at + len).min(bytes.len());
        out.push(Bytes::copy_from_slice(&bytes[at..end]));
        at = end;
    }
    out
}

/// However the bytes of a response are cut into frames, the parser finds the same messages: the
/// result whole, and each chunk's payload in order.
#[test]
fn the_parser_reads_any_framing_of_tonics_bytes() {
    let odd = |c: Bytes| {
        pb::UnlockResponse::header(pb::UnlockResult {
            plaintext_length: c.len() as u64,
            ..Default::default()
        })
    };
    let shapes: Vec<Vec<pb::UnlockResponse>> = vec![
        vec![result()],
        vec![result(), chunk(payload(1))],
        vec![result(), chunk(Bytes::new()), chunk(payload(200))],
        vec![
            result(),
            chunk(payload(127)),
            chunk(payload(128)),
            chunk(payload(16_384)),
        ],
        vec![
            result(),
            chunk(payload(chunks::CHUNK_SIZE)),
            chunk(payload(70_001)),
        ],
        // Something other than a lone chunk after the result is handed over whole.
        vec![
            result(),
            chunk(payload(10)),
            odd(payload(3)),
            chunk(payload(10)),
        ],
    ];
    for (n, messages) in shapes.iter().enumerate() {
        let wire = tonic_bytes(messages);
        for seed in 0..40u64 {
            let mut parser = client::Parser::new(chunk_tag::<pb::UnlockResponse>());
            let mut events = std::collections::VecDeque::new();
            for frame in split_randomly(&wire, seed * 7919 + n as u64) {
                parser.feed(frame, &mut events).expect("feed");
            }
            assert!(parser.at_boundary(), "shape {n}, seed {seed}");
            // Rebuild the messages from the events.
            let mut rebuilt: Vec<pb::UnlockResponse> = Vec::new();
            let mut payload_of_chunk: Option<Vec<u8>> = None;
            let mut expected = messages.iter();
            for event in events {
                match event {
                    client::Event::Message(bytes) => {
                        if let Some(p) = payload_of_chunk.take() {
                            rebuilt.push(chunk(Bytes::from(p)));
                        }
                        rebuilt.push(pb::UnlockResponse::decode(bytes).expect("decode"));
                    }
                    client::Event::Payload(bytes) => {
                        payload_of_chunk
                            .get_or_insert_with(Vec::new)
                            .extend_from_slice(&bytes);
                    }
                }
            }
            if let Some(p) = payload_of_chunk.take() {
                rebuilt.push(chunk(Bytes::from(p)));
            }
            // Chunks arrive as payload pieces, so consecutive chunks merge and empty ones vanish:
            // compare the payload bytes and the other messages in order.
            let flatten = |ms: &mut dyn Iterator<Item = &pb::UnlockResponse>| {
                let mut out: Vec<Result<pb::UnlockResponse, Vec<u8>>> = Vec::new();
                for m in ms {
                    match &m.message {
                        Some(pb::unlock_response::Message::Chunk(c)) => match out.last_mut() {
                            Some(Err(bytes)) => bytes.extend_from_slice(c),
                            _ if c.is_empty() => {}
                            _ => out.push(Err(c.to_vec())),
                        },
                        _ => out.push(Ok(m.clone())),
                    }
                }
                out
            };
            assert!(
                flatten(&mut rebuilt.iter()) == flatten(&mut expected.by_ref()),
                "shape {n}, seed {seed}"
            );
        }
    }
}

#[test]
fn the_parser_refuses_compressed_and_oversized_messages() {
    let mut events = std::collections::VecDeque::new();
    let compressed = Bytes::from_static(&[1, 0, 0, 0, 1, 0]);
    assert_eq!(
        client::Parser::new(chunk_tag::<pb::UnlockResponse>())
            .feed(compressed, &mut events)
            .expect_err("compressed")
            .code(),
        tonic::Code::Internal
    );
    let mut huge = vec![0u8];
    huge.extend_from_slice(&((MAX_MESSAGE_SIZE + 1) as u32).to_be_bytes());
    assert_eq!(
        client::Parser::new(chunk_tag::<pb::UnlockResponse>())
            .feed(Bytes::from(huge), &mut events)
            .expect_err("oversized")
            .code(),
        tonic::Code::ResourceExhausted
    );
    // A response cut inside a message is not at a boundary.
    let mut parser = client::Parser::new(chunk_tag::<pb::UnlockResponse>());
    let wire = tonic_bytes(&[result(), chunk(payload(100))]);
    parser
        .feed(Bytes::copy_from_slice(&wire[..wire.len() - 1]), &mut events)
        .expect("feed");
    assert!(!parser.at_boundary());
}
