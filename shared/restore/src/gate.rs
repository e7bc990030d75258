//! The push gate: what a push sends for a user database, and the hash that says whether its
//! content changed.
//!
//! What travels is the sync copy (`snug_schema::sync_copy_bytes`, issue 38): the live file's
//! pages, stripped of secrets and with its free space zeroed, page numbers kept, so a small edit
//! changes few of its pages and a delta moves little. Its bytes depend on the file's history (where
//! SQLite put each row), not only on its content, so whether the content changed is judged on
//! another hash: the gate's [`content_hash`], the SHA-256 of the default export (VACUUMed, a
//! function of the content alone).
//!
//! Push and pull must agree on that hash, or a file that was just pulled looks changed (and is
//! pushed back, or blocks the next pull as diverged). So both use this module: `snug sync push`
//! records [`PushImage::content_hash`], and the install pipeline binds an installed file to its
//! revision with [`content_hash`] — the hash the gate computes for that file before any later
//! push.
//!
//! The export's bytes are a function of the file's content only; SQLite stamps every write
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
    /// The sync copy: plain, page numbers kept, free space zeroed, `snug_secrets` emptied unless
    /// secrets were asked for.
    pub bytes: Vec<u8>,
    /// SHA-256 of `bytes`, lowercase hex: what the origin records for the revision it makes.
    pub sha256: String,
    /// The gate's hash of the content ([`content_hash`]), recorded in the sidecar.
    pub content_hash: String,
}

/// Returns what a push of the plain user database `plaintext` sends, and its hashes.
///
/// The file is opened (migrated and healed in memory; the bytes are only read) and copied with
/// or without its secrets. A hub origin never gets secrets; a personal origin only on request.
pub fn push_image(
    plaintext: &[u8],
    include_secrets: bool,
    clock: Arc<dyn Clock>,
) -> Result<PushImage, GateError> {
    let (mut db, _) = UserDb::from_bytes(plaintext, clock)?;
    image_of(&mut db, include_secrets)
}

/// Returns the push gate's hash of the plain user database `plaintext`: the SHA-256 of its
/// [`canonical_export`]. Adding or changing a local secret never changes it.
pub fn content_hash(plaintext: &[u8], clock: Arc<dyn Clock>) -> Result<String, GateError> {
    let (mut db, _) = UserDb::from_bytes(plaintext, clock)?;
    content_hash_of(&mut db)
}

/// Returns the canonical export of the plain user database `plaintext`: its default
/// (secrets-stripped, VACUUMed) export with the history counters set to 1, a function of its
/// content alone. [`content_hash`] is its SHA-256; a release before issue 38 pushed these bytes.
pub fn canonical_export(plaintext: &[u8], clock: Arc<dyn Clock>) -> Result<Vec<u8>, GateError> {
    let (mut db, _) = UserDb::from_bytes(plaintext, clock)?;
    canonical_export_of(&mut db)
}

/// [`push_image`] of an already opened database (both copies work on a copy; `db` is unchanged).
pub(crate) fn image_of(db: &mut UserDb, include_secrets: bool) -> Result<PushImage, GateError> {
    let content_hash = content_hash_of(db)?;
    let (mut bytes, _) = snug_schema::sync_copy_bytes(db, ExportOptions { include_secrets })?;
    normalize_header(&mut bytes);
    let sha256 = hex::encode(Sha256::digest(&bytes));
    Ok(PushImage {
        bytes,
        sha256,
        content_hash,
    })
}

/// [`content_hash`] of an already opened database.
fn content_hash_of(db: &mut UserDb) -> Result<String, GateError> {
    Ok(hex::encode(Sha256::digest(canonical_export_of(db)?)))
}

/// [`canonical_export`] of an already opened database.
fn canonical_export_of(db: &mut UserDb) -> Result<Vec<u8>, GateError> {
    let (mut export, _) = snug_schema::export_bytes(db, ExportOptions::default())?;
    normalize_header(&mut export);
    Ok(export)
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
