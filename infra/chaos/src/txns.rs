//! The transactional workload (with the `kafka` feature): a librdkafka transactional
//! producer writes transactions of [`TXN_RECORDS`] records spread over the partitions
//! of [`TXN_TOPIC`] (tiered like the main topic), committing three of every four and
//! aborting the fourth, and records each transaction's outcome as the client learned
//! it. The check reads the topic from offset 0 with `read_committed` (through the
//! Kafka listener, so the bucket's aborted lists are used too): every committed
//! transaction is there whole and once, no record of an aborted one is, and one whose
//! outcome the client never learned (its commit failed without saying which way) is
//! there whole or not at all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

pub const TXN_TOPIC: &str = "chaos-txn";
pub const TXN_PARTITIONS: i32 = 3;
const TXN_RECORDS: usize = 12;
const TIMEOUT: Duration = Duration::from_secs(60);

/// Each transaction's outcome as the producer learned it, by transaction number.
#[derive(Default)]
pub struct TxnTally {
    pub committed: Mutex<BTreeSet<u64>>,
    pub aborted: Mutex<BTreeSet<u64>>,
    pub in_doubt: Mutex<BTreeSet<u64>>,
}

/// What the transactional check found.
#[derive(Debug, Default)]
pub struct TxnReport {
    pub committed: usize,
    pub aborted: usize,
    pub in_doubt: usize,
    pub read: usize,
    pub violations: Vec<String>,
}

fn value(txn: u64, i: usize) -> String {
    format!("txn-{txn:010}-{i:03}")
}

enum Ended {
    Committed,
    Aborted,
    /// The producer cannot go on (fenced, fatal, or its calls time out): a new one
    /// takes over, and `in_doubt` says whether the commit may have happened.
    Broken {
        error: KafkaError,
        in_doubt: bool,
    },
}

type TxnProducer = ThreadedProducer<DefaultProducerContext>;

fn start(bootstrap: &str) -> Result<TxnProducer, KafkaError> {
    let p: TxnProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", "chaos-txn")
        .set("linger.ms", "5")
        .set("transaction.timeout.ms", "60000")
        .set("message.timeout.ms", "60000")
        .create()?;
    p.init_transactions(TIMEOUT)?;
    Ok(p)
}

/// Runs transactions until `stop`, each with a new number; a producer that breaks is
/// replaced (the new one's `init_transactions` fences it and ends what it left open).
pub(crate) fn produce(bootstrap: &str, tally: Arc<TxnTally>, stop: Arc<AtomicBool>) {
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let producer = match start(bootstrap) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("chaos: the transactional producer did not start: {e}");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        while !stop.load(Ordering::SeqCst) {
            let txn = next;
            next += 1;
            match run_one(&producer, txn) {
                Ended::Committed => tally.committed.lock().unwrap().insert(txn),
                Ended::Aborted => tally.aborted.lock().unwrap().insert(txn),
                Ended::Broken { error, in_doubt } => {
                    eprintln!("chaos: transaction {txn}: {error}; a new producer takes over");
                    match in_doubt {
                        true => tally.in_doubt.lock().unwrap().insert(txn),
                        false => tally.aborted.lock().unwrap().insert(txn),
                    };
                    break;
                }
            };
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn run_one(p: &TxnProducer, txn: u64) -> Ended {
    let sent = (|| {
        p.begin_transaction()?;
        for i in 0..TXN_RECORDS {
            let v = value(txn, i);
            let partition = i as i32 % TXN_PARTITIONS;
            loop {
                let record = BaseRecord::<(), str>::to(TXN_TOPIC)
                    .partition(partition)
                    .payload(&v);
                match p.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err((e, _)) => return Err(e),
                }
            }
        }
        Ok(())
    })();
    // Not committed: whatever happens next, it never will be.
    let abort = |error: Option<KafkaError>| match p.abort_transaction(TIMEOUT) {
        Ok(()) => Ended::Aborted,
        Err(e) => Ended::Broken {
            error: error.unwrap_or(e),
            in_doubt: false,
        },
    };
    if let Err(e) = sent {
        return abort(Some(e));
    }
    if txn % 4 == 3 {
        return abort(None);
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        match p.commit_transaction(TIMEOUT) {
            Ok(()) => return Ended::Committed,
            // The commit was not sent: abort.
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                return abort(Some(KafkaError::Transaction(e)));
            }
            Err(KafkaError::Transaction(e)) if e.is_retriable() && attempts < 3 => continue,
            Err(error) => {
                return Ended::Broken {
                    error,
                    in_doubt: true,
                };
            }
        }
    }
}

/// Reads the topic from offset 0 with `read_committed` until every partition's
/// position reaches its end, and compares it with the outcomes.
pub fn check(bootstrap: &str, tally: &TxnTally) -> anyhow::Result<TxnReport> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "chaos-txn-check")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()?;
    let mut ends = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for p in 0..TXN_PARTITIONS {
        // With read_committed, the end is the last stable offset: the check waits for
        // a transaction still open (a broken producer's, until the next fences it or
        // its timeout ends it) by asking again below.
        let (_, end) = consumer.fetch_watermarks(TXN_TOPIC, p, Duration::from_secs(10))?;
        ends.insert(p, end);
        assignment.add_partition_offset(TXN_TOPIC, p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "read_committed read of {TXN_TOPIC} stalled: positions {:?}, ends {ends:?}",
            consumer.position()?
        );
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                *seen.entry(v).or_default() += 1;
            }
            // Retried by librdkafka; the deadline bounds the read.
            Some(Err(e)) => eprintln!("chaos: read_committed check: {e}"),
            None => {}
        }
        let positions = consumer.position()?;
        let done = (0..TXN_PARTITIONS).all(|p| {
            let at = positions.find_partition(TXN_TOPIC, p).map(|e| e.offset());
            matches!(at, Some(Offset::Offset(o)) if o >= ends[&p])
        });
        if done {
            // The ends may have moved past a transaction decided since.
            let mut moved = false;
            for p in 0..TXN_PARTITIONS {
                let (_, end) = consumer.fetch_watermarks(TXN_TOPIC, p, Duration::from_secs(10))?;
                moved |= end != ends[&p];
                ends.insert(p, end);
            }
            if !moved {
                break;
            }
        }
    }
    let committed = tally.committed.lock().unwrap().clone();
    let aborted = tally.aborted.lock().unwrap().clone();
    let in_doubt = tally.in_doubt.lock().unwrap().clone();
    let mut r = TxnReport {
        committed: committed.len(),
        aborted: aborted.len(),
        in_doubt: in_doubt.len(),
        read: seen.values().sum(),
        ..TxnReport::default()
    };
    let mut v = |msg: String| {
        if r.violations.len() < 50 {
            r.violations.push(msg);
        }
    };
    let mut by_txn: BTreeMap<u64, usize> = BTreeMap::new();
    for (value, n) in &seen {
        if *n > 1 {
            v(format!("{value} read {n} times"));
        }
        match value.get(4..14).and_then(|t| t.parse::<u64>().ok()) {
            Some(t) => *by_txn.entry(t).or_default() += 1,
            None => v(format!("a record not of the workload: {value:?}")),
        }
    }
    for t in &committed {
        let n = by_txn.get(t).copied().unwrap_or(0);
        if n != TXN_RECORDS {
            v(format!(
                "committed transaction {t}: {n} of {TXN_RECORDS} records read"
            ));
        }
    }
    for (t, n) in &by_txn {
        if aborted.contains(t) {
            v(format!("aborted transaction {t}: {n} records read"));
        } else if in_doubt.contains(t) && *n != TXN_RECORDS {
            v(format!(
                "transaction {t} (outcome unknown): {n} of {TXN_RECORDS} records read"
            ));
        } else if !committed.contains(t) && !in_doubt.contains(t) {
            v(format!(
                "transaction {t}, never ended by the producer: {n} records read"
            ));
        }
    }
    Ok(r)
}
