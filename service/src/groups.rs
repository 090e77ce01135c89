//! Consumer groups: coordinator lookup, membership (join, sync, heartbeat, leave),
//! committed offsets, and group administration.

use bytes::Bytes;

use super::{BrokerEndpoint, Keyed, RequestContext, Service};
use shale_broker::error::{Error, Result};
use std::collections::BTreeMap;

use shale_broker::groups::{
    Committed, ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatResult,
    GroupDescription, GroupError, GroupListing, GroupState, JoinRequest, JoinResult, OffsetCommit,
};
use shale_security::acl::{CLUSTER_NAME, Operation, ResourceType};

/// A SyncGroup: the leader brings every member's assignment, the others none.
pub struct SyncRequest {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    /// The static member's `group.instance.id`, if it sent one.
    pub group_instance_id: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

/// The member a heartbeat, leave or commit comes from: its id, and the static
/// member's `group.instance.id` if it sent one (a replaced static member is fenced).
#[derive(Debug, Clone, Copy)]
pub struct MemberRef<'a> {
    pub id: &'a str,
    pub instance: Option<&'a str>,
}

impl<'a> MemberRef<'a> {
    /// A member known by its id alone.
    pub fn id(id: &'a str) -> Self {
        Self { id, instance: None }
    }
}

/// What a FindCoordinator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorType {
    Group,
    /// A transactional id's coordinator.
    Transaction,
}

/// A waiter the coordinator dropped (the group moved or the broker stopped).
fn dropped() -> Error {
    GroupError::CoordinatorNotAvailable.into()
}

impl Service {
    /// The broker coordinating `group`, as the asking listener reaches it.
    pub async fn find_coordinator(
        &self,
        ctx: &RequestContext,
        group: &str,
        kind: CoordinatorType,
    ) -> Result<BrokerEndpoint> {
        self.call(ctx, "FindCoordinator", async {
            let found = match kind {
                CoordinatorType::Transaction => {
                    let t = ResourceType::TransactionalId;
                    self.counted(self.authorize(ctx, Operation::Describe, t, group))?;
                    self.broker.txn_coordinator_for(group)
                }
                CoordinatorType::Group => {
                    let g = ResourceType::Group;
                    self.counted(self.authorize(ctx, Operation::Describe, g, group))?;
                    self.broker.coordinator_for(group)
                }
            };
            let r = found.and_then(|(id, _)| {
                let lease = self
                    .live_brokers()
                    .into_iter()
                    .find(|b| b.broker_id == id)
                    .ok_or(GroupError::CoordinatorNotAvailable)?;
                Ok(self
                    .endpoint(ctx, &lease)
                    .ok_or(GroupError::CoordinatorNotAvailable)?)
            });
            self.counted(r)
        })
        .await
    }

    /// Joins a group and waits for the rebalance to complete (up to the group's
    /// rebalance timeout). The member's host is the peer's address.
    pub async fn join_group(
        &self,
        ctx: &RequestContext,
        mut req: JoinRequest,
    ) -> Result<JoinResult> {
        self.call(ctx, "JoinGroup", async {
            if let Some(peer) = ctx.peer {
                req.client_host = peer.ip().to_string();
            }
            let joined = async {
                self.authorize(ctx, Operation::Read, ResourceType::Group, &req.group)?;
                self.broker.ensure_coordinator(&req.group)?;
                let rx = self.broker.coordinators().groups().join(req)?;
                Ok(rx.await.map_err(|_| dropped())??)
            }
            .await;
            self.counted(joined)
        })
        .await
    }

    /// A ConsumerGroupHeartbeat (KIP-848): joins, leaves, or keeps a member of a
    /// consumer-protocol group; answers with its epoch and, when they changed, its
    /// partitions. The member's host is the peer's address.
    pub async fn consumer_group_heartbeat(
        &self,
        ctx: &RequestContext,
        mut req: ConsumerHeartbeat,
    ) -> Result<ConsumerHeartbeatResult> {
        self.call(ctx, "ConsumerGroupHeartbeat", async {
            if let Some(peer) = ctx.peer {
                req.client_host = peer.ip().to_string();
            }
            let beat = (|| {
                self.authorize(ctx, Operation::Read, ResourceType::Group, &req.group)?;
                self.broker.ensure_coordinator(&req.group)?;
                let topics: BTreeMap<String, (uuid::Uuid, i32)> = self
                    .broker
                    .topics_snapshot()
                    .iter()
                    .map(|t| (t.meta.name.clone(), (t.meta.id, t.meta.partitions)))
                    .collect();
                let groups = self.broker.coordinators().groups();
                Ok(groups.consumer_heartbeat(req, &topics)?)
            })();
            self.counted(beat)
        })
        .await
    }

    /// A consumer-protocol group as ConsumerGroupDescribe shows it.
    pub async fn describe_consumer_group(
        &self,
        ctx: &RequestContext,
        group: &str,
    ) -> Result<ConsumerGroupDescription> {
        self.call(ctx, "ConsumerGroupDescribe", async {
            let found = (|| {
                self.authorize(ctx, Operation::Describe, ResourceType::Group, group)?;
                self.broker.ensure_coordinator(group)?;
                let groups = self.broker.coordinators().groups();
                groups
                    .describe_consumer_group(group)
                    .ok_or_else(|| GroupError::GroupNotFound(group.to_string()).into())
            })();
            self.counted(found)
        })
        .await
    }

    /// Hands in (leader) or waits for (others) the generation's assignments; answers
    /// with this member's.
    pub async fn sync_group(&self, ctx: &RequestContext, req: SyncRequest) -> Result<Bytes> {
        self.call(ctx, "SyncGroup", async {
            let synced = async {
                self.authorize(ctx, Operation::Read, ResourceType::Group, &req.group)?;
                self.broker.ensure_coordinator(&req.group)?;
                self.broker.coordinators().groups().check_instance(
                    &req.group,
                    &req.member_id,
                    req.group_instance_id.as_deref(),
                )?;
                let rx = self.broker.coordinators().groups().sync(
                    &req.group,
                    req.generation,
                    &req.member_id,
                    req.assignments,
                )?;
                Ok(rx.await.map_err(|_| dropped())??)
            }
            .await;
            self.counted(synced)
        })
        .await
    }

    pub async fn heartbeat(
        &self,
        ctx: &RequestContext,
        group: &str,
        generation: i32,
        member: MemberRef<'_>,
    ) -> Result<()> {
        self.call(ctx, "Heartbeat", async {
            self.counted(self.authorize(ctx, Operation::Read, ResourceType::Group, group))?;
            let r = self.broker.ensure_coordinator(group).and_then(|()| {
                let groups = &self.broker.coordinators().groups();
                groups.check_instance(group, member.id, member.instance)?;
                Ok(groups.heartbeat(group, generation, member.id)?)
            });
            self.counted(r)
        })
        .await
    }

    /// A member leaves. A static member may be named by its instance id alone (an
    /// empty member id), as Kafka's admin removal does.
    pub async fn leave_group(
        &self,
        ctx: &RequestContext,
        group: &str,
        member: MemberRef<'_>,
    ) -> Result<()> {
        self.call(ctx, "LeaveGroup", async {
            self.counted(self.authorize(ctx, Operation::Read, ResourceType::Group, group))?;
            let r = self.broker.ensure_coordinator(group).and_then(|()| {
                let groups = &self.broker.coordinators().groups();
                let id = match (member.id, member.instance) {
                    ("", Some(instance)) => groups
                        .member_of_instance(group, instance)
                        .unwrap_or_default(),
                    (id, instance) => {
                        groups.check_instance(group, id, instance)?;
                        id.to_string()
                    }
                };
                Ok(groups.leave(group, &id)?)
            });
            self.counted(r)
        })
        .await
    }

    /// Commits offsets for a member of the current generation (or, with an empty
    /// member id and generation -1, for a group without members). The outer error
    /// refuses the whole commit (not the coordinator, unknown member, stale
    /// generation); otherwise each partition gets its own answer.
    pub async fn commit_offsets(
        &self,
        ctx: &RequestContext,
        group: &str,
        generation: i32,
        member: MemberRef<'_>,
        offsets: Vec<OffsetCommit>,
    ) -> Result<Vec<Keyed<()>>> {
        self.call(ctx, "OffsetCommit", async {
            let keys: Vec<(String, i32)> = offsets
                .iter()
                .map(|o| (o.topic.clone(), o.partition))
                .collect();
            self.counted(self.authorize(ctx, Operation::Read, ResourceType::Group, group))?;
            let fenced = self.broker.coordinators().groups().check_instance(
                group,
                member.id,
                member.instance,
            );
            self.counted(fenced.map_err(Error::from))?;
            // Each topic needs READ; the rest of the commit goes on without the others.
            let mut refused = Ok(());
            let outer = &mut refused;
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Read,
                    offsets,
                    |o| &o.topic,
                    |allowed| async move {
                        let done = self
                            .broker
                            .commit_offsets(group, generation, member.id, allowed)
                            .await;
                        done.unwrap_or_else(|e| {
                            *outer = Err(e);
                            Vec::new()
                        })
                    },
                )
                .await;
            self.counted(refused)?;
            Ok(self.keyed(keys, results))
        })
        .await
    }

    /// Deletes the committed offsets of some partitions of a group without members.
    /// The outer error refuses the whole request (not the coordinator, members).
    pub async fn delete_offsets(
        &self,
        ctx: &RequestContext,
        group: &str,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<Keyed<()>>> {
        self.call(ctx, "OffsetDelete", async {
            self.counted(self.authorize(ctx, Operation::Delete, ResourceType::Group, group))?;
            let keys = partitions.clone();
            let mut refused = Ok(());
            let outer = &mut refused;
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Read,
                    partitions,
                    |p| &p.0,
                    |allowed| async move {
                        self.broker
                            .delete_offsets(group, allowed)
                            .await
                            .unwrap_or_else(|e| {
                                *outer = Err(e);
                                Vec::new()
                            })
                    },
                )
                .await;
            self.counted(refused)?;
            Ok(self.keyed(keys, results))
        })
        .await
    }

    /// A group's committed offsets (of topics that still exist).
    pub async fn fetch_offsets(&self, ctx: &RequestContext, group: &str) -> Result<Vec<Committed>> {
        self.call(ctx, "OffsetFetch", async {
            self.counted(self.authorize(ctx, Operation::Describe, ResourceType::Group, group))?;
            let committed = self.counted(self.broker.committed_offsets(group).await)?;
            // Only the topics the client may describe.
            Ok(committed
                .into_iter()
                .filter(|c| self.may(ctx, Operation::Describe, ResourceType::Topic, &c.topic))
                .collect())
        })
        .await
    }

    /// Groups this broker coordinates, and groups known by their committed offsets.
    pub async fn list_groups(&self, ctx: &RequestContext) -> Result<Vec<GroupListing>> {
        self.call(ctx, "ListGroups", async {
            let groups = self.counted(self.broker.list_groups().await)?;
            // DESCRIBE on the cluster lists every group; else the groups describable.
            let all = self.may(
                ctx,
                Operation::Describe,
                ResourceType::Cluster,
                CLUSTER_NAME,
            );
            Ok(groups
                .into_iter()
                .filter(|g| {
                    all || self.may(ctx, Operation::Describe, ResourceType::Group, &g.group)
                })
                .collect())
        })
        .await
    }

    /// A group's state and members (a group without members, or unknown, is
    /// `Empty`).
    pub async fn describe_group(
        &self,
        ctx: &RequestContext,
        group: &str,
    ) -> Result<GroupDescription> {
        self.call(ctx, "DescribeGroup", async {
            self.counted(self.authorize(ctx, Operation::Describe, ResourceType::Group, group))?;
            let r = self.broker.ensure_coordinator(group).map(|()| {
                self.broker
                    .coordinators()
                    .groups()
                    .describe(group)
                    .unwrap_or_else(|| GroupDescription {
                        state: GroupState::Empty,
                        protocol_type: String::new(),
                        protocol: String::new(),
                        generation: 0,
                        leader: String::new(),
                        members: Vec::new(),
                    })
            });
            self.counted(r)
        })
        .await
    }

    /// Deletes a group without members, with its committed offsets.
    pub async fn delete_group(&self, ctx: &RequestContext, group: &str) -> Result<()> {
        self.call(ctx, "DeleteGroup", async {
            self.counted(self.authorize(ctx, Operation::Delete, ResourceType::Group, group))?;
            self.counted(self.broker.delete_group(group).await)
        })
        .await
    }
}
