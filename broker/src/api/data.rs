//! gRPC `Data` service: produce, fetch, list offsets.

use std::sync::Arc;
use std::time::Duration;

use shale_proto::v1::data_server::Data;
use shale_proto::v1::*;
use tonic::{Request, Response, Status};

use super::{error_fields, error_result};
use crate::broker::Broker;
use crate::fetch::FetchSpec;
use crate::produce::ProduceData;

pub struct DataService {
    broker: Arc<Broker>,
}

impl DataService {
    pub fn new(broker: Arc<Broker>) -> Self {
        Self { broker }
    }
}

#[tonic::async_trait]
impl Data for DataService {
    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceResponse>, Status> {
        let req = request.into_inner();
        let keys: Vec<(String, i32)> = req
            .partitions
            .iter()
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        let data = req
            .partitions
            .into_iter()
            .map(|p| ProduceData {
                topic: p.topic,
                partition: p.partition,
                records: p.records,
            })
            .collect();
        let timeout = Duration::from_millis(match req.timeout_ms {
            0 => 30_000,
            ms => u64::from(ms),
        });
        let results = match self.broker.produce(req.acks, timeout, data).await {
            Ok(results) => results,
            // A request-level error (bad acks, shutting down) answers every partition.
            Err(e) => keys.iter().map(|_| Err(clone_request_error(&e))).collect(),
        };
        let partitions = keys
            .into_iter()
            .zip(results)
            .map(|((topic, partition), r)| {
                let (error_code, error_message) =
                    error_fields(&self.broker.request_stats.errors, r.as_ref().err());
                let ok = r.ok();
                PartitionProduceResult {
                    topic,
                    partition,
                    error_code,
                    error_message,
                    base_offset: ok.map_or(-1, |a| a.base_offset),
                    log_append_time_ms: ok.map_or(-1, |a| a.log_append_time_ms),
                    log_start_offset: ok.map_or(-1, |a| a.log_start_offset),
                }
            })
            .collect();
        Ok(Response::new(ProduceResponse { partitions }))
    }

    async fn init_producer_id(
        &self,
        _request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        let r = self.broker.init_producer_id().await;
        let (producer_id, producer_epoch) = r.as_ref().map_or((-1, -1), |(id, e)| (*id, *e));
        Ok(Response::new(InitProducerIdResponse {
            error: error_result(&self.broker.request_stats.errors, &r),
            producer_id,
            producer_epoch: i32::from(producer_epoch),
        }))
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<FetchResponse>, Status> {
        let req = request.into_inner();
        let specs: Vec<FetchSpec> = req
            .partitions
            .into_iter()
            .map(|p| FetchSpec {
                topic: p.topic,
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
            })
            .collect();
        let keys: Vec<(String, i32)> = specs
            .iter()
            .map(|s| (s.topic.clone(), s.partition))
            .collect();
        let max_wait = Duration::from_millis(u64::from(req.max_wait_ms));
        let results = self
            .broker
            .fetch(specs, max_wait, req.min_bytes, req.max_bytes)
            .await;
        let partitions = keys
            .into_iter()
            .zip(results)
            .map(|((topic, partition), r)| {
                let (error_code, error_message) =
                    error_fields(&self.broker.request_stats.errors, r.as_ref().err());
                let (records, offsets) = match r {
                    Ok(f) => (f.records, Some(f.offsets)),
                    Err(_) => (Default::default(), None),
                };
                FetchPartitionResult {
                    topic,
                    partition,
                    error_code,
                    error_message,
                    high_watermark: offsets.map_or(-1, |o| o.high_watermark),
                    log_start_offset: offsets.map_or(-1, |o| o.log_start_offset),
                    records,
                }
            })
            .collect();
        Ok(Response::new(FetchResponse { partitions }))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let mut partitions = Vec::new();
        for p in request.into_inner().partitions {
            let r = self
                .broker
                .list_offset(&p.topic, p.partition, p.timestamp)
                .await;
            let (error_code, error_message) =
                error_fields(&self.broker.request_stats.errors, r.as_ref().err());
            let (offset, timestamp) = r.ok().flatten().unwrap_or((-1, -1));
            partitions.push(ListOffsetsPartitionResult {
                topic: p.topic,
                partition: p.partition,
                error_code,
                error_message,
                offset,
                timestamp,
            });
        }
        Ok(Response::new(ListOffsetsResponse { partitions }))
    }
}

fn clone_request_error(e: &crate::error::Error) -> crate::error::Error {
    use crate::error::Error;
    match e {
        Error::InvalidRequiredAcks(a) => Error::InvalidRequiredAcks(*a),
        Error::ShuttingDown => Error::ShuttingDown,
        Error::LeaseLapsed => Error::LeaseLapsed,
        other => Error::Internal(other.to_string()),
    }
}
