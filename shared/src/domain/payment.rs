//! Payment attempts: their statuses (in the order they only rise in), what the PSP reported of
//! a customer action or an authorization, and the views the API shows. How they move is
//! [`crate::domain::transition`]'s alone.

use super::money::Currency;
use super::settlement::Transition;
use serde::{Deserialize, Serialize};

/// Where a payment attempt stands. The statuses are partially ordered and a payment only ever
/// rises in that order ([`PaymentStatus::rank`], enforced by [`crate::domain::transition`]):
/// `processing → requires_action → authorized → succeeded`, and any status that is not final
/// to `failed` or `canceled`. A PSP-confirmed success ranks above both (the customer's money
/// moved), so it beats a failure or cancellation payonce inferred or asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    /// Sent (or about to be sent) to the PSP; outcome not known yet.
    Processing,
    /// The PSP waits for the customer (3-D Secure, a wallet's approval): they follow
    /// [`NextAction`] and come back to the checkout's `return_url`.
    RequiresAction,
    /// A manual-capture payment the PSP authorized: the money is held until it is captured,
    /// canceled, or the authorization lapses ([`Progress::capture_before_ms`]).
    Authorized,
    /// The PSP charged the customer (captured).
    Succeeded,
    /// The attempt ended without a charge (see [`Failure`]).
    Failed,
    /// The PSP confirmed a cancel (asked for by the owner, staff or reconcile) or the lapse of an
    /// authorization: nothing was captured.
    Canceled,
}

impl PaymentStatus {
    /// Every status, in rank order.
    pub const ALL: [PaymentStatus; 6] = [
        Self::Processing,
        Self::RequiresAction,
        Self::Authorized,
        Self::Failed,
        Self::Canceled,
        Self::Succeeded,
    ];

    /// Stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::RequiresAction => "requires_action",
            Self::Authorized => "authorized",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// The status's place in the order payments move in: a transition never lowers it, and
    /// moves within one rank only from `failed` or `canceled` to nothing.
    pub fn rank(self) -> u8 {
        match self {
            Self::Processing => 0,
            Self::RequiresAction => 1,
            Self::Authorized => 2,
            Self::Failed | Self::Canceled => 3,
            Self::Succeeded => 4,
        }
    }

    /// Whether the attempt is over as far as payonce acts on it: succeeded, failed or canceled.
    /// (Only a PSP-confirmed success still moves a failed or canceled payment.)
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }

    /// Whether reconcile watches the attempt (the in-flight index): every status not final.
    pub fn in_flight(self) -> bool {
        !self.is_final()
    }

    /// What the payment's order does when the payment moves into this status.
    pub fn order_effect(self) -> OrderEffect {
        match self {
            Self::Processing | Self::RequiresAction | Self::Authorized => OrderEffect::Hold,
            Self::Succeeded => OrderEffect::Pay,
            Self::Failed | Self::Canceled => OrderEffect::Release,
        }
    }
}

/// What a payment's move does to its order (the order guard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderEffect {
    /// The attempt keeps holding the order: nothing is written to it (an order stored
    /// `processing` under an authorized attempt reads `authorized`, see
    /// [`crate::domain::Order::settled_by`]).
    Hold,
    /// The order is paid by the attempt.
    Pay,
    /// The order is released (if the attempt still holds it).
    Release,
}

/// When the PSP captures an authorized payment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureMethod {
    /// At once: a success is a capture of the whole amount.
    #[default]
    Automatic,
    /// Later, by `POST /payments/{id}/capture`: the PSP only authorizes.
    Manual,
}

impl CaptureMethod {
    /// Stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Automatic => "automatic",
            Self::Manual => "manual",
        }
    }

    /// Parses the stored and wire spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Automatic, Self::Manual]
            .into_iter()
            .find(|c| c.as_str() == raw)
    }

    /// Whether this is the default (the view leaves it out then).
    pub fn is_automatic(&self) -> bool {
        *self == Self::Automatic
    }
}

/// How long a customer action (3-D Secure, a wallet's approval) stays open by default: past it,
/// reconcile cancels the attempt at the PSP and releases its order.
pub const ACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// What the customer must do for a `requires_action` payment: follow a redirect to the PSP's
/// page (3-D Secure, a wallet's approval), which sends them back to the `return_url`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextAction {
    /// The PSP's page.
    pub url: String,
    /// Until when the PSP keeps the action open (epoch milliseconds): past it, reconcile cancels
    /// the attempt at the PSP.
    pub expires_at_ms: i64,
}

/// Why a payment was canceled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancellationReason {
    /// The owner (an action they gave up) or staff (an authorization) asked for it.
    Requested,
    /// The customer never completed the action; reconcile canceled it at the PSP.
    Abandoned,
    /// The authorization lapsed at the PSP before it was captured.
    Expired,
}

impl CancellationReason {
    /// Stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Abandoned => "abandoned",
            Self::Expired => "expired",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Requested, Self::Abandoned, Self::Expired]
            .into_iter()
            .find(|r| r.as_str() == raw)
    }
}

/// What the PSP reported of a payment's customer action and authorization, moved only by
/// [`crate::domain::transition`] (all empty for a one-step charge).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// While `requires_action`: what the customer must do.
    pub next_action: Option<NextAction>,
    /// The PSP said it is processing after the customer acted: a one-way flag (a late
    /// "requires action" from before never moves the payment back).
    pub action_completed: bool,
    /// While `authorized`: what may still be captured, minor units.
    pub amount_capturable: i64,
    /// While `authorized`: when the PSP lets the authorization lapse (epoch milliseconds), if
    /// it said.
    pub capture_before_ms: Option<i64>,
    /// Of a manual-capture payment once succeeded: what was captured, minor units (a partial
    /// capture releases the rest). `None` on a success means the whole amount.
    pub amount_captured: Option<i64>,
    /// Once `canceled`: why.
    pub cancellation_reason: Option<CancellationReason>,
}

/// Why an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The issuer declined the card (PSP-confirmed).
    Declined,
    /// The PSP refused the payment method itself (PSP-confirmed).
    Rejected,
    /// The PSP refused the request for another reason than the payment method (e.g. an amount
    /// below its minimum): PSP-confirmed, nothing charged.
    Refused,
    /// payonce gave the attempt up after proving the PSP never ran it (inferred).
    Abandoned,
    /// The PSP needs the customer to authenticate, and the request gave no `return_url` to
    /// send them back to (PSP-confirmed, nothing charged).
    AuthenticationRequired,
    /// The customer failed or refused the PSP's authentication (PSP-confirmed, nothing charged).
    AuthenticationFailed,
}

impl FailureKind {
    /// Every kind.
    pub const ALL: [FailureKind; 6] = [
        Self::Declined,
        Self::Rejected,
        Self::Refused,
        Self::Abandoned,
        Self::AuthenticationRequired,
        Self::AuthenticationFailed,
    ];

    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Declined => "declined",
            Self::Rejected => "rejected",
            Self::Refused => "refused",
            Self::Abandoned => "abandoned",
            Self::AuthenticationRequired => "authentication_required",
            Self::AuthenticationFailed => "authentication_failed",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == raw)
    }
}

/// The failure detail of a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Declined, rejected or abandoned.
    pub kind: FailureKind,
    /// The PSP's decline code (`generic_decline`, `insufficient_funds`, ...), for declines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decline_code: Option<String>,
}

/// A payment attempt, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// `pay_` + a hash of the idempotency record's key ([`payment_id_for`]); the PSP key is
    /// derived from it.
    pub payment_id: String,
    /// The order it pays.
    pub order_id: String,
    /// The order version it pays (fixes amount and currency).
    pub order_version: i64,
    /// The paying user.
    pub owner: String,
    /// Minor units, copied from the order version.
    pub amount: i64,
    /// Copied from the order.
    pub currency: Currency,
    /// The PSP token used (never card data).
    pub payment_method: String,
    /// PSP name (`stripe`, `fake`, ...).
    pub provider: String,
    /// The PSP's id for the charge (`pi_...`), once known.
    pub provider_payment_id: Option<String>,
    /// Current status.
    pub status: PaymentStatus,
    /// Failure detail when failed.
    pub failure: Option<Failure>,
    /// When the PSP captures (fixed by the request).
    pub capture: CaptureMethod,
    /// Where the PSP sends the customer back after an action (fixed by the request; on one of
    /// the deployment's checkout origins).
    pub return_url: Option<String>,
    /// The customer action and authorization, as the PSP reported them.
    pub progress: Progress,
    /// The capture or cancel claimed on it, if any (one at a time; no transition writes it).
    pub operation: Option<super::operation::PaymentOperation>,
    /// How many captures and cancels were ever claimed on it (the next claim's number is one
    /// more).
    pub operation_count: i64,
    /// The key of the idempotency record that created it (kept on the payment itself).
    pub idempotency_pk: String,
    /// Whether a call under the attempt's PSP key may have reached the PSP. Set when an
    /// invocation takes over a lease that lapsed (its holder may have called the PSP and died);
    /// once set, a call that cannot connect no longer proves nothing was charged, so the order
    /// is never released on it.
    pub psp_maybe_reached: bool,
    /// Sum of the succeeded refunds, minor units.
    pub amount_refunded: i64,
    /// Sum of the pending refunds (reserved: a new refund fits only in what is left).
    pub refund_pending: i64,
    /// How many refunds the refund API has claimed on the payment (the next one is `n + 1`).
    pub refund_count: i64,
    /// Whether the automatic refund of a late duplicate charge was created for it.
    pub duplicate_refund: bool,
    /// A late duplicate charge the PSP cannot refund through payonce: an operator must refund
    /// it (the `refund-required` alarm fired when it was found).
    pub refund_required: bool,
    /// Epoch milliseconds.
    pub created_at_ms: i64,
    /// Epoch milliseconds of the last change.
    pub updated_at_ms: i64,
    /// While processing: when reconcile should next look at the attempt (epoch milliseconds).
    /// Each check that finds it still pending pushes this back, so attempts that stay pending
    /// never starve newer ones.
    pub check_at_ms: i64,
}

/// The payment as the API shows it; also the result of the key's completed record, which a
/// replay answers with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentView {
    /// Id.
    pub payment_id: String,
    /// The order paid.
    pub order_id: String,
    /// processing / requires_action / authorized / succeeded / failed / canceled.
    pub status: PaymentStatus,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// PSP name.
    pub provider: String,
    /// The PSP's id, once known.
    pub provider_payment_id: Option<String>,
    /// Failure detail, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// `manual` when the payment is captured later (left out when automatic).
    #[serde(default, skip_serializing_if = "CaptureMethod::is_automatic")]
    pub capture: CaptureMethod,
    /// While `requires_action`: what the customer must do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_action: Option<NextActionView>,
    /// The customer acted and the PSP is processing (while `requires_action`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub action_completed: bool,
    /// While `authorized`: what may still be captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_capturable: Option<i64>,
    /// While `authorized`: when the authorization lapses (epoch seconds), if the PSP said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_before: Option<i64>,
    /// Of a manual-capture payment once succeeded: what was captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_captured: Option<i64>,
    /// Once `canceled`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation_reason: Option<CancellationReason>,
}

/// [`NextAction`] as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextActionView {
    /// Always `redirect`: send the customer to `url` (in the same tab, so the checkout's
    /// `sessionStorage` survives).
    #[serde(rename = "type")]
    pub kind: String,
    /// The PSP's page.
    pub url: String,
    /// Until when it is open (epoch seconds).
    pub expires_at: i64,
}

/// The id of the payment a charge's idempotency key creates: `pay_` and 32 hex digits of the
/// SHA-256 of the record's key (`<scope>#<user>#<key>`, given as its text). A key has one payment for ever, so
/// the charge can read the payment (which holds the key's record) by the key alone, in the
/// same request as the order.
pub fn payment_id_for(record_key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(record_key.as_bytes());
    format!("pay_{}", hex::encode(&digest[..16]))
}

/// The expiry (epoch seconds) of a charge's idempotency record: never. It lives on its payment,
/// which is kept, so a retry with the key replays the payment however late it comes.
pub const CHARGE_RECORD_NEVER_EXPIRES_S: i64 = i64::MAX;

impl Payment {
    /// The payment once `transition` is applied at `now_ms` (what every store writes).
    pub fn after(&self, transition: &Transition, now_ms: i64) -> Payment {
        match transition {
            Transition::Unchanged => self.clone(),
            Transition::Apply {
                status,
                failure,
                provider_payment_id,
                progress,
            } => Payment {
                status: *status,
                failure: failure.clone(),
                provider_payment_id: provider_payment_id.clone(),
                progress: progress.clone(),
                updated_at_ms: now_ms,
                ..self.clone()
            },
        }
    }

    /// What the PSP captured: nothing unless succeeded, then the capture's amount (the whole
    /// amount for an automatic capture). Refunds are bounded by it. A manual-capture success
    /// whose amount no word has stated yet (a lookup or a webhook without it) counts as nothing
    /// captured, so no refund can exceed a partial capture; the capture's answer or its
    /// webhook fills it in.
    pub fn amount_captured(&self) -> i64 {
        match (self.status, self.capture) {
            (PaymentStatus::Succeeded, CaptureMethod::Manual) => {
                self.progress.amount_captured.unwrap_or(0)
            }
            (PaymentStatus::Succeeded, CaptureMethod::Automatic) => {
                self.progress.amount_captured.unwrap_or(self.amount)
            }
            _ => 0,
        }
    }

    /// The view as the key's completed record gives it (JSON).
    pub fn view_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(&self.view())
    }

    /// The API representation.
    pub fn view(&self) -> PaymentView {
        let progress = &self.progress;
        let authorized = self.status == PaymentStatus::Authorized;
        PaymentView {
            payment_id: self.payment_id.clone(),
            order_id: self.order_id.clone(),
            status: self.status,
            amount: self.amount,
            currency: self.currency,
            provider: self.provider.clone(),
            provider_payment_id: self.provider_payment_id.clone(),
            failure: self.failure.clone(),
            capture: self.capture,
            next_action: progress
                .next_action
                .as_ref()
                .filter(|_| self.status == PaymentStatus::RequiresAction)
                .map(|action| NextActionView {
                    kind: "redirect".into(),
                    url: action.url.clone(),
                    expires_at: action.expires_at_ms.div_euclid(1000),
                }),
            action_completed: progress.action_completed
                && self.status == PaymentStatus::RequiresAction,
            amount_capturable: authorized.then_some(progress.amount_capturable),
            capture_before: progress
                .capture_before_ms
                .filter(|_| authorized)
                .map(|ms| ms.div_euclid(1000)),
            amount_captured: progress
                .amount_captured
                .filter(|_| self.status == PaymentStatus::Succeeded),
            cancellation_reason: progress
                .cancellation_reason
                .filter(|_| self.status == PaymentStatus::Canceled),
        }
    }
}

/// A payment `pay_1` of 100 JPY on order `ord_1` in `status`, for the domain's unit tests.
#[cfg(test)]
pub(crate) fn test_payment(status: PaymentStatus, failure: Option<FailureKind>) -> Payment {
    Payment {
        payment_id: "pay_1".into(),
        order_id: "ord_1".into(),
        order_version: 1,
        owner: "u".into(),
        amount: 100,
        currency: Currency::Jpy,
        payment_method: "pm_card_visa".into(),
        provider: "stripe".into(),
        provider_payment_id: None,
        status,
        failure: failure.map(|kind| Failure {
            kind,
            decline_code: None,
        }),
        capture: CaptureMethod::Automatic,
        return_url: None,
        progress: Progress::default(),
        operation: None,
        operation_count: 0,
        idempotency_pk: "payments.create#u#k".into(),
        psp_maybe_reached: false,
        amount_refunded: 0,
        refund_pending: 0,
        refund_count: 0,
        duplicate_refund: false,
        refund_required: false,
        created_at_ms: 0,
        updated_at_ms: 0,
        check_at_ms: 0,
    }
}
