//! Lambda entry point of the orders function: configuration and clients, built once.

use payonce::adapters::dynamodb::{DynamoIdempotencyStore, DynamoPaymentStore};
use payonce::idempotency::{Idempotency, IdempotencyConfig};
use payonce::service::OrderService;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("orders");
    let tables = payonce::config::tables()?;
    let client = payonce::adapters::dynamodb::traced_client(&payonce::config::lambda_aws());
    let idempotency = Idempotency::new(
        DynamoIdempotencyStore::new(client.clone(), &tables.idempotency),
        IdempotencyConfig::default(),
    );
    // Orders are checked against the charge limits of the PSP that will charge them.
    let psp = payonce::config::PspKind::from_env()?;
    let service =
        OrderService::new(DynamoPaymentStore::new(client, tables), idempotency).for_psp(psp);
    lambda_http::run(lambda_http::service_fn(|request| async {
        Ok::<_, std::convert::Infallible>(payonce_orders::handler::handle(&service, request).await)
    }))
    .await
}
