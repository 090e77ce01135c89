//! How much one read of records for people (the console's pages, `shale find`)
//! returns at most.

/// Most records one read returns.
pub const MAX_RECORDS_PER_READ: usize = 1000;
/// A read stops once its records' keys and values pass this many bytes (after the
/// first record), so a page of large records stays a page.
pub const MAX_BYTES_PER_READ: usize = 16 << 20;

/// Bytes of a record's key, value and header values.
pub fn record_bytes(r: &shale_records::record::Record) -> usize {
    r.key.as_ref().map_or(0, |k| k.len())
        + r.value.as_ref().map_or(0, |v| v.len())
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum::<usize>()
}
