//! Scheduled jobs: reconcile and cleanup, on an injected clock (no sleeps).

mod cleanup;
mod reconcile;
mod schedule;
