//! The checker, run once every fault is healed: it reads every partition from offset
//! 0 (the object store included) and compares the log with what was acknowledged and
//! what the consumer group saw, and the remote log with itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use shale_client::Client;
use shale_records::batch::BatchIter;
use shale_records::record::decode_records;

use crate::cluster::Database;
use crate::tally::{PARTITIONS, TOPIC, Tally};

/// What the checker found; `violations` is empty when every promise held.
#[derive(Debug, Default)]
pub struct Report {
    pub acked: usize,
    /// Records the acks=1 producer had acknowledged (not checked).
    pub acked_by_leader: u64,
    /// Second copies of acks=1 records (its retries, without idempotence).
    pub acks1_repeated: usize,
    pub stored: usize,
    pub consumed: usize,
    pub remote_segments: usize,
    /// librdkafka records written again under a later producer epoch (see `check`).
    pub resent_after_epoch_bump: usize,
    /// The transactional workload's check (with the `kafka` feature).
    #[cfg(feature = "kafka")]
    pub txns: Option<crate::txns::TxnReport>,
    pub violations: Vec<String>,
}

/// One stored record: its offset, value, and the producer epoch of its batch.
#[derive(Debug, Clone)]
pub struct Stored {
    pub offset: i64,
    pub value: String,
    pub epoch: i16,
}

/// Every partition's records from offset 0 to its high watermark, with the producer
/// epoch of each record's batch.
pub async fn read_log(client: &Client) -> anyhow::Result<BTreeMap<i32, Vec<Stored>>> {
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        let end = client.list_offset(TOPIC, p, -1).await?.unwrap_or(0);
        let mut records = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut next = 0;
        while next < end {
            anyhow::ensure!(
                Instant::now() < deadline,
                "partition {p}: read stalled at offset {next} of {end}"
            );
            let got = match client.fetch_partition(TOPIC, p, next, 1 << 20, 500).await {
                Ok(got) if got.error_code == 0 => got,
                _ => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            for item in BatchIter::new(&got.records) {
                let (h, range) = item?;
                for r in decode_records(&got.records.slice(range))? {
                    if r.offset < next {
                        continue;
                    }
                    next = r.offset + 1;
                    records.push(Stored {
                        offset: r.offset,
                        value: r
                            .value
                            .map(|v| String::from_utf8_lossy(&v).into_owned())
                            .unwrap_or_default(),
                        epoch: h.producer_epoch,
                    });
                }
            }
        }
        out.insert(p, records);
    }
    Ok(out)
}

pub async fn check(client: &Client, tally: &Tally, db: &Database) -> anyhow::Result<Report> {
    let log = read_log(client).await?;
    let acked = tally.acked.lock().unwrap().clone();
    let consumed = tally.consumed.lock().unwrap().clone();
    let mut r = Report {
        acked: acked.len(),
        acked_by_leader: tally
            .acked_by_leader
            .load(std::sync::atomic::Ordering::Relaxed),
        stored: log.values().map(Vec::len).sum(),
        consumed: consumed.len(),
        ..Report::default()
    };
    let mut violations = Vec::new();
    let mut v = |msg: String| {
        if violations.len() < 50 {
            violations.push(msg);
        }
    };

    // Dense offsets from 0, and each value stored once. One exception, counted apart:
    // librdkafka's idempotent producer, when it bumps its epoch (after an
    // OUT_OF_ORDER_SEQUENCE_NUMBER that followed a failed request, or a message
    // timeout), renumbers and sends again what it still holds, including a batch
    // whose first send was written but whose answer it never got. The second copy is
    // then under a higher producer epoch, and no broker can tell it from a new batch.
    let mut where_stored: HashMap<&str, (i32, i64, i16)> = HashMap::new();
    let mut resent: HashSet<(i32, i64)> = HashSet::new();
    for (p, records) in &log {
        for (i, s) in records.iter().enumerate() {
            if s.offset != i as i64 {
                v(format!(
                    "partition {p}: offset {} at position {i} (a gap or a repeat)",
                    s.offset
                ));
                break;
            }
            match where_stored.insert(&s.value, (*p, s.offset, s.epoch)) {
                Some((fp, _, fe)) if fp == *p && fe < s.epoch && s.value.starts_with("kafka-") => {
                    resent.insert((*p, s.offset));
                }
                // The acks=1 producer is not idempotent: its retries may repeat.
                Some(_) if s.value.starts_with(crate::tally::ACKS1) => {
                    r.acks1_repeated += 1;
                }
                Some(first) => v(format!(
                    "{} is stored twice: at {first:?} and at ({p}, {}, epoch {})",
                    s.value, s.offset, s.epoch
                )),
                None => {}
            }
        }
    }
    r.resent_after_epoch_bump = resent.len();
    // Every acknowledged record, at its offset (librdkafka acknowledges a batch the
    // broker answered DUPLICATE_SEQUENCE_NUMBER without an offset: there, anywhere in
    // its partition).
    for a in &acked {
        if a.offset < 0 {
            let stored = log
                .get(&a.partition)
                .is_some_and(|rs| rs.iter().any(|s| s.value == a.value));
            if !stored {
                v(format!(
                    "acknowledged {} in partition {} (offset not known) but it is not there",
                    a.value, a.partition
                ));
            }
            continue;
        }
        let got = log
            .get(&a.partition)
            .and_then(|rs| rs.get(a.offset as usize))
            .map(|s| s.value.as_str());
        if got != Some(a.value.as_str()) {
            v(format!(
                "acknowledged {} at ({}, {}) but the log holds {got:?} there",
                a.value, a.partition, a.offset
            ));
        }
    }
    // Per-partition order of each producer's records.
    for (p, records) in &log {
        let mut last: HashMap<&str, &str> = HashMap::new();
        for s in records {
            let (offset, value) = (s.offset, &s.value);
            // Without idempotence a retried acks=1 batch may land after a later one.
            if resent.contains(&(*p, offset)) || value.starts_with(crate::tally::ACKS1) {
                continue;
            }
            let Some((producer, seq)) = value.rsplit_once('-') else {
                continue;
            };
            if let Some(prev) = last.insert(producer, seq)
                && prev >= seq
            {
                v(format!(
                    "partition {p}: {producer}'s record {seq} at offset {offset} follows {prev}"
                ));
            }
        }
    }
    // The group saw every record up to what it committed, each as stored.
    let committed = tally.committed.lock().unwrap().clone();
    for (p, records) in &log {
        let upto = committed.get(p).copied().unwrap_or(0);
        for s in records.iter().take_while(|s| s.offset < upto) {
            let (offset, value) = (&s.offset, &s.value);
            match consumed.get(&(*p, *offset)) {
                None => v(format!(
                    "the group committed partition {p} up to {upto} but never saw offset {offset}"
                )),
                Some(seen) if seen != value => v(format!(
                    "the group saw {seen} at ({p}, {offset}), the log holds {value}"
                )),
                Some(_) => {}
            }
        }
        if upto < records.len() as i64 {
            v(format!(
                "the group's committed offset of partition {p} is {upto}, short of the end {}",
                records.len()
            ));
        }
    }
    // The remote log: finished segments back to back, from its start.
    let rows = db.query(&format!(
        "SELECT s.partition_id, s.base_offset, s.end_offset FROM remote_segments s \
         JOIN topics t ON t.id = s.topic_id WHERE t.name = '{TOPIC}' \
         AND s.state = 'COPY_FINISHED' ORDER BY s.partition_id, s.base_offset"
    ))?;
    let mut prev: BTreeMap<i32, i64> = BTreeMap::new();
    let mut remote_segments = 0;
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let f: Vec<i64> = line.split('|').filter_map(|x| x.parse().ok()).collect();
        let [p, base, end] = f[..] else {
            v(format!("unreadable remote segment row {line:?}"));
            continue;
        };
        remote_segments += 1;
        let p = p as i32;
        if let Some(prev_end) = prev.insert(p, end)
            && base != prev_end + 1
        {
            v(format!(
                "partition {p}: remote segment [{base}, {end}] after one ending at {prev_end} \
                 (a gap or an overlap)"
            ));
        }
        if end >= log.get(&p).map_or(0, |rs| rs.len() as i64) {
            v(format!(
                "partition {p}: remote segment [{base}, {end}] holds offsets past the log end"
            ));
        }
    }
    r.remote_segments = remote_segments;
    r.violations = violations;
    Ok(r)
}
