//! Changing one secret (re-wrapping a single slot's file key under a new KEK, leaving every other byte of the container as it was), and changing the KDF setting, which re-derives every slot.

use zeroize::Zeroizing;

use crate::aead;
use crate::format::{ContainerInfo, Corruption, SlotKind};
use crate::kdf::derive_kek;
use crate::open::{OpenError, Opened, candidate_forms, decrypt_to_vec, inspect_for_open, unlock};
use crate::seal::{SealError, SealMaterial, seal_owned_with};
use crate::secret::{FileKey, Passphrase, RecoveryKey, Secrets};
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
    /// A caller-supplied recovery key for a new slot that is plausible but short of full strength
    /// (26 legacy symbols, 127.6 bits): new slots take only 27 symbols (§11.2 rule 3).
    #[error(
        "the new recovery key has {symbols} symbols; a new slot needs a full-strength 27-symbol key"
    )]
    WeakRecoveryKey {
        /// Symbols in the key given.
        symbols: usize,
    },
    /// [`change_iterations`]: the new count is outside [`Limits`], so the result would not open.
    #[error("iteration count {iterations} is outside the accepted range {min}..={max}")]
    IterationsOutOfRange {
        /// The requested count.
        iterations: u32,
        /// The smallest accepted count.
        min: u32,
        /// The largest accepted count.
        max: u32,
    },
    /// [`change_iterations`]: a slot did not open with the secret of its kind. The salt and the
    /// count are shared by every slot, so changing them re-derives every slot, and each needs
    /// its own secret: the passphrase and the recovery key.
    #[error(
        "slot {slot_index} ({kind:?}) did not open with the secret given; changing the \
         key-derivation setting re-derives every slot, so it needs both the passphrase and the \
         recovery key"
    )]
    SlotNotOpened {
        /// The slot's position in the slot table.
        slot_index: usize,
        /// Its kind.
        kind: SlotKind,
    },
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
    if !new_key.is_full_strength() {
        return Err(RewrapError::WeakRecoveryKey {
            symbols: new_key.symbols(),
        });
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

/// Rewrites `container` at `iterations` PBKDF2 iterations (e.g. [`crate::DEFAULT_ITERATIONS`]
/// for a file made with a weak setting) and returns the new container, which the same
/// passphrase and the same recovery key open.
///
/// The count and the salt live in the header, which is every slot's AAD and every slot's KDF
/// input, so no slot survives the change: every slot must be opened with its own secret (a
/// passphrase slot with `passphrase`, a recovery slot with `recovery_key`; any slot that does
/// not open, an unknown kind included, is [`RewrapError::SlotNotOpened`], because re-sealing
/// without it would silently revoke the secret it holds). The payload is checked, then sealed
/// afresh into a two-slot container: a new salt, file key and IVs (§11.2 rule 5). The recovery
/// key is the user's existing one, so a legacy 26-symbol key is kept as it is.
pub fn change_iterations(
    container: &[u8],
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    limits: &Limits,
) -> Result<Vec<u8>, RewrapError> {
    if limits.check_iterations(iterations).is_err() {
        return Err(RewrapError::IterationsOutOfRange {
            iterations,
            min: limits.min_iterations,
            max: limits.max_iterations,
        });
    }
    let info = inspect_for_open(container, limits)?;
    let file_key = open_every_slot(container, &info, passphrase, recovery_key)?;
    let plaintext = decrypt_to_vec(container, &info, &file_key)?;
    // Both secrets opened their slots, so both are non-empty and plausible, and the plaintext is
    // within the limits it was opened under: sealing cannot refuse them.
    seal_owned_with(
        plaintext,
        passphrase,
        recovery_key,
        iterations,
        SealMaterial::generate(),
    )
    .map_err(|err| match err {
        SealError::TooLarge { plaintext_len, max } => {
            RewrapError::Open(OpenError::TooLarge { plaintext_len, max })
        }
        // seal_owned_with only encrypts; GCM's length limit is its one refusal.
        _ => RewrapError::Open(OpenError::Locked),
    })
}

/// Unwraps every slot of `container` with the secret of its kind and returns the file key they
/// share.
fn open_every_slot(
    container: &[u8],
    info: &ContainerInfo,
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
) -> Result<FileKey, RewrapError> {
    let forms = candidate_forms(Some(passphrase), Some(recovery_key));
    let header = &info.header;
    let aad = &container[..info.header_len];
    let mut keks: Vec<Option<Zeroizing<[u8; 32]>>> = vec![None; forms.len()];
    let mut file_key: Option<FileKey> = None;
    for (slot_index, slot) in header.slots.iter().enumerate() {
        let at = info.wrapped_key_offset(slot_index);
        let wrapped = &container[at..at + WRAPPED_KEY_LEN];
        let opened = forms
            .iter()
            .zip(keks.iter_mut())
            .filter(|(form, _)| form.0 == slot.kind)
            .find_map(|(form, kek)| {
                let kek =
                    kek.get_or_insert_with(|| derive_kek(&form.1, &header.salt, header.iterations));
                aead::unwrap(kek, &slot.iv, aad, wrapped).ok()
            });
        let Some(opened) = opened else {
            return Err(RewrapError::SlotNotOpened {
                slot_index,
                kind: slot.kind,
            });
        };
        match &file_key {
            // Slots that wrap different keys cannot all match one payload: a forged file.
            Some(first) if first.bytes() != opened.bytes() => {
                return Err(OpenError::Corrupt(Corruption::PayloadAuthenticationFailed).into());
            }
            Some(_) => {}
            None => file_key = Some(opened),
        }
    }
    // A container has at least one slot, so the loop returned or set a key.
    file_key.ok_or(RewrapError::Open(OpenError::Locked))
}
