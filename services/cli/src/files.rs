//! Reading inputs and writing outputs: outputs are atomic, inputs are never the outputs.

use std::path::{Path, PathBuf};

use crate::failure::{Exit, Failure};

/// Reads a whole input file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::io("read", path, e))
}

/// A user file a command was given, as §10 has it (`snug_schema::resolve_given`, the one
/// decision every command uses): the file read and where a write of it goes.
pub(crate) struct UserFile {
    /// The file read: the given one, or the legacy `user.sqlite` a missing `user.snug` stands for.
    pub(crate) read: PathBuf,
    /// Where a write goes: `user.snug` when the read came from a legacy file not adopted yet.
    pub(crate) write: PathBuf,
}

impl UserFile {
    /// Whether a write adopts: it creates `user.snug` and leaves the legacy file as it is.
    pub(crate) fn is_adopting(&self) -> bool {
        self.read != self.write
    }
}

/// Reads the user file `path` stands for under §10: the file itself, or the legacy
/// `user.sqlite` beside a missing `user.snug`; returns it with its bytes.
pub(crate) fn read_user_file(path: &Path) -> Result<(UserFile, Vec<u8>), Failure> {
    let given = snug_schema::resolve_given(path);
    let from = given.read.unwrap_or_else(|| path.to_owned());
    let bytes = read(&from)?;
    let file = UserFile {
        read: from,
        write: given.write,
    };
    Ok((file, bytes))
}

/// Writes a user file back: atomically in place, or, when adopting, as a new `user.snug` that
/// never replaces one created meanwhile (the legacy file is never written).
pub(crate) fn write_user_file(file: &UserFile, bytes: &[u8]) -> Result<(), Failure> {
    if !file.is_adopting() {
        return write(&file.write, bytes);
    }
    snug_files::write_new_atomically(&file.write, bytes)
        .map_err(|e| Failure::io("create", &file.write, e))
}

/// Where a path would resolve, even if it does not exist yet.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(path) = path.canonicalize() {
        return path;
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (parent.canonicalize(), path.file_name()) {
        (Ok(parent), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    }
}

/// Checks that writing `out` can neither modify `input` (nor the legacy file it stands for) nor
/// clobber a file by accident.
pub(crate) fn check_output(input: &Path, out: &Path, force: bool) -> Result<(), Failure> {
    let read = snug_schema::resolve_given(input).read;
    let inputs = [Some(input), read.as_deref()];
    if inputs
        .into_iter()
        .flatten()
        .any(|input| resolved(input) == resolved(out))
    {
        return Err(Failure::usage(format!(
            "--out {} is the input file; outputs never replace inputs (passwd and \
             rotate-recovery-key are the in-place commands)",
            out.display()
        )));
    }
    check_new_output(out, force)
}

/// Checks that writing `out` cannot clobber a file by accident (for outputs with no input).
pub(crate) fn check_new_output(out: &Path, force: bool) -> Result<(), Failure> {
    if !force && out.exists() {
        return Err(Failure::new(
            Exit::Other,
            "OUTPUT_EXISTS",
            format!("{} exists; pass --force to replace it", out.display()),
        ));
    }
    Ok(())
}

/// Writes an output atomically: whole or not at all.
pub(crate) fn write(out: &Path, bytes: &[u8]) -> Result<(), Failure> {
    snug_files::write_atomically(out, bytes).map_err(|e| Failure::io("write", out, e))
}
