//! `snug secrets list|set|delete`: credential values, never on the command line.

use super::*;

/// The environment variable holding the value for `snug secrets set`.
const ENV_SECRET_VALUE: &str = "SNUG_SECRET_VALUE";

#[derive(Debug, Subcommand)]
pub(crate) enum SecretsCommand {
    /// Lists the credential keys in `snug_secrets`; values are never shown.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Stores a credential value (raw text) read from a file or SNUG_SECRET_VALUE, never from
    /// the command line. A default export strips it.
    Set {
        /// The user database.
        file: PathBuf,
        /// The key (`byok:anthropic`, `auth:<appId>:<slot>:<field>`, …).
        key: String,
        /// A file holding the value (one trailing newline is ignored). Also: SNUG_SECRET_VALUE.
        #[arg(long, value_name = "FILE")]
        value_file: Option<PathBuf>,
    },
    /// Removes a credential, zeroing its bytes in place.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The key.
        key: String,
    },
}

pub(crate) fn run_secrets(command: SecretsCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        SecretsCommand::List { file, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let keys = db.secret_keys()?;
            let mut text = format!("{} credential(s)", keys.len());
            for key in &keys {
                text.push_str(&format!("\n  {key}"));
            }
            Ok(read_outcome(text, json!({ "keys": keys })))
        }
        SecretsCommand::Set {
            file,
            key,
            value_file,
        } => {
            let value = match &value_file {
                Some(path) => secrets::read_secret_file(path)?,
                None => match std::env::var(ENV_SECRET_VALUE) {
                    Ok(value) => zeroize::Zeroizing::new(value),
                    Err(_) => {
                        return Err(Failure::usage(format!(
                            "give the value in a file (--value-file) or in {ENV_SECRET_VALUE}; \
                             never on the command line"
                        )));
                    }
                },
            };
            let ((), length) = write(&file, |db| {
                db.set_secret(&key, &value)?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!("stored credential {key}"),
                json!({ "key": key }),
            ))
        }
        SecretsCommand::Delete { file, key } => {
            let (existed, length) = write(&file, |db| {
                let existed = db.delete_secret(&key)?;
                Ok(Change {
                    result: existed,
                    changed: existed,
                })
            })?;
            Ok(written(
                &file,
                length,
                if existed {
                    format!("deleted credential {key}")
                } else {
                    format!("no credential {key}")
                },
                json!({ "key": key, "existed": existed }),
            ))
        }
    }
}
