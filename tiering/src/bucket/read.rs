//! Reading a bucket back: listing it into segments ([`list_bucket`]), reading their
//! descriptions ([`read_metas`]) and the snapshots kept beside them
//! ([`read_snapshots`]).

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use uuid::Uuid;

use super::{Finding, FoundSegment};
use crate::layout::{ObjectKind, SegmentKey, SegmentMeta};
use crate::snapshot::{
    BrokerSnapshot, ClusterSnapshot, RestoredMarker, SNAPSHOT_DIR, broker_snapshots_dir,
    cluster_snapshots_dir, restored_markers_dir,
};
use crate::store::ObjectStoreRef;

/// Why a bucket could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("object store error: {0}")]
    Store(#[from] object_store::Error),
    #[error("{0}")]
    Damaged(Finding),
}

/// Every segment found in a bucket, by topic id and partition, and what else is there.
#[derive(Debug, Default)]
pub struct Listing {
    pub segments: BTreeMap<Uuid, BTreeMap<i32, Vec<FoundSegment>>>,
    /// Keys that are neither a segment's object nor a snapshot.
    pub foreign: Vec<String>,
}

/// Lists the bucket (under the store's prefix), or only under `prefix`, once.
pub async fn list_bucket(
    store: &ObjectStoreRef,
    prefix: Option<&Path>,
) -> object_store::Result<Listing> {
    let mut listing = Listing::default();
    let mut by_key: BTreeMap<(Uuid, i32, i64, i64, Uuid), FoundSegment> = BTreeMap::new();
    let mut objects = store.list(prefix);
    while let Some(o) = objects.try_next().await? {
        if o.location
            .parts()
            .next()
            .is_some_and(|p| p.as_ref() == SNAPSHOT_DIR)
        {
            continue;
        }
        let Some((key, kind)) = SegmentKey::parse(&o.location) else {
            listing.foreign.push(o.location.to_string());
            continue;
        };
        let id = (
            key.topic_id,
            key.partition,
            key.base_offset,
            key.end_offset,
            key.segment_id,
        );
        let found = by_key.entry(id).or_insert_with(|| FoundSegment {
            key,
            objects: BTreeMap::new(),
            modified_ms: 0,
            meta: None,
        });
        found.objects.insert(kind.extension(), o.size);
        found.modified_ms = found.modified_ms.max(o.last_modified.timestamp_millis());
    }
    for ((topic, partition, ..), found) in by_key {
        (listing.segments.entry(topic).or_default())
            .entry(partition)
            .or_default()
            .push(found);
    }
    Ok(listing)
}

/// Reads the `.meta` of every segment that has one and whose description is not known
/// yet, a few at a time. A `.meta` that cannot be parsed is recorded on its segment;
/// one deleted since the listing leaves its segment as if it had none (a deletion
/// under way); another store error stops it.
pub async fn read_metas(
    store: &ObjectStoreRef,
    segments: &mut [FoundSegment],
) -> object_store::Result<()> {
    let wanted: Vec<(usize, Path)> = (segments.iter().enumerate())
        .filter(|(_, f)| f.meta.is_none() && f.size(ObjectKind::Meta).is_some())
        .map(|(i, f)| (i, f.key.path(ObjectKind::Meta)))
        .collect();
    let read: Vec<(usize, Option<Result<SegmentMeta, String>>)> = futures::stream::iter(wanted)
        .map(|(i, path)| async move {
            let bytes = match store.get(&path).await {
                Ok(got) => got.bytes().await?,
                Err(object_store::Error::NotFound { .. }) => return Ok((i, None)),
                Err(e) => return Err(e),
            };
            let meta = serde_json::from_slice::<SegmentMeta>(&bytes)
                .map_err(|e| format!("not a segment description: {e}"));
            Ok::<_, object_store::Error>((i, Some(meta)))
        })
        .buffer_unordered(16)
        .try_collect()
        .await?;
    for (i, meta) in read {
        match meta {
            Some(meta) => segments[i].meta = Some(meta),
            // Deleted since the listing (`.meta` goes last): no longer there at all.
            None => segments[i].objects.clear(),
        }
    }
    Ok(())
}

/// The snapshots a restore reads (see [`crate::snapshot`]), as far as the bucket has
/// them.
#[derive(Debug, Default)]
pub struct Snapshots {
    /// Every cluster snapshot but the restoring cluster's, newest first.
    pub clusters: Vec<ClusterSnapshot>,
    /// Every broker snapshot, of every cluster.
    pub brokers: Vec<BrokerSnapshot>,
}

/// Reads the snapshots, leaving out cluster `own`'s (the one restoring) and those of
/// clusters a restore replaced (see [`RestoredMarker`]); one that cannot be parsed is
/// [`BucketError::Damaged`].
pub async fn read_snapshots(store: &ObjectStoreRef, own: Uuid) -> Result<Snapshots, BucketError> {
    async fn read<T: serde::de::DeserializeOwned>(
        store: &ObjectStoreRef,
        path: &Path,
    ) -> Result<Option<T>, BucketError> {
        let bytes = match store.get(path).await {
            Ok(got) => got.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            BucketError::Damaged(Finding {
                object: path.to_string(),
                problem: format!("not a snapshot this version reads: {e}"),
            })
        })
    }
    let mut out = Snapshots::default();
    let clusters: Vec<_> = store
        .list(Some(&cluster_snapshots_dir()))
        .try_collect()
        .await?;
    for o in clusters {
        if let Some(s) = read::<ClusterSnapshot>(store, &o.location).await?
            && s.cluster_id != own
        {
            out.clusters.push(s);
        }
    }
    let markers: Vec<_> = store
        .list(Some(&restored_markers_dir()))
        .try_collect()
        .await?;
    let mut superseded = std::collections::HashSet::new();
    for o in markers {
        if let Some(m) = read::<RestoredMarker>(store, &o.location).await? {
            superseded.extend(m.supersedes);
        }
    }
    out.clusters.retain(|c| !superseded.contains(&c.cluster_id));
    out.clusters
        .sort_by_key(|c| std::cmp::Reverse(c.taken_at_ms));
    let brokers: Vec<_> = store
        .list(Some(&broker_snapshots_dir()))
        .try_collect()
        .await?;
    for o in brokers {
        out.brokers.extend(read(store, &o.location).await?);
    }
    Ok(out)
}
