//! Transactions: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions,
//! ListTransactions. Each needs WRITE on its transactional id (DESCRIBE to describe
//! or list), as in Kafka, besides what it does to topics and groups.

use shale_broker::error::{Error, Result};
use shale_broker::groups::OffsetCommit;
use shale_broker::replication::{MarkerResult, TxnMarkers};
use shale_broker::txns::TxnDescription;
use shale_security::acl::{Operation, ResourceType};

use crate::{Keyed, RequestContext, Service};

/// A producer's transactional identity on a request.
#[derive(Debug, Clone, Copy)]
pub struct TxnProducer<'a> {
    pub transactional_id: &'a str,
    pub producer_id: i64,
    pub epoch: i16,
}

impl Service {
    fn may_write_txn(&self, ctx: &RequestContext, id: &str) -> Result<()> {
        self.authorize(ctx, Operation::Write, ResourceType::TransactionalId, id)
    }

    /// InitProducerId for a transactional producer: its id and new epoch.
    /// `expected`: the id and epoch a producer restarting its transactions names
    /// (-1, -1 otherwise).
    pub(crate) async fn init_transactional_producer(
        &self,
        ctx: &RequestContext,
        id: &str,
        timeout_ms: i32,
        expected: (i64, i16),
    ) -> Result<(i64, i16)> {
        self.may_write_txn(ctx, id)?;
        self.broker
            .init_transactional_producer(id, timeout_ms, expected)
            .await
    }

    /// AddPartitionsToTxn: one answer per partition (`verify_only`: see
    /// `Broker::add_partitions_to_txn`).
    pub async fn add_partitions_to_txn(
        &self,
        ctx: &RequestContext,
        p: TxnProducer<'_>,
        partitions: Vec<(String, i32)>,
        verify_only: bool,
    ) -> Vec<Keyed<()>> {
        self.call(ctx, "AddPartitionsToTxn", async {
            let keys = partitions.clone();
            let results = match self.may_write_txn(ctx, p.transactional_id) {
                Err(e) => {
                    let e = std::sync::Arc::new(e);
                    keys.iter().map(|_| Err(Error::Shared(e.clone()))).collect()
                }
                Ok(()) => {
                    self.on_allowed_topics(
                        ctx,
                        Operation::Write,
                        partitions,
                        |(t, _)| t,
                        |allowed| async move {
                            self.broker
                                .add_partitions_to_txn(
                                    p.transactional_id,
                                    p.producer_id,
                                    p.epoch,
                                    &allowed,
                                    verify_only,
                                )
                                .await
                        },
                    )
                    .await
                }
            };
            self.keyed(keys, results)
        })
        .await
    }

    /// AddOffsetsToTxn.
    pub async fn add_offsets_to_txn(
        &self,
        ctx: &RequestContext,
        p: TxnProducer<'_>,
        group: &str,
    ) -> Result<()> {
        self.call(ctx, "AddOffsetsToTxn", async {
            let r = async {
                self.may_write_txn(ctx, p.transactional_id)?;
                self.authorize(ctx, Operation::Read, ResourceType::Group, group)?;
                self.broker
                    .add_offsets_to_txn(p.transactional_id, p.producer_id, p.epoch, group)
                    .await
            };
            self.counted(r.await)
        })
        .await
    }

    /// EndTxn: commit or abort.
    pub async fn end_txn(
        &self,
        ctx: &RequestContext,
        p: TxnProducer<'_>,
        commit: bool,
    ) -> Result<()> {
        self.call(ctx, "EndTxn", async {
            let r = async {
                self.may_write_txn(ctx, p.transactional_id)?;
                self.broker
                    .end_txn(p.transactional_id, p.producer_id, p.epoch, commit)
                    .await
            };
            self.counted(r.await)
        })
        .await
    }

    /// TxnOffsetCommit: one answer per partition.
    pub async fn txn_offset_commit(
        &self,
        ctx: &RequestContext,
        p: TxnProducer<'_>,
        group: &str,
        member: Option<(i32, &str, Option<&str>)>,
        offsets: Vec<OffsetCommit>,
    ) -> Result<Vec<Keyed<()>>> {
        self.call(ctx, "TxnOffsetCommit", async {
            let keys: Vec<(String, i32)> = (offsets.iter())
                .map(|o| (o.topic.clone(), o.partition))
                .collect();
            self.counted(self.may_write_txn(ctx, p.transactional_id))?;
            self.counted(self.authorize(ctx, Operation::Read, ResourceType::Group, group))?;
            let mut refused = Ok(());
            let outer = &mut refused;
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Read,
                    offsets,
                    |o| &o.topic,
                    |allowed| async move {
                        let n = allowed.len();
                        let done = self
                            .broker
                            .txn_offset_commit(
                                p.transactional_id,
                                group,
                                p.producer_id,
                                p.epoch,
                                member,
                                allowed,
                            )
                            .await;
                        match done {
                            Ok(results) => results,
                            Err(e) => {
                                *outer = Err(e);
                                (0..n).map(|_| Ok(())).collect()
                            }
                        }
                    },
                )
                .await;
            self.counted(refused)?;
            Ok(self.keyed(keys, results))
        })
        .await
    }

    /// DescribeTransactions: one answer per id.
    pub async fn describe_transactions(
        &self,
        ctx: &RequestContext,
        ids: &[String],
    ) -> Vec<Result<TxnDescription>> {
        self.call(ctx, "DescribeTransactions", async {
            let allowed: Vec<Result<()>> = (ids.iter())
                .map(|id| {
                    self.authorize(ctx, Operation::Describe, ResourceType::TransactionalId, id)
                })
                .collect();
            let mut described = self.broker.describe_transactions(ids).await.into_iter();
            allowed
                .into_iter()
                .map(|a| {
                    let d = described.next().expect("one answer per id");
                    self.counted(a.and(d))
                })
                .collect()
        })
        .await
    }

    /// ListTransactions: those this broker coordinates that the caller may describe.
    pub async fn list_transactions(
        &self,
        ctx: &RequestContext,
        states: &[String],
        producer_ids: &[i64],
    ) -> Result<Vec<TxnDescription>> {
        self.call(ctx, "ListTransactions", async {
            let all = self.counted(self.broker.list_transactions(states, producer_ids).await)?;
            Ok(all
                .into_iter()
                .filter(|t| {
                    self.may(
                        ctx,
                        Operation::Describe,
                        ResourceType::TransactionalId,
                        &t.transactional_id,
                    )
                })
                .collect())
        })
        .await
    }

    /// The partitions of `group` with offsets pending in a transaction (see
    /// `Broker::pending_txn_offsets`).
    pub async fn pending_txn_offsets(
        &self,
        ctx: &RequestContext,
        group: &str,
    ) -> Result<Vec<(String, i32)>> {
        self.authorize(ctx, Operation::Describe, ResourceType::Group, group)?;
        self.broker.pending_txn_offsets(group).await
    }

    /// DescribeProducers for one partition (on its leader).
    pub async fn describe_producers(
        &self,
        ctx: &RequestContext,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<shale_log::producers::ActiveProducer>> {
        self.call(ctx, "DescribeProducers", async {
            let r = self
                .authorize(ctx, Operation::Read, ResourceType::Topic, topic)
                .and_then(|()| self.broker.leader_partition(topic, partition))
                .and_then(|p| p.active_producers());
            self.counted(r)
        })
        .await
    }

    /// Leader side of the inter-broker marker write (only brokers may).
    pub async fn write_txn_markers(
        &self,
        ctx: &RequestContext,
        markers: TxnMarkers,
    ) -> Vec<MarkerResult> {
        self.call(ctx, "WriteTxnMarkers", async {
            match self.authorize_cluster(ctx, Operation::ClusterAction) {
                Ok(()) => self.broker.write_txn_markers(markers).await,
                Err(e) => (markers.partitions.iter())
                    .map(|&(topic_id, partition)| MarkerResult {
                        topic_id,
                        partition,
                        error_code: e.code(),
                        error_message: e.to_string(),
                    })
                    .collect(),
            }
        })
        .await
    }
}
