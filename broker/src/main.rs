//! `shale-broker`: with no configuration at all it runs the embedded default
//! (data and SQLite metastore in ./shale-data, objects in ./shale-data/objects,
//! gRPC on 127.0.0.1:9093).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use shale_broker::broker::Broker;
use shale_broker::config::{Args, BrokerConfig};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            // The AWS SDK logs whole debug structures at WARN while it probes for
            // credentials, and foyer describes its set-up at INFO: Shale says what
            // matters of both itself. RUST_LOG shows them.
            EnvFilter::new("info,aws_config=error,aws_smithy_runtime=error,foyer=warn,foyer_storage=warn,foyer_memory=warn")
        }))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    raise_open_files_limit();
    let config = match BrokerConfig::load(Args::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shale-broker: {}", cause_chain(&anyhow::Error::new(e)));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shale-broker: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shale-broker: {}", cause_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit on open files to the hard limit: a broker with many
/// partitions needs descriptors for segments, sockets and index writes.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: before.maximum,
        maximum: before.maximum,
    };
    let result = setrlimit(Resource::Nofile, raised);
    let after = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    match result {
        Ok(()) => tracing::info!(soft = %show(after.current), hard = %show(after.maximum),
            was = %show(before.current), "open files limit"),
        Err(e) => tracing::warn!(soft = %show(before.current), hard = %show(before.maximum),
            error = %e, "cannot raise the open files limit"),
    }
}

/// "outer: cause: root", leaving out a cause whose text the previous one already holds
/// (some library errors repeat their source in their own message).
fn cause_chain(e: &anyhow::Error) -> String {
    let mut out: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.last().is_some_and(|prev| prev.contains(&text)) {
            out.push(text);
        }
    }
    out.join(": ")
}

async fn run(config: BrokerConfig) -> anyhow::Result<()> {
    use anyhow::Context;
    let cancel = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let shutdown_timeout = Duration::from_millis(config.log.shutdown_timeout_ms);
    let broker = Broker::start(config, cancel.clone()).await?;
    let mut tasks = JoinSet::new();
    broker.spawn_background(&mut tasks);
    if let Some(addr) = broker.config.metrics_listen {
        let metrics = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        tasks.spawn(shale_broker::metrics::serve(
            broker.clone(),
            metrics,
            cancel.clone(),
        ));
        tracing::info!(%addr, "metrics at /metrics");
    }
    tracing::info!(
        listen = %broker.config.listen,
        data_dir = %broker.config.data_dir.display(),
        metastore = %broker.config.metastore_url,
        object_store = %broker.config.object_store_url,
        "shale-broker ready"
    );
    let signal = {
        let cancel = cancel.clone();
        async move {
            tokio::select! {
                _ = wait_for_signal() => tracing::info!("shutting down"),
                _ = cancel.cancelled() => {}
            }
            cancel.cancel();
        }
    };
    shale_broker::api::serve(broker.clone(), listener, signal)
        .await
        .context("gRPC server failed")?;
    cancel.cancel();
    if tokio::time::timeout(shutdown_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!("background tasks did not stop in time, aborting them");
        tasks.abort_all();
    }
    broker.shutdown().await;
    tracing::info!("stopped");
    if broker.was_replaced() {
        anyhow::bail!(
            "another broker registered with broker id {}: broker ids must be unique",
            broker.config.broker_id
        );
    }
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}
