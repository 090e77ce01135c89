//! Record bytes as a fetch hands them out: in memory, or a range of a segment file
//! that a plaintext connection sends with `sendfile(2)` without copying it into the
//! process.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use shale_records::batch::BatchIter;

/// Whole batches at `[position, position + len)` of an open segment file. The file
/// stays open while the slice lives, so a segment deleted by retention (or replaced
/// by cleaning) after the read was planned is still read whole.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: usize,
}

impl FileSlice {
    /// The slice's bytes, each batch CRC-checked (what a copying read returns).
    pub fn read(&self) -> io::Result<Bytes> {
        let mut buf = vec![0; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
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
