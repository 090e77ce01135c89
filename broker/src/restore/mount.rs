//! Unmounting a topic and mounting it again, here or on another cluster that uses the
//! bucket (`shale topic unmount`, `shale topic mount`).
//!
//! An unmount first takes the topic's ownership marker and makes the topic read-only
//! (`read.only`): produce is refused and the leaders seal their active segments and
//! copy everything to the bucket. Once every leader reports its whole log copied and
//! no tier work under way (the client waits for that, see `UnmountTopic`), the
//! topic's description goes to the bucket (`_shale/unmounted/{id}.json`: configs,
//! partitions, epochs, each partition's log end and the groups' committed offsets),
//! the topic leaves the metastore with its remote segments' rows, so nothing deletes
//! its objects, and the marker is given up.
//!
//! A mount plans the topic's remote logs from its objects as a restore does, refuses
//! a damaged prefix naming the objects at fault, takes the topic's ownership marker
//! (`_shale/owners/{id}.json`, a conditional PUT where the store supports it), and
//! brings the topic back with its id: each partition goes on from its log end, at a
//! leader epoch above every epoch in its objects (records missing from the bucket are
//! refused unless forced). A topic another cluster owns, or that a third cluster lists
//! in a snapshot newer than the unmount, is refused unless forced: two clusters must
//! never write one topic's objects. The description is deleted once mounted.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};
use shale_metastore::CommittedOffset;
use shale_tiering::ObjectStoreRef;
use shale_tiering::bucket::{self, BucketError};
use shale_tiering::snapshot::{
    OwnerMarker, PartitionMark, SNAPSHOT_VERSION, UnmountedTopic, owner_path, unmounted_dir,
    unmounted_path,
};
use uuid::Uuid;

use super::plan::{self, Outcome};
use super::{RestoredTopicReport, refused, same_url, store_error};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};

/// The config an unmount sets.
const READ_ONLY: &str = "read.only";

/// How long a topic's deletion waits on the bucket for its description and marker.
const BUCKET_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What to mount.
#[derive(Debug, Clone, Default)]
pub struct MountRequest {
    pub name: String,
    /// The bucket (`s3://bucket/prefix`): it must be the one the brokers use. `None`:
    /// that one.
    pub from: Option<String>,
    /// Default: the topic's own.
    pub replication_factor: Option<i32>,
    /// Mount although another cluster owns the topic.
    pub force: bool,
}

#[derive(Debug, Clone)]
pub struct MountReport {
    pub topic: RestoredTopicReport,
    /// Objects left out, and why.
    pub ignored: Vec<String>,
}

async fn read_json<T: serde::de::DeserializeOwned>(
    store: &ObjectStoreRef,
    path: &Path,
) -> Result<Option<T>> {
    let bytes = match store.get(path).await {
        Ok(got) => got.bytes().await.map_err(store_error)?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(store_error(e)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::InvalidRequest(format!("{path}: not a document this version reads: {e}"))
    })
}

/// The cluster that mounted topic `id`, if one did.
pub(super) async fn owner(store: &ObjectStoreRef, id: Uuid) -> Result<Option<OwnerMarker>> {
    read_json(store, &owner_path(id)).await
}

/// When each topic with a description in the bucket was unmounted, by id (one that
/// cannot be parsed is passed over).
pub(super) async fn unmounted_at(store: &ObjectStoreRef) -> Result<BTreeMap<Uuid, i64>> {
    let listed: Vec<_> =
        (store.list(Some(&unmounted_dir())).try_collect().await).map_err(store_error)?;
    let mut out = BTreeMap::new();
    for o in listed {
        match read_json::<UnmountedTopic>(store, &o.location).await {
            Ok(Some(d)) => {
                out.insert(d.topic.id, d.unmounted_at_ms);
            }
            Ok(None) => {}
            Err(Error::InvalidRequest(e)) => {
                tracing::warn!(error = %e, "passing over an unreadable description")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

impl Broker {
    fn writable_bucket(&self, from: Option<&str>) -> Result<ObjectStoreRef> {
        let own = &self.config.object_store_url;
        if self.config.volatile_object_store() {
            return Err(Error::InvalidRequest(format!(
                "the object store {own} keeps nothing across restarts: topics cannot be \
                 unmounted to it or mounted from it"
            )));
        }
        if let Some(from) = from
            && !same_url(from, own)
        {
            return Err(Error::InvalidRequest(format!(
                "a topic is mounted from the bucket the brokers are configured with ({own}), \
                 not {from}: to serve a topic of another bucket, create a read replica of it \
                 (shale topic create T --read-replica-of {from})"
            )));
        }
        Ok(self.tier.uploader.store().clone())
    }

    /// The first step of an unmount: the topic takes no more writes, and its leaders
    /// copy everything they hold to the bucket. Returns its id.
    pub async fn unmount_freeze(&self, name: &str) -> Result<Uuid> {
        let store = self.writable_bucket(None)?;
        let Some(topic) = self.metastore.get_topic(name).await? else {
            // Unmounted here already, by a run that stopped before giving the marker up?
            if let Ok(d) = self.unmounted(&store, name).await
                && d.cluster_id == self.cluster_id()
            {
                self.release_ownership(d.topic.id).await;
                return Err(Error::InvalidRequest(format!(
                    "topic '{name}' was unmounted already (at {} ms); its ownership marker is \
                     given up",
                    d.unmounted_at_ms
                )));
            }
            return Err(Error::UnknownTopic(name.to_string()));
        };
        let config = self.resolve_config(&topic.configs)?;
        if !config.read_replica_of.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "topic '{name}' is a read replica of {}: delete it instead",
                config.read_replica_of
            )));
        }
        if !config.remote_storage_enable {
            return Err(Error::InvalidRequest(format!(
                "topic '{name}' is not tiered (remote.storage.enable=false): its records are on \
                 the brokers' disks only, and an unmount leaves only what the bucket holds"
            )));
        }
        // Held until the topic has left the metastore: a description in the bucket
        // whose detach failed is not mounted elsewhere.
        self.take_ownership(&store, topic.id, false).await?;
        if !config.read_only {
            let set = BTreeMap::from([(READ_ONLY.to_string(), "true".to_string())]);
            (self.metastore)
                .alter_topic_configs(name, &set, &[])
                .await?;
            tracing::warn!(topic = name, id = %topic.id, "unmounting: the topic is read-only now");
        }
        self.reconcile().await?;
        Ok(topic.id)
    }

    /// The last step of an unmount, once every partition's leader reported its log,
    /// up to `ends`, copied: writes the topic's description to the bucket and drops
    /// the topic, leaving its objects. Returns its id and the description's key.
    pub async fn unmount_detach(&self, name: &str, ends: &[i64]) -> Result<(Uuid, String)> {
        self.writable_bucket(None)?;
        let topic = (self.metastore.get_topic(name).await?)
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))?;
        if topic.configs.get(READ_ONLY).is_none_or(|v| v != "true") {
            return Err(Error::InvalidRequest(format!(
                "topic '{name}' takes writes: an unmount makes it read-only first"
            )));
        }
        if ends.len() != topic.partitions.max(0) as usize {
            return Err(Error::InvalidRequest(format!(
                "topic '{name}' has {} partitions, {} log ends were given",
                topic.partitions,
                ends.len()
            )));
        }
        let logs = self.metastore.remote_logs(topic.id).await?;
        for (p, end) in ends.iter().enumerate() {
            let copied = logs.get(&(p as i32)).map_or(-1, |l| l.copied_end);
            // The leaders' log ends, read once they were read-only, are where the
            // bucket's copies end: the client read them from the leaders.
            if copied + 1 != *end {
                return Err(Error::InvalidRequest(format!(
                    "partition {p} of '{name}' ends at {end} but the bucket holds it up to \
                     {copied}: wait until its leader copied the rest, and give its log end"
                )));
            }
        }
        let snapshot = self.cluster_snapshot().await?;
        let mut described = (snapshot.topics.into_iter())
            .find(|t| t.id == topic.id)
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))?;
        described.configs.remove(READ_ONLY);
        let groups = (snapshot.groups.into_iter())
            .filter_map(|mut g| {
                g.offsets.retain(|o| o.topic_id == topic.id);
                (!g.offsets.is_empty()).then_some(g)
            })
            .collect();
        let doc = UnmountedTopic {
            version: SNAPSHOT_VERSION,
            cluster_id: self.cluster_id(),
            unmounted_at_ms: now_ms(),
            topic: described,
            ends: ends.to_vec(),
            groups,
        };
        let path = unmounted_path(topic.id);
        self.put_json(&path, &doc).await?;
        self.metastore.detach_topic(name).await?;
        tracing::warn!(topic = name, id = %topic.id, description = %path,
            "unmounted: the topic left the cluster, its objects stay in the bucket");
        self.release_ownership(topic.id).await;
        self.settle_after(name).await;
        Ok((topic.id, path.to_string()))
    }

    /// A deleted topic's description, if an unmount left one, and ownership marker, if
    /// this cluster holds it; a failure is logged.
    pub(crate) async fn forget_in_bucket(&self, id: Uuid) {
        let store = self.tier.uploader.store();
        let deleted = tokio::time::timeout(BUCKET_WAIT, store.delete(&unmounted_path(id))).await;
        match deleted {
            Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => {}
            Ok(Err(e)) => {
                tracing::warn!(topic_id = %id, error = %e, "cannot delete the topic's description")
            }
            Err(_) => tracing::warn!(topic_id = %id, "deleting the topic's description timed out"),
        }
        self.release_ownership(id).await;
    }

    /// Gives up this cluster's ownership marker of topic `id`, if it holds it (an
    /// unmount, a deletion); a failure is logged.
    pub(crate) async fn release_ownership(&self, id: Uuid) {
        let store = self.tier.uploader.store();
        let release = async {
            if owner(store, id)
                .await?
                .is_some_and(|o| o.cluster_id == self.cluster_id())
            {
                store.delete(&owner_path(id)).await.map_err(store_error)?;
            }
            Ok::<_, Error>(())
        };
        match tokio::time::timeout(BUCKET_WAIT, release).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(topic_id = %id, error = %e, "cannot give up the topic's ownership marker")
            }
            Err(_) => {
                tracing::warn!(topic_id = %id, "giving up the topic's ownership marker timed out")
            }
        }
    }

    /// Brings this broker's view up to date after a change that is done: a failure
    /// is logged (the next refresh catches up), not reported as the change's.
    async fn settle_after(&self, name: &str) {
        if let Err(e) = self.reconcile().await {
            tracing::warn!(topic = name, error = %e, "cannot refresh the topics now");
        }
    }

    /// The newest description of a topic named `name` unmounted into the bucket.
    async fn unmounted(&self, store: &ObjectStoreRef, name: &str) -> Result<UnmountedTopic> {
        let listed: Vec<_> =
            (store.list(Some(&unmounted_dir())).try_collect().await).map_err(store_error)?;
        let mut found: Option<UnmountedTopic> = None;
        for o in listed {
            // One that cannot be parsed is passed over; a store error is not (it may
            // hide the newest description of the name).
            let d = match read_json::<UnmountedTopic>(store, &o.location).await {
                Err(Error::InvalidRequest(e)) => {
                    tracing::warn!(error = %e, "passing over an unreadable description");
                    continue;
                }
                d => d?,
            };
            if let Some(d) = d
                && d.topic.name == name
                && found
                    .as_ref()
                    .is_none_or(|f| f.unmounted_at_ms < d.unmounted_at_ms)
            {
                found = Some(d);
            }
        }
        found.ok_or_else(|| {
            Error::InvalidRequest(format!(
                "no topic '{name}' was unmounted into {} (a topic of a cluster whose metastore \
                 is lost comes back with shale cluster restore --topic {name})",
                self.config.object_store_url
            ))
        })
    }

    /// Refuses a topic another cluster writes: its ownership marker, or a snapshot of
    /// another cluster newer than the unmount that lists it.
    async fn check_owner(&self, store: &ObjectStoreRef, d: &UnmountedTopic) -> Result<()> {
        let id = d.topic.id;
        // The unmounting cluster's marker too: it holds it until the topic has left
        // it (an unmount that stopped in between is run there again).
        if let Some(o) = owner(store, id).await?
            && o.cluster_id != self.cluster_id()
        {
            return Err(Error::InvalidRequest(format!(
                "topic '{}' ({id}) is mounted by cluster {} (since {} ms): unmount it there \
                 first (again, if its unmount stopped), or mount with --force if that cluster \
                 is gone",
                d.topic.name, o.cluster_id, o.since_ms
            )));
        }
        let snapshots = match bucket::read_snapshots(store, self.cluster_id()).await {
            Ok(s) => s,
            Err(BucketError::Damaged(f)) => return Err(refused(&[f])),
            Err(BucketError::Store(e)) => return Err(store_error(e)),
        };
        // The cluster it was unmounted from held the marker until the topic left it.
        if let Some(c) = (snapshots.clusters.iter())
            .filter(|c| c.cluster_id != d.cluster_id && c.taken_at_ms > d.unmounted_at_ms)
            .find(|c| c.topics.iter().any(|t| t.id == id))
        {
            return Err(Error::InvalidRequest(format!(
                "topic '{}' ({id}) is in the snapshot cluster {} took at {} ms, after it was \
                 unmounted: that cluster has it; unmount it there first, or mount with --force \
                 if that cluster is gone",
                d.topic.name, c.cluster_id, c.taken_at_ms
            )));
        }
        Ok(())
    }

    /// Writes this cluster's ownership marker of topic `id`: only where there is none
    /// (a conditional PUT, where the store supports one), unless it is this cluster's
    /// or `force`. Returns the marker it replaced.
    pub(super) async fn take_ownership(
        &self,
        store: &ObjectStoreRef,
        id: Uuid,
        force: bool,
    ) -> Result<Option<OwnerMarker>> {
        let marker = OwnerMarker {
            version: SNAPSHOT_VERSION,
            cluster_id: self.cluster_id(),
            since_ms: now_ms(),
        };
        let json = serde_json::to_vec_pretty(&marker).expect("markers serialize");
        let path = owner_path(id);
        let create = PutOptions::from(PutMode::Create);
        match store.put_opts(&path, PutPayload::from(json), create).await {
            Ok(_) => return Ok(None),
            Err(
                object_store::Error::AlreadyExists { .. } | object_store::Error::NotImplemented,
            ) => {}
            Err(e) => return Err(store_error(e)),
        }
        let theirs = owner(store, id).await?;
        match &theirs {
            Some(o) if o.cluster_id == self.cluster_id() => return Ok(theirs),
            Some(o) if !force => {
                return Err(Error::InvalidRequest(format!(
                    "topic {id} is mounted by cluster {} (its ownership marker {path}): \
                     two clusters must not write one topic",
                    o.cluster_id
                )));
            }
            _ => {}
        }
        self.put_json(&path, &marker).await?;
        Ok(theirs)
    }

    /// Mounts a topic unmounted into the bucket (see the module's description).
    pub async fn mount_topic(&self, req: MountRequest) -> Result<MountReport> {
        let store = self.writable_bucket(req.from.as_deref())?;
        let d = self.unmounted(&store, &req.name).await?;
        let id = d.topic.id;
        match self.metastore.get_topic(&req.name).await? {
            // An earlier run wrote the topic and stopped: its last steps are done now.
            Some(t) if t.id == id => {
                let ends = (d.ends.iter().enumerate()).map(|(p, e)| (p as i32, *e));
                self.finish_mount(&store, &d, &ends.collect()).await?;
                let topic = RestoredTopicReport {
                    name: req.name,
                    id,
                    existed: true,
                    from_snapshot: true,
                    partitions: Vec::new(),
                };
                return Ok(MountReport {
                    topic,
                    ignored: Vec::new(),
                });
            }
            Some(_) => return Err(Error::TopicAlreadyExists(req.name.clone())),
            None => {}
        }
        if !req.force {
            self.check_owner(&store, &d).await?;
        }
        let mut listing = bucket::list_bucket(&store, Some(&Path::from(id.to_string())))
            .await
            .map_err(store_error)?;
        if !listing.foreign.is_empty() {
            let foreign: Vec<_> = (listing.foreign.iter())
                .map(|o| bucket::Finding {
                    object: o.clone(),
                    problem: "not an object of this layout".into(),
                })
                .collect();
            return Err(refused(&foreign));
        }
        let partitions = listing.segments.remove(&id).unwrap_or_default();
        let described = Some((d.topic.clone(), d.unmounted_at_ms));
        let planned =
            match plan::plan_topic(&store, id, partitions, described, &BTreeSet::new(), None)
                .await
                .map_err(store_error)?
            {
                Outcome::Planned(t) => t,
                Outcome::Damaged(f) => return Err(refused(&f)),
                Outcome::Skipped(why) => return Err(Error::InvalidRequest(why.join("; "))),
            };
        // The log ends the unmount recorded stand for its last leaders' high watermarks.
        let marks: BTreeMap<(Uuid, i32), PartitionMark> = (d.ends.iter().enumerate())
            .map(|(p, end)| {
                let mark = PartitionMark {
                    topic_id: id,
                    partition: p as i32,
                    leader_epoch: d.topic.leader_epochs.get(p).copied().unwrap_or(0),
                    high_watermark: *end,
                    epochs: Vec::new(),
                };
                ((id, p as i32), mark)
            })
            .collect();
        let mut topic = self
            .restored_topic(&planned, req.replication_factor, &marks)
            .await?;
        topic.topic.configs.remove(READ_ONLY);
        let mut report = MountReport {
            topic: planned.report(&topic, &marks, false),
            ignored: planned.ignored(),
        };
        // Records the unmount counted that are not in the bucket (objects deleted
        // since, not expired: a partition whose segments all expired goes on after
        // its end): their offsets would be used again.
        let mut missing = Vec::new();
        for p in &mut report.topic.partitions {
            let end = d.ends.get(p.partition as usize).copied().unwrap_or(0);
            let lost = p.remote.map_or(0, |(_, last)| (end - last - 1).max(0));
            p.lost_records = Some(lost);
            if lost > 0 {
                missing.push(format!("partition {}: {lost} record(s)", p.partition));
            }
        }
        if !missing.is_empty() && !req.force {
            return Err(Error::InvalidRequest(format!(
                "the bucket lacks records of '{}' that were there when it was unmounted ({}): \
                 objects were deleted since; mount with --force to go on without them (their \
                 offsets are used again)",
                req.name,
                missing.join(", ")
            )));
        }
        let replaced = self.take_ownership(&store, id, req.force).await?;
        let written = (self.metastore)
            .restore_topics(std::slice::from_ref(&topic))
            .await;
        if let Err(e) = written {
            // Undone only when surely not written (the answer alone may have been lost).
            let there = self.metastore.get_topic(&req.name).await;
            if matches!(&there, Ok(t) if t.as_ref().is_none_or(|t| t.id != id)) {
                let undone = match &replaced {
                    Some(theirs) => self.put_json(&owner_path(id), theirs).await,
                    None => store.delete(&owner_path(id)).await.map_err(store_error),
                };
                if let Err(e) = undone {
                    tracing::warn!(topic = %req.name, error = %e, "cannot undo the ownership marker of a mount that failed");
                }
            }
            return Err(e.into());
        }
        tracing::warn!(topic = %req.name, %id, "mounted topic from the bucket");
        let next: BTreeMap<i32, i64> = (report.topic.partitions.iter())
            .map(|p| (p.partition, p.next_offset))
            .collect();
        self.finish_mount(&store, &d, &next).await?;
        Ok(report)
    }

    /// The last steps of a mount, once the topic is written: the groups' offsets in it
    /// (moved back to `next`, each partition's next offset, when past it; a partition
    /// a group committed in here since keeps its own), then the description, used up,
    /// is deleted (a later unmount writes a new one).
    async fn finish_mount(
        &self,
        store: &ObjectStoreRef,
        d: &UnmountedTopic,
        next: &BTreeMap<i32, i64>,
    ) -> Result<()> {
        let id = d.topic.id;
        for g in &d.groups {
            let since: BTreeSet<i32> = (self.metastore.committed_offsets(&g.group).await?)
                .into_iter()
                .filter(|c| c.topic_id == id)
                .map(|c| c.partition)
                .collect();
            let offsets: Vec<CommittedOffset> = (g.offsets.iter())
                .filter(|o| !since.contains(&o.partition))
                .filter_map(|o| {
                    Some(CommittedOffset {
                        topic_id: o.topic_id,
                        partition: o.partition,
                        offset: o.offset.min(*next.get(&o.partition)?),
                        metadata: o.metadata.clone(),
                        commit_ms: o.commit_ms,
                    })
                })
                .collect();
            if !offsets.is_empty() {
                (self.metastore)
                    .commit_offsets(&g.group, &offsets, None)
                    .await?;
            }
        }
        if let Err(e) = store.delete(&unmounted_path(id)).await {
            tracing::warn!(topic = %d.topic.name, error = %e, "cannot delete the mounted topic's description");
        }
        self.settle_after(&d.topic.name).await;
        Ok(())
    }
}
