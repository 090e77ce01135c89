//! Structure-aware fuzzing of the RecordBatch decoders: batches built from arbitrary
//! records, in every codec, mutated in their header fields or in their records
//! section (before compression, so the damage survives decompression and reaches the
//! record decoder), with length and CRC made right again so the mutation gets past the
//! checks that would otherwise stop it at the door. Every decoder must answer or
//! refuse, never panic; what validates must decode, and cleans (log compaction) into
//! a subset of its records. `PROPTEST_CASES` raises the count
//! (infra/fuzz.sh runs it for longer).

use bytes::Bytes;
use proptest::prelude::*;

use crate::batch::{BatchHeader, BatchIter, Compression, HEADER_LEN};
use crate::compression::{compress, recompress};
use crate::fuzzing::{apply, cases, mutation};
use crate::record::{BatchBuilder, Record, decode_records, first_at_or_after};
const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

type Spec = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    Vec<(String, Option<Vec<u8>>)>,
);

fn records() -> impl Strategy<Value = Vec<Spec>> {
    proptest::collection::vec(
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
            0i64..100_000,
            proptest::collection::vec(
                (
                    "[a-z]{0,4}",
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..6)),
                ),
                0..3,
            ),
        ),
        1..12,
    )
}

/// An uncompressed batch of `specs`.
fn plain(specs: &[Spec]) -> Vec<u8> {
    let base = 1_700_000_000_000;
    let mut b = BatchBuilder::new(base);
    for (k, v, dt, hs) in specs {
        let mut r = Record::new(k.as_deref(), v.as_deref(), base + dt);
        r.headers = hs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().map(Bytes::from)))
            .collect();
        b.push(r);
    }
    b.build().to_vec()
}

/// The batch with `records` (plain) as its records section in `codec`, and its
/// length and CRC recomputed.
fn assemble(header: &[u8], records: &[u8], codec: Compression) -> Vec<u8> {
    let section = compress(codec, records);
    let mut out = header[..HEADER_LEN].to_vec();
    out.extend_from_slice(&section);
    let attributes = (i16::from_be_bytes([out[21], out[22]]) & !0x07) | codec.attribute_bits();
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    reseal(&mut out);
    out
}

/// Length and CRC made right for the bytes as they are.
fn reseal(b: &mut [u8]) {
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Every decoder over `batch`: none may panic, and a batch that validates decodes
/// and recompresses.
fn decode_all(batch: &[u8]) -> Result<(), TestCaseError> {
    let bytes = Bytes::copy_from_slice(batch);
    let valid = BatchHeader::parse(batch)
        .is_ok_and(|h| h.total_size() == batch.len() && h.validate(batch).is_ok());
    let decoded = decode_records(&bytes);
    let _ = first_at_or_after(&bytes, 1_700_000_050_000);
    for item in BatchIter::new(batch).flatten() {
        let _ = item.0.validate(&batch[item.1]);
    }
    // The cleaner's decoders: a damaged batch is refused, never a panic; a good one
    // cleans into a batch that holds a subset of its records, unchanged.
    let _ = crate::compact::for_each_record(batch, |_| {});
    let how = crate::compact::CleanBatch {
        now_ms: 1_700_000_050_000,
        delete_retention_ms: 1_000,
        drop_tombstones: true,
        keep_empty: batch.len().is_multiple_of(2),
        protect_from: i64::MAX,
    };
    let cleaned = crate::compact::clean_batch(batch, how, |r| r.offset % 2 == 0);
    if valid
        && let (Ok(records), Ok(crate::compact::Cleaned::Rewritten(out))) = (&decoded, &cleaned)
    {
        let h = BatchHeader::parse(out).unwrap();
        prop_assert!(h.validate_stored(out).is_ok());
        for r in decode_records(&Bytes::copy_from_slice(out)).unwrap() {
            prop_assert!(
                records.contains(&r),
                "a cleaned record differs from the original"
            );
        }
    }
    if valid && let Ok(records) = &decoded {
        for codec in CODECS {
            let again = recompress(batch, codec).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let h = BatchHeader::parse(&again).unwrap();
            prop_assert!(h.validate(&again).is_ok());
            prop_assert_eq!(&decode_records(&Bytes::from(again)).unwrap(), records);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(2_000)))]

    /// Damage to the records section, under every codec, with the batch resealed.
    #[test]
    fn damaged_records_sections_are_refused_or_decoded(
        specs in records(),
        codec in 0usize..CODECS.len(),
        mutations in proptest::collection::vec(mutation(), 1..5),
    ) {
        let batch = plain(&specs);
        let mut section = batch[HEADER_LEN..].to_vec();
        for m in &mutations {
            apply(&mut section, 0, m);
        }
        decode_all(&assemble(&batch, &section, CODECS[codec]))?;
    }

    /// Damage to a compressed records section (the codec's own framing), resealed.
    #[test]
    fn damaged_compressed_sections_are_refused_or_decoded(
        specs in records(),
        codec in 1usize..CODECS.len(),
        mutations in proptest::collection::vec(mutation(), 1..5),
    ) {
        let mut batch = assemble(&plain(&specs), &plain(&specs)[HEADER_LEN..], CODECS[codec]);
        let mut section = batch.split_off(HEADER_LEN);
        for m in &mutations {
            apply(&mut section, 0, m);
        }
        batch.extend_from_slice(&section);
        reseal(&mut batch);
        decode_all(&batch)?;
    }

    /// Damage to the header's fields (counts, deltas, attributes, timestamps, producer
    /// fields) with the CRC made right: refused or decoded, never a panic.
    #[test]
    fn damaged_headers_are_refused_or_decoded(
        specs in records(),
        codec in 0usize..CODECS.len(),
        at in 21usize..HEADER_LEN,
        value in any::<u8>(),
        raw_length in any::<bool>(),
    ) {
        let p = plain(&specs);
        let mut batch = assemble(&p, &p[HEADER_LEN..], CODECS[codec]);
        batch[at] = value;
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        if raw_length {
            // And a batch length that no longer matches the bytes.
            batch[11] ^= value;
        }
        decode_all(&batch)?;
    }

    /// Several batches back to back, one of them damaged, through the iterator that
    /// recovery and the fetch path use: it yields the good batches before the damage.
    #[test]
    fn a_damaged_batch_in_a_run_stops_the_run_there(
        specs in proptest::collection::vec(records(), 2..5),
        victim in any::<usize>(),
        mutation in mutation(),
    ) {
        let batches: Vec<Vec<u8>> = specs.iter().map(|s| plain(s)).collect();
        let victim = victim % batches.len();
        let mut run = Vec::new();
        let mut starts = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            starts.push(run.len());
            let mut b = b.clone();
            if i == victim {
                apply(&mut b, 0, &mutation);
            }
            run.extend_from_slice(&b);
        }
        let mut good = 0;
        for item in BatchIter::new(&run) {
            let Ok((h, range)) = item else { break };
            if h.validate(&run[range.clone()]).is_err() {
                break;
            }
            decode_all(&run[range])?;
            good += 1;
        }
        // Every batch before the damaged one is read whole.
        prop_assert!(good >= victim, "{good} good batches before the damage at {victim}");
    }
}
