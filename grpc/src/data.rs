//! gRPC `Data` service: produce, fetch, list offsets, producer ids.

use std::time::Duration;

use shale_broker::fetch::{FetchSpec, ReadFrom};
use shale_broker::produce::ProduceData;
use shale_proto::v1::data_server::Data;
use shale_proto::v1::*;
use shale_service::{DeleteRecordsQuery, OffsetQuery};
use tonic::{Request, Response, Status};

use super::{Front, error_fields, error_result};

#[tonic::async_trait]
impl Data for Front {
    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceResponse>, Status> {
        let ctx = self.context(&request)?;
        let req = request.into_inner();
        let req = shale_service::ProduceRequest {
            acks: req.acks,
            timeout: (req.timeout_ms > 0).then(|| Duration::from_millis(u64::from(req.timeout_ms))),
            transactional_id: None,
            partitions: req
                .partitions
                .into_iter()
                .map(|p| ProduceData {
                    topic: p.topic,
                    partition: p.partition,
                    records: p.records,
                })
                .collect(),
        };
        let partitions = self
            .service
            .produce(&ctx, req)
            .await
            .into_iter()
            .map(|k| {
                let (error_code, error_message) = error_fields(&k.result);
                let ok = k.result.ok();
                PartitionProduceResult {
                    topic: k.topic,
                    partition: k.partition,
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

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let ctx = self.context(&request)?;
        let queries = request
            .into_inner()
            .partitions
            .into_iter()
            .map(|p| DeleteRecordsQuery {
                topic: p.topic,
                partition: p.partition,
                offset: p.offset,
            })
            .collect();
        let partitions = self
            .service
            .delete_records(&ctx, queries)
            .await
            .into_iter()
            .map(|k| {
                let (error_code, error_message) = error_fields(&k.result);
                DeleteRecordsPartitionResult {
                    topic: k.topic,
                    partition: k.partition,
                    error_code,
                    error_message,
                    low_watermark: k.result.unwrap_or(-1),
                }
            })
            .collect();
        Ok(Response::new(DeleteRecordsResponse { partitions }))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = self.service.init_producer_id(&ctx, None, 0, (-1, -1)).await;
        let (producer_id, producer_epoch) = r.as_ref().map_or((-1, -1), |(id, e)| (*id, *e));
        Ok(Response::new(InitProducerIdResponse {
            error: error_result(&r),
            producer_id,
            producer_epoch: i32::from(producer_epoch),
        }))
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<FetchResponse>, Status> {
        let ctx = self.context(&request)?;
        let req = request.into_inner();
        let req = shale_service::FetchRequest {
            // gRPC has no throttle field: a throttled client's answer comes later.
            client_honors_throttle: false,
            partitions: req
                .partitions
                .into_iter()
                .map(|p| FetchSpec {
                    topic: p.topic,
                    partition: p.partition,
                    offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    current_leader_epoch: -1,
                })
                .collect(),
            max_wait: Duration::from_millis(u64::from(req.max_wait_ms)),
            min_bytes: req.min_bytes,
            max_bytes: req.max_bytes,
            read_from: ReadFrom::Leader,
            zero_copy: false,
            read_committed: false,
        };
        let answer = self.service.fetch(&ctx, req).await;
        let partitions = answer
            .partitions
            .into_iter()
            .map(|k| {
                // Not a zero-copy fetch: the records are in memory.
                let result = k.result.and_then(|f| {
                    let records = f.records.into_bytes();
                    Ok((
                        records.map_err(shale_broker::error::Error::Storage)?,
                        f.offsets,
                    ))
                });
                let (error_code, error_message) = error_fields(&result);
                let (records, offsets) = match result {
                    Ok((records, offsets)) => (records, Some(offsets)),
                    Err(_) => (Default::default(), None),
                };
                FetchPartitionResult {
                    topic: k.topic,
                    partition: k.partition,
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
        let ctx = self.context(&request)?;
        let queries = request
            .into_inner()
            .partitions
            .into_iter()
            .map(|p| OffsetQuery {
                topic: p.topic,
                partition: p.partition,
                timestamp: p.timestamp,
                read_committed: false,
            })
            .collect();
        let partitions = self
            .service
            .list_offsets(&ctx, queries)
            .await
            .into_iter()
            .map(|k| {
                let (error_code, error_message) = error_fields(&k.result);
                let found = k.result.ok().flatten();
                ListOffsetsPartitionResult {
                    topic: k.topic,
                    partition: k.partition,
                    error_code,
                    error_message,
                    offset: found.map_or(-1, |f| f.offset),
                    timestamp: found.map_or(-1, |f| f.timestamp),
                }
            })
            .collect();
        Ok(Response::new(ListOffsetsResponse { partitions }))
    }
}
