//! What a front end needs of the node besides requests: replica fetches from
//! followers, metrics, health, the task tracker and shutdown.

use futures::{Stream, StreamExt};
use tokio_util::task::TaskTracker;

use super::{RequestContext, Service};
use shale_broker::replication::{ReplicaFetchRequest, ReplicaFetchResponse, ReplicaPartitionData};
use shale_security::acl::Operation;

/// Every partition of a refused replica fetch answers the refusal.
fn refused_replica_fetch(
    req: &ReplicaFetchRequest,
    e: &shale_broker::error::Error,
) -> ReplicaFetchResponse {
    ReplicaFetchResponse {
        partitions: req
            .partitions
            .iter()
            .map(|p| ReplicaPartitionData {
                topic_id: p.topic_id,
                partition: p.partition,
                error_code: e.code(),
                error_message: e.to_string(),
                high_watermark: -1,
                local_log_start_offset: -1,
                diverging: None,
                records: Default::default(),
            })
            .collect(),
    }
}

/// A broker's traffic since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub produced_bytes: u64,
    pub fetched_bytes: u64,
    pub produce_requests: u64,
    pub fetch_requests: u64,
}

impl Service {
    /// Leader side of a follower's replica fetch stream: answers each request in
    /// turn (a request with nothing new is held up to its `max_wait_ms`, waking on
    /// the next append). Ends when the follower's stream ends or the broker stops.
    pub fn replica_fetch_stream(
        &self,
        ctx: RequestContext,
        requests: impl Stream<Item = ReplicaFetchRequest> + Send + 'static,
    ) -> impl Stream<Item = ReplicaFetchResponse> + Send + 'static {
        let service = self.clone();
        requests
            .take_until(self.broker.stopping())
            .then(move |req| {
                let (service, ctx) = (service.clone(), ctx.clone());
                async move {
                    service
                        .call(&ctx, "ReplicaFetch", async {
                            // Only brokers (CLUSTER_ACTION on the cluster) replicate.
                            match service.authorize_cluster(&ctx, Operation::ClusterAction) {
                                Ok(()) => service.broker.serve_replica_fetch(req).await,
                                Err(e) => refused_replica_fetch(&req, &e),
                            }
                        })
                        .await
                }
            })
    }

    /// The metrics in Prometheus text format 0.0.4.
    pub async fn metrics_text(&self) -> String {
        shale_broker::metrics::render(&self.broker).await
    }

    /// The broker's traffic counters since it started.
    pub fn traffic(&self) -> Traffic {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.broker.stats().requests;
        Traffic {
            produced_bytes: s.produced_bytes.load(Relaxed),
            fetched_bytes: s.fetched_bytes.load(Relaxed),
            produce_requests: s.produce_requests.load(Relaxed),
            fetch_requests: s.fetch_requests.load(Relaxed),
        }
    }

    /// Ready to serve, or why not.
    pub fn health(&self) -> Result<(), String> {
        self.broker.health()
    }

    /// The node's task tracker: front ends spawn their connection tasks here, so
    /// shutdown waits for them.
    pub fn tasks(&self) -> &TaskTracker {
        self.broker.tasks()
    }

    /// Cancelled when the node stops: front ends stop accepting then.
    pub fn stopping(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.broker.stopping()
    }
}
