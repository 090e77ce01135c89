//! What group requests can fail with, group ids, and which broker coordinates a group.

use shale_records::ErrorCode;

/// Longest group id accepted.
const MAX_GROUP_ID_BYTES: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("this broker is not the coordinator of group '{group}' (broker {coordinator} is)")]
    NotCoordinator { group: String, coordinator: i32 },
    #[error("no live broker can coordinate groups right now")]
    CoordinatorNotAvailable,
    #[error("invalid group id '{0}': it must be 1 to 255 bytes")]
    InvalidGroupId(String),
    #[error("member '{member}' is not in group '{group}'{hint}")]
    UnknownMember {
        group: String,
        member: String,
        hint: &'static str,
    },
    #[error("generation {sent} of group '{group}' is not current (the group is at {current})")]
    IllegalGeneration {
        group: String,
        sent: i32,
        current: i32,
    },
    #[error("group '{0}' is rebalancing: join again")]
    RebalanceInProgress(String),
    #[error("{0}")]
    InconsistentProtocol(String),
    #[error("session timeout {sent} ms is outside the broker's [{min}, {max}] ms")]
    InvalidSessionTimeout { sent: i64, min: u64, max: u64 },
    #[error("group '{0}' has active members; stop its consumers first")]
    NonEmptyGroup(String),
    #[error("group '{0}' does not exist")]
    GroupNotFound(String),
    #[error("offset metadata of {0} bytes is larger than 4096")]
    MetadataTooLarge(usize),
    /// A new member's first join (Kafka's JoinGroup v4+): it joins again with this id.
    #[error("join again with member id '{0}'")]
    MemberIdRequired(String),
    /// A static member replaced by a newer member with its `group.instance.id`.
    #[error(
        "member '{member}' of group '{group}' was replaced by a newer member with group.instance.id '{instance}'"
    )]
    FencedInstance {
        group: String,
        member: String,
        instance: String,
    },
    /// A consumer-protocol member (KIP-848) at an epoch the group left behind.
    #[error("member '{member}' of group '{group}' is at epoch {sent}, not {current}: join again")]
    FencedMemberEpoch {
        group: String,
        member: String,
        sent: i32,
        current: i32,
    },
    /// A commit from a consumer-protocol member at an older epoch than its own.
    #[error("member '{member}' of group '{group}' committed at epoch {sent}; it is at {current}")]
    StaleMemberEpoch {
        group: String,
        member: String,
        sent: i32,
        current: i32,
    },
    #[error("assignor '{0}' is not one of this broker's (uniform, range)")]
    UnsupportedAssignor(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("invalid subscription regular expression '{0}'")]
    InvalidRegex(String),
    /// A consumer-protocol member asking to join a classic group with members.
    #[error("group '{0}' is a classic group with members, not a consumer group")]
    NotConsumerGroup(String),
}

impl GroupError {
    pub fn code(&self) -> ErrorCode {
        use GroupError::*;
        match self {
            NotCoordinator { .. } => ErrorCode::NotCoordinator,
            CoordinatorNotAvailable => ErrorCode::CoordinatorNotAvailable,
            InvalidGroupId(_) => ErrorCode::InvalidGroupId,
            UnknownMember { .. } => ErrorCode::UnknownMemberId,
            IllegalGeneration { .. } => ErrorCode::IllegalGeneration,
            RebalanceInProgress(_) => ErrorCode::RebalanceInProgress,
            InconsistentProtocol(_) => ErrorCode::InconsistentGroupProtocol,
            InvalidSessionTimeout { .. } => ErrorCode::InvalidSessionTimeout,
            NonEmptyGroup(_) => ErrorCode::NonEmptyGroup,
            GroupNotFound(_) => ErrorCode::GroupIdNotFound,
            MetadataTooLarge(_) => ErrorCode::OffsetMetadataTooLarge,
            MemberIdRequired(_) => ErrorCode::MemberIdRequired,
            FencedInstance { .. } => ErrorCode::FencedInstanceId,
            FencedMemberEpoch { .. } => ErrorCode::FencedMemberEpoch,
            StaleMemberEpoch { .. } => ErrorCode::StaleMemberEpoch,
            UnsupportedAssignor(_) => ErrorCode::UnsupportedAssignor,
            InvalidRequest(_) => ErrorCode::InvalidRequest,
            InvalidRegex(_) => ErrorCode::InvalidRegularExpression,
            NotConsumerGroup(_) => ErrorCode::GroupIdNotFound,
        }
    }
}

pub fn validate_group_id(group: &str) -> Result<(), GroupError> {
    if group.is_empty() || group.len() > MAX_GROUP_ID_BYTES {
        return Err(GroupError::InvalidGroupId(group.to_string()));
    }
    Ok(())
}

/// The live broker that coordinates `group`: the one with the highest hash of
/// (group, broker id) — rendezvous hashing.
pub fn coordinator_of(group: &str, live: &[i32]) -> Option<i32> {
    live.iter()
        .copied()
        .max_by_key(|b| hash64(group.as_bytes(), *b))
}

fn hash64(bytes: &[u8], salt: i32) -> u64 {
    // FNV-1a over the group id, then the broker id, then a final mix.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes.iter().chain(salt.to_be_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

pub(crate) fn unknown_member(group: &str, member: &str) -> GroupError {
    GroupError::UnknownMember {
        group: group.to_string(),
        member: member.to_string(),
        hint: "; join again",
    }
}
