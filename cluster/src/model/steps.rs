//! The model's steps: every world that follows a world (produces, acknowledgements,
//! fetches, ISR changes, metadata, the controller, crashes and restarts, leases,
//! uploads and local retention), each with a label for traces.

use super::*;

impl Model {
    /// Every next world, with a label.
    pub(super) fn successors(&self, w: &World) -> Vec<(String, World)> {
        let mut out = Vec::new();
        let n = self.bounds.brokers;
        for b in 0..n {
            let node = &w.nodes[b];
            // Produce.
            if self.acting_leader(w, b) && w.produced < self.bounds.records {
                let role = node.role.clone().unwrap();
                for all in [false, true] {
                    if all && role.isr.len() < self.bounds.min_isr {
                        continue;
                    }
                    let mut next = w.clone();
                    let value = w.produced + 1;
                    next.produced += 1;
                    let offset = next.nodes[b].log.leo();
                    next.nodes[b].log.append(role.epoch, value);
                    if !next.writers.contains(&(role.epoch, b as i32)) {
                        next.writers.push((role.epoch, b as i32));
                    }
                    if all {
                        next.waiting.push((b as i32, role.epoch, offset, value));
                    }
                    self.advance_hw(&mut next, b);
                    let acks = if all { "all" } else { "1" };
                    out.push((
                        self.say(|| format!("{b} takes acks={acks} value {value} at {offset}")),
                        next,
                    ));
                }
            }
            // Acknowledge an acks=all produce (as `wait_committed`).
            for (i, &(leader, epoch, offset, value)) in w.waiting.iter().enumerate() {
                if leader != b as i32 || !self.acting_leader(w, b) {
                    continue;
                }
                let role = node.role.as_ref().unwrap();
                if role.epoch == epoch && node.hw > offset && role.isr.len() >= self.bounds.min_isr
                {
                    let mut next = w.clone();
                    next.waiting.remove(i);
                    next.acked.push((offset, value));
                    out.push((
                        self.say(|| format!("{b} acknowledges value {value} at {offset}")),
                        next,
                    ));
                }
            }
            // Learn the metastore's state (a restarting broker serves nothing before it
            // has left the ISRs: its listeners open after that).
            if node.up
                && !node.leaving
                && node
                    .role
                    .as_ref()
                    .is_none_or(|r| r.version < w.meta.version)
            {
                let mut next = w.clone();
                self.apply_meta(&mut next, b);
                out.push((
                    self.say(|| format!("{b} applies state v{}", w.meta.version)),
                    next,
                ));
            }
            // Fetch from the leader it follows.
            if let Some(next) = self.fetch(w, b) {
                out.push(next);
            }
            // Shrink the ISR: a follower that lags or is down.
            if self.acting_leader(w, b) && w.shrinks < self.bounds.shrinks {
                let role = node.role.clone().unwrap();
                for &f in role.isr.iter().filter(|&&f| f != b as i32) {
                    let lags =
                        !w.nodes[f as usize].up || node.progress[f as usize].0 < node.log.leo();
                    if !lags {
                        continue;
                    }
                    let isr: Small<i32> = role.isr.iter().copied().filter(|&m| m != f).collect();
                    let elr =
                        elr_after_isr_change(&role.elr, &role.isr, &isr, None, self.bounds.min_isr)
                            .into();
                    let mut next = w.clone();
                    next.shrinks += 1;
                    let meta = Meta {
                        recovering: still_recovering(&role.recovering, &isr).into(),
                        isr,
                        elr,
                        ..role.clone()
                    };
                    if Self::write_meta(&mut next, meta, role.version) {
                        out.push((self.say(|| format!("{b} drops {f} from the ISR")), next));
                    }
                }
            }
            // Upload below the HW, and trim what was uploaded.
            let diverged = if self.guards.remote_lineage {
                remote_divergence_of(&w.remote, &node.log)
            } else {
                None
            };
            if let (true, Some(from)) = (self.bounds.tiering && self.acting_leader(w, b), diverged)
            {
                let mut next = w.clone();
                next.remote.truncate(from as usize);
                out.push((
                    self.say(|| format!("{b} cuts the remote log at {from}")),
                    next,
                ));
            } else if self.bounds.tiering && self.acting_leader(w, b) {
                let end = w.remote.len() as i64;
                if end < node.hw && node.log.start <= end {
                    let mut next = w.clone();
                    for o in end..node.hw {
                        let e = node.log.at(o).unwrap();
                        next.remote.push(e);
                    }
                    out.push((self.say(|| format!("{b} uploads up to {}", node.hw)), next));
                }
                if node.log.start < end && end <= node.log.leo() {
                    let mut next = w.clone();
                    let log = &mut next.nodes[b].log;
                    log.entries.drain(..(end - log.start) as usize);
                    log.start = end;
                    out.push((
                        self.say(|| format!("{b} trims its local log to {end}")),
                        next,
                    ));
                }
            }
            // Crash.
            if node.up && w.crashes < self.bounds.crashes {
                let mut next = w.clone();
                next.crashes += 1;
                next.nodes[b].up = false;
                next.waiting.retain(|x| x.0 != b as i32);
                out.push((self.say(|| format!("{b} crashes")), next));
            }
            // Restart: the log as it was, or a prefix of it (an unflushed tail lost), or
            // nothing (a new disk).
            if !node.up {
                let mut logs = vec![("intact".to_string(), node.log.clone())];
                if self.bounds.lose_data && !w.lost {
                    for keep in node.log.start..node.log.leo() {
                        let mut log = node.log.clone();
                        log.entries.truncate((keep - log.start) as usize);
                        log.truncate_from_end(keep);
                        logs.push((self.say(|| format!("losing its tail from {keep}")), log));
                    }
                    if node.log.leo() > 0 {
                        let empty = Log {
                            start: 0,
                            entries: Small::new(),
                            epochs: Small::new(),
                        };
                        logs.push(("on an empty disk".to_string(), empty));
                    }
                }
                for (how, log) in logs {
                    let mut next = w.clone();
                    if log != node.log {
                        next.lost = true;
                        self.give_up_lost(&mut next, b, &log);
                    }
                    let m = &mut next.nodes[b];
                    m.up = true;
                    m.incarnation += 1;
                    m.leaving = true;
                    m.hw = log.start;
                    m.log = log;
                    m.role = None;
                    m.progress = smallvec![(-1, -1); n];
                    m.pending.clear();
                    out.push((self.say(|| format!("{b} restarts {how}")), next));
                }
            }
            // Leave the ISRs after a restart (unclean stops only: SIGKILL or power).
            if node.up && node.leaving {
                let state = self.state_of(&w.meta);
                let decided = if self.guards.recovery {
                    let log = &node.log;
                    let position = (last_batch_epoch(&log.epochs, log.leo()), log.leo());
                    after_restart(&state, b as i32, false, position)
                } else {
                    old_after_restart(&state, b as i32)
                };
                let mut next = w.clone();
                next.nodes[b].leaving = false;
                match decided {
                    None => out.push((self.say(|| format!("{b} has no ISR to leave")), next)),
                    Some(s) => {
                        let version = w.meta.version;
                        if Self::write_meta(&mut next, Self::meta_of(&s), version) {
                            out.push((
                                self.say(|| {
                                    format!(
                                        "{b} leaves: isr {:?} elr {:?} leader {}",
                                        s.isr, s.elr, s.leader
                                    )
                                }),
                                next,
                            ));
                        }
                    }
                }
            }
            // A lease runs out: a crashed broker's, or a paused one's.
            if w.leases[b].0 && (!node.up || w.pauses < self.bounds.pauses) {
                let mut next = w.clone();
                next.leases[b].0 = false;
                next.pauses += u8::from(node.up);
                out.push((self.say(|| format!("{b}'s lease expires")), next));
            }
            // Renewal by a running broker (after a lapse it reloads the metadata).
            if node.up && !node.leaving && w.leases[b] != (true, node.incarnation) {
                let mut next = w.clone();
                next.leases[b] = (true, node.incarnation);
                self.apply_meta(&mut next, b);
                out.push((self.say(|| format!("{b} renews its lease")), next));
            }
        }
        // The controller's pass.
        let live = self.live(w);
        let state = self.state_of(&w.meta);
        if let Some(s) = elect(&state, &live, self.rules()) {
            let moved = s.leader != state.leader;
            let old_expired = !(moved && state.leader >= 0 && w.leases[state.leader as usize].0);
            let new_live = !(moved && s.leader >= 0) || live.contains_key(&s.leader);
            if old_expired && new_live {
                let mut next = w.clone();
                if Self::write_meta(&mut next, Self::meta_of(&s), state.version) {
                    out.push((
                        self.say(|| {
                            format!(
                                "controller: leader {} epoch {} isr {:?} elr {:?}",
                                s.leader, s.leader_epoch, s.isr, s.elr
                            )
                        }),
                        next,
                    ));
                }
            }
        }
        for (_, next) in &mut out {
            for b in 0..n {
                if self.acting_leader(next, b) {
                    Self::expose(next, b);
                }
            }
        }
        out
    }

    /// Follower `f` fetches once from the leader it follows.
    fn fetch(&self, w: &World, f: usize) -> Option<(String, World)> {
        let node = &w.nodes[f];
        let role = node.role.as_ref()?;
        if !node.up || role.leader < 0 || role.leader == f as i32 {
            return None;
        }
        let l = role.leader as usize;
        let leader = &w.nodes[l];
        let lrole = leader.role.as_ref()?;
        if !leader.up || lrole.leader != l as i32 || lrole.epoch != role.epoch {
            return None;
        }
        // A leader behind the follower's view reloads before it counts the fetch.
        if self.guards.state_version && !state_known(lrole.version, role.version) {
            return None;
        }
        let fetch_offset = node.log.leo();
        let last_epoch = node.log.latest_epoch();
        let epoch_end = (last_epoch >= 0)
            .then(|| leader.log.epoch_end_offset(last_epoch))
            .flatten();
        let check = if self.guards.divergence_at_log_start || fetch_offset > leader.log.start {
            check_follower_fetch(
                fetch_offset,
                last_epoch,
                leader.log.start,
                leader.log.leo(),
                epoch_end,
            )
        } else if fetch_offset < leader.log.start || fetch_offset > leader.log.leo() {
            FetchCheck::OutOfRange
        } else {
            FetchCheck::Serve
        };
        let mut next = w.clone();
        match check {
            FetchCheck::Diverging(epoch, end) => {
                let m = &mut next.nodes[f];
                let target = truncation_point(end, m.log.epoch_end_offset(epoch));
                m.log.truncate_to(target);
                m.hw = m.hw.min(m.log.leo());
                return Some((self.say(|| format!("{f} truncates to {target}")), next));
            }
            FetchCheck::OutOfRange => {
                if fetch_offset > leader.log.start {
                    return None;
                }
                let start = leader.log.start;
                let m = &mut next.nodes[f];
                m.log.reset_to(start);
                m.hw = start;
                return Some((
                    self.say(|| format!("{f} restarts its log at {start}")),
                    next,
                ));
            }
            FetchCheck::Serve => {}
        }
        // The leader records the follower's progress, moves its HW, and may add it.
        let hw_before = leader.hw;
        let epoch_start = leader
            .log
            .epochs
            .iter()
            .find(|e| e.0 == lrole.epoch)
            .map_or(leader.log.leo(), |e| e.1);
        let (prev_leo, prev_inc) = leader.progress[f];
        let same = prev_inc == node.incarnation;
        let went_back = !same && prev_leo >= 0 && fetch_offset < prev_leo;
        let leo = if same {
            prev_leo.max(fetch_offset)
        } else {
            fetch_offset
        };
        next.nodes[l].progress[f] = (leo, node.incarnation);
        let caught_up = may_join_isr(leo, hw_before, epoch_start);
        self.advance_hw(&mut next, l);
        let lrole = lrole.clone();
        let in_isr = lrole.isr.contains(&(f as i32));
        let mut label = self.say(|| format!("{f} fetches from {l} at {fetch_offset}"));
        let isr_change = if went_back && in_isr {
            Some(
                lrole
                    .isr
                    .iter()
                    .copied()
                    .filter(|&b| b != f as i32)
                    .collect::<Small<_>>(),
            )
        } else if caught_up && !in_isr {
            let mut isr = lrole.isr.clone();
            isr.push(f as i32);
            isr.sort_unstable();
            if !next.nodes[l].pending.contains(&(f as i32)) {
                next.nodes[l].pending.push(f as i32);
            }
            Some(isr)
        } else {
            None
        };
        if let Some(isr) = isr_change
            && self.acting_leader(w, l)
        {
            let lost = went_back.then_some(f as i32);
            let elr: Small<i32> =
                elr_after_isr_change(&lrole.elr, &lrole.isr, &isr, lost, self.bounds.min_isr)
                    .into();
            label += &self.say(|| format!(", ISR {isr:?} written"));
            let meta = Meta {
                recovering: still_recovering(&lrole.recovering, &isr).into(),
                isr,
                elr,
                ..lrole.clone()
            };
            Self::write_meta(&mut next, meta, lrole.version);
        }
        // The follower copies the leader's log and takes its HW.
        let lhw = next.nodes[l].hw;
        let copied: Vec<(i32, u8)> = (fetch_offset..leader.log.leo())
            .map(|o| leader.log.at(o).unwrap())
            .collect();
        let m = &mut next.nodes[f];
        for (epoch, value) in copied {
            m.log.append(epoch, value);
        }
        m.hw = lhw.min(m.log.leo());
        Some((label, next))
    }
}

/// The restart rule before the last-member guard: the ELR always, and the ISR unless
/// it was the only member of both.
fn old_after_restart(state: &PartitionState, broker: i32) -> Option<PartitionState> {
    let mut next = state.clone();
    if state.leader == broker {
        next.leader = -1;
        next.leader_epoch += 1;
    }
    next.elr.retain(|b| *b != broker);
    let others = next.isr.iter().chain(&next.elr).any(|b| *b != broker);
    if others {
        next.isr.retain(|b| *b != broker);
    }
    (next != *state).then_some(next)
}
