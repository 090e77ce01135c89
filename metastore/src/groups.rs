//! Producer id blocks and committed consumer-group offsets.

use uuid::Uuid;

/// A group's committed position in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic_id: Uuid,
    pub partition: i32,
    /// The next offset the group will read.
    pub offset: i64,
    /// Free text the committer attached (Kafka's offset metadata).
    pub metadata: String,
    pub commit_ms: i64,
}
