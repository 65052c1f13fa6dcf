//! The webhook functions: `webhook-receiver` (HTTP → queue) and `webhook-processor` (queue → state).

pub mod processor;
pub mod receiver;
