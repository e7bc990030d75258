//! What a hub sync origin accepts (§9.3, §11.3), decided once: a secrets-stripped plain user
//! database this build opens, stored with its SQLite free space zeroed.
//!
//! [`validate_sync_image`] is the one verdict: the schema service's `ValidateSyncImage` answers
//! with it, and the sync service writes no revision without it (issue 37: the sync service owns
//! a write). The refusals, in order: a SNUGENC1 container ([`SyncImageError::ContainerNotAccepted`]:
//! a hub holds plaintext only), anything that is not a SQLite user database this build opens as
//! the user's own (an [`OpenError`]: not SQLite, malformed, hostile, newer than this build), one
//! an import would refuse (an [`ImportError`], checked on a scratch copy only when the schema
//! says an import might refuse or the migration ladder would run), and one that carries
//! credentials ([`SyncImageError::SecretsPresent`]: only the default export, which strips them,
//! is synced to a hub).
//!
//! The verdict names the ranges of free space that still hold bytes (a credential deleted
//! without `VACUUM` stays there): the origin stores the image with them zeroed
//! ([`zero_free_space`]), the one rewrite of accepted bytes, and [`SyncImage::sha256`] is the
//! hash of the bytes so stored. This project's exports have nothing to zero.
//!
//! The walk of the free space and the hash read the bytes, not SQLite: they run on a thread of
//! their own beside the inspection (a copy into SQLite and a `quick_check`), which takes as long,
//! and their verdict is looked at only after every refusal the inspection leads to.

use std::{ops::Range, sync::Arc};

use sha2::{Digest as _, Sha256};

use crate::{
    Clock, FileFormat, ImportError, ImportOptions, OpenError, STORAGE_VERSION, ScrubError,
    detect_format, dirty_free_space, import_check, inspect_bytes,
};

/// An image a hub sync origin accepts, and how it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncImage {
    /// `PRAGMA user_version` of the image.
    pub storage_version: i64,
    /// The image's length (the same after zeroing).
    pub length: u64,
    /// SHA-256 of the image as stored: with every [`SyncImage::free_space`] range zeroed.
    pub sha256: [u8; 32],
    /// Ranges of free space holding a non-zero byte, ascending and disjoint.
    pub free_space: Vec<Range<u64>>,
}

/// Why a hub sync origin refuses an image.
#[derive(Debug, thiserror::Error)]
pub enum SyncImageError {
    /// A SNUGENC1 container: a hub sync origin stores the secrets-stripped plaintext only.
    #[error(
        "a hub sync origin stores the secrets-stripped plaintext only; push the unprotected \
         export, never a SNUGENC1 container (§11.3)"
    )]
    ContainerNotAccepted,
    /// Not a user database this build opens as the user's own.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A user database an import refuses.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The image carries credentials.
    #[error(
        "the image carries credentials ({} rows in snug_secrets); a hub sync origin only takes \
         the default export, which strips them",
        .rows.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
    )]
    SecretsPresent {
        /// The rows of `snug_secrets`, when they could be counted.
        rows: Option<u64>,
    },
    /// The free space could not be walked (a page the inspection accepted that the walk cannot
    /// read).
    #[error(transparent)]
    Scrub(#[from] ScrubError),
    /// The caller stopped asking (`keep_going` said no) between two steps.
    #[error("the validation was stopped")]
    Stopped,
}

/// Decides whether a hub sync origin accepts `bytes` (see the module docs), asking
/// `keep_going` between its steps so a caller that went away stops it early.
pub fn validate_sync_image(
    bytes: &[u8],
    clock: Arc<dyn Clock>,
    keep_going: &dyn Fn() -> bool,
) -> Result<SyncImage, SyncImageError> {
    validate_sync_image_digested(bytes, None, clock, keep_going)
}

/// [`validate_sync_image`] of `bytes` whose SHA-256 the caller already verified (`sha256`, a
/// delta push's image, checked by its assembly): the same checks and verdict, and the image is
/// not hashed again unless free space is zeroed (the stored bytes then differ).
pub fn validate_sync_image_digested(
    bytes: &[u8],
    sha256: Option<[u8; 32]>,
    clock: Arc<dyn Clock>,
    keep_going: &dyn Fn() -> bool,
) -> Result<SyncImage, SyncImageError> {
    match detect_format(bytes) {
        FileFormat::Sqlite => {}
        FileFormat::Protected => return Err(SyncImageError::ContainerNotAccepted),
        FileFormat::Unknown => return Err(OpenError::NotSqlite.into()),
    }
    let (inspection, stored) = std::thread::scope(|scope| {
        let stored = scope.spawn(|| stored_digest(bytes, sha256));
        let inspection = inspect_bytes(bytes);
        let stored = stored.join().unwrap_or_else(|_| {
            Err(ScrubError::Header {
                problem: "the walk of the free space panicked".to_owned(),
            })
        });
        (inspection, stored)
    });
    let inspection = inspection?;
    // The inspection predicts the refusals an import would make from the schema alone. When it
    // predicts one, or when the ladder would run (which can refuse too), the import itself is
    // run on a scratch copy so the refusal is the typed error an import produces.
    if inspection.import_refusal.is_some() || inspection.storage_version != STORAGE_VERSION {
        if !keep_going() {
            return Err(SyncImageError::Stopped);
        }
        import_check(bytes, &ImportOptions::default(), clock)?;
    }
    let secret_rows = inspection
        .tables
        .iter()
        .find(|table| table.name == "snug_secrets")
        .map(|table| table.rows);
    match secret_rows {
        None | Some(Some(0)) => {}
        Some(rows) => return Err(SyncImageError::SecretsPresent { rows }),
    }
    if !keep_going() {
        return Err(SyncImageError::Stopped);
    }
    let (free_space, sha256) = stored?;
    Ok(SyncImage {
        storage_version: inspection.storage_version,
        length: bytes.len() as u64,
        sha256,
        free_space,
    })
}

/// Zeroes the verdict's free space in `image`, making it the bytes a hub stores.
pub fn zero_free_space(image: &mut [u8], ranges: &[Range<u64>]) {
    for range in ranges {
        let (start, end) = (range.start as usize, range.end as usize);
        if let Some(bytes) = image.get_mut(start..end) {
            bytes.fill(0);
        }
    }
}

/// The free space of `image` that holds a non-zero byte, and the SHA-256 of the image with it
/// zeroed (`known`: the image's own, when the caller verified it).
fn stored_digest(
    image: &[u8],
    known: Option<[u8; 32]>,
) -> Result<(Vec<Range<u64>>, [u8; 32]), ScrubError> {
    let dirty = dirty_free_space(image)?;
    let sha256 = if dirty.is_empty() {
        match known {
            Some(known) => return Ok((dirty, known)),
            None => Sha256::digest(image),
        }
    } else {
        let mut stored = image.to_vec();
        zero_free_space(&mut stored, &dirty);
        Sha256::digest(&stored)
    };
    Ok((dirty, sha256.into()))
}
