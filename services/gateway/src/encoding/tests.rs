//! The codings' rules as tables, and the decoder's bounds on hostile input.

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;

use super::*;

fn headers(name: header::HeaderName, values: &[&str]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for value in values {
        headers.append(name.clone(), HeaderValue::from_str(value).expect("value"));
    }
    headers
}

#[test]
fn accept_encoding_takes_zstd_when_named_or_starred_with_a_weight_above_zero() {
    let cases: &[(&[&str], bool)] = &[
        (&[], false),
        (&["zstd"], true),
        (&["ZSTD"], true),
        (&["gzip, deflate, br, zstd"], true),
        (&["gzip", "zstd"], true),
        (&["zstd;q=0.5"], true),
        (&["zstd; q=0"], false),
        (&["zstd;q=0.0, gzip"], false),
        (&["*"], true),
        (&["*;q=0"], false),
        (&["gzip, br"], false),
        (&["zstdx"], false),
    ];
    for (values, takes) in cases {
        assert_eq!(
            accepts_zstd(&headers(header::ACCEPT_ENCODING, values)),
            *takes,
            "{values:?}"
        );
    }
}

#[test]
fn a_request_coding_is_zstd_only_where_the_route_takes_it_and_alone() {
    let cases: &[(&[&str], bool, Option<Coding>)] = &[
        (&[], false, Some(Coding::Identity)),
        (&[], true, Some(Coding::Identity)),
        (&["identity"], false, Some(Coding::Identity)),
        (&["zstd"], true, Some(Coding::Zstd)),
        (&["Zstd"], true, Some(Coding::Zstd)),
        (&["identity, zstd"], true, Some(Coding::Zstd)),
        (&["zstd"], false, None),
        (&["gzip"], true, None),
        (&["gzip"], false, None),
        (&["zstd, zstd"], true, None),
        (&["gzip, zstd"], true, None),
        (&["zstd", "br"], true, None),
    ];
    for (values, takes, want) in cases {
        let got = request_coding(&headers(header::CONTENT_ENCODING, values), *takes);
        match (got, want) {
            (Ok(got), Some(want)) => assert_eq!(got, *want, "{values:?} {takes}"),
            (Err(err), None) => {
                assert_eq!(err.status, 415, "{values:?}");
                assert_eq!(err.code, "UNSUPPORTED_CONTENT_ENCODING");
            }
            (got, want) => panic!("{values:?} {takes}: {got:?}, wanted {want:?}"),
        }
    }
}

/// Text that compresses the way HTML does, and bytes that do not.
fn sample(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..len)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if (i / 4096) % 2 == 0 {
                b"<div class=\"row\">snug</div>\n"[i % 28]
            } else {
                state as u8
            }
        })
        .collect()
}

/// Everything `inflate` gives for `coded` fed in pieces of `piece` bytes, taken `take` at a
/// time; every piece taken is within `take`.
fn inflate_all(coded: &[u8], piece: usize, take: usize) -> Result<Vec<u8>, ApiError> {
    let mut inflate = Inflate::new()?;
    let mut out = Vec::new();
    for input in coded.chunks(piece) {
        inflate.give(Bytes::copy_from_slice(input));
        loop {
            let got = inflate.take(take)?;
            assert!(got.len() <= take);
            if got.is_empty() {
                break;
            }
            out.extend_from_slice(&got);
        }
    }
    inflate.finish()?;
    Ok(out)
}

#[test]
fn a_body_decodes_whatever_its_pieces_and_takes() {
    let plain = sample(300_000);
    let coded = zstd::bulk::compress(&plain, 3).expect("compress");
    for (piece, take) in [
        (1, 100_000),
        (7, 4096),
        (coded.len(), 1 << 20),
        (16 * 1024, 1),
    ] {
        assert_eq!(
            inflate_all(&coded, piece, take).expect("decodes"),
            plain,
            "{piece} {take}"
        );
    }
    // Frames one after another are one body (RFC 8878 §3).
    let mut two = coded.clone();
    two.extend_from_slice(&coded);
    assert_eq!(
        inflate_all(&two, 4096, 1 << 20).expect("two").len(),
        600_000
    );
    // An empty body is an empty body.
    assert!(inflate_all(&[], 1, 1).expect("empty").is_empty());
}

#[test]
fn a_small_body_that_decodes_to_a_lot_is_given_one_bounded_piece_at_a_time() {
    let zeros = vec![0u8; 64 << 20];
    let coded = zstd::bulk::compress(&zeros, 19).expect("compress");
    assert!(coded.len() < 64 * 1024, "{}", coded.len());
    let mut inflate = Inflate::new().expect("inflate");
    inflate.give(Bytes::from(coded));
    let first = inflate.take(1 << 20).expect("take");
    assert_eq!(first.len(), 1 << 20);
}

#[test]
fn a_cut_off_corrupt_or_oversized_window_body_is_body_encoding_invalid() {
    let plain = sample(200_000);
    let coded = zstd::bulk::compress(&plain, 3).expect("compress");
    let refused = |coded: &[u8]| {
        let err = inflate_all(coded, 4096, 1 << 20).expect_err("refused");
        assert_eq!(err.status, 400);
        assert_eq!(err.code, "BODY_ENCODING_INVALID");
    };
    refused(&coded[..coded.len() - 1]);
    refused(&coded[..coded.len() / 2]);
    refused(b"SQLite format 3\0 is not zstd");
    // A frame that asks for a 16 MiB window: over RFC 9659's 8 MiB.
    let mut wide = zstd::stream::Encoder::new(Vec::new(), 3).expect("encoder");
    wide.set_parameter(zstd::stream::raw::CParameter::WindowLog(24))
        .expect("window");
    wide.include_contentsize(false).expect("size");
    std::io::Write::write_all(&mut wide, &sample(20 << 20)).expect("write");
    refused(&wide.finish().expect("finish"));
}

#[test]
fn an_answer_encodes_to_one_frame_that_decodes_to_its_pieces() {
    let plain = sample(3 << 20);
    let mut deflate = Deflate::new().expect("deflate");
    let mut coded = Vec::new();
    for piece in plain.chunks(1 << 20) {
        coded.extend(deflate.feed(piece).expect("feed"));
    }
    coded.extend(deflate.finish().expect("finish"));
    assert!(coded.len() < plain.len() * 3 / 4, "{}", coded.len());
    assert_eq!(zstd::decode_all(&coded[..]).expect("decode"), plain);
    assert_eq!(
        inflate_all(&coded, 64 * 1024, 1 << 20).expect("inflate"),
        plain
    );
}

#[test]
fn a_body_is_held_to_the_size_its_frame_declares() {
    let plain = sample(100_000);
    let coded = zstd::bulk::compress(&plain, 3).expect("compress");
    assert_eq!(declared_size(&coded[..FRAME_HEADER_MAX]), Some(100_000));
    assert_eq!(declared_size(&coded[..2]), None);
    let mut streamed = zstd::stream::Encoder::new(Vec::new(), 3).expect("encoder");
    streamed.include_contentsize(false).expect("no size");
    std::io::Write::write_all(&mut streamed, &plain).expect("write");
    let streamed = streamed.finish().expect("finish");
    assert_eq!(declared_size(&streamed), None);

    let decode = |coded: &[u8], declared: u64| {
        let mut inflate = Inflate::new()?;
        inflate.declare(declared);
        inflate.give(Bytes::copy_from_slice(coded));
        while !inflate.take(1 << 20)?.is_empty() {}
        inflate.finish()
    };
    decode(&coded, 100_000).expect("as declared");
    // A second frame past the one that declared the size, or a size that is not the body's.
    let mut two = coded.clone();
    two.extend_from_slice(&coded);
    for (coded, declared) in [(&two, 100_000), (&coded, 99_999), (&coded, 100_001)] {
        let err = decode(coded, declared).expect_err("refused");
        assert_eq!(err.code, "BODY_ENCODING_INVALID");
    }
}
