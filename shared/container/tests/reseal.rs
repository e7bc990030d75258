//! Editing a protected file (issue #17 point 4): `reseal_with_secrets` keeps the header, salt, slots and wrapped keys byte for byte, draws a fresh payload IV, and both secrets open the result; refusals are typed.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{LIMITS, patch_header, sample};
use snug_container::{
    Corruption, Limits, OpenError, Passphrase, ResealError, Secrets, SlotKind, inspect, open,
    reseal_with_secrets,
};

#[test]
fn reseal_keeps_everything_before_the_payload_iv_and_both_secrets_open_it() {
    let sample = sample(b"SQLite format 3\0before");
    let info = inspect(&sample.container, &LIMITS).unwrap();
    let kept = info.payload_iv_offset();
    let mut previous_ivs = vec![info.payload_iv];
    let mut current = sample.container.clone();
    for (round, secrets) in [sample.by_passphrase(), sample.by_recovery_key()]
        .into_iter()
        .enumerate()
    {
        let edited = format!("SQLite format 3\0edit {round} with a longer body").into_bytes();
        let (resealed, opened_by) =
            reseal_with_secrets(&current, &secrets, edited.clone(), &LIMITS).unwrap();
        assert_eq!(
            opened_by,
            [SlotKind::Passphrase, SlotKind::RecoveryKey][round]
        );
        // Header, salt, slot table and wrapped keys: the same bytes as the original file.
        assert_eq!(resealed[..kept], sample.container[..kept], "round {round}");
        let after = inspect(&resealed, &LIMITS).unwrap();
        assert_eq!(after.header, info.header);
        assert_eq!(after.plaintext_len, edited.len() as u64);
        assert!(
            !previous_ivs.contains(&after.payload_iv),
            "round {round}: the payload IV repeats"
        );
        previous_ivs.push(after.payload_iv);
        for secrets in [sample.by_passphrase(), sample.by_recovery_key()] {
            assert_eq!(
                open(&resealed, &secrets, &LIMITS).unwrap().plaintext,
                edited
            );
        }
        current = resealed;
    }
}

#[test]
fn reseal_refusals_are_typed_and_write_nothing() {
    let sample = sample(b"SQLite format 3\0data");
    let next = b"SQLite format 3\0next".to_vec();
    let wrong = Secrets::passphrase(Passphrase::new("not it"));
    assert_eq!(
        reseal_with_secrets(&sample.container, &wrong, next.clone(), &LIMITS).unwrap_err(),
        ResealError::Open(OpenError::Locked)
    );
    assert_eq!(
        reseal_with_secrets(
            &sample.container,
            &Secrets::default(),
            next.clone(),
            &LIMITS
        )
        .unwrap_err(),
        ResealError::Open(OpenError::Locked)
    );
    // A damaged payload is reported, not papered over with a new one.
    let mut damaged = sample.container.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    assert_eq!(
        reseal_with_secrets(&damaged, &sample.by_passphrase(), next.clone(), &LIMITS).unwrap_err(),
        ResealError::Open(OpenError::Corrupt(Corruption::PayloadAuthenticationFailed))
    );
    let flipped = patch_header(&sample.container, 160, |bytes| bytes[20] ^= 1);
    assert_eq!(
        reseal_with_secrets(&flipped, &sample.by_passphrase(), next.clone(), &LIMITS).unwrap_err(),
        ResealError::Open(OpenError::Locked),
        "a consistent but altered header no longer matches the wrapped keys' AAD"
    );
    let mut bad_checksum = sample.container.clone();
    bad_checksum[20] ^= 1;
    assert!(matches!(
        reseal_with_secrets(
            &bad_checksum,
            &sample.by_passphrase(),
            next.clone(),
            &LIMITS
        )
        .unwrap_err(),
        ResealError::Open(OpenError::Corrupt(
            Corruption::HeaderChecksumMismatch { .. }
        ))
    ));
    let small = Limits {
        max_plaintext: 8,
        ..LIMITS
    };
    assert_eq!(
        reseal_with_secrets(
            &sample.container,
            &sample.by_passphrase(),
            next.clone(),
            &small
        )
        .unwrap_err(),
        ResealError::TooLarge {
            plaintext_len: next.len() as u64,
            max: 8
        }
    );
}
