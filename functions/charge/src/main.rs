//! Lambda entry point of the charge function: configuration and clients, built once.

use payonce::adapters::dynamodb::DynamoPaymentStore;
use payonce::service::limits::{AttemptLimiter, AttemptLimits};
use payonce::service::{ChargeConfig, ChargeService};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("charge");
    let tables = payonce::config::tables()?;
    let aws = payonce::config::lambda_aws();
    // The PSP named by `PSP` (stripe, omise, 2c2p), from the PSP API secret's fields for it,
    // rebuilt when the secret has rotated (re-read after `SECRETS_TTL_SECONDS`).
    let psp = payonce::config::psp(&aws).await?;
    let client = payonce::adapters::dynamodb::traced_client(&aws);
    // Card testing: new attempts per user and per order are counted as each begins.
    let limiter = AttemptLimiter::new(AttemptLimits::from_env()?);
    // A late duplicate is refunded, or marked refund-required where the PSP cannot refund.
    let store = DynamoPaymentStore::new(client, tables).with_late_duplicates(
        payonce::domain::LateDuplicates::for_refunds(payonce::ports::Psp::supports_refunds(&psp)),
    );
    // A `return_url` must be on one of the checkout origins (the API's CORS list).
    let config = ChargeConfig {
        checkout_origins: payonce::config::checkout_origins()?,
        ..ChargeConfig::default()
    };
    let service = ChargeService::new(store, psp, config).with_attempt_limits(limiter);
    lambda_http::run(lambda_http::service_fn(|request| async {
        Ok::<_, std::convert::Infallible>(payonce_charge::handler::handle(&service, request).await)
    }))
    .await
}
