//! Opening the object store a URL names, checked at start-up so that a bad URL, a
//! missing bucket or wrong credentials fail before the first upload.
//!
//! - `s3://bucket[/prefix]`: any S3-compatible server. Endpoint, region, path-style and
//!   plain HTTP come from [`S3Options`] (MinIO and `s3s-fs` need `endpoint`,
//!   `path_style = true` and `allow_http = true`); credentials from the options, or
//!   else `aws-config`'s default chain (see [`crate::credentials`]).
//!   Requests that fail with 5xx or time out are retried with backoff.
//! - `file://PATH`: a local directory (created if missing): the embedded default.
//! - `memory://`: in memory, for experiments.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

/// The object store as the rest of Shale holds it.
pub type ObjectStoreRef = Arc<dyn ObjectStore>;

/// Settings of an `s3://` store (the broker's `[object_store]` config section). Unset
/// fields fall back to the `AWS_*` environment.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3Options {
    /// e.g. `http://127.0.0.1:9000` for MinIO.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`) instead of virtual hosts.
    pub path_style: Option<bool>,
    /// Allow `http://` endpoints.
    pub allow_http: Option<bool>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// A file holding the secret access key (read by the broker at start).
    pub secret_access_key_file: Option<std::path::PathBuf>,
    /// Per-request timeout in milliseconds. Default: [`S3Options::DEFAULT_REQUEST_TIMEOUT_MS`].
    pub request_timeout_ms: Option<u64>,
    /// Retries of a failed request (5xx, timeouts, connection errors). Default:
    /// [`S3Options::DEFAULT_MAX_RETRIES`].
    pub max_retries: Option<usize>,
}

impl S3Options {
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
    pub const DEFAULT_MAX_RETRIES: usize = 5;
}

/// The secret access key is never shown.
impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "***"),
            )
            .field("secret_access_key_file", &self.secret_access_key_file)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "object store URL '{0}' is not supported: use s3://BUCKET[/PREFIX], file://PATH or memory://"
    )]
    UnsupportedUrl(String),
    #[error("object store URL '{url}' is invalid: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("object store directory {path} cannot be used")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("object store '{url}': endpoint {endpoint} unreachable ({reason})")]
    Unreachable {
        url: String,
        endpoint: String,
        reason: String,
    },
    #[error("object store '{url}': access denied ({detail}): check the credentials")]
    AccessDenied { url: String, detail: String },
    #[error("object store '{url}': bucket '{bucket}' does not exist")]
    NoSuchBucket { url: String, bucket: String },
    #[error(
        "object store '{url}': no credentials: set access_key_id and secret_access_key in \
         [object_store], or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an AWS profile"
    )]
    NoCredentials { url: String },
    #[error("object store '{url}' refused the start-up check: {reason}")]
    CheckFailed { url: String, reason: String },
    #[error("object store error")]
    Store(#[from] object_store::Error),
}

/// Opens and checks the object store `url` names.
pub async fn open(url: &str, s3: &S3Options) -> Result<ObjectStoreRef, StoreError> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(StoreError::InvalidUrl {
                url: url.into(),
                reason: "the bucket name is missing".into(),
            });
        }
        let allow_http = s3.allow_http.unwrap_or_else(|| {
            std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        });
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_allow_http(allow_http)
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(Duration::from_millis(
                        s3.request_timeout_ms
                            .unwrap_or(S3Options::DEFAULT_REQUEST_TIMEOUT_MS),
                    ))
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_allow_http(allow_http),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: s3.max_retries.unwrap_or(S3Options::DEFAULT_MAX_RETRIES),
                retry_timeout: Duration::from_secs(120),
            });
        if let Some(path_style) = s3.path_style {
            builder = builder.with_virtual_hosted_style_request(!path_style);
        }
        if let Some(endpoint) = &s3.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &s3.region {
            builder = builder.with_region(region);
        }
        match (&s3.access_key_id, &s3.secret_access_key) {
            (Some(key), Some(secret)) => {
                builder = builder
                    .with_access_key_id(key)
                    .with_secret_access_key(secret);
            }
            (None, None) => {
                if let Some(chain) =
                    crate::credentials::AwsConfigCredentials::from_default_chain().await
                {
                    builder = builder.with_credentials(Arc::new(chain));
                }
            }
            _ => {
                return Err(StoreError::InvalidUrl {
                    url: url.into(),
                    reason: "give both access_key_id and secret_access_key, or neither".into(),
                });
            }
        }
        let store = builder.build().map_err(|e| StoreError::InvalidUrl {
            url: url.into(),
            reason: e.to_string(),
        })?;
        let store: ObjectStoreRef = match prefix.trim_matches('/') {
            "" => Arc::new(store),
            p => Arc::new(PrefixStore::new(store, p)),
        };
        // One LIST at start-up proves the bucket exists and the credentials work.
        let endpoint = s3
            .endpoint
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT").ok())
            .unwrap_or_else(|| format!("https://{bucket}.s3.amazonaws.com"));
        store
            .list_with_delimiter(None)
            .await
            .map_err(|e| start_up_error(url, bucket, &endpoint, &e))?;
        Ok(store)
    } else if let Some(path) = url.strip_prefix("file://") {
        let path = PathBuf::from(path);
        std::fs::create_dir_all(&path).map_err(|source| StoreError::Directory {
            path: path.clone(),
            source,
        })?;
        let abs = std::fs::canonicalize(&path)
            .map_err(|source| StoreError::Directory { path, source })?;
        Ok(Arc::new(LocalFileSystem::new_with_prefix(abs)?))
    } else if url == "memory://" || url == "memory:///" {
        Ok(Arc::new(InMemory::new()))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_string()))
    }
}

/// The directory of a `file://PATH` store (as [`open`] resolves it), whose writes the
/// uploader fsyncs; `None` for other stores or a directory that cannot be resolved.
pub fn local_root(url: &str) -> Option<PathBuf> {
    std::fs::canonicalize(url.strip_prefix("file://")?).ok()
}

/// What a failed start-up LIST means, in one line: no credentials, access denied, no
/// such bucket, or an endpoint that cannot be reached (S3's XML error code and message
/// are kept; the rest of the response is not).
fn start_up_error(url: &str, bucket: &str, endpoint: &str, e: &object_store::Error) -> StoreError {
    let text = e.to_string();
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))? + start;
        Some(text[start..end].to_string())
    };
    let (code, message) = (tag("Code"), tag("Message"));
    let url = url.to_string();
    if text.contains("no AWS credentials") {
        return StoreError::NoCredentials { url };
    }
    if code.as_deref() == Some("NoSuchBucket") || text.contains("404 Not Found") {
        return StoreError::NoSuchBucket {
            url,
            bucket: bucket.to_string(),
        };
    }
    let denied = matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) || text.contains("403 Forbidden")
        || text.contains("401 Unauthorized");
    if denied {
        let detail = match (code, message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c,
            _ => "403 Forbidden".to_string(),
        };
        return StoreError::AccessDenied { url, detail };
    }
    if text.contains("error sending request") || text.contains("timed out") {
        // The innermost cause is the one people recognise ("Connection refused").
        let mut reason = text.clone();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        return StoreError::Unreachable {
            url,
            endpoint: endpoint.to_string(),
            reason,
        };
    }
    let reason = match (code, message) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        _ => text.lines().next().unwrap_or_default().to_string(),
    };
    StoreError::CheckFailed { url, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_url_creates_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects");
        open(&format!("file://{}", path.display()), &S3Options::default())
            .await
            .unwrap();
        assert!(path.is_dir());
    }

    #[tokio::test]
    async fn bad_urls_are_refused_with_the_reason() {
        let none = S3Options::default();
        assert!(matches!(
            open("ftp://x", &none).await,
            Err(StoreError::UnsupportedUrl(_))
        ));
        assert!(matches!(
            open("s3://", &none).await,
            Err(StoreError::InvalidUrl { .. })
        ));
        assert!(open("memory://", &none).await.is_ok());
        // Nothing listens on port 1: a clear start-up error, after a bounded retry.
        let unreachable = S3Options {
            endpoint: Some("http://127.0.0.1:1".into()),
            allow_http: Some(true),
            path_style: Some(true),
            access_key_id: Some("k".into()),
            secret_access_key: Some("s".into()),
            region: Some("us-east-1".into()),
            max_retries: Some(0),
            ..S3Options::default()
        };
        let err = open("s3://bucket/prefix", &unreachable)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err}");
        assert!(err.to_string().contains("s3://bucket/prefix"));
    }
}
