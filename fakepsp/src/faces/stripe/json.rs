//! Stripe's JSON shapes of the ledger's charges and refunds: the PaymentIntent, the Charge behind
//! it (as `charge.refunded` carries it, and `expand[]=latest_charge` inlines it) and the Refund.

use serde_json::{json, Value};

use crate::ledger::{CaptureMethod, Decline, Failure, Intent, Refund, Status};

/// An object as Stripe serialises it.
pub(super) trait StripeJson {
    /// The object's JSON, as Stripe answers and sends it.
    fn to_json(&self) -> Value;
}

impl StripeJson for Intent {
    /// The PaymentIntent as Stripe serialises it.
    fn to_json(&self) -> Value {
        let next_action = match (self.status, &self.action_url, &self.return_url) {
            // A confirm with `return_url`: the customer is sent to authenticate, then back
            // ("Payment Intents" → `next_action.redirect_to_url`).
            (Status::RequiresAction, Some(url), Some(return_url)) => json!({
                "type": "redirect_to_url",
                "redirect_to_url": {"url": url, "return_url": return_url},
            }),
            (Status::RequiresAction, _, _) => {
                json!({"type": "use_stripe_sdk", "use_stripe_sdk": {}})
            }
            _ => Value::Null,
        };
        let mut intent = json!({
            "id": self.id,
            "object": "payment_intent",
            "amount": self.amount,
            "amount_received": self.amount_received(),
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
        });
        // Stripe always sends both; the fake sends them only for a manual capture, so that the
        // answers for automatic captures stay byte-identical to what they were before manual
        // capture existed (payonce's simulation traces compare them). Absent reads as
        // `automatic` and 0.
        if self.capture_method == CaptureMethod::Manual {
            intent["capture_method"] = json!(self.capture_method.as_str());
            intent["amount_capturable"] = json!(self.amount_capturable());
        }
        intent
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
            "message": AUTHENTICATION_REQUIRED_MESSAGE,
        }),
        Some(Failure::AuthenticationFailed) => json!({
            "type": "card_error",
            "code": "payment_intent_authentication_failure",
            "message": AUTHENTICATION_FAILED_MESSAGE,
        }),
    }
}

/// Stripe's message for a card that needs authentication when none can happen.
pub(super) const AUTHENTICATION_REQUIRED_MESSAGE: &str =
    "Your card was declined. This transaction requires authentication.";

/// Stripe's message for `payment_intent_authentication_failure` ("Error codes").
const AUTHENTICATION_FAILED_MESSAGE: &str =
    "The provided PaymentMethod has failed authentication. You can provide payment_method_data \
     or a new PaymentMethod to attempt to fulfill this PaymentIntent again.";

/// The Charge behind a PaymentIntent as Stripe serialises it (`charge.refunded`,
/// `expand[]=latest_charge`), with `refunds` its Refunds newest first ("The Charge object").
/// `amount_refunded` counts pending refunds too: they hold the amount until they fail. An
/// authorization is a `succeeded`, uncaptured charge whose card details say until when it can
/// be captured (`payment_method_details.card.capture_before`, epoch seconds); once cancelled
/// or lapsed its whole amount is released, which Stripe shows as refunded.
pub(super) fn charge_json(intent: &Intent, refunds: &[&Refund]) -> Value {
    let captured = intent.status == Status::Succeeded;
    let released = intent.status == Status::Canceled && intent.capture_before_ms.is_some();
    let amount_captured = intent.amount_received();
    let amount_refunded: i64 = if released {
        intent.amount
    } else {
        refunds
            .iter()
            .filter(|refund| refund.status.holds_amount())
            .map(|refund| refund.amount)
            .sum()
    };
    let status = match intent.status {
        Status::RequiresPaymentMethod => "failed",
        Status::Processing | Status::RequiresAction | Status::RequiresConfirmation => "pending",
        Status::Succeeded | Status::RequiresCapture | Status::Canceled => "succeeded",
    };
    let data: Vec<Value> = refunds.iter().map(|refund| refund.to_json()).collect();
    let charge = intent.latest_charge.clone().unwrap_or_default();
    let mut charge = json!({
        "id": charge,
        "object": "charge",
        "amount": intent.amount,
        "amount_captured": amount_captured,
        "amount_refunded": amount_refunded,
        "captured": captured,
        "paid": status == "succeeded",
        "refunded": released || (captured && amount_refunded >= amount_captured),
        "status": status,
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
    });
    // Only for a manual capture, for the same reason as the PaymentIntent's `capture_method`.
    if let (CaptureMethod::Manual, Some(capture_before_ms)) =
        (intent.capture_method, intent.capture_before_ms)
    {
        let capture_before = capture_before_ms.div_euclid(1000);
        charge["payment_method_details"] =
            json!({"type": "card", "card": {"capture_before": capture_before}});
    }
    charge
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
