//! The codec's tests: round trips (property-based), the hostile inputs table, and bounds.

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

pub(crate) const PAGE: u32 = 512;
pub(crate) const LIMITS: Limits = Limits {
    max_length: 1 << 20,
};

/// An image of `n` pages, page `i` filled with `seed + i` (distinct pages for distinct values).
pub(crate) fn image(values: &[u8]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| std::iter::repeat_n(*v, PAGE as usize))
        .collect()
}

fn delta_for(target: &[u8], source: &[u8]) -> Delta {
    let manifest = Manifest::of(target, PAGE).expect("manifest");
    let layout = plan(&manifest, &Source::ids(&page_ids(source, PAGE)));
    Delta::build(layout, target, None)
}

#[test]
fn a_shifted_image_is_one_literal_page_and_two_copies() {
    let source = image(&[1, 2, 3, 4, 5, 6]);
    let target = image(&[1, 2, 9, 3, 4, 5, 6]);
    let delta = delta_for(&target, &source);
    expect![[r#"
        [
            Copy {
                to: 0,
                from: 0,
                count: 2,
            },
            Literal {
                to: 2,
                count: 1,
            },
            Copy {
                to: 3,
                from: 2,
                count: 4,
            },
        ]
    "#]]
    .assert_debug_eq(&delta.layout.runs);
    let wire = delta.encode();
    assert_eq!(
        wire.len(),
        DELTA_HEADER + 3 * RUN_LEN + ID_LEN + PAGE as usize
    );
    let parsed = Delta::parse(&wire, &LIMITS, source.len() as u64).expect("parse");
    assert_eq!(parsed.assemble(&source).expect("assemble"), target);
}

#[test]
fn a_plan_parses_without_its_source() {
    let source = image(&[1, 2, 3, 4]);
    let manifest = Manifest::of(&image(&[4, 1, 2, 3]), PAGE).expect("manifest");
    let layout = plan(&manifest, &Source::ids(&page_ids(&source, PAGE)));
    assert_eq!(
        Layout::parse_plan(&layout.encode(), &LIMITS),
        Ok(layout.clone())
    );
    let mut long = layout.encode();
    long.push(0);
    assert_eq!(
        Layout::parse_plan(&long, &LIMITS),
        Err(DeltaError::Malformed {
            what: "bytes after the layout"
        })
    );
    assert!(Layout::parse_plan(&long[..20], &LIMITS).is_err());
}

#[test]
fn a_short_last_page_round_trips() {
    let source = image(&[1, 2, 3]);
    let mut target = image(&[1, 2, 3]);
    target.extend_from_slice(b"tail");
    let delta = delta_for(&target, &source);
    let parsed = Delta::parse(&delta.encode(), &LIMITS, source.len() as u64).expect("parse");
    assert_eq!(parsed.assemble(&source).expect("assemble"), target);
}

#[test]
fn manifest_round_trips_and_is_eight_bytes_a_page() {
    let target = image(&[7, 8, 9]);
    let manifest = Manifest::of(&target, PAGE).expect("manifest");
    let wire = manifest.encode();
    assert_eq!(wire.len(), MANIFEST_HEADER + 3 * ID_LEN);
    assert_eq!(Manifest::parse(&wire, &LIMITS), Ok(manifest));
}

/// Encodes a layout by hand so hostile run lists can be written down.
fn raw_layout(length: u64, source_pages: u32, runs: &[(u8, u32, u32, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(DELTA_MAGIC);
    out.extend_from_slice(&PAGE.to_le_bytes());
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&[0; 32]);
    out.extend_from_slice(&source_pages.to_le_bytes());
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for (kind, to, count, from) in runs {
        out.push(*kind);
        out.extend_from_slice(&to.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&from.to_le_bytes());
    }
    out
}

#[track_caller]
fn check_layout(bytes: &[u8], source_pages: u32, expect: Expect) {
    let got = Layout::parse(bytes, &LIMITS, u64::from(source_pages * PAGE))
        .map(|(layout, _)| layout.runs);
    expect.assert_eq(&format!("{got:?}"));
}

#[test]
fn hostile_layouts_are_refused() {
    let four = 4 * u64::from(PAGE);
    // Two runs over the same target page.
    check_layout(
        &raw_layout(four, 4, &[(0, 0, 2, 0), (0, 1, 3, 0)]),
        4,
        expect!["Err(Duplicate { page: 1 })"],
    );
    // A page no run describes, in the middle and at the end.
    check_layout(
        &raw_layout(four, 4, &[(0, 0, 1, 0), (0, 2, 2, 0)]),
        4,
        expect!["Err(Gap { page: 1 })"],
    );
    check_layout(
        &raw_layout(four, 4, &[(0, 0, 3, 0)]),
        4,
        expect!["Err(Gap { page: 3 })"],
    );
    // Past the target, past the source, and a u32 overflow.
    check_layout(
        &raw_layout(four, 4, &[(1, 0, 5, 0)]),
        4,
        expect![[r#"Err(OutOfRange { page: 0, pages: 4, what: "target" })"#]],
    );
    check_layout(
        &raw_layout(four, 4, &[(0, 0, 4, 1)]),
        4,
        expect![[r#"Err(OutOfRange { page: 1, pages: 4, what: "source" })"#]],
    );
    check_layout(
        &raw_layout(four, 4, &[(0, 0, 4, u32::MAX)]),
        4,
        expect![[r#"Err(OutOfRange { page: 4294967295, pages: 4, what: "source" })"#]],
    );
    // A page count over the quota, a bad page size's stand-in (length 0), an empty run,
    // an unknown kind, more runs than pages, a delta made against another source.
    check_layout(
        &raw_layout(LIMITS.max_length + 1, 4, &[(1, 0, 2049, 0)]),
        4,
        expect!["Err(TooLarge { length: 1048577, max_length: 1048576 })"],
    );
    check_layout(
        &raw_layout(0, 4, &[]),
        4,
        expect![[r#"Err(Malformed { what: "an empty image" })"#]],
    );
    check_layout(
        &raw_layout(four, 4, &[(1, 0, 0, 0), (1, 0, 4, 0)]),
        4,
        expect![[r#"Err(Malformed { what: "an empty run" })"#]],
    );
    check_layout(
        &raw_layout(four, 4, &[(4, 0, 4, 0)]),
        4,
        expect![[r#"Err(Malformed { what: "an unknown run kind" })"#]],
    );
    check_layout(
        &raw_layout(four, 4, &[(3, 0, 4, 1)]),
        4,
        expect![[r#"Err(Malformed { what: "an unknown run kind" })"#]],
    );
    check_layout(
        &raw_layout(four, 4, &[(1, 0, 1, 0); 5]),
        4,
        expect![[r#"Err(Malformed { what: "a run count over the page count or past the end" })"#]],
    );
    check_layout(
        &raw_layout(four, 3, &[(1, 0, 4, 0)]),
        4,
        expect!["Err(SourceMismatch { claimed: 3, actual: 4 })"],
    );
}

#[test]
fn the_page_size_is_read_from_a_sqlite_header() {
    let mut header = b"SQLite format 3\0".to_vec();
    for (field, expected) in [
        ([16u8, 0u8], 4096),
        ([1, 0], 65536),
        ([2, 0], 512),
        ([0, 3], 4096),
    ] {
        header.truncate(16);
        header.extend_from_slice(&field);
        assert_eq!(page_size_of(&header), expected, "{field:?}");
    }
    assert_eq!(page_size_of(b"SNUGENC1 and more bytes"), 4096);
}

#[test]
fn bad_page_sizes_are_refused() {
    for page_size in [0, 1, 256, 1000, 131072] {
        assert_eq!(
            Geometry::new(4096, page_size, &LIMITS),
            Err(DeltaError::PageSize { page_size })
        );
    }
}

#[test]
fn literal_pages_must_hash_to_their_ids_and_the_image_to_its_digest() {
    let source = image(&[1, 2, 3]);
    let target = image(&[1, 9, 3]);
    let delta = delta_for(&target, &source);

    let mut lying_page = delta.clone();
    let last = lying_page.literals.len() - 1;
    lying_page.literals[last] ^= 1;
    assert_eq!(
        lying_page.assemble(&source),
        Err(DeltaError::PageMismatch { page: 1 })
    );

    let mut lying_digest = delta.clone();
    lying_digest.layout.digest[0] ^= 1;
    assert_eq!(
        lying_digest.assemble(&source),
        Err(DeltaError::DigestMismatch)
    );

    // A source that changed since the layout was made is caught by the digest.
    assert_eq!(
        delta.assemble(&image(&[1, 2, 4])),
        Err(DeltaError::DigestMismatch)
    );
    assert_eq!(
        delta.assemble(&image(&[1, 2])),
        Err(DeltaError::SourceMismatch {
            claimed: 3,
            actual: 2
        })
    );
}

#[test]
fn literal_bytes_must_be_exactly_what_the_layout_names() {
    let source = image(&[1, 2, 3]);
    let wire = delta_for(&image(&[1, 9, 3]), &source).encode();
    let mut long = wire.clone();
    long.push(0);
    for bytes in [&wire[..wire.len() - 1], &long[..]] {
        assert_eq!(
            Delta::parse(bytes, &LIMITS, source.len() as u64),
            Err(DeltaError::Malformed {
                what: "literal pages that are not exactly what the layout names"
            })
        );
    }
}

#[test]
fn manifests_must_have_one_id_per_page() {
    let wire = Manifest::of(&image(&[1, 2]), PAGE)
        .expect("manifest")
        .encode();
    let mut long = wire.clone();
    long.extend_from_slice(&[0; ID_LEN]);
    for bytes in [&wire[..wire.len() - 1], &long[..], &wire[..3]] {
        assert!(Manifest::parse(bytes, &LIMITS).is_err());
    }
    let big = Limits { max_length: 600 };
    assert_eq!(
        Manifest::parse(&wire, &big),
        Err(DeltaError::TooLarge {
            length: 1024,
            max_length: 600
        })
    );
}

#[test]
fn the_manifest_bound_covers_the_largest_manifest() {
    let limits = Limits {
        max_length: 64 << 20,
    };
    assert_eq!(limits.max_pages(), 131_072);
    assert_eq!(limits.max_manifest_len(), 53 + 131_072 * 17);
}

/// The worst case the delta bounds must cover: every page distinct, literal, and in a run of its
/// own (pages alternate with ones copied from a one-page source, so no two literals share a run).
#[test]
fn the_layout_and_delta_bounds_cover_the_largest_delta_and_no_more() {
    let values: Vec<u8> = (0..64u32)
        .map(|i| if i % 2 == 0 { 0 } else { (i % 250) as u8 + 1 })
        .collect();
    // Every odd page distinct from every other: vary a byte per page.
    let mut target = image(&values);
    for (i, page) in target.chunks_mut(PAGE as usize).enumerate() {
        if i % 2 == 1 {
            page[1] = (i / 250) as u8;
            page[2] = 0xA5;
        }
    }
    let limits = Limits {
        max_length: target.len() as u64,
    };
    let source = image(&[0]);
    let delta = delta_for(&target, &source);
    assert_eq!(delta.layout.runs.len(), 64, "one run per page");
    let layout = delta.layout.encode();
    assert_eq!(layout.len() as u64, limits.max_layout_len());
    // Half the pages literal: the bound (every page literal) is the wire size of that case.
    let wire = delta.encode();
    assert_eq!(
        limits.max_delta_len() - wire.len() as u64,
        32 * (PAGE as u64 + ID_LEN as u64)
    );
    let all_literal = delta_for(&target, &image(&[255]));
    assert!(all_literal.encode().len() as u64 <= limits.max_delta_len());
}

proptest! {
    #[test]
    fn any_edit_round_trips(
        source in proptest::collection::vec(0u8..8, 1..40),
        target in proptest::collection::vec(0u8..12, 1..40),
        tail in proptest::collection::vec(any::<u8>(), 0..10),
    ) {
        let source = image(&source);
        let mut target = image(&target);
        target.extend_from_slice(&tail);
        let delta = delta_for(&target, &source);
        let wire = delta.encode();
        // A receiver learns the image's geometry from the prefix alone, before the rest.
        prop_assert_eq!(
            Delta::geometry(&wire[..Delta::GEOMETRY_PREFIX], &LIMITS),
            Ok(delta.layout.geometry)
        );
        prop_assert!(Delta::geometry(&wire[..Delta::GEOMETRY_PREFIX - 1], &LIMITS).is_err());
        let small = Limits { max_length: target.len() as u64 - 1 };
        prop_assert!(
            matches!(Delta::geometry(&wire, &small), Err(DeltaError::TooLarge { .. })),
            "a geometry over the limits is refused from the prefix"
        );
        let parsed = Delta::parse(&wire, &LIMITS, source.len() as u64).expect("parse");
        prop_assert_eq!(&parsed.assemble(&source).expect("assemble"), &target);
        // Into a buffer that held another image: nothing of it is left, and its memory is used.
        let used = vec![0xa5; target.len() + tail.len() + PAGE as usize];
        let memory = used.as_ptr();
        let assembled = parsed.assemble_into(&source, used).expect("assemble into");
        prop_assert_eq!(&assembled, &target);
        prop_assert_eq!(assembled.as_ptr(), memory);
        // Literal pages are exactly those the source lacks.
        let ids = page_ids(&source, PAGE);
        for page in parsed.layout.literal_pages() {
            let id = PageId::of(&image_page(&parsed, page));
            prop_assert!(!ids.contains(&id));
        }
    }

    /// Pages moved and edited by a few bytes: with the source's bytes every such page is a
    /// patch smaller than a page, and the delta always rebuilds the target.
    #[test]
    fn patched_edits_round_trip(
        order in proptest::collection::vec(0usize..6, 1..12),
        edits in proptest::collection::vec((0usize..12, 0usize..512, any::<u8>()), 0..20),
    ) {
        let source: Vec<u8> = (0..6 * PAGE as usize).map(|i| (i * 7 + i / 512) as u8).collect();
        let mut target: Vec<u8> = order
            .iter()
            .flat_map(|p| source[p * PAGE as usize..(p + 1) * PAGE as usize].to_vec())
            .collect();
        for (page, at, byte) in edits {
            let at = (page % order.len()) * PAGE as usize + at;
            target[at] = byte;
        }
        let theirs = Manifest::with_shapes(&source, PAGE).expect("manifest");
        let layout = plan(
            &Manifest::with_shapes(&target, PAGE).expect("manifest"),
            &Source { bytes: Some(&source), ..theirs.source() },
        );
        let delta = Delta::build(layout, &target, Some(&source));
        prop_assert!(delta.literals.len() <= target.len() + ID_LEN * order.len());
        let parsed = Delta::parse(&delta.encode(), &LIMITS, source.len() as u64).expect("parse");
        prop_assert_eq!(parsed.assemble(&source).expect("assemble"), target);
    }

    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), source in 0u32..8) {
        let _ = Manifest::parse(&bytes, &LIMITS);
        if let Ok(delta) = Delta::parse(&bytes, &LIMITS, u64::from(source * PAGE)) {
            let _ = delta.assemble(&vec![0; (source * PAGE) as usize]);
        }
    }

    #[test]
    fn a_flipped_byte_never_assembles_a_different_image(
        flip in 0usize..2000,
        bit in 0u8..8,
    ) {
        let source = image(&[1, 2, 3, 4]);
        let target = image(&[1, 5, 3, 4]);
        let mut wire = delta_for(&target, &source).encode();
        let flip = flip % wire.len();
        wire[flip] ^= 1 << bit;
        if let Ok(delta) = Delta::parse(&wire, &LIMITS, source.len() as u64)
            && let Ok(assembled) = delta.assemble(&source)
        {
            // Only a flip in the claimed digest could pass, and then the digest check fails;
            // anything that assembles is the target itself.
            prop_assert_eq!(assembled, target);
        }
    }
}

/// A user database as an export leaves it (VACUUMed): `rows` small rows in a table created
/// first, then a table of values that each spill over several overflow pages, then one of
/// medium rows; `early` more rows in the first table, `large` of them a row larger than a page.
fn sqlite_image(rows: u32, early: u32, large: bool) -> Vec<u8> {
    let conn = rusqlite::Connection::open_in_memory().expect("open");
    conn.execute_batch(
        "CREATE TABLE small (id INTEGER PRIMARY KEY, v TEXT);
         CREATE TABLE docs (id INTEGER PRIMARY KEY, body BLOB);
         CREATE TABLE medium (id INTEGER PRIMARY KEY, v TEXT);
         CREATE INDEX medium_v ON medium (v);",
    )
    .expect("schema");
    let fill = |seed: u32, len: usize| -> Vec<u8> {
        (0..len)
            .map(|i| {
                (i as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(seed.wrapping_mul(40_503)) as u8
            })
            .collect()
    };
    for i in 0..rows {
        conn.execute("INSERT INTO small (v) VALUES (?1)", [format!("row {i}")])
            .expect("small");
    }
    for i in 0..40 {
        conn.execute("INSERT INTO docs (body) VALUES (?1)", [fill(i, 9_000)])
            .expect("doc");
    }
    for i in 0..rows {
        conn.execute(
            "INSERT INTO medium (v) VALUES (?1)",
            [format!("{i:08} {}", "m".repeat(150))],
        )
        .expect("medium");
    }
    for i in 0..early {
        let v = if large {
            format!("large {i} {}", "L".repeat(5_000))
        } else {
            format!("new {i}")
        };
        conn.execute(
            "INSERT INTO small (id, v) VALUES (?1, ?2)",
            (i64::from(i) + 1_000_000, v),
        )
        .expect("early");
    }
    // Tests run in parallel and may build the same image: each export gets a name of its own.
    static EXPORTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let export = EXPORTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "snug-delta-test-{}-{export}-{rows}-{early}-{large}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&dir);
    conn.execute("VACUUM INTO ?1", [dir.to_str().expect("utf-8")])
        .expect("vacuum");
    let bytes = std::fs::read(&dir).expect("read");
    std::fs::remove_file(&dir).expect("remove");
    bytes
}

/// The delta that makes `target` from `source`, as a push makes it (the source's manifest with
/// shapes, not its bytes) or a pull against a revision (its bytes too); checked to rebuild
/// the target.
fn sqlite_delta(target: &[u8], source: &[u8], shapes: bool, bytes: bool) -> Delta {
    let page = page_size_of(target);
    let manifest = |image: &[u8]| Manifest::describe(image, page, shapes).expect("manifest");
    let theirs = manifest(source);
    let layout = plan(
        &manifest(target),
        &Source {
            bytes: bytes.then_some(source),
            ..theirs.source()
        },
    );
    let delta = Delta::build(layout, target, bytes.then_some(source));
    let parsed = Delta::parse(&delta.encode(), &LARGE, source.len() as u64).expect("parse");
    assert_eq!(parsed.assemble(source).expect("assemble"), target);
    delta
}

const LARGE: Limits = Limits {
    max_length: 64 << 20,
};

/// A large row inserted into the first table moves every later page; with shapes, the pages
/// that only name moved pages (the docs' overflow chains, interior pages, spilling cells) cost
/// their fields, not their bytes.
#[test]
fn moved_pages_cost_their_fields_not_their_bytes() {
    let source = sqlite_image(6_000, 0, false);
    let target = sqlite_image(6_000, 1, true);
    assert_ne!(source.len(), target.len(), "the insert adds pages");
    let page = page_size_of(&target) as usize;
    let exact = sqlite_delta(&target, &source, false, false).encode().len();
    let shaped = sqlite_delta(&target, &source, true, false);
    let pulled = sqlite_delta(&target, &source, true, true);
    assert!(
        shaped.layout.patched_count() > 50,
        "{:?}",
        shaped.layout.runs
    );
    // Without shapes most of the moved overflow pages travel whole.
    assert!(exact > 50 * page, "{exact}");
    let (shaped, pulled) = (shaped.encode().len(), pulled.encode().len());
    eprintln!("shapes: {shaped} bytes, with the source's bytes {pulled}, ids alone: {exact}");
    assert!(
        shaped * 5 < exact,
        "shapes: {shaped} bytes, ids alone: {exact}"
    );
    assert!(pulled <= shaped, "pull {pulled}, push {shaped}");
}

/// A manifest without shapes (the first format, which older clients send) never gets a patch:
/// nothing planned against it or for it uses a run they do not know.
#[test]
fn no_shapes_no_patches() {
    let source = sqlite_image(2_000, 0, false);
    let target = sqlite_image(2_000, 1, true);
    let page = page_size_of(&target);
    let shaped_source = Manifest::with_shapes(&source, page).expect("manifest");
    let plain_target = Manifest::of(&target, page).expect("manifest");
    let shaped_target = Manifest::with_shapes(&target, page).expect("manifest");
    for layout in [
        plan(&plain_target, &shaped_source.source()),
        plan(&shaped_target, &Source::ids(&shaped_source.ids)),
    ] {
        assert_eq!(layout.patched_count(), 0);
        assert_eq!(
            Delta::build(layout, &target, None).layout.patched_count(),
            0
        );
    }
}

#[test]
fn shaped_manifests_round_trip_and_old_ones_still_parse() {
    let image = sqlite_image(500, 0, false);
    let page = page_size_of(&image);
    let shaped = Manifest::with_shapes(&image, page).expect("manifest");
    let wire = shaped.encode();
    assert_eq!(&wire[..4], b"SDM2");
    assert_eq!(wire.len(), MANIFEST_HEADER + 2 * ID_LEN * shaped.ids.len());
    assert_eq!(Manifest::parse(&wire, &LARGE).as_ref(), Ok(&shaped));
    assert!(Manifest::parse(&wire[..wire.len() - ID_LEN], &LARGE).is_err());
    let plain = Manifest::of(&image, page).expect("manifest");
    assert_eq!(&plain.encode()[..4], b"SDM1");
    assert_eq!(Manifest::parse(&plain.encode(), &LARGE), Ok(plain));
}

/// A delta of one page patched from source page 0 with `entries` (offset, bytes), claiming
/// `id` for the page, for a target of one `PAGE`-byte page.
fn patched(id: [u8; ID_LEN], entries: &[(u16, u16, &[u8])]) -> Vec<u8> {
    let mut wire = raw_layout(u64::from(PAGE), 1, &[(2, 0, 1, 0)]);
    wire.extend_from_slice(&id);
    wire.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (offset, len, bytes) in entries {
        wire.extend_from_slice(&offset.to_le_bytes());
        wire.extend_from_slice(&len.to_le_bytes());
        wire.extend_from_slice(bytes);
    }
    wire
}

#[test]
fn hostile_patches_are_refused() {
    let source = image(&[1]);
    let mut target = source.clone();
    target[10..12].copy_from_slice(b"ab");
    target[20] = b'c';
    let id = PageId::of(&target).0;
    let check = |wire: Vec<u8>, expect: Expect| {
        let got = Delta::parse(&wire, &LIMITS, source.len() as u64)
            .and_then(|delta| delta.assemble(&source).map(|_| ()));
        expect.assert_eq(&format!("{got:?}"));
    };
    // The honest patch, whose digest is not the layout's zeros: every page check passed.
    check(
        patched(id, &[(10, 2, b"ab"), (20, 1, b"c")]),
        expect!["Err(DigestMismatch)"],
    );
    check(
        patched(id, &[(20, 1, b"c"), (10, 2, b"ab")]),
        expect![[
            r#"Err(Malformed { what: "patch entries that are empty, overlap or are out of order" })"#
        ]],
    );
    check(
        patched(id, &[(10, 2, b"ab"), (11, 1, b"c")]),
        expect![[
            r#"Err(Malformed { what: "patch entries that are empty, overlap or are out of order" })"#
        ]],
    );
    check(
        patched(id, &[(10, 0, b"")]),
        expect![[
            r#"Err(Malformed { what: "patch entries that are empty, overlap or are out of order" })"#
        ]],
    );
    check(
        patched(id, &[(511, 2, b"ab")]),
        expect![[r#"Err(Malformed { what: "a patch entry past its page's end" })"#]],
    );
    check(
        patched(id, &[(0, 506, &[0; 506])]),
        expect![[r#"Err(Malformed { what: "a patch no smaller than its page" })"#]],
    );
    check(
        patched(id, &[(10, 2, b"ab")]),
        expect!["Err(PageMismatch { page: 0 })"],
    );
    let mut short = patched(id, &[(10, 2, b"ab")]);
    short.pop();
    check(
        short,
        expect![[
            r#"Err(Malformed { what: "literal pages that are not exactly what the layout names" })"#
        ]],
    );
    let mut long = patched(id, &[(10, 2, b"ab"), (20, 1, b"c")]);
    long.push(0);
    check(
        long,
        expect![[
            r#"Err(Malformed { what: "literal pages that are not exactly what the layout names" })"#
        ]],
    );
    // A patch from a source page that is not there.
    let mut wire = raw_layout(u64::from(PAGE), 1, &[(2, 0, 1, 1)]);
    wire.extend_from_slice(&id);
    wire.extend_from_slice(&0u16.to_le_bytes());
    check(
        wire,
        expect![[r#"Err(OutOfRange { page: 1, pages: 1, what: "source" })"#]],
    );
}

fn image_page(delta: &Delta, page: u32) -> Vec<u8> {
    // The literal section holds the page right after its id, in order.
    let mut offset = 0;
    for p in delta.layout.literal_pages() {
        let len = delta.layout.geometry.page_range(p).len();
        if p == page {
            return delta.literals[offset + ID_LEN..offset + ID_LEN + len].to_vec();
        }
        offset += ID_LEN + len;
    }
    Vec::new()
}

/// A large image is hashed on several threads; its manifest is the one a single pass makes.
#[test]
fn parallel_hashing_names_every_page_as_one_pass_does() {
    let one = sqlite_image(6_000, 1, true);
    let page = page_size_of(&one);
    // Whole copies of one database, and a torn last page, past the size hashed in parallel.
    let mut image = Vec::new();
    while image.len() <= PARALLEL_FROM {
        image.extend_from_slice(&one);
    }
    image.truncate(image.len() - page as usize / 2);
    let manifest = Manifest::with_shapes(&image, page).expect("manifest");
    let format = shape::Format::of(&image, page);
    let (ids, shapes): (Vec<PageId>, Vec<PageId>) = image
        .chunks(page as usize)
        .enumerate()
        .map(|(index, bytes)| {
            let id = PageId::of(bytes);
            (id, shape::shape(format, index as u32, bytes, id))
        })
        .unzip();
    assert_eq!(manifest.digest, sha256(&image));
    assert_eq!(manifest.ids, ids);
    assert_eq!(manifest.shapes, Some(shapes));
    assert_eq!(Manifest::of(&image, page).expect("manifest").ids, ids);
    assert_eq!(page_ids(&image, page), ids);
}

/// The file of a table keyed by text (`WITHOUT ROWID`, as app tables often are) with rows of
/// 200 B–12 KiB of hex, before and after eight short rows whose keys sort first: the leaf they
/// go into splits, and the rows it gives away move to another page. The file is read as the
/// edit leaves it (no VACUUM), as a push sends it.
fn split_leaf_images() -> (Vec<u8>, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!(
        "snug-delta-split-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&dir);
    let conn = rusqlite::Connection::open(&dir).expect("open");
    conn.execute_batch("CREATE TABLE equities (symbol TEXT PRIMARY KEY, name TEXT) WITHOUT ROWID")
        .expect("schema");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut hex = |len: usize| -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.push_str(&format!("{state:016x}"));
        }
        out.truncate(len);
        out
    };
    let tx = conn.unchecked_transaction().expect("tx");
    for i in 0..1_500 {
        let len = 200 + (i * 7919) % (12 << 10);
        tx.execute(
            "INSERT INTO equities VALUES (?1, ?2)",
            (format!("S{i:05}"), hex(len)),
        )
        .expect("row");
    }
    tx.commit().expect("commit");
    let before = std::fs::read(&dir).expect("read");
    let tx = conn.unchecked_transaction().expect("tx");
    for i in 0..8 {
        tx.execute(
            "INSERT INTO equities VALUES (?1, ?2)",
            (format!("A{i:04}"), hex(40 + i * 10)),
        )
        .expect("short row");
    }
    tx.commit().expect("commit");
    let after = std::fs::read(&dir).expect("read");
    drop(conn);
    std::fs::remove_file(&dir).expect("remove");
    (before, after)
}

/// A leaf that split travels as its new rows and references to the page its old rows are in,
/// not as pages of rows the receiver holds: a fraction of what the same pages cost literal,
/// each body compressed as it travels.
#[test]
fn a_split_leaf_costs_its_new_rows_not_its_pages() {
    let (source, target) = split_leaf_images();
    let page = page_size_of(&target);
    let theirs = Manifest::of(&source, page).expect("manifest");
    let layout = plan(
        &Manifest::of(&target, page).expect("manifest"),
        &theirs.source(),
    );
    assert!(layout.literal_count() >= 2, "{:?}", layout.runs);
    let literal = Delta::build(layout.clone(), &target, Some(&source));
    let compressed = Delta::build_compressed(layout, &target, &source);
    assert!(
        compressed.layout.compressed_count() >= 2,
        "{:?}",
        compressed.layout.runs
    );
    let body = |delta: &Delta| {
        zstd::bulk::compress(&delta.encode(), 3)
            .expect("zstd")
            .len()
    };
    let (literal_body, compressed_body) = (body(&literal), body(&compressed));
    eprintln!("a split leaf: {literal_body} bytes literal, {compressed_body} compressed");
    assert!(
        compressed_body * 8 <= literal_body,
        "{compressed_body} compressed, {literal_body} literal"
    );
    let parsed = Delta::parse(&compressed.encode(), &LARGE, source.len() as u64).expect("parse");
    assert_eq!(parsed.assemble(&source).expect("assemble"), target);
    // Against any other source the pages do not rebuild, and nothing is returned.
    let mut other = source.clone();
    let at = other.len() / 2;
    other[at..at + page as usize].fill(0x11);
    assert!(parsed.assemble(&other).is_err() || sha256(&other) == sha256(&source));
}

/// A page the edit left unlike anything the source holds stays literal: the body's coding
/// compresses it as well, and a frame it cannot compress again would cost more.
#[test]
fn unrelated_pages_stay_literal() {
    let source = image(&[1, 2, 3, 4]);
    let mut target = source.clone();
    let mut state = 7u32;
    for byte in &mut target[PAGE as usize..2 * PAGE as usize] {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        *byte = (state >> 16) as u8;
    }
    let layout = plan(
        &Manifest::of(&target, PAGE).expect("manifest"),
        &Source::ids(&page_ids(&source, PAGE)),
    );
    let delta = Delta::build_compressed(layout, &target, &source);
    assert_eq!(
        delta.layout.compressed_count(),
        0,
        "{:?}",
        delta.layout.runs
    );
    assert_eq!(delta.layout.literal_count(), 1);
}

#[test]
fn a_changed_page_refers_to_its_place_then_the_nearest_changes() {
    let many: Vec<u32> = (0..40).collect();
    // (page, changed pages, source pages, page size, references)
    type Case<'a> = (u32, &'a [u32], u32, u32, &'a [u32]);
    let cases: [Case<'_>; 8] = [
        (5, &[5], 10, 4096, &[5]),
        (5, &[2, 5, 7, 30], 40, 4096, &[5, 7, 2, 30]),
        (5, &[1, 2, 3, 4, 5, 6, 7], 10, 4096, &[5, 4, 6, 3, 7, 2, 1]),
        // A page past the source's end (a new page) refers to the changes within it.
        (12, &[3, 9, 12, 13], 10, 4096, &[9, 3]),
        (0, &[0, 1], 1, 4096, &[0]),
        (3, &[3], 0, 4096, &[]),
        // As many as fit 64 KiB: sixteen of 4 KiB, one of 64 KiB.
        (
            20,
            &many,
            40,
            4096,
            &[
                20, 19, 21, 18, 22, 17, 23, 16, 24, 15, 25, 14, 26, 13, 27, 12,
            ],
        ),
        (20, &many, 40, 65536, &[20]),
    ];
    for (to, changed, source_pages, page_size, expected) in cases {
        assert_eq!(
            compressed::references(to, changed, page_size, |p| p < source_pages),
            expected,
            "page {to} among {changed:?}"
        );
    }
}

/// One compressed page, `target` against `references` of `source`, as a wire delta.
fn compressed_wire(target: &[u8], source_pages: u32, references: &[u32], frame: &[u8]) -> Vec<u8> {
    let mut wire = raw_layout(target.len() as u64, source_pages, &[(3, 0, 1, 0)]);
    wire.extend_from_slice(&PageId::of(target).0);
    wire.push(references.len() as u8);
    for r in references {
        wire.extend_from_slice(&r.to_le_bytes());
    }
    wire.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    wire.extend_from_slice(frame);
    wire
}

#[test]
fn hostile_compressed_pages_are_refused() {
    // Pages of noise, so a frame of the first is nothing without it.
    let source: Vec<u8> = (0..2 * PAGE)
        .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(9) as u8)
        .collect();
    let mut target = source[..PAGE as usize].to_vec();
    target[10..14].copy_from_slice(b"edit");
    let frame = |page: &[u8], against: &[u8]| {
        let mut dict = vec![0];
        dict.extend_from_slice(against);
        zstd::bulk::Compressor::with_dictionary(3, &dict)
            .expect("compressor")
            .compress(page)
            .expect("frame")
    };
    let honest = frame(&target, &source[..PAGE as usize]);
    let check = |wire: Vec<u8>, expect: Expect| {
        let got = Delta::parse(&wire, &LIMITS, source.len() as u64)
            .and_then(|delta| delta.assemble(&source).map(|_| ()));
        expect.assert_eq(&format!("{got:?}"));
    };
    // The honest page, whose digest is not the layout's zeros: the page check passed.
    check(
        compressed_wire(&target, 2, &[0], &honest),
        expect!["Err(DigestMismatch)"],
    );
    // Against another page of the source it decodes to other bytes, or not at all.
    let got = Delta::parse(&compressed_wire(&target, 2, &[1], &honest), &LIMITS, 1024)
        .and_then(|delta| delta.assemble(&source).map(|_| ()));
    assert!(
        matches!(
            got,
            Err(DeltaError::PageMismatch { page: 0 } | DeltaError::Malformed { .. })
        ),
        "{got:?}"
    );
    check(
        compressed_wire(&target, 2, &[2], &honest),
        expect![[r#"Err(OutOfRange { page: 2, pages: 2, what: "source" })"#]],
    );
    check(
        compressed_wire(&target, 2, &[], &honest),
        expect![[
            r#"Err(Malformed { what: "a compressed page naming no source page, or too many" })"#
        ]],
    );
    check(
        compressed_wire(&target, 2, &[0; compressed::MAX_REFERENCES + 1], &honest),
        expect![[
            r#"Err(Malformed { what: "a compressed page naming no source page, or too many" })"#
        ]],
    );
    check(
        compressed_wire(&target, 2, &[0], b"not a zstd frame"),
        expect![[
            r#"Err(Malformed { what: "a compressed page that does not decode to its page" })"#
        ]],
    );
    // Frames of a page one byte short and one byte long.
    for wrong in [&target[1..], &[&target[..], b"x"].concat()[..]] {
        check(
            compressed_wire(&target, 2, &[0], &frame(wrong, &source[..PAGE as usize])),
            expect![[
                r#"Err(Malformed { what: "a compressed page that does not decode to its page" })"#
            ]],
        );
    }
    check(
        compressed_wire(&target, 2, &[0], &[0; 510]),
        expect![[r#"Err(Malformed { what: "a compressed page no smaller than its page" })"#]],
    );
    let mut short = compressed_wire(&target, 2, &[0], &honest);
    short.pop();
    check(
        short,
        expect![[
            r#"Err(Malformed { what: "literal pages that are not exactly what the layout names" })"#
        ]],
    );
}

proptest! {
    /// Pages rebuilt from pieces of source pages at any offset, with a few new bytes: the
    /// delta a sender holding the source builds always rebuilds the target.
    #[test]
    fn compressed_edits_round_trip(
        pieces in proptest::collection::vec((0usize..6 * 512, 1usize..300), 1..20),
        inserts in proptest::collection::vec((0usize..4096, any::<u8>()), 0..20),
    ) {
        let source: Vec<u8> = (0..6 * PAGE as usize)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8)
            .collect();
        let mut target: Vec<u8> = Vec::new();
        for (at, len) in pieces {
            target.extend_from_slice(&source[at..(at + len).min(source.len())]);
        }
        for (at, byte) in inserts {
            let at = at % (target.len() + 1);
            target.insert(at, byte);
        }
        let layout = plan(
            &Manifest::of(&target, PAGE).expect("manifest"),
            &Source::ids(&page_ids(&source, PAGE)),
        );
        let delta = Delta::build_compressed(layout, &target, &source);
        let parsed = Delta::parse(&delta.encode(), &LIMITS, source.len() as u64).expect("parse");
        prop_assert_eq!(parsed.assemble(&source).expect("assemble"), target);
    }
}

/// A receiver whose file is the source but for a few pages (its own header, here): compressed
/// pages refer only to the pages it holds as the source's, and the delta rebuilds the target
/// from its file, not from the source.
#[test]
fn a_receiver_holding_some_of_the_source_gets_pages_compressed_against_those() {
    let (source, target) = split_leaf_images();
    let page = page_size_of(&target);
    let mut theirs = source.clone();
    theirs[24..28].copy_from_slice(&[9, 9, 9, 9]);
    let (known, held_ids) = (page_ids(&source, page), page_ids(&theirs, page));
    let held: Vec<bool> = held_ids.iter().zip(&known).map(|(a, b)| a == b).collect();
    assert_eq!(held.iter().filter(|h| !**h).count(), 1);
    let layout = plan(
        &Manifest::of(&target, page).expect("manifest"),
        &Source::ids(&held_ids),
    );
    let delta = Delta::build_compressed_held(layout, &target, &source, &held);
    assert!(
        delta.layout.compressed_count() >= 2,
        "{:?}",
        delta.layout.runs
    );
    let parsed = Delta::parse(&delta.encode(), &LARGE, theirs.len() as u64).expect("parse");
    assert_eq!(parsed.assemble(&theirs).expect("assemble"), target);
    // Nothing refers to the page the receiver does not hold.
    let mut r = Reader::new(&delta.literals);
    for (to, make) in delta.layout.pages() {
        let len = delta.layout.geometry.page_len(to);
        match make {
            Make::Copy(_) => {}
            Make::Literal => {
                r.take(ID_LEN + len).expect("literal");
            }
            Make::Patch(_) => {
                r.take(ID_LEN).expect("id");
                for _ in 0..r.u16().expect("count") {
                    r.u16().expect("offset");
                    let n = r.u16().expect("length");
                    r.take(usize::from(n)).expect("bytes");
                }
            }
            Make::Compressed => {
                r.take(ID_LEN).expect("id");
                for _ in 0..r.u8().expect("count") {
                    assert_ne!(r.u32().expect("reference"), 0, "page {to}");
                }
                let n = r.u32().expect("frame length");
                r.take(n as usize).expect("frame");
            }
        }
    }
}
