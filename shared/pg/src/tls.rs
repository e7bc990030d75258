//! TLS to PostgreSQL with libpq's meaning of `sslmode` and `sslrootcert`, over rustls (ring).
//!
//! tokio-postgres parses `sslmode` itself but knows only `disable`, `prefer` and `require`, and no
//! `sslrootcert`. [`split`] takes both out of the connection string (URL or key/value form), hands
//! the rest to `tokio_postgres::Config`, and tells tokio-postgres whether TLS is optional
//! (`prefer`) or mandatory (`require`, `verify-ca`, `verify-full`); [`MakeRustlsConnect`] then
//! checks what the mode asks for:
//!
//! | `sslmode`            | TLS                        | chain checked          | host name checked |
//! |----------------------|----------------------------|------------------------|-------------------|
//! | `disable`            | never                      | –                      | –                 |
//! | `prefer` (default)   | if the server offers it    | if `sslrootcert` given | no                |
//! | `require`            | always                     | if `sslrootcert` given | no                |
//! | `verify-ca`          | always                     | yes                    | no                |
//! | `verify-full`        | always                     | yes                    | yes               |
//!
//! As in libpq, `require` and `prefer` with a root certificate check the chain (libpq's
//! "backwards compatibility" rule), and `require` alone encrypts without authenticating the server,
//! which only a trusted network makes safe: production deployments should say `verify-full`.
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the Mozilla roots compiled in
//! from `webpki-roots` (libpq 16 reads the operating system's store for `system`; a static image
//! has none, and a managed PostgreSQL with a public CA is served by the compiled-in set).
//! `verify-ca` and `verify-full` without `sslrootcert` are refused rather than reading
//! `~/.postgresql/root.crt` as libpq does: a service's trust should be in its configuration.
//!
//! What this deliberately does not do: client certificates (`sslcert`/`sslkey`, which
//! tokio-postgres refuses as unknown options), certificate revocation lists, and channel binding
//! (SCRAM authenticates without `-PLUS`; the server's identity rests on the certificate check).

use std::{
    fmt, io,
    path::PathBuf,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures::future::BoxFuture;
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject as _},
    server::ParsedCertificate,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// libpq's `sslmode`, all five values this crate accepts (`allow` is refused: it tries plaintext
/// first, which nothing here wants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server offers it (libpq's and tokio-postgres's default).
    Prefer,
    /// TLS or no connection; the server is authenticated only if a root certificate is given.
    Require,
    /// TLS, and the server's certificate chains to `sslrootcert`; its name is not checked.
    VerifyCa,
    /// TLS, the chain checked, and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, PgTlsError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(PgTlsError::UnsupportedSslMode {
                    value: value.to_owned(),
                });
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// The Mozilla roots compiled in from `webpki-roots` (`sslrootcert=system`).
    System,
}

/// The TLS parameters taken out of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsParams {
    /// `sslmode`; [`SslMode::Prefer`] when absent, as in libpq.
    pub(crate) mode: SslMode,
    /// `sslrootcert`, if given.
    pub(crate) root_cert: Option<RootCert>,
}

/// Why TLS to PostgreSQL could not be set up or was refused. Messages name files and modes but
/// never repeat the connection string, which may carry a password.
#[derive(Debug, thiserror::Error)]
pub enum PgTlsError {
    /// `sslmode` has a value this crate does not support.
    #[error(
        "sslmode={value:?} is not supported; use disable, prefer, require, verify-ca or verify-full"
    )]
    UnsupportedSslMode {
        /// The value given.
        value: String,
    },
    /// `verify-ca` or `verify-full` without a root certificate to verify against.
    #[error("sslmode={mode} needs sslrootcert=/path/to/ca.pem (or sslrootcert=system)")]
    RootCertRequired {
        /// The mode given.
        mode: &'static str,
    },
    /// The `sslrootcert` file could not be read.
    #[error("cannot read sslrootcert {path:?}")]
    RootCertUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The `sslrootcert` file holds no usable CA certificate.
    #[error("sslrootcert {path:?} holds no usable PEM certificate")]
    RootCertInvalid {
        /// The file.
        path: PathBuf,
    },
    /// `verify-full` with no host name to check (only `hostaddr`, or a Unix socket).
    #[error("sslmode=verify-full needs a host name to verify, not only hostaddr")]
    HostNameRequired,
    /// The host name is not one a certificate can name.
    #[error("{host:?} is not a valid TLS server name")]
    InvalidHostName {
        /// The host.
        host: String,
    },
    /// The TLS handshake failed; for a refused certificate the source is rustls's
    /// [`rustls::Error::InvalidCertificate`], naming the cause (unknown issuer, wrong name, …).
    #[error("TLS handshake with PostgreSQL failed")]
    Handshake(#[source] rustls::Error),
    /// The connection failed during the TLS handshake.
    #[error("TLS handshake with PostgreSQL failed")]
    Io(#[source] io::Error),
}

/// Takes `sslmode` and `sslrootcert` out of `dsn` (a `postgres[ql]://` URL or a libpq key/value
/// string) and returns what is left, for `tokio_postgres::Config`'s parser, with them.
///
/// A string this cannot tokenize is returned whole, so that tokio-postgres reports its own parse
/// error for it.
pub(crate) fn split(dsn: &str) -> Result<(String, TlsParams), PgTlsError> {
    let (rest, pairs) = if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        split_url(dsn)
    } else {
        match split_key_value(dsn) {
            Some(split) => split,
            None => (dsn.to_owned(), Vec::new()),
        }
    };
    let mut params = TlsParams {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    // The last occurrence wins, as in libpq.
    for (key, value) in pairs {
        match key {
            Taken::SslMode => params.mode = SslMode::parse(&value)?,
            Taken::SslRootCert => {
                params.root_cert = Some(match value.as_str() {
                    "system" => RootCert::System,
                    _ => RootCert::File(PathBuf::from(value)),
                })
            }
        }
    }
    Ok((rest, params))
}

/// The parameters [`split`] takes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    SslMode,
    SslRootCert,
}

impl Taken {
    fn of(key: &str) -> Option<Self> {
        match key {
            "sslmode" => Some(Taken::SslMode),
            "sslrootcert" => Some(Taken::SslRootCert),
            _ => None,
        }
    }
}

fn split_url(url: &str) -> (String, Vec<(Taken, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match Taken::of(&percent_decode(key)) {
            Some(which) => taken.push((which, percent_decode(value))),
            None => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

/// Decodes `%XX` escapes (a malformed escape stays as written; tokio-postgres decodes the same
/// way, so values agree).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push(((hex(h).unwrap_or(0) << 4) | hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits libpq's `key = value …` form (values optionally single-quoted, `\` escaping the next
/// character), keeping every pair but the taken ones verbatim. `None` if it does not tokenize.
fn split_key_value(s: &str) -> Option<(String, Vec<(Taken, String)>)> {
    let mut chars = s.char_indices().peekable();
    let mut kept: Vec<&str> = Vec::new();
    let mut taken = Vec::new();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        chars.next_if(|(_, c)| *c == '=')?;
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next()? {
                    (_, '\'') => break,
                    (_, '\\') => value.push(chars.next()?.1),
                    (_, c) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next()?.1);
                } else {
                    value.push(c);
                }
            }
        }
        let end = chars.peek().map_or(s.len(), |&(i, _)| i);
        match Taken::of(&key) {
            Some(which) => taken.push((which, value)),
            None => kept.push(&s[start..end]),
        }
    }
    Some((kept.join(" "), taken))
}

/// The mode tokio-postgres should negotiate: it only needs to know whether TLS is optional.
pub(crate) fn negotiation(mode: SslMode) -> tokio_postgres::config::SslMode {
    match mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    }
}

/// A tokio-postgres TLS connector over rustls that checks what an [`SslMode`] asks for.
#[derive(Clone)]
pub(crate) struct MakeRustlsConnect {
    config: Arc<ClientConfig>,
    /// `verify-full`: the connection needs a host name to check.
    names_checked: bool,
}

impl fmt::Debug for MakeRustlsConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeRustlsConnect")
            .field("names_checked", &self.names_checked)
            .finish_non_exhaustive()
    }
}

impl MakeRustlsConnect {
    /// The connector for `params`, reading the root certificate file if one is named.
    pub(crate) fn new(params: &TlsParams) -> Result<Self, PgTlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match (&params.root_cert, params.mode) {
            // libpq ignores sslrootcert when TLS is off.
            (_, SslMode::Disable) | (None, SslMode::Prefer | SslMode::Require) => None,
            (None, mode @ (SslMode::VerifyCa | SslMode::VerifyFull)) => {
                return Err(PgTlsError::RootCertRequired { mode: mode.name() });
            }
            (Some(root), _) => Some(Arc::new(root_store(root)?)),
        };
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(PgTlsError::Handshake)?;
        let mut config = match roots {
            Some(roots) if params.mode == SslMode::VerifyFull => {
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            Some(roots) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly { roots, provider }))
                .with_no_client_auth(),
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unauthenticated { provider }))
                .with_no_client_auth(),
        };
        // PostgreSQL 17 requires this ALPN for direct TLS (`sslnegotiation=direct`); older servers
        // ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            names_checked: params.mode == SslMode::VerifyFull,
        })
    }
}

fn root_store(root: &RootCert) -> Result<RootCertStore, PgTlsError> {
    let path = match root {
        RootCert::System => {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            });
        }
        RootCert::File(path) => path,
    };
    let pem = std::fs::read(path).map_err(|source| PgTlsError::RootCertUnreadable {
        path: path.clone(),
        source,
    })?;
    let invalid = || PgTlsError::RootCertInvalid { path: path.clone() };
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        store
            .add(cert.map_err(|_| invalid())?)
            .map_err(|_| invalid())?;
    }
    if store.is_empty() {
        return Err(invalid());
    }
    Ok(store)
}

impl<S> MakeTlsConnect<S> for MakeRustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = PgTlsError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, PgTlsError> {
        let name = match ServerName::try_from(host) {
            Ok(name) => name.to_owned(),
            Err(_) if self.names_checked && host.is_empty() => {
                return Err(PgTlsError::HostNameRequired);
            }
            Err(_) if self.names_checked => {
                return Err(PgTlsError::InvalidHostName {
                    host: host.to_owned(),
                });
            }
            // Unchecked, the name only goes into SNI, which an IP address never sends.
            Err(_) => ServerName::IpAddress(std::net::Ipv4Addr::UNSPECIFIED.into()),
        };
        Ok(RustlsConnect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One connection's handshake, made by [`MakeRustlsConnect`].
pub(crate) struct RustlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = PgTlsError;
    type Future = BoxFuture<'static, Result<RustlsStream<S>, PgTlsError>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            match self.connector.connect(self.name, stream).await {
                Ok(stream) => Ok(RustlsStream(stream)),
                // tokio-rustls reports rustls's typed error inside an io::Error; unwrap it so that
                // callers can tell a refused certificate from a dropped connection.
                Err(err) if err.get_ref().is_some_and(|e| e.is::<rustls::Error>()) => {
                    match err.into_inner().map(|e| e.downcast::<rustls::Error>()) {
                        Some(Ok(rustls)) => Err(PgTlsError::Handshake(*rustls)),
                        _ => Err(PgTlsError::Io(io::Error::other("TLS handshake failed"))),
                    }
                }
                Err(err) => Err(PgTlsError::Io(err)),
            }
        })
    }
}

/// A TLS connection to PostgreSQL.
pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// `verify-ca`, and `prefer`/`require` with a root certificate: the chain must lead to a root,
/// whatever name the certificate is for.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        handshake_signature(&self.provider, message, cert, dss, false)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        handshake_signature(&self.provider, message, cert, dss, true)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `prefer` and `require` without a root certificate: encrypted, the server not authenticated
/// (libpq's meaning). The handshake signature is still checked, so the peer holds the key of the
/// certificate it sent.
#[derive(Debug)]
struct Unauthenticated {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unauthenticated {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        handshake_signature(&self.provider, message, cert, dss, false)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        handshake_signature(&self.provider, message, cert, dss, true)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn handshake_signature(
    provider: &CryptoProvider,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    tls13: bool,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let algorithms = &provider.signature_verification_algorithms;
    if tls13 {
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    } else {
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }
}

#[cfg(test)]
mod tests;
