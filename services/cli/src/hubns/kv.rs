//! `snug settings|profile|sync-config get|set|delete|list`: the JSON key/value tables, and
//! `snug settings sidecar-identities`.

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum KvCommand {
    /// Prints one value as JSON text (null output and exit 0 when the key is absent).
    Get {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The key.
        key: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Stores a value, given as JSON text (`'"x"'`, `true`, `'{"a":1}'`), in the reference's
    /// compact encoding.
    Set {
        /// The user database.
        file: PathBuf,
        /// The key.
        key: String,
        /// The value, as JSON text.
        value: String,
    },
    /// Removes a key.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The key.
        key: String,
    },
    /// Lists every entry, by key.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SettingsCommand {
    #[command(flatten)]
    Kv(KvCommand),
    /// Shows or replaces the third-party identity directory (`sidecarIdentityDirectory`, §20).
    SidecarIdentities {
        /// The user database (plain or protected to show; plain to change).
        file: PathBuf,
        /// Replace the directory with these identities, in order.
        #[arg(long = "set", value_name = "IDENTITY", conflicts_with = "clear")]
        identities: Vec<String>,
        /// Remove the directory.
        #[arg(long)]
        clear: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

pub(crate) fn run_settings(command: SettingsCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        SettingsCommand::Kv(command) => run_kv(KvTable::Settings, command, limits),
        SettingsCommand::SidecarIdentities {
            file,
            identities,
            clear,
            secrets,
        } => {
            if identities.is_empty() && !clear {
                let db = read(&file, &secrets, limits)?;
                let identities = db.sidecar_identity_directory()?;
                return Ok(read_outcome(
                    format!(
                        "{} identit(ies): {}",
                        identities.len(),
                        identities.join(", ")
                    ),
                    json!({ "identities": identities }),
                ));
            }
            let ((), length) = write(&file, |db| {
                if db.sidecar_identity_directory()? == identities {
                    return Ok(Change {
                        result: (),
                        changed: false,
                    });
                }
                db.set_sidecar_identity_directory(&identities)?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "sidecar identity directory: {} identit(ies)",
                    identities.len()
                ),
                json!({ "identities": identities }),
            ))
        }
    }
}

pub(crate) fn run_kv(
    table: KvTable,
    command: KvCommand,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let name = table.name();
    match command {
        KvCommand::Get { file, key, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let value = db.kv_get(table, &key)?;
            let encoded = value.as_ref().map(encode_json);
            Ok(read_outcome(
                encoded.clone().unwrap_or_else(|| "null".to_owned()),
                json!({ "table": name, "key": key, "present": value.is_some(), "value_json": encoded }),
            ))
        }
        KvCommand::Set { file, key, value } => {
            let value = parse_json("the value", &value)?;
            let ((), length) = write(&file, |db| {
                if db.kv_get(table, &key)?.as_ref() == Some(&value) {
                    return Ok(Change {
                        result: (),
                        changed: false,
                    });
                }
                db.kv_set(table, &key, &value)?;
                Ok(changed(()))
            })?;
            let encoded = encode_json(&value);
            Ok(written(
                &file,
                length,
                format!("{name}: {key} = {encoded}"),
                json!({ "table": name, "key": key, "value_json": encoded }),
            ))
        }
        KvCommand::Delete { file, key } => {
            let (existed, length) = write(&file, |db| {
                let existed = db.kv_delete(table, &key)?;
                Ok(Change {
                    result: existed,
                    changed: existed,
                })
            })?;
            let text = if existed {
                format!("{name}: deleted {key}")
            } else {
                format!("{name}: no key {key}")
            };
            Ok(written(
                &file,
                length,
                text,
                json!({ "table": name, "key": key, "existed": existed }),
            ))
        }
        KvCommand::List { file, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let entries = db.kv_entries(table)?;
            let mut text = format!("{name}: {} entr(ies)", entries.len());
            let mut listed = Vec::with_capacity(entries.len());
            for (key, value) in entries {
                let encoded = encode_json(&value);
                text.push_str(&format!("\n  {key} = {encoded}"));
                listed.push(json!({ "key": key, "value_json": encoded }));
            }
            Ok(read_outcome(
                text,
                json!({ "table": name, "entries": listed }),
            ))
        }
    }
}
