//! Records inside a RecordBatch v2: building batches (producer side, optionally compressed) and
//! decoding them (consumer side). The broker never calls into this module on its hot path.
//!
//! Record layout (varints are zigzag, as in Kafka):
//! `length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//!  keyLen varint | key | valueLen varint | value | headerCount varint |
//!  (keyLen varint | key | valueLen varint | value)*`

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchHeader, Compression, HEADER_LEN, MAGIC_V2};

/// One record as a consumer sees it, or as a producer hands it in (offset unused then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl Record {
    pub fn new(key: Option<&[u8]>, value: Option<&[u8]>, timestamp: i64) -> Self {
        Self {
            offset: 0,
            timestamp,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: Vec::new(),
        }
    }
}

pub(crate) fn put_varlong(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn put_bytes(buf: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varlong(buf, -1),
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}

/// Accumulates records and encodes them as one v2 batch with base offset 0, its records
/// section compressed with the chosen codec (none by default).
pub struct BatchBuilder {
    compression: Compression,
    base_timestamp: i64,
    max_timestamp: i64,
    count: i32,
    records: BytesMut,
    scratch: BytesMut,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
}

impl BatchBuilder {
    pub fn new(base_timestamp: i64) -> Self {
        Self {
            compression: Compression::None,
            base_timestamp,
            max_timestamp: base_timestamp,
            count: 0,
            records: BytesMut::new(),
            scratch: BytesMut::new(),
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }

    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size of the batch if built now, before compression.
    pub fn size_bytes(&self) -> usize {
        HEADER_LEN + self.records.len()
    }

    pub fn push(&mut self, r: Record) {
        let s = &mut self.scratch;
        s.clear();
        s.put_i8(0);
        put_varlong(s, r.timestamp - self.base_timestamp);
        put_varlong(s, i64::from(self.count));
        put_bytes(s, r.key.as_deref());
        put_bytes(s, r.value.as_deref());
        put_varlong(s, r.headers.len() as i64);
        for (k, v) in &r.headers {
            put_bytes(s, Some(k.as_bytes()));
            put_bytes(s, v.as_deref());
        }
        put_varlong(&mut self.records, s.len() as i64);
        self.records.extend_from_slice(s);
        self.max_timestamp = self.max_timestamp.max(r.timestamp);
        self.count += 1;
    }

    pub fn build(self) -> Bytes {
        let compressed;
        let records: &[u8] = match self.compression {
            Compression::None => &self.records,
            codec => {
                compressed = crate::compression::compress(codec, &self.records);
                &compressed
            }
        };
        let mut out = BytesMut::with_capacity(HEADER_LEN + records.len());
        let batch_length = (HEADER_LEN - 12 + records.len()) as i32;
        out.put_i64(0);
        out.put_i32(batch_length);
        out.put_i32(-1); // partition leader epoch: set by the broker
        out.put_i8(MAGIC_V2);
        out.put_u32(0); // crc placeholder
        out.put_i16(self.compression.attribute_bits()); // codec; CreateTime
        out.put_i32(self.count - 1);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.count);
        out.extend_from_slice(records);
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn varlong(&mut self) -> Result<i64, BatchError> {
        let mut z: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(BatchError::Invalid("truncated varint"))?;
            self.pos += 1;
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err(BatchError::Invalid("varint too long"))
    }

    /// A length-prefixed field, as a range of `buf` (`None` for a null field).
    pub(crate) fn bytes(&mut self) -> Result<Option<std::ops::Range<usize>>, BatchError> {
        let len = self.varlong()?;
        if len < 0 {
            return Ok(None);
        }
        let end = self
            .pos
            .checked_add(len as usize)
            .filter(|e| *e <= self.buf.len())
            .ok_or(BatchError::Invalid("field runs past the record"))?;
        let range = self.pos..end;
        self.pos = end;
        Ok(Some(range))
    }

    pub(crate) fn i8(&mut self) -> Result<i8, BatchError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(BatchError::Invalid("truncated record"))?;
        self.pos += 1;
        Ok(b as i8)
    }
}

/// The largest timestamp of the records of one batch (decompressing it if needed), or
/// -1 if it has none: what Kafka's validator writes into the header's max timestamp,
/// which some clients send as -1.
pub fn max_record_timestamp(batch: &Bytes) -> Result<i64, BatchError> {
    Ok(decode_records(batch)?
        .iter()
        .map(|r| r.timestamp)
        .fold(-1, i64::max))
}

/// Decodes every record of one batch (`batch` is exactly one batch), decompressing it
/// first if needed. Offsets and timestamps are absolute; a LogAppendTime batch gives
/// every record the batch's max timestamp. Keys, values and header values are slices of
/// `batch` (of the decompressed records, for a compressed batch), not copies.
pub fn decode_records(batch: &Bytes) -> Result<Vec<Record>, BatchError> {
    let h = BatchHeader::parse(batch)?;
    if h.total_size() > batch.len() {
        return Err(BatchError::Truncated {
            needed: h.total_size(),
            available: batch.len(),
        });
    }
    let (batch, start, end_of_batch) = match h.compression()? {
        Compression::None => (batch.clone(), HEADER_LEN, h.total_size()),
        codec => {
            let plain = crate::compression::decompress(codec, &batch[HEADER_LEN..h.total_size()])?;
            let len = plain.len();
            (Bytes::from(plain), 0, len)
        }
    };
    let batch = &batch;
    let mut r = Reader {
        buf: &batch[..end_of_batch],
        pos: start,
    };
    let count = usize::try_from(h.record_count)
        .map_err(|_| BatchError::Invalid("negative record count"))?;
    let mut out = Vec::with_capacity(count.min(end_of_batch));
    for _ in 0..count {
        let len = r.varlong()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| r.pos.checked_add(l))
            .filter(|e| *e <= end_of_batch)
            .ok_or(BatchError::Invalid("record length runs past the batch"))?;
        let mut rec = Reader {
            buf: &batch[..end],
            pos: r.pos,
        };
        rec.i8()?;
        let ts_delta = rec.varlong()?;
        let offset_delta = rec.varlong()?;
        let key = rec.bytes()?.map(|range| batch.slice(range));
        let value = rec.bytes()?.map(|range| batch.slice(range));
        let n_headers = rec.varlong()?;
        if n_headers < 0 || n_headers as usize > end {
            return Err(BatchError::Invalid("bad header count"));
        }
        let mut headers = Vec::with_capacity(n_headers as usize);
        for _ in 0..n_headers {
            let k = rec.bytes()?.ok_or(BatchError::Invalid("null header key"))?;
            let v = rec.bytes()?.map(|range| batch.slice(range));
            headers.push((String::from_utf8_lossy(&batch[k]).into_owned(), v));
        }
        r.pos = end;
        out.push(Record {
            offset: h.base_offset.wrapping_add(offset_delta),
            timestamp: if h.is_log_append_time() {
                h.max_timestamp
            } else {
                h.base_timestamp.wrapping_add(ts_delta)
            },
            key,
            value,
            headers,
        });
    }
    Ok(out)
}

/// The first record of `batch` whose timestamp is >= `ts`, as (offset, timestamp). A
/// batch stamped LogAppendTime (or not decodable) answers its base offset and max
/// timestamp. `None` if no record qualifies.
pub fn first_at_or_after(batch: &Bytes, ts: i64) -> Option<(i64, i64)> {
    let h = BatchHeader::parse(batch).ok()?;
    if h.max_timestamp < ts {
        return None;
    }
    if !h.is_log_append_time()
        && let Some(r) = decode_records(batch)
            .ok()?
            .into_iter()
            .find(|r| r.timestamp >= ts)
    {
        return Some((r.offset, r.timestamp));
    }
    Some((h.base_offset, h.max_timestamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn build_then_decode_round_trips(
            recs in proptest::collection::vec(
                (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
                 0i64..1_000_000,
                 proptest::collection::vec(("[a-z]{0,5}", proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8))), 0..3)),
                1..50),
        ) {
            let base = 1_600_000_000_000;
            let mut b = BatchBuilder::new(base);
            let mut want = Vec::new();
            for (i, (k, v, dt, hs)) in recs.into_iter().enumerate() {
                let mut r = Record::new(k.as_deref(), v.as_deref(), base + dt);
                r.headers = hs.into_iter().map(|(k, v)| (k, v.map(Bytes::from))).collect();
                r.offset = i as i64;
                want.push(r.clone());
                b.push(r);
            }
            let bytes = b.build();
            let h = BatchHeader::parse(&bytes).unwrap();
            h.validate(&bytes).unwrap();
            prop_assert_eq!(decode_records(&bytes).unwrap(), want);
        }
    }
}

#[cfg(test)]
mod compression_tests {
    use super::*;

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn records() -> Vec<Record> {
        (0..500)
            .map(|i| {
                let mut r = Record::new(
                    Some(format!("key-{}", i % 7).as_bytes()),
                    Some(format!("value {i} {}", "lorem ipsum ".repeat(i % 13)).as_bytes()),
                    1_000 + i as i64,
                );
                r.headers = vec![("h".into(), Some(Bytes::from_static(b"v")))];
                r
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_shrinks_the_batch() {
        let plain = {
            let mut b = BatchBuilder::new(1_000);
            records().into_iter().for_each(|r| b.push(r));
            b.build()
        };
        for codec in CODECS {
            let mut b = BatchBuilder::new(1_000).with_compression(codec);
            records().into_iter().for_each(|r| b.push(r));
            let batch = b.build();
            let h = BatchHeader::parse(&batch).unwrap();
            h.validate(&batch).unwrap();
            assert_eq!(h.compression().unwrap(), codec);
            assert!(
                batch.len() < plain.len() / 2,
                "{codec:?}: {} bytes",
                batch.len()
            );
            let got = decode_records(&batch).unwrap();
            let want = decode_records(&plain).unwrap();
            assert_eq!(got, want, "{codec:?}");
            assert_eq!(first_at_or_after(&batch, 1_250), Some((250, 1_250)));
        }
    }

    #[test]
    fn garbage_in_a_compressed_batch_is_an_error_not_a_panic() {
        for codec in CODECS {
            let mut b = BatchBuilder::new(1_000).with_compression(codec);
            records().into_iter().for_each(|r| b.push(r));
            let mut raw = b.build().to_vec();
            let mid = HEADER_LEN + (raw.len() - HEADER_LEN) / 2;
            for byte in &mut raw[mid..] {
                *byte ^= 0x5a;
            }
            // Re-seal the CRC: the damage is inside a well-formed batch.
            let crc = crc32c::crc32c(&raw[21..]);
            raw[17..21].copy_from_slice(&crc.to_be_bytes());
            assert!(decode_records(&Bytes::from(raw)).is_err(), "{codec:?}");
        }
        // A snappy stream claiming a huge length is refused before allocating it.
        let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(crate::compression::decompress(Compression::Snappy, &bomb).is_err());
    }
}
