//! Topics as Iceberg tables on this broker (see `shale_table`): every partition this
//! broker leads, of a topic with `iceberg.mode` set, commits its committed records
//! (below the high watermark) to the topic's table once per
//! `iceberg.commit.interval.ms`. Records are read as a consumer reads them (the local
//! log, or the bucket below it), so a table that fell behind local retention catches
//! up from the tier.
//!
//! # Handover
//! Where a partition's table left off is in the table (its `next-offset` property),
//! not here: a new leader continues from there, and a commit based on anything else
//! is refused (see `shale_table::catalog::Fenced`), so a deposed leader's late commit
//! cannot add rows twice. Files of a commit that never landed (a crash between writing
//! and committing) are deleted by the housekeeping of the leader of partition 0, once
//! no commit can take them (see `shale_table::housekeeping`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use iceberg::Catalog;
use shale_config::iceberg::IcebergMode;
use shale_records::batch::BatchIter;
use shale_records::control::AbortedFilter;
use shale_records::record::{Record, decode_records};
use shale_table::append::Chunk;
use shale_table::catalog;
use shale_table::housekeeping::{Rewrites, housekeep};
use shale_table::storage::BucketStorage;
use shale_table::topic::{Mode, TopicTables, dead_letter_ident};
use tokio::sync::OnceCell;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::partition::Partition;

/// How often, at most, the leader of a topic's partition 0 expires its table's old
/// snapshots and rows and deletes the files nothing refers to
/// (`shale_table::housekeeping`).
const HOUSEKEEPING_INTERVAL_MS: i64 = 600_000;
/// ...and at least this long apart.
const MIN_HOUSEKEEPING_INTERVAL_MS: i64 = 10_000;
/// How far apart the object store's clock and the brokers' may be, for housekeeping.
const CLOCK_MARGIN: Duration = Duration::from_secs(600);
/// At most about this much of the log goes into one commit (its records are held
/// in memory while the files are written)...
const MAX_COMMIT_BYTES: usize = 256 << 20;
/// ...but each partition may add at least this much.
const MIN_PARTITION_BYTES: usize = 16 << 20;

/// A partition's part of a commit: partition, leader epoch, the table's progress it
/// continues, its first offset, the offset after it, its records.
type ChunkRead = (i32, i32, catalog::Progress, i64, i64, Vec<Record>);

/// What the broker keeps for its tables: the catalog (opened at first use), and when
/// each partition it leads last committed.
pub(crate) struct Tables {
    storage: BucketStorage,
    catalog: OnceCell<catalog::TableCatalog>,
    /// Per (topic id, partition): when it was last attempted (ms), and the offset the
    /// last warning of records lost to retention was from.
    partitions: std::sync::Mutex<HashMap<(uuid::Uuid, i32), (i64, i64)>>,
    /// Per topic id: when its table was last housekept here (ms).
    housekept: std::sync::Mutex<HashMap<uuid::Uuid, i64>>,
    pub(crate) stats: TableStats,
}

/// Counters since the broker started (metrics).
#[derive(Debug, Default)]
pub(crate) struct TableStats {
    pub rows: AtomicU64,
    pub bytes: AtomicU64,
    pub commits: AtomicU64,
    pub fenced: AtomicU64,
    /// Records retention removed before they reached the table.
    pub skipped: AtomicU64,
    /// Records that went to a dead-letter table.
    pub dead_letters: AtomicU64,
    /// Rows removed from tables by `iceberg.retention.ms`.
    pub expired_rows: AtomicU64,
}

impl Tables {
    pub(crate) fn new(object_store_url: &str, store: shale_tiering::store::ObjectStoreRef) -> Self {
        // Tables name their files by absolute location: a local bucket's by its
        // absolute path, whatever directory the broker was started in.
        let base = match shale_tiering::store::local_root(object_store_url) {
            Some(root) => format!("file://{}", root.display()),
            None => object_store_url.to_string(),
        };
        Self {
            storage: BucketStorage::new(&base, store),
            catalog: OnceCell::new(),
            partitions: Default::default(),
            housekept: Default::default(),
            stats: TableStats::default(),
        }
    }
}

fn other(e: impl std::fmt::Display) -> crate::error::Error {
    crate::error::Error::Storage(std::io::Error::other(e.to_string()))
}

impl Broker {
    /// The tables' catalog, opened at first use.
    async fn table_catalog(&self) -> crate::error::Result<&catalog::TableCatalog> {
        (self.tables.catalog)
            .get_or_try_init(|| {
                catalog::open(&self.config.metastore_url, self.tables.storage.clone())
            })
            .await
            .map_err(other)
    }

    /// The topics that have a table.
    pub async fn table_names(&self) -> crate::error::Result<Vec<String>> {
        let catalog = self.table_catalog().await?;
        let ns = iceberg::NamespaceIdent::new(catalog::NAMESPACE.to_string());
        let tables = (catalog.list_tables(&ns).await).map_err(other)?;
        Ok(tables.into_iter().map(|t| t.name).collect())
    }

    /// A topic's table as `shale topic describe` shows it; `None` when the topic has
    /// no table yet.
    pub async fn table_status(
        &self,
        topic: &str,
        partitions: i32,
    ) -> crate::error::Result<Option<catalog::TableStatus>> {
        let catalog = self.table_catalog().await?;
        match catalog.load_table(&catalog::ident(topic)).await {
            Ok(t) => Ok(Some(catalog::status(&t, partitions))),
            Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => Ok(None),
            Err(e) => Err(other(e)),
        }
    }

    /// A topic's table as Iceberg's REST catalog hands it out: the location of its
    /// current metadata file, and the metadata (Iceberg's JSON); `None` when the
    /// topic has no table.
    pub async fn table_metadata(
        &self,
        topic: &str,
    ) -> crate::error::Result<Option<(String, serde_json::Value)>> {
        let catalog = self.table_catalog().await?;
        let table = match catalog.load_table(&catalog::ident(topic)).await {
            Ok(t) => t,
            Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => return Ok(None),
            Err(e) => return Err(other(e)),
        };
        let location = table.metadata_location().unwrap_or_default().to_string();
        let metadata = serde_json::to_value(table.metadata()).map_err(other)?;
        Ok(Some((location, metadata)))
    }

    /// Commits, for each topic with a table, what was added to the partitions led
    /// here whose interval has passed: one commit per topic, topics one at a time, on
    /// the remote-I/O runtime.
    pub(crate) async fn table_pass(self: &Arc<Self>) -> crate::error::Result<()> {
        let now = now_ms();
        let mut due: BTreeMap<String, Vec<Arc<Partition>>> = BTreeMap::new();
        for p in self.all_partitions() {
            if !p.is_leader() || p.config().table.mode == IcebergMode::Disabled {
                continue;
            }
            let last = (self.tables.partitions.lock().unwrap())
                .get(&(p.topic_id, p.index))
                .map_or(0, |(at, _)| *at);
            if now - last >= p.config().table.commit_interval_ms {
                due.entry(p.topic.to_string()).or_default().push(p);
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        self.table_catalog().await?;
        for (topic, partitions) in due {
            // Encoding Parquet is CPU work: on the remote-I/O runtime, whose threads run
            // at a lower priority than those serving produce and fetch.
            let b = self.clone();
            let t = topic.clone();
            let work = async move {
                let catalog = b.table_catalog().await?;
                b.translate(catalog, &t, &partitions).await
            };
            let done = (self.tier.remote_io.run(work).await).map_err(anyhow::Error::from);
            if let Err(e) = done.and_then(|r| r) {
                let fenced = e.to_string().contains(catalog::FENCED);
                if fenced {
                    self.tables.stats.fenced.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(%topic, fenced, error = %format!("{e:#}"),
                    "cannot commit to the topic's table");
            }
        }
        Ok(())
    }

    async fn translate(
        &self,
        catalog: &catalog::TableCatalog,
        topic: &str,
        partitions: &[Arc<Partition>],
    ) -> anyhow::Result<()> {
        let topic_id = partitions[0].topic_id;
        // A broker whose metadata still shows a topic of this name deleted since
        // leaves the name's table to the live topic.
        let live = self.metastore.get_topic(topic).await?;
        if live.is_none_or(|t| t.id != topic_id) {
            return Ok(());
        }
        let config = partitions[0].config();
        let mode = match config.table.mode {
            IcebergMode::ValueSchema if config.table.value_schema.is_empty() => Mode::Values(None),
            IcebergMode::ValueSchema => Mode::Values(Some(Box::new(
                shale_table::values::parse_value_schema(&config.table.value_schema)
                    .map_err(|e| anyhow::anyhow!("iceberg.value.schema: {e}"))?,
            ))),
            _ => Mode::KeyValue,
        };
        let tables = TopicTables {
            catalog,
            storage: &self.tables.storage,
            topic,
            topic_id,
        };
        let table = tables.open(&mode).await?;
        let budget = (MAX_COMMIT_BYTES / partitions.len()).max(MIN_PARTITION_BYTES);
        let mut read = Vec::new();
        for p in partitions {
            // One partition that cannot be read holds back none of the others.
            match self.partition_chunk(&table, p, budget).await {
                Ok(Some(chunk)) => read.push(chunk),
                Ok(None) => {}
                Err(e) => tracing::warn!(topic, partition = p.index, error = %format!("{e:#}"),
                    "cannot read the partition's records for its table"),
            }
        }
        if !read.is_empty() {
            let chunks: Vec<Chunk<'_>> = (read.iter())
                .map(
                    |(partition, epoch, after, start, next_offset, records)| Chunk {
                        partition: *partition,
                        leader_epoch: *epoch,
                        after: *after,
                        start: *start,
                        next_offset: *next_offset,
                        records,
                        reasons: &[],
                        values: None,
                        classified_by: None,
                    },
                )
                .collect();
            let target = config.table.target_file_size_bytes as usize;
            let done = tables.commit(&table, &mode, &chunks, target).await?;
            let s = &self.tables.stats;
            s.rows.fetch_add(done.appended.rows, Ordering::Relaxed);
            s.bytes.fetch_add(done.appended.bytes, Ordering::Relaxed);
            s.commits.fetch_add(1, Ordering::Relaxed);
            s.dead_letters
                .fetch_add(done.dead_letters, Ordering::Relaxed);
            tracing::debug!(
                topic,
                partitions = chunks.len(),
                rows = done.appended.rows,
                files = done.appended.files,
                dead_letters = done.dead_letters,
                "committed to the topic's table"
            );
        }
        self.housekeep(catalog, partitions, table.identifier())
            .await
    }

    /// What `p` adds to its table's next commit: its records from where the table
    /// left off to the high watermark (at most about `budget` bytes of log); `None`
    /// when there are none.
    async fn partition_chunk(
        &self,
        table: &iceberg::table::Table,
        p: &Partition,
        budget: usize,
    ) -> anyhow::Result<Option<ChunkRead>> {
        let epoch = p.role().leader_epoch;
        let key = (p.topic_id, p.index);
        // The attempt counts, failed or not: a failing partition is retried once per
        // interval, not once a second.
        (self.tables.partitions.lock().unwrap())
            .entry(key)
            .or_insert((0, -1))
            .0 = now_ms();
        // Where the log starts is known only once the remote log is.
        if p.config().has_remote_log() && !p.remote_state().loaded {
            return Ok(None);
        }
        let after = catalog::progress(table, p.index);
        let offsets = p.offsets();
        let mut start = after.next_offset.unwrap_or(offsets.log_start_offset);
        if start < offsets.log_start_offset {
            // Said and counted once per gap (no commit moves past it while the
            // partition gets no new records).
            let mut m = self.tables.partitions.lock().unwrap();
            let warned = &mut m.entry(key).or_insert((0, -1)).1;
            if *warned != start {
                *warned = start;
                tracing::warn!(topic = %p.topic, partition = p.index, from = start,
                    to = offsets.log_start_offset,
                    "records were deleted by retention before they reached the table");
                let lost = (offsets.log_start_offset - start) as u64;
                self.tables.stats.skipped.fetch_add(lost, Ordering::Relaxed);
            }
            start = offsets.log_start_offset;
        }
        let (records, next_offset) =
            (self.read_committed(p, start, offsets.high_watermark, budget)).await?;
        Ok((!records.is_empty()).then_some((p.index, epoch, after, start, next_offset, records)))
    }

    /// Housekeeping of a topic's table, by the leader of its partition 0 (when it is
    /// among `partitions`) once per ten commit intervals, between
    /// [`MIN_HOUSEKEEPING_INTERVAL_MS`] and [`HOUSEKEEPING_INTERVAL_MS`].
    async fn housekeep(
        &self,
        catalog: &catalog::TableCatalog,
        partitions: &[Arc<Partition>],
        ident: &iceberg::TableIdent,
    ) -> anyhow::Result<()> {
        let Some(p) = partitions.iter().find(|p| p.index == 0) else {
            return Ok(());
        };
        let now = now_ms();
        {
            let mut last = self.tables.housekept.lock().unwrap();
            let last = last.entry(p.topic_id).or_insert(0);
            // Every ten commit intervals, but not more often than every ten seconds
            // (it reads every manifest of the table) nor less than every ten minutes.
            let interval = (p.config().table.commit_interval_ms * 10)
                .clamp(MIN_HOUSEKEEPING_INTERVAL_MS, HOUSEKEEPING_INTERVAL_MS);
            if now - *last < interval {
                return Ok(());
            }
            *last = now;
        }
        let config = p.config();
        let rewrites = Some(Rewrites {
            retention_ms: config.table.retention_ms,
            target_file_bytes: config.table.target_file_size_bytes as u64,
        });
        let dead_letters = dead_letter_ident(&p.topic);
        let has_dead_letters = catalog.table_exists(&dead_letters).await?;
        for ident in std::iter::once(ident).chain(has_dead_letters.then_some(&dead_letters)) {
            let storage = &self.tables.storage;
            let done = housekeep(catalog, storage, ident, CLOCK_MARGIN, rewrites).await?;
            self.tables
                .stats
                .expired_rows
                .fetch_add(done.rows_expired, Ordering::Relaxed);
            if done != Default::default() {
                tracing::info!(table = %ident, expired = done.snapshots_expired,
                    rows_expired = done.rows_expired, compacted = done.files_compacted,
                    data_files = done.data_files_deleted,
                    metadata_files = done.metadata_files_deleted, "housekept the table");
            }
        }
        Ok(())
    }

    /// The committed records of `p` from `start` up to the high watermark `hw` (at
    /// most about `budget` bytes of log; no further than the last stable offset), and
    /// the offset after the last batch read.
    async fn read_committed(
        &self,
        p: &Partition,
        start: i64,
        hw: i64,
        budget: usize,
    ) -> anyhow::Result<(Vec<Record>, i64)> {
        let mut records = Vec::new();
        let mut offset = start;
        let mut read = 0usize;
        // Committed records only: up to the last stable offset, without the
        // records of aborted transactions.
        let how = crate::fetch::ReadHow {
            read_committed: true,
            ..Default::default()
        };
        while offset < hw && read < budget {
            let fetched = self.read_one(p, offset, 4 << 20, true, how).await?;
            let mut aborted = AbortedFilter::new(
                (fetched.aborted.iter())
                    .map(|a| (a.producer_id, a.first_offset))
                    .collect(),
            );
            let bytes = fetched.records.into_bytes()?;
            if bytes.is_empty() {
                break;
            }
            read += bytes.len();
            for batch in BatchIter::new(&bytes) {
                let (h, range) = batch?;
                if h.last_offset() >= hw {
                    return Ok((records, offset));
                }
                if aborted.keep(&h, &bytes[range.clone()]) {
                    let rows = decode_records(&bytes.slice(range))?;
                    records.extend(rows.into_iter().filter(|r| r.offset >= start));
                }
                offset = offset.max(h.last_offset() + 1);
            }
        }
        Ok((records, offset))
    }
}
