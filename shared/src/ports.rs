//! Ports: the traits handlers depend on, split by capability so each handler takes only
//! what it needs (mirroring its IAM policy). Adapters implement them.

use crate::domain::{Currency, Order, Payment, Transition};
use crate::idempotency::{Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, StoreError};
use async_trait::async_trait;
use std::time::Duration;

/// Reads and writes orders.
#[async_trait]
pub trait OrderStore: Send + Sync {
    /// Stores a new order (conditional on its id being new).
    async fn create_order(&self, order: &Order) -> Result<(), StoreError>;
    /// Reads an order consistently.
    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError>;
    /// Replaces the items of `order` (as read) with `next`'s, bumping the version; refused
    /// with [`ReviseOutcome::Changed`] if the order moved since it was read.
    async fn revise_order(&self, read: &Order, next: &Order) -> Result<ReviseOutcome, StoreError>;
}

/// What an order revision found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviseOutcome {
    /// Written.
    Revised,
    /// The order changed since it was read (another edit, or a payment started); as it is now.
    Changed(Option<Order>),
}

/// What starting a payment attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginOutcome {
    /// The key is claimed, the order reserved and the payment created, atomically.
    Begun,
    /// The key was claimed first by someone else: the record as it was (nothing written).
    KeyTaken(IdempotencyRecord),
    /// The order is no longer as it was read: as it is now (nothing written).
    OrderChanged(Option<Order>),
}

/// What resuming (taking over) a lapsed attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// The lease is ours and the order is reserved for the attempt again.
    Resumed,
    /// Another invocation moved the record first: as it is now, if it still exists.
    KeyMoved(Option<IdempotencyRecord>),
    /// The order cannot be reserved for the attempt: as it is now.
    OrderChanged(Option<Order>),
}

/// What applying a transition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Written: the payment as it is now.
    Settled(Box<Payment>),
    /// The payment moved since it was read; nothing written. Read again and re-decide.
    Moved,
}

/// The charge path's store: idempotency record, order and payment, written together.
#[async_trait]
pub trait ChargeStore: Send + Sync {
    /// The store's notion of now, epoch milliseconds.
    fn now_ms(&self) -> i64;

    /// Reads the idempotency record (expired reads as absent) and the order together, with
    /// consistent reads, in one request.
    async fn load_for_charge(
        &self,
        record: &RecordKey,
        order_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Order>), StoreError>;

    /// Claims the key, reserves `order` (as read: same version, unpaid) for `payment` and
    /// creates `payment`, in one transaction.
    async fn begin_attempt(
        &self,
        claim: &Claim,
        order: &Order,
        payment: &Payment,
    ) -> Result<BeginOutcome, StoreError>;

    /// Takes a lapsed attempt over (fenced on `seen`) and reserves its order for it again,
    /// in one transaction.
    async fn resume_attempt(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        payment: &Payment,
    ) -> Result<ResumeOutcome, StoreError>;

    /// Reads a payment consistently.
    async fn get_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError>;

    /// Applies `transition` to `payment` (as read) and its order, and completes the
    /// idempotency record held under `lease` with the resulting view, in one transaction.
    /// With [`Transition::Unchanged`] only the record is completed.
    async fn finish_attempt(
        &self,
        payment: &Payment,
        transition: &Transition,
        lease: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<SettleOutcome, StoreError>;

    /// The PSP was never reached: releases the order and clears the lease (keeping the
    /// record and its attempt id, so a retry takes the same attempt over), in one transaction.
    async fn release_unsent(&self, payment: &Payment, lease: &LeaseToken)
        -> Result<(), StoreError>;

    /// Applies `transition` to `payment` (as read) outside the charge path (webhooks,
    /// reconcile): payment, order, and the status mirror on the idempotency record when that
    /// record is completed for this attempt, in one transaction.
    async fn settle(
        &self,
        payment: &Payment,
        transition: &Transition,
        retention: Duration,
    ) -> Result<SettleOutcome, StoreError>;
}

/// A charge request to a PSP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    /// Our attempt id (sent as metadata).
    pub payment_id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// PSP payment method token.
    pub payment_method: String,
    /// The PSP idempotency key derived from the attempt.
    pub idempotency_key: String,
}

impl ChargeRequest {
    /// The request for `payment`, under the key derived from its id.
    pub fn for_payment(payment: &Payment) -> Self {
        Self {
            payment_id: payment.payment_id.clone(),
            amount: payment.amount,
            currency: payment.currency,
            payment_method: payment.payment_method.clone(),
            idempotency_key: charge_key(&payment.payment_id),
        }
    }
}

/// The PSP idempotency key of a charge: `payonce-charge-<payment_id>`.
pub fn charge_key(payment_id: &str) -> String {
    format!("payonce-charge-{payment_id}")
}

/// The outcome classes the charge path must tell apart (SPEC §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PspOutcome {
    /// Charged.
    Approved {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// Definitively declined by the issuer.
    Declined {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
        /// Decline code.
        decline_code: String,
    },
    /// Definitively refused: the payment method itself is invalid.
    Rejected {
        /// The PSP's message.
        message: String,
    },
    /// Never reached the PSP, or our credentials were refused: safe to release and retry.
    NotSent {
        /// What happened (for logs; never shown to clients).
        reason: String,
    },
    /// Anything after a connection was made without a definitive answer.
    Unknown {
        /// What happened (for logs).
        reason: String,
    },
}

/// What a PSP knows about one of our attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PspLookup {
    /// The PSP has no charge for this attempt (as far as its lookup can tell).
    NotFound,
    /// Charged.
    Succeeded {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// Declined.
    Declined {
        /// The PSP's id.
        provider_payment_id: String,
        /// Decline code.
        decline_code: String,
    },
    /// Exists but not final yet (or cancelled without a charge).
    Pending {
        /// The PSP's id.
        provider_payment_id: String,
    },
}

/// Errors of a PSP call that are not charge outcomes (lookups).
#[derive(Debug, thiserror::Error)]
#[error("the PSP call failed: {reason}")]
pub struct PspError {
    /// What happened.
    pub reason: String,
}

/// A payment service provider.
#[async_trait]
pub trait Psp: Send + Sync {
    /// The provider's name as stored on payments (`stripe`, ...).
    fn name(&self) -> &str;
    /// Creates and confirms a charge under `request.idempotency_key`, giving up after `timeout`.
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome;
    /// Looks an attempt up by our payment id.
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError>;
}

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
        self.body.len() + self.attributes.iter().map(|(k, v)| k.len() + v.len() + "String".len()).sum::<usize>()
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
    async fn receive(&self, max: u32, visibility_timeout: Duration) -> Result<Vec<ReceivedMessage>, QueueError>;
    /// Deletes a received message (its processing succeeded).
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError>;
    /// How many messages the queue holds, visible or not (approximate on SQS).
    async fn depth(&self) -> Result<usize, QueueError>;
}
