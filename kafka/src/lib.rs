//! Shale's Kafka wire-protocol front end: existing Kafka clients, shippers and tools
//! talk to Shale unchanged. Requests are decoded with the `kafka-protocol` crate,
//! handed to the core [`Service`] (the same calls gRPC makes), and answered in the
//! version the client asked for. Record batches stay `Bytes` from the socket to the
//! log and from the log to the socket.
//!
//! See `versions` for the APIs and versions served, `conn` for framing, pipelining
//! and limits. A process serving this listener must use [`alloc::Allocator`] as its
//! global allocator (see there why).

pub mod alloc;
mod conn;
mod fetch_response;
mod fetch_session;
mod frame;
#[cfg(test)]
mod fuzz_tests;
mod handlers;
mod legacy;
mod limits;
mod sasl;
mod versions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shale_security::ListenerSecurity;
use shale_security::tls::{TlsError, TlsServer};
use shale_service::Service;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

pub use limits::Limits;
pub use sasl::SaslConfig;
pub use versions::SUPPORTED;

use sasl::Session;

// The tests decode hostile frames too.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;

/// A listener's TLS and SASL.
#[derive(Clone, Default)]
pub struct Security {
    pub tls: Option<Arc<TlsServer>>,
    pub sasl: Option<SaslConfig>,
}

impl Security {
    /// Loads the listener's TLS files (a listener whose files do not load does not
    /// start).
    pub fn load(l: &ListenerSecurity) -> Result<Self, TlsError> {
        Ok(Self {
            tls: l.tls_server(&[])?,
            sasl: l.protocol.uses_sasl().then(|| SaslConfig {
                mechanisms: l.sasl_mechanisms.clone(),
                max_reauth_ms: l.max_reauth_ms,
            }),
        })
    }
}

/// Accepts Kafka connections on `listener` (the listener named `name`) until the
/// node stops. Beyond `limits.max_connections` open connections, new ones are closed
/// at once.
pub async fn serve(
    service: Service,
    name: &str,
    listener: TcpListener,
    limits: Limits,
    security: Security,
) {
    let name: Arc<str> = name.into();
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let mut stopping = std::pin::pin!(service.stopping());
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stopping => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: wait instead of spinning.
                    tracing::warn!(listener = %name, error = %e, "Kafka accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!(listener = %name, %peer, max = limits.max_connections,
                "too many Kafka connections, closing the new one");
            continue;
        };
        let (service_, name_, security) = (service.clone(), name.clone(), security.clone());
        service.tasks().spawn(async move {
            connection(service_, name_, limits, security, stream, peer).await;
            drop(permit);
        });
    }
}

/// One accepted connection: its TLS handshake, if any, then its requests.
async fn connection(
    service: Service,
    name: Arc<str>,
    limits: Limits,
    security: Security,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = security.tls else {
        let session = Session::new(security.sasl, None, peer, name.clone());
        let (rd, wr) = stream.into_split();
        return conn::serve(service, name, limits, rd, wr, peer, session).await;
    };
    let Some((stream, principal)) = tls.accept(stream, &name, peer).await else {
        return;
    };
    let session = Session::new(security.sasl, principal, peer, name.clone());
    let (rd, wr) = tokio::io::split(stream);
    conn::serve(service, name, limits, rd, wr, peer, session).await
}
