//! Lambda entry point of the webhook receiver.

use payonce::adapters::sqs::SqsQueue;
use payonce::clock::system_clock;
use payonce::service::webhooks::{WebhookReceiver, MAX_WEBHOOK_BYTES};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    payonce::config::init_lambda_tracing();
    payonce::metrics::init("webhook-receiver");
    let aws = payonce::config::lambda_aws();
    // Only the configured PSP's scheme (`PSP`): webhooks for another provider are answered 404.
    // It verifies with the webhook secret alone (never the PSP API secret), re-read once stale.
    let scheme = payonce::config::webhook_scheme(&aws).await?;
    let queue_url = payonce::config::required("WEBHOOK_QUEUE_URL")?;
    let sqs = payonce::adapters::sqs::traced_client(&aws);
    let receiver = WebhookReceiver::new(
        scheme.providers(),
        SqsQueue::new(sqs, queue_url, MAX_WEBHOOK_BYTES),
        system_clock(),
    );
    lambda_http::run(lambda_http::service_fn(|request| async {
        scheme.refresh_if_stale().await;
        Ok::<_, std::convert::Infallible>(
            payonce_webhook::receiver::handle(&receiver, request).await,
        )
    }))
    .await
}
