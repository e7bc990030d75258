//! The sparse exchange as both sides run it, its wire form's round trip and hostile inputs,
//! and its bound.

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

// The codec's own test images: page `i` filled with `values[i]`.
use crate::tests::{LIMITS, PAGE, image};

fn shaped(image: &[u8]) -> Manifest {
    Manifest::with_shapes(image, PAGE).expect("manifest")
}

/// Steps 1–3 of the exchange (module docs) between a side holding `mine` and one holding
/// `theirs`: what the first learns of the second's manifest, and what each sent.
fn exchange(mine: &Manifest, theirs: &Manifest, group: u32) -> (Manifest, Sparse, Sparse) {
    let summary = Sparse::summary(mine, group);
    let sent = Sparse::parse(&summary.encode(), &LIMITS).expect("the summary parses");
    assert_eq!(sent, summary);
    let answer = Sparse::against(theirs, &sent);
    let received = Sparse::parse(&answer.encode(), &LIMITS).expect("the answer parses");
    assert_eq!(received, answer);
    (received.expand(mine).expect("expands"), summary, answer)
}

#[test]
fn an_edit_in_two_groups_costs_those_groups_and_a_hash_for_every_other() {
    let values: Vec<u8> = (0..100).collect();
    let mut edited = values.clone();
    edited[3] = 200;
    edited[70] = 201;
    let (a, b) = (shaped(&image(&values)), shaped(&image(&edited)));

    // A push: the client holds b and learns the hub's a.
    let (learned, summary, answer) = exchange(&b, &a, 16);
    assert_eq!(learned, a);
    assert_eq!(summary.encode().len(), SPARSE_HEADER + 7 * (1 + ID_LEN));
    assert_eq!(answer.pages_in_full(), 32);
    assert_eq!(
        answer.encode().len(),
        SPARSE_HEADER + 5 * (1 + ID_LEN) + 2 * (1 + 16 * 2 * ID_LEN)
    );

    // A pull's second step: the client, now knowing b, names a sparse against it, and the hub
    // expands that against b: the client's whole manifest, from two groups' ids.
    let second = Sparse::against(&a, &Sparse::summary(&b, 16));
    assert_eq!(second.pages_in_full(), 32);
    assert_eq!(second.expand(&b).expect("expands"), a);
    // Planned against it, only the two pages the client lacks are literal.
    let layout = plan(&b, &second.expand(&b).expect("expands").source());
    assert_eq!(layout.literal_pages().collect::<Vec<_>>(), [3, 70]);
}

#[test]
fn images_of_other_lengths_and_page_sizes_expand_in_full_where_they_differ() {
    let values: Vec<u8> = (0..40).collect();
    let longer: Vec<u8> = (0..57).collect();
    let shorter: Vec<u8> = (0..9).collect();
    let a = shaped(&image(&values));
    for other in [&longer, &shorter] {
        let b = shaped(&image(other));
        assert_eq!(exchange(&a, &b, 8).0, b);
        assert_eq!(exchange(&b, &a, 8).0, a);
    }
    // A short last page and a last group of another length.
    let mut odd = image(&longer);
    odd.truncate(odd.len() - 100);
    let b = shaped(&odd);
    assert_eq!(exchange(&a, &b, 8).0, b);
    // Another page size: nothing is named by hash, so the answer is the whole manifest.
    let big = Manifest::with_shapes(&image(&values), 1024).expect("manifest");
    let (learned, _, answer) = exchange(&a, &big, 8);
    assert_eq!(learned, big);
    assert_eq!(answer.pages_in_full(), u64::from(big.geometry.pages()));
    // Ids alone.
    let (a, b) = (
        Manifest::of(&image(&values), PAGE).expect("manifest"),
        Manifest::of(&image(&longer), PAGE).expect("manifest"),
    );
    assert_eq!(exchange(&a, &b, 8).0, b);
}

#[test]
fn a_hash_that_is_not_the_known_images_is_refused_not_guessed() {
    let values: Vec<u8> = (0..32).collect();
    let mut edited = values.clone();
    edited[5] = 99;
    let (a, b) = (shaped(&image(&values)), shaped(&image(&edited)));
    // b's summary expanded against a: group 0 is not a's.
    let err = Sparse::summary(&b, 8).expand(&a).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "malformed delta: a group named by a hash that is not the known image's"
    );
    // A group by hash past the end of the known image.
    let long = shaped(&image(&(0..48).collect::<Vec<_>>()));
    assert!(Sparse::summary(&long, 8).expand(&a).is_err());
    // Shapes cannot be known from a manifest without them.
    let ids_alone = Manifest::of(&image(&values), PAGE).expect("manifest");
    assert!(Sparse::summary(&a, 8).expand(&ids_alone).is_err());
    // By hash across page sizes.
    let big = Manifest::with_shapes(&image(&values), 1024).expect("manifest");
    assert!(Sparse::summary(&big, 8).expand(&a).is_err());
}

fn check_parse(bytes: &[u8], expect: Expect) {
    let got = match Sparse::parse(bytes, &LIMITS) {
        Ok(sparse) => format!("ok: {} groups", sparse.groups.len()),
        Err(err) => err.to_string(),
    };
    expect.assert_eq(&got);
}

#[test]
fn hostile_sparse_manifests_are_refused() {
    let a = shaped(&image(&(0..20).collect::<Vec<_>>()));
    let good = Sparse::against(
        &a,
        &Sparse::summary(&Manifest::of(&[1; 512], PAGE).expect("manifest"), 8),
    )
    .encode();
    check_parse(&good, expect!["ok: 3 groups"]);
    let with = |at: usize, bytes: &[u8]| {
        let mut edited = good.clone();
        edited[at..at + bytes.len()].copy_from_slice(bytes);
        edited
    };
    check_parse(
        &with(0, b"SDM2"),
        expect!["malformed delta: not a sparse manifest (magic)"],
    );
    check_parse(
        &with(48, &0u32.to_le_bytes()),
        expect!["malformed delta: a group size of 0 or over 65536 pages"],
    );
    check_parse(
        &with(48, &(MAX_GROUP + 1).to_le_bytes()),
        expect!["malformed delta: a group size of 0 or over 65536 pages"],
    );
    check_parse(
        &with(52, &[3]),
        expect!["malformed delta: unknown sparse manifest flags"],
    );
    check_parse(
        &with(53, &[7]),
        expect!["malformed delta: an unknown group tag"],
    );
    check_parse(
        &with(4, &1000u32.to_le_bytes()),
        expect!["page size 1000 is not a power of two from 512 to 65536"],
    );
    check_parse(
        &with(8, &(2u64 << 20).to_le_bytes()),
        expect!["an image of 2097152 bytes is over the quota of 1048576"],
    );
    check_parse(
        &good[..good.len() - 1],
        expect!["malformed delta: truncated"],
    );
    check_parse(
        &good[..SPARSE_HEADER],
        expect!["malformed delta: truncated"],
    );
    let mut trailing = good.clone();
    trailing.push(0);
    check_parse(
        &trailing,
        expect!["malformed delta: bytes after the last group"],
    );
    // Ids without the shapes the flags promise: the group runs into the next tag.
    check_parse(
        &with(52, &[0]),
        expect!["malformed delta: an unknown group tag"],
    );
}

#[test]
fn the_largest_sparse_manifest_is_the_manifest_bound() {
    let limits = Limits {
        max_length: 64 << 20,
    };
    let pages = limits.max_pages() as usize;
    let manifest = Manifest {
        geometry: Geometry::new(limits.max_length, MIN_PAGE_SIZE, &limits).expect("geometry"),
        digest: [0; 32],
        ids: (0..pages)
            .map(|i| PageId((i as u64).to_le_bytes()))
            .collect(),
        shapes: Some(vec![PageId([1; ID_LEN]); pages]),
    };
    let nothing_known = Sparse {
        groups: Vec::new(),
        ..Sparse::summary(&manifest, 1)
    };
    let largest = Sparse::against(&manifest, &nothing_known).encode();
    assert_eq!(largest.len() as u64, limits.max_manifest_len());
    assert!(manifest.encode().len() as u64 <= limits.max_manifest_len());
    assert_eq!(
        Sparse::parse(&largest, &limits)
            .expect("parses")
            .pages_in_full(),
        pages as u64
    );
}

proptest! {
    #[test]
    fn any_two_images_exchange_to_each_others_manifest(
        mine in proptest::collection::vec(0u8..6, 1..40),
        theirs in proptest::collection::vec(0u8..6, 1..40),
        group in 1u32..9,
        shapes in any::<bool>(),
    ) {
        let manifest = |values: &[u8]| Manifest::describe(&image(values), PAGE, shapes).expect("manifest");
        let (mine, theirs) = (manifest(&mine), manifest(&theirs));
        let (learned, _, _) = exchange(&mine, &theirs, group);
        prop_assert_eq!(&learned, &theirs);
        let second = Sparse::against(&mine, &Sparse::summary(&learned, group));
        let parsed = Sparse::parse(&second.encode(), &LIMITS).expect("parses");
        prop_assert_eq!(parsed.expand(&theirs).expect("expands"), mine);
    }

    #[test]
    fn the_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = Sparse::parse(&bytes, &LIMITS);
    }
}
