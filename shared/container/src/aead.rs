//! AES-256-GCM as the container uses it: wrapping a file key under a KEK, and the payload in place or from one buffer into another.

use aes_gcm::aead::inout::InOutBuf;
use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce, Tag};
use zeroize::Zeroizing;

use crate::{FileKey, TAG_LEN, WRAPPED_KEY_LEN};

/// GCM rejected the input: a wrong key, a changed AAD, or damaged ciphertext or tag.
#[derive(Debug)]
pub(crate) struct AuthenticationFailed;

fn cipher(key: &[u8; 32]) -> Aes256Gcm {
    Aes256Gcm::new(key.into())
}

/// Returns the 48 stored bytes of `file_key` wrapped under `kek`.
pub(crate) fn wrap(
    kek: &[u8; 32],
    iv: &[u8; 12],
    aad: &[u8],
    file_key: &FileKey,
) -> [u8; WRAPPED_KEY_LEN] {
    let mut wrapped = [0u8; WRAPPED_KEY_LEN];
    let (ciphertext, tag_out) = wrapped.split_at_mut(32);
    ciphertext.copy_from_slice(file_key.bytes());
    let tag = cipher(kek)
        .encrypt_inout_detached(&Nonce::from(*iv), aad, ciphertext.into())
        .expect("32 bytes of plaintext and a header-sized AAD are within GCM's limits");
    tag_out.copy_from_slice(&tag);
    wrapped
}

/// Returns the file key in `wrapped`, if `kek` and `aad` are the ones it was wrapped with.
pub(crate) fn unwrap(
    kek: &[u8; 32],
    iv: &[u8; 12],
    aad: &[u8],
    wrapped: &[u8],
) -> Result<FileKey, AuthenticationFailed> {
    let (ciphertext, tag) = wrapped.split_at(32);
    let tag = Tag::try_from(tag).map_err(|_| AuthenticationFailed)?;
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(ciphertext);
    cipher(kek)
        .decrypt_inout_detached(&Nonce::from(*iv), aad, (&mut key[..]).into(), &tag)
        .map_err(|_| AuthenticationFailed)?;
    Ok(FileKey::from_bytes(*key).unwrapped_under(aad))
}

/// Encrypts `plaintext` into `ciphertext` (same length) and returns the tag.
///
/// Reading from one buffer and writing the other saves the copy a seal would otherwise make.
pub(crate) fn encrypt_payload(
    file_key: &FileKey,
    iv: &[u8; 12],
    aad: &[u8],
    plaintext: &[u8],
    ciphertext: &mut [u8],
) -> Result<[u8; TAG_LEN], AuthenticationFailed> {
    let buf = InOutBuf::new(plaintext, ciphertext).map_err(|_| AuthenticationFailed)?;
    let tag = cipher(file_key.bytes())
        .encrypt_inout_detached(&Nonce::from(*iv), aad, buf)
        .map_err(|_| AuthenticationFailed)?;
    Ok(tag.into())
}

/// Encrypts `buffer` in place and returns the tag.
pub(crate) fn encrypt_payload_in_place(
    file_key: &FileKey,
    iv: &[u8; 12],
    aad: &[u8],
    buffer: &mut [u8],
) -> Result<[u8; TAG_LEN], AuthenticationFailed> {
    let tag = cipher(file_key.bytes())
        .encrypt_inout_detached(&Nonce::from(*iv), aad, buffer.into())
        .map_err(|_| AuthenticationFailed)?;
    Ok(tag.into())
}

/// Decrypts `buffer` in place after checking `tag`.
///
/// The tag is verified over the ciphertext before any byte is decrypted, so on failure `buffer`
/// still holds ciphertext only: there is no partial plaintext to wipe.
pub(crate) fn decrypt_payload_in_place(
    file_key: &FileKey,
    iv: &[u8; 12],
    aad: &[u8],
    buffer: &mut [u8],
    tag: &[u8],
) -> Result<(), AuthenticationFailed> {
    let tag = Tag::try_from(tag).map_err(|_| AuthenticationFailed)?;
    cipher(file_key.bytes())
        .decrypt_inout_detached(&Nonce::from(*iv), aad, buffer.into(), &tag)
        .map_err(|_| AuthenticationFailed)
}

/// Decrypts `ciphertext` into `plaintext` (same length) after checking `tag`.
pub(crate) fn decrypt_payload(
    file_key: &FileKey,
    iv: &[u8; 12],
    aad: &[u8],
    ciphertext: &[u8],
    tag: &[u8],
    plaintext: &mut [u8],
) -> Result<(), AuthenticationFailed> {
    let tag = Tag::try_from(tag).map_err(|_| AuthenticationFailed)?;
    let buf = InOutBuf::new(ciphertext, plaintext).map_err(|_| AuthenticationFailed)?;
    cipher(file_key.bytes())
        .decrypt_inout_detached(&Nonce::from(*iv), aad, buf, &tag)
        .map_err(|_| AuthenticationFailed)
}
