//! The browser login's state (authorization code flow with PKCE S256, RFC 7636): what the hub
//! must remember between sending the browser to the issuer and its return.
//!
//! It is kept by the browser, not the hub: a cookie sealed with an HMAC under the hub's session
//! key, so any replica can finish a flow another began, and nothing is stored per attempt. The
//! tag covers a context label too, so a flow cookie can never pass for a session cookie (which
//! the same key signs) or the reverse. The cookie holds the PKCE verifier; that is safe because it
//! is HttpOnly, lives minutes, and a code is useless without the hub's redirect URI and client.

use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

type HmacSha256 = hmac::Hmac<Sha256>;

/// Separates this cookie's tags from every other use of the session key.
const CONTEXT: &[u8] = b"snug-oidc-login-flow\0";

/// Random bytes a new flow needs: 32 each for the state, the nonce and the PKCE verifier.
pub const RANDOM_BYTES: usize = 96;

/// One login in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// The issuer the browser was sent to.
    pub issuer: String,
    /// The `state` sent, which the callback must echo.
    pub state: String,
    /// The `nonce` sent, which the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier (43 characters).
    pub verifier: String,
    /// Where to send the browser afterwards (already checked by the caller).
    pub return_to: String,
    /// Unix seconds after which the flow is void.
    pub expires_at: u64,
}

/// Why a flow cookie was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Not a cookie this hub sealed (tampered, another key, garbage).
    #[error("the login flow cookie is not one this hub sealed")]
    Forged,
    /// Sealed by us, but too old.
    #[error("the login flow has expired; start again")]
    Expired,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// The PKCE S256 challenge of `verifier`: base64url(SHA-256(verifier)).
pub fn pkce_challenge(verifier: &str) -> String {
    b64().encode(Sha256::digest(verifier.as_bytes()))
}

fn mac(key: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(CONTEXT);
    mac
}

impl Flow {
    /// A new flow to `issuer`, valid for `ttl_secs` from `now`, from [`RANDOM_BYTES`] fresh
    /// random bytes (the caller's CSPRNG).
    pub fn new(
        issuer: &str,
        return_to: &str,
        random: &[u8; RANDOM_BYTES],
        now: u64,
        ttl_secs: u64,
    ) -> Self {
        Self {
            issuer: issuer.to_owned(),
            state: b64().encode(&random[..32]),
            nonce: b64().encode(&random[32..64]),
            verifier: b64().encode(&random[64..]),
            return_to: return_to.to_owned(),
            expires_at: now.saturating_add(ttl_secs),
        }
    }

    /// The PKCE challenge to send to the authorization endpoint.
    pub fn challenge(&self) -> String {
        pkce_challenge(&self.verifier)
    }

    /// The cookie value: base64url(JSON) `.` base64url(HMAC-SHA256(key, context ‖ first part)).
    pub fn seal(&self, key: &[u8]) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let first = b64().encode(json);
        let mut mac = mac(key);
        mac.update(first.as_bytes());
        format!("{first}.{}", b64().encode(mac.finalize().into_bytes()))
    }

    /// The flow a cookie holds, if `key` sealed it and it has not expired at `now`.
    pub fn open(value: &str, key: &[u8], now: u64) -> Result<Self, FlowError> {
        let (first, tag) = value.split_once('.').ok_or(FlowError::Forged)?;
        let tag = b64().decode(tag).map_err(|_| FlowError::Forged)?;
        let mut mac = mac(key);
        mac.update(first.as_bytes());
        mac.verify_slice(&tag).map_err(|_| FlowError::Forged)?;
        let json = b64().decode(first).map_err(|_| FlowError::Forged)?;
        let flow: Self = serde_json::from_slice(&json).map_err(|_| FlowError::Forged)?;
        if now >= flow.expires_at {
            return Err(FlowError::Expired);
        }
        Ok(flow)
    }

    /// Whether the callback's `state` is this flow's, compared in constant time.
    pub fn state_matches(&self, state: &str) -> bool {
        let (a, b) = (self.state.as_bytes(), state.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}
