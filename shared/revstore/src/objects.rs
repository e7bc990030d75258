//! Image bytes in S3-compatible object storage (feature `objects`): pack objects written
//! create-once, read back and verified, and read by range.
//!
//! Beside PostgreSQL metadata ([`crate::PgStore`] with an [`ObjectsConfig`]), the chunks of
//! images live in pack objects named `<prefix>/packs/<name>.pack` ([`crate::pack`]: the name is
//! the SHA-256 of the chunk digests the pack holds, so it determines the bytes). A put writes its
//! new chunks in packs of up to [`PACK_BYTES`]; each pack is named in the put's publication record
//! before it is written, written create-once (`If-None-Match: *` where the server supports it; an
//! occupant, or a server that ignores the header, is compared rather than trusted), then read back
//! whole and every chunk checked against its address, all before the pointer moves. Downloads read
//! coalesced ranges and check every chunk before it is handed on, so a missing or damaged object
//! is a typed error, never wrong bytes.
//!
//! Requests are bounded: a connect timeout, a request timeout and a few quick retries, so a store
//! that is down makes a put fail within seconds (`STORAGE_UNAVAILABLE`) instead of hanging on the
//! client library's default retry budget of minutes.

use std::{collections::BTreeMap, fmt, ops::Range, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions,
    PutPayload, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    path::Path,
};

use crate::{
    chunk,
    error::{PutError, ReclaimError, StorageError},
    pack,
    types::{Digest, Timestamp},
};

/// The most chunk bytes one pack object holds. A put of a large image writes several, uploading
/// one while the next fills, so memory per put stays bounded and the upload overlaps the stream.
pub const PACK_BYTES: usize = 16 << 20;

/// Where and how to reach the bucket.
#[derive(Clone)]
pub struct ObjectsConfig {
    /// `s3://BUCKET/PREFIX` (the prefix may be empty).
    pub url: String,
    /// S3 client settings by their standard names, lower case: `aws_endpoint_url`,
    /// `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
    /// `aws_virtual_hosted_style_request` (path-style requests unless `true`), `aws_allow_http`, ….
    pub options: BTreeMap<String, String>,
    /// A PEM file of CA certificates to trust for an https endpoint (`AWS_CA_BUNDLE`), added to
    /// the platform's roots.
    pub ca_file: Option<PathBuf>,
}

impl fmt::Debug for ObjectsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Option values include secrets; their names are enough to debug a configuration.
        f.debug_struct("ObjectsConfig")
            .field("url", &self.url)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl ObjectsConfig {
    /// A configuration for `url` with no options.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            options: BTreeMap::new(),
            ca_file: None,
        }
    }

    /// Takes the standard `AWS_*` variables from `vars` (the process environment, at the
    /// composition root): every `AWS_` name becomes an option under its lower-case name, and
    /// `AWS_CA_BUNDLE` names the CA file.
    pub fn with_env(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        for (name, value) in vars {
            if name == "AWS_CA_BUNDLE" {
                if !value.is_empty() {
                    self.ca_file = Some(PathBuf::from(value));
                }
            } else if name.starts_with("AWS_") {
                self.options.insert(name.to_ascii_lowercase(), value);
            }
        }
        self
    }

    /// Sets one option (see [`ObjectsConfig::options`]).
    pub fn with_option(mut self, name: &str, value: impl Into<String>) -> Self {
        self.options.insert(name.to_owned(), value.into());
        self
    }

    /// The bucket and prefix `url` names.
    fn location(&self) -> Result<(String, String), StorageError> {
        let rest = self.url.strip_prefix("s3://").ok_or_else(|| {
            StorageError::unavailable(format!(
                "object store URL {:?} is not s3://BUCKET/PREFIX",
                self.url
            ))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(StorageError::unavailable(format!(
                "object store URL {:?} names no bucket",
                self.url
            )));
        }
        Ok((bucket.to_owned(), prefix.trim_matches('/').to_owned()))
    }

    /// The endpoint, if one is configured (otherwise AWS's own).
    fn endpoint(&self) -> Option<&str> {
        ["aws_endpoint_url_s3", "aws_endpoint_url", "aws_endpoint"]
            .iter()
            .find_map(|k| self.options.get(*k).map(String::as_str))
    }
}

/// Whether an endpoint may be plain http without saying so: only on this machine.
fn loopback_http(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The bucket, as the store uses it.
#[derive(Clone)]
pub(crate) struct Objects {
    store: Arc<dyn ObjectStore>,
    packs: Path,
    /// `s3://BUCKET/PREFIX`, recorded in the metadata so a store is never opened against another
    /// bucket by mistake.
    location: String,
}

impl fmt::Debug for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Objects")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: object_store::Error) -> StorageError {
    StorageError::unavailable(e)
}

impl Objects {
    /// Builds the client; nothing is sent until the first request.
    pub(crate) fn open(config: &ObjectsConfig) -> Result<Self, StorageError> {
        let (bucket, prefix) = config.location()?;
        let mut builder = AmazonS3Builder::new().with_bucket_name(&bucket);
        for (name, value) in &config.options {
            // Names this client does not know (other tools' AWS_ variables) are not ours to judge.
            if let Ok(key) = name.parse::<AmazonS3ConfigKey>() {
                builder = builder.with_config(key, value);
            }
        }
        let explicit_http = config
            .options
            .get("aws_allow_http")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let mut client = ClientOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(60))
            .with_allow_http(explicit_http || config.endpoint().is_some_and(loopback_http));
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                StorageError::unavailable(format!("object store CA file {}: {e}", path.display()))
            })?;
            for cert in object_store::Certificate::from_pem_bundle(&pem).map_err(unavailable)? {
                client = client.with_root_certificate(cert);
            }
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_millis(500),
                base: 2.0,
            },
            max_retries: 2,
            retry_timeout: Duration::from_secs(5),
        };
        // rustls needs one process-wide crypto provider; ring is the one the rest of the tree
        // uses. Installing fails harmlessly when another component installed it first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = builder
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(unavailable)?;
        Ok(Self::with_store(
            Arc::new(store),
            &prefix,
            format!("s3://{bucket}/{prefix}"),
        ))
    }

    /// Over any object store (tests use an in-memory one).
    pub(crate) fn with_store(store: Arc<dyn ObjectStore>, prefix: &str, location: String) -> Self {
        let packs = if prefix.is_empty() {
            Path::from("packs")
        } else {
            Path::from(format!("{prefix}/packs"))
        };
        Self {
            store,
            packs,
            location,
        }
    }

    /// `s3://BUCKET/PREFIX`.
    pub(crate) fn location(&self) -> &str {
        &self.location
    }

    fn path(&self, name: &str) -> Path {
        Path::from(format!("{}/{name}", self.packs))
    }

    /// Writes a pack create-once, then reads it back whole and checks every chunk.
    ///
    /// `chunks` are the digests, offsets and lengths of the chunks in `bytes`, whose name is
    /// [`pack::pack_name`] of them.
    pub(crate) async fn create_pack(
        &self,
        name: &str,
        bytes: Bytes,
        chunks: &[(Digest, u64, u32)],
    ) -> Result<(), PutError> {
        let path = self.path(name);
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes.clone()), create)
            .await
        {
            Ok(_) => {}
            // Occupied: the occupant is compared below, like anything read back.
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {}
            // A server without conditional writes: write, then compare what is there.
            Err(object_store::Error::NotImplemented { .. })
            | Err(object_store::Error::NotSupported { .. }) => {
                self.store
                    .put(&path, PutPayload::from(bytes.clone()))
                    .await
                    .map_err(unavailable)?;
            }
            Err(e) => return Err(unavailable(e).into()),
        }
        let stored = self
            .store
            .get(&path)
            .await
            .map_err(unavailable)?
            .bytes()
            .await
            .map_err(unavailable)?;
        if stored.len() != bytes.len() || check_pack(&stored, chunks).is_err() {
            // Content-addressed: an occupant with other bytes is damage or a collision, never
            // something to overwrite.
            return Err(PutError::ImageConflict {
                identity: format!("pack {name}"),
            });
        }
        Ok(())
    }

    /// The size of a stored pack, or `None` if it is missing.
    pub(crate) async fn size(&self, name: &str) -> Result<Option<u64>, StorageError> {
        match self.store.head(&self.path(name)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Reads one range of a pack. A missing pack or a short read is damage, not absence: the
    /// metadata says the bytes are there.
    pub(crate) async fn read(&self, name: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let want = range.end - range.start;
        match self.store.get_range(&self.path(name), range).await {
            Ok(bytes) if bytes.len() as u64 == want => Ok(bytes),
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Err(StorageError::Corrupt {
                object: format!("pack {name}"),
            }),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Every pack object with when it was last written, complete or an error: reclamation
    /// deletes nothing on a partial listing or one holding an object it cannot identify.
    pub(crate) async fn list(&self) -> Result<Vec<(String, Timestamp)>, ReclaimError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.packs))
            .try_collect()
            .await
            .map_err(|_| ReclaimError::IncompleteListing)?;
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let name = meta.location.filename().unwrap_or_default().to_owned();
            let direct = meta.location.prefix_match(&self.packs).map(|p| p.count()) == Some(1);
            if !direct || !pack::is_pack_name(&name) {
                return Err(ReclaimError::UnreadableCandidate {
                    name: meta.location.to_string(),
                });
            }
            out.push((
                name,
                Timestamp::from_unix_millis(meta.last_modified.timestamp_millis()),
            ));
        }
        Ok(out)
    }

    /// Deletes a pack; one that is already gone counts as deleted.
    pub(crate) async fn delete(&self, name: &str) -> Result<(), StorageError> {
        match self.store.delete(&self.path(name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Checks that the bucket answers.
    pub(crate) async fn health(&self) -> Result<(), StorageError> {
        let mut listing = self.store.list(Some(&self.packs));
        match listing.next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(unavailable(e)),
        }
    }
}

/// Checks each chunk of a pack's bytes against its address.
fn check_pack(bytes: &[u8], chunks: &[(Digest, u64, u32)]) -> Result<(), StorageError> {
    for (digest, offset, len) in chunks {
        let start = *offset as usize;
        let piece =
            bytes
                .get(start..start + *len as usize)
                .ok_or_else(|| StorageError::Corrupt {
                    object: format!("chunk {digest}"),
                })?;
        chunk::check(digest, piece)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_allowed_only_on_loopback() {
        for (endpoint, allowed) in [
            ("http://127.0.0.1:3900", true),
            ("http://localhost:3900/", true),
            ("http://[::1]:3900", true),
            ("http://127.1.2.3", true),
            ("http://10.0.0.1:3900", false),
            ("http://s3.example.com", false),
            ("http://localhost.example.com:3900", false),
            ("https://127.0.0.1:3900", false),
        ] {
            assert_eq!(loopback_http(endpoint), allowed, "{endpoint}");
        }
    }

    #[test]
    fn locations_parse_and_refuse() {
        let loc = |u: &str| ObjectsConfig::new(u).location().map_err(|e| e.to_string());
        assert_eq!(
            loc("s3://b/p/q/").expect("valid"),
            ("b".into(), "p/q".into())
        );
        assert_eq!(loc("s3://b").expect("valid"), ("b".into(), String::new()));
        assert!(loc("s3:///p").is_err());
        assert!(loc("https://b/p").is_err());
    }

    #[test]
    fn env_takes_aws_names_and_the_ca_bundle() {
        let config = ObjectsConfig::new("s3://b").with_env([
            ("AWS_REGION".to_owned(), "garage".to_owned()),
            ("AWS_CA_BUNDLE".to_owned(), "/etc/ca.pem".to_owned()),
            ("HOME".to_owned(), "/root".to_owned()),
        ]);
        assert_eq!(
            config.options.get("aws_region").map(String::as_str),
            Some("garage")
        );
        assert_eq!(config.options.len(), 1);
        assert_eq!(config.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert!(
            !format!("{config:?}").contains("garage"),
            "values stay out of Debug"
        );
    }
}
