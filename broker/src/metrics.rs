//! Prometheus metrics in text format 0.0.4. Partition, tier, group and process
//! figures are read from live state at scrape time; request counters, latency
//! histograms and error counts come from [`crate::stats`]. The server crate serves
//! them over HTTP.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::broker::Broker;

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A per-partition gauge: name, help, and how to read it from a row.
type Gauge<T> = (&'static str, &'static str, fn(&T) -> i64);

fn gauge_families<T>(out: &mut String, gauges: &[Gauge<T>], rows: &[(&str, i32, &T)]) {
    for (name, help, get) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (topic, partition, row) in rows {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{partition}\"}} {}",
                escape(topic),
                get(row)
            );
        }
    }
}

/// The metrics page.
pub async fn render(broker: &Broker) -> String {
    let mut out = String::new();
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let s = &broker.stats.requests;
    let (gets, fetched_remote) = broker.remote_read_stats();
    for (name, help, value) in [
        (
            "shale_produce_requests_total",
            "Produce requests received.",
            load(&s.produce_requests),
        ),
        (
            "shale_produced_bytes_total",
            "Record-batch bytes appended.",
            load(&s.produced_bytes),
        ),
        (
            "shale_producer_duplicate_batches_total",
            "Retried idempotent batches answered with their first offsets, not written again.",
            load(&s.duplicate_batches),
        ),
        (
            "shale_fetch_requests_total",
            "Fetch requests answered.",
            load(&s.fetch_requests),
        ),
        (
            "shale_fetched_bytes_total",
            "Record-batch bytes returned by fetches.",
            load(&s.fetched_bytes),
        ),
        (
            "shale_follower_fetched_bytes_total",
            "Record-batch bytes consumers read from this broker's follower replicas (client.rack).",
            load(&s.follower_fetched_bytes),
        ),
        (
            "shale_fetch_preferred_replica_total",
            "Partitions of fetches this broker led and sent to an in-sync follower in the consumer's rack.",
            load(&s.preferred_replica_redirects),
        ),
        (
            "shale_fetch_zero_copy_bytes_total",
            "Record-batch bytes answered as slices of local segment files, sent to plaintext Kafka connections with sendfile(2).",
            load(&s.zero_copy_fetched_bytes),
        ),
        (
            "shale_fetch_throttled_total",
            "Fetches whose client exceeded its quota ([quotas] consumer_byte_rate) and was throttled.",
            load(&s.throttled_fetches),
        ),
        (
            "shale_produce_message_conversions_total",
            "Records produced in a message format before RecordBatch v2 (Produce v0-2) and converted up.",
            load(&s.produce_message_conversions),
        ),
        (
            "shale_fetch_message_conversions_total",
            "Records converted down to an old message format for Fetch v0-3.",
            load(&s.fetch_message_conversions),
        ),
        (
            "shale_replicated_bytes_total",
            "Record-batch bytes copied from leaders (as a follower).",
            load(&s.replicated_bytes),
        ),
        (
            "shale_remote_get_requests_total",
            "Ranged GETs of remote reads.",
            gets,
        ),
        (
            "shale_remote_fetched_bytes_total",
            "Bytes fetched from the object store by reads.",
            fetched_remote,
        ),
        (
            "shale_cleaner_runs_total",
            "Cleanings of compacted partitions.",
            load(&broker.cleaner_stats().runs),
        ),
        (
            "shale_cleaner_read_bytes_total",
            "Bytes the log cleaner read.",
            load(&broker.cleaner_stats().bytes_read),
        ),
        (
            "shale_cleaner_written_bytes_total",
            "Bytes of cleaned segments the log cleaner wrote.",
            load(&broker.cleaner_stats().bytes_written),
        ),
        (
            "shale_cleaner_removed_records_total",
            "Records compaction removed (superseded, tombstones past delete.retention.ms, keyless).",
            load(&broker.cleaner_stats().records_removed),
        ),
        (
            "shale_remote_compaction_runs_total",
            "Remote compactions of tiered compacted partitions.",
            load(&broker.tier.remote_compactions.runs),
        ),
        (
            "shale_remote_compaction_read_bytes_total",
            "Bytes of remote segments remote compaction read (through the read cache).",
            load(&broker.tier.remote_compactions.bytes_read),
        ),
        (
            "shale_remote_compaction_written_bytes_total",
            "Bytes of compacted remote segments uploaded.",
            load(&broker.tier.remote_compactions.bytes_written),
        ),
        (
            "shale_remote_compaction_removed_records_total",
            "Records remote compaction removed.",
            load(&broker.tier.remote_compactions.records_removed),
        ),
        (
            "shale_remote_compaction_replaced_segments_total",
            "Remote segments replaced by their compaction.",
            load(&broker.tier.remote_compactions.segments_replaced),
        ),
        (
            "shale_remote_compaction_written_segments_total",
            "Compacted remote segments uploaded.",
            load(&broker.tier.remote_compactions.segments_written),
        ),
        (
            "shale_table_rows_total",
            "Records written into topics' Iceberg tables by this broker.",
            load(&broker.tables.stats.rows),
        ),
        (
            "shale_table_written_bytes_total",
            "Bytes of Parquet data files written for topics' Iceberg tables.",
            load(&broker.tables.stats.bytes),
        ),
        (
            "shale_table_commits_total",
            "Commits to topics' Iceberg tables.",
            load(&broker.tables.stats.commits),
        ),
        (
            "shale_table_fenced_commits_total",
            "Commits to topics' Iceberg tables refused because another leader had moved the table on.",
            load(&broker.tables.stats.fenced),
        ),
        (
            "shale_table_skipped_records_total",
            "Records retention deleted before they reached their topic's Iceberg table.",
            load(&broker.tables.stats.skipped),
        ),
        (
            "shale_table_dead_letters_total",
            "Records of value_schema topics that did not fit their table, written to its dead-letter table.",
            load(&broker.tables.stats.dead_letters),
        ),
        (
            "shale_table_expired_rows_total",
            "Rows removed from topics' Iceberg tables by iceberg.retention.ms.",
            load(&broker.tables.stats.expired_rows),
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    // Replication health, as Kafka's LeaderCount / UnderReplicatedPartitions /
    // UnderMinIsrPartitionCount.
    let (mut leading, mut under_replicated, mut under_min_isr, mut hw_held) = (0, 0, 0, 0);
    for p in broker.all_partitions() {
        let role = p.role();
        if role.leader == broker.config.broker_id {
            leading += 1;
            under_replicated += i32::from(role.isr.len() < role.replicas.len());
            under_min_isr += i32::from((role.isr.len() as i64) < p.config().min_insync_replicas);
            hw_held += i32::from(p.hw_held());
        }
    }
    for (name, help, value) in [
        (
            "shale_leader_partitions",
            "Partitions this broker leads.",
            leading,
        ),
        (
            "shale_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set.",
            under_replicated,
        ),
        (
            "shale_under_min_isr_partitions",
            "Partitions led here whose ISR is below min.insync.replicas (acks=all refused).",
            under_min_isr,
        ),
        (
            "shale_hw_held_partitions",
            "Partitions led here whose high watermark is held by the strict min.insync.replicas \
             rule: records above it are neither readable nor uploaded until the ISR recovers.",
            hw_held,
        ),
        (
            "shale_lease_valid",
            "1 while this broker's lease lets it act as leader.",
            i32::from(broker.lease_valid()),
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    let statuses = broker.tiering_status(None).unwrap_or_default();
    let tier_rows: Vec<_> = statuses
        .iter()
        .map(|t| (t.topic.as_str(), t.partition, t))
        .collect();
    let tier_gauges: [Gauge<crate::tiering::TieringStatus>; 9] = [
        (
            "shale_partition_log_start_offset",
            "First offset readable (remote included).",
            |t| t.log_start_offset,
        ),
        (
            "shale_partition_local_log_start_offset",
            "First offset on local disk.",
            |t| t.local_log_start_offset,
        ),
        (
            "shale_partition_remote_log_start_offset",
            "First offset in the object store (-1: none).",
            |t| t.remote_log_start_offset,
        ),
        (
            "shale_partition_highest_uploaded_offset",
            "Last offset in the object store (-1: none).",
            |t| t.highest_uploaded_offset,
        ),
        (
            "shale_partition_upload_lag_segments",
            "Sealed segments not yet uploaded.",
            |t| t.upload_lag_segments as i64,
        ),
        (
            "shale_partition_upload_lag_bytes",
            "Bytes of sealed segments not yet uploaded.",
            |t| t.upload_lag_bytes as i64,
        ),
        (
            "shale_partition_remote_segments",
            "Finished remote segments.",
            |t| t.remote_segments as i64,
        ),
        (
            "shale_partition_remote_bytes",
            "Bytes of finished remote segments.",
            |t| t.remote_bytes as i64,
        ),
        (
            "shale_partition_local_only_age_seconds",
            "Age of the oldest record held only on local disk, not yet in the object store \
             (0: none). Bounded by tiering.max_local_only_ms plus the upload time while the \
             object store is reachable and the high watermark advances.",
            |t| t.local_only_age_ms / 1000,
        ),
    ];
    gauge_families(&mut out, &tier_gauges, &tier_rows);
    cleaner_gauges(&mut out, &statuses);
    let offsets: Vec<_> = broker
        .topics_snapshot()
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .flatten()
                .map(|p| (p.topic.clone(), p.index, p.offsets()))
                .collect::<Vec<_>>()
        })
        .collect();
    let offset_rows: Vec<_> = offsets.iter().map(|(t, p, o)| (&**t, *p, o)).collect();
    let offset_gauges: [Gauge<crate::partition::PartitionOffsets>; 4] = [
        ("shale_partition_high_watermark", "High watermark.", |o| {
            o.high_watermark
        }),
        ("shale_partition_log_end_offset", "Log end offset.", |o| {
            o.log_end_offset
        }),
        (
            "shale_partition_local_bytes",
            "Bytes of local segments.",
            |o| o.size_bytes as i64,
        ),
        ("shale_partition_local_segments", "Local segments.", |o| {
            o.segments as i64
        }),
    ];
    gauge_families(&mut out, &offset_gauges, &offset_rows);
    render_requests(&mut out, &broker.stats.requests);
    render_groups(&mut out, broker).await;
    render_process(&mut out, broker);
    out
}

/// Latency histograms by listener and API, and errors by code.
fn render_requests(out: &mut String, stats: &crate::stats::RequestStats) {
    let name = "shale_request_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time to answer a request, by listener and API.\n# TYPE {name} histogram"
    );
    for ((listener, api), h) in stats.latency.all() {
        let (cumulative, sum) = h.snapshot();
        let labels = format!("listener=\"{listener}\",api=\"{}\"", escape(api));
        for (bound, n) in crate::stats::LATENCY_BUCKETS.iter().zip(&cumulative) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {n}");
        }
        let count = cumulative.last().copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
    let name = "shale_errors_total";
    let _ = writeln!(
        out,
        "# HELP {name} Errors answered, by Kafka error code.\n# TYPE {name} counter"
    );
    for (code, n) in stats.errors.all() {
        let _ = writeln!(out, "{name}{{code=\"{}\"}} {n}", code.as_str_name());
    }
}

/// Lag of each group this broker coordinates, per partition it holds a replica of:
/// its high watermark less the group's committed offset.
async fn render_groups(out: &mut String, broker: &Broker) {
    let name = "shale_group_lag";
    let _ = writeln!(
        out,
        "# HELP {name} Records between a group's committed offset and the high watermark.\n# TYPE {name} gauge"
    );
    for l in broker.group_lags().await {
        let _ = writeln!(
            out,
            "{name}{{group=\"{}\",topic=\"{}\",partition=\"{}\"}} {}",
            escape(&l.group),
            escape(&l.topic),
            l.partition,
            l.lag
        );
    }
}

/// The process: open files and their limit, resident memory, CPU time, and the
/// segment files held open by the file cache.
fn render_process(out: &mut String, broker: &Broker) {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(0);
    // statm: pages; stat: utime and stime in clock ticks (fields 14 and 15).
    let page = rustix::param::page_size() as u64;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page);
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name, which may hold spaces and parentheses.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?) as f64 / ticks)
        })
        .unwrap_or(0.0);
    let files = &broker.registry.shared().files;
    for (name, kind, help, value) in [
        (
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            fds as f64,
        ),
        (
            "process_max_fds",
            "gauge",
            "The open files limit.",
            max_fds as f64,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory.",
            rss as f64,
        ),
        (
            "process_cpu_seconds_total",
            "counter",
            "CPU time, user and system.",
            cpu,
        ),
        (
            "shale_open_segment_files",
            "gauge",
            "Segment files held open by the file cache.",
            files.open_files() as f64,
        ),
        (
            "shale_open_segment_files_limit",
            "gauge",
            "Segment files the file cache may hold open.",
            files.capacity() as f64,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
}

/// The cleaner's standing on compacted partitions: dirty bytes per partition, the
/// largest dirty ratio, and the cleaner's lag (how long the oldest dirty segment's
/// newest record has waited).
fn cleaner_gauges(out: &mut String, statuses: &[crate::tiering::TieringStatus]) {
    let now = crate::clock::now_ms();
    let compacted: Vec<_> = statuses
        .iter()
        .filter_map(|t| Some((t, t.cleaner?)))
        .collect();
    let rows: Vec<_> = compacted
        .iter()
        .map(|(t, c)| (t.topic.as_str(), t.partition, c))
        .collect();
    let gauges: [Gauge<shale_log::Cleanable>; 1] = [(
        "shale_partition_dirty_bytes",
        "Bytes of sealed segments of a compacted partition not cleaned yet.",
        |c| c.dirty_bytes as i64,
    )];
    gauge_families(out, &gauges, &rows);
    let max_ratio = compacted
        .iter()
        .map(|(_, c)| c.dirty_ratio())
        .fold(0.0, f64::max);
    let lag_s = compacted
        .iter()
        .filter(|(_, c)| c.dirty_bytes > 0 && c.oldest_dirty_timestamp >= 0)
        .map(|(_, c)| (now - c.oldest_dirty_timestamp).max(0) as f64 / 1000.0)
        .fold(0.0, f64::max);
    let _ = writeln!(
        out,
        "# HELP shale_cleaner_max_dirty_ratio Largest dirty ratio of a compacted partition.\n\
         # TYPE shale_cleaner_max_dirty_ratio gauge\nshale_cleaner_max_dirty_ratio {max_ratio}\n\
         # HELP shale_cleaner_lag_seconds Age of the newest record of the oldest dirty segment of a compacted partition.\n\
         # TYPE shale_cleaner_lag_seconds gauge\nshale_cleaner_lag_seconds {lag_s}"
    );
}
