//! Verifying a token (RFC 7519 JWT in RFC 7515 compact form) under the hub's policy.
//!
//! Order of checks, each refusal typed: the header (a JSON object, no `crit`, an accepted `alg`:
//! `none` and the HMAC family are [`Refusal::DisallowedAlg`] before any key is looked at) → the
//! key, chosen by `kid` and bound to one algorithm, which must be the header's → the signature
//! (by `jsonwebtoken` on ring) → the claims, only once the signature holds: `iss` exactly the
//! expected issuer, `aud` containing the audience, `exp` required and `nbf` honoured, both with
//! [`SKEW_SECS`] of tolerance, the user claim a non-empty string, and the optional required claim.
//! Header fields that point at other keys (`jku`, `jwk`, `x5u`, `x5c`) are ignored: keys come only
//! from the configured issuer's JWKS.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::keys::{Alg, KeyChoice, KeySet};

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const SKEW_SECS: u64 = 60;

/// The claim that names the user unless configured otherwise.
pub const DEFAULT_USER_CLAIM: &str = "sub";

/// Longest token considered (a guard against absurd inputs before any decoding).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Why a token was refused. The hub answers every one the same (401); this is for its log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a compact JWS with a JSON header and JSON object claims.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// `alg` is `none`, an HMAC algorithm, or anything else the hub does not accept, or not the
    /// algorithm of the key its `kid` names.
    #[error("algorithm {0:?} is not accepted")]
    DisallowedAlg(String),
    /// No key of the issuer has this `kid`.
    #[error("no key with kid {0:?}")]
    UnknownKid(Option<String>),
    /// The signature does not verify under the chosen key.
    #[error("bad signature")]
    BadSignature,
    /// `iss` is missing or not the expected issuer.
    #[error("wrong issuer {0:?}")]
    WrongIssuer(Option<String>),
    /// `aud` is missing or does not contain the audience.
    #[error("wrong audience")]
    WrongAudience,
    /// `exp` has passed (beyond the skew).
    #[error("expired")]
    Expired,
    /// `nbf` is still ahead (beyond the skew).
    #[error("not yet valid")]
    NotYetValid,
    /// A claim the hub needs (`exp`, the user claim) is missing or of the wrong type.
    #[error("missing or invalid claim {0:?}")]
    MissingClaim(String),
    /// The configured required claim does not hold.
    #[error("required claim {0:?} absent")]
    RequiredClaimAbsent(String),
}

/// A claim a token must carry to be let in: `name=value`, matched against a string claim or any
/// string element of an array claim (`groups=snug-users`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredClaim {
    /// The claim's name.
    pub name: String,
    /// The value it must be or contain.
    pub value: String,
}

/// A setting of the policy that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The required claim is not `name=value` with both parts non-empty.
    #[error("a required claim is name=value (e.g. groups=snug-users), not {0:?}")]
    BadRequiredClaim(String),
    /// No audience.
    #[error("the audience must not be empty")]
    NoAudience,
    /// No user claim.
    #[error("the user claim must not be empty")]
    NoUserClaim,
}

impl RequiredClaim {
    /// Parses `name=value`.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let (name, value) = text
            .split_once('=')
            .map(|(n, v)| (n.trim(), v.trim()))
            .filter(|(n, v)| !n.is_empty() && !v.is_empty())
            .ok_or_else(|| PolicyError::BadRequiredClaim(text.to_owned()))?;
        Ok(Self {
            name: name.to_owned(),
            value: value.to_owned(),
        })
    }

    fn holds(&self, claims: &Map<String, Value>) -> bool {
        match claims.get(&self.name) {
            Some(Value::String(s)) => *s == self.value,
            Some(Value::Array(items)) => items
                .iter()
                .any(|v| v.as_str() == Some(self.value.as_str())),
            _ => false,
        }
    }
}

/// What a token must say besides its issuer: the audience, the claim naming the user, and
/// optionally a claim that decides who may use the hub at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    audience: String,
    user_claim: String,
    required: Option<RequiredClaim>,
}

impl Policy {
    /// A policy for `audience`, the user named by `user_claim` (empty: `sub`), and an optional
    /// `name=value` required claim.
    pub fn new(
        audience: &str,
        user_claim: Option<&str>,
        required: Option<&str>,
    ) -> Result<Self, PolicyError> {
        let audience = audience.trim();
        if audience.is_empty() {
            return Err(PolicyError::NoAudience);
        }
        let user_claim = user_claim.map(str::trim).unwrap_or(DEFAULT_USER_CLAIM);
        if user_claim.is_empty() {
            return Err(PolicyError::NoUserClaim);
        }
        let required = required
            .filter(|r| !r.trim().is_empty())
            .map(RequiredClaim::parse)
            .transpose()?;
        Ok(Self {
            audience: audience.to_owned(),
            user_claim: user_claim.to_owned(),
            required,
        })
    }

    /// The audience.
    pub fn audience(&self) -> &str {
        &self.audience
    }
}

/// What a verified token says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The issuer (`iss`), exactly as configured.
    pub issuer: String,
    /// The user claim's value (`sub` by default): with the issuer, the stored identity.
    pub subject: String,
    /// A name to show (`preferred_username`, else `name`, else `email`), never an identity.
    pub display_name: Option<String>,
    /// The `nonce`, for ID tokens of the browser flow.
    pub nonce: Option<String>,
    /// `exp`, Unix seconds.
    pub expires_at: u64,
}

/// What a token's unverified parts say: enough to pick the issuer and key, nothing to trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unverified {
    /// The header's algorithm, already one the hub accepts.
    pub alg: Alg,
    /// The header's key id.
    pub kid: Option<String>,
    /// The claims' `iss`, if a string.
    pub issuer: Option<String>,
}

struct Parts<'a> {
    alg: Alg,
    kid: Option<String>,
    claims: Map<String, Value>,
    signing_input: &'a str,
    signature: &'a str,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

fn json_object(part: &str, what: &'static str) -> Result<Map<String, Value>, Refusal> {
    let bytes = b64().decode(part).map_err(|_| Refusal::Malformed(what))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Refusal::Malformed(what)),
    }
}

fn split(token: &str) -> Result<Parts<'_>, Refusal> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(Refusal::Malformed("longer than any token the hub accepts"));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed("not three dot-separated parts"));
    };
    let header_map = json_object(header, "the header is not a base64url JSON object")?;
    let alg_name = match header_map.get("alg") {
        Some(Value::String(alg)) => alg.as_str(),
        _ => return Err(Refusal::Malformed("the header has no alg")),
    };
    let alg =
        Alg::from_name(alg_name).ok_or_else(|| Refusal::DisallowedAlg(alg_name.to_owned()))?;
    // RFC 7515 §4.1.11: extensions the recipient does not understand must be refused.
    if header_map.contains_key("crit") {
        return Err(Refusal::Malformed("the header has crit extensions"));
    }
    let kid = match header_map.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(Refusal::Malformed("kid is not a string")),
    };
    let claims = json_object(payload, "the claims are not a base64url JSON object")?;
    if signature.is_empty() {
        return Err(Refusal::BadSignature);
    }
    Ok(Parts {
        alg,
        kid,
        claims,
        signing_input: &token[..header.len() + 1 + payload.len()],
        signature,
    })
}

/// Reads a token's header and issuer without verifying anything, so the caller can choose the
/// issuer's key set. Refuses what no key set could make acceptable (malformed, `alg` refused).
pub fn peek(token: &str) -> Result<Unverified, Refusal> {
    let parts = split(token)?;
    Ok(Unverified {
        alg: parts.alg,
        kid: parts.kid,
        issuer: parts
            .claims
            .get("iss")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// A NumericDate claim: a JSON number of seconds (fractions allowed, truncated).
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<u64>, Refusal> {
    match claims.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| Refusal::MissingClaim(name.to_owned())),
    }
}

/// Verifies `token` as issued by `issuer` (exactly), signed by a key of `keys`, under `policy`,
/// at `now` (Unix seconds).
pub fn verify(
    token: &str,
    issuer: &str,
    keys: &KeySet,
    policy: &Policy,
    now: u64,
) -> Result<Claims, Refusal> {
    let parts = split(token)?;
    let key = keys
        .select(parts.kid.as_deref(), parts.alg)
        .map_err(|choice| match choice {
            KeyChoice::Unknown => Refusal::UnknownKid(parts.kid.clone()),
            KeyChoice::WrongAlg => Refusal::DisallowedAlg(parts.alg.name().to_owned()),
        })?;
    // The key's algorithm is the header's (select), so jsonwebtoken reads the key as the kind it is.
    let valid = jsonwebtoken::crypto::verify(
        parts.signature,
        parts.signing_input.as_bytes(),
        &key.decoding,
        key.alg.jsonwebtoken(),
    )
    .unwrap_or(false);
    if !valid {
        return Err(Refusal::BadSignature);
    }
    let claims = parts.claims;
    let iss = claims.get("iss").and_then(Value::as_str);
    if iss != Some(issuer) {
        return Err(Refusal::WrongIssuer(iss.map(str::to_owned)));
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => *aud == policy.audience,
        Some(Value::Array(auds)) => auds
            .iter()
            .any(|a| a.as_str() == Some(policy.audience.as_str())),
        _ => false,
    };
    if !audience_ok {
        return Err(Refusal::WrongAudience);
    }
    let expires_at =
        numeric_date(&claims, "exp")?.ok_or_else(|| Refusal::MissingClaim("exp".to_owned()))?;
    if now >= expires_at.saturating_add(SKEW_SECS) {
        return Err(Refusal::Expired);
    }
    if let Some(not_before) = numeric_date(&claims, "nbf")?
        && now.saturating_add(SKEW_SECS) < not_before
    {
        return Err(Refusal::NotYetValid);
    }
    let subject = claims
        .get(&policy.user_claim)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Refusal::MissingClaim(policy.user_claim.clone()))?
        .to_owned();
    if let Some(required) = &policy.required
        && !required.holds(&claims)
    {
        return Err(Refusal::RequiredClaimAbsent(required.name.clone()));
    }
    let text = |name: &str| {
        claims
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(Claims {
        issuer: issuer.to_owned(),
        subject,
        display_name: text("preferred_username")
            .or_else(|| text("name"))
            .or_else(|| text("email")),
        nonce: text("nonce"),
        expires_at,
    })
}

/// Whether a bearer credential is a JWT (three dot-separated parts) rather than a hub token
/// (`snug_…`, which has no dot): the first is judged by OpenID Connect, the second by the users
/// directory.
pub fn is_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}
