//! Reading inputs and writing outputs: outputs are atomic, inputs are never the outputs.

use std::path::{Path, PathBuf};

use crate::failure::{Exit, Failure};

/// Reads a whole input file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::io("read", path, e))
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

/// Checks that writing `out` can neither modify `input` nor clobber a file by accident.
pub(crate) fn check_output(input: &Path, out: &Path, force: bool) -> Result<(), Failure> {
    if resolved(input) == resolved(out) {
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
