//! Group admin calls: finding a group's coordinator, listing and describing groups,
//! reading, committing and deleting their offsets.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::security::Chan;
use shale_proto::v1::groups_client::GroupsClient;
use shale_proto::v1::*;

use crate::{Client, Error, Result, check, check_result};

impl Client {
    /// A groups client of the bootstrap broker.
    fn groups_any(&self) -> GroupsClient<Chan> {
        GroupsClient::new(self.bootstrap_channel.clone())
    }

    /// The coordinator of `group` (asking the bootstrap broker, then the others).
    pub async fn group_coordinator(&self, group: &str) -> Result<GroupsClient<Chan>> {
        let mut candidates = vec![self.groups_any()];
        let known: Vec<String> = self.view().brokers.values().cloned().collect();
        for a in known.iter().chain(self.bootstrap.iter()) {
            candidates.push(GroupsClient::new(self.channel(a)?));
        }
        let mut last = None;
        for mut c in candidates {
            let mut req = tonic::Request::new(FindCoordinatorRequest {
                group_id: group.into(),
            });
            req.set_timeout(Duration::from_secs(5));
            match c.find_coordinator(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    check_result(r.error)?;
                    return Ok(GroupsClient::new(self.channel(&r.address)?));
                }
                Err(e) => last = Some(Error::Rpc(e)),
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no broker to ask".into())))
    }

    /// A group's committed offsets: (topic, partition) → offset.
    pub async fn committed_offsets(&self, group: &str) -> Result<BTreeMap<(String, i32), i64>> {
        Ok(self
            .committed_offsets_full(group)
            .await?
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect())
    }

    pub async fn committed_offsets_full(
        &self,
        group: &str,
    ) -> Result<Vec<CommittedPartitionOffset>> {
        let r = self
            .groups_any()
            .offset_fetch(OffsetFetchRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.offsets)
    }

    /// Groups known to any live broker (merged: the coordinator's view wins).
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let mut addresses: Vec<String> = self.bootstrap.clone();
        if let Ok(m) = self
            .admin
            .clone()
            .metadata(MetadataRequest { topics: vec![] })
            .await
        {
            addresses.extend(m.into_inner().brokers.into_iter().map(|b| b.address));
        }
        addresses.sort();
        addresses.dedup();
        let mut out: BTreeMap<String, GroupListing> = BTreeMap::new();
        let mut reached = false;
        for a in addresses {
            let mut c = GroupsClient::new(self.channel(&a)?);
            let mut req = tonic::Request::new(ListGroupsRequest {});
            req.set_timeout(Duration::from_secs(5));
            let Ok(r) = c.list_groups(req).await else {
                continue;
            };
            let r = r.into_inner();
            if check_result(r.error).is_err() {
                continue;
            }
            reached = true;
            for g in r.groups {
                let better = out.get(&g.group_id).is_none_or(|o| o.coordinator < 0);
                if better {
                    out.insert(g.group_id.clone(), g);
                }
            }
        }
        if !reached {
            return Err(Error::Invalid("no broker answered".into()));
        }
        Ok(out.into_values().collect())
    }

    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        let r = self
            .group_coordinator(group)
            .await?
            .describe_group(DescribeGroupRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    /// Commits offsets for a group without members (admin: generation -1).
    pub async fn commit_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<(String, i32), i64>,
    ) -> Result<()> {
        let r = self
            .group_coordinator(group)
            .await?
            .offset_commit(OffsetCommitRequest {
                group_id: group.into(),
                generation_id: -1,
                member_id: String::new(),
                partitions: offsets
                    .iter()
                    .map(|((topic, partition), offset)| OffsetCommitPartition {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: *offset,
                        metadata: String::new(),
                    })
                    .collect(),
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        for p in r.partitions {
            check(p.error_code, &p.error_message)?;
        }
        Ok(())
    }

    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let r = self
            .group_coordinator(group)
            .await?
            .delete_group(DeleteGroupRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner();
        check_result(r.error)
    }
}
