//! What the conformance cases share: webhook deliveries as a PSP sends them (headers and raw
//! body), the real receiver in front of a fresh SQS queue on moto, the processor Lambda handler
//! draining it, and a loopback endpoint the fake PSP delivers its own webhooks to.

use lambda_http::Request;
use payonce::adapters::sqs::SqsQueue;
use payonce::ports::{QueueReceive, ReceivedMessage};
use payonce::service::webhooks::WebhookReceiver;
use payonce_fake_psp::{sign_square_webhook, DEFAULT_SQUARE_SIGNATURE_KEY};
use payonce_tests::queue::sqs_event;
use payonce_tests::queue::SqsHarness;
use payonce_tests::stack::{api_event, PaymentStack, Reply, SQUARE_NOTIFICATION_URL};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One webhook delivery: the headers that carry its signature, and the raw body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Header names (lowercase) and values.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: String,
}

/// A forged or damaged delivery, and how the receiver must refuse it.
#[derive(Debug, Clone)]
pub struct Attack {
    /// What it tries, for messages.
    pub name: &'static str,
    /// The delivery.
    pub delivery: Delivery,
    /// The expected status.
    pub status: u16,
    /// The expected problem type.
    pub problem: &'static str,
}

impl Attack {
    /// A 401 `webhook-signature-invalid` refusal (the header parses, no signature verifies).
    pub fn invalid(name: &'static str, delivery: Delivery) -> Self {
        Self {
            name,
            delivery,
            status: 401,
            problem: "/problems/webhook-signature-invalid",
        }
    }

    /// A 400 `webhook-signature-missing` refusal (no signature, or one that does not parse).
    pub fn missing(name: &'static str, delivery: Delivery) -> Self {
        Self {
            name,
            delivery,
            status: 400,
            problem: "/problems/webhook-signature-missing",
        }
    }
}

/// POST /webhooks/{provider} carrying `delivery`, as API Gateway hands it to the receiver.
pub fn webhook_request(provider: &str, delivery: &Delivery) -> Request {
    let headers: Vec<(&str, &str)> = delivery
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    api_event(
        "POST",
        &format!("/webhooks/{provider}"),
        None,
        &headers,
        &delivery.body,
    )
}

/// The real receiver (the stack's verifying providers) in front of a fresh queue on moto.
pub struct Pipeline {
    /// The queue the receiver writes to.
    pub queue: SqsQueue,
    /// The receiver.
    pub receiver: Arc<WebhookReceiver<SqsQueue>>,
    _sqs: SqsHarness,
}

/// How long a received message stays hidden: longer than any case, so nothing is redelivered.
const VISIBILITY: Duration = Duration::from_secs(30);

impl Pipeline {
    /// A fresh queue (and dead-letter queue) with the stack's receiver in front of it.
    pub async fn new(stack: &PaymentStack) -> Self {
        let sqs = SqsHarness::with_redrive(5, VISIBILITY).await;
        let queue = SqsQueue::new(sqs.client.clone(), sqs.queue_url.clone(), 262_144);
        Self {
            receiver: Arc::new(stack.receiver(queue.clone())),
            queue,
            _sqs: sqs,
        }
    }

    /// Delivers to the real receiver Lambda handler under `provider`.
    pub async fn post(&self, provider: &str, delivery: &Delivery) -> Reply {
        post(&self.receiver, provider, delivery).await
    }

    /// One poll of the event source mapping: receives up to ten messages, hands them to the
    /// processor Lambda handler, deletes the ones it did not report as failed; returns the
    /// messages received. A case whose event fails to apply fails here.
    pub async fn poll(&self, stack: &PaymentStack) -> Vec<ReceivedMessage> {
        let messages = self
            .queue
            .receive(10, VISIBILITY)
            .await
            .expect("receive from moto");
        if messages.is_empty() {
            return messages;
        }
        let response =
            payonce_webhook::processor::handle(&stack.processor, sqs_event(&messages)).await;
        let failed: Vec<String> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        assert!(failed.is_empty(), "the processor failed {failed:?}");
        for message in &messages {
            self.queue
                .delete(&message.receipt_handle)
                .await
                .expect("delete from moto");
        }
        messages
    }

    /// Polls until `count` messages were processed (waiting up to 15 s for them to arrive);
    /// returns them.
    pub async fn drain(&self, stack: &PaymentStack, count: usize) -> Vec<ReceivedMessage> {
        let mut processed = Vec::new();
        for _ in 0..300 {
            processed.extend(self.poll(stack).await);
            if processed.len() >= count {
                return processed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{} of {count} messages processed; queue depth {}",
            processed.len(),
            self.depth().await
        )
    }

    /// Messages in the queue (visible or not).
    pub async fn depth(&self) -> usize {
        self.queue.depth().await.expect("queue depth")
    }
}

/// Delivers to the real receiver Lambda handler under `provider`.
pub async fn post(
    receiver: &WebhookReceiver<SqsQueue>,
    provider: &str,
    delivery: &Delivery,
) -> Reply {
    Reply::from(
        payonce_webhook::receiver::handle(receiver, webhook_request(provider, delivery)).await,
    )
}

/// A loopback endpoint at `/webhooks/{provider}` that keeps every delivery the fake PSP makes,
/// headers and raw body, and either answers 200 (to hand them to a case as it chooses) or
/// forwards them to a receiver (as API Gateway would) and answers what it answers.
///
/// Square signs over the notification URL it posts to, and the fake posts here, while the
/// stack's receiver verifies against [`SQUARE_NOTIFICATION_URL`]. So a Square delivery's
/// signature is checked here over this endpoint's own URL, then the delivery is signed over
/// `SQUARE_NOTIFICATION_URL`, as Square would sign it if subscribed there. A delivery the fake
/// signed wrongly is kept as it came, and the receiver refuses it.
pub struct WebhookEndpoint {
    url: String,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookEndpoint {
    /// Starts the endpoint for `provider` and points the stack's fake PSP at it.
    pub async fn start(
        stack: &PaymentStack,
        forward_to: Option<Arc<WebhookReceiver<SqsQueue>>>,
    ) -> Self {
        let provider = stack.webhook_provider;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!(
            "http://{}/webhooks/{provider}",
            listener.local_addr().expect("local address")
        );
        let deliveries: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let kept = deliveries.clone();
        let own_url = url.clone();
        let app = axum::Router::new().route(
            &format!("/webhooks/{provider}"),
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (kept, forward_to) = (kept.clone(), forward_to.clone());
                    let own_url = own_url.clone();
                    async move {
                        let mut delivery = Delivery {
                            headers: headers
                                .iter()
                                .filter(|(name, _)| {
                                    !matches!(
                                        name.as_str(),
                                        "host" | "content-length" | "content-type" | "accept"
                                    )
                                })
                                .map(|(name, value)| {
                                    (
                                        name.as_str().to_owned(),
                                        value.to_str().unwrap_or("").to_owned(),
                                    )
                                })
                                .collect(),
                            body: String::from_utf8_lossy(&body).into_owned(),
                        };
                        if provider == "square" {
                            resign_square(&mut delivery, &own_url);
                        }
                        kept.lock().expect("lock").push(delivery.clone());
                        let status = match forward_to {
                            Some(receiver) => post(&receiver, provider, &delivery).await.status,
                            None => 200,
                        };
                        axum::http::StatusCode::from_u16(status)
                            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
                    }
                },
            ),
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        stack.psp.set_webhook_url(Some(url.clone()));
        Self {
            url,
            deliveries,
            server,
        }
    }

    /// Every delivery so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().expect("lock").clone()
    }

    /// Waits (up to 15 s) for a delivery that the stack's scheme reads as settling
    /// `payment_id` as `approval` says the PSP approves (succeeded, or on Square authorized);
    /// returns it.
    pub async fn wait_for_approval(
        &self,
        stack: &PaymentStack,
        payment_id: &str,
        approval: fn(&payonce::domain::Settlement) -> bool,
    ) -> Delivery {
        let scheme = stack
            .providers
            .get(stack.webhook_provider)
            .expect("the face's scheme");
        for _ in 0..300 {
            let found = self.deliveries().into_iter().find(|delivery| {
                scheme.parse(delivery.body.as_bytes()).is_ok_and(|event| {
                    event.payment_id.as_deref() == Some(payment_id)
                        && event.settlement.as_ref().is_some_and(approval)
                })
            });
            if let Some(delivery) = found {
                return delivery;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "no approval webhook for {payment_id} at {}; received {:#?}",
            self.url,
            self.deliveries()
        )
    }
}

/// Re-signs a Square `delivery` the fake signed over `own_url` (the URL it posted to), over
/// [`SQUARE_NOTIFICATION_URL`]. A delivery whose signature does not verify over `own_url` is left
/// as it came.
fn resign_square(delivery: &mut Delivery, own_url: &str) {
    let body = delivery.body.as_bytes();
    let expected = sign_square_webhook(DEFAULT_SQUARE_SIGNATURE_KEY, own_url, body);
    let resigned = sign_square_webhook(DEFAULT_SQUARE_SIGNATURE_KEY, SQUARE_NOTIFICATION_URL, body);
    for (name, value) in &mut delivery.headers {
        if name == "x-square-hmacsha256-signature" && *value == expected {
            value.clone_from(&resigned);
        }
    }
}

impl Drop for WebhookEndpoint {
    fn drop(&mut self) {
        self.server.abort();
    }
}
