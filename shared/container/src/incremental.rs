//! Opening a container whose bytes arrive in pieces (an upload): the key is derived as soon as the header, wrapped keys and payload IV are in, and the payload is decrypted as it arrives, with nothing released before the whole payload authenticates.
//!
//! [`Opening`] is the state machine a receiver feeds; [`Unlocker`] is the expensive step (PBKDF2)
//! it hands out so the caller can run it wherever CPU-heavy work belongs, and [`PayloadDecryptor`]
//! is what that step hands back. The verdict of [`Opening::finish`] is, for every input, the one
//! [`crate::open`] gives for the same bytes: the same checks run in the same order, only earlier.

use std::fmt;
use std::sync::Arc;

use zeroize::Zeroize;

use crate::aead::{GcmDecryptor, Keystream, Pass};
use crate::format::{ContainerInfo, Limits, SlotKind, inspect_parts, prefix_len};
use crate::open::{OpenError, Unlocked, unlock};
use crate::secret::Secrets;
use crate::{FIXED_HEADER_LEN, TAG_LEN};

/// Ties an [`Unlocker`] and its [`PayloadDecryptor`] to the [`Opening`] that made it, so a key
/// derived for one upload can never decrypt another one that happens to carry the same header
/// (another client's copy of the file, opened with another client's secret).
type Ticket = Arc<()>;

/// The key-derivation step of opening a container: everything needed to find the file key, taken
/// from the container's first bytes alone.
///
/// [`Unlocker::new`] is cheap and refuses, before any PBKDF2, every prefix that [`crate::inspect`]
/// would refuse; [`Unlocker::unlock`] costs one PBKDF2 per candidate secret form. An unlocker
/// carries clones of the secrets (zeroized on drop) and prints none of them.
pub struct Unlocker {
    prefix: Box<[u8]>,
    info: ContainerInfo,
    secrets: Secrets,
    ticket: Option<Ticket>,
}

impl Unlocker {
    /// Returns how many leading bytes [`Unlocker::new`] needs, judged from the first bytes of a
    /// container: `38 + 61n` header bytes, `48n` wrapped-key bytes and the 12-byte payload IV
    /// for `n` slots (at most 922), or just the 38-byte fixed header when its slot count is out
    /// of range. `None` while fewer than 38 bytes are known.
    pub fn prefix_len(leading: &[u8]) -> Option<usize> {
        prefix_len(leading)
    }

    /// Parses the first [`Unlocker::prefix_len`] bytes of a container (more are ignored).
    ///
    /// The checks are those of [`crate::inspect`], on a container assumed long enough to carry a
    /// payload tag; whether it really is becomes known only at its end (see
    /// [`Opening::finish`]). A `prefix` shorter than needed is judged as a whole container of
    /// that length, so it fails as truncated.
    pub fn new(prefix: &[u8], secrets: &Secrets, limits: &Limits) -> Result<Self, OpenError> {
        let needed = prefix_len(prefix).unwrap_or(FIXED_HEADER_LEN);
        let assumed_len = if prefix.len() >= needed {
            needed + TAG_LEN
        } else {
            prefix.len()
        };
        let info = inspect_parts(prefix, assumed_len, limits)?;
        Ok(Unlocker {
            prefix: prefix[..info.ciphertext_offset()].into(),
            info,
            secrets: secrets.clone(),
            ticket: None,
        })
    }

    /// Finds the file key like [`crate::open`] does (only the slots a secret can match, one
    /// PBKDF2 per candidate form) and returns the decryptor of the payload under it, or
    /// [`OpenError::Locked`].
    pub fn unlock(self) -> Result<PayloadDecryptor, OpenError> {
        let opened = unlock(
            &self.prefix,
            &self.info,
            self.secrets.passphrase.as_ref(),
            self.secrets.recovery_key.as_ref(),
        )?;
        let cipher = GcmDecryptor::new(
            &opened.file_key,
            &self.info.payload_iv,
            &self.prefix[..self.info.header_len],
        );
        Ok(PayloadDecryptor {
            cipher,
            opened_by: opened.kind,
            slot_index: opened.slot_idx,
            ticket: self.ticket,
        })
    }
}

impl fmt::Debug for Unlocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unlocker")
            .field("header_len", &self.info.header_len)
            .field("n_slots", &self.info.header.slots.len())
            .finish_non_exhaustive()
    }
}

/// The payload cipher of a container whose file key [`Unlocker::unlock`] found.
///
/// It has no public way to decrypt: it is handed to the [`Opening`] it came from
/// ([`Opening::set_decryptor`]), which keeps decrypted bytes to itself until the tag verifies.
pub struct PayloadDecryptor {
    cipher: GcmDecryptor,
    opened_by: SlotKind,
    slot_index: usize,
    ticket: Option<Ticket>,
}

impl PayloadDecryptor {
    /// Returns the kind of the slot that opened.
    pub fn opened_by(&self) -> SlotKind {
        self.opened_by
    }

    /// Returns the position of that slot in the slot table.
    pub fn slot_index(&self) -> usize {
        self.slot_index
    }
}

impl fmt::Debug for PayloadDecryptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key schedule stays out of any output.
        f.debug_struct("PayloadDecryptor")
            .field("opened_by", &self.opened_by)
            .field("slot_index", &self.slot_index)
            .finish_non_exhaustive()
    }
}

/// Where an [`Opening`] stands.
enum Stage {
    /// The prefix is still incomplete.
    Prefix,
    /// The prefix is complete and sound; its unlocker waits for [`Opening::take_unlocker`].
    Ready(Unlocker),
    /// The prefix failed a check that needs no secret; only the length still matters.
    Rejected,
    /// The unlocker is out; ciphertext is buffered until its result comes back.
    Deriving,
    /// The unlocker found no key (locked); only the length still matters.
    Failed(OpenError),
    /// The file key is known: ciphertext is decrypted as it arrives.
    Decrypting(Box<PayloadDecryptor>),
}

/// An open in progress over a container that arrives in pieces: sans-IO, the caller pushes bytes
/// and decides where the key derivation runs.
///
/// ```
/// use snug_container::{Limits, Opening, Passphrase, RecoveryKey, Secrets, seal};
///
/// let limits = Limits { min_iterations: 1_000, ..Limits::default() };
/// let passphrase = Passphrase::new("correct horse battery staple");
/// let recovery_key = RecoveryKey::generate();
/// let container = seal(b"SQLite format 3\0...", &passphrase, &recovery_key, 1_000, &limits).unwrap();
///
/// let declared_len = Some(container.len() as u64);
/// let mut opening = Opening::new(Secrets::passphrase(passphrase), &limits, declared_len);
/// // The pieces of an upload, as they arrive.
/// for piece in container.chunks(100) {
///     opening.push(piece);
///     if let Some(unlocker) = opening.take_unlocker() {
///         // A server runs this PBKDF2 on a thread pool while more pieces arrive.
///         opening.set_decryptor(unlocker.unlock());
///     }
/// }
/// // The verdict `open` gives for the whole container.
/// let unlocked = opening.finish().unwrap();
/// assert_eq!(unlocked.plaintext, b"SQLite format 3\0...");
/// ```
///
/// Memory: one buffer holds everything after the prefix (ciphertext, then tag); it is reserved
/// once from the declared length when there is one, and the plaintext replaces the ciphertext
/// where it lies, already at offset 0, so [`Opening::finish`] returns it without a copy. Until the
/// tag verifies, decrypted bytes never leave this type: on a failed tag, an early drop or a
/// buffer growth they are zeroized. The caller caps what it pushes (at
/// [`Limits::max_container_len`]); this type stores what it is given.
pub struct Opening {
    secrets: Secrets,
    limits: Limits,
    declared_len: Option<u64>,
    ticket: Ticket,
    /// The container's first bytes, up to the prefix length once it is known.
    prefix: Vec<u8>,
    /// Every byte after the prefix; `payload[..processed]` has been through `pass` (hashed, and
    /// unless decryption waits for the tag also decrypted, unauthenticated).
    payload: Vec<u8>,
    processed: usize,
    /// [`Pass::HashOnly`] after [`Opening::authenticate_first`].
    pass: Pass,
    container_len: usize,
    stage: Stage,
}

impl Opening {
    /// Starts opening a container with `secrets`. `declared_len`, the container length the sender
    /// announced, only sizes the buffer (capped at [`Limits::max_container_len`]); the bytes
    /// pushed are what count.
    pub fn new(secrets: Secrets, limits: &Limits, declared_len: Option<u64>) -> Self {
        Self::with_buffer(secrets, limits, declared_len, Vec::new())
    }

    /// Starts opening like [`Opening::new`], receiving into `buffer`'s allocation (its contents
    /// are discarded), so a server can reuse memory whose pages are already mapped instead of
    /// faulting in a fresh 64 MiB for every upload. The plaintext [`Opening::finish`] returns
    /// lives in that same allocation.
    pub fn with_buffer(
        secrets: Secrets,
        limits: &Limits,
        declared_len: Option<u64>,
        mut buffer: Vec<u8>,
    ) -> Self {
        buffer.clear();
        Opening {
            secrets,
            limits: *limits,
            declared_len,
            ticket: Arc::new(()),
            prefix: Vec::new(),
            payload: buffer,
            processed: 0,
            pass: Pass::HashAndDecrypt,
            container_len: 0,
            stage: Stage::Prefix,
        }
    }

    /// Leaves decryption until the tag has verified: pushed bytes are only hashed as they
    /// arrive, and [`Opening::finish_authenticated`] hands the payload back to be decrypted as it
    /// is read. A sender that passes the plaintext on can then start as soon as the payload
    /// authenticates and decrypt the rest while the first bytes are on their way, instead of
    /// decrypting everything before sending anything. [`Opening::finish`] gives the same result
    /// either way. Takes effect only on an opening that has not decrypted anything yet, i.e.
    /// called right after it is made.
    pub fn authenticate_first(mut self) -> Self {
        if self.processed == 0 {
            self.pass = Pass::HashOnly;
        }
        self
    }

    /// How many leading bytes of the buffer hold decrypted, unauthenticated plaintext.
    fn plaintext_end(&self) -> usize {
        match self.pass {
            Pass::HashOnly => 0,
            Pass::HashAndDecrypt => self.processed,
        }
    }

    /// Appends the next bytes of the container. Once the file key is known they are decrypted
    /// (or, [`Opening::authenticate_first`], hashed) at once, except the last 16 bytes seen,
    /// which may be the tag.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.container_len = self.container_len.saturating_add(bytes.len());
        if matches!(self.stage, Stage::Prefix) {
            bytes = self.fill_prefix(bytes);
        }
        if bytes.is_empty() {
            return;
        }
        match self.stage {
            // The verdict no longer depends on these bytes, only on their number.
            Stage::Rejected | Stage::Failed(_) => {}
            Stage::Prefix | Stage::Ready(_) | Stage::Deriving => {
                self.reserve(bytes.len());
                self.payload.extend_from_slice(bytes);
            }
            Stage::Decrypting(_) => {
                self.reserve(bytes.len());
                self.payload.extend_from_slice(bytes);
                self.catch_up();
            }
        }
    }

    /// Moves the prefix bytes out of `bytes` and returns the rest; judges the prefix once it is
    /// whole.
    fn fill_prefix<'a>(&mut self, mut bytes: &'a [u8]) -> &'a [u8] {
        loop {
            let needed = prefix_len(&self.prefix).unwrap_or(FIXED_HEADER_LEN);
            let take = needed.saturating_sub(self.prefix.len()).min(bytes.len());
            self.prefix.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.prefix.len() < needed {
                return bytes;
            }
            // The fixed header may have just revealed a longer prefix.
            if prefix_len(&self.prefix) == Some(needed) {
                break;
            }
        }
        self.stage = match Unlocker::new(&self.prefix, &self.secrets, &self.limits) {
            Ok(mut unlocker) => {
                unlocker.ticket = Some(Arc::clone(&self.ticket));
                let max_payload =
                    (self.limits.max_container_len() as usize).saturating_sub(self.prefix.len());
                let declared = self.declared_len.unwrap_or(0) as usize;
                // Exact: the default doubling would reserve up to a second payload's worth.
                self.payload
                    .reserve_exact(declared.saturating_sub(self.prefix.len()).min(max_payload));
                Stage::Ready(unlocker)
            }
            Err(_) => Stage::Rejected,
        };
        bytes
    }

    /// Returns the unlocker once the prefix is complete and passes every check that needs no
    /// secret; at most once. Run its [`Unlocker::unlock`] (one PBKDF2 per candidate secret form)
    /// wherever CPU-heavy work belongs, and hand the result to [`Opening::set_decryptor`].
    pub fn take_unlocker(&mut self) -> Option<Unlocker> {
        match std::mem::replace(&mut self.stage, Stage::Deriving) {
            Stage::Ready(unlocker) => Some(unlocker),
            other => {
                self.stage = other;
                None
            }
        }
    }

    /// Takes the result of the unlocker this opening handed out, and decrypts the ciphertext
    /// buffered meanwhile.
    ///
    /// A result from another opening's unlocker is ignored (the key is then derived again in
    /// [`Opening::finish`]), so uploads can never be crossed.
    pub fn set_decryptor(&mut self, result: Result<PayloadDecryptor, OpenError>) {
        if !matches!(self.stage, Stage::Deriving) {
            return;
        }
        match result {
            Ok(decryptor) => {
                let ours = decryptor
                    .ticket
                    .as_ref()
                    .is_some_and(|ticket| Arc::ptr_eq(ticket, &self.ticket));
                if ours {
                    self.stage = Stage::Decrypting(Box::new(decryptor));
                    self.catch_up();
                }
            }
            Err(err) => {
                self.stage = Stage::Failed(err);
                // Only ciphertext is buffered: nothing was decrypted without a key.
                self.payload = Vec::new();
            }
        }
    }

    /// Returns true once the file key is known, so pushed bytes are decrypted (or hashed) as they
    /// arrive.
    pub fn is_decrypting(&self) -> bool {
        matches!(self.stage, Stage::Decrypting(_))
    }

    /// Runs every buffered byte but the last 16 through the cipher.
    fn catch_up(&mut self) {
        let Stage::Decrypting(decryptor) = &mut self.stage else {
            return;
        };
        let end = self.payload.len().saturating_sub(TAG_LEN);
        if end > self.processed {
            let piece = &mut self.payload[self.processed..end];
            decryptor.cipher.process(piece, self.pass);
            self.processed = end;
        }
    }

    /// Makes room for `additional` bytes: doubling, but never past the largest payload the
    /// limits allow (plain doubling would reserve up to twice that), and without leaving
    /// decrypted bytes behind in a freed allocation (which `Vec`'s own growth would).
    fn reserve(&mut self, additional: usize) {
        let len = self.payload.len();
        if self.payload.capacity() - len >= additional {
            return;
        }
        let max_payload =
            (self.limits.max_container_len() as usize).saturating_sub(self.prefix.len());
        let capacity = (len + additional).max((self.payload.capacity() * 2).min(max_payload));
        let plaintext_end = self.plaintext_end();
        if plaintext_end == 0 {
            self.payload.reserve_exact(capacity - len);
            return;
        }
        let mut grown = Vec::with_capacity(capacity);
        grown.extend_from_slice(&self.payload);
        self.payload[..plaintext_end].zeroize();
        self.payload = grown;
    }

    /// Ends the container and returns its plaintext, or the error [`crate::open`] returns for
    /// the same bytes.
    ///
    /// Structure and size are judged first (truncated, too large), then the key (locked), then
    /// the payload tag, which is checked in constant time. On success the buffer that received
    /// the upload becomes the plaintext, without a copy. On any failure every decrypted byte is
    /// zeroized. If no key was derived yet (the unlocker was never taken or its result never
    /// handed back), it is derived here.
    pub fn finish(self) -> Result<Unlocked, OpenError> {
        Ok(self.finish_authenticated()?.into_unlocked())
    }

    /// Ends the container like [`Opening::finish`], with the same verdicts, and returns its
    /// authenticated payload: with [`Opening::authenticate_first`], still encrypted and
    /// decrypted as it is read, so the first plaintext can leave before the rest is decrypted.
    pub fn finish_authenticated(mut self) -> Result<Authenticated, OpenError> {
        let info = inspect_parts(&self.prefix, self.container_len, &self.limits)?;
        if info.plaintext_len > self.limits.max_plaintext {
            return Err(OpenError::TooLarge {
                plaintext_len: info.plaintext_len,
                max: self.limits.max_plaintext,
            });
        }
        let mut decryptor = match std::mem::replace(&mut self.stage, Stage::Deriving) {
            Stage::Decrypting(decryptor) => *decryptor,
            Stage::Failed(err) => return Err(err),
            // A prefix the checks above accepted was never rejected, and a rejected one fails
            // them again; deriving here anyway keeps every verdict that of `open`.
            Stage::Prefix | Stage::Ready(_) | Stage::Rejected | Stage::Deriving => {
                Unlocker::new(&self.prefix, &self.secrets, &self.limits)?.unlock()?
            }
        };
        // The checks above guarantee a tag's worth of bytes after the prefix; a payload that is
        // short anyway was never stored (a rejected prefix), and is as truncated as it looks.
        let Some(tag_at) = self.payload.len().checked_sub(TAG_LEN) else {
            return Err(crate::Corruption::TruncatedBody.into());
        };
        debug_assert_eq!(tag_at as u64, info.plaintext_len);
        let piece = &mut self.payload[self.processed..tag_at];
        decryptor.cipher.process(piece, self.pass);
        self.processed = tag_at;
        let Ok(keystream) = decryptor.cipher.verify(&self.payload[tag_at..]) else {
            // `Drop` zeroizes the decrypted bytes.
            return Err(crate::Corruption::PayloadAuthenticationFailed.into());
        };
        let mut payload = std::mem::take(&mut self.payload);
        self.processed = 0;
        payload.truncate(tag_at);
        Ok(Authenticated {
            payload,
            keystream: (self.pass == Pass::HashOnly).then_some(keystream),
            read: 0,
            opened_by: decryptor.opened_by,
            slot_index: decryptor.slot_index,
        })
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        // Unauthenticated plaintext never outlives the opening that made it.
        let plaintext_end = self.plaintext_end();
        self.payload[..plaintext_end].zeroize();
    }
}

impl fmt::Debug for Opening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opening")
            .field("container_len", &self.container_len)
            .field("processed", &self.processed)
            .field("pass", &self.pass)
            .finish_non_exhaustive()
    }
}

/// A payload whose tag has verified ([`Opening::finish_authenticated`]): its plaintext may be
/// released, and is, as it is read ([`std::io::Read`]) or all at once
/// ([`Authenticated::into_unlocked`]).
///
/// After [`Opening::authenticate_first`] the buffer still holds ciphertext, and each read
/// decrypts the next bytes into the caller's buffer: the first bytes can be on their way while
/// the rest is being decrypted, and the upload's buffer is left as it was, for reuse
/// ([`Authenticated::into_buffer`]). Otherwise the buffer already holds the plaintext and reads
/// copy it.
pub struct Authenticated {
    payload: Vec<u8>,
    /// At byte `read` of the payload; `None` when `payload` is plaintext already.
    keystream: Option<Keystream>,
    read: usize,
    opened_by: SlotKind,
    slot_index: usize,
}

impl Authenticated {
    /// Returns the plaintext's length.
    pub fn plaintext_len(&self) -> usize {
        self.payload.len()
    }

    /// Returns the kind of the slot that opened.
    pub fn opened_by(&self) -> SlotKind {
        self.opened_by
    }

    /// Returns the position of that slot in the slot table.
    pub fn slot_index(&self) -> usize {
        self.slot_index
    }

    /// Returns the whole plaintext in the upload's buffer (decrypted in place, on two threads
    /// when it is large), whatever was read before.
    pub fn into_unlocked(mut self) -> Unlocked {
        if let Some(keystream) = &mut self.keystream {
            keystream.decrypt_whole_in_place(&mut self.payload);
        }
        Unlocked {
            plaintext: self.payload,
            opened_by: self.opened_by,
            slot_index: self.slot_index,
        }
    }

    /// Returns the upload's buffer, emptied, so its allocation (pages already mapped) can take
    /// the next upload. Without [`Opening::authenticate_first`] its capacity still holds the
    /// plaintext, as a dropped [`Unlocked`] would.
    pub fn into_buffer(mut self) -> Vec<u8> {
        self.payload.clear();
        self.payload
    }
}

impl std::io::Read for Authenticated {
    /// Decrypts (or copies) the next plaintext bytes into `out`; 0 at the end.
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let rest = &self.payload[self.read..];
        let n = rest.len().min(out.len());
        match &mut self.keystream {
            Some(keystream) => keystream.decrypt(&rest[..n], &mut out[..n]),
            None => out[..n].copy_from_slice(&rest[..n]),
        }
        self.read += n;
        Ok(n)
    }
}

impl fmt::Debug for Authenticated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The plaintext and the key schedule stay out of any output.
        f.debug_struct("Authenticated")
            .field("plaintext_len", &self.payload.len())
            .field("read", &self.read)
            .field("opened_by", &self.opened_by)
            .finish_non_exhaustive()
    }
}
