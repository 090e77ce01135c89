//! A table's housekeeping: every commit adds a snapshot and a metadata file, so old
//! snapshots are expired (Iceberg's `history.expire.max-snapshot-age-ms`, set to an
//! hour when Shale creates the table; the current snapshot always stays), and the
//! files nothing refers to are deleted.
//!
//! Which unreferenced files may go is decided without trusting clocks or ages where it
//! can be, since a leader may stall for minutes between writing a file and
//! committing it:
//! - a data file (`p<partition>-e<epoch>-o<start>-…`) whose commit can never land:
//!   written at an epoch older than the partition's in the table (the fence refuses
//!   it), or at the table's epoch but starting below its `next-offset` (the fence
//!   refuses a commit that does not start there, and `next-offset` only grows);
//! - a metadata file, manifest list or manifest written before the table's current
//!   metadata was (with a margin for the store's and the broker's clocks): a commit
//!   that wrote it was based on an older metadata, and the catalog's compare-and-swap
//!   refuses it.
//!
//! The files are listed before the table is loaded, so a file committed meanwhile is
//! referenced by the table looked at.

use std::collections::HashSet;
use std::time::Duration;

use futures::TryStreamExt;
use iceberg::spec::ManifestList;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use iceberg_catalog_sql::SqlCatalog;
use object_store::ObjectMeta;

use crate::catalog;
use crate::storage::BucketStorage;

/// What one housekeeping did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Housekept {
    pub snapshots_expired: usize,
    pub data_files_deleted: usize,
    pub metadata_files_deleted: usize,
}

/// A data file's partition, leader epoch and first offset, from its name.
fn data_file_origin(name: &str) -> Option<(i32, i32, i64)> {
    let mut parts = name.split('-');
    let partition = parts.next()?.strip_prefix('p')?.parse().ok()?;
    let epoch = parts.next()?.strip_prefix('e')?.parse().ok()?;
    let start = parts.next()?.strip_prefix('o')?.parse().ok()?;
    Some((partition, epoch, start))
}

/// Expires the snapshots older than the table's `history.expire.max-snapshot-age-ms`
/// (all but the current one at most), then deletes the files nothing refers to that
/// no commit can come to refer to (see the module's documentation). `clock_margin`
/// covers the skew between the object store's clock and the brokers'.
pub async fn housekeep(
    catalog: &SqlCatalog,
    storage: &BucketStorage,
    ident: &TableIdent,
    clock_margin: Duration,
) -> anyhow::Result<Housekept> {
    let mut done = Housekept::default();
    let table = catalog.load_table(ident).await?;
    let location = table.metadata().location().to_string();
    let store = storage.object_store()?;
    let listed: Vec<ObjectMeta> = store
        .list(Some(&storage.key(&location)?))
        .try_collect()
        .await?;

    let table = catalog.load_table(ident).await?;
    let table = expire(catalog, &table, &mut done).await?;
    let metadata = table.metadata();

    // Data files: those of the current snapshot (appends only: every earlier
    // snapshot's files are in it too).
    let mut data_files = HashSet::new();
    if metadata.current_snapshot().is_some() {
        let tasks: Vec<_> = table
            .scan()
            .build()?
            .plan_files()
            .await?
            .try_collect()
            .await?;
        data_files.extend(tasks.into_iter().map(|t| t.data_file_path));
    }
    // Metadata: the current file and its log, every retained snapshot's manifest list
    // and the manifests those list.
    let mut referenced: HashSet<String> = HashSet::new();
    referenced.extend(table.metadata_location().map(str::to_string));
    referenced.extend(
        metadata
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.clone()),
    );
    for s in metadata.snapshots() {
        referenced.insert(s.manifest_list().to_string());
        let bytes = table.file_io().new_input(s.manifest_list())?.read().await?;
        let list = ManifestList::parse_with_version(&bytes, metadata.format_version())?;
        referenced.extend(list.entries().iter().map(|m| m.manifest_path.clone()));
    }
    let written_before = metadata.last_updated_ms() - clock_margin.as_millis() as i64;

    for m in listed {
        let path = storage.location(m.location.as_ref());
        let name = m.location.filename().unwrap_or_default();
        let dead = if name.ends_with(".parquet") {
            !data_files.contains(&path)
                && data_file_origin(name).is_some_and(|(partition, epoch, start)| {
                    let now = catalog::progress(&table, partition);
                    epoch < now.leader_epoch
                        || (epoch == now.leader_epoch
                            && now.next_offset.is_some_and(|next| start < next))
                })
        } else {
            let metadata_file = name.ends_with(".metadata.json") || name.ends_with(".avro");
            metadata_file
                && !referenced.contains(&path)
                && m.last_modified.timestamp_millis() < written_before
        };
        if !dead {
            continue;
        }
        match store.delete(&m.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if name.ends_with(".parquet") {
            done.data_files_deleted += 1;
        } else {
            done.metadata_files_deleted += 1;
        }
    }
    Ok(done)
}

async fn expire(
    catalog: &SqlCatalog,
    table: &Table,
    done: &mut Housekept,
) -> anyhow::Result<Table> {
    let metadata = table.metadata();
    let max_age = metadata.table_properties()?.max_snapshot_age_ms;
    let cutoff = chrono::Utc::now().timestamp_millis() - max_age;
    let current = metadata.current_snapshot_id();
    let expiring = (metadata.snapshots())
        .filter(|s| s.timestamp_ms() < cutoff && Some(s.snapshot_id()) != current)
        .count();
    if expiring == 0 {
        return Ok(table.clone());
    }
    let tx = Transaction::new(table);
    let tx = tx
        .expire_snapshots()
        .expire_older_than_ms(cutoff)
        .retain_last(1)
        .apply(tx)?;
    let after = tx.commit(catalog).await?;
    done.snapshots_expired = metadata.snapshots().count() - after.metadata().snapshots().count();
    Ok(after)
}

#[cfg(test)]
mod tests {
    use super::data_file_origin;

    #[test]
    fn data_file_names_give_their_origin() {
        assert_eq!(
            data_file_origin("p3-e7-o1200-0a1b2c3d4e5f-00001.parquet"),
            Some((3, 7, 1200))
        );
        assert_eq!(data_file_origin("p3-o1200-x.parquet"), None);
        assert_eq!(data_file_origin("00001-abc.metadata.json"), None);
    }
}
