//! Kafka's message formats before RecordBatch v2 (message sets of magic 0 and 1), for
//! clients that still speak them: a produced message set is converted up to one
//! RecordBatch v2 (what the log stores), and stored batches are converted down for
//! Fetch versions that predate v2 (0–1 read magic 0, 2–3 magic 1).
//!
//! A message is: offset (i64), size (i32), then CRC-32 (IEEE) of the rest, magic (i8),
//! attributes (i8: codec in bits 0–2, LogAppendTime in bit 3 from magic 1),
//! timestamp (i64, magic 1 only), key and value (i32 length, -1 for null). A
//! compressed message's value is a compressed message set (its "inner" messages).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchHeader, Compression};
use crate::compression::decompress;
use crate::record::{BatchBuilder, Record, decode_records};

/// Most bytes a produced message set may decompress to, all wrappers together.
pub const MAX_SET_DECOMPRESSED: usize = 64 << 20;

/// Magic 0 and 1 messages before the key: CRC, magic, attributes.
const MESSAGE_HEADER: usize = 4 + 1 + 1;
/// Timestamp of magic 0 messages, converted up: none.
const NO_TIMESTAMP: i64 = -1;
const TIMESTAMP_TYPE_BIT: i8 = 0x08;

fn invalid(why: &'static str) -> BatchError {
    BatchError::Invalid(why)
}

fn codec(attributes: i8) -> Result<Compression, BatchError> {
    Ok(match attributes & 0x07 {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        c => return Err(BatchError::UnsupportedCompression(i16::from(c))),
    })
}

/// A produced message set (magic 0 or 1, compressed or not) as one uncompressed
/// RecordBatch v2 of the same records, in order; magic 0 messages have no timestamp
/// (-1), and messages of a LogAppendTime wrapper get `now_ms`. Returns the batch and
/// its number of records. A CRC mismatch, a truncated message, a magic other than 0
/// or 1, or an empty set is an error: nothing of the set is kept.
pub fn to_batch(set: &[u8], now_ms: i64) -> Result<(Bytes, usize), BatchError> {
    let mut records = Vec::new();
    let mut budget = MAX_SET_DECOMPRESSED;
    read_set(set, now_ms, &mut records, 0, &mut budget)?;
    if records.is_empty() {
        return Err(invalid("an empty message set"));
    }
    let base = records
        .iter()
        .map(|r| r.timestamp)
        .min()
        .unwrap_or(NO_TIMESTAMP);
    let max = records
        .iter()
        .map(|r| r.timestamp)
        .max()
        .unwrap_or(NO_TIMESTAMP);
    if max.checked_sub(base).is_none() {
        return Err(invalid("timestamps too far apart for one batch"));
    }
    let mut b = BatchBuilder::new(base);
    let n = records.len();
    for r in records {
        b.push(r);
    }
    Ok((b.build(), n))
}

fn read_set(
    mut set: &[u8],
    now_ms: i64,
    out: &mut Vec<Record>,
    depth: u8,
    budget: &mut usize,
) -> Result<(), BatchError> {
    while !set.is_empty() {
        if set.len() < 12 {
            return Err(invalid("a truncated message"));
        }
        let _offset = set.get_i64();
        let size = set.get_i32();
        let size = usize::try_from(size).map_err(|_| invalid("a negative message size"))?;
        if size < MESSAGE_HEADER + 8 || set.len() < size {
            return Err(invalid("a truncated message"));
        }
        let (mut m, rest) = set.split_at(size);
        set = rest;
        let crc = m.get_u32();
        // The magic sits where RecordBatch v2 has its own: a v2 batch is told apart
        // from a corrupt message.
        if !matches!(m[0], 0 | 1) {
            return Err(BatchError::UnsupportedMagic(m[0] as i8));
        }
        if crc32fast::hash(m) != crc {
            return Err(BatchError::CrcMismatch {
                expected: crc,
                actual: crc32fast::hash(m),
            });
        }
        let magic = m.get_i8();
        let attributes = m.get_i8();
        let timestamp = match magic {
            0 => NO_TIMESTAMP,
            _ if m.len() >= 8 => m.get_i64(),
            _ => return Err(invalid("a truncated message")),
        };
        if timestamp < NO_TIMESTAMP {
            return Err(invalid("a timestamp below -1"));
        }
        let key = bytes(&mut m)?;
        let value = bytes(&mut m)?;
        if !m.is_empty() {
            return Err(invalid("bytes after a message's value"));
        }
        let log_append = magic == 1 && attributes & TIMESTAMP_TYPE_BIT != 0;
        match codec(attributes)? {
            Compression::None => out.push(Record {
                offset: 0,
                timestamp: if log_append { now_ms } else { timestamp },
                key: key.map(Bytes::copy_from_slice),
                value: value.map(Bytes::copy_from_slice),
                headers: Vec::new(),
            }),
            c => {
                if depth > 0 {
                    return Err(invalid("a compressed message inside a compressed one"));
                }
                let inner = decompress(c, value.unwrap_or_default())?;
                *budget = budget.checked_sub(inner.len()).ok_or(invalid(
                    "a message set that decompresses to more than 64 MiB",
                ))?;
                let from = out.len();
                read_set(&inner, now_ms, out, depth + 1, budget)?;
                if log_append {
                    for r in &mut out[from..] {
                        r.timestamp = now_ms;
                    }
                }
            }
        }
    }
    Ok(())
}

fn bytes<'a>(m: &mut &'a [u8]) -> Result<Option<&'a [u8]>, BatchError> {
    if m.len() < 4 {
        return Err(invalid("a truncated message"));
    }
    let len = m.get_i32();
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if m.len() < len {
        return Err(invalid("a truncated message"));
    }
    let (b, rest) = m.split_at(len);
    *m = rest;
    Ok(Some(b))
}

/// Stored RecordBatch v2 bytes (whole batches, perhaps with a partial one at the end,
/// which is left out) as an uncompressed message set of `magic` 0 or 1, from record
/// `from` on. Control batches are left out, and headers (which the old formats lack).
/// Returns the set and its number of messages.
pub fn to_message_set(mut batches: Bytes, magic: i8, from: i64) -> (Bytes, usize) {
    debug_assert!(magic == 0 || magic == 1);
    let mut out = BytesMut::new();
    let mut n = 0;
    while let Ok(h) = BatchHeader::parse(&batches) {
        let size = h.total_size();
        if size > batches.len() {
            break;
        }
        let batch = batches.split_to(size);
        if h.is_control() {
            continue;
        }
        let Ok(records) = decode_records(&batch) else {
            break;
        };
        let log_append = h.is_log_append_time();
        for r in records.into_iter().filter(|r| r.offset >= from) {
            put_message(&mut out, magic, log_append, &r);
            n += 1;
        }
    }
    (out.freeze(), n)
}

fn put_message(out: &mut BytesMut, magic: i8, log_append: bool, r: &Record) {
    out.put_i64(r.offset);
    let size_at = out.len();
    out.put_i32(0); // size, set below
    out.put_u32(0); // CRC, set below
    let crc_from = out.len();
    out.put_i8(magic);
    out.put_i8(if magic == 1 && log_append {
        TIMESTAMP_TYPE_BIT
    } else {
        0
    });
    if magic == 1 {
        out.put_i64(r.timestamp);
    }
    for b in [&r.key, &r.value] {
        match b {
            Some(b) => {
                out.put_i32(b.len() as i32);
                out.put_slice(b);
            }
            None => out.put_i32(-1),
        }
    }
    let crc = crc32fast::hash(&out[crc_from..]);
    out[crc_from - 4..crc_from].copy_from_slice(&crc.to_be_bytes());
    let size = (out.len() - size_at - 4) as i32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compression::compress;

    fn rec(key: Option<&str>, value: Option<&str>, ts: i64) -> Record {
        Record::new(key.map(str::as_bytes), value.map(str::as_bytes), ts)
    }

    fn set(magic: i8, records: &[Record]) -> Bytes {
        let mut out = BytesMut::new();
        for (i, r) in records.iter().enumerate() {
            let mut r = r.clone();
            r.offset = i as i64;
            put_message(&mut out, magic, false, &r);
        }
        out.freeze()
    }

    fn wrapped(magic: i8, c: Compression, code: u8, inner: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        let value = Bytes::from(compress(c, inner));
        let mut w = rec(None, None, 5);
        w.value = Some(value);
        put_message(&mut out, magic, false, &w);
        // The codec in the wrapper's attributes (byte 17: after offset, size, CRC, magic).
        out[17] = code;
        let crc = crc32fast::hash(&out[16..]);
        out[12..16].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }

    fn values(batch: &Bytes) -> Vec<(Option<Bytes>, Option<Bytes>, i64)> {
        decode_records(batch)
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.value, r.timestamp))
            .collect()
    }

    #[test]
    fn message_sets_of_both_magics_convert_up_and_back_down() {
        let records = [
            rec(Some("k"), Some("v1"), 1_000),
            rec(None, Some("v2"), 1_001),
            rec(Some("tombstone"), None, 1_002),
        ];
        let (batch, n) = to_batch(&set(1, &records), 9).unwrap();
        assert_eq!(n, 3);
        let want: Vec<_> = records
            .iter()
            .map(|r| (r.key.clone(), r.value.clone(), r.timestamp))
            .collect();
        assert_eq!(values(&batch), want);
        // Magic 0 has no timestamps.
        let (batch0, _) = to_batch(&set(0, &records), 9).unwrap();
        assert!(values(&batch0).iter().all(|v| v.2 == NO_TIMESTAMP));

        // Down from offset 1 of a batch at base offset 10, then up again.
        let mut stored = BytesMut::from(&batch[..]);
        stored[..8].copy_from_slice(&10i64.to_be_bytes());
        for magic in [0, 1] {
            let (down, n) = to_message_set(stored.clone().freeze(), magic, 11);
            assert_eq!(n, 2);
            let (up, _) = to_batch(&down, 9).unwrap();
            let got = values(&up);
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].1.as_deref(), Some(&b"v2"[..]));
            assert_eq!(got[1].0.as_deref(), Some(&b"tombstone"[..]));
            assert_eq!(got[1].1, None);
            let ts = if magic == 1 { 1_001 } else { NO_TIMESTAMP };
            assert_eq!(got[0].2, ts);
        }
    }

    #[test]
    fn compressed_wrappers_convert_and_bad_messages_are_refused() {
        let inner = set(1, &[rec(None, Some("a"), 7), rec(None, Some("b"), 8)]);
        for (c, code) in [
            (Compression::Gzip, 1),
            (Compression::Snappy, 2),
            (Compression::Lz4, 3),
        ] {
            let (batch, n) = to_batch(&wrapped(1, c, code, &inner), 9).unwrap();
            assert_eq!(n, 2, "{c:?}");
            assert_eq!(values(&batch)[1].1.as_deref(), Some(&b"b"[..]));
        }
        let good = set(1, &[rec(None, Some("x"), 1)]);
        let mut bad_crc = BytesMut::from(&good[..]);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        assert!(matches!(
            to_batch(&bad_crc, 0),
            Err(BatchError::CrcMismatch { .. })
        ));
        assert!(to_batch(&good[..good.len() - 1], 0).is_err(), "truncated");
        let mut v2 = BatchBuilder::new(0);
        v2.push(rec(None, Some("v2"), 0));
        assert!(matches!(
            to_batch(&v2.build(), 0),
            Err(BatchError::UnsupportedMagic(2))
        ));
        assert!(to_batch(&[], 0).is_err(), "empty");
        // A timestamp below -1; a set that decompresses past the limit.
        let mut early = rec(None, Some("x"), 1);
        early.timestamp = -5;
        assert!(to_batch(&set(1, &[early]), 0).is_err());
        let bomb_value = vec![0u8; MAX_SET_DECOMPRESSED];
        let mut bomb = rec(None, None, 1);
        bomb.value = Some(Bytes::from(bomb_value));
        let mut inner_big = BytesMut::new();
        put_message(&mut inner_big, 1, false, &bomb);
        let wrapper = wrapped(1, Compression::Gzip, 1, &inner_big);
        assert!(
            to_batch(&wrapper, 0).is_err(),
            "over the decompression limit"
        );
        let zstd = wrapped(1, Compression::Zstd, 4, &inner);
        assert!(matches!(
            to_batch(&zstd, 0),
            Err(BatchError::UnsupportedCompression(4))
        ));
    }

    proptest::proptest! {
        /// Any bytes convert or are refused; never a panic.
        #[test]
        fn any_bytes_convert_or_are_refused(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        ) {
            let _ = to_batch(&bytes, 0);
            let _ = to_message_set(Bytes::from(bytes), 1, 0);
        }
    }

    #[test]
    fn a_partial_batch_at_the_end_is_left_out() {
        let mut b = BatchBuilder::new(0);
        b.push(rec(None, Some("one"), 0));
        let one = b.build();
        let mut two = BytesMut::from(&one[..]);
        two.extend_from_slice(&one[..one.len() - 3]);
        let (set, n) = to_message_set(two.freeze(), 1, 0);
        assert_eq!(n, 1);
        assert_eq!(to_batch(&set, 0).unwrap().1, 1);
    }
}
