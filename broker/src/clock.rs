//! Wall-clock time, for what is recorded (append times, commit times, retention ages).
//! Leases and timeouts use monotonic `Instant`s, or the metastore's clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
