//! Round trips through the public API: seal then open with either secret, secret changes that touch only their own slot, reseal, recovery-key generation, and the refusals of each operation.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::HashSet;

use common::{ITERATIONS, LIMITS, PASSPHRASE, patch_header, sample};
use proptest::prelude::*;
use snug_container::{
    Corruption, FileKey, Limits, OpenError, Passphrase, RECOVERY_KEY_ALPHABET, RecoveryKey,
    RewrapError, SealError, SealMaterial, Secrets, SlotKind, change_passphrase, derive_kek,
    inspect, open, open_file_key, open_owned, open_owned_with_file_key, remove_protection, reseal,
    reseal_owned, rotate_recovery_key, rotate_recovery_key_to, seal, seal_owned, seal_with,
};

/// Offsets in a two-slot container.
const PASSPHRASE_WRAPPED: std::ops::Range<usize> = 160..208;
const RECOVERY_WRAPPED: std::ops::Range<usize> = 208..256;
const PAYLOAD_IV: std::ops::Range<usize> = 256..268;

fn differing(a: &[u8], b: &[u8]) -> Vec<usize> {
    assert_eq!(a.len(), b.len());
    (0..a.len()).filter(|&i| a[i] != b[i]).collect()
}

#[track_caller]
fn assert_opens(container: &[u8], secrets: &Secrets, plaintext: &[u8], kind: SlotKind) {
    let unlocked = open(container, secrets, &LIMITS).unwrap();
    assert_eq!(unlocked.plaintext, plaintext);
    assert_eq!(unlocked.opened_by, kind);
}

#[track_caller]
fn assert_locked(container: &[u8], secrets: &Secrets) {
    assert_eq!(
        open(container, secrets, &LIMITS).unwrap_err(),
        OpenError::Locked
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_plaintext_and_passphrase_round_trip(
        plaintext in proptest::collection::vec(any::<u8>(), 0..4096),
        passphrase in "\\PC{1,24}",
        entropy in any::<[u8; 32]>(),
    ) {
        let recovery_key = RecoveryKey::from_entropy_source(|buf| {
            buf.copy_from_slice(&entropy);
            // A source that never varies could reject forever; mix in the position.
            for (i, byte) in buf.iter_mut().enumerate() { *byte = byte.wrapping_add(i as u8) % 240; }
        });
        let passphrase = Passphrase::new(passphrase);
        let container = seal(&plaintext, &passphrase, &recovery_key, ITERATIONS, &LIMITS).unwrap();
        prop_assert_eq!(container.len(), 284 + plaintext.len());
        assert_opens(&container, &Secrets::passphrase(passphrase.clone()), &plaintext, SlotKind::Passphrase);
        assert_opens(&container, &Secrets::recovery_key(recovery_key.clone()), &plaintext, SlotKind::RecoveryKey);
        let owned = open_owned(container.clone(), &Secrets::passphrase(passphrase), &LIMITS).unwrap();
        prop_assert_eq!(owned.plaintext, plaintext);
    }

    #[test]
    fn nfc_and_nfd_spellings_open_each_other(
        parts in proptest::collection::vec(prop::sample::select(vec![
            ("\u{e9}", "e\u{301}"), ("\u{c5}", "A\u{30a}"), ("\u{f1}", "n\u{303}"),
            ("\u{d55c}", "\u{1112}\u{1161}\u{11ab}"), ("\u{1e69}", "s\u{323}\u{307}"), ("x", "x"), (" ", " "),
        ]), 1..6),
    ) {
        let nfc: String = parts.iter().map(|p| p.0).collect();
        let nfd: String = parts.iter().map(|p| p.1).collect();
        let recovery_key = RecoveryKey::generate();
        for (sealed_with, opened_with) in [(&nfc, &nfd), (&nfd, &nfc), (&nfd, &nfd)] {
            let container = seal(b"payload", &Passphrase::new(sealed_with.as_str()), &recovery_key, ITERATIONS, &LIMITS).unwrap();
            assert_opens(&container, &Secrets::passphrase(Passphrase::new(opened_with.as_str())), b"payload", SlotKind::Passphrase);
        }
    }
}

#[test]
fn a_non_normalising_writer_s_nfd_passphrase_still_opens() {
    use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce};
    // The reference derives the KEK from the passphrase bytes as typed. Build such a slot by hand:
    // wrap a known file key under the KEK of the raw NFD bytes.
    let nfd = "cafe\u{301} cre\u{300}me";
    let nfc = "caf\u{e9} cr\u{e8}me";
    let file_key = [0x5a; 32];
    let material = SealMaterial {
        salt: [1; 16],
        file_key: FileKey::from_bytes(file_key),
        passphrase_slot_iv: [2; 12],
        recovery_slot_iv: [3; 12],
        payload_iv: [4; 12],
    };
    let mut container = seal_with(
        b"x",
        &Passphrase::new("placeholder"),
        &RecoveryKey::generate(),
        ITERATIONS,
        &LIMITS,
        material,
    )
    .unwrap();
    let kek = derive_kek(nfd.as_bytes(), &[1; 16], ITERATIONS);
    let mut wrapped = file_key;
    let tag = Aes256Gcm::new((&*kek).into())
        .encrypt_inout_detached(
            &Nonce::from([2; 12]),
            &container[..160],
            wrapped.as_mut_slice().into(),
        )
        .unwrap();
    container[160..192].copy_from_slice(&wrapped);
    container[192..208].copy_from_slice(&tag);

    assert_opens(
        &container,
        &Secrets::passphrase(Passphrase::new(nfd)),
        b"x",
        SlotKind::Passphrase,
    );
    // Typed in NFC there is no way back to the writer's bytes: one candidate only, and it fails.
    assert_locked(&container, &Secrets::passphrase(Passphrase::new(nfc)));
}

#[test]
fn each_secret_opens_only_its_own_slot() {
    // A passphrase that is also a well-formed recovery key, and a recovery key typed as a passphrase.
    let passphrase = Passphrase::new("ABCDEFGHJKMNPQRSTVWXYZ23456");
    let recovery_key = RecoveryKey::parse("23456-789AB-CDEFG-HJKMN-PQRST-VW");
    assert!(recovery_key.is_plausible());
    let container = seal(b"data", &passphrase, &recovery_key, ITERATIONS, &LIMITS).unwrap();
    assert_locked(
        &container,
        &Secrets::recovery_key(RecoveryKey::parse("ABCDEFGHJKMNPQRSTVWXYZ23456")),
    );
    assert_locked(
        &container,
        &Secrets::passphrase(Passphrase::new(recovery_key.normalized())),
    );
    assert_locked(
        &container,
        &Secrets::passphrase(Passphrase::new("23456-789AB-CDEFG-HJKMN-PQRST-VW")),
    );
    assert_opens(
        &container,
        &Secrets::passphrase(passphrase.clone()),
        b"data",
        SlotKind::Passphrase,
    );
    assert_opens(
        &container,
        &Secrets::recovery_key(recovery_key.clone()),
        b"data",
        SlotKind::RecoveryKey,
    );
    // Both supplied: the table order decides, and a wrong one does not spoil a right one.
    let both = Secrets {
        passphrase: Some(Passphrase::new("wrong")),
        recovery_key: Some(recovery_key),
    };
    assert_opens(&container, &both, b"data", SlotKind::RecoveryKey);
}

#[test]
fn empty_and_absent_secrets_are_locked() {
    let sample = sample(b"data");
    for secrets in [
        Secrets::default(),
        Secrets::passphrase(Passphrase::new("")),
        Secrets::recovery_key(RecoveryKey::parse("")),
        Secrets::recovery_key(RecoveryKey::parse("-- --")),
        Secrets::recovery_key(RecoveryKey::parse(&sample.recovery_key.normalized()[..20])),
    ] {
        assert_locked(&sample.container, &secrets);
    }
}

#[test]
fn open_owned_decrypts_in_the_callers_allocation() {
    let sample = sample(&vec![7u8; 100_000]);
    let container = sample.container.clone();
    let allocation = container.as_ptr();
    let (unlocked, file_key) =
        open_owned_with_file_key(container, &sample.by_recovery_key(), &LIMITS).unwrap();
    assert_eq!(unlocked.plaintext.as_ptr(), allocation);
    assert_eq!(unlocked.plaintext, sample.plaintext);
    assert_eq!(
        (unlocked.opened_by, unlocked.slot_index),
        (SlotKind::RecoveryKey, 1)
    );
    // The key it returns is the container's: a reseal under it is accepted.
    assert!(reseal(&sample.container, &file_key, b"next", &LIMITS).is_ok());
    assert_eq!(
        remove_protection(&sample.container, &sample.by_passphrase(), &LIMITS)
            .unwrap()
            .plaintext,
        sample.plaintext
    );
}

#[test]
fn change_passphrase_touches_only_the_passphrase_slot() {
    let sample = sample(b"the payload stays put");
    let new = Passphrase::new("a new passphrase");
    let changed = change_passphrase(&sample.container, &sample.passphrase, &new, &LIMITS).unwrap();
    assert!(
        differing(&changed, &sample.container)
            .iter()
            .all(|i| PASSPHRASE_WRAPPED.contains(i))
    );
    assert_eq!(
        changed[PAYLOAD_IV.start..],
        sample.container[PAYLOAD_IV.start..]
    );
    assert_locked(&changed, &sample.by_passphrase());
    assert_opens(
        &changed,
        &Secrets::passphrase(new),
        &sample.plaintext,
        SlotKind::Passphrase,
    );
    assert_opens(
        &changed,
        &sample.by_recovery_key(),
        &sample.plaintext,
        SlotKind::RecoveryKey,
    );
}

#[test]
fn change_passphrase_refusals() {
    let sample = sample(b"data");
    let new = Passphrase::new("new");
    let check = |container: &[u8], current: &Passphrase, new: &Passphrase| {
        change_passphrase(container, current, new, &LIMITS).unwrap_err()
    };
    assert_eq!(
        check(&sample.container, &sample.passphrase, &Passphrase::new("")),
        RewrapError::EmptyPassphrase
    );
    assert_eq!(
        check(&sample.container, &Passphrase::new("wrong"), &new),
        RewrapError::Open(OpenError::Locked)
    );
    // The recovery key is not a passphrase, even when it is the right secret.
    let typed_key = Passphrase::new(sample.recovery_key.grouped());
    assert_eq!(
        check(&sample.container, &typed_key, &new),
        RewrapError::Open(OpenError::Locked)
    );
    let no_passphrase_slot = patch_header(&sample.container, 160, |bytes| bytes[38] = 0x07);
    assert_eq!(
        check(&no_passphrase_slot, &sample.passphrase, &new),
        RewrapError::NoPassphraseSlot
    );
    let mut damaged = sample.container.clone();
    *damaged.last_mut().unwrap() ^= 1;
    assert_eq!(
        check(&damaged, &sample.passphrase, &new),
        RewrapError::Open(OpenError::Corrupt(Corruption::PayloadAuthenticationFailed))
    );
}

#[test]
fn rotate_recovery_key_touches_only_the_recovery_slot() {
    let sample = sample(b"rotate me");
    for secrets in [sample.by_passphrase(), sample.by_recovery_key()] {
        let (rotated, new_key) = rotate_recovery_key(&sample.container, &secrets, &LIMITS).unwrap();
        assert!(new_key.is_plausible());
        assert_ne!(new_key.normalized(), sample.recovery_key.normalized());
        assert!(
            differing(&rotated, &sample.container)
                .iter()
                .all(|i| RECOVERY_WRAPPED.contains(i))
        );
        assert_locked(&rotated, &sample.by_recovery_key());
        assert_opens(
            &rotated,
            &Secrets::recovery_key(new_key),
            &sample.plaintext,
            SlotKind::RecoveryKey,
        );
        assert_opens(
            &rotated,
            &sample.by_passphrase(),
            &sample.plaintext,
            SlotKind::Passphrase,
        );
    }
}

#[test]
fn rotate_recovery_key_refusals() {
    let sample = sample(b"data");
    let new_key = RecoveryKey::generate();
    let check = |container: &[u8], secrets: &Secrets, new_key: &RecoveryKey| {
        rotate_recovery_key_to(container, secrets, new_key, &LIMITS).unwrap_err()
    };
    assert_eq!(
        check(
            &sample.container,
            &sample.by_passphrase(),
            &RecoveryKey::parse("short")
        ),
        RewrapError::ImplausibleRecoveryKey
    );
    assert_eq!(
        check(&sample.container, &Secrets::default(), &new_key),
        RewrapError::Open(OpenError::Locked)
    );
    let no_recovery_slot = patch_header(&sample.container, 160, |bytes| bytes[99] = 0x01);
    assert_eq!(
        check(&no_recovery_slot, &sample.by_passphrase(), &new_key),
        RewrapError::NoRecoverySlot
    );
}

#[test]
fn reseal_keeps_the_slots_and_draws_a_fresh_payload_iv() {
    let sample = sample(b"version 1");
    let (file_key, kind) =
        open_file_key(&sample.container, &sample.by_passphrase(), &LIMITS).unwrap();
    assert_eq!(kind, SlotKind::Passphrase);
    let resealed = reseal(&sample.container, &file_key, b"version 2, longer", &LIMITS).unwrap();
    assert_eq!(
        resealed[..PAYLOAD_IV.start],
        sample.container[..PAYLOAD_IV.start]
    );
    assert_ne!(resealed[PAYLOAD_IV], sample.container[PAYLOAD_IV]);
    assert_opens(
        &resealed,
        &sample.by_passphrase(),
        b"version 2, longer",
        SlotKind::Passphrase,
    );
    assert_opens(
        &resealed,
        &sample.by_recovery_key(),
        b"version 2, longer",
        SlotKind::RecoveryKey,
    );
    let again = reseal(&resealed, &file_key, b"version 2, longer", &LIMITS).unwrap();
    assert_ne!(again[PAYLOAD_IV], resealed[PAYLOAD_IV]);
    assert_ne!(again, resealed);
}

#[test]
fn owned_variants_round_trip() {
    let recovery_key = RecoveryKey::generate();
    let plaintext: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let container = seal_owned(
        plaintext.clone(),
        &Passphrase::new(PASSPHRASE),
        &recovery_key,
        ITERATIONS,
        &LIMITS,
    )
    .unwrap();
    assert_eq!(container.len(), 284 + plaintext.len());
    assert_opens(
        &container,
        &Secrets::passphrase(Passphrase::new(PASSPHRASE)),
        &plaintext,
        SlotKind::Passphrase,
    );
    assert_opens(
        &container,
        &Secrets::recovery_key(recovery_key.clone()),
        &plaintext,
        SlotKind::RecoveryKey,
    );
    let (file_key, _) = open_file_key(
        &container,
        &Secrets::recovery_key(recovery_key.clone()),
        &LIMITS,
    )
    .unwrap();
    for next in [Vec::new(), b"short".to_vec(), plaintext.repeat(2)] {
        let resealed = reseal_owned(&container, &file_key, next.clone(), &LIMITS).unwrap();
        assert_eq!(resealed[..PAYLOAD_IV.start], container[..PAYLOAD_IV.start]);
        assert_ne!(resealed[PAYLOAD_IV], container[PAYLOAD_IV]);
        assert_opens(
            &resealed,
            &Secrets::recovery_key(recovery_key.clone()),
            &next,
            SlotKind::RecoveryKey,
        );
    }
    let refused = seal_owned(
        vec![0; 10],
        &Passphrase::new(""),
        &recovery_key,
        ITERATIONS,
        &LIMITS,
    );
    assert_eq!(refused.unwrap_err(), SealError::EmptyPassphrase);
}

#[test]
fn reseal_checks_a_key_made_from_bytes_against_the_payload() {
    let material = SealMaterial {
        salt: [1; 16],
        file_key: FileKey::from_bytes([0x77; 32]),
        passphrase_slot_iv: [2; 12],
        recovery_slot_iv: [3; 12],
        payload_iv: [4; 12],
    };
    let recovery_key = RecoveryKey::generate();
    let container = seal_with(
        b"data",
        &Passphrase::new(PASSPHRASE),
        &recovery_key,
        ITERATIONS,
        &LIMITS,
        material,
    )
    .unwrap();
    let resealed = reseal(
        &container,
        &FileKey::from_bytes([0x77; 32]),
        b"next",
        &LIMITS,
    )
    .unwrap();
    assert_opens(
        &resealed,
        &Secrets::recovery_key(recovery_key),
        b"next",
        SlotKind::RecoveryKey,
    );
    assert_eq!(
        reseal(
            &container,
            &FileKey::from_bytes([0x78; 32]),
            b"next",
            &LIMITS
        )
        .unwrap_err(),
        SealError::FileKeyMismatch
    );
    // A bound key survives secret changes, which keep the header.
    let (bound, _) = open_file_key(
        &container,
        &Secrets::passphrase(Passphrase::new(PASSPHRASE)),
        &LIMITS,
    )
    .unwrap();
    let changed = change_passphrase(
        &container,
        &Passphrase::new(PASSPHRASE),
        &Passphrase::new("other"),
        &LIMITS,
    )
    .unwrap();
    assert!(reseal(&changed, &bound, b"after change", &LIMITS).is_ok());
}

#[test]
fn reseal_refusals() {
    let sample = sample(b"data");
    let other = common::sample(b"other");
    let (other_key, _) = open_file_key(&other.container, &other.by_passphrase(), &LIMITS).unwrap();
    assert_eq!(
        reseal(&sample.container, &other_key, b"x", &LIMITS).unwrap_err(),
        SealError::FileKeyMismatch
    );
    let (key, _) = open_file_key(&sample.container, &sample.by_passphrase(), &LIMITS).unwrap();
    let small = Limits {
        max_plaintext: 3,
        ..LIMITS
    };
    assert_eq!(
        reseal(&sample.container, &key, b"four", &small).unwrap_err(),
        SealError::TooLarge {
            plaintext_len: 4,
            max: 3
        }
    );
    assert_eq!(
        reseal(b"SQLite format 3\0", &key, b"x", &LIMITS).unwrap_err(),
        SealError::Corrupt(Corruption::NotAContainer)
    );
}

#[test]
fn seal_refusals() {
    let passphrase = Passphrase::new(PASSPHRASE);
    let recovery_key = RecoveryKey::generate();
    let check = |plaintext: &[u8],
                 passphrase: &Passphrase,
                 recovery_key: &RecoveryKey,
                 iterations: u32,
                 limits: &Limits| {
        seal(plaintext, passphrase, recovery_key, iterations, limits).unwrap_err()
    };
    assert_eq!(
        check(
            b"",
            &Passphrase::new(""),
            &recovery_key,
            ITERATIONS,
            &LIMITS
        ),
        SealError::EmptyPassphrase
    );
    assert_eq!(
        check(
            b"",
            &passphrase,
            &RecoveryKey::parse("ABC"),
            ITERATIONS,
            &LIMITS
        ),
        SealError::ImplausibleRecoveryKey
    );
    assert_eq!(
        check(b"", &passphrase, &recovery_key, 999, &LIMITS),
        SealError::IterationsOutOfRange {
            iterations: 999,
            min: 1_000,
            max: 10_000_000
        }
    );
    assert_eq!(
        check(
            b"",
            &passphrase,
            &recovery_key,
            ITERATIONS,
            &Limits::default()
        ),
        SealError::IterationsOutOfRange {
            iterations: 1_000,
            min: 10_000,
            max: 10_000_000
        }
    );
    let small = Limits {
        max_plaintext: 3,
        ..LIMITS
    };
    assert_eq!(
        check(b"four", &passphrase, &recovery_key, ITERATIONS, &small),
        SealError::TooLarge {
            plaintext_len: 4,
            max: 3
        }
    );
    assert!(seal(b"thr", &passphrase, &recovery_key, ITERATIONS, &small).is_ok());
}

#[test]
fn too_large_is_found_before_any_key_derivation() {
    let sample = sample(&[1u8; 100]);
    // Ten million iterations would take about a second per derivation if one ran.
    let expensive = patch_header(&sample.container, 160, |bytes| {
        bytes[12..16].copy_from_slice(&10_000_000u32.to_be_bytes())
    });
    let small = Limits {
        max_plaintext: 99,
        ..LIMITS
    };
    let started = std::time::Instant::now();
    assert_eq!(
        open(&expensive, &sample.by_passphrase(), &small).unwrap_err(),
        OpenError::TooLarge {
            plaintext_len: 100,
            max: 99
        }
    );
    assert!(
        started.elapsed().as_millis() < 300,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        open_owned(expensive, &sample.by_passphrase(), &small)
            .unwrap_err()
            .code(),
        "too_large"
    );
}

#[test]
fn seals_never_repeat_salt_or_iv() {
    let passphrase = Passphrase::new(PASSPHRASE);
    let recovery_key = RecoveryKey::generate();
    let mut salts = HashSet::new();
    let mut ivs = HashSet::new();
    for _ in 0..50 {
        let container = seal(
            b"same plaintext",
            &passphrase,
            &recovery_key,
            ITERATIONS,
            &LIMITS,
        )
        .unwrap();
        let info = inspect(&container, &LIMITS).unwrap();
        assert!(salts.insert(info.header.salt));
        for iv in [
            info.header.slots[0].iv,
            info.header.slots[1].iv,
            info.payload_iv,
        ] {
            assert!(ivs.insert(iv));
        }
    }
    assert_eq!((salts.len(), ivs.len()), (50, 150));
    let materials: HashSet<[u8; 12]> = (0..50)
        .map(|_| SealMaterial::generate().payload_iv)
        .collect();
    assert_eq!(materials.len(), 50);
}

#[test]
fn generated_recovery_keys_are_distinct_well_formed_and_strong() {
    let keys: Vec<RecoveryKey> = (0..200).map(|_| RecoveryKey::generate()).collect();
    let distinct: HashSet<&str> = keys.iter().map(RecoveryKey::normalized).collect();
    assert_eq!(distinct.len(), 200);
    for key in &keys {
        assert_eq!(key.normalized().len(), 27);
        assert!(
            key.normalized()
                .chars()
                .all(|c| RECOVERY_KEY_ALPHABET.contains(c))
        );
        assert!(key.is_plausible());
        let grouped = key.grouped();
        let lens: Vec<usize> = grouped.split('-').map(str::len).collect();
        assert_eq!(lens, [5, 5, 5, 5, 5, 2], "{}", grouped.len());
        assert!(key.entropy_bits() >= 128.0, "{}", key.entropy_bits());
        // What a user might type back: lowercase, spaces, stray punctuation.
        let typed = grouped.to_lowercase().replace('-', " ") + ".";
        assert_eq!(RecoveryKey::parse(&typed).normalized(), key.normalized());
    }
    assert!((27.0 * 30f64.log2() - 132.48).abs() < 0.01);
    // Every symbol turns up: the draw is not confined to part of the alphabet.
    let seen: HashSet<char> = keys
        .iter()
        .flat_map(|k| k.normalized().chars().collect::<Vec<_>>())
        .collect();
    assert_eq!(seen.len(), 30);
}

#[test]
fn recovery_key_draw_is_rejection_sampled() {
    // 240..=255 are discarded; 0 is 'A', 29 is '9', 30 wraps to 'A', 239 is 239 % 30 = 29 -> '9'.
    let mut calls = 0;
    let key = RecoveryKey::from_entropy_source(|buf| {
        calls += 1;
        for (i, byte) in buf.iter_mut().enumerate() {
            *byte = match i % 4 {
                0 => 255,
                1 => 0,
                2 => 30,
                _ => 239,
            };
        }
    });
    assert_eq!(key.normalized(), "AA9AA9AA9AA9AA9AA9AA9AA9AA9");
    assert_eq!(calls, 2);
    assert_eq!(key.grouped(), "AA9AA-9AA9A-A9AA9-AA9AA-9AA9A-A9");
}

#[test]
fn recovery_key_parsing_matches_the_reference_normalisation() {
    let cases = [
        (
            "ABCDE-FGHJK-MNPQR-STVWX-YZ234-56",
            "ABCDEFGHJKMNPQRSTVWXYZ23456",
            true,
        ),
        (
            "abcde fghjk mnpqr stvwx yz234 56",
            "ABCDEFGHJKMNPQRSTVWXYZ23456",
            true,
        ),
        (
            "  abcde_fghjk/mnpqr\tstvwx\nyz234—56 ",
            "ABCDEFGHJKMNPQRSTVWXYZ23456",
            true,
        ),
        // A 26-symbol key from the older reference still counts.
        (
            "ABCDE-FGHJK-MNPQR-STVWX-YZ234-5",
            "ABCDEFGHJKMNPQRSTVWXYZ2345",
            true,
        ),
        // Letters outside the alphabet survive normalisation but make the key implausible.
        (
            "ABCDE-FGHJK-MNPQR-STVWX-YZ234-5O",
            "ABCDEFGHJKMNPQRSTVWXYZ2345O",
            false,
        ),
        // Full Unicode uppercasing, like JavaScript's toUpperCase: ß becomes SS.
        ("straße", "STRASSE", false),
        ("", "", false),
    ];
    for (typed, normalized, plausible) in cases {
        let key = RecoveryKey::parse(typed);
        assert_eq!(
            (key.normalized(), key.is_plausible()),
            (normalized, plausible),
            "{typed:?}"
        );
    }
}
