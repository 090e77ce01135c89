//! A segment's key filter: a Bloom filter of the keys of every record in one sealed
//! segment, so a lookup by key reads only the segments that may hold the key.
//!
//! # Format (version 1, all integers big-endian)
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `SKF1` |
//! | 4 | version, 1 |
//! | 5 | `k`, the number of bit positions per key (1..=16) |
//! | 6..8 | reserved, 0 |
//! | 8..16 | base offset of the segment (i64) |
//! | 16..24 | last offset of the segment (i64) |
//! | 24..32 | size in bytes of the segment's `.log` it was built from (u64) |
//! | 32..40 | smallest record timestamp (i64; -1 without records) |
//! | 40..48 | largest record timestamp (i64; -1 without records) |
//! | 48..56 | records read (u64) |
//! | 56..64 | records with a key (u64) |
//! | 64..72 | `m`, the number of bits (u64, a multiple of 8) |
//! | 72..72+m/8 | the bits; bit `i` is bit `i % 8` (least significant first) of byte `i / 8` |
//! | last 4 | CRC-32C of every byte before it |
//!
//! A key's positions: `h` = XXH3-64 (seed 0) of the key's bytes, `h1` = its low 32
//! bits, `h2` = its high 32 bits with the lowest bit set; position `j` (0..k) is
//! `(h1 + j * h2) mod m`, computed in 64 bits. Records with a null key add nothing.
//! `m` is about 10 bits per keyed record (rounded up to a byte, at least 64 bits) and
//! `k` = 7: a false positive rate near 1%.

use bytes::Bytes;
use twox_hash::XxHash3_64;

use crate::batch::{BatchError, BatchIter};
use crate::record::decode_records;

const MAGIC: &[u8; 4] = b"SKF1";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 72;
const BITS_PER_KEY: u64 = 10;
const HASHES: u8 = 7;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyFilterError {
    #[error("not a key filter: {0}")]
    Malformed(&'static str),
    #[error("key filter checksum mismatch")]
    Checksum,
}

/// What a filter says about the segment it was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterSummary {
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_bytes: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub records: u64,
    pub keyed_records: u64,
}

/// A decoded (or freshly built) key filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFilter {
    pub summary: FilterSummary,
    hashes: u8,
    bits: Vec<u8>,
}

fn positions(key: &[u8], hashes: u8, m: u64) -> impl Iterator<Item = u64> {
    positions_of(XxHash3_64::oneshot(key), hashes, m)
}

fn positions_of(h: u64, hashes: u8, m: u64) -> impl Iterator<Item = u64> {
    let (h1, h2) = (h & 0xffff_ffff, (h >> 32) | 1);
    (0..u64::from(hashes)).map(move |j| h1.wrapping_add(j.wrapping_mul(h2)) % m)
}

impl KeyFilter {
    /// An empty filter sized for `keys` keys.
    fn with_capacity(keys: u64, summary: FilterSummary) -> Self {
        let m = (keys.saturating_mul(BITS_PER_KEY)).max(64).div_ceil(8) * 8;
        Self {
            summary,
            hashes: HASHES,
            bits: vec![0; (m / 8) as usize],
        }
    }

    /// Bytes the filter holds in memory.
    pub fn size_bytes(&self) -> usize {
        self.bits.len() + std::mem::size_of::<Self>()
    }

    fn m(&self) -> u64 {
        self.bits.len() as u64 * 8
    }

    fn insert_hash(&mut self, h: u64) {
        let m = self.m();
        for p in positions_of(h, self.hashes, m) {
            self.bits[(p / 8) as usize] |= 1 << (p % 8);
        }
    }

    /// Whether the segment may hold a record with this key (`false`: surely not).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        let m = self.m();
        positions(key, self.hashes, m).all(|p| self.bits[(p / 8) as usize] & (1 << (p % 8)) != 0)
    }

    /// Builds the filter of a segment's batches (`log`: the whole `.log`, batches back
    /// to back), decompressing each compressed batch once.
    pub fn build(log: &Bytes) -> Result<Self, BatchError> {
        let mut b = KeyFilterBuilder::new();
        for item in BatchIter::new(log) {
            let (_, range) = item?;
            b.add_batch(&log.slice(range))?;
        }
        Ok(b.finish(log.len() as u64))
    }

    pub fn encode(&self) -> Vec<u8> {
        let s = &self.summary;
        let mut out = Vec::with_capacity(HEADER_LEN + self.bits.len() + 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(self.hashes);
        out.extend_from_slice(&[0, 0]);
        for v in [s.base_offset, s.last_offset] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&s.log_bytes.to_be_bytes());
        for v in [s.min_timestamp, s.max_timestamp] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        for v in [s.records, s.keyed_records, self.m()] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.bits);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Bytes to read for [`KeyFilter::summary_of`].
    pub const HEADER_LEN: usize = HEADER_LEN;

    /// The summary in a filter's header alone (its bits are not read or checked), to
    /// tell cheaply whether a filter on disk describes a given segment.
    pub fn summary_of(header: &[u8]) -> Result<FilterSummary, KeyFilterError> {
        use KeyFilterError::Malformed;
        if header.len() < HEADER_LEN || &header[..4] != MAGIC || header[4] != VERSION {
            return Err(Malformed("bad header"));
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&header[at..at + 8]);
            u64::from_be_bytes(b)
        };
        Ok(FilterSummary {
            base_offset: word(8) as i64,
            last_offset: word(16) as i64,
            log_bytes: word(24),
            min_timestamp: word(32) as i64,
            max_timestamp: word(40) as i64,
            records: word(48),
            keyed_records: word(56),
        })
    }

    pub fn decode(buf: &[u8]) -> Result<Self, KeyFilterError> {
        use KeyFilterError::Malformed;
        if buf.len() < HEADER_LEN + 4 {
            return Err(Malformed("too short"));
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(KeyFilterError::Checksum);
        }
        if &body[..4] != MAGIC {
            return Err(Malformed("bad magic"));
        }
        if body[4] != VERSION {
            return Err(Malformed("unknown version"));
        }
        let hashes = body[5];
        if !(1..=16).contains(&hashes) {
            return Err(Malformed("bad hash count"));
        }
        let mut m = [0u8; 8];
        m.copy_from_slice(&body[64..72]);
        let m = u64::from_be_bytes(m);
        if m == 0 || m % 8 != 0 || m / 8 != (body.len() - HEADER_LEN) as u64 {
            return Err(Malformed("bit count does not match the size"));
        }
        Ok(Self {
            summary: Self::summary_of(body)?,
            hashes,
            bits: body[HEADER_LEN..].to_vec(),
        })
    }
}

/// Builds a filter batch by batch (a segment is read in pieces, not whole), keeping
/// only each key's hash until the filter is sized.
pub struct KeyFilterBuilder {
    hashes: Vec<u64>,
    summary: FilterSummary,
}

impl Default for KeyFilterBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyFilterBuilder {
    pub fn new() -> Self {
        Self {
            hashes: Vec::new(),
            summary: FilterSummary {
                base_offset: -1,
                last_offset: -1,
                log_bytes: 0,
                min_timestamp: -1,
                max_timestamp: -1,
                records: 0,
                keyed_records: 0,
            },
        }
    }

    /// Adds the records of one whole batch (decompressed here, once).
    pub fn add_batch(&mut self, batch: &Bytes) -> Result<(), BatchError> {
        let h = crate::batch::BatchHeader::parse(batch)?;
        let s = &mut self.summary;
        if s.base_offset < 0 {
            s.base_offset = h.base_offset;
        }
        s.last_offset = h.last_offset();
        if h.is_control() {
            return Ok(());
        }
        for r in decode_records(batch)? {
            // Timestamps may be negative: the first record sets both bounds.
            if s.records == 0 {
                (s.min_timestamp, s.max_timestamp) = (r.timestamp, r.timestamp);
            }
            s.records += 1;
            s.min_timestamp = s.min_timestamp.min(r.timestamp);
            s.max_timestamp = s.max_timestamp.max(r.timestamp);
            if let Some(k) = r.key {
                self.hashes.push(XxHash3_64::oneshot(&k));
            }
        }
        Ok(())
    }

    /// The filter of what was added, for a `.log` of `log_bytes` bytes.
    pub fn finish(mut self, log_bytes: u64) -> KeyFilter {
        self.summary.log_bytes = log_bytes;
        self.summary.keyed_records = self.hashes.len() as u64;
        let mut filter = KeyFilter::with_capacity(self.hashes.len() as u64, self.summary);
        for h in self.hashes {
            filter.insert_hash(h);
        }
        filter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Compression;
    use crate::record::{BatchBuilder, Record};

    fn log_of(keys: &[&str], codec: Compression) -> Bytes {
        let mut out = Vec::new();
        for (i, chunk) in keys.chunks(3).enumerate() {
            let mut b = BatchBuilder::new(1000 + i as i64).with_compression(codec);
            for k in chunk {
                b.push(Record::new(Some(k.as_bytes()), Some(b"v"), 1000 + i as i64));
            }
            b.push(Record::new(None, Some(b"no key"), 1000 + i as i64));
            let mut batch = b.build().to_vec();
            crate::batch::set_base_offset(&mut batch, (i * 4) as i64);
            out.extend_from_slice(&batch);
        }
        Bytes::from(out)
    }

    #[test]
    fn finds_every_key_it_was_built_from_and_round_trips() {
        let keys: Vec<String> = (0..300).map(|i| format!("key-{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        for codec in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let log = log_of(&refs, codec);
            let f = KeyFilter::build(&log).unwrap();
            assert_eq!(f.summary.records, 400);
            assert_eq!(f.summary.keyed_records, 300);
            assert_eq!(f.summary.base_offset, 0);
            assert_eq!(f.summary.last_offset, 399);
            assert_eq!(f.summary.log_bytes, log.len() as u64);
            assert_eq!(
                (f.summary.min_timestamp, f.summary.max_timestamp),
                (1000, 1099)
            );
            for k in &keys {
                assert!(f.may_contain(k.as_bytes()), "{k} missing");
            }
            let false_positives = (0..10_000)
                .filter(|i| f.may_contain(format!("other-{i}").as_bytes()))
                .count();
            assert!(
                false_positives < 300,
                "{false_positives} false positives in 10000"
            );
            let decoded = KeyFilter::decode(&f.encode()).unwrap();
            assert_eq!(decoded, f);
            assert_eq!(KeyFilter::summary_of(&f.encode()[..72]).unwrap(), f.summary);
        }
    }

    #[test]
    fn refuses_damaged_filters() {
        let f = KeyFilter::build(&log_of(&["a", "b"], Compression::None)).unwrap();
        let bytes = f.encode();
        let mut flipped = bytes.clone();
        flipped[80] ^= 1;
        assert_eq!(KeyFilter::decode(&flipped), Err(KeyFilterError::Checksum));
        assert!(KeyFilter::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(KeyFilter::decode(&bytes[..10]).is_err());
        assert!(KeyFilter::decode(b"").is_err());
    }

    #[test]
    fn negative_timestamps_bound_the_range_too() {
        let mut b = BatchBuilder::new(-1);
        b.push(Record::new(Some(b"a"), None, -1));
        b.push(Record::new(Some(b"b"), None, 1000));
        let f = KeyFilter::build(&b.build()).unwrap();
        assert_eq!(
            (f.summary.min_timestamp, f.summary.max_timestamp),
            (-1, 1000)
        );
    }

    #[test]
    fn an_empty_segment_matches_nothing() {
        let f = KeyFilter::build(&Bytes::new()).unwrap();
        assert_eq!(f.summary.records, 0);
        assert!(!f.may_contain(b"x"));
        assert_eq!(KeyFilter::decode(&f.encode()).unwrap(), f);
    }
}
