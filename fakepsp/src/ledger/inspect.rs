//! The test-inspection views of charges and refunds (`GET /_fake/charges`, `GET /_fake/refunds`,
//! [`FakeModel::charges`](crate::model::FakeModel::charges)): the same fields on every face, the
//! status in the face's words, which the face supplies.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::charge::{Intent, Refund, Status};

/// One PaymentIntent as the test-inspection API (`GET /_fake/charges`,
/// [`RunningFakePsp::charges`](crate::RunningFakePsp::charges),
/// [`FakeModel::charges`](crate::model::FakeModel::charges)) reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FakeCharge {
    /// `stripe`, `omise`, `2c2p`, `square` or `paypal`: the wire format the fake spoke.
    pub provider: String,
    /// The PaymentIntent id, `pi_...` (Stripe), the charge id, `chrg_test_...` (Omise), the
    /// `tranRef` (2C2P), the Payment id (Square) or the order id (PayPal).
    pub id: String,
    /// Amount in the currency's minor unit.
    pub amount: i64,
    /// Lowercase ISO currency code.
    pub currency: String,
    /// The status now, in the face's words: Stripe's (`succeeded`, `requires_payment_method`,
    /// `canceled`, ...), Omise's (`successful`, `failed`, `pending`, `expired`, `reversed`),
    /// 2C2P's (the Payment Inquiry's `respCode`: `0000`, `4005`, `4051`, `0004`, `0001`),
    /// Square's (`APPROVED`, `PENDING`, `COMPLETED`, `CANCELED`, `FAILED`) or the PayPal order's
    /// (`CREATED`, `PAYER_ACTION_REQUIRED`, `APPROVED`, `COMPLETED`, `VOIDED`, and the fake's
    /// `EXPIRED` for an order never approved, which PayPal answers 404 for).
    pub status: String,
    /// What the status means for the money: `succeeded` (captured); `failed` (back to
    /// `requires_payment_method` after a failed attempt; Omise `failed` and `expired`);
    /// `canceled` (Omise `reversed`; an authorization cancelled or lapsed); `authorized`
    /// (`requires_capture`: held, not captured); or `pending` (every other non-final status:
    /// `requires_confirmation`, `requires_action`, `processing`; Omise `pending`).
    pub outcome: String,
    /// The `payment_method` (Stripe), `card` (Omise), `securePayToken` (2C2P), `source_id`
    /// (Square, as sent) or `vault_id` (PayPal; `paypal` for a buyer's approval) token it was
    /// created with.
    pub payment_method: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// `metadata.payment_id`, if it has one: the payonce payment it was made for (2C2P: read
    /// from the invoice number; Square: the `reference_id`; PayPal: the purchase unit's
    /// `custom_id`).
    pub payment_id: Option<String>,
    /// The `Idempotency-Key` of the request that created it, if any; on the 2C2P face the
    /// invoice number; on the PayPal face the create's `PayPal-Request-Id`.
    pub idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub created: i64,
    /// `automatic` or `manual` (Stripe's `capture_method`; on the Omise face `manual` for
    /// `capture=false`, on the Square face for `autocomplete: false`, on the PayPal face for
    /// intent `AUTHORIZE`; on the 2C2P face `manual` on a manual-settlement account, else
    /// `automatic`).
    #[serde(default)]
    pub capture_method: String,
    /// What was captured, once it succeeded: the amount for an automatic capture, the captured
    /// amount for a manual one; `None` before (and for a charge that never succeeded).
    #[serde(default)]
    pub amount_captured: Option<i64>,
    /// Every capture that took effect, oldest first, with the key it came under (on the PayPal
    /// face an order's `/capture` and an authorization's capture, each with its
    /// `PayPal-Request-Id`).
    #[serde(default)]
    pub captures: Vec<FakeCapture>,
    /// Every cancellation that took effect, with the key it came under; one with no key and
    /// `cancellation_reason: automatic` is the PSP's own, for an authorization that lapsed. On
    /// the Square face a cancel by idempotency key carries that key, a cancel by id none.
    #[serde(default)]
    pub cancels: Vec<FakeCancel>,
    /// 2C2P face only: the `invoiceNo` it was paid under (absent on the other faces, and left
    /// out of their JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoice_no: Option<String>,
    /// Square face: the Payment as `GET /v2/payments/{id}` answers it now (its `payment`);
    /// PayPal face: the order as `GET /v2/checkout/orders/{id}` answers it (even once it
    /// lapsed); absent on the other faces, and left out of their JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<serde_json::Value>,
}

/// A capture of a charge, as the test-inspection API reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FakeCapture {
    /// Minor units captured.
    pub amount: i64,
    /// The `Idempotency-Key` of the capture request, if it had one.
    pub idempotency_key: Option<String>,
}

/// A cancellation of a charge, as the test-inspection API reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FakeCancel {
    /// The `Idempotency-Key` of the cancel request, if it had one (never, for the PSP's own).
    pub idempotency_key: Option<String>,
    /// The reason given, if any; `automatic` when the PSP cancelled a lapsed authorization.
    pub cancellation_reason: Option<String>,
}

/// One Refund as the test-inspection API (`GET /_fake/refunds`,
/// [`RunningFakePsp::refunds`](crate::RunningFakePsp::refunds),
/// [`FakeModel::refunds`](crate::model::FakeModel::refunds)) reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FakeRefund {
    /// `stripe`, `omise`, `2c2p`, `square` or `paypal`: the wire format the fake spoke.
    pub provider: String,
    /// The Refund id, `re_...` (Stripe), `rfnd_test_...` (Omise), the `refundReferenceNo`
    /// (2C2P, digits), `<payment id>_...` (Square) or PayPal's 17-character refund id.
    pub id: String,
    /// What the status means for the money: `succeeded`, `failed`, `canceled`, or `pending`
    /// (Stripe's `pending` and `requires_action`).
    pub outcome: String,
    /// The Refund status now: `pending`, `succeeded` or `failed` (the fake never produces
    /// Stripe's `requires_action` or `canceled`, which card refunds do not reach); on the Omise
    /// face `closed` (succeeded), `pending` or `failed`; on the Square and PayPal faces
    /// `COMPLETED`, `PENDING` or `FAILED`; on the 2C2P face `RF`, `RP` or `RFF`.
    pub status: String,
    /// Amount in the currency's minor unit.
    pub amount: i64,
    /// Lowercase ISO currency code (the PaymentIntent's).
    pub currency: String,
    /// The refunded PaymentIntent, `pi_...` (Stripe), charge, `chrg_test_...` (Omise), or
    /// order (PayPal).
    pub payment_intent: String,
    /// The refunded charge, `ch_...` (the PaymentIntent's `latest_charge`; Omise: the charge;
    /// PayPal: the capture).
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
    /// `metadata.refund_id`, if it has one: the payonce refund it was made for (PayPal: the
    /// refund's `custom_id`).
    pub refund_id: Option<String>,
    /// The `Idempotency-Key` of the request that created it, if any.
    pub idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub created: i64,
    /// 2C2P face only: the `invoiceNo` of the refunded payment (absent on the other faces, and
    /// left out of their JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoice_no: Option<String>,
}

impl Intent {
    /// The test-inspection view, with `provider` the face's name and `status` the charge's status
    /// in the face's words; `payment_id` is `metadata.payment_id` and there is no `invoice_no`
    /// (a face that reads them elsewhere sets them on the result).
    pub(crate) fn inspect(&self, provider: &str, status: &str) -> FakeCharge {
        FakeCharge {
            provider: provider.to_owned(),
            id: self.id.clone(),
            amount: self.amount,
            currency: self.currency.clone(),
            status: status.to_owned(),
            outcome: self.outcome().to_owned(),
            payment_method: self.payment_method.clone(),
            metadata: self.metadata.clone(),
            payment_id: self.metadata.get("payment_id").cloned(),
            idempotency_key: self.idempotency_key.clone(),
            created: self.created,
            capture_method: self.capture_method.as_str().to_owned(),
            amount_captured: (self.status == Status::Succeeded).then(|| self.amount_received()),
            captures: self
                .captures
                .iter()
                .map(|capture| FakeCapture {
                    amount: capture.amount,
                    idempotency_key: capture.idempotency_key.clone(),
                })
                .collect(),
            cancels: self
                .cancels
                .iter()
                .map(|cancel| FakeCancel {
                    idempotency_key: cancel.idempotency_key.clone(),
                    cancellation_reason: cancel.cancellation_reason.clone(),
                })
                .collect(),
            invoice_no: None,
            object: None,
        }
    }
}

impl Refund {
    /// The test-inspection view, with `provider` the face's name and `status` the refund's status
    /// in the face's words.
    pub(crate) fn inspect(&self, provider: &str, status: &str) -> FakeRefund {
        FakeRefund {
            provider: provider.to_owned(),
            id: self.id.clone(),
            outcome: self.outcome().to_owned(),
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
            invoice_no: None,
        }
    }
}
