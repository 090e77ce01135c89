//! The model's local log, kept as `shale_log` keeps its batches and epochs, and how
//! the broker's rules see the model's remote log against it.

use super::Small;
use crate::rules::{RemoteRange, remote_divergence, takeover_start};

/// A local log: entries (leader epoch, value) from `start`, and the epoch cache (each
/// epoch's start offset), kept as `shale_log` keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Log {
    pub(super) start: i64,
    pub(super) entries: Small<(i32, u8)>,
    pub(super) epochs: Small<(i32, i64)>,
}

impl Log {
    pub(super) fn leo(&self) -> i64 {
        self.start + self.entries.len() as i64
    }
    pub(super) fn at(&self, offset: i64) -> Option<(i32, u8)> {
        (offset >= self.start)
            .then(|| self.entries.get((offset - self.start) as usize).copied())
            .flatten()
    }
    pub(super) fn latest_epoch(&self) -> i32 {
        self.epochs.last().map_or(-1, |e| e.0)
    }
    pub(super) fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        let i = self.epochs.partition_point(|e| e.0 <= epoch);
        let floor = self.epochs.get(i.checked_sub(1)?)?;
        let end = self.epochs.get(i).map_or(self.leo(), |next| next.1);
        Some((floor.0, end))
    }
    pub(super) fn assign(&mut self, epoch: i32, start: i64) {
        match self.epochs.last_mut() {
            Some(last) if last.0 >= epoch => {}
            Some(last) if last.1 == start => last.0 = epoch,
            _ => self.epochs.push((epoch, start)),
        }
    }
    pub(super) fn start_epoch(&mut self, epoch: i32) {
        if !(self.epochs.is_empty() && self.leo() == self.start) {
            self.assign(epoch, self.leo());
        }
    }
    pub(super) fn append(&mut self, epoch: i32, value: u8) {
        self.assign(epoch, self.leo());
        self.entries.push((epoch, value));
    }
    pub(super) fn truncate_from_end(&mut self, end: i64) {
        let keep = self.epochs.partition_point(|e| e.1 < end);
        self.epochs.truncate(keep);
    }
    pub(super) fn truncate_to(&mut self, offset: i64) {
        if offset >= self.leo() {
            self.truncate_from_end(offset);
        } else if offset <= self.start {
            self.reset_to(offset);
        } else {
            self.entries.truncate((offset - self.start) as usize);
            self.truncate_from_end(offset);
        }
    }
    pub(super) fn reset_to(&mut self, offset: i64) {
        self.start = offset;
        self.entries.clear();
        self.epochs.clear();
    }
}

/// Where a replica with `log` about to lead restarts its log to take the model's
/// remote log over, as the broker decides it.
pub(super) fn takeover_start_of(remote: &[(i32, u8)], log: &Log) -> Option<i64> {
    with_remote_range(remote, |segments, end| {
        takeover_start(segments, end, &log.epochs, log.leo())
    })
}

/// Where the model's remote log stops matching `log`, as the broker decides it.
pub(super) fn remote_divergence_of(remote: &[(i32, u8)], log: &Log) -> Option<i64> {
    with_remote_range(remote, |segments, end| {
        remote_divergence(segments, end, &log.epochs, log.leo())
    })
}

/// The model's remote log (each offset's epoch and value) as one remote segment.
fn with_remote_range<T>(remote: &[(i32, u8)], f: impl FnOnce(&[RemoteRange<'_>], i64) -> T) -> T {
    let mut epochs: Vec<(i32, i64)> = Vec::new();
    for (o, &(epoch, _)) in remote.iter().enumerate() {
        if epochs.last().is_none_or(|e| e.0 != epoch) {
            epochs.push((epoch, o as i64));
        }
    }
    let end = remote.len() as i64 - 1;
    let segment = RemoteRange {
        base: 0,
        end,
        epochs: &epochs,
    };
    let segments = if remote.is_empty() {
        &[][..]
    } else {
        std::slice::from_ref(&segment)
    };
    f(segments, end)
}
