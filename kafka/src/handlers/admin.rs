//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions,
//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, AlterPartitionReassignments,
//! ListPartitionReassignments.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_response as incremental;
use kafka_protocol::messages::*;
use shale_broker::error::Error;
use shale_config::topic::ConfigSource;
use shale_service::{ConfigEntry, NewTopicRequest, ReassignRequest, RequestContext, Service};

use super::{code, message, str};

/// DescribeConfigs and AlterConfigs resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Kafka's config sources: a topic override, the broker's static configuration, a
/// built-in default.
fn source(s: ConfigSource) -> i8 {
    match s {
        ConfigSource::Topic => 1,
        ConfigSource::Broker => 4,
        ConfigSource::Default => 5,
    }
}

pub async fn create_topics(
    s: &Service,
    ctx: &RequestContext,
    r: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    for t in r.topics {
        let name = t.name.0.to_string();
        let configs: BTreeMap<String, String> = t
            .configs
            .into_iter()
            .filter_map(|c| Some((c.name.to_string(), c.value?.to_string())))
            .collect();
        let created = match assignments(t.assignments) {
            Err(e) => Err(e),
            Ok(assignments) => {
                let req = NewTopicRequest {
                    name: name.clone(),
                    partitions: t.num_partitions,
                    replication_factor: i32::from(t.replication_factor),
                    assignments,
                    configs,
                    validate_only: r.validate_only,
                };
                s.create_topic(ctx, req).await
            }
        };
        let mut out = CreatableTopicResult::default();
        out.name = t.name;
        out.error_code = code(&created);
        out.error_message = message(&created);
        if let Ok(topic) = &created {
            if version >= 7 {
                out.topic_id = topic.id;
            }
            if version >= 5 {
                out.num_partitions = topic.partitions;
                out.replication_factor = topic.replication_factor as i16;
                let entries = s.describe_configs(ctx, &name).await.unwrap_or_default();
                out.configs = Some(
                    entries
                        .into_iter()
                        .map(|e| {
                            let mut c = CreatableTopicConfigs::default();
                            c.name = str(&e.name);
                            c.value = Some(str(&e.value));
                            c.config_source = source(e.source);
                            c
                        })
                        .collect(),
                );
            }
        } else if version >= 5 {
            out.num_partitions = -1;
            out.replication_factor = -1;
        }
        resp.topics.push(out);
    }
    resp
}

/// CreateTopics' manual replica assignment as each partition's replicas in partition
/// order (`None`: none given); the partitions must be 0, 1, … each once.
fn assignments(
    given: Vec<kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment>,
) -> Result<Option<Vec<Vec<i32>>>, Error> {
    if given.is_empty() {
        return Ok(None);
    }
    let mut by_partition: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for a in given {
        let replicas = a.broker_ids.into_iter().map(|b| b.0).collect();
        if by_partition.insert(a.partition_index, replicas).is_some() {
            return Err(Error::InvalidReplicaAssignment(format!(
                "partition {} is assigned twice",
                a.partition_index
            )));
        }
    }
    if by_partition
        .keys()
        .copied()
        .ne(0..by_partition.len() as i32)
    {
        return Err(Error::InvalidReplicaAssignment(
            "the assigned partitions must be 0, 1, … without a gap".into(),
        ));
    }
    Ok(Some(by_partition.into_values().collect()))
}

pub async fn delete_topics(
    s: &Service,
    ctx: &RequestContext,
    r: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // v6 names topics in `topics` (by name or id); earlier versions in `topic_names`.
    let names: Vec<(Option<String>, uuid::Uuid)> = if r.topic_names.is_empty() {
        r.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        r.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, id) in names {
        let deleted = match &name {
            Some(name) => s.delete_topic(ctx, name).await,
            None => Err(Error::UnknownTopicId(id)),
        };
        let mut out = DeletableTopicResult::default();
        out.name = name.map(|n| str(&n).into());
        out.topic_id = id;
        out.error_code = code(&deleted);
        out.error_message = message(&deleted);
        resp.responses.push(out);
    }
    resp
}

pub async fn create_partitions(
    s: &Service,
    ctx: &RequestContext,
    r: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    for t in r.topics {
        let assignments = t.assignments.map(|a| {
            a.into_iter()
                .map(|p| p.broker_ids.into_iter().map(|b| b.0).collect())
                .collect()
        });
        let created = s
            .create_partitions(ctx, &t.name.0, t.count, assignments, r.validate_only)
            .await;
        let mut out = CreatePartitionsTopicResult::default();
        out.name = t.name;
        out.error_code = code(&created);
        out.error_message = message(&created);
        resp.results.push(out);
    }
    resp
}

pub async fn describe_configs(
    s: &Service,
    ctx: &RequestContext,
    r: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in r.resources {
        let entries: Result<Vec<ConfigEntry>, Error> = match res.resource_type {
            TOPIC => s.describe_configs(ctx, &res.resource_name).await,
            BROKER => s.describe_broker_configs(ctx, &res.resource_name),
            other => Err(Error::InvalidRequest(format!(
                "resource type {other} is not supported (2: topic, 4: broker)"
            ))),
        };
        let mut out = DescribeConfigsResult::default();
        out.error_code = code(&entries);
        out.error_message = message(&entries);
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name;
        // Null or empty: every config (as Kafka answers both).
        let keys = res.configuration_keys.filter(|k| !k.is_empty());
        out.configs = entries
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                keys.as_ref()
                    .is_none_or(|k| k.iter().any(|k| k.as_str() == e.name))
            })
            .map(|e| {
                let mut c = DescribeConfigsResourceResult::default();
                c.name = str(&e.name);
                c.value = Some(str(&e.value));
                c.config_source = source(e.source);
                c.read_only = res.resource_type == BROKER;
                c
            })
            .collect();
        resp.results.push(out);
    }
    resp
}

pub async fn alter_configs(
    s: &Service,
    ctx: &RequestContext,
    r: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut resp = AlterConfigsResponse::default();
    for res in r.resources {
        let altered = if res.resource_type == TOPIC {
            // AlterConfigs replaces the whole set of overrides.
            let configs: BTreeMap<String, String> = res
                .configs
                .into_iter()
                .filter_map(|c| Some((c.name.to_string(), c.value?.to_string())))
                .collect();
            s.replace_configs(ctx, &res.resource_name, configs, r.validate_only)
                .await
        } else {
            Err(not_alterable(res.resource_type))
        };
        let mut out = AlterConfigsResourceResponse::default();
        out.error_code = code(&altered);
        out.error_message = message(&altered);
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name;
        resp.responses.push(out);
    }
    resp
}

fn not_alterable(resource_type: i8) -> Error {
    Error::InvalidRequest(format!(
        "only topic configs (resource type 2) can be altered, not resource type {resource_type}"
    ))
}

pub async fn incremental_alter_configs(
    s: &Service,
    ctx: &RequestContext,
    r: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in r.resources {
        let altered = if res.resource_type == TOPIC {
            let mut set = BTreeMap::new();
            let mut delete = Vec::new();
            let mut bad = None;
            for c in res.configs {
                match (c.config_operation, c.value) {
                    (0, Some(v)) => {
                        set.insert(c.name.to_string(), v.to_string());
                    }
                    (1, _) => delete.push(c.name.to_string()),
                    (op, _) => {
                        bad = Some(Error::InvalidRequest(format!(
                            "config operation {op} on '{}' is not supported (0: set, 1: delete; \
                             no topic config is a list)",
                            c.name.as_str()
                        )))
                    }
                }
            }
            match bad {
                Some(e) => Err(e),
                None => {
                    s.alter_configs(ctx, &res.resource_name, set, delete, r.validate_only)
                        .await
                }
            }
        } else {
            Err(not_alterable(res.resource_type))
        };
        let mut out = incremental::AlterConfigsResourceResponse::default();
        out.error_code = code(&altered);
        out.error_message = message(&altered);
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name;
        resp.responses.push(out);
    }
    resp
}

pub async fn alter_partition_reassignments(
    s: &Service,
    ctx: &RequestContext,
    r: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    use alter_partition_reassignments_response::{
        ReassignablePartitionResponse, ReassignableTopicResponse,
    };
    let requests: Vec<ReassignRequest> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| ReassignRequest {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                target: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    let mut resp = AlterPartitionReassignmentsResponse::default();
    let results = match s.alter_reassignments(ctx, requests).await {
        Ok(results) => results,
        Err(e) => {
            resp.error_code = e.code() as i16;
            resp.error_message = Some(str(&e.to_string()));
            return resp;
        }
    };
    let mut results = results.into_iter();
    for t in r.topics {
        let mut topic = ReassignableTopicResponse::default();
        for p in &t.partitions {
            let Some(result) = results.next() else { break };
            let mut out = ReassignablePartitionResponse::default();
            out.partition_index = p.partition_index;
            out.error_code = code(&result.result);
            out.error_message = message(&result.result);
            topic.partitions.push(out);
        }
        topic.name = t.name;
        resp.responses.push(topic);
    }
    resp
}

pub async fn list_partition_reassignments(
    s: &Service,
    ctx: &RequestContext,
    r: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    use list_partition_reassignments_response::{
        OngoingPartitionReassignment, OngoingTopicReassignment,
    };
    let topics = r.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let mut resp = ListPartitionReassignmentsResponse::default();
    let listed = match s.list_reassignments(ctx, topics).await {
        Ok(listed) => listed,
        Err(e) => {
            resp.error_code = e.code() as i16;
            resp.error_message = Some(str(&e.to_string()));
            return resp;
        }
    };
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect();
    for r in listed {
        if resp
            .topics
            .last()
            .is_none_or(|t| t.name.0.as_str() != r.topic)
        {
            let mut t = OngoingTopicReassignment::default();
            t.name = TopicName(str(&r.topic));
            resp.topics.push(t);
        }
        let mut p = OngoingPartitionReassignment::default();
        p.partition_index = r.partition;
        p.replicas = ids(r.replicas);
        p.adding_replicas = ids(r.adding);
        p.removing_replicas = ids(r.removing);
        if let Some(t) = resp.topics.last_mut() {
            t.partitions.push(p);
        }
    }
    resp
}
