//! Reading inputs and writing outputs: outputs are atomic, inputs are never the outputs.

use std::path::{Path, PathBuf};

use crate::failure::Failure;

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
    let bytes = with_log(&from, bytes)?;
    let file = UserFile {
        read: from,
        write: given.write,
    };
    Ok((file, bytes))
}

/// Refuses a user file another program has open in WAL mode with changes in its log
/// (`snug_restore::refuse_in_use`): a command that replaced it would lose them.
pub(crate) fn not_in_use(path: &Path) -> Result<(), Failure> {
    snug_restore::refuse_in_use(path)
        .map_err(|err| Failure::of(&snug_reasons::restore::FILE_IN_USE, err.to_string()))
}

/// A plain user database as SQLite reads it: when another program has it open in WAL mode with
/// changes in its log, the bytes on disk lack them, so it is read through SQLite (a read-only
/// connection, serialized), which writes nothing to the file.
pub(crate) fn with_log(path: &Path, bytes: Vec<u8>) -> Result<Vec<u8>, Failure> {
    if snug_schema::detect_format(&bytes) != snug_schema::FileFormat::Sqlite
        || matches!(snug_schema::pending_log(path), Ok(None))
    {
        return Ok(bytes);
    }
    snug_schema::read_through_sqlite(path).map_err(|err| {
        Failure::of(
            &snug_reasons::cli::STORAGE,
            format!(
                "cannot read {} with its write-ahead log: {err}",
                path.display()
            ),
        )
    })
}

/// Writes a user file back: atomically in place, or, when adopting, as a new `user.snug` that
/// never replaces one created meanwhile (the legacy file is never written). Refused while another
/// program has it open in WAL mode with changes in its log: they would be lost, and that program
/// would write them into the replaced file.
pub(crate) fn write_user_file(file: &UserFile, bytes: &[u8]) -> Result<(), Failure> {
    not_in_use(&file.write)?;
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

/// How an existing OUT may be replaced. `--force` replaces a plain file; a protected (SNUGENC1)
/// one is replaced only when `--replace-protected` names it too (§11.2 rule 7: a protected file
/// is healthy and is never replaced by accident; its contents and recovery key go with it).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub(crate) struct Replace {
    /// Replace OUT if it exists (a protected OUT also needs --replace-protected).
    #[arg(long)]
    pub(crate) force: bool,
    /// With --force: replace OUT even if it is a protected (SNUGENC1) file, whose contents and
    /// recovery key are then gone.
    #[arg(long, requires = "force")]
    pub(crate) replace_protected: bool,
}

/// Checks that writing `out` can neither modify `input` (nor the legacy file it stands for) nor
/// clobber a file by accident.
pub(crate) fn check_output(input: &Path, out: &Path, replace: Replace) -> Result<(), Failure> {
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
    check_new_output(out, replace)
}

/// Checks that writing `out` cannot clobber a file by accident (for outputs with no input).
pub(crate) fn check_new_output(out: &Path, replace: Replace) -> Result<(), Failure> {
    if !out.exists() {
        return Ok(());
    }
    if !replace.force {
        return Err(Failure::of(
            &snug_reasons::cli::OUTPUT_EXISTS,
            format!("{} exists; pass --force to replace it", out.display()),
        ));
    }
    if !replace.replace_protected && is_protected(out)? {
        return Err(Failure::of(
            &snug_reasons::cli::OUTPUT_PROTECTED,
            format!(
                "{} is a protected Snug file (SNUGENC1) and --force alone never replaces one; \
                 add --replace-protected if you mean to replace it (its contents and its \
                 recovery key go with it); nothing was written",
                out.display()
            ),
        ));
    }
    Ok(())
}

/// Whether `path` starts with the SNUGENC1 magic. A file that cannot be read is not replaced
/// either: what it is cannot be told.
fn is_protected(path: &Path) -> Result<bool, Failure> {
    use std::io::Read as _;
    let mut leading = Vec::with_capacity(snug_container::MAGIC.len());
    std::fs::File::open(path)
        .and_then(|file| {
            file.take(snug_container::MAGIC.len() as u64)
                .read_to_end(&mut leading)
        })
        .map_err(|e| Failure::io("read", path, e))?;
    Ok(snug_container::detect(&leading) == snug_container::Format::Container)
}

/// Writes an output atomically: whole or not at all.
pub(crate) fn write(out: &Path, bytes: &[u8]) -> Result<(), Failure> {
    snug_files::write_atomically(out, bytes).map_err(|e| Failure::io("write", out, e))
}
