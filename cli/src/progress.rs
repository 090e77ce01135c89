//! Progress of a long produce or consume on stderr, when stderr is a terminal:
//! records, MiB, MiB/s and (for a bounded consume) what is left, redrawn in place at
//! most five times a second. Off when stderr is not a terminal, or with
//! `SHALE_NO_PROGRESS` set.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub(crate) struct Progress {
    enabled: bool,
    label: &'static str,
    started: Instant,
    drawn: Option<Instant>,
    records: u64,
    bytes: u64,
    left: Option<u64>,
}

impl Progress {
    pub(crate) fn new(label: &'static str) -> Self {
        Self {
            enabled: std::io::stderr().is_terminal()
                && std::env::var_os("SHALE_NO_PROGRESS").is_none(),
            label,
            started: Instant::now(),
            drawn: None,
            records: 0,
            bytes: 0,
            left: None,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn add(&mut self, records: u64, bytes: u64) {
        self.records += records;
        self.bytes += bytes;
        self.draw(false);
    }

    /// Records still to come (a bounded consume), if known.
    pub(crate) fn set_left(&mut self, left: Option<u64>) {
        self.left = left;
    }

    fn line(&self) -> String {
        let mib = self.bytes as f64 / (1 << 20) as f64;
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let mut s = format!(
            "{}: {} records, {mib:.1} MiB, {:.1} MiB/s",
            self.label,
            self.records,
            mib / secs
        );
        if let Some(left) = self.left {
            s.push_str(&format!(", {left} left"));
        }
        s
    }

    fn draw(&mut self, force: bool) {
        if !self.enabled {
            return;
        }
        let due = self
            .drawn
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(200));
        if force || due {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{}\x1b[K", self.line());
            let _ = err.flush();
            self.drawn = Some(Instant::now());
        }
    }

    /// The last figures, and a newline so later output starts clean.
    pub(crate) fn finish(&mut self) {
        if self.enabled && self.drawn.is_some() {
            self.draw(true);
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_records_size_rate_and_what_is_left() {
        let mut p = Progress::new("consumed");
        p.enabled = false;
        p.add(3, 3 << 20);
        p.set_left(Some(7));
        let line = p.line();
        assert!(line.starts_with("consumed: 3 records, 3.0 MiB, "), "{line}");
        assert!(line.ends_with("MiB/s, 7 left"), "{line}");
    }
}
