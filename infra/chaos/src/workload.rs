//! What runs against the cluster while faults happen: idempotent `acks=all` producers
//! (the Rust client over gRPC, and librdkafka over the Kafka listener with the
//! `kafka` feature) that record every acknowledgement, an `acks=1` producer whose
//! records carry no timestamp (-1, as some clients send), and a consumer group whose
//! members record every record they see and commit after each poll. The `acks=1`
//! records may be lost (by the strict min-ISR rule they stay unread until the ISR
//! recovers) or, without idempotence, written twice; nothing a consumer read may change.
//! With the `kafka` feature, a transactional librdkafka producer writes to a second
//! topic too (see `txns`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shale_client::{
    Acks, Client, GroupConfig, GroupConsumer, OffsetReset, Producer, ProducerRecord,
};

use crate::tally::{ACKS1, Ack, GROUP, PARTITIONS, TOPIC, Tally, value};

pub struct Workload {
    pub tally: Arc<Tally>,
    stop_producing: Arc<AtomicBool>,
    stop_consuming: Arc<AtomicBool>,
    producers: Vec<tokio::task::JoinHandle<()>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
    /// The transactional workload's outcomes (with the `kafka` feature).
    #[cfg(feature = "kafka")]
    pub txns: Option<Arc<crate::txns::TxnTally>>,
}

impl Workload {
    /// Creates the topic (RF 3, min.insync.replicas 2, tiering with small segments)
    /// and starts `producers` Rust producers sending `rate` records/s each, a
    /// librdkafka producer (with the `kafka` feature, when `kafka_bootstrap` is given),
    /// and two group members.
    pub async fn start(
        client: &Client,
        producers: usize,
        rate: u64,
        kafka_bootstrap: Option<String>,
    ) -> anyhow::Result<Self> {
        client
            .create_topic(TOPIC, PARTITIONS, 3, topic_configs())
            .await?;
        let tally = Arc::new(Tally::default());
        let stop_producing = Arc::new(AtomicBool::new(false));
        let stop_consuming = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for i in 0..producers {
            let (client, tally, stop) = (client.clone(), tally.clone(), stop_producing.clone());
            let name = format!("grpc{i}");
            handles.push(tokio::spawn(async move {
                if let Err(e) = produce(client, &name, Acks::All, rate, tally, stop).await {
                    eprintln!("chaos: producer {name} stopped: {e}");
                }
            }));
        }
        let (c, tally1, stop) = (client.clone(), tally.clone(), stop_producing.clone());
        handles.push(tokio::spawn(async move {
            if let Err(e) = produce(c, ACKS1, Acks::Leader, rate, tally1, stop).await {
                eprintln!("chaos: producer {ACKS1} stopped: {e}");
            }
        }));
        #[cfg(feature = "kafka")]
        let mut txns = None;
        #[cfg(feature = "kafka")]
        if let Some(bootstrap) = kafka_bootstrap {
            let (tally, stop) = (tally.clone(), stop_producing.clone());
            let b = bootstrap.clone();
            handles.push(tokio::task::spawn_blocking(move || {
                crate::kafka::produce(&b, rate, tally, stop)
            }));
            let (topic, partitions) = (crate::txns::TXN_TOPIC, crate::txns::TXN_PARTITIONS);
            client
                .create_topic(topic, partitions, 3, topic_configs())
                .await?;
            let (tally, stop) = (Arc::new(Default::default()), stop_producing.clone());
            txns = Some(Arc::clone(&tally));
            handles.push(tokio::task::spawn_blocking(move || {
                crate::txns::produce(&bootstrap, tally, stop)
            }));
        }
        #[cfg(not(feature = "kafka"))]
        let _ = kafka_bootstrap;
        let mut consumers = Vec::new();
        for m in 0..2 {
            let (client, tally, stop) = (client.clone(), tally.clone(), stop_consuming.clone());
            consumers.push(tokio::spawn(async move {
                consume(client, m, tally, stop).await;
            }));
        }
        Ok(Self {
            tally,
            stop_producing,
            stop_consuming,
            producers: handles,
            consumers,
            #[cfg(feature = "kafka")]
            txns,
        })
    }

    /// Stops the producers and waits for their last answers.
    pub async fn stop_producing(&mut self) {
        self.stop_producing.store(true, Ordering::SeqCst);
        for h in self.producers.drain(..) {
            let _ = h.await;
        }
    }

    /// Stops the group's members (after they have read everything, see the checker).
    pub async fn stop_consuming(&mut self) {
        self.stop_consuming.store(true, Ordering::SeqCst);
        for h in self.consumers.drain(..) {
            let _ = h.await;
        }
    }
}

/// The workload's topics: RF 3 (set by the caller), min.insync.replicas 2, tiered with
/// small segments and little kept locally, kept forever.
fn topic_configs() -> std::collections::BTreeMap<String, String> {
    [
        ("min.insync.replicas", "2"),
        ("segment.bytes", "65536"),
        ("local.retention.bytes", "131072"),
        ("retention.ms", "-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

async fn produce(
    client: Client,
    name: &str,
    acks: Acks,
    rate: u64,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let checked = acks == Acks::All;
    let producer = Producer::new(client, TOPIC, acks)
        .await?
        .with_delivery_timeout(Duration::from_secs(30));
    let producer = Arc::new(producer);
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut next = tokio::time::Instant::now();
    let mut seq = 0u64;
    let mut pending = tokio::task::JoinSet::new();
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep_until(next).await;
        next += interval;
        let v = value(name, seq);
        seq += 1;
        let record = ProducerRecord {
            value: Some(v.clone().into()),
            // Kafka's NO_TIMESTAMP, from the producer that is not checked.
            timestamp: (!checked).then_some(-1),
            ..Default::default()
        };
        let delivery = match producer.send(record).await {
            Ok(d) => d,
            Err(_) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let tally = tally.clone();
        pending.spawn(async move {
            match delivery.await {
                Ok(_) if !checked => {
                    tally.acked_by_leader.fetch_add(1, Ordering::Relaxed);
                }
                Ok(m) => tally.acked.lock().unwrap().push(Ack {
                    partition: m.partition,
                    offset: m.offset,
                    value: v,
                }),
                Err(_) => {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while pending.try_join_next().is_some() {}
    }
    let _ = producer.flush().await;
    while pending.join_next().await.is_some() {}
    Ok(())
}

async fn consume(client: Client, member: usize, tally: Arc<Tally>, stop: Arc<AtomicBool>) {
    let mut config = GroupConfig::new(GROUP);
    config.client_id = format!("chaos-member-{member}");
    config.session_timeout = Duration::from_secs(6);
    config.auto_commit_interval = None;
    config.auto_offset_reset = OffsetReset::Earliest;
    let mut c = GroupConsumer::new(client, &[TOPIC], config);
    while !stop.load(Ordering::SeqCst) {
        match c.poll(Duration::from_millis(500)).await {
            Ok(records) => {
                if records.is_empty() {
                    continue;
                }
                {
                    let mut seen = tally.consumed.lock().unwrap();
                    for r in &records {
                        let v = r
                            .value
                            .as_ref()
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                            .unwrap_or_default();
                        seen.insert((r.partition, r.offset), v);
                    }
                }
                // Commits what was just recorded (at least once: a member that dies
                // before it commits leaves its records to be read again).
                if c.commit_sync().await.is_ok() {
                    let mut committed = tally.committed.lock().unwrap();
                    for ((_, partition), offset) in c.positions() {
                        let e = committed.entry(partition).or_insert(offset);
                        *e = (*e).max(offset);
                    }
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let _ = c.close().await;
}
