//! The credential in an `Authorization: Bearer <token>` header, read one way by every caller
//! the hub authenticates (the gateway's users, the admin API's operator).

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
