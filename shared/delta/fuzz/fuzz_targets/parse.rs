//! Fuzz target: arbitrary bytes parsed as a manifest, as a sparse manifest (expanded against a known one) and as a delta against sources of several sizes, and every delta that parses assembled; nothing may panic, and whatever assembles must hash to the digest it claims. The same bytes, halved, are also a source and a target whose pages are read for their shapes, planned and built with patches and with compressed pages: the delta must rebuild the target exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snug_delta::{Delta, Limits, Manifest, Source, Sparse, plan, sha256};

const LIMITS: Limits = Limits {
    max_length: 1 << 20,
};
const PAGE: u32 = 512;

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::parse(data, &LIMITS);
    if let Ok(sparse) = Sparse::parse(data, &LIMITS) {
        let known = Manifest::with_shapes(&[0x5a; 8 * 512], PAGE).expect("manifest");
        if let Ok(expanded) = sparse.expand(&known) {
            assert_eq!(expanded.ids.len() as u32, sparse.geometry.pages());
            assert_eq!(Sparse::parse(&sparse.encode(), &LIMITS).as_ref(), Ok(&sparse));
        }
    }
    for source_len in [0u64, 512, 1500, 8 * 4096] {
        if let Ok(delta) = Delta::parse(data, &LIMITS, source_len) {
            let source = vec![0x5a; source_len as usize];
            if let Ok(image) = delta.assemble(&source) {
                assert_eq!(sha256(&image), delta.layout.digest);
                assert_eq!(image.len() as u64, delta.layout.geometry.length);
            }
        }
    }
    // Untrusted pages read for their shapes (any bytes may claim to be a b-tree page), then a
    // round trip with and without the source's bytes, and with changed pages compressed against it.
    let (source, target) = data.split_at(data.len() / 2);
    if source.is_empty() || target.is_empty() {
        return;
    }
    let (Ok(theirs), Ok(ours)) = (
        Manifest::with_shapes(source, PAGE),
        Manifest::with_shapes(target, PAGE),
    ) else {
        return;
    };
    for bytes in [None, Some(source)] {
        let layout = plan(&ours, &Source { bytes, ..theirs.source() });
        let wire = Delta::build(layout, target, bytes).encode();
        let delta = Delta::parse(&wire, &LIMITS, source.len() as u64).expect("a built delta parses");
        // Without the source's bytes a shape match may be a collision or fields the source
        // places elsewhere; the page check then refuses it. Whatever assembles is the target.
        match delta.assemble(source) {
            Ok(image) => assert_eq!(image, target),
            Err(_) => assert!(bytes.is_none()),
        }
    }
    // A sender holding the source compresses changed pages against it: always the target.
    let layout = plan(&ours, &theirs.source());
    let wire = Delta::build_compressed(layout, target, source).encode();
    let delta = Delta::parse(&wire, &LIMITS, source.len() as u64).expect("a built delta parses");
    assert_eq!(delta.assemble(source).expect("a built delta assembles"), target);
});
