//! The webhook queue: messages as sent and as received, and its two ends; and the requests that
//! ask reconcile for one payment.

use async_trait::async_trait;
use std::time::Duration;

/// A message to put on a queue: a body and string attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// The body, sent as is.
    pub body: String,
    /// String message attributes (e.g. `provider`, `event_id`).
    pub attributes: std::collections::BTreeMap<String, String>,
}

impl OutgoingMessage {
    /// The size a queue counts against its limit: body plus attribute names and values.
    pub fn size_bytes(&self) -> usize {
        // SQS also counts each attribute's data type ("String").
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(k, v)| k.len() + v.len() + "String".len())
                .sum::<usize>()
    }

    /// The refusal a queue answers for a character SQS does not accept in its body or its
    /// attribute values ([`queue_accepts`]), if any.
    pub fn refused_contents(&self) -> Option<QueueError> {
        let acceptable =
            queue_accepts(&self.body) && self.attributes.values().all(|value| queue_accepts(value));
        (!acceptable).then(|| QueueError::Refused {
            reason: "InvalidMessageContents: a character SQS does not accept".into(),
        })
    }
}

/// A message received from a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The queue's id of the message.
    pub message_id: String,
    /// The handle to delete this delivery with.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// String message attributes.
    pub attributes: std::collections::BTreeMap<String, String>,
    /// How many times the message has been received, this delivery included.
    pub receive_count: u32,
}

/// Errors of a queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Body and attributes exceed the queue's maximum message size; nothing was sent.
    #[error("the message is {size_bytes} bytes, over the queue's {limit_bytes}-byte limit")]
    TooLarge {
        /// The message's size.
        size_bytes: usize,
        /// The queue's limit.
        limit_bytes: usize,
    },
    /// The queue refused the message's contents (SQS `InvalidMessageContents`: a character
    /// outside those it accepts); nothing was sent. Sending it again as it is never works.
    #[error("the queue refused the message's contents: {reason}")]
    Refused {
        /// What the queue said.
        reason: String,
    },
    /// The queue service failed or could not be reached.
    #[error("the queue failed during {operation}")]
    Unavailable {
        /// The queue operation.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Whether SQS accepts `text` as a message body: only `#x9`, `#xA`, `#xD`, `#x20` to `#xD7FF`,
/// `#xE000` to `#xFFFD` and `#x10000` to `#x10FFFF` (the SendMessage reference); anything else
/// is refused with `InvalidMessageContents`.
pub fn queue_accepts(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
    })
}

/// Asks reconcile to settle one payment now rather than at its next scheduled run. The webhook
/// processor, which never calls the PSP, asks when a PSP says a payment waits for payonce's
/// second step (a buyer approved at PayPal; a Square payment approved whose completion had no
/// answer). A request is a hint: lost, the scheduled run still settles the payment.
#[async_trait]
pub trait ReconcileSoon: Send + Sync {
    /// Asks for `payment_id`.
    async fn reconcile_soon(&self, payment_id: &str) -> Result<(), QueueError>;
}

/// Puts messages on a queue (the webhook receiver).
#[async_trait]
pub trait QueueSend: Send + Sync {
    /// Sends one message; returns the queue's message id.
    async fn send(&self, message: &OutgoingMessage) -> Result<String, QueueError>;
}

/// Takes messages off a queue (the local sandbox's poller and the tests; in AWS, Lambda's
/// event source mapping does this for the processor).
#[async_trait]
pub trait QueueReceive: Send + Sync {
    /// Receives up to `max` visible messages and hides them for `visibility_timeout`. A message
    /// received more than the queue's `maxReceiveCount` times moves to its dead-letter queue instead.
    async fn receive(
        &self,
        max: u32,
        visibility_timeout: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError>;
    /// Deletes a received message (its processing succeeded).
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError>;
    /// How many messages the queue holds, visible or not (approximate on SQS).
    async fn depth(&self) -> Result<usize, QueueError>;
}
