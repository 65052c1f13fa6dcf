//! Everything the embedded adapters keep, behind one lock: the idempotency "table" (records,
//! webhook dedup records, users' attempt counters, the cleanup checkpoint) and the payments
//! "table" (orders, payments, refunds). DynamoDB's transactions span both tables, so the
//! embedded twins hold one lock across all of them; the stores (`idempotency.rs`,
//! `payments.rs`) are built on this module and never on each other's internals.

#[cfg(feature = "payments")]
use crate::clock::SharedClock;
#[cfg(feature = "payments")]
use crate::domain::{Order, Payment, Refund};
use crate::idempotency::{IdempotencyRecord, LeaseToken, RecordKey};
#[cfg(feature = "payments")]
use crate::ports::Read;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The tables behind their one lock; clones share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedTables(Arc<Mutex<MemoryTables>>);

impl SharedTables {
    /// The tables, locked: one lock for every item, so a multi-item write is atomic.
    pub(crate) fn lock(&self) -> MutexGuard<'_, MemoryTables> {
        // A panic while holding the lock cannot leave a record half-written (each operation
        // checks every condition before it writes anything), so a poisoned map is still
        // consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Everything the embedded adapters keep, behind the store's one lock: the idempotency
/// "table" (records, webhook dedup records and the cleanup checkpoint, as in DynamoDB's
/// idempotency table) and the payments "table" (orders and payments).
#[derive(Debug, Default)]
pub(crate) struct MemoryTables {
    /// Idempotency records by key.
    pub(crate) records: BTreeMap<RecordKey, IdempotencyRecord>,
    /// The lease each completed record was completed under (DynamoDB keeps the token on the
    /// completed item), so a completion whose answer was lost knows its own write when the
    /// SDK's retry meets it.
    pub(crate) completed_by: BTreeMap<RecordKey, LeaseToken>,
    /// Webhook dedup records: `webhook#<provider>#<event_id>` → `expires_at_s`. Expired ones
    /// stay until overwritten or swept, and read as absent.
    #[cfg(feature = "payments")]
    pub(crate) events: BTreeMap<String, i64>,
    /// Users' attempt-limit counters by key (`limit#user#<sub>#<window>`). Expired ones stay
    /// until swept.
    #[cfg(feature = "payments")]
    pub(crate) counters: BTreeMap<String, Tally>,
    /// Where an interrupted cleanup sweep stopped.
    #[cfg(feature = "payments")]
    pub(crate) checkpoint: Option<String>,
    /// Orders and payments.
    #[cfg(feature = "payments")]
    pub(crate) payments: PaymentTables,
}

/// One attempt-limit counter, as DynamoDB's counter item holds it.
#[cfg(feature = "payments")]
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) attempts: u32,
    pub(crate) declines: u32,
    pub(crate) expires_at_s: i64,
}

#[cfg(feature = "payments")]
impl Tally {
    pub(crate) fn until(expires_at_s: i64) -> Self {
        Self {
            expires_at_s,
            ..Self::default()
        }
    }
}

#[cfg(feature = "payments")]
/// The embedded payments "table": orders and payments by id.
#[derive(Debug, Default)]
pub(crate) struct PaymentTables {
    pub(super) orders: BTreeMap<String, Order>,
    /// Orders' attempt counters by window, kept beside the order as DynamoDB keeps them on the
    /// order's item (never swept).
    pub(super) order_tallies: BTreeMap<String, BTreeMap<i64, Tally>>,
    pub(super) payments: BTreeMap<String, StoredPayment>,
    pub(super) refunds: BTreeMap<String, StoredRefund>,
    /// Eventually consistent reads, once [`MemoryPaymentStore::lag_reads`] turned them on.
    pub(super) lag: Option<Lag>,
}

#[cfg(feature = "payments")]
/// What an item was before the writes of the last moment, by id: the item as it was before
/// the first write since `since_ms` (`None`: it did not exist).
pub(super) type Before<V> = BTreeMap<String, (Option<V>, i64)>;

#[cfg(feature = "payments")]
/// DynamoDB's eventually consistent reads, modelled: a [`Read::Recent`] read of an item
/// written less than `window_ms` ago may return it as it was before those writes, whenever
/// `stale` says so (the simulation draws it from its seed).
pub(super) struct Lag {
    pub(super) window_ms: i64,
    pub(super) clock: SharedClock,
    pub(super) stale: Arc<dyn Fn() -> bool + Send + Sync>,
    pub(super) orders: Before<Order>,
    pub(super) payments: Before<StoredPayment>,
}

#[cfg(feature = "payments")]
impl std::fmt::Debug for Lag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lag")
            .field("window_ms", &self.window_ms)
            .field("orders", &self.orders.len())
            .field("payments", &self.payments.len())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "payments")]
impl Lag {
    /// Keeps `current` as what `id` was, unless a write of the window already kept an older one.
    pub(super) fn remember<V: Clone>(
        before: &mut Before<V>,
        id: &str,
        current: Option<&V>,
        now_ms: i64,
        window_ms: i64,
    ) {
        let kept = before
            .get(id)
            .is_some_and(|(_, since_ms)| (0..window_ms).contains(&(now_ms - since_ms)));
        if !kept {
            before.insert(id.to_owned(), (current.cloned(), now_ms));
        }
    }

    /// `id` as a recent read sees it: maybe as it was before the window's writes.
    pub(super) fn recent<V: Clone>(
        &self,
        before: &Before<V>,
        id: &str,
        current: Option<&V>,
    ) -> Option<V> {
        let now_ms = self.clock.now_ms();
        match before.get(id) {
            Some((old, since_ms))
                if (0..self.window_ms).contains(&(now_ms - since_ms)) && (self.stale)() =>
            {
                old.clone()
            }
            _ => current.cloned(),
        }
    }
}

#[cfg(feature = "payments")]
impl PaymentTables {
    /// The order to write (what it was is kept for recent reads).
    pub(super) fn order_mut(&mut self, order_id: &str) -> Option<&mut Order> {
        if let Some(lag) = &mut self.lag {
            let now_ms = lag.clock.now_ms();
            Lag::remember(
                &mut lag.orders,
                order_id,
                self.orders.get(order_id),
                now_ms,
                lag.window_ms,
            );
        }
        self.orders.get_mut(order_id)
    }

    /// Stores a new order.
    pub(super) fn insert_order(&mut self, order: Order) {
        if let Some(lag) = &mut self.lag {
            let now_ms = lag.clock.now_ms();
            Lag::remember(
                &mut lag.orders,
                &order.order_id,
                None,
                now_ms,
                lag.window_ms,
            );
        }
        self.orders.insert(order.order_id.clone(), order);
    }

    /// The payment to write (what it was is kept for recent reads).
    pub(super) fn payment_mut(&mut self, payment_id: &str) -> Option<&mut StoredPayment> {
        if let Some(lag) = &mut self.lag {
            let now_ms = lag.clock.now_ms();
            let current = self.payments.get(payment_id);
            Lag::remember(
                &mut lag.payments,
                payment_id,
                current,
                now_ms,
                lag.window_ms,
            );
        }
        self.payments.get_mut(payment_id)
    }

    /// Stores a new payment.
    pub(super) fn insert_payment(&mut self, stored: StoredPayment) {
        let payment_id = stored.payment.payment_id.clone();
        if let Some(lag) = &mut self.lag {
            let now_ms = lag.clock.now_ms();
            Lag::remember(&mut lag.payments, &payment_id, None, now_ms, lag.window_ms);
        }
        self.payments.insert(payment_id, stored);
    }

    /// An order, as recent as `read` asks.
    pub(super) fn order_as(&self, order_id: &str, read: Read) -> Option<Order> {
        let current = self.orders.get(order_id);
        match (&self.lag, read) {
            (Some(lag), Read::Recent) => lag.recent(&lag.orders, order_id, current),
            _ => current.cloned(),
        }
    }

    /// A payment with its record, as recent as `read` asks.
    pub(super) fn payment_as(&self, payment_id: &str, read: Read) -> Option<StoredPayment> {
        let current = self.payments.get(payment_id);
        match (&self.lag, read) {
            (Some(lag), Read::Recent) => lag.recent(&lag.payments, payment_id, current),
            _ => current.cloned(),
        }
    }
}

#[cfg(feature = "payments")]
/// A refund as the embedded table holds it; `inflight` as for payments, while pending.
#[derive(Debug, Clone)]
pub(super) struct StoredRefund {
    pub(super) refund: Refund,
    pub(super) inflight: bool,
}

#[cfg(feature = "payments")]
/// A payment as the embedded table holds it, with the charge's idempotency record it carries
/// (as DynamoDB's payment item does).
#[derive(Debug, Clone)]
pub(super) struct StoredPayment {
    pub(super) payment: Payment,
    /// The record of the key that created the payment; a completed one's result is read from
    /// the payment as it is ([`record_as_read`]).
    pub(super) record: IdempotencyRecord,
    /// Whether the payment carries the in-flight index key. Like DynamoDB's sparse `inflight`
    /// attribute it is set when the payment is created in `processing` and removed when it
    /// leaves it, and only it makes a payment visible to [`InflightScan`].
    pub(super) inflight: bool,
    /// The lease its record was completed under (DynamoDB keeps the token on the completed
    /// item), so a finish whose answer was lost knows its own write when the retry meets it.
    pub(super) completed_by: Option<LeaseToken>,
}
