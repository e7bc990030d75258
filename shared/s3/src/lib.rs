//! The S3 client of the sync store's object storage: a bucket's settings from the standard
//! `AWS_*` variables, https with an operator's CA, plain http only to this machine, and bounded
//! requests.
//!
//! `snug-revstore` keeps image bytes in a [`Bucket`] over any [`ObjectStorage`]; this crate is the
//! S3 one, over the `object_store` crate's client, so the store itself stays free of HTTP clients
//! (the domain crates' rule, checked by tidy). Requests are bounded: a connect timeout, a request timeout and a few
//! quick retries, so a store that is down makes a put fail within seconds
//! (`STORAGE_UNAVAILABLE`) instead of hanging on the client library's default retry budget of
//! minutes.

use std::{collections::BTreeMap, fmt, ops::Range, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{TryStreamExt as _, future::BoxFuture};
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions,
    PutPayload, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    path::Path,
};
use snug_revstore::{Bucket, Created, Listed, ObjectError, ObjectStorage, Timestamp};

/// Why a bucket cannot be used as configured.
#[derive(Debug, thiserror::Error)]
#[error("object store: {0}")]
pub struct BucketError(String);

/// An `object_store` client as the store's [`ObjectStorage`].
#[derive(Debug)]
pub struct Storage(Arc<dyn ObjectStore>);

impl Storage {
    /// Over any `object_store` client bound to one bucket.
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self(store)
    }
}

fn failed(e: object_store::Error) -> ObjectError {
    ObjectError(Box::new(e))
}

impl ObjectStorage for Storage {
    fn put_if_absent(
        &self,
        key: &str,
        bytes: Bytes,
    ) -> BoxFuture<'_, Result<Created, ObjectError>> {
        let path = Path::from(key);
        Box::pin(async move {
            let create = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match self
                .0
                .put_opts(&path, PutPayload::from(bytes), create)
                .await
            {
                Ok(_) => Ok(Created::Written),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => Ok(Created::Occupied),
                Err(
                    object_store::Error::NotImplemented { .. }
                    | object_store::Error::NotSupported { .. },
                ) => Ok(Created::Unsupported),
                Err(e) => Err(failed(e)),
            }
        })
    }

    fn put(&self, key: &str, bytes: Bytes) -> BoxFuture<'_, Result<(), ObjectError>> {
        let path = Path::from(key);
        Box::pin(async move {
            self.0
                .put(&path, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(failed)
        })
    }

    fn get(&self, key: &str) -> BoxFuture<'_, Result<Option<Bytes>, ObjectError>> {
        let path = Path::from(key);
        Box::pin(async move {
            match self.0.get(&path).await {
                Ok(result) => result.bytes().await.map(Some).map_err(failed),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(failed(e)),
            }
        })
    }

    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Option<Bytes>, ObjectError>> {
        let path = Path::from(key);
        Box::pin(async move {
            match self.0.get_range(&path, range).await {
                Ok(bytes) => Ok(Some(bytes)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(failed(e)),
            }
        })
    }

    fn size(&self, key: &str) -> BoxFuture<'_, Result<Option<u64>, ObjectError>> {
        let path = Path::from(key);
        Box::pin(async move {
            match self.0.head(&path).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(failed(e)),
            }
        })
    }

    fn list(&self, prefix: &str) -> BoxFuture<'_, Result<Vec<Listed>, ObjectError>> {
        let prefix = Path::from(prefix);
        Box::pin(async move {
            let metas: Vec<_> = self
                .0
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(failed)?;
            Ok(metas
                .into_iter()
                .map(|m| Listed {
                    key: m.location.to_string(),
                    modified: Timestamp::from_unix_millis(m.last_modified.timestamp_millis()),
                })
                .collect())
        })
    }

    fn delete(&self, key: &str) -> BoxFuture<'_, Result<(), ObjectError>> {
        let path = Path::from(key);
        Box::pin(async move {
            match self.0.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(failed(e)),
            }
        })
    }
}

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

    /// The bucket, over an S3 client built from this configuration.
    pub fn open(&self) -> Result<Bucket, BucketError> {
        let config = self;
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
            let pem = std::fs::read(path)
                .map_err(|e| BucketError(format!("CA file {}: {e}", path.display())))?;
            for cert in object_store::Certificate::from_pem_bundle(&pem)
                .map_err(|e| BucketError(e.to_string()))?
            {
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
            .map_err(|e| BucketError(e.to_string()))?;
        Ok(Bucket::new(
            Arc::new(Storage::new(Arc::new(store))),
            format!("s3://{bucket}/{prefix}"),
            &prefix,
        ))
    }

    /// The bucket and prefix `url` names.
    fn location(&self) -> Result<(String, String), BucketError> {
        let rest = self.url.strip_prefix("s3://").ok_or_else(|| {
            BucketError(format!(
                "object store URL {:?} is not s3://BUCKET/PREFIX",
                self.url
            ))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(BucketError(format!(
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
