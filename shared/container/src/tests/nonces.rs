//! §11.2 rule 5 from the inside: with the crate's random source replaced by a recording one, every salt, file key and IV a writer stores is exactly one fresh draw, so a counter, a derived IV or a reused draw fails here.

use std::{cell::RefCell, rc::Rc};

use crate::random::hook;
use crate::{
    FileKey, Limits, Passphrase, RecoveryKey, Secrets, inspect, reseal, reseal_owned,
    reseal_with_secrets, seal, seal_owned,
};

const LIMITS: Limits = Limits {
    min_iterations: 1,
    max_iterations: 10_000_000,
    max_plaintext: 1 << 20,
};

/// Runs `f` with a source that hands out bytes of a seeded splitmix64 stream and records every
/// draw; returns `f`'s result and the draws in order.
fn recorded<T>(seed: u64, f: impl FnOnce() -> T) -> (T, Vec<Vec<u8>>) {
    let draws = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&draws);
    let mut state = seed;
    let source = Box::new(move |buf: &mut [u8]| {
        for byte in buf.iter_mut() {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *byte = (z ^ (z >> 31)) as u8;
        }
        log.borrow_mut().push(buf.to_vec());
    });
    let result = hook::with(source, f);
    let draws = draws.borrow().clone();
    (result, draws)
}

#[test]
fn a_seal_stores_each_of_its_five_draws_once_in_the_reference_order() {
    let passphrase = Passphrase::new("p");
    let recovery_key = RecoveryKey::parse("ABCDE-FGHJK-MNPQR-STVWX-YZ234-56");
    let plaintext = b"SQLite format 3\0nonce".to_vec();
    for (seed, owned) in [(1, false), (2, true)] {
        let (container, draws) = recorded(seed, || {
            if owned {
                seal_owned(plaintext.clone(), &passphrase, &recovery_key, 10, &LIMITS)
            } else {
                seal(&plaintext, &passphrase, &recovery_key, 10, &LIMITS)
            }
        });
        let container = container.expect("seal");
        let lens: Vec<usize> = draws.iter().map(Vec::len).collect();
        assert_eq!(
            lens,
            [16, 32, 12, 12, 12],
            "salt, file key, slot IVs, payload IV"
        );
        let info = inspect(&container, &LIMITS).expect("inspect");
        assert_eq!(info.header.salt[..], draws[0][..]);
        assert_eq!(info.header.slots[0].iv[..], draws[2][..]);
        assert_eq!(info.header.slots[1].iv[..], draws[3][..]);
        assert_eq!(info.payload_iv[..], draws[4][..]);
        // The payload is under exactly the drawn file key.
        let file_key = FileKey::from_bytes(draws[1].clone().try_into().expect("32 bytes"));
        assert!(reseal(&container, &file_key, b"x", &LIMITS).is_ok());
    }
}

#[test]
fn every_reseal_stores_exactly_its_one_fresh_draw_as_the_payload_iv() {
    let passphrase = Passphrase::new("p");
    let recovery_key = RecoveryKey::generate();
    let container = seal(
        b"SQLite format 3\0a",
        &passphrase,
        &recovery_key,
        10,
        &LIMITS,
    )
    .expect("seal");
    let (file_key, _) = crate::open_file_key(
        &container,
        &Secrets::passphrase(passphrase.clone()),
        &LIMITS,
    )
    .expect("key");
    let calls: [&dyn Fn() -> Vec<u8>; 3] = [
        &|| reseal(&container, &file_key, b"b", &LIMITS).expect("reseal"),
        &|| reseal_owned(&container, &file_key, b"c".to_vec(), &LIMITS).expect("reseal"),
        &|| {
            reseal_with_secrets(
                &container,
                &Secrets::passphrase(passphrase.clone()),
                b"SQLite format 3\0d".to_vec(),
                &LIMITS,
            )
            .expect("reseal")
            .0
        },
    ];
    let mut ivs = Vec::new();
    for (seed, call) in (10..).zip(calls) {
        let (resealed, draws) = recorded(seed, call);
        assert_eq!(draws.len(), 1, "one draw per reseal");
        let info = inspect(&resealed, &LIMITS).expect("inspect");
        assert_eq!(info.payload_iv[..], draws[0][..]);
        ivs.push(info.payload_iv);
    }
    ivs.dedup();
    assert_eq!(ivs.len(), 3);
}

#[test]
fn a_passphrase_change_draws_nothing_and_a_rotation_only_its_key() {
    let passphrase = Passphrase::new("p");
    let container = seal(b"x", &passphrase, &RecoveryKey::generate(), 10, &LIMITS).expect("seal");
    let (_, draws) = recorded(20, || {
        crate::change_passphrase(&container, &passphrase, &Passphrase::new("q"), &LIMITS)
            .expect("change")
    });
    // Re-wrapping under a new KEK keeps the slot's IV: rule 5's one stated exception.
    assert!(draws.is_empty(), "{draws:?}");
    let ((rotated, key), draws) = recorded(21, || {
        crate::rotate_recovery_key(
            &container,
            &Secrets::passphrase(passphrase.clone()),
            &LIMITS,
        )
        .expect("rotate")
    });
    assert!(!draws.is_empty() && draws.iter().all(|d| d.len() == 32));
    let expected: String = draws
        .iter()
        .flatten()
        .filter(|&&b| b < 240)
        .take(27)
        .map(|&b| char::from(crate::RECOVERY_KEY_ALPHABET.as_bytes()[usize::from(b % 30)]))
        .collect();
    assert_eq!(key.normalized(), expected);
    assert_eq!(
        inspect(&rotated, &LIMITS).expect("inspect").header,
        inspect(&container, &LIMITS).expect("inspect").header
    );
}

#[test]
fn a_kdf_change_stores_five_fresh_draws() {
    let passphrase = Passphrase::new("p");
    let recovery_key = RecoveryKey::generate();
    let container = seal(b"x", &passphrase, &recovery_key, 10, &LIMITS).expect("seal");
    let (rewritten, draws) = recorded(30, || {
        crate::change_iterations(&container, &passphrase, &recovery_key, 20, &LIMITS)
            .expect("change")
    });
    let info = inspect(&rewritten, &LIMITS).expect("inspect");
    assert_eq!(draws.len(), 5);
    assert_eq!(info.header.salt[..], draws[0][..]);
    assert_eq!(info.header.slots[0].iv[..], draws[2][..]);
    assert_eq!(info.header.slots[1].iv[..], draws[3][..]);
    assert_eq!(info.payload_iv[..], draws[4][..]);
}

#[test]
fn new_slots_take_only_full_strength_recovery_keys() {
    let passphrase = Passphrase::new("p");
    let legacy = RecoveryKey::parse("ABCDE-FGHJK-MNPQR-STVWX-YZ234-5");
    assert!(legacy.is_plausible() && !legacy.is_full_strength());
    assert_eq!(
        seal(b"x", &passphrase, &legacy, 10, &LIMITS).unwrap_err(),
        crate::SealError::WeakRecoveryKey { symbols: 26 }
    );
    let container = seal(b"x", &passphrase, &RecoveryKey::generate(), 10, &LIMITS).expect("seal");
    let secrets = Secrets::passphrase(passphrase);
    assert_eq!(
        crate::rotate_recovery_key_to(&container, &secrets, &legacy, &LIMITS).unwrap_err(),
        crate::RewrapError::WeakRecoveryKey { symbols: 26 }
    );
    let strong = RecoveryKey::parse("ABCDE-FGHJK-MNPQR-STVWX-YZ234-56");
    assert!(crate::rotate_recovery_key_to(&container, &secrets, &strong, &LIMITS).is_ok());
}
