//! The SNUGENC1 byte layout: format detection, header parsing and encoding, and the checks that make a container corrupt.

use crate::{
    FIXED_HEADER_LEN, IV_LEN, KDF_PBKDF2_HMAC_SHA256, MAGIC, MAX_OVERHEAD, MAX_SLOTS,
    MAX_USERDB_BYTES, SLOT_ENTRY_LEN, SQLITE_MAGIC, TAG_LEN, VERSION, WRAPPED_KEY_LEN,
};

/// Where the header checksum sits; it is zeroed while the checksum is computed.
const CHECKSUM_RANGE: std::ops::Range<usize> = 34..38;

/// What a user file is, judged by its leading bytes only (§10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Starts with `SQLite format 3\0`: a plain user database (§8).
    Sqlite,
    /// Starts with `SNUGENC1\n`: a protected user database (§11).
    Container,
    /// Neither magic; possibly too short to tell.
    Unknown,
}

/// Returns the format announced by `leading`, the first bytes of a file.
///
/// The name of the file is never consulted (§10). A buffer shorter than a magic is
/// [`Format::Unknown`] unless it holds that whole magic.
pub fn detect(leading: &[u8]) -> Format {
    if leading.starts_with(MAGIC) {
        Format::Container
    } else if leading.starts_with(SQLITE_MAGIC) {
        Format::Sqlite
    } else {
        Format::Unknown
    }
}

/// Why bytes cannot be protected: only a whole plain user database is sealed (§11.2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaintextError {
    /// The bytes are a SNUGENC1 container already.
    #[error("the file is already a protected Snug file")]
    AlreadyProtected,
    /// The bytes are not a whole SQLite database (not SQLite at all, or truncated, or padded).
    #[error("the file is not a whole SQLite user database: {0}")]
    NotAUserDatabase(&'static str),
}

impl PlaintextError {
    /// `ALREADY_PROTECTED` or `NOT_A_USER_DATABASE`, on every surface.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            PlaintextError::AlreadyProtected => &snug_reasons::container::ALREADY_PROTECTED,
            PlaintextError::NotAUserDatabase(_) => &snug_reasons::container::NOT_A_USER_DATABASE,
        }
    }
}

/// Checks that `plaintext` may be sealed: a whole SQLite database by its header
/// ([`snug_files::format::check_sqlite_file`]), not a container. Protect and Reseal on every
/// surface (CLI, gRPC) call it before sealing, so half a database is refused as every other
/// operation refuses it, rather than sealed.
pub fn check_plaintext(plaintext: &[u8]) -> Result<(), PlaintextError> {
    if detect(plaintext) == Format::Container {
        return Err(PlaintextError::AlreadyProtected);
    }
    snug_files::format::check_sqlite_file(plaintext).map_err(PlaintextError::NotAUserDatabase)
}

/// The secret a slot is unlocked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// 0x01: the user's passphrase.
    Passphrase,
    /// 0x02: the recovery key.
    RecoveryKey,
    /// Any other kind byte; readers carry it and never try it.
    Unknown(u8),
}

impl SlotKind {
    /// Returns the kind as it is stored.
    pub fn to_byte(self) -> u8 {
        match self {
            SlotKind::Passphrase => 0x01,
            SlotKind::RecoveryKey => 0x02,
            SlotKind::Unknown(byte) => byte,
        }
    }

    /// Returns the kind a stored byte means.
    pub fn from_byte(byte: u8) -> Self {
        match byte {
            0x01 => SlotKind::Passphrase,
            0x02 => SlotKind::RecoveryKey,
            other => SlotKind::Unknown(other),
        }
    }
}

/// One slot-table entry. Its 48 reserved bytes are not carried: they are covered by the checksum
/// and the AAD, which are always taken from the stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Which secret unwraps this slot.
    pub kind: SlotKind,
    /// The IV its file key was wrapped with.
    pub iv: [u8; 12],
}

/// The parsed container header: offset 0 through the end of the slot table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Container version; 1 is the only one this crate knows.
    pub version: u8,
    /// KDF id; 0x0001 is PBKDF2-HMAC-SHA256.
    pub kdf_id: u16,
    /// PBKDF2 iteration count, shared by every slot.
    pub iterations: u32,
    /// The one salt shared by every slot.
    pub salt: [u8; 16],
    /// The FNV-1a/32 checksum as stored.
    pub checksum: u32,
    /// The slot table in stored order.
    pub slots: Vec<Slot>,
}

impl Header {
    /// Returns the header length, `38 + 61 × slots`, which is also the AAD length.
    #[allow(clippy::len_without_is_empty, reason = "a header is never empty")]
    pub fn len(&self) -> usize {
        header_len(self.slots.len())
    }

    /// Returns the header bytes with the reserved bytes zero and the checksum recomputed, as a
    /// writer stores them. (`checksum` is ignored.)
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len());
        bytes.extend_from_slice(MAGIC);
        bytes.push(self.version);
        bytes.extend_from_slice(&self.kdf_id.to_be_bytes());
        bytes.extend_from_slice(&self.iterations.to_be_bytes());
        bytes.extend_from_slice(&self.salt);
        // A slot table longer than u16 cannot be parsed back; writers only ever encode 1..=8.
        let n_slots = u16::try_from(self.slots.len()).unwrap_or(u16::MAX);
        bytes.extend_from_slice(&n_slots.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]);
        for slot in &self.slots {
            bytes.push(slot.kind.to_byte());
            bytes.extend_from_slice(&slot.iv);
            bytes.extend_from_slice(&[0; SLOT_ENTRY_LEN - 1 - IV_LEN]);
        }
        let checksum = header_checksum(&bytes);
        bytes[CHECKSUM_RANGE].copy_from_slice(&checksum.to_be_bytes());
        bytes
    }
}

/// Returns `38 + 61 × n_slots`.
pub(crate) fn header_len(n_slots: usize) -> usize {
    FIXED_HEADER_LEN + SLOT_ENTRY_LEN * n_slots
}

/// Returns the FNV-1a/32 checksum of `header` (bytes 0 up to the end of the slot table) with
/// bytes 34..38 treated as zero, as §11.1 defines it.
///
/// A header shorter than 38 bytes is hashed as it is.
pub fn header_checksum(header: &[u8]) -> u32 {
    const BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    header.iter().enumerate().fold(BASIS, |hash, (idx, &byte)| {
        let byte = if CHECKSUM_RANGE.contains(&idx) {
            0
        } else {
            byte
        };
        (hash ^ u32::from(byte)).wrapping_mul(PRIME)
    })
}

/// What [`inspect`] learns about a container without a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The parsed header.
    pub header: Header,
    /// `header.len()`: where the wrapped keys begin, and the AAD length.
    pub header_len: usize,
    /// The IV of the payload.
    pub payload_iv: [u8; 12],
    /// Length of the whole container.
    pub container_len: u64,
    /// Length of the plaintext the payload decrypts to.
    pub plaintext_len: u64,
}

impl ContainerInfo {
    /// Returns where the wrapped key of slot `slot_idx` starts.
    pub fn wrapped_key_offset(&self, slot_idx: usize) -> usize {
        self.header_len + WRAPPED_KEY_LEN * slot_idx
    }

    /// Returns where the payload IV starts.
    pub fn payload_iv_offset(&self) -> usize {
        self.wrapped_key_offset(self.header.slots.len())
    }

    /// Returns where the payload ciphertext starts.
    pub fn ciphertext_offset(&self) -> usize {
        self.payload_iv_offset() + IV_LEN
    }
}

/// Read-side policy: what a reader is willing to spend on a container it did not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fewest PBKDF2 iterations accepted; fewer makes a header suspect (a downgrade).
    pub min_iterations: u32,
    /// Most PBKDF2 iterations accepted; more would let a file burn CPU before any secret is checked.
    pub max_iterations: u32,
    /// Largest plaintext accepted (§11.2 rule 9).
    pub max_plaintext: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_iterations: 10_000,
            max_iterations: 10_000_000,
            max_plaintext: MAX_USERDB_BYTES,
        }
    }
}

impl Limits {
    /// Returns the largest container that can carry `max_plaintext` bytes.
    pub fn max_container_len(&self) -> u64 {
        self.max_plaintext.saturating_add(MAX_OVERHEAD)
    }

    /// Returns the error for a header asking for `iterations`, if it is one: zero is damage
    /// (no key derivation at all, whatever the policy), anything else outside the range is this
    /// reader's policy.
    pub(crate) fn check_iterations(&self, iterations: u32) -> Result<(), Corruption> {
        if iterations == 0 {
            Err(Corruption::ZeroIterations)
        } else if (self.min_iterations..=self.max_iterations).contains(&iterations) {
            Ok(())
        } else {
            Err(Corruption::IterationsOutOfRange {
                iterations,
                min: self.min_iterations,
                max: self.max_iterations,
            })
        }
    }
}

/// Why a container cannot be read, whatever the secret.
///
/// Most variants are damage. Two kinds are not, and callers must not treat them as such (no
/// quarantine, no overwrite): a newer format ([`Corruption::is_unsupported`]) and an iteration
/// count outside this reader's [`Limits`] ([`Corruption::is_out_of_policy`]): the count lives in
/// the header so it can be raised later (§11.1), so a file made with a low or a raised count is
/// healthy and opens once the caller widens its limits.
///
/// The variants are listed in the order the reference checks them, with one deliberate difference
/// (§11.2 rule 6): wherever the version-1 layout lets the header checksum be computed (a slot
/// count of 1 to 8 and the whole slot table at hand), a failed checksum is reported first, as
/// damage, whatever the version byte or KDF id say. A damaged version byte is then never mistaken
/// for a newer format, and an unknown version or KDF with a valid checksum stays unsupported. The
/// iteration checks and the payload check come after everything the reference checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    /// The bytes do not start with `SNUGENC1\n`.
    #[error("not a Snug encrypted container")]
    NotAContainer,
    /// Fewer than 38 bytes.
    #[error("truncated container header")]
    TruncatedHeader,
    /// A version other than 1: a newer format, not damage.
    #[error("unsupported container version {0}")]
    UnsupportedVersion(u8),
    /// A KDF id other than 0x0001: a newer format, not damage.
    #[error("unsupported key-derivation function")]
    UnsupportedKdf(u16),
    /// A slot count of 0 or more than 8.
    #[error("implausible slot count {0}")]
    ImplausibleSlotCount(u16),
    /// Shorter than header, wrapped keys, payload IV and tag.
    #[error("truncated container body")]
    TruncatedBody,
    /// The stored FNV-1a checksum does not match the header bytes.
    #[error("the container header is damaged (integrity check failed)")]
    HeaderChecksumMismatch {
        /// The checksum stored at bytes 34..38.
        stored: u32,
        /// The checksum of the header as read.
        computed: u32,
    },
    /// The header's iteration count is 0: no key derivation at all, which no writer produces.
    #[error("the container header asks for zero key-derivation iterations")]
    ZeroIterations,
    /// The header asks for an iteration count outside [`Limits`]: a policy refusal, not damage.
    #[error(
        "the key-derivation iteration count {iterations} is outside the accepted range \
         {min}..={max} (a setting, not damage)"
    )]
    IterationsOutOfRange {
        /// The iteration count in the header.
        iterations: u32,
        /// The smallest accepted count.
        min: u32,
        /// The largest accepted count.
        max: u32,
    },
    /// A slot opened, so the secret and header are right, but the payload failed GCM.
    #[error("the protected contents failed their integrity check")]
    PayloadAuthenticationFailed,
}

impl Corruption {
    /// The reason every surface reports this cause with (the container service's status, the
    /// CLI's code, the install pipeline's): `NOT_A_CONTAINER`, `UNSUPPORTED_FORMAT_VERSION`,
    /// `ITERATIONS_OUT_OF_POLICY`, or `CORRUPT` for damage.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        use snug_reasons::container;
        match self {
            Corruption::NotAContainer => &container::NOT_A_CONTAINER,
            Corruption::UnsupportedVersion(_) | Corruption::UnsupportedKdf(_) => {
                &container::UNSUPPORTED_FORMAT_VERSION
            }
            Corruption::IterationsOutOfRange { .. } => &container::ITERATIONS_OUT_OF_POLICY,
            Corruption::TruncatedHeader
            | Corruption::ImplausibleSlotCount(_)
            | Corruption::TruncatedBody
            | Corruption::HeaderChecksumMismatch { .. }
            | Corruption::ZeroIterations
            | Corruption::PayloadAuthenticationFailed => &container::CORRUPT,
        }
    }

    /// Returns true for a container of a newer format (version or KDF) rather than a damaged one.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Corruption::UnsupportedVersion(_) | Corruption::UnsupportedKdf(_)
        )
    }

    /// Returns true for an iteration count outside the reader's [`Limits`]: a healthy file that
    /// opens with wider limits (zero iterations is [`Corruption::ZeroIterations`], damage).
    pub fn is_out_of_policy(&self) -> bool {
        matches!(self, Corruption::IterationsOutOfRange { .. })
    }

    /// Returns a stable snake_case name of the cause, for machines.
    pub fn code(&self) -> &'static str {
        match self {
            Corruption::NotAContainer => "not_a_container",
            Corruption::TruncatedHeader => "truncated_header",
            Corruption::UnsupportedVersion(_) => "unsupported_version",
            Corruption::UnsupportedKdf(_) => "unsupported_kdf",
            Corruption::ImplausibleSlotCount(_) => "implausible_slot_count",
            Corruption::TruncatedBody => "truncated_body",
            Corruption::HeaderChecksumMismatch { .. } => "header_checksum_mismatch",
            Corruption::ZeroIterations => "zero_iterations",
            Corruption::IterationsOutOfRange { .. } => "iterations_out_of_range",
            Corruption::PayloadAuthenticationFailed => "payload_authentication_failed",
        }
    }
}

/// Parses `container` without a secret and checks everything that can be checked without one.
///
/// Nothing here costs more than one pass over the header, so a hostile file is refused before any
/// PBKDF2 runs. Trailing bytes cannot be detected: they are the end of the payload.
pub fn inspect(container: &[u8], limits: &Limits) -> Result<ContainerInfo, Corruption> {
    inspect_parts(container, container.len(), limits)
}

/// Returns how many leading bytes [`inspect_parts`] reads from a container starting with
/// `leading`: the header, the wrapped keys and the payload IV, or just the fixed header when its
/// slot count is out of range. `None` while fewer than the 38 fixed-header bytes are known.
pub(crate) fn prefix_len(leading: &[u8]) -> Option<usize> {
    let fixed = leading.first_chunk::<FIXED_HEADER_LEN>()?;
    let n_slots = u16::from_be_bytes([fixed[32], fixed[33]]);
    Some(if n_slots == 0 || n_slots > MAX_SLOTS {
        FIXED_HEADER_LEN
    } else {
        payload_iv_end(usize::from(n_slots))
    })
}

/// Returns where the payload IV of a container with `n_slots` slots ends.
fn payload_iv_end(n_slots: usize) -> usize {
    header_len(n_slots) + WRAPPED_KEY_LEN * n_slots + IV_LEN
}

/// Inspects like [`inspect`] a container of `container_len` bytes of which only the first are at
/// hand: its header, wrapped keys and payload IV (at most 922 bytes, see
/// [`crate::Unlocker::prefix_len`]) are all any check reads, besides the length. A receiver can
/// therefore judge an upload while keeping only its first bytes.
///
/// `prefix` must hold the first `min(container_len, 922)` bytes (more are ignored); fewer are
/// reported as truncated.
pub fn inspect_prefix(
    prefix: &[u8],
    container_len: u64,
    limits: &Limits,
) -> Result<ContainerInfo, Corruption> {
    inspect_parts(
        prefix,
        usize::try_from(container_len).unwrap_or(usize::MAX),
        limits,
    )
}

/// [`inspect_prefix`] with the length as the `usize` it is in memory.
pub(crate) fn inspect_parts(
    prefix: &[u8],
    container_len: usize,
    limits: &Limits,
) -> Result<ContainerInfo, Corruption> {
    if container_len < MAGIC.len() || !prefix.starts_with(MAGIC) {
        return Err(Corruption::NotAContainer);
    }
    let Some(fixed) = prefix
        .first_chunk::<FIXED_HEADER_LEN>()
        .filter(|_| container_len >= FIXED_HEADER_LEN)
    else {
        return Err(Corruption::TruncatedHeader);
    };
    let stored = u32::from_be_bytes([fixed[34], fixed[35], fixed[36], fixed[37]]);
    let n_slots = u16::from_be_bytes([fixed[32], fixed[33]]);
    // Damage outranks novelty (§11.2 rule 6): a header whose checksum can be computed and fails
    // is corrupt before its version byte or KDF id is believed.
    if (1..=MAX_SLOTS).contains(&n_slots) {
        let header_len = header_len(usize::from(n_slots));
        if container_len >= header_len && prefix.len() >= header_len {
            let computed = header_checksum(&prefix[..header_len]);
            if stored != computed {
                return Err(Corruption::HeaderChecksumMismatch { stored, computed });
            }
        }
    }
    let version = fixed[9];
    if version != VERSION {
        return Err(Corruption::UnsupportedVersion(version));
    }
    let kdf_id = u16::from_be_bytes([fixed[10], fixed[11]]);
    if kdf_id != KDF_PBKDF2_HMAC_SHA256 {
        return Err(Corruption::UnsupportedKdf(kdf_id));
    }
    let iterations = u32::from_be_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
    let mut salt = [0; 16];
    salt.copy_from_slice(&fixed[16..32]);
    if n_slots == 0 || n_slots > MAX_SLOTS {
        return Err(Corruption::ImplausibleSlotCount(n_slots));
    }
    let n_slots = usize::from(n_slots);
    let header_len = header_len(n_slots);
    let payload_iv_at = header_len + WRAPPED_KEY_LEN * n_slots;
    let min_len = payload_iv_end(n_slots) + TAG_LEN;
    // The second test only fires when a caller breaks the precondition; reading on would panic.
    if container_len < min_len || prefix.len() < payload_iv_at + IV_LEN {
        return Err(Corruption::TruncatedBody);
    }
    limits.check_iterations(iterations)?;

    let slots = prefix[FIXED_HEADER_LEN..header_len]
        .chunks_exact(SLOT_ENTRY_LEN)
        .map(|entry| {
            let mut iv = [0; IV_LEN];
            iv.copy_from_slice(&entry[1..1 + IV_LEN]);
            Slot {
                kind: SlotKind::from_byte(entry[0]),
                iv,
            }
        })
        .collect();
    let mut payload_iv = [0; IV_LEN];
    payload_iv.copy_from_slice(&prefix[payload_iv_at..payload_iv_at + IV_LEN]);
    Ok(ContainerInfo {
        header: Header {
            version,
            kdf_id,
            iterations,
            salt,
            checksum: stored,
            slots,
        },
        header_len,
        payload_iv,
        container_len: container_len as u64,
        plaintext_len: (container_len - min_len) as u64,
    })
}
