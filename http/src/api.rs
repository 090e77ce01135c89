//! `/api/v1/`: cluster, brokers, topics and their partitions and configs, tiering.
//! Offsets and sizes are this broker's view: the partitions it holds a replica of
//! (exact for those it leads), and the remote tier of those it leads.

use std::collections::BTreeMap;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query};
use axum::http::{StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::{get, patch};
use serde::Deserialize;
use serde_json::{Value, json};
use shale_broker::tiering::TieringStatus;
use shale_records::ErrorCode;
use shale_service::NewTopicRequest;

use crate::auth::Call;
use crate::{ApiError, ApiResult, AppState, body};

const OPENAPI: &str = include_str!("openapi.json");

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/cluster", get(cluster))
        .route("/brokers", get(brokers))
        .route("/overview", get(overview))
        .route("/topics", get(list_topics).post(create_topic))
        .route("/topics/{topic}", get(describe_topic).delete(delete_topic))
        .route("/topics/{topic}/configs", patch(alter_configs))
        .route(
            "/topics/{topic}/partitions/{partition}/records",
            get(crate::records::read),
        )
        .route("/topics/{topic}/find", get(crate::records::find))
        .route("/groups", get(crate::groups::list))
        .route("/groups/{group}", get(crate::groups::describe))
        .route(
            "/groups/{group}/reset-offsets",
            axum::routing::post(crate::groups::reset_offsets),
        )
        .route("/tiering", get(tiering))
        .route("/login", axum::routing::post(crate::auth::login))
        .route("/logout", axum::routing::post(crate::auth::logout))
        .route("/whoami", get(crate::auth::whoami))
        .route("/acls", get(crate::acls::list).post(crate::acls::create))
        .route("/acls/delete", axum::routing::post(crate::acls::delete))
        .fallback(unknown)
        .layer(axum::middleware::from_fn(json_posts_only))
}

/// A browser sends another site's POST without asking the server first only with a
/// form or plain-text body; the API takes JSON alone, so such a request (cross-site
/// request forgery against a console on 127.0.0.1) is refused, not acted on.
async fn json_posts_only(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if req.method() == axum::http::Method::POST && !json {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::InvalidRequest.to_string(),
            "send the request body as application/json",
        )
        .into_response();
    }
    next.run(req).await
}

pub(crate) async fn metrics(s: Call) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.service.metrics_text().await,
    )
}

pub(crate) async fn health(s: Call) -> impl IntoResponse {
    match s.service.health() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

async fn unknown(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("no API at {}: see /api/v1/openapi.json", uri.path()),
    )
}

async fn brokers_json(s: &Call) -> ApiResult<Value> {
    let status = s.service.cluster_status(&s.ctx()).await?;
    let this = s.service.broker().config.broker_id;
    let brokers: Vec<Value> = status
        .brokers
        .iter()
        .map(|b| {
            json!({
                "broker_id": b.lease.broker_id,
                "alive": b.alive,
                "this_broker": b.lease.broker_id == this,
                "lease_remaining_ms": b.lease.remaining_ms,
                "broker_epoch": b.lease.broker_epoch,
                "registered_at_ms": b.lease.registered_at_ms,
                "address": b.lease.address,
                "endpoints": b.lease.endpoints.iter().cloned().collect::<BTreeMap<_, _>>(),
                "leader_partitions": b.leader_partitions,
                "replica_partitions": b.replica_partitions,
                "moving_partitions": b.moving_partitions,
                "decommissioned": b.lease.decommissioned,
                "rack": b.lease.rack,
            })
        })
        .collect();
    let controller = status.controller.map(|c| {
        json!({ "broker_id": c.broker_id, "epoch": c.epoch, "lease_remaining_ms": c.remaining_ms })
    });
    Ok(json!({ "brokers": brokers, "controller": controller, "this_broker": this }))
}

async fn cluster(s: Call) -> ApiResult<Json<Value>> {
    let mut v = brokers_json(&s).await?;
    v["cluster_id"] = json!(s.service.broker().cluster_id().to_string());
    Ok(Json(v))
}

async fn brokers(s: Call) -> ApiResult<Json<Value>> {
    Ok(Json(brokers_json(&s).await?))
}

/// Brokers, controller, partitions without a full ISR or without a leader, upload lag
/// and the traffic of the last minutes.
async fn overview(s: Call) -> ApiResult<Json<Value>> {
    let mut v = brokers_json(&s).await?;
    let md = s.service.metadata(&s.ctx(), None, false).await;
    let (mut under, mut offline, mut partitions) = (Vec::new(), Vec::new(), 0);
    for t in &md.topics {
        let Ok((_, parts)) = &t.result else { continue };
        for p in parts {
            partitions += 1;
            let key = json!({ "topic": t.name, "partition": p.partition });
            if p.leader < 0 || p.offline_replicas.contains(&p.leader) {
                offline.push(key);
            } else if p.isr.len() < p.replicas.len() {
                under.push(key);
            }
        }
    }
    let tiering = s.service.tiering_status(&s.ctx(), None).await?;
    v["cluster_id"] = json!(md.cluster_id.to_string());
    v["topics"] = json!(md.topics.len());
    v["partitions"] = json!(partitions);
    v["under_replicated"] = json!(under);
    v["offline"] = json!(offline);
    v["upload_lag_bytes"] = json!(
        tiering
            .partitions
            .iter()
            .map(|t| t.upload_lag_bytes)
            .sum::<u64>()
    );
    v["upload_lag_segments"] = json!(
        tiering
            .partitions
            .iter()
            .map(|t| t.upload_lag_segments)
            .sum::<u64>()
    );
    v["remote_get_requests"] = json!(tiering.remote_get_requests);
    v["rates"] = json!(s.rates.samples());
    v["rate_interval_secs"] = json!(crate::rates::SAMPLE_SECS);
    Ok(Json(v))
}

fn tier_json(t: &TieringStatus) -> Value {
    json!({
        "topic": t.topic,
        "partition": t.partition,
        "enabled": t.enabled,
        "log_start_offset": t.log_start_offset,
        "local_log_start_offset": t.local_log_start_offset,
        "remote_log_start_offset": t.remote_log_start_offset,
        "highest_uploaded_offset": t.highest_uploaded_offset,
        "upload_lag_segments": t.upload_lag_segments,
        "upload_lag_bytes": t.upload_lag_bytes,
        "remote_segments": t.remote_segments,
        "remote_bytes": t.remote_bytes,
    })
}

/// One topic: partitions with every offset and size this broker knows, and configs.
async fn topic_json(s: &Call, name: &str) -> ApiResult<Value> {
    let d = s.service.describe_topic(&s.ctx(), name).await?;
    described_json(s, &d).await
}

async fn described_json(s: &Call, d: &shale_broker::topics::TopicDescription) -> ApiResult<Value> {
    let name = d.topic.name.as_str();
    let tiers: BTreeMap<i32, TieringStatus> =
        match s.service.tiering_status(&s.ctx(), Some(name)).await {
            Ok(r) => r.partitions.into_iter().map(|t| (t.partition, t)).collect(),
            Err(_) => BTreeMap::new(),
        };
    let (mut local, mut remote) = (0u64, 0u64);
    let partitions: Vec<Value> = d
        .partitions
        .iter()
        .map(|p| {
            let tier = tiers.get(&p.partition);
            let o = p.offsets.as_ref();
            local += o.map_or(0, |o| o.size_bytes);
            remote += tier.map_or(0, |t| t.remote_bytes);
            json!({
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
                "log_start_offset": o.map(|o| o.log_start_offset),
                "local_log_start_offset": o.map(|o| o.local_log_start_offset),
                "high_watermark": o.map(|o| o.high_watermark),
                "log_end_offset": o.map(|o| o.log_end_offset),
                "local_bytes": o.map(|o| o.size_bytes),
                "local_segments": o.map(|o| o.segments),
                "remote_bytes": tier.map(|t| t.remote_bytes),
                "remote_segments": tier.map(|t| t.remote_segments),
                "upload_lag_bytes": tier.map(|t| t.upload_lag_bytes),
            })
        })
        .collect();
    let configs: Vec<Value> = s
        .service
        .config_entries(d)
        .into_iter()
        .map(|c| json!({ "name": c.name, "value": c.value, "source": format!("{:?}", c.source).to_lowercase() }))
        .collect();
    // What applies: compaction alone keeps no time or size bound, and a tiered
    // topic's local bound is its `local.retention.*` (-2: the total's).
    let (retention_ms, retention_bytes) = d.config.total_retention();
    let local_bound = d.config.log_config();
    Ok(json!({
        "name": d.topic.name,
        "id": d.topic.id.to_string(),
        "partition_count": d.topic.partitions,
        "replication_factor": d.topic.replication_factor,
        "created_at_ms": d.topic.created_at_ms,
        "retention_ms": retention_ms,
        "retention_bytes": retention_bytes,
        "local_retention_ms": local_bound.retention_ms,
        "local_retention_bytes": local_bound.retention_bytes,
        "remote_storage_enable": d.config.remote_storage_enable,
        "local_bytes": local,
        "remote_bytes": remote,
        "partitions": partitions,
        "configs": configs,
    }))
}

async fn list_topics(s: Call) -> ApiResult<Json<Value>> {
    let topics = s.service.list_topics(&s.ctx()).await?;
    let mut out = Vec::with_capacity(topics.len());
    for t in topics {
        match topic_json(&s, &t.name).await {
            Ok(mut v) => {
                if let Some(o) = v.as_object_mut() {
                    o.remove("configs");
                    o.remove("partitions");
                }
                out.push(v);
            }
            // Deleted since it was listed.
            Err(e) if e.status() == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Json(json!({ "topics": out })))
}

async fn describe_topic(s: Call, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    let d = s.service.describe_topic(&s.ctx(), &topic).await?;
    let mut v = described_json(&s, &d).await?;
    // The topic's Iceberg table, if it has one (a catalog read: not in the listing).
    if let (Some(report), Some(o)) = (s.service.table_report(&d).await, v.as_object_mut()) {
        let table = match report {
            Ok(r) => json!({
                "location": r.status.location,
                "data_files": r.status.data_files,
                "bytes": r.status.bytes,
                "rows": r.status.rows,
                "last_commit_ms": r.status.last_commit_ms,
                "partitions": r.partitions.iter().map(|p| json!({
                    "partition": p.partition,
                    "next_offset": p.next_offset,
                    "lag_offsets": p.lag_offsets,
                    "lag_ms": p.lag_ms,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => json!({ "error": e.to_string() }),
        };
        o.insert("table".into(), table);
    }
    Ok(Json(v))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTopic {
    name: String,
    #[serde(default = "minus_one")]
    partitions: i32,
    #[serde(default = "minus_one")]
    replication_factor: i32,
    #[serde(default)]
    configs: BTreeMap<String, String>,
    #[serde(default)]
    validate_only: bool,
}

fn minus_one() -> i32 {
    -1
}

async fn create_topic(
    s: Call,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let req: NewTopic = body(raw)?;
    let t = s
        .service
        .create_topic(
            &s.ctx(),
            NewTopicRequest {
                name: req.name,
                partitions: req.partitions,
                replication_factor: req.replication_factor,
                assignments: None,
                configs: req.configs,
                validate_only: req.validate_only,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "name": t.name, "id": t.id.to_string(), "partition_count": t.partitions,
            "replication_factor": t.replication_factor, "validate_only": req.validate_only,
        })),
    ))
}

async fn delete_topic(s: Call, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    s.service.delete_topic(&s.ctx(), &topic).await?;
    Ok(Json(json!({ "deleted": topic })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigChange {
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    delete: Vec<String>,
    #[serde(default)]
    validate_only: bool,
}

async fn alter_configs(
    s: Call,
    Path(topic): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let req: ConfigChange = body(raw)?;
    s.service
        .alter_configs(&s.ctx(), &topic, req.set, req.delete, req.validate_only)
        .await?;
    Ok(Json(topic_json(&s, &topic).await?["configs"].take()))
}

async fn tiering(s: Call, Query(q): Query<BTreeMap<String, String>>) -> ApiResult<Json<Value>> {
    let topic = q.get("topic").map(String::as_str);
    if let Some(t) = topic {
        // An unknown topic is a 404, not an empty list.
        s.service.describe_topic(&s.ctx(), t).await?;
    }
    let r = s.service.tiering_status(&s.ctx(), topic).await?;
    Ok(Json(json!({
        "partitions": r.partitions.iter().map(tier_json).collect::<Vec<_>>(),
        "remote_get_requests": r.remote_get_requests,
        "remote_bytes_fetched": r.remote_bytes_fetched,
    })))
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }
}
