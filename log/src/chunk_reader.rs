//! Sequential reads of a segment's batches: headers through a buffer, so a scan costs
//! one `pread` per chunk rather than one per batch.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use shale_records::batch::{BatchError, BatchHeader, HEADER_LEN};

/// Header of one stored batch and where it lies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoredBatch {
    pub header: BatchHeader,
    pub position: u64,
}

/// Reads batch headers sequentially through a buffer, so a scan costs one `pread` per
/// chunk instead of one per batch.
pub(crate) struct ChunkReader<'a> {
    file: &'a File,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
    chunk: usize,
}

/// Read size of whole-segment scans (recovery).
pub(crate) const SCAN_CHUNK: usize = 256 * 1024;
/// Read size of seeks from an index entry: at most `index.interval.bytes` of headers
/// (4 KiB by default) lie between the entry and the target.
pub(crate) const SEEK_CHUNK: usize = 16 * 1024;

impl<'a> ChunkReader<'a> {
    pub(crate) fn new(file: &'a File, end: u64, chunk: usize) -> Self {
        Self {
            file,
            end,
            buf: Vec::new(),
            buf_start: 0,
            chunk,
        }
    }

    /// Makes `[pos, pos + len)` available in the buffer; false if it lies past `end`.
    fn fill(&mut self, pos: u64, len: usize) -> io::Result<bool> {
        if pos + len as u64 > self.end {
            return Ok(false);
        }
        let have =
            pos >= self.buf_start && pos + len as u64 <= self.buf_start + self.buf.len() as u64;
        if !have {
            let want = len.max(self.chunk).min((self.end - pos) as usize);
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_start = pos;
        }
        Ok(true)
    }

    fn slice(&self, pos: u64, len: usize) -> &[u8] {
        let at = (pos - self.buf_start) as usize;
        &self.buf[at..at + len]
    }

    /// The batch header at `pos`: `None` at the clean end of the data, an error for a
    /// torn or corrupt batch (checking the CRC, which reads the whole batch, if asked).
    pub(crate) fn next_batch(
        &mut self,
        pos: u64,
        check_crc: bool,
    ) -> Option<Result<BatchHeader, BatchError>> {
        if pos >= self.end {
            return None;
        }
        let available = (self.end - pos) as usize;
        let io_err = |_| BatchError::Invalid("read error");
        match self.fill(pos, HEADER_LEN.min(available)).map_err(io_err) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        let header = match BatchHeader::parse(self.slice(pos, HEADER_LEN.min(available))) {
            Ok(h) => h,
            Err(e) => return Some(Err(e)),
        };
        if header.total_size() > available {
            return Some(Err(BatchError::Truncated {
                needed: header.total_size(),
                available,
            }));
        }
        if check_crc {
            if let Err(e) = self.fill(pos, header.total_size()).map_err(io_err) {
                return Some(Err(e));
            }
            if let Err(e) = header.validate_stored(self.slice(pos, header.total_size())) {
                return Some(Err(e));
            }
        }
        Some(Ok(header))
    }

    /// Scans from `pos` to the first batch whose last offset is >= `target`.
    pub(crate) fn seek_offset(
        &mut self,
        mut pos: u64,
        target: i64,
    ) -> io::Result<Option<StoredBatch>> {
        while let Some(batch) = self.next_batch(pos, false) {
            let header = batch.map_err(io::Error::other)?;
            if header.last_offset() >= target {
                return Ok(Some(StoredBatch {
                    header,
                    position: pos,
                }));
            }
            pos += header.total_size() as u64;
        }
        Ok(None)
    }

    /// Scans from `pos` to the first batch whose max timestamp is >= `ts`.
    pub(crate) fn seek_timestamp(
        &mut self,
        mut pos: u64,
        ts: i64,
    ) -> io::Result<Option<StoredBatch>> {
        while let Some(batch) = self.next_batch(pos, false) {
            let header = batch.map_err(io::Error::other)?;
            if header.max_timestamp >= ts {
                return Ok(Some(StoredBatch {
                    header,
                    position: pos,
                }));
            }
            pos += header.total_size() as u64;
        }
        Ok(None)
    }

    /// Reads `[pos, pos + len)`.
    pub(crate) fn read(&mut self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        // Read into the vector's spare capacity: no zeroing of what the read overwrites.
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let at = pos + out.len() as u64;
            let want = len - out.len();
            let n = rustix::io::pread(self.file, rustix::buffer::spare_capacity(&mut out), at)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{want} bytes missing at position {at}"),
                ));
            }
        }
        // The allocation may be larger than asked: never more than `len` bytes.
        out.truncate(len);
        Ok(out)
    }
}
