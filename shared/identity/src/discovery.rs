//! The issuer's discovery document (OpenID Connect Discovery 1.0 §4) and the rule every URL an
//! issuer names must pass: https, or http to a loopback address (tests, local development).

use serde::Deserialize;

/// The path of the discovery document under an issuer URL.
pub const WELL_KNOWN: &str = "/.well-known/openid-configuration";

/// Why a URL may not be used to talk to an issuer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not `scheme://host…`.
    #[error("{0:?} is not an absolute http(s) URL")]
    NotAUrl(String),
    /// Plain http to a host that is not a loopback address.
    #[error("{0:?} must be https (plain http is allowed only to a loopback address)")]
    NotHttps(String),
    /// A fragment, or user information, which an issuer URL may not have.
    #[error("{0:?} must have no fragment and no user information")]
    Extra(String),
}

/// Checks that `url` is https, or http to `localhost`, 127.0.0.0/8 or `[::1]`.
pub fn check_url(url: &str) -> Result<(), UrlError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| UrlError::NotAUrl(url.to_owned()))?;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(UrlError::NotAUrl(url.to_owned()));
    }
    if url.contains('#') || authority.contains('@') {
        return Err(UrlError::Extra(url.to_owned()));
    }
    match scheme {
        "https" => Ok(()),
        "http" if is_loopback_authority(authority) => Ok(()),
        "http" => Err(UrlError::NotHttps(url.to_owned())),
        _ => Err(UrlError::NotAUrl(url.to_owned())),
    }
}

/// Whether `host[:port]` names this machine's loopback.
fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The discovery document's URL for `issuer` (Discovery §4: the issuer, without a trailing
/// slash, then the well-known path).
pub fn discovery_url(issuer: &str) -> String {
    format!("{}{WELL_KNOWN}", issuer.trim_end_matches('/'))
}

/// What the hub needs of a discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The issuer, equal to the configured URL.
    pub issuer: String,
    /// Where the signing keys are.
    pub jwks_uri: String,
    /// Where the browser is sent to log in, if the issuer offers the flow.
    pub authorization_endpoint: Option<String>,
    /// Where the code is exchanged.
    pub token_endpoint: Option<String>,
}

/// Why a discovery document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// Not JSON with the required fields.
    #[error("not a discovery document: {0}")]
    Malformed(String),
    /// Its `issuer` is not exactly the configured URL (Discovery §4.3).
    #[error("the document names issuer {found:?}, not the configured {expected:?}")]
    IssuerMismatch {
        /// The configured issuer.
        expected: String,
        /// What the document says.
        found: String,
    },
    /// An endpoint fails [`check_url`].
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The issuer does not offer PKCE with S256, which the browser flow needs.
    #[error("the issuer does not list S256 in code_challenge_methods_supported")]
    NoS256,
}

#[derive(Deserialize)]
struct Document {
    issuer: String,
    jwks_uri: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    code_challenge_methods_supported: Option<Vec<String>>,
}

impl Discovery {
    /// Parses the document fetched for `expected_issuer`.
    pub fn parse(bytes: &[u8], expected_issuer: &str) -> Result<Self, DiscoveryError> {
        let doc: Document =
            serde_json::from_slice(bytes).map_err(|e| DiscoveryError::Malformed(e.to_string()))?;
        if doc.issuer != expected_issuer {
            return Err(DiscoveryError::IssuerMismatch {
                expected: expected_issuer.to_owned(),
                found: doc.issuer,
            });
        }
        check_url(&doc.jwks_uri)?;
        for endpoint in [&doc.authorization_endpoint, &doc.token_endpoint]
            .into_iter()
            .flatten()
        {
            check_url(endpoint)?;
        }
        // An issuer that lists its methods must list S256; one that lists none may still
        // support it (many do without saying), and the token endpoint will tell.
        if let Some(methods) = &doc.code_challenge_methods_supported
            && !methods.iter().any(|m| m == "S256")
        {
            return Err(DiscoveryError::NoS256);
        }
        Ok(Self {
            issuer: doc.issuer,
            jwks_uri: doc.jwks_uri,
            authorization_endpoint: doc.authorization_endpoint,
            token_endpoint: doc.token_endpoint,
        })
    }
}
