//! Lambda entry point of the webhook processor (SQS event source, ReportBatchItemFailures).

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{service_fn, LambdaEvent};
use payonce::adapters::dynamodb::DynamoPaymentStore;
use payonce::service::webhooks::{ProcessorConfig, WebhookProcessor};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("webhook-processor");
    let tables = payonce::config::tables()?;
    let aws = payonce::config::lambda_aws();
    // The configured PSP's events, as the receiver verified and queued them: read without a
    // secret for Stripe and Omise; 2C2P's are JWTs read only once verified, so it loads the
    // webhook secret (the merchant key), re-read once stale.
    let (providers, scheme) = payonce::config::webhook_parsers(&aws).await?;
    let client = payonce::adapters::dynamodb::traced_client(&aws);
    let processor = WebhookProcessor::new(
        // A late duplicate is refunded, or marked refund-required where the PSP cannot refund.
        DynamoPaymentStore::new(client, tables).with_late_duplicates(
            payonce::domain::LateDuplicates::for_refunds(
                payonce::config::PspKind::from_env()?.refunds_through_payonce(),
            ),
        ),
        providers,
        ProcessorConfig::from_env()?,
    );
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async {
        if let Some(scheme) = &scheme {
            scheme.refresh_if_stale().await;
        }
        Ok::<_, std::convert::Infallible>(
            payonce_webhook::processor::handle(&processor, event.payload).await,
        )
    }))
    .await
}
