//! Where a remote segment's objects live. Keys are self-describing, so a bucket can be
//! re-attached without the database:
//! `{topic_id}/{partition}/{base_offset:020}-{end_offset:020}-{segment_id}.{log|index|timeindex|keys|meta}`
//! (under the store's prefix). `.meta` is a small JSON document describing the segment;
//! `.keys` is the segment's key filter (see `shale_records::keyfilter`), named in
//! `.meta` (segments copied before filters existed have none).

use object_store::path::Path;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The five objects of one remote segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Log,
    Index,
    TimeIndex,
    Keys,
    Meta,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 5] = [
        ObjectKind::Log,
        ObjectKind::Index,
        ObjectKind::TimeIndex,
        ObjectKind::Keys,
        ObjectKind::Meta,
    ];

    fn extension(self) -> &'static str {
        match self {
            ObjectKind::Log => "log",
            ObjectKind::Index => "index",
            ObjectKind::TimeIndex => "timeindex",
            ObjectKind::Keys => "keys",
            ObjectKind::Meta => "meta",
        }
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
}

/// The `.keys` object as `.meta` names it.
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
}
