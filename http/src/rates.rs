//! Produce and fetch rates over the last minutes, for the console's overview chart:
//! the broker's counters sampled every few seconds into a ring.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use shale_service::Service;

/// Seconds between samples.
pub(crate) const SAMPLE_SECS: u64 = 5;
/// Samples kept: ten minutes.
const KEPT: usize = 120;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// End of the interval, ms since the Unix epoch.
    pub time_ms: i64,
    pub produce_bytes_per_sec: f64,
    pub fetch_bytes_per_sec: f64,
    pub produce_requests_per_sec: f64,
    pub fetch_requests_per_sec: f64,
}

#[derive(Default)]
pub struct Rates {
    samples: Mutex<VecDeque<Sample>>,
}

impl Rates {
    pub fn samples(&self) -> Vec<Sample> {
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        s.iter().copied().collect()
    }

    /// Samples the broker's counters until it stops.
    pub async fn run(&self, service: Service) {
        let read = || service.traffic();
        let mut last = read();
        let mut tick = tokio::time::interval(Duration::from_secs(SAMPLE_SECS));
        tick.tick().await;
        let mut stopping = std::pin::pin!(service.stopping());
        loop {
            tokio::select! {
                _ = &mut stopping => return,
                _ = tick.tick() => {}
            }
            let now = read();
            let rate = |now: u64, last: u64| now.saturating_sub(last) as f64 / SAMPLE_SECS as f64;
            let sample = Sample {
                time_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64),
                produce_bytes_per_sec: rate(now.produced_bytes, last.produced_bytes),
                fetch_bytes_per_sec: rate(now.fetched_bytes, last.fetched_bytes),
                produce_requests_per_sec: rate(now.produce_requests, last.produce_requests),
                fetch_requests_per_sec: rate(now.fetch_requests, last.fetch_requests),
            };
            last = now;
            let mut s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            if s.len() == KEPT {
                s.pop_front();
            }
            s.push_back(sample);
        }
    }
}
