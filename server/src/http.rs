//! Prometheus metrics over HTTP (`GET /metrics`) and a readiness check
//! (`GET /health`). Off unless `metrics_listen` is set.
//!
//! Deliberately tiny: one request per connection, `GET /metrics`, `GET /health` or
//! 404, bounded request size and time, so a stray client cannot hold resources.

use std::time::Duration;

use shale_broker::service::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves the metrics until the node stops.
pub async fn serve(service: Service, listener: TcpListener) {
    let mut stopping = std::pin::pin!(service.stopping());
    loop {
        let stream = tokio::select! {
            _ = &mut stopping => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let s = service.clone();
        service.tasks().spawn(async move {
            if let Err(e) = tokio::time::timeout(Duration::from_secs(5), answer(&s, stream)).await {
                tracing::debug!(error = %e, "metrics request timed out");
            }
        });
    }
}

async fn answer(service: &Service, mut stream: TcpStream) {
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let get = |path: &str| {
        request.starts_with(format!("GET {path} ").as_bytes())
            || request.starts_with(format!("GET {path}?").as_bytes())
    };
    let reply = |status: &str, kind: &str, body: String| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let response = if get("/metrics") {
        reply(
            "200 OK",
            "text/plain; version=0.0.4",
            service.metrics_text().await,
        )
    } else if get("/health") {
        match service.health() {
            Ok(()) => reply("200 OK", "text/plain", "ready\n".into()),
            Err(why) => reply("503 Service Unavailable", "text/plain", format!("{why}\n")),
        }
    } else {
        reply("404 Not Found", "text/plain", String::new())
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
