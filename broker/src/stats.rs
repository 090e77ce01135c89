//! Counters the request paths and background passes bump, read by the metrics page:
//! request and byte counts, latency histograms per listener and API, errors by Kafka
//! error code, the log cleaner's work, and the bytes of the local logs. A leaf: it
//! knows nothing of how it is served.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use shale_records::ErrorCode;

/// Everything the broker counts.
#[derive(Debug)]
pub struct Stats {
    pub requests: RequestStats,
    pub cleaner: CleanerStats,
    /// Bytes of all local partition logs: recomputed every flush check, raised by each
    /// append in between (for `log.local_disk_limit_bytes`).
    pub local_log_bytes: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            requests: RequestStats::default(),
            cleaner: CleanerStats {
                last_pass_ms: AtomicI64::new(-1),
                ..Default::default()
            },
            local_log_bytes: AtomicU64::new(0),
        }
    }
}

/// What the cleaner did since the broker started.
#[derive(Debug, Default)]
pub struct CleanerStats {
    pub runs: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub records_removed: AtomicU64,
    pub segments_replaced: AtomicU64,
    /// Wall-clock ms of the last pass's end (-1: none yet).
    pub last_pass_ms: AtomicI64,
}

impl CleanerStats {
    pub fn add(&self, s: &shale_log::CleanStats) {
        let add = |c: &AtomicU64, n: u64| c.fetch_add(n, Ordering::Relaxed);
        add(&self.runs, 1);
        add(&self.bytes_read, s.bytes_read);
        add(&self.bytes_written, s.bytes_written);
        add(&self.records_removed, s.records_removed);
        add(&self.segments_replaced, s.segments_replaced as u64);
    }
}

/// Counters of the data path.
#[derive(Debug, Default)]
pub struct RequestStats {
    pub produce_requests: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub fetch_requests: AtomicU64,
    pub fetched_bytes: AtomicU64,
    /// Of those, bytes answered as slices of segment files, which a plaintext Kafka
    /// connection sends with `sendfile(2)` without copying them.
    pub zero_copy_fetched_bytes: AtomicU64,
    /// Record-batch bytes consumers read from this broker's follower replicas
    /// (KIP-392).
    pub follower_fetched_bytes: AtomicU64,
    /// Partitions of fetches this broker led and sent to a follower in the
    /// consumer's rack (KIP-392's preferred read replica).
    pub preferred_replica_redirects: AtomicU64,
    /// Fetches answered with a throttle (the client exceeded its fetch quota).
    pub throttled_fetches: AtomicU64,
    /// Records converted from the message formats before RecordBatch v2 (Produce
    /// v0–2), and to them (Fetch v0–3).
    pub produce_message_conversions: AtomicU64,
    pub fetch_message_conversions: AtomicU64,
    /// Batch bytes this broker copied from leaders as a follower.
    pub replicated_bytes: AtomicU64,
    /// Idempotent batches that repeated one already written (answered with its offsets).
    pub duplicate_batches: AtomicU64,
    /// Request latency by listener and API.
    pub latency: Latencies,
    /// Errors answered, by code.
    pub errors: ErrorCounts,
}

impl RequestStats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Upper bounds of the latency buckets, in seconds (Prometheus `le`).
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram: counts per bucket (not cumulative), sum and count.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket (the last is +Inf, the total count), and the sum
    /// in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect();
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (cumulative, sum)
    }
}

/// Latency histograms by listener and API.
#[derive(Debug, Default)]
pub struct Latencies {
    by_listener: RwLock<BTreeMap<String, BTreeMap<&'static str, Arc<Histogram>>>>,
}

impl Latencies {
    pub fn observe(&self, listener: &str, api: &'static str, d: Duration) {
        let found = self
            .by_listener
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(listener)
            .and_then(|apis| apis.get(api))
            .cloned();
        let h = match found {
            Some(h) => h,
            None => self
                .by_listener
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .entry(listener.to_string())
                .or_default()
                .entry(api)
                .or_default()
                .clone(),
        };
        h.observe(d);
    }

    pub fn all(&self) -> Vec<((String, &'static str), Arc<Histogram>)> {
        let by_listener = self.by_listener.read().unwrap_or_else(|e| e.into_inner());
        by_listener
            .iter()
            .flat_map(|(listener, apis)| {
                apis.iter()
                    .map(|(api, h)| ((listener.clone(), *api), h.clone()))
            })
            .collect()
    }
}

/// Errors answered, by Kafka error code (codes -1..=126).
#[derive(Debug)]
pub struct ErrorCounts {
    by_code: [AtomicU64; 128],
}

impl Default for ErrorCounts {
    fn default() -> Self {
        Self {
            by_code: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl ErrorCounts {
    pub fn count(&self, code: ErrorCode) {
        let i = (code as i32 + 1).clamp(0, 127) as usize;
        self.by_code[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Codes answered at least once, with their counts.
    pub fn all(&self) -> Vec<(ErrorCode, u64)> {
        self.by_code
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let n = n.load(Ordering::Relaxed);
                let code = ErrorCode::try_from(i as i32 - 1).ok()?;
                (n > 0).then_some((code, n))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_count_into_cumulative_buckets() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(20));
        let (cumulative, sum) = h.snapshot();
        assert_eq!(cumulative[0], 1);
        assert_eq!(cumulative[3], 2);
        assert_eq!(*cumulative.last().unwrap(), 3);
        assert!((sum - 20.0033).abs() < 1e-6);
        let e = ErrorCounts::default();
        e.count(ErrorCode::NotLeaderOrFollower);
        e.count(ErrorCode::NotLeaderOrFollower);
        e.count(ErrorCode::UnknownServerError);
        assert_eq!(
            e.all(),
            vec![
                (ErrorCode::UnknownServerError, 1),
                (ErrorCode::NotLeaderOrFollower, 2)
            ]
        );
    }
}
