//! The remote-I/O runtime: where reads of the object store run — ranged GETs and the
//! HTTP connections behind them, the read cache's memory and disk work, read-ahead,
//! and the CRC checks of what comes back — apart from the runtime that serves produce,
//! fetch and replication.
//!
//! Its threads run at a lower CPU priority (`[tiering] remote_io_nice`), so on a busy
//! machine a cold replay takes the CPU the produce path leaves, not the other way
//! round: the kernel runs a produce thread that becomes ready before a remote-I/O
//! thread that is already running.
//!
//! # Cancellation
//! A read handed to this runtime runs to its end even if the fetch that asked for it
//! is dropped (its chunks land in the cache for the next reader); the runtime itself
//! stops, without waiting, when the broker drops it.

use std::future::Future;

use crate::error::{Error, Result};

pub(crate) struct RemoteIo {
    runtime: Option<tokio::runtime::Runtime>,
}

impl RemoteIo {
    /// A runtime of `threads` workers at nice value `nice` (0: the broker's own).
    pub(crate) fn new(threads: usize, nice: i32) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("shale-remote-io")
            .on_thread_start(move || lower_priority(nice))
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives until drop")
            .handle()
    }

    /// Runs `work` on the remote-I/O runtime and waits for it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T> {
        self.handle().spawn(work).await.map_err(Error::from)
    }
}

impl Drop for RemoteIo {
    fn drop(&mut self) {
        // Dropped from inside the broker's runtime: a blocking shutdown is not allowed
        // there, and nothing on this runtime needs to finish (reads are only cache).
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread's CPU priority to nice value `nice` (a failure is logged:
/// the thread then runs at the broker's priority).
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
        tracing::warn!(nice, error = %e, "cannot lower the priority of a remote-I/O thread");
    }
}
