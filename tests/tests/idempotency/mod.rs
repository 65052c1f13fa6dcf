//! The idempotency layer: one conformance suite over both stores, concurrency storms and
//! request budgets against DynamoDB Local.

mod budget;
mod concurrency;
mod conformance;
mod layer;
mod promises;
