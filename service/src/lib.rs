//! `Service`: the one seam every front end calls (the Kafka wire protocol, gRPC and
//! HTTP). A front end decodes a request, calls one method here with a
//! [`RequestContext`], and encodes the answer; everything in between — which broker
//! answers, waiting for a rebalance, turning a request-level failure into an error
//! per partition, refreshing metadata once — happens here, once, for all of them.
//!
//! Every call runs in a `tracing` span naming the listener, the API, the client id and
//! the peer, and its latency goes to the metrics by listener and API. Every operation
//! is authorized for the context's principal (`authorize.rs`).

mod acls;
mod admin;
mod authorize;
mod data;
mod groups;
mod moves;
mod node;
mod offsets;
mod quota;
mod records;
mod tables;
mod txns;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use shale_broker::broker::Broker;

pub use acls::{AclFilter, PatternFilter};
pub use admin::{
    BrokerEndpoint, ClusterStatus, ConfigEntry, Metadata, NewTopicRequest, PartitionMetadata,
    TieringReport, TopicMetadata,
};
pub use data::{DeleteRecordsQuery, EpochQuery};
pub use data::{FetchAnswer, FetchRequest, OffsetAndTimestamp, OffsetQuery, ProduceRequest};
pub use groups::{CoordinatorType, MemberRef, SyncRequest};
pub use node::Traffic;
pub use offsets::{GroupLag, PartitionLag, ResetScope, ResetTo, reset_offset};
pub use records::{ReadFrom, RecordsRead};
pub use shale_broker::groups::GroupListing;
pub use shale_broker::read_limits::{MAX_BYTES_PER_READ, MAX_RECORDS_PER_READ};
pub use shale_broker::reassignments::{PlannedMove, ReassignRequest, Reassignment};
pub use shale_broker::restore::{MountReport, MountRequest, RestoreReport, RestoreRequest};
pub use tables::{TablePartitionLag, TableReport};
pub use txns::TxnProducer;
pub use users::{ScramDeletion, ScramUpsertion, UserCredentials};

use shale_broker::error::Result;

/// One partition's answer.
#[derive(Debug)]
pub struct Keyed<T> {
    pub topic: String,
    pub partition: i32,
    pub result: Result<T>,
}

/// Who asks, and through which door: what every request carries into the service.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The listener the request came in on (`grpc`, `kafka`, …).
    pub listener: Arc<str>,
    /// Who the client authenticated as (`None`: anonymous, as every client is until
    /// listeners authenticate).
    pub principal: Option<String>,
    /// The client's own name for itself (Kafka's `client.id`), if it gave one.
    pub client_id: Option<String>,
    pub peer: Option<SocketAddr>,
}

impl RequestContext {
    pub fn new(listener: impl Into<Arc<str>>) -> Self {
        Self {
            listener: listener.into(),
            principal: None,
            client_id: None,
            peer: None,
        }
    }

    pub fn with_peer(mut self, peer: Option<SocketAddr>) -> Self {
        self.peer = peer;
        self
    }

    pub fn with_client_id(mut self, client_id: Option<String>) -> Self {
        self.client_id = client_id;
        self
    }

    /// Who a quota is kept for: the principal and client id (Kafka's quota entity),
    /// or, for a client that gives no id, its connection.
    pub fn quota_key(&self) -> String {
        match (&self.principal, &self.client_id) {
            (p, Some(id)) => format!("{}/{id}", p.as_deref().unwrap_or("")),
            (p, None) => format!(
                "{}@{}",
                p.as_deref().unwrap_or(""),
                self.peer.map_or_else(String::new, |a| a.to_string())
            ),
        }
    }

    /// The span a request's events are logged in.
    fn span(&self, api: &'static str) -> tracing::Span {
        tracing::info_span!(
            "request",
            listener = %self.listener,
            api,
            client_id = self.client_id.as_deref().unwrap_or(""),
            peer = %self.peer.map_or_else(String::new, |p| p.to_string()),
        )
    }
}

/// The broker's operations, for front ends. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    broker: Arc<Broker>,
    /// Fetch byte-rate quotas per client (`[quotas]`), for every front end.
    fetch_quotas: Arc<crate::quota::FetchQuotas>,
}

impl Service {
    pub fn new(broker: Arc<Broker>) -> Self {
        let quotas = crate::quota::FetchQuotas::new(broker.config.quotas.consumer_byte_rate);
        Self {
            broker,
            fetch_quotas: Arc::new(quotas),
        }
    }

    /// The node behind the service (for what front ends serve besides requests:
    /// metrics, health).
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Runs one API call in its span and records its latency.
    async fn call<T>(
        &self,
        ctx: &RequestContext,
        api: &'static str,
        work: impl Future<Output = T>,
    ) -> T {
        let started = Instant::now();
        let out = work.instrument(ctx.span(api)).await;
        self.broker
            .stats()
            .requests
            .latency
            .observe(&ctx.listener, api, started.elapsed());
        out
    }

    /// Pairs each partition with its answer, counting the errors.
    fn keyed<T>(&self, keys: Vec<(String, i32)>, results: Vec<Result<T>>) -> Vec<Keyed<T>> {
        debug_assert_eq!(keys.len(), results.len());
        keys.into_iter()
            .zip(results)
            .map(|((topic, partition), result)| {
                self.count(&result);
                Keyed {
                    topic,
                    partition,
                    result,
                }
            })
            .collect()
    }

    /// Counts an error in the metrics (errors by code), passing the result on.
    fn counted<T>(&self, r: Result<T>) -> Result<T> {
        self.count(&r);
        r
    }

    fn count<T>(&self, r: &Result<T>) {
        if let Err(e) = r {
            self.broker.stats().requests.errors.count(e.code());
        }
    }
}
