//! Charges (PaymentIntents) and Refunds as the model keeps them, whatever the face, and the views
//! of them it hands out: Stripe's JSON shapes (Omise's are in the `omise` module) and the
//! test-inspection [`FakeCharge`] and [`FakeRefund`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::behaviour::Decline;
use crate::Provider;

/// One PaymentIntent as the test-inspection API (`GET /_fake/charges`,
/// [`RunningFakePsp::charges`](crate::RunningFakePsp::charges),
/// [`StripeModel::charges`](crate::model::StripeModel::charges)) reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FakeCharge {
    /// `stripe`, `omise` or `2c2p`: the wire format the fake spoke.
    pub provider: String,
    /// The PaymentIntent id, `pi_...` (Stripe), or the charge id, `chrg_test_...` (Omise).
    pub id: String,
    /// Amount in the currency's minor unit.
    pub amount: i64,
    /// Lowercase ISO currency code.
    pub currency: String,
    /// The status now, in the face's words: Stripe's (`succeeded`, `requires_payment_method`,
    /// `canceled`, ...), Omise's (`successful`, `failed`, `pending`, `expired`, `reversed`) or
    /// 2C2P's (the Payment Inquiry's `respCode`: `0000`, `4005`, `4051`, `0004`, `0001`).
    pub status: String,
    /// What the status means for the money: `succeeded`; `failed` (back to
    /// `requires_payment_method` after a failed attempt; Omise `failed` and `expired`);
    /// `canceled` (Omise `reversed`); or `pending` (every other non-final status:
    /// `requires_confirmation`, `requires_action`, `processing`; Omise `pending`).
    pub outcome: String,
    /// The `payment_method` (Stripe) or `card` (Omise) token it was created with.
    pub payment_method: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// `metadata.payment_id`, if it has one: the payonce payment it was made for.
    pub payment_id: Option<String>,
    /// The `Idempotency-Key` of the request that created it, if any; on the 2C2P face the
    /// invoice number.
    pub idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub created: i64,
    /// 2C2P face only: the `invoiceNo` it was paid under (absent on the other faces, and left
    /// out of their JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoice_no: Option<String>,
}

/// One Refund as the test-inspection API (`GET /_fake/refunds`,
/// [`RunningFakePsp::refunds`](crate::RunningFakePsp::refunds),
/// [`StripeModel::refunds`](crate::model::StripeModel::refunds)) reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FakeRefund {
    /// `stripe` or `omise`: the wire format the fake spoke.
    pub provider: String,
    /// The Refund id, `re_...` (Stripe) or `rfnd_test_...` (Omise).
    pub id: String,
    /// What the status means for the money: `succeeded`, `failed`, `canceled`, or `pending`
    /// (Stripe's `pending` and `requires_action`).
    pub outcome: String,
    /// The Refund status now: `pending`, `succeeded` or `failed` (the fake never produces
    /// Stripe's `requires_action` or `canceled`, which card refunds do not reach); on the Omise
    /// face `closed` (succeeded), `pending` or `failed`.
    pub status: String,
    /// Amount in the currency's minor unit.
    pub amount: i64,
    /// Lowercase ISO currency code (the PaymentIntent's).
    pub currency: String,
    /// The refunded PaymentIntent, `pi_...` (Stripe), or charge, `chrg_test_...` (Omise).
    pub payment_intent: String,
    /// The refunded charge, `ch_...` (the PaymentIntent's `latest_charge`; Omise: the charge).
    pub charge: Option<String>,
    /// `duplicate`, `fraudulent` or `requested_by_customer`, if given.
    pub reason: Option<String>,
    /// Why it failed (`expired_or_canceled_card`), once it has (the model's reason, on either
    /// face).
    pub failure_reason: Option<String>,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// `metadata.payment_id`, if it has one.
    pub payment_id: Option<String>,
    /// `metadata.refund_id`, if it has one: the payonce refund it was made for.
    pub refund_id: Option<String>,
    /// The `Idempotency-Key` of the request that created it, if any.
    pub idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub created: i64,
}

/// The PaymentIntent statuses the fake can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Created with `confirm=false`; nothing attempted.
    RequiresConfirmation,
    /// The last attempt failed (declined, or authentication never happened).
    RequiresPaymentMethod,
    /// Waiting for the customer to authenticate (`pm_fake_requires_action`).
    RequiresAction,
    /// Submitted, result not known yet (`pm_fake_processing`).
    Processing,
    /// Charged.
    Succeeded,
    /// Cancelled.
    Canceled,
}

impl Status {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::RequiresConfirmation => "requires_confirmation",
            Self::RequiresPaymentMethod => "requires_payment_method",
            Self::RequiresAction => "requires_action",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Canceled => "canceled",
        }
    }

    /// Whether a PaymentIntent in this status may be cancelled. Stripe, "Cancel a
    /// PaymentIntent": only from `requires_payment_method`, `requires_capture`,
    /// `requires_confirmation`, `requires_action` or (in rare cases) `processing`. The fake never
    /// produces `requires_capture`.
    pub(crate) fn is_cancelable(self) -> bool {
        matches!(
            self,
            Self::RequiresPaymentMethod
                | Self::RequiresConfirmation
                | Self::RequiresAction
                | Self::Processing
        )
    }
}

/// Why a charge attempt failed, as the model keeps it; each face words it its own way (Stripe's
/// `last_payment_error`, Omise's `failure_code` and `failure_message`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The card was declined (by its token).
    Declined(Decline),
    /// Authentication was asked for and never happened (`pm_fake_requires_action`, once
    /// `requires_action_for` has passed).
    AuthenticationRequired,
}

/// A charge: a PaymentIntent on the Stripe face, a charge on the Omise face. The state machine
/// is the same for both; `to_json` is Stripe's view of it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Intent {
    /// `pi_...` (Stripe) or `chrg_test_...` (Omise).
    pub(crate) id: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) status: Status,
    pub(crate) payment_method: String,
    /// The `description` given (Omise face; the Stripe face keeps none).
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub(crate) created: i64,
    /// The charge attempt (`ch_...`; on the Omise face the charge itself), set once a charge was
    /// attempted, declined or not.
    pub(crate) latest_charge: Option<String>,
    /// Why the last attempt failed, if it did.
    pub(crate) failure: Option<Failure>,
    pub(crate) cancellation_reason: Option<String>,
    /// When the pending time-driven transition (`processing` → `succeeded`, `requires_action`
    /// → `requires_payment_method`) falls due, epoch ms.
    pub(crate) due_ms: Option<i64>,
    /// What search shows of it: snapshots of its JSON, each with the epoch ms from which search
    /// sees it; the visible one is the last whose time has come.
    pub(crate) search_versions: Vec<(i64, Value)>,
}

impl Intent {
    /// The PaymentIntent as Stripe serialises it.
    pub(crate) fn to_json(&self) -> Value {
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
            "last_payment_error": self.last_payment_error(),
            "next_action": next_action,
            "cancellation_reason": self.cancellation_reason,
            "livemode": false,
        })
    }

    /// Stripe's `last_payment_error` object after a failed attempt: a decline carries the
    /// charge that was declined, as Stripe's does.
    fn last_payment_error(&self) -> Value {
        match self.failure {
            None => Value::Null,
            Some(Failure::Declined(decline)) => json!({
                "type": "card_error",
                "code": "card_declined",
                "decline_code": decline.decline_code,
                "message": decline.message,
                "charge": self.latest_charge,
            }),
            Some(Failure::AuthenticationRequired) => json!({
                "type": "card_error",
                "code": "authentication_required",
                "decline_code": "authentication_required",
                "message": "Your card was declined. This transaction requires authentication.",
            }),
        }
    }

    /// `succeeded`, `failed`, `canceled` or `pending`: see [`FakeCharge::outcome`].
    pub(crate) fn outcome(&self) -> &'static str {
        match self.status {
            Status::Succeeded => "succeeded",
            Status::Canceled => "canceled",
            Status::RequiresPaymentMethod if self.failure.is_some() => "failed",
            Status::RequiresPaymentMethod
            | Status::RequiresConfirmation
            | Status::RequiresAction
            | Status::Processing => "pending",
        }
    }

    /// The test-inspection view, in the words of the face `provider`.
    pub(crate) fn to_charge(&self, provider: Provider) -> FakeCharge {
        let status = match provider {
            Provider::Stripe => self.status.as_str(),
            Provider::Omise => crate::omise::charge_status(self),
            Provider::TwoC2p => crate::twoc2p::resp_code(self).0,
        };
        let (payment_id, invoice_no) = match provider {
            Provider::TwoC2p => (
                self.idempotency_key
                    .as_deref()
                    .and_then(crate::twoc2p::payment_id_for_invoice),
                self.idempotency_key.clone(),
            ),
            Provider::Stripe | Provider::Omise => (self.metadata.get("payment_id").cloned(), None),
        };
        FakeCharge {
            provider: provider.as_str().to_owned(),
            id: self.id.clone(),
            amount: self.amount,
            currency: self.currency.clone(),
            status: status.to_owned(),
            outcome: self.outcome().to_owned(),
            payment_method: self.payment_method.clone(),
            metadata: self.metadata.clone(),
            payment_id,
            idempotency_key: self.idempotency_key.clone(),
            created: self.created,
            invoice_no,
        }
    }

    /// The Charge behind a succeeded PaymentIntent as Stripe serialises it (`charge.refunded`),
    /// with `refunds` its Refunds newest first. `amount_refunded` counts pending refunds too:
    /// they hold the amount until they fail.
    pub(crate) fn charge_json(&self, refunds: &[&Refund]) -> Value {
        let amount_refunded: i64 = refunds
            .iter()
            .filter(|refund| refund.status.holds_amount())
            .map(|refund| refund.amount)
            .sum();
        let data: Vec<Value> = refunds.iter().map(|refund| refund.to_json()).collect();
        let charge = self.latest_charge.clone().unwrap_or_default();
        json!({
            "id": charge,
            "object": "charge",
            "amount": self.amount,
            "amount_captured": self.amount,
            "amount_refunded": amount_refunded,
            "captured": true,
            "paid": true,
            "refunded": amount_refunded >= self.amount,
            "status": "succeeded",
            "currency": self.currency,
            "payment_intent": self.id,
            "payment_method": self.payment_method,
            "metadata": self.metadata,
            "created": self.created,
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

    /// The snapshot search returns at `now_ms`, if search sees the PaymentIntent at all yet.
    pub(crate) fn searchable_at(&self, now_ms: i64) -> Option<&Value> {
        self.search_versions
            .iter()
            .rev()
            .find(|(visible_from_ms, _)| *visible_from_ms <= now_ms)
            .map(|(_, snapshot)| snapshot)
    }
}

/// The Refund statuses the fake produces. Stripe also has `requires_action` and `canceled`, which
/// card refunds never reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefundStatus {
    /// Submitted, not final yet (`pm_fake_refund_pending`).
    Pending,
    /// Refunded; for `pm_card_refundFail` only for a while.
    Succeeded,
    /// The card issuer sent the money back (`pm_card_refundFail`).
    Failed,
}

impl RefundStatus {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    /// Whether a Refund in this status counts against what is left to refund on its charge:
    /// every status but `failed` (and `canceled`, which the fake never produces).
    pub(crate) fn holds_amount(self) -> bool {
        !matches!(self, Self::Failed)
    }
}

/// A Refund.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Refund {
    pub(crate) id: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) payment_intent: String,
    pub(crate) charge: Option<String>,
    pub(crate) status: RefundStatus,
    pub(crate) reason: Option<String>,
    pub(crate) failure_reason: Option<&'static str>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub(crate) created: i64,
    /// When the pending time-driven transition (`pending` → `succeeded`, `succeeded` →
    /// `failed`) falls due, epoch ms.
    pub(crate) due_ms: Option<i64>,
}

impl Refund {
    /// The Refund as Stripe serialises it ("The Refund object"); `failure_reason` only once it
    /// failed, as Stripe shows it.
    pub(crate) fn to_json(&self) -> Value {
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

    /// The test-inspection view, in the words of the face `provider`.
    pub(crate) fn to_fake(&self, provider: Provider) -> FakeRefund {
        let status = match provider {
            Provider::Stripe => self.status.as_str(),
            Provider::Omise => crate::omise::refund_status(self.status),
            // The 2C2P face makes no refunds.
            Provider::TwoC2p => self.status.as_str(),
        };
        FakeRefund {
            provider: provider.as_str().to_owned(),
            id: self.id.clone(),
            outcome: match self.status {
                RefundStatus::Pending => "pending",
                RefundStatus::Succeeded => "succeeded",
                RefundStatus::Failed => "failed",
            }
            .to_owned(),
            status: status.to_owned(),
            amount: self.amount,
            currency: self.currency.clone(),
            payment_intent: self.payment_intent.clone(),
            charge: self.charge.clone(),
            reason: self.reason.clone(),
            failure_reason: self.failure_reason.map(str::to_owned),
            metadata: self.metadata.clone(),
            payment_id: self.metadata.get("payment_id").cloned(),
            refund_id: self.metadata.get("refund_id").cloned(),
            idempotency_key: self.idempotency_key.clone(),
            created: self.created,
        }
    }
}
