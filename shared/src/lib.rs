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
//! - [`xray`]: an X-Ray subsegment for each DynamoDB and PSP call.
//!
//! # Cargo features
//!
//! The idempotency core (keys, fingerprints, records, [`idempotency::Idempotency::run`] and the
//! embedded store) is always built. Each feature adds one integration, so a function links only
//! what it uses:
//!
//! | feature | adds | links |
//! |---|---|---|
//! | `dynamodb` (default) | the DynamoDB idempotency store | `aws-sdk-dynamodb`, `aws-config` |
//! | `runtime` | the event-handler wrapper, the functions' JSON logs | `lambda_runtime` |
//! | `http` | the `lambda_http` layer, problem+json, request helpers | `lambda_http` |
//! | `payments` | orders, charges, refunds, webhooks and jobs (ports, services, embedded adapters) | — |
//! | `psp` | the Stripe, Omise and 2C2P clients and webhook schemes, Secrets Manager | `reqwest`, `aws-sdk-secretsmanager` |
//! | `sqs` | the SQS queue adapter | `aws-sdk-sqs` |
//! | `testkit` | the store conformance suite, for another backend | — |
//! | `faults` | fault hooks for tests and the simulation; never in a Lambda | — |
//!
//! `cargo build -p payonce --no-default-features --features dynamodb,http` is idempotency for an
//! HTTP function, with no PSP client, queue or Secrets Manager (`scripts/check-features`).

pub mod adapters;
pub mod clock;
pub mod config;
#[cfg(feature = "payments")]
pub mod domain;
#[cfg(feature = "http")]
pub mod http;
pub mod idempotency;
pub mod ids;
#[cfg(feature = "runtime")]
pub mod logging;
#[cfg(feature = "payments")]
pub mod metrics;
#[cfg(feature = "payments")]
pub mod mutations;
#[cfg(feature = "payments")]
pub mod ports;
#[cfg(feature = "psp")]
pub mod secrets;
#[cfg(feature = "payments")]
pub mod service;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod xray;
