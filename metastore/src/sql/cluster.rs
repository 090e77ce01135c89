//! Brokers and the cluster in SQL: registrations and leases, the cluster id, the
//! controller lease, and partition states (replicas, leader, ISR) changed by
//! compare-and-set. Leases are timed by the database's clock (`$now`).

use uuid::Uuid;

use crate::cluster::{decode_ids, decode_recovering, encode_ids, encode_recovering};
use crate::{BrokerLease, ControllerLease, Error, PartitionState, Result, StateGuard};

type PartitionStateRow = (
    Uuid,
    i32,
    String,
    i32,
    i32,
    String,
    String,
    i64,
    String,
    String,
    String,
);

pub(super) const PARTITION_STATE_COLUMNS: &str = "topic_id, partition_id, replicas, leader, leader_epoch, isr, elr, version, \
     recovering, adding_replicas, removing_replicas";

fn partition_state(row: PartitionStateRow) -> Result<PartitionState> {
    let (
        topic_id,
        partition,
        replicas,
        leader,
        leader_epoch,
        isr,
        elr,
        version,
        recovering,
        adding,
        removing,
    ) = row;
    Ok(PartitionState {
        topic_id,
        partition,
        replicas: decode_ids(&replicas)?,
        leader,
        leader_epoch,
        isr: decode_ids(&isr)?,
        elr: decode_ids(&elr)?,
        recovering: decode_recovering(&recovering)?,
        adding: decode_ids(&adding)?,
        removing: decode_ids(&removing)?,
        version,
    })
}

fn controller_lease(
    (broker_id, epoch, lease_expires_ms, remaining_ms): (i32, i64, i64, i64),
) -> ControllerLease {
    ControllerLease {
        broker_id,
        epoch,
        lease_expires_ms,
        remaining_ms,
    }
}

/// The broker, controller and partition state methods of one backend (see
/// `for_each_backend!`).
/// Partition sizes written per statement (three parameters each).
const SIZES_PER_STATEMENT: usize = 500;

macro_rules! cluster_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            pub(super) async fn register_broker(
                &self,
                broker_id: i32,
                address: &str,
                endpoints: &[(String, String)],
                rack: Option<&str>,
            ) -> Result<i64> {
                let (epoch,): (i64,) = sqlx::query_as(concat!(
                    "INSERT INTO brokers (broker_id, address, endpoints, rack, broker_epoch, lease_expires_ms, registered_at_ms) \
                     VALUES ($1, $2, $3, $4, 1, 0, ", $now, ") ON CONFLICT (broker_id) DO UPDATE \
                     SET address = excluded.address, endpoints = excluded.endpoints, rack = excluded.rack, \
                       broker_epoch = brokers.broker_epoch + 1, registered_at_ms = excluded.registered_at_ms \
                     RETURNING broker_epoch",
                ))
                .bind(broker_id)
                .bind(address)
                .bind(crate::cluster::encode_endpoints(endpoints))
                .bind(rack)
                .fetch_one(&self.pool)
                .await?;
                Ok(epoch)
            }

            pub(super) async fn cluster_id(&self) -> Result<Uuid> {
                sqlx::query(
                    "INSERT INTO cluster_meta (id, cluster_id) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                )
                .bind(Uuid::new_v4())
                .execute(&self.pool)
                .await?;
                let (id,): (Uuid,) = sqlx::query_as("SELECT cluster_id FROM cluster_meta WHERE id = 1")
                    .fetch_one(&self.pool)
                    .await?;
                Ok(id)
            }

            pub(super) async fn renew_broker_lease(
                &self,
                broker_id: i32,
                broker_epoch: i64,
                address: &str,
                lease_ms: i64,
            ) -> Result<()> {
                let updated = sqlx::query(concat!(
                    "UPDATE brokers SET address = $3, \
                       lease_expires_ms = CASE WHEN $4 > 0 THEN ", $now, " + $4 ELSE ", $now, " - 1 END, \
                       lease_epoch = broker_epoch \
                     WHERE broker_id = $1 AND broker_epoch = $2",
                ))
                .bind(broker_id)
                .bind(broker_epoch)
                .bind(address)
                .bind(lease_ms)
                .execute(&self.pool)
                .await?;
                if updated.rows_affected() == 0 {
                    return Err(Error::BrokerEpochFenced { broker_id, broker_epoch });
                }
                Ok(())
            }

            pub(super) async fn set_decommissioned(&self, broker_id: i32, decommissioned: bool) -> Result<()> {
                let updated = sqlx::query("UPDATE brokers SET decommissioned = $2 WHERE broker_id = $1")
                    .bind(broker_id)
                    .bind(decommissioned)
                    .execute(&self.pool)
                    .await?;
                if updated.rows_affected() == 0 {
                    return Err(Error::BrokerNotFound(broker_id));
                }
                Ok(())
            }

            pub(super) async fn list_brokers(&self) -> Result<Vec<BrokerLease>> {
                type Row = (i32, String, String, i64, i64, i64, i64, bool, i64, Option<String>);
                let rows: Vec<Row> = sqlx::query_as(concat!(
                    "SELECT broker_id, address, endpoints, broker_epoch, lease_expires_ms, registered_at_ms, \
                       CASE WHEN lease_epoch = broker_epoch THEN lease_expires_ms - ", $now, " ELSE 0 END, \
                       decommissioned, \
                       CASE WHEN lease_expires_ms < ", $now, " THEN ", $now, " - lease_expires_ms ELSE 0 END, \
                       rack \
                     FROM brokers ORDER BY broker_id",
                ))
                .fetch_all(&self.pool)
                .await?;
                let read_at = std::time::Instant::now();
                Ok(rows
                    .into_iter()
                    .map(|(broker_id, address, endpoints, broker_epoch, lease_expires_ms, registered_at_ms, remaining_ms, decommissioned, expired_for_ms, rack)| {
                        BrokerLease {
                            broker_id,
                            address,
                            endpoints: crate::cluster::decode_endpoints(&endpoints),
                            broker_epoch,
                            lease_expires_ms,
                            registered_at_ms,
                            remaining_ms,
                            read_at,
                            decommissioned,
                            expired_for_ms,
                            rack,
                        }
                    })
                    .collect())
            }

            pub(super) async fn try_acquire_controller(
                &self,
                broker_id: i32,
                lease_ms: i64,
            ) -> Result<Option<ControllerLease>> {
                // One statement: insert the first lease, or take over a lapsed one, or
                // renew our own; the epoch rises whenever the holder changes.
                let row: Option<(i32, i64, i64, i64)> = sqlx::query_as(concat!(
                    "INSERT INTO controller (id, broker_id, epoch, lease_expires_ms) VALUES (1, $1, 1, ", $now, " + $2) \
                     ON CONFLICT (id) DO UPDATE SET \
                       epoch = CASE WHEN controller.broker_id = excluded.broker_id THEN controller.epoch \
                                    ELSE controller.epoch + 1 END, \
                       broker_id = excluded.broker_id, \
                       lease_expires_ms = excluded.lease_expires_ms \
                     WHERE controller.broker_id = excluded.broker_id OR controller.lease_expires_ms <= ", $now, " \
                     RETURNING broker_id, epoch, lease_expires_ms, lease_expires_ms - ", $now,
                ))
                .bind(broker_id)
                .bind(lease_ms.max(0))
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(controller_lease))
            }

            pub(super) async fn controller(&self) -> Result<Option<ControllerLease>> {
                let row: Option<(i32, i64, i64, i64)> = sqlx::query_as(concat!(
                    "SELECT broker_id, epoch, lease_expires_ms, lease_expires_ms - ", $now,
                    " FROM controller WHERE id = 1",
                ))
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(controller_lease))
            }

            pub(super) async fn list_partition_states(&self) -> Result<Vec<PartitionState>> {
                let rows: Vec<PartitionStateRow> = sqlx::query_as(&format!(
                    "SELECT {PARTITION_STATE_COLUMNS} FROM partition_state ORDER BY topic_id, partition_id"
                ))
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(partition_state).collect()
            }

            pub(super) async fn update_partition_state(
                &self,
                s: &PartitionState,
                guard: StateGuard,
            ) -> Result<PartitionState> {
                let mut tx = self.begin_write().await?;
                let lease_of = concat!(
                    "SELECT lease_expires_ms - ", $now, ", broker_epoch, lease_epoch FROM brokers WHERE broker_id = $1",
                    $for_update
                );
                if let Some(broker_id) = guard.expired {
                    // Any incarnation's lease: an older process may still trust it.
                    let lease: Option<(i64, i64, i64)> =
                        sqlx::query_as(lease_of).bind(broker_id).fetch_optional(&mut *tx).await?;
                    if lease.is_some_and(|(remaining, _, _)| remaining > 0) {
                        return Err(Error::BrokerStillAlive(broker_id));
                    }
                }
                if let Some((broker_id, epoch)) = guard.alive {
                    // Only a lease that this very incarnation renewed.
                    let lease: Option<(i64, i64, i64)> =
                        sqlx::query_as(lease_of).bind(broker_id).fetch_optional(&mut *tx).await?;
                    if !lease.is_some_and(|(remaining, e, held)| remaining > 0 && e == epoch && held == epoch) {
                        return Err(Error::BrokerNotAlive(broker_id));
                    }
                }
                let updated = sqlx::query(
                    "UPDATE partition_state SET leader = $3, leader_epoch = $4, isr = $5, elr = $6, \
                       recovering = $8, replicas = $9, adding_replicas = $10, removing_replicas = $11, \
                       version = version + 1 \
                     WHERE topic_id = $1 AND partition_id = $2 AND version = $7",
                )
                .bind(s.topic_id)
                .bind(s.partition)
                .bind(s.leader)
                .bind(s.leader_epoch)
                .bind(encode_ids(&s.isr))
                .bind(encode_ids(&s.elr))
                .bind(s.version)
                .bind(encode_recovering(&s.recovering))
                .bind(encode_ids(&s.replicas))
                .bind(encode_ids(&s.adding))
                .bind(encode_ids(&s.removing))
                .execute(&mut *tx)
                .await?;
                let row: Option<PartitionStateRow> = sqlx::query_as(&format!(
                    "SELECT {PARTITION_STATE_COLUMNS} FROM partition_state WHERE topic_id = $1 AND partition_id = $2"
                ))
                .bind(s.topic_id)
                .bind(s.partition)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Err(Error::PartitionStateNotFound { topic_id: s.topic_id, partition: s.partition });
                };
                let current = partition_state(row)?;
                if updated.rows_affected() == 0 {
                    return Err(Error::PartitionStateConflict {
                        topic_id: s.topic_id,
                        partition: s.partition,
                        expected: s.version,
                        actual: current.version,
                    });
                }
                tx.commit().await?;
                Ok(current)
            }

            pub(super) async fn advance_log_start(
                &self,
                topic_id: Uuid,
                partition: i32,
                offset: i64,
            ) -> Result<i64> {
                let row: Option<(i64,)> = sqlx::query_as(
                    "UPDATE partition_state SET log_start_offset = \
                       CASE WHEN log_start_offset < $3 THEN $3 ELSE log_start_offset END \
                     WHERE topic_id = $1 AND partition_id = $2 RETURNING log_start_offset",
                )
                .bind(topic_id)
                .bind(partition)
                .bind(offset)
                .fetch_optional(&self.pool)
                .await?;
                row.map(|(o,)| o)
                    .ok_or(Error::PartitionStateNotFound { topic_id, partition })
            }

            pub(super) async fn log_start_offsets(&self) -> Result<Vec<(Uuid, i32, i64)>> {
                Ok(sqlx::query_as(
                    "SELECT topic_id, partition_id, log_start_offset FROM partition_state \
                     WHERE log_start_offset > 0 ORDER BY topic_id, partition_id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            pub(super) async fn report_partition_sizes(
                &self,
                sizes: &[(Uuid, i32, i64)],
            ) -> Result<()> {
                // In key order, in statements of many rows: a broker's first report
                // holds every partition it leads, and rows locked in one order cannot
                // deadlock with a topic's deletion.
                let mut sorted = sizes.to_vec();
                sorted.sort_unstable();
                for chunk in sorted.chunks(SIZES_PER_STATEMENT) {
                    let rows = (0..chunk.len())
                        .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
                        .collect::<Vec<_>>()
                        .join(", ");
                    // The join drops sizes of partitions that do not exist.
                    let sql = format!(
                        "WITH v (topic_id, partition_id, local_bytes) AS (VALUES {rows}) \
                         INSERT INTO partition_sizes (topic_id, partition_id, local_bytes) \
                         SELECT v.topic_id, v.partition_id, v.local_bytes \
                         FROM v, partition_state s \
                         WHERE s.topic_id = v.topic_id AND s.partition_id = v.partition_id \
                         ON CONFLICT (topic_id, partition_id) \
                         DO UPDATE SET local_bytes = excluded.local_bytes"
                    );
                    let mut q = sqlx::query(&sql);
                    for &(topic_id, partition, bytes) in chunk {
                        q = q.bind(topic_id).bind(partition).bind(bytes.max(0));
                    }
                    q.execute(&self.pool).await?;
                }
                Ok(())
            }

            pub(super) async fn partition_sizes(&self) -> Result<Vec<(Uuid, i32, i64)>> {
                Ok(sqlx::query_as(
                    "SELECT topic_id, partition_id, local_bytes FROM partition_sizes \
                     ORDER BY topic_id, partition_id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            pub(super) fn supports_replication(&self) -> bool {
                $replicated
            }
        }
    };
}

for_each_backend!(cluster_sql);
