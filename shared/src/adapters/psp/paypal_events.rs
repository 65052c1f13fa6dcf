//! The one reading of PayPal's objects — orders, captures, authorizations, refunds — shared by
//! the adapter's answers and lookups ([`super::paypal`]) and its webhooks ([`parse_event`]).
//!
//! A payment's PSP id is its PayPal **order** id: captures, authorizations and refunds name it
//! through `supplementary_data.related_ids.order_id`. Our payment id is the purchase unit's
//! `custom_id` (and `invoice_id`), echoed on captures and authorizations; our refund id is a
//! refund's `custom_id`. Amounts are decimal strings in the currency's major unit (`"30.00"`,
//! JPY `"3000"`), read exactly.
//!
//! Statuses (PayPal's published enums, read as open ones):
//! - order `COMPLETED`: what its capture or authorization says (a completed order can hold a
//!   **declined** capture); `APPROVED`, or `CREATED` when it has a vaulted source: waiting for
//!   our capture (or authorization) — *authorized* in payonce's words, the id to store before
//!   the second call; `PAYER_ACTION_REQUIRED`: the buyer must act at the `payer-action` link;
//!   `VOIDED`: canceled (as its authorization says why; expired without one); `CREATED` without
//!   a source, `SAVED` and anything else: not final;
//! - capture `COMPLETED`, `PARTIALLY_REFUNDED`, `REFUNDED`: captured (the refunds are their own
//!   word); `DECLINED`, `FAILED`: declined (`status_details.reason` the code); `PENDING`: not
//!   final, but it names the order (its id is stored);
//! - authorization `CREATED`: authorized until `expiration_time`; `CAPTURED`,
//!   `PARTIALLY_CAPTURED`: the capture says; `VOIDED`: canceled (expired once past its
//!   expiration); `DENIED`: declined; `PENDING`: not final, naming the order;
//! - refund `COMPLETED`: succeeded; `PENDING`: pending; `FAILED`, `CANCELLED`: failed.

use crate::domain::{CancellationReason, Currency, RefundSettlement, Settlement};
use crate::ports::{CheckedAmount, PspEvent, RefundEvent};
use serde::Deserialize;
use serde_json::Value;

/// A PayPal money object `{currency_code, value}` in minor units, if it is one payonce reads
/// exactly (a currency it knows, a value with no more digits than the currency has).
pub(crate) fn amount_of(money: &Value) -> Option<CheckedAmount> {
    let code = money["currency_code"].as_str()?.to_ascii_lowercase();
    let currency = Currency::parse(&code)?;
    Some(CheckedAmount {
        minor: currency.minor_from_decimal(money["value"].as_str()?)?,
        currency: code,
    })
}

/// PayPal's money object for `minor` units of `currency`: the upper-case code and a decimal
/// string with the currency's digits (none for JPY).
pub(crate) fn money(minor: i64, currency: Currency) -> Value {
    serde_json::json!({
        "currency_code": currency.as_str().to_ascii_uppercase(),
        "value": currency.decimal_from_minor(minor),
    })
}

/// The order's one purchase unit (payonce sends exactly one).
fn unit(order: &Value) -> &Value {
    &order["purchase_units"][0]
}

/// Our payment id on a PayPal object (`custom_id`), if it is one payonce makes.
pub(crate) fn our_payment_id(object: &Value) -> Option<String> {
    object["custom_id"]
        .as_str()
        .filter(|id| super::twoc2p_ids::invoice_no_for(id).is_some())
        .map(str::to_owned)
}

/// Our payment id on an order (its purchase unit's `custom_id`).
pub(crate) fn order_payment_id(order: &Value) -> Option<String> {
    our_payment_id(unit(order))
}

/// The order id a capture, authorization or refund names.
fn related_order(object: &Value) -> Option<String> {
    object["supplementary_data"]["related_ids"]["order_id"]
        .as_str()
        .map(str::to_owned)
}

/// The `href` of the order's link `rel`.
pub(crate) fn link(object: &Value, rel: &str) -> Option<String> {
    object["links"]
        .as_array()?
        .iter()
        .find(|link| link["rel"].as_str() == Some(rel))
        .and_then(|link| link["href"].as_str())
        .map(str::to_owned)
}

/// The order's latest capture, if it has one.
pub(crate) fn capture_of(order: &Value) -> Option<&Value> {
    unit(order)["payments"]["captures"]
        .as_array()
        .and_then(|captures| captures.last())
}

/// The order's authorization, if it has one.
pub(crate) fn authorization_of(order: &Value) -> Option<&Value> {
    unit(order)["payments"]["authorizations"]
        .as_array()
        .and_then(|authorizations| authorizations.first())
}

/// The order's refunds.
pub(crate) fn refunds_of(order: &Value) -> Vec<&Value> {
    unit(order)["payments"]["refunds"]
        .as_array()
        .map(|refunds| refunds.iter().collect())
        .unwrap_or_default()
}

/// What the order's purchase unit asks for.
pub(crate) fn order_amount(order: &Value) -> Option<CheckedAmount> {
    amount_of(&unit(order)["amount"])
}

/// What a capture says of order `order_id`.
pub(crate) fn capture_settlement(capture: &Value, order_id: String) -> Option<Settlement> {
    let declined = || Settlement::Declined {
        provider_payment_id: Some(order_id.clone()),
        decline_code: capture["status_details"]["reason"]
            .as_str()
            .unwrap_or("DECLINED")
            .to_owned(),
    };
    match capture["status"].as_str()? {
        "COMPLETED" | "PARTIALLY_REFUNDED" | "REFUNDED" => Some(Settlement::Captured {
            amount_captured: amount_of(&capture["amount"])?.minor,
            provider_payment_id: order_id,
        }),
        "DECLINED" | "FAILED" => Some(declined()),
        // Held for review or an eCheck clearing: not decided, but it names the order.
        "PENDING" => Some(Settlement::Pending {
            provider_payment_id: order_id,
        }),
        _ => None,
    }
}

/// What an authorization says of order `order_id`.
pub(crate) fn authorization_settlement(
    authorization: &Value,
    order_id: String,
) -> Option<Settlement> {
    let expires_ms = authorization["expiration_time"]
        .as_str()
        .and_then(crate::logging::epoch_ms_of_rfc3339);
    match authorization["status"].as_str()? {
        "CREATED" => Some(Settlement::Authorized {
            amount_capturable: amount_of(&authorization["amount"])?.minor,
            capture_before_ms: expires_ms,
            provider_payment_id: order_id,
        }),
        "VOIDED" => {
            let lapsed = match (
                expires_ms,
                authorization["update_time"]
                    .as_str()
                    .and_then(crate::logging::epoch_ms_of_rfc3339),
            ) {
                (Some(expires), Some(updated)) => updated >= expires,
                _ => false,
            };
            Some(Settlement::Canceled {
                provider_payment_id: Some(order_id),
                reason: if lapsed {
                    CancellationReason::Expired
                } else {
                    CancellationReason::Requested
                },
            })
        }
        "DENIED" => Some(Settlement::Declined {
            provider_payment_id: Some(order_id),
            decline_code: "DENIED".to_owned(),
        }),
        "PENDING" => Some(Settlement::Pending {
            provider_payment_id: order_id,
        }),
        _ => None,
    }
}

/// Where the buyer must act on an order that waits for them (`PAYER_ACTION_REQUIRED`: its
/// `payer-action` link, or an older `approve` one); the caller words it as an action.
pub(crate) fn payer_action_url(order: &Value) -> Option<String> {
    (order["status"].as_str() == Some("PAYER_ACTION_REQUIRED"))
        .then(|| link(order, "payer-action").or_else(|| link(order, "approve")))
        .flatten()
}

/// What an order says (see the module docs); an order waiting for its buyer says nothing here
/// ([`payer_action_url`]).
pub(crate) fn order_settlement(order: &Value) -> Option<Settlement> {
    let id = order["id"].as_str()?.to_owned();
    let awaiting_us = || {
        Some(Settlement::Authorized {
            amount_capturable: order_amount(order)?.minor,
            capture_before_ms: None,
            provider_payment_id: id.clone(),
        })
    };
    match order["status"].as_str()? {
        "COMPLETED" => match (capture_of(order), authorization_of(order)) {
            (Some(capture), _) => capture_settlement(capture, id),
            (None, Some(authorization)) => authorization_settlement(authorization, id),
            (None, None) => None,
        },
        "APPROVED" => awaiting_us(),
        "CREATED" if order.get("payment_source").is_some_and(has_vault) => awaiting_us(),
        // Voided: why is its authorization's word (voided by us, or lapsed at its expiry); an
        // order voided without one was never approved, and lapsed.
        "VOIDED" => {
            let reason = authorization_of(order)
                .and_then(|authorization| authorization_settlement(authorization, id.clone()))
                .and_then(|settlement| match settlement {
                    Settlement::Canceled { reason, .. } => Some(reason),
                    _ => None,
                })
                .unwrap_or(CancellationReason::Expired);
            Some(Settlement::Canceled {
                provider_payment_id: Some(id),
                reason,
            })
        }
        _ => None,
    }
}

/// Whether a `payment_source` names a vaulted card or PayPal wallet.
fn has_vault(source: &Value) -> bool {
    ["card", "paypal"].iter().any(|kind| {
        source[kind]["vault_id"].is_string()
            || source[kind]["attributes"]["vault"]["id"].is_string()
    })
}

/// What a refund says.
pub(crate) fn refund_settlement(refund: &Value) -> Option<RefundSettlement> {
    let id = refund["id"].as_str()?.to_owned();
    match refund["status"].as_str()? {
        "COMPLETED" => Some(RefundSettlement::Succeeded {
            provider_refund_id: id,
        }),
        "PENDING" => Some(RefundSettlement::Pending {
            provider_refund_id: id,
        }),
        status @ ("FAILED" | "CANCELLED") => Some(RefundSettlement::Failed {
            provider_refund_id: Some(id),
            code: status.to_ascii_lowercase(),
        }),
        _ => None,
    }
}

/// A PayPal notification, as far as payonce reads it.
#[derive(Deserialize)]
struct Event {
    id: String,
    event_type: String,
    #[serde(default)]
    resource_type: String,
    #[serde(default)]
    resource: Value,
}

/// Reads a verified PayPal notification. Deduplicated by its `id` (`WH-…`).
///
/// - `CHECKOUT.ORDER.*` (resource: the order): ours by the purchase unit's `custom_id`; what
///   the order says. `CHECKOUT.ORDER.APPROVED` reads as authorized: the order waits for our
///   capture, which the processor leaves to the charge path and reconcile to send.
/// - `PAYMENT.CAPTURE.*` (resource: a capture; a refund for `PAYMENT.CAPTURE.REFUNDED`):
///   ours by `custom_id`, about the order its `related_ids` name.
/// - `PAYMENT.AUTHORIZATION.*` (resource: an authorization), likewise.
///
/// The amount reported is the object's. PayPal puts no live/test mode in the body.
pub fn parse_event(body: &[u8]) -> Result<PspEvent, serde_json::Error> {
    let event: Event = serde_json::from_slice(body)?;
    let resource = &event.resource;
    let mut read = PspEvent {
        event_id: event.id,
        kind: event.event_type,
        payment_id: None,
        settlement: None,
        refund: None,
        refunds_changed: false,
        amount: None,
        livemode: None,
        account: None,
    };
    match event.resource_type.as_str() {
        "checkout-order" => {
            read.payment_id = order_payment_id(resource);
            if read.payment_id.is_some() {
                read.settlement = order_settlement(resource);
                read.amount = order_amount(resource);
            }
        }
        "capture" | "authorization" => {
            read.payment_id = our_payment_id(resource);
            if let (Some(_), Some(order_id)) = (&read.payment_id, related_order(resource)) {
                read.settlement = if event.resource_type == "capture" {
                    capture_settlement(resource, order_id)
                } else {
                    authorization_settlement(resource, order_id)
                };
                read.amount = amount_of(&resource["amount"]);
            }
        }
        "refund" => {
            let refund_id = resource["custom_id"]
                .as_str()
                .filter(|id| crate::domain::is_refund_id(id));
            if let (Some(refund_id), Some(settlement)) = (refund_id, refund_settlement(resource)) {
                read.refund = Some(RefundEvent {
                    refund_id: refund_id.to_owned(),
                    settlement,
                });
                read.amount = amount_of(&resource["amount"]);
            }
        }
        _ => {}
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OURS: &str = "pay_00112233445566778899aabbccddeeff";

    fn order(status: &str, payments: Value) -> Value {
        json!({"id": "5O190127TN364715T", "status": status, "intent": "CAPTURE",
            "purchase_units": [{"custom_id": OURS, "invoice_id": OURS,
                "amount": {"currency_code": "USD", "value": "30.00"}, "payments": payments}],
            "links": [{"rel": "payer-action", "href": "https://www.paypal.com/checkoutnow?token=5O190127TN364715T", "method": "GET"}]})
    }

    #[test]
    fn amounts_are_read_exactly_by_the_currency_and_written_back() {
        assert_eq!(
            amount_of(&json!({"currency_code": "USD", "value": "30.00"})).map(|a| a.minor),
            Some(3000)
        );
        assert_eq!(
            amount_of(&json!({"currency_code": "JPY", "value": "3000"})).map(|a| a.minor),
            Some(3000)
        );
        assert_eq!(
            amount_of(&json!({"currency_code": "USD", "value": "30.001"})),
            None
        );
        assert_eq!(
            amount_of(&json!({"currency_code": "XXX", "value": "1"})),
            None
        );
        assert_eq!(
            money(3000, Currency::Jpy),
            json!({"currency_code": "JPY", "value": "3000"})
        );
        assert_eq!(
            money(3005, Currency::Usd),
            json!({"currency_code": "USD", "value": "30.05"})
        );
    }

    #[test]
    fn an_order_says_what_its_capture_or_authorization_says() {
        let completed = order(
            "COMPLETED",
            json!({"captures": [{"id": "C1", "status": "COMPLETED",
            "amount": {"currency_code": "USD", "value": "30.00"}}]}),
        );
        assert_eq!(
            order_settlement(&completed),
            Some(Settlement::Captured {
                provider_payment_id: "5O190127TN364715T".into(),
                amount_captured: 3000
            })
        );
        // A completed order can hold a declined capture.
        let declined = order(
            "COMPLETED",
            json!({"captures": [{"id": "C1", "status": "DECLINED",
            "status_details": {"reason": "DECLINED_BY_RISK_FRAUD_FILTERS"},
            "amount": {"currency_code": "USD", "value": "30.00"}}]}),
        );
        assert!(matches!(order_settlement(&declined),
            Some(Settlement::Declined { ref decline_code, .. }) if decline_code == "DECLINED_BY_RISK_FRAUD_FILTERS"));
        let authorized = order(
            "COMPLETED",
            json!({"authorizations": [{"id": "A1", "status": "CREATED",
            "amount": {"currency_code": "USD", "value": "30.00"}, "expiration_time": "2026-12-30T10:00:00Z"}]}),
        );
        assert!(matches!(
            order_settlement(&authorized),
            Some(Settlement::Authorized {
                amount_capturable: 3000,
                capture_before_ms: Some(_),
                ..
            })
        ));
        // Approved (or created with a vaulted source): waiting for our capture.
        assert!(matches!(
            order_settlement(&order("APPROVED", json!({}))),
            Some(Settlement::Authorized {
                capture_before_ms: None,
                ..
            })
        ));
        let mut vaulted = order("CREATED", json!({}));
        vaulted["payment_source"] = json!({"card": {"vault_id": "pm_card_visa"}});
        assert!(matches!(
            order_settlement(&vaulted),
            Some(Settlement::Authorized { .. })
        ));
        // Voided: as its authorization says (voided before its expiry: as asked; at it: lapsed);
        // without one, lapsed.
        let voided = |update_time: &str| {
            let mut voided = order(
                "VOIDED",
                json!({"authorizations": [{"id": "A1", "status": "VOIDED",
                "amount": {"currency_code": "USD", "value": "30.00"},
                "expiration_time": "2026-12-30T10:00:00Z", "update_time": update_time}]}),
            );
            voided["intent"] = json!("AUTHORIZE");
            order_settlement(&voided)
        };
        let canceled = |reason| {
            Some(Settlement::Canceled {
                provider_payment_id: Some("5O190127TN364715T".into()),
                reason,
            })
        };
        assert_eq!(
            voided("2026-12-01T10:00:00Z"),
            canceled(CancellationReason::Requested)
        );
        assert_eq!(
            voided("2026-12-30T10:00:00Z"),
            canceled(CancellationReason::Expired)
        );
        assert_eq!(
            order_settlement(&order("VOIDED", json!({}))),
            canceled(CancellationReason::Expired)
        );
        // Created without a source, pending: nothing yet. The buyer must act: where.
        assert_eq!(order_settlement(&order("CREATED", json!({}))), None);
        let waiting = order("PAYER_ACTION_REQUIRED", json!({}));
        assert_eq!(order_settlement(&waiting), None);
        assert!(payer_action_url(&waiting).unwrap().contains("checkoutnow"));
        assert_eq!(payer_action_url(&order("APPROVED", json!({}))), None);
    }

    #[test]
    fn events_name_our_payment_by_custom_id_and_the_order_by_related_ids() {
        let capture = json!({"id": "WH-1", "event_type": "PAYMENT.CAPTURE.COMPLETED", "resource_type": "capture",
            "resource": {"id": "2GG279541U471931P", "status": "COMPLETED", "custom_id": OURS, "invoice_id": OURS,
                "amount": {"currency_code": "USD", "value": "30.00"},
                "supplementary_data": {"related_ids": {"order_id": "5O190127TN364715T"}}}});
        let event = parse_event(capture.to_string().as_bytes()).unwrap();
        assert_eq!(event.payment_id.as_deref(), Some(OURS));
        assert_eq!(
            event.settlement,
            Some(Settlement::Captured {
                provider_payment_id: "5O190127TN364715T".into(),
                amount_captured: 3000
            })
        );
        assert_eq!(
            event.amount.map(|a| (a.minor, a.currency)),
            Some((3000, "usd".into()))
        );
        // Another integration's capture (no custom_id of ours): none of ours.
        let mut foreign = capture.clone();
        foreign["resource"]["custom_id"] = json!("order-42");
        let event = parse_event(foreign.to_string().as_bytes()).unwrap();
        assert_eq!((event.payment_id, event.settlement), (None, None));
        // The order approved by its buyer.
        let approved = json!({"id": "WH-2", "event_type": "CHECKOUT.ORDER.APPROVED", "resource_type": "checkout-order",
            "resource": order("APPROVED", json!({}))});
        let event = parse_event(approved.to_string().as_bytes()).unwrap();
        assert!(matches!(
            event.settlement,
            Some(Settlement::Authorized { .. })
        ));
        // A refund of ours, by its custom_id.
        let ours = "rfd_00112233445566778899aabbccddeeff_1";
        let refund = json!({"id": "WH-3", "event_type": "PAYMENT.CAPTURE.REFUNDED", "resource_type": "refund",
            "resource": {"id": "1JU08902781691411", "status": "COMPLETED", "custom_id": ours,
                "amount": {"currency_code": "USD", "value": "10.00"}}});
        let event = parse_event(refund.to_string().as_bytes()).unwrap();
        assert_eq!(
            event.refund,
            Some(RefundEvent {
                refund_id: ours.into(),
                settlement: RefundSettlement::Succeeded {
                    provider_refund_id: "1JU08902781691411".into()
                }
            })
        );
        assert!(parse_event(b"{}").is_err());
    }
}
