//! The connection-string split, the connector's refusals, and, when `SNUG_TEST_POSTGRES_CA` names
//! the CA of the server at `SNUG_TEST_POSTGRES_URL` (as `.ci/run` sets up), every `sslmode`
//! against that server.

use std::path::Path;

use super::*;
use crate::{PgConfig, PgError};

#[track_caller]
fn check_split(dsn: &str, rest: &str, mode: SslMode, root_cert: Option<RootCert>) {
    let (actual_rest, params) = split(dsn).expect(dsn);
    assert_eq!(actual_rest, rest, "{dsn}");
    assert_eq!(params, TlsParams { mode, root_cert }, "{dsn}");
}

#[test]
fn split_takes_out_sslmode_and_sslrootcert_and_keeps_the_rest() {
    let file = |p: &str| Some(RootCert::File(PathBuf::from(p)));
    check_split(
        "postgresql://hub@db:5432/hub",
        "postgresql://hub@db:5432/hub",
        SslMode::Prefer,
        None,
    );
    check_split(
        "postgresql://hub@db/hub?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        "postgresql://hub@db/hub",
        SslMode::VerifyFull,
        file("/etc/ca.pem"),
    );
    check_split(
        "postgres://hub:p%40ss@db/hub?connect_timeout=5&sslrootcert=%2Fa%20b%2Fca.pem&sslmode=verify-ca&application_name=x",
        "postgres://hub:p%40ss@db/hub?connect_timeout=5&application_name=x",
        SslMode::VerifyCa,
        file("/a b/ca.pem"),
    );
    check_split(
        "postgresql://db/hub?sslmode=require&sslrootcert=system",
        "postgresql://db/hub",
        SslMode::Require,
        Some(RootCert::System),
    );
    check_split(
        "host=db user=hub sslmode=verify-full sslrootcert=/etc/ca.pem dbname=hub",
        "host=db user=hub dbname=hub",
        SslMode::VerifyFull,
        file("/etc/ca.pem"),
    );
    check_split(
        "host = db  sslrootcert = '/a b/it\\'s.pem' password='x y' sslmode=disable",
        "host = db password='x y'",
        SslMode::Disable,
        file("/a b/it's.pem"),
    );
    // The last occurrence wins, as in libpq.
    check_split(
        "host=db sslmode=disable sslmode=require",
        "host=db",
        SslMode::Require,
        None,
    );
    // What does not tokenize goes to tokio-postgres whole, for its own error.
    check_split("host=db sslmode", "host=db sslmode", SslMode::Prefer, None);
}

#[test]
fn unsupported_modes_and_missing_roots_are_refused_with_a_message() {
    for (dsn, message) in [
        (
            "host=db sslmode=allow password=secret",
            "sslmode=\"allow\" is not supported; use disable, prefer, require, verify-ca or verify-full",
        ),
        (
            "postgresql://u:secret@db/x?sslmode=verify-full",
            "sslmode=verify-full needs sslrootcert=/path/to/ca.pem (or sslrootcert=system)",
        ),
        (
            "host=db sslmode=verify-ca password=secret",
            "sslmode=verify-ca needs sslrootcert=/path/to/ca.pem (or sslrootcert=system)",
        ),
        (
            "host=db sslmode=verify-ca sslrootcert=/nonexistent/ca.pem",
            "cannot read sslrootcert \"/nonexistent/ca.pem\"",
        ),
    ] {
        let err = split(dsn)
            .and_then(|(_, params)| MakeRustlsConnect::new(&params))
            .expect_err(dsn);
        assert_eq!(err.to_string(), message, "{dsn}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("write");
    let params = TlsParams {
        mode: SslMode::VerifyFull,
        root_cert: Some(RootCert::File(junk.clone())),
    };
    let err = MakeRustlsConnect::new(&params).expect_err("junk");
    assert!(matches!(err, PgTlsError::RootCertInvalid { .. }), "{err}");
    // Without TLS the root certificate is not read, as in libpq.
    let params = TlsParams {
        mode: SslMode::Disable,
        root_cert: Some(RootCert::File("/nonexistent/ca.pem".into())),
    };
    assert!(MakeRustlsConnect::new(&params).is_ok());
}

#[test]
fn verify_full_needs_a_host_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, _) = issue_ca_and_server_cert(dir.path());
    let params = TlsParams {
        mode: SslMode::VerifyFull,
        root_cert: Some(RootCert::File(ca)),
    };
    let mut connect = MakeRustlsConnect::new(&params).expect("connector");
    let err = MakeTlsConnect::<tokio_postgres::Socket>::make_tls_connect(&mut connect, "")
        .err()
        .expect("no host name");
    assert!(matches!(err, PgTlsError::HostNameRequired), "{err}");
}

/// Writes a fresh CA (`ca.pem`) and a server certificate it issues for `localhost`
/// (`server.pem`, with its key) into `dir`; returns their paths.
fn issue_ca_and_server_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "an unrelated CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let server_key = rcgen::KeyPair::generate().expect("key");
    let server = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .signed_by(&server_key, &rcgen::Issuer::new(ca_params, ca_key))
        .expect("server cert");
    let (ca_path, server_path) = (dir.join("ca.pem"), dir.join("server.pem"));
    std::fs::write(&ca_path, ca.pem()).expect("write");
    std::fs::write(
        &server_path,
        format!("{}{}", server.pem(), server_key.serialize_pem()),
    )
    .expect("write");
    (ca_path, server_path)
}

/// What a connection attempt came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Connected,
    /// The certificate was refused for this name (verify-full to a name it does not cover).
    WrongName,
    /// The certificate does not chain to the given roots.
    UnknownIssuer,
    /// The server refused the connection without TLS (`pg_hba.conf`'s `hostnossl … reject`).
    RefusedWithoutTls,
    Other(String),
}

async fn attempt(url: String) -> Outcome {
    let pg = PgConfig {
        url,
        schema: None,
        pool_size: 2,
    };
    let pool = match crate::pool(&pg) {
        Ok(pool) => pool,
        Err(PgError::Tls(err)) => return Outcome::Other(err.to_string()),
        Err(other) => return Outcome::Other(other.to_string()),
    };
    let err: Box<dyn std::error::Error + Send + Sync> = match pool.get().await {
        Ok(client) => match client.simple_query("SELECT 1").await {
            Ok(_) => return Outcome::Connected,
            Err(err) => Box::new(err),
        },
        Err(err) => Box::new(err),
    };
    let mut chain = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err.as_ref());
    while let Some(e) = source {
        if let Some(rustls::Error::InvalidCertificate(cert)) = e.downcast_ref::<rustls::Error>() {
            match cert {
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => {
                    return Outcome::WrongName;
                }
                rustls::CertificateError::UnknownIssuer => return Outcome::UnknownIssuer,
                _ => {}
            }
        }
        if let Some(db) = e.downcast_ref::<tokio_postgres::error::DbError>()
            && db.code() == &tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            && db.message().contains("no encryption")
        {
            return Outcome::RefusedWithoutTls;
        }
        chain.push(e.to_string());
        source = e.source();
    }
    Outcome::Other(chain.join(": "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_against_a_server_with_a_certificate_for_localhost_only() {
    let (Ok(url), Ok(ca)) = (
        std::env::var("SNUG_TEST_POSTGRES_URL"),
        std::env::var("SNUG_TEST_POSTGRES_CA"),
    ) else {
        assert!(
            std::env::var_os("SNUG_REQUIRE_POSTGRES_TLS").is_none(),
            "SNUG_REQUIRE_POSTGRES_TLS is set but SNUG_TEST_POSTGRES_URL or SNUG_TEST_POSTGRES_CA is not"
        );
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL or SNUG_TEST_POSTGRES_CA is not set");
        return;
    };
    let server: tokio_postgres::Config = url.parse().expect("SNUG_TEST_POSTGRES_URL");
    let port = server.get_ports().first().copied().unwrap_or(5432);
    let user = server.get_user().unwrap_or("postgres");
    let dbname = server.get_dbname().unwrap_or("postgres");
    let dir = tempfile::tempdir().expect("temp dir");
    let (wrong_ca, _) = issue_ca_and_server_cert(dir.path());
    let wrong_ca = wrong_ca.display();
    // Every case reaches 127.0.0.1; `host` is the name the certificate is checked against.
    let dsn = |host: &str, user: &str, tls: &str| {
        format!("hostaddr=127.0.0.1 port={port} dbname={dbname} host={host} user={user} {tls}")
    };
    let tls_only = "snug_tls_only";
    let cases = [
        (
            user,
            dsn(
                "localhost",
                user,
                &format!("sslmode=verify-full sslrootcert={ca}"),
            ),
            Outcome::Connected,
        ),
        (
            user,
            dsn(
                "127.0.0.1",
                user,
                &format!("sslmode=verify-full sslrootcert={ca}"),
            ),
            Outcome::WrongName,
        ),
        (
            user,
            dsn(
                "127.0.0.1",
                user,
                &format!("sslmode=verify-ca sslrootcert={ca}"),
            ),
            Outcome::Connected,
        ),
        (
            user,
            dsn("127.0.0.1", user, "sslmode=require"),
            Outcome::Connected,
        ),
        (
            user,
            dsn(
                "127.0.0.1",
                user,
                &format!("sslmode=require sslrootcert={wrong_ca}"),
            ),
            Outcome::UnknownIssuer,
        ),
        (
            user,
            dsn(
                "localhost",
                user,
                &format!("sslmode=verify-full sslrootcert={wrong_ca}"),
            ),
            Outcome::UnknownIssuer,
        ),
        (
            user,
            dsn("localhost", user, "sslmode=verify-full sslrootcert=system"),
            Outcome::UnknownIssuer,
        ),
        (
            user,
            format!(
                "postgresql://{user}@localhost:{port}/{dbname}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}"
            ),
            Outcome::Connected,
        ),
        // `.ci/run`'s pg_hba.conf admits this role over TLS only.
        (
            tls_only,
            dsn("127.0.0.1", tls_only, "sslmode=disable"),
            Outcome::RefusedWithoutTls,
        ),
        (
            tls_only,
            dsn("127.0.0.1", tls_only, "sslmode=prefer"),
            Outcome::Connected,
        ),
        (
            tls_only,
            dsn(
                "localhost",
                tls_only,
                &format!("sslmode=verify-full sslrootcert={ca}"),
            ),
            Outcome::Connected,
        ),
    ];
    let mut actual = Vec::new();
    for (_, dsn, _) in &cases {
        actual.push((dsn.clone(), attempt(dsn.clone()).await));
    }
    let expected: Vec<_> = cases
        .into_iter()
        .map(|(_, dsn, outcome)| (dsn, outcome))
        .collect();
    assert_eq!(actual, expected);
}
