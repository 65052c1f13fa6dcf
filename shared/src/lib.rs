//! payonce: exactly-once payments on AWS Lambda.
//!
//! - [`idempotency`]: the payment-agnostic idempotency layer any Rust Lambda can wrap its work with.
//! - [`adapters`]: DynamoDB and embedded implementations of the ports.
//! - [`clock`]: time as a port, so tests cross leases and expiries without sleeping.
//! - [`secrets`]: the PSP API and webhook secrets, re-read after a TTL so a rotation needs no
//!   restart.
//! - [`logging`]: the functions' flat JSON logs (request id, trace id, cold start), third-party
//!   crates capped at INFO, tokens never written.
//! - [`metrics`]: business metrics in CloudWatch Embedded Metric Format, one JSON line each.

pub mod adapters;
pub mod clock;
pub mod config;
pub mod domain;
pub mod http;
pub mod idempotency;
pub mod ids;
pub mod logging;
pub mod metrics;
pub mod mutations;
pub mod ports;
pub mod secrets;
pub mod service;
