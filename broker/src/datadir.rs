//! The data directory itself: one broker process at a time (`.lock`), its identity
//! (`meta.properties`: cluster and broker id), and the clean-shutdown marker.

use std::collections::HashMap;
use std::path::Path;

use crate::error::StartError;
use crate::partition::{partition_dir, read_topic_id};

use shale_log::layout::{CLEAN_SHUTDOWN_MARKER, DATA_DIR_LOCK};

/// Written at the end of a clean shutdown, after every partition was fsynced, naming
/// the incarnation (broker epoch) that stopped; removed at start. It counts only if that
/// incarnation is still the newest registered one: otherwise another process ran on
/// this broker id since (and may have left unflushed tails).
pub(crate) fn write_clean_shutdown_marker(
    data_dir: &Path,
    broker_epoch: i64,
) -> std::io::Result<()> {
    let path = data_dir.join(CLEAN_SHUTDOWN_MARKER);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{broker_epoch}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// The incarnation whose clean shutdown the marker records, if any; removes the marker
/// (durably) so that a crash from here on counts as unclean.
pub(crate) fn take_clean_shutdown_marker(data_dir: &Path) -> std::io::Result<Option<i64>> {
    let path = data_dir.join(CLEAN_SHUTDOWN_MARKER);
    let epoch = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    std::fs::remove_file(&path)?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(epoch)
}

/// Locks `{data_dir}/.lock` for this process (released when it exits, however it
/// exits): two brokers writing one data directory would corrupt it.
pub(crate) fn lock_data_dir(data_dir: &Path) -> Result<std::fs::File, StartError> {
    use rustix::fs::{FlockOperation, flock};
    let path = data_dir.join(DATA_DIR_LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| StartError::DataDir {
            what: "open",
            path: path.clone(),
            source,
        })?;
    flock(&file, FlockOperation::NonBlockingLockExclusive).map_err(|e| StartError::Locked {
        path: data_dir.into(),
        source: e.into(),
    })?;
    Ok(file)
}

/// The data directory's identity (`meta.properties`): the cluster and broker it belongs
/// to. A directory of another cluster (a metastore that is not its own would make the
/// broker delete every partition it does not know) or of another broker id is refused;
/// a new directory is stamped.
pub(crate) fn check_data_dir_identity(
    data_dir: &Path,
    cluster_id: uuid::Uuid,
    broker_id: i32,
) -> Result<(), StartError> {
    let path = data_dir.join(shale_log::layout::META_PROPERTIES);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let field = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                    .map(str::trim)
            };
            let found_cluster = field("cluster.id").unwrap_or("");
            if found_cluster != cluster_id.to_string() {
                return Err(StartError::OtherCluster {
                    path: data_dir.into(),
                    found: found_cluster.into(),
                    expected: cluster_id,
                });
            }
            let found_broker = field("broker.id").unwrap_or("");
            if found_broker != broker_id.to_string() {
                return Err(StartError::OtherBroker {
                    path: data_dir.into(),
                    found: found_broker.into(),
                    expected: broker_id,
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = path.with_extension("tmp");
            std::fs::write(
                &tmp,
                format!("version=1\ncluster.id={cluster_id}\nbroker.id={broker_id}\n"),
            )
            .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| std::fs::File::open(data_dir)?.sync_all())
            .map_err(|source| StartError::DataDir {
                what: "write",
                path,
                source,
            })
        }
        Err(source) => Err(StartError::DataDir {
            what: "read",
            path,
            source,
        }),
    }
}

/// Removes partition directories whose topic (by name and id) no longer exists, e.g.
/// a topic deleted while this broker was down, and those of replicas no longer
/// assigned to this broker (`known`: each topic's id and the partitions it holds), e.g.
/// reassigned away while it was down.
pub(crate) fn remove_orphans(
    data_dir: &Path,
    known: &HashMap<String, (uuid::Uuid, Option<Vec<i32>>)>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        let id = match read_topic_id(&path) {
            Ok(Some(id)) => id,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "keeping a directory whose partition metadata cannot be read");
                continue;
            }
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let belongs = name.rsplit_once('-').is_some_and(|(topic, p)| {
            known.get(topic).is_some_and(|(known_id, held)| {
                *known_id == id
                    && p.parse::<i32>().is_ok_and(|p| {
                        held.as_ref().is_none_or(|h| h.contains(&p))
                            && partition_dir(data_dir, topic, p) == path
                    })
            })
        });
        if !belongs {
            tracing::info!(dir = %path.display(),
                "removing partition directory of a deleted topic or of a replica moved away");
            std::fs::remove_dir_all(&path)?;
        }
    }
    Ok(())
}
