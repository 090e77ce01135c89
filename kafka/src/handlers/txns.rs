//! The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! TxnOffsetCommit, DescribeTransactions, ListTransactions, DescribeProducers.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use shale_broker::groups::OffsetCommit;
use shale_service::{Keyed, RequestContext, Service, TxnProducer};

use super::{code, message, str};

fn producer<'a>(id: &'a TransactionalId, producer_id: ProducerId, epoch: i16) -> TxnProducer<'a> {
    TxnProducer {
        transactional_id: &id.0,
        producer_id: producer_id.0,
        epoch,
    }
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect()
}

fn topic_results(answers: Vec<Keyed<()>>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for a in answers {
        let mut p = AddPartitionsToTxnPartitionResult::default();
        p.partition_index = a.partition;
        p.partition_error_code = code(&a.result);
        match out.last_mut() {
            Some(t) if t.name.0.as_str() == a.topic => t.results_by_partition.push(p),
            _ => {
                let mut t = AddPartitionsToTxnTopicResult::default();
                t.name = str(&a.topic).into();
                t.results_by_partition.push(p);
                out.push(t);
            }
        }
    }
    out
}

pub async fn add_partitions(
    s: &Service,
    ctx: &RequestContext,
    r: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let mut resp = AddPartitionsToTxnResponse::default();
    if version <= 3 {
        let p = producer(
            &r.v3_and_below_transactional_id,
            r.v3_and_below_producer_id,
            r.v3_and_below_producer_epoch,
        );
        let answers = s
            .add_partitions_to_txn(ctx, p, partitions_of(&r.v3_and_below_topics), false)
            .await;
        resp.results_by_topic_v3_and_below = topic_results(answers);
        return resp;
    }
    for t in &r.transactions {
        let p = producer(&t.transactional_id, t.producer_id, t.producer_epoch);
        let answers = s
            .add_partitions_to_txn(ctx, p, partitions_of(&t.topics), t.verify_only)
            .await;
        let mut result = AddPartitionsToTxnResult::default();
        result.transactional_id = t.transactional_id.clone();
        result.topic_results = topic_results(answers);
        resp.results_by_transaction.push(result);
    }
    resp
}

pub async fn add_offsets(
    s: &Service,
    ctx: &RequestContext,
    r: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let p = producer(&r.transactional_id, r.producer_id, r.producer_epoch);
    let result = s.add_offsets_to_txn(ctx, p, &r.group_id.0).await;
    let mut resp = AddOffsetsToTxnResponse::default();
    resp.error_code = code(&result);
    resp
}

pub async fn end(s: &Service, ctx: &RequestContext, r: EndTxnRequest) -> EndTxnResponse {
    let p = producer(&r.transactional_id, r.producer_id, r.producer_epoch);
    let result = s.end_txn(ctx, p, r.committed).await;
    let mut resp = EndTxnResponse::default();
    resp.error_code = code(&result);
    resp
}

pub async fn offset_commit(
    s: &Service,
    ctx: &RequestContext,
    r: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let p = producer(&r.transactional_id, r.producer_id, r.producer_epoch);
    let offsets: Vec<OffsetCommit> = (r.topics.iter())
        .flat_map(|t| {
            t.partitions.iter().map(|p| OffsetCommit {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                metadata: p
                    .committed_metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            })
        })
        .collect();
    // KIP-447 (v3+): the consumer's generation and member, checked when sent.
    let member = (r.generation_id >= 0 || !r.member_id.is_empty()).then(|| {
        (
            r.generation_id,
            r.member_id.as_str(),
            r.group_instance_id.as_deref(),
        )
    });
    let keys: Vec<(String, i32)> = (offsets.iter())
        .map(|o| (o.topic.clone(), o.partition))
        .collect();
    let answers: Vec<(String, i32, i16)> = match s
        .txn_offset_commit(ctx, p, &r.group_id.0, member, offsets)
        .await
    {
        Ok(answers) => (answers.into_iter())
            .map(|a| (a.topic, a.partition, code(&a.result)))
            .collect(),
        Err(e) => {
            let c = e.code() as i16;
            keys.into_iter().map(|(t, p)| (t, p, c)).collect()
        }
    };
    let mut resp = TxnOffsetCommitResponse::default();
    for (topic, partition, error) in answers {
        let mut p = TxnOffsetCommitResponsePartition::default();
        p.partition_index = partition;
        p.error_code = error;
        match resp.topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(p),
            _ => {
                let mut t = TxnOffsetCommitResponseTopic::default();
                t.name = str(&topic).into();
                t.partitions.push(p);
                resp.topics.push(t);
            }
        }
    }
    resp
}

pub async fn describe(
    s: &Service,
    ctx: &RequestContext,
    r: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let ids: Vec<String> = (r.transactional_ids.iter())
        .map(|i| i.0.to_string())
        .collect();
    let described = s.describe_transactions(ctx, &ids).await;
    let mut resp = DescribeTransactionsResponse::default();
    for (id, d) in ids.iter().zip(described) {
        let mut t = describe_transactions_response::TransactionState::default();
        t.error_code = code(&d);
        t.transactional_id = str(id).into();
        match d {
            Ok(d) => {
                t.transaction_state = str(d.state.name());
                t.transaction_timeout_ms = d.timeout_ms;
                t.transaction_start_time_ms = d.start_ms;
                t.producer_id = d.producer_id.into();
                t.producer_epoch = d.producer_epoch;
                t.topics = (d.topics.into_iter())
                    .map(|(name, partitions)| {
                        let mut td = TopicData::default();
                        td.topic = str(&name).into();
                        td.partitions = partitions;
                        td
                    })
                    .collect();
            }
            Err(_) => {
                t.producer_id = (-1).into();
                t.producer_epoch = -1;
                t.transaction_start_time_ms = -1;
            }
        }
        resp.transaction_states.push(t);
    }
    resp
}

pub async fn list(
    s: &Service,
    ctx: &RequestContext,
    r: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let known = shale_metastore::TxnState::ALL.map(|s| s.name());
    let (states, unknown): (Vec<String>, Vec<String>) = (r.state_filters.iter())
        .map(|s| s.to_string())
        .partition(|s| known.contains(&s.as_str()));
    let producer_ids: Vec<i64> = r.producer_id_filters.iter().map(|p| p.0).collect();
    let mut resp = ListTransactionsResponse::default();
    resp.unknown_state_filters = unknown.iter().map(|u| str(u)).collect();
    if !unknown.is_empty() && states.is_empty() {
        // Only unknown states asked for: none matches.
        return resp;
    }
    let listed = s.list_transactions(ctx, &states, &producer_ids).await;
    resp.error_code = code(&listed);
    let now = shale_broker::clock::now_ms();
    for t in listed.unwrap_or_default() {
        // v1: only transactions running longer than the filter (-1: all).
        if r.duration_filter >= 0 && (t.start_ms < 0 || now - t.start_ms < r.duration_filter) {
            continue;
        }
        let mut l = list_transactions_response::TransactionState::default();
        l.transactional_id = str(&t.transactional_id).into();
        l.producer_id = t.producer_id.into();
        l.transaction_state = str(t.state.name());
        resp.transaction_states.push(l);
    }
    resp
}

pub async fn describe_producers(
    s: &Service,
    ctx: &RequestContext,
    r: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    for t in &r.topics {
        let mut topic = TopicResponse::default();
        topic.name = t.name.clone();
        for &partition in &t.partition_indexes {
            let found = s.describe_producers(ctx, &t.name.0, partition).await;
            let mut p = PartitionResponse::default();
            p.partition_index = partition;
            p.error_code = code(&found);
            p.error_message = message(&found);
            for a in found.unwrap_or_default() {
                let mut st = ProducerState::default();
                st.producer_id = a.producer_id.into();
                st.producer_epoch = i32::from(a.epoch);
                st.last_sequence = a.last_sequence;
                st.last_timestamp = a.last_timestamp;
                st.coordinator_epoch = a.coordinator_epoch;
                st.current_txn_start_offset = a.txn_start_offset;
                p.active_producers.push(st);
            }
            topic.partitions.push(p);
        }
        resp.topics.push(topic);
    }
    resp
}
