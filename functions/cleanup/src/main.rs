//! Lambda entry point of the cleanup job.

use lambda_runtime::{service_fn, LambdaEvent};
use payonce::adapters::dynamodb::DynamoIdempotencyStore;
use payonce::service::cleanup::CleanupConfig;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("cleanup");
    let table = payonce::config::required("IDEMPOTENCY_TABLE")?;
    let config = CleanupConfig::from_env()?;
    let store = DynamoIdempotencyStore::new(
        payonce::adapters::dynamodb::traced_client(&payonce::config::lambda_aws()),
        table,
    );
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| async {
        payonce_cleanup::handler::handle(&store, &config, event.payload).await
    }))
    .await
}
