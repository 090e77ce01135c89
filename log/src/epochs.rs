//! The leader-epoch checkpoint: for each leader epoch seen in this log, the first
//! offset written in it. A follower asks its leader where its last epoch ended and
//! truncates any divergent tail there (Kafka's KIP-101/KIP-279 scheme).
//!
//! File `leader-epoch-checkpoint`: `0` (version), the entry count, then one
//! `{epoch} {start_offset}` line per entry; replaced atomically (write, fsync, rename).

use std::io;
use std::path::{Path, PathBuf};

pub(crate) use crate::layout::EPOCH_CHECKPOINT as CHECKPOINT_FILE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug)]
pub(crate) struct EpochCache {
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    /// Loads the checkpoint; `None` when it is missing or malformed (rebuild from the log).
    pub(crate) fn load(dir: &Path) -> io::Result<Option<Self>> {
        let path = dir.join(CHECKPOINT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(parse(&text).map(|entries| Self { path, entries }))
    }

    pub(crate) fn new(dir: &Path, entries: Vec<EpochEntry>) -> Self {
        Self {
            path: dir.join(CHECKPOINT_FILE),
            entries,
        }
    }

    pub(crate) fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub(crate) fn latest_epoch(&self) -> i32 {
        self.entries.last().map_or(-1, |e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset` (ignored unless it is newer than
    /// every known epoch). Returns whether anything changed.
    pub(crate) fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        match self.entries.last() {
            Some(last) if last.epoch >= epoch => false,
            Some(last) if last.start_offset == start_offset => {
                // The previous epoch wrote nothing; the new one replaces it.
                let last = self.entries.len() - 1;
                self.entries[last].epoch = epoch;
                true
            }
            _ => {
                self.entries.push(EpochEntry {
                    epoch,
                    start_offset,
                });
                true
            }
        }
    }

    /// Forgets epochs starting at or after `end_offset` (the log was truncated there).
    pub(crate) fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// The largest epoch <= `epoch` and the offset where it ended (the next epoch's
    /// start, or `log_end_offset` for the latest); `None` if no such epoch is known.
    pub(crate) fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let i = self.entries.partition_point(|e| e.epoch <= epoch);
        let floor = self.entries.get(i.checked_sub(1)?)?;
        let end = self
            .entries
            .get(i)
            .map_or(log_end_offset, |next| next.start_offset);
        Some((floor.epoch, end))
    }

    /// Writes the checkpoint durably.
    pub(crate) fn persist(&self) -> io::Result<()> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for e in &self.entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn parse(text: &str) -> Option<Vec<EpochEntry>> {
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let count: usize = lines.next()?.parse().ok()?;
    let entries: Vec<EpochEntry> = lines
        .map(|l| {
            let (epoch, offset) = l.split_once(' ')?;
            Some(EpochEntry {
                epoch: epoch.parse().ok()?,
                start_offset: offset.parse().ok()?,
            })
        })
        .collect::<Option<_>>()?;
    let ordered = entries
        .windows(2)
        .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset <= w[1].start_offset);
    (entries.len() == count && ordered).then_some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_truncation_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = EpochCache::new(dir.path(), Vec::new());
        assert_eq!(c.end_offset_for(0, 0), None);
        assert!(c.assign(0, 0));
        assert!(c.assign(2, 10));
        assert!(!c.assign(1, 12), "older epochs are ignored");
        assert!(c.assign(5, 30));
        assert_eq!(c.end_offset_for(0, 40), Some((0, 10)));
        assert_eq!(c.end_offset_for(1, 40), Some((0, 10)));
        assert_eq!(c.end_offset_for(2, 40), Some((2, 30)));
        assert_eq!(c.end_offset_for(9, 40), Some((5, 40)));
        c.persist().unwrap();
        let loaded = EpochCache::load(dir.path()).unwrap().unwrap();
        assert_eq!(loaded.entries(), c.entries());
        assert!(c.truncate_from_end(30));
        assert_eq!(c.latest_epoch(), 2);
        assert!(!c.truncate_from_end(30));
        // An epoch that wrote nothing is replaced by the next.
        assert!(c.assign(6, 30));
        assert!(c.assign(7, 30));
        assert_eq!(
            c.entries().last(),
            Some(&EpochEntry {
                epoch: 7,
                start_offset: 30
            })
        );
        for bad in [
            "",
            "1\n0\n",
            "0\n2\n1 0\n",
            "0\n2\n3 0\n2 5\n",
            "0\n1\nx y\n",
        ] {
            std::fs::write(dir.path().join(CHECKPOINT_FILE), bad).unwrap();
            assert!(EpochCache::load(dir.path()).unwrap().is_none(), "{bad:?}");
        }
    }
}
