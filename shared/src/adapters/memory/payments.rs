//! The embedded store of orders and payments: the twin of `DynamoPaymentStore`, with the same
//! conditions and the same answers, for the local sandbox, fast tests and the simulation.
//!
//! Every operation DynamoDB runs as one TransactWriteItems checks all of its conditions and
//! only then writes all of its items, under the one lock of the tables it shares with its
//! [`MemoryIdempotencyStore`]: atomic, never half-applied, and the lock is never held across
//! an await. Where DynamoDB would cancel the transaction, the answer is picked from the failed
//! conditions in the order the DynamoDB adapter reads its cancellation reasons.

use super::idempotency::MemoryIdempotencyStore;
use super::tables::{Before, Lag, MemoryTables, StoredPayment, StoredRefund, Tally};
use crate::adapters::encode_view;
use crate::adapters::faults::Faults;
use crate::adapters::user_counter_key;
use crate::adapters::TransitionWrite;
use crate::clock::SharedClock;
use crate::domain::{
    is_refund_id, payment_id_for, refund_amounts_delta, LateDuplicates, Order, OrderEffect,
    OrderPaymentState, Payment, PaymentStatus, Refund, RefundStatus, RefundTransition, Transition,
};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordState, RecordStatus, StoreError,
    TakeoverOutcome,
};
use crate::ports::{
    AttemptCount, BeginOutcome, BeginRefundOutcome, ChargeStore, Counter, EventMark, FinishedBy,
    InflightScan, OrderStore, Read, RefundLeaseOutcome, RefundRecordWrite, RefundSettleOutcome,
    RefundStore, ResumeOutcome, ReviseOutcome, SenderFence, SettleOutcome,
};
use async_trait::async_trait;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

/// [`OrderStore`], [`ChargeStore`] and [`InflightScan`] in memory, with the semantics of
/// `DynamoPaymentStore`.
///
/// It shares the idempotency records (refunds'; and the webhook dedup records and attempt
/// counters) of the [`MemoryIdempotencyStore`] it is built on, as the DynamoDB adapters share
/// the idempotency table. A charge's record is kept on its payment, as DynamoDB keeps it on the
/// payment item. Clones share everything.
#[derive(Debug, Clone)]
pub struct MemoryPaymentStore {
    records: MemoryIdempotencyStore,
    pub(super) clock: SharedClock,
    faults: Faults,
    pub(super) late_duplicates: LateDuplicates,
}

impl MemoryPaymentStore {
    /// A store whose orders and payments live beside `records`' records, reading time from
    /// `clock`.
    pub fn new(records: MemoryIdempotencyStore, clock: SharedClock) -> Self {
        Self {
            records,
            clock,
            faults: Faults::none(),
            late_duplicates: LateDuplicates::default(),
        }
    }

    /// What a success its order cannot follow becomes (refunded, or marked refund-required
    /// where the deployment's PSP cannot refund).
    pub fn with_late_duplicates(mut self, policy: LateDuplicates) -> Self {
        self.late_duplicates = policy;
        self
    }

    /// The fault-injection hook (transaction conflicts), consulted before each transaction.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Models DynamoDB's eventually consistent reads from now on: a [`Read::Recent`] read of an
    /// order or payment written less than `window` ago returns it as it was before those
    /// writes (missing, if they created it) whenever `stale()` says so. [`Read::Latest`] reads
    /// are never stale. For tests and the simulation: DynamoDB Local's reads are always
    /// consistent, so only here can a caller's handling of a stale read be shown.
    pub fn lag_reads(&self, window: Duration, stale: impl Fn() -> bool + Send + Sync + 'static) {
        self.lock().payments.lag = Some(Lag {
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
            clock: self.clock.clone(),
            stale: Arc::new(stale),
            orders: Before::new(),
            payments: Before::new(),
        });
    }

    /// The idempotency store whose records this store shares.
    pub fn records(&self) -> &MemoryIdempotencyStore {
        &self.records
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, MemoryTables> {
        self.records.lock()
    }

    /// Where DynamoDB might answer a transaction with `TransactionConflict` (which DynamoDB
    /// Local never does), an armed fault does, before anything is checked or written.
    pub(super) fn transaction(&self, operation: &'static str) -> Result<(), StoreError> {
        if self.faults.take_conflict() {
            return Err(StoreError::Conflict {
                item: operation.to_owned(),
            });
        }
        Ok(())
    }
}

/// Why an order could not be created: it already exists (the source of the backend error,
/// as DynamoDB's failed `attribute_not_exists` is for the DynamoDB adapter).
#[derive(Debug, thiserror::Error)]
#[error("the order {order_id} already exists")]
struct OrderExists {
    order_id: String,
}

/// The record a stored payment carries, as a read returns it: a completed one answers with
/// the payment as it is now.
fn record_as_read(stored: &StoredPayment) -> Result<IdempotencyRecord, StoreError> {
    let mut record = stored.record.clone();
    if let RecordState::Completed { result } = &mut record.state {
        *result = encode_view(&stored.payment)?;
    }
    Ok(record)
}

/// The counter `counter` as the tables hold it, if it was ever counted.
fn tally<'a>(tables: &'a MemoryTables, counter: &Counter) -> Option<&'a Tally> {
    match counter {
        Counter::User { user, window } => tables.counters.get(&user_counter_key(user, *window)),
        Counter::Order { order_id, window } => tables
            .payments
            .order_tallies
            .get(order_id)
            .and_then(|windows| windows.get(window)),
    }
}

/// The payment `key` created, if any.
fn payment_of_key<'a>(tables: &'a MemoryTables, key: &RecordKey) -> Option<&'a StoredPayment> {
    tables.payments.payments.get(&payment_id_for(key.as_str()))
}

fn event_key(event: &EventMark) -> String {
    format!("webhook#{}#{}", event.provider, event.event_id)
}

/// Whether a dedup record for `key` is there and not expired (so a new insert is refused).
fn event_live(tables: &MemoryTables, key: &str, now_ms: i64) -> bool {
    if crate::mutations::active(crate::mutations::Mutation::ForgetWebhookEvents) {
        return false;
    }
    tables
        .events
        .get(key)
        .is_some_and(|expires_at_s| *expires_at_s >= now_ms.div_euclid(1000))
}

/// The fencing condition `#lease_token = :mine` (only an in-progress record has a token).
pub(super) fn leased_to(record: Option<&IdempotencyRecord>, token: &LeaseToken) -> bool {
    record
        .and_then(IdempotencyRecord::lease)
        .is_some_and(|lease| &lease.token == token)
}

/// Writes `after`'s status onto the stored payment the way DynamoDB's update does: a PSP id is
/// only ever set, never removed; the failure follows; the index key goes once final.
fn update_payment(stored: &mut StoredPayment, after: &Payment) {
    stored.payment.status = after.status;
    stored.payment.updated_at_ms = after.updated_at_ms;
    if let Some(id) = &after.provider_payment_id {
        stored.payment.provider_payment_id = Some(id.clone());
    }
    stored.payment.failure = after.failure.clone();
    stored.payment.progress = after.progress.clone();
    // As DynamoDB's update: the refund amounts are written only with a newly created automatic
    // refund of a late duplicate (a move decided on an older read must not undo a refund claimed
    // since), and the refund-required mark only when newly set.
    if after.duplicate_refund && !stored.payment.duplicate_refund {
        stored.payment.refund_pending = after.refund_pending;
        stored.payment.duplicate_refund = true;
    }
    if after.refund_required {
        stored.payment.refund_required = true;
    }
    if !after.status.in_flight() {
        stored.inflight = false;
    }
}

/// Whether the order may follow `after`: paid on success if free or already ours; released
/// otherwise only if ours and still processing.
fn order_may_follow(order: Option<&Order>, after: &Payment) -> bool {
    let Some(order) = order else {
        return false;
    };
    let ours = order.payment_id.as_deref() == Some(after.payment_id.as_str());
    match after.status.order_effect() {
        // A free order is paid only at the version this attempt paid: a late success must
        // never mark a newer, edited version paid.
        OrderEffect::Pay => {
            ours || (order.payment_state == OrderPaymentState::Unpaid
                && order.version == after.order_version)
        }
        OrderEffect::Release => ours && order.payment_state == OrderPaymentState::Processing,
        // A hold writes no order (`Transition::writes_order`).
        OrderEffect::Hold => false,
    }
}

/// The order follows its payment (see [`order_may_follow`] for when it may).
fn follow(order: &mut Order, after: &Payment, now_ms: i64) {
    if after.status == PaymentStatus::Succeeded {
        order.payment_state = OrderPaymentState::Paid;
        order.payment_id = Some(after.payment_id.clone());
    } else {
        order.payment_state = OrderPaymentState::Unpaid;
        order.payment_id = None;
    }
    order.updated_at_ms = now_ms;
}

/// Applies `transition` to `payment` (as read), completing the key's record held under
/// `complete` if given and, for a webhook, writing its event's dedup record: every condition
/// first, then every write.
pub(super) fn write_transition(
    tables: &mut MemoryTables,
    payment: &Payment,
    transition: &Transition,
    now_ms: i64,
    complete: Option<(&LeaseToken, FinishedBy)>,
    event: Option<&EventMark>,
    late_duplicates: LateDuplicates,
) -> Result<TransitionWrite, StoreError> {
    // As DynamoDB's: a completion that leaves the order does not read it either.
    let leave_order = complete.is_some_and(|(_, by)| by.leaves_order(payment, transition));
    let complete = complete.map(|(lease, _)| lease);
    let mut after = payment.after(transition, now_ms);
    let event = event.map(|e| (event_key(e), e.expires_at_s));
    if let Some((key, _)) = &event {
        if event_live(tables, key, now_ms) {
            return Ok(TransitionWrite::EventSeen);
        }
    }
    // Nothing is written unless the payment is still in the status it was read in; with
    // `Unchanged` too, since the record completed must describe the payment as it is. A move
    // also needs the PSP id as read (as DynamoDB's condition).
    let stored = tables.payments.payments.get(&payment.payment_id);
    let as_read = |stored: &&StoredPayment| {
        stored.payment.status == payment.status
            && (*transition == Transition::Unchanged
                || stored.payment.provider_payment_id == payment.provider_payment_id)
    };
    let refused = if !stored.is_some_and(|stored| as_read(&stored)) {
        Some(TransitionWrite::PaymentMoved)
    } else {
        complete
            .filter(|lease| !leased_to(stored.map(|stored| &stored.record), lease))
            .map(|_| TransitionWrite::RecordRefused)
    };
    if let Some(refused) = refused {
        // A finish whose answer was lost and that was sent again meets the record completed
        // under this very lease, the payment as it made it: that is this finish, written.
        let own = complete.zip(stored).filter(|(lease, stored)| {
            stored.completed_by.as_ref() == Some(*lease)
                && stored.payment.status == after.status
                && !crate::idempotency::own_writes_forgotten()
        });
        return Ok(match own {
            Some((_, stored)) => TransitionWrite::Written(Box::new(stored.payment.clone())),
            None => refused,
        });
    }
    let applies = matches!(transition, Transition::Apply { .. });
    // A move that keeps holding the order writes none, as DynamoDB's.
    let leave_order = leave_order || (applies && !transition.writes_order());
    let order_follows = applies
        && !leave_order
        && order_may_follow(tables.payments.orders.get(&payment.order_id), &after);
    let duplicate = (applies && !leave_order && !order_follows)
        .then(|| crate::domain::duplicate_refund_for(payment, &mut after, now_ms, late_duplicates))
        .flatten();
    if applies && !leave_order && !order_follows {
        // The order is held or paid by another attempt: the payment still moves, the order
        // stays as it is.
        crate::adapters::settling_alone(payment, &after);
    }

    if let Some(stored) = tables.payments.payment_mut(&payment.payment_id) {
        if applies {
            update_payment(stored, &after);
        }
        if let Some(lease) = complete {
            // Completing clears the lease; the result is the payment as it is when read.
            stored.record.state = RecordState::Completed {
                result: String::new(),
            };
            stored.completed_by = Some(lease.clone());
        }
    }
    if let Some(refund) = duplicate {
        tables
            .payments
            .refunds
            .entry(refund.refund_id.clone())
            .or_insert(StoredRefund {
                refund,
                inflight: true,
            });
    }
    if order_follows {
        if let Some(order) = tables.payments.order_mut(&payment.order_id) {
            follow(order, &after, now_ms);
        }
    }
    if let Some((key, expires_at_s)) = event {
        tables.events.insert(key, expires_at_s);
    }
    Ok(TransitionWrite::Written(Box::new(after)))
}

/// An in-flight cursor: the (check_at_ms, payment id) position of the last id returned.
fn encode_cursor(created_at_ms: i64, payment_id: &str) -> String {
    format!("{created_at_ms}#{payment_id}")
}

fn decode_cursor(raw: &str) -> Result<(i64, String), StoreError> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        key: "cursor".into(),
        reason: reason.to_owned(),
    };
    let (created_at_ms, payment_id) = raw
        .split_once('#')
        .ok_or_else(|| corrupt("not an in-flight cursor"))?;
    let created_at_ms = created_at_ms
        .parse()
        .map_err(|_| corrupt("not an in-flight cursor"))?;
    Ok((created_at_ms, payment_id.to_owned()))
}

#[async_trait]
impl OrderStore for MemoryPaymentStore {
    async fn get_holder(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        ChargeStore::get_payment(self, payment_id).await
    }

    async fn create_order(&self, order: &Order) -> Result<(), StoreError> {
        let mut tables = self.lock();
        if let Some(existing) = tables.payments.orders.get(&order.order_id) {
            // The order exactly as this create wrote it: its earlier try, whose answer was lost.
            if existing == order && !crate::idempotency::own_writes_forgotten() {
                return Ok(());
            }
            return Err(StoreError::Backend {
                operation: "create_order",
                source: Box::new(OrderExists {
                    order_id: order.order_id.clone(),
                }),
            });
        }
        tables.payments.insert_order(order.clone());
        Ok(())
    }

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError> {
        Ok(self.lock().payments.orders.get(order_id).cloned())
    }

    async fn revise_order(&self, read: &Order, next: &Order) -> Result<ReviseOutcome, StoreError> {
        let mut tables = self.lock();
        match tables.payments.order_mut(&read.order_id) {
            Some(order)
                if order.version == read.version
                    && order.payment_state == OrderPaymentState::Unpaid =>
            {
                order.items = next.items.clone();
                order.amount = next.amount;
                order.version = next.version;
                order.updated_at_ms = next.updated_at_ms;
                Ok(ReviseOutcome::Revised)
            }
            now => Ok(ReviseOutcome::refused(next, now.map(|order| order.clone()))),
        }
    }
}

#[async_trait]
impl ChargeStore for MemoryPaymentStore {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn load_for_charge(
        &self,
        record: &RecordKey,
        order_id: &str,
        read: Read,
    ) -> Result<(Option<IdempotencyRecord>, Option<Order>), StoreError> {
        let tables = self.lock();
        let record = tables
            .payments
            .payment_as(&payment_id_for(record.as_str()), read)
            .as_ref()
            .map(record_as_read)
            .transpose()?;
        Ok((record, tables.payments.order_as(order_id, read)))
    }

    async fn begin_attempt(
        &self,
        claim: &Claim,
        order: &Order,
        payment: &Payment,
        counts: &[AttemptCount],
    ) -> Result<BeginOutcome, StoreError> {
        self.transaction("begin_attempt")?;
        let now_ms = self.clock.now_ms();
        if payment.payment_id != payment_id_for(claim.key.as_str()) {
            return Err(StoreError::Corrupt {
                key: claim.key.to_string(),
                reason: format!("payment {} is not the key's", payment.payment_id),
            });
        }
        let order_counters = counts
            .iter()
            .filter_map(|count| match &count.counter {
                Counter::Order { order_id, .. } => Some(order_id),
                Counter::User { .. } => None,
            })
            .collect::<Vec<_>>();
        if order_counters.len() > 1 || order_counters.iter().any(|id| **id != order.order_id) {
            return Err(StoreError::Corrupt {
                key: order.order_id.clone(),
                reason: format!("an attempt on it counted against orders {order_counters:?}"),
            });
        }
        let mut tables = self.lock();
        // The payment carries the key's record: claiming the key is creating the payment.
        if let Some(existing) = payment_of_key(&tables, &claim.key) {
            return Ok(BeginOutcome::KeyTaken(record_as_read(existing)?));
        }
        let current = tables.payments.orders.get(&order.order_id);
        let reservable = current.is_some_and(|now| now.reservable_as_read(order));
        if !reservable {
            return Ok(BeginOutcome::OrderChanged(current.cloned()));
        }
        // As DynamoDB's condition: a counter that a decline created holds no attempts yet.
        let full = counts.iter().position(|count| {
            tally(&tables, &count.counter).is_some_and(|tally| {
                tally.attempts >= count.max_attempts || tally.declines >= count.max_declines
            })
        });
        if let Some(full) = full {
            return Ok(BeginOutcome::OverLimit(full));
        }
        for count in counts {
            let tally = match &count.counter {
                Counter::User { user, window } => tables
                    .counters
                    .entry(user_counter_key(user, *window))
                    .or_insert_with(|| Tally::until(count.expires_at_s)),
                Counter::Order { order_id, window } => {
                    // The same update drops the previous window's counter.
                    let windows = tables
                        .payments
                        .order_tallies
                        .entry(order_id.clone())
                        .or_default();
                    windows.remove(&(window - 1));
                    windows.entry(*window).or_default()
                }
            };
            tally.attempts += 1;
            tally.expires_at_s = count.expires_at_s;
        }
        if let Some(reserved) = tables.payments.order_mut(&order.order_id) {
            reserved.payment_state = OrderPaymentState::Processing;
            reserved.payment_id = Some(payment.payment_id.clone());
            reserved.updated_at_ms = now_ms;
        }
        tables.payments.insert_payment(StoredPayment {
            payment: payment.clone(),
            record: claim.record(now_ms),
            inflight: payment.status.in_flight(),
            completed_by: None,
        });
        Ok(BeginOutcome::Begun)
    }

    async fn count_decline(&self, counter: &Counter, expires_at_s: i64) -> Result<(), StoreError> {
        let mut tables = self.lock();
        let tally = match counter {
            Counter::User { user, window } => tables
                .counters
                .entry(user_counter_key(user, *window))
                .or_insert_with(|| Tally::until(expires_at_s)),
            Counter::Order { order_id, window } => {
                // As DynamoDB's condition: an order that no longer exists is not created again.
                if !tables.payments.orders.contains_key(order_id) {
                    return Ok(());
                }
                tables
                    .payments
                    .order_tallies
                    .entry(order_id.clone())
                    .or_default()
                    .entry(*window)
                    .or_default()
            }
        };
        tally.declines += 1;
        tally.expires_at_s = expires_at_s;
        Ok(())
    }

    async fn resume_attempt(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        payment: &Payment,
    ) -> Result<ResumeOutcome, StoreError> {
        self.transaction("resume_attempt")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        let current = payment_of_key(&tables, record);
        // Fenced on the token seen, on this very attempt, still in progress.
        if !(leased_to(current.map(|c| &c.record), seen)
            && current.is_some_and(|c| c.payment.payment_id == payment.payment_id))
        {
            return Ok(ResumeOutcome::KeyMoved(
                current.map(record_as_read).transpose()?,
            ));
        }
        // The attempt must still be processing: a webhook or reconcile that settled it since it
        // was read has released (or paid) the order, which must not be reserved again for it.
        if !current.is_some_and(|c| c.payment.status == PaymentStatus::Processing) {
            return Ok(ResumeOutcome::KeyMoved(None));
        }
        let order = tables.payments.orders.get(&payment.order_id);
        let reservable = order.is_some_and(|order| {
            let ours = order.payment_state == OrderPaymentState::Processing
                && order.payment_id.as_deref() == Some(payment.payment_id.as_str());
            order.version == payment.order_version
                && (ours || order.payment_state == OrderPaymentState::Unpaid)
        });
        if !reservable {
            return Ok(ResumeOutcome::OrderChanged(order.cloned()));
        }
        if let Some(order) = tables.payments.order_mut(&payment.order_id) {
            order.payment_state = OrderPaymentState::Processing;
            order.payment_id = Some(payment.payment_id.clone());
            order.updated_at_ms = now_ms;
        }
        if let Some(stored) = tables.payments.payment_mut(&payment.payment_id) {
            // Only the lease moves: the attempt identity (hence the PSP key) is never rewritten.
            stored.record.state = RecordState::InProgress {
                lease: lease.clone(),
            };
            stored.payment.psp_maybe_reached |= payment.psp_maybe_reached;
        }
        Ok(ResumeOutcome::Resumed)
    }

    async fn read_payment(
        &self,
        payment_id: &str,
        read: Read,
    ) -> Result<Option<Payment>, StoreError> {
        Ok(self
            .lock()
            .payments
            .payment_as(payment_id, read)
            .map(|stored| stored.payment))
    }

    async fn finish_attempt(
        &self,
        payment: &Payment,
        transition: &Transition,
        lease: &LeaseToken,
        by: FinishedBy,
    ) -> Result<SettleOutcome, StoreError> {
        self.transaction("finish_attempt")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        write_transition(
            &mut tables,
            payment,
            transition,
            now_ms,
            Some((lease, by)),
            None,
            self.late_duplicates,
        )?
        .finished(payment)
    }

    async fn release_unsent(
        &self,
        payment: &Payment,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        self.transaction("release_unsent")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        let record_key = RecordKey::from_stored(payment.idempotency_pk.clone());
        let stored = tables.payments.payments.get(&payment.payment_id);
        if !leased_to(stored.map(|stored| &stored.record), lease) {
            return Err(StoreError::LeaseLost { key: record_key });
        }
        // The order is released as a failed attempt would release it.
        let released = Payment {
            status: PaymentStatus::Failed,
            ..payment.clone()
        };
        if !order_may_follow(tables.payments.orders.get(&payment.order_id), &released) {
            return Err(StoreError::Corrupt {
                key: payment.payment_id.clone(),
                reason: "release_unsent cancelled: the order is not held by this attempt".into(),
            });
        }
        if let Some(stored) = tables.payments.payment_mut(&payment.payment_id) {
            // The lease lapses now, so a retry with the same key takes the same attempt over.
            if let RecordState::InProgress { lease } = &mut stored.record.state {
                lease.until_ms = Lease::RELEASED_UNTIL_MS;
            }
        }
        if let Some(order) = tables.payments.order_mut(&payment.order_id) {
            follow(order, &released, now_ms);
        }
        Ok(())
    }

    async fn settle(
        &self,
        payment: &Payment,
        transition: &Transition,
        event: Option<&EventMark>,
    ) -> Result<SettleOutcome, StoreError> {
        self.transaction("settle")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        Ok(write_transition(
            &mut tables,
            payment,
            transition,
            now_ms,
            None,
            event,
            self.late_duplicates,
        )?
        .settled())
    }

    async fn charge_record(
        &self,
        key: &RecordKey,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        payment_of_key(&self.lock(), key)
            .map(record_as_read)
            .transpose()
    }

    async fn take_over_charge(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<TakeoverOutcome, StoreError> {
        let mut tables = self.lock();
        let Some(stored) = tables.payments.payment_mut(&payment_id_for(key.as_str())) else {
            return Ok(TakeoverOutcome::Lost(None));
        };
        if !leased_to(Some(&stored.record), seen) {
            return Ok(TakeoverOutcome::refused(
                lease,
                Some(record_as_read(stored)?),
            ));
        }
        stored.record.state = RecordState::InProgress {
            lease: lease.clone(),
        };
        Ok(TakeoverOutcome::TakenOver(record_as_read(stored)?))
    }

    async fn record_event(&self, event: &EventMark) -> Result<bool, StoreError> {
        let now_ms = self.clock.now_ms();
        let key = event_key(event);
        let mut tables = self.lock();
        if event_live(&tables, &key, now_ms) {
            return Ok(false);
        }
        tables.events.insert(key, event.expires_at_s);
        Ok(true)
    }
}

#[async_trait]
impl InflightScan for MemoryPaymentStore {
    async fn list_inflight(
        &self,
        due_at_ms: i64,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        let tables = self.lock();
        let payments = tables
            .payments
            .payments
            .values()
            .filter(|stored| stored.inflight)
            .map(|stored| {
                (
                    stored.payment.check_at_ms,
                    stored.payment.payment_id.as_str(),
                )
            });
        let refunds = tables
            .payments
            .refunds
            .values()
            .filter(|stored| stored.inflight)
            .map(|stored| (stored.refund.check_at_ms, stored.refund.refund_id.as_str()));
        let mut inflight: Vec<(i64, &str)> = payments
            .chain(refunds)
            .filter(|(check_at_ms, _)| *check_at_ms <= due_at_ms)
            .filter(|(check_at_ms, id)| {
                after.as_ref().is_none_or(|(after_ms, after_id)| {
                    (*check_at_ms, *id) > (*after_ms, after_id.as_str())
                })
            })
            .collect();
        inflight.sort_unstable();
        // DynamoDB refuses a limit of 0; a page of one still moves the scan forward.
        let page_len = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
        let next = if inflight.len() > page_len {
            inflight
                .get(page_len - 1)
                .map(|(check_at_ms, id)| encode_cursor(*check_at_ms, id))
        } else {
            None
        };
        inflight.truncate(page_len);
        Ok((
            inflight.into_iter().map(|(_, id)| id.to_owned()).collect(),
            next,
        ))
    }

    async fn defer_check(&self, payment_id: &str, check_at_ms: i64) -> Result<(), StoreError> {
        let mut tables = self.lock();
        if is_refund_id(payment_id) {
            if let Some(stored) = tables.payments.refunds.get_mut(payment_id) {
                if stored.inflight {
                    stored.refund.check_at_ms = check_at_ms;
                }
            }
            return Ok(());
        }
        if let Some(stored) = tables.payments.payment_mut(payment_id) {
            if stored.inflight {
                stored.payment.check_at_ms = check_at_ms;
            }
        }
        Ok(())
    }
}

/// The payment amounts a refund moving from `from` to `to` changes: (refunded, pending).
fn apply_refund_amounts(payment: &mut Payment, from: RefundStatus, to: RefundStatus, amount: i64) {
    let (refunded, pending) = refund_amounts_delta(from, to, amount);
    payment.amount_refunded += refunded;
    payment.refund_pending += pending;
}

#[async_trait]
impl RefundStore for MemoryPaymentStore {
    fn refund_now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn load_for_refund(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        let now_ms = self.clock.now_ms();
        let tables = self.lock();
        let record = tables
            .records
            .get(record)
            .filter(|r| !r.is_expired_at(now_ms))
            .cloned();
        let payment = tables
            .payments
            .payments
            .get(payment_id)
            .map(|stored| stored.payment.clone());
        Ok((record, payment))
    }

    async fn begin_refund(
        &self,
        claim: &Claim,
        payment: &Payment,
        refund: &Refund,
    ) -> Result<BeginRefundOutcome, StoreError> {
        self.transaction("begin_refund")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        if let Some(existing) = tables.records.get(&claim.key) {
            if !existing.is_expired_at(now_ms) {
                return Ok(BeginRefundOutcome::KeyTaken(existing.clone()));
            }
        }
        let current = tables
            .payments
            .payments
            .get(&payment.payment_id)
            .map(|stored| stored.payment.clone());
        // The payment's refund amounts exactly as read, so the sum checked when reading holds.
        let as_read = current.as_ref().is_some_and(|now| {
            now.status == PaymentStatus::Succeeded
                && now.refund_count == payment.refund_count
                && now.amount_refunded == payment.amount_refunded
                && now.refund_pending == payment.refund_pending
                && now.amount_captured() == payment.amount_captured()
        });
        let fits = payment.amount_refunded + payment.refund_pending + refund.amount
            <= payment.amount_captured();
        if !(as_read && fits) {
            return Ok(BeginRefundOutcome::PaymentChanged(current.map(Box::new)));
        }
        if tables.payments.refunds.contains_key(&refund.refund_id) {
            return Err(StoreError::Corrupt {
                key: refund.refund_id.clone(),
                reason: "begin_refund cancelled: the refund already exists".into(),
            });
        }
        tables
            .records
            .insert(claim.key.clone(), claim.record(now_ms));
        if let Some(stored) = tables.payments.payment_mut(&payment.payment_id) {
            stored.payment.refund_count += 1;
            stored.payment.refund_pending += refund.amount;
            // As DynamoDB's update does: the claim is a change of the payment.
            stored.payment.updated_at_ms = now_ms;
        }
        tables.payments.refunds.insert(
            refund.refund_id.clone(),
            StoredRefund {
                refund: refund.clone(),
                inflight: true,
            },
        );
        Ok(BeginRefundOutcome::Begun)
    }

    async fn resume_refund(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        refund: &Refund,
    ) -> Result<ResumeOutcome, StoreError> {
        self.transaction("resume_refund")?;
        let mut tables = self.lock();
        let current = tables.records.get(record);
        if !(leased_to(current, seen) && current.is_some_and(|r| r.attempt_id == refund.refund_id))
        {
            return Ok(ResumeOutcome::KeyMoved(current.cloned()));
        }
        let now_ms = self.clock.now_ms();
        let Some(stored) = tables
            .payments
            .refunds
            .get(&refund.refund_id)
            .filter(|stored| stored.refund.status == RefundStatus::Pending)
        else {
            return Ok(ResumeOutcome::KeyMoved(None));
        };
        // Nobody else may be sending it: reconcile may hold it although the record lapsed.
        if stored
            .refund
            .lease_held_by_other(Some(seen.as_str()), now_ms)
        {
            return Ok(ResumeOutcome::LeaseHeld {
                until_ms: stored.refund.lease.as_ref().map_or(0, |l| l.until_ms),
            });
        }
        if let Some(current) = tables.records.get_mut(record) {
            current.state = RecordState::InProgress {
                lease: lease.clone(),
            };
        }
        if let Some(stored) = tables.payments.refunds.get_mut(&refund.refund_id) {
            stored.refund.lease = Some(lease.into());
            stored.refund.psp_maybe_reached |= refund.psp_maybe_reached;
        }
        Ok(ResumeOutcome::Resumed)
    }

    async fn get_refund(&self, refund_id: &str) -> Result<Option<Refund>, StoreError> {
        Ok(self
            .lock()
            .payments
            .refunds
            .get(refund_id)
            .map(|stored| stored.refund.clone()))
    }

    async fn refunded_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        crate::ports::ChargeStore::get_payment(self, payment_id).await
    }

    async fn refunds_of(&self, payment: &Payment) -> Result<Vec<Refund>, StoreError> {
        let tables = self.lock();
        let numbers = (1..=payment.refund_count).map(|n| n.to_string()).chain(
            payment
                .duplicate_refund
                .then(|| crate::domain::DUPLICATE_REFUND_NUMBER.to_owned()),
        );
        Ok(numbers
            .filter_map(|number| {
                let id = crate::domain::refund_id_for(&payment.payment_id, &number);
                tables
                    .payments
                    .refunds
                    .get(&id)
                    .map(|stored| stored.refund.clone())
            })
            .collect())
    }

    async fn write_refund(
        &self,
        refund: &Refund,
        step: &RefundTransition,
        record: RefundRecordWrite<'_>,
        fence: Option<SenderFence<'_>>,
        event: Option<&EventMark>,
    ) -> Result<RefundSettleOutcome, StoreError> {
        self.transaction("write_refund")?;
        let now_ms = self.clock.now_ms();
        let after = refund.after(step, now_ms);
        let view = serde_json::to_string(&after.view()).map_err(|e| StoreError::Backend {
            operation: "encode refund view",
            source: Box::new(e),
        })?;
        let mut tables = self.lock();
        let event = event.map(|e| (event_key(e), e.expires_at_s));
        if let Some((key, _)) = &event {
            if event_live(&tables, key, now_ms) {
                return Ok(RefundSettleOutcome::Duplicate);
            }
        }
        let read_status_holds = tables
            .payments
            .refunds
            .get(&refund.refund_id)
            .is_some_and(|stored| stored.refund.status == refund.status);
        if !read_status_holds {
            return Ok(RefundSettleOutcome::Moved);
        }
        let record_key = refund.idempotency_pk.clone().map(RecordKey::from_stored);
        if let Some(fence) = fence {
            let holds = tables
                .payments
                .refunds
                .get(&refund.refund_id)
                .and_then(|stored| stored.refund.lease.as_ref())
                .is_some_and(|lease| lease.is(fence.lease.as_str()));
            if !holds {
                return Err(StoreError::LeaseLost {
                    key: RecordKey::from_stored(refund.refund_id.clone()),
                });
            }
        }
        let stored_record = record_key.as_ref().and_then(|key| tables.records.get(key));
        let mut extend = None;
        let (write_record, expires_at_s) = match record {
            RefundRecordWrite::Complete {
                lease,
                expires_at_s,
            } => {
                if !leased_to(stored_record, lease) {
                    return Err(StoreError::LeaseLost {
                        key: record_key
                            .unwrap_or_else(|| RecordKey::from_stored(refund.refund_id.clone())),
                    });
                }
                (true, expires_at_s)
            }
            RefundRecordWrite::Mirror { expires_at_s } => (
                stored_record.is_some_and(|r| {
                    r.status() == RecordStatus::Completed && r.attempt_id == refund.refund_id
                }),
                expires_at_s,
            ),
            RefundRecordWrite::Extend { expires_at_s } => {
                extend = stored_record
                    .is_some_and(|r| r.attempt_id == refund.refund_id)
                    .then_some(expires_at_s);
                (false, 0)
            }
            RefundRecordWrite::Keep => (false, 0),
        };
        if let RefundTransition::Apply { status, .. } = step {
            if let Some(stored) = tables.payments.payment_mut(&refund.payment_id) {
                apply_refund_amounts(&mut stored.payment, refund.status, *status, refund.amount);
                stored.payment.updated_at_ms = now_ms;
            }
            if let Some(stored) = tables.payments.refunds.get_mut(&refund.refund_id) {
                // The write moves the status, the PSP's id and the failure; who holds the sender
                // lease is the store's, as DynamoDB's update leaves it.
                let lease = stored.refund.lease.take();
                stored.refund = Refund {
                    lease,
                    psp_maybe_reached: stored.refund.psp_maybe_reached,
                    ..after.clone()
                };
                stored.inflight = stored.inflight && after.status.watched();
            }
        }
        // A sender's write whose call's outcome is known gives its lease back.
        if fence.is_some_and(|fence| fence.give_back) {
            if let Some(stored) = tables.payments.refunds.get_mut(&refund.refund_id) {
                stored.refund.lease = None;
            }
        }
        if write_record {
            if let Some(key) = &record_key {
                if let Some(record) = tables.records.get_mut(key) {
                    record.state = RecordState::Completed { result: view };
                    record.expires_at_s = expires_at_s;
                }
            }
        }
        if let (Some(expires_at_s), Some(key)) = (extend, &record_key) {
            if let Some(record) = tables.records.get_mut(key) {
                record.expires_at_s = expires_at_s;
            }
        }
        if let Some((key, expires_at_s)) = event {
            tables.events.insert(key, expires_at_s);
        }
        let now = tables
            .payments
            .refunds
            .get(&refund.refund_id)
            .map_or(after, |stored| stored.refund.clone());
        Ok(RefundSettleOutcome::Settled(Box::new(now)))
    }

    async fn take_refund_lease(
        &self,
        refund: &Refund,
        lease: &Lease,
    ) -> Result<RefundLeaseOutcome, StoreError> {
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        let Some(stored) = tables.payments.refunds.get_mut(&refund.refund_id) else {
            return Ok(RefundLeaseOutcome::Moved(None));
        };
        let current = stored.refund.clone();
        // Fenced on the lease as read, as a takeover is: none, or one that lapsed.
        let takeable = current.status == RefundStatus::Pending
            && current.status == refund.status
            && current.lease.as_ref().map(|l| &l.token) == refund.lease.as_ref().map(|l| &l.token)
            && current.lease.as_ref().is_none_or(|l| l.until_ms <= now_ms);
        if !takeable {
            return Ok(crate::adapters::refund_lease_refused(
                Some(current),
                lease,
                now_ms,
            ));
        }
        // Its holder may have called the PSP before its lease lapsed.
        stored.refund.psp_maybe_reached |= current.lease.is_some();
        stored.refund.lease = Some(lease.into());
        Ok(RefundLeaseOutcome::Taken(Box::new(stored.refund.clone())))
    }

    async fn stop_watching(&self, refund: &Refund) -> Result<(), StoreError> {
        let mut tables = self.lock();
        if let Some(stored) = tables.payments.refunds.get_mut(&refund.refund_id) {
            if stored.refund.status == RefundStatus::Succeeded {
                stored.inflight = false;
            }
        }
        Ok(())
    }

    async fn cancel_unsent_refund(
        &self,
        refund: &Refund,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        self.transaction("cancel_unsent_refund")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        let record_key = RecordKey::from_stored(refund.idempotency_pk.clone().unwrap_or_default());
        let sends = tables
            .payments
            .refunds
            .get(&refund.refund_id)
            .and_then(|stored| stored.refund.lease.as_ref())
            .is_some_and(|held| held.is(lease.as_str()));
        if !leased_to(tables.records.get(&record_key), lease) || !sends {
            return Err(StoreError::LeaseLost { key: record_key });
        }
        let pending = tables
            .payments
            .refunds
            .get(&refund.refund_id)
            .is_some_and(|stored| stored.refund.status == RefundStatus::Pending);
        if !pending {
            // Settled meanwhile (a webhook): as DynamoDB's, the refund's condition refuses it.
            return Err(StoreError::LeaseLost { key: record_key });
        }
        tables.records.remove(&record_key);
        if let Some(stored) = tables.payments.payment_mut(&refund.payment_id) {
            apply_refund_amounts(
                &mut stored.payment,
                RefundStatus::Pending,
                RefundStatus::Canceled,
                refund.amount,
            );
            stored.payment.updated_at_ms = now_ms;
        }
        if let Some(stored) = tables.payments.refunds.get_mut(&refund.refund_id) {
            stored.refund.status = RefundStatus::Canceled;
            stored.refund.updated_at_ms = now_ms;
            stored.refund.lease = None;
            stored.inflight = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inflight_cursor_reads_back_and_a_foreign_one_is_refused() {
        let raw = encode_cursor(1_700_000_000_000, "pay_a#b");
        assert_eq!(
            decode_cursor(&raw).unwrap(),
            (1_700_000_000_000, "pay_a#b".to_owned())
        );
        assert!(matches!(
            decode_cursor("{\"pk\":{\"S\":\"payment#x\"}}"),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
