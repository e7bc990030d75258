//! Fuzz target: arbitrary bytes parsed as a manifest and as a delta against sources of several sizes, and every delta that parses assembled; nothing may panic, and whatever assembles must hash to the digest it claims.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snug_delta::{Delta, Limits, Manifest, sha256};

const LIMITS: Limits = Limits {
    max_length: 1 << 20,
};

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::parse(data, &LIMITS);
    for source_len in [0u64, 512, 1500, 8 * 4096] {
        if let Ok(delta) = Delta::parse(data, &LIMITS, source_len) {
            let source = vec![0x5a; source_len as usize];
            if let Ok(image) = delta.assemble(&source) {
                assert_eq!(sha256(&image), delta.layout.digest);
                assert_eq!(image.len() as u64, delta.layout.geometry.length);
            }
        }
    }
});
