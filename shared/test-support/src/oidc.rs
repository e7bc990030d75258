//! A test OpenID Connect issuer on `127.0.0.1:0`: discovery, a JWKS whose keys a test can rotate,
//! tokens signed with arbitrary claims and headers, forged tokens, and the browser login
//! (an authorization endpoint that approves one configured subject at once, and a token endpoint
//! that checks the PKCE verifier, the client and the redirect URI).
//!
//! It signs with ring directly, an implementation independent of the hub's verifier
//! (`snug-identity` on `jsonwebtoken`). RS256 keys come from a committed, test-only fixture
//! (`fixtures/TEST-ONLY-oidc-rsa-2048.pk8.pem`; ring cannot generate RSA keys); ES256 and EdDSA
//! keys are generated per test.
//!
//! Driving the browser flow by hand (or from a real browser): the hub's `/auth/login` redirects
//! to [`Issuer::authorization_endpoint`]; a GET there with the hub's query answers `302` to the
//! hub's `redirect_uri` with `code` and `state`, for [`Issuer::set_login_subject`]'s subject
//! (default `alice`); the hub then POSTs the code to the token endpoint.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use base64::Engine as _;
use ring::{
    rand::SystemRandom,
    signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, RsaKeyPair},
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The committed test-only RSA key (PKCS#8 PEM, made with `openssl genrsa 2048`). Never use it
/// for anything but tests: its private half is public.
pub const TEST_ONLY_RSA_PKCS8_PEM: &str =
    include_str!("../fixtures/TEST-ONLY-oidc-rsa-2048.pk8.pem");

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Now, Unix seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

enum Pair {
    Rsa(RsaKeyPair),
    P256(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

/// A signing key of the issuer, with its `kid`.
#[derive(Clone)]
pub struct SigningKey {
    kid: String,
    pair: Arc<Pair>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg())
            .finish()
    }
}

impl SigningKey {
    /// The test-only RSA key (RS256).
    pub fn rsa(kid: &str) -> Self {
        let der = base64::engine::general_purpose::STANDARD
            .decode(
                TEST_ONLY_RSA_PKCS8_PEM
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<String>(),
            )
            .expect("the RSA fixture is PEM");
        let pair = RsaKeyPair::from_pkcs8(&der).expect("the RSA fixture is a PKCS#8 key");
        Self {
            kid: kid.to_owned(),
            pair: Arc::new(Pair::Rsa(pair)),
        }
    }

    /// A fresh P-256 key (ES256).
    pub fn p256(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("generate P-256");
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("P-256");
        Self {
            kid: kid.to_owned(),
            pair: Arc::new(Pair::P256(pair)),
        }
    }

    /// A fresh Ed25519 key (EdDSA).
    pub fn ed25519(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("generate Ed25519");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("Ed25519");
        Self {
            kid: kid.to_owned(),
            pair: Arc::new(Pair::Ed25519(pair)),
        }
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWS algorithm this key signs with.
    pub fn alg(&self) -> &'static str {
        match *self.pair {
            Pair::Rsa(_) => "RS256",
            Pair::P256(_) => "ES256",
            Pair::Ed25519(_) => "EdDSA",
        }
    }

    /// The public key as a JWK.
    pub fn jwk(&self) -> Value {
        match &*self.pair {
            Pair::Rsa(pair) => {
                let public: ring::rsa::PublicKeyComponents<Vec<u8>> = pair.public().into();
                json!({
                    "kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                    "n": b64(&public.n), "e": b64(&public.e),
                })
            }
            Pair::P256(pair) => {
                let point = pair.public_key().as_ref();
                json!({
                    "kty": "EC", "kid": self.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                    "x": b64(&point[1..33]), "y": b64(&point[33..65]),
                })
            }
            Pair::Ed25519(pair) => json!({
                "kty": "OKP", "kid": self.kid, "use": "sig", "alg": "EdDSA", "crv": "Ed25519",
                "x": b64(pair.public_key().as_ref()),
            }),
        }
    }

    /// The bytes a careless verifier might use as an HMAC secret: the public key's raw form.
    pub fn public_bytes(&self) -> Vec<u8> {
        match &*self.pair {
            Pair::Rsa(pair) => pair.public().as_ref().to_vec(),
            Pair::P256(pair) => pair.public_key().as_ref().to_vec(),
            Pair::Ed25519(pair) => pair.public_key().as_ref().to_vec(),
        }
    }

    /// Signs `claims` under `header` as given (its `alg` and `kid` are not filled in).
    pub fn sign_raw(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &*self.pair {
            Pair::Rsa(pair) => {
                let mut sig = vec![0; pair.public().modulus_len()];
                pair.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut sig,
                )
                .expect("RSA sign");
                sig
            }
            Pair::P256(pair) => pair
                .sign(&rng, input.as_bytes())
                .expect("ECDSA sign")
                .as_ref()
                .to_vec(),
            Pair::Ed25519(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&signature))
    }

    /// Signs `claims` with the usual header (`alg`, `kid`, `typ: JWT`).
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_raw(
            &json!({"alg": self.alg(), "kid": self.kid, "typ": "JWT"}),
            claims,
        )
    }
}

/// A token with `alg: none` and an empty signature.
pub fn forge_alg_none(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "kid": kid, "typ": "JWT"});
    format!(
        "{}.{}.",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// A token "signed" with HMAC-SHA256 keyed by `key`'s public bytes (or its JWK's text), naming
/// `key`'s kid: the algorithm-confusion attack.
pub fn forge_hs256_with_public_key(key: &SigningKey, claims: &Value, secret: &[u8]) -> String {
    let header = json!({"alg": "HS256", "kid": key.kid, "typ": "JWT"});
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let hkey = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let tag = ring::hmac::sign(&hkey, input.as_bytes());
    format!("{input}.{}", b64(tag.as_ref()))
}

/// `token` with one bit of its signature flipped.
pub fn tamper_signature(token: &str) -> String {
    let (input, sig) = token.rsplit_once('.').expect("a JWS");
    let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sig)
        .expect("base64url");
    if let Some(first) = bytes.first_mut() {
        *first ^= 1;
    }
    format!("{input}.{}", b64(&bytes))
}

/// `token` with its claims replaced by `claims`, keeping the original signature.
pub fn tamper_claims(token: &str, claims: &Value) -> String {
    let mut parts = token.split('.');
    let header = parts.next().expect("header");
    let _ = parts.next();
    let sig = parts.next().expect("signature");
    format!("{header}.{}.{sig}", b64(claims.to_string().as_bytes()))
}

struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    nonce: Option<String>,
    subject: String,
}

struct Inner {
    url: String,
    client_id: Mutex<String>,
    client_secret: Mutex<Option<String>>,
    audience: Mutex<String>,
    published: Mutex<Vec<SigningKey>>,
    signer: Mutex<SigningKey>,
    login_subject: Mutex<String>,
    extra_claims: Mutex<Value>,
    codes: Mutex<HashMap<String, Code>>,
    jwks_fetches: AtomicUsize,
    discovery_fetches: AtomicUsize,
    token_requests: AtomicUsize,
}

/// A running test issuer. Dropping it stops the server.
pub struct Issuer {
    inner: Arc<Inner>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("url", &self.inner.url)
            .finish()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Issuer {
    /// Starts an issuer on `127.0.0.1:0` whose issuer URL is `http://127.0.0.1:PORT`, publishing
    /// and signing with one RS256 key `rsa-1`, for audience and client id `snug-hub`.
    pub async fn start() -> Self {
        Self::start_at_path("").await
    }

    /// As [`Issuer::start`], with the issuer URL ending in `path` (`/realms/snug`).
    pub async fn start_at_path(path: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the issuer");
        let addr = listener.local_addr().expect("addr");
        let key = SigningKey::rsa("rsa-1");
        let inner = Arc::new(Inner {
            url: format!("http://{addr}{path}"),
            client_id: Mutex::new("snug-hub".to_owned()),
            client_secret: Mutex::new(None),
            audience: Mutex::new("snug-hub".to_owned()),
            published: Mutex::new(vec![key.clone()]),
            signer: Mutex::new(key),
            login_subject: Mutex::new("alice".to_owned()),
            extra_claims: Mutex::new(json!({})),
            codes: Mutex::new(HashMap::new()),
            jwks_fetches: AtomicUsize::new(0),
            discovery_fetches: AtomicUsize::new(0),
            token_requests: AtomicUsize::new(0),
        });
        let routes = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize))
            .route("/token", post(token));
        let app = if path.is_empty() {
            routes
        } else {
            Router::new().nest(path, routes)
        }
        .with_state(Arc::clone(&inner));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, addr, task }
    }

    /// The issuer URL (`iss`), `http://127.0.0.1:PORT[path]`.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The authorization endpoint.
    pub fn authorization_endpoint(&self) -> String {
        format!("{}/authorize", self.inner.url)
    }

    /// The audience tokens carry by default (and the client id): `snug-hub`.
    pub fn audience(&self) -> String {
        lock(&self.inner.audience).clone()
    }

    /// Requires `secret` from the client at the token endpoint (HTTP Basic or form).
    pub fn set_client_secret(&self, secret: Option<&str>) {
        *lock(&self.inner.client_secret) = secret.map(str::to_owned);
    }

    /// The subject the authorization endpoint logs in.
    pub fn set_login_subject(&self, subject: &str) {
        *lock(&self.inner.login_subject) = subject.to_owned();
    }

    /// Claims merged into every token the token endpoint issues (`{"groups": ["snug"]}`).
    pub fn set_extra_claims(&self, claims: Value) {
        *lock(&self.inner.extra_claims) = claims;
    }

    /// Publishes `key` in the JWKS (it does not sign until [`Issuer::sign_with`]).
    pub fn add_key(&self, key: SigningKey) {
        lock(&self.inner.published).push(key);
    }

    /// Removes the key `kid` from the JWKS.
    pub fn drop_key(&self, kid: &str) {
        lock(&self.inner.published).retain(|k| k.kid != kid);
    }

    /// Signs the token endpoint's tokens and [`Issuer::token`]'s with `key` from now on.
    pub fn sign_with(&self, key: SigningKey) {
        *lock(&self.inner.signer) = key;
    }

    /// The key signing now.
    pub fn signer(&self) -> SigningKey {
        lock(&self.inner.signer).clone()
    }

    /// How many times the JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.inner.jwks_fetches.load(Ordering::SeqCst)
    }

    /// How many times the discovery document was fetched.
    pub fn discovery_fetches(&self) -> usize {
        self.inner.discovery_fetches.load(Ordering::SeqCst)
    }

    /// How many code exchanges were attempted.
    pub fn token_requests(&self) -> usize {
        self.inner.token_requests.load(Ordering::SeqCst)
    }

    /// The claims of a valid token for `subject`: `iss`, `aud`, `sub`, `iat`, `exp` (in 5 min).
    pub fn claims(&self, subject: &str) -> Value {
        let now = now();
        json!({
            "iss": self.inner.url,
            "aud": self.audience(),
            "sub": subject,
            "iat": now,
            "exp": now + 300,
            "preferred_username": subject,
        })
    }

    /// A valid token for `subject`, signed by the current signer.
    pub fn token(&self, subject: &str) -> String {
        self.signer().sign(&self.claims(subject))
    }

    /// A token with the default claims of `subject` changed by `edit` (set a field to `null` to
    /// remove it), signed by the current signer.
    pub fn token_with(&self, subject: &str, edit: Value) -> String {
        self.signer().sign(&merged(self.claims(subject), &edit))
    }
}

/// `base` with `edit`'s fields set (a `null` removes the field).
pub fn merged(mut base: Value, edit: &Value) -> Value {
    if let (Some(map), Some(edit)) = (base.as_object_mut(), edit.as_object()) {
        for (k, v) in edit {
            if v.is_null() {
                map.remove(k);
            } else {
                map.insert(k.clone(), v.clone());
            }
        }
    }
    base
}

async fn discovery(State(inner): State<Arc<Inner>>) -> Json<Value> {
    inner.discovery_fetches.fetch_add(1, Ordering::SeqCst);
    let url = &inner.url;
    Json(json!({
        "issuer": url,
        "authorization_endpoint": format!("{url}/authorize"),
        "token_endpoint": format!("{url}/token"),
        "jwks_uri": format!("{url}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
        "code_challenge_methods_supported": ["S256"],
    }))
}

async fn jwks(State(inner): State<Arc<Inner>>) -> Json<Value> {
    inner.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    let keys: Vec<Value> = lock(&inner.published).iter().map(SigningKey::jwk).collect();
    Json(json!({ "keys": keys }))
}

fn oauth_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response()
}

fn random_code() -> String {
    let mut bytes = [0u8; 24];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut bytes).expect("random");
    b64(&bytes)
}

async fn authorize(
    State(inner): State<Arc<Inner>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    if get("response_type") != "code" {
        return oauth_error("unsupported_response_type");
    }
    if get("client_id") != *lock(&inner.client_id) {
        return oauth_error("unauthorized_client");
    }
    if !get("scope").split(' ').any(|s| s == "openid") {
        return oauth_error("invalid_scope");
    }
    if get("code_challenge_method") != "S256" || get("code_challenge").len() != 43 {
        return oauth_error("invalid_request");
    }
    let redirect_uri = get("redirect_uri");
    if redirect_uri.is_empty() {
        return oauth_error("invalid_request");
    }
    let code = random_code();
    lock(&inner.codes).insert(
        code.clone(),
        Code {
            client_id: get("client_id"),
            redirect_uri: redirect_uri.clone(),
            challenge: get("code_challenge"),
            nonce: q.get("nonce").cloned(),
            subject: lock(&inner.login_subject).clone(),
        },
    );
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    let state = q.get("state").cloned().unwrap_or_default();
    Redirect::to(&format!(
        "{redirect_uri}{sep}code={code}&state={}",
        form_encode(&state)
    ))
    .into_response()
}

/// Percent-encodes a query value.
pub fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn token(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    inner.token_requests.fetch_add(1, Ordering::SeqCst);
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    if get("grant_type") != "authorization_code" {
        return oauth_error("unsupported_grant_type");
    }
    // The client authenticates with Basic (id:secret) or, as a public client, names itself.
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| v.split_once(':').map(|(a, b)| (a.to_owned(), b.to_owned())));
    let (client_id, secret) = match basic {
        Some((id, secret)) => (id, Some(secret)),
        None => (get("client_id"), form.get("client_secret").cloned()),
    };
    let expected_secret = lock(&inner.client_secret).clone();
    if client_id != *lock(&inner.client_id)
        || (expected_secret.is_some() && secret != expected_secret)
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    // A code is used once, whatever the outcome.
    let Some(code) = lock(&inner.codes).remove(&get("code")) else {
        return oauth_error("invalid_grant");
    };
    let challenge = b64(&Sha256::digest(get("code_verifier").as_bytes()));
    if code.client_id != client_id
        || code.redirect_uri != get("redirect_uri")
        || code.challenge != challenge
    {
        return oauth_error("invalid_grant");
    }
    let now = now();
    let mut claims = json!({
        "iss": inner.url,
        "aud": lock(&inner.audience).clone(),
        "sub": code.subject,
        "iat": now,
        "exp": now + 300,
        "preferred_username": code.subject,
    });
    if let Some(nonce) = code.nonce {
        claims["nonce"] = json!(nonce);
    }
    let claims = merged(claims, &lock(&inner.extra_claims));
    let signer = lock(&inner.signer).clone();
    let id_token = signer.sign(&claims);
    Json(json!({
        "access_token": id_token,
        "id_token": id_token,
        "token_type": "Bearer",
        "expires_in": 300,
    }))
    .into_response()
}
