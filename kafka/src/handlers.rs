//! One function per API: decode the request's fields into a [`Service`] call, and
//! its answer into the response message. No domain logic lives here.

mod acls;
mod admin;
mod consumer_groups;
mod data;
mod fetch;
mod groups;
mod legacy;
mod metadata;
mod txns;
mod users;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind};
use kafka_protocol::protocol::{Encodable, StrBytes};
use shale_broker::error::Error;
use shale_records::ErrorCode;
use shale_service::{RequestContext, Service};

use crate::fetch_session::FetchSessions;
use crate::frame::{self, Request};

/// What a request's handling leaves to write on the connection.
pub enum Reply {
    /// A whole response frame.
    Send(Bytes),
    /// A whole response frame in pieces (a Fetch response: its record bytes are the
    /// log's, never copied; slices of segment files are sent with `sendfile(2)`);
    /// then nothing more is read from the connection for `mute` (a throttled
    /// client, KIP-219).
    Chunks {
        chunks: Vec<shale_log::Records>,
        mute: Duration,
    },
    /// Nothing (a produce with acks=0).
    Nothing,
    /// Close the connection (a response that cannot be encoded).
    Close,
}

pub type Answer = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// Handles one request; the answer is encoded in the request's version. `sessions`
/// is the connection's fetch session; with `zero_copy`, the connection takes records
/// as slices of segment files.
pub fn handle(
    service: Service,
    ctx: RequestContext,
    req: Request,
    sessions: Arc<FetchSessions>,
    zero_copy: bool,
) -> Answer {
    Box::pin(async move {
        let (api, version, id) = (req.api, req.version, req.correlation_id);
        let kind = *req.body;
        let s = &service;
        let ctx = &ctx;
        let v = version;
        if crate::legacy::is_legacy(api, v) {
            return legacy::handle(s, ctx, kind, v, id, &sessions).await;
        }
        let encoded = match kind {
            RequestKind::ApiVersions(_) => {
                let body = crate::versions::api_versions(ErrorCode::None);
                frame::encode(api, v, id, &body)
            }
            RequestKind::Metadata(r) => enc(api, v, id, metadata::metadata(s, ctx, r, v).await),
            RequestKind::DescribeCluster(r) => {
                enc(api, v, id, metadata::describe_cluster(s, ctx, r).await)
            }
            RequestKind::Produce(r) => match data::produce(s, ctx, r, v).await {
                Some(resp) => enc(api, v, id, resp),
                None => return Reply::Nothing,
            },
            RequestKind::Fetch(r) => {
                let answer = fetch::fetch(s, ctx, r, v, &sessions, zero_copy).await;
                // A throttled v8+ client backs off by the time it is told, and its
                // connection is not read meanwhile (KIP-219); older ones were answered
                // that much later already.
                let mute = if v >= 8 {
                    answer.throttle
                } else {
                    Duration::ZERO
                };
                let chunks = crate::fetch_response::encode(v, id, &answer);
                return Reply::Chunks { chunks, mute };
            }
            RequestKind::ListOffsets(r) => enc(api, v, id, data::list_offsets(s, ctx, r).await),
            RequestKind::OffsetForLeaderEpoch(r) => {
                enc(api, v, id, data::offset_for_leader_epoch(s, ctx, r).await)
            }
            RequestKind::DeleteRecords(r) => enc(api, v, id, data::delete_records(s, ctx, r).await),
            RequestKind::InitProducerId(r) => {
                enc(api, v, id, data::init_producer_id(s, ctx, r).await)
            }
            RequestKind::FindCoordinator(r) => {
                enc(api, v, id, groups::find_coordinator(s, ctx, r, v).await)
            }
            RequestKind::AddPartitionsToTxn(r) => {
                enc(api, v, id, txns::add_partitions(s, ctx, r, v).await)
            }
            RequestKind::AddOffsetsToTxn(r) => enc(api, v, id, txns::add_offsets(s, ctx, r).await),
            RequestKind::EndTxn(r) => enc(api, v, id, txns::end(s, ctx, r).await),
            RequestKind::TxnOffsetCommit(r) => {
                enc(api, v, id, txns::offset_commit(s, ctx, r).await)
            }
            RequestKind::DescribeTransactions(r) => {
                enc(api, v, id, txns::describe(s, ctx, r).await)
            }
            RequestKind::ListTransactions(r) => enc(api, v, id, txns::list(s, ctx, r).await),
            RequestKind::DescribeProducers(r) => {
                enc(api, v, id, txns::describe_producers(s, ctx, r).await)
            }
            RequestKind::JoinGroup(r) => enc(api, v, id, groups::join(s, ctx, r, v).await),
            RequestKind::SyncGroup(r) => enc(api, v, id, groups::sync(s, ctx, r).await),
            RequestKind::Heartbeat(r) => enc(api, v, id, groups::heartbeat(s, ctx, r).await),
            RequestKind::LeaveGroup(r) => enc(api, v, id, groups::leave(s, ctx, r, v).await),
            RequestKind::OffsetCommit(r) => enc(api, v, id, groups::offset_commit(s, ctx, r).await),
            RequestKind::OffsetFetch(r) => {
                enc(api, v, id, groups::offset_fetch(s, ctx, r, v).await)
            }
            RequestKind::ConsumerGroupHeartbeat(r) => {
                enc(api, v, id, consumer_groups::heartbeat(s, ctx, r).await)
            }
            RequestKind::ConsumerGroupDescribe(r) => {
                enc(api, v, id, consumer_groups::describe(s, ctx, r).await)
            }
            RequestKind::OffsetDelete(r) => enc(api, v, id, groups::offset_delete(s, ctx, r).await),
            RequestKind::ListGroups(r) => enc(api, v, id, groups::list(s, ctx, r).await),
            RequestKind::DescribeGroups(r) => enc(api, v, id, groups::describe(s, ctx, r, v).await),
            RequestKind::DeleteGroups(r) => enc(api, v, id, groups::delete(s, ctx, r).await),
            RequestKind::CreateTopics(r) => {
                enc(api, v, id, admin::create_topics(s, ctx, r, v).await)
            }
            RequestKind::DeleteTopics(r) => enc(api, v, id, admin::delete_topics(s, ctx, r).await),
            RequestKind::CreatePartitions(r) => {
                enc(api, v, id, admin::create_partitions(s, ctx, r).await)
            }
            RequestKind::DescribeConfigs(r) => {
                enc(api, v, id, admin::describe_configs(s, ctx, r).await)
            }
            RequestKind::AlterConfigs(r) => enc(api, v, id, admin::alter_configs(s, ctx, r).await),
            RequestKind::IncrementalAlterConfigs(r) => enc(
                api,
                v,
                id,
                admin::incremental_alter_configs(s, ctx, r).await,
            ),
            RequestKind::AlterPartitionReassignments(r) => enc(
                api,
                v,
                id,
                admin::alter_partition_reassignments(s, ctx, r).await,
            ),
            RequestKind::ListPartitionReassignments(r) => enc(
                api,
                v,
                id,
                admin::list_partition_reassignments(s, ctx, r).await,
            ),
            RequestKind::CreateAcls(r) => enc(api, v, id, acls::create(s, ctx, r).await),
            RequestKind::DescribeAcls(r) => enc(api, v, id, acls::describe(s, ctx, r).await),
            RequestKind::DeleteAcls(r) => enc(api, v, id, acls::delete(s, ctx, r).await),
            RequestKind::DescribeUserScramCredentials(r) => {
                enc(api, v, id, users::describe(s, ctx, r).await)
            }
            RequestKind::AlterUserScramCredentials(r) => {
                enc(api, v, id, users::alter(s, ctx, r).await)
            }
            // Not advertised (the frame parser closes the connection before), or
            // answered by the connection (SASL).
            _ => return Reply::Close,
        };
        reply(encoded)
    })
}

fn enc<M: Encodable>(api: ApiKey, version: i16, id: i32, body: M) -> anyhow::Result<Bytes> {
    frame::encode(api, version, id, &body)
}

fn reply(encoded: anyhow::Result<Bytes>) -> Reply {
    match encoded {
        Ok(bytes) => Reply::Send(bytes),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode a Kafka response; closing the connection");
            Reply::Close
        }
    }
}

/// A result's Kafka error code (0 for success).
fn code<T>(r: &Result<T, Error>) -> i16 {
    match r {
        Ok(_) => 0,
        Err(e) => e.code() as i16,
    }
}

/// A result's error message, for the versions that carry one (`None` for success).
fn message<T>(r: &Result<T, Error>) -> Option<StrBytes> {
    r.as_ref()
        .err()
        .map(|e| StrBytes::from_string(e.to_string()))
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
