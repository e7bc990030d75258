//! Where the CLI gets secrets: a file, the environment, or a prompt on a terminal — never argv.
//!
//! Command-line arguments are visible to every user of the machine (`ps`) and land in shell
//! history, so no flag takes a secret's value; flags only name files that hold one.

use std::{
    io::IsTerminal as _,
    path::{Path, PathBuf},
};

use snug_container::{Passphrase, RecoveryKey, Secrets};
use zeroize::Zeroizing;

use crate::failure::{Exit, Failure};

/// The environment variable holding a passphrase.
pub(crate) const ENV_PASSPHRASE: &str = "SNUG_PASSPHRASE";
/// The environment variable holding a recovery key.
pub(crate) const ENV_RECOVERY_KEY: &str = "SNUG_RECOVERY_KEY";
/// The environment variable holding the new passphrase for `snug passwd`.
pub(crate) const ENV_NEW_PASSPHRASE: &str = "SNUG_NEW_PASSPHRASE";

/// Flags naming files that hold secrets.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SecretArgs {
    /// A file holding the passphrase (one trailing newline is ignored). Also: SNUG_PASSPHRASE.
    #[arg(long, value_name = "FILE")]
    pub(crate) passphrase_file: Option<PathBuf>,
    /// A file holding the recovery key. Also: SNUG_RECOVERY_KEY.
    #[arg(long, value_name = "FILE")]
    pub(crate) recovery_key_file: Option<PathBuf>,
}

pub(crate) fn read_secret_file(path: &Path) -> Result<Zeroizing<String>, Failure> {
    let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| Failure::io("read", path, e))?);
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| Failure::usage(format!("{} is not UTF-8 text", path.display())))?;
    // Editors and `echo` add a newline; it is never part of a passphrase.
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    Ok(Zeroizing::new(text.to_owned()))
}

fn from_env(name: &str) -> Option<Zeroizing<String>> {
    std::env::var(name).ok().map(Zeroizing::new)
}

fn on_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

fn prompt(label: &str) -> Result<Zeroizing<String>, Failure> {
    rpassword::prompt_password(label)
        .map(Zeroizing::new)
        .map_err(|e| {
            Failure::new(
                Exit::Other,
                &snug_reasons::cli::IO,
                format!("cannot read from the terminal: {e}"),
            )
        })
}

/// The secrets that may open an existing file: flags, then environment, then a prompt.
///
/// A prompted answer is tried as both a passphrase and, when it could be one, a recovery key,
/// so the user need not say which they typed.
pub(crate) fn opening_secrets(args: &SecretArgs) -> Result<Secrets, Failure> {
    let passphrase = match &args.passphrase_file {
        Some(path) => Some(read_secret_file(path)?),
        None => from_env(ENV_PASSPHRASE),
    };
    let recovery_key = match &args.recovery_key_file {
        Some(path) => Some(read_secret_file(path)?),
        None => from_env(ENV_RECOVERY_KEY),
    };
    if passphrase.is_none() && recovery_key.is_none() {
        if !on_terminal() {
            // Nothing was tried, so "no supplied secret opened it" would send the user hunting
            // for a wrong secret: say that none was given, and how to give one.
            return Err(Failure::of(
                &snug_reasons::container::LOCKED,
                format!(
                    "this Snug file is protected and no secret was supplied: give \
                     --passphrase-file FILE or --recovery-key-file FILE, set {ENV_PASSPHRASE} or \
                     {ENV_RECOVERY_KEY}, or run on a terminal to be asked; the file is healthy \
                     and unchanged"
                ),
            ));
        }
        let answer = prompt("Passphrase or recovery key: ")?;
        let as_key = RecoveryKey::parse(&answer);
        return Ok(Secrets {
            recovery_key: as_key.is_plausible().then_some(as_key),
            passphrase: Some(Passphrase::new(answer.as_str())),
        });
    }
    Ok(Secrets {
        passphrase: passphrase.map(|p| Passphrase::new(p.as_str())),
        recovery_key: recovery_key.map(|k| RecoveryKey::parse(&k)),
    })
}

/// The current passphrase for `snug passwd`.
pub(crate) fn current_passphrase(args: &SecretArgs) -> Result<Passphrase, Failure> {
    let passphrase = match &args.passphrase_file {
        Some(path) => Some(read_secret_file(path)?),
        None => from_env(ENV_PASSPHRASE),
    };
    match passphrase {
        Some(p) => Ok(Passphrase::new(p.as_str())),
        None if on_terminal() => Ok(Passphrase::new(prompt("Current passphrase: ")?.as_str())),
        None => Err(no_secret(
            "the current passphrase",
            "--passphrase-file",
            ENV_PASSPHRASE,
        )),
    }
}

/// A new passphrase: from a file, the environment, or typed twice on a terminal.
pub(crate) fn new_passphrase(
    file: Option<&Path>,
    env: &str,
    flag: &str,
) -> Result<Passphrase, Failure> {
    let passphrase = match file {
        Some(path) => Some(read_secret_file(path)?),
        None => from_env(env),
    };
    let passphrase = match passphrase {
        Some(p) => p,
        None if on_terminal() => {
            let first = prompt("New passphrase: ")?;
            let second = prompt("Repeat the new passphrase: ")?;
            if first != second {
                return Err(Failure::usage("the two passphrases differ"));
            }
            first
        }
        None => return Err(no_secret("a new passphrase", flag, env)),
    };
    if passphrase.is_empty() {
        return Err(Failure::usage("the passphrase is empty"));
    }
    Ok(Passphrase::new(passphrase.as_str()))
}

fn no_secret(what: &str, flag: &str, env: &str) -> Failure {
    Failure::usage(format!(
        "{what} is needed: give {flag} FILE, set {env}, or run on a terminal to be asked"
    ))
}

/// Both secrets, for `snug passwd --upgrade-kdf`, which re-derives every slot: flags, then
/// environment, then a prompt for each.
pub(crate) fn both_secrets(args: &SecretArgs) -> Result<(Passphrase, RecoveryKey), Failure> {
    let passphrase = current_passphrase(args)?;
    let recovery_key = match &args.recovery_key_file {
        Some(path) => Some(read_secret_file(path)?),
        None => from_env(ENV_RECOVERY_KEY),
    };
    let recovery_key = match recovery_key {
        Some(key) => key,
        None if on_terminal() => prompt("Recovery key: ")?,
        None => {
            return Err(no_secret(
                "the recovery key (a new KDF setting re-derives every slot, so both secrets)",
                "--recovery-key-file",
                ENV_RECOVERY_KEY,
            ));
        }
    };
    Ok((passphrase, RecoveryKey::parse(&recovery_key)))
}
