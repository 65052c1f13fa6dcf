//! The stores the payment paths write through: orders, charges and their records, refunds,
//! and the attempt counters of the card-testing limits.

use crate::domain::{Order, Payment, PaymentOperation, Refund, RefundTransition, Transition};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, StoreError, TakeoverOutcome,
};
use async_trait::async_trait;

/// A refund's sender lease is the lease its holder holds on its idempotency record (or on the
/// refund, for reconcile).
impl From<&Lease> for crate::domain::SenderLease {
    fn from(lease: &Lease) -> Self {
        Self::new(lease.token.as_str(), lease.until_ms)
    }
}

/// How recent a read must be.
///
/// A [`Read::Latest`] read sees every write acknowledged before it (DynamoDB's strongly
/// consistent read). A [`Read::Recent`] read costs half as much but may miss the writes of the
/// last moment (DynamoDB's eventually consistent read: usually within a second): an item just
/// created may read as missing, an item just written as it was before. Use it only where
/// every decision taken on it is fenced by a conditional write, or is re-read with
/// [`Read::Latest`] before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Sees every acknowledged write.
    Latest,
    /// May miss the writes of the last moment.
    Recent,
}

/// Reads and writes orders.
#[async_trait]
pub trait OrderStore: Send + Sync {
    /// Stores a new order (conditional on its id being new).
    async fn create_order(&self, order: &Order) -> Result<(), StoreError>;
    /// Reads an order consistently, as stored: see [`Order::settled_by`] for how readers see it.
    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError>;
    /// Reads the attempt (payment) an order is stored `processing` under, consistently.
    async fn get_holder(&self, payment_id: &str) -> Result<Option<Payment>, StoreError>;
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

impl ReviseOutcome {
    /// What a refused revision to `next` found in `now`. The order exactly as `next` (its
    /// version, items, amount and the time of this very write) is this revision's earlier try,
    /// whose answer was lost and whose retry met it: written.
    pub fn refused(next: &Order, now: Option<Order>) -> Self {
        let own = now.as_ref().is_some_and(|now| {
            now.version == next.version
                && now.items == next.items
                && now.amount == next.amount
                && now.updated_at_ms == next.updated_at_ms
        });
        if own && !crate::idempotency::own_writes_forgotten() {
            Self::Revised
        } else {
            Self::Changed(now)
        }
    }
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
    /// The counter at this index of the counts asked for is full (nothing written).
    OverLimit(usize),
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
    /// Someone else (reconcile) holds the attempt's sender lease until then: wait.
    LeaseHeld {
        /// Epoch milliseconds.
        until_ms: i64,
    },
}

/// What taking a refund's sender lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundLeaseOutcome {
    /// The lease is ours: the refund as it is now.
    Taken(Box<Refund>),
    /// Another sender holds a live lease until then.
    Held {
        /// Epoch milliseconds.
        until_ms: i64,
    },
    /// The refund is no longer as read (settled, or its lease moved): as it is now.
    Moved(Option<Box<Refund>>),
}

/// Who finishes an attempt under a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishedBy {
    /// The charge handler whose claim or takeover reserved the order for the attempt.
    Charge,
    /// Reconcile, which took a lapsed lease over without reserving the order.
    Reconcile,
}

impl FinishedBy {
    /// Whether this finish of `read` with `transition` leaves the order as it is (see
    /// [`crate::domain::completion_leaves_order`]): only the charge's own.
    pub fn leaves_order(self, read: &Payment, transition: &Transition) -> bool {
        let charge = self == Self::Charge
            || crate::mutations::active(crate::mutations::Mutation::ReconcileFinishLeavesOrder);
        charge && crate::domain::completion_leaves_order(read, transition)
    }
}

/// What applying a transition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Written: the payment as it is now.
    Settled(Box<Payment>),
    /// The payment moved since it was read; nothing written. Read again and re-decide.
    Moved,
    /// The webhook event was already processed; nothing written.
    Duplicate,
}

/// The dedup record of one webhook event (kept 30 days, beyond the PSP's retry window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMark {
    /// The provider the event came from.
    pub provider: String,
    /// The provider's event id.
    pub event_id: String,
    /// When the dedup record expires, epoch seconds.
    pub expires_at_s: i64,
}

/// The charge path's store: the key's record, the order and the payment, written together.
/// The payment of a key is [`crate::domain::payment_id_for`] it, and holds the key's record.
#[async_trait]
pub trait ChargeStore: Send + Sync {
    /// The store's notion of now, epoch milliseconds.
    fn now_ms(&self) -> i64;

    /// Reads the key's record (on its payment) and the order together, as recent as `read`
    /// asks, in one request.
    async fn load_for_charge(
        &self,
        record: &RecordKey,
        order_id: &str,
        read: Read,
    ) -> Result<(Option<IdempotencyRecord>, Option<Order>), StoreError>;

    /// Claims the key by creating `payment` (the key's, holding its record), reserves `order`
    /// (as read: same version, unpaid) for it and counts it against each of `counts` (none of
    /// them full; an order's counter is `order`'s), in one transaction. Refusals are reported
    /// in that order: the key, the order, the counters.
    async fn begin_attempt(
        &self,
        claim: &Claim,
        order: &Order,
        payment: &Payment,
        counts: &[AttemptCount],
    ) -> Result<BeginOutcome, StoreError>;

    /// Counts one decline on `counter` (forgotten after `expires_at_s`). An order's counter of
    /// an order that no longer exists counts nothing.
    async fn count_decline(&self, counter: &Counter, expires_at_s: i64) -> Result<(), StoreError>;

    /// Takes a lapsed attempt over (fenced on `seen`) and reserves its order for it again,
    /// in one transaction.
    async fn resume_attempt(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        payment: &Payment,
    ) -> Result<ResumeOutcome, StoreError>;

    /// Reads a payment, as recent as `read` asks.
    async fn read_payment(
        &self,
        payment_id: &str,
        read: Read,
    ) -> Result<Option<Payment>, StoreError>;

    /// Reads a payment consistently ([`Read::Latest`]).
    async fn get_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        self.read_payment(payment_id, Read::Latest).await
    }

    /// Applies `transition` to `payment` (as read) and, unless the charge's own completion
    /// leaves it ([`crate::domain::completion_leaves_order`]), its order, and completes the
    /// key's record held under `lease`, atomically. With [`Transition::Unchanged`] only the
    /// record is completed. Reconcile's finish (`by`) always writes the order: its lease never
    /// reserved it.
    async fn finish_attempt(
        &self,
        payment: &Payment,
        transition: &Transition,
        lease: &LeaseToken,
        by: FinishedBy,
    ) -> Result<SettleOutcome, StoreError>;

    /// The PSP was never reached: releases the order and clears the lease (keeping the
    /// record and its attempt id, so a retry takes the same attempt over), in one transaction.
    async fn release_unsent(&self, payment: &Payment, lease: &LeaseToken)
        -> Result<(), StoreError>;

    /// Applies `transition` to `payment` (as read) outside the charge path (webhooks,
    /// reconcile): payment, order and — for a webhook — the event's dedup record, atomically,
    /// so an event is never marked done without its effect. A replay of the key then answers
    /// with the payment as it is now.
    async fn settle(
        &self,
        payment: &Payment,
        transition: &Transition,
        event: Option<&EventMark>,
    ) -> Result<SettleOutcome, StoreError>;

    /// The charge's idempotency record under `key`. A charge's record lives as long as its
    /// payment (its expiry is [`crate::domain::CHARGE_RECORD_NEVER_EXPIRES_S`]); it is read
    /// and leased only through this port.
    async fn charge_record(&self, key: &RecordKey)
        -> Result<Option<IdempotencyRecord>, StoreError>;

    /// Takes the lease of the in-progress charge record under `key` from `seen` (reconcile's
    /// fenced takeover), setting nothing else.
    async fn take_over_charge(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<TakeoverOutcome, StoreError>;

    /// Records a webhook event as processed (when it changes nothing); false if it already was.
    async fn record_event(&self, event: &EventMark) -> Result<bool, StoreError>;
}

/// What claiming a refund found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginRefundOutcome {
    /// The key is claimed, the refund's number allocated and its amount reserved on the
    /// payment, and the refund created, atomically.
    Begun,
    /// The key was claimed first by someone else: the record as it was (nothing written).
    KeyTaken(IdempotencyRecord),
    /// The payment's refund amounts or status moved since it was read: as it is now (nothing
    /// written). Decide again.
    PaymentChanged(Option<Box<Payment>>),
}

/// What writing a refund transition writes to its idempotency record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundRecordWrite<'a> {
    /// Complete the record held under `lease` with the refund's view (fenced).
    Complete {
        /// The lease the writer holds.
        lease: &'a LeaseToken,
        /// The record's new expiry, epoch seconds.
        expires_at_s: i64,
    },
    /// Keep the view mirrored on a record completed for this very refund, if there is one.
    Mirror {
        /// The record's new expiry, epoch seconds.
        expires_at_s: i64,
    },
    /// Keep the record as it is, but let it live until then if it is this refund's (in
    /// progress or completed): a refund still pending must not outlive its key's record, or a
    /// retry with the key would claim afresh instead of replaying.
    Extend {
        /// The record's new expiry, epoch seconds.
        expires_at_s: i64,
    },
    /// Leave the record alone.
    Keep,
}

/// A refund sender's write about its PSP call: fenced on its sender lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderFence<'a> {
    /// The lease the sender holds.
    pub lease: &'a LeaseToken,
    /// Whether the write gives the lease back: only once the PSP's answer is known (or the call
    /// provably never reached it). After a call whose outcome is unknown the request may still
    /// be running at the PSP, so the lease is kept until it lapses: another sender's look-then-
    /// send must not meet it there (a PSP that ignores refund keys would refund twice).
    pub give_back: bool,
}

impl<'a> SenderFence<'a> {
    /// The fence of a sender whose call's outcome is known: the lease goes back.
    pub fn done(lease: &'a LeaseToken) -> Self {
        Self {
            lease,
            give_back: true,
        }
    }

    /// The fence of a sender whose call may still be running at the PSP: the lease stays.
    pub fn in_flight(lease: &'a LeaseToken) -> Self {
        Self {
            lease,
            give_back: false,
        }
    }
}

/// What writing a refund transition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundSettleOutcome {
    /// Written: the refund as it is now.
    Settled(Box<Refund>),
    /// The refund moved since it was read; nothing written. Read again and re-decide.
    Moved,
    /// The webhook event was already processed; nothing written.
    Duplicate,
}

/// The refund path's store: the idempotency record, the payment's refund amounts and the
/// refund, written together.
#[async_trait]
pub trait RefundStore: Send + Sync {
    /// The store's notion of now, epoch milliseconds.
    fn refund_now_ms(&self) -> i64;

    /// Reads the idempotency record (expired reads as absent) and the payment, consistently.
    async fn load_for_refund(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError>;

    /// Claims the key, allocates `refund`'s number and reserves its amount on `payment` (as
    /// read: its refund amounts and count unchanged, and `refunded + pending + amount ≤
    /// captured`), and creates `refund`, in one transaction.
    async fn begin_refund(
        &self,
        claim: &Claim,
        payment: &Payment,
        refund: &Refund,
    ) -> Result<BeginRefundOutcome, StoreError>;

    /// Takes a lapsed refund over (fenced on `seen`, the refund still pending and its sender
    /// lease `seen`'s, lapsed or absent), recording that a call under its key may have reached
    /// the PSP: the record and the refund's sender lease both move to `lease`. Answers
    /// `Resumed`, `KeyMoved`, or `LeaseHeld` while another sender (reconcile) holds the refund.
    async fn resume_refund(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        refund: &Refund,
    ) -> Result<ResumeOutcome, StoreError>;

    /// Reads a refund consistently.
    async fn get_refund(&self, refund_id: &str) -> Result<Option<Refund>, StoreError>;

    /// Every refund of `payment` (as read), in number order, the duplicate refund last.
    async fn refunds_of(&self, payment: &Payment) -> Result<Vec<Refund>, StoreError>;

    /// Reads a payment consistently (for the refund path's reads after a PSP call).
    async fn refunded_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError>;

    /// Applies `step` to `refund` (as read) and its effect on the payment's refunded and
    /// pending amounts, writes `record` and, for a webhook, the event's dedup record, in one
    /// transaction conditioned on the refund's status as read. With
    /// [`RefundTransition::Unchanged`] only the record is written. A sender's write is fenced
    /// on its sender lease (refused with [`StoreError::LeaseLost`] once another holds it), and
    /// gives the lease back if its [`SenderFence::give_back`] says so.
    async fn write_refund(
        &self,
        refund: &Refund,
        step: &RefundTransition,
        record: RefundRecordWrite<'_>,
        fence: Option<SenderFence<'_>>,
        event: Option<&EventMark>,
    ) -> Result<RefundSettleOutcome, StoreError>;

    /// Takes the sender lease of `refund` (as read: still pending, its lease as read and either
    /// absent or lapsed), so that nobody else sends it while the holder does. Taking a lapsed
    /// one records that a call under the refund's key may have reached the PSP.
    async fn take_refund_lease(
        &self,
        refund: &Refund,
        lease: &Lease,
    ) -> Result<RefundLeaseOutcome, StoreError>;

    /// Stops reconcile looking at a succeeded refund (it leaves the in-flight index), if it is
    /// still succeeded.
    async fn stop_watching(&self, refund: &Refund) -> Result<(), StoreError>;

    /// The PSP was never reached under the refund's key: the refund becomes `canceled`, its
    /// amount is freed and its idempotency record deleted (fenced on `lease`, which must be both
    /// the record's and the refund's sender lease), in one transaction, so a retry with the same
    /// key claims afresh.
    async fn cancel_unsent_refund(
        &self,
        refund: &Refund,
        lease: &LeaseToken,
    ) -> Result<(), StoreError>;
}

/// What claiming a capture or cancel found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginOperationOutcome {
    /// The key is claimed and the operation claimed on the payment, atomically.
    Begun,
    /// The key was claimed first by someone else: the record as it was (nothing written).
    KeyTaken(IdempotencyRecord),
    /// The payment moved since it was read, or another operation was claimed on it: as it is
    /// now (nothing written). Decide again.
    PaymentChanged(Option<Box<Payment>>),
}

/// How a capture's or cancel's request ends its idempotency record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationRecordEnd {
    /// Completed with `result` (what a replay answers), kept until `expires_at_s`.
    Complete {
        /// The stored answer.
        result: String,
        /// Epoch seconds.
        expires_at_s: i64,
    },
    /// Deleted: the PSP was never reached, so a retry with the key claims afresh.
    Delete,
}

/// The capture and cancel path's store: the request's idempotency record and the operation
/// claimed on the payment, written together.
#[async_trait]
pub trait OperationStore: Send + Sync {
    /// The store's notion of now, epoch milliseconds.
    fn operation_now_ms(&self) -> i64;

    /// Reads the idempotency record (expired reads as absent) and the payment, consistently,
    /// in one request.
    async fn load_for_operation(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError>;

    /// Claims the key and claims `operation` on `payment` (as read: the same status, and no
    /// operation claimed), in one transaction.
    async fn begin_operation(
        &self,
        claim: &Claim,
        payment: &Payment,
        operation: &PaymentOperation,
    ) -> Result<BeginOperationOutcome, StoreError>;

    /// Takes the lapsed lease of the in-progress record under `record` from `seen`, setting
    /// nothing else. Answers `Resumed` or `KeyMoved`.
    async fn resume_operation(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<ResumeOutcome, StoreError>;

    /// Ends the request's operation: applies `transition` to `payment` (as read) and its
    /// effect on the order, and ends the record held under `lease` as `end` says (fenced), in
    /// one transaction. With `release` (only with [`Transition::Unchanged`]: the PSP refused
    /// the operation or was never reached), the operation claimed under `record` leaves the
    /// payment too, so another may be asked for.
    async fn finish_operation(
        &self,
        payment: &Payment,
        transition: &Transition,
        record: &RecordKey,
        lease: &LeaseToken,
        end: &OperationRecordEnd,
        release: bool,
    ) -> Result<SettleOutcome, StoreError>;
}

/// A counter of payment attempts and declines in one window of the card-testing limits
/// (`service::limits`). Where it lives is the store's choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counter {
    /// A user's (the JWT `sub`), across orders.
    User {
        /// The user.
        user: String,
        /// The window's number.
        window: i64,
    },
    /// An order's, across keys and tabs.
    Order {
        /// The order.
        order_id: String,
        /// The window's number.
        window: i64,
    },
}

/// A counter a new attempt counts against, in the same write as its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptCount {
    /// The counter.
    pub counter: Counter,
    /// The attempts it admits.
    pub max_attempts: u32,
    /// The declines after which it admits no attempt.
    pub max_declines: u32,
    /// When it may be forgotten, epoch seconds.
    pub expires_at_s: i64,
}
