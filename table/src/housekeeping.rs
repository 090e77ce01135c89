//! A table's housekeeping: every commit adds a snapshot and a metadata file, so old
//! snapshots are expired (Iceberg's `history.expire.max-snapshot-age-ms`, set to an
//! hour when Shale creates the table; the current snapshot always stays), and the
//! files nothing refers to any more are deleted: metadata files past the table's
//! metadata log (`write.metadata.previous-versions-max`) and the manifest lists of
//! expired snapshots. Files younger than `min_age` are left alone: a commit in flight
//! may have just written them.

use std::collections::HashSet;
use std::time::Duration;

use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg_catalog_sql::SqlCatalog;

use crate::storage::BucketStorage;

/// What one housekeeping did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Housekept {
    pub snapshots_expired: usize,
    pub files_deleted: usize,
}

/// Expires the snapshots older than the table's `history.expire.max-snapshot-age-ms`
/// (all but the current one at most), then deletes the metadata files and manifest
/// lists nothing refers to.
pub async fn housekeep(
    catalog: &SqlCatalog,
    storage: &BucketStorage,
    table: &Table,
    min_age: Duration,
) -> anyhow::Result<(Table, Housekept)> {
    let mut done = Housekept::default();
    let metadata = table.metadata();
    let max_age = metadata.table_properties()?.max_snapshot_age_ms;
    let cutoff = chrono::Utc::now().timestamp_millis() - max_age;
    let current = metadata.current_snapshot_id();
    let expiring = (metadata.snapshots())
        .filter(|s| s.timestamp_ms() < cutoff && Some(s.snapshot_id()) != current)
        .count();
    let table = if expiring > 0 {
        let tx = Transaction::new(table);
        let tx = tx
            .expire_snapshots()
            .expire_older_than_ms(cutoff)
            .retain_last(1)
            .apply(tx)?;
        let after = tx.commit(catalog).await?;
        done.snapshots_expired =
            metadata.snapshots().count() - after.metadata().snapshots().count();
        after
    } else {
        table.clone()
    };

    let metadata = table.metadata();
    let mut referenced: HashSet<String> = (metadata.snapshots())
        .map(|s| s.manifest_list().to_string())
        .collect();
    referenced.extend(table.metadata_location().map(str::to_string));
    referenced.extend(
        metadata
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.clone()),
    );
    let dir = storage.key(&format!("{}/metadata", metadata.location()))?;
    let store = storage.object_store()?;
    let cutoff = chrono::Utc::now() - min_age;
    let unreferenced: Vec<object_store::path::Path> = store
        .list(Some(&dir))
        .try_filter_map(|m| {
            let name = m.location.filename().unwrap_or_default();
            // Metadata files and manifest lists; manifests stay (every snapshot's
            // list names all of them after fast appends).
            let kind = name.ends_with(".metadata.json") || name.starts_with("snap-");
            let location = storage.location(m.location.as_ref());
            let drop = kind && m.last_modified < cutoff && !referenced.contains(&location);
            futures::future::ready(Ok(drop.then_some(m.location)))
        })
        .try_collect()
        .await?;
    for key in &unreferenced {
        match store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => done.files_deleted += 1,
            Err(e) => return Err(e.into()),
        }
    }
    Ok((table, done))
}
