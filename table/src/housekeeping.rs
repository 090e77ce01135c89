//! A table's housekeeping: every commit adds a snapshot and a metadata file, so old
//! snapshots are expired (Iceberg's `history.expire.max-snapshot-age-ms`, set to an
//! hour when Shale creates the table; the current snapshot always stays); with
//! `iceberg.retention.ms`, the data files whose hour is past it leave the table (see
//! `rewrite`); and the files nothing refers to are deleted.
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
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use object_store::ObjectMeta;

use crate::catalog::TableCatalog;
use crate::storage::BucketStorage;
use crate::{catalog, compaction, rewrite};

/// What one housekeeping did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Housekept {
    pub snapshots_expired: usize,
    /// Rows (and their data files) past `iceberg.retention.ms`, out of the table.
    pub rows_expired: u64,
    /// Small files rewritten into larger ones.
    pub files_compacted: usize,
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

/// What housekeeping may rewrite in a table: its rows past `iceberg.retention.ms`
/// (-1: none) and its small files (see `compaction`).
#[derive(Debug, Clone, Copy)]
pub struct Rewrites {
    pub retention_ms: i64,
    pub target_file_bytes: u64,
}

/// An hour's files are compacted once it ended this long ago (records of earlier
/// timestamps still arriving add files again, compacted at a later housekeeping).
const LATE_RECORDS_MS: i64 = 600_000;

/// Expires the snapshots older than the table's `history.expire.max-snapshot-age-ms`
/// (all but the current one at most), removes the data files past `retention` from
/// the table, then deletes the files nothing refers to that no commit can come to
/// refer to (see the module's documentation). `clock_margin` covers the skew between
/// the object store's clock and the brokers'.
pub async fn housekeep(
    catalog: &TableCatalog,
    storage: &BucketStorage,
    ident: &TableIdent,
    clock_margin: Duration,
    rewrites: Option<Rewrites>,
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
    let mut table = expire(catalog, &table, &mut done).await?;
    if let Some(r) = rewrites {
        // A rewrite that fails (another commit kept landing first) waits for the next
        // housekeeping; the deletions below go on.
        let now = chrono::Utc::now().timestamp_millis();
        if r.retention_ms > 0 {
            let old = rewrite::files_before(&table, now.saturating_sub(r.retention_ms)).await?;
            if !old.is_empty() {
                match rewrite::replace_files(catalog, &table, &old, vec![], None).await {
                    Ok(rewritten) => done.rows_expired = rewritten.rows_removed,
                    Err(e) => tracing::warn!(table = %ident, error = %format!("{e:#}"),
                        "could not remove the rows past iceberg.retention.ms"),
                }
                table = catalog.load_table(ident).await?;
            }
        }
        let closed_before = now - LATE_RECORDS_MS;
        match compaction::compact(catalog, &table, r.target_file_bytes, closed_before).await {
            Ok((t, compacted)) => {
                done.files_compacted = compacted.files_removed;
                table = t;
            }
            Err(e) => {
                tracing::warn!(table = %ident, error = %format!("{e:#}"), "could not compact");
                table = catalog.load_table(ident).await?;
            }
        }
    }
    let metadata = table.metadata();

    // Data files: those any retained snapshot refers to (a file removed from the
    // table stays while a snapshot that has it may still be read).
    let mut data_files = HashSet::new();
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
        let list = rewrite::manifest_list(&table, s).await?;
        for m in list.entries() {
            if referenced.insert(m.manifest_path.clone()) {
                let manifest = m.load_manifest(table.file_io()).await?;
                // A file a snapshot deleted is not in it (an older snapshot
                // that has it lists it as added or existing).
                let live = manifest.entries().iter().filter(|e| e.is_alive());
                data_files.extend(live.map(|e| e.file_path().to_string()));
            }
        }
    }
    let written_before = metadata.last_updated_ms() - clock_margin.as_millis() as i64;

    for m in listed {
        let path = storage.location(m.location.as_ref());
        let name = m.location.filename().unwrap_or_default();
        let written_before_current = m.last_modified.timestamp_millis() < written_before;
        let dead = if name.ends_with(".parquet") {
            !data_files.contains(&path)
                && match data_file_origin(name) {
                    Some((partition, epoch, start)) => {
                        let now = catalog::progress(&table, partition);
                        epoch < now.leader_epoch
                            || (epoch == now.leader_epoch
                                && now.next_offset.is_some_and(|next| start < next))
                    }
                    // A compaction's file: committed only if the table did not change
                    // after the compaction read it.
                    None => name.starts_with(compaction::PREFIX) && written_before_current,
                }
        } else {
            let metadata_file = name.ends_with(".metadata.json") || name.ends_with(".avro");
            metadata_file && !referenced.contains(&path) && written_before_current
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
    catalog: &TableCatalog,
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
    let after = tx.commit(&**catalog).await?;
    done.snapshots_expired = metadata.snapshots().count() - after.metadata().snapshots().count();
    Ok(after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::append::{Chunk, append};
    use crate::schema::{Layout, hourly_spec, key_value_schema};
    use shale_records::record::Record;

    #[tokio::test]
    async fn retention_removes_the_rows_of_past_hours_and_their_files_once_unreferenced() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, storage) = crate::testing::local_catalog(dir.path()).await;
        let schema = key_value_schema().unwrap();
        let spec = hourly_spec(&schema, Layout::KeyValue).unwrap();
        let id = uuid::Uuid::from_u128(5);
        let location = catalog::table_location(&storage, "t", id);
        let table = catalog::load_or_create(&catalog, "t", id, location, schema, spec, "key_value")
            .await
            .unwrap();
        // 30 records two days ago (over two hours), 10 now.
        let now = chrono::Utc::now().timestamp_millis();
        let two_days_ago = (now - 2 * 86_400_000) / 3_600_000 * 3_600_000;
        let records: Vec<Record> = (0..40)
            .map(|o| {
                let at = if o < 30 {
                    two_days_ago + o * 240_000
                } else {
                    now
                };
                let mut r = Record::new(None, Some(b"v"), at);
                r.offset = o;
                r
            })
            .collect();
        let chunk = Chunk {
            partition: 0,
            leader_epoch: 0,
            after: catalog::progress(&table, 0),
            start: 0,
            next_offset: 40,
            records: &records,
            reasons: &[],
            values: None,
            classified_by: None,
        };
        let (table, _) = append(&catalog, &table, Layout::KeyValue, &[chunk], 1 << 20)
            .await
            .unwrap();
        let files = |t: &Table| catalog::status(t, 1);
        assert_eq!((files(&table).rows, files(&table).data_files), (40, 3));
        let ident = table.identifier().clone();
        let day = Rewrites {
            retention_ms: 86_400_000,
            target_file_bytes: 1 << 20,
        };
        let done = housekeep(&catalog, &storage, &ident, Duration::ZERO, Some(day))
            .await
            .unwrap();
        assert_eq!(done.rows_expired, 30, "{done:?}");
        let table = catalog.load_table(&ident).await.unwrap();
        let status = catalog::status(&table, 1);
        assert_eq!((status.rows, status.data_files), (10, 1));
        assert_eq!(
            catalog::progress(&table, 0).next_offset,
            Some(40),
            "progress kept"
        );
        let scanned: Vec<_> = (table.scan().select(["offset"]).build().unwrap())
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(scanned.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
        // The removed files stay while a snapshot that has them is kept...
        let parquet = || {
            let data = dir
                .path()
                .join(format!("bucket/_shale/tables/shale/t@{id}/data"));
            (std::fs::read_dir(data).unwrap())
                .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
                .count()
        };
        assert_eq!(parquet(), 3);
        // ...and go with it. Appends continue on the table as it is now.
        let tx = Transaction::new(&table);
        let age = "history.expire.max-snapshot-age-ms".to_string();
        let tx = (tx.update_table_properties().set(age, "1".into()))
            .apply(tx)
            .unwrap();
        let table = tx.commit(&*catalog).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let done = housekeep(&catalog, &storage, &ident, Duration::ZERO, Some(day))
            .await
            .unwrap();
        assert_eq!(
            (done.rows_expired, done.data_files_deleted),
            (0, 2),
            "{done:?}"
        );
        assert_eq!(parquet(), 1);
        let more = vec![{
            let mut r = Record::new(None, Some(b"w"), now);
            r.offset = 40;
            r
        }];
        let chunk = Chunk {
            after: catalog::progress(&table, 0),
            start: 40,
            next_offset: 41,
            records: &more,
            ..chunk
        };
        let (table, _) = append(&catalog, &table, Layout::KeyValue, &[chunk], 1 << 20)
            .await
            .unwrap();
        assert_eq!(catalog::status(&table, 1).rows, 11);
    }

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
