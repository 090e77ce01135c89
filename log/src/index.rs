//! Sparse index files of a segment: `.index` (relative offset u32 → file position u32)
//! and `.timeindex` (max timestamp i64 → relative offset u32), big-endian fixed-size
//! entries as in Kafka. Both are kept in memory (8 or 12 bytes per `index.interval.bytes`
//! of log, so a 1 GiB segment costs 2 MiB) and appended to their file as they grow.
//!
//! # Crash consistency
//! Index files are derived data. They are fsynced when the segment rolls; the active
//! segment's indexes are rebuilt from its log on every start, and a sealed segment's
//! index that fails [`IndexFile::load`]'s checks is rebuilt from its log too.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// One fixed-size entry.
pub(crate) trait IndexEntry: Copy + std::fmt::Debug {
    const SIZE: usize;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(b: &[u8]) -> Self;
    /// Whether `next` may follow `self` in a well-formed file.
    fn may_precede(&self, next: &Self) -> bool;
}

/// Offset index entry: the batch starting at file position `position` has base offset
/// `base_offset + relative_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

impl IndexEntry for OffsetEntry {
    const SIZE: usize = 8;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        Self {
            relative_offset: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
    fn may_precede(&self, next: &Self) -> bool {
        self.relative_offset < next.relative_offset && self.position < next.position
    }
}

/// Time index entry: every batch before the one with base offset
/// `base_offset + relative_offset`, and that batch itself, has timestamps <= `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

impl IndexEntry for TimeEntry {
    const SIZE: usize = 12;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[..8]);
        Self {
            timestamp: i64::from_be_bytes(ts),
            relative_offset: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        }
    }
    fn may_precede(&self, next: &Self) -> bool {
        self.timestamp <= next.timestamp && self.relative_offset <= next.relative_offset
    }
}

/// An index file and its entries in memory. It holds no file descriptor: entries are
/// appended to the file (opened for that) at flush, and fsynced at sync.
pub(crate) struct IndexFile<E> {
    path: PathBuf,
    entries: Vec<E>,
    /// Encoded entries not yet written.
    pending: Vec<u8>,
    /// Entries were written since the last fsync.
    unsynced: bool,
    _entry: PhantomData<E>,
}

impl<E: IndexEntry> IndexFile<E> {
    /// Creates (or truncates) an empty index file.
    pub(crate) fn create(path: &Path) -> io::Result<Self> {
        File::create(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            entries: Vec::new(),
            pending: Vec::new(),
            unsynced: true,
            _entry: PhantomData,
        })
    }

    /// Loads an existing index. `Ok(None)` when the file is missing or malformed
    /// (torn size, entries out of order, or `valid` rejects an entry): the caller rebuilds.
    pub(crate) fn load(path: &Path, valid: impl Fn(&E) -> bool) -> io::Result<Option<Self>> {
        let raw = match std::fs::read(path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if raw.len() % E::SIZE != 0 {
            return Ok(None);
        }
        let entries: Vec<E> = raw.chunks_exact(E::SIZE).map(E::decode).collect();
        let ordered = entries.windows(2).all(|w| w[0].may_precede(&w[1]));
        if !ordered || !entries.iter().all(valid) {
            return Ok(None);
        }
        Ok(Some(Self {
            path: path.to_path_buf(),
            entries,
            pending: Vec::new(),
            unsynced: false,
            _entry: PhantomData,
        }))
    }

    /// Adds an entry in memory; [`IndexFile::flush`] writes it out.
    pub(crate) fn push(&mut self, entry: E) {
        if let Some(last) = self.entries.last() {
            debug_assert!(last.may_precede(&entry), "{last:?} then {entry:?}");
        }
        entry.encode(&mut self.pending);
        self.entries.push(entry);
    }

    /// Writes entries pushed since the last flush (to the page cache; `sync` makes them durable).
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            OpenOptions::new()
                .append(true)
                .open(&self.path)?
                .write_all(&self.pending)?;
            self.pending.clear();
            self.unsynced = true;
        }
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[E] {
        &self.entries
    }

    pub(crate) fn first(&self) -> Option<&E> {
        self.entries.first()
    }

    pub(crate) fn last(&self) -> Option<&E> {
        self.entries.last()
    }

    /// Fsyncs what [`IndexFile::flush`] wrote.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        if self.unsynced {
            File::open(&self.path)?.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// The last entry for which `is_at_or_before` holds, given entries sorted so that it
    /// holds for a prefix.
    pub(crate) fn floor(&self, is_at_or_before: impl Fn(&E) -> bool) -> Option<E> {
        let n = self.entries.partition_point(is_at_or_before);
        n.checked_sub(1).map(|i| self.entries[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_load_and_floor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.index");
        let mut idx = IndexFile::<OffsetEntry>::create(&path).unwrap();
        for i in 0..10u32 {
            idx.push(OffsetEntry {
                relative_offset: i * 10,
                position: i * 4096,
            });
        }
        idx.flush().unwrap();
        let loaded = IndexFile::<OffsetEntry>::load(&path, |_| true)
            .unwrap()
            .unwrap();
        assert_eq!(loaded.entries(), idx.entries());
        assert_eq!(
            loaded.floor(|e| e.relative_offset <= 35).unwrap().position,
            3 * 4096
        );
        assert!(loaded.floor(|_| false).is_none());
    }

    #[test]
    fn torn_or_disordered_file_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.timeindex");
        std::fs::write(&path, [0u8; 13]).unwrap();
        assert!(
            IndexFile::<TimeEntry>::load(&path, |_| true)
                .unwrap()
                .is_none()
        );
        let mut raw = Vec::new();
        TimeEntry {
            timestamp: 5,
            relative_offset: 1,
        }
        .encode(&mut raw);
        TimeEntry {
            timestamp: 4,
            relative_offset: 2,
        }
        .encode(&mut raw);
        std::fs::write(&path, &raw).unwrap();
        assert!(
            IndexFile::<TimeEntry>::load(&path, |_| true)
                .unwrap()
                .is_none()
        );
        assert!(
            IndexFile::<TimeEntry>::load(&dir.path().join("missing"), |_| true)
                .unwrap()
                .is_none()
        );
    }

    proptest::proptest! {
        // Whatever bytes an index file holds, loading it never panics, and what it
        // accepts satisfies the order and validity checks.
        #[test]
        fn arbitrary_index_bytes_load_or_are_rejected(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.index");
            std::fs::write(&path, &raw).unwrap();
            if let Some(idx) = IndexFile::<OffsetEntry>::load(&path, |e| e.position < 1 << 20).unwrap() {
                proptest::prop_assert!(idx.entries().windows(2).all(|w| w[0].may_precede(&w[1])));
                proptest::prop_assert!(idx.entries().iter().all(|e| e.position < 1 << 20));
            }
            let path = dir.path().join("x.timeindex");
            std::fs::write(&path, &raw).unwrap();
            let _ = IndexFile::<TimeEntry>::load(&path, |_| true).unwrap();
        }
    }
}
