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
mod frame;
#[cfg(test)]
mod fuzz_tests;
mod handlers;
mod limits;
mod versions;

use std::sync::Arc;
use std::time::Duration;

use shale_broker::service::Service;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use limits::Limits;
pub use versions::SUPPORTED;

// The tests decode hostile frames too.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;

/// Accepts Kafka connections on `listener` (the listener named `name`) until the
/// node stops. Beyond `limits.max_connections` open connections, new ones are closed
/// at once.
pub async fn serve(service: Service, name: &str, listener: TcpListener, limits: Limits) {
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
        let (service_, name_) = (service.clone(), name.clone());
        service.tasks().spawn(async move {
            conn::serve(service_, name_, limits, stream, peer).await;
            drop(permit);
        });
    }
}
