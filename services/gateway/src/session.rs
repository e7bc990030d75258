//! Browser sessions: the signed `snug_session` cookie and the `snug_csrf` double-submit cookie,
//! in the reference server's formats, the session cookie extended by the session's id.
//!
//! `snug_session` = `base64url(JSON{userId, exp, sid})` + `.` +
//! `base64url(HMAC-SHA256(key, first part))`, `exp` in Unix milliseconds (at most seven days on),
//! `sid` the id of the session's record in the users directory (`snug_users::SessionId`). The tag
//! is checked in constant time (`hmac`'s `verify_slice`) before the JSON is even parsed. The seal
//! only says the hub issued the cookie; whether the session still lives is the record's to say
//! (`auth.rs` reads it on every request), so logout, a revoked token or a disabled user end it
//! although the cookie's seal and `exp` are still good. A cookie without `sid` (from a release
//! before sessions had records) is refused: its user logs in again.
//!
//! `snug_csrf` is 32 random bytes in hex, readable by the page's script (not HttpOnly), which
//! echoes it in `x-snug-csrf`: a cross-site page can make the browser send the cookie but cannot
//! read it, so it cannot forge the header.

use std::{
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde::{Deserialize, Serialize};
use snug_users::{OidcIdentity, SessionId, User};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "snug_session";
/// The CSRF cookie's name.
pub const CSRF_COOKIE: &str = "snug_csrf";
/// The header that must repeat the CSRF cookie on cookie-authenticated writes.
pub const CSRF_HEADER: &str = "x-snug-csrf";
/// How long a session lasts at most (the reference's seven days); an OpenID Connect session
/// lasts less (`SNUG_OIDC_SESSION_MAX_AGE`).
pub const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The shortest acceptable `SNUG_SESSION_SECRET`.
pub const MIN_SECRET_LEN: usize = 32;
/// The key file generated in the gateway's directory when no secret is configured.
pub const KEY_FILE: &str = "session.key";

/// The credential a new session is bound to.
#[derive(Debug, Clone, Copy)]
pub enum SessionSource<'a> {
    /// The hub token's text (`POST /auth/session`): revoking it ends the session.
    HubToken(&'a str),
    /// An OpenID Connect identity whose issuer's token was verified just now (`POST
    /// /auth/session` with an issuer's token, or the browser login's callback).
    Identity(&'a OidcIdentity),
}

/// A session just started: the cookie to set and what to tell the client.
#[derive(Debug, Clone)]
pub struct StartedSession {
    /// The `snug_session` cookie's value.
    pub cookie: String,
    /// The session's user.
    pub user: User,
    /// When the session ends at the latest, Unix milliseconds.
    pub expires_at_ms: u64,
    /// How long it lasts (the cookie's `Max-Age`).
    pub lifetime: Duration,
}

/// The HMAC key for session cookies. Never printed.
#[derive(Clone)]
pub struct SessionKey(Vec<u8>);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

/// Why no session key could be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// `SNUG_SESSION_SECRET` is set but too short.
    #[error("SNUG_SESSION_SECRET must be at least {MIN_SECRET_LEN} characters")]
    TooShort,
    /// The key file exists but is not a key this gateway wrote.
    #[error("{0} is not a session key (64 hex digits); delete it to generate a new one")]
    BadFile(String),
    /// The key file could not be read or written.
    #[error("cannot read or write the session key file {path}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The CSPRNG failed.
    #[error("the system random number generator failed")]
    Entropy,
}

impl SessionKey {
    /// A key from `SNUG_SESSION_SECRET`'s value.
    pub fn from_secret(secret: &str) -> Result<Self, KeyError> {
        if secret.chars().count() < MIN_SECRET_LEN {
            return Err(KeyError::TooShort);
        }
        Ok(Self(secret.as_bytes().to_vec()))
    }

    /// The key in `dir/session.key`, generated (32 random bytes, hex, mode 0600) on first use.
    /// Sessions survive restarts because the key does.
    pub fn load_or_create(dir: &Path) -> Result<Self, KeyError> {
        let path = dir.join(KEY_FILE);
        let io = |source| KeyError::Io {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let key = hex::decode(text.trim())
                    .ok()
                    .filter(|k| k.len() == 32)
                    .ok_or_else(|| KeyError::BadFile(path.display().to_string()))?;
                Ok(Self(key))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(io)?;
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|_| KeyError::Entropy)?;
                write_private(&path, hex::encode(key).as_bytes()).map_err(io)?;
                Ok(Self(key.to_vec()))
            }
            Err(err) => Err(io(err)),
        }
    }

    /// The key's bytes, for the other cookies it seals (the login flow's, `oidc.rs`).
    pub(crate) fn secret(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        HmacSha256::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }

    /// A cookie value for the session `session_id` of `user_id`, valid until `exp_ms`.
    pub fn sign(&self, user_id: &str, session_id: &SessionId, exp_ms: u64) -> String {
        let claims = Claims {
            user_id: user_id.to_owned(),
            exp: exp_ms,
            sid: session_id.as_str().to_owned(),
        };
        let json = serde_json::to_vec(&claims).unwrap_or_default();
        let first = b64().encode(json);
        let mut mac = self.mac();
        mac.update(first.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{first}.{}", b64().encode(tag))
    }

    /// The session a cookie value names, if its tag is ours and it has not expired at `now_ms`.
    pub fn verify(&self, value: &str, now_ms: u64) -> Option<SessionCookie> {
        let (first, tag) = value.split_once('.')?;
        let tag = b64().decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(first.as_bytes());
        mac.verify_slice(&tag).ok()?;
        let claims: Claims = serde_json::from_slice(&b64().decode(first).ok()?).ok()?;
        let session_id = SessionId::parse(&claims.sid)?;
        (claims.exp > now_ms && !claims.user_id.is_empty()).then_some(SessionCookie {
            user_id: claims.user_id,
            session_id,
        })
    }
}

/// What a verified session cookie names; whether the session lives is the directory's to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCookie {
    /// The user the session was started for.
    pub user_id: String,
    /// The session's record.
    pub session_id: SessionId,
}

/// Writes a new file readable only by its owner.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[derive(Serialize, Deserialize)]
struct Claims {
    #[serde(rename = "userId")]
    user_id: String,
    exp: u64,
    sid: String,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A new CSRF value: 32 random bytes, hex.
pub fn new_csrf() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex::encode(bytes))
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Compares two strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the CSRF header equals the CSRF cookie (both present and non-empty).
pub fn csrf_ok(headers: &HeaderMap) -> bool {
    let header = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let cookie = cookie(headers, CSRF_COOKIE).unwrap_or("");
    !header.is_empty()
        && !cookie.is_empty()
        && constant_time_eq(header.as_bytes(), cookie.as_bytes())
}

/// The `Set-Cookie` values that start a session lasting `lifetime`. `secure` adds the `Secure`
/// attribute.
pub fn set_cookies(session: &str, csrf: &str, secure: bool, lifetime: Duration) -> [String; 2] {
    // Rounded up: a lifetime under a second must not read `Max-Age=0`, which deletes the cookie.
    let max_age = lifetime.as_millis().div_ceil(1000);
    let secure = if secure { "; Secure" } else { "" };
    [
        format!(
            "{SESSION_COOKIE}={session}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
        ),
        format!("{CSRF_COOKIE}={csrf}; Path=/; Max-Age={max_age}; SameSite=Lax{secure}"),
    ]
}

/// The `Set-Cookie` values that end a session.
pub fn clear_cookies(secure: bool) -> [String; 2] {
    let secure = if secure { "; Secure" } else { "" };
    [
        format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax{secure}"),
        format!("{CSRF_COOKIE}=; Path=/; Max-Age=0; SameSite=Lax{secure}"),
    ]
}

/// Whether the request reached us as plain http on a loopback name, the one case where cookies
/// go without `Secure` (a browser would drop a Secure cookie set over plain http). Anything else,
/// including a TLS-terminating proxy's `X-Forwarded-Proto: https`, gets `Secure`.
pub fn plain_http_on_loopback(headers: &HeaderMap) -> bool {
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    !forwarded_https
        && headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_loopback_host)
}

/// Whether a `Host` header names this machine's loopback: `localhost`, `127.0.0.1` (any of
/// 127/8) or `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        })
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn key() -> SessionKey {
        SessionKey::from_secret("0123456789abcdef0123456789abcdef").expect("key")
    }

    const SID: &str = "s0123456789abcdef0123456789abcdef";

    fn sid() -> SessionId {
        SessionId::parse(SID).expect("id")
    }

    /// Seals `json` as a cookie value with `key`, as `sign` would any claims.
    fn sealed(key: &SessionKey, json: &str) -> String {
        let first = b64().encode(json);
        let mut mac = key.mac();
        mac.update(first.as_bytes());
        format!("{first}.{}", b64().encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn a_signed_cookie_verifies_until_it_expires() {
        let value = key().sign("u1", &sid(), 2_000);
        let named = SessionCookie {
            user_id: "u1".to_owned(),
            session_id: sid(),
        };
        assert_eq!(key().verify(&value, 1_999), Some(named));
        assert_eq!(key().verify(&value, 2_000), None, "expired");
        let other = SessionKey::from_secret("another secret of thirty-two chars!!").expect("key");
        assert_eq!(other.verify(&value, 0), None, "another key");
    }

    #[test]
    fn a_sealed_cookie_without_a_well_formed_session_id_is_refused() {
        for (json, verifies) in [
            (
                r#"{"userId":"u1","exp":18446744073709551615,"sid":"s0123456789abcdef0123456789abcdef"}"#,
                true,
            ),
            // A cookie of a release before session records: no `sid`.
            (r#"{"userId":"u1","exp":18446744073709551615}"#, false),
            (
                r#"{"userId":"u1","exp":18446744073709551615,"sid":""}"#,
                false,
            ),
            (
                r#"{"userId":"u1","exp":18446744073709551615,"sid":"s0123"}"#,
                false,
            ),
            (
                r#"{"userId":"","exp":18446744073709551615,"sid":"s0123456789abcdef0123456789abcdef"}"#,
                false,
            ),
        ] {
            assert_eq!(
                key().verify(&sealed(&key(), json), 0).is_some(),
                verifies,
                "{json}"
            );
        }
    }

    #[test]
    fn tampering_with_either_part_is_refused() {
        let value = key().sign("u1", &sid(), u64::MAX);
        let (first, tag) = value.split_once('.').expect("dot");
        let forged_claims = b64().encode(format!(
            r#"{{"userId":"u2","exp":18446744073709551615,"sid":"{SID}"}}"#
        ));
        assert_eq!(key().verify(&format!("{forged_claims}.{tag}"), 0), None);
        let mut bad_tag = b64().decode(tag).expect("tag");
        bad_tag[0] ^= 1;
        assert_eq!(
            key().verify(&format!("{first}.{}", b64().encode(bad_tag)), 0),
            None
        );
        assert_eq!(key().verify(first, 0), None);
        assert_eq!(key().verify("", 0), None);
    }

    #[test]
    fn the_cookie_is_the_reference_format_with_the_session_id() {
        let value = key().sign("user-7", &sid(), 1_700_000_000_000);
        let (first, tag) = value.split_once('.').expect("dot");
        let json: serde_json::Value =
            serde_json::from_slice(&b64().decode(first).expect("b64")).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"userId": "user-7", "exp": 1_700_000_000_000u64, "sid": SID})
        );
        assert_eq!(b64().decode(tag).expect("tag").len(), 32);
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(matches!(
            SessionKey::from_secret("short"),
            Err(KeyError::TooShort)
        ));
    }

    #[test]
    fn the_key_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().expect("dir");
        let a = SessionKey::load_or_create(dir.path()).expect("create");
        let b = SessionKey::load_or_create(dir.path()).expect("load");
        assert_eq!(a.0, b.0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn csrf_needs_equal_non_empty_header_and_cookie() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; snug_csrf=abc; c=d"),
        );
        assert!(!csrf_ok(&headers), "no header");
        headers.insert(CSRF_HEADER, HeaderValue::from_static("abd"));
        assert!(!csrf_ok(&headers), "mismatch");
        headers.insert(CSRF_HEADER, HeaderValue::from_static("abc"));
        assert!(csrf_ok(&headers));
        headers.insert(header::COOKIE, HeaderValue::from_static("snug_csrf="));
        headers.insert(CSRF_HEADER, HeaderValue::from_static(""));
        assert!(!csrf_ok(&headers), "both empty");
    }

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:8080",
            "127.8.9.10",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "example.com",
            "localhost.evil.com",
            "10.0.0.1:80",
            "[::2]",
            "0.0.0.0",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
