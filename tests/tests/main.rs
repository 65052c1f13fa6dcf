//! The integration test binary: every suite that talks to DynamoDB Local, moto or the
//! embedded adapters. Run through `scripts/test`, which starts the emulators.

mod conformance;
mod contract;
mod idempotency;
mod jobs;
mod observability;
mod payments;
mod psp;
mod queue;
mod refunds;
mod stores;
mod template;
mod webhooks;
