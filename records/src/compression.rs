//! The four Kafka codecs of a RecordBatch's records section, in the framings Kafka's
//! Java client writes: gzip, Snappy in xerial framing (raw Snappy is also read), LZ4
//! frames, and zstd frames. Decompression is capped so a small batch cannot expand
//! without bound.

use std::io::{Read, Write};

use crate::batch::{
    ATTRIBUTES_OFFSET, BatchError, BatchHeader, COMPRESSION_MASK, CRC_OFFSET, Compression,
    HEADER_LEN, LOG_OVERHEAD,
};

/// Largest decompressed records section accepted.
pub const MAX_DECOMPRESSED: usize = 256 << 20;

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_BLOCK: usize = 32 * 1024;

fn corrupt(_: impl std::fmt::Display) -> BatchError {
    BatchError::Invalid("compressed records do not decompress")
}

pub fn compress(codec: Compression, data: &[u8]) -> Vec<u8> {
    match codec {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).expect("writing to memory");
            e.finish().expect("writing to memory")
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(data.len() / 2 + 32);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // minimum compatible version
            let mut enc = snap::raw::Encoder::new();
            for block in data.chunks(XERIAL_BLOCK) {
                let c = enc.compress_vec(block).expect("snappy block fits");
                out.extend_from_slice(&(c.len() as i32).to_be_bytes());
                out.extend_from_slice(&c);
            }
            out
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).expect("writing to memory");
            e.finish().expect("writing to memory")
        }
        Compression::Zstd => zstd::bulk::compress(data, 1).expect("zstd level 1"),
    }
}

pub fn decompress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    let limit = MAX_DECOMPRESSED as u64 + 1;
    match codec {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => {
            flate2::read::GzDecoder::new(data)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(corrupt)?;
        }
        Compression::Snappy => {
            let mut dec = snap::raw::Decoder::new();
            if let Some(mut rest) = data.strip_prefix(XERIAL_MAGIC) {
                rest = rest
                    .get(8..)
                    .ok_or_else(|| corrupt("short xerial header"))?;
                while !rest.is_empty() {
                    let len = rest
                        .get(..4)
                        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .and_then(|l| usize::try_from(l).ok())
                        .ok_or_else(|| corrupt("bad xerial block length"))?;
                    let block = rest.get(4..4 + len).ok_or_else(|| corrupt("short block"))?;
                    if out.len() + snap::raw::decompress_len(block).map_err(corrupt)?
                        > MAX_DECOMPRESSED
                    {
                        return Err(corrupt("too large"));
                    }
                    out.extend_from_slice(&dec.decompress_vec(block).map_err(corrupt)?);
                    rest = &rest[4 + len..];
                }
            } else {
                if snap::raw::decompress_len(data).map_err(corrupt)? > MAX_DECOMPRESSED {
                    return Err(corrupt("too large"));
                }
                out = dec.decompress_vec(data).map_err(corrupt)?;
            }
        }
        Compression::Lz4 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(corrupt)?;
        }
        Compression::Zstd => {
            zstd::stream::read::Decoder::new(data)
                .map_err(corrupt)?
                .take(limit)
                .read_to_end(&mut out)
                .map_err(corrupt)?;
        }
    }
    if out.len() > MAX_DECOMPRESSED {
        return Err(BatchError::Invalid(
            "records decompress to more than 256 MiB",
        ));
    }
    Ok(out)
}

/// The batch `batch` (exactly one, already validated) with its records section in
/// `codec` instead of its own: the records are decompressed and compressed again, the
/// attributes name the new codec, and length and CRC are recomputed. Every other field
/// (offsets, timestamps, producer id, epoch and sequence) stays. A topic whose
/// `compression.type` names a codec stores its batches so.
pub fn recompress(batch: &[u8], codec: Compression) -> Result<Vec<u8>, BatchError> {
    let h = BatchHeader::parse(batch)?;
    let records = decompress(h.compression()?, &batch[HEADER_LEN..])?;
    let records = compress(codec, &records);
    let mut out = Vec::with_capacity(HEADER_LEN + records.len());
    out.extend_from_slice(&batch[..HEADER_LEN]);
    out.extend_from_slice(&records);
    let length = i32::try_from(out.len() - LOG_OVERHEAD)
        .map_err(|_| BatchError::Invalid("recompressed batch is too large"))?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = (h.attributes & !COMPRESSION_MASK) | codec.attribute_bits();
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}
