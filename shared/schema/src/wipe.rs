//! The legacy (pre-slot) credential wipe (spec §8 obligation 2) and secret-key parsing.
//!
//! Keys are classified by exact `:`-segment parsing, never by prefix: the legacy shape
//! `auth:<appId>:<field>` and the live slot shape `auth:<appId>:<slot>:<field>` share the prefix
//! `auth:<appId>:`, so a prefix delete would take every live credential with it.

use rusqlite::Connection;

/// Returns whether `key` is a legacy v3 credential key: `auth:<appId>:<field>`, exactly three
/// `:`-segments, the second not `_flow`.
///
/// Kept: slot keys (`auth:<appId>:<slot>:<field>`, four segments), `auth:_state_hmac` (two),
/// `auth:_flow:<id>`, `byok:*` and everything else.
pub fn is_legacy_credential_key(key: &str) -> bool {
    let segments: Vec<&str> = key.split(':').collect();
    segments.len() == 3 && segments[0] == "auth" && segments[1] != "_flow"
}

/// Returns whether the secret `key` belongs to app `app_id`: `auth:<appId>:<field>` or
/// `auth:<appId>:<slot>:<field>`, matched on whole segments.
///
/// The app id is compared as a whole string followed by `:` and the remainder must be one or
/// two segments, so an app id that is a prefix of another (`a` vs `a:b`) never over-matches.
pub fn is_app_credential_key(key: &str, app_id: &str) -> bool {
    if app_id.is_empty() || app_id.starts_with('_') {
        return false;
    }
    let Some(rest) = key
        .strip_prefix("auth:")
        .and_then(|k| k.strip_prefix(app_id))
        .and_then(|k| k.strip_prefix(':'))
    else {
        return false;
    };
    let n_segments = rest.split(':').count();
    (1..=2).contains(&n_segments) && rest.split(':').all(|segment| !segment.is_empty())
}

/// Lists the legacy credential keys in `snug_secrets`.
pub(crate) fn legacy_credential_keys(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    // The LIKE only narrows the scan; the decision is the exact segment rule above.
    let mut stmt = conn.prepare("SELECT key FROM snug_secrets WHERE key LIKE 'auth:%'")?;
    let keys = stmt.query_map([], |row| row.get::<_, String>(0))?;
    let mut legacy = Vec::new();
    for key in keys {
        let key = key?;
        if is_legacy_credential_key(&key) {
            legacy.push(key);
        }
    }
    Ok(legacy)
}

/// Deletes the legacy credential keys and returns how many went.
///
/// `secure_delete` is on for the deletes so the values are zeroed in place rather than left in
/// free space; that replaces the reference's best-effort VACUUM, which cannot run inside the
/// open transaction and would rewrite the whole file.
pub(crate) fn wipe_legacy_credentials(conn: &Connection) -> rusqlite::Result<usize> {
    let keys = legacy_credential_keys(conn)?;
    if keys.is_empty() {
        return Ok(0);
    }
    delete_secrets_securely(conn, &keys)
}

/// Deletes the given `snug_secrets` keys with `secure_delete` on, restoring the previous setting.
pub(crate) fn delete_secrets_securely(
    conn: &Connection,
    keys: &[String],
) -> rusqlite::Result<usize> {
    let previous: i64 = conn.pragma_query_value(None, "secure_delete", |row| row.get(0))?;
    conn.pragma_update(None, "secure_delete", "ON")?;
    let result = (|| {
        let mut stmt = conn.prepare("DELETE FROM snug_secrets WHERE key = ?1")?;
        let mut n_deleted = 0;
        for key in keys {
            n_deleted += stmt.execute([key])?;
        }
        Ok(n_deleted)
    })();
    conn.pragma_update(None, "secure_delete", previous)?;
    result
}

#[cfg(test)]
mod tests;
