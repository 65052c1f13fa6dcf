//! The queue harness: one conformance suite runs against moto's SQS and the embedded queue
//! through [`QueueHarness`], each test on a fresh queue and dead-letter queue.

use async_trait::async_trait;
use payonce::adapters::dynamodb::RequestCounter;
use payonce::adapters::memory::MemoryQueue;
use payonce::adapters::sqs::{create_queue_with_dlq, QueuePair, SqsQueue};
use payonce::clock::ManualClock;
use payonce::ports::{QueueReceive, QueueSend, ReceivedMessage};
use std::sync::Arc;
use std::time::Duration;

/// Receives after which a message moves to the dead-letter queue, on every backend.
pub const MAX_RECEIVE_COUNT: u32 = 2;

/// The maximum message size of every test queue: SQS's classic 256 KiB, which moto keeps.
pub const MAX_MESSAGE_BYTES: usize = 262_144;

/// The visibility timeout of tests that wait for messages to reappear: moto runs on real
/// time, so it is kept at SQS's shortest non-zero timeout.
pub const VISIBILITY: Duration = Duration::from_secs(1);

/// How far past a visibility timeout tests move time before expecting redelivery; on moto
/// this is slept, so it covers its whole-second clock without wasting time.
pub const PAST: Duration = Duration::from_millis(250);

/// What the conformance suite needs from a backend besides the ports: the queue, its
/// dead-letter queue, and a way to let time pass.
#[async_trait]
pub trait QueueHarness: Send + Sync + 'static {
    /// The queue type under test.
    type Queue: QueueSend + QueueReceive + 'static;
    /// Backend name, for messages.
    const NAME: &'static str;
    /// The queue under test, redriving to [`QueueHarness::dlq`] after [`MAX_RECEIVE_COUNT`]
    /// receives and refusing messages over [`MAX_MESSAGE_BYTES`].
    fn queue(&self) -> &Self::Queue;
    /// Its dead-letter queue.
    fn dlq(&self) -> &Self::Queue;
    /// Lets `by` pass for the queues (moves the manual clock, or sleeps).
    async fn advance(&self, by: Duration);
    /// Requests sent to the backend so far (always 0 for the embedded queue).
    fn requests(&self) -> u64;
}

/// The embedded queue and its dead-letter queue on a manual clock.
pub struct MemoryQueueHarness {
    queue: MemoryQueue,
    dlq: MemoryQueue,
    clock: Arc<ManualClock>,
}

/// A fresh embedded queue pair.
pub fn memory_queue_harness() -> MemoryQueueHarness {
    let clock = ManualClock::at_system_time();
    let dlq = MemoryQueue::new(clock.clone(), MAX_MESSAGE_BYTES);
    MemoryQueueHarness {
        queue: MemoryQueue::with_dead_letter(
            clock.clone(),
            MAX_MESSAGE_BYTES,
            MAX_RECEIVE_COUNT,
            dlq.clone(),
        ),
        dlq,
        clock,
    }
}

#[async_trait]
impl QueueHarness for MemoryQueueHarness {
    type Queue = MemoryQueue;
    const NAME: &'static str = "embedded";
    fn queue(&self) -> &Self::Queue {
        &self.queue
    }
    fn dlq(&self) -> &Self::Queue {
        &self.dlq
    }
    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
    fn requests(&self) -> u64 {
        0
    }
}

/// The moto endpoint `scripts/test` exported.
pub fn sqs_endpoint() -> String {
    std::env::var("PAYONCE_TEST_SQS_ENDPOINT").unwrap_or_else(|_| {
        panic!("PAYONCE_TEST_SQS_ENDPOINT is not set: run the tests through scripts/test, which starts moto")
    })
}

fn sqs_config(endpoint: &str) -> aws_sdk_sqs::config::Builder {
    aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "payonce-tests",
        ))
        .endpoint_url(endpoint)
}

/// An SQS client for moto, counting its requests into `counter`.
pub fn sqs_client(counter: &RequestCounter) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        sqs_config(&sqs_endpoint())
            .interceptor(counter.clone())
            .build(),
    )
}

/// An SQS client for whatever listens at `endpoint` (tests of an unreachable queue).
pub fn sqs_client_at(endpoint: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(sqs_config(endpoint).build())
}

/// A queue name no other test uses (moto keeps every queue for the whole run).
pub fn unique_queue(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A fresh queue and dead-letter queue in moto, created as the sandbox creates them, for
/// tests that drive SQS themselves.
pub struct SqsHarness {
    /// The client the queues were created with.
    pub client: aws_sdk_sqs::Client,
    /// The queue.
    pub queue_url: String,
    /// Its dead-letter queue.
    pub dlq_url: String,
}

impl SqsHarness {
    /// A pair redriving after [`MAX_RECEIVE_COUNT`] receives, with a default visibility
    /// timeout of [`VISIBILITY`] and a [`MAX_MESSAGE_BYTES`] limit.
    pub async fn new() -> Self {
        Self::with_redrive(MAX_RECEIVE_COUNT, VISIBILITY).await
    }

    /// A pair redriving after `max_receive_count` receives, with a default visibility timeout
    /// of `visibility` and a [`MAX_MESSAGE_BYTES`] limit.
    pub async fn with_redrive(max_receive_count: u32, visibility: Duration) -> Self {
        Self::create(
            sqs_client(&RequestCounter::new()),
            max_receive_count,
            visibility,
        )
        .await
    }

    async fn create(
        client: aws_sdk_sqs::Client,
        max_receive_count: u32,
        visibility: Duration,
    ) -> Self {
        let QueuePair { queue_url, dlq_url } = create_queue_with_dlq(
            &client,
            &unique_queue("queue"),
            max_receive_count,
            visibility,
            MAX_MESSAGE_BYTES,
        )
        .await
        .expect("create the queue pair in moto");
        Self {
            client,
            queue_url,
            dlq_url,
        }
    }
}

/// [`SqsQueue`] adapters over a fresh [`SqsHarness`] pair, counting their requests.
pub struct SqsQueueHarness {
    queue: SqsQueue,
    dlq: SqsQueue,
    /// The queues' URLs and client.
    pub sqs: SqsHarness,
    counter: RequestCounter,
}

/// A new queue pair in moto behind the adapter, redriving after [`MAX_RECEIVE_COUNT`].
pub async fn sqs_queue_harness() -> SqsQueueHarness {
    let counter = RequestCounter::new();
    let sqs = SqsHarness::create(sqs_client(&counter), MAX_RECEIVE_COUNT, VISIBILITY).await;
    // Only the adapter's own requests count, not the set-up.
    counter.reset();
    SqsQueueHarness {
        queue: SqsQueue::new(sqs.client.clone(), sqs.queue_url.clone(), MAX_MESSAGE_BYTES),
        dlq: SqsQueue::new(sqs.client.clone(), sqs.dlq_url.clone(), MAX_MESSAGE_BYTES),
        sqs,
        counter,
    }
}

#[async_trait]
impl QueueHarness for SqsQueueHarness {
    type Queue = SqsQueue;
    const NAME: &'static str = "sqs";
    fn queue(&self) -> &Self::Queue {
        &self.queue
    }
    fn dlq(&self) -> &Self::Queue {
        &self.dlq
    }
    async fn advance(&self, by: Duration) {
        // moto hides messages on the real clock.
        tokio::time::sleep(by).await;
    }
    fn requests(&self) -> u64 {
        self.counter.total()
    }
}

/// The SQS event Lambda's event source mapping delivers to the processor for `messages`.
pub fn sqs_event(messages: &[ReceivedMessage]) -> aws_lambda_events::event::sqs::SqsEvent {
    let records: Vec<_> = messages
        .iter()
        .map(|m| {
            let attributes: serde_json::Map<_, _> = m
                .attributes
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        serde_json::json!({"stringValue": v, "dataType": "String"}),
                    )
                })
                .collect();
            serde_json::json!({"messageId": m.message_id, "receiptHandle": m.receipt_handle, "body": m.body,
                   "messageAttributes": attributes,
                   "attributes": {"ApproximateReceiveCount": m.receive_count.to_string()},
                   "eventSource": "aws:sqs"})
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event")
}
