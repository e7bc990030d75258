//! Opening a container: which slots are tried with which secret, and how the payload is decrypted (in place when the caller gives up the buffer).

use zeroize::Zeroizing;

use crate::aead::{self, decrypt_payload, decrypt_payload_in_place};
use crate::format::{ContainerInfo, Corruption, Limits, SlotKind, inspect};
use crate::kdf::derive_kek;
use crate::secret::{FileKey, Passphrase, RecoveryKey, Secrets};
use crate::{TAG_LEN, WRAPPED_KEY_LEN};

/// Why [`open`] returned no plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// A structurally sound container that no supplied secret opened. The file is healthy and must
    /// not be quarantined, rewritten or replaced (§11.2 rule 7).
    #[error("no supplied secret opens this container")]
    Locked,
    /// The container cannot be read whatever the secret.
    #[error(transparent)]
    Corrupt(#[from] Corruption),
    /// The plaintext would exceed [`Limits::max_plaintext`]; found from the lengths alone, before
    /// any key derivation.
    #[error("the protected contents are {plaintext_len} bytes, over the limit of {max}")]
    TooLarge {
        /// The plaintext length the container declares by its size.
        plaintext_len: u64,
        /// The accepted maximum.
        max: u64,
    },
}

impl OpenError {
    /// Returns a stable snake_case name of the cause: `locked`, `too_large`, or the
    /// [`Corruption::code`].
    pub fn code(&self) -> &'static str {
        match self {
            OpenError::Locked => "locked",
            OpenError::Corrupt(corruption) => corruption.code(),
            OpenError::TooLarge { .. } => "too_large",
        }
    }
}

/// A container's plaintext and the slot that opened it.
pub struct Unlocked {
    /// The protected bytes (a SQLite user database, for user files).
    pub plaintext: Vec<u8>,
    /// The kind of the slot that opened.
    pub opened_by: SlotKind,
    /// Its position in the slot table.
    pub slot_index: usize,
}

impl std::fmt::Debug for Unlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The plaintext holds the user's data and possibly credentials; only its size is shown.
        f.debug_struct("Unlocked")
            .field("plaintext_len", &self.plaintext.len())
            .field("opened_by", &self.opened_by)
            .field("slot_index", &self.slot_index)
            .finish()
    }
}

/// A file key together with the slot it came from.
pub(crate) struct Opened {
    pub(crate) file_key: FileKey,
    pub(crate) kind: SlotKind,
    pub(crate) slot_idx: usize,
}

/// Parses `container` and applies the size limit, all before any key derivation.
pub(crate) fn inspect_for_open(
    container: &[u8],
    limits: &Limits,
) -> Result<ContainerInfo, OpenError> {
    let info = inspect(container, limits)?;
    if info.plaintext_len > limits.max_plaintext {
        return Err(OpenError::TooLarge {
            plaintext_len: info.plaintext_len,
            max: limits.max_plaintext,
        });
    }
    Ok(info)
}

/// Finds the first slot, in table order, that a supplied secret unwraps.
///
/// Only slots a supplied secret can match are tried: a passphrase against kind 0x01, a plausible
/// recovery key against kind 0x02; empty secrets are skipped. Every slot shares one salt and
/// one iteration count, so a KEK does not depend on the slot: each candidate form costs one
/// PBKDF2 however many slots of its kind there are, and none is derived before a slot needs it.
pub(crate) fn unlock(
    container: &[u8],
    info: &ContainerInfo,
    passphrase: Option<&Passphrase>,
    recovery_key: Option<&RecoveryKey>,
) -> Result<Opened, OpenError> {
    let forms = candidate_forms(passphrase, recovery_key);

    let header = &info.header;
    let aad = &container[..info.header_len];
    let mut keks: Vec<Option<Zeroizing<[u8; 32]>>> = vec![None; forms.len()];
    for (slot_idx, slot) in header.slots.iter().enumerate() {
        let at = info.wrapped_key_offset(slot_idx);
        let wrapped = &container[at..at + WRAPPED_KEY_LEN];
        for (form, kek) in forms.iter().zip(keks.iter_mut()) {
            if form.0 != slot.kind {
                continue;
            }
            let kek =
                kek.get_or_insert_with(|| derive_kek(&form.1, &header.salt, header.iterations));
            if let Ok(file_key) = aead::unwrap(kek, &slot.iv, aad, wrapped) {
                return Ok(Opened {
                    file_key,
                    kind: slot.kind,
                    slot_idx,
                });
            }
        }
    }
    Err(OpenError::Locked)
}

/// Byte strings a KEK may be derived from, each with the slot kind it can open.
pub(crate) type CandidateForms = Vec<(SlotKind, Zeroizing<Vec<u8>>)>;

/// Returns the forms of the supplied secrets, in the order they are tried.
///
/// NFC first, which is what this crate writes; then the bytes as typed, which is what the
/// reference writes (it does not normalise), so an NFD passphrase from such a file still opens.
/// Empty passphrases and implausible recovery keys give no form: they are never tried.
pub(crate) fn candidate_forms(
    passphrase: Option<&Passphrase>,
    recovery_key: Option<&RecoveryKey>,
) -> CandidateForms {
    let mut forms: CandidateForms = Vec::with_capacity(3);
    if let Some(passphrase) = passphrase.filter(|p| !p.is_empty()) {
        let nfc = passphrase.nfc();
        let differs = nfc.as_str() != passphrase.raw();
        forms.push((
            SlotKind::Passphrase,
            Zeroizing::new(nfc.as_bytes().to_vec()),
        ));
        if differs {
            forms.push((
                SlotKind::Passphrase,
                Zeroizing::new(passphrase.raw().as_bytes().to_vec()),
            ));
        }
    }
    if let Some(recovery_key) = recovery_key.filter(|k| k.is_plausible()) {
        forms.push((
            SlotKind::RecoveryKey,
            Zeroizing::new(recovery_key.normalized().as_bytes().to_vec()),
        ));
    }
    forms
}

/// Decrypts the payload of `container` into a new buffer (used where the container is borrowed).
pub(crate) fn decrypt_to_vec(
    container: &[u8],
    info: &ContainerInfo,
    file_key: &FileKey,
) -> Result<Vec<u8>, OpenError> {
    let start = info.ciphertext_offset();
    let end = container.len() - TAG_LEN;
    // Zeroed pages are mapped lazily, so this costs no pass of its own before the decryption.
    let mut plaintext = vec![0u8; end - start];
    decrypt_payload(
        file_key,
        &info.payload_iv,
        &container[..info.header_len],
        &container[start..end],
        &container[end..],
        &mut plaintext,
    )
    .map_err(|_| Corruption::PayloadAuthenticationFailed)?;
    Ok(plaintext)
}

/// Opens `container` with `secrets`.
///
/// Checks run cheapest first: structure and header checksum, the iteration and size limits, then
/// one PBKDF2 per candidate secret form, then the payload. No slot opening is
/// [`OpenError::Locked`]; a slot that opens over a payload that fails GCM is
/// [`Corruption::PayloadAuthenticationFailed`].
pub fn open(container: &[u8], secrets: &Secrets, limits: &Limits) -> Result<Unlocked, OpenError> {
    let info = inspect_for_open(container, limits)?;
    let opened = unlock(
        container,
        &info,
        secrets.passphrase.as_ref(),
        secrets.recovery_key.as_ref(),
    )?;
    let plaintext = decrypt_to_vec(container, &info, &opened.file_key)?;
    Ok(Unlocked {
        plaintext,
        opened_by: opened.kind,
        slot_index: opened.slot_idx,
    })
}

/// Opens `container` like [`open`], decrypting in place: the plaintext is returned in the
/// container's own allocation, so peak memory stays about one container.
pub fn open_owned(
    container: Vec<u8>,
    secrets: &Secrets,
    limits: &Limits,
) -> Result<Unlocked, OpenError> {
    open_owned_with_file_key(container, secrets, limits).map(|(unlocked, _)| unlocked)
}

/// Opens `container` like [`open_owned`] and also returns the file key, so that a later save can
/// [`crate::reseal`] without deriving a key again.
pub fn open_owned_with_file_key(
    mut container: Vec<u8>,
    secrets: &Secrets,
    limits: &Limits,
) -> Result<(Unlocked, FileKey), OpenError> {
    let info = inspect_for_open(&container, limits)?;
    let opened = unlock(
        &container,
        &info,
        secrets.passphrase.as_ref(),
        secrets.recovery_key.as_ref(),
    )?;
    let start = info.ciphertext_offset();
    let len = container.len() - start - TAG_LEN;
    {
        let (head, body) = container.split_at_mut(start);
        let (ciphertext, tag) = body.split_at_mut(len);
        // On failure the buffer still holds only ciphertext (the tag is checked first) and is
        // dropped as it is.
        decrypt_payload_in_place(
            &opened.file_key,
            &info.payload_iv,
            &head[..info.header_len],
            ciphertext,
            tag,
        )
        .map_err(|_| Corruption::PayloadAuthenticationFailed)?;
    }
    container.copy_within(start..start + len, 0);
    // The bytes past the plaintext now hold a stale copy of its tail; the caller only sees `len`
    // bytes, but the allocation outlives this call.
    container[len..].fill(0);
    container.truncate(len);
    let unlocked = Unlocked {
        plaintext: container,
        opened_by: opened.kind,
        slot_index: opened.slot_idx,
    };
    Ok((unlocked, opened.file_key))
}

/// Unwraps the file key of `container` and says which kind of slot gave it, without decrypting
/// the payload (so it does not prove the payload is intact; [`crate::reseal`] checks that).
pub fn open_file_key(
    container: &[u8],
    secrets: &Secrets,
    limits: &Limits,
) -> Result<(FileKey, SlotKind), OpenError> {
    let info = inspect_for_open(container, limits)?;
    let opened = unlock(
        container,
        &info,
        secrets.passphrase.as_ref(),
        secrets.recovery_key.as_ref(),
    )?;
    Ok((opened.file_key, opened.kind))
}

/// Returns the plaintext of `container`, which is all that removing protection takes: the caller
/// writes it back as a plain user database (§11: protection is reversible).
pub fn remove_protection(
    container: &[u8],
    secrets: &Secrets,
    limits: &Limits,
) -> Result<Unlocked, OpenError> {
    open(container, secrets, limits)
}
