//! Structure-aware fuzzing of the request decoder: valid requests of every served API
//! and version, filled in the way clients fill them, encoded, then mutated (bits
//! flipped, bytes overwritten, inserted and cut, lengths and counts replaced by
//! hostile values) and parsed. A mutation lands inside a real field layout, so it
//! reaches the decoders of nested arrays, strings, tagged fields and record bytes
//! that random bytes after a header almost never reach. `PROPTEST_CASES` raises the
//! count (infra/fuzz.sh runs it for longer).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use proptest::prelude::*;
use shale_records::fuzzing::{apply, cases, mutation};

use crate::frame::{Frame, parse};
use crate::versions::SUPPORTED;

fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

fn topic() -> TopicName {
    TopicName(s("logs"))
}

fn group() -> GroupId {
    GroupId(s("readers"))
}

/// One record batch as a client sends it.
fn records() -> Bytes {
    let mut b = shale_records::record::BatchBuilder::new(1_700_000_000_000);
    for i in 0..3u8 {
        b.push(shale_records::record::Record::new(
            Some(&[b'k', i]),
            Some(b"a value"),
            1_700_000_000_000 + i64::from(i),
        ));
    }
    b.build()
}

/// A request of `api` with its arrays and strings filled in.
fn filled(api: ApiKey) -> RequestKind {
    match api {
        ApiKey::Produce => RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![
                    produce_request::TopicProduceData::default()
                        .with_name(topic())
                        .with_partition_data(vec![
                            produce_request::PartitionProduceData::default()
                                .with_index(0)
                                .with_records(Some(records())),
                        ]),
                ]),
        ),
        ApiKey::Fetch => RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(500)
                .with_max_bytes(1 << 20)
                .with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(topic())
                        .with_partitions(vec![
                            fetch_request::FetchPartition::default()
                                .with_partition(0)
                                .with_fetch_offset(42)
                                .with_partition_max_bytes(1 << 20),
                        ]),
                ]),
        ),
        ApiKey::ListOffsets => RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            list_offsets_request::ListOffsetsPartition::default()
                                .with_partition_index(0)
                                .with_timestamp(-2),
                        ]),
                ]),
        ),
        ApiKey::Metadata => {
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic())),
            ])))
        }
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(group())
                .with_generation_id_or_member_epoch(3)
                .with_member_id(s("member-1"))
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(7)
                                .with_committed_metadata(Some(s("m"))),
                        ]),
                ]),
        ),
        ApiKey::JoinGroup => RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(group())
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![
                    join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(s("range"))
                        .with_metadata(Bytes::from_static(b"\0\x01\0\0\0\x01\0\x04logs")),
                ]),
        ),
        ApiKey::SyncGroup => RequestKind::SyncGroup(
            SyncGroupRequest::default()
                .with_group_id(group())
                .with_generation_id(3)
                .with_member_id(s("member-1"))
                .with_assignments(vec![
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s("member-1"))
                        .with_assignment(Bytes::from_static(b"\0\x01\0\0\0\x01")),
                ]),
        ),
        ApiKey::CreateTopics => RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![
                    create_topics_request::CreatableTopic::default()
                        .with_name(topic())
                        .with_num_partitions(3)
                        .with_replication_factor(-1)
                        .with_configs(vec![
                            create_topics_request::CreatableTopicConfig::default()
                                .with_name(s("retention.ms"))
                                .with_value(Some(s("60000"))),
                        ]),
                ]),
        ),
        ApiKey::DescribeConfigs => {
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("logs"))
                    .with_configuration_keys(Some(vec![s("retention.ms")])),
            ]))
        }
        ApiKey::DeleteRecords => RequestKind::DeleteRecords(
            DeleteRecordsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![
                    delete_records_request::DeleteRecordsTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            delete_records_request::DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(10),
                        ]),
                ]),
        ),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(
            DeleteTopicsRequest::default().with_topic_names(vec![topic()]),
        ),
        ApiKey::Heartbeat => RequestKind::Heartbeat(
            HeartbeatRequest::default()
                .with_group_id(group())
                .with_generation_id(3)
                .with_member_id(s("member-1")),
        ),
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(
            SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-512")),
        ),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from_static(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL")),
        ),
        ApiKey::DescribeUserScramCredentials => RequestKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                describe_user_scram_credentials_request::UserName::default().with_name(s("alice")),
            ])),
        ),
        ApiKey::AlterUserScramCredentials => RequestKind::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(s("bob"))
                        .with_mechanism(1),
                ])
                .with_upsertions(vec![
                    alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                        .with_name(s("alice"))
                        .with_mechanism(2)
                        .with_iterations(8192)
                        .with_salt(Bytes::from_static(b"salt"))
                        .with_salted_password(Bytes::from(vec![7u8; 64])),
                ]),
        ),
        ApiKey::CreateAcls => {
            RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![
            create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("logs."))
                .with_resource_pattern_type(4)
                .with_principal(s("User:alice"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3),
        ]))
        }
        ApiKey::DeleteAcls => {
            RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
            delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(Some(s("logs.")))
                .with_pattern_type_filter(2)
                .with_principal_filter(Some(s("User:alice")))
                .with_operation(1)
                .with_permission_type(1),
        ]))
        }
        ApiKey::AlterPartitionReassignments => RequestKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(60_000)
                .with_topics(vec![
                    alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            alter_partition_reassignments_request::ReassignablePartition::default()
                                .with_partition_index(0)
                                .with_replicas(Some(vec![BrokerId(2), BrokerId(3)])),
                            alter_partition_reassignments_request::ReassignablePartition::default()
                                .with_partition_index(1)
                                .with_replicas(None),
                        ]),
                ]),
        ),
        ApiKey::ListPartitionReassignments => RequestKind::ListPartitionReassignments(
            ListPartitionReassignmentsRequest::default().with_topics(Some(vec![
                list_partition_reassignments_request::ListPartitionReassignmentsTopics::default()
                    .with_name(topic())
                    .with_partition_indexes(vec![0, 1]),
            ])),
        ),
        ApiKey::AddPartitionsToTxn => RequestKind::AddPartitionsToTxn(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(s("tx").into())
                .with_v3_and_below_producer_id(5.into())
                .with_v3_and_below_producer_epoch(1)
                .with_v3_and_below_topics(vec![txn_topic()])
                .with_transactions(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(s("tx").into())
                        .with_producer_id(5.into())
                        .with_verify_only(true)
                        .with_topics(vec![txn_topic()]),
                ]),
        ),
        ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(s("tx").into())
                .with_producer_id(5.into())
                .with_group_id(s("g").into()),
        ),
        ApiKey::EndTxn => RequestKind::EndTxn(
            EndTxnRequest::default()
                .with_transactional_id(s("tx").into())
                .with_producer_id(5.into())
                .with_committed(true),
        ),
        ApiKey::TxnOffsetCommit => RequestKind::TxnOffsetCommit(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(s("tx").into())
                .with_group_id(s("g").into())
                .with_topics(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                .with_partition_index(1)
                                .with_committed_offset(42)
                                .with_committed_metadata(Some(s("m"))),
                        ]),
                ]),
        ),
        ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(
            DescribeTransactionsRequest::default().with_transactional_ids(vec![s("tx").into()]),
        ),
        ApiKey::ListTransactions => RequestKind::ListTransactions(
            ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing")])
                .with_producer_id_filters(vec![5.into()]),
        ),
        ApiKey::DescribeProducers => {
            RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(topic())
                    .with_partition_indexes(vec![0]),
            ]))
        }
        other => empty(other),
    }
}

fn txn_topic() -> add_partitions_to_txn_request::AddPartitionsToTxnTopic {
    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
        .with_name(topic())
        .with_partitions(vec![0, 1])
}

/// A request of `api` with every field at its default.
fn empty(api: ApiKey) -> RequestKind {
    match api {
        ApiKey::Produce => RequestKind::Produce(Default::default()),
        ApiKey::Fetch => RequestKind::Fetch(Default::default()),
        ApiKey::ListOffsets => RequestKind::ListOffsets(Default::default()),
        ApiKey::Metadata => RequestKind::Metadata(Default::default()),
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(Default::default()),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(Default::default()),
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(Default::default()),
        ApiKey::JoinGroup => RequestKind::JoinGroup(Default::default()),
        ApiKey::Heartbeat => RequestKind::Heartbeat(Default::default()),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(Default::default()),
        ApiKey::SyncGroup => RequestKind::SyncGroup(Default::default()),
        ApiKey::DescribeGroups => RequestKind::DescribeGroups(Default::default()),
        ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
        ApiKey::ApiVersions => RequestKind::ApiVersions(Default::default()),
        ApiKey::CreateTopics => RequestKind::CreateTopics(Default::default()),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(Default::default()),
        ApiKey::InitProducerId => RequestKind::InitProducerId(Default::default()),
        ApiKey::OffsetForLeaderEpoch => RequestKind::OffsetForLeaderEpoch(Default::default()),
        ApiKey::DescribeConfigs => RequestKind::DescribeConfigs(Default::default()),
        ApiKey::AlterConfigs => RequestKind::AlterConfigs(Default::default()),
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(Default::default()),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(Default::default()),
        ApiKey::IncrementalAlterConfigs => RequestKind::IncrementalAlterConfigs(Default::default()),
        ApiKey::OffsetDelete => RequestKind::OffsetDelete(Default::default()),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(Default::default()),
        ApiKey::DeleteRecords => RequestKind::DeleteRecords(Default::default()),
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(Default::default()),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(Default::default()),
        ApiKey::DescribeUserScramCredentials => {
            RequestKind::DescribeUserScramCredentials(Default::default())
        }
        ApiKey::AlterUserScramCredentials => {
            RequestKind::AlterUserScramCredentials(Default::default())
        }
        ApiKey::DescribeAcls => RequestKind::DescribeAcls(Default::default()),
        ApiKey::CreateAcls => RequestKind::CreateAcls(Default::default()),
        ApiKey::DeleteAcls => RequestKind::DeleteAcls(Default::default()),
        ApiKey::AlterPartitionReassignments => {
            RequestKind::AlterPartitionReassignments(Default::default())
        }
        ApiKey::ListPartitionReassignments => {
            RequestKind::ListPartitionReassignments(Default::default())
        }
        ApiKey::ConsumerGroupHeartbeat => RequestKind::ConsumerGroupHeartbeat(Default::default()),
        ApiKey::ConsumerGroupDescribe => RequestKind::ConsumerGroupDescribe(Default::default()),
        ApiKey::AddPartitionsToTxn => RequestKind::AddPartitionsToTxn(Default::default()),
        ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(Default::default()),
        ApiKey::EndTxn => RequestKind::EndTxn(Default::default()),
        ApiKey::TxnOffsetCommit => RequestKind::TxnOffsetCommit(Default::default()),
        ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(Default::default()),
        ApiKey::ListTransactions => RequestKind::ListTransactions(Default::default()),
        ApiKey::DescribeProducers => RequestKind::DescribeProducers(Default::default()),
        other => panic!("{other:?} is not served; add it here"),
    }
}

/// A frame (without its length) as a client would send it: header and body.
fn encode(api: ApiKey, version: i16, body: &RequestKind) -> Option<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(77)
        .with_client_id(Some(s("fuzz")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .ok()?;
    body.encode(&mut out, version).ok()?;
    Some(out.freeze())
}

/// The valid frame of a served (API, version): filled where the version can carry the
/// filled fields, defaults otherwise.
fn valid(api: ApiKey, version: i16) -> Bytes {
    encode(api, version, &filled(api))
        .or_else(|| encode(api, version, &empty(api)))
        .unwrap_or_else(|| panic!("{api:?} v{version}: a default request encodes"))
}

/// Every served (API, version) the codec decodes (the legacy ones, read by hand, are
/// fed arbitrary bodies below).
fn every_served() -> Vec<(ApiKey, i16)> {
    every_version()
        .filter(|&(api, v)| !crate::legacy::is_legacy(api, v))
        .collect()
}

fn every_version() -> impl Iterator<Item = (ApiKey, i16)> {
    SUPPORTED
        .iter()
        .flat_map(|&(api, lo, hi)| (lo..=hi).map(move |v| (api, v)))
}

/// Every served API and version: the valid frame parses back to the request sent.
#[test]
fn every_valid_request_parses_back_to_itself() {
    for (api, version) in every_served() {
        let frame = valid(api, version);
        let parsed = parse(frame.clone())
            .unwrap_or_else(|e| panic!("{api:?} v{version} does not parse: {e}"));
        let Frame::Request(r) = parsed else {
            panic!("{api:?} v{version} was answered at once");
        };
        assert_eq!((r.api, r.version, r.correlation_id), (api, version, 77));
        assert_eq!(r.client_id.as_deref(), Some("fuzz"));
        // Re-encoding what was decoded gives the bytes sent.
        let again = encode(api, version, &r.body).unwrap();
        assert_eq!(again, frame, "{api:?} v{version} round trip");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(3_000)))]

    /// Mutated valid requests decode (to something) or are refused as malformed or
    /// unsupported; never a panic, an abort or a hang.
    #[test]
    fn mutated_requests_decode_or_are_refused(
        pick in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let served = every_served();
        let (api, version) = served[pick % served.len()];
        let mut bytes = valid(api, version).to_vec();
        for m in &mutations {
            // API key, version and correlation id stay: the decoder's choice is not
            // what is fuzzed.
            apply(&mut bytes, 8, m);
        }
        let _ = parse(Bytes::from(bytes));
    }

    /// The versions read by hand (`crate::legacy`) take any body: it decodes or is
    /// refused as malformed; never a panic or an allocation the frame cannot back.
    #[test]
    fn legacy_bodies_decode_or_are_refused(
        pick in any::<usize>(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let legacy: Vec<(ApiKey, i16)> = every_version()
            .filter(|&(api, v)| crate::legacy::is_legacy(api, v))
            .collect();
        let (api, version) = legacy[pick % legacy.len()];
        let mut frame = Vec::new();
        frame.extend_from_slice(&(api as i16).to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&77i32.to_be_bytes());
        frame.extend_from_slice(&4i16.to_be_bytes());
        frame.extend_from_slice(b"fuzz");
        frame.extend_from_slice(&body);
        let _ = parse(Bytes::from(frame));
    }
}
