//! The object store over https with a CA of the operator's own (`AWS_CA_BUNDLE`): a put and a
//! download through TLS succeed with that CA, and fail (`STORAGE_UNAVAILABLE`, nothing stored)
//! without it or with another CA.
//!
//! Garage speaks plain http, so the test puts a TLS terminator in front of it: a forwarder that
//! accepts TLS on 127.0.0.1 with a certificate for `localhost` from a CA the test makes and copies
//! the bytes to Garage's S3 port. SigV4 signs the Host header, which passes through untouched.

#![cfg(feature = "postgres")]

mod support;

use std::{io::Write as _, sync::Arc};

use snug_revstore::{PgStore, PutError, RevStore, StorageError};
use snug_s3::ObjectsConfig;
use snug_test_support::garage::Garage;
use support::*;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        self,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    },
};

/// A CA (PEM) and a server certificate and key (PEM) for `localhost` signed by it.
fn certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "objects test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .signed_by(&key, &rcgen::Issuer::new(ca_params, ca_key))
        .expect("certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// Terminates TLS on a free loopback port and forwards each connection to `upstream`.
async fn tls_forwarder(cert: &str, key: &str, upstream: std::net::SocketAddr) -> u16 {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A handshake the client refuses (an unknown CA) ends here, as it should.
                let Ok(mut tls) = acceptor.accept(client).await else {
                    return;
                };
                let Ok(mut garage) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut garage).await;
            });
        }
    });
    port
}

fn https_objects(garage: &Garage, port: u16, ca_file: Option<&std::path::Path>) -> ObjectsConfig {
    let mut config = objects_of(garage, &format!("tls-{}", unique()))
        .with_option("aws_endpoint_url", format!("https://localhost:{port}"));
    config.ca_file = ca_file.map(std::path::Path::to_owned);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_operators_ca_and_only_with_it() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let Some(garage) = Garage::start_if_available() else {
        return;
    };
    let (ca, cert, key) = certificates();
    let port = tls_forwarder(&cert, &key, garage.s3_addr()).await;
    let mut ca_file = tempfile::NamedTempFile::new().expect("CA file");
    ca_file.write_all(ca.as_bytes()).expect("write CA");
    let (other_ca, _, _) = certificates();
    let mut other_ca_file = tempfile::NamedTempFile::new().expect("CA file");
    other_ca_file
        .write_all(other_ca.as_bytes())
        .expect("write CA");

    // With the CA: a put lands and downloads byte-identical, every byte through TLS.
    let (config, _, _) = support::config(&Tune::default());
    let store = PgStore::connect_with_objects(
        pg_config(&url),
        https_objects(&garage, port, Some(ca_file.path()))
            .open()
            .expect("the bucket"),
        config,
    )
    .await
    .expect("connect");
    store.health().await.expect("the bucket answers over https");
    let u = user("tls");
    store.provision_user(&u).await.expect("provision");
    let bytes = image(7, 50_000);
    let landed = put_ok(
        &store,
        &u,
        snug_revstore::Precondition::MustNotExist,
        &bytes,
    )
    .await;
    assert_eq!(fetch(&store, &u).await, bytes);
    assert_clean(&store).await;

    // Without it (the platform's roots only) or with another CA: the handshake is refused, the
    // put fails as the storage being unavailable, and nothing lands.
    for (what, ca) in [("no CA", None), ("another CA", Some(other_ca_file.path()))] {
        let (config, _, _) = support::config(&Tune::default());
        let untrusting = PgStore::connect_with_objects(
            pg_config(&url),
            https_objects(&garage, port, ca)
                .open()
                .expect("the bucket (nothing is sent yet)"),
            config,
        )
        .await
        .expect("connect (nothing is sent to the bucket yet)");
        assert!(untrusting.health().await.is_err(), "{what}: health");
        untrusting.provision_user(&u).await.expect("provision");
        let err = put(
            &untrusting,
            &u,
            snug_revstore::Precondition::MustNotExist,
            &bytes,
        )
        .await
        .expect_err(what);
        assert!(
            matches!(err, PutError::Storage(StorageError::Unavailable(_))),
            "{what}: {err:?}"
        );
        assert!(untrusting.head(&u).await.is_err(), "{what}: nothing landed");
    }
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        landed.info.revision
    );
}
