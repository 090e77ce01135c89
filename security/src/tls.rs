//! TLS for listeners: a server configuration built from PEM files, rebuilt when the
//! files change (a renewed certificate is served to new connections without a
//! restart), and the principal of a client certificate.
//!
//! Files are checked at most once a second, when a connection arrives. A change that
//! does not load (a half-written file, a key that does not match) keeps the last good
//! configuration and is logged; the next check tries again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// Where a listener's certificate, key and (for mTLS) trusted client CAs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by one of these CAs.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} holds no {what}", path.display())]
    Empty { path: PathBuf, what: &'static str },
    #[error("{}: {reason}", path.display())]
    Pem { path: PathBuf, reason: String },
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("invalid client CA: {0}")]
    ClientCa(String),
}

const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A listener's TLS server configuration, reloaded when its files change.
pub struct TlsServer {
    files: TlsFiles,
    /// Application protocols offered in the handshake (ALPN): `h2` for gRPC.
    alpn: Vec<Vec<u8>>,
    loaded: Mutex<Loaded>,
}

struct Loaded {
    checked: Instant,
    stamps: Vec<Option<(SystemTime, u64)>>,
    acceptor: TlsAcceptor,
}

impl TlsServer {
    /// Loads the files now: a listener does not start with files that do not load.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        Self::load_with_alpn(files, Vec::new())
    }

    /// Like [`TlsServer::load`], offering the application protocols `alpn`.
    pub fn load_with_alpn(files: TlsFiles, alpn: Vec<Vec<u8>>) -> Result<Self, TlsError> {
        let stamps = stamps(&files);
        let acceptor = TlsAcceptor::from(Arc::new(server_config(&files, &alpn)?));
        Ok(Self {
            files,
            alpn,
            loaded: Mutex::new(Loaded {
                checked: Instant::now(),
                stamps,
                acceptor,
            }),
        })
    }

    pub fn requires_client_cert(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The acceptor for a new connection: the files' current contents.
    pub fn acceptor(&self) -> TlsAcceptor {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.checked.elapsed() >= CHECK_EVERY {
            loaded.checked = Instant::now();
            let now = stamps(&self.files);
            if now != loaded.stamps {
                match server_config(&self.files, &self.alpn) {
                    Ok(config) => {
                        loaded.acceptor = TlsAcceptor::from(Arc::new(config));
                        loaded.stamps = now;
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS files changed but do not load; serving the previous ones");
                    }
                }
            }
        }
        loaded.acceptor.clone()
    }
}

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TlsServer {
    /// Runs the server side of a new connection's handshake (at most
    /// [`HANDSHAKE_TIMEOUT`]), and reads the principal of the client's certificate.
    /// `None` when the connection must close: the handshake failed (an untrusted or
    /// missing client certificate, audited) or timed out, or a verified certificate's
    /// subject cannot be read (nobody, not anonymous).
    pub async fn accept<S>(
        &self,
        stream: S,
        listener: &str,
        peer: std::net::SocketAddr,
    ) -> Option<(tokio_rustls::server::TlsStream<S>, Option<String>)>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor().accept(stream))
            .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::warn!(target: "audit", listener, %peer, error = %e, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                tracing::debug!(listener, %peer, "TLS handshake timed out");
                return None;
            }
        };
        let principal = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(certificate_principal);
        if self.requires_client_cert() && principal.is_none() {
            tracing::warn!(target: "audit", listener, %peer,
                "client certificate without a readable subject");
            return None;
        }
        Some((stream, principal))
    }
}

/// TLS handshakes one listener runs at once (each holds a socket for up to
/// [`HANDSHAKE_TIMEOUT`]).
const MAX_HANDSHAKES: usize = 1024;

/// A connection of a TLS listener, its handshake done.
pub struct Accepted {
    pub stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    pub peer: std::net::SocketAddr,
    /// The subject of the client's certificate, if it showed one.
    pub principal: Option<String>,
}

/// The connections of a TLS listener (the one named `name`), handshakes done: each
/// handshake runs on its own task, so a slow or silent client holds up no one.
/// Accepting stops when the receiver is dropped.
pub fn accept_loop(
    listener: tokio::net::TcpListener,
    tls: Arc<TlsServer>,
    name: Arc<str>,
) -> tokio::sync::mpsc::Receiver<Accepted> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            // Past MAX_HANDSHAKES unfinished handshakes, new connections wait in the
            // kernel's backlog.
            let Ok(permit) = handshakes.clone().acquire_owned().await else {
                return;
            };
            let (stream, peer) = tokio::select! {
                _ = tx.closed() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, most likely: wait instead of spinning.
                        tracing::warn!(listener = %name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let (tx, tls, name) = (tx.clone(), tls.clone(), name.clone());
            tokio::spawn(async move {
                let accepted = tls.accept(stream, &name, peer).await;
                drop(permit);
                if let Some((stream, principal)) = accepted {
                    let _ = tx
                        .send(Accepted {
                            stream,
                            peer,
                            principal,
                        })
                        .await;
                }
            });
        }
    });
    rx
}

/// Each file's modification time and length (a rewrite within the same second
/// usually changes the length).
fn stamps(files: &TlsFiles) -> Vec<Option<(SystemTime, u64)>> {
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    })
    .collect()
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.into(),
        source,
    })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.into(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.into(),
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

/// The provider every Shale TLS configuration uses (ring; the process may link
/// others through its dependencies, so none is left to chance).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(files: &TlsFiles, alpn: &[Vec<u8>]) -> Result<rustls::ServerConfig, TlsError> {
    let chain = certificates(&files.cert)?;
    let key_pem = read(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        path: files.key.clone(),
        reason: format!("no private key: {e}"),
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider())
                .build()
                .map_err(|e| TlsError::ClientCa(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}

/// The principal of a verified client certificate: `User:` and its subject as RFC
/// 2253 writes it (`CN=client,OU=Ops,O=Example`), as Kafka's default names it.
pub fn certificate_principal(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter_rdn() {
        let attrs: Vec<String> = rdn
            .iter()
            .map(|a| {
                let key = x509_parser::objects::oid2abbrev(a.attr_type(), registry)
                    .map(str::to_string)
                    .unwrap_or_else(|_| a.attr_type().to_id_string());
                let value = a.as_str().unwrap_or("");
                format!("{key}={}", escape_rfc2253(value))
            })
            .collect();
        rdns.push(attrs.join("+"));
    }
    rdns.reverse();
    Some(format!("User:{}", rdns.join(",")))
}

fn escape_rfc2253(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        let edge = (i == 0 && (c == ' ' || c == '#')) || (i + 1 == v.chars().count() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
