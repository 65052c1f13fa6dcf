//! The PayPal face: PayPal's OAuth token endpoint, Orders v2 and Payments v2 over the [ledger]
//! (`ModelConfig::provider = Provider::PayPal`). The charges, refunds, test tokens, time-driven
//! transitions and injected failures are the ledger's, exactly as on the other faces; this module
//! only reads PayPal's requests and writes PayPal's orders, captures, authorizations, refunds,
//! errors and webhook events, and keeps what only PayPal has (access tokens, the purchase unit's
//! ids, the payment source, the payer, the capture of an authorization). An order is the ledger's
//! charge; its capture (intent `CAPTURE`) or authorization (intent `AUTHORIZE`) is the charge's
//! attempt. It calls the ledger's provider-neutral operations (`Ledger::attempt_charge`,
//! `Ledger::await_approval`, `Ledger::confirm`, `Ledger::complete_action`, `Ledger::insert`,
//! `Ledger::capture`, `Ledger::cancel`, `Ledger::attempt_refund`, and the idempotency layer's
//! `Ledger::recall` / `Ledger::remember`) after validating a request in PayPal's terms (`params`).
//!
//! Sources are `docs/psp-research-paypal.md` (PayPal's published OpenAPI specs
//! `paypal/paypal-rest-api-specifications`: `checkout_orders_v2.json` \[O\],
//! `payments_payment_v2.json` \[P\], `notifications_webhooks_v1.json` \[W\], and the developer
//! pages it cites); the inspection fields are this crate's own contract
//! (its top-level docs). Each rule names what it follows; where PayPal says nothing, the rule says
//! "UNCONFIRMED: the fake's choice" and what the fake does:
//!
//! - **OAuth** (research §1; "Get an access token"): `POST /v1/oauth2/token` with `Authorization:
//!   Basic base64(client_id:client_secret)` (`ModelConfig::paypal_client_id`, and
//!   `ModelConfig::api_key` as the secret) and the form `grant_type=client_credentials` → 200
//!   `{scope, access_token, token_type: "Bearer", app_id, expires_in, nonce}`, `expires_in` being
//!   `ModelConfig::paypal_token_lifetime` (32 400 s by default, a live sample's). Wrong or missing
//!   credentials → 401 `{"error":"invalid_client","error_description":"Client Authentication
//!   failed"}` (3rd-party evidence only: UNCONFIRMED text); another or no `grant_type` → 400
//!   `{"error":"unsupported_grant_type", …}` (UNCONFIRMED: the fake's choice). Every call issues a
//!   new token, each valid until it expires (UNCONFIRMED: PayPal may hand the same one back until
//!   it expires). Every other request needs `Authorization: Bearer <a token not yet expired>` (the
//!   scheme in any case), else 401 `AUTHENTICATION_FAILURE` (\[O\] `error_401`; the body of an
//!   expired token is UNCONFIRMED) before anything else is looked at. Every request the face is
//!   handed is counted, token calls and 401s included.
//! - **Errors** (\[O\] `error_422`, `error_details`): `{name, message, debug_id, details:[{field,
//!   value?, location, issue, description}], links:[information_link]}`; `name` and `message`
//!   follow the status (400 INVALID_REQUEST, 404 RESOURCE_NOT_FOUND, 409 RESOURCE_CONFLICT, 422
//!   UNPROCESSABLE_ENTITY, 500 INTERNAL_SERVER_ERROR), `debug_id` is 13 hex digits from the
//!   ledger's randomness, `field` a JSON pointer
//!   (`/purchase_units/@reference_id=='default'/amount/value` for a unit's fields, as PayPal's
//!   example; UNCONFIRMED for the others), the link's href form is UNCONFIRMED. Header problems
//!   name the header as `field`, location `header` (UNCONFIRMED: PayPal's enum has body, path and
//!   query). An unknown id → 404 RESOURCE_NOT_FOUND INVALID_RESOURCE_ID, location `path`; an
//!   unknown route → the same.
//! - **`PayPal-Request-Id`** (\[O\]/\[P\] `paypal_request_id`; "Idempotency"): 1 to 108 characters,
//!   else 400 INVALID_STRING_LENGTH (before anything is stored). Required on a create with a
//!   `payment_source` → 400 PAYPAL_REQUEST_ID_REQUIRED (\[O\] `#/components/schemas/400`). Honoured
//!   on the create, an order's `/capture` and `/authorize`, an authorization's `/capture` and a
//!   capture's `/refund`; ignored on a void (the spec lists none for it; UNCONFIRMED). Orders API
//!   ids are remembered exactly `ModelConfig::paypal_request_id_ttl` (6 h: "The server stores keys
//!   for 6 hours"), Payments API ids 45 days ("The server stores keys for 45 days"); then they are
//!   forgotten and a re-send acts anew. A remembered id with the same body (compared as JSON) →
//!   **200** (the first call's 201, \[O\] "A successful response to an idempotent request returns
//!   the HTTP 200 OK") with the **latest** state of what the first request made or acted on
//!   ("PayPal returns the latest status of the previous request"), in the replay's own `Prefer`; a
//!   first answer that was a refusal is replayed as it was. The same id with another body or on
//!   another endpoint → 422 PAYPAL_REQUEST_ID_PREVIOUSLY_USED (UNCONFIRMED: the fake's choice,
//!   Vault v3's code); an id whose request is still running → 409 RESOURCE_CONFLICT
//!   PREVIOUS_REQUEST_IN_PROGRESS (\[P\] `409`; UNCONFIRMED for the Orders API). A 5xx is never
//!   stored. The server reads the id from the `PayPal-Request-Id` header (as the ledger's
//!   idempotency key); the fake's `Idempotent-Replayed: true` header marks a replay.
//! - **`Prefer`** (\[O\]/\[P\] `prefer`): `return=representation` answers the whole object,
//!   anything else (and none: PayPal's default) the minimal one (`id`, `status`, `links`); a void
//!   answers 204 without a body unless `return=representation` (then 200 and the authorization).
//!   `GET` always answers the whole object.
//! - **Create** (`POST /v2/checkout/orders`, \[O\] `order_request`), validated before the id is
//!   used: `intent` (`CAPTURE` or `AUTHORIZE`, else 400 MISSING_REQUIRED_PARAMETER /
//!   INVALID_PARAMETER_VALUE); `purchase_units` 1 to 10 (400 INVALID_ARRAY_MIN_ITEMS / MAX_ITEMS),
//!   of which the fake models exactly one: `AUTHORIZE` with more → 422 UNSUPPORTED_INTENT (\[O\]),
//!   `CAPTURE` with more → 400 NOT_SUPPORTED (UNCONFIRMED: the fake's choice); the unit's
//!   `reference_id` (1..256), `custom_id`, `invoice_id`, `description` (1..127; else 400
//!   INVALID_STRING_LENGTH) and `amount` `{currency_code, value}` (400 INVALID_PARAMETER_SYNTAX for
//!   a value off `money`'s pattern; then 422: a currency the fake takes — USD EUR GBP JPY AUD CAD
//!   SGD THB, UNCONFIRMED list — else INVALID_CURRENCY_CODE; HUF, JPY and TWD take no decimals,
//!   DECIMALS_NOT_SUPPORTED (\[P\]; the currency table is read through mirrors: UNCONFIRMED);
//!   others at most two, DECIMAL_PRECISION; ≤ 0 CANNOT_BE_ZERO_OR_NEGATIVE; more than 15 whole
//!   digits MAX_VALUE_EXCEEDED). PayPal documents no minimum, so `ModelConfig::minimum_overrides`
//!   does not apply on this face. `payment_source` is `card` (`vault_id`, required here: raw card
//!   numbers are not modelled; `experience_context{return_url, cancel_url}`) or `paypal`
//!   (`vault_id`, or `experience_context{return_url, cancel_url, user_action, brand_name, locale,
//!   landing_page, shipping_preference, payment_method_preference}`); other sources → 400
//!   NOT_SUPPORTED, both at once → 400 INVALID_PARAMETER_VALUE. Any field the fake does not model →
//!   400 INVALID_REQUEST NOT_SUPPORTED (\[O\]'s "This field is not currently supported"; refusing
//!   them is UNCONFIRMED: the fake's choice, as on the other faces). A new order is **201**; ids
//!   are 17 upper-case letters and digits, times RFC 3339 to the second.
//! - **Unique invoice id** (account setting, `ModelConfig::paypal_unique_invoice_id`, on by
//!   default; \[O\] 422 DUPLICATE_INVOICE_ID "your account setting requires that Invoice Id be
//!   unique for each transaction"): an `invoice_id` another order already used — one with a
//!   completed or pending capture, or an authorization (even voided or lapsed) — → 422
//!   DUPLICATE_INVOICE_ID at the create and again when money would move (an order's `/capture` and
//!   `/authorize`, an authorization's `/capture`, whose own `invoice_id` counts if it gives one). A
//!   declined capture does not use its invoice id, so a declined payment can be retried
//!   (UNCONFIRMED: whether PayPal checks at create or capture, and what a decline does; the fake
//!   checks at both). Refunds' invoice ids are not checked.
//! - **Vaulted sources** (`card.vault_id`, `paypal.vault_id` = the ledger's test token; research
//!   §4a): with `ModelConfig::paypal_one_step_vault` (the default; "single-step create order call",
//!   the save-payment-methods page) a `CAPTURE` create charges at once: order `COMPLETED` with
//!   `purchase_units[0].payments.captures[0]` `COMPLETED` (`PAYMENT.CAPTURE.COMPLETED`), or
//!   `DECLINED` with `status_details.reason` for `pm_card_visa_chargeDeclined`
//!   (`PAYMENT.CAPTURE.DECLINED`; \[O\] "A completed order can indicate … a payment was declined":
//!   a 201 that carries a declined capture, UNCONFIRMED status), or `PENDING` (`PENDING_REVIEW`)
//!   for `pm_fake_processing`, `COMPLETED` after `processing_for` (`PAYMENT.CAPTURE.PENDING`, then
//!   `.COMPLETED`); an `AUTHORIZE` create → `COMPLETED` with `authorizations[0]` `CREATED` and
//!   `expiration_time` the ledger's lapse (`PAYMENT.AUTHORIZATION.CREATED`; PayPal's
//!   recurring-payments sample), `DENIED` for a declining card (no event: UNCONFIRMED), `PENDING`
//!   then `CREATED` for `pm_fake_processing`. Without it (two steps; woocommerce-paypal-payments
//!   #4431, #4372) the order is `CREATED` (links `capture`/`authorize`) and nothing is charged
//!   until `/capture` or `/authorize`. `pm_card_chargeDeclinedInsufficientFunds` → 422
//!   INSTRUMENT_DECLINED: no order is made and the 422 is stored under the id (UNCONFIRMED: the
//!   fake's choice). An unknown token → 422 TOKEN_ID_NOT_FOUND on the source's `vault_id` (the
//!   issue \[O\] lists for capture and authorize; UNCONFIRMED for a create; chosen over a 404
//!   because the order id is not what is missing), no order made, stored under the id.
//!   `pm_fake_error_before_charge` → 500 INTERNAL_SERVER_ERROR when the charge is attempted,
//!   nothing made or stored; `pm_fake_lost_response` and `pm_fake_slow` as on the other faces
//!   (answer cut, or held back, after the order was made and stored under its id).
//! - **3-D Secure and payer actions** (woocommerce-paypal-payments #4450 and #2812; \[O\]
//!   `order_status`): the 3-D Secure cards (`pm_card_threeDSecure2Required`,
//!   `pm_card_authenticationRequired`) with a `card.experience_context.return_url` (or the paypal
//!   source's) → 201 `PAYER_ACTION_REQUIRED` with links `self` and `payer-action`, the fake's
//!   shared page `<base_url>/_fake/authenticate/<order id>` (also in two-step mode: the order needs
//!   its payer before anything). *Complete* there → the order `APPROVED`
//!   (`CHECKOUT.ORDER.APPROVED`, the order as resource) and 303 to the `return_url` with
//!   `token=<order id>&PayerID=<payer id>` added to its query (UNCONFIRMED names, research §4b);
//!   then `/capture` (or `/authorize`) charges it as authenticated. *Fail* → 303 to the
//!   `cancel_url` with `token=<order id>` (UNCONFIRMED), and the order stays as it was. Without a
//!   return URL → 422 PAYER_ACTION_REQUIRED, no order made, stored. `pm_fake_requires_action` →
//!   `PAYER_ACTION_REQUIRED` whose page cannot be answered (409): a payer who never acts.
//! - **Buyer approval** (research §4b): `payment_source.paypal` without a `vault_id` →
//!   `PAYER_ACTION_REQUIRED` with `payer-action` to the same page; no `payment_source` at all →
//!   `CREATED` with `approve` (the same page), `update` and `capture`/`authorize` (the README
//!   sample). The payer's *Complete* approves (`APPROVED`, a payer id from the ledger's randomness,
//!   `CHECKOUT.ORDER.APPROVED`); the payer's PayPal account then pays like `pm_card_visa`
//!   (UNCONFIRMED: the fake's choice; the inspection view says `paypal`). An order never approved
//!   lapses after `requires_action_for` (PayPal: 3 h, \[O\] order `links`): afterwards `GET`
//!   answers 404 RESOURCE_NOT_FOUND (UNCONFIRMED: the fake's choice), `/capture` and `/authorize`
//!   422 ORDER_EXPIRED (\[O\]), the page 409; no event. An approved order does not lapse
//!   (UNCONFIRMED: PayPal gives 3 h to capture it).
//! - **An order's `/capture` and `/authorize`** (\[O\] `orders.capture-422`,
//!   `orders.authorize-422`): body `{}` or none (a `payment_source` there is not modelled: 400
//!   NOT_SUPPORTED). Unknown → 404; lapsed → 422 ORDER_EXPIRED; the other action than the intent →
//!   422 ACTION_DOES_NOT_MATCH_INTENT; waiting for the buyer's approval → 422 ORDER_NOT_APPROVED,
//!   for a vaulted card's 3-D Secure → 422 PAYER_ACTION_REQUIRED; already captured (completed,
//!   pending or declined) → 422 ORDER_ALREADY_CAPTURED, already authorized → 422
//!   ORDER_ALREADY_AUTHORIZED; an earlier INSTRUMENT_DECLINED → 422 INSTRUMENT_DECLINED again (the
//!   payer choosing another funding source is not modelled). Else the invoice rule, then the
//!   charge, as a one-step create would: **201** order `COMPLETED` with the capture or
//!   authorization (and its event), 422 INSTRUMENT_DECLINED for insufficient funds, 500 for
//!   `pm_fake_error_before_charge` (nothing changes), the lost and slow tokens' deliveries.
//! - **Authorizations** (\[P\]): `GET /v2/payments/authorizations/{id}` (`authorization-2`: with
//!   `supplementary_data.related_ids.order_id` and `payee`). `POST …/capture` (`amount` at most the
//!   authorized one, partial allowed, else 422 MAX_CAPTURE_AMOUNT_EXCEEDED — PayPal's 115 % overage
//!   is not modelled; its currency the authorization's, else 422 AUTH_CAPTURE_CURRENCY_MISMATCH;
//!   `final_capture`, `invoice_id`, `note_to_payer`, `soft_descriptor`): **201** capture
//!   `COMPLETED` (`capture-2`, `related_ids` with `authorization_id`, `up` → the authorization) and
//!   `PAYMENT.CAPTURE.COMPLETED`; the authorization reads `CAPTURED` (one capture per
//!   authorization: `final_capture: false` is not modelled). Refused: captured already → 422
//!   AUTHORIZATION_ALREADY_CAPTURED; voided → 422 AUTHORIZATION_VOIDED; lapsed → 422
//!   AUTHORIZATION_EXPIRED (it reads `VOIDED`: PayPal's enum has no `EXPIRED`, the brief's pick);
//!   denied → 422 AUTHORIZATION_DENIED; pending → 422 TRANSACTION_REFUSED (UNCONFIRMED: the fake's
//!   choice). `POST …/void` (no body): 204, or 200 with the authorization for `Prefer:
//!   return=representation`, `VOIDED` (a pending one too), `PAYMENT.AUTHORIZATION.VOIDED`, the
//!   order `VOIDED` (\[O\] `order_status`: "All purchase units in the order are voided";
//!   UNCONFIRMED whether PayPal's order says so or stays `COMPLETED`); captured → 422
//!   PREVIOUSLY_CAPTURED, voided or lapsed → 422 PREVIOUSLY_VOIDED, denied → 422 CANNOT_BE_VOIDED
//!   (UNCONFIRMED). An authorization nobody captures lapses after the ledger's
//!   `authorization_expires_after` (`expiration_time`): `VOIDED`, `PAYMENT.AUTHORIZATION.VOIDED`
//!   (UNCONFIRMED event).
//! - **Captures and refunds** (\[P\] `captures.refund-422`, `refund`): `GET
//!   /v2/payments/captures/{id}` (`capture-2`; it does not embed refunds, only links `self`,
//!   `refund`, `up`). `POST …/refund` (`amount`, default what is left; `custom_id`, `invoice_id`,
//!   `note_to_payer`, echoed): only a `COMPLETED` capture (a pending one → 422 PENDING_CAPTURE, a
//!   declined one → 422 REFUND_NOT_ALLOWED); another currency → 422
//!   REFUND_CAPTURE_CURRENCY_MISMATCH; more than is left → 422 REFUND_AMOUNT_EXCEEDED; nothing left
//!   → 422 CAPTURE_FULLY_REFUNDED (pending and completed refunds count, failed ones give their
//!   amount back). **201** refund `COMPLETED` (`PAYMENT.CAPTURE.REFUNDED` with the refund as
//!   resource) or, for a `pm_fake_refund_pending` charge, `PENDING` (`status_details.reason`
//!   `ECHECK`) until `refund_pending_for` (then `COMPLETED` and the event); a `pm_card_refundFail`
//!   charge's refund reads `COMPLETED`, then `FAILED` after `refund_fail_after` (no event:
//!   UNCONFIRMED). The capture reads `PARTIALLY_REFUNDED` / `REFUNDED` by its completed refunds;
//!   the order lists every refund in `purchase_units[0].payments.refunds[]` (\[O\]
//!   `payment_collection`). `GET /v2/payments/refunds/{id}`.
//! - **Webhooks** (\[W\] `event`; research §9): `{id: "WH-<17>-<17>", event_version: "1.0",
//!   create_time, resource_type, resource_version: "2.0", event_type, summary, resource, links}`;
//!   `CHECKOUT.ORDER.APPROVED` (`checkout-order`, the order), `PAYMENT.CAPTURE.COMPLETED` /
//!   `PENDING` / `DECLINED` (`capture`, `capture-2` with `custom_id`, `invoice_id` and
//!   `supplementary_data.related_ids`), `PAYMENT.AUTHORIZATION.CREATED` / `VOIDED`
//!   (`authorization`, `authorization-2`), `PAYMENT.CAPTURE.REFUNDED` (`refund`, the refund with
//!   our refund id as `custom_id` and `up` → the capture; UNCONFIRMED exact shape). The server
//!   signs each delivery as PayPal does (`PAYPAL-TRANSMISSION-ID`, `-TIME`, `-SIG`,
//!   `PAYPAL-CERT-URL` → `<base_url>/_fake/paypal/cert.pem`, `PAYPAL-AUTH-ALGO: SHA256withRSA`; see
//!   [`sign_paypal_webhook`](crate::sign_paypal_webhook)).
//! - **Inspection** (the crate's contract): `_fake/charges` entries carry `provider: "paypal"`,
//!   `id` the order id, `status` the order's (`EXPIRED` for a lapsed one, the fake's word),
//!   `outcome`, `amount`, `currency`, `payment_method` (the `vault_id`, or `paypal` for a buyer's
//!   approval), `payment_id` (the unit's `custom_id`), `idempotency_key` (the create's
//!   `PayPal-Request-Id`), `capture_method` (`manual` for `AUTHORIZE`), `captures` (an order's
//!   `/capture` with its id; an authorization's capture with its id), `cancels` (a void under none;
//!   a lapse `automatic`) and `object`: the order as `GET` answers it. `_fake/refunds` entries
//!   carry the refund's status words, the order as `payment_intent`, the capture as `charge`, the
//!   order's `custom_id` as `payment_id` and the refund's `custom_id` as `refund_id`.
//!
//! [ledger]: crate::ledger

mod json;
mod params;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use self::json::{
    authentication_failure, authorization_status, event, expired, instrument_declined, minimal,
    new_id, new_payer_id, order_status, refund_json, refund_status, value_text, Api, Issue,
    OrderView,
};
use self::params::{Body, CreateOrder, OrderIntent, Source};
use crate::faces::dates::iso8601;
use crate::faces::form::parse_form;
use crate::faces::page::{authentication_form, form_result, page, AUTHENTICATE_PATH};
use crate::ledger::{
    asks_for_action, escape_html, ActionAttempt, Attempt, CancelAttempt, CaptureAttempt,
    CaptureMethod, Claim, ConfirmAttempt, Face, Failure, FakeCapture, FakeCharge, FakeRefund,
    Fingerprint, Handled, Hold, Intent, Ledger, ModelEvent, NewCharge, OnAction, PageAnswer,
    Refund, RefundAttempt, RefundStatus, Reply, Retention, Status, Stored, WireRequest,
};

/// What the buyer's PayPal account pays like once approved: the ledger's approving card
/// (UNCONFIRMED: the fake's choice; see the module docs).
const WALLET_TOKEN: &str = "pm_card_visa";

/// How long the Payments API remembers a `PayPal-Request-Id`: "The server stores keys for 45
/// days" (\[P\] `paypal_request_id`).
const PAYMENTS_REQUEST_ID_TTL: Duration = Duration::from_secs(45 * 24 * 60 * 60);

/// The `scope` of an access token (a shortened form of the documented one).
const SCOPE: &str = "https://uri.paypal.com/services/payments/payment/authcapture \
                     https://uri.paypal.com/services/payments/refund \
                     https://uri.paypal.com/services/payments/orders/client_credentials \
                     https://uri.paypal.com/services/vault/payment-tokens/read";

/// The `app_id` of every token (the documented sample's).
const APP_ID: &str = "APP-80W284485P519543T";

/// The characters of an access token after its `A21AA` prefix.
const TOKEN_CHARS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";

/// The capture of an `AUTHORIZE` order's authorization (Payments API).
#[derive(Clone, Debug)]
struct AuthCapture {
    id: String,
    /// Minor units captured.
    amount: i64,
    created_ms: i64,
    final_capture: bool,
    invoice_id: Option<String>,
    note_to_payer: Option<String>,
}

/// What the face keeps of an order besides the ledger's charge.
#[derive(Clone, Debug)]
struct OrderExtra {
    intent: OrderIntent,
    reference_id: Option<String>,
    custom_id: Option<String>,
    invoice_id: Option<String>,
    description: Option<String>,
    /// Upper-case, as PayPal writes it.
    currency: String,
    source: Source,
    return_url: Option<String>,
    cancel_url: Option<String>,
    /// While it waits for its buyer: `PAYER_ACTION_REQUIRED` (a payment source was given) rather
    /// than `CREATED` (none, the `approve` link).
    payer_action: bool,
    /// Whether the fake's page answers for it (a payer who can act; not
    /// `pm_fake_requires_action`).
    page: bool,
    /// The payer who approved it on the page, once one did.
    payer_id: Option<String>,
    created_ms: i64,
    updated_ms: i64,
    /// When its capture or authorization was made.
    attempted_ms: Option<i64>,
    /// The `PayPal-Request-Id` of the `/capture` or `/authorize` that charged it, if one did.
    attempt_key: Option<String>,
    /// The capture of its authorization (`AUTHORIZE` orders), once made.
    auth_capture: Option<AuthCapture>,
}

/// What the face keeps of a refund besides the ledger's.
#[derive(Clone, Debug)]
struct RefundExtra {
    /// The refunded capture.
    capture_id: String,
    custom_id: Option<String>,
    invoice_id: Option<String>,
    note_to_payer: Option<String>,
    created_ms: i64,
    updated_ms: i64,
}

/// What a stored answer is about, for a replay that answers its latest state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subject {
    /// An order (a create, an order's capture or authorize).
    Order,
    /// The capture of an authorization.
    Capture,
    /// A refund.
    Refund,
}

impl Subject {
    /// `<kind>:<id>`, as the idempotency layer keeps it.
    fn of(self, id: &str) -> String {
        let kind = match self {
            Self::Order => "order",
            Self::Capture => "capture",
            Self::Refund => "refund",
        };
        format!("{kind}:{id}")
    }
}

/// A keyed request's answer, with what it was about (if it made or acted on something whose
/// latest state a replay answers) and the order it created (if any).
struct Ran {
    handled: Handled,
    subject: Option<String>,
    created: Option<String>,
}

impl Ran {
    /// A refusal: replayed as it was.
    fn refusal(reply: Reply) -> Self {
        Self {
            handled: Handled::plain(reply),
            subject: None,
            created: None,
        }
    }
}

/// The PayPal face's settings (see `ModelConfig`'s `paypal_*` fields).
#[derive(Clone, Debug)]
pub(crate) struct PayPalSettings {
    /// The OAuth client id.
    pub(crate) client_id: String,
    /// The OAuth client secret.
    pub(crate) client_secret: String,
    /// How long an access token lives.
    pub(crate) token_lifetime: Duration,
    /// How long an Orders API `PayPal-Request-Id` is remembered.
    pub(crate) request_id_ttl: Duration,
    /// Whether a create with a vaulted source charges at once.
    pub(crate) one_step_vault: bool,
    /// Whether invoice ids must be unique.
    pub(crate) unique_invoice_id: bool,
    /// The fake's own base URL, for links and the payer's page.
    pub(crate) base_url: String,
}

/// The PayPal face: its settings, the access tokens it issued, and what it keeps of each order
/// and refund besides the ledger's. Cells, because the ledger asks for events of time-driven
/// changes through `&self`.
#[derive(Debug)]
pub(crate) struct PayPalFace {
    settings: PayPalSettings,
    /// Access token → when it expires (epoch ms).
    tokens: RefCell<BTreeMap<String, i64>>,
    /// Order id → what only PayPal shows of it.
    orders: RefCell<BTreeMap<String, OrderExtra>>,
    /// Capture id → order id (the captures of both intents).
    captures: RefCell<BTreeMap<String, String>>,
    /// Authorization id → order id.
    authorizations: RefCell<BTreeMap<String, String>>,
    /// Invoice id → the orders that carry it, oldest first.
    invoices: RefCell<BTreeMap<String, Vec<String>>>,
    /// Refund id → what only PayPal shows of it.
    refunds: RefCell<BTreeMap<String, RefundExtra>>,
}

impl PayPalFace {
    /// A face with these settings.
    pub(crate) fn new(settings: PayPalSettings) -> Self {
        Self {
            settings,
            tokens: RefCell::new(BTreeMap::new()),
            orders: RefCell::new(BTreeMap::new()),
            captures: RefCell::new(BTreeMap::new()),
            authorizations: RefCell::new(BTreeMap::new()),
            invoices: RefCell::new(BTreeMap::new()),
            refunds: RefCell::new(BTreeMap::new()),
        }
    }

    /// What the face keeps of order `id`; a stand-in if it kept nothing (never, since every
    /// order is made here; kept total).
    fn extra(&self, intent: &Intent) -> OrderExtra {
        self.orders
            .borrow()
            .get(&intent.id)
            .cloned()
            .unwrap_or_else(|| OrderExtra {
                intent: match intent.capture_method {
                    CaptureMethod::Automatic => OrderIntent::Capture,
                    CaptureMethod::Manual => OrderIntent::Authorize,
                },
                reference_id: None,
                custom_id: intent.metadata.get("payment_id").cloned(),
                invoice_id: None,
                description: None,
                currency: intent.currency.to_ascii_uppercase(),
                source: Source::None,
                return_url: None,
                cancel_url: None,
                payer_action: false,
                page: false,
                payer_id: None,
                created_ms: intent.created.saturating_mul(1000),
                updated_ms: intent.created.saturating_mul(1000),
                attempted_ms: None,
                attempt_key: None,
                auth_capture: None,
            })
    }

    /// Changes what the face keeps of order `id`, if it keeps anything.
    fn update(&self, id: &str, change: impl FnOnce(&mut OrderExtra)) {
        if let Some(extra) = self.orders.borrow_mut().get_mut(id) {
            change(extra);
        }
    }

    /// Writes the order at `index` with `write`, given everything about it.
    fn with_view<T>(
        &self,
        ledger: &Ledger,
        index: usize,
        write: impl FnOnce(&OrderView<'_>) -> T,
    ) -> T {
        let intent = &ledger.intents[index];
        let extra = self.extra(intent);
        let kept = self.refunds.borrow();
        let refunds = ledger
            .refunds_of
            .get(&intent.id)
            .map(|positions| {
                positions
                    .iter()
                    .map(|&position| {
                        let refund = &ledger.refunds[position];
                        let extra = kept
                            .get(&refund.id)
                            .cloned()
                            .unwrap_or_else(|| self.refund_stand_in(refund));
                        (refund, extra)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let view = OrderView {
            intent,
            extra: &extra,
            refunds,
            base_url: &self.settings.base_url,
        };
        write(&view)
    }

    /// What the face keeps of a refund when it kept nothing (never; kept total).
    fn refund_stand_in(&self, refund: &Refund) -> RefundExtra {
        RefundExtra {
            capture_id: refund.charge.clone().unwrap_or_default(),
            custom_id: refund.metadata.get("refund_id").cloned(),
            invoice_id: None,
            note_to_payer: None,
            created_ms: refund.created.saturating_mul(1000),
            updated_ms: refund.created.saturating_mul(1000),
        }
    }

    /// The order at `index`, whole or minimal.
    fn order_at(&self, ledger: &Ledger, index: usize, full: bool) -> Value {
        self.with_view(ledger, index, |view| view.order(full))
    }

    /// The index of the order a capture or authorization id belongs to.
    fn order_of(
        &self,
        ledger: &Ledger,
        map: &RefCell<BTreeMap<String, String>>,
        id: &str,
    ) -> Option<usize> {
        let order = map.borrow().get(id).cloned()?;
        ledger.by_id.get(&order).copied()
    }

    /// Whether another order than `except` already used `invoice_id`: one with a completed or
    /// pending capture, or an authorization (see the module docs). The orders are those the
    /// invoice id was given to, on their purchase unit or on their authorization's capture.
    fn invoice_used(&self, ledger: &Ledger, invoice_id: &str, except: &str) -> bool {
        if !self.settings.unique_invoice_id {
            return false;
        }
        let invoices = self.invoices.borrow();
        let Some(orders) = invoices.get(invoice_id) else {
            return false;
        };
        orders.iter().filter(|id| id.as_str() != except).any(|id| {
            ledger.by_id.get(id).is_some_and(|&index| {
                matches!(
                    ledger.intents[index].status,
                    Status::Succeeded
                        | Status::Processing
                        | Status::RequiresCapture
                        | Status::Canceled
                )
            })
        })
    }

    /// Records that order `order_id` carries `invoice_id`.
    fn note_invoice(&self, invoice_id: String, order_id: &str) {
        let mut invoices = self.invoices.borrow_mut();
        let orders = invoices.entry(invoice_id).or_default();
        if !orders.iter().any(|id| id == order_id) {
            orders.push(order_id.to_owned());
        }
    }

    /// Whether `authorization` is `Bearer <a token not yet expired at now_ms>`.
    fn bearer_ok(&self, authorization: Option<&str>, now_ms: i64) -> bool {
        let Some((scheme, token)) = authorization.and_then(|value| value.trim().split_once(' '))
        else {
            return false;
        };
        scheme.eq_ignore_ascii_case("bearer")
            && self
                .tokens
                .borrow()
                .get(token.trim())
                .is_some_and(|&expires_ms| expires_ms > now_ms)
    }

    /// Whether `authorization` is `Basic base64(client_id:client_secret)`.
    fn client_ok(&self, authorization: Option<&str>) -> bool {
        use base64::Engine as _;
        let Some((scheme, encoded)) = authorization.and_then(|value| value.trim().split_once(' '))
        else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return false;
        }
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!(
            "{}:{}",
            self.settings.client_id, self.settings.client_secret
        );
        decoded == expected.as_bytes()
    }
}

impl Face for PayPalFace {
    fn name(&self) -> &'static str {
        "paypal"
    }

    /// Routes a request of the PayPal face: every request is counted; the token endpoint takes
    /// the client's credentials, every other route an access token.
    fn handle(&mut self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        ledger.requests_seen += 1;
        let path = request.path.strip_prefix('/').unwrap_or(request.path);
        let segments: Vec<&str> = path.split('/').collect();
        if let ("POST", ["v1", "oauth2", "token"]) = (request.method, segments.as_slice()) {
            return self.token(ledger, request, now_ms);
        }
        if !self.bearer_ok(request.authorization, now_ms) {
            return Handled::plain(authentication_failure(ledger));
        }
        let api = if segments.get(1) == Some(&"payments") {
            Api::Payments
        } else {
            Api::Orders
        };
        match (request.method, segments.as_slice()) {
            ("POST", ["v2", "checkout", "orders"]) => self.create_order(ledger, request, now_ms),
            ("GET", ["v2", "checkout", "orders", id]) if !id.is_empty() => {
                match ledger.by_id.get(*id) {
                    Some(&index) if !expired(&ledger.intents[index]) => {
                        Handled::plain(Reply::json(200, &self.order_at(ledger, index, true)))
                    }
                    _ => Handled::plain(Issue::not_found(id).reply(ledger, api)),
                }
            }
            ("POST", ["v2", "checkout", "orders", id, action @ ("capture" | "authorize")])
                if !id.is_empty() =>
            {
                let action = if *action == "capture" {
                    OrderIntent::Capture
                } else {
                    OrderIntent::Authorize
                };
                self.order_action(ledger, id, action, request, now_ms)
            }
            ("GET", ["v2", "payments", "authorizations", id]) if !id.is_empty() => {
                match self.order_of(ledger, &self.authorizations, id) {
                    Some(index) => Handled::plain(Reply::json(
                        200,
                        &self
                            .with_view(ledger, index, |view| view.authorization(true))
                            .unwrap_or(Value::Null),
                    )),
                    None => Handled::plain(Issue::not_found(id).reply(ledger, api)),
                }
            }
            ("POST", ["v2", "payments", "authorizations", id, "capture"]) if !id.is_empty() => {
                self.capture_authorization(ledger, id, request, now_ms)
            }
            ("POST", ["v2", "payments", "authorizations", id, "void"]) if !id.is_empty() => {
                self.void(ledger, id, request, now_ms)
            }
            ("GET", ["v2", "payments", "captures", id]) if !id.is_empty() => {
                match self.order_of(ledger, &self.captures, id) {
                    Some(index) => Handled::plain(Reply::json(
                        200,
                        &self
                            .with_view(ledger, index, |view| view.capture(true))
                            .unwrap_or(Value::Null),
                    )),
                    None => Handled::plain(Issue::not_found(id).reply(ledger, api)),
                }
            }
            ("POST", ["v2", "payments", "captures", id, "refund"]) if !id.is_empty() => {
                self.refund(ledger, id, request, now_ms)
            }
            ("GET", ["v2", "payments", "refunds", id]) if !id.is_empty() => {
                match ledger.refund_by_id.get(*id) {
                    Some(&position) => {
                        Handled::plain(Reply::json(200, &self.refund_at(ledger, position)))
                    }
                    None => Handled::plain(Issue::not_found(id).reply(ledger, api)),
                }
            }
            _ => Handled::plain(Issue::not_found(request.path).reply(ledger, api)),
        }
    }

    /// 17 upper-case letters and digits.
    fn new_charge_id(&self, ledger: &mut Ledger) -> String {
        new_id(ledger)
    }

    /// The capture (`CAPTURE`) or authorization (`AUTHORIZE`) id: 17 upper-case letters and
    /// digits.
    fn new_attempt_id(&self, ledger: &mut Ledger, _charge_id: &str) -> String {
        new_id(ledger)
    }

    /// 17 upper-case letters and digits.
    fn new_refund_id(&self, ledger: &mut Ledger, _charge_id: &str) -> String {
        new_id(ledger)
    }

    /// A pending capture completed (`PAYMENT.CAPTURE.COMPLETED`), a pending authorization was
    /// created (`PAYMENT.AUTHORIZATION.CREATED`), an authorization lapsed
    /// (`PAYMENT.AUTHORIZATION.VOIDED`), the payer approved on the page
    /// (`CHECKOUT.ORDER.APPROVED`), or an order nobody approved lapsed (no event).
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        let id = ledger.intents[index].id.clone();
        self.update(&id, |extra| extra.updated_ms = at_ms);
        let status = ledger.intents[index].status;
        match status {
            Status::RequiresConfirmation => self.order_approved(ledger, index, at_ms),
            Status::Succeeded | Status::RequiresCapture | Status::Canceled => {
                self.payment_events(ledger, index, at_ms)
            }
            _ => Vec::new(),
        }
    }

    /// `PAYMENT.CAPTURE.REFUNDED` when a pending refund completes; none when a refund fails
    /// (UNCONFIRMED).
    fn refund_moved_on(
        &self,
        ledger: &mut Ledger,
        index: usize,
        _from: RefundStatus,
        at_ms: i64,
    ) -> Vec<ModelEvent> {
        let refund = &ledger.refunds[index];
        let (refund_id, order_id, status) = (
            refund.id.clone(),
            refund.payment_intent.clone(),
            refund.status,
        );
        if let Some(extra) = self.refunds.borrow_mut().get_mut(&refund_id) {
            extra.updated_ms = at_ms;
        }
        self.update(&order_id, |extra| extra.updated_ms = at_ms);
        if status != RefundStatus::Succeeded {
            return Vec::new();
        }
        vec![self.refund_event(ledger, index, at_ms)]
    }

    /// The page where the payer approves an order (buyer approval, 3-D Secure): `GET` shows it,
    /// `POST result=complete` approves it and sends the payer to the `return_url` with `token`
    /// and `PayerID`, `POST result=fail` sends them to the `cancel_url` with `token` and changes
    /// nothing. Unknown → 404; not waiting, or a payer action nobody can take
    /// (`pm_fake_requires_action`) → 409.
    fn action_page(
        &self,
        ledger: &mut Ledger,
        charge_id: &str,
        form: Option<&[u8]>,
        now_ms: i64,
    ) -> PageAnswer {
        let Some(&index) = ledger.by_id.get(charge_id) else {
            return PageAnswer::html(
                404,
                page(
                    "Unknown order",
                    &format!("order {} was not found.", escape_html(charge_id)),
                ),
            );
        };
        let intent = &ledger.intents[index];
        let extra = self.extra(intent);
        if intent.status != Status::RequiresAction || !extra.page {
            return PageAnswer::html(
                409,
                page(
                    "Nothing to approve",
                    &format!(
                        "The order <code>{}</code> is {}: there is nothing the payer can do here.",
                        escape_html(&intent.id),
                        self.charge_status(intent)
                    ),
                ),
            );
        }
        let Some(form) = form else {
            return PageAnswer::html(200, authentication_form(intent));
        };
        let completed = match form_result(form) {
            Ok(completed) => completed,
            Err(refused) => return refused,
        };
        let order_id = intent.id.clone();
        if !completed {
            let location = extra
                .cancel_url
                .as_deref()
                .map(|url| with_query(url, &[("token", &order_id)]));
            return redirect(
                location,
                "The payer cancelled: the order is unchanged.",
                Vec::new(),
            );
        }
        let payer_id = new_payer_id(ledger);
        self.update(&order_id, |extra| extra.payer_id = Some(payer_id.clone()));
        match ledger.complete_action(self, &order_id, true, now_ms) {
            ActionAttempt::Done { events, .. } => {
                let location = extra
                    .return_url
                    .as_deref()
                    .map(|url| with_query(url, &[("token", &order_id), ("PayerID", &payer_id)]));
                redirect(location, "The payer approved the order.", events)
            }
            // Checked above under the same lock; kept total.
            ActionAttempt::NoSuchCharge | ActionAttempt::NotWaiting(_) => {
                PageAnswer::html(409, page("Nothing to approve", "The order is not waiting."))
            }
        }
    }

    fn charge_status(&self, intent: &Intent) -> &'static str {
        if expired(intent) {
            return "EXPIRED";
        }
        order_status(intent, &self.extra(intent))
    }

    fn refund_status(&self, status: RefundStatus) -> &'static str {
        refund_status(status)
    }

    /// With the vault id (or `paypal`) as `payment_method`, and an order's `/capture` as a
    /// capture under its `PayPal-Request-Id`.
    fn inspect_charge(&self, intent: &Intent) -> FakeCharge {
        let mut charge = intent.inspect(self.name(), self.charge_status(intent));
        let extra = self.extra(intent);
        charge.payment_method = extra.source.vault_id().unwrap_or("paypal").to_owned();
        if extra.intent == OrderIntent::Capture
            && intent.status == Status::Succeeded
            && extra.attempt_key.is_some()
        {
            charge.captures = vec![FakeCapture {
                amount: intent.amount_received(),
                idempotency_key: extra.attempt_key,
            }];
        }
        charge
    }

    /// With the refunded capture as `charge`.
    fn inspect_refund(&self, refund: &Refund) -> FakeRefund {
        let mut inspected = refund.inspect(self.name(), self.refund_status(refund.status));
        if let Some(extra) = self.refunds.borrow().get(&refund.id) {
            inspected.charge = Some(extra.capture_id.clone());
        }
        inspected
    }

    /// The order as `GET /v2/checkout/orders/{id}` answers it.
    fn charge_object(&self, ledger: &Ledger, index: usize) -> Option<Value> {
        Some(self.order_at(ledger, index, true))
    }
}

/// `url` with `pairs` added to its query (kept as given if it does not parse).
fn with_query(url: &str, pairs: &[(&str, &str)]) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            parsed.query_pairs_mut().extend_pairs(pairs);
            parsed.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

/// 303 to `location` (or a plain page without one), with the page's events.
fn redirect(location: Option<String>, outcome: &str, events: Vec<ModelEvent>) -> PageAnswer {
    match location {
        Some(location) => PageAnswer {
            status: 303,
            html: page(
                "Redirecting",
                &format!(
                    "{} <a href=\"{}\">Continue</a>",
                    escape_html(outcome),
                    escape_html(&location)
                ),
            ),
            location: Some(location),
            events,
        },
        None => PageAnswer {
            status: 200,
            location: None,
            html: page("Done", &escape_html(outcome)),
            events,
        },
    }
}

/// Whether `prefer` asks for the whole object (`return=representation`, in any case, among
/// other preferences).
fn wants_representation(prefer: Option<&str>) -> bool {
    prefer.is_some_and(|prefer| {
        prefer
            .split([',', ';'])
            .any(|part| part.trim().eq_ignore_ascii_case("return=representation"))
    })
}

/// What a `PayPal-Request-Id` is compared on: the endpoint and the JSON body.
fn fingerprint(route: String, body: &Body) -> Fingerprint {
    Fingerprint {
        route,
        params: BTreeMap::from([(
            "body".to_owned(),
            params::canonical(&Value::Object(body.clone())),
        )]),
    }
}

/// A refused request's answer.
fn refused(ledger: &mut Ledger, issue: &Issue, api: Api) -> Handled {
    Handled::plain(issue.reply(ledger, api))
}

impl PayPalFace {
    /// `POST /v1/oauth2/token`: a new access token for the client's credentials.
    fn token(&self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        if !self.client_ok(request.authorization) {
            return Handled::plain(oauth_error(
                401,
                "invalid_client",
                "Client Authentication failed",
            ));
        }
        let form = parse_form(request.body);
        match form.get("grant_type").map(String::as_str) {
            Some("client_credentials") => {}
            None => {
                return Handled::plain(oauth_error(
                    400,
                    "unsupported_grant_type",
                    "Grant Type is NULL",
                ))
            }
            Some(_) => {
                return Handled::plain(oauth_error(
                    400,
                    "unsupported_grant_type",
                    "unsupported grant_type",
                ))
            }
        }
        let lifetime_ms = crate::ledger::millis(self.settings.token_lifetime);
        let token = format!("A21AA{}", json::drawn(ledger, TOKEN_CHARS, 92));
        let nonce = format!(
            "{}{}",
            iso8601(now_ms.div_euclid(1000)),
            json::drawn(ledger, TOKEN_CHARS, 43)
        );
        let mut tokens = self.tokens.borrow_mut();
        // Expired tokens are never accepted again: forgetting them bounds the memory.
        tokens.retain(|_, &mut expires_ms| expires_ms > now_ms);
        tokens.insert(token.clone(), now_ms.saturating_add(lifetime_ms));
        Handled::plain(Reply::json(
            200,
            &json!({
                "scope": SCOPE,
                "access_token": token,
                "token_type": "Bearer",
                "app_id": APP_ID,
                "expires_in": self.settings.token_lifetime.as_secs(),
                "nonce": nonce,
            }),
        ))
    }

    /// Runs `run` under the `PayPal-Request-Id` `key`, if there is one, kept `retention`: a
    /// remembered id with the same body answers 200 with the latest state of what the first
    /// request made (a refusal as it was), another body 422 PAYPAL_REQUEST_ID_PREVIOUSLY_USED, an
    /// id in flight 409; a new one runs and is stored unless the answer is a 5xx.
    #[allow(clippy::too_many_arguments)]
    fn keyed(
        &self,
        ledger: &mut Ledger,
        key: Option<String>,
        fingerprint: Fingerprint,
        retention: Retention,
        api: Api,
        full: bool,
        now_ms: i64,
        run: impl FnOnce(&mut Ledger) -> Ran,
    ) -> Handled {
        let Some(key) = key else {
            return run(ledger).handled;
        };
        match ledger.recall(&key, &fingerprint) {
            Claim::Fresh => {}
            Claim::InUse => return refused(ledger, &Issue::in_progress(), api),
            Claim::Mismatch => {
                let issue = Issue::unprocessable(
                    "PAYPAL_REQUEST_ID_PREVIOUSLY_USED",
                    "PayPal-Request-Id",
                    "header",
                    "The PayPal-Request-Id has already been used for another request.",
                )
                .with_value(&key);
                return refused(ledger, &issue, api);
            }
            Claim::Replay { reply, subject } => {
                let reply = subject
                    .and_then(|subject| self.latest(ledger, &subject, full))
                    .unwrap_or(reply);
                return Handled {
                    reply,
                    replayed: true,
                    delivery: crate::ledger::Delivery::Now,
                    events: Vec::new(),
                };
            }
        }
        let ran = run(ledger);
        if ran.handled.reply.is_storable() {
            let stored = Stored {
                reply: ran.handled.reply.clone(),
                created: ran.created,
                subject: ran.subject,
            };
            ledger.remember(key, fingerprint, stored, retention, now_ms);
        }
        ran.handled
    }

    /// 200 with the latest state of what `subject` names, whole or minimal; `None` if it is
    /// gone (the stored answer is replayed then).
    fn latest(&self, ledger: &Ledger, subject: &str, full: bool) -> Option<Reply> {
        let (kind, id) = subject.split_once(':')?;
        let object = match kind {
            "order" => {
                let index = *ledger.by_id.get(id)?;
                self.order_at(ledger, index, full)
            }
            "capture" => {
                let index = self.order_of(ledger, &self.captures, id)?;
                let capture = self.with_view(ledger, index, |view| view.capture(true))?;
                if full {
                    capture
                } else {
                    minimal(&capture)
                }
            }
            "refund" => {
                let refund = self.refund_at(ledger, *ledger.refund_by_id.get(id)?);
                if full {
                    refund
                } else {
                    minimal(&refund)
                }
            }
            _ => return None,
        };
        Some(Reply::json(200, &object))
    }

    /// The refund at `position` as the face writes it.
    fn refund_at(&self, ledger: &Ledger, position: usize) -> Value {
        let refund = &ledger.refunds[position];
        let extra = self
            .refunds
            .borrow()
            .get(&refund.id)
            .cloned()
            .unwrap_or_else(|| self.refund_stand_in(refund));
        refund_json(refund, &extra, &self.settings.base_url)
    }

    /// `POST /v2/checkout/orders`: validated, then run under its `PayPal-Request-Id`.
    fn create_order(&self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        let api = Api::Orders;
        let key = match params::request_id(request.idempotency_key) {
            Ok(key) => key,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let body = match params::object(request.body, false) {
            Ok(body) => body,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let create = match params::create_order(&body) {
            Ok(create) => create,
            Err(issue) => return refused(ledger, &issue, api),
        };
        if create.has_payment_source && key.is_none() {
            let issue = Issue::bad(
                "PAYPAL_REQUEST_ID_REQUIRED",
                "PayPal-Request-Id",
                "header",
                "A PayPal-Request-Id is required if you are trying to process payment for an \
                 Order. Please specify a PayPal-Request-Id or Create the Order without a \
                 'payment_source' specified.",
            );
            return refused(ledger, &issue, api);
        }
        let full = wants_representation(request.prefer);
        let fingerprint = fingerprint("POST /v2/checkout/orders".to_owned(), &body);
        let retention = Retention::Exactly(self.settings.request_id_ttl);
        let recorded = key.clone();
        self.keyed(
            ledger,
            key,
            fingerprint,
            retention,
            api,
            full,
            now_ms,
            |ledger| self.run_create(ledger, create, recorded, full, now_ms),
        )
    }

    /// Makes the order a validated create asks for (see the module docs).
    fn run_create(
        &self,
        ledger: &mut Ledger,
        create: CreateOrder,
        key: Option<String>,
        full: bool,
        now_ms: i64,
    ) -> Ran {
        let api = Api::Orders;
        if let Some(invoice_id) = &create.unit.invoice_id {
            if self.invoice_used(ledger, invoice_id, "") {
                return Ran::refusal(duplicate_invoice(invoice_id).reply(ledger, api));
            }
        }
        let vault_id = create.source.vault_id().map(str::to_owned);
        let vaulted = vault_id.is_some();
        let token = vault_id.clone().unwrap_or_else(|| WALLET_TOKEN.to_owned());
        // A vaulted source is charged now in one-step mode; a token that needs its payer is
        // attempted now in both modes (it waits for the payer, or is refused without a return
        // URL); the rest waits for /capture or /authorize, or (no vault) for the buyer.
        let confirm = vaulted && (self.settings.one_step_vault || asks_for_action(&token));
        let mut metadata = BTreeMap::new();
        if let Some(custom_id) = &create.unit.custom_id {
            metadata.insert("payment_id".to_owned(), custom_id.clone());
        }
        let charge = NewCharge {
            amount: create.unit.amount.minor,
            currency: create.unit.amount.currency.to_ascii_lowercase(),
            payment_method: token,
            description: create.unit.description.clone(),
            metadata,
            confirm,
            capture_method: match create.intent {
                OrderIntent::Capture => CaptureMethod::Automatic,
                OrderIntent::Authorize => CaptureMethod::Manual,
            },
            on_action: match &create.return_url {
                Some(url) => OnAction::WaitForApproval {
                    return_url: Some(url.clone()),
                },
                None => OnAction::Fail,
            },
            hold: Hold::default(),
        };
        let (mut intent, delivery) = match ledger.attempt_charge(self, charge, key, now_ms) {
            Attempt::UnknownMethod => {
                let field = create.source.vault_field();
                let issue = Issue::unprocessable(
                    "TOKEN_ID_NOT_FOUND",
                    field,
                    "body",
                    "Tokenized payment source ID was not found.",
                )
                .with_value(vault_id.as_deref().unwrap_or_default());
                return Ran::refusal(issue.reply(ledger, api));
            }
            Attempt::FailedBeforeCharge => return Ran::refusal(before_charge().reply(ledger, api)),
            Attempt::Made { intent, delivery } => (intent, delivery),
        };
        if intent.failure == Some(Failure::AuthenticationRequired) {
            return Ran::refusal(payer_action_required().reply(ledger, api));
        }
        if instrument_declined(&intent) {
            return Ran::refusal(instrument_declined_issue().reply(ledger, api));
        }
        if !vaulted {
            ledger.await_approval(&mut intent, create.return_url.clone(), now_ms);
        }
        let waiting = intent.status == Status::RequiresAction;
        let page_url = format!(
            "{}{AUTHENTICATE_PATH}/{}",
            self.settings.base_url, intent.id
        );
        if waiting && intent.confirm_after_action {
            intent.action_url = Some(page_url);
        }
        let extra = OrderExtra {
            intent: create.intent,
            reference_id: create.unit.reference_id,
            custom_id: create.unit.custom_id,
            invoice_id: create.unit.invoice_id.clone(),
            description: create.unit.description,
            currency: create.unit.amount.currency,
            payer_action: create.source != Source::None,
            page: waiting && intent.confirm_after_action,
            source: create.source,
            return_url: create.return_url,
            cancel_url: create.cancel_url,
            payer_id: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            attempted_ms: intent.latest_charge.as_ref().map(|_| now_ms),
            attempt_key: None,
            auth_capture: None,
        };
        let id = intent.id.clone();
        self.orders.borrow_mut().insert(id.clone(), extra);
        if let Some(invoice_id) = create.unit.invoice_id {
            self.note_invoice(invoice_id, &id);
        }
        ledger.insert(self, *intent, now_ms);
        let index = ledger.intents.len() - 1;
        self.note_attempt(ledger, index);
        let events = self.payment_events(ledger, index, now_ms);
        Ran {
            handled: Handled {
                reply: Reply::json(201, &self.order_at(ledger, index, full)),
                replayed: false,
                delivery,
                events,
            },
            subject: Some(Subject::Order.of(&id)),
            created: Some(id),
        }
    }

    /// Records the capture or authorization id of the order at `index`, once attempted.
    fn note_attempt(&self, ledger: &Ledger, index: usize) {
        let intent = &ledger.intents[index];
        let Some(attempt) = intent.latest_charge.clone() else {
            return;
        };
        let map = match intent.capture_method {
            CaptureMethod::Automatic => &self.captures,
            CaptureMethod::Manual => &self.authorizations,
        };
        map.borrow_mut().insert(attempt, intent.id.clone());
    }

    /// The events of the order at `index` whose payment was just made or moved on: its capture
    /// completed, pending or declined, its authorization created or voided. None for anything
    /// else (an order waiting, a denied authorization).
    fn payment_events(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        let intent = &ledger.intents[index];
        let currency = intent.currency.to_ascii_uppercase();
        let amount = value_text(intent.amount, &currency);
        let authorize = intent.capture_method == CaptureMethod::Manual;
        let (event_type, resource_type, summary) = match (intent.status, authorize) {
            (Status::Succeeded, false) => (
                "PAYMENT.CAPTURE.COMPLETED",
                "capture",
                format!("Payment completed for {amount} {currency}"),
            ),
            (Status::Processing, false) => (
                "PAYMENT.CAPTURE.PENDING",
                "capture",
                format!("Payment pending for {amount} {currency}"),
            ),
            (Status::RequiresPaymentMethod, false) if intent.latest_charge.is_some() => (
                "PAYMENT.CAPTURE.DECLINED",
                "capture",
                format!("Payment declined for {amount} {currency}"),
            ),
            (Status::RequiresCapture, true) => (
                "PAYMENT.AUTHORIZATION.CREATED",
                "authorization",
                format!("Payment authorization created for {amount} {currency}"),
            ),
            (Status::Canceled, true) => (
                "PAYMENT.AUTHORIZATION.VOIDED",
                "authorization",
                format!("Payment authorization voided for {amount} {currency}"),
            ),
            (Status::Succeeded, true) => (
                "PAYMENT.CAPTURE.COMPLETED",
                "capture",
                format!("Payment completed for {amount} {currency}"),
            ),
            _ => return Vec::new(),
        };
        let resource = self.with_view(ledger, index, |view| match resource_type {
            "capture" => view.capture(true),
            _ => view.authorization(true),
        });
        let Some(resource) = resource else {
            return Vec::new();
        };
        let base_url = self.settings.base_url.clone();
        vec![event(
            ledger,
            &base_url,
            event_type,
            resource_type,
            summary,
            resource,
            at_ms,
        )]
    }

    /// `CHECKOUT.ORDER.APPROVED` for the order at `index`, the order as resource.
    fn order_approved(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        let order = self.order_at(ledger, index, true);
        let base_url = self.settings.base_url.clone();
        vec![event(
            ledger,
            &base_url,
            "CHECKOUT.ORDER.APPROVED",
            "checkout-order",
            "An order has been approved by buyer".to_owned(),
            order,
            at_ms,
        )]
    }

    /// `PAYMENT.CAPTURE.REFUNDED` for the refund at `position`, the refund as resource.
    fn refund_event(&self, ledger: &mut Ledger, position: usize, at_ms: i64) -> ModelEvent {
        let refund = &ledger.refunds[position];
        let currency = refund.currency.to_ascii_uppercase();
        let summary = format!(
            "A {} {currency} capture payment was refunded",
            value_text(refund.amount, &currency)
        );
        let resource = self.refund_at(ledger, position);
        let base_url = self.settings.base_url.clone();
        event(
            ledger,
            &base_url,
            "PAYMENT.CAPTURE.REFUNDED",
            "refund",
            summary,
            resource,
            at_ms,
        )
    }

    /// `POST /v2/checkout/orders/{id}/capture` or `/authorize`: validated, then run under its
    /// `PayPal-Request-Id`.
    fn order_action(
        &self,
        ledger: &mut Ledger,
        id: &str,
        action: OrderIntent,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let api = Api::Orders;
        let key = match params::request_id(request.idempotency_key) {
            Ok(key) => key,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let body = match params::object(request.body, true).and_then(|body| {
            params::order_action(&body)?;
            Ok(body)
        }) {
            Ok(body) => body,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let full = wants_representation(request.prefer);
        let route = format!(
            "POST /v2/checkout/orders/{id}/{}",
            action.as_str().to_ascii_lowercase()
        );
        let retention = Retention::Exactly(self.settings.request_id_ttl);
        let recorded = key.clone();
        self.keyed(
            ledger,
            key,
            fingerprint(route, &body),
            retention,
            api,
            full,
            now_ms,
            |ledger| self.run_order_action(ledger, id, action, recorded, full, now_ms),
        )
    }

    /// Captures or authorizes an order that may be (see the module docs).
    fn run_order_action(
        &self,
        ledger: &mut Ledger,
        id: &str,
        action: OrderIntent,
        key: Option<String>,
        full: bool,
        now_ms: i64,
    ) -> Ran {
        let api = Api::Orders;
        let Some(&index) = ledger.by_id.get(id) else {
            return Ran::refusal(Issue::not_found(id).reply(ledger, api));
        };
        let intent = &ledger.intents[index];
        let extra = self.extra(intent);
        let refusal = if expired(intent) {
            Some(Issue::refused(
                "ORDER_EXPIRED",
                "The order has expired: it was not approved in time.",
            ))
        } else if extra.intent != action {
            Some(Issue::refused(
                "ACTION_DOES_NOT_MATCH_INTENT",
                &format!(
                    "Order was created with an intent to '{}'. Please use the matching endpoint.",
                    extra.intent.as_str()
                ),
            ))
        } else {
            match intent.status {
                Status::RequiresConfirmation => None,
                Status::RequiresAction if extra.source.vault_id().is_some() => {
                    Some(payer_action_required())
                }
                Status::RequiresAction => Some(Issue::refused(
                    "ORDER_NOT_APPROVED",
                    "Payer has not yet approved the Order for payment. Please redirect the \
                     payer to the 'rel':'approve' url returned as part of the HATEOAS links \
                     within the Create Order call or provide a valid payment_source in the \
                     request.",
                )),
                _ if instrument_declined(intent) => Some(instrument_declined_issue()),
                _ => Some(match action {
                    OrderIntent::Capture => Issue::refused(
                        "ORDER_ALREADY_CAPTURED",
                        "Order already captured.If 'intent=CAPTURE' only one capture per order \
                         is allowed.",
                    ),
                    OrderIntent::Authorize => Issue::refused(
                        "ORDER_ALREADY_AUTHORIZED",
                        "Order already authorized.If 'intent=AUTHORIZE' only one authorization \
                         per order is allowed.",
                    ),
                }),
            }
        };
        if let Some(issue) = refusal {
            return Ran::refusal(issue.reply(ledger, api));
        }
        if let Some(invoice_id) = &extra.invoice_id {
            if self.invoice_used(ledger, invoice_id, id) {
                return Ran::refusal(duplicate_invoice(invoice_id).reply(ledger, api));
            }
        }
        let (index, delivery) = match ledger.confirm(self, id, OnAction::Fail, now_ms) {
            ConfirmAttempt::Made { index, delivery } => (index, delivery),
            ConfirmAttempt::FailedBeforeCharge => {
                return Ran::refusal(before_charge().reply(ledger, api))
            }
            // Checked above; kept total.
            ConfirmAttempt::NoSuchCharge | ConfirmAttempt::UnexpectedState => {
                return Ran::refusal(Issue::not_found(id).reply(ledger, api))
            }
        };
        self.update(id, |extra| {
            extra.updated_ms = now_ms;
            extra.attempted_ms = Some(now_ms);
            extra.attempt_key = key;
        });
        self.note_attempt(ledger, index);
        let intent = &ledger.intents[index];
        if instrument_declined(intent) {
            return Ran::refusal(instrument_declined_issue().reply(ledger, api));
        }
        if matches!(
            intent.status,
            Status::RequiresAction | Status::RequiresPaymentMethod
        ) && intent.latest_charge.is_none()
        {
            // A token that needs its payer was attempted at the create instead; kept total.
            return Ran::refusal(payer_action_required().reply(ledger, api));
        }
        let events = self.payment_events(ledger, index, now_ms);
        Ran {
            handled: Handled {
                reply: Reply::json(201, &self.order_at(ledger, index, full)),
                replayed: false,
                delivery,
                events,
            },
            subject: Some(Subject::Order.of(id)),
            created: None,
        }
    }

    /// `POST /v2/payments/authorizations/{id}/capture`: validated, then run under its
    /// `PayPal-Request-Id`.
    fn capture_authorization(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let api = Api::Payments;
        let key = match params::request_id(request.idempotency_key) {
            Ok(key) => key,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let (body, capture) = match params::object(request.body, true)
            .and_then(|body| params::capture_authorization(&body).map(|capture| (body, capture)))
        {
            Ok(parsed) => parsed,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let full = wants_representation(request.prefer);
        let route = format!("POST /v2/payments/authorizations/{id}/capture");
        let retention = Retention::Exactly(PAYMENTS_REQUEST_ID_TTL);
        let recorded = key.clone();
        self.keyed(
            ledger,
            key,
            fingerprint(route, &body),
            retention,
            api,
            full,
            now_ms,
            |ledger| self.run_capture_authorization(ledger, id, capture, recorded, full, now_ms),
        )
    }

    /// Captures an authorization that may be (see the module docs).
    fn run_capture_authorization(
        &self,
        ledger: &mut Ledger,
        id: &str,
        capture: params::CaptureAuthorization,
        key: Option<String>,
        full: bool,
        now_ms: i64,
    ) -> Ran {
        let api = Api::Payments;
        let Some(index) = self.order_of(ledger, &self.authorizations, id) else {
            return Ran::refusal(Issue::not_found(id).reply(ledger, api));
        };
        let intent = &ledger.intents[index];
        let order_id = intent.id.clone();
        let extra = self.extra(intent);
        let refusal = match intent.status {
            Status::RequiresCapture => None,
            Status::Succeeded => Some(Issue::refused(
                "AUTHORIZATION_ALREADY_CAPTURED",
                "Authorization has been previously captured and hence cannot be captured again.",
            )),
            Status::Canceled if intent.authorization_lapsed() => Some(Issue::refused(
                "AUTHORIZATION_EXPIRED",
                "An expired authorization cannot be captured.",
            )),
            Status::Canceled => Some(Issue::refused(
                "AUTHORIZATION_VOIDED",
                "A voided authorization cannot be captured or reauthorized.",
            )),
            Status::RequiresPaymentMethod => Some(Issue::refused(
                "AUTHORIZATION_DENIED",
                "A denied authorization cannot be captured.",
            )),
            _ => Some(Issue::refused(
                "TRANSACTION_REFUSED",
                "The authorization is pending and cannot be captured yet.",
            )),
        };
        if let Some(issue) = refusal {
            return Ran::refusal(issue.reply(ledger, api));
        }
        let amount = match &capture.amount {
            None => intent.amount,
            Some(money) if money.currency != extra.currency => {
                let issue = Issue::unprocessable(
                    "AUTH_CAPTURE_CURRENCY_MISMATCH",
                    "/amount/currency_code",
                    "body",
                    "Currency of capture must be the same as currency of authorization.",
                )
                .with_value(&money.currency);
                return Ran::refusal(issue.reply(ledger, api));
            }
            Some(money) if money.minor > intent.amount_capturable() => {
                let issue = Issue::unprocessable(
                    "MAX_CAPTURE_AMOUNT_EXCEEDED",
                    "/amount/value",
                    "body",
                    "Capture amount exceeds allowable limit (the fake allows at most the \
                     authorized amount).",
                )
                .with_value(&value_text(money.minor, &money.currency));
                return Ran::refusal(issue.reply(ledger, api));
            }
            Some(money) => money.minor,
        };
        for invoice_id in [capture.invoice_id.as_ref(), extra.invoice_id.as_ref()]
            .into_iter()
            .flatten()
        {
            if self.invoice_used(ledger, invoice_id, &order_id) {
                return Ran::refusal(duplicate_invoice(invoice_id).reply(ledger, api));
            }
        }
        match ledger.capture(self, &order_id, Some(amount), key, now_ms) {
            CaptureAttempt::Made(_) => {}
            CaptureAttempt::NoSuchCharge => {
                return Ran::refusal(Issue::not_found(id).reply(ledger, api))
            }
            // Checked above; kept total.
            CaptureAttempt::UnexpectedState(_) | CaptureAttempt::Exceeds => {
                let issue = Issue::refused(
                    "MAX_CAPTURE_AMOUNT_EXCEEDED",
                    "Capture amount exceeds allowable limit.",
                );
                return Ran::refusal(issue.reply(ledger, api));
            }
        }
        let capture_id = new_id(ledger);
        self.update(&order_id, |extra| {
            extra.updated_ms = now_ms;
            extra.auth_capture = Some(AuthCapture {
                id: capture_id.clone(),
                amount,
                created_ms: now_ms,
                final_capture: capture.final_capture,
                invoice_id: capture.invoice_id.clone(),
                note_to_payer: capture.note_to_payer.clone(),
            });
        });
        if let Some(invoice_id) = capture.invoice_id {
            self.note_invoice(invoice_id, &order_id);
        }
        self.captures
            .borrow_mut()
            .insert(capture_id.clone(), order_id);
        let events = self.payment_events(ledger, index, now_ms);
        let object = self
            .with_view(ledger, index, |view| view.capture(true))
            .unwrap_or(Value::Null);
        let object = if full { object } else { minimal(&object) };
        Ran {
            handled: Handled::now(Reply::json(201, &object), events),
            subject: Some(Subject::Capture.of(&capture_id)),
            created: None,
        }
    }

    /// `POST /v2/payments/authorizations/{id}/void`: voids an authorization that may be (see the
    /// module docs). Not under a `PayPal-Request-Id`.
    fn void(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let api = Api::Payments;
        if let Err(issue) = params::object(request.body, true).and_then(|body| params::void(&body))
        {
            return refused(ledger, &issue, api);
        }
        let Some(index) = self.order_of(ledger, &self.authorizations, id) else {
            return refused(ledger, &Issue::not_found(id), api);
        };
        let intent = &ledger.intents[index];
        let order_id = intent.id.clone();
        let refusal = match intent.status {
            Status::RequiresCapture | Status::Processing => None,
            Status::Succeeded => Some(Issue::refused(
                "PREVIOUSLY_CAPTURED",
                "Authorization has been previously captured and hence cannot be voided.",
            )),
            Status::Canceled => Some(Issue::refused(
                "PREVIOUSLY_VOIDED",
                "Authorization has been previously voided and hence cannot be voided again.",
            )),
            _ => Some(Issue::refused(
                "CANNOT_BE_VOIDED",
                &format!(
                    "An authorization that is {} cannot be voided.",
                    authorization_status(intent)
                ),
            )),
        };
        if let Some(issue) = refusal {
            return refused(ledger, &issue, api);
        }
        match ledger.cancel(self, &order_id, None, None, now_ms) {
            CancelAttempt::Canceled(_) => {}
            // Checked above; kept total.
            CancelAttempt::NoSuchCharge | CancelAttempt::NotCancelable(_) => {
                let issue =
                    Issue::refused("CANNOT_BE_VOIDED", "The authorization cannot be voided.");
                return refused(ledger, &issue, api);
            }
        }
        self.update(&order_id, |extra| extra.updated_ms = now_ms);
        let events = self.payment_events(ledger, index, now_ms);
        let reply = if wants_representation(request.prefer) {
            let object = self
                .with_view(ledger, index, |view| view.authorization(true))
                .unwrap_or(Value::Null);
            Reply::json(200, &object)
        } else {
            Reply {
                status: 204,
                body: String::new(),
            }
        };
        Handled::now(reply, events)
    }

    /// `POST /v2/payments/captures/{id}/refund`: validated, then run under its
    /// `PayPal-Request-Id`.
    fn refund(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let api = Api::Payments;
        let key = match params::request_id(request.idempotency_key) {
            Ok(key) => key,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let (body, refund) = match params::object(request.body, true)
            .and_then(|body| params::refund_capture(&body).map(|refund| (body, refund)))
        {
            Ok(parsed) => parsed,
            Err(issue) => return refused(ledger, &issue, api),
        };
        let full = wants_representation(request.prefer);
        let route = format!("POST /v2/payments/captures/{id}/refund");
        let retention = Retention::Exactly(PAYMENTS_REQUEST_ID_TTL);
        let recorded = key.clone();
        self.keyed(
            ledger,
            key,
            fingerprint(route, &body),
            retention,
            api,
            full,
            now_ms,
            |ledger| self.run_refund(ledger, id, refund, recorded, full, now_ms),
        )
    }

    /// Refunds a capture that may be (see the module docs).
    fn run_refund(
        &self,
        ledger: &mut Ledger,
        capture_id: &str,
        request: params::RefundCapture,
        key: Option<String>,
        full: bool,
        now_ms: i64,
    ) -> Ran {
        let api = Api::Payments;
        let Some(index) = self.order_of(ledger, &self.captures, capture_id) else {
            return Ran::refusal(Issue::not_found(capture_id).reply(ledger, api));
        };
        let intent = &ledger.intents[index];
        let order_id = intent.id.clone();
        let extra = self.extra(intent);
        let refusal = match intent.status {
            Status::Succeeded => None,
            Status::Processing => Some(Issue::refused(
                "PENDING_CAPTURE",
                "Cannot initiate a refund as the capture is pending. Capture is typically \
                 pending when the payer has funded the transaction using e-check or bank account.",
            )),
            _ => Some(Issue::refused(
                "REFUND_NOT_ALLOWED",
                "Full refund refused - partial refund has already been done on this payment. \
                 (fake PSP: only a COMPLETED capture can be refunded.)",
            )),
        };
        if let Some(issue) = refusal {
            return Ran::refusal(issue.reply(ledger, api));
        }
        if let Some(money) = &request.amount {
            if money.currency != extra.currency {
                let issue = Issue::unprocessable(
                    "REFUND_CAPTURE_CURRENCY_MISMATCH",
                    "/amount/currency_code",
                    "body",
                    "Refund must be in the same currency as the capture.",
                )
                .with_value(&money.currency);
                return Ran::refusal(issue.reply(ledger, api));
            }
        }
        let mut metadata = BTreeMap::new();
        if let Some(custom_id) = &extra.custom_id {
            metadata.insert("payment_id".to_owned(), custom_id.clone());
        }
        if let Some(custom_id) = &request.custom_id {
            metadata.insert("refund_id".to_owned(), custom_id.clone());
        }
        let amount = request.amount.as_ref().map(|money| money.minor);
        let position = match ledger
            .attempt_refund(self, &order_id, amount, None, metadata, key, now_ms)
        {
            RefundAttempt::Made(position) => position,
            RefundAttempt::NoSuchCharge => {
                return Ran::refusal(Issue::not_found(capture_id).reply(ledger, api))
            }
            RefundAttempt::NotRefundable => {
                let issue = Issue::refused("REFUND_NOT_ALLOWED", "The capture cannot be refunded.");
                return Ran::refusal(issue.reply(ledger, api));
            }
            RefundAttempt::AlreadyRefunded { .. } => {
                let issue = Issue::refused(
                    "CAPTURE_FULLY_REFUNDED",
                    "The capture has already been fully refunded",
                );
                return Ran::refusal(issue.reply(ledger, api));
            }
            RefundAttempt::Exceeds { amount, .. } => {
                let issue = Issue::unprocessable(
                    "REFUND_AMOUNT_EXCEEDED",
                    "/amount/value",
                    "body",
                    "The refund amount must be less than or equal to the capture amount \
                         that has not yet been refunded.",
                )
                .with_value(&value_text(amount, &extra.currency));
                return Ran::refusal(issue.reply(ledger, api));
            }
        };
        let refund_id = ledger.refunds[position].id.clone();
        self.refunds.borrow_mut().insert(
            refund_id.clone(),
            RefundExtra {
                capture_id: capture_id.to_owned(),
                custom_id: request.custom_id,
                invoice_id: request.invoice_id,
                note_to_payer: request.note_to_payer,
                created_ms: now_ms,
                updated_ms: now_ms,
            },
        );
        self.update(&order_id, |extra| extra.updated_ms = now_ms);
        let events = if ledger.refunds[position].status == RefundStatus::Succeeded {
            vec![self.refund_event(ledger, position, now_ms)]
        } else {
            Vec::new()
        };
        let object = self.refund_at(ledger, position);
        let object = if full { object } else { minimal(&object) };
        Ran {
            handled: Handled::now(Reply::json(201, &object), events),
            subject: Some(Subject::Refund.of(&refund_id)),
            created: None,
        }
    }
}

/// The token endpoint's OAuth-style error (`{error, error_description}`, not the REST shape).
fn oauth_error(status: u16, error: &str, description: &str) -> Reply {
    Reply::json(
        status,
        &json!({"error": error, "error_description": description}),
    )
}

/// 422 DUPLICATE_INVOICE_ID (\[O\] `#/components/schemas/422`).
fn duplicate_invoice(invoice_id: &str) -> Issue {
    Issue::unprocessable(
        "DUPLICATE_INVOICE_ID",
        "/purchase_units/@reference_id=='default'/invoice_id",
        "body",
        "Duplicate Invoice ID detected. To avoid a potential duplicate transaction your account \
         setting requires that Invoice Id be unique for each transaction.",
    )
    .with_value(invoice_id)
}

/// 422 PAYER_ACTION_REQUIRED (\[O\] `orders.capture-422`).
fn payer_action_required() -> Issue {
    Issue::refused(
        "PAYER_ACTION_REQUIRED",
        "Transaction cannot complete successfully, instruct the buyer to return to PayPal.",
    )
}

/// 422 INSTRUMENT_DECLINED (\[O\] `orders.capture-422`).
fn instrument_declined_issue() -> Issue {
    Issue::refused(
        "INSTRUMENT_DECLINED",
        "The instrument presented was either declined by the processor or bank, or it can't be \
         used for this payment.",
    )
}

/// 500 for `pm_fake_error_before_charge`: nothing was charged or stored.
fn before_charge() -> Issue {
    Issue::internal(
        "An internal error occurred before the payment was attempted (fake PSP: \
         pm_fake_error_before_charge); nothing was charged, the request can be retried.",
    )
}
