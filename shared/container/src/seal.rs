//! Sealing plaintext into a two-slot container, and resealing a new payload under an existing file key.

use std::thread;

use zeroize::Zeroizing;

use crate::aead::{self, encrypt_payload, encrypt_payload_in_place};
use crate::format::{ContainerInfo, Corruption, Header, Limits, Slot, SlotKind, inspect};
use crate::kdf::derive_kek;
use crate::open::{OpenError, decrypt_to_vec, inspect_for_open, unlock};
use crate::random::fill;
use crate::secret::{FileKey, Passphrase, RecoveryKey, Secrets};
use crate::{IV_LEN, KDF_PBKDF2_HMAC_SHA256, TAG_LEN, VERSION, WRAPPED_KEY_LEN};

/// All the randomness one seal consumes, so that tests can fix it (the c03 vector). Public only
/// with the `test-support` feature.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(any(test, feature = "test-support")),
    allow(unreachable_pub, reason = "exported only with test-support")
)]
pub struct SealMaterial {
    /// The salt every slot's KEK is derived with.
    pub salt: [u8; 16],
    /// The key the payload is encrypted under.
    pub file_key: FileKey,
    /// The IV wrapping the file key in the passphrase slot.
    pub passphrase_slot_iv: [u8; 12],
    /// The IV wrapping the file key in the recovery-key slot.
    pub recovery_slot_iv: [u8; 12],
    /// The IV of the payload.
    pub payload_iv: [u8; 12],
}

#[cfg_attr(
    not(any(test, feature = "test-support")),
    allow(unreachable_pub, reason = "exported only with test-support")
)]
impl SealMaterial {
    /// Returns fresh CSPRNG material, drawn in the reference's order: salt, file key, passphrase
    /// slot IV, recovery slot IV, payload IV (§11.2 rule 5).
    ///
    /// # Panics
    /// Panics if the operating system has no working random source.
    pub fn generate() -> Self {
        let mut salt = [0; 16];
        fill(&mut salt);
        let file_key = FileKey::generate();
        let mut passphrase_slot_iv = [0; IV_LEN];
        fill(&mut passphrase_slot_iv);
        let mut recovery_slot_iv = [0; IV_LEN];
        fill(&mut recovery_slot_iv);
        let mut payload_iv = [0; IV_LEN];
        fill(&mut payload_iv);
        SealMaterial {
            salt,
            file_key,
            passphrase_slot_iv,
            recovery_slot_iv,
            payload_iv,
        }
    }
}

/// Why no container was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// An empty passphrase protects nothing.
    #[error("the passphrase is empty")]
    EmptyPassphrase,
    /// The iteration count is outside [`Limits`], so this crate would refuse to open the result.
    #[error("iteration count {iterations} is outside the accepted range {min}..={max}")]
    IterationsOutOfRange {
        /// The requested count.
        iterations: u32,
        /// The smallest accepted count.
        min: u32,
        /// The largest accepted count.
        max: u32,
    },
    /// The plaintext exceeds [`Limits::max_plaintext`] (§11.2 rule 9).
    #[error("the contents are {plaintext_len} bytes, over the limit of {max}")]
    TooLarge {
        /// The plaintext length.
        plaintext_len: u64,
        /// The accepted maximum.
        max: u64,
    },
    /// The recovery key is not 26 or 27 symbols of the alphabet, so it could never be typed back.
    #[error("the recovery key is not a valid recovery key")]
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
    /// [`reseal`] was given a container that cannot be read.
    #[error(transparent)]
    Corrupt(#[from] Corruption),
    /// [`reseal`] was given a file key that is not the container's (unwrapped from another
    /// container, or, for a key made from bytes, one the current payload does not authenticate
    /// under). Writing would leave slots that unwrap a key the new payload is not encrypted under.
    #[error("the file key does not open this container")]
    FileKeyMismatch,
}

/// Seals `plaintext` into a new container with a passphrase slot (slot 0) and a recovery-key slot
/// (slot 1), from fresh CSPRNG material.
///
/// A container is never made with fewer than these two slots (§11.2 rule 2). `iterations` must
/// lie within `limits`, which tests use to seal quickly with a low count.
pub fn seal(
    plaintext: &[u8],
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    limits: &Limits,
) -> Result<Vec<u8>, SealError> {
    check_seal(plaintext, passphrase, recovery_key, iterations, limits)?;
    seal_material(
        plaintext,
        passphrase,
        recovery_key,
        iterations,
        limits,
        SealMaterial::generate(),
    )
}

fn check_seal(
    plaintext: &[u8],
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    limits: &Limits,
) -> Result<(), SealError> {
    if passphrase.is_empty() {
        return Err(SealError::EmptyPassphrase);
    }
    if !recovery_key.is_plausible() {
        return Err(SealError::ImplausibleRecoveryKey);
    }
    if !recovery_key.is_full_strength() {
        return Err(SealError::WeakRecoveryKey {
            symbols: recovery_key.symbols(),
        });
    }
    check_seal_iterations(iterations, limits)?;
    check_plaintext_len(plaintext, limits)
}

/// Refuses to write a header this crate's own [`Limits`] would refuse to open (zero included).
fn check_seal_iterations(iterations: u32, limits: &Limits) -> Result<(), SealError> {
    if limits.check_iterations(iterations).is_err() {
        return Err(SealError::IterationsOutOfRange {
            iterations,
            min: limits.min_iterations,
            max: limits.max_iterations,
        });
    }
    Ok(())
}

fn check_plaintext_len(plaintext: &[u8], limits: &Limits) -> Result<(), SealError> {
    let plaintext_len = plaintext.len() as u64;
    if plaintext_len > limits.max_plaintext {
        return Err(SealError::TooLarge {
            plaintext_len,
            max: limits.max_plaintext,
        });
    }
    Ok(())
}

/// Seals like [`seal`] with the given `material` instead of fresh randomness; only with the
/// `test-support` feature, so a fixed salt or IV is never reachable from a normal build.
///
/// The passphrase is used in NFC, so the same passphrase typed on any platform opens the file.
/// The header, the AAD of every GCM operation, is fully known before any KEK, so the payload is
/// encrypted while the two PBKDF2 derivations run on threads of their own.
fn seal_material(
    plaintext: &[u8],
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    limits: &Limits,
    material: SealMaterial,
) -> Result<Vec<u8>, SealError> {
    check_seal(plaintext, passphrase, recovery_key, iterations, limits)?;
    let header = two_slot_header(iterations, &material);
    // Zeroed pages are mapped lazily and the payload is encrypted straight into them, so the
    // plaintext is never copied first.
    let mut container = vec![0u8; container_len(header.len(), 2, plaintext.len())];
    seal_into(
        &mut container,
        &header,
        Payload::From(plaintext),
        passphrase,
        recovery_key,
        iterations,
        &material,
    )?;
    Ok(container)
}

/// Seals like [`seal`] with the given `material`; only with the `test-support` feature.
#[cfg(any(test, feature = "test-support"))]
pub fn seal_with(
    plaintext: &[u8],
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    limits: &Limits,
    material: SealMaterial,
) -> Result<Vec<u8>, SealError> {
    seal_material(
        plaintext,
        passphrase,
        recovery_key,
        iterations,
        limits,
        material,
    )
}

/// Seals like [`seal`], taking ownership of the plaintext and encrypting it where it lies.
///
/// The allocation grows by the container overhead at the front (the plaintext moves up by a few
/// hundred bytes), so no second buffer of the plaintext's size is made: peak memory stays about
/// one plaintext, and no fresh pages have to be faulted in.
pub fn seal_owned(
    plaintext: Vec<u8>,
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    limits: &Limits,
) -> Result<Vec<u8>, SealError> {
    check_seal(&plaintext, passphrase, recovery_key, iterations, limits)?;
    seal_owned_with(
        plaintext,
        passphrase,
        recovery_key,
        iterations,
        SealMaterial::generate(),
    )
}

/// [`seal_owned`] with fixed material, for tests; the caller has run `check_seal`.
pub(crate) fn seal_owned_with(
    plaintext: Vec<u8>,
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    material: SealMaterial,
) -> Result<Vec<u8>, SealError> {
    let header = two_slot_header(iterations, &material);
    let mut container = make_room(plaintext, header.len() + WRAPPED_KEY_LEN * 2 + IV_LEN);
    seal_into(
        &mut container,
        &header,
        Payload::InPlace,
        passphrase,
        recovery_key,
        iterations,
        &material,
    )?;
    Ok(container)
}

fn two_slot_header(iterations: u32, material: &SealMaterial) -> Vec<u8> {
    Header {
        version: VERSION,
        kdf_id: KDF_PBKDF2_HMAC_SHA256,
        iterations,
        salt: material.salt,
        checksum: 0,
        slots: vec![
            Slot {
                kind: SlotKind::Passphrase,
                iv: material.passphrase_slot_iv,
            },
            Slot {
                kind: SlotKind::RecoveryKey,
                iv: material.recovery_slot_iv,
            },
        ],
    }
    .encode()
}

fn container_len(header_len: usize, n_slots: usize, plaintext_len: usize) -> usize {
    header_len + WRAPPED_KEY_LEN * n_slots + IV_LEN + plaintext_len + TAG_LEN
}

/// Where the payload plaintext comes from.
enum Payload<'a> {
    /// A borrowed buffer, encrypted into the container.
    From(&'a [u8]),
    /// The container's payload region already holds the plaintext.
    InPlace,
}

/// Returns `plaintext` moved up by `prefix` bytes with room for the tag after it, in the same
/// allocation where the allocator can grow it in place (large blocks are remapped, not copied).
fn make_room(plaintext: Vec<u8>, prefix: usize) -> Vec<u8> {
    let len = plaintext.len();
    let mut buffer = plaintext;
    // Exact: the default doubling would reserve a second plaintext's worth of address space.
    buffer.reserve_exact(prefix + TAG_LEN);
    buffer.resize(prefix + len + TAG_LEN, 0);
    buffer.copy_within(0..len, prefix);
    // The prefix still holds the start of the plaintext; every byte of it is overwritten with
    // the header, the wrapped keys and the payload IV before the container is returned.
    buffer
}

/// Fills `container` (sized for two slots and the payload) with header, payload IV, payload
/// and both wrapped keys.
fn seal_into(
    container: &mut [u8],
    header: &[u8],
    payload: Payload<'_>,
    passphrase: &Passphrase,
    recovery_key: &RecoveryKey,
    iterations: u32,
    material: &SealMaterial,
) -> Result<(), SealError> {
    let header_len = header.len();
    let (head, rest) = container.split_at_mut(header_len);
    head.copy_from_slice(header);
    let (wrapped_keys, rest) = rest.split_at_mut(WRAPPED_KEY_LEN * 2);
    let (payload_iv, rest) = rest.split_at_mut(IV_LEN);
    payload_iv.copy_from_slice(&material.payload_iv);
    let plaintext_len = rest.len() - TAG_LEN;
    let (ciphertext, tag) = rest.split_at_mut(plaintext_len);

    let nfc = passphrase.nfc();
    let salt = &material.salt;
    let (passphrase_kek, recovery_kek, payload_tag) = thread::scope(|scope| {
        let passphrase_kek = scope.spawn(|| derive_kek(nfc.as_bytes(), salt, iterations));
        let recovery_kek =
            scope.spawn(|| derive_kek(recovery_key.normalized().as_bytes(), salt, iterations));
        let payload_tag = encrypt(
            &material.file_key,
            &material.payload_iv,
            header,
            payload,
            ciphertext,
        );
        (join(passphrase_kek), join(recovery_kek), payload_tag)
    });
    tag.copy_from_slice(&payload_tag?);
    let (passphrase_wrapped, recovery_wrapped) = wrapped_keys.split_at_mut(WRAPPED_KEY_LEN);
    passphrase_wrapped.copy_from_slice(&aead::wrap(
        &passphrase_kek,
        &material.passphrase_slot_iv,
        header,
        &material.file_key,
    ));
    recovery_wrapped.copy_from_slice(&aead::wrap(
        &recovery_kek,
        &material.recovery_slot_iv,
        header,
        &material.file_key,
    ));
    Ok(())
}

fn encrypt(
    file_key: &FileKey,
    iv: &[u8; 12],
    aad: &[u8],
    payload: Payload<'_>,
    ciphertext: &mut [u8],
) -> Result<[u8; TAG_LEN], SealError> {
    let plaintext_len = ciphertext.len() as u64;
    match payload {
        Payload::From(plaintext) => encrypt_payload(file_key, iv, aad, plaintext, ciphertext),
        Payload::InPlace => encrypt_payload_in_place(file_key, iv, aad, ciphertext),
    }
    // GCM refuses only plaintexts over 2^36 - 32 bytes.
    .map_err(|_| SealError::TooLarge {
        plaintext_len,
        max: aes_gcm::P_MAX,
    })
}

fn join<T>(handle: thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Writes `plaintext` as the new payload of `container`: header and wrapped keys are copied
/// verbatim, the payload gets a fresh IV and is encrypted under `file_key` (every save of a
/// protected file).
///
/// Copying the slots keeps every secret valid, including a recovery key the session never saw.
/// A `file_key` that is not the container's is refused ([`SealError::FileKeyMismatch`]): the
/// result would be a container whose slots unwrap a key its payload is not encrypted under. For a
/// key this crate unwrapped ([`crate::open_file_key`], [`crate::open_owned_with_file_key`]) that
/// check is a comparison of headers; for a key made from bytes it costs one decryption of the
/// current payload.
pub fn reseal(
    container: &[u8],
    file_key: &FileKey,
    plaintext: &[u8],
    limits: &Limits,
) -> Result<Vec<u8>, SealError> {
    let info = check_reseal(container, file_key, plaintext.len(), limits)?;
    let keep = info.payload_iv_offset();
    let mut resealed = vec![0u8; keep + IV_LEN + plaintext.len() + TAG_LEN];
    reseal_into(
        &mut resealed,
        container,
        &info,
        file_key,
        Payload::From(plaintext),
    )?;
    Ok(resealed)
}

/// Reseals like [`reseal`], taking ownership of the plaintext and encrypting it where it lies
/// (see [`seal_owned`]).
pub fn reseal_owned(
    container: &[u8],
    file_key: &FileKey,
    plaintext: Vec<u8>,
    limits: &Limits,
) -> Result<Vec<u8>, SealError> {
    let info = check_reseal(container, file_key, plaintext.len(), limits)?;
    let mut resealed = make_room(plaintext, info.payload_iv_offset() + IV_LEN);
    reseal_into(&mut resealed, container, &info, file_key, Payload::InPlace)?;
    Ok(resealed)
}

fn check_reseal(
    container: &[u8],
    file_key: &FileKey,
    plaintext_len: usize,
    limits: &Limits,
) -> Result<ContainerInfo, SealError> {
    let plaintext_len = plaintext_len as u64;
    if plaintext_len > limits.max_plaintext {
        return Err(SealError::TooLarge {
            plaintext_len,
            max: limits.max_plaintext,
        });
    }
    let info = inspect(container, limits)?;
    let belongs = match file_key.belongs_to(&container[..info.header_len]) {
        Some(belongs) => belongs,
        // A key from bytes carries no header; the payload tells. The scratch is wiped on drop.
        None => decrypt_to_vec(container, &info, file_key)
            .map(Zeroizing::new)
            .is_ok(),
    };
    if !belongs {
        return Err(SealError::FileKeyMismatch);
    }
    Ok(info)
}

fn reseal_into(
    resealed: &mut [u8],
    container: &[u8],
    info: &ContainerInfo,
    file_key: &FileKey,
    payload: Payload<'_>,
) -> Result<(), SealError> {
    let keep = info.payload_iv_offset();
    let mut payload_iv = [0; IV_LEN];
    fill(&mut payload_iv);
    let (kept, rest) = resealed.split_at_mut(keep);
    kept.copy_from_slice(&container[..keep]);
    let (iv, rest) = rest.split_at_mut(IV_LEN);
    iv.copy_from_slice(&payload_iv);
    let (ciphertext, tag) = rest.split_at_mut(rest.len() - TAG_LEN);
    tag.copy_from_slice(&encrypt(
        file_key,
        &payload_iv,
        &kept[..info.header_len],
        payload,
        ciphertext,
    )?);
    Ok(())
}

/// Why [`reseal_with_secrets`] wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResealError {
    /// The container did not open with the secrets given (locked, corrupt, out of policy or too
    /// large). A locked container is healthy and is left as it is (§11.2 rule 7).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The new plaintext exceeds [`Limits::max_plaintext`] (§11.2 rule 9).
    #[error("the new contents are {plaintext_len} bytes, over the limit of {max}")]
    TooLarge {
        /// The new plaintext's length.
        plaintext_len: u64,
        /// The accepted maximum.
        max: u64,
    },
}

/// Opens `container` with `secrets` and writes `plaintext` as its new payload: the one call an
/// edit of a protected file needs (see [`reseal`], which this is after an open).
///
/// Everything up to the payload IV (header, salt, slot table, wrapped keys) is kept byte for
/// byte, so every secret that opened the container, the recovery key included, opens the result;
/// the payload gets a fresh IV from the CSPRNG (§11.2 rule 5) under the same file key. The
/// current payload is authenticated first, so a damaged file is reported as corrupt rather than
/// papered over. Returns the resealed container and the kind of slot the secret opened.
pub fn reseal_with_secrets(
    container: &[u8],
    secrets: &Secrets,
    plaintext: Vec<u8>,
    limits: &Limits,
) -> Result<(Vec<u8>, SlotKind), ResealError> {
    let plaintext_len = plaintext.len() as u64;
    if plaintext_len > limits.max_plaintext {
        return Err(ResealError::TooLarge {
            plaintext_len,
            max: limits.max_plaintext,
        });
    }
    let info = inspect_for_open(container, limits)?;
    let opened = unlock(
        container,
        &info,
        secrets.passphrase.as_ref(),
        secrets.recovery_key.as_ref(),
    )?;
    drop(Zeroizing::new(decrypt_to_vec(
        container,
        &info,
        &opened.file_key,
    )?));
    let mut resealed = make_room(plaintext, info.payload_iv_offset() + IV_LEN);
    reseal_into(
        &mut resealed,
        container,
        &info,
        &opened.file_key,
        Payload::InPlace,
    )
    .map_err(|_| ResealError::TooLarge {
        plaintext_len,
        max: aes_gcm::P_MAX,
    })?;
    Ok((resealed, opened.kind))
}

/// A protected file opened for editing: the container as read and the file key its secret
/// unwrapped, so that every edit is written back in the same container ([`reseal_owned`]: header,
/// salt, slots and wrapped keys byte for byte, a fresh payload IV) and the recovery key the user
/// wrote down keeps opening it. Nothing here can draw a new salt or recovery key.
#[derive(Clone)]
pub struct Resealable {
    container: Vec<u8>,
    file_key: FileKey,
}

impl Resealable {
    /// Opens `container` with `secrets` within `limits` (payload authenticated), returning its
    /// plaintext and what writes an edit of it back.
    pub fn open(
        container: Vec<u8>,
        secrets: &crate::Secrets,
        limits: &Limits,
    ) -> Result<(crate::Unlocked, Resealable), crate::OpenError> {
        let (unlocked, file_key) =
            crate::open_owned_with_file_key(container.clone(), secrets, limits)?;
        Ok((
            unlocked,
            Resealable {
                container,
                file_key,
            },
        ))
    }

    /// `plaintext`, an edit of the opened database, sealed in the same container.
    pub fn reseal(&self, plaintext: Vec<u8>, limits: &Limits) -> Result<Vec<u8>, SealError> {
        reseal_owned(&self.container, &self.file_key, plaintext, limits)
    }

    /// The container as it was read.
    pub fn container(&self) -> &[u8] {
        &self.container
    }
}
