//! The HTTP front end: one more adapter over the broker's `Service`, on each `http`
//! listener. It serves
//! - `/metrics` (Prometheus text) and `/health` (ready or not, for load balancers);
//! - the JSON API under `/api/v1/`, described by `/api/v1/openapi.json`;
//! - the console: a web UI whose assets are compiled into the binary.
//!
//! Every error of the API is JSON: `{"error": KAFKA_ERROR_NAME, "message": sentence}`
//! with a status that says whose fault it is (404 unknown topic, group or partition,
//! 400 a bad parameter, named). Request bodies above the listener's
//! `max_request_bytes` are refused (413) before they are read.

mod api;
mod console;
mod groups;
mod rates;
mod records;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use shale_broker::error::Error;
use shale_broker::service::{RequestContext, Service};
use shale_records::ErrorCode;
use tokio::net::TcpListener;

pub use rates::Rates;

/// What every handler reaches.
#[derive(Clone)]
pub(crate) struct AppState {
    pub service: Service,
    pub listener: Arc<str>,
    pub rates: Arc<Rates>,
}

impl AppState {
    pub fn ctx(&self) -> RequestContext {
        RequestContext::new(self.listener.clone())
    }
}

/// Serves one `http` listener until the node stops. `rates` samples the broker's
/// traffic for the console's charts (one sampler per broker, shared by its listeners).
pub async fn serve(
    service: Service,
    name: &str,
    listener: TcpListener,
    max_request_bytes: usize,
    rates: Arc<Rates>,
) {
    let state = AppState {
        service: service.clone(),
        listener: name.into(),
        rates,
    };
    let app = router(state).layer(DefaultBodyLimit::max(max_request_bytes));
    let stopping = service.stopping();
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stopping)
        .await
    {
        tracing::error!(listener = name, error = %e, "HTTP listener failed");
    }
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(api::metrics))
        .route("/health", axum::routing::get(api::health))
        .nest("/api/v1", api::routes())
        .merge(console::routes())
        .with_state(state)
}

/// An API error: a status, Kafka's error name and a sentence.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: String,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status,
            error: error.into(),
            message: message.into(),
        }
    }

    /// A parameter that cannot be used (400, naming it).
    pub fn param(name: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest.to_string(),
            format!("parameter '{name}': {why}"),
        )
    }

    pub fn not_found(error: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, error.to_string(), message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let code = e.code();
        use ErrorCode::*;
        let status = match code {
            UnknownTopicOrPartition | GroupIdNotFound | UnknownMemberId => StatusCode::NOT_FOUND,
            TopicAlreadyExists => StatusCode::CONFLICT,
            InvalidRequest
            | InvalidTopicException
            | InvalidConfig
            | InvalidPartitions
            | InvalidReplicationFactor
            | InvalidGroupId
            | PolicyViolation
            | OffsetOutOfRange
            | InvalidReplicaAssignment
            | NonEmptyGroup => StatusCode::BAD_REQUEST,
            _ if code.is_retriable() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, code.to_string(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.error, "message": self.message });
        (self.status, axum::Json(body)).into_response()
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;
