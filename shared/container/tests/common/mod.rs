//! Helpers shared by the integration tests: fast limits, a sealed sample, and header surgery that keeps the checksum valid.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use snug_container::{Limits, Passphrase, RecoveryKey, Secrets, header_checksum, seal};

/// Low enough that a seal costs well under a millisecond; no test here is about the count.
pub(crate) const ITERATIONS: u32 = 1_000;

pub(crate) const LIMITS: Limits = Limits {
    min_iterations: 1_000,
    max_iterations: 10_000_000,
    max_plaintext: 67_108_864,
};

pub(crate) const PASSPHRASE: &str = "correct horse battery staple";

pub(crate) struct Sample {
    pub(crate) container: Vec<u8>,
    pub(crate) plaintext: Vec<u8>,
    pub(crate) passphrase: Passphrase,
    pub(crate) recovery_key: RecoveryKey,
}

impl Sample {
    pub(crate) fn by_passphrase(&self) -> Secrets {
        Secrets::passphrase(self.passphrase.clone())
    }

    pub(crate) fn by_recovery_key(&self) -> Secrets {
        Secrets::recovery_key(RecoveryKey::parse(&self.recovery_key.grouped()))
    }
}

pub(crate) fn sample(plaintext: &[u8]) -> Sample {
    let passphrase = Passphrase::new(PASSPHRASE);
    let recovery_key = RecoveryKey::generate();
    let container = seal(plaintext, &passphrase, &recovery_key, ITERATIONS, &LIMITS).expect("seal");
    Sample {
        container,
        plaintext: plaintext.to_vec(),
        passphrase,
        recovery_key,
    }
}

/// Applies `edit` to the header of a two-slot container and stores a matching checksum, as a
/// tamperer (or a buggy writer) would.
pub(crate) fn patch_header(
    container: &[u8],
    header_len: usize,
    edit: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let mut patched = container.to_vec();
    edit(&mut patched);
    let checksum = header_checksum(&patched[..header_len]);
    patched[34..38].copy_from_slice(&checksum.to_be_bytes());
    patched
}
