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
use crate::stats::ErrorCounts;

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
    let replication =
        ReplicationServer::new(crate::replication::ReplicationService::new(broker.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Server::builder()
        .layer(TimedLayer(broker.clone()))
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

/// Error code and message of a failed call (code `NONE` and "" for success); counts
/// the error in `errors` (the metrics' errors by code).
pub(crate) fn error_fields(errors: &ErrorCounts, e: Option<&Error>) -> (i32, String) {
    match e {
        None => (shale_records::ErrorCode::None as i32, String::new()),
        Some(e) => {
            errors.count(e.code());
            (e.code() as i32, e.to_string())
        }
    }
}

pub(crate) fn error_result<T>(errors: &ErrorCounts, r: &Result<T, Error>) -> Option<ErrorResult> {
    let (error_code, error_message) = error_fields(errors, r.as_ref().err());
    Some(ErrorResult {
        error_code,
        error_message,
    })
}

/// Times every gRPC call into the latency histograms, by method (`Produce`, `Fetch`…).
#[derive(Clone)]
struct TimedLayer(Arc<Broker>);

impl<S> tower_layer::Layer<S> for TimedLayer {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            broker: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Timed<S> {
    inner: S,
    broker: Arc<Broker>,
}

type BoxedFuture<T, E> = std::pin::Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> tower_service::Service<tonic::codegen::http::Request<B>> for Timed<S>
where
    S: tower_service::Service<tonic::codegen::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxedFuture<S::Response, S::Error>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        let api = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let started = std::time::Instant::now();
        let answer = self.inner.call(request);
        let broker = self.broker.clone();
        Box::pin(async move {
            let response = answer.await;
            broker
                .request_stats
                .latency
                .observe("grpc", &api, started.elapsed());
            response
        })
    }
}
