//! The fault layers: the embedded store and the PSP model, each behind a layer that adds
//! latency, fails calls, and kills the invocation between any two calls — before a call, or
//! after it took effect.
//!
//! A killed invocation never returns: its future waits for ever, and the driver drops it at
//! the invocation's deadline, as Lambda kills a function at its timeout. Nothing after the
//! kill point runs.
//!
//! Calls take time: each store call and each PSP call takes a drawn latency there and another
//! back (heavy-tailed, per seed; see [`crate::world::World::store_leg`]), and waits for it on
//! the virtual clock, so every other invocation can act while a call is in flight. A write is
//! applied between its two legs. A PSP request that would arrive after its caller's timeout is
//! never applied: the caller had given up, as a client's timeout closes the connection.
//!
//! The driver runs each invocation inside [`invoke`], which marks it slow now and then: a slow
//! invocation is not killed at its deadline, and stalls before a store call now and then, so it
//! outlives its lease and keeps going until a fenced write refuses it.

use crate::world::{FaultKind, SharedWorld};
use async_trait::async_trait;
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore};
use payonce::adapters::psp::transport::{CallFailure, PspTransport, WireBody, WireCall, WireReply};
use payonce::domain::{Order, Payment, PaymentOperation, Refund, RefundTransition, Transition};
use payonce::idempotency::{
    Claim, ClaimOutcome, IdempotencyRecord, IdempotencyStore, Lease, LeaseToken, RecordKey,
    StoreError, TakeoverOutcome,
};
use payonce::ports::{
    AttemptCount, BeginOperationOutcome, BeginOutcome, BeginRefundOutcome, ChargeStore, Counter,
    EventMark, FinishedBy, InflightScan, OperationRecordEnd, OperationStore, OrderStore, Read,
    RefundLeaseOutcome, RefundRecordWrite, RefundSettleOutcome, RefundStore, ResumeOutcome,
    ReviseOutcome, SettleOutcome,
};
use payonce_fake_psp::model::{Delivery, FakeModel, ModelEvent, WireRequest};
use payonce_fake_psp::Provider;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Waits for ever: the invocation is dead.
async fn die<T>() -> T {
    std::future::pending().await
}

/// The invocation a call is made in, as the driver started it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Invocation {
    /// Which one (0: one the checker does not follow).
    pub id: u64,
    /// Whether it may outlive its deadline and lease (see [`FaultKind::SlowHolder`]).
    pub slow: bool,
}

tokio::task_local! {
    static INVOCATION: Invocation;
}

/// How much longer than its deadline a slow invocation may run before it is killed.
const SLOW_GRACE: Duration = Duration::from_secs(10 * 60);

/// Runs `work` as one invocation with a deadline of `timeout`: killed (dropped) at it, unless
/// the world makes it slow, when it may run past it (and past its lease). `None`: killed.
pub async fn invoke<F: std::future::Future>(
    world: &crate::world::World,
    timeout: Duration,
    work: F,
) -> Option<F::Output> {
    invoke_as(world, 0, timeout, work).await
}

/// [`invoke`] as invocation `id`, whose writes the store notes (see
/// [`FaultyStore::finished_by`]).
pub async fn invoke_as<F: std::future::Future>(
    world: &crate::world::World,
    id: u64,
    timeout: Duration,
    work: F,
) -> Option<F::Output> {
    let slow = world.strikes(FaultKind::SlowHolder);
    let limit = if slow { timeout + SLOW_GRACE } else { timeout };
    tokio::time::timeout(limit, INVOCATION.scope(Invocation { id, slow }, work))
        .await
        .ok()
}

fn current_invocation() -> Invocation {
    INVOCATION.try_with(|i| *i).unwrap_or_default()
}

/// How DynamoDB answers a write sent again by the SDK after its answer was lost.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// One item (PutItem, UpdateItem, DeleteItem): the retry meets the write it already made.
    OneItem,
    /// A TransactWriteItems: the SDK's client request token makes the retry answer as the
    /// first did, without writing again.
    Transaction,
}

/// The embedded stores behind the fault layer. Clones share everything.
#[derive(Clone, Debug)]
pub struct FaultyStore {
    world: SharedWorld,
    payments: MemoryPaymentStore,
    records: MemoryIdempotencyStore,
    begun: Arc<Mutex<Vec<Payment>>>,
    marks: Arc<Mutex<BTreeMap<String, u32>>>,
    finished: Arc<Mutex<BTreeMap<u64, Finished>>>,
    left_by_charge: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

/// What an invocation's own write completed: the key's attempt, or a refund, and its status
/// then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finished {
    /// A charge's record completed with the payment in this status.
    Payment(String, payonce::domain::PaymentStatus),
    /// A refund's record completed with the refund in this status.
    Refund(String, payonce::domain::RefundStatus),
}

/// Whether a store call writes (only writes can conflict).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

impl FaultyStore {
    /// The layer over `payments` (and the records it shares).
    pub fn new(world: SharedWorld, payments: MemoryPaymentStore) -> Self {
        let records = payments.records().clone();
        Self {
            world,
            payments,
            records,
            begun: Arc::default(),
            marks: Arc::default(),
            finished: Arc::default(),
            left_by_charge: Arc::default(),
        }
    }

    /// The payments whose own charge finished them with a success that left their order stored
    /// `processing` under them: the only ones that may hold an order so.
    pub fn left_by_charge(&self) -> std::collections::BTreeSet<String> {
        self.left_by_charge
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What invocation `id`'s own writes completed, if any (the last of them).
    pub fn finished_by(&self, id: u64) -> Option<Finished> {
        self.finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    fn note_finished(&self, finished: Finished) {
        let id = current_invocation().id;
        if id != 0 {
            self.finished
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, finished);
        }
    }

    /// Per webhook event id: how many times a write marked it processed (its effect applied in
    /// the same transaction, or recorded as changing nothing), counting writes whose invocation
    /// died right after.
    pub fn event_marks(&self) -> BTreeMap<String, u32> {
        self.marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn mark(&self, event: &EventMark) {
        *self
            .marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(event.event_id.clone())
            .or_insert(0) += 1;
    }

    /// The store without faults (for the checker).
    pub fn inner(&self) -> &MemoryPaymentStore {
        &self.payments
    }

    /// Every attempt the store ever began, in order.
    pub fn begun(&self) -> Vec<Payment> {
        self.begun
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What happens before the call: a slow invocation's stall, the way there, then maybe a
    /// kill, a conflict or throttling.
    async fn before(&self, operation: &'static str, access: Access) -> Result<(), StoreError> {
        if current_invocation().slow && self.world.chance(0.25) {
            let stall = self.world.millis(5_000, 180_000);
            self.world.trace(format!(
                "invocation stalls {} ms before {operation}",
                stall.as_millis()
            ));
            tokio::time::sleep(stall).await;
        }
        let there = self.world.store_leg();
        if !there.is_zero() {
            tokio::time::sleep(there).await;
        }
        if self.world.strikes(FaultKind::StoreLatency) {
            tokio::time::sleep(self.world.millis(1, 40)).await;
        }
        if self.world.strikes(FaultKind::Crash) {
            self.world.trace(format!("crash before {operation}"));
            die::<()>().await;
        }
        if access == Access::Write && self.world.strikes(FaultKind::StoreConflict) {
            return Err(StoreError::Conflict {
                item: operation.to_owned(),
            });
        }
        if self.world.strikes(FaultKind::StoreThrottle) {
            return Err(StoreError::Backend {
                operation,
                source: "ProvisionedThroughputExceededException (simulated)".into(),
            });
        }
        Ok(())
    }

    /// What happens after the call took effect: the way back, then maybe a kill (the write
    /// stays).
    async fn after<T>(&self, operation: &'static str, result: T) -> T {
        let back = self.world.store_leg();
        if !back.is_zero() {
            tokio::time::sleep(back).await;
        }
        if self.world.strikes(FaultKind::Crash) {
            self.world.trace(format!("crash after {operation}"));
            die::<()>().await;
        }
        result
    }

    /// One write `sent` as DynamoDB receives it: applied between the two legs; now and then its
    /// answer is lost after it applied, and the SDK either sends it again (answered as `sent`
    /// says) or gives up with an error.
    async fn write<T, F, Fut>(
        &self,
        operation: &'static str,
        sent: Sent,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: Fn() -> Fut + Send,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send,
        T: Send,
    {
        self.before(operation, Access::Write).await?;
        let first = call().await;
        let result = if first.is_ok() && self.world.strikes(FaultKind::StoreLostAnswer) {
            if self.world.chance(0.3) {
                self.world.trace(format!(
                    "{operation} applied, its answer lost; the SDK gives up"
                ));
                Err(StoreError::Backend {
                    operation,
                    source: "the answer was lost after the write applied (simulated)".into(),
                })
            } else if sent == Sent::OneItem {
                self.world.trace(format!(
                    "{operation} applied, its answer lost; the SDK sends it again"
                ));
                let again = self.world.store_leg();
                if !again.is_zero() {
                    tokio::time::sleep(again * 2).await;
                }
                call().await
            } else {
                first
            }
        } else {
            first
        };
        if result.is_ok() {
            self.world.note_write(current_invocation().id);
        }
        self.after(operation, result).await
    }
}

#[async_trait]
impl OrderStore for FaultyStore {
    async fn get_holder(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        self.before("get_holder", Access::Read).await?;
        let result = self.payments.get_holder(payment_id).await;
        self.after("get_holder", result).await
    }

    async fn create_order(&self, order: &Order) -> Result<(), StoreError> {
        self.write("create_order", Sent::OneItem, || {
            self.payments.create_order(order)
        })
        .await
    }

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError> {
        self.before("get_order", Access::Read).await?;
        let result = self.payments.get_order(order_id).await;
        self.after("get_order", result).await
    }

    async fn revise_order(&self, read: &Order, next: &Order) -> Result<ReviseOutcome, StoreError> {
        self.write("revise_order", Sent::OneItem, || {
            self.payments.revise_order(read, next)
        })
        .await
    }
}

#[async_trait]
impl ChargeStore for FaultyStore {
    fn now_ms(&self) -> i64 {
        self.payments.now_ms()
    }

    async fn load_for_charge(
        &self,
        record: &RecordKey,
        order_id: &str,
        read: Read,
    ) -> Result<(Option<IdempotencyRecord>, Option<Order>), StoreError> {
        self.before("load_for_charge", Access::Read).await?;
        let result = self.payments.load_for_charge(record, order_id, read).await;
        self.after("load_for_charge", result).await
    }

    async fn begin_attempt(
        &self,
        claim: &Claim,
        order: &Order,
        payment: &Payment,
        counts: &[AttemptCount],
    ) -> Result<BeginOutcome, StoreError> {
        self.write("begin_attempt", Sent::Transaction, || async {
            let result = self
                .payments
                .begin_attempt(claim, order, payment, counts)
                .await;
            if matches!(result, Ok(BeginOutcome::Begun)) {
                self.begun
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(payment.clone());
            }
            result
        })
        .await
    }

    async fn count_decline(&self, counter: &Counter, expires_at_s: i64) -> Result<(), StoreError> {
        self.write("count_decline", Sent::OneItem, || {
            self.payments.count_decline(counter, expires_at_s)
        })
        .await
    }

    async fn resume_attempt(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        payment: &Payment,
    ) -> Result<ResumeOutcome, StoreError> {
        self.write("resume_attempt", Sent::Transaction, || {
            self.payments.resume_attempt(record, seen, lease, payment)
        })
        .await
    }

    async fn read_payment(
        &self,
        payment_id: &str,
        read: Read,
    ) -> Result<Option<Payment>, StoreError> {
        self.before("read_payment", Access::Read).await?;
        let result = self.payments.read_payment(payment_id, read).await;
        self.after("read_payment", result).await
    }

    async fn finish_attempt(
        &self,
        payment: &Payment,
        transition: &Transition,
        lease: &LeaseToken,
        by: FinishedBy,
    ) -> Result<SettleOutcome, StoreError> {
        let noted = std::sync::atomic::AtomicBool::new(false);
        self.write(
            "finish_attempt",
            finish_sent(payment, transition, by),
            || async {
                let result = self
                    .payments
                    .finish_attempt(payment, transition, lease, by)
                    .await;
                // The first try that writes is this invocation's completion (a retry that meets
                // it writes nothing).
                if let Ok(SettleOutcome::Settled(after)) = &result {
                    if !noted.swap(true, std::sync::atomic::Ordering::SeqCst) {
                        self.note_finished(Finished::Payment(
                            after.payment_id.clone(),
                            after.status,
                        ));
                    }
                    if by == FinishedBy::Charge
                        && payonce::domain::completion_leaves_order(payment, transition)
                    {
                        self.left_by_charge
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(after.payment_id.clone());
                    }
                }
                result
            },
        )
        .await
    }

    async fn release_unsent(
        &self,
        payment: &Payment,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        self.write("release_unsent", Sent::Transaction, || {
            self.payments.release_unsent(payment, lease)
        })
        .await
    }

    async fn settle(
        &self,
        payment: &Payment,
        transition: &Transition,
        event: Option<&EventMark>,
    ) -> Result<SettleOutcome, StoreError> {
        self.write("settle", Sent::Transaction, || async {
            let result = self.payments.settle(payment, transition, event).await;
            if let (Some(event), Ok(SettleOutcome::Settled(_))) = (event, &result) {
                self.mark(event);
            }
            result
        })
        .await
    }

    async fn charge_record(
        &self,
        key: &RecordKey,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.before("charge_record", Access::Read).await?;
        let result = self.payments.charge_record(key).await;
        self.after("charge_record", result).await
    }

    async fn take_over_charge(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<TakeoverOutcome, StoreError> {
        self.write("take_over_charge", Sent::OneItem, || {
            self.payments.take_over_charge(key, seen, lease)
        })
        .await
    }

    async fn record_event(&self, event: &EventMark) -> Result<bool, StoreError> {
        self.write("record_event", Sent::OneItem, || async {
            let result = self.payments.record_event(event).await;
            if matches!(result, Ok(true)) {
                self.mark(event);
            }
            result
        })
        .await
    }
}

#[async_trait]
impl RefundStore for FaultyStore {
    fn refund_now_ms(&self) -> i64 {
        self.payments.refund_now_ms()
    }

    async fn load_for_refund(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        self.before("load_for_refund", Access::Read).await?;
        let result = self.payments.load_for_refund(record, payment_id).await;
        self.after("load_for_refund", result).await
    }

    async fn begin_refund(
        &self,
        claim: &Claim,
        payment: &Payment,
        refund: &Refund,
    ) -> Result<BeginRefundOutcome, StoreError> {
        self.write("begin_refund", Sent::Transaction, || {
            self.payments.begin_refund(claim, payment, refund)
        })
        .await
    }

    async fn resume_refund(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        refund: &Refund,
    ) -> Result<ResumeOutcome, StoreError> {
        self.write("resume_refund", Sent::Transaction, || {
            self.payments.resume_refund(record, seen, lease, refund)
        })
        .await
    }

    async fn get_refund(&self, refund_id: &str) -> Result<Option<Refund>, StoreError> {
        self.before("get_refund", Access::Read).await?;
        let result = self.payments.get_refund(refund_id).await;
        self.after("get_refund", result).await
    }

    async fn refunded_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        self.before("refunded_payment", Access::Read).await?;
        let result = RefundStore::refunded_payment(&self.payments, payment_id).await;
        self.after("refunded_payment", result).await
    }

    async fn refunds_of(&self, payment: &Payment) -> Result<Vec<Refund>, StoreError> {
        self.before("refunds_of", Access::Read).await?;
        let result = self.payments.refunds_of(payment).await;
        self.after("refunds_of", result).await
    }

    async fn write_refund(
        &self,
        refund: &Refund,
        step: &RefundTransition,
        record: RefundRecordWrite<'_>,
        fence: Option<payonce::ports::SenderFence<'_>>,
        event: Option<&EventMark>,
    ) -> Result<RefundSettleOutcome, StoreError> {
        self.write("write_refund", Sent::Transaction, || async {
            let result = self
                .payments
                .write_refund(refund, step, record, fence, event)
                .await;
            if let (Some(event), Ok(RefundSettleOutcome::Settled(_))) = (event, &result) {
                self.mark(event);
            }
            if let (RefundRecordWrite::Complete { .. }, Ok(RefundSettleOutcome::Settled(after))) =
                (record, &result)
            {
                self.note_finished(Finished::Refund(after.refund_id.clone(), after.status));
            }
            result
        })
        .await
    }

    async fn take_refund_lease(
        &self,
        refund: &Refund,
        lease: &Lease,
    ) -> Result<RefundLeaseOutcome, StoreError> {
        self.write("take_refund_lease", Sent::OneItem, || {
            self.payments.take_refund_lease(refund, lease)
        })
        .await
    }

    async fn stop_watching(&self, refund: &Refund) -> Result<(), StoreError> {
        self.write("stop_watching", Sent::OneItem, || {
            self.payments.stop_watching(refund)
        })
        .await
    }

    async fn cancel_unsent_refund(
        &self,
        refund: &Refund,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        self.write("cancel_unsent_refund", Sent::Transaction, || {
            self.payments.cancel_unsent_refund(refund, lease)
        })
        .await
    }
}

#[async_trait]
#[async_trait]
impl OperationStore for FaultyStore {
    fn operation_now_ms(&self) -> i64 {
        self.payments.operation_now_ms()
    }

    async fn load_for_operation(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        self.before("load_for_operation", Access::Read).await?;
        let result = self.payments.load_for_operation(record, payment_id).await;
        self.after("load_for_operation", result).await
    }

    async fn begin_operation(
        &self,
        claim: &Claim,
        payment: &Payment,
        operation: &PaymentOperation,
    ) -> Result<BeginOperationOutcome, StoreError> {
        self.write("begin_operation", Sent::Transaction, || {
            self.payments.begin_operation(claim, payment, operation)
        })
        .await
    }

    async fn resume_operation(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<ResumeOutcome, StoreError> {
        self.write("resume_operation", Sent::Transaction, || {
            self.payments.resume_operation(record, seen, lease)
        })
        .await
    }

    async fn finish_operation(
        &self,
        payment: &Payment,
        transition: &Transition,
        record: &RecordKey,
        lease: &LeaseToken,
        end: &OperationRecordEnd,
        release: bool,
    ) -> Result<SettleOutcome, StoreError> {
        self.write("finish_operation", Sent::Transaction, || {
            self.payments
                .finish_operation(payment, transition, record, lease, end, release)
        })
        .await
    }
}

#[async_trait]
impl InflightScan for FaultyStore {
    async fn list_inflight(
        &self,
        due_at_ms: i64,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        self.before("list_inflight", Access::Read).await?;
        let result = self.payments.list_inflight(due_at_ms, limit, cursor).await;
        self.after("list_inflight", result).await
    }

    async fn defer_check(&self, payment_id: &str, check_at_ms: i64) -> Result<(), StoreError> {
        self.write("defer_check", Sent::OneItem, || {
            self.payments.defer_check(payment_id, check_at_ms)
        })
        .await
    }
}

#[async_trait]
impl IdempotencyStore for FaultyStore {
    fn now_ms(&self) -> i64 {
        self.records.now_ms()
    }

    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.write("claim", Sent::OneItem, || self.records.claim(claim))
            .await
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        expires_at_s: i64,
    ) -> Result<TakeoverOutcome, StoreError> {
        self.write("take_over", Sent::OneItem, || {
            self.records.take_over(key, seen, lease, expires_at_s)
        })
        .await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        lease: &LeaseToken,
        result: &str,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.write("complete", Sent::OneItem, || {
            self.records.complete(key, lease, result, expires_at_s)
        })
        .await
    }

    async fn release(&self, key: &RecordKey, lease: &LeaseToken) -> Result<(), StoreError> {
        self.write("release", Sent::OneItem, || {
            self.records.release(key, lease)
        })
        .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.before("get", Access::Read).await?;
        let result = self.records.get(key).await;
        self.after("get", result).await
    }
}

/// How DynamoDB receives a charge's finish: a success that leaves its order, or a record
/// completed with nothing moved, is one `UpdateItem` of the payment; anything that writes the
/// order too is a transaction.
fn finish_sent(payment: &Payment, transition: &Transition, by: FinishedBy) -> Sent {
    if *transition == Transition::Unchanged || by.leaves_order(payment, transition) {
        Sent::OneItem
    } else {
        Sent::Transaction
    }
}

/// The latest a request lands at the PSP after its caller's timeout (see
/// [`SimTransport::maybe_land_late`]).
const LATE_LANDING_MAX: Duration = Duration::from_secs(5);

fn duration_ms_u64(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The secret key the simulated PSP accepts, and the adapter authenticates with: Stripe's API key,
/// Omise's secret key, or the 2C2P merchant's secret key (which also signs its notifications).
pub const API_KEY: &str = "sk_test_payonce_sim";

/// The 2C2P merchant id the model knows and the adapter sends.
pub const TWOC2P_MERCHANT_ID: &str = "PAYONCESIM01";

/// The webhook events the PSP has yet to send, and a bell rung when one is added, so the
/// sender wakes for it rather than polling.
#[derive(Debug, Default)]
pub struct Outbox {
    events: Mutex<Vec<ModelEvent>>,
    ready: tokio::sync::Notify,
}

impl Outbox {
    /// Adds events and wakes the sender.
    pub fn push(&self, events: Vec<ModelEvent>) {
        if events.is_empty() {
            return;
        }
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(events);
        self.ready.notify_one();
    }

    /// Takes every event waiting.
    pub fn take(&self) -> Vec<ModelEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits until an event is added (or was added since the last wait).
    pub async fn added(&self) {
        self.ready.notified().await;
    }
}

/// The PSP model behind a network fault layer: the transport the real PSP adapter uses in the
/// simulation. Webhook events the model emits go to the outbox, for the webhook pipeline.
#[derive(Clone, Debug)]
pub struct SimTransport {
    world: SharedWorld,
    model: Arc<FakeModel>,
    outbox: Arc<Outbox>,
}

impl SimTransport {
    /// The transport to `model`, emitting its events to `outbox`.
    pub fn new(world: SharedWorld, model: Arc<FakeModel>, outbox: Arc<Outbox>) -> Self {
        Self {
            world,
            model,
            outbox,
        }
    }

    /// The request reaches the model and takes effect. The model sees the call's own
    /// `Authorization` and `Idempotency-Key` headers, as the fake PSP's server would.
    fn apply(&self, call: &WireCall) -> (u16, String, Delivery) {
        let query = encode(&call.query);
        let body = match &call.body {
            WireBody::Empty => String::new(),
            WireBody::Form(form) => encode(form),
            WireBody::Json(json) | WireBody::Text(json) => json.clone(),
        };
        let now_ms = payonce::clock::Clock::now_ms(self.world.clock());
        let answer = self.model.handle(
            &WireRequest {
                method: call.method,
                path: &call.path,
                query: (!query.is_empty()).then_some(query.as_str()),
                authorization: call.header("Authorization"),
                idempotency_key: call
                    .header("Idempotency-Key")
                    .or_else(|| call.header("PayPal-Request-Id")),
                prefer: call.header("Prefer"),
                body: body.as_bytes(),
            },
            now_ms,
        );
        self.outbox.push(answer.events);
        self.world.note_charges(self.model.charge_count());
        (answer.status, answer.body, answer.delivery)
    }

    /// A request its caller gave up on may still reach the PSP and run there, a little later: up
    /// to [`LATE_LANDING_MAX`] after the caller's timeout. Never later — every sender's lease
    /// outlasts its calls by more than that, which is what keeps a second sender from meeting it.
    fn maybe_land_late(&self, call: &WireCall, timeout: Duration) {
        if !self.world.calls_take_time() || !self.world.chance(0.5) {
            return;
        }
        let late = timeout + self.world.millis(0, duration_ms_u64(LATE_LANDING_MAX));
        let (transport, call) = (self.clone(), call.clone());
        tokio::spawn(async move {
            tokio::time::sleep(late).await;
            let (status, _, _) = transport.apply(&call);
            transport.world.trace(format!(
                "PSP {} {} applied late, after its caller gave up -> {status}",
                call.method, call.path
            ));
        });
    }

    /// The PSP refuses our credentials, in its face's words: 401 on Stripe and Omise; on 2C2P's
    /// JWT calls an unsigned `9042` (hash value mismatch: the merchant key) answered HTTP 200, as
    /// 2C2P answers API errors. Do Payment carries no merchant credentials (the payment token
    /// authorises it), so it has no such answer: `None`.
    fn credentials_refused(&self, call: &WireCall) -> Option<WireReply> {
        match self.model.provider() {
            Provider::Stripe => Some(error_reply(401, "invalid_request_error", "api_key_expired")),
            Provider::Omise => Some(omise_error(401, "authentication_failure")),
            Provider::TwoC2p if call.path.ends_with("/payment") => None,
            // The maintenance API refuses an envelope it cannot verify at the door.
            Provider::TwoC2p if call.path.contains("/PaymentAction/") => {
                Some(plain_reply(401, "access denied (simulated)"))
            }
            Provider::TwoC2p => Some(WireReply {
                status: 200,
                body: serde_json::json!({"respCode": "9042", "respDesc": "Hash value mismatch (simulated)"})
                    .to_string()
                    .into_bytes(),
            }),
            Provider::Square => Some(square_error(401, "AUTHENTICATION_ERROR", "UNAUTHORIZED")),
            Provider::PayPal => Some(paypal_error(401, "AUTHENTICATION_FAILURE")),
        }
    }

    /// The PSP is busy: a key still in flight (409) where the face has keys, else rate limited
    /// (429). 2C2P documents neither; a gateway's bare 429 stands in. Square documents only its
    /// 429 `RATE_LIMITED`.
    fn busy(&self, call: &WireCall) -> WireReply {
        let keyed = call.header("Idempotency-Key").is_some() && self.world.chance(0.5);
        match self.model.provider() {
            Provider::Stripe if keyed => {
                error_reply(409, "idempotency_error", "idempotency_key_in_use")
            }
            Provider::Stripe => error_reply(429, "rate_limit_error", "rate_limit"),
            Provider::Omise if keyed => omise_error(409, "conflict"),
            Provider::Omise => omise_error(429, "rate_limit"),
            Provider::TwoC2p => plain_reply(429, "Too Many Requests (simulated)"),
            Provider::Square => square_error(429, "RATE_LIMIT_ERROR", "RATE_LIMITED"),
            Provider::PayPal => paypal_error(429, "RATE_LIMIT_REACHED"),
        }
    }

    /// A 500 without applying, in the face's words.
    fn server_error(&self) -> WireReply {
        match self.model.provider() {
            Provider::Stripe => error_reply(500, "api_error", "api_error"),
            Provider::Omise => omise_error(500, "internal_error"),
            Provider::TwoC2p => plain_reply(500, "Internal Server Error (simulated)"),
            Provider::Square => square_error(500, "API_ERROR", "INTERNAL_SERVER_ERROR"),
            Provider::PayPal => paypal_error(500, "INTERNAL_SERVER_ERROR"),
        }
    }
}

fn encode(pairs: &[(String, String)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The `respCode` of a 2C2P answer that carries one in plain JSON (an API error, or Do Payment's
/// answer), for the trace.
fn unsigned_resp_code(body: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    json["respCode"].as_str().map(str::to_owned)
}

/// A Stripe error object.
fn error_reply(status: u16, kind: &str, code: &str) -> WireReply {
    WireReply {
        status,
        body: serde_json::json!({"error": {"type": kind, "code": code, "message": "simulated"}})
            .to_string()
            .into_bytes(),
    }
}

/// An Omise error object.
fn paypal_error(status: u16, name: &str) -> WireReply {
    WireReply {
        status,
        body: serde_json::json!({
            "name": name,
            "message": "simulated",
            "debug_id": "sim",
        })
        .to_string()
        .into_bytes(),
    }
}

fn square_error(status: u16, category: &str, code: &str) -> WireReply {
    WireReply {
        status,
        body: serde_json::json!({
            "errors": [{"category": category, "code": code, "detail": "simulated"}],
        })
        .to_string()
        .into_bytes(),
    }
}

fn omise_error(status: u16, code: &str) -> WireReply {
    WireReply {
        status,
        body: serde_json::json!({
            "object": "error",
            "location": format!("https://www.omise.co/api-errors#{code}"),
            "code": code,
            "message": "simulated",
        })
        .to_string()
        .into_bytes(),
    }
}

/// A body that is not JSON, as a gateway in front of the PSP answers.
fn plain_reply(status: u16, text: &str) -> WireReply {
    WireReply {
        status,
        body: text.as_bytes().to_vec(),
    }
}

#[async_trait]
impl PspTransport for SimTransport {
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure> {
        let world = &self.world;
        // The way there: a request that would arrive after the caller gave up never arrives.
        let there = if world.calls_take_time() {
            world.psp_leg()
        } else {
            world.millis(20, 400)
        };
        if there >= timeout {
            self.maybe_land_late(call, timeout);
            tokio::time::sleep(timeout).await;
            world.trace(format!("PSP {} timed out on the way there", call.path));
            return Err(CallFailure::AfterConnect(
                "timed out before the request reached the PSP (simulated)".into(),
            ));
        }
        tokio::time::sleep(there).await;
        let timeout = timeout - there;
        if world.strikes(FaultKind::Crash) {
            world.trace(format!("crash before PSP {}", call.path));
            return die().await;
        }
        if world.strikes(FaultKind::PspNoConnection) {
            // Refused at once, or a connect that hangs until it times out (a black-holed SYN):
            // either way nothing reached the PSP, however long the caller waited.
            if world.chance(0.5) {
                let hangs = world.millis(0, u64::try_from(timeout.as_millis()).unwrap_or(0));
                tokio::time::sleep(hangs).await;
                world.trace(format!("PSP connect timed out {}", call.path));
                return Err(CallFailure::NotConnected(
                    "connect timed out (simulated)".into(),
                ));
            }
            world.trace(format!("PSP no connection {}", call.path));
            return Err(CallFailure::NotConnected(
                "connection refused (simulated)".into(),
            ));
        }
        if world.strikes(FaultKind::PspAuth) {
            if let Some(refused) = self.credentials_refused(call) {
                return Ok(refused);
            }
        }
        if world.strikes(FaultKind::PspBusy) {
            return Ok(self.busy(call));
        }
        if world.strikes(FaultKind::Psp5xx) {
            return Ok(self.server_error());
        }
        let timeout_before = world.strikes(FaultKind::PspTimeout) && world.chance(0.5);
        if timeout_before {
            self.maybe_land_late(call, timeout);
            tokio::time::sleep(timeout).await;
            return Err(CallFailure::AfterConnect(
                "timed out (simulated, not applied)".into(),
            ));
        }
        let (status, body, delivery) = self.apply(call);
        if status >= 400 {
            world.trace(format!(
                "PSP {} {} -> {status} {body}",
                call.method, call.path
            ));
        } else if let Some(code) = unsigned_resp_code(&body) {
            // 2C2P answers its API errors HTTP 200 with a plain `respCode`.
            world.trace(format!(
                "PSP {} {} -> {status} respCode {code}",
                call.method, call.path
            ));
        } else {
            world.trace(format!("PSP {} {} -> {status}", call.method, call.path));
        }
        if world.strikes(FaultKind::CrashAfterPsp) {
            world.trace("crash after PSP applied".to_owned());
            return die().await;
        }
        // The way back: an answer that would arrive after the caller gave up is lost to it.
        let back = world.psp_leg();
        if back >= timeout {
            tokio::time::sleep(timeout).await;
            world.trace(format!("PSP {} timed out on the way back", call.path));
            return Err(CallFailure::AfterConnect(
                "timed out waiting for the PSP's answer (simulated, applied)".into(),
            ));
        }
        if !back.is_zero() {
            tokio::time::sleep(back).await;
        }
        let timeout = timeout - back;
        if world.strikes(FaultKind::PspTimeout) {
            tokio::time::sleep(timeout).await;
            return Err(CallFailure::AfterConnect(
                "timed out (simulated, applied)".into(),
            ));
        }
        if world.strikes(FaultKind::PspCut) {
            return Err(CallFailure::AfterConnect("answer cut (simulated)".into()));
        }
        match delivery {
            Delivery::Now => {}
            Delivery::Sever => {
                return Err(CallFailure::AfterConnect(
                    "connection closed by the PSP".into(),
                ))
            }
            Delivery::After(delay) if delay >= timeout => {
                tokio::time::sleep(timeout).await;
                return Err(CallFailure::AfterConnect(
                    "timed out waiting for the PSP".into(),
                ));
            }
            Delivery::After(delay) => tokio::time::sleep(delay).await,
        }
        Ok(WireReply {
            status,
            body: body.into_bytes(),
        })
    }
}
