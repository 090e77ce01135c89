//! Compaction of small files: every commit adds at least one file per partition of
//! the topic and hour, so a table committed every minute gathers thousands of small
//! files a day, and a scan opens each. Once an hour is over (and a margin for late
//! records has passed), housekeeping rewrites its small files into files of about
//! `iceberg.target.file.size.bytes`: read through Iceberg's reader (as the current
//! schema has them: a file written before a column was added reads it as null), written
//! by the same writers as a commit, and swapped in by one `replace` snapshot (see
//! `rewrite`). The rows stay as they were; a reader holding an older snapshot reads the
//! old files, which stay until no kept snapshot has them.
//!
//! The new files are named `compact-<uuid>-…`. One whose commit never landed is an
//! orphan the usual rule removes: the swap succeeds only if the table has not changed
//! since the compaction read it, so a file written before the table's current metadata
//! can no longer be committed.

use std::collections::{BTreeMap, HashSet};

use futures::TryStreamExt;
use iceberg::Catalog;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::writer::IcebergWriter;
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;

use crate::append::hour_writer;
use crate::catalog::TableCatalog;
use crate::rewrite::{self, Rewritten};

/// A file below this share of the target size is small.
const SMALL: f64 = 0.75;
/// At most about this much is rewritten in one housekeeping.
const MAX_BYTES_PER_RUN: u64 = 1 << 30;

/// A compaction commits within this long of writing its first file, or gives up (half
/// of housekeeping's clock margin).
const COMMIT_WITHIN: std::time::Duration = std::time::Duration::from_secs(300);

/// The prefix of files compaction writes.
pub const PREFIX: &str = "compact-";

/// Rewrites the small files of the hours that ended before `closed_before_ms`, in groups
/// of about `target_file_bytes`, and commits them in one snapshot. Returns the table as
/// it is now.
pub async fn compact(
    catalog: &TableCatalog,
    table: &Table,
    target_file_bytes: u64,
    closed_before_ms: i64,
) -> anyhow::Result<(Table, Rewritten)> {
    let groups = small_file_groups(table, target_file_bytes, closed_before_ms).await?;
    if groups.is_empty() {
        return Ok((table.clone(), Rewritten::default()));
    }
    let remove: HashSet<String> = groups.iter().flat_map(|(_, files)| files.clone()).collect();
    let tasks: Vec<_> = (table.scan().select_all().build()?.plan_files().await?)
        .try_filter(|t| futures::future::ready(remove.contains(&t.data_file_path)))
        .try_collect()
        .await?;
    let names = DefaultFileNameGenerator::new(
        format!("{PREFIX}{}", uuid::Uuid::new_v4().simple()),
        None,
        DataFileFormat::Parquet,
    );
    let mut added: Vec<DataFile> = Vec::new();
    let written = std::time::Instant::now();
    let mut read_rows = 0u64;
    let result: anyhow::Result<()> = async {
        for (hour, files) in &groups {
            let group: Vec<_> = (tasks.iter())
                .filter(|t| files.contains(&t.data_file_path))
                .cloned()
                .map(Ok)
                .collect();
            let batches = (table.reader_builder().build())
                .read(Box::pin(futures::stream::iter(group)))?
                .stream();
            let mut writer = hour_writer(table, &names, *hour, target_file_bytes as usize).await?;
            let mut batches = std::pin::pin!(batches);
            while let Some(batch) = batches.try_next().await? {
                read_rows += batch.num_rows() as u64;
                writer.write(batch).await?;
            }
            added.extend(writer.close().await?);
        }
        let written: u64 = added.iter().map(DataFile::record_count).sum();
        anyhow::ensure!(
            written == read_rows,
            "{read_rows} rows read, {written} written"
        );
        Ok(())
    }
    .await;
    if let Err(e) = result {
        delete_files(table, &added).await;
        return Err(e);
    }
    // A failed commit leaves its files to housekeeping: whether a commit whose
    // answer was lost landed is not known here.
    // Housekeeping deletes a compaction's files that are not in the table once the
    // table changed more than its clock margin after they were written: commit well
    // before that, or not at all.
    let deadline = written + COMMIT_WITHIN;
    let done = rewrite::replace_files(catalog, table, &remove, added, Some(deadline)).await?;
    Ok((catalog.load_table(table.identifier()).await?, done))
}

async fn delete_files(table: &Table, files: &[DataFile]) {
    for f in files {
        if let Err(d) = table.file_io().delete(f.file_path()).await {
            tracing::warn!(file = %f.file_path(), error = %d, "could not delete an uncompacted file");
        }
    }
}

/// The groups of small files to rewrite: per closed hour, files below [`SMALL`] of the
/// target, packed up to about the target; only groups of two or more.
async fn small_file_groups(
    table: &Table,
    target_file_bytes: u64,
    closed_before_ms: i64,
) -> anyhow::Result<Vec<(i32, Vec<String>)>> {
    let small = (target_file_bytes as f64 * SMALL) as u64;
    let mut by_hour: BTreeMap<i32, Vec<(String, u64)>> = BTreeMap::new();
    for f in rewrite::live_files(table).await? {
        if rewrite::hour_ended_before(f.hour, closed_before_ms) && f.bytes < small {
            by_hour.entry(f.hour).or_default().push((f.path, f.bytes));
        }
    }
    let mut groups = Vec::new();
    let mut budget = MAX_BYTES_PER_RUN;
    for (hour, mut files) in by_hour {
        files.sort();
        let mut group: Vec<String> = Vec::new();
        let mut bytes = 0u64;
        for (path, size) in files {
            if bytes + size > target_file_bytes && !group.is_empty() {
                if group.len() > 1 {
                    groups.push((hour, std::mem::take(&mut group)));
                }
                group.clear();
                bytes = 0;
            }
            if size > budget {
                break;
            }
            budget -= size;
            bytes += size;
            group.push(path);
        }
        if group.len() > 1 {
            groups.push((hour, group));
        }
        if budget == 0 {
            break;
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::append::Chunk;
    use crate::catalog;
    use crate::housekeeping::{Rewrites, housekeep};
    use crate::topic::{Mode, TopicTables};
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, RecordBatch};
    use iceberg::Catalog;
    use shale_records::record::Record;

    async fn rows(table: &Table) -> Vec<(i64, Option<i64>, Option<String>)> {
        let scan = table.scan().select_all().build().unwrap();
        let batches: Vec<RecordBatch> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
        let mut out = Vec::new();
        for b in batches {
            let offsets = b
                .column_by_name("shale_offset")
                .unwrap()
                .as_primitive::<Int64Type>();
            let n = b.column_by_name("n").unwrap().as_primitive::<Int64Type>();
            let tag = b
                .column_by_name("tag")
                .map(|c| c.as_string::<i32>().clone());
            for i in 0..b.num_rows() {
                let tag = tag
                    .as_ref()
                    .filter(|t| !t.is_null(i))
                    .map(|t| t.value(i).to_string());
                out.push((offsets.value(i), (!n.is_null(i)).then(|| n.value(i)), tag));
            }
        }
        out.sort();
        out
    }

    #[tokio::test]
    async fn an_hours_small_files_become_one_with_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, storage) = crate::testing::local_catalog(dir.path()).await;
        let tables = TopicTables {
            catalog: &catalog,
            storage: &storage,
            topic: "t",
            topic_id: uuid::Uuid::from_u128(9),
        };
        let mode = Mode::Values(None);
        let mut table = tables.open(&mode).await.unwrap();
        // Five commits within one hour two days ago; the last ones bring a new field.
        let now = chrono::Utc::now().timestamp_millis();
        let hour = (now - 2 * 86_400_000) / 3_600_000 * 3_600_000;
        for c in 0..5i64 {
            let records: Vec<Record> = (c * 10..c * 10 + 10)
                .map(|o| {
                    let v = match c {
                        0..3 => format!(r#"{{"n":{o}}}"#),
                        _ => format!(r#"{{"n":{o},"tag":"x{o}"}}"#),
                    };
                    let mut r = Record::new(None, Some(v.as_bytes()), hour + o * 1000);
                    r.offset = o;
                    r
                })
                .collect();
            let chunk = Chunk {
                partition: 0,
                leader_epoch: 0,
                after: catalog::progress(&table, 0),
                start: c * 10,
                next_offset: c * 10 + 10,
                records: &records,
                reasons: &[],
                values: None,
                classified_by: None,
            };
            tables
                .commit(&table, &mode, &[chunk], 1 << 20)
                .await
                .unwrap();
            table = catalog.load_table(table.identifier()).await.unwrap();
        }
        let before = rows(&table).await;
        assert_eq!(before.len(), 50);
        assert_eq!(catalog::status(&table, 1).data_files, 5);
        let rewrites = Rewrites {
            retention_ms: -1,
            target_file_bytes: 1 << 20,
        };
        let ident = table.identifier().clone();
        let zero = std::time::Duration::ZERO;
        let done = housekeep(&catalog, &storage, &ident, zero, Some(rewrites))
            .await
            .unwrap();
        assert_eq!(done.files_compacted, 5, "{done:?}");
        let table = catalog.load_table(&ident).await.unwrap();
        let status = catalog::status(&table, 1);
        assert_eq!((status.data_files, status.rows), (1, 50));
        assert_eq!(
            rows(&table).await,
            before,
            "the same rows, the new column null before it came"
        );
        assert_eq!(catalog::progress(&table, 0).next_offset, Some(50));
        // Nothing more to do.
        let done = housekeep(&catalog, &storage, &ident, zero, Some(rewrites))
            .await
            .unwrap();
        assert_eq!(done.files_compacted, 0, "{done:?}");
    }
}
