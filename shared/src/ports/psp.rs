//! The PSP: the requests payonce sends, the outcomes it must tell apart, and what fencing a
//! key proved.

use crate::domain::{
    CaptureMethod, Currency, OperationKind, Payment, PaymentOperation, Refund, RefundReason,
    RefundSettlement, Settlement,
};
use async_trait::async_trait;
use std::time::Duration;

/// A refund request to a PSP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequest {
    /// Our refund id (sent as metadata, matched by lookups).
    pub refund_id: String,
    /// Our payment id (sent as metadata).
    pub payment_id: String,
    /// The PSP's id of the charge refunded.
    pub provider_payment_id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// Why, if given.
    pub reason: Option<RefundReason>,
    /// `payonce-refund-<payment_id>-<n>`.
    pub idempotency_key: String,
    /// Whether an earlier call under this refund's key may have reached the PSP: a PSP that
    /// ignores refund keys may then refuse this one because of that earlier refund, so its
    /// refusal proves nothing.
    pub resend: bool,
    /// The PSP's id of this refund, once known (a lookup reads that one; a PSP that keys no
    /// refund by our id never sends one that has it again).
    pub provider_refund_id: Option<String>,
    /// What the PSP captured of the payment, minor units (0 if unknown): a PSP that voids
    /// instead of refunding before settlement (2C2P) voids only a refund of all of it.
    pub captured: i64,
}

/// What a PSP whose refunds carry none of our ids (2C2P) needs to tell one refund of a payment
/// from the others: the PSP's ids the others hold, and the amounts of those unanswered (which
/// may be at the PSP with no id stored).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiblingRefunds {
    /// The PSP's ids of the payment's other refunds.
    pub known: Vec<String>,
    /// The amounts of the payment's other refunds still pending without a PSP id.
    pub unresolved: Vec<i64>,
}

impl SiblingRefunds {
    /// The siblings of `refund_id` among `refunds` (all refunds of its payment).
    pub fn of(refund_id: &str, refunds: &[Refund]) -> Self {
        let mut siblings = Self::default();
        for other in refunds.iter().filter(|other| other.refund_id != refund_id) {
            match &other.provider_refund_id {
                Some(id) => siblings.known.push(id.clone()),
                None if other.status == crate::domain::RefundStatus::Pending => {
                    siblings.unresolved.push(other.amount)
                }
                None => {}
            }
        }
        siblings
    }
}

/// Reads a refund's siblings (the payment's other refunds) when a PSP asks: only a PSP whose
/// refunds carry none of our ids does, and only **after** it read what it holds, so a sibling
/// whose refund it lists was begun (stored) before the read and is seen.
#[async_trait]
pub trait SiblingSource: Send + Sync {
    /// The siblings as stored now.
    async fn siblings(&self) -> Result<SiblingRefunds, String>;
}

/// A fixed answer (tests, and callers that know the siblings).
#[async_trait]
impl SiblingSource for SiblingRefunds {
    async fn siblings(&self) -> Result<SiblingRefunds, String> {
        Ok(self.clone())
    }
}

impl RefundRequest {
    /// The request for `refund` of the PSP charge `provider_payment_id`, of which the PSP
    /// captured `captured`: a pure function of the refund, so every re-send under its key is
    /// identical.
    pub fn for_refund(refund: &Refund, provider_payment_id: &str, captured: i64) -> Self {
        Self {
            refund_id: refund.refund_id.clone(),
            payment_id: refund.payment_id.clone(),
            provider_payment_id: provider_payment_id.to_owned(),
            amount: refund.amount,
            currency: refund.currency,
            reason: refund.reason,
            idempotency_key: refund.psp_key(),
            resend: refund.psp_maybe_reached,
            provider_refund_id: refund.provider_refund_id.clone(),
            captured,
        }
    }
}

/// The outcome classes the refund path must tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The PSP answered with a refund, or refused the request for good: what it said.
    Answered(RefundSettlement),
    /// This call never reached the PSP, or our credentials were refused (see
    /// [`PspOutcome::NotSent`]).
    NotSent {
        /// What happened (for logs).
        reason: String,
    },
    /// Anything after a connection was made without a definitive answer.
    Unknown {
        /// What happened (for logs).
        reason: String,
    },
}

/// A capture or cancel of a payment at its PSP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationRequest {
    /// Capture or cancel.
    pub kind: OperationKind,
    /// Our payment id (for logs).
    pub payment_id: String,
    /// The PSP's id of the payment.
    pub provider_payment_id: String,
    /// A capture's amount, minor units; `None` for a cancel, and for the second step of a charge
    /// captured at once ([`crate::service::complete`]), which captures all of it.
    pub amount: Option<i64>,
    /// The payment's amount, minor units: what its authorization holds (2C2P's settle names it).
    pub payment_amount: i64,
    /// How the payment was to be captured: only a manual one is ever voided on 2C2P (an
    /// automatic one is settled by payonce itself, whom no cancel may race).
    pub capture: CaptureMethod,
    /// The payment's currency.
    pub currency: Currency,
    /// [`PaymentOperation::psp_key`] of the claim.
    pub idempotency_key: String,
}

impl OperationRequest {
    /// The request of `operation` on `payment`: a pure function of both, so every re-send under
    /// its key is identical. `None` while the PSP has no id for the payment.
    pub fn for_operation(payment: &Payment, operation: &PaymentOperation) -> Option<Self> {
        Some(Self {
            kind: operation.kind,
            payment_id: payment.payment_id.clone(),
            provider_payment_id: payment.provider_payment_id.clone()?,
            amount: operation.amount,
            payment_amount: payment.amount,
            capture: payment.capture,
            currency: payment.currency,
            idempotency_key: operation.psp_key(&payment.payment_id),
        })
    }
}

/// The outcome classes a capture or cancel must tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationOutcome {
    /// The PSP said what the payment is now: captured, canceled, or (when it could not do what
    /// was asked because the payment had moved) what it moved to.
    Answered(Settlement),
    /// The PSP refused the operation for good and the payment stays as it was (for example a
    /// capture of an authorization the PSP no longer honours without saying it lapsed).
    Refused {
        /// The PSP's error code.
        code: String,
    },
    /// This call never reached the PSP (see [`PspOutcome::NotSent`]).
    NotSent {
        /// What happened (for logs).
        reason: String,
    },
    /// Anything after a connection was made without a definitive answer.
    Unknown {
        /// What happened (for logs).
        reason: String,
    },
}

/// The decline code of a charge that needed the customer to authenticate where asking was
/// forbidden (no `return_url`): a lookup or event that reports it reports no decline.
/// (Stripe's `last_payment_error.code`.)
pub const AUTHENTICATION_REQUIRED_CODE: &str = "authentication_required";

/// The decline code of a charge whose customer failed or refused the authentication.
pub const AUTHENTICATION_FAILED_CODE: &str = "payment_intent_authentication_failure";

/// How long after its holder's lease lapsed a call may still be running at the PSP (the holder
/// died mid-call; the PSP finishes what it received). Reconcile's re-send of a create waits as
/// long from the attempt's start (its `abandon_after`, 20 minutes by default).
pub const EARLIER_CALL_MAY_RUN_FOR: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// A charge request to a PSP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    /// Our attempt id (sent as metadata).
    pub payment_id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// PSP payment method token.
    pub payment_method: String,
    /// The PSP idempotency key derived from the attempt.
    pub idempotency_key: String,
    /// Where the PSP sends the customer back after an action (3-D Secure): with it the PSP may
    /// ask for one ([`PspOutcome::ActionRequired`]); without it, a payment that needs one fails
    /// ([`PspOutcome::AuthenticationRequired`]).
    pub return_url: Option<String>,
    /// Capture at once, or only authorize ([`PspOutcome::Authorized`]).
    pub capture: CaptureMethod,
    /// Whether an earlier call under this key may still be running at the PSP: a takeover of an
    /// attempt whose holder's lease lapsed less than [`EARLIER_CALL_MAY_RUN_FOR`] ago (it may
    /// have died mid-call). A PSP that may fail a request sent under a key whose first request
    /// still runs (PayPal) must then read a refusal as unknown, never as the payment's decline.
    pub earlier_may_run: bool,
}

impl ChargeRequest {
    /// The request for `payment`, under the key derived from its id: a pure function of the
    /// payment, so every re-send under the key is identical.
    pub fn for_payment(payment: &Payment) -> Self {
        Self {
            payment_id: payment.payment_id.clone(),
            amount: payment.amount,
            currency: payment.currency,
            payment_method: payment.payment_method.clone(),
            idempotency_key: charge_key(&payment.payment_id),
            return_url: payment.return_url.clone(),
            capture: payment.capture,
            earlier_may_run: false,
        }
    }
}

/// The PSP idempotency key of a charge: `payonce-charge-<payment_id>`.
pub fn charge_key(payment_id: &str) -> String {
    format!("payonce-charge-{payment_id}")
}

/// The outcome classes the charge path must tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PspOutcome {
    /// Charged.
    Approved {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// Definitively declined by the issuer.
    Declined {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
        /// Decline code.
        decline_code: String,
    },
    /// The PSP waits for the customer to act (3-D Secure) at `redirect_url`; the request had a
    /// `return_url` to bring them back to.
    ActionRequired {
        /// The PSP's id.
        provider_payment_id: String,
        /// Where to send the customer.
        redirect_url: String,
    },
    /// Authorized, not captured (a manual-capture request).
    Authorized {
        /// The PSP's id.
        provider_payment_id: String,
        /// What may be captured, minor units.
        amount_capturable: i64,
        /// When the authorization lapses (epoch milliseconds), if the PSP said.
        capture_before_ms: Option<i64>,
    },
    /// The PSP made the payment and has not decided it yet (Square's `PENDING`, a PayPal
    /// capture pending review): nothing final, but its id, which a PSP without a lookup by our
    /// reference needs stored.
    Pending {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// The payment needs the customer to authenticate and the request had no `return_url`: the
    /// PSP failed it, nothing was charged.
    AuthenticationRequired {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
    },
    /// Definitively refused: the payment method itself is invalid.
    Rejected {
        /// The PSP's message.
        message: String,
    },
    /// Definitively refused for another reason than the payment method (a validation error such
    /// as `amount_too_small`): nothing was charged, nor will a re-send charge.
    Refused {
        /// The PSP's error code.
        code: String,
    },
    /// This call never reached the PSP, or our credentials were refused. Only if every call ever
    /// made under the attempt's key was of this class may the order be released.
    NotSent {
        /// What happened (for logs; never shown to clients).
        reason: String,
    },
    /// Anything after a connection was made without a definitive answer.
    Unknown {
        /// What happened (for logs).
        reason: String,
    },
}

/// What a PSP knows about one of our attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PspLookup {
    /// The PSP has no charge for this attempt (as far as its lookup can tell).
    NotFound,
    /// Charged.
    Succeeded {
        /// The PSP's id.
        provider_payment_id: String,
        /// What the PSP says it charged, where its answer says it: reconcile applies nothing
        /// it disagrees with.
        amount: Option<CheckedAmount>,
    },
    /// A manual-capture payment captured, for `amount_captured` (a partial capture states less
    /// than the authorization).
    Captured {
        /// The PSP's id.
        provider_payment_id: String,
        /// What was captured, minor units.
        amount_captured: i64,
        /// What the PSP says the authorization was for, where its answer says it.
        amount: Option<CheckedAmount>,
    },
    /// Declined.
    Declined {
        /// The PSP's id.
        provider_payment_id: String,
        /// Decline code.
        decline_code: String,
        /// What the PSP says the declined charge was for, where its answer says it.
        amount: Option<CheckedAmount>,
    },
    /// Exists but not final yet (`processing`, an action no browser can follow...).
    Pending {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// Waits for the customer to act at `redirect_url` (3-D Secure).
    ActionRequired {
        /// The PSP's id.
        provider_payment_id: String,
        /// Where to send the customer.
        redirect_url: String,
    },
    /// Authorized, not captured (a manual-capture payment).
    Authorized {
        /// The PSP's id.
        provider_payment_id: String,
        /// What may be captured, minor units.
        amount_capturable: i64,
        /// When the authorization lapses (epoch milliseconds), if the PSP said.
        capture_before_ms: Option<i64>,
    },
    /// Cancelled without a charge: nothing can ever be charged under the attempt's key.
    Canceled {
        /// The PSP's id.
        provider_payment_id: String,
        /// Why, where the PSP says it.
        reason: Option<crate::domain::CancellationReason>,
    },
}

impl PspLookup {
    /// How strong the word is, when more than one charge carries our payment id: succeeded,
    /// then open (it may still charge: pending, waiting for the customer, authorized), then
    /// declined, then canceled, then nothing.
    pub fn strength(&self) -> u8 {
        match self {
            Self::Succeeded { .. } | Self::Captured { .. } => 4,
            Self::Pending { .. } | Self::ActionRequired { .. } | Self::Authorized { .. } => 3,
            Self::Declined { .. } => 2,
            Self::Canceled { .. } => 1,
            Self::NotFound => 0,
        }
    }

    /// What the PSP says the charge it found was for, where it says it.
    pub fn amount(&self) -> Option<&CheckedAmount> {
        match self {
            Self::Succeeded { amount, .. }
            | Self::Captured { amount, .. }
            | Self::Declined { amount, .. } => amount.as_ref(),
            Self::NotFound
            | Self::Pending { .. }
            | Self::ActionRequired { .. }
            | Self::Authorized { .. }
            | Self::Canceled { .. } => None,
        }
    }
}

/// Errors of a PSP call that are not charge outcomes (lookups).
#[derive(Debug, thiserror::Error)]
#[error("the PSP call failed: {reason}")]
pub struct PspError {
    /// What happened.
    pub reason: String,
}

/// A payment service provider.
#[async_trait]
pub trait Psp: Send + Sync {
    /// The provider's name as stored on payments (`stripe`, ...).
    fn name(&self) -> &str;
    /// Which PSP this is: what its payment method tokens look like, what it charges.
    fn kind(&self) -> crate::domain::PspKind;
    /// Whether refunds can go through this PSP at all. Without them the refund path answers
    /// 409 `refund-not-supported` before claiming anything (2C2P: its refunds need the
    /// Payment Maintenance API's exchanged RSA keys, which payonce does not have).
    fn supports_refunds(&self) -> bool {
        true
    }
    /// Creates and confirms a charge under `request.idempotency_key`, giving up after `timeout`.
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome;
    /// Looks an attempt up by our payment id.
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError>;
    /// Looks `payment` up as reconcile sees it: by default by our payment id ([`Psp::lookup`]);
    /// a PSP that cannot search by our reference (Square) looks it up by the PSP's id stored on
    /// it, and finds nothing while none is stored.
    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        self.lookup(&payment.payment_id).await
    }
    /// Proves whether the PSP ever ran `request`'s key, by re-sending the create under the
    /// same key without confirming it (search APIs lag, so "not found" is never proof).
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError>;
    /// How long the PSP keeps a charge's idempotency key at least: a create is never re-sent,
    /// nor a fence relied on, past it. 24 hours by default (Stripe's documented minimum).
    fn charge_keys_kept(&self) -> Duration {
        Duration::from_secs(24 * 3600)
    }
    /// Cancels an unconfirmed charge created by [`Psp::fence`].
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError>;
    /// Whether payments may be authorized now and captured later here: by default what the
    /// PSP can do ([`crate::domain::PspKind::captures_later`]); 2C2P only on an account that
    /// settles manually, with the Payment Maintenance keys to settle.
    fn captures_later(&self) -> bool {
        self.kind().captures_later()
    }
    /// Whether money moves under a key only once payonce completes a payment whose PSP id it
    /// stored (Square: every payment is created `autocomplete: false`, and Square cancels one
    /// never completed when its delay lapses). Then an attempt with no stored id has moved no
    /// money and never will, whatever its fence says: reconcile gives it up rather than hold
    /// its order for an operator.
    fn moves_money_only_under_a_stored_id(&self) -> bool {
        false
    }
    /// Whether a capture may take less than the whole authorization (Omise's ordinary
    /// authorizations are captured whole).
    fn captures_partially(&self) -> bool {
        true
    }
    /// Captures or cancels under `request.idempotency_key`, giving up after `timeout`. A PSP
    /// whose payments never wait for a customer or a capture refuses both.
    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        let _ = timeout;
        OperationOutcome::Refused {
            code: format!("{}_not_supported", request.kind.as_str()),
        }
    }
    /// Refunds under `request.idempotency_key`, giving up after `timeout`.
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome;
    /// What the PSP holds for our refund `refund_id` of the charge `provider_payment_id`, by
    /// listing the charge's refunds (never by search, never creating one); `None` if none
    /// carries our id.
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError>;
    /// Refunds as [`Psp::create_refund`], for a PSP whose refunds carry none of our ids reading
    /// the refund's `siblings` when it needs them (by default it never does).
    async fn create_refund_among(
        &self,
        request: &RefundRequest,
        siblings: &dyn SiblingSource,
        timeout: Duration,
    ) -> RefundOutcome {
        let _ = siblings;
        self.create_refund(request, timeout).await
    }
    /// What the PSP holds for `request`'s refund: by default [`Psp::lookup_refund`] by our id;
    /// a PSP whose refunds carry none of our ids tells it apart with its `siblings`.
    async fn lookup_refund_among(
        &self,
        request: &RefundRequest,
        siblings: &dyn SiblingSource,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let _ = siblings;
        self.lookup_refund(&request.provider_payment_id, &request.refund_id)
            .await
    }
}

/// What fencing a PSP key proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The key had never run: the PSP created an unconfirmed charge under it (to be cancelled),
    /// so no charge can ever run under it again.
    NeverRan {
        /// The unconfirmed charge the fence created.
        provider_payment_id: String,
    },
    /// The key was used by an earlier request (a charge may exist even if lookups miss it).
    KeyUsed,
    /// The key was used, yet the PSP holds no charge under it, and only the invocation that
    /// used it could ever make one (2C2P: the invoice's payment tokens exist only in the
    /// invocations that requested them, which spend them at once). Reconcile asks only once no
    /// such invocation can be alive (the attempt's lease lapsed), so nothing can be charged.
    UsedWithoutCharge,
    /// A request with the key is in flight at the PSP right now.
    InFlight,
    /// The fence itself was refused by validation (e.g. the payment method no longer exists).
    /// The original request carried the same parameters, so it was refused alike: nothing was
    /// charged under the key.
    Refused {
        /// Whether the refusal names the payment method.
        payment_method: bool,
    },
    /// The PSP offers no way to prove a key was never used (nothing can be created under it
    /// that would block a late charge): the attempt waits for an operator.
    Unprovable,
    /// The PSP voided whatever the key made, or found nothing under it (Square's cancel by
    /// idempotency key), and nothing made under the key can ever move money: the PSP only
    /// authorizes under it, and payonce completes only a payment whose PSP id it stored — which
    /// it never stores for an attempt it gives up. Nothing was, nor can be, charged.
    Voided,
    /// The PSP offers no proof that a key was never used, but answers a re-send under it with
    /// what the key made (or makes the one charge now) while it keeps keys (PayPal's request
    /// ids, [`Psp::charge_keys_kept`]): re-send the byte-identical create.
    Resend,
}

/// An amount a PSP reports (in an event or a lookup), to be checked against ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedAmount {
    /// Minor units.
    pub minor: i64,
    /// Lowercase ISO 4217 code.
    pub currency: String,
}

impl CheckedAmount {
    /// The `amount` (integer, minor units) and `currency` (any case) of a PSP object, as Stripe
    /// and Omise write them on payment intents, charges and refunds; `None` unless both are
    /// there.
    pub fn of_object(object: &serde_json::Value) -> Option<Self> {
        Some(Self {
            minor: object["amount"].as_i64()?,
            currency: object["currency"].as_str()?.to_ascii_lowercase(),
        })
    }
}
