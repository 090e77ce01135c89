//! A listener's security settings: Kafka's four security protocols, the TLS files,
//! the SASL mechanisms it offers and how long an authenticated session lasts.
//!
//! ```toml
//! [listeners.kafka]
//! security_protocol = "SASL_SSL"          # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL. Default: PLAINTEXT.
//! tls_cert = "/etc/shale/broker.pem"      # certificate chain, PEM (SSL, SASL_SSL)
//! tls_key = "/etc/shale/broker.key"       # its private key, PEM
//! tls_client_ca = "/etc/shale/ca.pem"     # set: clients must show a certificate it signed (mTLS)
//! sasl_mechanisms = ["SCRAM-SHA-512"]     # sasl.enabled.mechanisms. Default: both SCRAM ones.
//! connections_max_reauth_ms = 3600000     # connections.max.reauth.ms. Default: 0 (no expiry).
//! ```

use std::path::PathBuf;

use super::sasl::SaslMechanism;
use super::scram::ScramMechanism;
use super::secrets::Secret;
use super::tls::TlsFiles;

/// Kafka's `security.protocol` of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            Self::Plaintext,
            Self::Ssl,
            Self::SaslPlaintext,
            Self::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s))
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A listener's resolved security settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    /// Set exactly when the protocol uses TLS.
    pub tls: Option<TlsFiles>,
    /// What a SASL client may choose from (SASL protocols only).
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// How long an authenticated SASL session lasts before the client must
    /// authenticate again (KIP-368); 0: for the connection's life.
    pub max_reauth_ms: u64,
}

impl Default for ListenerSecurity {
    fn default() -> Self {
        Self {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl_mechanisms: Vec::new(),
            max_reauth_ms: 0,
        }
    }
}

/// The keys of `[listeners.<name>]` that set its security, as written.
#[derive(Debug, Default, Clone)]
pub struct SecurityKeys {
    pub security_protocol: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub sasl_mechanisms: Option<Vec<String>>,
    pub connections_max_reauth_ms: Option<u64>,
}

impl ListenerSecurity {
    /// Resolves and checks a listener's keys; an error names the key (its last part)
    /// and says what is wrong. SASL on a gRPC listener means credentials on each call,
    /// on an HTTP one a login.
    pub fn resolve(keys: SecurityKeys) -> Result<Self, (&'static str, String)> {
        let protocol = match keys.security_protocol.as_deref() {
            None => SecurityProtocol::Plaintext,
            Some(s) => SecurityProtocol::parse(s).ok_or_else(|| {
                (
                    "security_protocol",
                    format!("must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not '{s}'"),
                )
            })?,
        };
        let tls = match (protocol.uses_tls(), keys.tls_cert, keys.tls_key) {
            (true, Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: keys.tls_client_ca,
            }),
            (true, None, _) => return Err(("tls_cert", format!("{} needs it", protocol.name()))),
            (true, _, None) => return Err(("tls_key", format!("{} needs it", protocol.name()))),
            (false, cert, key) => {
                if cert.is_some() || key.is_some() || keys.tls_client_ca.is_some() {
                    return Err((
                        "security_protocol",
                        "TLS files are set: use SSL or SASL_SSL".into(),
                    ));
                }
                None
            }
        };
        let sasl_mechanisms = match (protocol.uses_sasl(), keys.sasl_mechanisms) {
            (false, Some(_)) => {
                return Err((
                    "sasl_mechanisms",
                    format!("{} does not use SASL", protocol.name()),
                ));
            }
            (false, None) => Vec::new(),
            (true, None) => ScramMechanism::ALL
                .into_iter()
                .map(SaslMechanism::Scram)
                .collect(),
            (true, Some(names)) => {
                let mut out = Vec::new();
                for name in names {
                    let m = SaslMechanism::from_name(&name).ok_or_else(|| {
                        (
                            "sasl_mechanisms",
                            format!("'{name}' is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
                        )
                    })?;
                    if !out.contains(&m) {
                        out.push(m);
                    }
                }
                if out.is_empty() {
                    return Err(("sasl_mechanisms", "must name at least one".into()));
                }
                out
            }
        };
        Ok(Self {
            protocol,
            tls,
            sasl_mechanisms,
            max_reauth_ms: keys.connections_max_reauth_ms.unwrap_or(0),
        })
    }
}

impl ListenerSecurity {
    /// The listener's TLS server, its files loaded now (`None` without TLS), offering
    /// the application protocols `alpn` (`h2` for gRPC).
    pub fn tls_server(
        &self,
        alpn: &[&[u8]],
    ) -> Result<Option<std::sync::Arc<super::tls::TlsServer>>, super::tls::TlsError> {
        let Some(files) = self.tls.clone() else {
            return Ok(None);
        };
        let alpn = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Some(std::sync::Arc::new(
            super::tls::TlsServer::load_with_alpn(files, alpn)?,
        )))
    }
}

/// How a follower connects to its leaders: the inter-broker listener's security, seen
/// from the client's side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterBrokerClient {
    /// TLS: the CA that leaders' certificates are checked against, and the certificate
    /// and key to present when the listener requires client certificates.
    pub tls: Option<ClientTls>,
    /// SASL: the user and password.
    pub credentials: Option<(String, Secret)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub ca: PathBuf,
    /// (certificate, key)
    pub identity: Option<(PathBuf, PathBuf)>,
}
