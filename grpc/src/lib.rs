//! Shale's gRPC front end: the `Data`, `Admin` and `Groups` services clients use, and
//! the `Replication` service with its client, the transport brokers replicate over.
//!
//! The adapters only decode a request, call one [`Service`] method and encode the
//! answer; every error travels in the response as a code and a message (a gRPC
//! status means the call itself failed: transport, decoding).

mod acls;
mod admin;
mod data;
mod groups;
mod limits;
mod markers;
mod replication;
mod restore;
mod security;
mod tables;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;

use shale_broker::error::Error;
use shale_proto::v1::ErrorResult;
use shale_proto::v1::admin_server::AdminServer;
use shale_proto::v1::data_server::DataServer;
use shale_proto::v1::groups_server::GroupsServer;
use shale_proto::v1::replication_server::ReplicationServer;
use shale_service::{RequestContext, Service};
use tonic::Status;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

pub use limits::Limits;
pub use replication::GrpcReplicaConnector;
pub use security::Security;

/// Largest gRPC message sent (a large fetch), and accepted between brokers (replication).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Serves the gRPC services on `listener` (the listener named `name` in the
/// configuration, with its `limits` and `security`) until `shutdown` resolves, then
/// lets in-flight requests finish. The client services decode requests up to
/// `limits.max_request_bytes`; replication, between brokers, up to
/// [`MAX_MESSAGE_BYTES`].
pub async fn serve(
    service: Service,
    name: &str,
    listener: tokio::net::TcpListener,
    limits: Limits,
    security: Security,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let name: Arc<str> = name.into();
    let front = Front {
        service,
        listener: name.clone(),
        security: security.clone(),
    };
    let data = DataServer::new(front.clone())
        .max_decoding_message_size(limits.max_request_bytes)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let admin = AdminServer::new(front.clone())
        .max_decoding_message_size(limits.max_request_bytes)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let groups = GroupsServer::new(front.clone())
        .max_decoding_message_size(limits.max_request_bytes)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let replication = ReplicationServer::new(front.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let check = security::CheckCredentials::layer(
        front.service.clone(),
        name.clone(),
        security.credentials_required,
    );
    let router = Server::builder()
        // HTTP/2 starts at 64 KiB windows; large fetches crawl without bigger ones.
        .initial_stream_window_size(8 * 1024 * 1024)
        .initial_connection_window_size(32 * 1024 * 1024)
        .max_frame_size(1024 * 1024)
        .layer(check)
        .add_service(data)
        .add_service(admin)
        .add_service(groups)
        .add_service(replication);
    match security.tls {
        None => {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            let incoming = limits::limit_connections(incoming, limits.max_connections, name);
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        Some(tls) => {
            let incoming = security::tls_incoming(listener, tls, name.clone());
            let incoming = limits::limit_connections(incoming, limits.max_connections, name);
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
}

/// Every gRPC service of one listener: the core service, the listener's name and
/// security.
#[derive(Clone)]
struct Front {
    service: Service,
    listener: Arc<str>,
    security: Security,
}

impl Front {
    /// The request's context: this listener, the peer's address, and who the caller
    /// authenticated as (UNAUTHENTICATED when the listener requires credentials and
    /// the call's are missing or wrong).
    fn context<T>(&self, request: &tonic::Request<T>) -> Result<RequestContext, Status> {
        let principal = security::principal(&self.security, request)?;
        let peer: Option<SocketAddr> = request
            .extensions()
            .get::<security::PeerInfo>()
            .map(|i| i.addr)
            .or_else(|| request.remote_addr());
        let client_id = request
            .metadata()
            .get("x-client-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut ctx = RequestContext::new(self.listener.clone())
            .with_peer(peer)
            .with_client_id(client_id);
        ctx.principal = principal;
        Ok(ctx)
    }
}

/// Error code and message of a result (code `NONE` and "" for success).
fn error_fields<T>(r: &Result<T, Error>) -> (i32, String) {
    match r {
        Ok(_) => (shale_records::ErrorCode::None as i32, String::new()),
        Err(e) => (e.code() as i32, e.to_string()),
    }
}

fn error_result<T>(r: &Result<T, Error>) -> Option<ErrorResult> {
    let (error_code, error_message) = error_fields(r);
    Some(ErrorResult {
        error_code,
        error_message,
    })
}
