//! Checks of the batches a partition is given before anything is written: a
//! producer's (framing, size, CRC, format, keys on a compacted topic) and a leader's
//! (as stored: cleaned batches may hold fewer records), and recompression to the
//! topic's `compression.type`.

use shale_records::batch::{self, BatchHeader};

use crate::error::{Error, Result};

/// The batches of `records` (with their `headers`) with every batch not in `codec`
/// recompressed to it (`compression.type`).
pub(super) fn recompress_batches(
    records: &[u8],
    headers: &[BatchHeader],
    codec: shale_records::batch::Compression,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(records.len());
    let mut pos = 0;
    for h in headers {
        let batch = &records[pos..pos + h.total_size()];
        if h.compression()? == codec {
            out.extend_from_slice(batch);
        } else {
            out.extend_from_slice(&shale_records::compression::recompress(batch, codec)?);
        }
        pos += h.total_size();
    }
    Ok(out)
}

/// Checks every batch a producer sent: framing, size limit, CRC, format. Returns the
/// headers in order.
pub(super) fn validate_batches(records: &[u8], max_message_bytes: i64) -> Result<Vec<BatchHeader>> {
    check_batches(records, max_message_bytes, true)
}

/// Checks the batches a leader sent a follower: as a produce, except that a batch a
/// cleaning rewrote may hold fewer records than its offset span, or none.
pub(crate) fn validate_replicated_batches(records: &[u8]) -> Result<Vec<BatchHeader>> {
    check_batches(records, i64::MAX, false)
}

/// `produced`: a producer's batches (else a leader's, as stored).
fn check_batches(
    records: &[u8],
    max_message_bytes: i64,
    produced: bool,
) -> Result<Vec<BatchHeader>> {
    if records.is_empty() {
        return Err(Error::InvalidRecord(
            "the request holds no record batch".into(),
        ));
    }
    let mut headers = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let rest = &records[pos..];
        let h = BatchHeader::parse(rest)?;
        if h.total_size() > rest.len() {
            return Err(Error::CorruptMessage(batch::BatchError::Truncated {
                needed: h.total_size(),
                available: rest.len(),
            }));
        }
        if h.total_size() as i64 > max_message_bytes {
            return Err(Error::MessageTooLarge {
                size: h.total_size(),
                max: max_message_bytes,
            });
        }
        let batch = &rest[..h.total_size()];
        if produced {
            h.validate(batch)?;
        } else {
            h.validate_stored(batch)?;
        }
        if produced && h.delete_horizon().is_some() {
            // Only the cleaner writes a delete horizon (a producer's would let its
            // tombstones go at once, and shift its records' timestamps).
            return Err(Error::InvalidRecord(
                "a produced batch must not carry the delete-horizon attribute (bit 6)".into(),
            ));
        }
        if produced && h.is_control() {
            // Only a transaction coordinator writes markers; a leader's copies of
            // them replicate like any batch.
            return Err(Error::InvalidRecord(
                "control batches cannot be produced".into(),
            ));
        }
        headers.push(h);
        pos += h.total_size();
    }
    Ok(headers)
}

/// A compacted topic keeps the latest record of each key: a record without one is
/// refused (INVALID_RECORD, as Kafka does).
pub(super) fn require_keys(records: &[u8], headers: &[BatchHeader]) -> Result<()> {
    let mut pos = 0;
    for h in headers {
        let mut keyless = None;
        shale_records::compact::for_each_record(&records[pos..pos + h.total_size()], |r| {
            if r.key.is_none() && keyless.is_none() {
                keyless = Some(r.offset - h.base_offset);
            }
        })?;
        if let Some(at) = keyless {
            return Err(Error::InvalidRecord(format!(
                "record {at} of a batch has no key: a compacted topic (cleanup.policy=compact) \
                 needs a key on every record"
            )));
        }
        pos += h.total_size();
    }
    Ok(())
}
