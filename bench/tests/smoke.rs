//! `shale-bench all --quick` runs every scenario briefly against real brokers (and a
//! real `s3s-fs` and PostgreSQL) and writes well-formed results. Nothing here asserts
//! a timing: only that each scenario ran and reported finite numbers.

use std::process::Command;

#[test]
fn all_quick_writes_well_formed_results_for_every_scenario() {
    let out = tempfile::tempdir().unwrap();
    let bench = env!("CARGO_BIN_EXE_shale-bench");
    let broker = std::path::Path::new(bench).with_file_name("shale-broker");
    assert!(
        broker.exists(),
        "{} is missing: run `cargo build --workspace --bins` (infra/test.sh does) first",
        broker.display()
    );
    let run = Command::new(bench)
        .args(["all", "--quick", "--out"])
        .arg(out.path())
        .output()
        .expect("cannot run shale-bench");
    assert!(
        run.status.success(),
        "shale-bench failed:\n{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("latest.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], 1);
    assert_eq!(json["quick"], true);
    assert!(json["machine"]["cpus"].as_u64().unwrap() >= 1);
    let results = json["results"].as_array().unwrap();
    for scenario in [
        "produce",
        "consume",
        "e2e",
        "replay",
        "lookup",
        "partitions",
        "recovery",
        "isolation",
    ] {
        assert!(
            results.iter().any(|r| r["scenario"] == scenario),
            "no {scenario} result"
        );
    }
    let finite = |v: &serde_json::Value| v.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0);
    for r in results {
        let metrics = r["metrics"].as_object().unwrap();
        assert!(!metrics.is_empty(), "{r}");
        assert!(metrics.values().all(finite), "{r}");
        assert!(
            r["baselines"].as_object().unwrap().values().all(finite),
            "{r}"
        );
        assert!(
            r["params"].as_object().is_some_and(|p| !p.is_empty()),
            "{r}"
        );
        if !r["ratio"].is_null() {
            assert!(finite(&r["ratio"]["value"]), "{r}");
            assert!(
                r["ratio"]["definition"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{r}"
            );
        }
        assert!(
            finite(&r["broker"]["peak_rss_mib"]) && finite(&r["broker"]["cpu_seconds"]),
            "{r}"
        );
    }
    // Started brokers report their memory.
    assert!(
        results
            .iter()
            .any(|r| r["broker"]["peak_rss_mib"].as_f64().unwrap() > 0.0)
    );
    let table = std::fs::read_to_string(out.path().join("latest.md")).unwrap();
    assert!(table.contains("| scenario | case | result |"), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| scenario"))
            .count(),
        results.len()
    );
}
