//! Orders, payments and refunds as items of the payments table, and back.

use super::attributes::{n, number, s, string, AttributeError, Item};
use super::expr::put_item;
use super::schema::{
    order_pk, payment_pk, refund_pk, CHECK_AT, DUPLICATE_REFUND, LEASE_TOKEN, LEASE_UNTIL_MS,
    MAYBE_REACHED, PK, REFUNDED, REFUND_COUNT, REFUND_PENDING, REFUND_REQUIRED,
};
use crate::domain::SenderLease;
use crate::domain::{
    Currency, Failure, FailureKind, LineItem, Order, OrderPaymentState, Payment, PaymentStatus,
    Refund, RefundReason, RefundStatus,
};
use crate::idempotency::StoreError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};

pub(super) fn failure_kind_str(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Declined => "declined",
        FailureKind::Rejected => "rejected",
        FailureKind::Refused => "refused",
        FailureKind::Abandoned => "abandoned",
    }
}

pub(super) fn parse_failure_kind(raw: &str) -> Option<FailureKind> {
    [
        FailureKind::Declined,
        FailureKind::Rejected,
        FailureKind::Refused,
        FailureKind::Abandoned,
    ]
    .into_iter()
    .find(|k| failure_kind_str(*k) == raw)
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
            kind: parse_failure_kind(&kind)
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

pub(super) fn payment_to_item(payment: &Payment) -> Item {
    let mut item = Item::with_capacity(18);
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
        item.insert("failure_kind".into(), s(failure_kind_str(failure.kind)));
        if let Some(code) = &failure.decline_code {
            item.insert("decline_code".into(), s(code));
        }
    }
    item.insert("idempotency_pk".into(), s(&payment.idempotency_pk));
    if payment.psp_maybe_reached {
        item.insert(MAYBE_REACHED.into(), AttributeValue::Bool(true));
    }
    item.insert("created_at_ms".into(), n(payment.created_at_ms));
    item.insert("updated_at_ms".into(), n(payment.updated_at_ms));
    if payment.status == PaymentStatus::Processing {
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
