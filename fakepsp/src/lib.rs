//! A local payment-service provider (PSP) that speaks a subset of Stripe's PaymentIntents and
//! Refunds wire protocol over HTTP — or, with [`Provider::Omise`], of Omise's Charges, Refunds and
//! Search (one face per instance, [`FakePspConfig::provider`]).
//!
//! Integration tests and the local sandbox point payonce at it instead of Stripe, so that every
//! failure mode payonce must survive — declines, a response lost after the charge was made, a
//! 500 before it was made, a slow answer, repeated or reordered webhooks — can be produced on
//! demand by choosing a `payment_method` token or by setting [`WebhookKnobs`]. It is never
//! compiled into a Lambda.
//!
//! Behind the HTTP server sits one synchronous, deterministic state machine, the [`model`], which
//! payonce's in-process simulation drives directly. It is as strict as Stripe: parameter
//! validation (currency minimums, `amount_too_large`, confirm-only parameters, unknown
//! parameters) before the idempotency key, 400 `idempotency_error` on a key reused with other
//! parameters, 409 while a key is in flight, keys forgotten at a random moment 24–48 h after
//! being stored, search that lags behind writes, refunds refused like Stripe refuses them. The
//! [`model`] is a provider-neutral ledger (the `ledger` module) with one face per PSP in front of
//! it (the `faces` modules); the rules and the Stripe documentation each follows are in the
//! `faces::stripe` module.
//!
//! With `confirm=true`, `POST /v1/payment_intents` behaves by token:
//!
//! | `payment_method` | behaviour |
//! |---|---|
//! | `pm_card_visa`, `pm_card_mastercard`, `pm_card_refundFail`, `pm_fake_refund_pending` | PaymentIntent `succeeded`, 200 |
//! | `pm_card_visa_chargeDeclined` | PaymentIntent `requires_payment_method`, 402 `card_declined` / `generic_decline` |
//! | `pm_card_chargeDeclinedInsufficientFunds` | as above with `insufficient_funds` |
//! | `pm_fake_lost_response` | PaymentIntent `succeeded` and stored under the idempotency key, then the connection is closed without any response |
//! | `pm_fake_error_before_charge` | 500 `api_error`; nothing created, nothing stored |
//! | `pm_fake_slow` | PaymentIntent `succeeded` and stored, answered only after [`FakePspConfig::slow_delay`] |
//! | `pm_fake_processing` | PaymentIntent `processing`, 200 (`payment_intent.processing`); `succeeded` (`payment_intent.succeeded`) after [`FakePspConfig::processing_for`] |
//! | `pm_fake_requires_action` | PaymentIntent `requires_action`, 200 (`payment_intent.requires_action`); back to `requires_payment_method` with `authentication_required` (`payment_intent.payment_failed`) after [`FakePspConfig::requires_action_for`] |
//! | anything else | 400 `resource_missing` on `payment_method`; nothing created |
//!
//! With `confirm=false` any known token is accepted and the PaymentIntent waits in
//! `requires_confirmation` (payonce uses this to fence a key); the confirm-only parameters
//! (`error_on_requires_action`, `off_session`, `return_url`, `mandate`, `mandate_data`) are
//! then refused, as Stripe refuses them.
//!
//! `POST /v1/refunds` (`payment_intent`, optional `amount`, `reason`, `metadata[...]`, under an
//! `Idempotency-Key`) refunds a succeeded PaymentIntent's charge; `GET /v1/refunds` lists refunds
//! newest first and `GET /v1/refunds/{id}` retrieves one. A refund's fate follows the charge's
//! token:
//!
//! | charge token | refund |
//! |---|---|
//! | `pm_card_refundFail` | `succeeded` (`refund.created`, `charge.refunded`); after [`FakePspConfig::refund_fail_after`] `failed` with `expired_or_canceled_card` (`refund.updated`, `refund.failed`), its amount refundable again |
//! | `pm_fake_refund_pending` | `pending` (`refund.created`); after [`FakePspConfig::refund_pending_for`] `succeeded` (`refund.updated`, `charge.refunded`) |
//! | any other | `succeeded` (`refund.created`, `charge.refunded`) |
//!
//! **The Omise face** ([`FakePspConfig::omise`]) serves the same model at the API root, under
//! HTTP Basic authentication with the secret key as the user name: `POST /charges` (`amount`,
//! `currency`, `card=<token>`, `capture`, `description`, `metadata[...]`, under
//! `Idempotency-Key`, which Omise does not document and the fake honours unless
//! [`FakePspConfig::omise_honours_idempotency_key`] is off), `GET /charges/{id}`,
//! `GET /search?scope=charge&query=…`, `POST|GET /charges/{id}/refunds`. The tokens above do the
//! same there: a decline is a `failed` charge answered 200 with Omise's `failure_code`
//! (`payment_rejected`, `insufficient_fund`), an unknown token 404 `not_found`, the processing and
//! requires-action tokens `pending` charges that complete with `charge.complete`; webhooks
//! (`charge.create`, `charge.complete`, `refund.create`) are signed with `Omise-Signature` (see
//! [`sign_omise_webhook`]). The rules and their sources are in the `faces::omise` module.
//!
//! **The 2C2P face** ([`FakePspConfig::twoc2p`]) serves the same model under `/payment/4.3`:
//! `paymentToken` and `paymentInquiry` take and answer `{"payload":"<JWT>"}` signed HS256 with
//! the merchant's secret key, `payment` (Do Payment) takes plain JSON with the payment token and
//! the test token as `securePayToken`. The invoice number is the idempotency key (`9015` for one
//! used before), a payment token is single use (`9041`), declines read as 2C2P's issuer codes
//! (`4005`, `4051`) in the inquiry, and final charges are notified with a signed backend
//! notification. There are no refunds. The rules and their sources are in the `faces::twoc2p` module.
//!
//! `GET /_fake/charges` and `GET /_fake/refunds` (no auth, not counted) list everything created,
//! with `provider`, `id`, `outcome`, `amount`, `currency`, `payment_id`, `idempotency_key` and,
//! for refunds, `refund_id` on every face, and `invoice_no` on the 2C2P face.
//! `POST /_fake/webhooks/hold` and `POST /_fake/webhooks/release` stop webhook delivery and let
//! it go again (what was held is then sent in order): a test that must see payonce's answer
//! before any webhook can arrive holds them, rather than hoping the answer wins a race.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use payonce_fake_psp::{FakePsp, FakePspConfig};
//! let psp = FakePsp::start(FakePspConfig::default(), ([127, 0, 0, 1], 0).into()).await?;
//! let base_url = psp.base_url(); // point the PSP client here
//! # let _ = base_url;
//! assert_eq!(psp.charges().len(), 0);
//! psp.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod conn;
mod currency;
mod faces;
mod ledger;
pub mod model;
mod running;
mod server;
mod webhooks;

use std::time::Duration;

pub use ledger::{FakeCharge, FakeRefund};
pub use running::{FakePsp, RunningFakePsp};
pub use webhooks::{sign_omise_webhook, sign_webhook};

/// Signs `claims` as the 2C2P face signs its answers and backend notifications: a compact JWS
/// with the header `{"alg":"HS256","typ":"JWT"}`, HMAC-SHA256 keyed with the merchant's secret
/// `key` used as text (the face's `api_key`). A notification body is `{"payload":"<this>"}`;
/// tests use it to deliver notifications of their own in the face's wire format.
pub fn sign_twoc2p_jwt(key: &str, claims: &serde_json::Value) -> String {
    faces::sign_twoc2p_jwt(key, claims)
}

/// The API key the fake PSP accepts unless told otherwise.
pub const DEFAULT_API_KEY: &str = "sk_test_payonce_fake";

/// The webhook signing secret the fake PSP uses unless told otherwise.
pub const DEFAULT_WEBHOOK_SECRET: &str = "whsec_payonce_fake";

/// The webhook secret of the Omise face unless told otherwise: standard base64, as Omise shows
/// its secrets (it decodes to the 32 bytes `payonce-fake-omise-webhook-key!!`).
pub const DEFAULT_OMISE_WEBHOOK_SECRET: &str = "cGF5b25jZS1mYWtlLW9taXNlLXdlYmhvb2sta2V5ISE=";

/// The merchant id (`merchantID`) the 2C2P face knows unless told otherwise.
pub const DEFAULT_TWOC2P_MERCHANT_ID: &str = "PAYONCEFAKE01";

/// The merchant secret key of the 2C2P face unless told otherwise ([`FakePspConfig::twoc2p`]):
/// 64 characters, used as text for HS256, like the keys 2C2P issues.
pub const DEFAULT_TWOC2P_SECRET_KEY: &str =
    "C2P0000000000000000000000000FAKEPSPKEY00000000000000000000000000";

/// The wire format one fake PSP instance speaks. Whatever the face, the charges, refunds, test
/// tokens, time-driven transitions, search lag and injected failures are those of the one
/// [`model`]; only the requests understood and the objects, errors and webhooks written differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Stripe's PaymentIntents and Refunds under `/v1` (the default).
    #[default]
    Stripe,
    /// Omise's Charges, Refunds and Search at the API root (see the `faces::omise` module).
    Omise,
    /// 2C2P PGW v4.3's Payment Token, Do Payment and Payment Inquiry under `/payment/4.3`, and
    /// its backend notification; no refunds (see the `faces::twoc2p` module).
    TwoC2p,
}

impl Provider {
    /// The provider's name as payonce stores it, and as `GET /_fake/charges` reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Omise => "omise",
            Self::TwoC2p => "2c2p",
        }
    }
}

/// How the fake PSP is set up when it starts.
#[derive(Clone, Debug)]
pub struct FakePspConfig {
    /// The wire format this instance speaks (one face per instance); Stripe by default.
    pub provider: Provider,
    /// The only secret key accepted: as `Authorization: Bearer <api_key>` on `/v1/*` (Stripe),
    /// as the HTTP Basic user name (Omise).
    pub api_key: String,
    /// Where signed webhook events are POSTed; `None` sends no webhooks.
    pub webhook_url: Option<String>,
    /// The secret webhook signatures are computed with: used as it is for Stripe (see
    /// [`sign_webhook`]); standard base64, decoded into the HMAC key, for Omise (see
    /// [`sign_omise_webhook`]), so starting an Omise face with a secret that is not base64
    /// fails.
    pub webhook_secret: String,
    /// Omise face only: whether `Idempotency-Key` works as on the Stripe face (replay, 400 on
    /// other parameters, 409 while in flight). Omise's documentation does not confirm that Omise
    /// honours the header at all; `false` makes the face ignore it, so a re-sent create makes a
    /// second charge (the fake's test tokens are reusable) and a re-sent refund refunds again.
    pub omise_honours_idempotency_key: bool,
    /// 2C2P face only: the merchant id it knows; the merchant's secret key is
    /// [`api_key`](Self::api_key), which verifies requests and signs answers and notifications.
    pub twoc2p_merchant_id: String,
    /// How long a `pm_fake_slow` charge holds its answer back.
    pub slow_delay: Duration,
    /// How long a `pm_fake_processing` PaymentIntent stays `processing` before it succeeds.
    pub processing_for: Duration,
    /// How long a `pm_fake_requires_action` PaymentIntent stays `requires_action` before it
    /// fails with `authentication_required`.
    pub requires_action_for: Duration,
    /// Search shows each PaymentIntent, and each change to it, only after a random lag of up to
    /// this long; zero (the default) makes search read-after-write.
    pub search_lag_max: Duration,
    /// How long a refund of a `pm_card_refundFail` charge reads `succeeded` before it fails.
    pub refund_fail_after: Duration,
    /// How long a refund of a `pm_fake_refund_pending` charge stays `pending` before it succeeds.
    pub refund_pending_for: Duration,
    /// How webhooks are delivered (duplicates, delay, order).
    pub webhooks: WebhookKnobs,
}

impl Default for FakePspConfig {
    fn default() -> Self {
        let model = model::ModelConfig::default();
        Self {
            provider: model.provider,
            api_key: DEFAULT_API_KEY.to_owned(),
            webhook_url: None,
            webhook_secret: DEFAULT_WEBHOOK_SECRET.to_owned(),
            slow_delay: model.slow_delay,
            processing_for: model.processing_for,
            requires_action_for: model.requires_action_for,
            search_lag_max: model.search_lag_max,
            refund_fail_after: model.refund_fail_after,
            refund_pending_for: model.refund_pending_for,
            omise_honours_idempotency_key: model.omise_honours_idempotency_key,
            twoc2p_merchant_id: model.twoc2p_merchant_id,
            webhooks: WebhookKnobs::default(),
        }
    }
}

impl FakePspConfig {
    /// The defaults with the Omise face and [`DEFAULT_OMISE_WEBHOOK_SECRET`].
    pub fn omise() -> Self {
        Self {
            provider: Provider::Omise,
            webhook_secret: DEFAULT_OMISE_WEBHOOK_SECRET.to_owned(),
            ..Self::default()
        }
    }

    /// The defaults with the 2C2P face, merchant [`DEFAULT_TWOC2P_MERCHANT_ID`] and secret key
    /// [`DEFAULT_TWOC2P_SECRET_KEY`] (as `api_key`). Notifications are signed with the secret key
    /// inside their body; `webhook_secret` is not used.
    pub fn twoc2p() -> Self {
        Self {
            provider: Provider::TwoC2p,
            api_key: DEFAULT_TWOC2P_SECRET_KEY.to_owned(),
            twoc2p_merchant_id: DEFAULT_TWOC2P_MERCHANT_ID.to_owned(),
            ..Self::default()
        }
    }
}

/// Knobs that make webhook delivery misbehave the way a real PSP's may.
///
/// The default delivers every event once, straight away, in the order the events happened.
#[derive(Clone, Debug, Default)]
pub struct WebhookKnobs {
    /// Extra copies of each event to deliver (all with the same event id), so `2` delivers each
    /// event three times.
    pub duplicates: u32,
    /// How long to wait after an event happens before delivering it.
    pub delay: Duration,
    /// Deliver events last-first. Every event produced by one API request is delivered in
    /// reverse; when `delay` is non-zero, every event that happened while the first one was
    /// being held back is delivered together with it, newest first, so events of different
    /// requests (e.g. a decline followed by a success for the same payment) arrive swapped.
    pub reorder: bool,
}
