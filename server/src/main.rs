//! `shale-broker`: with no configuration at all it runs the embedded default
//! (data and SQLite metastore in ./shale-data, objects in ./shale-data/objects,
//! Kafka on 127.0.0.1:9092, gRPC on 127.0.0.1:9093, the console and HTTP API on
//! 127.0.0.1:9644).
//!
//! Start-up binds every listener first (a taken port fails at once), starts the
//! broker core, then serves each listener until SIGINT or SIGTERM; shutdown stops
//! the listeners, lets in-flight requests finish, and closes the core.

mod args;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use shale_broker::broker::Broker;
use shale_config::{BrokerConfig, Protocol};
use shale_service::Service;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

// Kafka frames size some allocations from counts on the wire (see the allocator).
#[global_allocator]
static ALLOCATOR: shale_kafka::alloc::Allocator = shale_kafka::alloc::Allocator;

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
    let config = match BrokerConfig::load(args::Args::parse().into()) {
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
        // Said only when raised: otherwise it would be the first line before any
        // start-up error, which reads as if it were related.
        Ok(()) if after.current != before.current => tracing::info!(soft = %show(after.current),
            hard = %show(after.maximum), was = %show(before.current), "raised the open files limit"),
        Ok(()) => tracing::debug!(soft = %show(after.current), hard = %show(after.maximum),
            "open files limit"),
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
    let mut grpc = Vec::new();
    let mut kafka = Vec::new();
    let mut http = Vec::new();
    for l in &config.listeners {
        let socket = tokio::net::TcpListener::bind(l.listen)
            .await
            .with_context(|| format!("cannot listen on {} (listener '{}')", l.listen, l.name))?;
        match l.protocol {
            Protocol::Grpc => {
                let security = shale_grpc::Security::load(&l.security)
                    .with_context(|| format!("listener '{}'", l.name))?;
                grpc.push((
                    l.name.clone(),
                    shale_grpc::Limits::from(l),
                    security,
                    socket,
                ))
            }
            Protocol::Kafka => {
                let security = shale_kafka::Security::load(&l.security)
                    .with_context(|| format!("listener '{}'", l.name))?;
                kafka.push((
                    l.name.clone(),
                    shale_kafka::Limits::from(l),
                    security,
                    socket,
                ))
            }
            Protocol::Http => {
                let security = shale_http::Security::load(&l.security)
                    .with_context(|| format!("listener '{}'", l.name))?;
                let tls = l.security.protocol.uses_tls();
                http.push((l.name.clone(), l.max_request_bytes, security, tls, socket))
            }
        }
    }
    let shutdown_timeout = Duration::from_millis(config.log.shutdown_timeout_ms);
    let connector = Arc::new(shale_grpc::GrpcReplicaConnector::new(
        config.inter_broker.clone(),
    ));
    let broker = Broker::start(config, connector, cancel.clone()).await?;
    broker.spawn_background();
    let service = Service::new(broker.clone());
    if !http.is_empty() {
        let rates = Arc::new(shale_http::Rates::default());
        {
            let (rates, service) = (rates.clone(), service.clone());
            service
                .tasks()
                .clone()
                .spawn(async move { rates.run(service).await });
        }
        for (name, max_request_bytes, security, tls, socket) in http {
            let addr = socket.local_addr()?;
            let scheme = if tls { "https" } else { "http" };
            tracing::info!(listener = %name, "console at {scheme}://{addr}/ (API at /api/v1/, metrics at /metrics)");
            let (service, rates) = (service.clone(), rates.clone());
            service.tasks().clone().spawn(async move {
                shale_http::serve(service, &name, socket, max_request_bytes, security, rates).await
            });
        }
    }
    for (name, limits, security, socket) in kafka {
        let service = service.clone();
        service.tasks().clone().spawn(async move {
            shale_kafka::serve(service, &name, socket, limits, security).await
        });
    }
    for l in &broker.config.listeners {
        tracing::info!(listener = %l.name, listen = %l.listen, advertised = %l.advertised,
            security_protocol = l.security.protocol.name(), "listening");
        if advertises_a_wildcard(&l.advertised) {
            tracing::warn!(listener = %l.name, advertised = %l.advertised,
                "this listener advertises a wildcard address, which clients and other brokers \
                 cannot connect to: set `advertised` in [listeners.{}] (or --advertised, \
                 --kafka-advertised)", l.name);
        }
    }
    tracing::info!(
        listen = %broker.config.listeners[0].listen,
        data_dir = %broker.config.data_dir.display(),
        metastore = %shale_security::secrets::redact_url(&broker.config.metastore_url),
        object_store = %broker.config.object_store_url,
        "shale-broker ready"
    );
    {
        let cancel = cancel.clone();
        service.tasks().spawn(async move {
            tokio::select! {
                _ = wait_for_signal() => tracing::info!("shutting down"),
                _ = cancel.cancelled() => {}
            }
            cancel.cancel();
        });
    }
    let served =
        futures::future::join_all(grpc.into_iter().map(|(name, limits, security, socket)| {
            let (service, cancel) = (service.clone(), cancel.clone());
            async move {
                let stopping = cancel.cancelled_owned();
                shale_grpc::serve(service, &name, socket, limits, security, stopping)
                    .await
                    .with_context(|| format!("gRPC listener '{name}' failed"))
            }
        }))
        .await;
    cancel.cancel();
    broker.shutdown(shutdown_timeout).await;
    tracing::info!("stopped");
    served.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
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

/// Whether `host:port` names the unspecified address (0.0.0.0 or ::), which a listener
/// can bind but nobody can connect to.
fn advertises_a_wildcard(advertised: &str) -> bool {
    advertised.rsplit_once(':').is_some_and(|(host, _)| {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
    })
}
