//! Results: one JSON document per run (stable, versioned by `schema`) and the same as a
//! markdown table. See `bench/README.md` for the fields.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::harness::ProcessStats;

/// Version of the JSON layout; raised on any incompatible change.
pub(crate) const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    pub schema: u32,
    /// `git rev-parse HEAD` of the working directory, or "unknown".
    pub commit: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub quick: bool,
    pub machine: Machine,
    pub results: Vec<CaseResult>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    pub cpus: usize,
    pub memory_gib: f64,
}

/// One measured case of a scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CaseResult {
    pub scenario: String,
    /// The case's parameters, e.g. `{"acks": "1", "record_bytes": "1024"}`.
    pub params: BTreeMap<String, String>,
    /// What Shale did (`records_per_sec`, `mib_per_sec`, `p99_ms`, …).
    pub metrics: BTreeMap<String, f64>,
    /// The physical limits measured in the same run (same units as the metric they bound).
    pub baselines: BTreeMap<String, f64>,
    /// The scenario's ratio to its baseline (higher is better), if it has one.
    pub ratio: Option<Ratio>,
    /// Brokers involved, summed.
    pub broker: ProcessStats,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Ratio {
    /// e.g. "mib_per_sec / min(disk_write_mib_per_sec, loopback_tcp_mib_per_sec)".
    pub definition: String,
    pub value: f64,
    /// The target for this ratio, when there is one.
    pub target: Option<f64>,
    pub met: Option<bool>,
}

impl Ratio {
    pub(crate) fn new(definition: &str, value: f64, target: Option<f64>) -> Self {
        Ratio {
            definition: definition.to_string(),
            value,
            target,
            met: target.map(|t| value >= t),
        }
    }
}

pub(crate) fn params(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

pub(crate) fn numbers(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), round(*v)))
        .collect()
}

fn round(v: f64) -> f64 {
    if v.abs() >= 100.0 {
        v.round()
    } else {
        (v * 1000.0).round() / 1000.0
    }
}

fn fmt_map<V: std::fmt::Display>(m: &BTreeMap<String, V>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The run as a markdown table.
pub(crate) fn markdown(run: &Run) -> String {
    let mut out = format!(
        "Run of {} at commit {} ({} CPUs, {:.0} GiB{}).\n\n\
         | scenario | case | result | baseline (same run) | ratio | target | broker RSS MiB / CPU s |\n\
         |---|---|---|---|---|---|---|\n",
        run.started_at,
        run.commit,
        run.machine.cpus,
        run.machine.memory_gib,
        if run.quick { ", quick" } else { "" }
    );
    for r in &run.results {
        let (ratio, target) = match &r.ratio {
            Some(x) => (
                format!("{:.2} ({})", x.value, x.definition),
                match (x.target, x.met) {
                    (Some(t), Some(true)) => format!("≥ {t:.2}: met"),
                    (Some(t), _) => format!("≥ {t:.2}: missed"),
                    _ => "—".into(),
                },
            ),
            None => ("—".into(), "—".into()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.0} / {:.1} |\n",
            r.scenario,
            fmt_map(&r.params),
            fmt_map(&r.metrics),
            fmt_map(&r.baselines),
            ratio,
            target,
            r.broker.peak_rss_mib,
            r.broker.cpu_seconds
        ));
    }
    out
}

pub(crate) fn machine() -> Machine {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0.0);
    Machine {
        cpus,
        memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
    }
}

pub(crate) fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}
