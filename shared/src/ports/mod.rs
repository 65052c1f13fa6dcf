//! Ports: the traits handlers depend on, split by capability so each handler takes only
//! what it needs (mirroring its IAM policy). Adapters implement them.
//!
//! One file per family: [`store`] (orders, charges, refunds, attempt counters), [`psp`],
//! [`queue`], [`webhook`] and [`jobs`]; every item is re-exported here, at the path callers use.

pub mod jobs;
pub mod psp;
pub mod queue;
pub mod store;
pub mod webhook;

pub use jobs::{ExpiredSweep, InflightScan};
pub use psp::*;
pub use queue::*;
pub use store::*;
pub use webhook::*;
