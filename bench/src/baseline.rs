//! Physical baselines, measured in the same run as the scenario they bound: what the
//! disk, the loopback interface and the S3 server do with no broker in the way.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHUNK: usize = 1 << 20;

fn mib_per_sec(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64().max(1e-9)
}

/// Sequential 1 MiB writes of `bytes` to a new file in `dir`, no fsync (the broker's
/// default flush policy: the page cache).
pub(crate) fn disk_write(dir: &Path, bytes: u64) -> std::io::Result<f64> {
    let path = dir.join("baseline-write.tmp");
    let buf = vec![0x5au8; CHUNK];
    let start = Instant::now();
    let mut f = std::fs::File::create(&path)?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    drop(f);
    let rate = mib_per_sec(bytes, start.elapsed());
    std::fs::remove_file(&path)?;
    Ok(rate)
}

/// Sequential 1 MiB reads of `files` (the page cache, when warm).
pub(crate) fn file_read(files: &[PathBuf]) -> std::io::Result<f64> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    let start = Instant::now();
    for path in files {
        let mut f = std::fs::File::open(path)?;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(mib_per_sec(total, start.elapsed()))
}

/// Every `.log` segment file under `dir`.
pub(crate) fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out
}

/// `bytes` copied through a loopback TCP connection in 1 MiB writes.
pub(crate) async fn loopback_copy(bytes: u64) -> std::io::Result<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; CHUNK];
        let mut got = 0u64;
        while got < bytes {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        std::io::Result::Ok(got)
    });
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let buf = vec![0x5au8; CHUNK];
    let start = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&buf[..n]).await?;
        left -= n as u64;
    }
    let got = reader.await.map_err(std::io::Error::other)??;
    Ok(mib_per_sec(got, start.elapsed()))
}

/// Round trips of a 64-byte message over loopback TCP, in microseconds.
pub(crate) async fn tcp_round_trips(count: usize) -> std::io::Result<Histogram<u64>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; 64];
        loop {
            s.read_exact(&mut buf).await?;
            s.write_all(&buf).await?;
        }
        #[allow(unreachable_code)]
        std::io::Result::Ok(())
    });
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut hist = Histogram::<u64>::new(3).map_err(std::io::Error::other)?;
    let mut buf = [0u8; 64];
    for _ in 0..count {
        let start = Instant::now();
        s.write_all(&buf).await?;
        s.read_exact(&mut buf).await?;
        let _ = hist.record(start.elapsed().as_micros() as u64);
    }
    Ok(hist)
}

/// Ranged GETs of `chunk` bytes covering every object in `keys`, `parallelism` at a
/// time (what the read path does, without the broker). Returns (MiB/s, GETs).
pub(crate) async fn ranged_gets(
    store: Arc<dyn object_store::ObjectStore>,
    objects: Vec<(object_store::path::Path, u64)>,
    chunk: u64,
    parallelism: usize,
) -> anyhow::Result<(f64, u64)> {
    let ranges: Vec<(object_store::path::Path, std::ops::Range<u64>)> = objects
        .iter()
        .flat_map(|(key, size)| {
            (0..size.div_ceil(chunk))
                .map(move |i| (key.clone(), i * chunk..((i + 1) * chunk).min(*size)))
        })
        .collect();
    let gets = ranges.len() as u64;
    let permits = Arc::new(tokio::sync::Semaphore::new(parallelism.max(1)));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (key, range) in ranges {
        let (store, permit) = (store.clone(), permits.clone().acquire_owned().await?);
        tasks.spawn(async move {
            let _permit = permit;
            store.get_range(&key, range).await.map(|b| b.len() as u64)
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r??;
    }
    Ok((mib_per_sec(total, start.elapsed()), gets))
}
