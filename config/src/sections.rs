//! The sections of the configuration file with their defaults.

use std::path::PathBuf;

use serde::Deserialize;

/// `[log]`: broker-wide log housekeeping.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// How often retention is checked. Default: 300000 ms.
    pub retention_check_interval_ms: u64,
    /// How often `flush.ms` deadlines are checked. Default: 100 ms.
    pub flush_check_interval_ms: u64,
    /// How often topic metadata is re-read from the metastore. Default: 2000 ms.
    pub metadata_refresh_interval_ms: u64,
    /// How long graceful shutdown waits for in-flight work. Default: 10000 ms.
    pub shutdown_timeout_ms: u64,
    /// Produce is refused with a retriable KAFKA_STORAGE_ERROR while the partition logs
    /// on this broker hold this many bytes or more (e.g. while the object store is down
    /// and nothing can be deleted). Default: 0 (no limit).
    pub local_disk_limit_bytes: u64,
    /// Segment files kept open at once, across all partitions; the least recently used
    /// is closed first (and reopened when needed). Default: 0 = half the open-files
    /// limit (`RLIMIT_NOFILE`, which the broker raises to its hard limit at start).
    pub max_open_segment_files: usize,
    /// Whether compacted topics are cleaned (`log.cleaner.enable`). Default: true.
    pub cleaner_enable: bool,
    /// How often the cleaner looks for partitions to clean (`log.cleaner.backoff.ms`).
    /// Default: 15000 ms.
    pub cleaner_backoff_ms: u64,
    /// Memory of the cleaner's key-hash → offset map, 24 bytes an entry
    /// (`log.cleaner.dedupe.buffer.size`); a cleaning stops where it fills. Default:
    /// 134217728 (128 MiB).
    pub cleaner_dedupe_buffer_size: u64,
    /// The cleaner's reads and writes together stay below this many bytes a second
    /// (`log.cleaner.io.max.bytes.per.second`). Default: 0 = no limit (as Kafka).
    pub cleaner_io_max_bytes_per_second: u64,
}

impl LogSection {
    /// `max_open_segment_files`, or half the process's open-files limit.
    pub fn open_files_limit(&self) -> usize {
        if self.max_open_segment_files > 0 {
            return self.max_open_segment_files;
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1 << 20);
        (limit / 2).clamp(32, 1 << 20) as usize
    }
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            retention_check_interval_ms: 300_000,
            flush_check_interval_ms: 100,
            metadata_refresh_interval_ms: 2_000,
            shutdown_timeout_ms: 10_000,
            local_disk_limit_bytes: 0,
            max_open_segment_files: 0,
            cleaner_enable: true,
            cleaner_backoff_ms: 15_000,
            cleaner_dedupe_buffer_size: 128 << 20,
            cleaner_io_max_bytes_per_second: 0,
        }
    }
}

/// `[cluster]`: membership, leases, controller and replication.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// Shorthand for `[listeners.grpc] advertised`.
    pub advertised_address: Option<String>,
    /// The listener other brokers replicate through (a gRPC one). Default: `grpc`.
    /// Followers connect to it with its security protocol: TLS checked against
    /// `inter_broker_tls_ca` (presenting the listener's own certificate when it
    /// requires client certificates), SASL as `inter_broker_user`.
    pub inter_broker_listener: String,
    /// The user followers authenticate as on a SASL inter-broker listener (a super
    /// user, or one allowed CLUSTER_ACTION). Its SCRAM credential is created at
    /// start when the metastore has none for it.
    pub inter_broker_user: Option<String>,
    /// File holding that user's password (or `SHALE_INTER_BROKER_PASSWORD`).
    pub inter_broker_password_file: Option<PathBuf>,
    /// CA that leaders' certificates are checked against on a TLS inter-broker
    /// listener. Default: the listener's `tls_client_ca`.
    pub inter_broker_tls_ca: Option<PathBuf>,
    /// How long a broker's registration lasts without renewal. The controller moves
    /// leadership away from a broker whose lease expired; the broker itself stops
    /// acknowledging writes after 3/4 of it. Default: 6000 ms.
    pub lease_ms: u64,
    /// How often the lease is renewed. Default: 1000 ms.
    pub heartbeat_interval_ms: u64,
    /// How often the controller (and candidates for it) looks at leases and leaders.
    /// Default: 500 ms.
    pub controller_interval_ms: u64,
    /// A follower that has not caught up with the leader for this long leaves the ISR
    /// (Kafka's `replica.lag.time.max.ms`). Default: 10000 ms.
    pub replica_lag_time_max_ms: u64,
    /// How long a leader holds a replica fetch that finds no new data. Default: 500 ms.
    pub replica_fetch_max_wait_ms: u64,
    /// Replication factor of topics created without one. Default: 1.
    pub default_replication_factor: i32,
    /// Partitions of topics created without a count (Kafka's `num.partitions`).
    /// Default: 1.
    pub num_partitions: i32,
    /// A Kafka client's Metadata request creates the topics it names that do not
    /// exist (Kafka's `auto.create.topics.enable`). Default: true.
    pub auto_create_topics_enable: bool,
    /// Partition replicas one broker may hold; creating more is refused with
    /// INVALID_PARTITIONS. Default: 100000.
    pub max_partitions_per_broker: i32,
    /// The controller moves leaderships back to their preferred replicas (the first
    /// of each partition) when a broker leads fewer than 90 % of its own (Kafka's
    /// `auto.leader.rebalance.enable`). Default: true.
    pub auto_leader_rebalance_enable: bool,
    /// How often leader balance is checked (`leader.imbalance.check.interval.seconds`).
    /// Default: 300000 ms.
    pub leader_imbalance_check_interval_ms: u64,
    /// Continuous balancing: the controller moves replicas (copying only local tails)
    /// until each partition spans as many racks as it can, every live broker's local
    /// disk use is within the band, every broker holds as many replicas as the others,
    /// give or take one, and the same for preferred leaders. Moves off decommissioned
    /// brokers and dead brokers' replacements happen either way. Default: true.
    pub auto_balance_enable: bool,
    /// The disk band: the balancer moves replicas from a broker whose local disk use
    /// (the sizes its partitions' leaders report) is more than this many percent
    /// above the brokers' mean, or to one as far below it (0: no disk goal).
    /// Default: 10.
    pub auto_balance_disk_band_percent: u64,
    /// The band is at least this many bytes either side of the mean. Default:
    /// 1073741824 (1 GiB).
    pub auto_balance_disk_band_min_bytes: u64,
    /// Reassignments in flight at once before the controller starts more (those
    /// started by hand count). Default: 4.
    pub auto_balance_max_moves: usize,
    /// How often the controller plans moves. Default: 10000 ms.
    pub auto_balance_interval_ms: u64,
    /// Replicas on a broker dead this long are re-created on the others, restoring
    /// the replication factor (0: never). Default: 900000 ms (15 minutes).
    pub dead_broker_replace_after_ms: u64,
    /// Bytes per second that the replicas a reassignment adds on this broker copy
    /// from each leader broker, so that a move does not starve produce (Kafka's
    /// `follower.replication.throttled.rate`; 0: unlimited). Default: 104857600
    /// (100 MiB/s).
    pub reassignment_throttle_bytes_per_sec: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            advertised_address: None,
            inter_broker_listener: "grpc".into(),
            inter_broker_user: None,
            inter_broker_password_file: None,
            inter_broker_tls_ca: None,
            lease_ms: 6_000,
            heartbeat_interval_ms: 1_000,
            controller_interval_ms: 500,
            replica_lag_time_max_ms: 10_000,
            replica_fetch_max_wait_ms: 500,
            default_replication_factor: 1,
            num_partitions: 1,
            auto_create_topics_enable: true,
            max_partitions_per_broker: 100_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 300_000,
            auto_balance_enable: true,
            auto_balance_disk_band_percent: 10,
            auto_balance_disk_band_min_bytes: 1 << 30,
            auto_balance_max_moves: 4,
            auto_balance_interval_ms: 10_000,
            dead_broker_replace_after_ms: 900_000,
            reassignment_throttle_bytes_per_sec: 100 << 20,
        }
    }
}

/// `[tiering]`: copying sealed segments to the object store.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TieringSection {
    /// How often each tiered partition is checked for segments to copy. Default: 1000 ms.
    pub upload_interval_ms: u64,
    /// The longest a record of a tiered partition stays on local disk only: a leader
    /// seals its active segment once its first record is this old (or `segment.ms`,
    /// if less), appends or not, so that it is uploaded. Default: 3600000 (1 h).
    pub max_local_only_ms: u64,
    /// Partitions copying at once. Default: 2.
    pub upload_concurrency: usize,
    /// Files above this size go up in parts. Default: 33554432 (32 MiB).
    pub multipart_threshold_bytes: u64,
    /// Part size of multipart uploads. Default: 16777216 (16 MiB).
    pub multipart_part_bytes: usize,
    /// Size of a cached chunk of a remote segment: one ranged GET each. Default:
    /// 8388608 (8 MiB).
    pub chunk_bytes: u64,
    /// Memory tier of the read cache. Default: 268435456 (256 MiB).
    pub cache_memory_bytes: usize,
    /// Disk tier of the read cache. Default: 1073741824 (1 GiB).
    pub cache_disk_bytes: usize,
    /// Directory of the disk tier. Default: `{data_dir}/remote-cache`.
    pub cache_dir: Option<PathBuf>,
    /// The disk tier bypasses the page cache (O_DIRECT), so a replay filling it does
    /// not push the hot tail out of memory or stall the log's writes on dirty-page
    /// write-back. Default: true (buffered where the filesystem refuses it).
    pub cache_direct_io: bool,
    /// Chunks fetched ahead of a remote read. Default: 2.
    pub read_ahead_chunks: u64,
    /// Ranged GETs in flight at once (remote reads only). Default: 16.
    pub max_concurrent_gets: usize,
    /// Worker threads of the runtime remote reads run on (GETs, the read cache, CRC
    /// checks), apart from the one serving produce and fetch. Default: 2.
    pub remote_io_threads: usize,
    /// Nice value of those threads (0 to 19; higher yields the CPU to the rest of the
    /// broker). Default: 10.
    pub remote_io_nice: i32,
    /// How often the leader of a tiered compacted partition compacts its remote
    /// segments (when they changed since). Default: 3600000 (1 h).
    pub remote_compaction_interval_ms: u64,
    /// Partitions compacting their remote segments at once. Default: 1.
    pub remote_compaction_concurrency: usize,
    /// How long the segments a remote compaction replaced stay in the object store,
    /// so reads already in them can finish. Default: 300000 (5 min).
    pub remote_compaction_delete_delay_ms: u64,
    /// How often the cluster's snapshot goes to the object store beside the segments
    /// (`_shale/`: topics, configs, leader epochs, group offsets, each broker's high
    /// watermarks), so that `shale cluster restore` can rebuild the cluster from the
    /// bucket alone; written only when it changed. 0: never. Default: 60000 (1 min).
    pub snapshot_interval_ms: u64,
    /// How often each broker holding replicas of a read-replica topic lists the
    /// topic's prefix in its source bucket for new segments (one LIST a topic).
    /// Default: 10000 (10 s).
    pub read_replica_poll_interval_ms: u64,
}

impl Default for TieringSection {
    fn default() -> Self {
        Self {
            upload_interval_ms: 1_000,
            max_local_only_ms: 3_600_000,
            upload_concurrency: 2,
            multipart_threshold_bytes: 32 << 20,
            multipart_part_bytes: 16 << 20,
            chunk_bytes: 8 << 20,
            cache_memory_bytes: 256 << 20,
            cache_disk_bytes: 1 << 30,
            cache_dir: None,
            cache_direct_io: true,
            read_ahead_chunks: 2,
            max_concurrent_gets: 16,
            remote_io_threads: 2,
            remote_io_nice: 10,
            remote_compaction_interval_ms: 3_600_000,
            remote_compaction_concurrency: 1,
            remote_compaction_delete_delay_ms: 300_000,
            snapshot_interval_ms: 60_000,
            read_replica_poll_interval_ms: 10_000,
        }
    }
}

/// `[quotas]`: byte-rate limits per client (Kafka's client quotas).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct QuotasSection {
    /// Bytes per second of fetch responses one client may take from this broker
    /// (Kafka's `consumer_byte_rate`): a client id on the Kafka listener, a client id
    /// sent as `x-client-id`, else a connection, on gRPC. A client above it is
    /// throttled (see docs/configuration.md). Default: 0, no limit.
    pub consumer_byte_rate: u64,
}
