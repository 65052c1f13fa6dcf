//! The embedded queue: a mutex-guarded list with SQS's standard-queue semantics (visibility
//! timeouts, receive counts, redrive to a dead-letter queue, size limit), on an injected clock
//! so tests cross visibility timeouts without sleeping.

use crate::clock::{duration_ms, SharedClock};
use crate::ports::{OutgoingMessage, QueueError, QueueReceive, QueueSend, ReceivedMessage};
use async_trait::async_trait;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The most messages one receive returns, as on SQS (`MaxNumberOfMessages` is 1 to 10).
const MAX_RECEIVE_BATCH: u32 = 10;

/// In-memory queue implementing [`QueueSend`] and [`QueueReceive`] like an SQS standard queue.
///
/// - A received message is hidden for the visibility timeout given to `receive` (measured on
///   the injected clock, to the millisecond; SQS rounds to whole seconds) and visible again
///   after it unless deleted.
/// - Each receive counts towards the message's `receive_count` and issues a fresh receipt
///   handle; only the latest handle deletes. Deleting with any other handle (stale, already
///   deleted, or unknown) succeeds without deleting anything, as SQS documents for stale
///   handles, so a processor that lost its delivery to a redelivery cannot remove the message
///   from under the new one.
/// - With a dead-letter queue ([`MemoryQueue::with_dead_letter`]), a message already received
///   `max_receive_count` times moves there, keeping its id, body, attributes and count,
///   instead of being received again.
/// - Messages are offered oldest first (SQS standard queues only approximate this).
///
/// Clones share the same messages.
#[derive(Debug, Clone)]
pub struct MemoryQueue {
    messages: Arc<Mutex<VecDeque<Stored>>>,
    clock: SharedClock,
    max_message_bytes: usize,
    redrive: Option<Arc<Redrive>>,
}

/// Where and when messages move to a dead-letter queue.
#[derive(Debug)]
struct Redrive {
    max_receive_count: u32,
    dlq: MemoryQueue,
}

/// A message as the queue holds it.
#[derive(Debug, Clone)]
struct Stored {
    message_id: String,
    body: String,
    attributes: BTreeMap<String, String>,
    receive_count: u32,
    /// Epoch ms from which the message may be received (again).
    visible_from_ms: i64,
    /// The handle of the latest receive, the only one that deletes.
    receipt_handle: Option<String>,
}

impl MemoryQueue {
    /// An empty queue without a dead-letter queue (messages are redelivered forever),
    /// reading time from `clock` and refusing messages over `max_message_bytes`.
    pub fn new(clock: SharedClock, max_message_bytes: usize) -> Self {
        Self {
            messages: Arc::default(),
            clock,
            max_message_bytes,
            redrive: None,
        }
    }

    /// An empty queue whose messages move to `dlq` when received again after
    /// `max_receive_count` receives (SQS's `RedrivePolicy`).
    pub fn with_dead_letter(
        clock: SharedClock,
        max_message_bytes: usize,
        max_receive_count: u32,
        dlq: MemoryQueue,
    ) -> Self {
        Self {
            redrive: Some(Arc::new(Redrive {
                max_receive_count,
                dlq,
            })),
            ..Self::new(clock, max_message_bytes)
        }
    }

    /// Messages held, visible or not.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the queue holds no message at all.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The bodies of the messages held, visible or not, oldest first; nothing is received.
    pub fn bodies(&self) -> Vec<String> {
        self.lock().iter().map(|m| m.body.clone()).collect()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Stored>> {
        // Every operation replaces whole entries under the lock, so a panic while holding it
        // cannot leave a message half-updated and a poisoned queue is still consistent.
        self.messages
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes in a message moved here from a source queue: visible at once, as it was.
    fn enqueue_moved(&self, mut message: Stored) {
        message.visible_from_ms = self.clock.now_ms();
        message.receipt_handle = None;
        self.lock().push_back(message);
    }
}

#[async_trait]
impl QueueSend for MemoryQueue {
    async fn send(&self, message: &OutgoingMessage) -> Result<String, QueueError> {
        let size_bytes = message.size_bytes();
        if size_bytes > self.max_message_bytes {
            return Err(QueueError::TooLarge {
                size_bytes,
                limit_bytes: self.max_message_bytes,
            });
        }
        // As SQS: a character it does not accept refuses the whole message.
        if let Some(refused) = message.refused_contents() {
            return Err(refused);
        }
        let message_id = crate::ids::new_uuid().to_string();
        self.lock().push_back(Stored {
            message_id: message_id.clone(),
            body: message.body.clone(),
            attributes: message.attributes.clone(),
            receive_count: 0,
            visible_from_ms: self.clock.now_ms(),
            receipt_handle: None,
        });
        tracing::debug!(%message_id, size_bytes, "queued a message");
        Ok(message_id)
    }
}

#[async_trait]
impl QueueReceive for MemoryQueue {
    async fn receive(
        &self,
        max: u32,
        visibility_timeout: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let max = usize::try_from(max.min(MAX_RECEIVE_BATCH)).unwrap_or(0);
        let now_ms = self.clock.now_ms();
        let hidden_until_ms = now_ms.saturating_add(duration_ms(visibility_timeout));
        let mut received = Vec::new();
        let mut dead = Vec::new();
        {
            let mut messages = self.lock();
            let mut index = 0;
            while index < messages.len() && received.len() < max {
                let message = &mut messages[index];
                if message.visible_from_ms > now_ms {
                    index += 1;
                    continue;
                }
                let exhausted = self
                    .redrive
                    .as_ref()
                    .is_some_and(|r| message.receive_count >= r.max_receive_count);
                if exhausted {
                    // SQS moves the message when a receive would exceed maxReceiveCount, so
                    // this delivery does not happen and the scan goes on.
                    if let Some(moved) = messages.remove(index) {
                        dead.push(moved);
                    }
                    continue;
                }
                message.receive_count = message.receive_count.saturating_add(1);
                message.visible_from_ms = hidden_until_ms;
                let handle = crate::ids::new_uuid().to_string();
                message.receipt_handle = Some(handle.clone());
                received.push(ReceivedMessage {
                    message_id: message.message_id.clone(),
                    receipt_handle: handle,
                    body: message.body.clone(),
                    attributes: message.attributes.clone(),
                    receive_count: message.receive_count,
                });
                index += 1;
            }
        }
        // Moved after releasing this queue's lock, so the two locks are never held together
        // (even if a queue were, by mistake, its own dead-letter queue).
        if let Some(redrive) = &self.redrive {
            for message in dead {
                tracing::warn!(
                    message_id = %message.message_id,
                    receive_count = message.receive_count,
                    "moved a message to the dead-letter queue"
                );
                redrive.dlq.enqueue_moved(message);
            }
        }
        Ok(received)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut messages = self.lock();
        let position = messages
            .iter()
            .position(|m| m.receipt_handle.as_deref() == Some(receipt_handle));
        match position {
            Some(index) => {
                messages.remove(index);
            }
            None => {
                tracing::debug!("delete with a handle that is not the latest: nothing deleted");
            }
        }
        Ok(())
    }

    async fn depth(&self) -> Result<usize, QueueError> {
        Ok(self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const LIMIT: usize = 1024;
    const VISIBILITY: Duration = Duration::from_secs(30);

    fn message(body: &str) -> OutgoingMessage {
        OutgoingMessage {
            body: body.to_owned(),
            attributes: BTreeMap::new(),
        }
    }

    #[tokio::test]
    async fn visible_again_exactly_when_the_timeout_ends() {
        let clock = ManualClock::at_ms(1_000_000);
        let queue = MemoryQueue::new(clock.clone(), LIMIT);
        queue.send(&message("a")).await.unwrap();
        assert_eq!(queue.receive(1, VISIBILITY).await.unwrap().len(), 1);

        clock.advance(VISIBILITY - Duration::from_millis(1));
        assert!(queue.receive(1, VISIBILITY).await.unwrap().is_empty());

        clock.advance(Duration::from_millis(1));
        let again = queue.receive(1, VISIBILITY).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].receive_count, 2);
    }

    #[tokio::test]
    async fn a_stale_handle_deletes_nothing_and_succeeds() {
        let clock = ManualClock::at_ms(0);
        let queue = MemoryQueue::new(clock.clone(), LIMIT);
        queue.send(&message("a")).await.unwrap();
        let first = queue.receive(1, VISIBILITY).await.unwrap().remove(0);
        clock.advance(VISIBILITY);
        let second = queue.receive(1, VISIBILITY).await.unwrap().remove(0);
        assert_ne!(first.receipt_handle, second.receipt_handle);

        queue.delete(&first.receipt_handle).await.unwrap();
        queue.delete("never-issued").await.unwrap();
        assert_eq!(queue.len(), 1);

        queue.delete(&second.receipt_handle).await.unwrap();
        assert!(queue.is_empty());
        // Deleting again is harmless, as on SQS.
        queue.delete(&second.receipt_handle).await.unwrap();
    }

    #[tokio::test]
    async fn the_latest_handle_deletes_even_after_the_timeout() {
        let clock = ManualClock::at_ms(0);
        let queue = MemoryQueue::new(clock.clone(), LIMIT);
        queue.send(&message("a")).await.unwrap();
        let delivery = queue.receive(1, VISIBILITY).await.unwrap().remove(0);
        clock.advance(VISIBILITY * 2);
        queue.delete(&delivery.receipt_handle).await.unwrap();
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn without_a_dead_letter_queue_messages_are_redelivered_forever() {
        let clock = ManualClock::at_ms(0);
        let queue = MemoryQueue::new(clock.clone(), LIMIT);
        queue.send(&message("a")).await.unwrap();
        for expected in 1..=5 {
            let delivery = queue.receive(10, VISIBILITY).await.unwrap().remove(0);
            assert_eq!(delivery.receive_count, expected);
            clock.advance(VISIBILITY);
        }
    }

    #[tokio::test]
    async fn moved_messages_keep_their_identity_and_count() {
        let clock = ManualClock::at_ms(0);
        let dlq = MemoryQueue::new(clock.clone(), LIMIT);
        let queue = MemoryQueue::with_dead_letter(clock.clone(), LIMIT, 1, dlq.clone());
        let id = queue.send(&message("a")).await.unwrap();
        queue.receive(1, VISIBILITY).await.unwrap();
        clock.advance(VISIBILITY);

        assert!(queue.receive(1, VISIBILITY).await.unwrap().is_empty());
        assert!(queue.is_empty());
        let dead = dlq.receive(1, VISIBILITY).await.unwrap().remove(0);
        assert_eq!((dead.message_id, dead.body), (id, "a".to_owned()));
        assert_eq!(dead.receive_count, 2);
    }

    #[tokio::test]
    async fn receive_takes_at_most_ten_and_zero_takes_none() {
        let queue = MemoryQueue::new(ManualClock::at_ms(0), LIMIT);
        for i in 0..12 {
            queue.send(&message(&i.to_string())).await.unwrap();
        }
        assert!(queue.receive(0, VISIBILITY).await.unwrap().is_empty());
        let batch = queue.receive(100, VISIBILITY).await.unwrap();
        let bodies: Vec<_> = batch.iter().map(|m| m.body.as_str()).collect();
        assert_eq!(bodies, ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    }
}
