//! Per-app namespace tokens and at-rest table names (spec §8.2): `app_<token>__<name>`.
//!
//! These functions are normative and shared: the materializer names rest tables with them, and
//! this crate uses them to recognise an app's tables on delete, export and import.

/// The one driver-internal app table name exempt from the reserved `snug_` prefix.
pub const SNUG_KV: &str = "snug_kv";

/// Longest app object name: one letter plus up to 40 more characters.
pub const MAX_APP_OBJECT_NAME_LEN: usize = 41;

/// Returns whether `namespace` has the canonical UUID shape (8-4-4-4-12 hex digits, any case).
pub fn is_uuid_shaped(namespace: &str) -> bool {
    let bytes = namespace.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(idx, b)| match idx {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Returns `appDataToken(namespace)`: a UUID-shaped namespace becomes its 32 lowercase hex
/// digits, anything else `x` followed by the lowercase hex of its UTF-8 bytes.
///
/// The function is total, and injective except for letter case in a UUID-shaped namespace: the
/// `x` prefix lies outside the hex alphabet, so the two ranges cannot collide, and a
/// 32-hex-digit namespace that is not UUID-shaped takes the `x` branch; but `A7F3…` and `a7f3…`
/// share a token, which is why two such app ids are never registered side by side (§8.2).
pub fn app_data_token(namespace: &str) -> String {
    if is_uuid_shaped(namespace) {
        namespace
            .chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    } else {
        let mut token = String::with_capacity(1 + namespace.len() * 2);
        token.push('x');
        for byte in namespace.as_bytes() {
            token.push(char::from(HEX[usize::from(byte >> 4)]));
            token.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        token
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Returns the at-rest table name of an app's natural table `name`: `app_<token>__<name>`.
pub fn app_rest_table_name(token: &str, name: &str) -> String {
    format!("app_{token}__{name}")
}

/// Returns the prefix every at-rest table of the app with this token starts with: `app_<token>__`.
pub fn app_rest_table_prefix(token: &str) -> String {
    format!("app_{token}__")
}

/// Returns whether `name` is an acceptable app object name: `^[A-Za-z][A-Za-z0-9_]{0,40}$` and no
/// reserved prefix (`snug_`, `sqlite_`, `app_`, case-insensitive), except exactly `snug_kv`.
pub fn is_valid_app_object_name(name: &str) -> bool {
    if name == SNUG_KV {
        return true;
    }
    let bytes = name.as_bytes();
    let shape_ok = (1..=MAX_APP_OBJECT_NAME_LEN).contains(&bytes.len())
        && bytes[0].is_ascii_alphabetic()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_');
    shape_ok
        && !["snug_", "sqlite_", "app_"]
            .iter()
            .any(|prefix| has_prefix_ignore_case(bytes, prefix))
}

fn has_prefix_ignore_case(bytes: &[u8], prefix: &str) -> bool {
    bytes
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Returns whether `token` is a value [`app_data_token`] can produce.
pub fn is_valid_token(token: &str) -> bool {
    let bytes = token.as_bytes();
    let lower_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if bytes.len() == 32 && bytes.iter().all(lower_hex) {
        return true;
    }
    let Some(hex) = token.strip_prefix('x') else {
        return false;
    };
    if !hex.len().is_multiple_of(2) || !hex.as_bytes().iter().all(lower_hex) {
        return false;
    }
    let decoded: Vec<u8> = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
        .collect();
    // The x branch never encodes a UUID-shaped namespace, so such a token is not one we produce.
    std::str::from_utf8(&decoded).is_ok_and(|ns| !is_uuid_shaped(ns))
}

fn nibble(b: u8) -> u8 {
    if b.is_ascii_digit() {
        b - b'0'
    } else {
        b - b'a' + 10
    }
}

/// Splits an at-rest table name `app_<token>__<name>` into `(token, name)` when both parts are valid.
pub fn parse_rest_table_name(table: &str) -> Option<(&str, &str)> {
    let rest = table.strip_prefix("app_")?;
    // A token is hex or x+hex and never contains '_', so the first "__" ends it.
    let split = rest.find("__")?;
    let (token, name) = (&rest[..split], &rest[split + 2..]);
    (is_valid_token(token) && is_valid_app_object_name(name)).then_some((token, name))
}

#[cfg(test)]
mod tests;
