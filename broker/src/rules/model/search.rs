//! The exhaustive search: breadth first over distinct worlds.

use std::collections::{HashMap, VecDeque};

use super::{Bounds, Guards, Model, Outcome, World};

/// Explores every world reachable within `bounds`, breadth first, up to `max_states`
/// (a check that reaches it fails: the bounds are too large to be exhaustive).
pub(in crate::rules) fn check(guards: Guards, bounds: Bounds, max_states: usize) -> Outcome {
    let model = Model { guards, bounds };
    let start = model.initial();
    // Each world's index; each index's parent and the step from it.
    let mut seen: HashMap<World, usize> = HashMap::new();
    let mut steps: Vec<Option<(usize, String)>> = vec![None];
    let mut queue = VecDeque::new();
    seen.insert(start.clone(), 0);
    queue.push_back((start, 0));
    while let Some((w, at)) = queue.pop_front() {
        if let Some(broken) = model.check(&w) {
            let mut trace = Vec::new();
            let mut i = at;
            while let Some((prev, label)) = &steps[i] {
                trace.push(label.clone());
                i = *prev;
            }
            trace.reverse();
            return Outcome {
                states: seen.len(),
                violation: Some((broken, trace)),
            };
        }
        for (label, next) in model.successors(&w) {
            if seen.contains_key(&next) {
                continue;
            }
            let i = steps.len();
            steps.push(Some((at, label)));
            seen.insert(next.clone(), i);
            assert!(
                seen.len() <= max_states,
                "more than {max_states} states: the bounds are too large"
            );
            queue.push_back((next, i));
        }
    }
    Outcome {
        states: seen.len(),
        violation: None,
    }
}
