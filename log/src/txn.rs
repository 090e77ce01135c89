//! Transactions in one partition's log: which transactions are open (from the producer
//! state), where the last stable offset stands, and the index of aborted transactions
//! that a `read_committed` fetch returns so that clients drop their records.
//!
//! The aborted index is one file per partition, `aborted-transactions`, of fixed-size
//! entries ordered by marker offset (Kafka's `.txnindex` entry: version i16 0, producer
//! id i64, first offset i64, last offset i64 (the abort marker), last stable offset
//! i64). An entry is appended when an abort marker is written; the file is fsynced
//! before every producer snapshot, so the entries below a snapshot's offset are durable
//! and those above it are rebuilt from the batches when the log opens. Tiering copies a
//! segment's share of it (entries whose marker the segment holds) to the object store.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub const ABORTED_INDEX: &str = "aborted-transactions";
const ENTRY: usize = 34;

/// One aborted transaction of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// The transaction's first offset in this partition.
    pub first_offset: i64,
    /// Its abort marker's offset.
    pub last_offset: i64,
    /// The last stable offset once it ended: every transaction that ends later starts
    /// at or above it.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&0i16.to_be_bytes());
        for v in [
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let v = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        (b.len() == ENTRY && b[..2] == [0, 0]).then(|| Self {
            producer_id: v(2),
            first_offset: v(10),
            last_offset: v(18),
            last_stable_offset: v(26),
        })
    }
}

/// A transaction that ended in this partition (its marker was just recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub aborted: bool,
}

/// The partition's aborted transactions, in memory and in their file.
pub(crate) struct AbortedIndex {
    path: PathBuf,
    /// Ordered by `last_offset`.
    entries: Vec<AbortedTxn>,
    unsynced: bool,
    /// An append failed: the file is written whole at the next sync.
    dirty: bool,
}

impl AbortedIndex {
    /// Reads the index (a torn last entry, from a crash during its append, is dropped).
    pub(crate) fn load(dir: &Path) -> io::Result<Self> {
        let path = dir.join(ABORTED_INDEX);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut entries: Vec<AbortedTxn> = Vec::new();
        for chunk in bytes.chunks_exact(ENTRY) {
            match AbortedTxn::decode(chunk) {
                Some(e) if entries.last().is_none_or(|l| l.last_offset < e.last_offset) => {
                    entries.push(e)
                }
                _ => break,
            }
        }
        let torn = entries.len() * ENTRY != bytes.len();
        let mut index = Self {
            path,
            entries,
            unsynced: false,
            dirty: false,
        };
        if torn {
            tracing::warn!(path = %index.path.display(), "aborted-transaction index has a torn or bad tail: cut");
            index.rewrite()?;
        }
        Ok(index)
    }

    /// Adds an entry in memory and appends it to the file; if the append fails, the
    /// next [`AbortedIndex::sync`] writes the whole file (and fails in turn if it
    /// cannot, which stops the snapshot that would rely on it).
    pub(crate) fn push(&mut self, e: AbortedTxn) {
        if self
            .entries
            .last()
            .is_some_and(|l| l.last_offset >= e.last_offset)
        {
            // Recorded already (a replay over entries the file kept).
            return;
        }
        let mut buf = Vec::with_capacity(ENTRY);
        e.encode(&mut buf);
        self.entries.push(e);
        self.unsynced = true;
        if self.dirty {
            return;
        }
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(&buf));
        if let Err(error) = appended {
            tracing::error!(path = %self.path.display(), %error,
                "cannot append to the aborted-transaction index: written whole at the next sync");
            self.dirty = true;
        }
    }

    pub(crate) fn sync(&mut self) -> io::Result<()> {
        if self.dirty {
            return self.rewrite();
        }
        if self.unsynced {
            File::open(&self.path)?.sync_all()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Drops the entries whose marker is at or above `offset` (a truncated log, or
    /// entries a replay from a snapshot at `offset` writes again).
    pub(crate) fn truncate_from(&mut self, offset: i64) -> io::Result<()> {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.rewrite()?;
        }
        Ok(())
    }

    /// Drops the entries whose marker is below `offset` (the log starts there now).
    pub(crate) fn forget_below(&mut self, offset: i64) -> io::Result<()> {
        let drop = self.entries.partition_point(|e| e.last_offset < offset);
        if drop > 0 {
            self.entries.drain(..drop);
            self.rewrite()?;
        }
        Ok(())
    }

    /// Drops the entries of the abort markers at `markers` (a cleaning removed them,
    /// and their transactions' records before); the file is rewritten first.
    pub(crate) fn forget_markers(&mut self, markers: &[i64]) -> io::Result<()> {
        let markers: std::collections::HashSet<i64> = markers.iter().copied().collect();
        let kept: Vec<AbortedTxn> = (self.entries.iter())
            .filter(|e| !markers.contains(&e.last_offset))
            .copied()
            .collect();
        if kept.len() == self.entries.len() {
            return Ok(());
        }
        let before = std::mem::replace(&mut self.entries, kept);
        self.rewrite().inspect_err(|_| {
            // The file may hold either list now: the next sync writes it whole.
            self.entries = before;
            self.dirty = true;
        })
    }

    /// The aborted transactions with records in `[from, upper)`: those whose marker
    /// is at or after `from` and that start before `upper`.
    pub(crate) fn between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let start = self.entries.partition_point(|e| e.last_offset < from);
        let mut out = Vec::new();
        for e in &self.entries[start..] {
            if e.first_offset < upper {
                out.push(*e);
            }
            if e.last_stable_offset >= upper {
                // Every later entry starts at or after this one's stable offset.
                break;
            }
        }
        out
    }

    /// The entries whose marker lies in `[base, end]` (one segment's share).
    pub(crate) fn markers_in(&self, base: i64, end: i64) -> Vec<AbortedTxn> {
        let start = self.entries.partition_point(|e| e.last_offset < base);
        self.entries[start..]
            .iter()
            .take_while(|e| e.last_offset <= end)
            .copied()
            .collect()
    }

    fn rewrite(&mut self) -> io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut buf = Vec::with_capacity(self.entries.len() * ENTRY);
        for e in &self.entries {
            e.encode(&mut buf);
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.unsynced = false;
        self.dirty = false;
        Ok(())
    }
}

impl crate::PartitionLog {
    /// The last stable offset under `high_watermark`: below the first open
    /// transaction and below every transaction whose marker is not under the high
    /// watermark yet.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        let open = self.producers.first_open_txn_offset();
        let ended = (self.unstable_ended.iter())
            .find(|(_, marker)| *marker >= high_watermark)
            .map(|(first, _)| *first);
        [open, ended]
            .into_iter()
            .flatten()
            .fold(high_watermark, i64::min)
    }

    /// Forgets the ended transactions whose markers are under `high_watermark` (they
    /// are stable now).
    pub fn settle_transactions(&mut self, high_watermark: i64) {
        if !self.unstable_ended.is_empty() {
            self.unstable_ended
                .retain(|(_, marker)| *marker >= high_watermark);
        }
    }

    /// The aborted transactions with records in `[from, upper)` (see
    /// [`AbortedIndex::between`]).
    pub fn aborted_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.aborted.between(from, upper)
    }

    /// The aborted transactions whose markers lie in `[base, last]`: what a copy of
    /// that segment to the object store carries.
    pub fn aborted_markers_in(&self, base: i64, last: i64) -> Vec<AbortedTxn> {
        self.aborted.markers_in(base, last)
    }

    /// The producer's open transaction here: its first offset, and the producer's
    /// epoch.
    pub fn open_txn(&self, producer_id: i64) -> Option<(i64, i16)> {
        self.producers.open_txn(producer_id)
    }

    /// The coordinator epoch of the producer's last marker here (-1: none).
    pub fn last_marker_epoch(&self, producer_id: i64) -> i32 {
        self.producers.last_marker_epoch(producer_id)
    }

    /// The producers this partition knows (DescribeProducers).
    pub fn active_producers(&self) -> Vec<crate::producers::ActiveProducer> {
        self.producers.active()
    }

    /// The transactions open in this partition: (producer id, epoch, first offset,
    /// last timestamp).
    pub fn open_transactions(&self) -> Vec<(i64, i16, i64, i64)> {
        self.producers.open_txns()
    }

    /// Drops the aborted-index entries below the log start (segments deleted).
    pub(crate) fn forget_aborted_below_start(&mut self) -> io::Result<()> {
        let start = self.log_start_offset();
        self.aborted.forget_below(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: first,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_persist_query_and_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = AbortedIndex::load(dir.path()).unwrap();
        // Two interleaved transactions (0..9 and 3..5), then one at 20..25.
        ix.push(txn(3, 5, 0));
        ix.push(txn(0, 9, 10));
        ix.push(txn(20, 25, 26));
        ix.push(txn(20, 25, 26)); // a replay's repeat
        ix.sync().unwrap();
        assert_eq!(ix.between(0, 4), [txn(3, 5, 0), txn(0, 9, 10)]);
        assert_eq!(ix.between(6, 30), [txn(0, 9, 10), txn(20, 25, 26)]);
        assert_eq!(ix.between(6, 20), [txn(0, 9, 10)]);
        assert_eq!(ix.between(6, 21), [txn(0, 9, 10), txn(20, 25, 26)]);
        assert_eq!(ix.between(11, 30), [txn(20, 25, 26)]);
        assert!(ix.between(26, 40).is_empty());
        assert_eq!(ix.markers_in(5, 24), [txn(3, 5, 0), txn(0, 9, 10)]);
        let again = AbortedIndex::load(dir.path()).unwrap();
        assert_eq!(again.entries, ix.entries);
        ix.truncate_from(9).unwrap();
        ix.forget_below(4).unwrap();
        assert_eq!(
            AbortedIndex::load(dir.path()).unwrap().entries,
            [txn(3, 5, 0)]
        );
        // A torn append is cut on load.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(ABORTED_INDEX))
            .unwrap();
        f.write_all(&[0, 0, 1, 2]).unwrap();
        let torn = AbortedIndex::load(dir.path()).unwrap();
        assert_eq!(torn.entries, [txn(3, 5, 0)]);
        assert_eq!(
            std::fs::metadata(dir.path().join(ABORTED_INDEX))
                .unwrap()
                .len(),
            34
        );
    }
}
