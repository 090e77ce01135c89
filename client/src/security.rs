//! Connecting to listeners that use TLS or require credentials: the CA the brokers'
//! certificates are checked against, a client certificate for listeners that ask for
//! one, and a user and password sent with every call.

use base64::Engine;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::{Error, Result};

/// How to reach a secured listener. The default: plaintext, anonymous.
#[derive(Clone, Default)]
pub struct ClientSecurity {
    pub tls: Option<TlsSettings>,
    /// A user and password, sent with every call (checked against the user's SCRAM
    /// credential; use TLS so they do not cross the network in the clear).
    pub credentials: Option<(String, String)>,
}

/// TLS settings, as PEM.
#[derive(Clone)]
pub struct TlsSettings {
    /// CA certificates the brokers' certificates are checked against.
    pub ca: Vec<u8>,
    /// (certificate, key) for listeners that require a client certificate.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientSecurity {
    /// `endpoint` with TLS, when set.
    pub(crate) fn apply(&self, endpoint: Endpoint) -> Result<Endpoint> {
        let Some(tls) = &self.tls else {
            return Ok(endpoint);
        };
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca));
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint
            .tls_config(config)
            .map_err(|e| Error::Invalid(format!("TLS settings: {e}")))
    }

    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// What adds the credentials to each call.
    pub(crate) fn interceptor(&self) -> Result<Credentials> {
        let Some((user, password)) = &self.credentials else {
            return Ok(Credentials(None));
        };
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let value = format!("Basic {encoded}").parse().map_err(|_| {
            Error::Invalid("the user or password is not valid in gRPC metadata".into())
        })?;
        Ok(Credentials(Some(value)))
    }
}

/// Adds `authorization: Basic …` to each call.
#[derive(Clone)]
pub struct Credentials(Option<MetadataValue<Ascii>>);

impl Interceptor for Credentials {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// A channel to one broker, adding the credentials to every call.
pub(crate) type Chan = InterceptedService<Channel, Credentials>;
