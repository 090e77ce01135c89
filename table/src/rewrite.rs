//! Removing data files from a table (and adding others in their place), which the
//! Iceberg library Shale writes with (iceberg-rust 0.10) has no action for: the new
//! snapshot is built with the library's own writers (manifests, manifest list, table
//! metadata), and committed as the SQL catalog commits, by a compare-and-swap of the
//! table's metadata location in `iceberg_tables`. A commit that lands meanwhile (a
//! leader's append) makes the swap fail; nothing is lost, the caller tries again later.
//!
//! Used by `housekeeping` for `iceberg.retention.ms` (files whose hour is past it) and
//! for compaction (a partition-hour's small files replaced by one).

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use iceberg::spec::{
    DataFile, FormatVersion, Literal, ManifestContentType, ManifestFile, ManifestList,
    ManifestListWriter, ManifestStatus, ManifestWriterBuilder, Operation, PrimitiveLiteral,
    Snapshot, Summary, TableMetadataBuilder,
};
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, MetadataLocation};

use crate::catalog::TableCatalog;

/// What a rewrite changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rewritten {
    pub files_removed: usize,
    pub rows_removed: u64,
    pub files_added: usize,
}

/// How often a rewrite is based again on the table as it is now, after a commit
/// (a leader's append) landed first.
const ATTEMPTS: usize = 5;

/// Commits a snapshot of `table` without the data files at `remove` and with `add`
/// (`Operation::Delete` when nothing is added: rows go; else `Replace`: the same rows
/// in other files). When another commit lands first,
/// the snapshot is built again on the table as it is then, as long as every file to
/// remove is still in it (appends add files; only housekeeping removes any).
///
/// `deadline`: no attempt to commit after it (see `compaction`).
pub async fn replace_files(
    catalog: &TableCatalog,
    table: &Table,
    remove: &HashSet<String>,
    add: Vec<DataFile>,
    deadline: Option<std::time::Instant>,
) -> anyhow::Result<Rewritten> {
    let mut table = table.clone();
    for attempt in 1.. {
        if deadline.is_some_and(|d| std::time::Instant::now() > d) {
            anyhow::bail!("the rewrite of table {} took too long", table.identifier());
        }
        match try_replace(catalog, &table, remove, add.clone()).await {
            Err(e) if attempt < ATTEMPTS && is_conflict(&e) => {
                tracing::debug!(table = %table.identifier(), attempt, "rewrite conflicted; again");
                table = catalog.load_table(table.identifier()).await?;
            }
            Err(e) => return Err(e),
            Ok(done) => return Ok(done),
        }
    }
    unreachable!()
}

fn is_conflict(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Error>()
        .is_some_and(|e| e.kind() == ErrorKind::CatalogCommitConflicts)
}

async fn try_replace(
    catalog: &TableCatalog,
    table: &Table,
    remove: &HashSet<String>,
    add: Vec<DataFile>,
) -> anyhow::Result<Rewritten> {
    let metadata = table.metadata();
    anyhow::ensure!(
        metadata.format_version() == FormatVersion::V2,
        "rewriting a v{} table",
        metadata.format_version()
    );
    let Some(current) = metadata.current_snapshot() else {
        anyhow::ensure!(remove.is_empty(), "removing files of an empty table");
        return Ok(Rewritten::default());
    };
    let io = table.file_io();
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().as_ref().clone();
    let commit = uuid::Uuid::new_v4();
    let mut snapshot_id = rand_id();
    while metadata.snapshots().any(|s| s.snapshot_id() == snapshot_id) {
        snapshot_id = rand_id();
    }
    let sequence = metadata.next_sequence_number();
    let dir = format!("{}/metadata", metadata.location());

    let mut done = Rewritten::default();
    let (mut records, mut files, mut bytes) = (0u64, 0u64, 0u64);
    let mut manifests: Vec<ManifestFile> = Vec::new();
    let list = manifest_list(table, current).await?;
    for (n, manifest_file) in list.entries().iter().enumerate() {
        anyhow::ensure!(
            manifest_file.content == ManifestContentType::Data,
            "a table with delete files"
        );
        let manifest = manifest_file.load_manifest(io).await?;
        let live: Vec<_> = (manifest.entries().iter())
            .filter(|e| e.status() != ManifestStatus::Deleted)
            .collect();
        let touched = live.iter().any(|e| remove.contains(e.file_path()));
        for e in live.iter().filter(|e| !remove.contains(e.file_path())) {
            records += e.record_count();
            files += 1;
            bytes += e.file_size_in_bytes();
        }
        if !touched {
            manifests.push(manifest_file.clone());
            continue;
        }
        let output = io.new_output(format!("{dir}/{commit}-r{n}.avro"))?;
        let mut writer =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.clone())
                .build_v2_data();
        for e in live {
            let file = e.data_file().clone();
            let seq = e.sequence_number().unwrap_or(0);
            if remove.contains(e.file_path()) {
                done.files_removed += 1;
                done.rows_removed += e.record_count();
                writer.add_delete_file(file, seq, e.file_sequence_number)?;
            } else {
                let added_by = e.snapshot_id().unwrap_or(current.snapshot_id());
                writer.add_existing_file(file, added_by, seq, e.file_sequence_number)?;
            }
        }
        manifests.push(writer.write_manifest_file().await?);
    }
    anyhow::ensure!(
        done.files_removed == remove.len(),
        "{} of the {} files to remove are no longer in table {}",
        remove.len() - done.files_removed,
        remove.len(),
        table.identifier()
    );
    if done.files_removed == 0 && add.is_empty() {
        return Ok(done);
    }
    if !add.is_empty() {
        let output = io.new_output(format!("{dir}/{commit}-a.avro"))?;
        let mut writer =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.clone())
                .build_v2_data();
        for f in add {
            records += f.record_count();
            files += 1;
            bytes += f.file_size_in_bytes();
            done.files_added += 1;
            writer.add_file(f, sequence)?;
        }
        manifests.push(writer.write_manifest_file().await?);
    }

    let list_path = format!("{dir}/snap-{snapshot_id}-0-{commit}.avro");
    let mut list_writer = ManifestListWriter::v2(
        io.new_output(&list_path)?.writer().await?,
        snapshot_id,
        Some(current.snapshot_id()),
        sequence,
    );
    list_writer.add_manifests(manifests.into_iter())?;
    list_writer.close().await?;
    let operation = match done.files_added {
        0 => Operation::Delete,
        _ => Operation::Replace,
    };
    let mut summary = HashMap::from([
        (
            "deleted-data-files".to_string(),
            done.files_removed.to_string(),
        ),
        ("deleted-records".to_string(), done.rows_removed.to_string()),
        ("added-data-files".to_string(), done.files_added.to_string()),
        ("total-records".to_string(), records.to_string()),
        ("total-data-files".to_string(), files.to_string()),
        ("total-files-size".to_string(), bytes.to_string()),
        ("total-delete-files".to_string(), "0".to_string()),
    ]);
    summary.insert(
        "shale.operation".into(),
        format!("{operation:?}").to_lowercase(),
    );
    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(current.snapshot_id()))
        .with_sequence_number(sequence)
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation,
            additional_properties: summary,
        })
        .with_schema_id(metadata.current_schema_id())
        .build();
    let old_location = (table.metadata_location())
        .ok_or_else(|| anyhow::anyhow!("the table has no metadata location"))?
        .to_string();
    let new_metadata =
        TableMetadataBuilder::new_from_metadata(metadata.clone(), Some(old_location.clone()))
            .set_branch_snapshot(snapshot, "main")?
            .build()?
            .metadata;
    let new_location = MetadataLocation::from_str(&old_location)?.with_next_version();
    new_metadata.write_to(io, &new_location).await?;
    let new_location = new_location.to_string();
    (catalog.swap_metadata_location(table.identifier(), &old_location, &new_location)).await?;
    Ok(done)
}

/// A data file of a table's current snapshot: its path, size and hour (the table's
/// partition).
#[derive(Debug, Clone)]
pub struct LiveFile {
    pub path: String,
    pub bytes: u64,
    pub hour: i32,
}

/// The data files of the table's current snapshot.
pub async fn live_files(table: &Table) -> anyhow::Result<Vec<LiveFile>> {
    let metadata = table.metadata();
    let mut out = Vec::new();
    let Some(current) = metadata.current_snapshot() else {
        return Ok(out);
    };
    let list = manifest_list(table, current).await?;
    for manifest_file in list.entries() {
        let manifest = manifest_file.load_manifest(table.file_io()).await?;
        for e in manifest.entries().iter().filter(|e| e.is_alive()) {
            let first = e
                .data_file()
                .partition()
                .fields()
                .first()
                .cloned()
                .flatten();
            let Some(Literal::Primitive(PrimitiveLiteral::Int(hour))) = first else {
                anyhow::bail!("data file {} has no hour", e.file_path());
            };
            out.push(LiveFile {
                path: e.file_path().to_string(),
                bytes: e.file_size_in_bytes(),
                hour,
            });
        }
    }
    Ok(out)
}

/// Whether `hour` ended before `ms`.
pub fn hour_ended_before(hour: i32, ms: i64) -> bool {
    (i64::from(hour) + 1) * 3_600_000 <= ms
}

/// The data files of the table's current snapshot whose hour (of the timestamp the
/// table is partitioned by) ended before `cutoff_ms`: every row in them is older.
pub async fn files_before(table: &Table, cutoff_ms: i64) -> anyhow::Result<HashSet<String>> {
    Ok((live_files(table).await?.into_iter())
        .filter(|f| hour_ended_before(f.hour, cutoff_ms))
        .map(|f| f.path)
        .collect())
}

/// A snapshot's manifest list.
pub(crate) async fn manifest_list(
    table: &Table,
    snapshot: &Snapshot,
) -> iceberg::Result<ManifestList> {
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())?
        .read()
        .await?;
    ManifestList::parse_with_version(&bytes, table.metadata().format_version())
}

fn rand_id() -> i64 {
    (uuid::Uuid::new_v4().as_u64_pair().0 & (i64::MAX as u64)) as i64
}
