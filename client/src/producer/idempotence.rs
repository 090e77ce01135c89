//! Idempotence: the producer id and epoch from the broker, the per-partition sequence
//! numbers stamped into batches, and the epoch bump that renumbers unsent batches
//! after a sequence gap (Kafka's KIP-360).

use std::time::{Duration, Instant};

use bytes::BytesMut;
use shale_proto::v1::InitProducerIdRequest;
use shale_records::batch::set_producer;

use super::accumulator::{Accumulator, Batch};
use super::sender::Sender;
use crate::{Error, Result, check};

impl Sender {
    pub(super) async fn init_producer_id(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        let mut backoff = self.config.retry_backoff;
        loop {
            let r = async {
                let r = self
                    .client
                    .data_any()
                    .init_producer_id(InitProducerIdRequest {})
                    .await?
                    .into_inner();
                if let Some(e) = r.error {
                    check(e.error_code, &e.error_message)?;
                }
                Ok::<_, Error>((r.producer_id, r.producer_epoch as i16))
            }
            .await;
            match r {
                Ok(p) => {
                    tracing::debug!(producer_id = p.0, "idempotent producer id");
                    self.shared.state().producer = Some(p);
                    return Ok(());
                }
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every batch of a partition in flight has ended: start a new epoch, numbering
    /// each partition's unsent batches from 0.
    pub(super) fn bump_epoch(&self, acc: &mut Accumulator) {
        acc.bump_epoch = false;
        let Some((id, epoch)) = acc.producer else {
            return;
        };
        if epoch == i16::MAX {
            // A fresh id is needed; the sender asks for one before the next drain.
            acc.producer = None;
        } else {
            acc.producer = Some((id, epoch + 1));
        }
        tracing::info!(
            producer_id = id,
            epoch = epoch + 1,
            "bumping the producer epoch"
        );
        for q in &mut acc.partitions {
            q.next_seq = 0;
            q.acked_seq = 0;
            q.retrying = false;
            q.last_cause = None;
            for b in &mut q.queued {
                b.seq = None;
            }
        }
    }
}

pub(super) fn wrap_seq(seq: i32, records: i32) -> i32 {
    ((i64::from(seq) + i64::from(records)) % (i64::from(i32::MAX) + 1)) as i32
}

pub(super) fn stamp(b: &mut Batch, producer_id: i64, epoch: i16, seq: i32) {
    let data = std::mem::take(&mut b.data);
    let mut m = data
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    set_producer(&mut m, producer_id, epoch, seq);
    b.data = m.freeze();
    b.seq = Some((seq, epoch));
}
