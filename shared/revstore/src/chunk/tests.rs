//! Tests of streaming ingest: chunk boundaries, quota, digest.

use super::*;

struct Collect(Vec<Bytes>);

impl ChunkSink for Collect {
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        self.0.extend(batch.chunks);
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
        let got = ingest(body, quota, chunk, None, None, &mut sink).await?;
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

/// A SQLite header stamped with `version`, followed by `tail` more bytes.
fn sqlite_image(version: u32, tail: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; SQLITE_HEADER_LEN + tail];
    bytes[..16].copy_from_slice(b"SQLite format 3\0");
    bytes[60..64].copy_from_slice(&version.to_be_bytes());
    bytes
}

fn ingest_pieces(image: &[u8], piece: usize) -> Ingested {
    let pieces: Vec<io::Result<Bytes>> = image
        .chunks(piece)
        .map(|p| Ok(Bytes::copy_from_slice(p)))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(ingest(
        futures::stream::iter(pieces),
        1 << 20,
        4096,
        None,
        None,
        &mut Collect(Vec::new()),
    ))
    .expect("ingest")
}

#[test]
fn storage_version_is_read_whatever_the_piece_sizes() {
    let image = sqlite_image(6, 500);
    for piece in [1, 7, 60, 61, 63, 64, 99, 100, 101, 600] {
        assert_eq!(
            ingest_pieces(&image, piece).storage_version,
            Some(6),
            "pieces of {piece}"
        );
    }
    // Every byte of the stamp counts, big-endian: 0x01020304.
    let image = sqlite_image(0x0102_0304, 0);
    assert_eq!(ingest_pieces(&image, 3).storage_version, Some(0x0102_0304));
    // The store does not judge the number: a version newer than any hub is recorded as is.
    assert_eq!(
        ingest_pieces(&sqlite_image(u32::MAX, 10), 50).storage_version,
        Some(u32::MAX)
    );
}

#[test]
fn storage_version_is_none_unless_a_whole_sqlite_header_arrived() {
    let image = sqlite_image(6, 0);
    // One byte short of the 100-byte header.
    assert_eq!(ingest_pieces(&image[..99], 10).storage_version, None);
    assert_eq!(ingest_pieces(&image, 10).storage_version, Some(6));
    let mut wrong_magic = sqlite_image(6, 20);
    wrong_magic[15] = b'x';
    assert_eq!(ingest_pieces(&wrong_magic, 10).storage_version, None);
    let mut container = sqlite_image(6, 20);
    container[..9].copy_from_slice(b"SNUGENC1\n");
    assert_eq!(ingest_pieces(&container, 10).storage_version, None);
    assert_eq!(run(vec![], 100, 4).expect("empty").0.storage_version, None);
}

#[test]
fn storage_version_reads_only_the_header() {
    assert_eq!(types::storage_version(&sqlite_image(7, 0)), Some(7));
    assert_eq!(types::storage_version(&sqlite_image(7, 0)[..99]), None);
    assert_eq!(types::storage_version(b""), None);
    assert_eq!(types::storage_version(&[0u8; 100]), None);
}
