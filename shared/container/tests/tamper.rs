//! Damage and hostile input: every single-byte change, every truncation and arbitrary bytes after the magic must give locked or corrupt, never plaintext and never a panic, and hostile headers must be refused before any PBKDF2.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::time::{Duration, Instant};

use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce};
use common::{ITERATIONS, LIMITS, PASSPHRASE, patch_header, sample};
use proptest::prelude::*;
use snug_container::{
    Corruption, Header, Limits, MAGIC, OpenError, Passphrase, RecoveryKey, Secrets, Slot, SlotKind,
    derive_kek, inspect, open, open_owned,
};

/// Limits for hostile input: a header may ask for at most 2,000 iterations, so no case is slow.
const CHEAP: Limits = Limits {
    min_iterations: 1,
    max_iterations: 2_000,
    max_plaintext: 1 << 20,
};

/// Single-byte edits: every bit flip and the complement.
fn edits() -> impl Iterator<Item = u8> {
    (0..8).map(|bit| 1u8 << bit).chain([0xff])
}

fn mutated(container: &[u8], idx: usize, xor: u8) -> Vec<u8> {
    let mut mutated = container.to_vec();
    mutated[idx] ^= xor;
    mutated
}

#[test]
fn any_header_change_is_corrupt_with_either_secret() {
    let sample = sample(&[0x42; 64]);
    for idx in 0..160 {
        for xor in edits() {
            let damaged = mutated(&sample.container, idx, xor);
            for secrets in [sample.by_passphrase(), sample.by_recovery_key()] {
                let err = open(&damaged, &secrets, &LIMITS).unwrap_err();
                // FNV-1a steps are bijections, so a one-byte change always changes the checksum,
                // and a failed checksum is damage even where the byte is the version or KDF id
                // (§11.2 rule 6): never reported as a newer format.
                assert!(
                    matches!(&err, OpenError::Corrupt(c) if !c.is_unsupported()),
                    "byte {idx} ^ {xor:#04x}: {err:?}"
                );
            }
        }
    }
}

#[test]
fn a_damaged_wrapped_key_locks_its_own_slot_only() {
    let sample = sample(&[0x42; 64]);
    for idx in 160..256 {
        let (damaged_slot, intact_slot) = if idx < 208 {
            (sample.by_passphrase(), sample.by_recovery_key())
        } else {
            (sample.by_recovery_key(), sample.by_passphrase())
        };
        for xor in edits() {
            let damaged = mutated(&sample.container, idx, xor);
            assert_eq!(
                open(&damaged, &damaged_slot, &LIMITS).unwrap_err(),
                OpenError::Locked,
                "byte {idx}"
            );
            // Slots are independent: the other secret still opens the file.
            assert_eq!(
                open(&damaged, &intact_slot, &LIMITS).unwrap().plaintext,
                sample.plaintext
            );
        }
    }
}

#[test]
fn a_damaged_payload_iv_ciphertext_or_tag_is_corrupt() {
    let sample = sample(&[0x42; 64]);
    let len = sample.container.len();
    let payload_bytes = (256..268).chain([268, 269, 300, len - 17, len - 16, len - 8, len - 1]);
    for idx in payload_bytes {
        for xor in edits() {
            let damaged = mutated(&sample.container, idx, xor);
            for secrets in [sample.by_passphrase(), sample.by_recovery_key()] {
                assert_eq!(
                    open_owned(damaged.clone(), &secrets, &LIMITS).unwrap_err(),
                    OpenError::Corrupt(Corruption::PayloadAuthenticationFailed),
                    "byte {idx} ^ {xor:#04x}"
                );
            }
            // A wrong secret never gets as far as the payload.
            assert_eq!(
                open(
                    &damaged,
                    &Secrets::passphrase(Passphrase::new("nope")),
                    &LIMITS
                )
                .unwrap_err(),
                OpenError::Locked
            );
        }
    }
}

#[test]
fn every_truncation_and_extension_fails() {
    let sample = sample(&[0x42; 64]);
    let len = sample.container.len();
    for cut in 0..len {
        let expected = match cut {
            0..9 => Corruption::NotAContainer,
            9..38 => Corruption::TruncatedHeader,
            38..284 => Corruption::TruncatedBody,
            _ => Corruption::PayloadAuthenticationFailed,
        };
        let err = open(&sample.container[..cut], &sample.by_passphrase(), &LIMITS).unwrap_err();
        assert_eq!(err, OpenError::Corrupt(expected), "truncated to {cut}");
    }
    let mut extended = sample.container.clone();
    extended.push(0);
    assert_eq!(
        open(&extended, &sample.by_passphrase(), &LIMITS).unwrap_err(),
        OpenError::Corrupt(Corruption::PayloadAuthenticationFailed)
    );
}

#[test]
fn hostile_iteration_counts_are_refused_before_any_key_derivation() {
    let sample = sample(b"data");
    for iterations in [0, 1, 9_999, 10_000_001, u32::MAX] {
        let hostile = patch_header(&sample.container, 160, |bytes| {
            bytes[12..16].copy_from_slice(&iterations.to_be_bytes())
        });
        let started = Instant::now();
        let err = open(&hostile, &sample.by_passphrase(), &Limits::default()).unwrap_err();
        // Zero is damage whatever the policy; any other count is a setting (§11.1).
        let expected = if iterations == 0 {
            Corruption::ZeroIterations
        } else {
            Corruption::IterationsOutOfRange {
                iterations,
                min: 10_000,
                max: 10_000_000,
            }
        };
        assert_eq!(expected.is_out_of_policy(), iterations != 0);
        assert_eq!(err, OpenError::Corrupt(expected));
        // u32::MAX iterations would run for minutes.
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{iterations}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn slot_counts_out_of_range_are_corrupt_and_newer_formats_unsupported() {
    let sample = sample(b"data");
    let cases: [(usize, &[u8], Corruption); 6] = [
        (32, &[0, 0], Corruption::ImplausibleSlotCount(0)),
        (32, &[0, 9], Corruption::ImplausibleSlotCount(9)),
        (32, &[0xff, 0xff], Corruption::ImplausibleSlotCount(65_535)),
        (32, &[0, 8], Corruption::TruncatedBody),
        (9, &[2], Corruption::UnsupportedVersion(2)),
        (10, &[0, 2], Corruption::UnsupportedKdf(2)),
    ];
    for (at, bytes, expected) in cases {
        let patched = patch_header(&sample.container, 160, |b| {
            b[at..at + bytes.len()].copy_from_slice(bytes)
        });
        assert_eq!(inspect(&patched, &LIMITS).unwrap_err(), expected);
        assert_eq!(
            open(&patched, &sample.by_passphrase(), &LIMITS).unwrap_err(),
            OpenError::Corrupt(expected.clone())
        );
        assert_eq!(expected.is_unsupported(), at != 32);
    }
}

/// §11.2 rule 6 in both orders: an unknown version or KDF id under a failing checksum is damage
/// (CORRUPT), under a valid checksum a newer format (UNSUPPORTED_FORMAT_VERSION).
#[test]
fn a_failed_checksum_is_damage_whatever_the_version_or_kdf_say() {
    let sample = sample(b"data");
    let corrupt = &snug_reasons::container::CORRUPT;
    let unsupported = &snug_reasons::container::UNSUPPORTED_FORMAT_VERSION;
    let cases: [(usize, &[u8]); 4] = [(9, &[2]), (9, &[0xff]), (10, &[0, 2]), (10, &[0x80, 1])];
    for (at, bytes) in cases {
        let mut raw = sample.container.clone();
        raw[at..at + bytes.len()].copy_from_slice(bytes);
        let checked = patch_header(&sample.container, 160, |b| {
            b[at..at + bytes.len()].copy_from_slice(bytes)
        });
        for (container, expected) in [(&raw, corrupt), (&checked, unsupported)] {
            let inspected = inspect(container, &LIMITS).unwrap_err();
            assert_eq!(inspected.reason(), expected, "byte {at}: {inspected:?}");
            let OpenError::Corrupt(opened) =
                open(container, &sample.by_passphrase(), &LIMITS).unwrap_err()
            else {
                panic!("byte {at}: a header problem must be reported before any secret is tried");
            };
            assert_eq!(opened, inspected);
        }
        assert!(matches!(
            inspect(&raw, &LIMITS).unwrap_err(),
            Corruption::HeaderChecksumMismatch { .. }
        ));
    }
}

/// Builds an eight-slot container whose only working slot is the last, a passphrase slot; the
/// others are a recovery slot with garbage and unknown kinds.
fn eight_slots() -> Vec<u8> {
    let mut slots: Vec<Slot> = (0..8u8)
        .map(|i| Slot {
            kind: SlotKind::from_byte(if i == 0 { 2 } else { 0x10 + i }),
            iv: [i; 12],
        })
        .collect();
    slots[7].kind = SlotKind::Passphrase;
    let header = Header {
        version: 1,
        kdf_id: 1,
        iterations: ITERATIONS,
        salt: [9; 16],
        checksum: 0,
        slots,
    }
    .encode();
    assert_eq!(header.len(), 38 + 61 * 8);
    let file_key = [0x33u8; 32];
    let kek = derive_kek(PASSPHRASE.as_bytes(), &[9; 16], ITERATIONS);
    let mut wrapped = file_key;
    let tag = Aes256Gcm::new((&*kek).into())
        .encrypt_inout_detached(
            &Nonce::from([7; 12]),
            &header,
            wrapped.as_mut_slice().into(),
        )
        .unwrap();
    let mut payload = b"eight slots".to_vec();
    let payload_tag = Aes256Gcm::new((&file_key).into())
        .encrypt_inout_detached(
            &Nonce::from([0xee; 12]),
            &header,
            payload.as_mut_slice().into(),
        )
        .unwrap();
    let mut container = header;
    container.extend_from_slice(&[0xab; 48 * 7]);
    container.extend_from_slice(&wrapped);
    container.extend_from_slice(&tag);
    container.extend_from_slice(&[0xee; 12]);
    container.extend_from_slice(&payload);
    container.extend_from_slice(&payload_tag);
    container
}

#[test]
fn eight_slots_are_read_and_unknown_kinds_skipped() {
    let container = eight_slots();
    let info = inspect(&container, &LIMITS).unwrap();
    assert_eq!(
        (info.header.slots.len(), info.header_len, info.plaintext_len),
        (8, 526, 11)
    );
    let unlocked = open(
        &container,
        &Secrets::passphrase(Passphrase::new(PASSPHRASE)),
        &LIMITS,
    )
    .unwrap();
    assert_eq!(
        (
            unlocked.plaintext.as_slice(),
            unlocked.opened_by,
            unlocked.slot_index
        ),
        (&b"eight slots"[..], SlotKind::Passphrase, 7)
    );
    let key = RecoveryKey::generate();
    assert_eq!(
        open(&container, &Secrets::recovery_key(key), &LIMITS).unwrap_err(),
        OpenError::Locked
    );
}

#[test]
fn largest_overhead_is_eight_slots() {
    let container = eight_slots();
    assert_eq!(container.len() as u64 - 11, snug_container::MAX_OVERHEAD);
    assert_eq!(
        Limits::default().max_container_len(),
        snug_container::MAX_USERDB_BYTES + 938
    );
}

/// Fixes up `bytes` so that it passes every structural check: magic, version, KDF, a slot count
/// it has room for, a cheap iteration count and the checksum.
fn plausible(mut bytes: Vec<u8>, n_slots: u16, iterations: u16) -> Vec<u8> {
    bytes.resize(bytes.len().max(38), 0);
    bytes[..9].copy_from_slice(MAGIC);
    bytes[9] = 1;
    bytes[10..12].copy_from_slice(&[0, 1]);
    bytes[12..16].copy_from_slice(&u32::from(iterations).to_be_bytes());
    bytes[32..34].copy_from_slice(&n_slots.to_be_bytes());
    let header_len = (38 + 61 * usize::from(n_slots)).min(bytes.len());
    patch_header(&bytes, header_len, |_| {})
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn garbage_after_the_magic_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&tail);
        let secrets = Secrets { passphrase: Some(Passphrase::new(PASSPHRASE)), recovery_key: Some(RecoveryKey::generate()) };
        let _ = inspect(&bytes, &CHEAP);
        prop_assert!(open(&bytes, &secrets, &CHEAP).is_err());
    }

    #[test]
    fn structurally_valid_garbage_is_locked(
        tail in proptest::collection::vec(any::<u8>(), 0..1200),
        n_slots in 1u16..=8,
        iterations in 1u16..=2_000,
    ) {
        let bytes = plausible([MAGIC.as_slice(), &tail].concat(), n_slots, iterations);
        let secrets = Secrets { passphrase: Some(Passphrase::new(PASSPHRASE)), recovery_key: Some(RecoveryKey::generate()) };
        match open_owned(bytes.clone(), &secrets, &CHEAP) {
            Err(OpenError::Locked | OpenError::Corrupt(Corruption::TruncatedBody)) => {}
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
