//! Key filters of sealed segments: `{base_offset:020}.keys` beside the segment (the
//! format is [`shale_records::keyfilter`]'s). A filter is built after its segment
//! seals, outside the partition's lock, by reading the sealed file; it is written to a
//! temporary file and fsynced, then installed (renamed) under the partition's lock by
//! [`PartitionLog::install_key_filter`], only if the segment is still there, sealed,
//! the same size, and the log was not truncated since the segment was listed: a
//! follower's truncation can rewrite a sealed segment, and a filter of bytes that are
//! gone would hide keys. Truncation, reset, deletion, reopening the active segment and
//! creating a segment remove the filter at that base, under the same lock; open removes
//! temporary files and filters without a segment. A filter whose size or last offset
//! does not match its segment is ignored and rebuilt, never trusted.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use shale_records::batch::{BatchHeader, HEADER_LEN};
use shale_records::keyfilter::{KeyFilter, KeyFilterBuilder};

use crate::SealedSegmentInfo;

use crate::layout::KEYS_SUFFIX;

/// Where a segment's key filter lives.
pub fn key_filter_path(log_path: &Path) -> PathBuf {
    log_path.with_extension(KEYS_SUFFIX)
}

/// The segment's filter, if one exists on disk and describes this very segment.
pub fn read_key_filter(seg: &SealedSegmentInfo) -> Option<KeyFilter> {
    let bytes = std::fs::read(key_filter_path(&seg.log_path)).ok()?;
    let filter = KeyFilter::decode(&bytes).ok()?;
    matches(&filter, seg).then_some(filter)
}

/// Whether a filter describing this segment is on disk (its header alone is read).
pub fn has_key_filter(seg: &SealedSegmentInfo) -> bool {
    let mut header = [0u8; KeyFilter::HEADER_LEN];
    File::open(key_filter_path(&seg.log_path))
        .and_then(|mut f| f.read_exact(&mut header))
        .ok()
        .and_then(|()| KeyFilter::summary_of(&header).ok())
        .is_some_and(|s| describes(&s, seg))
}

fn matches(f: &KeyFilter, seg: &SealedSegmentInfo) -> bool {
    describes(&f.summary, seg)
}

fn describes(s: &shale_records::keyfilter::FilterSummary, seg: &SealedSegmentInfo) -> bool {
    s.log_bytes == seg.size_bytes && (s.records == 0 || s.last_offset == seg.end_offset)
}

/// Builds the filter of a sealed segment from its file, reading it once in order.
pub fn build_key_filter(seg: &SealedSegmentInfo) -> io::Result<KeyFilter> {
    let bad = |e: shale_records::batch::BatchError| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", seg.log_path.display()),
        )
    };
    let mut r = BufReader::with_capacity(1 << 20, File::open(&seg.log_path)?);
    let mut b = KeyFilterBuilder::new();
    let mut pos = 0u64;
    let mut head = [0u8; HEADER_LEN];
    while pos < seg.size_bytes {
        r.read_exact(&mut head)?;
        let h = BatchHeader::parse(&head).map_err(bad)?;
        if pos + h.total_size() as u64 > seg.size_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: a batch at byte {pos} runs past the segment's end",
                    seg.log_path.display()
                ),
            ));
        }
        let mut batch = vec![0u8; h.total_size()];
        batch[..HEADER_LEN].copy_from_slice(&head);
        r.read_exact(&mut batch[HEADER_LEN..])?;
        b.add_batch(&Bytes::from(batch)).map_err(bad)?;
        pos += h.total_size() as u64;
    }
    Ok(b.finish(seg.size_bytes))
}

/// Writes a filter to a temporary file beside the segment's, fsynced: install it with
/// [`PartitionLog::install_key_filter`].
pub fn write_key_filter_tmp(seg: &SealedSegmentInfo, filter: &KeyFilter) -> io::Result<PathBuf> {
    // Two builders of one filter (the uploader and the background pass) each write
    // their own temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = key_filter_path(&seg.log_path).with_extension(format!("keys.tmp{n}"));
    let mut f = File::create(&tmp)?;
    f.write_all(&filter.encode())?;
    f.sync_all()?;
    Ok(tmp)
}

/// Writes a filter beside a segment that is not part of a log (an exported tail):
/// temporary file, fsync, rename.
pub fn write_key_filter(seg: &SealedSegmentInfo, filter: &KeyFilter) -> io::Result<()> {
    let tmp = write_key_filter_tmp(seg, filter)?;
    std::fs::rename(&tmp, key_filter_path(&seg.log_path))
}

/// The segment's filter: the one on disk if it matches, else built and written now
/// (for segments outside a log; a log's go through [`PartitionLog::install_key_filter`]).
pub fn ensure_key_filter(seg: &SealedSegmentInfo) -> io::Result<KeyFilter> {
    if let Some(f) = read_key_filter(seg) {
        return Ok(f);
    }
    let f = build_key_filter(seg)?;
    write_key_filter(seg, &f)?;
    Ok(f)
}

impl crate::PartitionLog {
    /// Installs a filter written by [`write_key_filter_tmp`] if `seg` is still one of
    /// this log's sealed segments, unchanged, and the log was not truncated since `seg`
    /// was listed; otherwise removes the temporary file. No directory fsync: a filter
    /// lost to a crash is built again.
    pub fn install_key_filter(&self, seg: &SealedSegmentInfo, tmp: &Path) -> io::Result<bool> {
        let current = self
            .sealed_segments_after(seg.base_offset - 1)
            .into_iter()
            .find(|s| s.base_offset == seg.base_offset);
        let unchanged = self.rewrites == seg.generation
            && current
                .is_some_and(|c| c.end_offset == seg.end_offset && c.size_bytes == seg.size_bytes);
        if unchanged {
            std::fs::rename(tmp, key_filter_path(&seg.log_path))?;
        } else {
            let _ = std::fs::remove_file(tmp);
        }
        Ok(unchanged)
    }
}

/// Removes a segment's filter (its segment is deleted, truncated or written again).
pub(crate) fn remove_key_filter(dir: &Path, base_offset: i64) -> io::Result<()> {
    let path = crate::layout::segment_path(dir, base_offset, KEYS_SUFFIX);
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
