//! What the workload records while faults happen (every acknowledgement, every record
//! a consumer saw, the group's commits), which the check compares at the end, and the
//! names it uses.

use std::collections::BTreeMap;
use std::sync::Mutex;

pub const TOPIC: &str = "chaos";
pub const PARTITIONS: i32 = 6;
pub const GROUP: &str = "chaos-group";

/// One acknowledged record.
#[derive(Debug, Clone)]
pub struct Ack {
    pub partition: i32,
    pub offset: i64,
    /// Its value: `{producer}-{seq:012}`.
    pub value: String,
}

#[derive(Default)]
pub struct Tally {
    pub acked: Mutex<Vec<Ack>>,
    /// Sends that ended in an error (not acknowledged: they may or may not be stored).
    pub failed: std::sync::atomic::AtomicU64,
    /// Records the `acks=1` producer had acknowledged (not checked: they may be lost).
    pub acked_by_leader: std::sync::atomic::AtomicU64,
    /// What the group's members saw: (partition, offset) -> value.
    pub consumed: Mutex<BTreeMap<(i32, i64), String>>,
    /// Offsets the group committed last, by partition.
    pub committed: Mutex<BTreeMap<i32, i64>>,
}

/// The `acks=1` producer's name (the prefix of its values).
pub const ACKS1: &str = "acks1";

pub fn value(producer: &str, seq: u64) -> String {
    format!("{producer}-{seq:012}")
}
