//! Lambda entry point of the refund function: configuration and clients, built once.

use payonce::adapters::dynamodb::DynamoPaymentStore;
use payonce::service::{OperationConfig, OperationService, RefundConfig, RefundService};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("refund");
    let tables = payonce::config::tables()?;
    let aws = payonce::config::lambda_aws();
    // The PSP named by `PSP` (stripe, omise, 2c2p), from the PSP API secret's fields for it,
    // rebuilt when the secret has rotated (re-read after `SECRETS_TTL_SECONDS`).
    let psp = payonce::config::psp(&aws).await?;
    let store = DynamoPaymentStore::new(payonce::adapters::dynamodb::traced_client(&aws), tables);
    let service = RefundService::new(store.clone(), psp.clone(), RefundConfig::default());
    let operations = OperationService::new(store, psp, OperationConfig::default());
    lambda_http::run(lambda_http::service_fn(|request| async {
        Ok::<_, std::convert::Infallible>(
            payonce_refund::handler::handle(&service, &operations, request).await,
        )
    }))
    .await
}
