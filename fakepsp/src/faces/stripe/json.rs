//! Stripe's JSON shapes of the ledger's charges and refunds: the PaymentIntent, the Charge behind
//! it (as `charge.refunded` carries it) and the Refund.

use serde_json::{json, Value};

use crate::ledger::{Decline, Failure, Intent, Refund, Status};

/// An object as Stripe serialises it.
pub(super) trait StripeJson {
    /// The object's JSON, as Stripe answers and sends it.
    fn to_json(&self) -> Value;
}

impl StripeJson for Intent {
    /// The PaymentIntent as Stripe serialises it.
    fn to_json(&self) -> Value {
        let amount_received = if self.status == Status::Succeeded {
            self.amount
        } else {
            0
        };
        let next_action = if self.status == Status::RequiresAction {
            json!({"type": "use_stripe_sdk", "use_stripe_sdk": {}})
        } else {
            Value::Null
        };
        json!({
            "id": self.id,
            "object": "payment_intent",
            "amount": self.amount,
            "amount_received": amount_received,
            "currency": self.currency,
            "status": self.status.as_str(),
            "payment_method": self.payment_method,
            "metadata": self.metadata,
            "created": self.created,
            "latest_charge": self.latest_charge,
            "last_payment_error": last_payment_error(self),
            "next_action": next_action,
            "cancellation_reason": self.cancellation_reason,
            "livemode": false,
        })
    }
}

impl StripeJson for Refund {
    /// The Refund as Stripe serialises it ("The Refund object"); `failure_reason` only once it
    /// failed, as Stripe shows it.
    fn to_json(&self) -> Value {
        let mut refund = json!({
            "id": self.id,
            "object": "refund",
            "amount": self.amount,
            "currency": self.currency,
            "payment_intent": self.payment_intent,
            "charge": self.charge,
            "status": self.status.as_str(),
            "reason": self.reason,
            "metadata": self.metadata,
            "created": self.created,
            "receipt_number": null,
        });
        if let (Some(reason), Some(fields)) = (self.failure_reason, refund.as_object_mut()) {
            fields.insert("failure_reason".to_owned(), reason.into());
        }
        refund
    }
}

/// Stripe's `last_payment_error` object after a failed attempt: a decline carries the
/// charge that was declined, as Stripe's does.
fn last_payment_error(intent: &Intent) -> Value {
    match intent.failure {
        None => Value::Null,
        Some(Failure::Declined(decline)) => json!({
            "type": "card_error",
            "code": "card_declined",
            "decline_code": decline_code(decline),
            "message": decline_message(decline),
            "charge": intent.latest_charge,
        }),
        Some(Failure::AuthenticationRequired) => json!({
            "type": "card_error",
            "code": "authentication_required",
            "decline_code": "authentication_required",
            "message": "Your card was declined. This transaction requires authentication.",
        }),
    }
}

/// The Charge behind a succeeded PaymentIntent as Stripe serialises it (`charge.refunded`),
/// with `refunds` its Refunds newest first. `amount_refunded` counts pending refunds too:
/// they hold the amount until they fail.
pub(super) fn charge_json(intent: &Intent, refunds: &[&Refund]) -> Value {
    let amount_refunded: i64 = refunds
        .iter()
        .filter(|refund| refund.status.holds_amount())
        .map(|refund| refund.amount)
        .sum();
    let data: Vec<Value> = refunds.iter().map(|refund| refund.to_json()).collect();
    let charge = intent.latest_charge.clone().unwrap_or_default();
    json!({
        "id": charge,
        "object": "charge",
        "amount": intent.amount,
        "amount_captured": intent.amount,
        "amount_refunded": amount_refunded,
        "captured": true,
        "paid": true,
        "refunded": amount_refunded >= intent.amount,
        "status": "succeeded",
        "currency": intent.currency,
        "payment_intent": intent.id,
        "payment_method": intent.payment_method,
        "metadata": intent.metadata,
        "created": intent.created,
        "livemode": false,
        "refunds": {
            "object": "list",
            "data": data,
            "has_more": false,
            "total_count": refunds.len(),
            "url": format!("/v1/charges/{charge}/refunds"),
        },
    })
}

/// Stripe's `decline_code` for a decline (its test cards' codes).
pub(super) fn decline_code(decline: Decline) -> &'static str {
    match decline {
        Decline::Generic => "generic_decline",
        Decline::InsufficientFunds => "insufficient_funds",
    }
}

/// The human-readable message Stripe sends with that decline code.
pub(super) fn decline_message(decline: Decline) -> &'static str {
    match decline {
        Decline::Generic => "Your card was declined.",
        Decline::InsufficientFunds => "Your card has insufficient funds.",
    }
}
