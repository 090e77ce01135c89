//! Remote segments in SQL: registering copies, moving them through their states (a
//! compare-and-set), and reading a partition's or a topic's remote log.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{is_unique_violation, now_ms};
use crate::remote::{decode_aborted, decode_epochs, encode_aborted, encode_epochs};
use crate::{Error, RemoteLog, RemoteSegment, RemoteSegmentState, Result};

type RemoteSegmentRow = (
    Uuid,
    Uuid,
    i32,
    i64,
    i64,
    i64,
    i32,
    i64,
    String,
    i64,
    i64,
    String,
    i64,
    String,
);

const REMOTE_SEGMENT_COLUMNS: &str = "segment_id, topic_id, partition_id, base_offset, end_offset, \
     max_timestamp, leader_epoch, size_bytes, state, created_at_ms, updated_at_ms, epochs, \
     COALESCE(object_end_offset, end_offset), aborted";

/// The columns an insert writes (the objects' end offset is the end offset until a cut).
const INSERTED_COLUMNS: &str = "segment_id, topic_id, partition_id, base_offset, end_offset, \
     max_timestamp, leader_epoch, size_bytes, state, created_at_ms, updated_at_ms, epochs, aborted";

fn remote_segment(row: RemoteSegmentRow) -> Result<RemoteSegment> {
    let (
        segment_id,
        topic_id,
        partition,
        base_offset,
        end_offset,
        max_timestamp,
        leader_epoch,
        size_bytes,
        state,
        c,
        u,
        epochs,
        object_end_offset,
        aborted,
    ) = row;
    let state = RemoteSegmentState::parse(&state).ok_or_else(|| {
        Error::CorruptRow(format!("remote segment {segment_id} has state '{state}'"))
    })?;
    Ok(RemoteSegment {
        segment_id,
        topic_id,
        partition,
        base_offset,
        end_offset,
        max_timestamp,
        leader_epoch,
        size_bytes,
        state,
        created_at_ms: c,
        updated_at_ms: u,
        epochs: decode_epochs(&epochs)?,
        object_end_offset,
        aborted: decode_aborted(&aborted)?,
    })
}

/// The remote segment methods of one backend (see `for_each_backend!`).
macro_rules! remote_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            pub(super) async fn add_remote_segment(&self, s: &RemoteSegment) -> Result<()> {
                if s.state != RemoteSegmentState::CopyStarted {
                    return Err(Error::IllegalTransition { from: RemoteSegmentState::CopyStarted, to: s.state });
                }
                sqlx::query(&format!(
                    "INSERT INTO remote_segments ({INSERTED_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
                ))
                .bind(s.segment_id)
                .bind(s.topic_id)
                .bind(s.partition)
                .bind(s.base_offset)
                .bind(s.end_offset)
                .bind(s.max_timestamp)
                .bind(s.leader_epoch)
                .bind(s.size_bytes)
                .bind(s.state.as_str())
                .bind(s.created_at_ms)
                .bind(s.updated_at_ms)
                .bind(encode_epochs(&s.epochs))
                .bind(encode_aborted(&s.aborted))
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            pub(super) async fn transition_remote_segment(
                &self,
                segment_id: Uuid,
                from: RemoteSegmentState,
                to: RemoteSegmentState,
            ) -> Result<RemoteSegment> {
                if !from.can_become(to) {
                    return Err(Error::IllegalTransition { from, to });
                }
                let mut tx = self.begin_write().await?;
                let select = format!("SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE segment_id = $1");
                let row: Option<RemoteSegmentRow> =
                    sqlx::query_as(&select).bind(segment_id).fetch_optional(&mut *tx).await?;
                let mut seg = remote_segment(row.ok_or(Error::RemoteSegmentNotFound(segment_id))?)?;
                if seg.state != from {
                    return Err(Error::RemoteSegmentStateConflict { segment_id, expected: from, actual: seg.state });
                }
                if to == RemoteSegmentState::CopyFinished {
                    // Only a copy made under the partition's current leader epoch may
                    // finish: a deposed leader's late copy would overlap the new one's.
                    let epoch: Option<(i32,)> = sqlx::query_as(concat!(
                        "SELECT leader_epoch FROM partition_state WHERE topic_id = $1 AND partition_id = $2",
                        $for_update
                    ))
                    .bind(seg.topic_id)
                    .bind(seg.partition)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some((current,)) = epoch
                        && current > seg.leader_epoch
                    {
                        return Err(Error::StaleLeaderEpoch {
                            topic_id: seg.topic_id,
                            partition: seg.partition,
                            copied: seg.leader_epoch,
                            current,
                        });
                    }
                    let other: Option<(Uuid,)> = sqlx::query_as(
                        "SELECT segment_id FROM remote_segments WHERE topic_id = $1 AND partition_id = $2 \
                         AND state = 'COPY_FINISHED' AND base_offset <= $3 AND end_offset >= $4 LIMIT 1",
                    )
                    .bind(seg.topic_id)
                    .bind(seg.partition)
                    .bind(seg.end_offset)
                    .bind(seg.base_offset)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some((other,)) = other {
                        return Err(Error::RemoteSegmentOverlap { segment_id, other });
                    }
                }
                let now = now_ms();
                Self::set_remote_state(&mut tx, segment_id, from, to, now).await?;
                tx.commit().await?;
                seg.state = to;
                seg.updated_at_ms = now;
                Ok(seg)
            }

            pub(super) async fn replace_remote_segments(
                &self,
                replaced: &[Uuid],
                replacements: &[Uuid],
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                let select = format!("SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE segment_id = $1");
                let mut rows = Vec::with_capacity(replaced.len() + replacements.len());
                for (ids, expected) in [
                    (replaced, RemoteSegmentState::CopyFinished),
                    (replacements, RemoteSegmentState::CopyStarted),
                ] {
                    for &id in ids {
                        let row: Option<RemoteSegmentRow> =
                            sqlx::query_as(&select).bind(id).fetch_optional(&mut *tx).await?;
                        let seg = remote_segment(row.ok_or(Error::RemoteSegmentNotFound(id))?)?;
                        if seg.state != expected {
                            return Err(Error::RemoteSegmentStateConflict { segment_id: id, expected, actual: seg.state });
                        }
                        rows.push(seg);
                    }
                }
                let (old, new) = rows.split_at(replaced.len());
                let span = |s: &[RemoteSegment]| {
                    (s.iter().map(|r| r.base_offset).min(), s.iter().map(|r| r.end_offset).max())
                };
                let first = old.first().or(new.first()).ok_or(Error::CorruptRow("an empty replacement".into()))?;
                let mut by_base: Vec<&RemoteSegment> = old.iter().collect();
                by_base.sort_by_key(|r| r.base_offset);
                let contiguous = by_base.windows(2).all(|w| w[1].base_offset == w[0].end_offset + 1);
                if old.is_empty() || new.is_empty() || span(old) != span(new) || !contiguous
                    || rows.iter().any(|r| r.topic_id != first.topic_id || r.partition != first.partition)
                {
                    return Err(Error::CorruptRow(format!(
                        "remote segments {replaced:?} cannot be replaced by {replacements:?}: they do not cover the same offsets of one partition"
                    )));
                }
                // No other readable segment may lie in the range.
                let (base, end) = span(old);
                let others: Vec<(Uuid,)> = sqlx::query_as(
                    "SELECT segment_id FROM remote_segments WHERE topic_id = $1 AND partition_id = $2 \
                     AND state = 'COPY_FINISHED' AND base_offset <= $3 AND end_offset >= $4",
                )
                .bind(first.topic_id)
                .bind(first.partition)
                .bind(end)
                .bind(base)
                .fetch_all(&mut *tx)
                .await?;
                if let Some((other,)) = others.into_iter().find(|(id,)| !replaced.contains(id)) {
                    return Err(Error::RemoteSegmentOverlap { segment_id: replacements[0], other });
                }
                // As for a copy: only the current leader epoch may replace segments.
                let epoch: Option<(i32,)> = sqlx::query_as(concat!(
                    "SELECT leader_epoch FROM partition_state WHERE topic_id = $1 AND partition_id = $2",
                    $for_update
                ))
                .bind(first.topic_id)
                .bind(first.partition)
                .fetch_optional(&mut *tx)
                .await?;
                let copied = new.iter().map(|r| r.leader_epoch).min().unwrap_or(i32::MAX);
                if let Some((current,)) = epoch
                    && current > copied
                {
                    return Err(Error::StaleLeaderEpoch { topic_id: first.topic_id, partition: first.partition, copied, current });
                }
                let now = now_ms();
                // The old rows first: the unique index allows one finished row per base offset.
                for (ids, from, to) in [
                    (replaced, RemoteSegmentState::CopyFinished, RemoteSegmentState::Compacted),
                    (replacements, RemoteSegmentState::CopyStarted, RemoteSegmentState::CopyFinished),
                ] {
                    for &id in ids {
                        Self::set_remote_state(&mut tx, id, from, to, now).await?;
                    }
                }
                tx.commit().await?;
                Ok(())
            }

            pub(super) async fn truncate_remote_log(
                &self,
                topic_id: Uuid,
                partition: i32,
                from: i64,
                leader_epoch: i32,
            ) -> Result<u64> {
                let mut tx = self.begin_write().await?;
                let epoch: Option<(i32,)> = sqlx::query_as(concat!(
                    "SELECT leader_epoch FROM partition_state WHERE topic_id = $1 AND partition_id = $2",
                    $for_update
                ))
                .bind(topic_id)
                .bind(partition)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some((current,)) = epoch
                    && current != leader_epoch
                {
                    return Err(Error::StaleLeaderEpoch { topic_id, partition, copied: leader_epoch, current });
                }
                let now = now_ms();
                // Offsets from the cut on no longer count as copied, whatever became of
                // their rows; finished ones start their deletion.
                let gone = sqlx::query(
                    "UPDATE remote_segments SET copied = 0, updated_at_ms = $1, \
                       state = CASE WHEN state = 'COPY_FINISHED' THEN 'DELETE_STARTED' ELSE state END \
                     WHERE topic_id = $2 AND partition_id = $3 AND base_offset >= $4",
                )
                .bind(now)
                .bind(topic_id)
                .bind(partition)
                .bind(from)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let cut = sqlx::query(
                    "UPDATE remote_segments SET object_end_offset = COALESCE(object_end_offset, end_offset), \
                     end_offset = $1, updated_at_ms = $2 \
                     WHERE topic_id = $3 AND partition_id = $4 AND state <> 'COPY_STARTED' \
                     AND base_offset < $5 AND end_offset >= $5",
                )
                .bind(from - 1)
                .bind(now)
                .bind(topic_id)
                .bind(partition)
                .bind(from)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                Ok(gone + cut)
            }

            /// The compare-and-set of one row's state, inside `tx`.
            async fn set_remote_state(
                tx: &mut sqlx::Transaction<'static, $db>,
                segment_id: Uuid,
                from: RemoteSegmentState,
                to: RemoteSegmentState,
                now: i64,
            ) -> Result<()> {
                // `copied` remembers that this copy finished, whatever happens to it later.
                let updated = sqlx::query(
                    "UPDATE remote_segments SET state = $1, updated_at_ms = $2, \
                       copied = CASE WHEN $1 = 'COPY_FINISHED' THEN 1 ELSE copied END \
                     WHERE segment_id = $3 AND state = $4",
                )
                .bind(to.as_str())
                .bind(now)
                .bind(segment_id)
                .bind(from.as_str())
                .execute(&mut **tx)
                .await;
                let updated = match updated {
                    // A concurrent finish of the same base offset won the unique index.
                    Err(e) if is_unique_violation(&e) => {
                        return Err(Error::RemoteSegmentOverlap { segment_id, other: Uuid::nil() });
                    }
                    other => other?,
                };
                if updated.rows_affected() != 1 {
                    return Err(Error::RemoteSegmentStateConflict { segment_id, expected: from, actual: to });
                }
                Ok(())
            }

            pub(super) async fn remote_segment_topic_ids(&self) -> Result<Vec<Uuid>> {
                let rows: Vec<(Uuid,)> = sqlx::query_as(
                    "SELECT DISTINCT topic_id FROM remote_segments WHERE state <> 'DELETE_FINISHED'",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.into_iter().map(|(id,)| id).collect())
            }

            pub(super) async fn undeleted_remote_segments(&self, topic_id: Uuid) -> Result<Vec<RemoteSegment>> {
                let sql = format!(
                    "SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 \
                     AND state <> 'DELETE_FINISHED' ORDER BY partition_id, base_offset"
                );
                let rows: Vec<RemoteSegmentRow> = sqlx::query_as(&sql).bind(topic_id).fetch_all(&self.pool).await?;
                rows.into_iter().map(remote_segment).collect()
            }

            pub(super) async fn remote_log_end_offset(&self, topic_id: Uuid, partition: i32) -> Result<i64> {
                let (end,): (Option<i64>,) = sqlx::query_as(
                    "SELECT MAX(end_offset) FROM remote_segments \
                     WHERE topic_id = $1 AND partition_id = $2 AND copied = 1",
                )
                .bind(topic_id)
                .bind(partition)
                .fetch_one(&self.pool)
                .await?;
                Ok(end.unwrap_or(-1))
            }

            pub(super) async fn remote_logs(&self, topic_id: Uuid) -> Result<BTreeMap<i32, RemoteLog>> {
                let mut out: BTreeMap<i32, RemoteLog> = BTreeMap::new();
                let ends: Vec<(i32, i64)> = sqlx::query_as(
                    "SELECT partition_id, MAX(end_offset) FROM remote_segments \
                     WHERE topic_id = $1 AND copied = 1 GROUP BY partition_id",
                )
                .bind(topic_id)
                .fetch_all(&self.pool)
                .await?;
                for (partition, end) in ends {
                    out.entry(partition).or_default().copied_end = end;
                }
                let unfinished: Vec<(i32,)> = sqlx::query_as(
                    "SELECT DISTINCT partition_id FROM remote_segments \
                     WHERE topic_id = $1 AND state IN ('COPY_STARTED', 'DELETE_STARTED')",
                )
                .bind(topic_id)
                .fetch_all(&self.pool)
                .await?;
                for (partition,) in unfinished {
                    out.entry(partition).or_default().unfinished = true;
                }
                let sql = format!(
                    "SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 \
                     AND state = 'COPY_FINISHED' ORDER BY partition_id, base_offset"
                );
                let rows = sqlx::query_as::<_, RemoteSegmentRow>(&sql)
                    .bind(topic_id)
                    .fetch_all(&self.pool)
                    .await?;
                for row in rows {
                    let seg = remote_segment(row)?;
                    out.entry(seg.partition)
                        .or_default()
                        .finished
                        .push(seg);
                }
                Ok(out)
            }

            pub(super) async fn list_remote_segments(
                &self,
                topic_id: Uuid,
                partition: i32,
                states: &[RemoteSegmentState],
            ) -> Result<Vec<RemoteSegment>> {
                if states.is_empty() {
                    return Ok(Vec::new());
                }
                let placeholders: Vec<String> = (0..states.len()).map(|i| format!("${}", i + 3)).collect();
                let sql = format!(
                    "SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 AND partition_id = $2 \
                     AND state IN ({}) ORDER BY base_offset, created_at_ms",
                    placeholders.join(", ")
                );
                let mut query = sqlx::query_as::<_, RemoteSegmentRow>(&sql).bind(topic_id).bind(partition);
                for s in states {
                    query = query.bind(s.as_str());
                }
                query.fetch_all(&self.pool).await?.into_iter().map(remote_segment).collect()
            }
        }
    };
}

for_each_backend!(remote_sql);
