//! One commit of some partitions of a topic (those one broker leads): each one's
//! records from the table's `next-offset` on, as Parquet data files (one or more per
//! partition and hour of timestamps), appended to the table with an Iceberg fast
//! append in one transaction with the partitions' new progress.
//!
//! Data files are named `p<partition>-e<leader epoch>-o<first offset>-<uuid>-<n>.parquet`.
//! Files a failed or fenced commit wrote are deleted at once; those a crash left
//! behind, by `housekeeping` once no commit can take them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::RecordBatch;
use iceberg::spec::{DataFile, DataFileFormat, Literal, PartitionKey, Struct};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use shale_records::record::Record;

use crate::catalog::{self, Fenced, Progress, TableCatalog};
use crate::schema::{Layout, hour_of, rows};

/// What one commit covers of one partition.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub partition: i32,
    /// The partition's leader epoch at the leader writing the chunk.
    pub leader_epoch: i32,
    /// The table's progress the chunk continues from.
    pub after: Progress,
    /// The chunk's first offset: `after.next_offset`, or where the log starts.
    pub start: i64,
    /// The first offset past the chunk (past its last record, or past a stretch of
    /// offsets without records, as compaction leaves).
    pub next_offset: i64,
    pub records: &'a [Record],
    /// Dead letters only: why each record did not fit its table.
    pub reasons: &'a [String],
    /// `value_schema` only: the records' value columns, decoded (one row per record);
    /// `None`: decoded when written.
    pub values: Option<&'a RecordBatch>,
    /// Dead letters only: the schema of the topic's table the records were found not
    /// to fit (kept with the dead-letter table's progress, see `topic`).
    pub classified_by: Option<i32>,
}

/// What a commit wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
}

/// `p<partition>-e<leader epoch>-o<first offset>-<uuid>`: what housekeeping needs to
/// tell a file no commit can take (see `housekeeping`).
fn file_prefix(partition: i32, epoch: i32, start: i64) -> String {
    format!(
        "p{partition}-e{epoch}-o{start}-{}",
        uuid::Uuid::new_v4().simple()
    )
}

/// Writes the chunks' files and commits them, all or none. An error leaves the table
/// as it was and no file of this attempt behind (as far as deletes succeed).
pub async fn append(
    catalog: &TableCatalog,
    table: &Table,
    layout: Layout,
    chunks: &[Chunk<'_>],
    target_file_bytes: usize,
) -> anyhow::Result<(Table, Appended)> {
    let mut files = Vec::new();
    for chunk in chunks {
        match write_files(table, layout, chunk, target_file_bytes).await {
            Ok(f) => files.extend(f),
            Err(e) => {
                delete_files(table, files.iter().map(DataFile::file_path)).await;
                return Err(e);
            }
        }
    }
    let appended = Appended {
        files: files.len(),
        rows: files.iter().map(DataFile::record_count).sum(),
        bytes: files.iter().map(DataFile::file_size_in_bytes).sum(),
    };
    let paths: Vec<String> = files.iter().map(|f| f.file_path().to_string()).collect();
    match commit(catalog, table, chunks, files).await {
        Ok(t) => Ok((t, appended)),
        // Refused: the files can go now. Any other failure (a lost answer) leaves
        // them to housekeeping, which keeps them if the commit landed after all.
        Err(e) => {
            let refused = matches!(
                e.kind(),
                iceberg::ErrorKind::CatalogCommitConflicts | iceberg::ErrorKind::PreconditionFailed
            );
            if refused {
                delete_files(table, paths.iter().map(String::as_str)).await;
            }
            Err(e.into())
        }
    }
}

async fn delete_files(table: &Table, paths: impl Iterator<Item = &str>) {
    for p in paths {
        if let Err(d) = table.file_io().delete(p).await {
            tracing::warn!(file = %p, error = %d, "could not delete an uncommitted data file");
        }
    }
}

/// A writer of Parquet data files (zstd) for one hour (the table's partition) of
/// `table`, named by `names`, rolled at about `target_file_bytes`.
pub(crate) async fn hour_writer(
    table: &Table,
    names: &DefaultFileNameGenerator,
    hour: i32,
    target_file_bytes: usize,
) -> iceberg::Result<
    DataFileWriter<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>,
> {
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().as_ref().clone();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let rolling = RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(props, schema.clone()),
        target_file_bytes,
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata)?,
        names.clone(),
    );
    let key = PartitionKey::new(spec, schema, Struct::from_iter([Some(Literal::int(hour))]));
    DataFileWriterBuilder::new(rolling).build(Some(key)).await
}

async fn write_files(
    table: &Table,
    layout: Layout,
    chunk: &Chunk<'_>,
    target_file_bytes: usize,
) -> anyhow::Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
    let mut by_hour: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, r) in chunk.records.iter().enumerate() {
        by_hour.entry(hour_of(r.timestamp)).or_default().push(i);
    }
    let names = DefaultFileNameGenerator::new(
        file_prefix(chunk.partition, chunk.leader_epoch, chunk.start),
        None,
        DataFileFormat::Parquet,
    );
    let mut out = Vec::new();
    for (hour, indices) in by_hour {
        let mut writer = hour_writer(table, &names, hour, target_file_bytes).await?;
        // Batches of bounded size: Parquet row groups and rolling see them one by one.
        for part in indices.chunks(8192) {
            let records: Vec<&Record> = part.iter().map(|&i| &chunk.records[i]).collect();
            let reasons: Vec<&str> = (part.iter())
                .filter_map(|&i| chunk.reasons.get(i).map(String::as_str))
                .collect();
            let values = match chunk.values {
                Some(v) => {
                    let at =
                        arrow_array::UInt32Array::from_iter_values(part.iter().map(|&i| i as u32));
                    Some(arrow_select::take::take_record_batch(v, &at)?)
                }
                None => None,
            };
            let batch = rows(layout, &arrow, chunk.partition, &records, &reasons, values)?;
            writer.write(batch).await?;
        }
        match writer.close().await {
            Ok(files) => out.extend(files),
            Err(e) => {
                delete_files(table, out.iter().map(DataFile::file_path)).await;
                return Err(e.into());
            }
        }
    }
    Ok(out)
}

async fn commit(
    catalog: &TableCatalog,
    table: &Table,
    chunks: &[Chunk<'_>],
    files: Vec<DataFile>,
) -> iceberg::Result<Table> {
    let fenced = Fenced {
        inner: catalog,
        expected: (chunks.iter())
            .map(|c| (c.partition, c.after.next_offset, c.leader_epoch))
            .collect(),
    };
    // The snapshot's summary says which offsets of which partitions it added.
    let mut summary = HashMap::new();
    let tx = Transaction::new(table);
    let mut props = tx.update_table_properties();
    for c in chunks {
        let range = format!("{}-{}", c.start, c.next_offset);
        summary.insert(format!("shale.partition.{}.offsets", c.partition), range);
        summary.insert(
            format!("shale.partition.{}.leader-epoch", c.partition),
            c.leader_epoch.to_string(),
        );
        let now = chrono::Utc::now().timestamp_millis();
        for (k, v) in catalog::progress_properties(c.partition, c.next_offset, c.leader_epoch, now)
        {
            props = props.set(k, v);
        }
        if let Some(id) = c.classified_by {
            props = props.set(catalog::classified_by_key(c.partition), id.to_string());
        }
    }
    let mut tx = props.apply(tx)?;
    // A chunk may add no rows (all its records were dead letters): then only its
    // progress moves.
    if !files.is_empty() {
        tx = (tx.fast_append())
            .add_data_files(files)
            .set_snapshot_properties(summary)
            .apply(tx)?;
    }
    tx.commit(&fenced).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{hourly_spec, key_value_schema};
    use futures::TryStreamExt;
    use iceberg::Catalog;

    const MB: usize = 1 << 20;
    const KV: Layout = Layout::KeyValue;

    fn records(from: i64, n: i64) -> Vec<Record> {
        (from..from + n)
            .map(|o| {
                // Two hours' worth: files in two partitions of the table.
                let mut r = Record::new(Some(b"k"), Some(b"v"), 1_700_000_000_000 + o * 60_000);
                r.offset = o;
                r
            })
            .collect()
    }

    async fn rows(table: &Table) -> usize {
        let scan = table.scan().select_all().build().unwrap();
        let batches: Vec<_> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
        batches.iter().map(|b| b.num_rows()).sum()
    }

    #[tokio::test]
    async fn commits_continue_from_the_tables_progress_and_stale_ones_are_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, storage) = crate::testing::local_catalog(dir.path()).await;
        let schema = key_value_schema().unwrap();
        let spec = hourly_spec(&schema, KV).unwrap();
        let topic_id = uuid::Uuid::from_u128(1);
        let location = catalog::table_location(&storage, "t", topic_id);
        let table =
            catalog::load_or_create(&catalog, "t", topic_id, location, schema, spec, "key_value")
                .await
                .unwrap();
        let first = records(0, 100);
        let chunk = Chunk {
            partition: 0,
            leader_epoch: 3,
            after: catalog::progress(&table, 0),
            start: 0,
            next_offset: 100,
            records: &first,
            reasons: &[],
            values: None,
            classified_by: None,
        };
        let (table2, appended) = append(&catalog, &table, KV, &[chunk], MB).await.unwrap();
        assert_eq!(appended.rows, 100);
        assert_eq!(appended.files, 2, "one file per hour");
        let want = Progress {
            next_offset: Some(100),
            leader_epoch: 3,
        };
        assert_eq!(catalog::progress(&table2, 0), want);
        assert_eq!(rows(&table2).await, 100);

        // The same chunk again (a retry after a lost answer, or a zombie leader): refused,
        // and its files are gone.
        let err = append(&catalog, &table, KV, &[chunk], MB)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(catalog::FENCED), "{err:#}");
        // An older epoch continuing from the right offset: refused too.
        let more = records(100, 10);
        let stale = Chunk {
            after: catalog::progress(&table2, 0),
            start: 100,
            next_offset: 110,
            records: &more,
            leader_epoch: 2,
            ..chunk
        };
        assert!(append(&catalog, &table2, KV, &[stale], MB).await.is_err());
        // A commit of two partitions, one of them stale: neither lands.
        let other = records(0, 5);
        let p1 = Chunk {
            partition: 1,
            after: catalog::progress(&table2, 1),
            start: 0,
            next_offset: 5,
            records: &other,
            leader_epoch: 0,
            reasons: &[],
            values: None,
            classified_by: None,
        };
        assert!(
            append(&catalog, &table2, KV, &[p1, stale], MB)
                .await
                .is_err()
        );
        let now = catalog.load_table(table2.identifier()).await.unwrap();
        assert_eq!(catalog::progress(&now, 1).next_offset, None);
        let fresh = Chunk {
            leader_epoch: 4,
            ..stale
        };
        let (table3, _) = append(&catalog, &table2, KV, &[fresh, p1], MB)
            .await
            .unwrap();
        assert_eq!(catalog::progress(&table3, 0).next_offset, Some(110));
        assert_eq!(catalog::progress(&table3, 1).next_offset, Some(5));
        assert_eq!(rows(&table3).await, 115);
        let status = catalog::status(&table3, 3);
        assert_eq!((status.rows, status.data_files), (115, 5));
        assert!(status.bytes > 0 && status.last_commit_ms > 0);
        assert_eq!(status.partitions[0].0, Some(110));
        assert_eq!(status.partitions[1].0, Some(5));
        assert!(status.partitions[1].1.is_some());
        assert_eq!(status.partitions[2], (None, None));
        // Only committed files remain: the refused attempts deleted theirs.
        let files = walk(&dir.path().join("bucket"));
        let parquet = files.iter().filter(|f| f.ends_with(".parquet")).count();
        assert_eq!(
            parquet, 5,
            "2 commits of 2 hours, 1 file of partition 1: {files:?}"
        );
        // Housekeeping: snapshots older than a millisecond expire (only the current
        // one stays) and the files nothing refers to go, the table reading the same;
        // of data files left by crashes, those no commit can take go (an older
        // epoch, or below next-offset at the table's epoch), the one that may still
        // be committed stays.
        let data = dir.path().join(format!(
            "bucket/_shale/tables/shale/t@{}/data/hour=0",
            uuid::Uuid::from_u128(1)
        ));
        std::fs::create_dir_all(&data).unwrap();
        let stale_epoch = data.join("p0-e3-o110-x-00000.parquet");
        let below_next = data.join("p0-e4-o100-x-00000.parquet");
        let may_commit = data.join("p0-e4-o110-x-00000.parquet");
        for f in [&stale_epoch, &below_next, &may_commit] {
            std::fs::write(f, b"x").unwrap();
        }
        let tx = Transaction::new(&table3);
        let age = "history.expire.max-snapshot-age-ms".to_string();
        let tx = (tx.update_table_properties().set(age, "1".into()))
            .apply(tx)
            .unwrap();
        tx.commit(&*catalog).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let zero = std::time::Duration::ZERO;
        let ident = table3.identifier().clone();
        let done = crate::housekeeping::housekeep(&catalog, &storage, &ident, zero, None)
            .await
            .unwrap();
        assert_eq!(done.snapshots_expired, 1, "{done:?}");
        assert_eq!(done.data_files_deleted, 2, "{done:?}");
        assert!(done.metadata_files_deleted >= 1, "{done:?}");
        assert!(!stale_epoch.exists() && !below_next.exists() && may_commit.exists());
        let table5 = catalog.load_table(&ident).await.unwrap();
        assert_eq!(table5.metadata().snapshots().count(), 1);
        assert_eq!(rows(&table5).await, 115);
        let left = walk(&dir.path().join("bucket"));
        let lists = left.iter().filter(|f| f.contains("/snap-")).count();
        assert_eq!(lists, 1, "{left:?}");
        assert_eq!(
            left.iter().filter(|f| f.ends_with(".parquet")).count(),
            6,
            "{left:?}"
        );

        // The topic deleted and created again under its name: the old table is renamed
        // aside with its rows, the new topic gets a table of its own, from scratch.
        let new_id = uuid::Uuid::from_u128(2);
        let location = catalog::table_location(&storage, "t", new_id);
        let schema = key_value_schema().unwrap();
        let spec = hourly_spec(&schema, KV).unwrap();
        let fresh =
            catalog::load_or_create(&catalog, "t", new_id, location, schema, spec, "key_value")
                .await
                .unwrap();
        assert_eq!(catalog::progress(&fresh, 0).next_offset, None);
        assert_eq!(rows(&fresh).await, 0);
        assert!(
            fresh
                .metadata()
                .location()
                .ends_with("t@00000000-0000-0000-0000-000000000002")
        );
        let aside = catalog::ident("t@00000000-0000-0000-0000-000000000001");
        assert_eq!(rows(&catalog.load_table(&aside).await.unwrap()).await, 115);
    }

    fn walk(dir: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
        out
    }
}
