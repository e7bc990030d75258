//! The SNUGENC1 protected user file of the Snug Protocol (spec §10–§11): format detection, header codec, key slots, seal and open.
//!
//! A protected user file is not a SQLite database but a container carrying one: a header (magic,
//! version, KDF id, iteration count, one salt, a slot table and an FNV-1a checksum), one wrapped
//! copy of a random 32-byte [`FileKey`] per slot, a payload IV and the AES-256-GCM payload.
//! Each slot wraps the file key under a key-encryption key derived with PBKDF2-HMAC-SHA256 from
//! its own secret, so one secret can change without touching the payload or the other slots.
//! The header, through the end of the slot table, is the additional authenticated data of every
//! GCM operation.
//!
//! Main entry points:
//! - [`detect`] tells a plain SQLite user database from a container by its leading bytes (§10).
//! - [`inspect`] parses a container without a secret and returns a [`ContainerInfo`] or the
//!   [`Corruption`] that makes it unreadable; [`inspect_prefix`] does the same from its first
//!   922 bytes and its length.
//! - [`open`] / [`open_owned`] unlock it with [`Secrets`] (a [`Passphrase`] and/or a
//!   [`RecoveryKey`]) and return the plaintext, or [`OpenError::Locked`] when no supplied secret
//!   opens a healthy container (§11.2 rule 6 keeps *locked* apart from *corrupt*).
//! - [`seal`] makes a two-slot container (passphrase + recovery key, never fewer: §11.2 rule 2);
//!   [`reseal`] writes a new payload under the same file key (every save of a protected file),
//!   with the key from [`open_file_key`] or [`open_owned_with_file_key`], and
//!   [`reseal_with_secrets`] does both steps for a caller holding only a secret;
//!   [`change_passphrase`] and [`rotate_recovery_key`] re-wrap one slot and change only its 48
//!   bytes; [`change_iterations`] rewrites a file at another KDF setting (every slot, so both
//!   secrets); [`remove_protection`] returns the plaintext to be written back as a plain database.
//! - [`seal_owned`] and [`reseal_owned`] take the plaintext by value and encrypt it where it lies.
//! - [`Opening`] opens a container whose bytes arrive in pieces (an upload) with the verdict of
//!   [`open`]: it hands out an [`Unlocker`] as soon as the header, wrapped keys and payload IV
//!   are in, so the key derivation overlaps the rest of the transfer, then decrypts each piece
//!   as it arrives with the [`PayloadDecryptor`] the unlocker returns.
//!
//! Byte layout, checksum, AAD span, KDF input and recovery-key alphabet match the reference
//! implementation exactly, so files move between the two in both directions.
//!
//! What this crate deliberately does not do:
//! - No I/O: it reads no files, opens no sockets and reads no clock. Bytes go in, typed values
//!   come out; callers decide where bytes live and how they are written atomically.
//! - No policy about *when* to protect, quarantine or prompt: a [`OpenError::Locked`] file is
//!   healthy (§11.2 rule 7) and what to do with it is the caller's business.
//! - No SQLite: the payload is opaque bytes; validating it as a user database happens elsewhere.
//! - No unauthenticated output: the format has one GCM tag over the whole payload, so no
//!   plaintext may be released before the whole payload authenticates. Input may arrive in
//!   pieces ([`Opening`]), but decrypted bytes stay inside this crate until the tag verifies;
//!   from then on the plaintext may leave in pieces too ([`Authenticated`]).
//!   [`open_owned`] and [`Opening`] decrypt in place, so peak memory stays about one container.
//! - No logging, and no `Debug` output of any secret: passphrases, recovery keys and file keys
//!   print as redacted and are zeroized on drop.
//!
//! ```
//! use snug_container::{open, seal, Limits, Passphrase, RecoveryKey, Secrets, SlotKind};
//!
//! // Low iteration counts keep the example fast; real files use DEFAULT_ITERATIONS.
//! let limits = Limits { min_iterations: 1_000, ..Limits::default() };
//! let passphrase = Passphrase::new("correct horse battery staple");
//! let recovery_key = RecoveryKey::generate();
//! let container = seal(b"SQLite format 3\0...", &passphrase, &recovery_key, 1_000, &limits).unwrap();
//!
//! let secrets = Secrets { recovery_key: Some(RecoveryKey::parse(&recovery_key.grouped())), ..Secrets::default() };
//! let unlocked = open(&container, &secrets, &limits).unwrap();
//! assert_eq!(unlocked.plaintext, b"SQLite format 3\0...");
//! assert_eq!(unlocked.opened_by, SlotKind::RecoveryKey);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod aead;
mod format;
mod incremental;
mod kdf;
mod open;
mod random;
mod rewrap;
mod seal;
mod secret;

#[cfg(test)]
mod tests;

pub use format::{
    ContainerInfo, Corruption, Format, Header, Limits, PlaintextError, Slot, SlotKind,
    check_plaintext, detect, header_checksum, inspect, inspect_prefix,
};
pub use incremental::{Authenticated, Opening, PayloadDecryptor, Unlocker};
pub use kdf::derive_kek;
pub use open::{
    OpenError, Unlocked, open, open_file_key, open_owned, open_owned_with_file_key,
    remove_protection,
};
pub use rewrap::{
    RewrapError, change_iterations, change_passphrase, rotate_recovery_key, rotate_recovery_key_to,
};
pub use seal::{
    ResealError, Resealable, SealError, reseal, reseal_owned, reseal_with_secrets, seal, seal_owned,
};
/// Fixed seal material, reachable only with the `test-support` feature (test vectors, benches).
#[cfg(any(test, feature = "test-support"))]
pub use seal::{SealMaterial, seal_with};

/// Returns `container` with its header checksum recomputed over the version-1 layout its slot
/// count gives: a header edited on purpose (a newer version byte, another KDF id) that is not
/// damage. Reachable only with the `test-support` feature.
#[cfg(any(test, feature = "test-support"))]
pub fn with_valid_checksum(container: &[u8]) -> Vec<u8> {
    let mut bytes = container.to_vec();
    let n_slots = usize::from(u16::from_be_bytes([bytes[32], bytes[33]]));
    let header_len = (38 + 61 * n_slots).min(bytes.len());
    let checksum = header_checksum(&bytes[..header_len]);
    bytes[34..38].copy_from_slice(&checksum.to_be_bytes());
    bytes
}
pub use secret::{
    FileKey, Passphrase, RECOVERY_KEY_ALPHABET, RECOVERY_KEY_SYMBOLS, RecoveryKey, Secrets,
};

/// The leading bytes of a protected user file (§11.1).
pub use snug_files::format::CONTAINER_MAGIC as MAGIC;
/// The leading bytes of a plain SQLite user database (§10).
pub use snug_files::format::SQLITE_MAGIC;

/// The size cap of a user database (§8); for a container it bounds the PLAINTEXT (§11.2 rule 9).
pub const MAX_USERDB_BYTES: u64 = 67_108_864;

/// The iteration count new containers get, as the reference writes it.
pub const DEFAULT_ITERATIONS: u32 = 600_000;

/// The largest slot count a reader accepts (§11.1 structural range 1–8).
pub const MAX_SLOTS: u16 = 8;

/// The only container version this crate reads and writes.
pub const VERSION: u8 = 1;

/// KDF id 0x0001: PBKDF2-HMAC-SHA256.
pub const KDF_PBKDF2_HMAC_SHA256: u16 = 1;

/// Bytes before the slot table.
pub const FIXED_HEADER_LEN: usize = 38;

/// Stride of one slot-table entry: kind, IV and 48 reserved zero bytes.
pub const SLOT_ENTRY_LEN: usize = 61;

/// One wrapped file key: 32 bytes of ciphertext and a 16-byte GCM tag.
pub const WRAPPED_KEY_LEN: usize = 48;

/// Length of every IV (slot and payload).
pub const IV_LEN: usize = 12;

/// Length of every GCM tag.
pub const TAG_LEN: usize = 16;

/// Largest container overhead: header(38+61*8) + wrapped keys(48*8) + payload IV 12 + tag 16.
pub const MAX_OVERHEAD: u64 = (FIXED_HEADER_LEN
    + SLOT_ENTRY_LEN * MAX_SLOTS as usize
    + WRAPPED_KEY_LEN * MAX_SLOTS as usize
    + IV_LEN
    + TAG_LEN) as u64;
