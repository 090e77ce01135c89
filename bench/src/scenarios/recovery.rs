//! The recovery scenario: restart time after SIGKILL as the local log grows.

use shale_client::{Acks, Client};

use super::load::produce_bytes;
use super::{Ctx, configs};
use crate::harness::BrokerProcess;
use crate::report::{CaseResult, Ratio, numbers, params};

/// Restart time after SIGKILL with a small and a ten times larger local log.
pub(crate) async fn recovery(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let small = ctx.size(1024, 32);
    let segment = if ctx.quick { 4 << 20 } else { 128 << 20 };
    let mut out = Vec::new();
    let mut first = 0.0;
    for (i, bytes) in [small, small * 10].into_iter().enumerate() {
        super::running("recovery", format!("{} MiB of local log", bytes >> 20));
        let mut broker = BrokerProcess::start("", &[], &ctx.base).await?;
        let client = Client::connect(&broker.address()).await?;
        let seg = segment.to_string();
        client
            .create_topic(
                "recovery",
                4,
                1,
                configs(&[("segment.bytes", &seg), ("remote.storage.enable", "false")]),
            )
            .await?;
        produce_bytes(&client, "recovery", bytes, 1024, Acks::Leader, None).await?;
        broker.kill();
        let restart = broker.spawn().await?.as_secs_f64();
        if i == 0 {
            first = restart;
        }
        out.push(CaseResult {
            scenario: "recovery".into(),
            params: params(&[("local_log_mib", (bytes >> 20).to_string()), ("segment_bytes", seg.clone())]),
            metrics: numbers(&[("restart_seconds", restart)]),
            baselines: numbers(&[("restart_seconds_at_smallest_log", first)]),
            ratio: Some(Ratio::new(
                "restart_seconds_at_smallest_log / restart_seconds (target: 10x the log within 1.5x the time)",
                first / restart.max(1e-9),
                (i == 1).then_some(1.0 / 1.5),
            )),
            broker: broker.stats(),
        });
    }
    Ok(out)
}
