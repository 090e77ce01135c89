//! Committing offsets: synchronously, asynchronously, and the coordinator's verdicts
//! that make the member join again.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::security::Chan;
use shale_proto::v1::groups_client::GroupsClient;
use shale_proto::v1::*;
use shale_records::ErrorCode;

use super::GroupConsumer;
use crate::assignor::TopicPartition;
use crate::{Result, check, check_result};

impl GroupConsumer {
    /// Commits the current position of every assigned partition.
    pub async fn commit_sync(&mut self) -> Result<()> {
        let positions = self.positions();
        self.commit_offsets(positions).await
    }

    /// Commits the given offsets (the next offset to read, per partition).
    pub async fn commit_offsets(&mut self, offsets: BTreeMap<TopicPartition, i64>) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let req = self.commit_request(offsets);
        let mut coordinator = self.coordinator().await?;
        let r = send_commit(&mut coordinator, req).await;
        if let Err(e) = &r {
            match e.code() {
                Some(ErrorCode::IllegalGeneration | ErrorCode::RebalanceInProgress) => {
                    self.membership().rejoin = true
                }
                Some(ErrorCode::UnknownMemberId) => {
                    let mut m = self.membership();
                    m.member_id.clear();
                    m.rejoin = true;
                }
                Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable) => {
                    self.coordinator = None;
                    self.membership().rejoin = true;
                }
                _ => {}
            }
        } else {
            self.last_commit = Instant::now();
        }
        r
    }

    /// Commits every position without waiting; the task's result says how it went.
    pub async fn commit_async(&mut self) -> Result<tokio::task::JoinHandle<Result<()>>> {
        let req = self.commit_request(self.positions());
        let mut coordinator = self.coordinator().await?;
        self.last_commit = Instant::now();
        Ok(tokio::spawn(async move {
            send_commit(&mut coordinator, req).await
        }))
    }

    fn commit_request(&self, offsets: BTreeMap<TopicPartition, i64>) -> OffsetCommitRequest {
        let m = self.membership();
        OffsetCommitRequest {
            group_id: self.config.group_id.clone(),
            generation_id: m.generation,
            member_id: m.member_id.clone(),
            partitions: offsets
                .into_iter()
                .map(|((topic, partition), offset)| OffsetCommitPartition {
                    topic,
                    partition,
                    offset,
                    metadata: String::new(),
                })
                .collect(),
        }
    }
}

async fn send_commit(coordinator: &mut GroupsClient<Chan>, req: OffsetCommitRequest) -> Result<()> {
    let r = coordinator.offset_commit(req).await?.into_inner();
    check_result(r.error)?;
    for p in r.partitions {
        check(p.error_code, &p.error_message)?;
    }
    Ok(())
}
