//! Data calls on one partition for tools and tests: ListOffsets, a raw fetch, a raw
//! produce (the producer and consumers batch their own).

use std::time::Duration;

use crate::security::Chan;
use shale_proto::v1::data_client::DataClient;
use shale_proto::v1::*;

use crate::connection::data_client;
use crate::{Client, Error, Result, check};

impl Client {
    /// Kafka ListOffsets: `timestamp` -1 latest, -2 earliest, else first offset at or
    /// after that time (`None`: no such record).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<i64>> {
        let timeout = self.request_timeout;
        self.with_leader(topic, partition, |mut data| async move {
            let mut req = tonic::Request::new(ListOffsetsRequest {
                partitions: vec![ListOffsetsPartition {
                    topic: topic.into(),
                    partition,
                    timestamp,
                }],
            });
            req.set_timeout(timeout);
            let r = data.list_offsets(req).await?.into_inner();
            let p = r
                .partitions
                .into_iter()
                .next()
                .ok_or_else(|| Error::Invalid("empty list offsets response".into()))?;
            check(p.error_code, &p.error_message)?;
            Ok((p.offset >= 0).then_some(p.offset))
        })
        .await
    }

    /// Kafka DeleteRecords: deletes the partition's records below `offset` (-1: below
    /// the high watermark); returns its log start offset afterwards.
    pub async fn delete_records(&self, topic: &str, partition: i32, offset: i64) -> Result<i64> {
        let timeout = self.request_timeout;
        self.with_leader(topic, partition, |mut data| async move {
            let mut req = tonic::Request::new(DeleteRecordsRequest {
                partitions: vec![DeleteRecordsPartition {
                    topic: topic.into(),
                    partition,
                    offset,
                }],
            });
            req.set_timeout(timeout);
            let r = data.delete_records(req).await?.into_inner();
            let p = r
                .partitions
                .into_iter()
                .next()
                .ok_or_else(|| Error::Invalid("empty delete records response".into()))?;
            check(p.error_code, &p.error_message)?;
            Ok(p.low_watermark)
        })
        .await
    }

    /// One fetch of one partition, returned as the broker answered it (error code
    /// included), for tools and tests that look at raw batches.
    pub async fn fetch_partition(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        max_wait_ms: u32,
    ) -> Result<FetchPartitionResult> {
        let timeout = self.request_timeout + Duration::from_millis(u64::from(max_wait_ms));
        let fetch = |mut data: DataClient<Chan>| async move {
            let mut req = tonic::Request::new(FetchRequest {
                max_wait_ms,
                min_bytes: 1,
                max_bytes,
                partitions: vec![FetchPartition {
                    topic: topic.into(),
                    partition,
                    fetch_offset: offset,
                    partition_max_bytes: max_bytes,
                }],
            });
            req.set_timeout(timeout);
            data.fetch(req)
                .await?
                .into_inner()
                .partitions
                .into_iter()
                .next()
                .ok_or_else(|| Error::Invalid("empty fetch response".into()))
        };
        if let Err(e) = self.leader(topic, partition).await
            && !e.is_retriable()
        {
            // No such partition: let the broker say so, as it would to any client.
            return fetch(data_client(self.bootstrap_channel.clone())).await;
        }
        self.with_leader(topic, partition, |data| async move {
            let p = fetch(data).await?;
            // Leadership errors are retried; others are the caller's to read.
            match Error::from_code(p.error_code, p.error_message.clone()) {
                Some(e) if e.is_leadership() => Err(e),
                _ => Ok(p),
            }
        })
        .await
    }

    /// Sends one produce request for one partition as is and returns the broker's answer.
    pub async fn produce_raw(
        &self,
        topic: &str,
        partition: i32,
        acks: i32,
        records: bytes::Bytes,
    ) -> Result<PartitionProduceResult> {
        // No such partition: send it anyway, so the broker answers as to any client.
        let mut data = match self.leader(topic, partition).await {
            Ok((_, data)) => data,
            Err(e) if e.is_retriable() => return Err(e),
            Err(_) => data_client(self.bootstrap_channel.clone()),
        };
        let timeout = self.request_timeout;
        let mut req = tonic::Request::new(ProduceRequest {
            acks,
            timeout_ms: timeout.as_millis() as u32,
            partitions: vec![PartitionProduceData {
                topic: topic.into(),
                partition,
                records,
            }],
        });
        req.set_timeout(timeout + Duration::from_secs(5));
        let r = data.produce(req).await?.into_inner();
        r.partitions
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty produce response".into()))
    }
}
