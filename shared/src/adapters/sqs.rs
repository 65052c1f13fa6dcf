//! The SQS adapter: [`QueueSend`] and [`QueueReceive`] over an SQS standard queue, and the
//! creation of a queue with its dead-letter queue for tests, the sandbox and first-run set-up
//! (SAM creates them in AWS).

use crate::ports::{OutgoingMessage, QueueError, QueueReceive, QueueSend, ReceivedMessage};
use async_trait::async_trait;
use aws_sdk_sqs::error::{BuildError, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    Message, MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
};
use aws_sdk_sqs::Client;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The functions' SQS client: `aws`'s settings, with each operation recorded as an X-Ray
/// subsegment when the function is traced (see [`crate::xray`]).
pub fn traced_client(aws: &aws_config::SdkConfig) -> Client {
    let config = aws_sdk_sqs::config::Builder::from(aws)
        .interceptor(crate::xray::XRayInterceptor::new(
            "SQS",
            crate::xray::XRay::from_env(),
        ))
        .build();
    Client::from_conf(config)
}

/// The most messages one `ReceiveMessage` returns (`MaxNumberOfMessages` is 1 to 10).
const MAX_RECEIVE_BATCH: u32 = 10;

/// The longest visibility timeout SQS accepts: 12 hours, in seconds.
const MAX_VISIBILITY_TIMEOUT_S: u64 = 43_200;

/// The longest retention SQS allows: 14 days, in seconds.
const MAX_RETENTION_S: u32 = 1_209_600;

/// The data type of every attribute we send.
const STRING_TYPE: &str = "String";

/// An SQS queue, by URL.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    queue_url: String,
    max_message_bytes: usize,
}

impl SqsQueue {
    /// The queue at `queue_url`; sends over `max_message_bytes` (body plus attributes, as
    /// [`OutgoingMessage::size_bytes`] counts them) are refused without a request. Pass the
    /// queue's `MaximumMessageSize`.
    pub fn new(client: Client, queue_url: impl Into<String>, max_message_bytes: usize) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            max_message_bytes,
        }
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

/// Maps an SDK error to [`QueueError::Unavailable`], keeping it as the source.
fn unavailable<E, R>(operation: &'static str, error: SdkError<E, R>) -> QueueError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    QueueError::Unavailable {
        operation,
        source: Box::new(error),
    }
}

/// A reply SQS should never send (a field it always fills is missing or malformed).
fn malformed(operation: &'static str, what: String) -> QueueError {
    QueueError::Unavailable {
        operation,
        source: what.into(),
    }
}

/// The visibility timeout in whole seconds, as SQS takes it: rounded up, so a message never
/// reappears earlier than asked, and capped at SQS's 12 hours.
fn visibility_seconds(timeout: Duration) -> i32 {
    let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    i32::try_from(seconds.min(MAX_VISIBILITY_TIMEOUT_S)).unwrap_or(i32::MAX)
}

/// Converts a received SQS message to the port's shape.
fn received(message: Message) -> Result<ReceivedMessage, QueueError> {
    const OPERATION: &str = "ReceiveMessage";
    let message_id = message
        .message_id
        .ok_or_else(|| malformed(OPERATION, "a received message has no MessageId".into()))?;
    let receipt_handle = message.receipt_handle.ok_or_else(|| {
        malformed(
            OPERATION,
            format!("message {message_id} came without a ReceiptHandle"),
        )
    })?;
    let receive_count = match message
        .attributes
        .as_ref()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
    {
        Some(raw) => raw.parse::<u32>().map_err(|_| {
            malformed(
                OPERATION,
                format!("message {message_id} has ApproximateReceiveCount {raw:?}"),
            )
        })?,
        None => {
            // We always ask for it; a server that still leaves it out delivered the message
            // at least once, and failing the whole batch would only hide it for nothing.
            tracing::warn!(%message_id, "SQS reported no ApproximateReceiveCount; assuming 1");
            1
        }
    };
    let mut attributes = BTreeMap::new();
    for (name, value) in message.message_attributes.unwrap_or_default() {
        // We only send strings; Number attributes carry a string too, binary ones cannot be
        // represented and are left out.
        match value.string_value {
            Some(text) => {
                attributes.insert(name, text);
            }
            None => {
                tracing::warn!(%message_id, attribute = %name, "skipped a non-string message attribute");
            }
        }
    }
    Ok(ReceivedMessage {
        message_id,
        receipt_handle,
        body: message.body.unwrap_or_default(),
        attributes,
        receive_count,
    })
}

#[async_trait]
impl QueueSend for SqsQueue {
    async fn send(&self, message: &OutgoingMessage) -> Result<String, QueueError> {
        const OPERATION: &str = "SendMessage";
        let size_bytes = message.size_bytes();
        if size_bytes > self.max_message_bytes {
            return Err(QueueError::TooLarge {
                size_bytes,
                limit_bytes: self.max_message_bytes,
            });
        }
        // Refused here, as SQS refuses it (moto is kinder): a character SQS does not accept.
        if let Some(refused) = message.refused_contents() {
            return Err(refused);
        }
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(&message.body);
        for (name, value) in &message.attributes {
            let value = MessageAttributeValue::builder()
                .data_type(STRING_TYPE)
                .string_value(value)
                .build()
                .map_err(|error| QueueError::Unavailable {
                    operation: OPERATION,
                    source: Box::new(error),
                })?;
            request = request.message_attributes(name, value);
        }
        let output = request
            .send()
            .await
            .map_err(|error| match error.as_service_error() {
                Some(
                    aws_sdk_sqs::operation::send_message::SendMessageError::InvalidMessageContents(
                        refused,
                    ),
                ) => QueueError::Refused {
                    reason: refused
                        .message()
                        .unwrap_or("InvalidMessageContents")
                        .to_owned(),
                },
                _ => unavailable(OPERATION, error),
            })?;
        let message_id = output
            .message_id
            .ok_or_else(|| malformed(OPERATION, "SendMessage returned no MessageId".into()))?;
        tracing::debug!(%message_id, size_bytes, "sent a message to SQS");
        Ok(message_id)
    }
}

#[async_trait]
impl QueueReceive for SqsQueue {
    async fn receive(
        &self,
        max: u32,
        visibility_timeout: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        // SQS refuses 0 and anything over 10; asking for none is answered without a request.
        let max = max.min(MAX_RECEIVE_BATCH);
        if max == 0 {
            return Ok(Vec::new());
        }
        let output = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max).unwrap_or(1))
            .visibility_timeout(visibility_seconds(visibility_timeout))
            // Short polling: callers decide how long to wait between empty receives.
            .wait_time_seconds(0)
            .message_attribute_names("All")
            // `message_system_attribute_names`, not the deprecated `attribute_names`: SQS and
            // moto 5 both answer it.
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|error| unavailable("ReceiveMessage", error))?;
        output
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(received)
            .collect()
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|error| unavailable("DeleteMessage", error))?;
        Ok(())
    }

    async fn depth(&self) -> Result<usize, QueueError> {
        const OPERATION: &str = "GetQueueAttributes";
        // Delayed messages are held too; we never delay, but a queue's DelaySeconds could.
        let counted = [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ];
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .set_attribute_names(Some(counted.to_vec()))
            .send()
            .await
            .map_err(|error| unavailable(OPERATION, error))?;
        let attributes = output.attributes.unwrap_or_default();
        let mut depth = 0usize;
        for name in &counted {
            // An attribute left out counts as none (moto omits what it does not track).
            let Some(raw) = attributes.get(name) else {
                continue;
            };
            let count = raw
                .parse::<usize>()
                .map_err(|_| malformed(OPERATION, format!("{name} is {raw:?}")))?;
            depth = depth.saturating_add(count);
        }
        Ok(depth)
    }
}

/// The URLs of a queue and its dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePair {
    /// The queue messages are sent to.
    pub queue_url: String,
    /// Where messages go after `maxReceiveCount` receives without a delete.
    pub dlq_url: String,
}

/// Creates `<name>-dlq`, then `<name>` redriving to it after `max_receive_count` receives,
/// with the given default visibility timeout (whole seconds, rounded up) and maximum message
/// size. Queues that already exist are brought to these attributes, so running it again
/// is harmless.
pub async fn create_queue_with_dlq(
    client: &Client,
    name: &str,
    max_receive_count: u32,
    visibility_timeout: Duration,
    max_message_bytes: usize,
) -> Result<QueuePair, aws_sdk_sqs::Error> {
    let max_size = max_message_bytes.to_string();
    let dlq_url = ensure_queue(
        client,
        &format!("{name}-dlq"),
        HashMap::from([
            // A moved message must fit in the dead-letter queue too.
            (QueueAttributeName::MaximumMessageSize, max_size.clone()),
            // A moved message keeps its original enqueue time, so the DLQ keeps messages as
            // long as SQS allows: they are what an operator investigates.
            (
                QueueAttributeName::MessageRetentionPeriod,
                MAX_RETENTION_S.to_string(),
            ),
        ]),
    )
    .await?;
    let dlq_arn = client
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| {
            BuildError::missing_field("QueueArn", "GetQueueAttributes returned no QueueArn")
        })?;
    let redrive_policy = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": max_receive_count,
    });
    let queue_url = ensure_queue(
        client,
        name,
        HashMap::from([
            (QueueAttributeName::MaximumMessageSize, max_size),
            (
                QueueAttributeName::VisibilityTimeout,
                visibility_seconds(visibility_timeout).to_string(),
            ),
            (
                QueueAttributeName::RedrivePolicy,
                redrive_policy.to_string(),
            ),
        ]),
    )
    .await?;
    tracing::info!(%queue_url, %dlq_url, max_receive_count, "queue and dead-letter queue ready");
    Ok(QueuePair { queue_url, dlq_url })
}

/// Creates the queue with `attributes`, or, when it exists with other attributes, sets them;
/// returns its URL.
async fn ensure_queue(
    client: &Client,
    name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> Result<String, aws_sdk_sqs::Error> {
    // CreateQueue on an existing queue with the same attributes answers its URL; with other
    // attributes it fails with QueueNameExists (code `QueueAlreadyExists` on the wire).
    let created = client
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes.clone()))
        .send()
        .await;
    let exists = match &created {
        Ok(_) => false,
        Err(error) => {
            error
                .as_service_error()
                .is_some_and(|e| e.is_queue_name_exists())
                || matches!(error.code(), Some("QueueAlreadyExists" | "QueueNameExists"))
        }
    };
    if !exists {
        return created?.queue_url.ok_or_else(|| {
            BuildError::missing_field("QueueUrl", "CreateQueue returned no QueueUrl").into()
        });
    }
    let queue_url = client
        .get_queue_url()
        .queue_name(name)
        .send()
        .await?
        .queue_url
        .ok_or_else(|| BuildError::missing_field("QueueUrl", "GetQueueUrl returned no QueueUrl"))?;
    client
        .set_queue_attributes()
        .queue_url(&queue_url)
        .set_attributes(Some(attributes))
        .send()
        .await?;
    tracing::info!(%queue_url, "the queue existed; its attributes were updated");
    Ok(queue_url)
}
