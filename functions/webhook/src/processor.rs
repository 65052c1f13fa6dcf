//! The SQS-triggered processor: each message is applied exactly once; the ones that fail are
//! reported back (`ReportBatchItemFailures`) so only they are retried, then dead-lettered.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use payonce::ports::{ChargeStore, InflightScan, RefundStore};
use payonce::service::webhooks::{QueuedEvent, WebhookProcessor, PROVIDER_ATTRIBUTE};

/// Handles one batch.
pub async fn handle<S: ChargeStore + RefundStore + InflightScan>(
    processor: &WebhookProcessor<S>,
    event: SqsEvent,
) -> SqsBatchResponse {
    let events: Vec<QueuedEvent<'_>> = event
        .records
        .iter()
        .map(|record| QueuedEvent {
            message_id: record.message_id.as_deref().unwrap_or(""),
            provider: record
                .message_attributes
                .get(PROVIDER_ATTRIBUTE)
                .and_then(|a| a.string_value.as_deref()),
            body: record.body.as_deref().unwrap_or(""),
        })
        .collect();
    let failed = processor.process_batch(&events).await;
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failed
        .into_iter()
        .map(|item_identifier| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = item_identifier;
            failure
        })
        .collect();
    response
}
