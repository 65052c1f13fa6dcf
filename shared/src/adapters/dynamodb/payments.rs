//! The DynamoDB store of orders and payments, and the charge path's writes (in the payments
//! table, but for the users' attempt counters and webhook dedup records of the idempotency
//! table).
//!
//! Payments table items (partition key `pk`):
//! - order `order#<id>`: `owner`, `version`, `currency`, `items` (JSON), `amount`,
//!   `payment_state`, `payment_id` (the attempt holding or having paid it), timestamps, and
//!   the order's attempt counter (`attempts_<window>`, `declines_<window>`: see `counters.rs`);
//! - payment `payment#<id>`: its fields, `status`, `failure_kind`, `decline_code`,
//!   `psp_maybe_reached` (only once true), the key's idempotency record that created it
//!   (`idempotency_pk`, `key_status`, … — see `charge_key.rs`), and — only while processing —
//!   `inflight` + `check_at_ms`, the keys of the sparse, sharded GSI reconcile reads (see
//!   `inflight.rs`).

use super::attributes::{n, s, string, Item};
use super::charge_key::{
    add_record, completed_under, holds_lease, record_of, Complete, KEY_STATUS,
};
use super::codec::{
    order_from_item, order_to_item, payment_from_item, payment_to_item, progress_attributes,
    refund_put, PROGRESS, PROGRESS_PLACEHOLDERS,
};
use super::counters::{self, OnOrder};
use super::expr::{build_error, names, put_item, update_item, values};
use super::idempotency::record_from_item;
use super::schema::{
    order_pk, payment_pk, ATTEMPT_ID, DUPLICATE_REFUND, EXPIRES_AT, LEASE_TOKEN, LEASE_UNTIL_MS,
    MAYBE_REACHED, PK, REFUND_PENDING, REFUND_REQUIRED, RESULT, STATUS,
};
use super::{backend, is_condition_failure};
use crate::adapters::faults::Faults;
use crate::adapters::TransitionWrite;
use crate::clock::{system_clock, SharedClock};
use crate::domain::{
    payment_id_for, LateDuplicates, Order, OrderEffect, OrderPaymentState, Payment, PaymentStatus,
    Transition,
};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordStatus, StoreError,
    TakeoverOutcome,
};
use crate::ports::{
    AttemptCount, BeginOutcome, ChargeStore, Counter, EventMark, FinishedBy, OrderStore, Read,
    ResumeOutcome, ReviseOutcome, SettleOutcome,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, KeysAndAttributes, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use std::collections::HashMap;
use std::time::Duration;

/// How often a transaction cancelled by a conflict or throttling is sent again.
const TRANSACT_RETRIES: u32 = 3;

/// The tables the payment path uses.
#[derive(Debug, Clone)]
pub struct Tables {
    /// Idempotency records.
    pub idempotency: String,
    /// Orders and payments.
    pub payments: String,
}

/// [`OrderStore`] and [`ChargeStore`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoPaymentStore {
    pub(super) client: Client,
    pub(super) tables: Tables,
    pub(super) clock: SharedClock,
    faults: Faults,
    late_duplicates: LateDuplicates,
}

impl DynamoPaymentStore {
    /// The store on `tables`, using the system clock.
    pub fn new(client: Client, tables: Tables) -> Self {
        Self {
            client,
            tables,
            clock: system_clock(),
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

    /// The same store reading time from `clock`.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The fault-injection hook (transaction conflicts).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The tables.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Reads an idempotency record (expired reads as absent) and one payments-table item
    /// together, with consistent reads, in one BatchGetItem.
    pub(super) async fn load_record_and(
        &self,
        record: &RecordKey,
        item_pk: String,
    ) -> Result<(Option<IdempotencyRecord>, Option<Item>), StoreError> {
        let mut found = self
            .batch_get(
                record.as_str(),
                &[
                    (&self.tables.idempotency, record.as_str().to_owned()),
                    (&self.tables.payments, item_pk.clone()),
                ],
                Read::Latest,
            )
            .await?;
        let now_ms = self.clock.now_ms();
        let record = found
            .remove(&(self.tables.idempotency.clone(), record.as_str().to_owned()))
            .as_ref()
            .map(record_from_item)
            .transpose()?
            .filter(|r| !r.is_expired_at(now_ms));
        Ok((
            record,
            found.remove(&(self.tables.payments.clone(), item_pk)),
        ))
    }

    /// Reads the items `keys` names (table, partition key), as recent as `read` asks, in one
    /// BatchGetItem (asked again for the keys DynamoDB leaves unprocessed under load); the
    /// items found, by table and key.
    async fn batch_get(
        &self,
        label: &str,
        keys: &[(&String, String)],
        read: Read,
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        let mut by_table: HashMap<String, Vec<Item>> = HashMap::new();
        for (table, pk) in keys {
            by_table
                .entry((*table).clone())
                .or_default()
                .push(HashMap::from([(PK.to_owned(), s(pk))]));
        }
        let mut request = HashMap::with_capacity(by_table.len());
        for (table, wanted) in by_table {
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(wanted))
                .consistent_read(read == Read::Latest)
                .build()
                .map_err(build_error)?;
            request.insert(table, keys);
        }
        let mut found = HashMap::new();
        for _ in 0..5 {
            let output = self
                .client
                .batch_get_item()
                .set_request_items(Some(request))
                .send()
                .await
                .map_err(|e| backend("load", label, e))?;
            for (table, items) in output.responses.unwrap_or_default() {
                for item in items {
                    let pk = string(&item, PK).unwrap_or_default();
                    found.insert((table.clone(), pk), item);
                }
            }
            match output.unprocessed_keys {
                Some(left) if !left.is_empty() => request = left,
                _ => return Ok(found),
            }
        }
        Err(StoreError::Conflict {
            item: label.to_owned(),
        })
    }

    /// Reads one payments-table item consistently.
    pub(super) async fn get(&self, pk: String) -> Result<Option<Item>, StoreError> {
        self.get_as(pk, Read::Latest).await
    }

    /// Reads one payments-table item, as recent as `read` asks.
    pub(super) async fn get_as(&self, pk: String, read: Read) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.tables.payments)
            .key(PK, s(&pk))
            .consistent_read(read == Read::Latest)
            .send()
            .await
            .map_err(|e| backend("get", &pk, e))?;
        Ok(output.item)
    }

    /// Sends one transaction; a cancellation comes back with its per-item reasons. A
    /// transaction cancelled only by a conflict or by throttling wrote nothing, so it is sent
    /// again, identical, after a jittered pause; past the retries it is a
    /// [`StoreError::Conflict`] (retryable by the caller).
    pub(super) async fn transact(
        &self,
        operation: &'static str,
        items: Vec<TransactWriteItem>,
    ) -> Result<(), TxFailure> {
        let mut attempt = 0;
        loop {
            match self.transact_once(operation, items.clone()).await {
                Err(TxFailure::Store(StoreError::Conflict { .. }))
                    if attempt < TRANSACT_RETRIES =>
                {
                    attempt += 1;
                    let pause_ms = fastrand::u64(5..25) << attempt;
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
                other => return other,
            }
        }
    }

    async fn transact_once(
        &self,
        operation: &'static str,
        items: Vec<TransactWriteItem>,
    ) -> Result<(), TxFailure> {
        if self.faults.take_conflict() {
            return Err(TxFailure::Store(StoreError::Conflict {
                item: operation.to_owned(),
            }));
        }
        if let [only] = items.as_slice() {
            if let Some(update) = only.update() {
                return self.update_once(operation, update).await;
            }
        }
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) => {
                if let Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) =
                    error.as_service_error()
                {
                    let reasons: Vec<Reason> = cancelled
                        .cancellation_reasons()
                        .iter()
                        .map(|r| Reason {
                            code: r.code().unwrap_or("None").to_owned(),
                            item: r.item().cloned(),
                        })
                        .collect();
                    // Throttling inside a transaction is as retryable as a conflict.
                    if reasons.iter().any(|r| {
                        matches!(
                            r.code.as_str(),
                            "TransactionConflict"
                                | "ThrottlingError"
                                | "ProvisionedThroughputExceeded"
                                | "RequestLimitExceeded"
                        )
                    }) {
                        return Err(TxFailure::Store(StoreError::Conflict {
                            item: operation.to_owned(),
                        }));
                    }
                    // Cancelled, yet no condition failed (a validation error, an item
                    // collection over its size...): DynamoDB failed the request, which wrote
                    // nothing. It stays a backend failure whatever the reasons (the payment
                    // paths answer a refusal with the same 503, and the reasons of one
                    // cancellation can mix kinds); the client is told to retry, never 500.
                    if !reasons.iter().any(Reason::condition_failed) {
                        return Err(TxFailure::Store(StoreError::Backend {
                            operation,
                            source: format!(
                                "transaction cancelled without a failed condition: {reasons:?}"
                            )
                            .into(),
                        }));
                    }
                    return Err(TxFailure::Cancelled(reasons));
                }
                Err(TxFailure::Store(backend(operation, operation, error)))
            }
        }
    }

    /// A write that touches one item needs no transaction (which would bill it twice): the
    /// update is sent as a plain conditional `UpdateItem`, and a refused condition comes back
    /// as a one-reason cancellation, with the item as it is, like a transaction's.
    async fn update_once(&self, operation: &'static str, update: &Update) -> Result<(), TxFailure> {
        let sent = self
            .client
            .update_item()
            .table_name(update.table_name())
            .set_key(Some(update.key().clone()))
            .update_expression(update.update_expression())
            .set_condition_expression(update.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(update.expression_attribute_names().cloned())
            .set_expression_attribute_values(update.expression_attribute_values().cloned())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) if is_condition_failure(&error) => {
                let item = match error.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                        failed.item().cloned()
                    }
                    _ => None,
                };
                Err(TxFailure::Cancelled(vec![Reason {
                    code: "ConditionalCheckFailed".into(),
                    item,
                }]))
            }
            Err(error) => Err(TxFailure::Store(backend(operation, operation, error))),
        }
    }

    /// Writes `transition` (and, unless `order` says to leave it, its effect on the order) plus
    /// `extra_ops`.
    pub(super) async fn write_transition(
        &self,
        operation: &'static str,
        payment: &Payment,
        transition: &Transition,
        order: OrderWrite,
        complete: Option<&LeaseToken>,
        extra_ops: impl Fn(&Payment) -> Result<Vec<(Op, TransactWriteItem)>, StoreError>,
    ) -> Result<TransitionWrite, StoreError> {
        let complete = complete.map(|lease| Complete { lease });
        let now_ms = self.clock.now_ms();
        let mut after = payment.after(transition, now_ms);
        let mut with_order = transition.writes_order() && order == OrderWrite::Follow;
        let mut duplicate = None;
        loop {
            let mut items = Vec::with_capacity(4);
            let mut labels = Vec::with_capacity(4);
            if let Transition::Apply { .. } = transition {
                items.push(payment_update(
                    &self.tables.payments,
                    payment,
                    &after,
                    complete.as_ref(),
                )?);
                labels.push(Op::Payment);
                if with_order {
                    items.push(order_follow(&self.tables.payments, &after, now_ms)?);
                    labels.push(Op::Order);
                }
            } else if let Some(complete) = &complete {
                // Nothing moves, but the record is completed only on the payment as it was read:
                // if a webhook or reconcile moved it since, read again.
                items.push(complete_unchanged(
                    &self.tables.payments,
                    payment,
                    complete,
                )?);
                labels.push(Op::Payment);
            } else {
                items.push(payment_unchanged(&self.tables.payments, payment)?);
                labels.push(Op::Payment);
            }
            if let Some(refund) = &duplicate {
                items.push(refund_put(&self.tables.payments, refund)?);
                labels.push(Op::Refund);
            }
            for (label, op) in extra_ops(&after)? {
                items.push(op);
                labels.push(label);
            }
            match self.transact(operation, items).await {
                Ok(()) => return Ok(TransitionWrite::Written(Box::new(after))),
                Err(TxFailure::Store(error)) => return Err(error),
                Err(TxFailure::Cancelled(reasons)) => {
                    let refused = |op: Op| {
                        labels
                            .iter()
                            .position(|l| *l == op)
                            .and_then(|i| reasons.get(i))
                            .filter(|r| r.condition_failed())
                    };
                    let failed = |op: Op| refused(op).is_some();
                    if failed(Op::Event) {
                        return Ok(TransitionWrite::EventSeen);
                    }
                    if let Some(reason) = refused(Op::Payment) {
                        // The payment's status is checked first: a payment that moved is read
                        // again; one that did not refused the lease.
                        let status_now =
                            reason.item.as_ref().and_then(|i| string(i, "status").ok());
                        // A finish whose answer was lost and that was sent again: it meets the
                        // record completed under this very lease, the payment as it made it.
                        let own = complete.as_ref().is_some_and(|c| {
                            completed_under(reason.item.as_ref(), c.lease)
                                && status_now.as_deref() == Some(after.status.as_str())
                        });
                        if let (true, Some(item)) = (own, reason.item.as_ref()) {
                            return Ok(TransitionWrite::Written(Box::new(payment_from_item(
                                item,
                            )?)));
                        }
                        return Ok(match &complete {
                            Some(c)
                                if status_now.as_deref() == Some(payment.status.as_str())
                                    && !holds_lease(reason.item.as_ref(), c.lease) =>
                            {
                                TransitionWrite::RecordRefused
                            }
                            _ => TransitionWrite::PaymentMoved,
                        });
                    }
                    if failed(Op::Record) {
                        return Ok(TransitionWrite::RecordRefused);
                    }
                    if failed(Op::Order) && with_order {
                        // The order is held or paid by another attempt: the payment still moves,
                        // the order stays as it is.
                        with_order = false;
                        duplicate = crate::domain::duplicate_refund_for(
                            payment,
                            &mut after,
                            now_ms,
                            self.late_duplicates,
                        );
                        crate::adapters::settling_alone(payment, &after);
                        continue;
                    }
                    return Err(StoreError::Corrupt {
                        key: payment.payment_id.clone(),
                        reason: format!(
                            "{operation} cancelled without a failed condition: {reasons:?}"
                        ),
                    });
                }
            }
        }
    }
}

/// Whether a transition also writes the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OrderWrite {
    /// The order follows the payment (or, held by another attempt, a duplicate refund is made).
    Follow,
    /// The order is left as it is ([`crate::domain::completion_leaves_order`]).
    Leave,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Event,
    Record,
    Order,
    Payment,
    Refund,
}

#[derive(Debug)]
pub(super) struct Reason {
    pub(super) code: String,
    pub(super) item: Option<Item>,
}

impl Reason {
    pub(super) fn condition_failed(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

pub(super) enum TxFailure {
    Cancelled(Vec<Reason>),
    Store(StoreError),
}

/// Moves the payment from the status it was read in to `after`'s; leaves the in-flight index
/// once final. The PSP payment it names must be the one read too: a move decided while no PSP
/// id was stored (a fence's "nothing can have moved money") never lands on a payment whose id
/// was filled in meanwhile, and word about one PSP payment never overwrites another's id.
/// With `complete`, the same write completes the charge's record held under its lease (fenced).
fn payment_update(
    table: &str,
    before: &Payment,
    after: &Payment,
    complete: Option<&Complete<'_>>,
) -> Result<TransactWriteItem, StoreError> {
    let mut update = String::from("SET #status = :status, #updated_at_ms = :now");
    let mut vals = vec![
        (":status", s(after.status.as_str())),
        (":read_status", s(before.status.as_str())),
        (":now", n(after.updated_at_ms)),
    ];
    let mut remove = Vec::new();
    let mut condition = String::from("#status = :read_status");
    match &before.provider_payment_id {
        Some(read) => {
            condition.push_str(" AND #provider_payment_id = :read_ppid");
            vals.push((":read_ppid", s(read)));
        }
        None => condition.push_str(" AND attribute_not_exists(#provider_payment_id)"),
    }
    if let Some(complete) = complete {
        update.push_str(", ");
        update.push_str(Complete::SET);
        remove.extend(Complete::REMOVE);
        condition.push_str(" AND ");
        condition.push_str(Complete::CONDITION);
        vals.extend(complete.values());
    }
    if let Some(id) = &after.provider_payment_id {
        update.push_str(", #provider_payment_id = :ppid");
        vals.push((":ppid", s(id)));
    }
    match &after.failure {
        Some(failure) => {
            update.push_str(", #failure_kind = :kind");
            vals.push((":kind", s(failure.kind.as_str())));
            match &failure.decline_code {
                Some(code) => {
                    update.push_str(", #decline_code = :code");
                    vals.push((":code", s(code)));
                }
                None => remove.push("#decline_code"),
            }
        }
        None => remove.extend(["#failure_kind", "#decline_code"]),
    }
    if after.refund_required && !before.refund_required {
        update.push_str(", #refund_required = :yes_required");
        vals.push((":yes_required", AttributeValue::Bool(true)));
    }
    if after.duplicate_refund && !before.duplicate_refund {
        // The automatic refund of a late duplicate is created with the success: its amount is
        // reserved at once (a payment that was not succeeded has no other refund).
        update.push_str(", #refund_pending = :refund_pending, #duplicate_refund = :yes");
        vals.push((":refund_pending", n(after.refund_pending)));
        vals.push((":yes", AttributeValue::Bool(true)));
    }
    if after.progress != before.progress {
        // The present attributes set, the others removed.
        let mut present = progress_attributes(&after.progress);
        for (name, (name_ph, value_ph)) in PROGRESS.into_iter().zip(PROGRESS_PLACEHOLDERS) {
            match present.iter().position(|(present, _)| *present == name) {
                Some(i) => {
                    update.push_str(&format!(", {name_ph} = {value_ph}"));
                    vals.push((value_ph, present.swap_remove(i).1));
                }
                None => remove.push(name_ph),
            }
        }
    }
    if !after.status.in_flight() {
        // Leaving the sparse index takes only its partition key; `check_at_ms` stays, as read.
        remove.push("#inflight");
    }
    if !remove.is_empty() {
        update.push_str(" REMOVE ");
        update.push_str(&remove.join(", "));
    }
    update_item(
        table,
        &payment_pk(&before.payment_id),
        &update,
        &condition,
        &[
            "status",
            "updated_at_ms",
            "provider_payment_id",
            "failure_kind",
            "decline_code",
            "inflight",
            REFUND_PENDING,
            DUPLICATE_REFUND,
            REFUND_REQUIRED,
        ]
        .into_iter()
        .chain(PROGRESS)
        .chain(Complete::NAMES)
        .filter(|name| {
            let placeholder = format!("#{name}");
            update.contains(&placeholder) || condition.contains(&placeholder)
        })
        .collect::<Vec<_>>(),
        vals,
    )
}

/// Completes the charge's record held under `complete`'s lease on a payment that does not
/// move, as long as it is still in the status it was read in (one item, fenced).
fn complete_unchanged(
    table: &str,
    payment: &Payment,
    complete: &Complete<'_>,
) -> Result<TransactWriteItem, StoreError> {
    let mut vals = vec![(":read_status", s(payment.status.as_str()))];
    vals.extend(complete.values());
    update_item(
        table,
        &payment_pk(&payment.payment_id),
        &format!(
            "SET {} REMOVE {}",
            Complete::SET,
            Complete::REMOVE.join(", ")
        ),
        &format!("#status = :read_status AND {}", Complete::CONDITION),
        &[["status"].as_slice(), Complete::NAMES.as_slice()].concat(),
        vals,
    )
}

fn event_pk(event: &EventMark) -> String {
    format!("webhook#{}#{}", event.provider, event.event_id)
}

/// The dedup record of a webhook event, in the idempotency table (same TTL attribute).
fn event_item(event: &EventMark, now_ms: i64) -> Item {
    let mut item = Item::with_capacity(4);
    item.insert(PK.into(), s(event_pk(event)));
    item.insert("kind".into(), s("webhook-event"));
    item.insert("received_at_ms".into(), n(now_ms));
    item.insert(EXPIRES_AT.into(), n(event.expires_at_s));
    item
}

/// Inserts the event's dedup record, unless it is already there (and not expired).
pub(super) fn event_put(
    table: &str,
    event: &EventMark,
    now_ms: i64,
) -> Result<TransactWriteItem, StoreError> {
    put_item(
        table,
        event_item(event, now_ms),
        "attribute_not_exists(#pk) OR #expires_at < :now_s",
        &[PK, EXPIRES_AT],
        vec![(":now_s", n(now_ms.div_euclid(1000)))],
    )
}

/// Asserts the payment is still in the status it was read in.
pub(super) fn payment_unchanged(
    table: &str,
    payment: &Payment,
) -> Result<TransactWriteItem, StoreError> {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key(PK, s(payment_pk(&payment.payment_id)))
        .condition_expression("#status = :read_status")
        .set_expression_attribute_names(names(&["status"]))
        .set_expression_attribute_values(values(vec![(":read_status", s(payment.status.as_str()))]))
        .build()
        .map_err(build_error)?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

/// How many times `settle` switches between writing the mirror and checking there is none to
/// write before it reports a conflict (each switch means the record changed in between).
pub(super) const MIRROR_TRIES: usize = 6;

/// The condition of a move written without the mirror: the key's record is not (or no longer
/// only) a completed record of this attempt — absent, in progress, or another attempt's.
pub(super) fn record_not_mirrored(
    table: &str,
    record_pk: &str,
    payment_id: &str,
) -> Result<TransactWriteItem, StoreError> {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key(PK, s(record_pk))
        .condition_expression(
            "attribute_not_exists(#pk) OR #status <> :completed OR #attempt_id <> :pid",
        )
        .set_expression_attribute_names(names(&[PK, STATUS, ATTEMPT_ID]))
        .set_expression_attribute_values(values(vec![
            (":completed", s(RecordStatus::Completed.as_str())),
            (":pid", s(payment_id)),
        ]))
        .build()
        .map_err(build_error)?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

/// The order follows its payment: paid on success (if free or ours), released on failure (if ours).
fn order_follow(
    table: &str,
    after: &Payment,
    now_ms: i64,
) -> Result<TransactWriteItem, StoreError> {
    let pk = order_pk(&after.order_id);
    let common = vec![(":pid", s(&after.payment_id)), (":now", n(now_ms))];
    match after.status.order_effect() {
        OrderEffect::Pay => update_item(
            table,
            &pk,
            "SET #payment_state = :paid, #payment_id = :pid, #updated_at_ms = :now",
            // A free order is paid only at the version this attempt paid: a late success must
            // never mark a newer, edited version paid.
            "#payment_id = :pid OR (#payment_state = :unpaid AND #version = :version)",
            &["payment_state", "payment_id", "updated_at_ms", "version"],
            [
                common,
                vec![
                    (":paid", s(OrderPaymentState::Paid.as_str())),
                    (":unpaid", s(OrderPaymentState::Unpaid.as_str())),
                    (":version", n(after.order_version)),
                ],
            ]
            .concat(),
        ),
        // (A hold writes no order: `Transition::writes_order`.)
        OrderEffect::Release | OrderEffect::Hold => update_item(
            table,
            &pk,
            "SET #payment_state = :unpaid, #updated_at_ms = :now REMOVE #payment_id",
            "#payment_id = :pid AND #payment_state = :processing",
            &["payment_state", "payment_id", "updated_at_ms"],
            [
                common,
                vec![
                    (":unpaid", s(OrderPaymentState::Unpaid.as_str())),
                    (":processing", s(OrderPaymentState::Processing.as_str())),
                ],
            ]
            .concat(),
        ),
    }
}

/// Completes the idempotency record held under `lease` with `view` as its result (fenced).
pub(super) fn complete_record(
    table: &str,
    record_pk: &str,
    lease: &LeaseToken,
    result: &str,
    expires_at_s: i64,
) -> Result<TransactWriteItem, StoreError> {
    update_item(
        table,
        record_pk,
        "SET #status = :completed, #result = :result, #expires_at = :expires_at REMOVE #lease_token, #lease_until_ms",
        "#lease_token = :mine",
        &[STATUS, RESULT, EXPIRES_AT, LEASE_TOKEN, LEASE_UNTIL_MS],
        vec![
            (":completed", s(RecordStatus::Completed.as_str())),
            (":result", s(result)),
            (":expires_at", n(expires_at_s)),
            (":mine", s(lease.as_str())),
        ],
    )
}

#[async_trait]
impl OrderStore for DynamoPaymentStore {
    async fn get_holder(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        ChargeStore::get_payment(self, payment_id).await
    }

    async fn create_order(&self, order: &Order) -> Result<(), StoreError> {
        let pk = order_pk(&order.order_id);
        let sent = self
            .client
            .put_item()
            .table_name(&self.tables.payments)
            .set_item(Some(order_to_item(order)?))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            // The order exactly as this create wrote it: its earlier try, whose answer was lost.
            Err(error)
                if is_condition_failure(&error)
                    && !crate::idempotency::own_writes_forgotten()
                    && matches!(error.as_service_error(),
                        Some(aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c))
                            if c.item().map(order_from_item).transpose().ok().flatten().as_ref() == Some(order)) =>
            {
                Ok(())
            }
            Err(error) => Err(backend("create_order", &pk, error)),
        }
    }

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError> {
        self.get(order_pk(order_id))
            .await?
            .as_ref()
            .map(order_from_item)
            .transpose()
    }

    async fn revise_order(&self, read: &Order, next: &Order) -> Result<ReviseOutcome, StoreError> {
        let pk = order_pk(&read.order_id);
        let items = serde_json::to_string(&next.items).map_err(|e| StoreError::Backend {
            operation: "encode items",
            source: Box::new(e),
        })?;
        let sent = self
            .client
            .update_item()
            .table_name(&self.tables.payments)
            .key(PK, s(&pk))
            .update_expression(
                "SET #items = :items, #amount = :amount, #version = :next, #updated_at_ms = :now",
            )
            .condition_expression("#version = :read AND #payment_state = :unpaid")
            .set_expression_attribute_names(names(&[
                "items",
                "amount",
                "version",
                "updated_at_ms",
                "payment_state",
            ]))
            .set_expression_attribute_values(values(vec![
                (":items", s(items)),
                (":amount", n(next.amount)),
                (":next", n(next.version)),
                (":read", n(read.version)),
                (":now", n(next.updated_at_ms)),
                (":unpaid", s(OrderPaymentState::Unpaid.as_str())),
            ]))
            .return_values(ReturnValue::None)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(ReviseOutcome::Revised),
            Err(error) if is_condition_failure(&error) => {
                let now = match error.as_service_error() {
                    Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c)) => c.item().map(order_from_item).transpose()?,
                    _ => None,
                };
                Ok(ReviseOutcome::refused(next, now))
            }
            Err(error) => Err(backend("revise_order", &pk, error)),
        }
    }
}

#[async_trait]
impl ChargeStore for DynamoPaymentStore {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn load_for_charge(
        &self,
        record: &RecordKey,
        order_id: &str,
        read: Read,
    ) -> Result<(Option<IdempotencyRecord>, Option<Order>), StoreError> {
        let payment = payment_pk(&payment_id_for(record.as_str()));
        let order = order_pk(order_id);
        let table = &self.tables.payments;
        let mut found = self
            .batch_get(
                record.as_str(),
                &[(table, payment.clone()), (table, order.clone())],
                read,
            )
            .await?;
        let record = match found.remove(&(table.clone(), payment)) {
            Some(item) => record_of(&item)?,
            None => None,
        };
        let order = found.remove(&(table.clone(), order));
        Ok((record, order.as_ref().map(order_from_item).transpose()?))
    }

    async fn begin_attempt(
        &self,
        claim: &Claim,
        order: &Order,
        payment: &Payment,
        counts: &[AttemptCount],
    ) -> Result<BeginOutcome, StoreError> {
        let now_ms = self.clock.now_ms();
        if payment.payment_id != payment_id_for(claim.key.as_str()) {
            return Err(StoreError::Corrupt {
                key: claim.key.to_string(),
                reason: format!("payment {} is not the key's", payment.payment_id),
            });
        }
        // The payment carries the key's record: claiming the key is creating the payment.
        let mut payment_item = payment_to_item(payment);
        add_record(&mut payment_item, &claim.record(now_ms));
        let (on_order, counter_items) =
            counters::split_counts(&self.tables.idempotency, &order.order_id, counts)?;
        let (order_count, on_order) = match on_order {
            Some((index, on_order)) => (Some(index), on_order),
            None => (None, OnOrder::default()),
        };
        let mut order_names = vec![
            "payment_state",
            "payment_id",
            "updated_at_ms",
            "owner",
            "version",
        ];
        order_names.extend(on_order.names.iter().map(String::as_str));
        let mut order_values = vec![
            (":processing", s(OrderPaymentState::Processing.as_str())),
            (":unpaid", s(OrderPaymentState::Unpaid.as_str())),
            (":pid", s(&payment.payment_id)),
            (":now", n(now_ms)),
            (":owner", s(&order.owner)),
            (":version", n(order.version)),
        ];
        order_values.extend(on_order.values);
        let mut items = vec![
            put_item(
                &self.tables.payments,
                payment_item,
                "attribute_not_exists(#pk)",
                &[PK],
                vec![],
            )?,
            update_item(
                &self.tables.payments,
                &order_pk(&order.order_id),
                &format!(
                    "SET #payment_state = :processing, #payment_id = :pid, #updated_at_ms = :now{}",
                    on_order.update
                ),
                &format!(
                    "#owner = :owner AND #version = :version AND #payment_state = :unpaid{}",
                    on_order.condition
                ),
                &order_names,
                order_values,
            )?,
        ];
        const COUNTERS_FROM: usize = 2;
        let counter_indices: Vec<usize> = counter_items.iter().map(|(index, _)| *index).collect();
        items.extend(counter_items.into_iter().map(|(_, item)| item));
        match self.transact("begin_attempt", items).await {
            Ok(()) => Ok(BeginOutcome::Begun),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) => {
                if let Some(r) = reasons.first().filter(|r| r.condition_failed()) {
                    return match r.item.as_ref().map(record_of).transpose()?.flatten() {
                        Some(record) => Ok(BeginOutcome::KeyTaken(record)),
                        None => Err(StoreError::Corrupt {
                            key: claim.key.to_string(),
                            reason: "claim refused without the existing record".into(),
                        }),
                    };
                }
                // The full counters, by their index in `counts`: the first one is reported.
                let mut full: Vec<usize> = reasons
                    .iter()
                    .skip(COUNTERS_FROM)
                    .zip(&counter_indices)
                    .filter(|(r, _)| r.condition_failed())
                    .map(|(_, index)| *index)
                    .collect();
                if let Some(r) = reasons.get(1).filter(|r| r.condition_failed()) {
                    let now = r.item.as_ref().map(order_from_item).transpose()?;
                    // Still as read: only the order's counter can have refused it.
                    let as_read = now
                        .as_ref()
                        .is_some_and(|now| now.reservable_as_read(order));
                    match order_count {
                        Some(index) if as_read => full.push(index),
                        _ => return Ok(BeginOutcome::OrderChanged(now)),
                    }
                }
                if let Some(first) = full.into_iter().min() {
                    return Ok(BeginOutcome::OverLimit(first));
                }
                Err(StoreError::Corrupt {
                    key: payment.payment_id.clone(),
                    reason: format!("begin_attempt cancelled: {reasons:?}"),
                })
            }
        }
    }

    async fn count_decline(&self, counter: &Counter, expires_at_s: i64) -> Result<(), StoreError> {
        counters::count_decline(
            &self.client,
            &self.tables.idempotency,
            &self.tables.payments,
            counter,
            expires_at_s,
        )
        .await
    }

    async fn resume_attempt(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        payment: &Payment,
    ) -> Result<ResumeOutcome, StoreError> {
        if payment_id_for(record.as_str()) != payment.payment_id {
            // Not the key's attempt: nothing to take over.
            return Ok(ResumeOutcome::KeyMoved(self.charge_record(record).await?));
        }
        let now_ms = self.clock.now_ms();
        // The lease is on the payment, which must still be processing: a webhook or reconcile
        // that settled it since it was read has released (or paid) the order, which must not be
        // reserved again for it.
        let mut update = String::from("SET #lease_token = :new_token, #lease_until_ms = :until_ms");
        let mut vals = vec![
            (":new_token", s(lease.token.as_str())),
            (":until_ms", n(lease.until_ms)),
            (":seen", s(seen.as_str())),
            (":in_progress", s(RecordStatus::InProgress.as_str())),
            (":processing", s(PaymentStatus::Processing.as_str())),
        ];
        if payment.psp_maybe_reached {
            // The lapsed holder may have called the PSP: from now on a call that cannot connect
            // proves nothing.
            update.push_str(", #psp_maybe_reached = :yes");
            vals.push((":yes", AttributeValue::Bool(true)));
        }
        let items = vec![
            update_item(
                &self.tables.payments,
                &payment_pk(&payment.payment_id),
                &update,
                "#lease_token = :seen AND #key_status = :in_progress AND #status = :processing",
                &[LEASE_TOKEN, LEASE_UNTIL_MS, KEY_STATUS, "status", MAYBE_REACHED]
                    .into_iter()
                    .filter(|name| update.contains(name) || *name != MAYBE_REACHED)
                    .collect::<Vec<_>>(),
                vals,
            )?,
            update_item(
                &self.tables.payments,
                &order_pk(&payment.order_id),
                "SET #payment_state = :processing, #payment_id = :pid, #updated_at_ms = :now",
                "#version = :version AND ((#payment_state = :processing AND #payment_id = :pid) OR #payment_state = :unpaid)",
                &["payment_state", "payment_id", "updated_at_ms", "version"],
                vec![
                    (":processing", s(OrderPaymentState::Processing.as_str())),
                    (":unpaid", s(OrderPaymentState::Unpaid.as_str())),
                    (":pid", s(&payment.payment_id)),
                    (":now", n(now_ms)),
                    (":version", n(payment.order_version)),
                ],
            )?,
        ];
        match self.transact("resume_attempt", items).await {
            Ok(()) => Ok(ResumeOutcome::Resumed),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) => {
                if let Some(r) = reasons.first().filter(|r| r.condition_failed()) {
                    let now = r.item.as_ref().map(record_of).transpose()?.flatten();
                    return Ok(ResumeOutcome::KeyMoved(match now {
                        // Still ours to take: the payment was settled meanwhile. Decide again
                        // on what is stored now.
                        Some(now) if now.lease().is_some_and(|l| l.token == *seen) => None,
                        other => other,
                    }));
                }
                if let Some(r) = reasons.get(1).filter(|r| r.condition_failed()) {
                    return Ok(ResumeOutcome::OrderChanged(
                        r.item.as_ref().map(order_from_item).transpose()?,
                    ));
                }
                Err(StoreError::Corrupt {
                    key: record.to_string(),
                    reason: format!("resume_attempt cancelled: {reasons:?}"),
                })
            }
        }
    }

    async fn read_payment(
        &self,
        payment_id: &str,
        read: Read,
    ) -> Result<Option<Payment>, StoreError> {
        self.get_as(payment_pk(payment_id), read)
            .await?
            .as_ref()
            .map(payment_from_item)
            .transpose()
    }

    async fn finish_attempt(
        &self,
        payment: &Payment,
        transition: &Transition,
        lease: &LeaseToken,
        by: FinishedBy,
    ) -> Result<SettleOutcome, StoreError> {
        let order = if by.leaves_order(payment, transition) {
            OrderWrite::Leave
        } else {
            OrderWrite::Follow
        };
        let written = self
            .write_transition(
                "finish_attempt",
                payment,
                transition,
                order,
                Some(lease),
                |_| Ok(Vec::new()),
            )
            .await?;
        written.finished(payment)
    }

    async fn release_unsent(
        &self,
        payment: &Payment,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        let now_ms = self.clock.now_ms();
        let items = vec![
            update_item(
                &self.tables.payments,
                &payment_pk(&payment.payment_id),
                "SET #lease_until_ms = :lapsed",
                "#lease_token = :mine AND #key_status = :in_progress",
                &[LEASE_UNTIL_MS, LEASE_TOKEN, KEY_STATUS],
                vec![
                    (":lapsed", n(Lease::RELEASED_UNTIL_MS)),
                    (":mine", s(lease.as_str())),
                    (":in_progress", s(RecordStatus::InProgress.as_str())),
                ],
            )?,
            order_follow(
                &self.tables.payments,
                &Payment {
                    status: PaymentStatus::Failed,
                    ..payment.clone()
                },
                now_ms,
            )?,
        ];
        match self.transact("release_unsent", items).await {
            Ok(()) => Ok(()),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons))
                if reasons.first().is_some_and(Reason::condition_failed) =>
            {
                Err(StoreError::LeaseLost {
                    key: RecordKey::from_stored(payment.idempotency_pk.clone()),
                })
            }
            Err(TxFailure::Cancelled(reasons)) => Err(StoreError::Corrupt {
                key: payment.payment_id.clone(),
                reason: format!("release_unsent cancelled: {reasons:?}"),
            }),
        }
    }

    async fn settle(
        &self,
        payment: &Payment,
        transition: &Transition,
        event: Option<&EventMark>,
    ) -> Result<SettleOutcome, StoreError> {
        let record_table = self.tables.idempotency.clone();
        let now_ms = self.clock.now_ms();
        // The key's record is on the payment and answers replays from it as it is: no mirror.
        let written = self
            .write_transition(
                "settle",
                payment,
                transition,
                OrderWrite::Follow,
                None,
                |_| {
                    event
                        .map(|event| Ok((Op::Event, event_put(&record_table, event, now_ms)?)))
                        .into_iter()
                        .collect()
                },
            )
            .await?;
        Ok(written.settled())
    }

    async fn charge_record(
        &self,
        key: &RecordKey,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        match self.get(payment_pk(&payment_id_for(key.as_str()))).await? {
            Some(item) => record_of(&item),
            None => Ok(None),
        }
    }

    async fn take_over_charge(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<TakeoverOutcome, StoreError> {
        let pk = payment_pk(&payment_id_for(key.as_str()));
        let sent = self
            .client
            .update_item()
            .table_name(&self.tables.payments)
            .key(PK, s(&pk))
            .update_expression("SET #lease_token = :new_token, #lease_until_ms = :until_ms")
            .condition_expression("#lease_token = :seen AND #key_status = :in_progress")
            .expression_attribute_names("#lease_token", LEASE_TOKEN)
            .expression_attribute_names("#lease_until_ms", LEASE_UNTIL_MS)
            .expression_attribute_names("#key_status", KEY_STATUS)
            .expression_attribute_values(":new_token", s(lease.token.as_str()))
            .expression_attribute_values(":until_ms", n(lease.until_ms))
            .expression_attribute_values(":seen", s(seen.as_str()))
            .expression_attribute_values(":in_progress", s(RecordStatus::InProgress.as_str()))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let corrupt = |reason: &str| StoreError::Corrupt {
            key: key.to_string(),
            reason: reason.into(),
        };
        match sent {
            Ok(output) => match output.attributes().map(record_of).transpose()?.flatten() {
                Some(record) => Ok(TakeoverOutcome::TakenOver(record)),
                None => Err(corrupt("the takeover returned no record")),
            },
            Err(error) if is_condition_failure(&error) => {
                let now = match error.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(failed)) => failed.item(),
                    _ => None,
                };
                Ok(TakeoverOutcome::refused(
                    lease,
                    now.map(record_of).transpose()?.flatten(),
                ))
            }
            Err(error) => Err(backend("take_over_charge", &pk, error)),
        }
    }

    async fn record_event(&self, event: &EventMark) -> Result<bool, StoreError> {
        let now_ms = self.clock.now_ms();
        let pk = event_pk(event);
        let sent = self
            .client
            .put_item()
            .table_name(&self.tables.idempotency)
            .set_item(Some(event_item(event, now_ms)))
            .condition_expression("attribute_not_exists(#pk) OR #expires_at < :now_s")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#expires_at", EXPIRES_AT)
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(true),
            Err(error) if is_condition_failure(&error) => Ok(false),
            Err(error) => Err(backend("record_event", &pk, error)),
        }
    }
}
