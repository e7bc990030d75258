//! `snug.cli`: the JSON error codes only the offline `snug` CLI gives (its other codes are the
//! services' reasons, the same words for the same causes).

use crate::{CliExit, Domain, Exit, Reason};

const fn cli(name: &'static str, exit: Exit, summary: &'static str) -> Reason {
    Reason {
        name,
        grpc: None,
        http: None,
        exit: CliExit::Always(exit),
        summary,
    }
}

/// The command line was wrong.
pub const USAGE: Reason = cli("USAGE", Exit::Usage, "the command line was wrong");

/// A file could not be read or written.
pub const IO: Reason = cli("IO", Exit::Other, "a file could not be read or written");

/// SQLite itself failed (I/O, a full disk) on a sound file.
pub const STORAGE: Reason = cli("STORAGE", Exit::Other, "SQLite failed on a sound file");

/// The operating system's CSPRNG failed.
pub const ENTROPY_UNAVAILABLE: Reason = cli(
    "ENTROPY_UNAVAILABLE",
    Exit::Other,
    "the operating system's random number generator failed",
);

/// An OUT that exists, without `--force`.
pub const OUTPUT_EXISTS: Reason = cli(
    "OUTPUT_EXISTS",
    Exit::Other,
    "an OUT that exists, without `--force`",
);

/// An OUT to be replaced is a SNUGENC1 file, without `--replace-protected` (§11.2 rule 7).
pub const OUTPUT_PROTECTED: Reason = cli(
    "OUTPUT_PROTECTED",
    Exit::ProtectedOutput,
    "an OUT to be replaced is a protected file, without `--replace-protected`",
);

/// An input that is neither a SQLite database nor a SNUGENC1 container.
pub const UNKNOWN_FORMAT: Reason = cli(
    "UNKNOWN_FORMAT",
    Exit::Corrupt,
    "an input that is neither a SQLite database nor a protected Snug file",
);

/// The CLI's own codes.
pub const DOMAIN: Domain = Domain {
    name: "snug.cli",
    reasons: &[
        &USAGE,
        &IO,
        &STORAGE,
        &ENTROPY_UNAVAILABLE,
        &OUTPUT_EXISTS,
        &OUTPUT_PROTECTED,
        &UNKNOWN_FORMAT,
    ],
};
