//! Reading a user file that may be protected, and writing an edit of it back the way it was: a protected file is resealed (same header, salt, slots and wrapped keys; a fresh payload IV, §11.2 rule 5), so the passphrase and the recovery key the user wrote down keep opening it.
//!
//! The commands that change a user file (`snug app sql`, `snug app persist`, `snug migrate`)
//! read it with [`read`] and write with [`Unsealed::write`] (or [`Unsealed::seal`] for another
//! path); nothing here draws a new salt or recovery key. The resealing itself is
//! `snug_container::Resealable`.

use std::path::Path;

use snug_container::{Limits, Resealable};
use snug_schema::FileFormat;

use crate::{
    failure::Failure,
    files,
    secrets::{self, SecretArgs},
};

/// A user file's plain bytes, and how an edit of it is written back.
pub(crate) struct Unsealed {
    /// What the path given stands for under §10: the file read and where a write goes.
    pub(crate) source: files::UserFile,
    /// The SQLite user database: the file itself, or what its container carries.
    pub(crate) plaintext: Vec<u8>,
    /// `Some` for a protected file.
    pub(crate) seal: Option<Resealable>,
}

impl Unsealed {
    /// Returns true for a protected (SNUGENC1) file.
    pub(crate) fn is_protected(&self) -> bool {
        self.seal.is_some()
    }

    /// Writes `image`, an edit of this file's database, back atomically (a legacy file is adopted:
    /// `user.snug` is created and the legacy file left as it is): resealed when the file is
    /// protected, as it is otherwise. Returns the length written.
    pub(crate) fn write(&self, image: Vec<u8>, limits: &Limits) -> Result<u64, Failure> {
        let bytes = self.seal(image, limits)?;
        files::write_user_file(&self.source, &bytes)?;
        Ok(bytes.len() as u64)
    }

    /// `image`, an edit of this file's database, as this file would hold it: resealed in its
    /// container when it is protected, as it is otherwise.
    pub(crate) fn seal(&self, image: Vec<u8>, limits: &Limits) -> Result<Vec<u8>, Failure> {
        Ok(match &self.seal {
            None => image,
            Some(seal) => seal.reseal(image, limits)?,
        })
    }

    /// The file's bytes as read: the container of a protected file, the database otherwise.
    pub(crate) fn as_read(&self) -> &[u8] {
        match &self.seal {
            None => &self.plaintext,
            Some(seal) => seal.container(),
        }
    }
}

/// Reads `file` whole; a protected one is opened with its secret (flags, environment or prompt).
///
/// A file that is neither SQLite nor SNUGENC1 is refused as `NOT_SQLITE`. A protected file is
/// checked for damage and policy before anyone is asked for a secret.
pub(crate) fn read(
    file: &Path,
    secret_args: &SecretArgs,
    limits: &Limits,
) -> Result<Unsealed, Failure> {
    let (source, bytes) = files::read_user_file(file)?;
    match snug_schema::detect_format(&bytes) {
        FileFormat::Sqlite => Ok(Unsealed {
            source,
            plaintext: bytes,
            seal: None,
        }),
        FileFormat::Unknown => {
            let mut failure = Failure::from(snug_schema::OpenError::NotSqlite);
            failure.message = format!(
                "{} is neither a SQLite user database nor a protected Snug file (by its leading \
                 bytes)",
                file.display()
            );
            Err(failure)
        }
        FileFormat::Protected => {
            snug_container::inspect(&bytes, limits)?;
            let secrets = secrets::opening_secrets(secret_args)?;
            let (unlocked, seal) = Resealable::open(bytes, &secrets, limits)?;
            Ok(Unsealed {
                source,
                plaintext: unlocked.plaintext,
                seal: Some(seal),
            })
        }
    }
}
