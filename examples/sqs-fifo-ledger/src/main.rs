//! Lambda entry point (SQS FIFO event source with `ReportBatchItemFailures`).

use lambda_runtime::{service_fn, LambdaEvent};
use payonce::adapters::dynamodb::DynamoIdempotencyStore;
use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotentEvents};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let aws = aws_config::load_from_env().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    let store = DynamoIdempotencyStore::from_env(client.clone())?;
    let events = IdempotentEvents::new(
        Idempotency::new(store, IdempotencyConfig::from_env()?),
        example_sqs_fifo_ledger::SCOPE,
        example_sqs_fifo_ledger::EVENT_KEY,
    );
    let table = std::env::var("ACCOUNTS_TABLE").map_err(|_| "ACCOUNTS_TABLE is required")?;
    let (events, client, table) = (&events, &client, table.as_str());
    lambda_runtime::run(service_fn(|event: LambdaEvent<_>| async move {
        example_sqs_fifo_ledger::handle(events, client, table, event).await
    }))
    .await
}
