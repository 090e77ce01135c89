//! `/iceberg/v1/`: Iceberg's REST catalog, read-only, over the topics' tables: the
//! catalog's config, the one namespace (`shale`), its tables, and loading a table
//! (its metadata location and metadata, whose files engines then read from the
//! bucket themselves). Spark, Trino, DuckDB and pyiceberg connect with the catalog URI
//! `http://HOST:PORT/iceberg` and the console's credentials (HTTP Basic, or a
//! session cookie). A table is visible to whoever may describe its topic. Errors
//! follow the REST catalog's error model.

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use shale_records::ErrorCode;

use crate::AppState;
use crate::auth::Call;

const NAMESPACE: &str = "shale";

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/config", get(config))
        .route("/namespaces", get(namespaces))
        .route("/namespaces/{namespace}", get(namespace))
        .route("/namespaces/{namespace}/tables", get(tables))
        .route("/namespaces/{namespace}/tables/{table}", get(load_table))
        .fallback(not_found)
        .method_not_allowed_fallback(read_only)
}

/// An error as the REST catalog's clients read it.
struct CatalogError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl IntoResponse for CatalogError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "code": self.status.as_u16(),
        }});
        (self.status, Json(body)).into_response()
    }
}

impl From<shale_broker::error::Error> for CatalogError {
    fn from(e: shale_broker::error::Error) -> Self {
        let (status, kind) = match e.code() {
            ErrorCode::UnknownTopicOrPartition => (StatusCode::NOT_FOUND, "NoSuchTableException"),
            ErrorCode::TopicAuthorizationFailed | ErrorCode::ClusterAuthorizationFailed => {
                (StatusCode::FORBIDDEN, "ForbiddenException")
            }
            _ => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
            ),
        };
        Self {
            status,
            kind,
            message: e.to_string(),
        }
    }
}

type CatalogResult = Result<Json<Value>, CatalogError>;

fn check_namespace(namespace: &str) -> Result<(), CatalogError> {
    if namespace == NAMESPACE {
        return Ok(());
    }
    Err(CatalogError {
        status: StatusCode::NOT_FOUND,
        kind: "NoSuchNamespaceException",
        message: format!("namespace '{namespace}' does not exist; the only one is '{NAMESPACE}'"),
    })
}

async fn config() -> Json<Value> {
    Json(json!({"defaults": {}, "overrides": {}}))
}

async fn namespaces() -> Json<Value> {
    Json(json!({"namespaces": [[NAMESPACE]]}))
}

async fn namespace(Path(namespace): Path<String>) -> CatalogResult {
    check_namespace(&namespace)?;
    Ok(Json(json!({"namespace": [NAMESPACE], "properties": {}})))
}

async fn tables(s: Call, Path(namespace): Path<String>) -> CatalogResult {
    check_namespace(&namespace)?;
    let names = s.service.list_tables(&s.ctx()).await?;
    let identifiers: Vec<Value> = (names.iter())
        .map(|n| json!({"namespace": [NAMESPACE], "name": n}))
        .collect();
    Ok(Json(json!({"identifiers": identifiers})))
}

async fn load_table(s: Call, Path((namespace, table)): Path<(String, String)>) -> CatalogResult {
    check_namespace(&namespace)?;
    let (location, metadata) = s.service.load_table(&s.ctx(), &table).await?;
    Ok(Json(json!({
        "metadata-location": location,
        "metadata": metadata,
        "config": {},
    })))
}

async fn not_found() -> CatalogError {
    CatalogError {
        status: StatusCode::NOT_FOUND,
        kind: "NotFoundException",
        message: "no such route in the REST catalog".into(),
    }
}

async fn read_only() -> CatalogError {
    CatalogError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        kind: "BadRequestException",
        message: "this catalog is read-only: Shale's brokers write the tables".into(),
    }
}
