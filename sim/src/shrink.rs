//! Shrinking a failing schedule: fewer shoppers and fewer fault kinds, as long as it still fails.
//!
//! A fault kind's draws are made whatever its rate (see [`crate::world::World::strikes`]), so a
//! schedule without a kind replays every other draw as before: removing kinds the failure does
//! not need keeps its story. Passes repeat until nothing more can go.

use crate::run::run;
use crate::world::Schedule;
use payonce::mutations::Mutation;

/// The smallest schedule found that still breaks an invariant, with its violations.
pub fn shrink(failing: &Schedule, mutations: &[Mutation]) -> (Schedule, Vec<String>) {
    let mut best = failing.clone();
    let mut violations = run(&best, mutations).violations;
    loop {
        let mut smaller = false;
        // Fewer shoppers first: a smaller world is the easier story to read.
        while best.clients > 1 {
            let candidate = Schedule {
                clients: best.clients - 1,
                ..best.clone()
            };
            let outcome = run(&candidate, mutations);
            if outcome.violations.is_empty() {
                break;
            }
            best = candidate;
            violations = outcome.violations;
            smaller = true;
        }
        // Then every fault kind the failure does not need.
        for kind in best.faults.clone() {
            let mut candidate = best.clone();
            candidate.faults.remove(&kind);
            let outcome = run(&candidate, mutations);
            if !outcome.violations.is_empty() {
                best = candidate;
                violations = outcome.violations;
                smaller = true;
            }
        }
        if !smaller {
            return (best, violations);
        }
    }
}
