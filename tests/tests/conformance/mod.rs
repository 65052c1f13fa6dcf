//! One PSP conformance suite, run against each adapter with the fake PSP speaking that adapter's
//! wire format: every case is written once in [`cases`], generic over a [`Face`] (what differs
//! between PSPs: the fake's face, the currency and amounts, the decline code, how a webhook is
//! signed and forged, whether refunds exist, what the fence proves, how a charge is approved and
//! looked up), and instantiated below for `stripe`, `omise`, `twoc2p`, `square` and `paypal`, so
//! `cargo test -p payonce-tests conformance::omise` runs one PSP.
//!
//! The cases go through the whole stack where that is what a client sees (the status and problem
//! `type` of POST /payments, the persisted payment and order, the fake's ledger and request
//! count; webhooks through the real receiver, SQS on moto and the real processor), and through
//! the `Psp` port where the port is what is specified (lookup states, the fence).
//!
//! **Proof that a key was never used** (`Psp::fence`), per PSP:
//!
//! - **Stripe**: the fence re-sends the attempt's PaymentIntent create under the same
//!   `Idempotency-Key` with `confirm=false`. If the key was never used, Stripe creates an
//!   unconfirmed intent under it (`requires_confirmation`), which payonce cancels: from then on
//!   every request under the key replays or conflicts with that canceled intent, so no late
//!   request of the original attempt can ever charge. If the key was used, Stripe answers 400
//!   `idempotency_error` (other parameters): `KeyUsed`. The proof holds while Stripe remembers
//!   keys (at least 24 h).
//! - **Omise**: none. Omise does not document its `Idempotency-Key`, has no unconfirmed charge to
//!   create under a key, and its search lags writes, so "not found" proves nothing: the fence
//!   answers `Unprovable` without calling Omise, and an attempt left unknown waits for an
//!   operator.
//! - **2C2P**: the invoice number is the key. The fence re-sends the attempt's own Payment Token
//!   request (byte-identical, never followed by a Do Payment): if 2C2P issues a token, it held
//!   none for the invoice before, and from then on it refuses every new token for the invoice
//!   (`9015` "Existing Invoice Number"), so the original attempt can never get one to pay with;
//!   the fence's own token is dropped unused. `9015` to the fence itself means the invoice was
//!   used: `KeyUsed`, and the Payment Inquiry tells what became of it.
//! - **Square**: cancel by idempotency key (`POST /v2/payments/cancel`). Square voids whatever
//!   the key made, or finds nothing and says so by succeeding (`Voided`). Square moves money
//!   only when payonce completes a payment whose id it stored, and payonce never stores one
//!   for an attempt it gave up, so nothing made under the key can move money, including a
//!   create that lands late. A key whose payment was completed is refused, which proves
//!   nothing; reconcile then looks that payment up by its stored id.
//! - **PayPal**: none, and no call ([`FenceProof::Resend`]). PayPal keeps an Orders request id
//!   6 hours (`Psp::charge_keys_kept`) and answers a re-send under it with what the first
//!   request made, so reconcile re-sends the attempt's byte-identical create within that window:
//!   the key makes at most one order, and a late create of the original attempt is answered with
//!   that same order.
//!
//! **Square charges in two steps** ([`Approval::ApprovesThenCompleted`]). The create only
//! approves (`autocomplete: false`). The charge path stores the id, then completes the
//! payment, so a good card costs two calls and two webhooks (`payment.created`, then
//! `payment.updated`). A create whose answer is lost is sent again at once under its key, and
//! Square's replay names the payment. If that re-send gets no answer either, or there is no
//! time left for it, the payment stays processing with no id. Square's webhook about the
//! approval then only fills in the id, since the webhook processor never calls the PSP, and a
//! reconcile run completes the payment. Square cannot be searched by our reference
//! ([`LookupBy::StoredId`]).
//!
//! **PayPal charges a vaulted card in the create** ([`Approval::Captures`], the fake's default
//! one-step mode): the order comes back `COMPLETED` with its capture, so the create answers
//! approved, while PayPal's lookups and webhooks word it as the order's capture
//! (`Captured`). A payer's action is handed over only to a create with a return URL
//! ([`PayerAction::NeedsReturnUrl`]). PayPal cannot be searched by our reference either
//! ([`LookupBy::StoredId`]); a create whose answer was lost is sent again at once under its
//! request id. Its webhooks are signed with RSA by the running fake's key, and name the
//! certificate the fake serves on its own origin, so [`Face::event`] and [`Face::attacks`] take
//! the running fake.

mod cases;
mod faces;
mod harness;

use payonce::domain::Currency;
use payonce_fake_psp::{FakeCharge, FakePspConfig, RunningFakePsp};

/// What a conformance case needs to know about one PSP.
pub trait Face: Send + Sync + 'static {
    /// The provider name payonce stores on payments (`stripe`, `omise`, `2c2p`, `square`,
    /// `paypal`).
    const NAME: &'static str;
    /// The provider name its webhooks arrive under (`/webhooks/{name}`) in the test stack.
    const WEBHOOK_PROVIDER: &'static str;
    /// The currency of the orders the cases pay.
    const CURRENCY: Currency;
    /// The amount of those orders, in minor units (well above the PSP's minimum).
    const AMOUNT: i64;
    /// An amount of [`Face::CURRENCY`] the PSP refuses as below its minimum.
    const BELOW_MINIMUM: i64;
    /// POST /payments' status and problem type for an order of [`Face::BELOW_MINIMUM`].
    const BELOW_MINIMUM_ANSWER: (u16, &'static str);
    /// The problem type of POST /orders' 400 for a total of [`Face::BELOW_MINIMUM`].
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str;
    /// The decline code payonce reports for `pm_card_visa_chargeDeclined`.
    const DECLINE_CODE: &'static str;
    /// POST /payments' status and problem type for `pm_card_nonexistent`.
    const REJECTED_METHOD_ANSWER: (u16, &'static str);
    /// POST /payments' status when the charge's HTTP answer is lost after the PSP charged: 202,
    /// or 201 where the adapter's own next call learns the outcome.
    const LOST_RESPONSE_STATUS: u16;
    /// The webhooks the PSP sends about one payment with a good card.
    const CHARGE_WEBHOOKS: usize;
    /// Whether refunds go through this PSP.
    const REFUNDS: bool;
    /// Whether a new refund of an ordinary card is answered pending, and settled later by a
    /// lookup or a webhook. Square's refunds start `PENDING` until the funds are secured.
    const REFUND_STARTS_PENDING: bool;
    /// What its fence proves.
    const FENCE: FenceProof;
    /// What its create does with a good card, and so who moves the money.
    const APPROVAL: Approval;
    /// How payonce looks a charge up at the PSP.
    const LOOKUP: LookupBy;
    /// What the PSP does with a charge whose payer must act, when the create names no return URL.
    const PAYER_ACTION: PayerAction;
    /// The PSP requests one payment with a good card costs (the create, and whatever the
    /// adapter asks next in the same invocation).
    const CHARGE_REQUESTS: u64;
    /// Whether a lookup tells a completed payment from one only approved. 2C2P's inquiry reads
    /// the same before and after a settle: there a settle sent again is answered "already
    /// settled" instead.
    const LOOKUP_TELLS_COMPLETED: bool = true;
    /// Whether the PSP's webhook of a good card says the money moved. On a 2C2P account that
    /// settles manually it says only that the payment was approved (an authorization), which
    /// never revives a payment a decline ended: that authorization lapses unsettled.
    const SUCCESS_EVENT_MOVES_MONEY: bool = true;

    /// The fake PSP speaking this PSP's wire format.
    fn fake() -> FakePspConfig;

    /// The PSP's id payonce stores for the fake's `charge`: its id (Stripe's intent, Omise's
    /// charge), or on 2C2P the invoice number (2C2P's `tranRef` is not in every answer).
    fn psp_id(charge: &FakeCharge) -> String {
        charge.id.clone()
    }

    /// A webhook delivery about `facts`, in the face's wire format, signed (at `now_s`) as the
    /// running fake `psp` signs its own (PayPal: with its key, naming its certificate's URL).
    fn event(facts: &EventFacts, now_s: i64, psp: &RunningFakePsp) -> harness::Delivery;

    /// Forged or damaged deliveries of `facts` (the scheme's own attacks), each with the status
    /// and problem type the receiver must refuse it with.
    fn attacks(facts: &EventFacts, now_s: i64, psp: &RunningFakePsp) -> Vec<harness::Attack>;
}

/// What a PSP's fence can prove about a key (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceProof {
    /// Stripe: an unused key gets an unconfirmed intent, canceled at once, that blocks it.
    CanceledIntent,
    /// 2C2P: an unused invoice gets a token nobody uses, and refuses every later one.
    TakenInvoice,
    /// Omise: no proof.
    Unprovable,
    /// Square: cancel by the attempt's key voids whatever the key made, or finds nothing
    /// ([`payonce::ports::Fence::Voided`]). Nothing made under the key is ever completed, so
    /// nothing can move money. A key whose payment was completed is refused: no proof.
    VoidedByKey,
    /// PayPal: no proof and no call ([`payonce::ports::Fence::Resend`]); a re-send of the
    /// create under the key, while the PSP keeps it, is answered with what the key made.
    Resend,
}

/// What a PSP's create does with a good card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// It charges (Stripe, Omise, 2C2P). The create's answer, a lookup or the PSP's webhook
    /// settles the payment.
    Charges,
    /// It only approves (Square, `autocomplete: false`). payonce stores the PSP's id, then
    /// completes the payment. The PSP's webhook about the approval only fills in the id, and
    /// the charge path or reconcile completes it. A lost create answer is therefore settled by
    /// the webhook plus a reconcile run, never by the webhook alone. An undecided payment's id
    /// (Square's `PENDING`) is stored from the create's own answer, so the webhook of its
    /// approval then changes nothing.
    ApprovesThenCompleted,
    /// It charges by capturing at once (PayPal's vaulted card: the order `COMPLETED` with its
    /// capture). The create answers approved; the PSP's lookups and webhooks word it as a capture
    /// (`Captured`), which settles the payment as a success does.
    Captures,
}

/// What a PSP's create answers for a charge whose payer must act (`pm_fake_requires_action`)
/// when it names no return URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayerAction {
    /// An undecided charge, pending until the payer acts or it lapses (Stripe, Omise, 2C2P,
    /// Square).
    Waits,
    /// An authentication nobody can be sent to (`PspOutcome::AuthenticationRequired`, naming
    /// the order, which waits at its `payer-action` link for a payer payonce never sends there,
    /// then lapses); with a return URL, that link as the action (PayPal).
    NeedsReturnUrl,
}

/// How payonce looks a charge up at the PSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupBy {
    /// By our payment id (`Psp::lookup`): the PSP searches by our reference.
    OurId,
    /// Only by the PSP's id stored on the payment (`Psp::lookup_payment`). The PSP cannot
    /// search by our reference (Square), so `Psp::lookup` finds nothing, and a payment with no
    /// stored id is not found.
    StoredId,
}

/// What a webhook event says: about which payment, and with which outcome.
#[derive(Debug, Clone)]
pub struct EventFacts {
    /// The event id, for PSPs that give events one (2C2P's is derived from the content).
    pub event_id: String,
    /// Our payment.
    pub payment_id: String,
    /// The PSP's id of the charge.
    pub provider_payment_id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// Succeeded, or declined by the issuer.
    pub succeeded: bool,
}

/// Generates `mod $module` with one `#[tokio::test]` per case of [`cases`], for the face
/// `$face`: the list of cases is written once, here, for every PSP.
macro_rules! conformance {
    ($module:ident, $face:ty) => {
        mod $module {
            conformance!(@cases $face =>
                approve, decline, rejected_method, below_minimum, order_below_minimum,
                lost_response, not_sent_unreachable, not_sent_credentials_refused, slow,
                lookup_states, fence, refund, webhook_five_times_in_sequence,
                webhook_five_times_at_once, webhooks_reordered, late_failure, signature_attacks
            );
        }
    };
    (@cases $face:ty => $($case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                crate::conformance::cases::$case::<$face>().await
            }
        )+
    };
}

conformance!(stripe, crate::conformance::faces::Stripe);
conformance!(omise, crate::conformance::faces::Omise);
conformance!(twoc2p, crate::conformance::faces::TwoC2p);
conformance!(twoc2p_settling, crate::conformance::faces::TwoC2pSettling);
conformance!(square, crate::conformance::faces::Square);
conformance!(paypal, crate::conformance::faces::PayPal);
