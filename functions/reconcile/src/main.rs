//! Lambda entry point of the reconcile job.

use lambda_runtime::{service_fn, LambdaEvent};
use payonce::adapters::dynamodb::DynamoPaymentStore;
use payonce::service::reconcile::{ReconcileConfig, Reconciler};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("reconcile");
    let tables = payonce::config::tables()?;
    let aws = payonce::config::lambda_aws();
    // The PSP named by `PSP` (stripe, omise, 2c2p, square, paypal), from the PSP API secret's fields for it,
    // rebuilt when the secret has rotated (re-read after `SECRETS_TTL_SECONDS`).
    let psp = payonce::config::psp(&aws).await?;
    let client = payonce::adapters::dynamodb::traced_client(&aws);
    let reconciler = Reconciler::new(
        DynamoPaymentStore::new(client, tables).with_late_duplicates(
            payonce::domain::LateDuplicates::for_refunds(payonce::ports::Psp::supports_refunds(
                &psp,
            )),
        ),
        psp,
        ReconcileConfig::from_env()?,
    );
    let reconciler = &reconciler;
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<serde_json::Value>| async move {
            let deadline_ms = i64::try_from(event.context.deadline).ok();
            payonce_reconcile::handler::handle(reconciler, event.payload, deadline_ms)
                .await
                .map_err(lambda_runtime::Error::from)
        },
    ))
    .await
}
