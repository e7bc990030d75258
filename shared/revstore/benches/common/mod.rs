//! Helpers the store's benchmarks share: deterministic image bytes, a client-like stream of
//! them, and medians.

#![allow(dead_code, unreachable_pub)]

use std::{io, time::Duration};

use bytes::Bytes;

/// Deterministic pseudo-random bytes (xorshift64*), different per seed.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The bytes as a client stream would deliver them: 64 KiB pieces, no copies.
pub fn stream_of(bytes: &Bytes) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + use<> {
    let pieces: Vec<io::Result<Bytes>> = (0..bytes.len())
        .step_by(64 * 1024)
        .map(|at| Ok(bytes.slice(at..(at + 64 * 1024).min(bytes.len()))))
        .collect();
    futures::stream::iter(pieces)
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
