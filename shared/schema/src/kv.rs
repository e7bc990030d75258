//! Key/value tables: settings, profile and sync (JSON values), secrets (raw strings) and meta.
//!
//! Encodings are the reference's: JSON tables store `JSON.stringify(value ?? null)` — here the
//! compact `serde_json` text of a [`serde_json::Value`], with `Value::Null` for "undefined" — and
//! are written with `INSERT OR REPLACE`; secrets and meta are opaque raw strings.
//! One difference is inherent and harmless: JavaScript prints the number `1.0` as `1`, serde as
//! `1.0`; both parse back to the same number.

use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use crate::db::{UserDb, check_cap};
use crate::error::KvError;

/// The `snug_settings` key of the endpoint re-confirmation latch (F15): set `true` by every
/// import and pull; agent turns on byok/local wait until the user confirms.
pub const NEEDS_ENDPOINT_CONFIRM_KEY: &str = "needsEndpointConfirm";

/// The `snug_settings` key of the third-party identity directory (§20): a JSON string array.
pub const SIDECAR_IDENTITY_DIRECTORY_KEY: &str = "sidecarIdentityDirectory";

/// The host whose approved grant keeps the sidecar identity directory alive.
pub const SIDECAR_HOST: &str = "whatsapp.sidecar.localhost";

/// Returns the `snug_settings` key of an app's model preference: `appModel:<appId>`.
pub fn app_model_key(app_id: &str) -> String {
    format!("appModel:{app_id}")
}

/// A JSON-valued key/value table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvTable {
    /// `snug_settings`.
    Settings,
    /// `snug_profile`.
    Profile,
    /// `snug_sync`.
    Sync,
}

impl KvTable {
    /// Returns the table name.
    pub fn name(self) -> &'static str {
        match self {
            KvTable::Settings => "snug_settings",
            KvTable::Profile => "snug_profile",
            KvTable::Sync => "snug_sync",
        }
    }
}

/// Encodes a value as the reference stores it: compact JSON.
pub fn encode_json(value: &Value) -> String {
    // Serializing a Value cannot fail: its map keys are strings.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// Returns the canonical form used to compare JSON documents (runtime contracts,
/// requirements): keys sorted recursively by code point, arrays in order, no whitespace.
///
/// Sorting is explicit so the result does not depend on whether some crate in the build
/// enabled `serde_json/preserve_order`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (idx, (key, entry)) in entries.into_iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                out.push_str(&encode_json(&Value::String(key.clone())));
                out.push(':');
                write_canonical(entry, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&encode_json(scalar)),
    }
}

impl UserDb {
    /// Returns the decoded value of `key`, or `None` when absent.
    pub fn kv_get(&self, table: KvTable, key: &str) -> Result<Option<Value>, KvError> {
        let raw: Option<String> = self
            .connection()
            .query_row(
                &format!("SELECT value FROM {} WHERE key = ?1", table.name()),
                [key],
                |row| row.get(0),
            )
            .optional()?;
        raw.map(|raw| {
            serde_json::from_str(&raw).map_err(|_| KvError::NotJson {
                table: table.name(),
                key: key.to_owned(),
            })
        })
        .transpose()
    }

    /// Stores `value` under `key` (`Value::Null` for an undefined value, as the reference does).
    pub fn kv_set(&mut self, table: KvTable, key: &str, value: &Value) -> Result<(), KvError> {
        let tx = self.write_tx()?;
        tx.execute(
            &format!(
                "INSERT OR REPLACE INTO {} (key, value) VALUES (?1, ?2)",
                table.name()
            ),
            params![key, encode_json(value)],
        )?;
        check_cap(&tx)?;
        tx.commit()?;
        Ok(())
    }

    /// Removes `key`; returns whether it existed.
    pub fn kv_delete(&mut self, table: KvTable, key: &str) -> Result<bool, KvError> {
        let tx = self.write_tx()?;
        let n = tx.execute(
            &format!("DELETE FROM {} WHERE key = ?1", table.name()),
            [key],
        )?;
        tx.commit()?;
        Ok(n > 0)
    }

    /// Returns every entry, by key.
    pub fn kv_entries(&self, table: KvTable) -> Result<Vec<(String, Value)>, KvError> {
        let mut stmt = self.connection().prepare(&format!(
            "SELECT key, value FROM {} ORDER BY key",
            table.name()
        ))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(key, raw)| match serde_json::from_str(&raw) {
                Ok(value) => Ok((key, value)),
                Err(_) => Err(KvError::NotJson {
                    table: table.name(),
                    key,
                }),
            })
            .collect()
    }

    /// Returns a setting.
    pub fn setting(&self, key: &str) -> Result<Option<Value>, KvError> {
        self.kv_get(KvTable::Settings, key)
    }

    /// Stores a setting.
    pub fn set_setting(&mut self, key: &str, value: &Value) -> Result<(), KvError> {
        self.kv_set(KvTable::Settings, key, value)
    }

    /// Removes a setting.
    pub fn delete_setting(&mut self, key: &str) -> Result<bool, KvError> {
        self.kv_delete(KvTable::Settings, key)
    }

    /// Returns a profile value.
    pub fn profile(&self, key: &str) -> Result<Option<Value>, KvError> {
        self.kv_get(KvTable::Profile, key)
    }

    /// Stores a profile value.
    pub fn set_profile(&mut self, key: &str, value: &Value) -> Result<(), KvError> {
        self.kv_set(KvTable::Profile, key, value)
    }

    /// Returns a sync-config value.
    pub fn sync_config(&self, key: &str) -> Result<Option<Value>, KvError> {
        self.kv_get(KvTable::Sync, key)
    }

    /// Stores a sync-config value.
    pub fn set_sync_config(&mut self, key: &str, value: &Value) -> Result<(), KvError> {
        self.kv_set(KvTable::Sync, key, value)
    }

    /// Returns a secret's raw value.
    pub fn secret(&self, key: &str) -> Result<Option<String>, KvError> {
        Ok(self
            .connection()
            .query_row(
                "SELECT value FROM snug_secrets WHERE key = ?1",
                [key],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Stores a secret's raw value.
    pub fn set_secret(&mut self, key: &str, value: &str) -> Result<(), KvError> {
        let tx = self.write_tx()?;
        tx.execute(
            "INSERT OR REPLACE INTO snug_secrets (key, value) VALUES (?1, ?2)",
            params![key, value],
        )?;
        check_cap(&tx)?;
        tx.commit()?;
        Ok(())
    }

    /// Removes a secret, zeroing its bytes in place; returns whether it existed.
    pub fn delete_secret(&mut self, key: &str) -> Result<bool, KvError> {
        let tx = self.write_tx()?;
        let n = crate::wipe::delete_secrets_securely(&tx, &[key.to_owned()])?;
        tx.commit()?;
        Ok(n > 0)
    }

    /// Lists secret keys (never values).
    pub fn secret_keys(&self) -> Result<Vec<String>, KvError> {
        let mut stmt = self
            .connection()
            .prepare("SELECT key FROM snug_secrets ORDER BY key")?;
        let keys = stmt
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(keys)
    }

    /// Returns a raw `snug_meta` value.
    pub fn meta(&self, key: &str) -> Result<Option<String>, KvError> {
        Ok(self
            .connection()
            .query_row("SELECT value FROM snug_meta WHERE key = ?1", [key], |row| {
                row.get(0)
            })
            .optional()?)
    }

    /// Returns the database id (`snug_meta.db_id`).
    pub fn db_id(&self) -> Result<Option<String>, KvError> {
        self.meta("db_id")
    }

    /// Returns an app's model preference; `None` means "inherit the global setting, live".
    pub fn app_model(&self, app_id: &str) -> Result<Option<String>, KvError> {
        let key = app_model_key(app_id);
        match self.setting(&key)? {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(model)) => Ok(Some(model)),
            Some(_) => Err(KvError::UnexpectedType {
                table: "snug_settings",
                key,
            }),
        }
    }

    /// Sets an app's model preference, or clears it (inherit) with `None`.
    pub fn set_app_model(&mut self, app_id: &str, model: Option<&str>) -> Result<(), KvError> {
        let key = app_model_key(app_id);
        match model {
            Some(model) => self.set_setting(&key, &Value::String(model.to_owned())),
            None => self.delete_setting(&key).map(|_| ()),
        }
    }

    /// Returns the sidecar identity directory (empty when absent).
    pub fn sidecar_identity_directory(&self) -> Result<Vec<String>, KvError> {
        match self.setting(SIDECAR_IDENTITY_DIRECTORY_KEY)? {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(value) => serde_json::from_value(value).map_err(|_| KvError::UnexpectedType {
                table: "snug_settings",
                key: SIDECAR_IDENTITY_DIRECTORY_KEY.to_owned(),
            }),
        }
    }

    /// Replaces the sidecar identity directory; an empty list removes the key.
    pub fn set_sidecar_identity_directory(&mut self, identities: &[String]) -> Result<(), KvError> {
        if identities.is_empty() {
            return self
                .delete_setting(SIDECAR_IDENTITY_DIRECTORY_KEY)
                .map(|_| ());
        }
        let value = Value::Array(identities.iter().cloned().map(Value::String).collect());
        self.set_setting(SIDECAR_IDENTITY_DIRECTORY_KEY, &value)
    }

    /// Returns whether agent turns must wait for the user to re-confirm endpoints.
    pub fn needs_endpoint_confirm(&self) -> Result<bool, KvError> {
        Ok(matches!(
            self.setting(NEEDS_ENDPOINT_CONFIRM_KEY)?,
            Some(Value::Bool(true))
        ))
    }

    /// Sets or clears the endpoint re-confirmation latch.
    pub fn set_needs_endpoint_confirm(&mut self, needed: bool) -> Result<(), KvError> {
        self.set_setting(NEEDS_ENDPOINT_CONFIRM_KEY, &Value::Bool(needed))
    }
}

#[cfg(test)]
mod tests;
