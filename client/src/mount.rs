//! Unmounting a topic into the bucket and mounting it again (`UnmountTopic`,
//! `MountTopic`): the unmount makes the topic read-only, waits on each partition's
//! leader until everything it holds is in the bucket, then detaches the topic.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shale_proto::v1::unmount_topic_request::Step;
use shale_proto::v1::*;

use crate::connection::admin_client;
use crate::{Client, Error, Result, check_result};

/// How often an unmount asks the leaders how far they copied.
const POLL: Duration = Duration::from_millis(500);

impl Client {
    /// Unmounts `name` (see the module's description), waiting at most `timeout` for
    /// its leaders to copy their logs. On a timeout the topic stays read-only: run
    /// the unmount again, or remove `read.only` to take writes again.
    pub async fn unmount_topic(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<UnmountTopicResponse> {
        self.unmount_step(name, Step::Freeze, Vec::new()).await?;
        let deadline = Instant::now() + timeout;
        // The same ends twice in a row: no write was on its way when they were read.
        let mut last: Option<Vec<i64>> = None;
        let mut waiting;
        loop {
            match self.copied_ends(name).await? {
                Ok(ends) if last.as_ref() == Some(&ends) => {
                    return self.unmount_step(name, Step::Detach, ends).await;
                }
                Ok(ends) => {
                    waiting = format!("log ends {ends:?} read once, not yet confirmed");
                    last = Some(ends);
                }
                Err(why) => {
                    waiting = why;
                    last = None;
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "topic '{name}' is not all in the bucket yet ({waiting}); it \
                     stays read-only: run the unmount again, or take writes again with \
                     shale topic alter {name} --delete-config read.only"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn unmount_step(
        &self,
        name: &str,
        step: Step,
        ends: Vec<i64>,
    ) -> Result<UnmountTopicResponse> {
        let r = self
            .admin
            .clone()
            .unmount_topic(UnmountTopicRequest {
                name: name.to_string(),
                step: step as i32,
                ends,
            })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    /// Each partition's log end, once its leader is read-only and has copied its
    /// whole log; else what is still awaited.
    async fn copied_ends(&self, name: &str) -> Result<std::result::Result<Vec<i64>, String>> {
        let md = self.refresh_metadata(name).await?;
        let Some(topic) = md.topics.iter().find(|t| t.name == name) else {
            return Err(Error::Invalid(format!("topic '{name}' does not exist")));
        };
        crate::error::check(topic.error_code, &format!("topic '{name}'"))?;
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for p in &topic.partitions {
            if p.leader < 0 {
                return Ok(Err(format!("partition {} has no leader", p.partition)));
            }
            by_leader.entry(p.leader).or_default().push(p.partition);
        }
        let mut ends = vec![0; topic.partitions.len()];
        for (leader, partitions) in by_leader {
            let Some(address) = md.brokers.iter().find(|b| b.broker_id == leader) else {
                return Ok(Err(format!("broker {leader} is not live")));
            };
            let mut admin = admin_client(self.channel(&address.address)?);
            let req = TieringStatusRequest {
                topic: name.to_string(),
            };
            // A leader restarting, or not serving the topic yet: asked again.
            let status = match admin.tiering_status(req).await {
                Ok(r) => r.into_inner(),
                Err(e) => return Ok(Err(format!("broker {leader}: {}", e.message()))),
            };
            if let Some(e) = status.error.filter(|e| e.error_code != 0) {
                return Ok(Err(format!("broker {leader}: {}", e.error_message)));
            }
            for p in partitions {
                let s = status.partitions.iter().find(|s| s.partition == p);
                let Some(s) = s.filter(|s| s.leader && s.read_only) else {
                    return Ok(Err(format!(
                        "broker {leader} does not lead partition {p} read-only yet"
                    )));
                };
                if s.high_watermark != s.log_end_offset
                    || s.highest_uploaded_offset + 1 < s.log_end_offset
                    || s.tier_busy
                {
                    return Ok(Err(format!(
                        "partition {p}: log end {}, high watermark {}, in the bucket up to {}{}",
                        s.log_end_offset,
                        s.high_watermark,
                        s.highest_uploaded_offset,
                        if s.tier_busy {
                            ", a copy under way"
                        } else {
                            ""
                        }
                    )));
                }
                if let Some(e) = ends.get_mut(p as usize) {
                    *e = s.log_end_offset;
                }
            }
        }
        Ok(Ok(ends))
    }

    /// Mounts `name`, unmounted into the cluster's bucket (`from`, if given, must name
    /// it). `replication_factor` replaces the topic's own; `force` mounts although
    /// another cluster owns it.
    pub async fn mount_topic(
        &self,
        name: &str,
        from: Option<&str>,
        replication_factor: Option<i32>,
        force: bool,
    ) -> Result<MountTopicResponse> {
        let r = self
            .admin
            .clone()
            .mount_topic(MountTopicRequest {
                name: name.to_string(),
                from: from.unwrap_or_default().to_string(),
                replication_factor: replication_factor.unwrap_or(0),
                force,
            })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }
}
