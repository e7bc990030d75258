//! The credential in an `Authorization: Bearer <token>` header, read one way by every caller
//! the hub authenticates (the gateway's users, the admin API's operator, the services' callers),
//! and the [`TokenDigest`] a server that checks a shared secret keeps of it.

use ctutils::CtEq as _;
use sha2::{Digest as _, Sha256};

/// The SHA-256 of a secret token: what a server keeps to check one (the admin token, the
/// service token), compared with the digest of what a call presents in constant time.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(<sha-256>)")
    }
}

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// A digest kept elsewhere (an operator's `SNUG_ADMIN_TOKEN_SHA256`).
    pub fn from_bytes(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether `presented` is the token (constant time in the digest comparison).
    pub fn admits(&self, presented: &str) -> bool {
        Self::of(presented).0.ct_eq(&self.0).to_bool()
    }
}

/// The token of a `Bearer` authorization value (the scheme matched as `Bearer` or `bearer`,
/// the token trimmed); `None` for any other value.
pub fn token(value: &http::HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_value_has_a_token() {
        for (value, expected) in [
            ("Bearer abc", Some("abc")),
            ("bearer  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearerabc", None),
            ("abc", None),
        ] {
            let value = http::HeaderValue::from_static(value);
            assert_eq!(token(&value), expected, "{value:?}");
        }
    }
}
