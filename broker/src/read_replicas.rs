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
    /// `url`: with its id and partition count (from the source's snapshots, else its
    /// segments' descriptions) and `replication_factor` replicas here.
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
        if let Ok(t) = self.topic(name) {
            self.follow_source(&t).await?;
        }
        Ok(topic)
    }

    /// One pass over the read-replica topics this broker holds replicas of.
    pub(crate) async fn read_replica_pass(&self) -> Result<()> {
        let topics = self.topics_snapshot();
        let replicas = (topics.iter()).filter(|t| {
            !t.config.read_replica_of.is_empty() && t.partitions.iter().any(Option::is_some)
        });
        for t in replicas {
            if let Err(e) = self.follow_source(t).await {
                tracing::warn!(topic = %t.meta.name, source = %t.config.read_replica_of, error = %e,
                    "cannot follow the read replica's source");
            }
        }
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
                Ok(plan) => follow(p, plan)?,
                Err(problems) => tracing::warn!(topic = %t.meta.name, partition = p.index,
                    problems = ?problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "the source's objects do not hold together; keeping the remote log as it was"),
            }
        }
        Ok(())
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

/// The id and partition count of topic `name` in the bucket: from the newest snapshot
/// that has it, else from its segments' descriptions.
async fn find_source_topic(store: &ObjectStoreRef, name: &str, url: &str) -> Result<(Uuid, i32)> {
    let store_error = |e: object_store::Error| Error::Tiering(e.into());
    let snapshots = match bucket::read_snapshots(store, Uuid::nil()).await {
        Ok(s) => s,
        Err(bucket::BucketError::Store(e)) => return Err(store_error(e)),
        Err(bucket::BucketError::Damaged(f)) => return Err(Error::InvalidRequest(f.to_string())),
    };
    let listed = (snapshots.clusters.iter().flat_map(|c| &c.topics)).find(|t| t.name == name);
    if let Some(t) = listed {
        return Ok((t.id, t.partitions));
    }
    let mut listing = bucket::list_bucket(store, None)
        .await
        .map_err(store_error)?;
    for (id, partitions) in &mut listing.segments {
        // The first segment with a readable description names the topic.
        for found in partitions.values_mut().flat_map(|f| f.iter_mut()) {
            bucket::read_metas(store, std::slice::from_mut(found))
                .await
                .map_err(store_error)?;
            let Some(Ok(meta)) = &found.meta else {
                continue;
            };
            if meta.topic != name {
                break;
            }
            let count = partitions.keys().max().map_or(1, |p| p + 1);
            return Ok((*id, count));
        }
    }
    Err(Error::InvalidRequest(format!(
        "no topic '{name}' in {url}: neither its snapshots nor its segments name one"
    )))
}
