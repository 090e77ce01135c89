//! A TCP proxy that can fail: brokers reach PostgreSQL and the object store through
//! it, and an outage closes every connection and refuses new ones until it ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    down: Arc<AtomicBool>,
    /// Bumped at each outage: connections watching it close.
    epoch: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on every address at a free port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("0.0.0.0:0").await?;
        let port = listener.local_addr()?.port();
        let down = Arc::new(AtomicBool::new(false));
        let (epoch, _) = watch::channel(0u64);
        let (d, e) = (down.clone(), epoch.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if d.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut closed = e.subscribe();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::io::copy(&mut cr, &mut sw);
                    let down = tokio::io::copy(&mut sr, &mut cw);
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                        _ = closed.changed() => {}
                    }
                });
            }
        });
        Ok(Self {
            port,
            down,
            epoch,
            task,
        })
    }

    /// Starts an outage: every connection closes, new ones are refused.
    pub fn fail(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Ends the outage.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
