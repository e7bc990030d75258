//! Fuzz target: arbitrary bytes through `inspect`, `open`, `open_owned` and an `Opening` fed in uneven pieces, as they are and with the structural fields made plausible so the fuzzer gets past the checksum to the slots and the payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snug_container::{
    Limits, MAGIC, OpenError, Opening, Passphrase, RecoveryKey, Secrets, Unlocked,
    header_checksum, inspect, inspect_prefix, open, open_owned,
};

/// A header may ask for at most 2,000 iterations, so no input turns fuzzing into key derivation.
const LIMITS: Limits = Limits {
    min_iterations: 1,
    max_iterations: 2_000,
    max_plaintext: 1 << 20,
};

fuzz_target!(|data: &[u8]| {
    let secrets = Secrets {
        passphrase: Some(Passphrase::new("correct horse battery staple")),
        recovery_key: Some(RecoveryKey::parse("ABCDE-FGHJK-MNPQR-STVWX-YZ234-56")),
    };
    check(data, &secrets);
    // The first byte picks a repair: the rest becomes a container with a valid magic, version,
    // KDF, slot count, cheap iteration count and checksum, whatever its slots and payload hold.
    if let Some((&selector, rest)) = data.split_first() {
        let mut repaired = MAGIC.to_vec();
        repaired.extend_from_slice(rest);
        repaired.resize(repaired.len().max(38), 0);
        repaired[9] = 1;
        repaired[10..12].copy_from_slice(&[0, 1]);
        let iterations = u32::from(selector & 0x0f) + 1;
        repaired[12..16].copy_from_slice(&iterations.to_be_bytes());
        let n_slots = u16::from(selector >> 4) % 8 + 1;
        repaired[32..34].copy_from_slice(&n_slots.to_be_bytes());
        let header_len = (38 + 61 * usize::from(n_slots)).min(repaired.len());
        let checksum = header_checksum(&repaired[..header_len]);
        repaired[34..38].copy_from_slice(&checksum.to_be_bytes());
        check(&repaired, &secrets);
    }
});

fn check(bytes: &[u8], secrets: &Secrets) {
    let inspected = inspect(bytes, &LIMITS);
    let opened = open(bytes, secrets, &LIMITS);
    let owned = open_owned(bytes.to_vec(), secrets, &LIMITS);
    // Both open paths must agree, and with inspect on whether the container is corrupt.
    match (&opened, &owned) {
        (Ok(a), Ok(b)) => assert_eq!(a.plaintext, b.plaintext),
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("open and open_owned disagree: {opened:?} / {owned:?}"),
    }
    // So must an upload opened as it arrives, and the inspection of its first bytes alone.
    for authenticate_first in [false, true] {
        let incremental = in_pieces(bytes, secrets, authenticate_first);
        match (&opened, &incremental) {
            (Ok(a), Ok(b)) => assert_eq!(a.plaintext, b.plaintext),
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("open and Opening disagree: {opened:?} / {incremental:?}"),
        }
    }
    let prefix = &bytes[..bytes.len().min(922)];
    assert_eq!(inspect_prefix(prefix, bytes.len() as u64, &LIMITS), inspected);
    if let Err(corruption) = inspected {
        assert_eq!(opened.unwrap_err(), OpenError::Corrupt(corruption));
    }
}

/// Feeds `bytes` to an `Opening` in pieces of 1, 37, 230 and 1000 bytes in turn, deriving the
/// key as soon as it is offered; authenticate-first, it reads the plaintext in 100-byte steps.
fn in_pieces(
    bytes: &[u8],
    secrets: &Secrets,
    authenticate_first: bool,
) -> Result<Unlocked, OpenError> {
    let mut opening = Opening::new(secrets.clone(), &LIMITS, None);
    if authenticate_first {
        opening = opening.authenticate_first();
    }
    let mut rest = bytes;
    for size in [1, 37, 230, 1000].into_iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        opening.push(piece);
        rest = tail;
        if let Some(unlocker) = opening.take_unlocker() {
            opening.set_decryptor(unlocker.unlock());
        }
    }
    if !authenticate_first {
        return opening.finish();
    }
    let mut authenticated = opening.finish_authenticated()?;
    let (opened_by, slot_index) = (authenticated.opened_by(), authenticated.slot_index());
    let mut plaintext = Vec::new();
    let mut step = [0u8; 100];
    loop {
        let n = std::io::Read::read(&mut authenticated, &mut step).expect("reads never fail");
        if n == 0 {
            break;
        }
        plaintext.extend_from_slice(&step[..n]);
    }
    Ok(Unlocked {
        plaintext,
        opened_by,
        slot_index,
    })
}
