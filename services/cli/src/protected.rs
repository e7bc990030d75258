//! Reading a user file that may be protected, and writing an edit of it back the way it was: a protected file is resealed (same header, salt, slots and wrapped keys; a fresh payload IV, §11.2 rule 5), so the passphrase and the recovery key the user wrote down keep opening it.
//!
//! The commands that change a user file (`snug app sql`, `snug app persist`, `snug migrate`)
//! read it with [`read`] and write with [`Unsealed::write`] (or [`Unsealed::seal`] for another
//! path); nothing here draws a new salt or recovery key. The resealing itself is `snug_container::reseal_owned`.

use std::path::Path;

use snug_container::{FileKey, Limits};
use snug_schema::FileFormat;

use crate::{
    failure::Failure,
    files,
    secrets::{self, SecretArgs},
};

/// What writing an edit of a protected file back takes: the container as read (its header and
/// wrapped keys are kept) and the file key its secret unwrapped.
pub(crate) struct Seal {
    container: Vec<u8>,
    file_key: FileKey,
}

/// A user file's plain bytes, and how an edit of it is written back.
pub(crate) struct Unsealed {
    /// What the path given stands for under §10: the file read and where a write goes.
    pub(crate) source: files::UserFile,
    /// The SQLite user database: the file itself, or what its container carries.
    pub(crate) plaintext: Vec<u8>,
    /// `Some` for a protected file.
    pub(crate) seal: Option<Seal>,
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
            Some(seal) => {
                snug_container::reseal_owned(&seal.container, &seal.file_key, image, limits)?
            }
        })
    }

    /// The file's bytes as read: the container of a protected file, the database otherwise.
    pub(crate) fn as_read(&self) -> &[u8] {
        match &self.seal {
            None => &self.plaintext,
            Some(seal) => &seal.container,
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
            // The container is kept for the write back; the copy is decrypted where it lies.
            let (unlocked, file_key) =
                snug_container::open_owned_with_file_key(bytes.clone(), &secrets, limits)?;
            Ok(Unsealed {
                source,
                plaintext: unlocked.plaintext,
                seal: Some(Seal {
                    container: bytes,
                    file_key,
                }),
            })
        }
    }
}
