//! Charges and Refunds as the ledger keeps them, whatever the face: their statuses, why a charge
//! attempt failed, and what a status means for the money. How each face writes them is the
//! face's business (`faces::stripe::json`, `faces::omise`, `faces::twoc2p`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::behaviour::Decline;

/// The PaymentIntent statuses the fake can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Created with `confirm=false`; nothing attempted.
    RequiresConfirmation,
    /// The last attempt failed (declined, or authentication never happened).
    RequiresPaymentMethod,
    /// Waiting for the customer to authenticate (`pm_fake_requires_action`, the 3-D Secure
    /// test cards).
    RequiresAction,
    /// Submitted, result not known yet (`pm_fake_processing`).
    Processing,
    /// Authorized and waiting to be captured (manual capture), until the authorization lapses.
    RequiresCapture,
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
            Self::RequiresCapture => "requires_capture",
            Self::Succeeded => "succeeded",
            Self::Canceled => "canceled",
        }
    }

    /// Whether a PaymentIntent in this status may be cancelled. Stripe, "Cancel a
    /// PaymentIntent": only from `requires_payment_method`, `requires_capture`,
    /// `requires_confirmation`, `requires_action` or (in rare cases) `processing`.
    pub(crate) fn is_cancelable(self) -> bool {
        matches!(
            self,
            Self::RequiresPaymentMethod
                | Self::RequiresCapture
                | Self::RequiresConfirmation
                | Self::RequiresAction
                | Self::Processing
        )
    }
}

/// When a charge's funds are taken: at once, or only once the merchant captures the
/// authorization (Stripe's `capture_method`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CaptureMethod {
    /// Captured as soon as the charge is authorized.
    #[default]
    Automatic,
    /// Authorized only: `requires_capture` until captured, cancelled, or the authorization
    /// lapses.
    Manual,
}

impl CaptureMethod {
    /// The wire name (Stripe's, which the inspection view uses on every face).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Automatic => "automatic",
            Self::Manual => "manual",
        }
    }
}

/// What the PSP does with an authorization (a manual capture in `requires_capture`) nobody
/// captured or cancelled before it lapsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum OnLapse {
    /// Releases it: the charge is cancelled with `cancellation_reason: automatic` (what every
    /// face's PSP does by default).
    #[default]
    Release,
    /// Captures it in full (a PSP that lets the merchant ask for that instead).
    Capture,
}

/// How long a manual capture's authorization is held, and what happens once it lapses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hold {
    /// How long the authorization may wait to be captured; `None` is the ledger's
    /// `authorization_expires_after`.
    pub(crate) expires_after: Option<Duration>,
    /// What the PSP does when it lapses.
    pub(crate) on_lapse: OnLapse,
}

/// A capture that took effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Capture {
    /// Minor units captured.
    pub(crate) amount: i64,
    /// The `Idempotency-Key` it came under, if any.
    pub(crate) idempotency_key: Option<String>,
}

/// A cancellation that took effect, by the merchant or (`automatic`) by the PSP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cancel {
    /// The `Idempotency-Key` it came under; `None` without one, and for the PSP's own.
    pub(crate) idempotency_key: Option<String>,
    /// The reason given, if any; `automatic` for an authorization that lapsed.
    pub(crate) cancellation_reason: Option<String>,
}

/// Why a charge attempt failed, as the model keeps it; each face words it its own way (Stripe's
/// `last_payment_error`, Omise's `failure_code` and `failure_message`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The card was declined (by its token).
    Declined(Decline),
    /// Authentication was asked for and never happened (`pm_fake_requires_action`, once
    /// `requires_action_for` has passed), or could not be asked for (a card that needs it, when
    /// the request said it cannot handle an action).
    AuthenticationRequired,
    /// The customer failed the authentication (the fake's authentication page, *Fail*).
    AuthenticationFailed,
}

/// What a charge does if its token asks for a customer action (authentication), as the face
/// says from the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OnAction {
    /// The face cannot send a customer anywhere: tokens that need an action are unknown to it.
    Unsupported,
    /// Fail the attempt with [`Failure::AuthenticationRequired`] (Stripe's
    /// `error_on_requires_action=true`).
    Fail,
    /// Wait in `requires_action` for the customer, who is sent back to `return_url` (if any)
    /// afterwards.
    Wait { return_url: Option<String> },
    /// The customer already authenticated before the request (a PSP that verifies the buyer
    /// in the browser first, and is told so with the charge): a token that asks for
    /// authentication is charged like one that does not.
    AlreadyAuthenticated,
    /// Wait in `requires_action` for the customer, who is sent back to `return_url` (if any),
    /// for at most `requires_action_for` (then the attempt fails with
    /// [`Failure::AuthenticationRequired`]); once the customer completes the action the charge
    /// is not attempted yet but waits in `requires_confirmation`, authenticated, until the
    /// merchant confirms it (`Ledger::confirm`): a PSP where the customer approves a payment
    /// that the merchant then executes (Stripe's `confirmation_method=manual`, a wallet payment
    /// the buyer approves before the merchant captures it).
    WaitForApproval { return_url: Option<String> },
}

/// A charge: a PaymentIntent on the Stripe face, a charge on the Omise and 2C2P faces. The state
/// machine is the same for all; each face writes its own view of it.
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
    /// → `requires_payment_method`, `requires_capture` → `canceled`) falls due, epoch ms.
    pub(crate) due_ms: Option<i64>,
    /// Captured at once or only on request.
    pub(crate) capture_method: CaptureMethod,
    /// What was captured, once it was (the amount, for an automatic capture).
    pub(crate) amount_captured: Option<i64>,
    /// Until when (epoch ms) an authorization waiting in `requires_capture` may be captured.
    pub(crate) capture_before_ms: Option<i64>,
    /// Where the customer is sent to act (the fake's authentication page), set by the face for
    /// a charge waiting on an action.
    pub(crate) action_url: Option<String>,
    /// Where the customer goes back to once the action is done.
    pub(crate) return_url: Option<String>,
    /// How long an authorization is held and what happens once it lapses (manual capture).
    pub(crate) hold: Hold,
    /// Once the customer completes the action the charge waits for, it waits for the
    /// merchant's confirm rather than being attempted at once ([`OnAction::WaitForApproval`]).
    pub(crate) confirm_after_action: bool,
    /// The customer completed an action already, so a later confirm does not ask for one again.
    pub(crate) authenticated: bool,
    /// Every capture that took effect, oldest first.
    pub(crate) captures: Vec<Capture>,
    /// Every cancellation that took effect (at most one).
    pub(crate) cancels: Vec<Cancel>,
    /// What search shows of it: snapshots of its JSON, each with the epoch ms from which search
    /// sees it; the visible one is the last whose time has come.
    pub(crate) search_versions: Vec<(i64, Value)>,
    /// When it succeeded (was captured), epoch ms; `None` until then. A face whose PSP settles
    /// a payment some time after it succeeded (2C2P) reads it.
    pub(crate) succeeded_ms: Option<i64>,
}

impl Intent {
    /// `succeeded`, `failed`, `canceled`, `authorized` or `pending`: see
    /// [`FakeCharge::outcome`](super::FakeCharge::outcome).
    pub(crate) fn outcome(&self) -> &'static str {
        match self.status {
            Status::Succeeded => "succeeded",
            Status::Canceled => "canceled",
            Status::RequiresCapture => "authorized",
            Status::RequiresPaymentMethod if self.failure.is_some() => "failed",
            Status::RequiresPaymentMethod
            | Status::RequiresConfirmation
            | Status::RequiresAction
            | Status::Processing => "pending",
        }
    }

    /// What the charge collected: the captured amount once it succeeded, else nothing. Refunds
    /// are bounded by it.
    pub(crate) fn amount_received(&self) -> i64 {
        if self.status == Status::Succeeded {
            self.amount_captured.unwrap_or(self.amount)
        } else {
            0
        }
    }

    /// What may still be captured: the whole amount while `requires_capture`, else nothing.
    pub(crate) fn amount_capturable(&self) -> i64 {
        if self.status == Status::RequiresCapture {
            self.amount
        } else {
            0
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
    /// `succeeded`, `failed` or `pending`: see [`FakeRefund::outcome`](super::FakeRefund::outcome).
    pub(crate) fn outcome(&self) -> &'static str {
        match self.status {
            RefundStatus::Pending => "pending",
            RefundStatus::Succeeded => "succeeded",
            RefundStatus::Failed => "failed",
        }
    }
}
