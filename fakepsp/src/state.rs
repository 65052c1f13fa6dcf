//! PaymentIntents as the model keeps them, and the views of them it hands out: Stripe's JSON
//! shape and the test-inspection [`FakeCharge`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One PaymentIntent as the test-inspection API (`GET /_fake/charges`,
/// [`RunningFakePsp::charges`](crate::RunningFakePsp::charges),
/// [`StripeModel::charges`](crate::model::StripeModel::charges)) reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FakeCharge {
    /// The PaymentIntent id, `pi_...`.
    pub id: String,
    /// Amount in the currency's minor unit.
    pub amount: i64,
    /// Lowercase ISO currency code.
    pub currency: String,
    /// The PaymentIntent status now (`succeeded`, `requires_payment_method`, `canceled`, ...).
    pub status: String,
    /// What the status means for the money: `succeeded`; `failed` (back to
    /// `requires_payment_method` after a failed attempt); `canceled`; or `pending` (every other
    /// non-final status: `requires_confirmation`, `requires_action`, `processing`).
    pub outcome: String,
    /// The `payment_method` token it was created with.
    pub payment_method: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
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

/// A PaymentIntent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Intent {
    pub(crate) id: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) status: Status,
    pub(crate) payment_method: String,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub(crate) created: i64,
    /// The charge attempt (`ch_...`), set once a charge was attempted, declined or not.
    pub(crate) latest_charge: Option<String>,
    /// Stripe's `last_payment_error` object after a failed attempt.
    pub(crate) last_payment_error: Option<Value>,
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
            "last_payment_error": self.last_payment_error,
            "next_action": next_action,
            "cancellation_reason": self.cancellation_reason,
            "livemode": false,
        })
    }

    /// `succeeded`, `failed`, `canceled` or `pending`: see [`FakeCharge::outcome`].
    pub(crate) fn outcome(&self) -> &'static str {
        match self.status {
            Status::Succeeded => "succeeded",
            Status::Canceled => "canceled",
            Status::RequiresPaymentMethod if self.last_payment_error.is_some() => "failed",
            Status::RequiresPaymentMethod
            | Status::RequiresConfirmation
            | Status::RequiresAction
            | Status::Processing => "pending",
        }
    }

    /// The test-inspection view.
    pub(crate) fn to_charge(&self) -> FakeCharge {
        FakeCharge {
            id: self.id.clone(),
            amount: self.amount,
            currency: self.currency.clone(),
            status: self.status.as_str().to_owned(),
            outcome: self.outcome().to_owned(),
            payment_method: self.payment_method.clone(),
            metadata: self.metadata.clone(),
            idempotency_key: self.idempotency_key.clone(),
            created: self.created,
        }
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
