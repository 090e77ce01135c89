//! What the model checks in every world, and what a data-losing restart gives up.

use std::collections::HashMap;

use super::log::Log;
use super::{Model, World};
use crate::elections::elect;

impl Model {
    /// Broker `b` comes back with `log`, less than it held. With min.insync.replicas
    /// 1 a lone member may hold acknowledged records (as docs/durability.md says): those that
    /// no other member of the ISR or ELR, no recovering replica and not the bucket
    /// holds are given up with it (a replica out of sync is not elected for what it
    /// may hold, nor a recovering one for more than the log it left the ISR with). What is acknowledged or exposed from then on is checked as before;
    /// with min.insync.replicas 2 or more nothing is given up.
    pub(super) fn give_up_lost(&self, w: &mut World, b: usize, log: &Log) {
        if self.bounds.min_isr > 1 {
            return;
        }
        let (nodes, meta, remote) = (&w.nodes, &w.meta, &w.remote);
        // Each other member, with the end of the log the election knows of it: a
        // recovering replica is elected for the log it left with, not for what it has
        // fetched since.
        let members: Vec<(usize, i64)> = (0..nodes.len())
            .filter(|&i| i != b)
            .filter_map(|i| {
                let id = i as i32;
                if meta.isr.contains(&id) || meta.elr.contains(&id) {
                    return Some((i, i64::MAX));
                }
                let r = meta.recovering.iter().find(|r| r.broker == id)?;
                Some((i, r.log_end))
            })
            .collect();
        let held = |o: i64, v: u8| {
            log.at(o).map(|e| e.1) == Some(v)
                || remote.get(o as usize).map(|e| e.1) == Some(v)
                || members
                    .iter()
                    .any(|&(i, end)| o < end && nodes[i].log.at(o).map(|e| e.1) == Some(v))
        };
        w.acked.retain(|&mut (o, v)| held(o, v));
        if let Some(first) = (0..w.exposed.len()).find(|&o| !held(o as i64, w.exposed[o])) {
            w.exposed.truncate(first);
        }
    }

    /// Reads offset `o` as leader `b` serves it: from the bucket below its local log.
    pub(super) fn read(w: &World, b: usize, o: i64) -> Option<u8> {
        let log = &w.nodes[b].log;
        if o < log.start {
            w.remote.get(o as usize).map(|e| e.1)
        } else {
            log.at(o).map(|e| e.1)
        }
    }

    pub(super) fn check(&self, w: &World) -> Option<String> {
        for b in 0..self.bounds.brokers {
            if !self.acting_leader(w, b) {
                continue;
            }
            for &(o, v) in &w.acked {
                if Self::read(w, b, o) != Some(v) {
                    return Some(format!(
                        "acked record lost: offset {o} value {v} missing at leader {b}"
                    ));
                }
            }
            for o in 0..w.nodes[b].hw {
                let v = Self::read(w, b, o);
                if let Some(&e) = w.exposed.get(o as usize)
                    && v != Some(e)
                {
                    return Some(format!(
                        "exposed offset {o} changed from {e} to {v:?} at leader {b}"
                    ));
                }
            }
        }
        let mut seen: HashMap<i32, i32> = HashMap::new();
        for &(epoch, b) in &w.writers {
            if *seen.entry(epoch).or_insert(b) != b {
                return Some(format!("two writers in epoch {epoch}"));
            }
        }
        // Everyone back and holding a lease: the controller must elect somebody.
        let settled = (0..self.bounds.brokers).all(|b| {
            let n = &w.nodes[b];
            n.up && !n.leaving && w.leases[b] == (true, n.incarnation)
        });
        if settled {
            let live = self.live(w);
            let mut s = self.state_of(&w.meta);
            for _ in 0..4 {
                match elect(&s, &live, self.rules()) {
                    Some(next) => s = next,
                    None => break,
                }
            }
            if s.leader < 0 {
                return Some(format!(
                    "offline with every broker back: isr {:?} elr {:?}",
                    s.isr, s.elr
                ));
            }
        }
        None
    }
}
