//! Unit tests of the pieces that have no public seam of their own: the PBKDF2 fast path, the checksum, the header codec and secret normalisation.
#![allow(clippy::unwrap_used, reason = "tests")]

mod nonces;

use proptest::prelude::*;

use crate::format::{Header, Slot, SlotKind, header_checksum};
use crate::kdf::pbkdf2_hmac_sha256;
use crate::{Format, Passphrase, RecoveryKey, detect};

#[track_caller]
fn check_kdf(password: &[u8], salt: &[u8], iterations: u32) {
    let mut expected = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut expected);
    assert_eq!(
        hex::encode(*pbkdf2_hmac_sha256(password, salt, iterations)),
        hex::encode(expected),
        "password {} bytes, salt {} bytes, {iterations} iterations",
        password.len(),
        salt.len()
    );
}

#[test]
fn kdf_matches_the_pbkdf2_crate_at_block_boundaries() {
    let long = [0xa5u8; 200];
    for password_len in [0, 1, 31, 32, 55, 56, 63, 64, 65, 119, 120, 200] {
        for salt_len in [0, 16, 27, 28, 59, 60, 64] {
            for iterations in [0, 1, 2, 3, 1000] {
                check_kdf(&long[..password_len], &long[..salt_len], iterations);
            }
        }
    }
}

#[test]
fn kdf_matches_published_vectors() {
    // PBKDF2-HMAC-SHA256 vectors from RFC 7914 §11 and the widely reproduced RFC 6070 analogue.
    let cases: &[(&[u8], &[u8], u32, &str)] = &[
        (
            b"password",
            b"salt",
            1,
            "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b",
        ),
        (
            b"password",
            b"salt",
            2,
            "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43",
        ),
        (
            b"password",
            b"salt",
            4096,
            "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a",
        ),
        (
            b"passwd",
            b"salt",
            1,
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc",
        ),
    ];
    for &(password, salt, iterations, expected) in cases {
        assert_eq!(
            hex::encode(*pbkdf2_hmac_sha256(password, salt, iterations)),
            expected
        );
    }
}

proptest! {
    #[test]
    fn kdf_matches_the_pbkdf2_crate(password in proptest::collection::vec(any::<u8>(), 0..150), salt in any::<[u8; 16]>(), iterations in 0u32..40) {
        check_kdf(&password, &salt, iterations);
    }
}

#[test]
fn checksum_is_fnv1a_with_the_checksum_field_zeroed() {
    // FNV-1a/32 of the empty input is the offset basis, and of "a" a published value.
    assert_eq!(header_checksum(b""), 0x811c_9dc5);
    assert_eq!(header_checksum(b"a"), 0xe40c_292c);
    let mut header = vec![7u8; 160];
    let before = header_checksum(&header);
    header[34..38].copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(header_checksum(&header), before);
    header[33] ^= 1;
    assert_ne!(header_checksum(&header), before);
}

#[test]
fn header_encoding_is_the_reference_layout() {
    let header = Header {
        version: 1,
        kdf_id: 1,
        iterations: 1000,
        salt: *b"\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f",
        checksum: 0,
        slots: vec![
            Slot {
                kind: SlotKind::Passphrase,
                iv: [
                    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab,
                ],
            },
            Slot {
                kind: SlotKind::RecoveryKey,
                iv: [
                    0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb,
                ],
            },
        ],
    };
    let bytes = header.encode();
    assert_eq!(bytes.len(), 160);
    assert_eq!(header.len(), 160);
    // The c03 vector's first 38 bytes, checksum included.
    assert_eq!(
        hex::encode(&bytes[..38]),
        "534e5547454e43310a010001000003e8101112131415161718191a1b1c1d1e1f0002d0a18a3b"
    );
    assert_eq!(bytes[38], 1);
    assert_eq!(bytes[99], 2);
    assert!(bytes[51..99].iter().all(|&b| b == 0));
}

#[test]
fn slot_kinds_round_trip_through_their_byte() {
    for byte in 0..=u8::MAX {
        assert_eq!(SlotKind::from_byte(byte).to_byte(), byte);
    }
    assert_eq!(SlotKind::from_byte(1), SlotKind::Passphrase);
    assert_eq!(SlotKind::from_byte(2), SlotKind::RecoveryKey);
    assert_eq!(SlotKind::from_byte(3), SlotKind::Unknown(3));
}

#[test]
fn detect_reads_leading_bytes_only() {
    let cases: &[(&[u8], Format)] = &[
        (b"", Format::Unknown),
        (b"SNUGENC1", Format::Unknown),
        (b"SNUGENC1\n", Format::Container),
        (b"SNUGENC1\nanything", Format::Container),
        (b"SNUGENC2\n", Format::Unknown),
        (b"SQLite format 3", Format::Unknown),
        (b"SQLite format 3\0", Format::Sqlite),
        (b"SQLite format 3\0\x10\x00", Format::Sqlite),
        (b"{\"format\":\"snug-user-file/1\"}", Format::Unknown),
    ];
    for &(leading, expected) in cases {
        assert_eq!(detect(leading), expected, "{leading:?}");
    }
}

#[test]
fn passphrase_is_used_in_nfc() {
    let nfd = Passphrase::new("cafe\u{301}");
    assert_eq!(nfd.nfc().as_str(), "caf\u{e9}");
    assert_eq!(nfd.raw(), "cafe\u{301}");
}

#[test]
fn secrets_never_print() {
    let passphrase = Passphrase::new("hunter2");
    let recovery_key = RecoveryKey::parse("ABCDE-FGHJK-MNPQR-STVWX-YZ234-56");
    let file_key = crate::FileKey::from_bytes([0x42; 32]);
    let printed = format!(
        "{passphrase:?} {recovery_key:?} {file_key:?} {:?}",
        crate::Secrets {
            passphrase: Some(passphrase.clone()),
            recovery_key: Some(recovery_key.clone()),
        }
    );
    for secret in ["hunter2", "ABCDE", "42, 42", "4242"] {
        assert!(!printed.contains(secret), "{printed}");
    }
}

#[test]
fn sealing_in_place_gives_the_same_bytes_as_sealing_a_copy() {
    let material = || crate::SealMaterial {
        salt: [1; 16],
        file_key: crate::FileKey::from_bytes([2; 32]),
        passphrase_slot_iv: [3; 12],
        recovery_slot_iv: [4; 12],
        payload_iv: [5; 12],
    };
    let passphrase = Passphrase::new("p");
    let recovery_key = RecoveryKey::generate();
    let limits = crate::Limits {
        min_iterations: 1,
        ..crate::Limits::default()
    };
    for len in [0, 1, 15, 16, 17, 300, 4097] {
        let plaintext: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let copied = crate::seal_with(
            &plaintext,
            &passphrase,
            &recovery_key,
            10,
            &limits,
            material(),
        )
        .unwrap();
        let in_place =
            crate::seal::seal_owned_with(plaintext, &passphrase, &recovery_key, 10, material())
                .unwrap();
        assert_eq!(copied, in_place, "{len} bytes");
    }
}

/// Decrypts `ciphertext` with the streaming decryptor, cut at `cuts` (offsets, any order), and
/// returns the plaintext if `tag` verifies.
fn gcm_in_pieces(
    key: &[u8; 32],
    iv: &[u8; 12],
    aad: &[u8],
    ciphertext: &[u8],
    tag: &[u8],
    cuts: &[usize],
) -> Option<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (ciphertext.len() + 1)).collect();
    cuts.push(ciphertext.len());
    cuts.sort_unstable();
    let decrypted = gcm_in_pieces_as(key, iv, aad, ciphertext, tag, &cuts, false);
    let authenticated_first = gcm_in_pieces_as(key, iv, aad, ciphertext, tag, &cuts, true);
    assert_eq!(
        decrypted, authenticated_first,
        "hashing first decides and decrypts alike"
    );
    decrypted
}

/// [`gcm_in_pieces`] one way: decrypting each piece as it comes, or hashing the pieces and
/// decrypting only after the tag verifies, from the keystream `verify` returns (in steps at
/// the cuts, and then again whole, in place).
fn gcm_in_pieces_as(
    key: &[u8; 32],
    iv: &[u8; 12],
    aad: &[u8],
    ciphertext: &[u8],
    tag: &[u8],
    cuts: &[usize],
    authenticate_first: bool,
) -> Option<Vec<u8>> {
    let mut decryptor = crate::aead::GcmDecryptor::new(&crate::FileKey::from_bytes(*key), iv, aad);
    let mut buffer = ciphertext.to_vec();
    let mut start = 0;
    for &cut in cuts {
        if authenticate_first {
            decryptor.process(&mut buffer[start..cut], crate::aead::Pass::HashOnly);
            assert_eq!(
                buffer[start..cut],
                ciphertext[start..cut],
                "hashing changes nothing"
            );
        } else {
            decryptor.process(&mut buffer[start..cut], crate::aead::Pass::HashAndDecrypt);
        }
        start = cut;
    }
    let mut keystream = decryptor.verify(tag).ok()?;
    if !authenticate_first {
        return Some(buffer);
    }
    let mut stepped = vec![0u8; buffer.len()];
    let mut start = 0;
    for &cut in cuts {
        keystream.decrypt(&buffer[start..cut], &mut stepped[start..cut]);
        start = cut;
    }
    keystream.decrypt_whole_in_place(&mut buffer);
    assert_eq!(stepped, buffer, "decrypting in steps and whole agree");
    Some(buffer)
}

fn aes_gcm_seal(key: &[u8; 32], iv: &[u8; 12], aad: &[u8], plaintext: &[u8]) -> (Vec<u8>, Vec<u8>) {
    use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce};
    let mut ciphertext = plaintext.to_vec();
    let tag = Aes256Gcm::new(key.into())
        .encrypt_inout_detached(&Nonce::from(*iv), aad, ciphertext.as_mut_slice().into())
        .unwrap();
    (ciphertext, tag.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn streaming_gcm_matches_aes_gcm_for_any_split(
        key in any::<[u8; 32]>(),
        iv in any::<[u8; 12]>(),
        aad in proptest::collection::vec(any::<u8>(), 0..600),
        plaintext in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        flip in any::<(usize, u8)>(),
    ) {
        let (ciphertext, tag) = aes_gcm_seal(&key, &iv, &aad, &plaintext);
        let opened = gcm_in_pieces(&key, &iv, &aad, &ciphertext, &tag, &cuts);
        prop_assert_eq!(opened.as_deref(), Some(plaintext.as_slice()));

        // Any change to the AAD, the ciphertext or the tag fails, wherever it is cut.
        let xor = flip.1.max(1);
        let mut aad_changed = aad.clone();
        if !aad_changed.is_empty() {
            let idx = flip.0 % aad_changed.len();
            aad_changed[idx] ^= xor;
            prop_assert!(gcm_in_pieces(&key, &iv, &aad_changed, &ciphertext, &tag, &cuts).is_none());
        }
        let mut sealed = [ciphertext.as_slice(), &tag].concat();
        let idx = flip.0 % sealed.len();
        sealed[idx] ^= xor;
        let (changed_ciphertext, changed_tag) = sealed.split_at(ciphertext.len());
        prop_assert!(gcm_in_pieces(&key, &iv, &aad, changed_ciphertext, changed_tag, &cuts).is_none());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Pieces of 4 MiB and more are split between two threads; cuts anywhere around them.
    #[test]
    fn streaming_gcm_on_two_threads_matches_aes_gcm(
        len in 8_000_000usize..9_500_000,
        cuts in proptest::collection::vec(any::<usize>(), 0..3),
        aad_len in 0usize..600,
    ) {
        let key = [0x11; 32];
        let iv = [0x22; 12];
        let aad = vec![0x33; aad_len];
        let plaintext: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
        let (ciphertext, tag) = aes_gcm_seal(&key, &iv, &aad, &plaintext);
        let opened = gcm_in_pieces(&key, &iv, &aad, &ciphertext, &tag, &cuts);
        prop_assert!(opened.as_deref() == Some(plaintext.as_slice()));
        let mut wrong_tag = tag.clone();
        wrong_tag[len % 16] ^= 1;
        prop_assert!(gcm_in_pieces(&key, &iv, &aad, &ciphertext, &wrong_tag, &cuts).is_none());
    }
}

#[test]
fn field_arithmetic_through_ghash_is_gcm_multiplication() {
    use ghash::universal_hash::UniversalHash;
    let h = ghash::Block::from([
        0x66, 0xe9, 0x4b, 0xd4, 0xef, 0x8a, 0x2c, 0x3b, 0x88, 0x4c, 0xfa, 0x59, 0xca, 0x34, 0x2b,
        0x2e,
    ]);
    let mut one = ghash::Block::default();
    one[0] = 0x80;
    assert_eq!(crate::aead::gf_mul(&h, &one), h);
    assert_eq!(crate::aead::gf_pow(&h, 0), one);
    assert_eq!(crate::aead::gf_pow(&h, 1), h);
    // GHASH of k zero blocks after a block X is X·H^(k+1).
    let x = ghash::Block::from([0x5a; 16]);
    for k in [0u64, 1, 2, 7, 100] {
        let mut ghash = ghash::GHash::new(&h);
        ghash.update(&[x]);
        for _ in 0..k {
            ghash.update(&[ghash::Block::default()]);
        }
        let expected = ghash.finalize();
        assert_eq!(
            crate::aead::gf_mul(&x, &crate::aead::gf_pow(&h, k + 1)),
            expected,
            "k = {k}"
        );
    }
}

#[test]
fn streaming_gcm_matches_aes_gcm_across_strides_and_odd_lengths() {
    let key = [7u8; 32];
    let iv = [9u8; 12];
    let aad = [3u8; 160];
    // Around the 32 KiB stride, the 16-byte block and the 4 MiB two-thread threshold, cut at
    // awkward places.
    for len in [
        0,
        1,
        15,
        16,
        17,
        32 * 1024 - 1,
        32 * 1024,
        32 * 1024 + 1,
        200_003,
        9_000_017,
    ] {
        let plaintext: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
        let (ciphertext, tag) = aes_gcm_seal(&key, &iv, &aad, &plaintext);
        let cuts_of = [
            vec![],
            vec![1],
            vec![7, 23, 40_000],
            vec![32 * 1024 + 5, 65_536 + 3],
            vec![5, 4 * 1024 * 1024 + 5, 4 * 1024 * 1024 + 13],
        ];
        for cuts in cuts_of {
            let opened = gcm_in_pieces(&key, &iv, &aad, &ciphertext, &tag, &cuts);
            assert_eq!(
                opened.as_deref(),
                Some(plaintext.as_slice()),
                "{len} bytes, cuts {cuts:?}"
            );
        }
        assert!(gcm_in_pieces(&key, &iv, &aad, &ciphertext, &tag[..15], &[]).is_none());
        assert!(gcm_in_pieces(&key, &[8; 12], &aad, &ciphertext, &tag, &[]).is_none());
    }
}
