//! The KDF iteration count as a setting, not damage (§11.1, §11.2 rule 6): a count outside the reader's range is refused as out of policy, opens with wider limits, and `change_iterations` rewrites such a file for both secrets.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{ITERATIONS, LIMITS, PASSPHRASE, patch_header, sample};
use snug_container::{
    Corruption, Header, Limits, OpenError, Passphrase, RecoveryKey, RewrapError, Secrets, Slot,
    SlotKind, change_iterations, derive_kek, inspect, open,
};

fn iterations_of(container: &[u8], limits: &Limits) -> u32 {
    inspect(container, limits)
        .expect("inspect")
        .header
        .iterations
}

#[test]
fn a_weak_count_is_out_of_policy_not_corrupt_and_opens_with_a_lower_minimum() {
    let sample = sample(b"SQLite format 3\0weak");
    let refused = Corruption::IterationsOutOfRange {
        iterations: ITERATIONS,
        min: 10_000,
        max: 10_000_000,
    };
    assert_eq!(
        inspect(&sample.container, &Limits::default()),
        Err(refused.clone())
    );
    let err = open(
        &sample.container,
        &sample.by_passphrase(),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(err, OpenError::Corrupt(refused.clone()));
    assert!(refused.is_out_of_policy());
    assert!(!refused.is_unsupported());
    // The same verdict with a wrong secret: the count is judged before any secret is tried.
    let wrong = Secrets::passphrase(Passphrase::new("not it"));
    assert_eq!(
        open(&sample.container, &wrong, &Limits::default()).unwrap_err(),
        OpenError::Corrupt(refused)
    );
    let lowered = Limits {
        min_iterations: ITERATIONS,
        ..Limits::default()
    };
    let unlocked = open(&sample.container, &sample.by_recovery_key(), &lowered).expect("open");
    assert_eq!(unlocked.plaintext, sample.plaintext);
}

#[test]
fn a_raised_count_is_out_of_policy_and_opens_with_a_higher_maximum() {
    let sample = sample(b"SQLite format 3\0raised");
    let raised = patch_header(&sample.container, 160, |bytes| {
        bytes[12..16].copy_from_slice(&20_000_000u32.to_be_bytes())
    });
    let err = inspect(&raised, &Limits::default()).unwrap_err();
    assert_eq!(
        err,
        Corruption::IterationsOutOfRange {
            iterations: 20_000_000,
            min: 10_000,
            max: 10_000_000,
        }
    );
    assert!(err.is_out_of_policy());
    let widened = Limits {
        max_iterations: 20_000_000,
        ..Limits::default()
    };
    assert_eq!(iterations_of(&raised, &widened), 20_000_000);
}

#[test]
fn zero_iterations_stays_corrupt_whatever_the_limits() {
    let sample = sample(b"SQLite format 3\0zero");
    let zero = patch_header(&sample.container, 160, |bytes| {
        bytes[12..16].copy_from_slice(&0u32.to_be_bytes())
    });
    let anything = Limits {
        min_iterations: 0,
        max_iterations: u32::MAX,
        ..Limits::default()
    };
    for limits in [Limits::default(), LIMITS, anything] {
        let err = inspect(&zero, &limits).unwrap_err();
        assert_eq!(err, Corruption::ZeroIterations);
        assert!(!err.is_out_of_policy() && !err.is_unsupported());
        assert_eq!(
            open(&zero, &sample.by_passphrase(), &limits).unwrap_err(),
            OpenError::Corrupt(Corruption::ZeroIterations)
        );
    }
}

#[test]
fn change_iterations_rewrites_every_slot_and_both_secrets_still_open() {
    let sample = sample(b"SQLite format 3\0upgrade me");
    let upgraded = change_iterations(
        &sample.container,
        &sample.passphrase,
        &RecoveryKey::parse(&sample.recovery_key.grouped()),
        20_000,
        &LIMITS,
    )
    .expect("upgrade");
    let before = inspect(&sample.container, &LIMITS).expect("before");
    let after = inspect(&upgraded, &Limits::default()).expect("a default reader accepts it");
    assert_eq!(after.header.iterations, 20_000);
    assert_ne!(after.header.salt, before.header.salt, "a fresh salt");
    assert_eq!(
        after
            .header
            .slots
            .iter()
            .map(|s| s.kind)
            .collect::<Vec<_>>(),
        [SlotKind::Passphrase, SlotKind::RecoveryKey]
    );
    for slot in 0..2 {
        assert_ne!(after.header.slots[slot].iv, before.header.slots[slot].iv);
    }
    assert_ne!(after.payload_iv, before.payload_iv);
    for (secrets, kind) in [
        (sample.by_passphrase(), SlotKind::Passphrase),
        (sample.by_recovery_key(), SlotKind::RecoveryKey),
    ] {
        let unlocked = open(&upgraded, &secrets, &Limits::default()).expect("open");
        assert_eq!(unlocked.plaintext, sample.plaintext);
        assert_eq!(unlocked.opened_by, kind);
    }
}

#[test]
fn change_iterations_needs_both_secrets_and_a_count_within_the_limits() {
    let sample = sample(b"SQLite format 3\0both");
    let key = RecoveryKey::parse(&sample.recovery_key.grouped());
    let wrong_key = RecoveryKey::generate();
    let err = change_iterations(
        &sample.container,
        &sample.passphrase,
        &wrong_key,
        20_000,
        &LIMITS,
    )
    .unwrap_err();
    assert_eq!(
        err,
        RewrapError::SlotNotOpened {
            slot_index: 1,
            kind: SlotKind::RecoveryKey
        }
    );
    let wrong_passphrase = Passphrase::new(format!("{PASSPHRASE}!"));
    let err =
        change_iterations(&sample.container, &wrong_passphrase, &key, 20_000, &LIMITS).unwrap_err();
    assert_eq!(
        err,
        RewrapError::SlotNotOpened {
            slot_index: 0,
            kind: SlotKind::Passphrase
        }
    );
    for iterations in [0, 999, 10_000_001] {
        let err = change_iterations(
            &sample.container,
            &sample.passphrase,
            &key,
            iterations,
            &LIMITS,
        )
        .unwrap_err();
        assert_eq!(
            err,
            RewrapError::IterationsOutOfRange {
                iterations,
                min: LIMITS.min_iterations,
                max: LIMITS.max_iterations,
            }
        );
    }
    // A file the limits refuse is refused here too, as the policy matter it is.
    let err = change_iterations(
        &sample.container,
        &sample.passphrase,
        &key,
        20_000,
        &Limits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, RewrapError::Open(OpenError::Corrupt(ref c)) if c.is_out_of_policy()),
        "{err:?}"
    );
}

/// Builds a three-slot container, passphrase, recovery key and a slot of unknown kind 0x07,
/// every one wrapping the same file key; returns it and its recovery key.
fn three_slots() -> (Vec<u8>, RecoveryKey) {
    use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce};
    let recovery_key = RecoveryKey::generate();
    let salt = [5u8; 16];
    let slots = (1..=3u8)
        .map(|i| Slot {
            kind: SlotKind::from_byte(if i == 3 { 0x07 } else { i }),
            iv: [i; 12],
        })
        .collect();
    let header = Header {
        version: 1,
        kdf_id: 1,
        iterations: ITERATIONS,
        salt,
        checksum: 0,
        slots,
    }
    .encode();
    let file_key = [0x44u8; 32];
    let wrap = |secret: &[u8], iv: u8| {
        let kek = derive_kek(secret, &salt, ITERATIONS);
        let mut wrapped = file_key.to_vec();
        let tag = Aes256Gcm::new((&*kek).into())
            .encrypt_inout_detached(
                &Nonce::from([iv; 12]),
                &header,
                wrapped.as_mut_slice().into(),
            )
            .expect("wrap");
        wrapped.extend_from_slice(&tag);
        wrapped
    };
    let mut payload = b"SQLite format 3\0three".to_vec();
    let payload_tag = Aes256Gcm::new((&file_key).into())
        .encrypt_inout_detached(
            &Nonce::from([0xee; 12]),
            &header,
            payload.as_mut_slice().into(),
        )
        .expect("seal");
    let mut container = header.clone();
    container.extend(wrap(PASSPHRASE.as_bytes(), 1));
    container.extend(wrap(recovery_key.normalized().as_bytes(), 2));
    container.extend(wrap(b"someone else's secret", 3));
    container.extend_from_slice(&[0xee; 12]);
    container.extend_from_slice(&payload);
    container.extend_from_slice(&payload_tag);
    (container, recovery_key)
}

#[test]
fn change_iterations_refuses_a_slot_it_cannot_open() {
    let (container, recovery_key) = three_slots();
    let passphrase = Passphrase::new(PASSPHRASE);
    // The container is sound and each known slot opens ...
    assert!(
        open(
            &container,
            &Secrets::passphrase(passphrase.clone()),
            &LIMITS
        )
        .is_ok()
    );
    assert!(
        open(
            &container,
            &Secrets::recovery_key(recovery_key.clone()),
            &LIMITS
        )
        .is_ok()
    );
    // ... but a rewrite would drop the third slot's secret, so it is refused.
    let err =
        change_iterations(&container, &passphrase, &recovery_key, 20_000, &LIMITS).unwrap_err();
    assert_eq!(
        err,
        RewrapError::SlotNotOpened {
            slot_index: 2,
            kind: SlotKind::Unknown(0x07)
        }
    );
}
