//! A bucket read back without the metastore: its segments found from their objects
//! alone ([`list_bucket`], [`read_metas`]), and each partition's remote log planned
//! from them ([`plan_partition`]), refusing what does not hold together and naming
//! the object at fault.
//!
//! A bucket a cluster wrote holds, besides complete segments, leftovers its metastore
//! would have explained:
//! - a copy that never finished: objects without `.meta` (it is put last), at the end
//!   of the remote log, or covering offsets a complete segment holds;
//! - a deletion under way: `.meta` without `.log` (`.log` goes first, `.meta` last);
//! - remote compaction's replaced segments (kept for a grace period) beside the
//!   rewrite that covers the same offsets;
//! - after an unclean election, a segment the new leader cut where its log diverged
//!   (its objects keep the bytes past the cut) and segments past the cut, beside the
//!   new leader's copies, written under a higher leader epoch from the cut on.
//!
//! The plan goes by the leader epoch each segment was copied under (`.meta`'s
//! `leader_epoch`): a leader copies only its own log, from where the remote log ended
//! when it began (`export_segment_tail`), after cutting what it did not share. So a
//! segment's offsets from the first copy of any later epoch on were cut, and a segment
//! a compacted rewrite names (`replaces`; for older objects, a run of segments a later
//! or equal copy tiles exactly) gives way to it. What is left must follow on from one
//! another. A gap, two segments overlapping otherwise, a `.log` or `.indexes` whose size
//! is not the one `.meta` gives, a `.meta` describing another segment, an epoch lineage
//! that does not rise, or a leftover copy that would leave offsets out is refused. A cut
//! the new leader has not copied after yet is not in the bucket; the restore takes it
//! from the last leader's epochs in the snapshot.

use std::collections::BTreeMap;
use std::fmt;

use uuid::Uuid;

use crate::layout::{ObjectKind, SegmentKey, SegmentMeta};

/// An object and what is wrong with it, or why it was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub object: String,
    pub problem: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.problem)
    }
}

/// One segment as its objects show it.
#[derive(Debug, Clone)]
pub struct FoundSegment {
    pub key: SegmentKey,
    /// The objects present, with their sizes.
    pub objects: BTreeMap<&'static str, u64>,
    /// When the newest of them was written (ms since the Unix epoch, as the store
    /// lists it).
    pub modified_ms: i64,
    /// Its `.meta`, once read ([`read_metas`]); `Err`: present but unreadable.
    pub meta: Option<Result<SegmentMeta, String>>,
}

/// What [`FoundSegment::check`] makes of a segment's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State<'a> {
    Complete(&'a SegmentMeta),
    /// No `.meta`: a copy that never finished.
    NoMeta,
    /// `.meta` without `.log`: a deletion under way.
    Deleting,
}

impl FoundSegment {
    fn path(&self, kind: ObjectKind) -> String {
        self.key.path(kind).to_string()
    }

    fn size(&self, kind: ObjectKind) -> Option<u64> {
        self.objects.get(kind.extension()).copied()
    }

    fn check(&self) -> Result<State<'_>, Finding> {
        let problem = |kind, problem: String| Finding {
            object: self.path(kind),
            problem,
        };
        let meta = match &self.meta {
            None if self.size(ObjectKind::Meta).is_none() => return Ok(State::NoMeta),
            None => return Err(problem(ObjectKind::Meta, "not read".into())),
            Some(Err(e)) => return Err(problem(ObjectKind::Meta, e.clone())),
            Some(Ok(meta)) => meta,
        };
        if meta.key() != self.key {
            return Err(problem(
                ObjectKind::Meta,
                format!(
                    "describes segment {} of partition {} (offsets {}..={}), not the one its name gives",
                    meta.segment_id, meta.partition, meta.base_offset, meta.end_offset
                ),
            ));
        }
        let Some(log) = self.size(ObjectKind::Log) else {
            return Ok(State::Deleting);
        };
        if log != meta.log_bytes {
            return Err(problem(
                ObjectKind::Log,
                format!("{log} bytes where .meta says {}", meta.log_bytes),
            ));
        }
        // The smaller objects: the `.indexes` object, or the three of older copies.
        let mut expected = Vec::new();
        match &meta.indexes {
            Some(name) => {
                let ours = self.key.path(ObjectKind::Indexes);
                if Some(name.as_str()) != ours.filename() {
                    return Err(problem(
                        ObjectKind::Meta,
                        format!("names indexes object '{name}', not its own"),
                    ));
                }
                let keys = meta.key_filter.as_ref().map_or(0, |k| k.bytes);
                // A producer snapshot adds itself and a fourth length to the header.
                let snapshot = meta
                    .producer_snapshot_bytes
                    .map_or(0, |n| n.saturating_add(4));
                let size = [meta.index_bytes, meta.time_index_bytes, keys, snapshot]
                    .into_iter()
                    .fold(16u64, u64::saturating_add);
                expected.push((ObjectKind::Indexes, size));
            }
            None => {
                expected.push((ObjectKind::Index, meta.index_bytes));
                expected.push((ObjectKind::TimeIndex, meta.time_index_bytes));
                if let Some(keys) = &meta.key_filter {
                    expected.push((ObjectKind::Keys, keys.bytes));
                }
            }
        }
        for (kind, want) in expected {
            match self.size(kind) {
                None => return Err(problem(kind, "missing, though .log is there".into())),
                Some(got) if got != want => {
                    return Err(problem(
                        kind,
                        format!("{got} bytes where .meta says {want}"),
                    ));
                }
                Some(_) => {}
            }
        }
        check_epochs(meta).map_err(|e| problem(ObjectKind::Meta, e))?;
        Ok(State::Complete(meta))
    }
}

/// A segment's epochs must rise, start within it, the first at its base.
fn check_epochs(meta: &SegmentMeta) -> Result<(), String> {
    let bad = |why: &str| Err(format!("epoch lineage {:?} {why}", meta.epochs));
    if meta.end_offset < meta.base_offset {
        return Err(format!(
            "ends at {} before it starts at {}",
            meta.end_offset, meta.base_offset
        ));
    }
    let Some(first) = meta.epochs.first() else {
        return Ok(());
    };
    if first.1 != meta.base_offset {
        return bad("does not start at the segment's base offset");
    }
    for pair in meta.epochs.windows(2) {
        if pair[1].0 <= pair[0].0 || pair[1].1 <= pair[0].1 {
            return bad("does not rise");
        }
    }
    if meta.epochs.iter().any(|e| e.1 > meta.end_offset) {
        return bad("starts an epoch past the segment's end");
    }
    Ok(())
}

/// A partition's remote log as the bucket holds it.
#[derive(Debug, Clone, Default)]
pub struct PartitionPlan {
    /// The segments, by offset, with the end offset each is taken to (`meta.end_offset`
    /// stays the end its objects were written with).
    pub segments: Vec<(SegmentMeta, i64)>,
    /// Objects left out, and why.
    pub ignored: Vec<Finding>,
    /// The highest leader epoch any of its objects names (-1: none).
    pub max_epoch: i32,
    /// The highest offset any of its objects' keys names, complete or not (-1: none):
    /// offsets up to there were written once, even where nothing of them is left.
    pub highest_named: i64,
    /// The segments left out, whose objects nothing will read.
    pub leftovers: Vec<SegmentKey>,
}

impl PartitionPlan {
    /// The first and last offsets of the remote log.
    pub fn range(&self) -> Option<(i64, i64)> {
        Some((
            self.segments.first()?.0.base_offset,
            self.segments.last()?.1,
        ))
    }

    /// The remote log as the metastore records one: a finished row per segment, ended
    /// where it is taken to, with the epochs up to there.
    pub fn rows(&self, now_ms: i64) -> Vec<shale_metastore::RemoteSegment> {
        (self.segments.iter())
            .map(|(m, end)| shale_metastore::RemoteSegment {
                segment_id: m.segment_id,
                topic_id: m.topic_id,
                partition: m.partition,
                base_offset: m.base_offset,
                end_offset: *end,
                max_timestamp: m.max_timestamp,
                leader_epoch: m.leader_epoch,
                size_bytes: m.log_bytes as i64,
                state: shale_metastore::RemoteSegmentState::CopyFinished,
                created_at_ms: now_ms,
                updated_at_ms: now_ms,
                epochs: m.epochs.iter().copied().filter(|e| e.1 <= *end).collect(),
                object_end_offset: m.end_offset,
                aborted: m
                    .aborted
                    .iter()
                    .copied()
                    .filter(|a| a.last_offset <= *end)
                    .collect(),
            })
            .collect()
    }

    fn leave_out(&mut self, m: &SegmentMeta, why: &str) {
        self.leftovers.push(m.key());
        self.ignored.push(Finding {
            object: m.key().path(ObjectKind::Log).to_string(),
            problem: format!("left out: {why}"),
        });
    }

    /// Cuts the remote log before `from` (segments from there on leave it, the one
    /// holding it ends before it).
    pub fn cut(&mut self, from: i64) {
        let mut kept = Vec::new();
        for (meta, end) in std::mem::take(&mut self.segments) {
            if meta.base_offset >= from {
                let why = format!("past offset {from}, where the last leader's log parts from it");
                self.leave_out(&meta, &why);
            } else {
                kept.push((meta, end.min(from - 1)));
            }
        }
        self.segments = kept;
    }
}

/// Whether `m` is a compacted rewrite, and of which segments: `.meta` names them
/// (`replaces`). For objects written before it did, a segment whose offsets a run of
/// other segments copied no later tiles exactly is taken for their rewrite, and so is
/// one that a segment copied under an earlier epoch follows on from (a leader copies
/// from the remote log's end, so only a rewrite ends where older copies go on; the
/// segments it replaced may be gone already).
fn replaced_by(m: &SegmentMeta, all: &[&SegmentMeta]) -> Option<Vec<Uuid>> {
    match &m.replaces {
        Some(ids) if ids.is_empty() => None,
        Some(ids) => Some(ids.clone()),
        None => tiling(m, all).or_else(|| {
            let followed = all
                .iter()
                .any(|o| o.base_offset == m.end_offset + 1 && o.leader_epoch < m.leader_epoch);
            followed.then(Vec::new)
        }),
    }
}

/// The run of other segments, copied no later than `m`, that tiles `m`'s offsets
/// exactly, if any.
fn tiling(m: &SegmentMeta, all: &[&SegmentMeta]) -> Option<Vec<Uuid>> {
    let mut run = Vec::new();
    let mut pos = m.base_offset;
    while pos <= m.end_offset {
        // Of two copies of the same offsets under one epoch, one stands.
        let whole =
            |o: &SegmentMeta| o.base_offset == m.base_offset && o.end_offset == m.end_offset;
        let next = all.iter().filter(|o| {
            o.segment_id != m.segment_id
                && o.base_offset == pos
                && o.end_offset <= m.end_offset
                && (o.leader_epoch < m.leader_epoch
                    || (o.leader_epoch == m.leader_epoch
                        && (!whole(o) || o.segment_id < m.segment_id)))
        });
        let next = next.max_by_key(|o| o.end_offset)?;
        run.push(next.segment_id);
        pos = next.end_offset + 1;
    }
    Some(run)
}

/// Plans a partition's remote log from its segments' objects (see the module's
/// description); every problem found is returned, each naming its object.
pub fn plan_partition(found: &[FoundSegment]) -> Result<PartitionPlan, Vec<Finding>> {
    let mut complete: Vec<&SegmentMeta> = Vec::new();
    let mut leftovers = Vec::new();
    let mut problems = Vec::new();
    let mut plan = PartitionPlan {
        max_epoch: -1,
        highest_named: -1,
        ..Default::default()
    };
    for f in found {
        plan.highest_named = plan.highest_named.max(f.key.end_offset);
        if f.objects.is_empty() {
            continue;
        }
        if let Some(Ok(meta)) = &f.meta {
            let top = meta.epochs.iter().map(|e| e.0).max().unwrap_or(-1);
            plan.max_epoch = plan.max_epoch.max(meta.leader_epoch).max(top);
        }
        match f.check() {
            Ok(State::Complete(meta)) => complete.push(meta),
            Ok(state) => leftovers.push((f, state)),
            Err(p) => problems.push(p),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let log_path = |m: &SegmentMeta| m.key().path(ObjectKind::Log).to_string();
    // Segments a compacted rewrite replaced give way to it.
    let mut rewrites = Vec::new();
    let mut replaced = std::collections::HashSet::new();
    for m in &complete {
        if let Some(ids) = replaced_by(m, &complete) {
            rewrites.push(m.segment_id);
            replaced.extend(ids);
        }
    }
    // A leader's first copy starts where the remote log ended when it began copying:
    // whatever was copied under an earlier epoch from there on had been cut.
    let mut first_copy: BTreeMap<i32, i64> = BTreeMap::new();
    for m in &complete {
        if !rewrites.contains(&m.segment_id) && !replaced.contains(&m.segment_id) {
            let first = first_copy.entry(m.leader_epoch).or_insert(i64::MAX);
            *first = (*first).min(m.base_offset);
        }
    }
    let mut taken: Vec<(&SegmentMeta, i64)> = Vec::new();
    for m in &complete {
        if replaced.contains(&m.segment_id) {
            plan.leave_out(m, "a compacted rewrite replaced it");
            continue;
        }
        let limit = (first_copy.range(m.leader_epoch + 1..).map(|(_, b)| *b)).min();
        let end = limit.map_or(m.end_offset, |l| m.end_offset.min(l - 1));
        if end < m.base_offset {
            plan.leave_out(
                m,
                "a leader of a later epoch copied from an earlier offset (the remote log was cut there)",
            );
        } else {
            taken.push((m, end));
        }
    }
    // The rest must follow on from one another: the later copy first at one offset.
    taken.sort_by_key(|(m, end)| (m.base_offset, std::cmp::Reverse((m.leader_epoch, *end))));
    let mut pos = taken.first().map_or(0, |(m, _)| m.base_offset);
    for (m, end) in taken {
        if end < pos {
            plan.leave_out(m, "a copy of offsets another copy of them holds");
        } else if m.base_offset < pos {
            let (prev, _) = plan.segments.last().expect("a segment was taken");
            problems.push(Finding {
                object: log_path(m),
                problem: format!(
                    "offsets {}..={} overlap {} (copied under leader epoch {}, this under {})",
                    m.base_offset,
                    m.end_offset,
                    log_path(prev),
                    prev.leader_epoch,
                    m.leader_epoch
                ),
            });
        } else if m.base_offset > pos {
            problems.push(gap(pos, m.base_offset, &leftovers));
            break;
        } else {
            plan.segments.push((m.clone(), end));
            pos = end + 1;
        }
    }
    let (start, end) = plan.range().unwrap_or((i64::MAX, i64::MIN));
    for (f, state) in leftovers {
        let (base, last) = (f.key.base_offset, f.key.end_offset);
        let object = match state {
            State::Deleting => f.path(ObjectKind::Log),
            _ => f.path(ObjectKind::Meta),
        };
        let problem = match state {
            State::Deleting => "left out: no .log, a deletion under way".to_string(),
            _ if base > end => {
                "left out: no .meta, a copy past the remote log's end that never finished"
                    .to_string()
            }
            _ if base >= start && last <= end => {
                "left out: no .meta, a copy that never finished of offsets complete segments hold"
                    .to_string()
            }
            _ => {
                problems.push(Finding {
                    object,
                    problem: format!(
                        "missing: offsets {base}..={last} would be lost (the remote log \
                         planned from the complete segments is {start}..={end})"
                    ),
                });
                continue;
            }
        };
        plan.leftovers.push(f.key);
        plan.ignored.push(Finding { object, problem });
    }
    if problems.is_empty() {
        Ok(plan)
    } else {
        Err(problems)
    }
}

/// The problem of a gap from `pos` to `next`, naming the leftovers found in it.
fn gap(pos: i64, next: i64, leftovers: &[(&FoundSegment, State<'_>)]) -> Finding {
    let inside: Vec<&FoundSegment> = leftovers
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| f.key.base_offset < next && f.key.end_offset >= pos)
        .collect();
    match inside.first() {
        Some(f) => Finding {
            object: match f.size(ObjectKind::Meta) {
                Some(_) => f.path(ObjectKind::Log),
                None => f.path(ObjectKind::Meta),
            },
            problem: format!(
                "missing, so offsets {pos}..={} are in no complete segment",
                next - 1
            ),
        },
        None => Finding {
            object: format!("offsets {pos}..={}", next - 1),
            problem: "in no segment: the remote log has a gap".into(),
        },
    }
}

mod read;
#[cfg(test)]
#[path = "bucket_tests.rs"]
mod tests;

pub use read::{BucketError, Listing, Snapshots, list_bucket, read_metas, read_snapshots};
