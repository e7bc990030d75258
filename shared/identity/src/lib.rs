//! OpenID Connect for the hub, sans-IO: bytes and the current time in, verdicts out.
//!
//! - [`token`]: verify an ID or access token (a compact JWS) against an issuer's key set under a
//!   [`Policy`]: RS256, ES256 and EdDSA only; `alg: none` and every HMAC algorithm refused before
//!   any key is looked at; exact `iss`, `aud` containing the audience, `exp` required and `nbf`
//!   honoured with [`SKEW_SECS`] of clock skew; each refusal a typed [`Refusal`];
//! - [`keys`]: a JWKS parsed into keys, each bound to the one algorithm its `kty`/`crv`/`alg` allow;
//! - [`discovery`]: the `/.well-known/openid-configuration` document, whose `issuer` must equal
//!   the configured URL exactly, and the https-or-loopback rule for every URL an issuer names;
//! - [`flow`]: the browser login (authorization code + PKCE S256): state, nonce and verifier kept
//!   in an HMAC-sealed cookie so any replica can finish the flow.
//!
//! Signatures are checked by `jsonwebtoken` (on ring); this crate writes no signature code. It
//! opens no sockets and reads no clock: the caller fetches documents and passes `now` in.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod discovery;
pub mod flow;
pub mod keys;
pub mod token;

pub use discovery::{Discovery, DiscoveryError, UrlError, check_url, discovery_url};
pub use flow::{Flow, FlowError, pkce_challenge};
pub use keys::{Alg, KeySet, KeySetError};
pub use token::{
    Claims, DEFAULT_USER_CLAIM, Policy, PolicyError, Refusal, RequiredClaim, SKEW_SECS, Unverified,
    is_jwt, peek, verify,
};
