//! gRPC adapters: decode a request, call the broker's domain methods, encode the
//! answer. No domain logic lives here; the Kafka wire listener will sit beside it.

mod admin;
mod data;
mod groups;

use std::sync::Arc;

use shale_proto::v1::ErrorResult;
use shale_proto::v1::admin_server::AdminServer;
use shale_proto::v1::data_server::DataServer;
use shale_proto::v1::groups_server::GroupsServer;
use shale_proto::v1::replication_server::ReplicationServer;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::broker::Broker;
use crate::error::Error;

/// Largest gRPC message accepted or sent (a produce request of many batches, a large fetch).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Serves the data and admin services on `listener` until `shutdown` resolves, then
/// lets in-flight requests finish.
pub async fn serve(
    broker: Arc<Broker>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let data = DataServer::new(data::DataService::new(broker.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let admin = AdminServer::new(admin::AdminService::new(broker.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let groups = GroupsServer::new(groups::GroupsService::new(broker.clone()));
    let replication = ReplicationServer::new(crate::replication::ReplicationService::new(broker))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Server::builder()
        // HTTP/2 starts at 64 KiB windows; large fetches crawl without bigger ones.
        .initial_stream_window_size(8 * 1024 * 1024)
        .initial_connection_window_size(32 * 1024 * 1024)
        .max_frame_size(1024 * 1024)
        .add_service(data)
        .add_service(admin)
        .add_service(groups)
        .add_service(replication)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Error code and message of a failed call (code `NONE` and "" for success).
pub(crate) fn error_fields(e: Option<&Error>) -> (i32, String) {
    match e {
        None => (shale_proto::ErrorCode::None as i32, String::new()),
        Some(e) => (e.code() as i32, e.to_string()),
    }
}

pub(crate) fn error_result<T>(r: &Result<T, Error>) -> Option<ErrorResult> {
    let (error_code, error_message) = error_fields(r.as_ref().err());
    Some(ErrorResult {
        error_code,
        error_message,
    })
}
