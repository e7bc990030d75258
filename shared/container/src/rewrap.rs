//! Changing one secret: re-wrapping a single slot's file key under a new KEK, leaving every other byte of the container as it was.

use zeroize::Zeroizing;

use crate::aead;
use crate::format::{ContainerInfo, SlotKind};
use crate::kdf::derive_kek;
use crate::open::{OpenError, Opened, decrypt_to_vec, inspect_for_open, unlock};
use crate::secret::{Passphrase, RecoveryKey, Secrets};
use crate::{Limits, WRAPPED_KEY_LEN};

/// Why a secret was not changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewrapError {
    /// The container did not open with the secret given (locked, corrupt or too large).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The new passphrase is empty.
    #[error("the new passphrase is empty")]
    EmptyPassphrase,
    /// The container has no passphrase slot to re-wrap.
    #[error("this container has no passphrase slot")]
    NoPassphraseSlot,
    /// The container has no recovery-key slot to re-wrap.
    #[error("this container has no recovery-key slot")]
    NoRecoverySlot,
    /// The new recovery key is not 26 or 27 symbols of the alphabet.
    #[error("the new recovery key is not a valid recovery key")]
    ImplausibleRecoveryKey,
}

/// Changes the passphrase: the file key is unwrapped with `current` (passphrase slots only) and
/// re-wrapped under PBKDF2(NFC of `new`, same salt, same iterations) with the slot's IV and the
/// same AAD, so only that slot's 48 wrapped bytes change (§11.2 rule 1; the IV reuse under a
/// new KEK is rule 5's stated exception).
///
/// The slot re-wrapped is the one `current` opened, which for every container this crate or the
/// reference writes is the first passphrase slot; re-wrapping a slot the user did not prove
/// knowledge of would silently revoke whatever secret it held. The payload is checked first, so a
/// damaged file is reported as corrupt rather than given a new passphrase.
pub fn change_passphrase(
    container: &[u8],
    current: &Passphrase,
    new: &Passphrase,
    limits: &Limits,
) -> Result<Vec<u8>, RewrapError> {
    if new.is_empty() {
        return Err(RewrapError::EmptyPassphrase);
    }
    let info = inspect_for_open(container, limits)?;
    if !has_slot(&info, SlotKind::Passphrase) {
        return Err(RewrapError::NoPassphraseSlot);
    }
    let opened = unlock(container, &info, Some(current), None)?;
    let new = new.nfc();
    Ok(rewrap(
        container,
        &info,
        &opened,
        opened.slot_idx,
        new.as_bytes(),
    )?)
}

/// Replaces the recovery key with a freshly generated one and returns the container and the new
/// key, which the user must be shown: the old key stops working.
///
/// See [`rotate_recovery_key_to`].
pub fn rotate_recovery_key(
    container: &[u8],
    secrets: &Secrets,
    limits: &Limits,
) -> Result<(Vec<u8>, RecoveryKey), RewrapError> {
    let new_key = RecoveryKey::generate();
    let rotated = rotate_recovery_key_to(container, secrets, &new_key, limits)?;
    Ok((rotated, new_key))
}

/// Re-wraps the first recovery-key slot under `new_key`: the container is opened with any secret
/// in `secrets`, and only that slot's 48 wrapped bytes change (same IV: the new KEK keeps the
/// key/IV pair unique, §11.2 rule 5).
pub fn rotate_recovery_key_to(
    container: &[u8],
    secrets: &Secrets,
    new_key: &RecoveryKey,
    limits: &Limits,
) -> Result<Vec<u8>, RewrapError> {
    if !new_key.is_plausible() {
        return Err(RewrapError::ImplausibleRecoveryKey);
    }
    let info = inspect_for_open(container, limits)?;
    let Some(slot_idx) = info
        .header
        .slots
        .iter()
        .position(|slot| slot.kind == SlotKind::RecoveryKey)
    else {
        return Err(RewrapError::NoRecoverySlot);
    };
    let opened = unlock(
        container,
        &info,
        secrets.passphrase.as_ref(),
        secrets.recovery_key.as_ref(),
    )?;
    Ok(rewrap(
        container,
        &info,
        &opened,
        slot_idx,
        new_key.normalized().as_bytes(),
    )?)
}

fn has_slot(info: &ContainerInfo, kind: SlotKind) -> bool {
    info.header.slots.iter().any(|slot| slot.kind == kind)
}

/// Returns a copy of `container` whose slot `slot_idx` wraps the opened file key under the KEK
/// of `secret`, after proving the payload authenticates under that file key.
fn rewrap(
    container: &[u8],
    info: &ContainerInfo,
    opened: &Opened,
    slot_idx: usize,
    secret: &[u8],
) -> Result<Vec<u8>, OpenError> {
    drop(Zeroizing::new(decrypt_to_vec(
        container,
        info,
        &opened.file_key,
    )?));
    let header = &info.header;
    let kek = derive_kek(secret, &header.salt, header.iterations);
    let wrapped = aead::wrap(
        &kek,
        &header.slots[slot_idx].iv,
        &container[..info.header_len],
        &opened.file_key,
    );
    let mut rewrapped = container.to_vec();
    let at = info.wrapped_key_offset(slot_idx);
    rewrapped[at..at + WRAPPED_KEY_LEN].copy_from_slice(&wrapped);
    Ok(rewrapped)
}
