#![deny(missing_docs)]
//! payonce: exactly-once payments on AWS Lambda, and the idempotency layer they are built on.
//!
//! - [`idempotency`]: the payment-agnostic idempotency layer any Rust Lambda can wrap its work
//!   with: [`Idempotency::run`](idempotency::Idempotency::run), the `lambda_http` layer
//!   (`IdempotencyLayer`, feature `http`) and the event wrapper (`IdempotentEvents`, feature
//!   `runtime`). The guide `docs/guide.md` adds it to a function in five minutes.
//! - [`adapters`]: DynamoDB and embedded implementations of the ports.
//! - [`clock`]: time as a port, so tests cross leases and expiries without sleeping.
//! - [`xray`]: an X-Ray subsegment for each DynamoDB and PSP call.
//! - `secrets` (feature `psp`): the PSP API and webhook secrets, re-read after a TTL so a
//!   rotation needs no restart.
//! - `logging` (feature `runtime`): the functions' flat JSON logs (request id, trace id, cold
//!   start), third-party crates capped at INFO, tokens never written.
//! - `metrics` (feature `payments`): business metrics in CloudWatch Embedded Metric Format.
//! - `domain`, `ports`, `service`, `http`, `config` (feature `payments`): the payment product.
//!
//! # Cargo features
//!
//! The idempotency core (keys, fingerprints, records, [`idempotency::Idempotency::run`] and the
//! embedded store) is always built. Each feature adds one integration, so a function links only
//! what it uses:
//!
//! | feature | adds | links |
//! |---|---|---|
//! | `dynamodb` (default) | the DynamoDB idempotency store, a Lambda's AWS configuration (`config::lambda_aws`) | `aws-sdk-dynamodb`, `aws-config`, `aws-types` |
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
#[cfg(feature = "payments")]
pub mod alarms;
pub mod clock;
pub mod config;
#[cfg(feature = "payments")]
pub mod domain;
pub mod env;
#[cfg(feature = "http")]
pub mod http;
pub mod idempotency;
pub mod ids;
#[cfg(test)]
mod layering;
#[cfg(feature = "runtime")]
pub mod logging;
#[cfg(feature = "payments")]
pub mod metrics;
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

/// `error` and each of its sources, on one line (`outer: cause: root cause`): how an error is
/// logged or reported to the Lambda runtime.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    chain
}
