//! Lambda entry point of the webhook processor (SQS event source, ReportBatchItemFailures).

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{service_fn, LambdaEvent};
use payonce::adapters::dynamodb::DynamoPaymentStore;
use payonce::adapters::sqs::SqsQueue;
use payonce::service::reconcile_soon::QueuedRequests;
use payonce::service::webhooks::{ProcessorConfig, WebhookProcessor};

/// The request queue's `MaximumMessageSize` (a request is one payment id).
const REQUEST_MAX_BYTES: usize = 1024;

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
                payonce::config::refunds_through_payonce()?
            ),
        ),
        providers,
        ProcessorConfig::from_env()?,
    );
    // A payment the PSP approved that waits for payonce's capture (a PayPal buyer's approval)
    // is handed to reconcile at once through its request queue, when the stack has one.
    let processor = match payonce::env::optional("RECONCILE_REQUEST_QUEUE_URL") {
        Some(queue_url) => {
            processor.with_reconcile_soon(std::sync::Arc::new(QueuedRequests(SqsQueue::new(
                payonce::adapters::sqs::traced_client(&aws),
                queue_url,
                REQUEST_MAX_BYTES,
            ))))
        }
        None => processor,
    };
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
