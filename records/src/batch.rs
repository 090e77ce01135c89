//! Kafka RecordBatch v2 header: parsing, validation and the two fields the broker patches.
//!
//! The broker never looks past the 61-byte header on the hot path. Layout (big endian):
//!
//! ```text
//! 0  baseOffset i64         | 8  batchLength i32      | 12 partitionLeaderEpoch i32
//! 16 magic i8               | 17 crc u32 (CRC-32C of bytes 21..end)
//! 21 attributes i16         | 23 lastOffsetDelta i32  | 27 baseTimestamp i64
//! 35 maxTimestamp i64       | 43 producerId i64       | 51 producerEpoch i16
//! 53 baseSequence i32       | 57 recordCount i32      | 61 records...
//! ```
//!
//! `batchLength` counts the bytes after itself, so a batch occupies `12 + batchLength` bytes.
//! Base offset and leader epoch lie outside the CRC, so patching them keeps the CRC valid.

/// Bytes before `batchLength`'s payload: base offset + the length field itself.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed v2 header.
pub const HEADER_LEN: usize = 61;
/// The only record-batch format Shale accepts.
pub const MAGIC_V2: i8 = 2;

pub(crate) const CRC_OFFSET: usize = 17;
pub(crate) const ATTRIBUTES_OFFSET: usize = 21;
const MAX_TIMESTAMP_OFFSET: usize = 35;

/// Attribute bit for LogAppendTime timestamps.
pub const TIMESTAMP_TYPE_LOG_APPEND: i16 = 1 << 3;
pub(crate) const COMPRESSION_MASK: i16 = 0x07;
/// Attribute bit of a batch written inside a transaction.
pub const TRANSACTIONAL_BIT: i16 = 1 << 4;
/// Attribute bit of a control batch (a transaction marker).
pub const CONTROL_BIT: i16 = 1 << 5;
/// Attribute bit of a batch the log cleaner has rewritten keeping tombstones: its base
/// timestamp is then the delete horizon (the time after which the cleaner may drop
/// them), and its records' timestamp deltas are relative to that.
pub const DELETE_HORIZON_BIT: i16 = 1 << 6;

/// Why a byte range is not a valid batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch is truncated: {available} bytes available, {needed} needed")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is invalid")]
    InvalidLength(i32),
    #[error("unsupported record batch magic {0}; only v2 (magic 2) is accepted")]
    UnsupportedMagic(i8),
    #[error("batch CRC mismatch: header says {expected:#010x}, content has {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    #[error("batch is inconsistent: {0}")]
    Invalid(&'static str),
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(i16),
}

/// Compression codec from the batch attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// The codec's value in the low three bits of the batch attributes.
    pub fn attribute_bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(format!(
                "compression must be none, gzip, snappy, lz4 or zstd, not '{s}'"
            )),
        }
    }
}

/// The parsed fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// Parses the header at the start of `buf`. Checks only what the header alone can
    /// tell (room for the header, magic, length); see [`BatchHeader::validate`] for the rest.
    pub fn parse(buf: &[u8]) -> Result<Self, BatchError> {
        if buf.len() < LOG_OVERHEAD {
            return Err(BatchError::Truncated {
                needed: LOG_OVERHEAD,
                available: buf.len(),
            });
        }
        let batch_length = be_i32(buf, 8);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(BatchError::InvalidLength(batch_length));
        }
        if buf.len() < HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: HEADER_LEN,
                available: buf.len(),
            });
        }
        let magic = buf[16] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        Ok(Self {
            base_offset: be_i64(buf, 0),
            batch_length,
            partition_leader_epoch: be_i32(buf, 12),
            magic,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(buf, 23),
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(buf, 43),
            producer_epoch: be_i16(buf, 51),
            base_sequence: be_i32(buf, 53),
            record_count: be_i32(buf, 57),
        })
    }

    /// Bytes the whole batch occupies.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    pub fn compression(&self) -> Result<Compression, BatchError> {
        Ok(match self.attributes & COMPRESSION_MASK {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => return Err(BatchError::UnsupportedCompression(other)),
        })
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_LOG_APPEND != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Written inside a transaction (data or marker).
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// The delete horizon a cleaning wrote into the batch (see [`DELETE_HORIZON_BIT`]).
    pub fn delete_horizon(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_BIT != 0).then_some(self.base_timestamp)
    }

    /// Check of a batch read back from a log: like [`BatchHeader::validate`], except
    /// that a cleaned (compacted) batch may hold fewer records than its offset span,
    /// none at all when it is kept only for its producer's state.
    pub fn validate_stored(&self, batch: &[u8]) -> Result<(), BatchError> {
        self.check_crc(batch)?;
        if self.last_offset_delta < 0 {
            return Err(BatchError::Invalid("negative last offset delta"));
        }
        if self.record_count < 0
            || i64::from(self.record_count) > i64::from(self.last_offset_delta) + 1
        {
            return Err(BatchError::Invalid(
                "record count does not fit the batch's offset span",
            ));
        }
        Ok(())
    }

    fn check_crc(&self, batch: &[u8]) -> Result<(), BatchError> {
        if batch.len() != self.total_size() {
            return Err(BatchError::Truncated {
                needed: self.total_size(),
                available: batch.len(),
            });
        }
        let actual = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
        if actual != self.crc {
            return Err(BatchError::CrcMismatch {
                expected: self.crc,
                actual,
            });
        }
        self.compression()?;
        Ok(())
    }

    /// Full check of a batch that a producer sent or that recovery reads back:
    /// `batch` must be exactly this header's batch. Verifies the CRC, the codec and
    /// that the record count agrees with the offset span.
    pub fn validate(&self, batch: &[u8]) -> Result<(), BatchError> {
        self.check_crc(batch)?;
        if self.last_offset_delta < 0 {
            return Err(BatchError::Invalid("negative last offset delta"));
        }
        if self.record_count <= 0 {
            return Err(BatchError::Invalid("a batch must hold at least one record"));
        }
        if i64::from(self.record_count) != i64::from(self.last_offset_delta) + 1 {
            return Err(BatchError::Invalid(
                "record count does not match last offset delta",
            ));
        }
        Ok(())
    }
}

/// Sets the base offset of the batch at the start of `buf` (outside the CRC).
pub fn set_base_offset(buf: &mut [u8], base_offset: i64) {
    buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Sets the partition leader epoch of the batch at the start of `buf` (outside the CRC).
pub fn set_partition_leader_epoch(buf: &mut [u8], epoch: i32) {
    buf[12..16].copy_from_slice(&epoch.to_be_bytes());
}

/// Turns the batch at the start of `buf` into a LogAppendTime batch stamped `now_ms`,
/// recomputing its CRC (these fields are inside it).
pub fn stamp_log_append_time(buf: &mut [u8], now_ms: i64) {
    let attributes = be_i16(buf, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_LOG_APPEND;
    buf[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    buf[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Writes `max_timestamp` into the header of the batch at the start of `buf`,
/// recomputing its CRC (a client that sent -1 there; see `record::max_record_timestamp`).
pub fn set_max_timestamp(buf: &mut [u8], max_timestamp: i64) {
    buf[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Sets the attribute bits of the batch at the start of `buf`, recomputing its CRC.
pub fn set_attributes(buf: &mut [u8], attributes: i16) {
    buf[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Sets the idempotent-producer fields of the batch at the start of `buf` (a
/// producer stamps a batch when it first sends it), recomputing its CRC.
pub fn set_producer(buf: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    buf[43..51].copy_from_slice(&producer_id.to_be_bytes());
    buf[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
    buf[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Walks batches laid back to back, yielding each header with its byte range.
/// Stops at the end of the buffer or at the first incomplete batch; a header that
/// cannot be parsed is yielded as an error and ends the walk.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            done: false,
        }
    }

    /// Bytes consumed by the batches yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for BatchIter<'_> {
    type Item = Result<(BatchHeader, std::ops::Range<usize>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        match BatchHeader::parse(rest) {
            Ok(h) if h.total_size() <= rest.len() => {
                let range = self.pos..self.pos + h.total_size();
                self.pos = range.end;
                Some(Ok((h, range)))
            }
            Ok(_) | Err(BatchError::Truncated { .. }) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BatchBuilder, Record};
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        let mut b = BatchBuilder::new(1_700_000_000_000);
        b.push(Record::new(
            Some(b"k".as_slice()),
            Some(b"v1".as_slice()),
            1_700_000_000_000,
        ));
        b.push(Record::new(None, Some(b"v2".as_slice()), 1_700_000_000_005));
        b.build().to_vec()
    }

    #[test]
    fn parses_and_validates_built_batch() {
        let b = sample();
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.total_size(), b.len());
        assert_eq!(h.record_count, 2);
        assert_eq!(h.last_offset_delta, 1);
        assert_eq!(h.max_timestamp, 1_700_000_000_005);
        h.validate(&b).unwrap();
    }

    #[test]
    fn patching_offset_and_epoch_keeps_crc_valid() {
        let mut b = sample();
        set_base_offset(&mut b, 42);
        set_partition_leader_epoch(&mut b, 7);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(
            (h.base_offset, h.partition_leader_epoch, h.last_offset()),
            (42, 7, 43)
        );
        h.validate(&b).unwrap();
    }

    #[test]
    fn stamping_the_producer_keeps_crc_valid() {
        let mut b = sample();
        set_producer(&mut b, 9_000_000_001, 3, 77);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (9_000_000_001, 3, 77)
        );
        h.validate(&b).unwrap();
    }

    #[test]
    fn flipped_payload_bit_is_a_crc_mismatch() {
        let mut b = sample();
        let last = b.len() - 1;
        b[last] ^= 1;
        let h = BatchHeader::parse(&b).unwrap();
        assert!(matches!(
            h.validate(&b),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn log_append_time_stamp_keeps_crc_valid() {
        let mut b = sample();
        stamp_log_append_time(&mut b, 99);
        let h = BatchHeader::parse(&b).unwrap();
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 99);
        h.validate(&b).unwrap();
    }

    #[test]
    fn recompressing_keeps_every_field_and_record() {
        let mut b = sample();
        set_producer(&mut b, 5, 2, 40);
        let before = BatchHeader::parse(&b).unwrap();
        let records = crate::record::decode_records(&bytes::Bytes::from(b.clone())).unwrap();
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
            Compression::None,
        ] {
            let out = crate::compression::recompress(&b, codec).unwrap();
            let h = BatchHeader::parse(&out).unwrap();
            h.validate(&out).unwrap();
            assert_eq!(h.compression().unwrap(), codec);
            let same = BatchHeader {
                batch_length: before.batch_length,
                crc: before.crc,
                attributes: before.attributes,
                ..h
            };
            assert_eq!(same, before, "only length, CRC and codec change");
            let again = crate::record::decode_records(&bytes::Bytes::from(out)).unwrap();
            assert_eq!(again, records, "{codec:?}");
        }
    }

    #[test]
    fn iter_stops_at_partial_batch() {
        let one = sample();
        let mut buf = one.clone();
        buf.extend_from_slice(&one[..one.len() - 3]);
        let mut it = BatchIter::new(&buf);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().is_none());
        assert_eq!(it.position(), one.len());
    }

    #[test]
    fn wrong_magic_is_rejected() {
        let mut b = sample();
        b[16] = 1;
        assert_eq!(BatchHeader::parse(&b), Err(BatchError::UnsupportedMagic(1)));
    }

    proptest! {
        // Decoder fuzzing: arbitrary bytes never panic the header parser, the
        // validator, the iterator or the record decoder.
        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(h) = BatchHeader::parse(&buf) {
                let _ = h.validate(&buf[..buf.len().min(h.total_size())]);
            }
            for (_, r) in BatchIter::new(&buf).flatten() {
                let _ = crate::record::decode_records(&bytes::Bytes::copy_from_slice(&buf[r]));
            }
        }

        // Mutating any byte of a valid batch either keeps it valid (the patched fields)
        // or is detected; it never panics the record decoder.
        #[test]
        fn single_byte_corruption_is_detected(idx in 0usize..80, xor in 1u8..=255) {
            let mut b = sample();
            let idx = idx % b.len();
            b[idx] ^= xor;
            // Base offset and leader epoch are outside the CRC and may be patched.
            let patchable = idx < 8 || (12..16).contains(&idx);
            let valid = match BatchHeader::parse(&b) {
                Ok(h) => h.total_size() == b.len() && h.validate(&b).is_ok(),
                Err(_) => false,
            };
            prop_assert_eq!(valid, patchable);
            if valid { prop_assert!(crate::record::decode_records(&bytes::Bytes::from(b)).is_ok()); }
        }
    }
}
