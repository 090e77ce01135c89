//! Kafka's error codes (the numbers Kafka's protocol uses), Shale's one vocabulary of
//! errors: every response of every front end carries one, and broker and client judge
//! retries by the same [`ErrorCode::is_retriable`].

/// A Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i16)]
pub enum ErrorCode {
    UnknownServerError = -1,
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    InvalidFetchSize = 4,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    BrokerNotAvailable = 8,
    ReplicaNotAvailable = 9,
    MessageTooLarge = 10,
    StaleControllerEpoch = 11,
    OffsetMetadataTooLarge = 12,
    NetworkException = 13,
    CoordinatorLoadInProgress = 14,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    NotEnoughReplicas = 19,
    NotEnoughReplicasAfterAppend = 20,
    InvalidRequiredAcks = 21,
    IllegalGeneration = 22,
    InconsistentGroupProtocol = 23,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    InvalidCommitOffsetSize = 28,
    TopicAuthorizationFailed = 29,
    GroupAuthorizationFailed = 30,
    ClusterAuthorizationFailed = 31,
    InvalidTimestamp = 32,
    UnsupportedSaslMechanism = 33,
    IllegalSaslState = 34,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    NotController = 41,
    InvalidRequest = 42,
    UnsupportedForMessageFormat = 43,
    PolicyViolation = 44,
    OutOfOrderSequenceNumber = 45,
    DuplicateSequenceNumber = 46,
    InvalidProducerEpoch = 47,
    InvalidTxnState = 48,
    InvalidProducerIdMapping = 49,
    InvalidTransactionTimeout = 50,
    ConcurrentTransactions = 51,
    TransactionCoordinatorFenced = 52,
    TransactionalIdAuthorizationFailed = 53,
    SecurityDisabled = 54,
    OperationNotAttempted = 55,
    KafkaStorageError = 56,
    LogDirNotFound = 57,
    SaslAuthenticationFailed = 58,
    UnknownProducerId = 59,
    ReassignmentInProgress = 60,
    InvalidPrincipalType = 67,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    FetchSessionIdNotFound = 70,
    InvalidFetchSessionEpoch = 71,
    ListenerNotFound = 72,
    TopicDeletionDisabled = 73,
    FencedLeaderEpoch = 74,
    UnknownLeaderEpoch = 75,
    UnsupportedCompressionType = 76,
    StaleBrokerEpoch = 77,
    OffsetNotAvailable = 78,
    MemberIdRequired = 79,
    PreferredLeaderNotAvailable = 80,
    GroupMaxSizeReached = 81,
    FencedInstanceId = 82,
    EligibleLeadersNotAvailable = 83,
    ElectionNotNeeded = 84,
    NoReassignmentInProgress = 85,
    GroupSubscribedToTopic = 86,
    InvalidRecord = 87,
    UnstableOffsetCommit = 88,
    ThrottlingQuotaExceeded = 89,
    ProducerFenced = 90,
    ResourceNotFound = 91,
    DuplicateResource = 92,
    UnacceptableCredential = 93,
    UnknownTopicId = 100,
    InconsistentTopicId = 103,
    InconsistentClusterId = 104,
    TransactionalIdNotFound = 105,
    FencedMemberEpoch = 110,
    UnreleasedInstanceId = 111,
    UnsupportedAssignor = 112,
    StaleMemberEpoch = 113,
    InvalidRegularExpression = 128,
}

impl ErrorCode {
    /// Kafka's name of the code, e.g. `NOT_LEADER_OR_FOLLOWER`.
    pub fn as_str_name(self) -> &'static str {
        match self {
            Self::UnknownServerError => "UNKNOWN_SERVER_ERROR",
            Self::None => "NONE",
            Self::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            Self::CorruptMessage => "CORRUPT_MESSAGE",
            Self::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            Self::InvalidFetchSize => "INVALID_FETCH_SIZE",
            Self::LeaderNotAvailable => "LEADER_NOT_AVAILABLE",
            Self::NotLeaderOrFollower => "NOT_LEADER_OR_FOLLOWER",
            Self::RequestTimedOut => "REQUEST_TIMED_OUT",
            Self::BrokerNotAvailable => "BROKER_NOT_AVAILABLE",
            Self::ReplicaNotAvailable => "REPLICA_NOT_AVAILABLE",
            Self::MessageTooLarge => "MESSAGE_TOO_LARGE",
            Self::StaleControllerEpoch => "STALE_CONTROLLER_EPOCH",
            Self::OffsetMetadataTooLarge => "OFFSET_METADATA_TOO_LARGE",
            Self::NetworkException => "NETWORK_EXCEPTION",
            Self::CoordinatorLoadInProgress => "COORDINATOR_LOAD_IN_PROGRESS",
            Self::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
            Self::NotCoordinator => "NOT_COORDINATOR",
            Self::InvalidTopicException => "INVALID_TOPIC_EXCEPTION",
            Self::RecordListTooLarge => "RECORD_LIST_TOO_LARGE",
            Self::NotEnoughReplicas => "NOT_ENOUGH_REPLICAS",
            Self::NotEnoughReplicasAfterAppend => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            Self::InvalidRequiredAcks => "INVALID_REQUIRED_ACKS",
            Self::IllegalGeneration => "ILLEGAL_GENERATION",
            Self::InconsistentGroupProtocol => "INCONSISTENT_GROUP_PROTOCOL",
            Self::InvalidGroupId => "INVALID_GROUP_ID",
            Self::UnknownMemberId => "UNKNOWN_MEMBER_ID",
            Self::InvalidSessionTimeout => "INVALID_SESSION_TIMEOUT",
            Self::RebalanceInProgress => "REBALANCE_IN_PROGRESS",
            Self::InvalidCommitOffsetSize => "INVALID_COMMIT_OFFSET_SIZE",
            Self::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
            Self::GroupAuthorizationFailed => "GROUP_AUTHORIZATION_FAILED",
            Self::ClusterAuthorizationFailed => "CLUSTER_AUTHORIZATION_FAILED",
            Self::InvalidTimestamp => "INVALID_TIMESTAMP",
            Self::UnsupportedSaslMechanism => "UNSUPPORTED_SASL_MECHANISM",
            Self::IllegalSaslState => "ILLEGAL_SASL_STATE",
            Self::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Self::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            Self::InvalidPartitions => "INVALID_PARTITIONS",
            Self::InvalidReplicationFactor => "INVALID_REPLICATION_FACTOR",
            Self::InvalidReplicaAssignment => "INVALID_REPLICA_ASSIGNMENT",
            Self::InvalidConfig => "INVALID_CONFIG",
            Self::NotController => "NOT_CONTROLLER",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::UnsupportedForMessageFormat => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
            Self::PolicyViolation => "POLICY_VIOLATION",
            Self::OutOfOrderSequenceNumber => "OUT_OF_ORDER_SEQUENCE_NUMBER",
            Self::DuplicateSequenceNumber => "DUPLICATE_SEQUENCE_NUMBER",
            Self::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH",
            Self::InvalidTxnState => "INVALID_TXN_STATE",
            Self::InvalidProducerIdMapping => "INVALID_PRODUCER_ID_MAPPING",
            Self::InvalidTransactionTimeout => "INVALID_TRANSACTION_TIMEOUT",
            Self::ConcurrentTransactions => "CONCURRENT_TRANSACTIONS",
            Self::TransactionCoordinatorFenced => "TRANSACTION_COORDINATOR_FENCED",
            Self::TransactionalIdAuthorizationFailed => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            Self::SecurityDisabled => "SECURITY_DISABLED",
            Self::OperationNotAttempted => "OPERATION_NOT_ATTEMPTED",
            Self::KafkaStorageError => "KAFKA_STORAGE_ERROR",
            Self::LogDirNotFound => "LOG_DIR_NOT_FOUND",
            Self::SaslAuthenticationFailed => "SASL_AUTHENTICATION_FAILED",
            Self::UnknownProducerId => "UNKNOWN_PRODUCER_ID",
            Self::ReassignmentInProgress => "REASSIGNMENT_IN_PROGRESS",
            Self::InvalidPrincipalType => "INVALID_PRINCIPAL_TYPE",
            Self::NonEmptyGroup => "NON_EMPTY_GROUP",
            Self::GroupIdNotFound => "GROUP_ID_NOT_FOUND",
            Self::FetchSessionIdNotFound => "FETCH_SESSION_ID_NOT_FOUND",
            Self::InvalidFetchSessionEpoch => "INVALID_FETCH_SESSION_EPOCH",
            Self::ListenerNotFound => "LISTENER_NOT_FOUND",
            Self::TopicDeletionDisabled => "TOPIC_DELETION_DISABLED",
            Self::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            Self::UnknownLeaderEpoch => "UNKNOWN_LEADER_EPOCH",
            Self::UnsupportedCompressionType => "UNSUPPORTED_COMPRESSION_TYPE",
            Self::StaleBrokerEpoch => "STALE_BROKER_EPOCH",
            Self::OffsetNotAvailable => "OFFSET_NOT_AVAILABLE",
            Self::MemberIdRequired => "MEMBER_ID_REQUIRED",
            Self::PreferredLeaderNotAvailable => "PREFERRED_LEADER_NOT_AVAILABLE",
            Self::GroupMaxSizeReached => "GROUP_MAX_SIZE_REACHED",
            Self::FencedInstanceId => "FENCED_INSTANCE_ID",
            Self::EligibleLeadersNotAvailable => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
            Self::ElectionNotNeeded => "ELECTION_NOT_NEEDED",
            Self::NoReassignmentInProgress => "NO_REASSIGNMENT_IN_PROGRESS",
            Self::GroupSubscribedToTopic => "GROUP_SUBSCRIBED_TO_TOPIC",
            Self::InvalidRecord => "INVALID_RECORD",
            Self::UnstableOffsetCommit => "UNSTABLE_OFFSET_COMMIT",
            Self::ThrottlingQuotaExceeded => "THROTTLING_QUOTA_EXCEEDED",
            Self::ProducerFenced => "PRODUCER_FENCED",
            Self::ResourceNotFound => "RESOURCE_NOT_FOUND",
            Self::DuplicateResource => "DUPLICATE_RESOURCE",
            Self::UnacceptableCredential => "UNACCEPTABLE_CREDENTIAL",
            Self::UnknownTopicId => "UNKNOWN_TOPIC_ID",
            Self::InconsistentTopicId => "INCONSISTENT_TOPIC_ID",
            Self::InconsistentClusterId => "INCONSISTENT_CLUSTER_ID",
            Self::TransactionalIdNotFound => "TRANSACTIONAL_ID_NOT_FOUND",
            Self::FencedMemberEpoch => "FENCED_MEMBER_EPOCH",
            Self::UnreleasedInstanceId => "UNRELEASED_INSTANCE_ID",
            Self::UnsupportedAssignor => "UNSUPPORTED_ASSIGNOR",
            Self::StaleMemberEpoch => "STALE_MEMBER_EPOCH",
            Self::InvalidRegularExpression => "INVALID_REGULAR_EXPRESSION",
        }
    }

    /// The code with Kafka's name `name`.
    pub fn from_str_name(name: &str) -> Option<Self> {
        Some(match name {
            "UNKNOWN_SERVER_ERROR" => Self::UnknownServerError,
            "NONE" => Self::None,
            "OFFSET_OUT_OF_RANGE" => Self::OffsetOutOfRange,
            "CORRUPT_MESSAGE" => Self::CorruptMessage,
            "UNKNOWN_TOPIC_OR_PARTITION" => Self::UnknownTopicOrPartition,
            "INVALID_FETCH_SIZE" => Self::InvalidFetchSize,
            "LEADER_NOT_AVAILABLE" => Self::LeaderNotAvailable,
            "NOT_LEADER_OR_FOLLOWER" => Self::NotLeaderOrFollower,
            "REQUEST_TIMED_OUT" => Self::RequestTimedOut,
            "BROKER_NOT_AVAILABLE" => Self::BrokerNotAvailable,
            "REPLICA_NOT_AVAILABLE" => Self::ReplicaNotAvailable,
            "MESSAGE_TOO_LARGE" => Self::MessageTooLarge,
            "STALE_CONTROLLER_EPOCH" => Self::StaleControllerEpoch,
            "OFFSET_METADATA_TOO_LARGE" => Self::OffsetMetadataTooLarge,
            "NETWORK_EXCEPTION" => Self::NetworkException,
            "COORDINATOR_LOAD_IN_PROGRESS" => Self::CoordinatorLoadInProgress,
            "COORDINATOR_NOT_AVAILABLE" => Self::CoordinatorNotAvailable,
            "NOT_COORDINATOR" => Self::NotCoordinator,
            "INVALID_TOPIC_EXCEPTION" => Self::InvalidTopicException,
            "RECORD_LIST_TOO_LARGE" => Self::RecordListTooLarge,
            "NOT_ENOUGH_REPLICAS" => Self::NotEnoughReplicas,
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND" => Self::NotEnoughReplicasAfterAppend,
            "INVALID_REQUIRED_ACKS" => Self::InvalidRequiredAcks,
            "ILLEGAL_GENERATION" => Self::IllegalGeneration,
            "INCONSISTENT_GROUP_PROTOCOL" => Self::InconsistentGroupProtocol,
            "INVALID_GROUP_ID" => Self::InvalidGroupId,
            "UNKNOWN_MEMBER_ID" => Self::UnknownMemberId,
            "INVALID_SESSION_TIMEOUT" => Self::InvalidSessionTimeout,
            "REBALANCE_IN_PROGRESS" => Self::RebalanceInProgress,
            "INVALID_COMMIT_OFFSET_SIZE" => Self::InvalidCommitOffsetSize,
            "TOPIC_AUTHORIZATION_FAILED" => Self::TopicAuthorizationFailed,
            "GROUP_AUTHORIZATION_FAILED" => Self::GroupAuthorizationFailed,
            "CLUSTER_AUTHORIZATION_FAILED" => Self::ClusterAuthorizationFailed,
            "INVALID_TIMESTAMP" => Self::InvalidTimestamp,
            "UNSUPPORTED_SASL_MECHANISM" => Self::UnsupportedSaslMechanism,
            "ILLEGAL_SASL_STATE" => Self::IllegalSaslState,
            "UNSUPPORTED_VERSION" => Self::UnsupportedVersion,
            "TOPIC_ALREADY_EXISTS" => Self::TopicAlreadyExists,
            "INVALID_PARTITIONS" => Self::InvalidPartitions,
            "INVALID_REPLICATION_FACTOR" => Self::InvalidReplicationFactor,
            "INVALID_REPLICA_ASSIGNMENT" => Self::InvalidReplicaAssignment,
            "INVALID_CONFIG" => Self::InvalidConfig,
            "NOT_CONTROLLER" => Self::NotController,
            "INVALID_REQUEST" => Self::InvalidRequest,
            "UNSUPPORTED_FOR_MESSAGE_FORMAT" => Self::UnsupportedForMessageFormat,
            "POLICY_VIOLATION" => Self::PolicyViolation,
            "OUT_OF_ORDER_SEQUENCE_NUMBER" => Self::OutOfOrderSequenceNumber,
            "DUPLICATE_SEQUENCE_NUMBER" => Self::DuplicateSequenceNumber,
            "INVALID_PRODUCER_EPOCH" => Self::InvalidProducerEpoch,
            "INVALID_TXN_STATE" => Self::InvalidTxnState,
            "INVALID_PRODUCER_ID_MAPPING" => Self::InvalidProducerIdMapping,
            "INVALID_TRANSACTION_TIMEOUT" => Self::InvalidTransactionTimeout,
            "CONCURRENT_TRANSACTIONS" => Self::ConcurrentTransactions,
            "TRANSACTION_COORDINATOR_FENCED" => Self::TransactionCoordinatorFenced,
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" => Self::TransactionalIdAuthorizationFailed,
            "SECURITY_DISABLED" => Self::SecurityDisabled,
            "OPERATION_NOT_ATTEMPTED" => Self::OperationNotAttempted,
            "KAFKA_STORAGE_ERROR" => Self::KafkaStorageError,
            "LOG_DIR_NOT_FOUND" => Self::LogDirNotFound,
            "SASL_AUTHENTICATION_FAILED" => Self::SaslAuthenticationFailed,
            "UNKNOWN_PRODUCER_ID" => Self::UnknownProducerId,
            "REASSIGNMENT_IN_PROGRESS" => Self::ReassignmentInProgress,
            "INVALID_PRINCIPAL_TYPE" => Self::InvalidPrincipalType,
            "NON_EMPTY_GROUP" => Self::NonEmptyGroup,
            "GROUP_ID_NOT_FOUND" => Self::GroupIdNotFound,
            "FETCH_SESSION_ID_NOT_FOUND" => Self::FetchSessionIdNotFound,
            "INVALID_FETCH_SESSION_EPOCH" => Self::InvalidFetchSessionEpoch,
            "LISTENER_NOT_FOUND" => Self::ListenerNotFound,
            "TOPIC_DELETION_DISABLED" => Self::TopicDeletionDisabled,
            "FENCED_LEADER_EPOCH" => Self::FencedLeaderEpoch,
            "UNKNOWN_LEADER_EPOCH" => Self::UnknownLeaderEpoch,
            "UNSUPPORTED_COMPRESSION_TYPE" => Self::UnsupportedCompressionType,
            "STALE_BROKER_EPOCH" => Self::StaleBrokerEpoch,
            "OFFSET_NOT_AVAILABLE" => Self::OffsetNotAvailable,
            "MEMBER_ID_REQUIRED" => Self::MemberIdRequired,
            "PREFERRED_LEADER_NOT_AVAILABLE" => Self::PreferredLeaderNotAvailable,
            "GROUP_MAX_SIZE_REACHED" => Self::GroupMaxSizeReached,
            "FENCED_INSTANCE_ID" => Self::FencedInstanceId,
            "ELIGIBLE_LEADERS_NOT_AVAILABLE" => Self::EligibleLeadersNotAvailable,
            "ELECTION_NOT_NEEDED" => Self::ElectionNotNeeded,
            "NO_REASSIGNMENT_IN_PROGRESS" => Self::NoReassignmentInProgress,
            "GROUP_SUBSCRIBED_TO_TOPIC" => Self::GroupSubscribedToTopic,
            "INVALID_RECORD" => Self::InvalidRecord,
            "UNSTABLE_OFFSET_COMMIT" => Self::UnstableOffsetCommit,
            "THROTTLING_QUOTA_EXCEEDED" => Self::ThrottlingQuotaExceeded,
            "PRODUCER_FENCED" => Self::ProducerFenced,
            "RESOURCE_NOT_FOUND" => Self::ResourceNotFound,
            "DUPLICATE_RESOURCE" => Self::DuplicateResource,
            "UNACCEPTABLE_CREDENTIAL" => Self::UnacceptableCredential,
            "UNKNOWN_TOPIC_ID" => Self::UnknownTopicId,
            "INCONSISTENT_TOPIC_ID" => Self::InconsistentTopicId,
            "INCONSISTENT_CLUSTER_ID" => Self::InconsistentClusterId,
            "TRANSACTIONAL_ID_NOT_FOUND" => Self::TransactionalIdNotFound,
            "FENCED_MEMBER_EPOCH" => Self::FencedMemberEpoch,
            "UNRELEASED_INSTANCE_ID" => Self::UnreleasedInstanceId,
            "UNSUPPORTED_ASSIGNOR" => Self::UnsupportedAssignor,
            "STALE_MEMBER_EPOCH" => Self::StaleMemberEpoch,
            "INVALID_REGULAR_EXPRESSION" => Self::InvalidRegularExpression,
            _ => return None,
        })
    }

    /// The code's number on the wire.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// Whether the same request may succeed later: leadership or a coordinator
    /// moving, a broker or the storage briefly unavailable, replication catching up
    /// (Kafka's retriable errors). `UNKNOWN_TOPIC_OR_PARTITION` is not: Shale's brokers
    /// refresh their metadata before answering it, so it is a verdict.
    pub fn is_retriable(self) -> bool {
        use ErrorCode::*;
        matches!(
            self,
            NotLeaderOrFollower
                | LeaderNotAvailable
                | RequestTimedOut
                | BrokerNotAvailable
                | ReplicaNotAvailable
                | NetworkException
                | CoordinatorLoadInProgress
                | CoordinatorNotAvailable
                | NotCoordinator
                | NotEnoughReplicas
                | NotEnoughReplicasAfterAppend
                | NotController
                | KafkaStorageError
                | FencedLeaderEpoch
                | UnknownLeaderEpoch
                | StaleBrokerEpoch
                | OffsetNotAvailable
                | EligibleLeadersNotAvailable
                | UnstableOffsetCommit
                | ThrottlingQuotaExceeded
                | ConcurrentTransactions
        )
    }

    /// Whether the code says a partition's leadership is elsewhere or moving (refresh
    /// the metadata, then retry).
    pub fn is_leadership(self) -> bool {
        use ErrorCode::*;
        matches!(
            self,
            NotLeaderOrFollower | LeaderNotAvailable | FencedLeaderEpoch | ReplicaNotAvailable
        )
    }
}

impl TryFrom<i32> for ErrorCode {
    type Error = i32;

    /// The code with this number (the number itself if Shale does not know it).
    fn try_from(n: i32) -> Result<Self, i32> {
        Ok(match n {
            -1 => Self::UnknownServerError,
            0 => Self::None,
            1 => Self::OffsetOutOfRange,
            2 => Self::CorruptMessage,
            3 => Self::UnknownTopicOrPartition,
            4 => Self::InvalidFetchSize,
            5 => Self::LeaderNotAvailable,
            6 => Self::NotLeaderOrFollower,
            7 => Self::RequestTimedOut,
            8 => Self::BrokerNotAvailable,
            9 => Self::ReplicaNotAvailable,
            10 => Self::MessageTooLarge,
            11 => Self::StaleControllerEpoch,
            12 => Self::OffsetMetadataTooLarge,
            13 => Self::NetworkException,
            14 => Self::CoordinatorLoadInProgress,
            15 => Self::CoordinatorNotAvailable,
            16 => Self::NotCoordinator,
            17 => Self::InvalidTopicException,
            18 => Self::RecordListTooLarge,
            19 => Self::NotEnoughReplicas,
            20 => Self::NotEnoughReplicasAfterAppend,
            21 => Self::InvalidRequiredAcks,
            22 => Self::IllegalGeneration,
            23 => Self::InconsistentGroupProtocol,
            24 => Self::InvalidGroupId,
            25 => Self::UnknownMemberId,
            26 => Self::InvalidSessionTimeout,
            27 => Self::RebalanceInProgress,
            28 => Self::InvalidCommitOffsetSize,
            29 => Self::TopicAuthorizationFailed,
            30 => Self::GroupAuthorizationFailed,
            31 => Self::ClusterAuthorizationFailed,
            32 => Self::InvalidTimestamp,
            33 => Self::UnsupportedSaslMechanism,
            34 => Self::IllegalSaslState,
            35 => Self::UnsupportedVersion,
            36 => Self::TopicAlreadyExists,
            37 => Self::InvalidPartitions,
            38 => Self::InvalidReplicationFactor,
            39 => Self::InvalidReplicaAssignment,
            40 => Self::InvalidConfig,
            41 => Self::NotController,
            42 => Self::InvalidRequest,
            43 => Self::UnsupportedForMessageFormat,
            44 => Self::PolicyViolation,
            45 => Self::OutOfOrderSequenceNumber,
            46 => Self::DuplicateSequenceNumber,
            47 => Self::InvalidProducerEpoch,
            48 => Self::InvalidTxnState,
            49 => Self::InvalidProducerIdMapping,
            50 => Self::InvalidTransactionTimeout,
            51 => Self::ConcurrentTransactions,
            52 => Self::TransactionCoordinatorFenced,
            53 => Self::TransactionalIdAuthorizationFailed,
            54 => Self::SecurityDisabled,
            55 => Self::OperationNotAttempted,
            56 => Self::KafkaStorageError,
            57 => Self::LogDirNotFound,
            58 => Self::SaslAuthenticationFailed,
            59 => Self::UnknownProducerId,
            60 => Self::ReassignmentInProgress,
            67 => Self::InvalidPrincipalType,
            68 => Self::NonEmptyGroup,
            69 => Self::GroupIdNotFound,
            70 => Self::FetchSessionIdNotFound,
            71 => Self::InvalidFetchSessionEpoch,
            72 => Self::ListenerNotFound,
            73 => Self::TopicDeletionDisabled,
            74 => Self::FencedLeaderEpoch,
            75 => Self::UnknownLeaderEpoch,
            76 => Self::UnsupportedCompressionType,
            77 => Self::StaleBrokerEpoch,
            78 => Self::OffsetNotAvailable,
            79 => Self::MemberIdRequired,
            80 => Self::PreferredLeaderNotAvailable,
            81 => Self::GroupMaxSizeReached,
            82 => Self::FencedInstanceId,
            83 => Self::EligibleLeadersNotAvailable,
            84 => Self::ElectionNotNeeded,
            85 => Self::NoReassignmentInProgress,
            86 => Self::GroupSubscribedToTopic,
            87 => Self::InvalidRecord,
            88 => Self::UnstableOffsetCommit,
            89 => Self::ThrottlingQuotaExceeded,
            90 => Self::ProducerFenced,
            91 => Self::ResourceNotFound,
            92 => Self::DuplicateResource,
            93 => Self::UnacceptableCredential,
            100 => Self::UnknownTopicId,
            103 => Self::InconsistentTopicId,
            104 => Self::InconsistentClusterId,
            105 => Self::TransactionalIdNotFound,
            110 => Self::FencedMemberEpoch,
            111 => Self::UnreleasedInstanceId,
            112 => Self::UnsupportedAssignor,
            113 => Self::StaleMemberEpoch,
            128 => Self::InvalidRegularExpression,
            other => return Err(other),
        })
    }
}

impl From<ErrorCode> for i32 {
    fn from(code: ErrorCode) -> i32 {
        code as i32
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_round_trip() {
        for n in -1..=130 {
            if let Ok(code) = ErrorCode::try_from(n) {
                assert_eq!(i32::from(code), n);
                assert_eq!(ErrorCode::from_str_name(code.as_str_name()), Some(code));
            }
        }
        assert_eq!(ErrorCode::try_from(6), Ok(ErrorCode::NotLeaderOrFollower));
        assert_eq!(ErrorCode::try_from(999), Err(999));
        assert!(ErrorCode::NotLeaderOrFollower.is_retriable());
        assert!(!ErrorCode::UnknownTopicOrPartition.is_retriable());
        assert!(!ErrorCode::CorruptMessage.is_retriable());
    }
}
