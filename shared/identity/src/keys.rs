//! A JSON Web Key Set (RFC 7517) as verification keys, each bound to one algorithm.
//!
//! A key is usable for exactly one algorithm, decided by its type: RSA for RS256, EC on P-256 for
//! ES256, OKP on Ed25519 for EdDSA. A key that states its own `alg` must state that one, and a key
//! marked for another `use` than `sig` is skipped, so a token can never pick how a key is read
//! (the confusion behind "HS256 signed with the public key"). Keys of other types or curves are
//! skipped rather than refused: issuers publish encryption keys beside their signing keys.

use jsonwebtoken::DecodingKey;
use serde::Deserialize;

/// The signature algorithms the hub accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// Ed25519.
    EdDSA,
}

impl Alg {
    /// The algorithm a JWS header's `alg` names, if it is one the hub accepts.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "RS256" => Some(Self::RS256),
            "ES256" => Some(Self::ES256),
            "EdDSA" => Some(Self::EdDSA),
            _ => None,
        }
    }

    /// The name in a JWS header.
    pub fn name(self) -> &'static str {
        match self {
            Self::RS256 => "RS256",
            Self::ES256 => "ES256",
            Self::EdDSA => "EdDSA",
        }
    }

    pub(crate) fn jsonwebtoken(self) -> jsonwebtoken::Algorithm {
        match self {
            Self::RS256 => jsonwebtoken::Algorithm::RS256,
            Self::ES256 => jsonwebtoken::Algorithm::ES256,
            Self::EdDSA => jsonwebtoken::Algorithm::EdDSA,
        }
    }
}

/// One verification key.
#[derive(Clone)]
pub struct Key {
    /// The key id, if the issuer gave one.
    pub kid: Option<String>,
    /// The one algorithm this key verifies.
    pub alg: Alg,
    pub(crate) decoding: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

/// An issuer's signing keys.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

/// Why a key set document was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeySetError {
    /// Not a JSON object with a `keys` array.
    #[error("the key set is not a JWKS document: {0}")]
    NotJwks(String),
    /// A signing key whose parameters do not make a key.
    #[error("key {kid:?} is malformed: {why}")]
    BadKey {
        /// The key's id.
        kid: Option<String>,
        /// What is wrong.
        why: String,
    },
}

#[derive(Deserialize)]
struct Document {
    keys: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    alg: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl KeySet {
    /// Parses a JWKS document. Keys the hub cannot use for signatures are skipped, and so is a
    /// signing key whose parameters are broken (an RSA modulus under 2,048 bits): one such key
    /// among an issuer's keys must not make the others unusable. A set whose signing keys are
    /// all broken is refused, naming the first, so that the cause is logged.
    pub fn parse(bytes: &[u8]) -> Result<Self, KeySetError> {
        let document: Document =
            serde_json::from_slice(bytes).map_err(|e| KeySetError::NotJwks(e.to_string()))?;
        let mut keys = Vec::new();
        let mut broken = None;
        for value in document.keys {
            // A key whose fields are not even strings is skipped like any unusable key.
            let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
                continue;
            };
            match Self::key(jwk) {
                Ok(Some(key)) => keys.push(key),
                Ok(None) => {}
                Err(why) => {
                    broken.get_or_insert(why);
                }
            }
        }
        match broken {
            Some(why) if keys.is_empty() => Err(why),
            _ => Ok(Self { keys }),
        }
    }

    fn key(jwk: Jwk) -> Result<Option<Key>, KeySetError> {
        if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
            return Ok(None);
        }
        let alg = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
            ("RSA", _) => Alg::RS256,
            ("EC", Some("P-256")) => Alg::ES256,
            ("OKP", Some("Ed25519")) => Alg::EdDSA,
            _ => return Ok(None),
        };
        // A key that names another algorithm (RS512, PS256, ...) is not for us.
        if jwk.alg.as_deref().is_some_and(|a| a != alg.name()) {
            return Ok(None);
        }
        let bad = |why: &str| KeySetError::BadKey {
            kid: jwk.kid.clone(),
            why: why.to_owned(),
        };
        let need = |field: &Option<String>, name: &str| {
            field
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(&format!("no {name}")))
        };
        let decoding = match alg {
            Alg::RS256 => {
                let n = need(&jwk.n, "n")?;
                let e = need(&jwk.e, "e")?;
                // RSA keys under 2048 bits are refused (ring refuses them too, at verification).
                let bits = base64_len(&n) * 8;
                if bits < 2048 {
                    return Err(bad("an RSA modulus shorter than 2048 bits"));
                }
                DecodingKey::from_rsa_components(&n, &e)
            }
            Alg::ES256 => {
                let x = need(&jwk.x, "x")?;
                let y = need(&jwk.y, "y")?;
                if base64_len(&x) != 32 || base64_len(&y) != 32 {
                    return Err(bad("P-256 coordinates are 32 bytes"));
                }
                DecodingKey::from_ec_components(&x, &y)
            }
            Alg::EdDSA => {
                let x = need(&jwk.x, "x")?;
                if base64_len(&x) != 32 {
                    return Err(bad("an Ed25519 key is 32 bytes"));
                }
                DecodingKey::from_ed_components(&x)
            }
        }
        .map_err(|e| bad(&e.to_string()))?;
        Ok(Some(Key {
            kid: jwk.kid,
            alg,
            decoding,
        }))
    }

    /// The usable keys.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Whether the set has a key with this id (any algorithm).
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// The key a token with header `kid` and `alg` must be checked with: the key with that id
    /// (whose algorithm must be `alg`), or, for a token without a `kid`, the only key for `alg`.
    pub(crate) fn select(&self, kid: Option<&str>, alg: Alg) -> Result<&Key, KeyChoice> {
        match kid {
            Some(kid) => {
                let key = self
                    .keys
                    .iter()
                    .find(|k| k.kid.as_deref() == Some(kid))
                    .ok_or(KeyChoice::Unknown)?;
                if key.alg == alg {
                    Ok(key)
                } else {
                    Err(KeyChoice::WrongAlg)
                }
            }
            None => {
                let mut candidates = self.keys.iter().filter(|k| k.alg == alg);
                match (candidates.next(), candidates.next()) {
                    (Some(key), None) => Ok(key),
                    _ => Err(KeyChoice::Unknown),
                }
            }
        }
    }
}

/// Why no key was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyChoice {
    /// No key with that id (or, without an id, not exactly one key for the algorithm).
    Unknown,
    /// The key with that id is for another algorithm.
    WrongAlg,
}

/// The decoded length of an unpadded base64url string.
fn base64_len(text: &str) -> usize {
    let text = text.trim_end_matches('=');
    text.len() * 3 / 4
}
