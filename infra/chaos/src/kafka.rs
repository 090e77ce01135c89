//! The librdkafka producer of the workload: idempotent, `acks=all`, through the Kafka
//! listener, recording each delivery report's partition and offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use crate::tally::{Ack, TOPIC, Tally, value};

struct Reports(Arc<Tally>);

impl ClientContext for Reports {
    /// librdkafka's own log, on stderr (into the run's log): its warnings and errors
    /// always, and with `SHALE_CHAOS_RDKAFKA_DEBUG` (librdkafka's `debug`, e.g. `eos`)
    /// its debug lines too.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        eprintln!("librdkafka {level:?} {fac}: {log_message}");
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                let v = m
                    .payload()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .unwrap_or_default();
                self.0.acked.lock().unwrap().push(Ack {
                    partition: m.partition(),
                    offset: m.offset(),
                    value: v,
                });
            }
            Err(_) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Sends `rate` records a second until `stop`, then flushes.
pub(crate) fn produce(bootstrap: &str, rate: u64, tally: Arc<Tally>, stop: Arc<AtomicBool>) {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        // librdkafka's default (300 s), stated: a message that times out (paused
        // brokers hold requests for up to socket.timeout.ms) makes the idempotent
        // producer bump its epoch, and a bump writes again what it held (the checker
        // counts those copies apart); the faults should not time messages out.
        .set("message.timeout.ms", "300000");
    if let Ok(debug) = std::env::var("SHALE_CHAOS_RDKAFKA_DEBUG") {
        config
            .set("debug", debug)
            .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    let producer: ThreadedProducer<Reports> =
        match ThreadedProducer::from_config_and_context(&config, Reports(tally.clone())) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("chaos: the librdkafka producer did not start: {e}");
                return;
            }
        };
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut seq = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let v = value("kafka", seq);
        seq += 1;
        if producer
            .send(BaseRecord::<(), str>::to(TOPIC).payload(&v))
            .is_err()
        {
            tally.failed.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(interval);
    }
    let _ = producer.flush(Duration::from_secs(60));
}
