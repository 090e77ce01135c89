//! Producer snapshots (`{offset:020}.snapshot`): the state of every batch below
//! `offset`, CRC-checked, written atomically; one at each segment's base is kept while
//! the segment is in the log (the copy of the segment before it to the object store
//! takes it along, for a replica whose log starts there), and the newest few always.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};

use super::{ProducerBatch, ProducerEntry, ProducerStates};
use crate::layout::SNAPSHOT_SUFFIX;

/// Snapshots before transactions (no open transaction, no coordinator epoch).
const SNAPSHOT_MAGIC_V1: &[u8; 4] = b"SHPS";
const SNAPSHOT_MAGIC: &[u8; 4] = b"SHP2";
const SNAPSHOTS_KEPT: usize = 3;

impl ProducerStates {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.producers.len() * 64);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let sorted: BTreeMap<_, _> = self.producers.iter().collect();
        for (id, e) in sorted {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.last_marker_offset.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(buf: &[u8]) -> Option<Self> {
        let (body, crc) = buf.split_at_checked(buf.len().checked_sub(4)?)?;
        let v2 = body.starts_with(SNAPSHOT_MAGIC);
        if crc32c::crc32c(body).to_be_bytes() != crc || !(v2 || body.starts_with(SNAPSHOT_MAGIC_V1))
        {
            return None;
        }
        let mut r = Reader(&body[4..]);
        let count = u32::from_be_bytes(r.take()?);
        let mut producers = HashMap::new();
        for _ in 0..count {
            let id = i64::from_be_bytes(r.take()?);
            let epoch = i16::from_be_bytes(r.take()?);
            let last_timestamp = i64::from_be_bytes(r.take()?);
            let (txn_first_offset, coordinator_epoch, last_marker_offset) = if v2 {
                let first = i64::from_be_bytes(r.take()?);
                let epoch = i32::from_be_bytes(r.take()?);
                (
                    (first >= 0).then_some(first),
                    epoch,
                    i64::from_be_bytes(r.take()?),
                )
            } else {
                (None, -1, -1)
            };
            let [n] = r.take::<1>()?;
            let mut batches = VecDeque::new();
            for _ in 0..n {
                batches.push_back(ProducerBatch {
                    first_seq: i32::from_be_bytes(r.take()?),
                    last_seq: i32::from_be_bytes(r.take()?),
                    base_offset: i64::from_be_bytes(r.take()?),
                    last_offset: i64::from_be_bytes(r.take()?),
                });
            }
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                    txn_first_offset,
                    coordinator_epoch,
                    last_marker_offset,
                },
            );
        }
        let ongoing = producers
            .iter()
            .filter_map(|(id, e)| Some((e.txn_first_offset?, *id)))
            .collect();
        r.0.is_empty().then_some(Self { producers, ongoing })
    }

    /// Writes the state as of `offset` (every batch below it) atomically, then deletes
    /// the snapshots below `keep_from` but the newest few.
    pub fn write_snapshot(&self, dir: &Path, offset: i64, keep_from: i64) -> io::Result<()> {
        write_snapshot_file(dir, offset, &self.encode())?;
        let all = list_snapshots(dir)?;
        for old in all.iter().rev().skip(SNAPSHOTS_KEPT) {
            if *old < keep_from {
                std::fs::remove_file(snapshot_path(dir, *old))?;
            }
        }
        std::fs::File::open(dir)?.sync_all()
    }

    /// The newest readable snapshot at or below `max_offset` and its offset.
    pub fn load_snapshot(dir: &Path, max_offset: i64) -> io::Result<Option<(i64, Self)>> {
        for offset in list_snapshots(dir)?.into_iter().rev() {
            if offset > max_offset {
                continue;
            }
            match std::fs::read(snapshot_path(dir, offset)).map(|b| Self::decode(&b)) {
                Ok(Some(s)) => return Ok(Some((offset, s))),
                _ => {
                    tracing::warn!(dir = %dir.display(), offset, "ignoring unreadable producer snapshot")
                }
            }
        }
        Ok(None)
    }

    /// Deletes snapshots above `offset` (a truncated log) or all with `i64::MIN`.
    /// The deletions are durable: a snapshot of a truncated tail must not come back
    /// after a power loss and be taken for the state of different batches.
    pub fn delete_snapshots_above(dir: &Path, offset: i64) -> io::Result<()> {
        Self::delete_snapshots(dir, |o| o > offset)
    }

    /// Deletes the snapshots at or below `offset`, durably: a cleaning is about to
    /// remove a transaction marker there, and a replay (after a truncation) from a
    /// snapshot that holds its transaction open would never see it end. A replay
    /// from the log start sees none of that transaction's batches.
    pub fn delete_snapshots_through(dir: &Path, offset: i64) -> io::Result<()> {
        Self::delete_snapshots(dir, |o| o <= offset)
    }

    fn delete_snapshots(dir: &Path, delete: impl Fn(i64) -> bool) -> io::Result<()> {
        let mut deleted = false;
        for o in list_snapshots(dir)? {
            if delete(o) {
                std::fs::remove_file(snapshot_path(dir, o))?;
                deleted = true;
            }
        }
        if deleted {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
}

fn write_snapshot_file(dir: &Path, offset: i64, bytes: &[u8]) -> io::Result<()> {
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)
}

impl crate::PartitionLog {
    /// The snapshot file of the producer state as of exactly `offset` (a segment's
    /// base), if the log has a readable one: what the copy of the segment before it
    /// to the object store takes along.
    pub fn producer_snapshot_at(&self, offset: i64) -> Option<Vec<u8>> {
        read_producer_snapshot(&self.producer_snapshot_path(offset))
    }

    /// Where the snapshot as of `offset` would be, for [`read_producer_snapshot`]
    /// without the partition's lock.
    pub fn producer_snapshot_path(&self, offset: i64) -> PathBuf {
        snapshot_path(&self.dir, offset)
    }

    /// A log just restarted empty at `offset` (a new replica starting at its leader's
    /// local log start) takes the producer state as of `offset` from the copy of the
    /// segment before it: the producers' sequences, and the transactions open there
    /// with their first offsets, below this log. False (nothing changed) if the log is
    /// not empty at `offset` or the bytes are not a snapshot.
    pub fn install_producer_snapshot(&mut self, offset: i64, bytes: &[u8]) -> io::Result<bool> {
        let empty_at = self.log_start_offset() == offset && self.log_end_offset() == offset;
        let Some(states) = ProducerStates::decode(bytes).filter(|_| empty_at) else {
            return Ok(false);
        };
        write_snapshot_file(&self.dir, offset, bytes)?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        self.producers = states;
        self.producers_through = offset;
        self.unstable_ended.clear();
        Ok(true)
    }
}

/// The snapshot file at `path`, if it is there and readable.
pub fn read_producer_snapshot(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    ProducerStates::decode(&bytes).map(|_| bytes)
}

pub(super) fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.{SNAPSHOT_SUFFIX}"))
}

/// Snapshot offsets in `dir`, ascending.
pub(super) fn list_snapshots(dir: &Path) -> io::Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(o) = name
            .to_string_lossy()
            .strip_suffix(&format!(".{SNAPSHOT_SUFFIX}"))
            .and_then(|b| b.parse::<i64>().ok())
        {
            out.push(o);
        }
    }
    out.sort_unstable();
    Ok(out)
}
