//! The fetch and list-offsets paths.
//!
//! Fetch reads whole batches from each requested partition up to the high watermark,
//! bounded by the partition's and the response's byte limits (the first batch of the
//! response is always returned whole, however large). With less than `min_bytes`
//! available it long-polls: it waits on the partitions' high-watermark channels until
//! enough arrives or `max_wait` passes.
//!
//! A Kafka consumer that names its rack (Fetch v11+, KIP-392) may read from a
//! follower, which answers up to the high watermark it knows; its leader sends it to
//! an in-sync follower in that rack holding its offset (`preferred_read_replica`),
//! answering at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use shale_cluster::placement;
use shale_log::Records;

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::partition::{Partition, PartitionOffsets};

/// Longest a fetch may wait.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

pub struct FetchSpec {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
    /// The leader epoch the client knows (-1: not said): a follower answering a
    /// consumer refuses another (Kafka's KIP-320).
    pub current_leader_epoch: i32,
}

pub struct Fetched {
    /// A slice of a segment file only where the fetch asked for one (`zero_copy`).
    pub records: Records,
    pub offsets: PartitionOffsets,
    /// For a `read_committed` fetch: the aborted transactions with records in the
    /// range read, whose records the client drops.
    pub aborted: Vec<shale_log::AbortedTxn>,
    /// The replica the consumer should fetch this partition from instead (no
    /// records then).
    pub preferred_read_replica: Option<i32>,
}

/// How a fetch reads each partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadHow {
    /// A follower may answer (see [`ReadFrom::Nearest`]).
    pub any_replica: bool,
    /// Records may be answered as slices of segment files.
    pub zero_copy: bool,
    /// Only records below the last stable offset, with the aborted transactions.
    pub read_committed: bool,
}

/// Which replicas may answer a fetch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// The leader only (Shale's own clients; Kafka consumers without `client.rack`).
    #[default]
    Leader,
    /// The replica nearest a consumer in `rack` (Kafka Fetch v11+ with `client.rack`,
    /// KIP-392): a follower answers up to the high watermark it knows; a leader sends
    /// the consumer to an in-sync follower in `rack` that holds its offset and is
    /// reachable on the consumer's `listener`.
    Nearest { rack: String, listener: String },
}

impl Broker {
    /// With `zero_copy`, records of the newest segments are answered as slices of
    /// their files ([`shale_log::ReadPlan::locate`]), for a connection that sends
    /// them with `sendfile(2)`; otherwise, and for older segments and the object
    /// store, as CRC-checked bytes. With `read_committed`, reads stop at the last
    /// stable offset and answer the aborted transactions of the range.
    #[allow(clippy::too_many_arguments)]
    pub async fn fetch(
        &self,
        specs: Vec<FetchSpec>,
        max_wait: Duration,
        min_bytes: i32,
        max_bytes: i32,
        read_from: &ReadFrom,
        zero_copy: bool,
        read_committed: bool,
    ) -> Vec<Result<Fetched>> {
        let how = ReadHow {
            any_replica: matches!(read_from, ReadFrom::Nearest { .. }),
            zero_copy,
            read_committed,
        };
        let deadline = tokio::time::Instant::now() + max_wait.min(MAX_WAIT_CAP);
        let any_replica = how.any_replica;
        let lookups: Vec<Result<Arc<Partition>>> = specs
            .iter()
            .map(|s| match any_replica {
                true => self.replica_for_consumer(s),
                false => self.leader_partition(&s.topic, s.partition),
            })
            .collect();
        let redirects: Vec<Option<i32>> = match read_from {
            ReadFrom::Nearest { rack, listener } => {
                self.preferred_read_replicas(rack, listener, &lookups, &specs)
            }
            ReadFrom::Leader => vec![None; lookups.len()],
        };
        if lookups.iter().any(Result::is_err) || redirects.iter().any(Option::is_some) {
            // An unknown partition, or one to be read elsewhere, answers at once, with
            // whatever the others hold.
            let mut reads = Vec::new();
            let mut answers: Vec<Option<Result<Fetched>>> = Vec::new();
            for ((p, s), to) in lookups.into_iter().zip(&specs).zip(&redirects) {
                match (p, to) {
                    (Ok(p), Some(id)) => answers.push(Some(Ok(Fetched {
                        records: Records::default(),
                        offsets: p.offsets(),
                        aborted: Vec::new(),
                        preferred_read_replica: Some(*id),
                    }))),
                    (p, _) => {
                        reads.push(p.map(|p| (p, s.offset, s.max_bytes)));
                        answers.push(None);
                    }
                }
            }
            let stats = &self.stats.requests;
            let sent = redirects.iter().flatten().count();
            crate::stats::RequestStats::add(&stats.preferred_replica_redirects, sent as u64);
            let read_from: Vec<Option<Arc<Partition>>> = reads
                .iter()
                .map(|r| r.as_ref().ok().map(|(p, ..)| p.clone()))
                .collect();
            let read = self.read_all(reads, max_bytes, how).await;
            self.count_fetch(read_from.iter().map(Option::as_ref), &read);
            let mut read = read.into_iter();
            return answers
                .into_iter()
                .map(|a| a.unwrap_or_else(|| read.next().expect("one answer per read")))
                .collect();
        }
        let partitions: Vec<Arc<Partition>> = lookups.into_iter().flatten().collect();
        loop {
            // Subscribe before reading so an append in between still wakes us.
            let mut watchers: Vec<_> = partitions.iter().map(|p| p.subscribe()).collect();
            let reads = partitions
                .iter()
                .zip(&specs)
                .map(|(p, s)| Ok((p.clone(), s.offset, s.max_bytes)))
                .collect();
            let results = self.read_all(reads, max_bytes, how).await;
            let total: usize = results
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .map(|f| f.records.len())
                .sum();
            let done = total >= min_bytes.max(0) as usize
                || results.iter().any(Result::is_err)
                || watchers.is_empty()
                || tokio::time::Instant::now() >= deadline
                || self.cancel.is_cancelled();
            if done {
                self.count_fetch(partitions.iter().map(Some), &results);
                return results;
            }
            let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = self.cancel.cancelled() => {}
            }
        }
    }

    /// Counts a fetch answered: its bytes, and those this broker read as a follower.
    /// `partitions`: the partition of each result, if it was found.
    fn count_fetch<'a>(
        &self,
        partitions: impl Iterator<Item = Option<&'a Arc<Partition>>>,
        results: &[Result<Fetched>],
    ) {
        let bytes = |f: &Result<Fetched>| f.as_ref().map_or(0, |f| f.records.len() as u64);
        let total: u64 = results.iter().map(bytes).sum();
        let sliced: u64 = (results.iter().flatten())
            .filter(|f| matches!(f.records, Records::Slice(_)))
            .map(|f| f.records.len() as u64)
            .sum();
        let as_follower: u64 = partitions
            .zip(results)
            .filter(|(p, _)| p.is_some_and(|p| !p.is_leader()))
            .map(|(_, f)| bytes(f))
            .sum();
        let stats = &self.stats.requests;
        crate::stats::RequestStats::add(&stats.fetch_requests, 1);
        crate::stats::RequestStats::add(&stats.fetched_bytes, total);
        crate::stats::RequestStats::add(&stats.zero_copy_fetched_bytes, sliced);
        crate::stats::RequestStats::add(&stats.follower_fetched_bytes, as_follower);
    }

    /// This broker's replica of a partition for a consumer that may read from any
    /// replica: a follower checks the leader epoch the consumer knows, as Kafka's do
    /// (KIP-320), so that one with stale metadata learns of the change.
    fn replica_for_consumer(&self, s: &FetchSpec) -> Result<Arc<Partition>> {
        let p = self.partition(&s.topic, s.partition)?;
        let (sent, current) = (s.current_leader_epoch, p.leader_epoch());
        match sent {
            _ if p.is_leader() || sent < 0 || sent == current => Ok(p),
            _ if sent < current => Err(Error::FencedLeaderEpoch { sent, current }),
            _ => Err(Error::UnknownLeaderEpoch { sent, current }),
        }
    }

    /// For each partition this broker leads, the in-sync follower in `client_rack`
    /// that holds the consumer's offset and that it can reach on `listener`, to read
    /// from instead, if any ([`placement::preferred_read_replica`]).
    fn preferred_read_replicas(
        &self,
        client_rack: &str,
        listener: &str,
        partitions: &[Result<Arc<Partition>>],
        specs: &[FetchSpec],
    ) -> Vec<Option<i32>> {
        let me = self.config.broker_id;
        let racks: HashMap<i32, Option<String>> = self
            .brokers()
            .into_iter()
            .filter(|b| b.is_alive() && b.broker_id != me && b.endpoint(listener).is_some())
            .map(|b| (b.broker_id, b.rack))
            .chain([(me, self.config.rack.clone())])
            .collect();
        let rack_of = |b: i32| racks.get(&b).and_then(Option::as_deref);
        partitions
            .iter()
            .zip(specs)
            .map(|(p, s)| {
                let p = p.as_ref().ok()?;
                let holding = p.followers_holding(s.offset);
                let spread = p.index.max(0) as usize;
                placement::preferred_read_replica(client_rack, me, &holding, rack_of, spread)
            })
            .collect()
    }

    /// Kafka ListOffsets for one partition: remote segments below the local log first
    /// for a timestamp, then the local log (see [`Partition::list_offset`]).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>> {
        self.list_offset_as(topic, partition, timestamp, false)
            .await
    }

    /// [`Broker::list_offset`] for a `read_committed` consumer: latest is the last
    /// stable offset, and lookups by time stop there.
    pub async fn list_offset_as(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        read_committed: bool,
    ) -> Result<Option<(i64, i64)>> {
        let p = self.leader_partition(topic, partition)?;
        // A read replica's history is all remote: until it is known, any answer
        // (earliest, latest, by time) could send a consumer past it.
        if !p.config().read_replica_of.is_empty() && !p.remote_state().loaded {
            return Err(Error::RemoteLogNotReady(format!(
                "read replica '{topic}' has not read its source's segments yet"
            )));
        }
        let found = match timestamp {
            ts if ts >= 0 => self.remote_offset_for_timestamp(&p, ts).await?,
            _ => None,
        };
        let found = match found {
            Some(found) => Some(found),
            None => {
                let p = p.clone();
                tokio::task::spawn_blocking(move || p.list_offset_as(timestamp, read_committed))
                    .await
                    .map_err(Error::from)??
            }
        };
        // A segment may still hold records below the log start (DeleteRecords moved
        // it inside the segment): they are gone, the answer is the log start.
        let log_start = p.offsets().log_start_offset;
        Ok(found.map(|(offset, ts)| (offset.max(log_start), ts)))
    }

    /// Reads every partition within the response's byte budget: from the object store
    /// below the local log start, else from the local log. When the budget covers
    /// every partition's own limit, the partitions are read at once (a replay's remote
    /// reads overlap; each partition may return its first batch whole, however
    /// large); otherwise one after another, each with what the ones before it left.
    async fn read_all(
        &self,
        reads: Vec<Result<(Arc<Partition>, i64, i32)>>,
        max_bytes: i32,
        how: ReadHow,
    ) -> Vec<Result<Fetched>> {
        let wanted: u64 = reads
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|(_, _, limit)| (*limit).max(0) as u64)
            .sum();
        if reads.len() > 1 && wanted <= max_bytes.max(0) as u64 {
            return futures::future::join_all(reads.into_iter().map(|read| async move {
                let (p, offset, limit) = read?;
                let limit = limit.max(0) as usize;
                self.read_one(&p, offset, limit, true, how).await
            }))
            .await;
        }
        let mut remaining = max_bytes.max(0) as usize;
        // The response's first batch comes whole, however large.
        let mut whole_first = true;
        let mut out = Vec::with_capacity(reads.len());
        for read in reads {
            let result = match read {
                Ok((p, offset, partition_max)) => {
                    let limit = remaining.min(partition_max.max(0) as usize);
                    self.read_one(&p, offset, limit, whole_first, how).await
                }
                Err(e) => Err(e),
            };
            if let Ok(f) = &result {
                whole_first &= f.records.is_empty();
                remaining = remaining.saturating_sub(f.records.len());
            }
            out.push(result);
        }
        out
    }

    pub async fn read_one(
        &self,
        p: &Partition,
        offset: i64,
        limit: usize,
        whole_first: bool,
        how: ReadHow,
    ) -> Result<Fetched> {
        let slice = how.zero_copy.then_some(limit);
        let (plan, offsets) = p.plan_fetch(offset, how.any_replica, slice, how.read_committed)?;
        let aborted = || match how.read_committed {
            true => p.aborted_between(offset, offsets.last_stable_offset),
            false => Vec::new(),
        };
        let Some(plan) = plan else {
            // Below the local log: the object store, or out of range. A tiered
            // partition whose remote log is not known yet cannot tell which: retriable,
            // never out of range (a client would reset its position and skip records).
            if p.config().has_remote_log() && !p.remote_state().loaded {
                return Err(Error::RemoteLogNotReady(format!(
                    "the remote log of partition {} of '{}' is not loaded yet",
                    p.index, p.topic
                )));
            }
            if how.read_committed && offset >= offsets.last_stable_offset {
                // Nothing stable to read (a transaction open since below the local
                // log start).
                return Ok(Fetched {
                    records: Records::default(),
                    offsets,
                    aborted: Vec::new(),
                    preferred_read_replica: None,
                });
            }
            return match self.read_remote(p, offset, limit, whole_first).await {
                Some(records) if how.read_committed => {
                    let stable = offsets.last_stable_offset;
                    let (records, next) = crate::partition::batches_below(records?, stable);
                    let upper = next.unwrap_or(offset).min(stable);
                    Ok(Fetched {
                        records: records.into(),
                        offsets,
                        aborted: p.aborted_in_both_tiers(offset, upper),
                        preferred_read_replica: None,
                    })
                }
                Some(records) => Ok(Fetched {
                    records: records?.into(),
                    offsets,
                    aborted: Vec::new(),
                    preferred_read_replica: None,
                }),
                None => {
                    let now = p.offsets();
                    Err(Error::OffsetOutOfRange {
                        offset,
                        log_start: now.log_start_offset,
                        log_end: now.log_end_offset,
                    })
                }
            };
        };
        // Local reads (a slice's few header reads too) may block on the disk: off
        // the async workers.
        let records = tokio::task::spawn_blocking(move || match plan.locate(whole_first)? {
            Some(slice) => Ok(slice),
            None => plan.read(limit, whole_first).map(Records::from),
        })
        .await??;
        Ok(Fetched {
            records,
            offsets,
            aborted: aborted(),
            preferred_read_replica: None,
        })
    }
}
