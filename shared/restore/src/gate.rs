//! The push gate: what a push sends for a user database, and the SHA-256 of it.
//!
//! Push and pull must agree on one hash, or a file that was just pulled looks changed (and is
//! pushed back, or blocks the next pull as diverged). So both use this module: `snug sync push`
//! sends [`push_image`]'s bytes and records their hash, and the install pipeline binds an
//! installed file to its revision with [`content_hash`], which is `push_image` without secrets —
//! the hash the gate computes for that file before any later push.
//!
//! The export's bytes are a function of the file's content only. SQLite stamps every write
//! transaction into the header (the file change counter at offset 24 and its copy, the
//! version-valid-for number, at offset 92) and every `VACUUM` into the schema cookie (offset 40),
//! and the export carries those counts: without [`normalize_header`] a credential written and
//! refreshed on this device (which the export strips) would still change the hash and look like
//! an unpushed change that blocks the next pull, and exporting an export would never give the
//! same bytes twice. The export is a new file no connection has open, so these counters mean
//! nothing to SQLite there; they are set to 1 (the change counter equal to version-valid-for, so
//! the in-header database size stays valid).

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use snug_schema::{Clock, ExportOptions, UserDb};

use crate::error::GateError;

/// What a push of one user database sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushImage {
    /// The export: plain, compacted, `snug_secrets` emptied unless secrets were asked for.
    pub bytes: Vec<u8>,
    /// SHA-256 of `bytes`, lowercase hex: the gate's value, recorded in the sidecar.
    pub sha256: String,
}

/// Returns what a push of the plain user database `plaintext` sends, and its hash.
///
/// The file is opened (migrated and healed in memory; the bytes are only read) and exported with
/// or without its secrets. A hub origin never gets secrets; a personal origin only on request.
pub fn push_image(
    plaintext: &[u8],
    include_secrets: bool,
    clock: Arc<dyn Clock>,
) -> Result<PushImage, GateError> {
    let (mut db, _) = UserDb::from_bytes(plaintext, clock)?;
    export_of(&mut db, include_secrets)
}

/// Returns the push gate's hash of the plain user database `plaintext`: the SHA-256 of its
/// default (secrets-stripped) export. Adding or changing a local secret never changes it.
pub fn content_hash(plaintext: &[u8], clock: Arc<dyn Clock>) -> Result<String, GateError> {
    push_image(plaintext, false, clock).map(|image| image.sha256)
}

/// [`push_image`] of an already opened database (the export works on a copy; `db` is unchanged).
pub(crate) fn export_of(db: &mut UserDb, include_secrets: bool) -> Result<PushImage, GateError> {
    let (mut bytes, _) = snug_schema::export_bytes(db, ExportOptions { include_secrets })?;
    normalize_header(&mut bytes);
    let sha256 = hex::encode(Sha256::digest(&bytes));
    Ok(PushImage { bytes, sha256 })
}

/// SQLite header offsets of the counters that record history rather than content: the file
/// change counter, the schema cookie and the version-valid-for number.
const HISTORY_COUNTERS: [std::ops::Range<usize>; 3] = [24..28, 40..44, 92..96];

/// Sets the history counters of a SQLite header to 1 (see the module documentation).
fn normalize_header(image: &mut [u8]) {
    if image.len() >= 100 && image.starts_with(snug_schema::SQLITE_MAGIC) {
        for field in HISTORY_COUNTERS {
            image[field].copy_from_slice(&1u32.to_be_bytes());
        }
    }
}
