//! Transaction records and the offsets their transactions commit, in SQL.

use uuid::Uuid;

use crate::txns::{decode_groups, decode_partitions, encode_groups, encode_partitions};
use crate::{CommittedOffset, Error, Result, TxnOffsets, TxnRecord, TxnState};

type TxnRow = (
    String,
    i64,
    i32,
    String,
    i32,
    String,
    String,
    i64,
    i64,
    i32,
    i64,
);

macro_rules! columns {
    () => {
        "transactional_id, producer_id, producer_epoch, state, timeout_ms, \
         partitions, groups, start_ms, update_ms, marker_epoch, version"
    };
}

fn record(row: TxnRow) -> Result<TxnRecord> {
    let (
        id,
        producer_id,
        epoch,
        state,
        timeout_ms,
        partitions,
        groups,
        start,
        update,
        marker,
        version,
    ) = row;
    Ok(TxnRecord {
        state: TxnState::parse(&state)
            .ok_or_else(|| Error::CorruptRow(format!("transaction '{id}' in state '{state}'")))?,
        producer_epoch: i16::try_from(epoch)
            .map_err(|_| Error::CorruptRow(format!("transaction '{id}' has epoch {epoch}")))?,
        transactional_id: id,
        producer_id,
        timeout_ms,
        partitions: decode_partitions(&partitions)?,
        groups: decode_groups(&groups)?,
        start_ms: start,
        update_ms: update,
        marker_epoch: marker,
        version,
    })
}

/// The transaction methods of one backend (see `for_each_backend!`).
macro_rules! txns_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            pub(super) async fn transaction(&self, id: &str) -> Result<Option<TxnRecord>> {
                let row: Option<TxnRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM transactions WHERE transactional_id = $1"
                ))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                row.map(record).transpose()
            }

            pub(super) async fn transactions(&self) -> Result<Vec<TxnRecord>> {
                let rows: Vec<TxnRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM transactions ORDER BY transactional_id"
                ))
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(record).collect()
            }

            pub(super) async fn transactions_to_check(
                &self,
                idle_before: i64,
            ) -> Result<Vec<TxnRecord>> {
                let rows: Vec<TxnRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM transactions WHERE state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort') \
                     OR update_ms < $1 ORDER BY transactional_id"
                ))
                .bind(idle_before)
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(record).collect()
            }

            pub(super) async fn write_transaction(
                &self,
                r: &TxnRecord,
                offsets: TxnOffsets,
            ) -> Result<i64> {
                let conflict = || Error::TxnConflict {
                    transactional_id: r.transactional_id.clone(),
                    expected: r.version,
                };
                let mut tx = self.begin_write().await?;
                let next = r.version + 1;
                let written = if r.version == 0 {
                    sqlx::query(concat!(
                        "INSERT INTO transactions (",
                        columns!(),
                        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 + 1) \
                         ON CONFLICT (transactional_id) DO NOTHING"
                    ))
                } else {
                    sqlx::query(
                        "UPDATE transactions SET producer_id = $2, producer_epoch = $3, state = $4, \
                         timeout_ms = $5, partitions = $6, groups = $7, start_ms = $8, update_ms = $9, \
                         marker_epoch = $10, version = $11 + 1 \
                         WHERE transactional_id = $1 AND version = $11",
                    )
                }
                .bind(&r.transactional_id)
                .bind(r.producer_id)
                .bind(i32::from(r.producer_epoch))
                .bind(r.state.name())
                .bind(r.timeout_ms)
                .bind(encode_partitions(&r.partitions))
                .bind(encode_groups(&r.groups))
                .bind(r.start_ms)
                .bind(r.update_ms)
                .bind(r.marker_epoch)
                .bind(r.version)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if written != 1 {
                    return Err(conflict());
                }
                match offsets {
                    TxnOffsets::Keep => {}
                    TxnOffsets::Commit => {
                        sqlx::query(
                            "INSERT INTO group_offsets (group_id, topic_id, partition_id, committed, metadata, commit_ms) \
                             SELECT group_id, topic_id, partition_id, committed, metadata, commit_ms \
                             FROM txn_offsets WHERE transactional_id = $1 \
                             ON CONFLICT (group_id, topic_id, partition_id) DO UPDATE SET \
                             committed = excluded.committed, metadata = excluded.metadata, \
                             commit_ms = excluded.commit_ms",
                        )
                        .bind(&r.transactional_id)
                        .execute(&mut *tx)
                        .await?;
                    }
                    TxnOffsets::Discard => {}
                }
                if offsets != TxnOffsets::Keep {
                    sqlx::query("DELETE FROM txn_offsets WHERE transactional_id = $1")
                        .bind(&r.transactional_id)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(next)
            }

            pub(super) async fn put_txn_offsets(
                &self,
                id: &str,
                version: i64,
                group: &str,
                offsets: &[CommittedOffset],
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                let current: Option<(i64,)> = sqlx::query_as(concat!(
                    "SELECT version FROM transactions WHERE transactional_id = $1",
                    $for_update
                ))
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
                if current != Some((version,)) {
                    return Err(Error::TxnConflict {
                        transactional_id: id.to_string(),
                        expected: version,
                    });
                }
                for o in offsets {
                    sqlx::query(
                        "INSERT INTO txn_offsets (transactional_id, group_id, topic_id, partition_id, committed, metadata, commit_ms) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (transactional_id, group_id, topic_id, partition_id) DO UPDATE SET \
                         committed = excluded.committed, metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    )
                    .bind(id)
                    .bind(group)
                    .bind(o.topic_id)
                    .bind(o.partition)
                    .bind(o.offset)
                    .bind(&o.metadata)
                    .bind(o.commit_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| super::unknown_topic_on_fk(e, o.topic_id))?;
                }
                tx.commit().await?;
                Ok(())
            }

            pub(super) async fn pending_txn_offsets(&self, group: &str) -> Result<Vec<(Uuid, i32)>> {
                Ok(sqlx::query_as(
                    "SELECT DISTINCT topic_id, partition_id FROM txn_offsets WHERE group_id = $1 \
                     ORDER BY topic_id, partition_id",
                )
                .bind(group)
                .fetch_all(&self.pool)
                .await?)
            }

            pub(super) async fn delete_transaction(&self, id: &str, version: i64) -> Result<bool> {
                // Its pending offsets go with it (ON DELETE CASCADE).
                let deleted = sqlx::query(
                    "DELETE FROM transactions WHERE transactional_id = $1 AND version = $2",
                )
                .bind(id)
                .bind(version)
                .execute(&self.pool)
                .await?
                .rows_affected();
                Ok(deleted == 1)
            }
        }
    };
}

for_each_backend!(txns_sql);
