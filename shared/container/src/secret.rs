//! The secrets a container is opened with (passphrase, recovery key) and the file key they unwrap; all zeroized on drop and redacted in `Debug`.

use std::fmt;

use unicode_normalization::UnicodeNormalization;
use zeroize::Zeroizing;

/// The recovery-key alphabet: digits and capitals without the ambiguous 0 O 1 I L U (30 glyphs).
pub const RECOVERY_KEY_ALPHABET: &str = "ABCDEFGHJKMNPQRSTVWXYZ23456789";

/// Symbols in a generated recovery key: 27 × log2(30) ≈ 132.5 bits (§11.2 rule 3 asks ≥ 128).
pub const RECOVERY_KEY_SYMBOLS: usize = 27;

/// Symbols of the older reference keys (127.6 bits), which must still open their files.
const LEGACY_RECOVERY_KEY_SYMBOLS: usize = 26;

/// Random bytes at or above this are discarded so that `byte % 30` is uniform (240 = 8 × 30).
const REJECTION_BOUND: u8 = 240;

/// Symbols per group in the display form.
const GROUP_LEN: usize = 5;

/// A passphrase, held zeroized.
#[derive(Clone)]
pub struct Passphrase(Zeroizing<String>);

impl Passphrase {
    /// Wraps a passphrase exactly as typed; normalisation happens where keys are derived.
    pub fn new(s: impl Into<String>) -> Self {
        Passphrase(Zeroizing::new(s.into()))
    }

    /// Returns true for the empty passphrase, which is never tried and never accepted for a seal.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Returns the passphrase in NFC, the form this crate derives keys from.
    pub(crate) fn nfc(&self) -> Zeroizing<String> {
        Zeroizing::new(self.0.nfc().collect())
    }

    /// Returns the passphrase exactly as typed.
    pub(crate) fn raw(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Passphrase(<redacted>)")
    }
}

/// A recovery key, held in its normalised form (capitals and digits only) and zeroized.
///
/// Generated keys are 27 symbols of [`RECOVERY_KEY_ALPHABET`], shown as
/// `XXXXX-XXXXX-XXXXX-XXXXX-XXXXX-XX`.
#[derive(Clone)]
pub struct RecoveryKey(Zeroizing<String>);

impl RecoveryKey {
    /// Returns a fresh key from the operating system's CSPRNG.
    ///
    /// # Panics
    /// Panics if the operating system has no working random source; no key may be made then.
    pub fn generate() -> Self {
        Self::from_entropy_source(crate::random::fill)
    }

    /// Returns a key built from the bytes `fill` provides, 32 at a time: a byte is discarded when
    /// it is 240 or more, otherwise it picks symbol `byte % 30`. Tests pass a fixed source.
    pub fn from_entropy_source(mut fill: impl FnMut(&mut [u8])) -> Self {
        let alphabet = RECOVERY_KEY_ALPHABET.as_bytes();
        let mut symbols = Zeroizing::new(String::with_capacity(RECOVERY_KEY_SYMBOLS));
        let mut random = Zeroizing::new([0u8; 32]);
        while symbols.len() < RECOVERY_KEY_SYMBOLS {
            fill(&mut random[..]);
            for &byte in random.iter().filter(|&&byte| byte < REJECTION_BOUND) {
                if symbols.len() == RECOVERY_KEY_SYMBOLS {
                    break;
                }
                symbols.push(char::from(alphabet[usize::from(byte % 30)]));
            }
        }
        RecoveryKey(symbols)
    }

    /// Reads a key as a user typed it: uppercases it and drops every character that is not
    /// `A-Z` or `0-9`, exactly as the reference does, so older 26-symbol keys still work.
    ///
    /// Any text is accepted; [`RecoveryKey::is_plausible`] says whether it can be a key at all.
    pub fn parse(text: &str) -> Self {
        let mut upper = Zeroizing::new(text.to_uppercase());
        upper.retain(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        RecoveryKey(upper)
    }

    /// Returns the normalised symbols, which are what PBKDF2 receives as UTF-8.
    pub fn normalized(&self) -> &str {
        &self.0
    }

    /// Returns true when the normalised form is 26 or 27 symbols of the alphabet.
    ///
    /// A key that cannot be one is never tried, so no PBKDF2 is spent on it.
    pub fn is_plausible(&self) -> bool {
        matches!(
            self.0.len(),
            LEGACY_RECOVERY_KEY_SYMBOLS | RECOVERY_KEY_SYMBOLS
        ) && self.0.chars().all(|c| RECOVERY_KEY_ALPHABET.contains(c))
    }

    /// Returns true for a key a new slot may be wrapped under: the 27 symbols of a generated key
    /// (≈ 132.5 bits, §11.2 rule 3). A 26-symbol legacy key (127.6 bits) still opens its old
    /// file but is never written into a new slot.
    pub fn is_full_strength(&self) -> bool {
        self.0.len() == RECOVERY_KEY_SYMBOLS && self.is_plausible()
    }

    /// Returns the number of symbols in the normalised form.
    pub fn symbols(&self) -> usize {
        self.0.len()
    }

    /// Returns the entropy of a uniformly drawn key of this length, in bits.
    pub fn entropy_bits(&self) -> f64 {
        self.0.len() as f64 * (RECOVERY_KEY_ALPHABET.len() as f64).log2()
    }

    /// Returns the display form: groups of five joined by `-`.
    pub fn grouped(&self) -> String {
        let symbols = self.0.as_bytes();
        let groups: Vec<&str> = symbols
            .chunks(GROUP_LEN)
            // The normalised form is ASCII only, so every chunk is valid UTF-8.
            .map(|chunk| std::str::from_utf8(chunk).unwrap_or_default())
            .collect();
        groups.join("-")
    }
}

impl fmt::Debug for RecoveryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecoveryKey(<redacted>)")
    }
}

/// The secrets a user supplied to open a container; either may be absent.
#[derive(Clone, Default, Debug)]
pub struct Secrets {
    /// Tried against passphrase slots (kind 0x01).
    pub passphrase: Option<Passphrase>,
    /// Tried against recovery-key slots (kind 0x02).
    pub recovery_key: Option<RecoveryKey>,
}

impl Secrets {
    /// Returns secrets holding only a passphrase.
    pub fn passphrase(passphrase: Passphrase) -> Self {
        Secrets {
            passphrase: Some(passphrase),
            recovery_key: None,
        }
    }

    /// Returns secrets holding only a recovery key.
    pub fn recovery_key(recovery_key: RecoveryKey) -> Self {
        Secrets {
            passphrase: None,
            recovery_key: Some(recovery_key),
        }
    }
}

/// The random 32-byte key the payload is encrypted under; zeroized on drop.
///
/// A key unwrapped by this crate remembers the header it was unwrapped under. Every slot's AAD
/// is that header, and the header holds the container's random salt and slot IVs, so a header
/// match proves cheaply that a later [`crate::reseal`] writes under the container's own key.
#[derive(Clone)]
pub struct FileKey {
    bytes: Zeroizing<[u8; 32]>,
    unwrapped_under: Option<Box<[u8]>>,
}

impl FileKey {
    /// Wraps known key bytes (test vectors, [`crate::SealMaterial`]).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        FileKey {
            bytes: Zeroizing::new(bytes),
            unwrapped_under: None,
        }
    }

    /// Returns a fresh key from the operating system's CSPRNG.
    ///
    /// # Panics
    /// Panics if the operating system has no working random source.
    pub fn generate() -> Self {
        let mut key = FileKey::from_bytes([0; 32]);
        crate::random::fill(&mut key.bytes[..]);
        key
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// Records the header (the AAD) this key was unwrapped under.
    pub(crate) fn unwrapped_under(mut self, header: &[u8]) -> Self {
        self.unwrapped_under = Some(header.into());
        self
    }

    /// Returns whether the key is known to belong to the container with `header`: `Some(true)` or
    /// `Some(false)` for a key this crate unwrapped, `None` for one made from bytes.
    pub(crate) fn belongs_to(&self, header: &[u8]) -> Option<bool> {
        self.unwrapped_under.as_deref().map(|own| own == header)
    }
}

impl fmt::Debug for FileKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FileKey(<redacted>)")
    }
}
