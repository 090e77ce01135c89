//! Lookup of records by key on a mostly-remote topic (at least 2 GiB in a full run),
//! through the segments' key filters, against a full scan of the topic, with the
//! object-store requests counted by the server: on the broker that copied the
//! segments (their filters cached as they were copied), after a restart with an empty
//! read cache (each filter fetched once), and again once the filters are cached.

use std::time::Instant;

use shale_client::{Client, FindAnswer};

use super::load::consume_all;
use super::replay::{mostly_remote_keyed, restart_cold, tiered_broker};
use super::{Ctx, MIB, running};
use crate::harness::{S3Process, S3Requests};
use crate::report::{CaseResult, Ratio, numbers, params};

const TOPIC: &str = "lookup";
/// The read cache's chunk (the broker's default `tiering.chunk_bytes`).
const CHUNK: u64 = 8 << 20;

fn key(i: u64) -> String {
    format!("req-{i:012}")
}

struct Lookup {
    answer: FindAnswer,
    secs: f64,
    served: S3Requests,
}

async fn lookup(client: &Client, s3: &S3Process, i: u64) -> anyhow::Result<Lookup> {
    let before = s3.requests()?;
    let started = Instant::now();
    let answer = client
        .find_records(TOPIC, key(i).into(), None, None, 100)
        .await?;
    let secs = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        answer.records.len() == 1,
        "key {} has one record, the lookup found {}",
        key(i),
        answer.records.len()
    );
    Ok(Lookup {
        answer,
        secs,
        served: s3.requests()? - before,
    })
}

pub(crate) async fn lookup_by_key(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(2048, 32);
    let segment: u64 = if ctx.quick { 1 << 20 } else { 16 << 20 };
    let (s3, mut broker) = tiered_broker(ctx, "", &[]).await?;
    let client = Client::connect(&broker.address()).await?;
    running(
        "lookup",
        format!("writing {} MiB of keyed records", bytes >> 20),
    );
    let remote =
        mostly_remote_keyed(&client, TOPIC, bytes, segment, |i| Some(key(i).into())).await?;
    let records = bytes / 1024;

    running(
        "lookup",
        "one key, filters cached when the segments were copied",
    );
    let copied = lookup(&client, &s3, records / 3).await?;
    running("lookup", "one key after a restart with an empty read cache");
    let client = restart_cold(&mut broker).await?;
    let cold = lookup(&client, &s3, records / 2).await?;
    running("lookup", "another key, filters now cached");
    let cached = lookup(&client, &s3, records / 5).await?;
    running("lookup", "full scan of the topic (the baseline)");
    let before = s3.requests()?;
    let started = Instant::now();
    let scan = consume_all(&client, TOPIC).await?;
    let scan_secs = started.elapsed().as_secs_f64();
    let scan_gets = (s3.requests()? - before).get as f64;

    let chunks_per_segment = segment.div_ceil(CHUNK) as f64;
    let case = |name: &str, l: &Lookup| {
        let a = &l.answer;
        // The bar: fewer GETs than one per 20 segments searched, plus the GETs of
        // reading the segments whose filter matched.
        let allowed =
            a.segments_searched as f64 / 20.0 + a.segments_matched as f64 * chunks_per_segment;
        CaseResult {
            scenario: "lookup".into(),
            params: params(&[
                ("case", name.into()),
                ("topic_mib", format!("{}", remote as f64 / MIB)),
                ("segment_mib", format!("{}", segment >> 20)),
            ]),
            metrics: numbers(&[
                ("secs", l.secs),
                ("gets", l.served.get as f64),
                ("lists", l.served.list as f64),
                ("segments_searched", a.segments_searched as f64),
                ("segments_skipped", a.segments_skipped as f64),
                ("segments_matched", a.segments_matched as f64),
                ("segments_without_filter", a.segments_without_filter as f64),
                ("bytes_read", a.bytes_read as f64),
            ]),
            baselines: numbers(&[
                ("full_scan_secs", scan_secs),
                ("full_scan_gets", scan_gets),
                ("full_scan_mib", scan.bytes as f64 / MIB),
                ("allowed_gets", allowed),
            ]),
            ratio: Some(Ratio::new(
                "allowed_gets / gets (searched/20 + matched segments' chunks)",
                allowed / (l.served.get as f64).max(1.0),
                Some(1.0),
            )),
            broker: broker.stats(),
        }
    };
    Ok(vec![
        case("filters cached at copy", &copied),
        case("cold cache after restart", &cold),
        case("filters cached", &cached),
    ])
}
