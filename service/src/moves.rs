//! Moving replicas: partition reassignment (Kafka's KIP-455 calls), decommissioning
//! brokers and the balancer's plan.

use shale_security::acl::Operation;

use super::{Keyed, RequestContext, Service};
use shale_broker::error::Result;
use shale_broker::reassignments::{PlannedMove, ReassignRequest, Reassignment};

impl Service {
    /// Kafka's AlterPartitionReassignments: starts, replaces or (`target` `None`)
    /// cancels each partition's reassignment.
    pub async fn alter_reassignments(
        &self,
        ctx: &RequestContext,
        requests: Vec<ReassignRequest>,
    ) -> Result<Vec<Keyed<()>>> {
        self.call(ctx, "AlterPartitionReassignments", async {
            self.counted(self.authorize_cluster(ctx, Operation::Alter))?;
            let r = self.broker.alter_reassignments(&requests).await;
            let results = self.counted(r)?;
            let keys = requests.into_iter().map(|r| (r.topic, r.partition));
            Ok(self.keyed(keys.collect(), results))
        })
        .await
    }

    /// Kafka's ListPartitionReassignments (`topics` `None`: every partition).
    pub async fn list_reassignments(
        &self,
        ctx: &RequestContext,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<Reassignment>> {
        self.call(ctx, "ListPartitionReassignments", async {
            self.counted(self.authorize_cluster(ctx, Operation::Describe))?;
            let r = self.broker.list_reassignments(topics.as_deref()).await;
            self.counted(r)
        })
        .await
    }

    /// Marks a broker as decommissioned (`decommission` false: no longer).
    pub async fn decommission_broker(
        &self,
        ctx: &RequestContext,
        broker_id: i32,
        decommission: bool,
    ) -> Result<()> {
        self.call(ctx, "DecommissionBroker", async {
            self.counted(self.authorize_cluster(ctx, Operation::Alter))?;
            let r = self.broker.decommission(broker_id, decommission).await;
            self.counted(r)
        })
        .await
    }

    /// Restores topics from the bucket (`shale cluster restore`).
    pub async fn restore_cluster(
        &self,
        ctx: &RequestContext,
        req: shale_broker::restore::RestoreRequest,
    ) -> Result<shale_broker::restore::RestoreReport> {
        self.call(ctx, "RestoreCluster", async {
            self.counted(self.authorize_cluster(ctx, Operation::Alter))?;
            let r = self.broker.restore_from_bucket(req).await;
            self.counted(r)
        })
        .await
    }

    /// `shale topic unmount`, one step (see the `UnmountTopic` RPC): `ends` `None`
    /// makes the topic read-only, `Some` detaches it. Returns its id, and the
    /// description's key once detached.
    pub async fn unmount_topic(
        &self,
        ctx: &RequestContext,
        name: &str,
        ends: Option<Vec<i64>>,
    ) -> Result<(uuid::Uuid, Option<String>)> {
        self.call(ctx, "UnmountTopic", async {
            self.counted(self.authorize_cluster(ctx, Operation::Alter))?;
            let r = match ends {
                None => (self.broker.unmount_freeze(name).await).map(|id| (id, None)),
                Some(ends) => (self.broker.unmount_detach(name, &ends).await)
                    .map(|(id, path)| (id, Some(path))),
            };
            self.counted(r)
        })
        .await
    }

    /// `shale topic mount`.
    pub async fn mount_topic(
        &self,
        ctx: &RequestContext,
        req: shale_broker::restore::MountRequest,
    ) -> Result<shale_broker::restore::MountReport> {
        self.call(ctx, "MountTopic", async {
            self.counted(self.authorize_cluster(ctx, Operation::Alter))?;
            let r = self.broker.mount_topic(req).await;
            self.counted(r)
        })
        .await
    }

    /// The moves the balancer would start now.
    pub async fn balance_plan(&self, ctx: &RequestContext) -> Result<Vec<PlannedMove>> {
        self.call(ctx, "BalancePlan", async {
            self.counted(self.authorize_cluster(ctx, Operation::Describe))?;
            let r = self.broker.balance_plan().await;
            self.counted(r)
        })
        .await
    }
}
