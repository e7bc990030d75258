//! The leading bytes by which a Snug user file's format is known (§10: never by its name), defined once for every crate that looks at them.
//!
//! `snug-container` and `snug-schema` re-export them in their own vocabulary; the sync store reads
//! the SQLite header of stored images and the gateway refuses a container pushed to the hub, both
//! by these bytes.

/// The leading bytes of every SQLite database file: a plain user database (§10).
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The leading bytes of a protected user file, a SNUGENC1 container (§11.1).
pub const CONTAINER_MAGIC: &[u8; 9] = b"SNUGENC1\n";
