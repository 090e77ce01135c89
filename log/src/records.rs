//! Record bytes as a fetch hands them out: in memory, or a range of a segment file
//! that a plaintext connection sends with `sendfile(2)` without copying it into the
//! process.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use shale_records::batch::BatchIter;

/// How many times a log was cut in place (truncated, or reset): a slice planned
/// before a cut may no longer hold the batches it was planned for. (Retention and
/// cleaning never cut a file: they delete or replace it, and an open one keeps its
/// bytes.)
#[derive(Debug, Clone, Default)]
pub(crate) struct Cuts(Arc<AtomicU64>);

impl Cuts {
    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Called under the partition's lock, before the file is cut.
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// Whole batches at `[position, position + len)` of an open segment file. The file
/// stays open while the slice lives, so a segment deleted by retention (or replaced
/// by cleaning) after the read was planned is still read whole.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: usize,
    pub(crate) cuts: Cuts,
    /// `cuts` when the slice was planned.
    pub(crate) planned: u64,
}

impl FileSlice {
    /// Whether the log has not been cut since the slice was planned: its bytes are
    /// still the batches planned. A sender checks this before and after sending.
    pub fn is_current(&self) -> bool {
        self.cuts.count() == self.planned
    }

    /// The slice's bytes, each batch CRC-checked (what a copying read returns); an
    /// error if the log was cut meanwhile.
    pub fn read(&self) -> io::Result<Bytes> {
        let mut buf = vec![0; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        if !self.is_current() {
            return Err(io::Error::other("the log was cut while the slice was read"));
        }
        for item in BatchIter::new(&buf) {
            let (h, range) = item.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            h.validate_stored(&buf[range])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        Ok(Bytes::from(buf))
    }
}

/// Record bytes of one partition's answer.
#[derive(Debug, Clone)]
pub enum Records {
    Bytes(Bytes),
    Slice(FileSlice),
}

impl Default for Records {
    fn default() -> Self {
        Records::Bytes(Bytes::new())
    }
}

impl From<Bytes> for Records {
    fn from(b: Bytes) -> Self {
        Records::Bytes(b)
    }
}

impl Records {
    pub fn len(&self) -> usize {
        match self {
            Records::Bytes(b) => b.len(),
            Records::Slice(s) => s.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in memory, reading a file slice (see [`FileSlice::read`]).
    pub fn into_bytes(self) -> io::Result<Bytes> {
        match self {
            Records::Bytes(b) => Ok(b),
            Records::Slice(s) => s.read(),
        }
    }
}
