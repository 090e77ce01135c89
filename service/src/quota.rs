//! Fetch byte-rate quotas, as Kafka's `consumer_byte_rate`: each client id may take at
//! most so many bytes per second of fetch responses from this broker. The rate is
//! measured over a rolling window of one-second samples; a client above its quota is
//! throttled for as long as it takes the window's average to come back to the quota
//! (Kafka's formula), at most the window's length. What the client sees depends on
//! the front end: Kafka Fetch v8+ gets `throttle_time_ms` at once and the connection
//! is not read from for that long (KIP-219), older versions and gRPC get the answer
//! that much later.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Samples in the window, one second each (Kafka's `quota.window.num` = 11).
const SAMPLES: usize = 11;
const SAMPLE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Meter {
    /// Bytes per sample, oldest first; the last is the current second.
    bytes: [u64; SAMPLES],
    /// When the current sample began.
    current_start: Option<Instant>,
    /// When the first sample began (the window is shorter until SAMPLES have passed).
    first_start: Option<Instant>,
}

impl Meter {
    fn roll(&mut self, now: Instant) {
        let Some(start) = self.current_start else {
            self.current_start = Some(now);
            self.first_start = Some(now);
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        let steps = (elapsed.as_millis() / SAMPLE.as_millis()) as usize;
        if steps == 0 {
            return;
        }
        let steps = steps.min(SAMPLES);
        self.bytes.rotate_left(steps);
        for b in &mut self.bytes[SAMPLES - steps..] {
            *b = 0;
        }
        self.current_start =
            Some(start + SAMPLE * (elapsed.as_millis() / SAMPLE.as_millis()) as u32);
    }

    /// Records `bytes` and returns how long to throttle for a quota of `limit` bytes/s.
    fn record(&mut self, now: Instant, bytes: u64, limit: u64) -> Duration {
        self.roll(now);
        self.bytes[SAMPLES - 1] += bytes;
        let first = self.first_start.unwrap_or(now);
        // The window spans the full samples plus the current one's elapsed part.
        let window = now
            .saturating_duration_since(first)
            .min(SAMPLE * SAMPLES as u32)
            .max(SAMPLE);
        let total: u64 = self.bytes.iter().sum();
        let rate = total as f64 / window.as_secs_f64();
        if rate <= limit as f64 {
            return Duration::ZERO;
        }
        let throttle = (rate - limit as f64) / limit as f64 * window.as_secs_f64();
        Duration::from_secs_f64(throttle).min(SAMPLE * SAMPLES as u32)
    }
}

/// Fetch quotas of every client id seen by this broker.
pub(crate) struct FetchQuotas {
    /// Bytes per second per client id; 0: no quota.
    limit: u64,
    meters: Mutex<HashMap<String, Meter>>,
}

impl FetchQuotas {
    pub(crate) fn new(consumer_byte_rate: u64) -> Self {
        Self {
            limit: consumer_byte_rate,
            meters: Mutex::new(HashMap::new()),
        }
    }

    /// Records a fetch response of `bytes` to `client_id` and returns how long the
    /// client is to be throttled (zero when it is within its quota, or there is none).
    pub(crate) fn record(&self, client_id: &str, bytes: u64) -> Duration {
        if self.limit == 0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut meters = self.meters.lock().unwrap_or_else(|e| e.into_inner());
        // Forget clients idle for a whole window (bounded memory under many ids).
        if meters.len() > 10_000 {
            meters.retain(|_, m| {
                m.current_start
                    .is_some_and(|s| now.saturating_duration_since(s) < SAMPLE * SAMPLES as u32)
            });
        }
        meters
            .entry(client_id.to_string())
            .or_default()
            .record(now, bytes, self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_quota_nothing_is_throttled() {
        let q = FetchQuotas::new(1_000_000);
        assert_eq!(q.record("a", 500_000), Duration::ZERO);
        assert_eq!(
            FetchQuotas::new(0).record("a", u64::MAX / 2),
            Duration::ZERO
        );
    }

    #[test]
    fn a_client_over_its_quota_waits_until_its_average_is_back() {
        let t0 = Instant::now();
        let mut m = Meter::default();
        // 3 MB in the first second against 1 MB/s: 2 s of throttle.
        let d = m.record(t0, 3_000_000, 1_000_000);
        assert!((d.as_secs_f64() - 2.0).abs() < 0.01, "{d:?}");
        // After those 2 s the window (3 s) averages 1 MB/s: no more throttle.
        let d = m.record(t0 + Duration::from_secs(3), 0, 1_000_000);
        assert_eq!(d, Duration::ZERO);
        // Never more than the window.
        let d = m.record(t0 + Duration::from_secs(3), 1 << 40, 1_000_000);
        assert_eq!(d, SAMPLE * SAMPLES as u32);
    }

    #[test]
    fn clients_are_measured_apart() {
        let q = FetchQuotas::new(1_000);
        assert!(q.record("greedy", 100_000) > Duration::ZERO);
        assert_eq!(q.record("modest", 500), Duration::ZERO);
    }
}
