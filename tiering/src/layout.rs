//! Where a remote segment's objects live. Keys are self-describing, so a bucket can be
//! re-attached without the database:
//! `{topic_id}/{partition}/{base_offset:020}-{end_offset:020}-{segment_id}.{log|indexes|meta}`
//! (under the store's prefix): three objects a segment. `.meta` is a small JSON
//! document describing the segment; `.indexes` holds its offset index, time index and
//! key filter (see `shale_records::keyfilter`) together ([`SegmentIndexes`]), so a
//! reader needs one GET for all three. Segments copied before that have `.index`,
//! `.timeindex` and `.keys` objects instead (and no `.keys` if copied before filters
//! existed); they are read as they are. A segment holding the abort markers of
//! transactions lists them in `.meta` (Kafka's `.txnindex`, which has no object of
//! its own here: most segments have none, and the list is small).

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

/// The `.indexes` object: a header (`SHIX`, then the lengths of the offset index, the
/// time index and the key filter as big-endian u32, the last `u32::MAX` for none), then
/// the three, back to back, each as its local file holds it. A segment copied with the
/// producer state at its end has a `SHI2` header instead, with a fourth length, and the
/// producer snapshot after the key filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentIndexes<'a> {
    pub offset_index: &'a [u8],
    pub time_index: &'a [u8],
    pub key_filter: Option<&'a [u8]>,
    /// The producer state as of the offset after the segment (a log's producer
    /// snapshot file), for a replica whose log starts there.
    pub producer_snapshot: Option<&'a [u8]>,
}

const INDEXES_MAGIC: &[u8; 4] = b"SHIX";
const INDEXES_MAGIC_V2: &[u8; 4] = b"SHI2";
const NONE: u32 = u32::MAX;

impl<'a> SegmentIndexes<'a> {
    pub fn encode(&self) -> Vec<u8> {
        let optional = |part: Option<&[u8]>| part.map_or(NONE, |p| p.len() as u32);
        let mut lengths = vec![
            self.offset_index.len() as u32,
            self.time_index.len() as u32,
            optional(self.key_filter),
        ];
        // Without a producer snapshot, the first format (readable by older brokers).
        let magic = match self.producer_snapshot {
            Some(s) => {
                lengths.push(s.len() as u32);
                INDEXES_MAGIC_V2
            }
            None => INDEXES_MAGIC,
        };
        let parts = [
            Some(self.offset_index),
            Some(self.time_index),
            self.key_filter,
            self.producer_snapshot,
        ];
        let body: usize = parts.iter().flatten().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(4 + 4 * lengths.len() + body);
        out.extend_from_slice(magic);
        for len in lengths {
            out.extend_from_slice(&len.to_be_bytes());
        }
        for part in parts.into_iter().flatten() {
            out.extend_from_slice(part);
        }
        out
    }

    /// The parts of an encoded object; an error says what does not hold together.
    pub fn decode(b: &'a [u8]) -> Result<Self, String> {
        let count = match b.get(..4) {
            Some(m) if m == INDEXES_MAGIC => 3,
            Some(m) if m == INDEXES_MAGIC_V2 => 4,
            _ => return Err("not an indexes object (no SHIX or SHI2 header)".into()),
        };
        let header = 4 + 4 * count;
        if b.len() < header {
            return Err(format!("{} bytes, shorter than its header", b.len()));
        }
        let len =
            |i: usize| u32::from_be_bytes([b[4 + 4 * i], b[5 + 4 * i], b[6 + 4 * i], b[7 + 4 * i]]);
        let mut parts = [None; 4];
        let mut at = header;
        for (i, part) in parts.iter_mut().enumerate().take(count) {
            let n = len(i);
            if n == NONE && i >= 2 {
                continue;
            }
            let end = at
                .checked_add(n as usize)
                .filter(|end| *end <= b.len())
                .ok_or_else(|| format!("{} bytes, shorter than the header says", b.len()))?;
            *part = Some(&b[at..end]);
            at = end;
        }
        if at != b.len() {
            return Err(format!("{} bytes where the header says {at}", b.len()));
        }
        let [
            Some(offset_index),
            Some(time_index),
            key_filter,
            producer_snapshot,
        ] = parts
        else {
            return Err("an offset or time index marked absent".into());
        };
        Ok(Self {
            offset_index,
            time_index,
            key_filter,
            producer_snapshot,
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
    /// The size of the producer snapshot in `.indexes` (absent: copied without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer_snapshot_bytes: Option<u64>,
    /// The aborted transactions whose abort markers the segment holds (absent: none,
    /// or copied before they were recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aborted: Vec<shale_metastore::RemoteAbortedTxn>,
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
        let (keys, snapshots) = (
            [None, Some(&b"filter"[..]), Some(&b""[..])],
            [None, Some(&b"SHP2.."[..])],
        );
        for (keys, snapshot) in keys.into_iter().flat_map(|k| snapshots.map(|s| (k, s))) {
            let parts = SegmentIndexes {
                offset_index: &[1, 2, 3, 4, 5, 6, 7, 8],
                time_index: &[9; 12],
                key_filter: keys,
                producer_snapshot: snapshot,
            };
            let encoded = parts.encode();
            let magic: &[u8] = if snapshot.is_some() { b"SHI2" } else { b"SHIX" };
            assert_eq!(&encoded[..4], magic);
            assert_eq!(SegmentIndexes::decode(&encoded), Ok(parts));
            assert!(SegmentIndexes::decode(&encoded[..encoded.len() - 1]).is_err());
            let mut longer = encoded.clone();
            longer.push(0);
            assert!(SegmentIndexes::decode(&longer).is_err());
        }
        assert!(SegmentIndexes::decode(b"SHI").is_err());
        assert!(SegmentIndexes::decode(&[0; 16]).is_err());
        // An offset index marked absent, and a length past the object's end.
        let mut absent = b"SHIX".to_vec();
        absent.extend([u32::MAX, 0, u32::MAX].iter().flat_map(|n| n.to_be_bytes()));
        assert!(SegmentIndexes::decode(&absent).is_err());
        let mut past = b"SHI2".to_vec();
        past.extend(
            [0, 0, u32::MAX, 1 << 30]
                .iter()
                .flat_map(|n: &u32| n.to_be_bytes()),
        );
        assert!(SegmentIndexes::decode(&past).is_err());
    }
}
