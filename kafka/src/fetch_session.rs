//! Incremental fetch sessions (KIP-227, Fetch v7+). A consumer of many partitions
//! names them all once; later requests name only the partitions whose fetch offset
//! changed (and those it forgets), and the answers hold only the partitions with
//! something new: records, an error, or a changed high watermark or log start.
//!
//! Each connection holds at most one session, of at most [`MAX_SESSION_PARTITIONS`]
//! partitions (a full request with more is answered without a session, and an
//! incremental one that would pass it ends the session), and the session goes with
//! the connection. A client that reconnects is told its session is gone
//! (FETCH_SESSION_ID_NOT_FOUND) and starts a new one with a full request, as Kafka's
//! clients do when a broker evicts theirs. Partitions that returned records move to
//! the end of the session's order, so a response's byte limit does not starve the
//! partitions behind them.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use indexmap::IndexMap;
use shale_records::ErrorCode;

/// A partition in a fetch: topic id and partition from v13 (the name is empty, and
/// looked up at every request), topic name and partition before (the id is nil).
pub type Key = (uuid::Uuid, String, i32);

/// Most partitions one session holds.
pub const MAX_SESSION_PARTITIONS: usize = 10_000;

/// What the client asked for a partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wanted {
    pub offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
}

/// What a session last told the client about a partition.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Told {
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    id: i32,
    /// The epoch the next incremental request must carry.
    epoch: i32,
    /// In the order they joined (the order answers are read in).
    partitions: IndexMap<Key, (Wanted, Option<Told>)>,
}

/// The session epochs with a meaning of their own (KIP-227).
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

/// A Fetch request's session fields and partitions.
pub struct Request {
    pub session_id: i32,
    pub epoch: i32,
    pub partitions: Vec<(Key, Wanted)>,
    pub forgotten: Vec<Key>,
}

/// What to read for a request.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Read these partitions and answer all of them, in session `session_id` (0: none).
    Full {
        session_id: i32,
        partitions: Vec<(Key, Wanted)>,
    },
    /// Read every partition of session `session_id` and answer those with news.
    Incremental {
        session_id: i32,
        partitions: Vec<(Key, Wanted)>,
    },
    /// Answer with this top-level error and nothing else.
    Refuse(ErrorCode),
}

/// One partition's answer, as far as a session cares.
pub struct Outcome {
    pub error_code: i16,
    pub has_records: bool,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub preferred_read_replica: i32,
}

/// A connection's fetch session.
#[derive(Debug, Default)]
pub struct FetchSessions {
    session: Mutex<Option<Session>>,
}

/// Session ids, unique within this process.
static NEXT_ID: AtomicI32 = AtomicI32::new(1);

fn next_id() -> i32 {
    loop {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if id > 0 {
            return id;
        }
        // Wrapped: start again at 1.
        let _ = NEXT_ID.compare_exchange(id + 1, 1, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl FetchSessions {
    /// Applies a request to the session: what to read and how to answer.
    pub fn plan(&self, req: Request) -> Plan {
        let mut slot = self.session.lock().unwrap();
        // A partition named twice is read once, as the last naming asks.
        let asked: IndexMap<Key, Wanted> = req.partitions.into_iter().collect();
        match req.epoch {
            FINAL_EPOCH => {
                // Sessionless, closing the session named if there is one.
                if slot.as_ref().is_some_and(|s| s.id == req.session_id) {
                    *slot = None;
                }
                Plan::Full {
                    session_id: 0,
                    partitions: asked.into_iter().collect(),
                }
            }
            INITIAL_EPOCH if asked.len() > MAX_SESSION_PARTITIONS => {
                *slot = None;
                Plan::Full {
                    session_id: 0,
                    partitions: asked.into_iter().collect(),
                }
            }
            INITIAL_EPOCH => {
                let id = next_id();
                *slot = Some(Session {
                    id,
                    epoch: 1,
                    partitions: asked.iter().map(|(k, w)| (k.clone(), (*w, None))).collect(),
                });
                Plan::Full {
                    session_id: id,
                    partitions: asked.into_iter().collect(),
                }
            }
            epoch => {
                let Some(s) = slot.as_mut().filter(|s| s.id == req.session_id) else {
                    return Plan::Refuse(ErrorCode::FetchSessionIdNotFound);
                };
                if epoch != s.epoch {
                    return Plan::Refuse(ErrorCode::InvalidFetchSessionEpoch);
                }
                s.epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                if !req.forgotten.is_empty() {
                    let forgotten: HashSet<&Key> = req.forgotten.iter().collect();
                    s.partitions.retain(|k, _| !forgotten.contains(k));
                }
                for (key, wanted) in asked {
                    s.partitions.entry(key).or_insert((wanted, None)).0 = wanted;
                }
                if s.partitions.len() > MAX_SESSION_PARTITIONS {
                    *slot = None;
                    return Plan::Refuse(ErrorCode::FetchSessionIdNotFound);
                }
                Plan::Incremental {
                    session_id: s.id,
                    partitions: s
                        .partitions
                        .iter()
                        .map(|(k, (w, _))| (k.clone(), *w))
                        .collect(),
                }
            }
        }
    }

    /// Whether a partition's answer goes into an incremental response, remembering
    /// what it tells. For a full response of a session, remembers and says yes.
    pub fn news(&self, session_id: i32, key: &Key, outcome: &Outcome) -> bool {
        let mut slot = self.session.lock().unwrap();
        let Some(s) = slot.as_mut().filter(|s| s.id == session_id) else {
            return true;
        };
        let Some((_, told)) = s.partitions.get_mut(key) else {
            return true;
        };
        let now = Told {
            high_watermark: outcome.high_watermark,
            last_stable_offset: outcome.last_stable_offset,
            log_start_offset: outcome.log_start_offset,
        };
        let news = outcome.has_records
            || outcome.error_code != 0
            || outcome.preferred_read_replica >= 0
            || *told != Some(now);
        *told = Some(now);
        if outcome.has_records {
            // To the back of the queue: the next response starts with the others.
            if let Some((k, v)) = s.partitions.shift_remove_entry(key) {
                s.partitions.insert(k, v);
            }
        }
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> Key {
        (uuid::Uuid::nil(), "t".into(), p)
    }

    fn wanted(offset: i64) -> Wanted {
        Wanted {
            offset,
            max_bytes: 1 << 20,
            current_leader_epoch: -1,
        }
    }

    fn outcome(hw: i64, records: bool) -> Outcome {
        Outcome {
            error_code: 0,
            has_records: records,
            high_watermark: hw,
            last_stable_offset: hw,
            log_start_offset: 0,
            preferred_read_replica: -1,
        }
    }

    fn request(session_id: i32, epoch: i32, parts: &[(i32, i64)], forgotten: &[i32]) -> Request {
        Request {
            session_id,
            epoch,
            partitions: parts.iter().map(|&(p, o)| (key(p), wanted(o))).collect(),
            forgotten: forgotten.iter().map(|&p| key(p)).collect(),
        }
    }

    #[test]
    fn an_incremental_request_reads_the_whole_session_and_answers_news_only() {
        let s = FetchSessions::default();
        let Plan::Full { session_id, .. } = s.plan(request(0, 0, &[(0, 0), (1, 0), (2, 0)], &[]))
        else {
            panic!("a full request")
        };
        assert!(session_id > 0);
        for p in 0..3 {
            assert!(s.news(session_id, &key(p), &outcome(10, true)));
        }
        // Partition 1 moved on; partition 2 is forgotten.
        let plan = s.plan(request(session_id, 1, &[(1, 10)], &[2]));
        assert_eq!(
            plan,
            Plan::Incremental {
                session_id,
                partitions: vec![(key(0), wanted(0)), (key(1), wanted(10))],
            }
        );
        // Partition 0: nothing new. Partition 1: its high watermark moved.
        assert!(!s.news(session_id, &key(0), &outcome(10, false)));
        assert!(s.news(session_id, &key(1), &outcome(11, false)));
        assert!(!s.news(session_id, &key(1), &outcome(11, false)));
        let mut err = outcome(11, false);
        err.error_code = ErrorCode::NotLeaderOrFollower as i16;
        assert!(s.news(session_id, &key(1), &err), "errors are always news");
    }

    #[test]
    fn partitions_with_records_move_to_the_back_and_sessions_are_bounded() {
        let s = FetchSessions::default();
        let Plan::Full { session_id, .. } = s.plan(request(0, 0, &[(0, 0), (1, 0), (1, 5)], &[]))
        else {
            panic!()
        };
        assert!(s.news(session_id, &key(0), &outcome(10, true)));
        let Plan::Incremental { partitions, .. } = s.plan(request(session_id, 1, &[], &[])) else {
            panic!()
        };
        // Partition 1 once (as last asked), then 0, which returned records.
        assert_eq!(partitions, vec![(key(1), wanted(5)), (key(0), wanted(0))]);
        let many: Vec<(i32, i64)> = (0..=MAX_SESSION_PARTITIONS as i32)
            .map(|p| (p, 0))
            .collect();
        assert!(matches!(
            s.plan(request(0, 0, &many, &[])),
            Plan::Full { session_id: 0, .. }
        ));
    }

    #[test]
    fn wrong_ids_and_epochs_are_refused_and_the_final_epoch_closes() {
        let s = FetchSessions::default();
        assert_eq!(
            s.plan(request(7, 1, &[], &[])),
            Plan::Refuse(ErrorCode::FetchSessionIdNotFound)
        );
        let Plan::Full { session_id, .. } = s.plan(request(0, 0, &[(0, 0)], &[])) else {
            panic!()
        };
        assert_eq!(
            s.plan(request(session_id, 2, &[], &[])),
            Plan::Refuse(ErrorCode::InvalidFetchSessionEpoch)
        );
        assert!(matches!(
            s.plan(request(session_id, 1, &[], &[])),
            Plan::Incremental { .. }
        ));
        // A replayed request is refused: the epoch moved on.
        assert_eq!(
            s.plan(request(session_id, 1, &[], &[])),
            Plan::Refuse(ErrorCode::InvalidFetchSessionEpoch)
        );
        assert_eq!(
            s.plan(request(session_id, FINAL_EPOCH, &[(0, 5)], &[])),
            Plan::Full {
                session_id: 0,
                partitions: vec![(key(0), wanted(5))]
            }
        );
        assert_eq!(
            s.plan(request(session_id, 2, &[], &[])),
            Plan::Refuse(ErrorCode::FetchSessionIdNotFound)
        );
    }
}
