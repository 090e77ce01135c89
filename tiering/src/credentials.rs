//! S3 credentials from `aws-config`'s default chain (environment, shared config and
//! credentials files with profiles, web identity, ECS, instance metadata), for stores
//! whose keys are not given explicitly. Credentials are cached and refreshed a few
//! minutes before they expire.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use object_store::CredentialProvider;
use object_store::aws::AwsCredential;
use tokio::sync::Mutex;

/// Refresh this long before expiry.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct AwsConfigCredentials {
    provider: SharedCredentialsProvider,
    cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl AwsConfigCredentials {
    /// The default chain, or `None` when it has no credentials provider at all.
    pub async fn from_default_chain() -> Option<Self> {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let provider = config.credentials_provider()?;
        Some(Self {
            provider,
            cached: Mutex::new(None),
        })
    }
}

#[async_trait::async_trait]
impl CredentialProvider for AwsConfigCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        // A tokio mutex: held across the refresh so concurrent requests share one.
        let mut cached = self.cached.lock().await;
        if let Some((credential, expiry)) = cached.as_ref() {
            let fresh = expiry.is_none_or(|e| SystemTime::now() + REFRESH_MARGIN < e);
            if fresh {
                return Ok(credential.clone());
            }
        }
        let c = self.provider.provide_credentials().await.map_err(|e| {
            object_store::Error::Generic {
                store: "S3",
                source: format!("no AWS credentials from the default chain: {e}").into(),
            }
        })?;
        let credential = Arc::new(AwsCredential {
            key_id: c.access_key_id().to_string(),
            secret_key: c.secret_access_key().to_string(),
            token: c.session_token().map(str::to_string),
        });
        *cached = Some((credential.clone(), c.expiry()));
        Ok(credential)
    }
}
