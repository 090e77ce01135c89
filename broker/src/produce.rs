//! The produce path: route each partition's batches to its log, answer per acks.
//!
//! `acks=0` and `acks=1` are answered after the leader's append; `acks=all` once the
//! high watermark covers the batch, i.e. every ISR member has it, and only if the ISR
//! had `min.insync.replicas` members when the batch was appended and still has when
//! it is acknowledged. Nothing is acknowledged without a valid broker lease.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::{Appended, Partition};

/// A partition whose append an acks=all produce waits on, with its min.insync.replicas.
type Committing = (Arc<Partition>, usize);

/// One partition's share of a produce request.
pub struct ProduceData {
    pub topic: String,
    pub partition: i32,
    pub records: Bytes,
}

impl Broker {
    /// Appends each partition's batches; one result per partition, in order (a
    /// request-level refusal — bad acks, shutting down, no lease, a full disk — is
    /// every partition's answer).
    /// `transactional_id`: the producer's, when it writes in a transaction.
    pub async fn produce(
        &self,
        acks: i32,
        timeout: std::time::Duration,
        transactional_id: Option<&str>,
        data: Vec<ProduceData>,
    ) -> Vec<Result<Appended>> {
        let limit = self.config.log.local_disk_limit_bytes;
        let used = self.stats.local_log_bytes.load(Ordering::Relaxed);
        let refusal = {
            if !matches!(acks, -1..=1) {
                Some(Error::InvalidRequiredAcks(acks))
            } else if self.cancel.is_cancelled() {
                Some(Error::ShuttingDown)
            } else if !self.lease_valid() {
                Some(Error::LeaseLapsed)
            } else if limit > 0 && used >= limit {
                Some(Error::LocalDiskFull { used, limit })
            } else {
                None
            }
        };
        if let Some(e) = refusal {
            let e = Arc::new(e);
            return data.iter().map(|_| Err(Error::Shared(e.clone()))).collect();
        }
        let bytes: u64 = data.iter().map(|d| d.records.len() as u64).sum();
        self.stats
            .local_log_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        let stats = &self.stats.requests;
        crate::stats::RequestStats::add(&stats.produce_requests, 1);
        crate::stats::RequestStats::add(&stats.produced_bytes, bytes);
        let count = data.len();
        let mut targets: Vec<(Result<Arc<Partition>>, Bytes, Option<i32>)> = Vec::new();
        for d in data {
            let p = self.partition(&d.topic, d.partition);
            let verified = match &p {
                Ok(p) => self.verify_txn(transactional_id, p, &d.records).await,
                Err(_) => Ok(None),
            };
            match verified {
                Ok(v) => targets.push((p, d.records, v)),
                Err(e) => targets.push((Err(e), d.records, None)),
            }
        }
        let appended = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            targets
                .into_iter()
                .map(|(p, records, verified)| match p {
                    Err(e) => (Err(e), None),
                    Ok(p) if !p.config().read_replica_of.is_empty() => {
                        let of = p.config().read_replica_of.clone();
                        let topic = p.topic.to_string();
                        (Err(Error::ReadReplica { topic, of }), None)
                    }
                    Ok(p) if p.config().read_only => {
                        (Err(Error::ReadOnly(p.topic.to_string())), None)
                    }
                    Ok(p) => {
                        let min_isr = p.config().min_insync_replicas.max(1) as usize;
                        let min = (acks == -1).then_some(min_isr);
                        let r = p.append_verified(&records, min, verified, now);
                        (r, Some((p, min_isr)))
                    }
                })
                .collect::<Vec<(Result<Appended>, Option<Committing>)>>()
        })
        .await;
        let appended = match appended {
            Ok(appended) => appended,
            // The append task panicked: no partition knows what became of its batches.
            Err(e) => {
                let e = Arc::new(Error::from(e));
                return (0..count).map(|_| Err(Error::Shared(e.clone()))).collect();
            }
        };
        let results = futures::future::join_all(appended.into_iter().map(|(r, p)| async move {
            let a = r?;
            if a.duplicate {
                crate::stats::RequestStats::add(&stats.duplicate_batches, 1);
            }
            if acks == -1
                && let Some((p, min_isr)) = p
            {
                // A stopping broker no longer serves its followers: answer at once
                // (retriable) rather than wait out the timeout.
                tokio::select! {
                    r = p.wait_committed(a.last_offset, a.leader_epoch, min_isr, timeout) => r?,
                    _ = self.cancel.cancelled() => return Err(Error::ShuttingDown),
                }
            }
            Ok(a)
        }))
        .await;
        // A lease that lapsed meanwhile may already be someone else's leadership.
        if !self.lease_valid() {
            return results
                .into_iter()
                .map(|r| r.and(Err(Error::LeaseLapsed)))
                .collect();
        }
        results
    }
}
