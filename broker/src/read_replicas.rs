//! Read-replica topics: a topic of another cluster served read-only from that cluster's
//! bucket (`read.replica.of = "s3://bucket/prefix"`), so that replays run on their own
//! brokers and caches and never touch the brokers that take the topic's writes.
//!
//! The topic keeps its source's id and partition count. Every
//! `tiering.read_replica_poll_interval_ms`, each broker holding replicas of it lists the
//! topic's prefix in the source bucket once (never per fetch), reads the `.meta` of
//! segments it has not seen, plans each partition's remote log as a restore would
//! (`shale_tiering::bucket`), and installs it: its local log, which never takes a
//! record, restarts after the remote log's end, so every offset is read from the
//! source's segments through this broker's read cache, and consumers waiting at the
//! end are woken. Produce, DeleteRecords, new partitions and uploads are refused or
//! skipped; the source's retention and compaction show at the next poll. Nothing is
//! ever written to the source bucket.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::path::Path;
use shale_metastore::{NewTopic, RestoredTopic, Topic};
use shale_tiering::ObjectStoreRef;
use shale_tiering::bucket::{self, FoundSegment};
use shale_tiering::layout::SegmentMeta;
use shale_tiering::routes::RoutingStore;
use uuid::Uuid;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::Partition;
use crate::registry::TopicState;
use crate::tiering::remote_state_of;

/// What this broker keeps of the read-replica topics it serves.
pub(crate) struct ReadReplicas {
    /// The store remote reads go through: this cluster's bucket, and each read
    /// replica's source for its topic's paths.
    pub(crate) routes: Arc<RoutingStore>,
    /// The source buckets, opened once each, by URL.
    stores: tokio::sync::Mutex<HashMap<String, ObjectStoreRef>>,
    /// The segments' descriptions read so far, by topic and segment id.
    metas: Mutex<HashMap<Uuid, HashMap<Uuid, SegmentMeta>>>,
}

impl ReadReplicas {
    pub(crate) fn new(routes: Arc<RoutingStore>) -> Self {
        Self {
            routes,
            stores: Default::default(),
            metas: Default::default(),
        }
    }
}

impl Broker {
    /// The source bucket `url`, opened with this broker's `[object_store]` settings.
    async fn source_store(&self, url: &str) -> Result<ObjectStoreRef> {
        let mut stores = self.tier.read_replicas.stores.lock().await;
        if let Some(store) = stores.get(url) {
            return Ok(store.clone());
        }
        let store = shale_tiering::open(url, &self.config.object_store)
            .await
            .map_err(|e| Error::InvalidRequest(format!("cannot open {url}: {e}")))?;
        stores.insert(url.to_string(), store.clone());
        Ok(store)
    }

    /// Creates topic `name` as a read replica of the topic of that name in the bucket
    /// `url`: with its id and partition count (from the source's snapshots) and
    /// `replication_factor` replicas here.
    pub(crate) async fn create_read_replica(
        &self,
        name: &str,
        url: &str,
        partitions: i32,
        replication_factor: i32,
        mut configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Topic> {
        let store = self.source_store(url).await?;
        let (id, count) = find_source_topic(&store, name, url).await?;
        if partitions != -1 && partitions != count {
            return Err(Error::InvalidPartitions(format!(
                "a read replica has its source's partitions: '{name}' has {count} in {url}"
            )));
        }
        configs.insert("read.replica.of".into(), url.to_string());
        configs.insert("remote.storage.enable".into(), "false".into());
        let config = self.resolve_config(&configs)?;
        self.check_topic_config(&config, &configs, replication_factor)?;
        let assignments = (self.assign_replicas(name, 0, count, replication_factor)).await?;
        if self.metastore.get_topic(name).await?.is_some() {
            return Err(Error::TopicAlreadyExists(name.to_string()));
        }
        let topic = NewTopic {
            name: name.to_string(),
            partitions: count,
            replication_factor,
            configs,
            assignments,
        };
        if validate_only {
            return Ok(Topic {
                id,
                name: topic.name,
                partitions: count,
                replication_factor,
                configs: topic.configs,
                created_at_ms: 0,
            });
        }
        let n = count as usize;
        let restored = RestoredTopic {
            id,
            topic,
            created_at_ms: now_ms(),
            leader_epochs: vec![0; n],
            log_starts: vec![0; n],
            segments: Vec::new(),
            copied_ends: vec![-1; n],
            leftovers: Vec::new(),
        };
        let topic = self.metastore.restore_topics(&[restored]).await?.remove(0);
        tracing::info!(topic = %topic.name, id = %topic.id, source = url, "created read-replica topic");
        self.reconcile().await?;
        // Served at once where it can be; a failure here is the next poll's to retry.
        if let Ok(t) = self.topic(name)
            && let Err(e) = self.follow_source(&t).await
        {
            tracing::warn!(topic = name, source = url, error = %e, "cannot follow the read replica's source yet");
        }
        Ok(topic)
    }

    /// One pass over the read-replica topics this broker holds replicas of, all at
    /// once, each within a bound (an unreachable source holds up only its own topics).
    pub(crate) async fn read_replica_pass(&self) -> Result<()> {
        let topics = self.topics_snapshot();
        let replicas = (topics.iter()).filter(|t| {
            !t.config.read_replica_of.is_empty() && t.partitions.iter().any(Option::is_some)
        });
        let bound = Duration::from_millis(self.config.tiering.read_replica_poll_interval_ms)
            .max(Duration::from_secs(30));
        futures::future::join_all(replicas.map(|t| async move {
            let outcome = tokio::time::timeout(bound, self.follow_source(t)).await;
            let error = match outcome {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_elapsed) => format!("no answer within {bound:?}"),
            };
            tracing::warn!(topic = %t.meta.name, source = %t.config.read_replica_of, error,
                "cannot follow the read replica's source");
        }))
        .await;
        Ok(())
    }

    /// Lists the topic's prefix in its source once, and installs each partition's
    /// remote log as the source's objects show it.
    async fn follow_source(&self, t: &TopicState) -> Result<()> {
        let id = t.meta.id;
        let store = self.source_store(&t.config.read_replica_of).await?;
        self.tier.read_replicas.routes.route(id, store.clone());
        let prefix = Path::from(id.to_string());
        let store_error = |e: object_store::Error| Error::Tiering(e.into());
        let mut listing =
            (bucket::list_bucket(&store, Some(&prefix)).await).map_err(store_error)?;
        let mut partitions = listing.segments.remove(&id).unwrap_or_default();
        // A partition the source added since: the replica grows with it, as far as
        // segments show (the next refresh opens the new partitions).
        if let Some(highest) = partitions.keys().max().copied()
            && highest >= t.meta.partitions
        {
            self.grow_read_replica(t, highest + 1).await?;
        }
        // Only the partitions held here are read.
        partitions.retain(|p, _| t.partitions.get(*p as usize).is_some_and(Option::is_some));
        let known = self.known_metas(id, &mut partitions);
        for found in partitions.values_mut() {
            bucket::read_metas(&store, found)
                .await
                .map_err(store_error)?;
        }
        self.remember_metas(id, &partitions, known);
        for p in t.partitions.iter().flatten() {
            let found = partitions.get(&p.index).map_or(&[][..], Vec::as_slice);
            match bucket::plan_partition(found) {
                Ok(plan) => {
                    self.bring_state_up_to_date(t, p, plan.max_epoch).await;
                    follow(p, plan)?
                }
                Err(problems) => tracing::warn!(topic = %t.meta.name, partition = p.index,
                    problems = ?problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "the source's objects do not hold together; keeping the remote log as it was"),
            }
        }
        Ok(())
    }

    /// Adds partitions to a read-replica topic, up to `total`, as its source did.
    async fn grow_read_replica(&self, t: &TopicState, total: i32) -> Result<()> {
        let (name, have) = (&t.meta.name, t.meta.partitions);
        let assignments = self
            .assign_replicas(name, have, total - have, t.meta.replication_factor)
            .await?;
        match self
            .metastore
            .add_partitions(name, total, &assignments)
            .await
        {
            Ok(_) => {
                tracing::info!(topic = %name, total, "read replica: partitions added, as the source did");
                self.registry.stale();
                Ok(())
            }
            // Another broker holding replicas added them first.
            Err(shale_metastore::Error::PartitionCountNotIncreased { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The leader of a read-replica partition keeps its leader epoch above every epoch
    /// of the source's batches, so that clients, which remember the epochs of the
    /// batches they read, take its metadata for current.
    ///
    /// It also takes the replicas a reassignment adds into the ISR at once: they fetch
    /// nothing from it (each follows the source itself), so they would never join it
    /// by fetching, and the reassignment would never end.
    async fn bring_state_up_to_date(&self, t: &TopicState, p: &Partition, source_epoch: i32) {
        let Some(state) = t.state(p.index) else {
            return;
        };
        let joining = state.adding.iter().any(|b| !state.isr.contains(b));
        let behind = state.leader_epoch <= source_epoch;
        if !p.is_leader() || !(behind || joining) || !self.lease_valid() {
            return;
        }
        let mut isr = state.isr.clone();
        isr.extend(state.adding.iter().filter(|b| !state.isr.contains(b)));
        let next = shale_metastore::PartitionState {
            leader_epoch: state.leader_epoch.max(source_epoch + 1),
            isr,
            ..state.clone()
        };
        let guard = shale_metastore::StateGuard::default();
        match self.metastore.update_partition_state(&next, guard).await {
            Ok(_) => {
                tracing::info!(topic = %t.meta.name, partition = p.index, epoch = next.leader_epoch,
                    isr = ?next.isr, "read replica: leader epoch and ISR brought up to date");
                self.registry.stale();
            }
            Err(e) => tracing::debug!(topic = %t.meta.name, partition = p.index, error = %e,
                "read replica: leader epoch not raised (the next poll tries again)"),
        }
    }

    /// Fills in the descriptions already read; returns how many segments had one.
    fn known_metas(&self, id: Uuid, partitions: &mut BTreeMap<i32, Vec<FoundSegment>>) -> usize {
        let metas = self.tier.read_replicas.metas.lock().expect("not poisoned");
        let Some(known) = metas.get(&id) else {
            return 0;
        };
        let mut filled = 0;
        for f in partitions.values_mut().flatten() {
            if let Some(m) = known.get(&f.key.segment_id) {
                f.meta = Some(Ok(m.clone()));
                filled += 1;
            }
        }
        filled
    }

    /// Keeps the descriptions of the segments listed now (forgetting deleted ones).
    fn remember_metas(
        &self,
        id: Uuid,
        partitions: &BTreeMap<i32, Vec<FoundSegment>>,
        known: usize,
    ) {
        let now: HashMap<Uuid, SegmentMeta> = (partitions.values().flatten())
            .filter_map(|f| Some((f.key.segment_id, f.meta.as_ref()?.as_ref().ok()?.clone())))
            .collect();
        tracing::debug!(topic = %id, segments = now.len(), read = now.len().saturating_sub(known),
            "read replica: followed the source");
        let mut metas = self.tier.read_replicas.metas.lock().expect("not poisoned");
        metas.insert(id, now);
    }
}

/// Installs a planned remote log on a read-replica partition.
fn follow(p: &Partition, plan: bucket::PartitionPlan) -> Result<()> {
    let rows = plan.rows(now_ms());
    let end = rows.last().map_or(-1, |s| s.end_offset);
    p.follow_remote_log(remote_state_of(rows, end))
}

/// The id and partition count of topic `name` in the bucket, from the newest snapshot
/// that has it (the segments alone cannot tell how many partitions there are: some
/// may have none yet).
async fn find_source_topic(store: &ObjectStoreRef, name: &str, url: &str) -> Result<(Uuid, i32)> {
    let snapshots = match bucket::read_snapshots(store, Uuid::nil()).await {
        Ok(s) => s,
        Err(bucket::BucketError::Store(e)) => return Err(Error::Tiering(e.into())),
        Err(bucket::BucketError::Damaged(f)) => return Err(Error::InvalidRequest(f.to_string())),
    };
    let listed = (snapshots.clusters.iter().flat_map(|c| &c.topics)).find(|t| t.name == name);
    match listed {
        Some(t) => Ok((t.id, t.partitions)),
        None => Err(Error::RemoteLogNotReady(format!(
            "no snapshot in {url} has a topic '{name}' (the source cluster writes one every \
             tiering.snapshot_interval_ms, 1 min by default, once the topic exists)"
        ))),
    }
}
