//! PBKDF2-HMAC-SHA256 (KDF id 0x0001) with the HMAC pads hashed once and each iteration reduced to two SHA-256 block compressions.
//!
//! Unlocking is dominated by this function (600,000 iterations), so it works on the compression
//! function directly instead of going through a generic `Mac`: the keyed inner and outer states are
//! computed once, and every later iteration compresses one pre-padded 64-byte block on each of
//! them. That is the theoretical floor of PBKDF2 (two compressions per iteration); SHA-NI is used
//! where the CPU has it. The result is checked against the `pbkdf2` crate in this crate's tests.

use sha2::{Digest, Sha256, block_api::compress256};
use zeroize::{Zeroize, Zeroizing};

/// SHA-256 initial hash value (FIPS 180-4 §5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

const BLOCK_LEN: usize = 64;

/// Returns the key-encryption key PBKDF2-HMAC-SHA256(`secret`, `salt`, `iterations`, 32 bytes).
///
/// `secret` is the UTF-8 the caller chose (NFC or raw passphrase, normalised recovery key). An
/// iteration count of 0 yields the first PBKDF2 block, as the `pbkdf2` crate does; readers refuse
/// such headers through [`crate::Limits`] before ever getting here.
pub fn derive_kek(secret: &[u8], salt: &[u8; 16], iterations: u32) -> Zeroizing<[u8; 32]> {
    pbkdf2_hmac_sha256(secret, salt, iterations)
}

pub(crate) fn pbkdf2_hmac_sha256(
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Zeroizing<[u8; 32]> {
    // HMAC keys longer than a block are hashed first (RFC 2104 §2).
    let mut key_block = Zeroizing::new([0u8; BLOCK_LEN]);
    if password.len() > BLOCK_LEN {
        let mut digest = Sha256::digest(password);
        key_block[..32].copy_from_slice(&digest);
        digest.as_mut_slice().zeroize();
    } else {
        key_block[..password.len()].copy_from_slice(password);
    }
    let mut pad = Zeroizing::new([0u8; BLOCK_LEN]);
    let mut inner = Zeroizing::new(SHA256_IV);
    pad.iter_mut()
        .zip(key_block.iter())
        .for_each(|(p, k)| *p = k ^ 0x36);
    compress256(&mut inner, std::slice::from_ref(&*pad));
    let mut outer = Zeroizing::new(SHA256_IV);
    pad.iter_mut()
        .zip(key_block.iter())
        .for_each(|(p, k)| *p = k ^ 0x5c);
    compress256(&mut outer, std::slice::from_ref(&*pad));

    // U1 = HMAC(password, salt || INT(1)); the only iteration whose message length varies.
    let mut message = Zeroizing::new(Vec::with_capacity(salt.len() + 4));
    message.extend_from_slice(salt);
    message.extend_from_slice(&1u32.to_be_bytes());
    let mut state = Zeroizing::new(*inner);
    finish(&mut state, &message);
    // Every later HMAC message is one 32-byte digest after a 64-byte key block: 96 bytes = 768
    // bits. Both blocks below carry that padding once and only their first 32 bytes change.
    let mut digest_block = Zeroizing::new([0u8; BLOCK_LEN]);
    digest_block[32] = 0x80;
    digest_block[62] = 0x03;
    store_be(&state, &mut digest_block[..]);
    *state = *outer;
    compress256(&mut state, std::slice::from_ref(&*digest_block));

    let mut t = Zeroizing::new(*state);
    let mut u_block = Zeroizing::new(*digest_block);
    for _ in 1..iterations {
        store_be(&state, &mut u_block[..]);
        *state = *inner;
        compress256(&mut state, std::slice::from_ref(&*u_block));
        store_be(&state, &mut digest_block[..]);
        *state = *outer;
        compress256(&mut state, std::slice::from_ref(&*digest_block));
        t.iter_mut().zip(state.iter()).for_each(|(t, u)| *t ^= u);
    }
    let mut kek = Zeroizing::new([0u8; 32]);
    store_be(&t, &mut kek[..]);
    kek
}

/// Completes a SHA-256 whose first 64 bytes are already compressed into `state` with `data`, and
/// leaves the digest words in `state`.
fn finish(state: &mut [u32; 8], data: &[u8]) {
    let bit_len = ((BLOCK_LEN + data.len()) as u64) * 8;
    let mut tail = Zeroizing::new(Vec::with_capacity(data.len() + 1 + 8 + BLOCK_LEN));
    tail.extend_from_slice(data);
    tail.push(0x80);
    while (tail.len() + 8) % BLOCK_LEN != 0 {
        tail.push(0);
    }
    tail.extend_from_slice(&bit_len.to_be_bytes());
    let (blocks, rest) = tail.as_chunks::<BLOCK_LEN>();
    debug_assert!(rest.is_empty());
    compress256(state, blocks);
}

/// Writes the eight digest words big-endian into the first 32 bytes of `out`.
fn store_be(words: &[u32; 8], out: &mut [u8]) {
    for (chunk, word) in out.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
}
