//! Tests of streaming ingest: chunk boundaries, quota, digest.

use super::*;

struct Collect(Vec<Bytes>);

impl ChunkSink for Collect {
    async fn accept(&mut self, chunks: Vec<Bytes>) -> Result<(), PutError> {
        self.0.extend(chunks);
        Ok(())
    }
}

fn run(
    pieces: Vec<&'static [u8]>,
    quota: u64,
    chunk: usize,
) -> Result<(Ingested, Vec<Bytes>), PutError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let body = futures::stream::iter(pieces.into_iter().map(|p| Ok(Bytes::from_static(p))));
        let mut sink = Collect(Vec::new());
        let got = ingest(body, quota, chunk, &mut sink).await?;
        Ok((got, sink.0))
    })
}

#[test]
fn chunks_are_aligned_whatever_the_piece_sizes() {
    let (got, chunks) = run(vec![b"ab", b"cdefg", b"h", b"ijk"], 100, 4).expect("ingest");
    let lens: Vec<&[u8]> = chunks.iter().map(|c| c.as_ref()).collect();
    assert_eq!(lens, vec![&b"abcd"[..], b"efgh", b"ijk"]);
    assert_eq!(got.size, 11);
    assert_eq!(got.digest, Digest::of(b"abcdefghijk"));
}

#[test]
fn exactly_at_quota_passes_and_one_more_is_refused() {
    assert!(run(vec![b"abcd", b"ef"], 6, 4).is_ok());
    match run(vec![b"abcd", b"efg"], 6, 4) {
        Err(PutError::QuotaExceeded { quota: 6 }) => {}
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn manifest_round_trips() {
    let chunks = vec![Digest::of(b"a"), Digest::of(b"b")];
    assert_eq!(decode_manifest(&encode_manifest(&chunks)), Some(chunks));
    assert_eq!(decode_manifest(&[0u8; 31]), None);
}
