//! Entity tags and conditional-request headers (RFC 9110 §8.8.3, §13.1), and `Repr-Digest`
//! (RFC 9530).
//!
//! A revision token is sent as a strong, quoted ETag (`"r3-…"`). Requests may quote it or not:
//! the reference server sent revisions unquoted, and its clients echo them as they came.

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;

/// Whether a string can be a revision token (`snug.sync.v1`: 1-128 of `[A-Za-z0-9._~-]`). Only
/// such tokens are ever sent as ETags, so they never need escaping inside the quotes.
pub fn is_revision(token: &str) -> bool {
    (1..=128).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
}

/// The `ETag` value of a revision: the token in double quotes.
pub fn header_value(revision: &str) -> Option<HeaderValue> {
    if !is_revision(revision) {
        return None;
    }
    HeaderValue::from_str(&format!("\"{revision}\"")).ok()
}

/// The `Repr-Digest` value for a SHA-256 given as hex: `sha-256=:<base64>:`.
pub fn repr_digest(sha256_hex: &str) -> Option<HeaderValue> {
    let bytes = hex::decode(sha256_hex).ok().filter(|b| b.len() == 32)?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    HeaderValue::from_str(&format!("sha-256=:{encoded}:")).ok()
}

/// One member of an `If-Match` / `If-None-Match` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// A strong tag (quoted or, as the reference's clients send it, bare).
    Strong(String),
    /// A weak tag `W/"…"`: never equal to anything under strong comparison.
    Weak(String),
}

/// A parsed conditional header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `*`.
    Any,
    /// A list of tags.
    Tags(Vec<Tag>),
}

impl Condition {
    /// Strong comparison (If-Match): only strong tags match.
    pub fn matches_strong(&self, current: &str) -> bool {
        match self {
            Condition::Any => true,
            Condition::Tags(tags) => tags
                .iter()
                .any(|t| matches!(t, Tag::Strong(s) if s == current)),
        }
    }

    /// Weak comparison (If-None-Match): a weak tag matches by its opaque part.
    pub fn matches_weak(&self, current: &str) -> bool {
        match self {
            Condition::Any => true,
            Condition::Tags(tags) => tags.iter().any(|t| match t {
                Tag::Strong(s) | Tag::Weak(s) => s == current,
            }),
        }
    }

    /// The single strong tag, when the condition is exactly one.
    pub fn single_strong(&self) -> Option<&str> {
        match self {
            Condition::Tags(tags) => match tags.as_slice() {
                [Tag::Strong(s)] => Some(s),
                _ => None,
            },
            Condition::Any => None,
        }
    }
}

/// Parses every instance of a conditional header into one condition; `None` when the header is
/// absent or holds nothing but separators.
pub fn parse(headers: &HeaderMap, name: header::HeaderName) -> Option<Condition> {
    let mut tags = Vec::new();
    let mut any = false;
    for value in headers.get_all(name) {
        let Ok(text) = value.to_str() else { continue };
        for item in split_list(text) {
            if item == "*" {
                any = true;
            } else if let Some(rest) = item.strip_prefix("W/").or_else(|| item.strip_prefix("w/")) {
                tags.push(Tag::Weak(unquote(rest).to_owned()));
            } else {
                tags.push(Tag::Strong(unquote(item).to_owned()));
            }
        }
    }
    if any {
        Some(Condition::Any)
    } else if tags.is_empty() {
        None
    } else {
        Some(Condition::Tags(tags))
    }
}

/// Splits a list at commas outside quotes, trimming members and dropping empty ones.
fn split_list(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut in_quotes = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(text[start..].trim());
    items.retain(|item| !item.is_empty());
    items
}

/// Strips one surrounding pair of double quotes.
fn unquote(item: &str) -> &str {
    let item = item.trim();
    item.strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(values: &[&str]) -> Option<Condition> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(header::IF_MATCH, HeaderValue::from_str(v).expect("value"));
        }
        parse(&headers, header::IF_MATCH)
    }

    #[test]
    fn quoted_and_bare_tags_are_the_same_revision() {
        assert_eq!(condition(&["\"r1-ab\""]), condition(&["r1-ab"]));
        assert_eq!(
            condition(&[" \"r1-ab\" "]).and_then(|c| c.single_strong().map(str::to_owned)),
            Some("r1-ab".to_owned())
        );
    }

    #[test]
    fn lists_weak_tags_and_star() {
        let c = condition(&["\"a\", W/\"b\"", "c"]).expect("parsed");
        assert!(c.matches_strong("a") && c.matches_strong("c"));
        assert!(!c.matches_strong("b"), "a weak tag never matches strongly");
        assert!(c.matches_weak("b"));
        assert_eq!(c.single_strong(), None);
        assert_eq!(condition(&["*"]), Some(Condition::Any));
        assert_eq!(condition(&[]), None);
        assert_eq!(condition(&[" , "]), None);
    }

    #[test]
    fn etags_are_quoted_and_only_for_tokens() {
        assert_eq!(header_value("r1-00ff").expect("tag"), "\"r1-00ff\"");
        assert!(header_value("bad\"tag").is_none());
        assert!(header_value("").is_none());
    }

    #[test]
    fn repr_digest_is_base64_of_the_raw_hash() {
        // SHA-256 of the empty string.
        let value = repr_digest("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            .expect("digest");
        assert_eq!(
            value,
            "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"
        );
        assert!(repr_digest("nothex").is_none());
    }
}
