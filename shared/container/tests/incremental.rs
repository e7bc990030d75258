//! Opening a container that arrives in pieces ([`Opening`]) gives, for every input, every way of cutting it and every moment the key arrives, exactly what `open` gives for the whole bytes: plaintext and slot, or the same error.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::{LIMITS, PASSPHRASE, patch_header, sample};
use proptest::prelude::*;
use snug_container::{
    Corruption, Limits, MAGIC, OpenError, Opening, Passphrase, RecoveryKey, Secrets, SlotKind,
    Unlocker, inspect, inspect_prefix, open,
};

/// When the caller runs the unlocker and hands its result back.
#[derive(Debug, Clone, Copy)]
enum Derive {
    /// As soon as it is offered, so later pieces are decrypted as they arrive.
    AtOnce,
    /// After every piece is in, so the whole payload is caught up in one go.
    AtTheEnd,
    /// Never: `finish` derives the key itself.
    Never,
}

/// How the caller ends the opening and takes the plaintext.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// Decrypting as pieces arrive, then `finish`.
    Finish,
    /// `authenticate_first` (hashing only as pieces arrive), then `finish`.
    AuthenticatedThenWhole,
    /// `authenticate_first`, then `finish_authenticated` and reads of this many bytes at most.
    AuthenticatedThenRead(usize),
    /// Decrypting as pieces arrive, then `finish_authenticated` and reads of this many bytes.
    DecryptedThenRead(usize),
}

const TAKES: [Take; 5] = [
    Take::Finish,
    Take::AuthenticatedThenWhole,
    Take::AuthenticatedThenRead(1),
    Take::AuthenticatedThenRead(1000),
    Take::DecryptedThenRead(777),
];

/// What an open returned, comparable across APIs (`Unlocked` has no `PartialEq`).
type Verdict = Result<(Vec<u8>, SlotKind, usize), OpenError>;

fn one_shot(container: &[u8], secrets: &Secrets, limits: &Limits) -> Verdict {
    open(container, secrets, limits).map(|u| (u.plaintext, u.opened_by, u.slot_index))
}

fn in_pieces(
    container: &[u8],
    secrets: &Secrets,
    limits: &Limits,
    cuts: &[usize],
    derive: Derive,
    declared_len: Option<u64>,
    take: Take,
) -> Verdict {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (container.len() + 1)).collect();
    cuts.push(container.len());
    cuts.sort_unstable();
    let mut opening = Opening::new(secrets.clone(), limits, declared_len);
    if matches!(
        take,
        Take::AuthenticatedThenWhole | Take::AuthenticatedThenRead(_)
    ) {
        opening = opening.authenticate_first();
    }
    let mut unlockers = Vec::new();
    let mut start = 0;
    for cut in cuts {
        opening.push(&container[start..cut]);
        start = cut;
        if let Some(unlocker) = opening.take_unlocker() {
            match derive {
                Derive::AtOnce => opening.set_decryptor(unlocker.unlock()),
                Derive::AtTheEnd => unlockers.push(unlocker),
                Derive::Never => {}
            }
        }
        assert!(
            opening.take_unlocker().is_none(),
            "an unlocker is offered once"
        );
    }
    for unlocker in unlockers {
        opening.set_decryptor(unlocker.unlock());
    }
    match take {
        Take::Finish | Take::AuthenticatedThenWhole => opening
            .finish()
            .map(|u| (u.plaintext, u.opened_by, u.slot_index)),
        Take::AuthenticatedThenRead(size) | Take::DecryptedThenRead(size) => {
            let authenticated = opening.finish_authenticated()?;
            Ok(read_in_steps(authenticated, size))
        }
    }
}

/// Reads an authenticated payload `size` bytes at a time, then checks that taking it whole
/// afterwards gives the same plaintext.
fn read_in_steps(
    mut authenticated: snug_container::Authenticated,
    size: usize,
) -> (Vec<u8>, SlotKind, usize) {
    use std::io::Read as _;
    let (opened_by, slot_index) = (authenticated.opened_by(), authenticated.slot_index());
    let mut plaintext = Vec::new();
    let mut step = vec![0u8; size];
    loop {
        let n = authenticated.read(&mut step).unwrap();
        if n == 0 {
            break;
        }
        plaintext.extend_from_slice(&step[..n]);
    }
    assert_eq!(plaintext.len(), authenticated.plaintext_len());
    assert_eq!(
        authenticated.into_unlocked().plaintext,
        plaintext,
        "taking the payload whole after reading it gives the same bytes"
    );
    (plaintext, opened_by, slot_index)
}

#[track_caller]
fn check_same(container: &[u8], secrets: &Secrets, limits: &Limits, cuts: &[usize]) {
    let expected = one_shot(container, secrets, limits);
    for derive in [Derive::AtOnce, Derive::AtTheEnd, Derive::Never] {
        for declared in [None, Some(container.len() as u64), Some(1), Some(u64::MAX)] {
            for take in TAKES {
                let got = in_pieces(container, secrets, limits, cuts, derive, declared, take);
                assert_eq!(
                    got, expected,
                    "{derive:?}, declared {declared:?}, {take:?}, cuts {cuts:?}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_plaintext_cut_anywhere_opens_as_in_one_piece(
        plaintext in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
        by_recovery_key in any::<bool>(),
    ) {
        let sample = sample(&plaintext);
        let secrets = if by_recovery_key { sample.by_recovery_key() } else { sample.by_passphrase() };
        let (opened, kind, _) = in_pieces(&sample.container, &secrets, &LIMITS, &cuts, Derive::AtOnce, None, Take::Finish).unwrap();
        prop_assert_eq!(&opened, &plaintext);
        prop_assert_eq!(kind, if by_recovery_key { SlotKind::RecoveryKey } else { SlotKind::Passphrase });
        check_same(&sample.container, &secrets, &LIMITS, &cuts);
    }

    #[test]
    fn garbage_after_the_magic_gets_the_one_piece_verdict(
        tail in proptest::collection::vec(any::<u8>(), 0..1200),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let cheap = Limits { min_iterations: 1, max_iterations: 2_000, max_plaintext: 1 << 20 };
        let bytes = [MAGIC.as_slice(), &tail].concat();
        let secrets = Secrets { passphrase: Some(Passphrase::new(PASSPHRASE)), recovery_key: Some(RecoveryKey::generate()) };
        check_same(&bytes, &secrets, &cheap, &cuts);
    }
}

#[test]
fn payloads_longer_than_a_stride_and_cut_unevenly_open() {
    let plaintext: Vec<u8> = (0..300_001u32).map(|i| (i * 7 % 251) as u8).collect();
    let sample = sample(&plaintext);
    for cuts in [
        vec![],
        vec![1],
        vec![37, 283, 284, 285],
        vec![100_000, 200_017, 299_999],
    ] {
        check_same(&sample.container, &sample.by_passphrase(), &LIMITS, &cuts);
    }
}

#[test]
fn every_single_byte_change_gets_the_one_piece_verdict_and_never_opens() {
    let sample = sample(&[0x42; 64]);
    let secrets = [sample.by_passphrase(), sample.by_recovery_key()];
    for idx in 0..sample.container.len() {
        for xor in [0x01, 0x80, 0xff] {
            let mut damaged = sample.container.clone();
            damaged[idx] ^= xor;
            for secrets in &secrets {
                // Cut inside the header, at the end of the prefix and inside the payload.
                let cuts = [idx, 100, 268, 300];
                let expected = one_shot(&damaged, secrets, &LIMITS);
                for derive in [Derive::AtOnce, Derive::AtTheEnd] {
                    for take in [Take::Finish, Take::AuthenticatedThenRead(64)] {
                        let got = in_pieces(&damaged, secrets, &LIMITS, &cuts, derive, None, take);
                        assert_eq!(
                            got, expected,
                            "byte {idx} ^ {xor:#04x}, {derive:?}, {take:?}"
                        );
                    }
                }
                // A damaged wrapped key locks only its own slot; everything else is refused.
                if expected.is_ok() {
                    assert!((160..256).contains(&idx), "byte {idx} ^ {xor:#04x} opened");
                }
            }
        }
    }
}

#[test]
fn every_truncation_and_extension_gets_the_one_piece_verdict() {
    let sample = sample(&[0x42; 64]);
    let secrets = sample.by_passphrase();
    for cut in 0..sample.container.len() {
        let truncated = &sample.container[..cut];
        check_same(truncated, &secrets, &LIMITS, &[cut / 2, 270]);
        assert!(one_shot(truncated, &secrets, &LIMITS).is_err());
    }
    let mut extended = sample.container.clone();
    extended.push(0);
    check_same(&extended, &secrets, &LIMITS, &[17]);
    // A wrong secret on a truncated body is truncated, not locked: structure is judged first.
    let wrong = Secrets::passphrase(Passphrase::new("nope"));
    let short = &sample.container[..sample.container.len() - 70];
    assert_eq!(
        in_pieces(
            short,
            &wrong,
            &LIMITS,
            &[],
            Derive::AtOnce,
            None,
            Take::Finish
        )
        .unwrap_err(),
        OpenError::Corrupt(Corruption::TruncatedBody)
    );
    check_same(short, &wrong, &LIMITS, &[]);
}

#[test]
fn hostile_headers_and_sizes_get_the_one_piece_verdict() {
    let sample = sample(&[0x42; 300]);
    let secrets = sample.by_passphrase();
    for iterations in [0u32, 999, 10_000_001] {
        let hostile = patch_header(&sample.container, 160, |b| {
            b[12..16].copy_from_slice(&iterations.to_be_bytes())
        });
        check_same(&hostile, &secrets, &LIMITS, &[50]);
    }
    for n_slots in [0u16, 8, 9, 600] {
        let hostile = patch_header(&sample.container, 160, |b| {
            b[32..34].copy_from_slice(&n_slots.to_be_bytes())
        });
        check_same(&hostile, &secrets, &LIMITS, &[50]);
    }
    // Too large is found from the length alone and wins over locked.
    let small = Limits {
        max_plaintext: 299,
        ..LIMITS
    };
    check_same(&sample.container, &secrets, &small, &[]);
    check_same(
        &sample.container,
        &Secrets::passphrase(Passphrase::new("nope")),
        &small,
        &[],
    );
    assert!(matches!(
        in_pieces(
            &sample.container,
            &secrets,
            &small,
            &[],
            Derive::AtOnce,
            None,
            Take::Finish,
        ),
        Err(OpenError::TooLarge {
            plaintext_len: 300,
            max: 299
        })
    ));
}

#[test]
fn wrong_and_missing_secrets_are_locked() {
    let sample = sample(b"locked");
    for secrets in [
        Secrets::passphrase(Passphrase::new("nope")),
        Secrets::recovery_key(RecoveryKey::generate()),
        Secrets::default(),
    ] {
        check_same(&sample.container, &secrets, &LIMITS, &[10, 300]);
        assert_eq!(
            in_pieces(
                &sample.container,
                &secrets,
                &LIMITS,
                &[],
                Derive::AtOnce,
                None,
                Take::Finish,
            )
            .unwrap_err(),
            OpenError::Locked
        );
    }
}

#[test]
fn an_unlocker_is_offered_once_the_prefix_is_in_and_not_before() {
    let sample = sample(&[1; 1000]);
    // Two slots: 160 header + 96 wrapped keys + 12 IV.
    assert_eq!(Unlocker::prefix_len(&sample.container[..37]), None);
    assert_eq!(Unlocker::prefix_len(&sample.container[..38]), Some(268));
    let mut opening = Opening::new(sample.by_passphrase(), &LIMITS, None);
    opening.push(&sample.container[..267]);
    assert!(opening.take_unlocker().is_none());
    opening.push(&sample.container[267..268]);
    let unlocker = opening.take_unlocker().unwrap();
    assert!(!opening.is_decrypting());
    opening.set_decryptor(unlocker.unlock());
    assert!(opening.is_decrypting());
    opening.push(&sample.container[268..]);
    assert_eq!(opening.finish().unwrap().plaintext, vec![1; 1000]);

    // A prefix that fails a check offers no unlocker: no PBKDF2 is spent on it.
    let mut damaged = sample.container.clone();
    damaged[40] ^= 1;
    let mut opening = Opening::new(sample.by_passphrase(), &LIMITS, None);
    opening.push(&damaged);
    assert!(opening.take_unlocker().is_none());
    assert!(matches!(
        opening.finish().unwrap_err(),
        OpenError::Corrupt(Corruption::HeaderChecksumMismatch { .. })
    ));
}

#[test]
fn a_decryptor_from_another_opening_is_never_used() {
    // Two uploads of the same container; only the first carries the right passphrase.
    let sample = sample(b"mine");
    let mut right = Opening::new(sample.by_passphrase(), &LIMITS, None);
    right.push(&sample.container);
    let decryptor = right.take_unlocker().unwrap().unlock().unwrap();

    let mut wrong = Opening::new(Secrets::passphrase(Passphrase::new("nope")), &LIMITS, None);
    wrong.push(&sample.container);
    let _ = wrong.take_unlocker().unwrap();
    wrong.set_decryptor(Ok(decryptor));
    assert!(!wrong.is_decrypting());
    assert_eq!(wrong.finish().unwrap_err(), OpenError::Locked);
}

#[test]
fn secrets_and_keys_never_print() {
    let sample = sample(b"data");
    let mut opening = Opening::new(sample.by_passphrase(), &LIMITS, None);
    opening.push(&sample.container);
    let unlocker = opening.take_unlocker().unwrap();
    let printed = format!("{unlocker:?}");
    let decryptor = unlocker.unlock().unwrap();
    let printed = format!("{printed} {decryptor:?} {opening:?}");
    assert!(!printed.contains(PASSPHRASE), "{printed}");
    assert!(!printed.contains("data"), "{printed}");
}

#[test]
fn inspecting_the_first_bytes_and_the_length_is_inspecting_the_whole() {
    let sample = sample(&[0x42; 64]);
    let check = |container: &[u8]| {
        let prefix = &container[..container.len().min(922)];
        assert_eq!(
            inspect_prefix(prefix, container.len() as u64, &LIMITS),
            inspect(container, &LIMITS),
            "{} bytes",
            container.len()
        );
    };
    for cut in 0..=sample.container.len() {
        check(&sample.container[..cut]);
    }
    for idx in 0..300 {
        let mut damaged = sample.container.clone();
        damaged[idx] ^= 0x10;
        check(&damaged);
    }
    // Fewer bytes than the length promises are truncated, never a panic.
    assert_eq!(
        inspect_prefix(
            &sample.container[..100],
            sample.container.len() as u64,
            &LIMITS
        ),
        Err(Corruption::TruncatedBody)
    );
    assert_eq!(
        inspect_prefix(&sample.container[..20], 5_000, &LIMITS),
        Err(Corruption::TruncatedHeader)
    );
}

#[test]
fn the_buffer_grows_by_doubling_but_never_past_the_largest_container() {
    let limits = Limits {
        max_plaintext: 5_000,
        ..LIMITS
    };
    let sample = sample(&[7; 4_999]);
    let mut opening = Opening::new(sample.by_passphrase(), &limits, None);
    for piece in sample.container.chunks(100) {
        opening.push(piece);
        if let Some(unlocker) = opening.take_unlocker() {
            opening.set_decryptor(unlocker.unlock());
        }
    }
    let unlocked = opening.finish().unwrap();
    assert_eq!(unlocked.plaintext, vec![7; 4_999]);
    assert!(
        unlocked.plaintext.capacity() as u64 <= limits.max_container_len(),
        "{}",
        unlocked.plaintext.capacity()
    );
}
