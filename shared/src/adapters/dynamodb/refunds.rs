//! The DynamoDB side of refunds: refund items in the payments table and the transactions that
//! move a refund, its payment's refunded and pending amounts and its idempotency record together.
//!
//! Refund items (`refund#<refund_id>`): `payment_id`, `number`, `amount`, `currency`, `reason`,
//! `status`, `provider_refund_id`, `failure_code`, `idempotency_pk`, `psp_maybe_reached` (only
//! once true), the sender's lease (`lease_token`, `lease_until_ms`, only while someone sends it),
//! timestamps and — only while pending — `inflight` + `check_at_ms`, the key of the sparse GSI
//! reconcile reads (shared with in-flight payments). The payment carries `refunded`,
//! `refund_pending` and `refund_count` (absent: 0) and `duplicate_refund`.

use super::attributes::{n, s, string};
use super::codec::{payment_from_item, refund_from_item, refund_put};
use super::expr::{build_error, names, put_item, update_item, values};
use super::idempotency::{item_from_record, record_from_item};
use super::payments::{complete_record, event_put, DynamoPaymentStore, Reason, TxFailure};
use super::schema::{
    payment_pk, refund_pk, ATTEMPT_ID, CHECK_AT, EXPIRES_AT, LEASE_TOKEN, LEASE_UNTIL_MS,
    MAYBE_REACHED, PK, REFUNDED, REFUND_COUNT, REFUND_PENDING, RESULT, STATUS,
};
use super::{backend, is_condition_failure};
use crate::domain::{
    refund_amounts_delta, refund_id_for, Payment, PaymentStatus, Refund, RefundStatus,
    RefundTransition, DUPLICATE_REFUND_NUMBER,
};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordStatus, StoreError,
};
use crate::ports::{
    BeginRefundOutcome, EventMark, RefundLeaseOutcome, RefundRecordWrite, RefundSettleOutcome,
    RefundStore, ResumeOutcome, SenderFence,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, KeysAndAttributes, TransactWriteItem,
};
use std::collections::HashMap;

/// `#name = :placeholder`, where an absent attribute counts as 0.
fn equals_counting_absent_as_zero(name: &str, placeholder: &str, value: i64) -> String {
    if value == 0 {
        format!("(attribute_not_exists(#{name}) OR #{name} = {placeholder})")
    } else {
        format!("#{name} = {placeholder}")
    }
}

/// The condition that the refund is in the status it was read in and, for a sender's write,
/// that the sender still holds its lease.
fn as_read_condition(fence: Option<SenderFence<'_>>) -> &'static str {
    match fence {
        Some(_) => "#status = :read_status AND #lease_token = :fence",
        None => "#status = :read_status",
    }
}

/// Asserts the refund is still in the status it was read in; a sender's (`fence`) also gives its
/// lease back.
fn refund_unchanged(
    table: &str,
    refund: &Refund,
    fence: Option<SenderFence<'_>>,
) -> Result<TransactWriteItem, StoreError> {
    if let Some(fence) = fence.filter(|fence| fence.give_back) {
        return update_item(
            table,
            &refund_pk(&refund.refund_id),
            "REMOVE #lease_token, #lease_until_ms",
            as_read_condition(Some(fence)),
            &["status", LEASE_TOKEN, LEASE_UNTIL_MS],
            vec![
                (":read_status", s(refund.status.as_str())),
                (":fence", s(fence.lease.as_str())),
            ],
        );
    }
    let (attribute_names, mut attribute_values) = (
        if fence.is_some() {
            vec!["status", LEASE_TOKEN]
        } else {
            vec!["status"]
        },
        vec![(":read_status", s(refund.status.as_str()))],
    );
    if let Some(fence) = fence {
        attribute_values.push((":fence", s(fence.lease.as_str())));
    }
    let check = ConditionCheck::builder()
        .table_name(table)
        .key(PK, s(refund_pk(&refund.refund_id)))
        .condition_expression(as_read_condition(fence))
        .set_expression_attribute_names(names(&attribute_names))
        .set_expression_attribute_values(values(attribute_values))
        .return_values_on_condition_check_failure(
            aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
        )
        .build()
        .map_err(build_error)?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

/// Moves the refund from the status it was read in to `after`'s; leaves the in-flight index
/// once failed or canceled (a succeeded one is watched a while longer). A sender's (`fence`)
/// also gives its lease back.
fn refund_update(
    table: &str,
    before: &Refund,
    after: &Refund,
    fence: Option<SenderFence<'_>>,
) -> Result<TransactWriteItem, StoreError> {
    let mut update = String::from("SET #status = :status, #updated_at_ms = :now");
    let mut attribute_names = vec!["status", "updated_at_ms"];
    let mut vals = vec![
        (":status", s(after.status.as_str())),
        (":read_status", s(before.status.as_str())),
        (":now", n(after.updated_at_ms)),
    ];
    if let Some(id) = &after.provider_refund_id {
        update.push_str(", #provider_refund_id = :prid");
        attribute_names.push("provider_refund_id");
        vals.push((":prid", s(id)));
    }
    if let Some(code) = &after.failure_code {
        update.push_str(", #failure_code = :code");
        attribute_names.push("failure_code");
        vals.push((":code", s(code)));
    }
    if after.check_at_ms != before.check_at_ms {
        update.push_str(", #check_at_ms = :check_at");
        attribute_names.push(CHECK_AT);
        vals.push((":check_at", n(after.check_at_ms)));
    }
    let mut removed = Vec::new();
    if !after.status.watched() {
        removed.push("#inflight");
        attribute_names.push("inflight");
    }
    if let Some(fence) = fence {
        if fence.give_back {
            removed.extend(["#lease_token", "#lease_until_ms"]);
            attribute_names.extend([LEASE_TOKEN, LEASE_UNTIL_MS]);
        } else {
            attribute_names.push(LEASE_TOKEN);
        }
        vals.push((":fence", s(fence.lease.as_str())));
    }
    if !removed.is_empty() {
        update.push_str(" REMOVE ");
        update.push_str(&removed.join(", "));
    }
    update_item(
        table,
        &refund_pk(&before.refund_id),
        &update,
        as_read_condition(fence),
        &attribute_names,
        vals,
    )
}

/// Adds the refund amounts a status change moves to the payment (atomic `ADD`: the refund's own
/// status condition in the same transaction makes it apply once).
fn payment_amounts(
    table: &str,
    payment_id: &str,
    delta: (i64, i64),
    now_ms: i64,
) -> Result<TransactWriteItem, StoreError> {
    update_item(
        table,
        &payment_pk(payment_id),
        "ADD #refunded :refunded, #refund_pending :pending SET #updated_at_ms = :now",
        "attribute_exists(#pk)",
        &[REFUNDED, REFUND_PENDING, "updated_at_ms", PK],
        vec![
            (":refunded", n(delta.0)),
            (":pending", n(delta.1)),
            (":now", n(now_ms)),
        ],
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Refund,
    Payment,
    Record,
    Event,
}

fn encode_refund_view(refund: &Refund) -> Result<String, StoreError> {
    serde_json::to_string(&refund.view()).map_err(|e| StoreError::Backend {
        operation: "encode refund view",
        source: Box::new(e),
    })
}

#[async_trait]
impl RefundStore for DynamoPaymentStore {
    fn refund_now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn load_for_refund(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        let (record, payment) = self.load_record_and(record, payment_pk(payment_id)).await?;
        Ok((record, payment.as_ref().map(payment_from_item).transpose()?))
    }

    async fn begin_refund(
        &self,
        claim: &Claim,
        payment: &Payment,
        refund: &Refund,
    ) -> Result<BeginRefundOutcome, StoreError> {
        let captured = payment.amount_captured();
        if payment.amount_refunded + payment.refund_pending + refund.amount > captured {
            return Ok(BeginRefundOutcome::PaymentChanged(Some(Box::new(
                payment.clone(),
            ))));
        }
        let now_ms = self.clock.now_ms();
        let record = claim.record(now_ms);
        // The payment's refund amounts and capture exactly as read: the sum checked above holds
        // when written.
        let condition = [
            "#status = :succeeded".to_owned(),
            match payment.progress.amount_captured {
                Some(_) => "#amount_captured = :read_captured".to_owned(),
                None => "attribute_not_exists(#amount_captured)".to_owned(),
            },
            equals_counting_absent_as_zero(REFUND_COUNT, ":read_count", payment.refund_count),
            equals_counting_absent_as_zero(REFUNDED, ":read_refunded", payment.amount_refunded),
            equals_counting_absent_as_zero(REFUND_PENDING, ":read_pending", payment.refund_pending),
        ]
        .join(" AND ");
        let items = vec![
            put_item(
                &self.tables.idempotency,
                item_from_record(&record),
                "attribute_not_exists(#pk) OR #expires_at < :now_s",
                &[PK, EXPIRES_AT],
                vec![(":now_s", n(now_ms.div_euclid(1000)))],
            )?,
            update_item(
                &self.tables.payments,
                &payment_pk(&payment.payment_id),
                "SET #refund_count = :count, #refund_pending = :pending, #updated_at_ms = :now",
                &condition,
                &[
                    "status",
                    "amount_captured",
                    REFUND_COUNT,
                    REFUNDED,
                    REFUND_PENDING,
                    "updated_at_ms",
                ],
                [
                    (":succeeded", s(PaymentStatus::Succeeded.as_str())),
                    (":read_count", n(payment.refund_count)),
                    (":read_refunded", n(payment.amount_refunded)),
                    (":read_pending", n(payment.refund_pending)),
                    (":count", n(payment.refund_count + 1)),
                    (":pending", n(payment.refund_pending + refund.amount)),
                    (":now", n(now_ms)),
                ]
                .into_iter()
                .chain(
                    payment
                        .progress
                        .amount_captured
                        .map(|amount| (":read_captured", n(amount))),
                )
                .collect(),
            )?,
            refund_put(&self.tables.payments, refund)?,
        ];
        match self.transact("begin_refund", items).await {
            Ok(()) => Ok(BeginRefundOutcome::Begun),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) => {
                if let Some(r) = reasons.first().filter(|r| r.condition_failed()) {
                    return match &r.item {
                        Some(item) => Ok(BeginRefundOutcome::KeyTaken(record_from_item(item)?)),
                        None => Err(StoreError::Corrupt {
                            key: claim.key.to_string(),
                            reason: "claim refused without the existing record".into(),
                        }),
                    };
                }
                if let Some(r) = reasons.get(1).filter(|r| r.condition_failed()) {
                    return Ok(BeginRefundOutcome::PaymentChanged(
                        r.item
                            .as_ref()
                            .map(payment_from_item)
                            .transpose()?
                            .map(Box::new),
                    ));
                }
                Err(StoreError::Corrupt {
                    key: refund.refund_id.clone(),
                    reason: format!("begin_refund cancelled: {reasons:?}"),
                })
            }
        }
    }

    async fn resume_refund(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        refund: &Refund,
    ) -> Result<ResumeOutcome, StoreError> {
        let mut items = vec![update_item(
            &self.tables.idempotency,
            record.as_str(),
            "SET #lease_token = :new_token, #lease_until_ms = :until_ms",
            "#lease_token = :seen AND #status = :in_progress AND #attempt_id = :rid",
            &[LEASE_TOKEN, LEASE_UNTIL_MS, STATUS, ATTEMPT_ID],
            vec![
                (":new_token", s(lease.token.as_str())),
                (":until_ms", n(lease.until_ms)),
                (":seen", s(seen.as_str())),
                (":in_progress", s(RecordStatus::InProgress.as_str())),
                (":rid", s(&refund.refund_id)),
            ],
        )?];
        // The refund's sender lease moves with the record's, unless another sender (reconcile)
        // holds it.
        let mut update = String::from("SET #lease_token = :new_token, #lease_until_ms = :until_ms");
        let mut vals = vec![
            (":new_token", s(lease.token.as_str())),
            (":until_ms", n(lease.until_ms)),
            (":pending", s(RefundStatus::Pending.as_str())),
            (":seen", s(seen.as_str())),
            (":now", n(self.clock.now_ms())),
        ];
        if refund.psp_maybe_reached {
            update.push_str(", #psp_maybe_reached = :yes");
            vals.push((":yes", AttributeValue::Bool(true)));
        }
        items.push(update_item(
            &self.tables.payments,
            &refund_pk(&refund.refund_id),
            &update,
            "#status = :pending AND (attribute_not_exists(#lease_token) OR #lease_token = :seen \
             OR #lease_until_ms <= :now)",
            if refund.psp_maybe_reached {
                &[LEASE_TOKEN, LEASE_UNTIL_MS, MAYBE_REACHED, "status"]
            } else {
                &[LEASE_TOKEN, LEASE_UNTIL_MS, "status"]
            },
            vals,
        )?);
        match self.transact("resume_refund", items).await {
            Ok(()) => Ok(ResumeOutcome::Resumed),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) => {
                if let Some(r) = reasons.first().filter(|r| r.condition_failed()) {
                    return Ok(ResumeOutcome::KeyMoved(
                        r.item.as_ref().map(record_from_item).transpose()?,
                    ));
                }
                if let Some(r) = reasons.get(1).filter(|r| r.condition_failed()) {
                    let now = r.item.as_ref().map(refund_from_item).transpose()?;
                    return Ok(match now {
                        Some(now) if now.status == RefundStatus::Pending => {
                            ResumeOutcome::LeaseHeld {
                                until_ms: now.lease.map_or(0, |l| l.until_ms),
                            }
                        }
                        _ => ResumeOutcome::KeyMoved(None),
                    });
                }
                Err(StoreError::Corrupt {
                    key: refund.refund_id.clone(),
                    reason: format!("resume_refund cancelled: {reasons:?}"),
                })
            }
        }
    }

    async fn get_refund(&self, refund_id: &str) -> Result<Option<Refund>, StoreError> {
        self.get(refund_pk(refund_id))
            .await?
            .as_ref()
            .map(refund_from_item)
            .transpose()
    }

    async fn refunded_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        crate::ports::ChargeStore::get_payment(self, payment_id).await
    }

    async fn refunds_of(&self, payment: &Payment) -> Result<Vec<Refund>, StoreError> {
        let numbers: Vec<String> = (1..=payment.refund_count)
            .map(|n| n.to_string())
            .chain(
                payment
                    .duplicate_refund
                    .then(|| DUPLICATE_REFUND_NUMBER.to_owned()),
            )
            .collect();
        let mut found = Vec::with_capacity(numbers.len());
        // BatchGetItem takes at most 100 keys.
        for chunk in numbers.chunks(100) {
            let keys = chunk
                .iter()
                .map(|number| {
                    HashMap::from([(
                        PK.to_owned(),
                        s(refund_pk(&refund_id_for(&payment.payment_id, number))),
                    )])
                })
                .collect::<Vec<_>>();
            let mut request = HashMap::from([(
                self.tables.payments.clone(),
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(build_error)?,
            )]);
            let mut rounds = 0;
            loop {
                let output = self
                    .client
                    .batch_get_item()
                    .set_request_items(Some(request))
                    .send()
                    .await
                    .map_err(|e| backend("refunds_of", &payment.payment_id, e))?;
                for items in output.responses.unwrap_or_default().into_values() {
                    for item in &items {
                        found.push(refund_from_item(item)?);
                    }
                }
                match output.unprocessed_keys {
                    Some(left) if !left.is_empty() && rounds < 5 => {
                        rounds += 1;
                        request = left;
                    }
                    Some(left) if !left.is_empty() => {
                        return Err(StoreError::Conflict {
                            item: payment.payment_id.clone(),
                        })
                    }
                    _ => break,
                }
            }
        }
        let position = |refund: &Refund| {
            numbers
                .iter()
                .position(|number| *number == refund.number)
                .unwrap_or(usize::MAX)
        };
        found.sort_by_key(position);
        Ok(found)
    }

    async fn write_refund(
        &self,
        refund: &Refund,
        step: &RefundTransition,
        record: RefundRecordWrite<'_>,
        fence: Option<SenderFence<'_>>,
        event: Option<&EventMark>,
    ) -> Result<RefundSettleOutcome, StoreError> {
        let now_ms = self.clock.now_ms();
        let mut after = refund.after(step, now_ms);
        if fence.is_some_and(|fence| fence.give_back) {
            after.lease = None;
        }
        let view = encode_refund_view(&after)?;
        // As in `settle`: the move carries the mirror, or the condition that there is no
        // completed record of this refund to mirror onto (see `record_not_mirrored`).
        let mut with_mirror = true;
        let mut switches = 0;
        loop {
            let mut items = Vec::with_capacity(4);
            let mut labels = Vec::with_capacity(4);
            match step {
                RefundTransition::Apply { status, .. } => {
                    items.push(refund_update(&self.tables.payments, refund, &after, fence)?);
                    labels.push(Op::Refund);
                    let delta = refund_amounts_delta(refund.status, *status, refund.amount);
                    if delta != (0, 0) {
                        items.push(payment_amounts(
                            &self.tables.payments,
                            &refund.payment_id,
                            delta,
                            now_ms,
                        )?);
                        labels.push(Op::Payment);
                    }
                }
                RefundTransition::Unchanged => {
                    items.push(refund_unchanged(&self.tables.payments, refund, fence)?);
                    labels.push(Op::Refund);
                }
            }
            match (record, &refund.idempotency_pk) {
                (
                    RefundRecordWrite::Complete {
                        lease,
                        expires_at_s,
                    },
                    Some(pk),
                ) => {
                    items.push(complete_record(
                        &self.tables.idempotency,
                        pk,
                        lease,
                        &view,
                        expires_at_s,
                    )?);
                    labels.push(Op::Record);
                }
                (RefundRecordWrite::Complete { .. }, None) => {
                    return Err(StoreError::LeaseLost {
                        key: RecordKey::from_stored(refund.refund_id.clone()),
                    })
                }
                (RefundRecordWrite::Mirror { expires_at_s }, Some(pk)) if with_mirror => {
                    items.push(update_item(
                        &self.tables.idempotency,
                        pk,
                        "SET #result = :result, #expires_at = :expires_at",
                        "#status = :completed AND #attempt_id = :rid",
                        &[RESULT, EXPIRES_AT, STATUS, ATTEMPT_ID],
                        vec![
                            (":result", s(&view)),
                            (":expires_at", n(expires_at_s)),
                            (":completed", s(RecordStatus::Completed.as_str())),
                            (":rid", s(&refund.refund_id)),
                        ],
                    )?);
                    labels.push(Op::Record);
                }
                (RefundRecordWrite::Mirror { .. }, Some(pk))
                    if matches!(step, RefundTransition::Apply { .. }) =>
                {
                    items.push(super::payments::record_not_mirrored(
                        &self.tables.idempotency,
                        pk,
                        &refund.refund_id,
                    )?);
                    labels.push(Op::Record);
                }
                (RefundRecordWrite::Extend { expires_at_s }, Some(pk)) if with_mirror => {
                    items.push(update_item(
                        &self.tables.idempotency,
                        pk,
                        "SET #expires_at = :expires_at",
                        "#attempt_id = :rid",
                        &[EXPIRES_AT, ATTEMPT_ID],
                        vec![
                            (":expires_at", n(expires_at_s)),
                            (":rid", s(&refund.refund_id)),
                        ],
                    )?);
                    labels.push(Op::Record);
                }
                (
                    RefundRecordWrite::Mirror { .. }
                    | RefundRecordWrite::Extend { .. }
                    | RefundRecordWrite::Keep,
                    _,
                ) => {}
            }
            if let Some(event) = event {
                items.push(event_put(&self.tables.idempotency, event, now_ms)?);
                labels.push(Op::Event);
            }
            if step == &RefundTransition::Unchanged
                && labels.len() == 1
                && !fence.is_some_and(|fence| fence.give_back)
            {
                // Nothing to write (no record to mirror onto, no event to mark).
                return Ok(RefundSettleOutcome::Settled(Box::new(after)));
            }
            match self.transact("write_refund", items).await {
                Ok(()) => return Ok(RefundSettleOutcome::Settled(Box::new(after))),
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
                        return Ok(RefundSettleOutcome::Duplicate);
                    }
                    if let Some(reason) = refused(Op::Refund) {
                        // Its status is checked first: a refund that moved is read again; one
                        // that did not refused the sender's lease.
                        let status_now =
                            reason.item.as_ref().and_then(|i| string(i, "status").ok());
                        if fence.is_some() && status_now.as_deref() == Some(refund.status.as_str())
                        {
                            return Err(StoreError::LeaseLost {
                                key: RecordKey::from_stored(refund.refund_id.clone()),
                            });
                        }
                        return Ok(RefundSettleOutcome::Moved);
                    }
                    if failed(Op::Record) {
                        if let RefundRecordWrite::Extend { .. } = record {
                            // The record is gone or another refund's: nothing to extend.
                            with_mirror = false;
                            continue;
                        }
                        if let RefundRecordWrite::Mirror { .. } = record {
                            // A completed record of this refund appeared, or there is none to
                            // mirror onto: switch, unless it keeps changing under us.
                            switches += 1;
                            if switches >= super::payments::MIRROR_TRIES {
                                return Err(StoreError::Conflict {
                                    item: refund.refund_id.clone(),
                                });
                            }
                            with_mirror = !with_mirror;
                            continue;
                        }
                        return Err(StoreError::LeaseLost {
                            key: RecordKey::from_stored(
                                refund.idempotency_pk.clone().unwrap_or_default(),
                            ),
                        });
                    }
                    return Err(StoreError::Corrupt {
                        key: refund.refund_id.clone(),
                        reason: format!("write_refund cancelled: {reasons:?}"),
                    });
                }
            }
        }
    }

    async fn take_refund_lease(
        &self,
        refund: &Refund,
        lease: &Lease,
    ) -> Result<RefundLeaseOutcome, StoreError> {
        let now_ms = self.clock.now_ms();
        let pk = refund_pk(&refund.refund_id);
        // Fenced on the lease as read: none, or one that lapsed (whose holder may have called).
        let (condition, lapsed) = match &refund.lease {
            None => (
                "#status = :pending AND attribute_not_exists(#lease_token)",
                None,
            ),
            Some(seen) => (
                "#status = :pending AND #lease_token = :seen AND #lease_until_ms <= :now",
                Some(seen),
            ),
        };
        let mut update = String::from("SET #lease_token = :token, #lease_until_ms = :until_ms");
        let mut vals = vec![
            (":pending", s(RefundStatus::Pending.as_str())),
            (":token", s(lease.token.as_str())),
            (":until_ms", n(lease.until_ms)),
        ];
        if let Some(seen) = lapsed {
            update.push_str(", #psp_maybe_reached = :yes");
            vals.push((":yes", AttributeValue::Bool(true)));
            vals.push((":seen", s(seen.token.as_str())));
            vals.push((":now", n(now_ms)));
        }
        let sent = self
            .client
            .update_item()
            .table_name(&self.tables.payments)
            .key(PK, s(&pk))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(names(if lapsed.is_some() {
                &["status", LEASE_TOKEN, LEASE_UNTIL_MS, MAYBE_REACHED]
            } else {
                &["status", LEASE_TOKEN, LEASE_UNTIL_MS]
            }))
            .set_expression_attribute_values(values(vals))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .return_values_on_condition_check_failure(
                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
            .send()
            .await;
        match sent {
            Ok(output) => {
                let now = output
                    .attributes
                    .as_ref()
                    .map(refund_from_item)
                    .transpose()?
                    .ok_or_else(|| StoreError::Corrupt {
                        key: pk.clone(),
                        reason: "a taken lease came back without the refund".into(),
                    })?;
                Ok(RefundLeaseOutcome::Taken(Box::new(now)))
            }
            Err(error) if is_condition_failure(&error) => {
                let item = match error.as_service_error() {
                    Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(failed)) => {
                        failed.item().cloned()
                    }
                    _ => None,
                };
                let now = item.as_ref().map(refund_from_item).transpose()?;
                Ok(crate::adapters::refund_lease_refused(now, lease, now_ms))
            }
            Err(error) => Err(backend("take_refund_lease", &pk, error)),
        }
    }

    async fn stop_watching(&self, refund: &Refund) -> Result<(), StoreError> {
        let pk = refund_pk(&refund.refund_id);
        let sent = self
            .client
            .update_item()
            .table_name(&self.tables.payments)
            .key(PK, s(&pk))
            .update_expression("REMOVE #inflight")
            .condition_expression("#status = :succeeded")
            .expression_attribute_names("#inflight", "inflight")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":succeeded", s(RefundStatus::Succeeded.as_str()))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) if is_condition_failure(&error) => Ok(()),
            Err(error) => Err(backend("stop_watching", &pk, error)),
        }
    }

    async fn cancel_unsent_refund(
        &self,
        refund: &Refund,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        let record_pk = refund.idempotency_pk.clone().unwrap_or_default();
        let now_ms = self.clock.now_ms();
        let canceled = Refund {
            status: RefundStatus::Canceled,
            updated_at_ms: now_ms,
            ..refund.clone()
        };
        let delete = Delete::builder()
            .table_name(&self.tables.idempotency)
            .key(PK, s(&record_pk))
            .condition_expression("#lease_token = :mine")
            .set_expression_attribute_names(names(&[LEASE_TOKEN]))
            .set_expression_attribute_values(values(vec![(":mine", s(lease.as_str()))]))
            .build()
            .map_err(build_error)?;
        let pending = Refund {
            status: RefundStatus::Pending,
            ..refund.clone()
        };
        let items = vec![
            TransactWriteItem::builder().delete(delete).build(),
            refund_update(
                &self.tables.payments,
                &pending,
                &canceled,
                Some(SenderFence::done(lease)),
            )?,
            payment_amounts(
                &self.tables.payments,
                &refund.payment_id,
                refund_amounts_delta(RefundStatus::Pending, RefundStatus::Canceled, refund.amount),
                now_ms,
            )?,
        ];
        match self.transact("cancel_unsent_refund", items).await {
            Ok(()) => Ok(()),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons))
                if reasons.first().is_some_and(Reason::condition_failed) =>
            {
                Err(StoreError::LeaseLost {
                    key: RecordKey::from_stored(record_pk),
                })
            }
            // The refund's sender lease is another's (reconcile took it), or it settled.
            Err(TxFailure::Cancelled(reasons))
                if reasons.get(1).is_some_and(Reason::condition_failed) =>
            {
                Err(StoreError::LeaseLost {
                    key: RecordKey::from_stored(record_pk),
                })
            }
            Err(TxFailure::Cancelled(reasons)) => Err(StoreError::Corrupt {
                key: refund.refund_id.clone(),
                reason: format!("cancel_unsent_refund cancelled: {reasons:?}"),
            }),
        }
    }
}
