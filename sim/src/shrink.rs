//! Shrinking a failing schedule: fewer shoppers and fewer fault kinds, as long as it still fails.

use crate::run::run;
use crate::world::Schedule;
use payonce::mutations::Mutation;

/// The smallest schedule found that still breaks an invariant, with its violations.
pub fn shrink(failing: &Schedule, mutations: &[Mutation]) -> (Schedule, Vec<String>) {
    let mut best = failing.clone();
    let mut violations = run(&best, mutations).violations;
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
    }
    // Then every fault kind the failure does not need.
    for &kind in &failing.faults {
        let mut candidate = best.clone();
        candidate.faults.remove(&kind);
        let outcome = run(&candidate, mutations);
        if !outcome.violations.is_empty() {
            best = candidate;
            violations = outcome.violations;
        }
    }
    (best, violations)
}
