//! Ports: the traits handlers depend on, split by capability so each handler takes only
//! what it needs (mirroring its IAM policy). Adapters implement them.

use crate::domain::{
    Currency, Order, Payment, Refund, RefundReason, RefundSettlement, RefundTransition, Transition,
};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, StoreError, TakeoverOutcome,
};
use async_trait::async_trait;
use std::time::Duration;

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
    PaymentChanged(Option<Payment>),
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

/// A refund request to a PSP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequest {
    /// Our refund id (sent as metadata, matched by lookups).
    pub refund_id: String,
    /// Our payment id (sent as metadata).
    pub payment_id: String,
    /// The PSP's id of the charge refunded.
    pub provider_payment_id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// Why, if given.
    pub reason: Option<RefundReason>,
    /// `payonce-refund-<payment_id>-<n>`.
    pub idempotency_key: String,
    /// Whether an earlier call under this refund's key may have reached the PSP: a PSP that
    /// ignores refund keys may then refuse this one because of that earlier refund, so its
    /// refusal proves nothing.
    pub resend: bool,
}

impl RefundRequest {
    /// The request for `refund` of the PSP charge `provider_payment_id`: a pure function of the
    /// refund, so every re-send under its key is identical.
    pub fn for_refund(refund: &Refund, provider_payment_id: &str) -> Self {
        Self {
            refund_id: refund.refund_id.clone(),
            payment_id: refund.payment_id.clone(),
            provider_payment_id: provider_payment_id.to_owned(),
            amount: refund.amount,
            currency: refund.currency,
            reason: refund.reason,
            idempotency_key: refund.psp_key(),
            resend: refund.psp_maybe_reached,
        }
    }
}

/// The outcome classes the refund path must tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The PSP answered with a refund, or refused the request for good: what it said.
    Answered(RefundSettlement),
    /// This call never reached the PSP, or our credentials were refused (see
    /// [`PspOutcome::NotSent`]).
    NotSent {
        /// What happened (for logs).
        reason: String,
    },
    /// Anything after a connection was made without a definitive answer.
    Unknown {
        /// What happened (for logs).
        reason: String,
    },
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

/// The outcome classes the charge path must tell apart.
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
    /// Definitively refused for another reason than the payment method (a validation error such
    /// as `amount_too_small`): nothing was charged, nor will a re-send charge.
    Refused {
        /// The PSP's error code.
        code: String,
    },
    /// This call never reached the PSP, or our credentials were refused. Only if every call ever
    /// made under the attempt's key was of this class may the order be released.
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
        /// What the PSP says it charged, where its answer says it: reconcile applies nothing
        /// it disagrees with.
        amount: Option<CheckedAmount>,
    },
    /// Declined.
    Declined {
        /// The PSP's id.
        provider_payment_id: String,
        /// Decline code.
        decline_code: String,
        /// What the PSP says the declined charge was for, where its answer says it.
        amount: Option<CheckedAmount>,
    },
    /// Exists but not final yet (`processing`, `requires_action`, `requires_capture`...).
    Pending {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// Cancelled without a charge: nothing can ever be charged under the attempt's key.
    Canceled {
        /// The PSP's id.
        provider_payment_id: String,
    },
}

impl PspLookup {
    /// What the PSP says the charge it found was for, where it says it.
    pub fn amount(&self) -> Option<&CheckedAmount> {
        match self {
            Self::Succeeded { amount, .. } | Self::Declined { amount, .. } => amount.as_ref(),
            Self::NotFound | Self::Pending { .. } | Self::Canceled { .. } => None,
        }
    }
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
    /// Which PSP this is: what its payment method tokens look like, what it charges.
    fn kind(&self) -> crate::domain::PspKind;
    /// Whether refunds can go through this PSP at all. Without them the refund path answers
    /// 409 `refund-not-supported` before claiming anything (2C2P: its refunds need the
    /// Payment Maintenance API's exchanged RSA keys, which payonce does not have).
    fn supports_refunds(&self) -> bool {
        true
    }
    /// Creates and confirms a charge under `request.idempotency_key`, giving up after `timeout`.
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome;
    /// Looks an attempt up by our payment id.
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError>;
    /// Proves whether the PSP ever ran `request`'s key, by re-sending the create under the
    /// same key without confirming it (search APIs lag, so "not found" is never proof).
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError>;
    /// Cancels an unconfirmed charge created by [`Psp::fence`].
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError>;
    /// Refunds under `request.idempotency_key`, giving up after `timeout`.
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome;
    /// What the PSP holds for our refund `refund_id` of the charge `provider_payment_id`, by
    /// listing the charge's refunds (never by search, never creating one); `None` if none
    /// carries our id.
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError>;
}

/// What fencing a PSP key proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The key had never run: the PSP created an unconfirmed charge under it (to be cancelled),
    /// so no charge can ever run under it again.
    NeverRan {
        /// The unconfirmed charge the fence created.
        provider_payment_id: String,
    },
    /// The key was used by an earlier request (a charge may exist even if lookups miss it).
    KeyUsed,
    /// The key was used, yet the PSP holds no charge under it, and only the invocation that
    /// used it could ever make one (2C2P: the invoice's payment tokens exist only in the
    /// invocations that requested them, which spend them at once). Reconcile asks only once no
    /// such invocation can be alive (the attempt's lease lapsed), so nothing can be charged.
    UsedWithoutCharge,
    /// A request with the key is in flight at the PSP right now.
    InFlight,
    /// The fence itself was refused by validation (e.g. the payment method no longer exists).
    /// The original request carried the same parameters, so it was refused alike: nothing was
    /// charged under the key.
    Refused {
        /// Whether the refusal names the payment method.
        payment_method: bool,
    },
    /// The PSP offers no way to prove a key was never used (nothing can be created under it
    /// that would block a late charge): the attempt waits for an operator.
    Unprovable,
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

/// Why a webhook's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No signature header (400).
    #[error("the signature header is missing")]
    Missing,
    /// The header does not parse (400).
    #[error("the signature header cannot be parsed")]
    Malformed,
    /// The header parses, but no signature matches (401).
    #[error("no signature matches")]
    NoValidSignature,
    /// The signed timestamp is outside the tolerance (401).
    #[error("the signature timestamp is outside the tolerance")]
    Stale,
}

/// A verified PSP event, as payonce reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PspEvent {
    /// The PSP's event id (the dedup key).
    pub event_id: String,
    /// The PSP's event type.
    pub kind: String,
    /// Our attempt id from the event's metadata, if the event concerns one of our attempts.
    pub payment_id: Option<String>,
    /// What the event says about that attempt, if it is a type payonce applies.
    pub settlement: Option<crate::domain::Settlement>,
    /// What the event says about one of our refunds (matched by our refund id in its metadata).
    pub refund: Option<RefundEvent>,
    /// The event says the charge's refunds changed without naming one of ours (Stripe's
    /// `charge.refunded`): the payment's pending refunds are looked up again.
    pub refunds_changed: bool,
    /// What the event's object says was charged (or refunded, for a refund event), in minor
    /// units, and in which currency (lowercase ISO code), where the PSP reports them: checked
    /// against our payment (or refund) before anything is applied.
    pub amount: Option<CheckedAmount>,
    /// Whether the event comes from the PSP's live mode, where the PSP reports it: an event of
    /// the other mode is never applied.
    pub livemode: Option<bool>,
    /// The connected account the event is for, where the PSP names one (Stripe Connect's
    /// `account`): payonce charges on its own account only, so such an event is never applied.
    pub account: Option<String>,
}

/// An amount a PSP reports (in an event or a lookup), to be checked against ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedAmount {
    /// Minor units.
    pub minor: i64,
    /// Lowercase ISO 4217 code.
    pub currency: String,
}

impl CheckedAmount {
    /// The `amount` (integer, minor units) and `currency` (any case) of a PSP object, as Stripe
    /// and Omise write them on payment intents, charges and refunds; `None` unless both are
    /// there.
    pub fn of_object(object: &serde_json::Value) -> Option<Self> {
        Some(Self {
            minor: object["amount"].as_i64()?,
            currency: object["currency"].as_str()?.to_ascii_lowercase(),
        })
    }
}

/// A webhook's word on one of our refunds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundEvent {
    /// Our refund id, from the refund's metadata.
    pub refund_id: String,
    /// What the refund object says.
    pub settlement: RefundSettlement,
}

/// A PSP's webhook scheme: verification of the raw body, then parsing.
pub trait WebhookScheme: Send + Sync {
    /// The provider name in `/webhooks/{provider}`.
    fn provider(&self) -> &str;
    /// Verifies the raw body against the request's signature headers at `now_s`.
    fn verify(
        &self,
        headers: &lambda_http::http::HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<(), SignatureError>;
    /// Parses a verified body.
    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error>;
}

/// Finds attempts still in `processing` whose next check is due (the sparse GSI; eventually
/// consistent, so callers re-read each one consistently), and schedules their next check.
#[async_trait]
pub trait InflightScan: Send + Sync {
    /// Up to `limit` payment ids whose check is due at `due_at_ms`, most overdue first, after
    /// `cursor`; with the cursor to continue from, if there are more.
    async fn list_inflight(
        &self,
        due_at_ms: i64,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError>;

    /// Moves the next check of `payment_id` to `check_at_ms`, if it is still processing.
    async fn defer_check(&self, payment_id: &str, check_at_ms: i64) -> Result<(), StoreError>;
}

/// Sweeps records that expired but that TTL has not deleted yet (the cleanup job).
#[async_trait]
pub trait ExpiredSweep: Send + Sync {
    /// Scans one page of up to `limit` items after `cursor`; returns the keys of the expired
    /// ones and the cursor of the next page, if any.
    async fn scan_expired(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError>;
    /// Deletes `key` if it is still expired and holds no live lease; false if it did not.
    async fn delete_expired(&self, key: &str) -> Result<bool, StoreError>;
    /// The cursor an interrupted sweep stopped at.
    async fn load_checkpoint(&self) -> Result<Option<String>, StoreError>;
    /// Saves (or, with `None`, clears) the sweep's cursor.
    async fn save_checkpoint(&self, cursor: Option<&str>) -> Result<(), StoreError>;
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
