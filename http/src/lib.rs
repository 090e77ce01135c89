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

mod acls;
mod api;
mod auth;
mod console;
mod groups;
mod iceberg;
mod listener;
mod rates;
mod records;

use std::sync::Arc;

use auth::PeerInfo;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use shale_broker::error::Error;
use shale_records::ErrorCode;
use shale_security::ListenerSecurity;
use shale_security::tls::{TlsError, TlsServer, accept_loop};
use shale_service::Service;
use tokio::net::TcpListener;

pub use rates::Rates;

/// What every handler reaches.
#[derive(Clone)]
pub(crate) struct AppState {
    pub service: Service,
    pub listener: Arc<str>,
    pub rates: Arc<Rates>,
    /// API calls need a user (a SASL security protocol).
    pub login_required: bool,
    /// The listener serves TLS (session cookies are `Secure`).
    pub tls: bool,
    /// The listener is bound to a loopback address: see `loopback_hosts_only`.
    pub loopback: bool,
    pub sessions: Arc<auth::Sessions>,
}

/// A listener's TLS (loaded) and whether it needs logins.
#[derive(Clone, Default)]
pub struct Security {
    tls: Option<Arc<TlsServer>>,
    login_required: bool,
}

impl Security {
    /// Loads the listener's TLS files (a listener whose files do not load does not
    /// start).
    pub fn load(l: &ListenerSecurity) -> Result<Self, TlsError> {
        Ok(Self {
            tls: l.tls_server(&[])?,
            login_required: l.protocol.uses_sasl(),
        })
    }
}

/// Serves one `http` listener, with its `security`, until the node stops. `rates`
/// samples the broker's traffic for the console's charts (one sampler per broker,
/// shared by its listeners).
pub async fn serve(
    service: Service,
    name: &str,
    listener: TcpListener,
    max_request_bytes: usize,
    security: Security,
    rates: Arc<Rates>,
) {
    let tls = security.tls;
    let state = AppState {
        service: service.clone(),
        listener: name.into(),
        rates,
        login_required: security.login_required,
        tls: tls.is_some(),
        loopback: listener
            .local_addr()
            .is_ok_and(|a| a.ip().to_canonical().is_loopback()),
        sessions: Default::default(),
    };
    let app = router(state.clone())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state,
            loopback_hosts_only,
        ))
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .into_make_service_with_connect_info::<PeerInfo>();
    let stopping = service.stopping();
    let served = match tls {
        None => {
            axum::serve(listener::Plain(listener), app)
                .with_graceful_shutdown(stopping)
                .await
        }
        Some(tls) => {
            let local = listener.local_addr().ok();
            let accepted = accept_loop(listener, tls, name.into());
            axum::serve(listener::Tls { accepted, local }, app)
                .with_graceful_shutdown(stopping)
                .await
        }
    };
    if let Err(e) = served {
        tracing::error!(listener = name, error = %e, "HTTP listener failed");
    }
}

/// On a listener bound to a loopback address, answers only requests whose `Host` is
/// an IP address or `localhost`: a page of another site whose name an attacker points
/// at 127.0.0.1 (DNS rebinding) gets 421 instead of the console's API. A listener on
/// another address is reached by whatever names operators give it.
async fn loopback_hosts_only(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if state.loopback
        && let Some(host) = req.headers().get(axum::http::header::HOST)
        && !local_host(host.to_str().unwrap_or(""))
    {
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::InvalidRequest.to_string(),
            "this listener is on a loopback address and answers only to an IP address or \
             localhost in Host",
        )
        .into_response();
    }
    next.run(req).await
}

/// Whether a `Host` value (with or without its port) is an IP address or `localhost`.
fn local_host(host: &str) -> bool {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .is_some_and(|(ip, _)| ip[1..].parse::<std::net::Ipv6Addr>().is_ok());
    }
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    let name = name.to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(api::metrics))
        .route("/health", axum::routing::get(api::health))
        .nest("/api/v1", api::routes())
        .nest("/iceberg/v1", iceberg::routes())
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
    pub(crate) fn new(
        status: StatusCode,
        error: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            error: error.into(),
            message: message.into(),
        }
    }

    /// A parameter that cannot be used (400, naming it).
    pub(crate) fn param(name: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest.to_string(),
            format!("parameter '{name}': {why}"),
        )
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let code = e.code();
        use ErrorCode::*;
        let status = match code {
            UnknownTopicOrPartition | GroupIdNotFound | UnknownMemberId => StatusCode::NOT_FOUND,
            TopicAlreadyExists | NonEmptyGroup => StatusCode::CONFLICT,
            InvalidRequest
            | InvalidTopicException
            | InvalidConfig
            | InvalidPartitions
            | InvalidReplicationFactor
            | InvalidGroupId
            | PolicyViolation
            | OffsetOutOfRange
            | InvalidReplicaAssignment => StatusCode::BAD_REQUEST,
            TopicAuthorizationFailed | GroupAuthorizationFailed | ClusterAuthorizationFailed => {
                StatusCode::FORBIDDEN
            }
            DuplicateResource => StatusCode::CONFLICT,
            ResourceNotFound => StatusCode::NOT_FOUND,
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

/// A JSON body, refused with a JSON error when it is too large or not the JSON asked
/// for.
pub(crate) fn body<T: serde::de::DeserializeOwned>(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> ApiResult<T> {
    let bytes = body.map_err(|e| {
        ApiError::new(
            e.status(),
            ErrorCode::InvalidRequest.to_string(),
            format!("cannot read the request body: {}", e.body_text()),
        )
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::param("body", e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn local_hosts_are_ip_addresses_and_localhost() {
        for h in [
            "127.0.0.1:9644",
            "127.0.0.1",
            "localhost:9644",
            "LOCALHOST",
            "a.localhost",
            "[::1]:9644",
        ] {
            assert!(super::local_host(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:9644",
            "127.0.0.1.evil.example",
            "localhost.evil",
            "[::1",
            "",
        ] {
            assert!(!super::local_host(h), "{h}");
        }
    }
}
