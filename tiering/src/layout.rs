//! Where a remote segment's objects live. Keys are self-describing, so a bucket can be
//! re-attached without the database:
//! `{topic_id}/{partition}/{base_offset:020}-{end_offset:020}-{segment_id}.{log|indexes|meta}`
//! (under the store's prefix): three objects a segment. `.meta` is a small JSON
//! document describing the segment; `.indexes` holds its offset index, time index and
//! key filter (see `shale_records::keyfilter`) together ([`SegmentIndexes`]), so a
//! reader needs one GET for all three. Segments copied before that have `.index`,
//! `.timeindex` and `.keys` objects instead (and no `.keys` if copied before filters
//! existed); they are read as they are.

use object_store::path::Path;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The objects of one remote segment: `.log`, `.indexes` and `.meta`, or in segments
/// copied before `.indexes`, `.index`, `.timeindex` and `.keys` in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Log,
    Indexes,
    Meta,
    Index,
    TimeIndex,
    Keys,
}

impl ObjectKind {
    /// Every kind a segment's objects may have (what deleting a segment removes, in
    /// this order: `.meta`, which describes the others, goes last).
    pub const ALL: [ObjectKind; 6] = [
        ObjectKind::Log,
        ObjectKind::Indexes,
        ObjectKind::Index,
        ObjectKind::TimeIndex,
        ObjectKind::Keys,
        ObjectKind::Meta,
    ];

    /// The kinds a segment copied now has.
    pub const WRITTEN: [ObjectKind; 3] = [ObjectKind::Log, ObjectKind::Indexes, ObjectKind::Meta];

    /// The extension of this kind's objects (`log`, `meta`, …).
    pub(crate) fn extension(self) -> &'static str {
        match self {
            ObjectKind::Log => "log",
            ObjectKind::Indexes => "indexes",
            ObjectKind::Meta => "meta",
            ObjectKind::Index => "index",
            ObjectKind::TimeIndex => "timeindex",
            ObjectKind::Keys => "keys",
        }
    }
}

/// The `.indexes` object: a 16-byte header (`SHIX`, then the lengths of the offset
/// index, the time index and the key filter as big-endian u32, the last
/// `u32::MAX` for none), then the three, back to back, each as its local file holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentIndexes<'a> {
    pub offset_index: &'a [u8],
    pub time_index: &'a [u8],
    pub key_filter: Option<&'a [u8]>,
}

const INDEXES_MAGIC: &[u8; 4] = b"SHIX";
const INDEXES_HEADER: usize = 16;

impl<'a> SegmentIndexes<'a> {
    pub fn encode(&self) -> Vec<u8> {
        let keys = self.key_filter.unwrap_or_default();
        let mut out = Vec::with_capacity(
            INDEXES_HEADER + self.offset_index.len() + self.time_index.len() + keys.len(),
        );
        out.extend_from_slice(INDEXES_MAGIC);
        for len in [
            self.offset_index.len() as u32,
            self.time_index.len() as u32,
            self.key_filter.map_or(u32::MAX, |k| k.len() as u32),
        ] {
            out.extend_from_slice(&len.to_be_bytes());
        }
        out.extend_from_slice(self.offset_index);
        out.extend_from_slice(self.time_index);
        out.extend_from_slice(keys);
        out
    }

    /// The parts of an encoded object; an error says what does not hold together.
    pub fn decode(b: &'a [u8]) -> Result<Self, String> {
        if b.len() < INDEXES_HEADER || &b[..4] != INDEXES_MAGIC {
            return Err("not an indexes object (no SHIX header)".into());
        }
        let len = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (index, time, keys) = (len(4) as usize, len(8) as usize, len(12));
        let keys_len = if keys == u32::MAX { 0 } else { keys as usize };
        let want = INDEXES_HEADER + index + time + keys_len;
        if b.len() != want {
            return Err(format!("{} bytes where the header says {want}", b.len()));
        }
        let (time_at, keys_at) = (INDEXES_HEADER + index, INDEXES_HEADER + index + time);
        Ok(Self {
            offset_index: &b[INDEXES_HEADER..time_at],
            time_index: &b[time_at..keys_at],
            key_filter: (keys != u32::MAX).then(|| &b[keys_at..]),
        })
    }
}

/// Identity of a remote segment: enough to name its objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentKey {
    pub topic_id: Uuid,
    pub partition: i32,
    pub base_offset: i64,
    /// Inclusive.
    pub end_offset: i64,
    pub segment_id: Uuid,
}

impl SegmentKey {
    /// The key of a remote segment the metastore knows.
    pub fn of(seg: &shale_metastore::RemoteSegment) -> Self {
        Self {
            topic_id: seg.topic_id,
            partition: seg.partition,
            base_offset: seg.base_offset,
            end_offset: seg.object_end_offset,
            segment_id: seg.segment_id,
        }
    }

    pub fn path(&self, kind: ObjectKind) -> Path {
        Path::from(format!(
            "{}/{}/{:020}-{:020}-{}.{}",
            self.topic_id,
            self.partition,
            self.base_offset,
            self.end_offset,
            self.segment_id,
            kind.extension()
        ))
    }

    /// Parses a key written by [`SegmentKey::path`].
    pub fn parse(path: &Path) -> Option<(Self, ObjectKind)> {
        let mut parts = path.parts();
        let topic_id = parts.next()?.as_ref().parse().ok()?;
        let partition = parts.next()?.as_ref().parse().ok()?;
        let file = parts.next()?;
        let (stem, ext) = file.as_ref().rsplit_once('.')?;
        let kind = ObjectKind::ALL.into_iter().find(|k| k.extension() == ext)?;
        let (base, rest) = stem.split_once('-')?;
        let (end, id) = rest.split_once('-')?;
        let key = SegmentKey {
            topic_id,
            partition,
            base_offset: base.parse().ok()?,
            end_offset: end.parse().ok()?,
            segment_id: id.parse().ok()?,
        };
        Some((key, kind))
    }
}

/// Content of the `.meta` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub segment_id: Uuid,
    pub base_offset: i64,
    pub end_offset: i64,
    pub max_timestamp: i64,
    pub leader_epoch: i32,
    pub log_bytes: u64,
    pub index_bytes: u64,
    pub time_index_bytes: u64,
    /// CRC-32C of each object's bytes.
    pub log_crc32c: u32,
    pub index_crc32c: u32,
    pub time_index_crc32c: u32,
    /// The key filter's object (its file name), size and CRC-32C; absent for a
    /// segment copied without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_filter: Option<KeyFilterObject>,
    /// The leader epochs of the segment's batches with the offset each starts at
    /// (absent in objects written before they were recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub epochs: Vec<(i32, i64)>,
    /// The `.indexes` object (its file name) holding the offset index, the time
    /// index and the key filter; absent for a segment copied with them as objects
    /// of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexes: Option<String>,
    /// The segments a compacted rewrite replaces (empty: a copy of the log; absent in
    /// objects written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<Vec<Uuid>>,
}

/// The key filter as `.meta` names it: in the `.indexes` object (`object` names it),
/// or in a `.keys` object of its own (segments copied before `.indexes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFilterObject {
    pub object: String,
    pub bytes: u64,
    pub crc32c: u32,
}

impl SegmentMeta {
    /// The key of the segment this document describes.
    pub fn key(&self) -> SegmentKey {
        SegmentKey {
            topic_id: self.topic_id,
            partition: self.partition,
            base_offset: self.base_offset,
            end_offset: self.end_offset,
            segment_id: self.segment_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let key = SegmentKey {
            topic_id: Uuid::new_v4(),
            partition: 7,
            base_offset: 1000,
            end_offset: 1999,
            segment_id: Uuid::new_v4(),
        };
        for kind in ObjectKind::ALL {
            let path = key.path(kind);
            assert!(path.as_ref().starts_with(&format!(
                "{}/7/00000000000000001000-00000000000000001999-",
                key.topic_id
            )));
            assert_eq!(SegmentKey::parse(&path), Some((key, kind)));
        }
        assert_eq!(SegmentKey::parse(&Path::from("x/1/abc.log")), None);
    }

    #[test]
    fn indexes_round_trip_and_damage_is_refused() {
        for keys in [None, Some(&b"filter"[..]), Some(&b""[..])] {
            let parts = SegmentIndexes {
                offset_index: &[1, 2, 3, 4, 5, 6, 7, 8],
                time_index: &[9; 12],
                key_filter: keys,
            };
            let encoded = parts.encode();
            assert_eq!(SegmentIndexes::decode(&encoded), Ok(parts));
            assert!(SegmentIndexes::decode(&encoded[..encoded.len() - 1]).is_err());
            let mut longer = encoded.clone();
            longer.push(0);
            assert!(SegmentIndexes::decode(&longer).is_err());
        }
        assert!(SegmentIndexes::decode(b"SHI").is_err());
        assert!(SegmentIndexes::decode(&[0; 16]).is_err());
    }
}
