//! How a fake PSP server is set up when it starts: [`FakePspConfig`] and the [`WebhookKnobs`].

use std::time::Duration;

use crate::model::ModelConfig;
use crate::paypal_signing::DEFAULT_PAYPAL_WEBHOOK_ID;
use crate::provider::{
    Provider, DEFAULT_API_KEY, DEFAULT_OMISE_WEBHOOK_SECRET, DEFAULT_SQUARE_SIGNATURE_KEY,
    DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_TWOC2P_SECRET_KEY, DEFAULT_WEBHOOK_SECRET,
};
use crate::twoc2p_keys::TwoC2pMaintenanceKeys;

/// How the fake PSP is set up when it starts.
#[derive(Clone, Debug)]
pub struct FakePspConfig {
    /// The wire format this instance speaks (one face per instance); Stripe by default.
    pub provider: Provider,
    /// The only secret key accepted: as `Authorization: Bearer <api_key>` on `/v1/*` (Stripe) and
    /// `/v2/*` (Square, the access token), as the HTTP Basic user name (Omise); the merchant's
    /// secret key on the 2C2P face; the OAuth client secret on the PayPal face (with
    /// [`paypal_client_id`](Self::paypal_client_id), it buys access tokens at
    /// `POST /v1/oauth2/token`).
    pub api_key: String,
    /// Where signed webhook events are POSTed; `None` sends no webhooks.
    pub webhook_url: Option<String>,
    /// The secret webhook signatures are computed with: used as it is for Stripe (see
    /// [`sign_webhook`](crate::sign_webhook)); standard base64, decoded into the HMAC key, for Omise (see
    /// [`sign_omise_webhook`](crate::sign_omise_webhook)), so starting an Omise face with a secret that is not base64
    /// fails; the subscription's signature key, used as it is, for Square (see
    /// [`sign_square_webhook`](crate::sign_square_webhook), over [`webhook_url`](Self::webhook_url)
    /// and the body).
    pub webhook_secret: String,
    /// Omise face only: whether `Idempotency-Key` works as on the Stripe face (replay, 400 on
    /// other parameters, 409 while in flight). Omise's documentation does not confirm that Omise
    /// honours the header at all; `false` makes the face ignore it, so a re-sent create makes a
    /// second charge (the fake's test tokens are reusable) and a re-sent refund refunds again.
    pub omise_honours_idempotency_key: bool,
    /// 2C2P face only: the merchant id it knows; the merchant's secret key is
    /// [`api_key`](Self::api_key), which verifies requests and signs answers and notifications.
    pub twoc2p_merchant_id: String,
    /// 2C2P face only: the Payment Maintenance API's RSA keys (2C2P's private key, the
    /// merchant's public key, and optionally the merchant's private key to serve); `None` (the
    /// default) generates both RSA-2048 pairs at start. The merchant's side is served at
    /// `GET /_fake/2c2p/keys`
    /// ([`RunningFakePsp::twoc2p_keys`](crate::RunningFakePsp::twoc2p_keys)).
    /// Starting with keys that are not RSA keys of 2048 to 8192 bits fails.
    pub twoc2p_maintenance_keys: Option<TwoC2pMaintenanceKeys>,
    /// 2C2P face only: how long after it succeeded a charge settles (maintenance status `A`,
    /// voidable, → `S`, refundable); zero (the default) settles at once, so the sandbox can
    /// refund straight away. On a manual-settlement account, counted from the settle (`S`).
    pub twoc2p_settle_after: Duration,
    /// 2C2P face only: the merchant account's "manual settlement" setting (off by default).
    /// On, every approved payment is only an authorization (`_fake/charges` outcome
    /// `authorized`) until the Payment Maintenance API settles the whole of it (`processType`
    /// `S`) or voids it (`V`); one never settled lapses after
    /// [`authorization_expires_after`](Self::authorization_expires_after). The PGW face's
    /// answers and notifications read as for any approved payment (`0000`). Off, `S` answers
    /// `32` "settlement is not required". `--twoc2p-manual-settlement` on the command line.
    pub twoc2p_manual_settlement: bool,
    /// How long a `pm_fake_slow` charge holds its answer back.
    pub slow_delay: Duration,
    /// How long a `pm_fake_processing` PaymentIntent stays `processing` before it succeeds.
    pub processing_for: Duration,
    /// How long a `pm_fake_requires_action` PaymentIntent stays `requires_action` before it
    /// fails with `authentication_required`; on the PayPal face, how long an order waits for its
    /// payer's approval before it lapses (PayPal: 3 h).
    pub requires_action_for: Duration,
    /// Search shows each PaymentIntent, and each change to it, only after a random lag of up to
    /// this long; zero (the default) makes search read-after-write.
    pub search_lag_max: Duration,
    /// How long a refund of a `pm_card_refundFail` charge reads `succeeded` before it fails.
    pub refund_fail_after: Duration,
    /// How long a refund of a `pm_fake_refund_pending` charge stays `pending` before it succeeds.
    pub refund_pending_for: Duration,
    /// How long a `capture_method=manual` PaymentIntent may wait in `requires_capture` before
    /// the PSP cancels it (`cancellation_reason: automatic`); 7 days by default, as Stripe. On
    /// the PayPal face, an authorization's `expiration_time`.
    pub authorization_expires_after: Duration,
    /// How webhooks are delivered (duplicates, delay, order).
    pub webhooks: WebhookKnobs,
    /// PayPal face only: the OAuth client id; the client secret is [`api_key`](Self::api_key).
    pub paypal_client_id: String,
    /// PayPal face only: how long an access token lives (`expires_in`); 32 400 s by default, as
    /// a live PayPal token.
    pub paypal_token_lifetime: Duration,
    /// PayPal face only: how long an Orders API `PayPal-Request-Id` is remembered; 6 h by
    /// default ("The server stores keys for 6 hours"). Payments API ids are kept 45 days.
    pub paypal_request_id_ttl: Duration,
    /// PayPal face only: whether a create with a vaulted payment source charges at once (`true`,
    /// the default: order `COMPLETED`) or leaves the order `CREATED` for `/capture` or
    /// `/authorize`. PayPal does both, depending on what is UNCONFIRMED.
    pub paypal_one_step_vault: bool,
    /// PayPal face only: the account's "unique invoice id" setting (on by default): an
    /// `invoice_id` another order already used is refused, 422 `DUPLICATE_INVOICE_ID`.
    pub paypal_unique_invoice_id: bool,
    /// PayPal face only: the RSA private key webhooks are signed with, PEM (PKCS#8, or PKCS#1);
    /// `None` (the default) generates an RSA-2048 key at start. Its self-signed certificate is
    /// served at `GET /_fake/paypal/cert.pem`. Starting with a PEM that is not an RSA key fails.
    pub paypal_signing_key_pem: Option<String>,
    /// PayPal face only: the webhook (subscription) id in each delivery's signed string;
    /// [`DEFAULT_PAYPAL_WEBHOOK_ID`] by default.
    pub paypal_webhook_id: String,
}

impl Default for FakePspConfig {
    fn default() -> Self {
        let model = ModelConfig::default();
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
            authorization_expires_after: model.authorization_expires_after,
            omise_honours_idempotency_key: model.omise_honours_idempotency_key,
            twoc2p_merchant_id: model.twoc2p_merchant_id,
            twoc2p_maintenance_keys: None,
            twoc2p_settle_after: model.twoc2p_settle_after,
            twoc2p_manual_settlement: model.twoc2p_manual_settlement,
            webhooks: WebhookKnobs::default(),
            paypal_client_id: model.paypal_client_id,
            paypal_token_lifetime: model.paypal_token_lifetime,
            paypal_request_id_ttl: model.paypal_request_id_ttl,
            paypal_one_step_vault: model.paypal_one_step_vault,
            paypal_unique_invoice_id: model.paypal_unique_invoice_id,
            paypal_signing_key_pem: None,
            paypal_webhook_id: DEFAULT_PAYPAL_WEBHOOK_ID.to_owned(),
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

    /// The defaults with the Square face and [`DEFAULT_SQUARE_SIGNATURE_KEY`] as the webhook
    /// signature key; the access token is [`DEFAULT_API_KEY`], as on the Stripe face.
    pub fn square() -> Self {
        Self {
            provider: Provider::Square,
            webhook_secret: DEFAULT_SQUARE_SIGNATURE_KEY.to_owned(),
            ..Self::default()
        }
    }

    /// The defaults with the PayPal face: client id
    /// [`DEFAULT_PAYPAL_CLIENT_ID`](crate::DEFAULT_PAYPAL_CLIENT_ID), client secret
    /// [`DEFAULT_API_KEY`] (as `api_key`), webhooks signed with a key generated at start for the
    /// webhook id [`DEFAULT_PAYPAL_WEBHOOK_ID`]; `webhook_secret` is not used. An order nobody
    /// approves lapses after 3 h, as PayPal's ([`requires_action_for`](Self::requires_action_for)).
    pub fn paypal() -> Self {
        Self {
            provider: Provider::PayPal,
            // PayPal: "The API caller has 3 hours … to redirect your payer", then 3 hours for the
            // payer to approve (checkout_orders_v2.json, the order's `links`).
            requires_action_for: Duration::from_secs(3 * 60 * 60),
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
