//! A local payment-service provider (PSP) that speaks a subset of Stripe's PaymentIntents and
//! Refunds wire protocol over HTTP — or, with [`Provider::Omise`], of Omise's Charges, Refunds and
//! Search, with [`Provider::TwoC2p`] of 2C2P PGW v4.3, with [`Provider::Square`] of Square's
//! Payments and Refunds, with [`Provider::PayPal`] of PayPal's Orders v2 and Payments v2 (one
//! face per instance, [`FakePspConfig::provider`]).
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
//! | `pm_card_threeDSecure2Required`, `pm_card_authenticationRequired` | with `error_on_requires_action=true`: `requires_payment_method`, 402 `card_error` / `authentication_required` (`payment_intent.payment_failed`); otherwise `requires_action`, 200 (`payment_intent.requires_action`), with `return_url` a `next_action.redirect_to_url` to the fake's authentication page, waiting there until answered or cancelled |
//! | anything else | 400 `resource_missing` on `payment_method`; nothing created |
//!
//! With `capture_method=manual`, what would succeed is authorized instead: `requires_capture`
//! (`payment_intent.amount_capturable_updated`) until `POST /v1/payment_intents/{id}/capture`
//! (`amount_to_capture`, default all) succeeds it, a cancel releases it, or
//! [`FakePspConfig::authorization_expires_after`] (7 days) passes and the PSP cancels it
//! (`cancellation_reason: automatic`). `expand[]=latest_charge` inlines the Charge, whose
//! `payment_method_details.card.capture_before` says until when.
//!
//! `GET /_fake/authenticate/{id}` (no auth, not counted) is the page a 3-D Secure PaymentIntent
//! sends its customer to: the amount and two buttons posting `result=complete` or `result=fail`
//! back to it, answered with `303 See Other` to the `return_url` (with `payment_intent` and
//! `redirect_status`); 404 for an unknown id, 409 once the PaymentIntent no longer waits. The
//! Omise and 2C2P faces send their 3-D Secure charges to the same page, which answers 303 to
//! their return URL as given (`return_uri`, `frontendReturnUrl`).
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
//! notification. Refunds and voids go through 2C2P's Payment Maintenance API ("Payment Action
//! 2.0"): `POST /2C2PFrontend/PaymentAction/2.0/action`, a `text/plain` body that is a compact
//! JWS (PS256, signed with the merchant's key) of a JWE (RSA-OAEP + A256GCM, to 2C2P's key) of a
//! `<PaymentProcessRequest>` XML (`processType` `I` inquiry, `RS` refund status, `R` refund of a
//! settled payment, `V` void of an unsettled one, `S` settle of an authorization), answered in
//! the reverse envelope; an envelope that does not verify or decrypt is 401 with a plain-text
//! body. A payment settles [`FakePspConfig::twoc2p_settle_after`] after it succeeded (at once by
//! default). With [`FakePspConfig::twoc2p_manual_settlement`] (a manual-settlement merchant
//! account; off by default, `S` then answers `32`), every approved payment is only an
//! authorization (`_fake/charges` outcome `authorized`; the PGW face still reads `0000`) until
//! `S` captures the whole of it (`00`; a part is `33`, a second `S` `39`) or `V` releases it;
//! unsettled, it lapses after [`FakePspConfig::authorization_expires_after`]. The keys are
//! [`FakePspConfig::twoc2p_maintenance_keys`] or made at start; `GET /_fake/2c2p/keys` (no auth,
//! not counted) serves the merchant's side ([`RunningFakePsp::twoc2p_keys`]) and `GET
//! /_fake/2c2p/actions` every maintenance call ([`TwoC2pAction`]). The rules and their sources
//! are in the `faces::twoc2p` module and its `maintenance` module.
//!
//! **The Square face** ([`FakePspConfig::square`]) serves the same model under `/v2`, with the
//! access token as `Authorization: Bearer` and JSON bodies: `POST /v2/payments`
//! (`idempotency_key` in the body, 1 to 45 bytes; `source_id` the test token, or Square's sandbox
//! nonces `cnon:card-nonce-ok` and `cnon:card-nonce-declined`; `amount_money`; `autocomplete`,
//! `false` for a delayed capture with `delay_duration` and `delay_action`), `GET
//! /v2/payments/{id}`, `POST /v2/payments/{id}/complete` and `/cancel`, `POST
//! /v2/payments/cancel` (cancel by idempotency key, while the key is remembered), `POST
//! /v2/refunds` and `GET /v2/refunds/{id}`. A decline is HTTP 400 with both `errors`
//! (`GENERIC_DECLINE`, `INSUFFICIENT_FUNDS`) and a `FAILED` payment; the 3-D Secure cards are
//! declined `CARD_DECLINED_VERIFICATION_REQUIRED` unless the create carries a
//! `verification_token`; a new refund is `PENDING` and completes the next moment (the refund
//! tokens above keep their fates). Webhooks (`payment.created`, `payment.updated`,
//! `refund.created`, `refund.updated`) are signed with `x-square-hmacsha256-signature` over the
//! webhook URL and the body (see [`sign_square_webhook`]). The rules and their sources are in
//! the `faces::square` module.
//!
//! **The PayPal face** ([`FakePspConfig::paypal`]) serves the same model as PayPal's REST API:
//! `POST /v1/oauth2/token` (HTTP Basic with [`FakePspConfig::paypal_client_id`] and the
//! [`api_key`](FakePspConfig::api_key) as client secret, `grant_type=client_credentials`) buys
//! an access token living [`FakePspConfig::paypal_token_lifetime`], which every other call
//! carries as `Authorization: Bearer`. `POST /v2/checkout/orders` (one purchase unit: `custom_id`,
//! `invoice_id`, `amount {currency_code, value}` as a decimal string; `payment_source` `card` or
//! `paypal` with the test token as `vault_id`, or a `paypal` buyer approval) under
//! `PayPal-Request-Id` (required with a payment source, 1 to 108 characters, remembered
//! [`FakePspConfig::paypal_request_id_ttl`], 6 h; Payments API ids 45 days; a replay answers 200
//! with the latest state), `GET /v2/checkout/orders/{id}`, `POST …/{id}/capture` and
//! `/authorize`, `GET` and `POST /v2/payments/authorizations/{id}/capture` and `/void`, `GET
//! /v2/payments/captures/{id}`, `POST …/{id}/refund`, `GET /v2/payments/refunds/{id}`; `Prefer:
//! return=representation` answers whole objects, else minimal ones. A vaulted source is charged
//! in the create ([`FakePspConfig::paypal_one_step_vault`]: order `COMPLETED` with its capture,
//! which may be `DECLINED`) or left `CREATED` for `/capture`; the 3-D Secure cards and a buyer's
//! approval wait `PAYER_ACTION_REQUIRED` for the fake's page (`payer-action`), which approves the
//! order and sends the payer back with `token` and `PayerID`; an order never approved lapses
//! after [`FakePspConfig::requires_action_for`] (3 h in [`FakePspConfig::paypal`]). Invoice ids
//! are unique while [`FakePspConfig::paypal_unique_invoice_id`] holds (`DUPLICATE_INVOICE_ID`).
//! Errors are
//! PayPal's `{name, message, debug_id, details[{issue}]}`. Webhooks (`CHECKOUT.ORDER.APPROVED`,
//! `PAYMENT.CAPTURE.COMPLETED` / `PENDING` / `DECLINED` / `REFUNDED`,
//! `PAYMENT.AUTHORIZATION.CREATED` / `VOIDED`) carry `PAYPAL-TRANSMISSION-ID`, `-TIME`, `-SIG`
//! (RSASSA-PKCS1-v1_5 SHA-256 over `<id>|<time>|<webhook id>|<crc32 of the body>`, see
//! [`sign_paypal_webhook`]), `PAYPAL-AUTH-ALGO: SHA256withRSA` and `PAYPAL-CERT-URL`, where `GET
//! /_fake/paypal/cert.pem` (no auth, not counted) serves the self-signed certificate of the
//! signing key ([`FakePspConfig::paypal_signing_key_pem`], or one generated at start;
//! [`PayPalSigner`]) for [`FakePspConfig::paypal_webhook_id`]. The rules and their sources are in
//! the `faces::paypal` module.
//!
//! `GET /_fake/charges` and `GET /_fake/refunds` (no auth, not counted) list everything created,
//! with `provider`, `id`, `outcome`, `amount`, `currency`, `payment_id`, `idempotency_key` and,
//! for refunds, `refund_id` on every face, `invoice_no` on the 2C2P face (refunds too) and
//! `object` (the
//! Payment as `GET /v2/payments/{id}` answers it) on the Square face, the order as `GET
//! /v2/checkout/orders/{id}` answers it on the PayPal face; charges also carry
//! `capture_method`, `amount_captured` and the `captures` and `cancels` that took effect, each
//! with the idempotency key it came under.
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

mod config;
mod conn;
mod currency;
mod faces;
mod ledger;
pub mod model;
mod paypal_signing;
mod provider;
mod running;
mod server;
mod twoc2p_keys;
mod webhooks;

pub use config::{FakePspConfig, WebhookKnobs};
pub use faces::twoc2p::maintenance::TwoC2pAction;
pub use ledger::{FakeCancel, FakeCapture, FakeCharge, FakeRefund};
pub use paypal_signing::{
    paypal_signed_string, sign_paypal_webhook, PayPalKeyError, PayPalSigner,
    DEFAULT_PAYPAL_WEBHOOK_ID, PAYPAL_AUTH_ALGO, PAYPAL_CERT_COMMON_NAME, PAYPAL_CERT_PATH,
};
pub use provider::{
    Provider, DEFAULT_API_KEY, DEFAULT_OMISE_WEBHOOK_SECRET, DEFAULT_PAYPAL_CLIENT_ID,
    DEFAULT_SQUARE_SIGNATURE_KEY, DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_TWOC2P_SECRET_KEY,
    DEFAULT_WEBHOOK_SECRET,
};
pub use running::{FakePsp, RunningFakePsp};
pub use twoc2p_keys::{TwoC2pKeyError, TwoC2pMaintenanceKeys, TwoC2pMerchantKeys};
pub use webhooks::{sign_omise_webhook, sign_square_webhook, sign_webhook};

/// Signs `claims` as the 2C2P face signs its answers and backend notifications: a compact JWS
/// with the header `{"alg":"HS256","typ":"JWT"}`, HMAC-SHA256 keyed with the merchant's secret
/// `key` used as text (the face's `api_key`). A notification body is `{"payload":"<this>"}`;
/// tests use it to deliver notifications of their own in the face's wire format.
pub fn sign_twoc2p_jwt(key: &str, claims: &serde_json::Value) -> String {
    faces::sign_twoc2p_jwt(key, claims)
}
