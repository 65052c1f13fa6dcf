//! Lambda entry point: clients built once, then every request through the layer.

use payonce::adapters::dynamodb::DynamoIdempotencyStore;
use payonce::idempotency::{Idempotency, IdempotencyConfig};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let aws = aws_config::load_from_env().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    // IDEMPOTENCY_TABLE, and IDEMPOTENCY_EXPIRES_AFTER_SECONDS (default 24 h).
    let store = DynamoIdempotencyStore::from_env(client.clone())?;
    let idempotency = Idempotency::new(store, IdempotencyConfig::from_env()?);
    let table = std::env::var("THINGS_TABLE").map_err(|_| "THINGS_TABLE is required")?;
    lambda_http::run(example_http_create_thing::service(
        idempotency,
        client,
        table,
    ))
    .await
}
