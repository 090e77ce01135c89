//! Refreshing the registry: the broker reads the metastore (topics, partition states,
//! brokers, users and ACLs) and opens, reconfigures or removes its local partitions to
//! match. It also creates the inter-broker user on a cluster's first start.

use std::collections::HashMap;
use std::sync::Arc;

use shale_metastore::PartitionState;
use shale_security::ScramMechanism;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::{Partition, partition_dir, read_topic_id};
use crate::registry::TopicState;

/// PBKDF2 iterations of the inter-broker user's credentials.
const INTER_BROKER_ITERATIONS: i32 = 8192;

impl Broker {
    /// Creates the inter-broker user's SCRAM credentials (both mechanisms, from
    /// `cluster.inter_broker_password_file`) when the metastore has no user at all:
    /// the first user of a cluster whose listeners all authenticate, with which an
    /// operator creates the others. Once any user exists nothing is created, so a
    /// deleted inter-broker user stays deleted across restarts.
    pub(crate) async fn create_inter_broker_user(&self) -> Result<()> {
        use ring::rand::SecureRandom;
        let Some((user, password)) = self.config.inter_broker.credentials.clone() else {
            return Ok(());
        };
        if !self.metastore.list_scram_credentials().await?.is_empty() {
            return Ok(());
        }
        let user_ = user.clone();
        let rows = tokio::task::spawn_blocking(move || {
            ScramMechanism::ALL
                .into_iter()
                .map(|m| {
                    let mut salt = [0u8; 32];
                    ring::rand::SystemRandom::new()
                        .fill(&mut salt)
                        .map_err(|_| {
                            Error::Storage(std::io::Error::other(
                                "the system's random source failed",
                            ))
                        })?;
                    let salted = m.salted_password(
                        password.expose().as_bytes(),
                        &salt,
                        INTER_BROKER_ITERATIONS as u32,
                    );
                    let (stored_key, server_key) = m.keys(&salted);
                    Ok(shale_metastore::ScramCredential {
                        user: user_.clone(),
                        mechanism: m.name().to_string(),
                        salt: salt.to_vec(),
                        stored_key,
                        server_key,
                        iterations: INTER_BROKER_ITERATIONS,
                    })
                })
                .collect::<Result<Vec<_>>>()
        })
        .await??;
        for row in &rows {
            self.metastore.upsert_scram_credential(row).await?;
        }
        tracing::info!(user, "created the inter-broker user's SCRAM credentials");
        Ok(())
    }

    /// Brings local partitions in line with the metastore: first removes topics that
    /// are gone (or re-created under a new id), then opens the replicas this broker
    /// holds, reconfigures them, and applies each partition's leader, epoch and ISR.
    pub async fn reconcile(&self) -> Result<()> {
        let registry = &self.registry;
        let _guard = registry.lock_refresh().await;
        let security = &self.security;
        (security.users()).replace(self.metastore.list_scram_credentials().await?);
        (security.authorizer()).replace(&self.metastore.list_acls().await?);
        let wanted = self.metastore.list_topics().await?;
        let all_states = self.metastore.list_partition_states().await?;
        // Where DeleteRecords moved partitions' log starts: applied with their roles.
        let log_starts: HashMap<(uuid::Uuid, i32), i64> = self
            .metastore
            .log_start_offsets()
            .await?
            .into_iter()
            .map(|(id, p, offset)| ((id, p), offset))
            .collect();
        self.set_brokers(self.metastore.list_brokers().await?);
        let me = self.config.broker_id;
        let mut current = registry.snapshot();
        let ids: HashMap<&str, uuid::Uuid> =
            wanted.iter().map(|t| (t.name.as_str(), t.id)).collect();
        let removed: Vec<Arc<TopicState>> = current
            .extract_if(|name, s| ids.get(name.as_str()) != Some(&s.meta.id))
            .map(|(_, s)| s)
            .collect();
        if !removed.is_empty() {
            registry
                .failures()
                .retain(|(t, _), _| removed.iter().all(|r| r.meta.id != *t));
            // Unpublish first, then delete: a re-created topic of the same name opens
            // the same directories below, so the deletion must be over by then.
            registry.publish(current.clone());
            self.delete_local(removed).await?;
        }
        let digest = all_states.iter().fold(all_states.len() as u64, |h, s| {
            h.wrapping_mul(31).wrapping_add(s.version as u64)
        });
        registry.set_states_digest(digest);
        let mut states_of: HashMap<uuid::Uuid, Vec<PartitionState>> = HashMap::new();
        for s in all_states {
            states_of.entry(s.topic_id).or_default().push(s);
        }
        let mut next = HashMap::with_capacity(wanted.len());
        let mut to_apply = Vec::new();
        for meta in wanted {
            let config = Arc::new(self.resolve_config(&meta.configs).unwrap_or_else(|e| {
                tracing::error!(topic = %meta.name, error = %e, "stored topic config is invalid, using defaults");
                self.config.topic_defaults.clone()
            }));
            let states = states_of.remove(&meta.id).unwrap_or_default();
            let existing = current.get(&meta.name);
            let mut partitions = existing.map(|s| s.partitions.clone()).unwrap_or_default();
            if existing.is_some_and(|s| *s.config != *config) {
                partitions
                    .iter()
                    .flatten()
                    .for_each(|p| p.set_config(config.clone()));
            }
            partitions.resize(meta.partitions.max(0) as usize, None);
            // Replicas moved off this broker by a reassignment: their copy goes.
            for s in states.iter().filter(|s| !s.replicas.contains(&me)) {
                let slot = partitions.get_mut(s.partition as usize);
                if let Some(slot) = slot
                    && let Some(p) = slot.clone()
                    && self.remove_replica(&p, s).await
                {
                    *slot = None;
                    registry.failures().remove(&(meta.id, s.partition));
                }
            }
            let missing: Vec<i32> = states
                .iter()
                .filter(|s| s.replicas.contains(&me))
                .map(|s| s.partition)
                .filter(|&p| partitions.get(p as usize).is_some_and(Option::is_none))
                .collect();
            if !missing.is_empty() {
                let (shared, name, id, cfg) = (
                    self.registry.shared().clone(),
                    meta.name.clone(),
                    meta.id,
                    config.clone(),
                );
                let opened = tokio::task::spawn_blocking(move || {
                    let opened = missing
                        .into_iter()
                        .map(|p| {
                            let open =
                                Partition::open(&shared, &name, p, id, cfg.clone(), now_ms());
                            (p, open.map(Arc::new))
                        })
                        .collect::<Vec<_>>();
                    // New partition directories survive a power loss from here on.
                    if let Err(e) = std::fs::File::open(&shared.data_dir).and_then(|d| d.sync_all())
                    {
                        tracing::error!(error = %e, "cannot fsync the data directory");
                    }
                    opened
                })
                .await
                .map_err(Error::from)?;
                let mut count = 0;
                let mut failures = registry.failures();
                for (p, part) in opened {
                    match part {
                        Ok(part) => {
                            partitions[p as usize] = Some(part);
                            failures.remove(&(meta.id, p));
                            count += 1;
                        }
                        // Left unopened (this broker serves no replica of it); the next
                        // refresh tries again.
                        Err(e) => {
                            tracing::error!(topic = %meta.name, partition = p, error = %e,
                                "cannot open partition");
                            failures.insert((meta.id, p), e.to_string());
                        }
                    }
                }
                drop(failures);
                tracing::info!(topic = %meta.name, partitions = count, "opened partitions");
            }
            for s in &states {
                if let Some(Some(p)) = partitions.get(s.partition as usize) {
                    to_apply.push((p.clone(), s.clone()));
                }
            }
            next.insert(
                meta.name.clone(),
                Arc::new(TopicState {
                    meta,
                    config,
                    states,
                    partitions,
                }),
            );
        }
        let taking_lead = to_apply
            .iter()
            .filter(|(p, s)| {
                s.leader == me
                    && s.version > p.role().version
                    && !(p.is_leader() && p.leader_epoch() == s.leader_epoch)
            })
            .map(|(p, _)| p.clone())
            .collect();
        let unread = self.read_remote_logs_before_leading(taking_lead).await;
        if !unread.is_empty() {
            tracing::warn!(
                partitions = unread.len(),
                "not taking the lead before the remote log is read; the next refresh retries"
            );
            to_apply.retain(|(_, s)| !unread.contains(&(s.topic_id, s.partition)));
        }
        tokio::task::spawn_blocking(move || {
            let now = now_ms();
            for (p, s) in to_apply {
                if let Err(e) = p.apply_state(&s, now) {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "cannot apply the partition's role");
                }
                if let Some(&offset) = log_starts.get(&(s.topic_id, s.partition))
                    && let Err(e) = p.delete_records_below(offset)
                {
                    tracing::error!(topic = %p.topic, partition = p.index, offset, error = %e,
                        "cannot delete records below the partition's log start");
                }
            }
        })
        .await
        .map_err(Error::from)?;
        registry.publish(next);
        self.load_remote_indexes().await;
        Ok(())
    }

    /// Closes and deletes a replica no longer assigned to this broker (`state`: the
    /// partition's, which it applies first, so nothing still holding it acts as
    /// leader), once no copy to the object store runs on it. False (kept, closed, for
    /// the next refresh to try again) while one does or if its files could not all be
    /// deleted. Its records are on the replicas that took over: a reassignment
    /// finishes only when enough of them are in sync.
    async fn remove_replica(&self, p: &Arc<Partition>, state: &PartitionState) -> bool {
        let Ok(_tier) = tokio::time::timeout(crate::tiering::TIER_WAIT, p.tier_lock.lock()).await
        else {
            return false;
        };
        let (p, files) = (p.clone(), self.registry.shared().files.clone());
        let (data_dir, state) = (self.config.data_dir.clone(), state.clone());
        let removed = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            if let Err(e) = p.apply_state(&state, now).and_then(|()| p.close(now)) {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e,
                    "cannot close a replica before deleting it");
            }
            let dir = p.dir();
            files.forget_dir(&dir);
            let removed = match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => std::fs::File::open(&data_dir).and_then(|d| d.sync_all()),
            };
            match &removed {
                Ok(()) => tracing::info!(topic = %p.topic, partition = p.index,
                    "deleted the replica: the partition was reassigned away from this broker"),
                Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, error = %e,
                    "cannot delete the files of a replica reassigned away from this broker; \
                     the next refresh tries again"),
            }
            removed.is_ok()
        })
        .await;
        removed.unwrap_or(false)
    }

    /// Deletes the local directories of removed topics (only those still carrying the
    /// removed topic's id), whether or not this broker had opened them.
    async fn delete_local(&self, removed: Vec<Arc<TopicState>>) -> Result<()> {
        let data_dir = &self.config.data_dir;
        let dirs: Vec<(std::path::PathBuf, uuid::Uuid)> = removed
            .iter()
            .flat_map(|s| {
                (0..s.meta.partitions.max(0))
                    .map(|p| (partition_dir(data_dir, &s.meta.name, p), s.meta.id))
            })
            .collect();
        for s in &removed {
            tracing::info!(topic = %s.meta.name, id = %s.meta.id, "deleting local partitions of removed topic");
        }
        let files = self.registry.shared().files.clone();
        tokio::task::spawn_blocking(move || {
            for (dir, id) in dirs {
                match read_topic_id(&dir) {
                    Ok(Some(found)) if found == id => {}
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "not deleting a partition directory whose metadata cannot be read");
                        continue;
                    }
                }
                files.forget_dir(&dir);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot delete partition directory");
                }
            }
        })
        .await
        .map_err(Error::from)
    }
}
