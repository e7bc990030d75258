//! AES-256-GCM as the container uses it: wrapping a file key under a KEK, the payload in one call (in place or from one buffer into another), and the payload decrypted piece by piece as it arrives.

use aes::Aes256;
use aes::cipher::{
    BlockCipherEncrypt, InnerIvInit, StreamCipher, StreamCipherCore, StreamCipherSeek,
};
use aes_gcm::aead::inout::InOutBuf;
use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce, Tag};
use ctutils::CtEq;
use ghash::GHash;
use ghash::universal_hash::UniversalHash;
use zeroize::{Zeroize, Zeroizing};

use crate::{FileKey, IV_LEN, TAG_LEN, WRAPPED_KEY_LEN};

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

/// GCM's 32-bit big-endian counter mode over AES-256 (NIST SP 800-38D §6.5, `inc32`).
type Ctr32 = ctr::CtrCore<Aes256, ctr::flavors::Ctr32BE>;

/// How much ciphertext is hashed and then decrypted at a time: small enough that the bytes GHASH
/// has just read are still in L1 when the counter-mode pass rewrites them, so each byte comes
/// from memory once rather than once per pass (the one-call decryption hashes all 64 MiB, then
/// decrypts all 64 MiB).
const STRIDE: usize = 32 * 1024;

/// From this size on, a piece is split between two threads (see [`GcmDecryptor::process`]);
/// below it a thread costs more than it saves.
const PARALLEL_MIN: usize = 4 * 1024 * 1024;

/// AES-256-GCM decryption of one payload that arrives in pieces of any length (SP 800-38D §7.2
/// with 96-bit IVs, as the `aes-gcm` crate computes it in one call).
///
/// GCM is counter mode plus GHASH: the counter block J0 = IV ‖ 0x00000001 encrypts to the tag
/// mask, the payload is XORed with the keystream from inc32(J0) on, and the tag is GHASH over the
/// zero-padded AAD, the zero-padded ciphertext and their bit lengths, XOR the mask. Both passes
/// run over each piece as it is given, or GHASH alone when decryption is to wait for the tag;
/// only [`GcmDecryptor::verify`] says whether the result may be used, and the caller keeps every
/// decrypted byte to itself until it does.
pub(crate) struct GcmDecryptor {
    hasher: Hasher,
    keystream: ctr::Ctr32BE<Aes256>,
    /// The cipher and J0 again, for keystreams at other positions.
    aes: Aes256,
    j0: aes::Block,
    /// E_K(J0), XORed into GHASH's output to make the tag.
    tag_mask: Zeroizing<[u8; TAG_LEN]>,
    aad_len: u64,
}

/// GHASH over the AAD and then the ciphertext as it comes, in pieces of any length, possibly
/// hashed in segments on different threads.
///
/// GHASH is linear: after blocks X1..Xn the state is Σ Xi·H^(n−i+1), so the state of a message
/// split into a head and a `k`-block tail is state(head)·H^k ⊕ state(tail from zero). The running
/// state is kept in that form, `earlier·H^k ⊕ segment`, so a tail hashed on another thread is
/// folded in with a few field multiplications.
struct Hasher {
    /// H, kept to fold segments together.
    key: ghash::Key,
    /// The GHASH state of every block before `segment`, as a field element.
    earlier: ghash::Block,
    /// Whether a segment was ever folded into `earlier` (otherwise it is zero).
    folded: bool,
    /// GHASH from the zero state over the blocks since `earlier`.
    segment: GHash,
    segment_blocks: u64,
    /// Ciphertext bytes of a GHASH block not yet complete (fewer than 16).
    pending: [u8; 16],
    pending_len: usize,
    ciphertext_len: u64,
}

impl GcmDecryptor {
    pub(crate) fn new(file_key: &FileKey, iv: &[u8; IV_LEN], aad: &[u8]) -> Self {
        let aes = Aes256::new(file_key.bytes().into());
        // The GHASH key H is the encryption of the zero block.
        let mut key = ghash::Key::default();
        aes.encrypt_block(&mut key);
        let mut segment = GHash::new(&key);
        segment.update_padded(aad);

        let mut j0 = aes::Block::default();
        j0[..IV_LEN].copy_from_slice(iv);
        j0[15] = 1;
        let mut counter = Ctr32::inner_iv_init(aes.clone(), &j0);
        // The first keystream block is E_K(J0), the tag mask; the payload starts at inc32(J0).
        let mut mask = aes::Block::default();
        counter.write_keystream_block(&mut mask);
        let mut tag_mask = Zeroizing::new([0u8; TAG_LEN]);
        tag_mask.copy_from_slice(&mask);
        mask.zeroize();
        GcmDecryptor {
            hasher: Hasher {
                key,
                earlier: ghash::Block::default(),
                folded: false,
                segment,
                segment_blocks: aad.len().div_ceil(16) as u64,
                pending: [0; 16],
                pending_len: 0,
                ciphertext_len: 0,
            },
            keystream: ctr::Ctr32BE::from_core(counter),
            aes,
            j0,
            tag_mask,
            aad_len: aad.len() as u64,
        }
    }

    /// Runs `pass` over the next `piece` of ciphertext: hashes it, and decrypts it in place
    /// unless decryption waits for the tag (then the keystream stays at the payload's start).
    ///
    /// A large piece (the backlog that built up while the key was being derived) is split in
    /// two halves processed at once on two threads, each with its own GHASH segment (and, when
    /// decrypting, its own keystream position); the second segment is then folded into the
    /// state (see [`Hasher`]).
    pub(crate) fn process(&mut self, piece: &mut [u8], pass: Pass) {
        let fits = self.hasher.ciphertext_len + piece.len() as u64 <= aes_gcm::P_MAX;
        if piece.len() < PARALLEL_MIN || !fits {
            self.process_sequentially(piece, pass);
            return;
        }
        // Complete a pending GHASH block first, so that both halves start on a block boundary
        // (where the keystream is too), and leave a final partial block for afterwards.
        let head_len = (16 - self.hasher.pending_len) % 16;
        let (head, rest) = piece.split_at_mut(head_len);
        self.process_sequentially(head, pass);
        let whole = rest.len() - rest.len() % 16;
        let (body, tail) = rest.split_at_mut(whole);
        let half = body.len() / 2 / 16 * 16;
        let body_len = body.len();
        let (first, second) = body.split_at_mut(half);
        let (first_blocks, second_blocks) = ((first.len() / 16) as u64, (second.len() / 16) as u64);

        let mut second_keystream = keystream_from_j0(&self.aes, &self.j0);
        if pass == Pass::HashAndDecrypt {
            second_keystream.seek(self.keystream.current_pos::<u64>() + half as u64);
        }
        let mut second_segment = GHash::new(&self.hasher.key);
        let (hasher, keystream) = (&mut self.hasher, &mut self.keystream);
        std::thread::scope(|scope| {
            scope
                .spawn(|| process_blocks(&mut second_segment, &mut second_keystream, second, pass));
            process_blocks(&mut hasher.segment, keystream, first, pass);
        });
        hasher.segment_blocks += first_blocks;
        hasher.fold(second_segment, second_blocks);
        hasher.ciphertext_len += body_len as u64;
        if pass == Pass::HashAndDecrypt {
            *keystream = second_keystream;
        }
        self.process_sequentially(tail, pass);
    }

    fn process_sequentially(&mut self, piece: &mut [u8], pass: Pass) {
        for stride in piece.chunks_mut(STRIDE) {
            self.hasher.ciphertext_len += stride.len() as u64;
            if self.hasher.ciphertext_len > aes_gcm::P_MAX {
                // GCM's counter would wrap; `verify` refuses such a payload, as `aes-gcm` does.
                continue;
            }
            self.hasher.hash(stride);
            if pass == Pass::HashAndDecrypt {
                self.keystream.apply_keystream(stride);
            }
        }
    }

    /// Checks `tag` against everything hashed so far, in constant time, and returns the
    /// keystream where it stands: at the payload's start if every piece was only hashed.
    pub(crate) fn verify(self, tag: &[u8]) -> Result<Keystream, AuthenticationFailed> {
        let mut hasher = self.hasher;
        if hasher.ciphertext_len > aes_gcm::P_MAX {
            return Err(AuthenticationFailed);
        }
        let Ok(tag) = <&[u8; TAG_LEN]>::try_from(tag) else {
            return Err(AuthenticationFailed);
        };
        if hasher.pending_len > 0 {
            let pending = hasher.pending;
            hasher.absorb(&pending[..hasher.pending_len]);
        }
        let mut lengths = ghash::Block::default();
        lengths[..8].copy_from_slice(&(self.aad_len * 8).to_be_bytes());
        lengths[8..].copy_from_slice(&(hasher.ciphertext_len * 8).to_be_bytes());
        hasher.absorb(&lengths);
        let mut expected = [0u8; TAG_LEN];
        expected.copy_from_slice(&hasher.state());
        expected
            .iter_mut()
            .zip(self.tag_mask.iter())
            .for_each(|(e, m)| *e ^= m);
        if expected.ct_eq(tag).to_bool() {
            Ok(Keystream {
                stream: self.keystream,
                aes: self.aes,
                j0: self.j0,
            })
        } else {
            Err(AuthenticationFailed)
        }
    }
}

/// What [`GcmDecryptor`] does with the ciphertext it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Hash and decrypt each stride together: one read from memory for both passes.
    HashAndDecrypt,
    /// Hash only; decryption waits for the tag ([`Keystream`]).
    HashOnly,
}

/// Runs `pass` over `blocks` (whole GHASH blocks) stride by stride, so each stride is read from
/// memory once for both passes.
fn process_blocks(
    segment: &mut GHash,
    keystream: &mut ctr::Ctr32BE<Aes256>,
    blocks: &mut [u8],
    pass: Pass,
) {
    for stride in blocks.chunks_mut(STRIDE) {
        segment.update_padded(stride);
        if pass == Pass::HashAndDecrypt {
            keystream.apply_keystream(stride);
        }
    }
}

/// The payload's keystream from a verified tag on: what decrypts ciphertext that has already
/// authenticated, at any position and in any number of steps.
pub(crate) struct Keystream {
    stream: ctr::Ctr32BE<Aes256>,
    aes: Aes256,
    j0: aes::Block,
}

/// GCM's keystream from J0 (position 0 is the tag mask's block).
fn keystream_from_j0(aes: &Aes256, j0: &aes::Block) -> ctr::Ctr32BE<Aes256> {
    ctr::Ctr32BE::from_core(Ctr32::inner_iv_init(aes.clone(), j0))
}

/// Where the payload's keystream starts, in bytes from J0: at inc32(J0), one block on (J0 itself
/// encrypts to the tag mask).
const PAYLOAD_START: u64 = 16;

impl Keystream {
    /// Decrypts `ciphertext` into `plaintext` (same length) from the current position on.
    pub(crate) fn decrypt(&mut self, ciphertext: &[u8], plaintext: &mut [u8]) {
        self.stream.apply_keystream_b2b(ciphertext, plaintext);
    }

    /// Decrypts the whole payload in place from its start, split between two threads when it
    /// is large.
    pub(crate) fn decrypt_whole_in_place(&mut self, payload: &mut [u8]) {
        self.seek(0);
        if payload.len() < PARALLEL_MIN {
            self.stream.apply_keystream(payload);
            return;
        }
        let half = payload.len() / 2 / 16 * 16;
        let (first, second) = payload.split_at_mut(half);
        let mut second_keystream = keystream_from_j0(&self.aes, &self.j0);
        second_keystream.seek(PAYLOAD_START + half as u64);
        let first_keystream = &mut self.stream;
        std::thread::scope(|scope| {
            scope.spawn(|| second_keystream.apply_keystream(second));
            first_keystream.apply_keystream(first);
        });
    }

    /// Moves to byte `position` of the payload.
    fn seek(&mut self, position: u64) {
        self.stream.seek(PAYLOAD_START + position);
    }
}

impl Hasher {
    /// Feeds ciphertext to GHASH, carrying an incomplete block over to the next piece.
    fn hash(&mut self, mut data: &[u8]) {
        if self.pending_len > 0 {
            let take = (16 - self.pending_len).min(data.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
            self.pending_len += take;
            data = &data[take..];
            if self.pending_len < 16 {
                return;
            }
            let pending = self.pending;
            self.absorb(&pending);
            self.pending_len = 0;
        }
        let whole = data.len() - data.len() % 16;
        self.absorb(&data[..whole]);
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    /// Feeds `data` to the current segment, zero-padding a final partial block.
    fn absorb(&mut self, data: &[u8]) {
        self.segment.update_padded(data);
        self.segment_blocks += data.len().div_ceil(16) as u64;
    }

    /// Makes `next`, GHASH from the zero state over the `next_blocks` blocks that follow the
    /// current segment, the current segment.
    fn fold(&mut self, next: GHash, next_blocks: u64) {
        self.earlier = self.state();
        self.folded = true;
        self.segment = next;
        self.segment_blocks = next_blocks;
    }

    /// Returns the GHASH state over everything absorbed: earlier·H^k ⊕ segment.
    fn state(&self) -> ghash::Block {
        let mut state = self.segment.clone().finalize();
        // Nothing is ever folded on the sequential path: no field arithmetic at all there.
        if self.folded {
            let mut shift = gf_pow(&self.key, self.segment_blocks);
            let mut earlier = gf_mul(&self.earlier, &shift);
            state
                .iter_mut()
                .zip(earlier.iter())
                .for_each(|(s, e)| *s ^= e);
            shift.zeroize();
            earlier.zeroize();
        }
        state
    }
}

impl Drop for Hasher {
    fn drop(&mut self) {
        // H forges tags for any ciphertext whose tag is known; `earlier` and `GHash` (zeroize
        // feature) hold multiples of it.
        self.key.zeroize();
        self.earlier.zeroize();
    }
}

/// Returns a·b in GCM's field: GHASH under key `a` of the one block `b` is (0 ⊕ b)·a.
pub(crate) fn gf_mul(a: &ghash::Block, b: &ghash::Block) -> ghash::Block {
    let mut ghash = GHash::new(a);
    ghash.update(std::slice::from_ref(b));
    ghash.finalize()
}

/// Returns h^k in GCM's field, by squaring and multiplying.
pub(crate) fn gf_pow(h: &ghash::Block, mut k: u64) -> ghash::Block {
    // The field's 1 in GCM's bit order, where the first bit is the coefficient of x^0.
    let mut result = ghash::Block::default();
    result[0] = 0x80;
    let mut base = *h;
    while k > 0 {
        if k & 1 == 1 {
            result = gf_mul(&result, &base);
        }
        base = gf_mul(&base, &base);
        k >>= 1;
    }
    base.zeroize();
    result
}
