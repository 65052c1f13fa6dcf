//! Orders, payments and refunds as items of the payments table, and back.

use super::attributes::{n, number, s, string, AttributeError, Item};
use super::expr::put_item;
use super::schema::{
    order_pk, payment_pk, refund_pk, CHECK_AT, DUPLICATE_REFUND, LEASE_TOKEN, LEASE_UNTIL_MS,
    MAYBE_REACHED, OP_AMOUNT, OP_COUNT, OP_FROM, OP_KIND, OP_RECORD, OP_SEQ, PK, REFUNDED,
    REFUND_COUNT, REFUND_PENDING, REFUND_REQUIRED,
};
use crate::domain::SenderLease;
use crate::domain::{
    CancellationReason, CaptureMethod, Currency, Failure, FailureKind, LineItem, NextAction,
    OperationKind, Order, OrderPaymentState, Payment, PaymentOperation, PaymentStatus, Progress,
    Refund, RefundReason, RefundStatus,
};
use crate::idempotency::StoreError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};

/// The attributes of a payment's [`Progress`], each absent while empty: a transition that
/// changes the progress sets the present ones and removes the others.
pub(super) const PROGRESS: [&str; 7] = [
    "next_action_url",
    "next_action_expires_at_ms",
    "action_completed",
    "amount_capturable",
    "capture_before_ms",
    "amount_captured",
    "cancellation_reason",
];

/// Each of [`PROGRESS`] as an update expression's name and value placeholders.
pub(super) const PROGRESS_PLACEHOLDERS: [(&str, &str); 7] = [
    ("#next_action_url", ":next_action_url"),
    ("#next_action_expires_at_ms", ":next_action_expires_at_ms"),
    ("#action_completed", ":action_completed"),
    ("#amount_capturable", ":amount_capturable"),
    ("#capture_before_ms", ":capture_before_ms"),
    ("#amount_captured", ":amount_captured"),
    ("#cancellation_reason", ":cancellation_reason"),
];

/// `progress` as the attributes of [`PROGRESS`] that are present.
pub(super) fn progress_attributes(progress: &Progress) -> Vec<(&'static str, AttributeValue)> {
    let mut attributes = Vec::new();
    if let Some(action) = &progress.next_action {
        attributes.push((PROGRESS[0], s(&action.url)));
        attributes.push((PROGRESS[1], n(action.expires_at_ms)));
    }
    if progress.action_completed {
        attributes.push((PROGRESS[2], AttributeValue::Bool(true)));
    }
    if progress.amount_capturable != 0 {
        attributes.push((PROGRESS[3], n(progress.amount_capturable)));
    }
    if let Some(ms) = progress.capture_before_ms {
        attributes.push((PROGRESS[4], n(ms)));
    }
    if let Some(amount) = progress.amount_captured {
        attributes.push((PROGRESS[5], n(amount)));
    }
    if let Some(reason) = progress.cancellation_reason {
        attributes.push((PROGRESS[6], s(reason.as_str())));
    }
    attributes
}

fn progress_from_item(item: &Item) -> Result<Progress, AttributeError> {
    let optional_number = |name: &str| match item.get(name) {
        Some(_) => number(item, name).map(Some),
        None => Ok(None),
    };
    let next_action = match optional_string(item, PROGRESS[0]) {
        Some(url) => Some(NextAction {
            url,
            expires_at_ms: number(item, PROGRESS[1])?,
        }),
        None => None,
    };
    let cancellation_reason = match optional_string(item, PROGRESS[6]) {
        Some(raw) => Some(
            CancellationReason::parse(&raw)
                .ok_or_else(|| AttributeError::unknown(PROGRESS[6], raw))?,
        ),
        None => None,
    };
    Ok(Progress {
        next_action,
        action_completed: matches!(item.get(PROGRESS[2]), Some(AttributeValue::Bool(true))),
        amount_capturable: optional_number(PROGRESS[3])?.unwrap_or(0),
        capture_before_ms: optional_number(PROGRESS[4])?,
        amount_captured: optional_number(PROGRESS[5])?,
        cancellation_reason,
    })
}

pub(super) fn optional_string(item: &Item, name: &str) -> Option<String> {
    string(item, name).ok()
}

pub(super) fn currency(item: &Item) -> Result<Currency, AttributeError> {
    let code = string(item, "currency")?;
    Currency::parse(&code).ok_or_else(|| AttributeError::unknown("currency", code))
}

/// Reads an order item.
pub(crate) fn order_from_item(item: &Item) -> Result<Order, StoreError> {
    let pk = string(item, PK).unwrap_or_default();
    let corrupt = |reason: AttributeError| StoreError::Corrupt {
        key: pk.clone(),
        reason: reason.to_string(),
    };
    let state = string(item, "payment_state").map_err(corrupt)?;
    let items_json = string(item, "items").map_err(corrupt)?;
    Ok(Order {
        order_id: pk.trim_start_matches("order#").to_owned(),
        owner: string(item, "owner").map_err(corrupt)?,
        version: number(item, "version").map_err(corrupt)?,
        currency: currency(item).map_err(corrupt)?,
        items: serde_json::from_str::<Vec<LineItem>>(&items_json).map_err(|e| {
            corrupt(AttributeError::Unreadable {
                name: "items".into(),
                reason: e.to_string(),
            })
        })?,
        amount: number(item, "amount").map_err(corrupt)?,
        payment_state: OrderPaymentState::parse(&state)
            .ok_or_else(|| corrupt(AttributeError::unknown("payment_state", state)))?,
        payment_id: optional_string(item, "payment_id"),
        created_at_ms: number(item, "created_at_ms").map_err(corrupt)?,
        updated_at_ms: number(item, "updated_at_ms").map_err(corrupt)?,
    })
}

pub(super) fn order_to_item(order: &Order) -> Result<Item, StoreError> {
    let items = serde_json::to_string(&order.items).map_err(|e| StoreError::Backend {
        operation: "encode items",
        source: Box::new(e),
    })?;
    let mut item = Item::with_capacity(10);
    item.insert(PK.into(), s(order_pk(&order.order_id)));
    item.insert("kind".into(), s("order"));
    item.insert("owner".into(), s(&order.owner));
    item.insert("version".into(), n(order.version));
    item.insert("currency".into(), s(order.currency.as_str()));
    item.insert("items".into(), s(items));
    item.insert("amount".into(), n(order.amount));
    item.insert("payment_state".into(), s(order.payment_state.as_str()));
    if let Some(pid) = &order.payment_id {
        item.insert("payment_id".into(), s(pid));
    }
    item.insert("created_at_ms".into(), n(order.created_at_ms));
    item.insert("updated_at_ms".into(), n(order.updated_at_ms));
    Ok(item)
}

/// Reads a payment item.
pub(crate) fn payment_from_item(item: &Item) -> Result<Payment, StoreError> {
    let pk = string(item, PK).unwrap_or_default();
    let corrupt = |reason: AttributeError| StoreError::Corrupt {
        key: pk.clone(),
        reason: reason.to_string(),
    };
    let status = string(item, "status").map_err(corrupt)?;
    let failure = match optional_string(item, "failure_kind") {
        Some(kind) => Some(Failure {
            kind: FailureKind::parse(&kind)
                .ok_or_else(|| corrupt(AttributeError::unknown("failure_kind", kind)))?,
            decline_code: optional_string(item, "decline_code"),
        }),
        None => None,
    };
    Ok(Payment {
        payment_id: pk.trim_start_matches("payment#").to_owned(),
        order_id: string(item, "order_id").map_err(corrupt)?,
        order_version: number(item, "order_version").map_err(corrupt)?,
        owner: string(item, "owner").map_err(corrupt)?,
        amount: number(item, "amount").map_err(corrupt)?,
        currency: currency(item).map_err(corrupt)?,
        payment_method: string(item, "payment_method").map_err(corrupt)?,
        provider: string(item, "provider").map_err(corrupt)?,
        provider_payment_id: optional_string(item, "provider_payment_id"),
        status: PaymentStatus::parse(&status)
            .ok_or_else(|| corrupt(AttributeError::unknown("status", status)))?,
        failure,
        capture: match optional_string(item, "capture") {
            Some(raw) => CaptureMethod::parse(&raw)
                .ok_or_else(|| corrupt(AttributeError::unknown("capture", raw)))?,
            None => CaptureMethod::Automatic,
        },
        return_url: optional_string(item, "return_url"),
        progress: progress_from_item(item).map_err(corrupt)?,
        operation: operation_from_item(item).map_err(corrupt)?,
        operation_count: number(item, OP_COUNT).unwrap_or(0),
        idempotency_pk: string(item, "idempotency_pk").map_err(corrupt)?,
        psp_maybe_reached: matches!(item.get(MAYBE_REACHED), Some(AttributeValue::Bool(true))),
        amount_refunded: number(item, REFUNDED).unwrap_or(0),
        refund_pending: number(item, REFUND_PENDING).unwrap_or(0),
        refund_count: number(item, REFUND_COUNT).unwrap_or(0),
        duplicate_refund: matches!(item.get(DUPLICATE_REFUND), Some(AttributeValue::Bool(true))),
        refund_required: matches!(item.get(REFUND_REQUIRED), Some(AttributeValue::Bool(true))),
        created_at_ms: number(item, "created_at_ms").map_err(corrupt)?,
        updated_at_ms: number(item, "updated_at_ms").map_err(corrupt)?,
        check_at_ms: number(item, CHECK_AT).unwrap_or(0),
    })
}

/// A payment's claimed operation as attributes (none when it has none).
pub(super) fn operation_attributes(
    operation: Option<&PaymentOperation>,
) -> Vec<(&'static str, AttributeValue)> {
    let Some(operation) = operation else {
        return Vec::new();
    };
    let mut attributes = vec![
        (OP_KIND, s(operation.kind.as_str())),
        (OP_RECORD, s(&operation.record)),
        (OP_SEQ, n(operation.seq)),
        (OP_FROM, s(operation.from.as_str())),
    ];
    if let Some(amount) = operation.amount {
        attributes.push((OP_AMOUNT, n(amount)));
    }
    attributes
}

fn operation_from_item(item: &Item) -> Result<Option<PaymentOperation>, AttributeError> {
    let Some(kind) = optional_string(item, OP_KIND) else {
        return Ok(None);
    };
    let from = string(item, OP_FROM)?;
    Ok(Some(PaymentOperation {
        kind: OperationKind::parse(&kind).ok_or_else(|| AttributeError::unknown(OP_KIND, kind))?,
        amount: number(item, OP_AMOUNT).ok(),
        record: string(item, OP_RECORD)?,
        seq: number(item, OP_SEQ)?,
        from: PaymentStatus::parse(&from).ok_or_else(|| AttributeError::unknown(OP_FROM, from))?,
    }))
}

pub(super) fn payment_to_item(payment: &Payment) -> Item {
    let mut item = Item::with_capacity(24);
    item.insert(PK.into(), s(payment_pk(&payment.payment_id)));
    item.insert("kind".into(), s("payment"));
    item.insert("order_id".into(), s(&payment.order_id));
    item.insert("order_version".into(), n(payment.order_version));
    item.insert("owner".into(), s(&payment.owner));
    item.insert("amount".into(), n(payment.amount));
    item.insert("currency".into(), s(payment.currency.as_str()));
    item.insert("payment_method".into(), s(&payment.payment_method));
    item.insert("provider".into(), s(&payment.provider));
    if let Some(id) = &payment.provider_payment_id {
        item.insert("provider_payment_id".into(), s(id));
    }
    item.insert("status".into(), s(payment.status.as_str()));
    if let Some(failure) = &payment.failure {
        item.insert("failure_kind".into(), s(failure.kind.as_str()));
        if let Some(code) = &failure.decline_code {
            item.insert("decline_code".into(), s(code));
        }
    }
    if payment.capture == CaptureMethod::Manual {
        item.insert("capture".into(), s(payment.capture.as_str()));
    }
    if let Some(url) = &payment.return_url {
        item.insert("return_url".into(), s(url));
    }
    for (name, value) in progress_attributes(&payment.progress) {
        item.insert(name.into(), value);
    }
    for (name, value) in operation_attributes(payment.operation.as_ref()) {
        item.insert(name.into(), value);
    }
    if payment.operation_count > 0 {
        item.insert(OP_COUNT.into(), n(payment.operation_count));
    }
    item.insert("idempotency_pk".into(), s(&payment.idempotency_pk));
    if payment.psp_maybe_reached {
        item.insert(MAYBE_REACHED.into(), AttributeValue::Bool(true));
    }
    item.insert("created_at_ms".into(), n(payment.created_at_ms));
    item.insert("updated_at_ms".into(), n(payment.updated_at_ms));
    if payment.status.in_flight() {
        super::schema::mark_inflight(&mut item, &payment.payment_id, payment.check_at_ms);
    }
    item
}

pub(super) fn refund_to_item(refund: &Refund) -> Item {
    let mut item = Item::with_capacity(16);
    item.insert(PK.into(), s(refund_pk(&refund.refund_id)));
    item.insert("kind".into(), s("refund"));
    item.insert("payment_id".into(), s(&refund.payment_id));
    item.insert("number".into(), s(&refund.number));
    item.insert("amount".into(), n(refund.amount));
    item.insert("currency".into(), s(refund.currency.as_str()));
    if let Some(reason) = refund.reason {
        item.insert("reason".into(), s(reason.as_str()));
    }
    item.insert("status".into(), s(refund.status.as_str()));
    if let Some(id) = &refund.provider_refund_id {
        item.insert("provider_refund_id".into(), s(id));
    }
    if let Some(code) = &refund.failure_code {
        item.insert("failure_code".into(), s(code));
    }
    if let Some(pk) = &refund.idempotency_pk {
        item.insert("idempotency_pk".into(), s(pk));
    }
    if refund.psp_maybe_reached {
        item.insert(MAYBE_REACHED.into(), AttributeValue::Bool(true));
    }
    if let Some(lease) = &refund.lease {
        item.insert(LEASE_TOKEN.into(), s(lease.token.as_str()));
        item.insert(LEASE_UNTIL_MS.into(), n(lease.until_ms));
    }
    item.insert("created_at_ms".into(), n(refund.created_at_ms));
    item.insert("updated_at_ms".into(), n(refund.updated_at_ms));
    if refund.status == RefundStatus::Pending {
        super::schema::mark_inflight(&mut item, &refund.refund_id, refund.check_at_ms);
    }
    item
}

pub(super) fn refund_from_item(item: &Item) -> Result<Refund, StoreError> {
    let pk = string(item, PK).unwrap_or_default();
    let corrupt = |reason: AttributeError| StoreError::Corrupt {
        key: pk.clone(),
        reason: reason.to_string(),
    };
    let status = string(item, "status").map_err(corrupt)?;
    let reason = match optional_string(item, "reason") {
        Some(raw) => Some(
            RefundReason::parse(&raw)
                .ok_or_else(|| corrupt(AttributeError::unknown("reason", raw)))?,
        ),
        None => None,
    };
    Ok(Refund {
        refund_id: pk.trim_start_matches("refund#").to_owned(),
        payment_id: string(item, "payment_id").map_err(corrupt)?,
        number: string(item, "number").map_err(corrupt)?,
        amount: number(item, "amount").map_err(corrupt)?,
        currency: currency(item).map_err(corrupt)?,
        reason,
        status: RefundStatus::parse(&status)
            .ok_or_else(|| corrupt(AttributeError::unknown("status", status)))?,
        provider_refund_id: optional_string(item, "provider_refund_id"),
        failure_code: optional_string(item, "failure_code"),
        idempotency_pk: optional_string(item, "idempotency_pk"),
        psp_maybe_reached: matches!(item.get(MAYBE_REACHED), Some(AttributeValue::Bool(true))),
        lease: match optional_string(item, LEASE_TOKEN) {
            Some(token) => Some(SenderLease {
                token,
                until_ms: number(item, LEASE_UNTIL_MS).map_err(corrupt)?,
            }),
            None => None,
        },
        created_at_ms: number(item, "created_at_ms").map_err(corrupt)?,
        updated_at_ms: number(item, "updated_at_ms").map_err(corrupt)?,
        check_at_ms: number(item, CHECK_AT).unwrap_or(0),
    })
}

/// Creates `refund` (conditional on its id being new).
pub(super) fn refund_put(table: &str, refund: &Refund) -> Result<TransactWriteItem, StoreError> {
    put_item(
        table,
        refund_to_item(refund),
        "attribute_not_exists(#pk)",
        &[PK],
        vec![],
    )
}
