//! Admin calls, answered by the bootstrap broker: cluster status, leader elections,
//! partition reassignments, topics and their configs, tiering status.

use std::collections::BTreeMap;

use shale_proto::v1::*;

use crate::{Client, Error, Result, check, check_result};

impl Client {
    /// Live brokers and the controller.
    pub async fn cluster_status(&self) -> Result<ClusterStatusResponse> {
        let r = self
            .admin
            .clone()
            .cluster_status(ClusterStatusRequest {})
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    /// Preferred, or (`unclean`) unclean, leader election (see the `ElectLeaders`
    /// RPC): per partition, the leader after it, or why not. An empty `topic` means
    /// every topic.
    pub async fn elect_leaders(
        &self,
        topic: &str,
        partitions: Vec<i32>,
        unclean: bool,
    ) -> Result<Vec<ElectLeadersResult>> {
        let r = self
            .admin
            .clone()
            .elect_leaders(ElectLeadersRequest {
                topic: topic.into(),
                partitions,
                unclean,
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.results)
    }

    /// Starts, replaces or cancels partition reassignments (see the
    /// `AlterPartitionReassignments` RPC): one result per partition.
    pub async fn alter_partition_reassignments(
        &self,
        partitions: Vec<PartitionReassignment>,
    ) -> Result<Vec<ReassignmentResult>> {
        let r = self
            .admin
            .clone()
            .alter_partition_reassignments(AlterPartitionReassignmentsRequest { partitions })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.results)
    }

    /// The reassignments in flight (of `topic`; empty: of every topic).
    pub async fn list_partition_reassignments(
        &self,
        topic: &str,
    ) -> Result<Vec<OngoingReassignment>> {
        let r = self
            .admin
            .clone()
            .list_partition_reassignments(ListPartitionReassignmentsRequest {
                topic: topic.into(),
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.reassignments)
    }

    /// Marks a broker as decommissioned (its replicas move off it), or, with
    /// `recommission`, no longer.
    pub async fn decommission_broker(&self, broker_id: i32, recommission: bool) -> Result<()> {
        let r = self
            .admin
            .clone()
            .decommission_broker(DecommissionBrokerRequest {
                broker_id,
                recommission,
            })
            .await?
            .into_inner();
        check_result(r.error)
    }

    /// Restores topics from the bucket the cluster is configured with (`from`, if
    /// given, must name it): every topic it holds, or only `topics`.
    /// `replication_factor` replaces each topic's own; `force` restores although
    /// another cluster's brokers wrote to the bucket lately.
    pub async fn restore_cluster(
        &self,
        from: Option<&str>,
        topics: &[String],
        dry_run: bool,
        replication_factor: Option<i32>,
        force: bool,
    ) -> Result<RestoreClusterResponse> {
        let r = self
            .admin
            .clone()
            .restore_cluster(RestoreClusterRequest {
                from: from.unwrap_or_default().to_string(),
                topics: topics.to_vec(),
                dry_run,
                replication_factor: replication_factor.unwrap_or(0),
                force,
            })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    /// The moves the balancer would start now.
    pub async fn balance_plan(&self) -> Result<Vec<PlannedMove>> {
        let r = self
            .admin
            .clone()
            .balance_plan(BalancePlanRequest {})
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.moves)
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<String> {
        let r = self
            .admin
            .clone()
            .create_topic(CreateTopicRequest {
                name: name.into(),
                partitions,
                replication_factor,
                configs: configs.into_iter().collect(),
                validate_only: false,
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.topic_id)
    }

    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        let r = self
            .admin
            .clone()
            .delete_topic(DeleteTopicRequest { name: name.into() })
            .await?
            .into_inner();
        check_result(r.error)
    }

    pub async fn list_topics(&self) -> Result<Vec<TopicSummary>> {
        let r = self
            .admin
            .clone()
            .list_topics(ListTopicsRequest {})
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.topics)
    }

    pub async fn describe_topic(&self, name: &str) -> Result<DescribeTopicResponse> {
        let r = self
            .admin
            .clone()
            .describe_topic(DescribeTopicRequest { name: name.into() })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    pub async fn alter_configs(
        &self,
        name: &str,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<()> {
        let req = AlterConfigsRequest {
            name: name.into(),
            set: set.into_iter().collect(),
            delete,
            validate_only: false,
        };
        check_result(
            self.admin
                .clone()
                .alter_configs(req)
                .await?
                .into_inner()
                .error,
        )
    }

    pub async fn create_partitions(&self, name: &str, total_count: i32) -> Result<()> {
        let req = CreatePartitionsRequest {
            name: name.into(),
            total_count,
            validate_only: false,
        };
        check_result(
            self.admin
                .clone()
                .create_partitions(req)
                .await?
                .into_inner()
                .error,
        )
    }

    /// Partition count of a topic (fails with UNKNOWN_TOPIC_OR_PARTITION if absent).
    pub async fn partition_count(&self, topic: &str) -> Result<i32> {
        let r = self.refresh_metadata(topic).await?;
        let t = r
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty metadata response".into()))?;
        check(t.error_code, &format!("topic '{topic}' does not exist"))?;
        Ok(t.partitions.len() as i32)
    }

    /// Tier status per partition of `topic` (every topic if `None`).
    pub async fn tiering_status(&self, topic: Option<&str>) -> Result<Vec<PartitionTieringStatus>> {
        Ok(self.tiering_status_full(topic).await?.partitions)
    }

    /// Tier status with the broker's remote-read counters.
    pub async fn tiering_status_full(&self, topic: Option<&str>) -> Result<TieringStatusResponse> {
        let req = TieringStatusRequest {
            topic: topic.unwrap_or_default().to_string(),
        };
        let r = self.admin.clone().tiering_status(req).await?.into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }
}
