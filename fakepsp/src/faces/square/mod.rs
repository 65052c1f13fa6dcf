//! The Square face: Square's Payments and Refunds API (`/v2`) over the [ledger]
//! (`ModelConfig::provider = Provider::Square`). The charges, refunds, test tokens,
//! time-driven transitions and injected failures are the ledger's, exactly as on the other
//! faces; this module only reads Square's JSON requests and writes Square's objects, errors and
//! webhook events, and keeps what only Square has (a payment's `reference_id`, `note`,
//! `location_id`, delay settings, timeline and version). It calls the ledger's
//! provider-neutral operations (`Ledger::attempt_charge`, `Ledger::idempotent`,
//! `Ledger::insert`, `Ledger::capture`, `Ledger::cancel`, `Ledger::attempt_refund`,
//! `Ledger::key_state`, `Ledger::defer_refund_success`) after validating a request in Square's
//! terms (`params`).
//!
//! Sources are `docs/psp-research-square.md` (Square's OpenAPI spec
//! `square/connect-api-specification` `api.json` at release 2025-08-20, cited `spec:L<n>`, and
//! the pages it cites); the inspection fields are this crate's own contract (its top-level docs). Each rule names what it follows; where Square says nothing,
//! the rule says "UNCONFIRMED: the fake's choice" and what the fake does:
//!
//! - **Authentication** (spec:L141, L221; active_merchant's trace): `Authorization: Bearer
//!   <access token>` (`ModelConfig::api_key`; the scheme in any case). Anything else → 401
//!   AUTHENTICATION_ERROR UNAUTHORIZED before anything else is looked at (the 401 status is
//!   UNCONFIRMED: the fake's choice, from the code's name). Every request the face is handed is
//!   counted. `Square-Version` is accepted and ignored (the server does not even pass it on).
//! - **Errors** (spec:L24305): every refusal is `{"errors":[{category, code, detail, field?}]}`.
//!   `detail` texts are the fake's own (Square's are for developers and UNCONFIRMED), except the
//!   decline's `"Authorization error: '<CODE>'"` (Square's error-codes page; the sandbox capture in
//!   active_merchant). Type errors are INCORRECT_TYPE ("the value provided … is the wrong type",
//!   ErrorCode); a body that is not a JSON object is EXPECTED_JSON_BODY (both UNCONFIRMED: the
//!   fake's choice among Square's codes).
//! - **Create** (`POST /v2/payments`, CreatePayment spec:L16733): `idempotency_key` (required, 1
//!   to 45 UTF-8 bytes: "may hold fewer than 45 characters if multi-byte characters are used"),
//!   `source_id` (required), `amount_money` (required, per the reference page: `amount` an integer
//!   ≥ 1 or ≥ a `ModelConfig::minimum_overrides` minimum, else VALUE_TOO_LOW on
//!   `amount_money.amount` — Square's own minimums are UNCONFIRMED; `currency` one of USD CAD GBP
//!   EUR JPY AUD, else UNSUPPORTED_CURRENCY — UNCONFIRMED: the fake's choice of list, as Square
//!   takes only its seller's own currency, spec:L16753), `autocomplete` (default true),
//!   `accept_partial_authorization` (true with autocomplete true → BAD_REQUEST, spec:L16802; with
//!   autocomplete false accepted and without effect: the fake never authorizes part), `reference_id`
//!   (≤ 40), `note` (≤ 500), `delay_duration` and `delay_action` (only with autocomplete false,
//!   else BAD_REQUEST, spec:L16765-L16769; below), `location_id` (any; default the fake's one
//!   location: UNCONFIRMED, Square checks it against the seller's), `verification_token` (below),
//!   `buyer_email_address` (≤ 255). Missing → MISSING_REQUIRED_PARAMETER, empty →
//!   VALUE_TOO_SHORT, too long → VALUE_TOO_LONG, each with `field`. Any other field → 400
//!   UNKNOWN_BODY_PARAMETER (UNCONFIRMED, but what the code's name says; Square has fields the
//!   fake does not model, and refusing them is the fake's choice, as on the other faces). All of
//!   this is answered before the key is used: a refused create stores nothing.
//! - **Idempotency** (Square's idempotency guide; spec:L25100): the key is in the body. The same
//!   key with the same body (compared as JSON: key order and spacing do not matter) → the first
//!   answer again, same status and body (with the fake's `Idempotent-Replayed: true` header), and
//!   no second charge; with another body, or on another endpoint → 400 INVALID_REQUEST_ERROR
//!   IDEMPOTENCY_KEY_REUSED on `idempotency_key` (the status is UNCONFIRMED); a key whose request
//!   is still running → 409 CONFLICT (UNCONFIRMED). Keys are forgotten as the ledger forgets them,
//!   24–48 h after (Square publishes no retention: UNCONFIRMED). One key space for payments and
//!   refunds (Square's scoping is UNCONFIRMED). A 5xx is never stored.
//! - **Payments** (Payment spec:L43086): `id` 27 random alphanumerics and `ZY` (29, like the
//!   spec's examples), `created_at`/`updated_at` RFC 3339 with milliseconds, `amount_money`,
//!   `approved_money` (the amount; 0 on a failed payment, as in the decline capture),
//!   `total_money`, `status`, `source_type` `CARD`, `card_details` (`status`, `card` {`card_brand`,
//!   `last_4`} of the test card behind the token, `entry_method` `KEYED`, `errors` on a failed
//!   one, `card_payment_timeline` {`authorized_at` (the create), `captured_at`, `voided_at`}),
//!   `location_id`, `reference_id`, `note`, `buyer_email_address` (as sent), `delay_action`,
//!   `delay_duration` (in hours as Square writes it, `PT168H`), `delayed_until`, `refund_ids` and
//!   `refunded_money` once it has a refund (the refund guide), `version_token` (derived from the
//!   payment and its version, new at every change). `autocomplete: true` and an approving token
//!   → 200 `COMPLETED` / `CAPTURED`; `autocomplete: false` → `APPROVED` / `AUTHORIZED` (delayed
//!   capture guide). A pending payment reads `PENDING` / `AUTHORIZED` (the brief's choice).
//! - **Tokens** (the ledger's, as on every face; Square's sandbox nonces map onto them):
//!   `cnon:card-nonce-ok` charges like `pm_card_visa`, `cnon:card-nonce-declined` like
//!   `pm_card_visa_chargeDeclined`; the `pm_*` tokens as they are. The other sandbox nonces are
//!   not modelled. An unknown token → 404 INVALID_REQUEST_ERROR NOT_FOUND "Card nonce not found"
//!   (Square's forum), nothing created (the answer is stored under the key, as every answer
//!   after validation is). Tokens are reusable (Square's nonces are single use, CARD_TOKEN_USED;
//!   the fake's tokens are shared test tokens, as on the Omise face).
//! - **Declines** (CreatePaymentResponse spec:L16868: `payment` "might be present with a status of
//!   FAILED"; 400 per connect-php-sdk#140; the body of active_merchant's sandbox capture): HTTP 400
//!   with both `errors` (PAYMENT_METHOD_ERROR; GENERIC_DECLINE for `pm_card_visa_chargeDeclined`,
//!   INSUFFICIENT_FUNDS for `pm_card_chargeDeclinedInsufficientFunds`) and `payment`: `FAILED`,
//!   `card_details.status` `FAILED`, `card_details.errors` the same, `approved_money` 0. Stored
//!   under the key like any answer; `payment.created` is sent.
//! - **3-D Secure** (the brief; Square runs buyer verification, `verifyBuyer()`, in the browser
//!   before the create, spec:L16798): the ledger's 3-D Secure cards (`pm_card_threeDSecure2Required`,
//!   `pm_card_authenticationRequired`) without a `verification_token` are declined at once: 400
//!   PAYMENT_METHOD_ERROR CARD_DECLINED_VERIFICATION_REQUIRED with a `FAILED` payment. There is no
//!   redirect flow on this face (no authentication page). With a `verification_token` the buyer
//!   counts as verified and the card charges like any approving card (UNCONFIRMED: the fake's
//!   choice; it does not check the token, which Square would).
//! - **The other test tokens** (the ledger's): `pm_fake_processing` → 200 `PENDING`, then after
//!   `processing_for` `COMPLETED` (`APPROVED` with `autocomplete: false`) with `payment.updated`;
//!   `pm_fake_requires_action` → 200 `PENDING`, then after `requires_action_for` `FAILED` with
//!   CARD_DECLINED_VERIFICATION_REQUIRED and `payment.updated`; `pm_fake_error_before_charge` →
//!   500 API_ERROR INTERNAL_SERVER_ERROR, nothing created or stored (the 500 is UNCONFIRMED, from
//!   the code's name); `pm_fake_lost_response` and `pm_fake_slow` as on the other faces (answer
//!   cut, or held back `slow_delay`, after the payment was made and stored).
//! - **Delayed capture** (delayed-capture guide; spec:L16765-L16769, L43153-L43163; Square staff on
//!   the forum, thread 3485): with `autocomplete: false` the payment waits `APPROVED` for
//!   `delay_duration` — by default the ledger's `authorization_expires_after` (7 days, Square's
//!   card-not-present `P7D`, written `PT168H`); a custom one is an RFC 3339 duration from one minute
//!   (VALUE_TOO_LOW) up to that default (VALUE_TOO_HIGH; both codes UNCONFIRMED), anything else
//!   INVALID_VALUE — then Square applies `delay_action`: `CANCEL` (the default) makes it
//!   `CANCELED` / `VOIDED` (UNCONFIRMED: `VOIDED` is inferred from CancelPayment's example), and
//!   `COMPLETE` makes it `COMPLETED` / `CAPTURED`, each with `payment.updated` (UNCONFIRMED: that
//!   Square sends it then). `delayed_until` is `created_at` + `delay_duration`, or, for a payment
//!   authorized later than it was created (pending first), the moment the fake will act.
//!   `delay_action` other than CANCEL or COMPLETE → INVALID_ENUM_VALUE.
//! - **Complete** (`POST /v2/payments/{id}/complete`, spec:L73452; CompletePaymentRequest
//!   spec:L12629): the body is required (none → EXPECTED_JSON_BODY: UNCONFIRMED, the spec marks it
//!   required) and may be `{}` or carry `version_token`. Unknown id → 404 NOT_FOUND; a
//!   `version_token` that is not the payment's current one → 400 INVALID_REQUEST_ERROR
//!   VERSION_MISMATCH (spec:L73502-L73504; the category is UNCONFIRMED: VERSION_MISMATCH is not in
//!   the ErrorCode enum); `APPROVED` → `COMPLETED` / `CAPTURED` with `captured_at`, the whole
//!   amount, `payment.updated`, 200 `{"payment"}`; any other status → 400 INVALID_REQUEST_ERROR
//!   BAD_REQUEST naming the status (UNCONFIRMED: Square lists no error for it). No idempotency
//!   key: Square's CompletePayment takes none.
//! - **Cancel** (`POST /v2/payments/{id}/cancel`, spec:L73411: no body, so none or `{}`): unknown
//!   id → 404; `APPROVED` → `CANCELED` / `VOIDED` with `voided_at`, `payment.updated`, 200
//!   `{"payment"}` (CancelPaymentResponse spec:L7220); any other status → 400 BAD_REQUEST
//!   (UNCONFIRMED).
//! - **Cancel by idempotency key** (`POST /v2/payments/cancel`, spec:L73231, L7186, L7205):
//!   body `{"idempotency_key"}` (validated as on a create). The payment the create under that key
//!   made — known only as long as the ledger remembers the key (`Ledger::key_state`) — decides:
//!   `APPROVED` → voided as by a cancel (`payment.updated`) and 200 `{}`; `FAILED` or `CANCELED`
//!   already → 200 `{}`, nothing changes; `COMPLETED` or `PENDING` → 400 INVALID_REQUEST_ERROR
//!   BAD_REQUEST "… cannot be canceled", nothing changes (UNCONFIRMED code; what the spec implies is
//!   that it cannot void a completed payment). No payment under the key — a key never seen, a key
//!   the ledger forgot (even though the payment still exists), a create that made nothing — → 200
//!   `{}` ("If no payment with the specified idempotency key is found, no action is taken and the
//!   endpoint returns successfully"). A create with that key still running → 409 CONFLICT
//!   (UNCONFIRMED: the fake's choice, rather than answering "nothing found" while a payment may
//!   still be made). A cancel that took effect is recorded with the key in `_fake/charges`
//!   (`cancels`); a cancel by id with none.
//! - **Retrieve** (`GET /v2/payments/{id}`, spec:L73273; `GET /v2/refunds/{id}`, spec:L73940):
//!   `{"payment"}` / `{"refund"}`, read-after-write; unknown → 404 NOT_FOUND (forum evidence; the
//!   detail text is UNCONFIRMED). No list or search: payonce never lists Square payments.
//! - **Refunds** (`POST /v2/refunds`, RefundPayment spec:L45509; the refund guide; the Refunds
//!   API reference): `idempotency_key` (1 to 45), `payment_id` (required here: unlinked refunds
//!   are not modelled), `amount_money` (as on a create), `reason` (≤ 192),
//!   `payment_version_token` (stale → VERSION_MISMATCH, spec:L45565); other fields →
//!   UNKNOWN_BODY_PARAMETER; validated before the key, then run under it as a create is. Unknown
//!   payment → 404 NOT_FOUND; `amount_money.currency` not the payment's → 400 INVALID_REQUEST_ERROR
//!   CURRENCY_MISMATCH (the brief's category; Square's enum files CURRENCY_MISMATCH under
//!   PAYMENT_METHOD_ERROR); an `APPROVED` payment → 400 REFUND_ERROR
//!   REFUND_ERROR_PAYMENT_NEEDS_COMPLETION (spec:L25055); any other status than `COMPLETED` → 400
//!   REFUND_ERROR PAYMENT_NOT_REFUNDABLE (spec:L25045); more than is left → 400 REFUND_ERROR
//!   REFUND_AMOUNT_INVALID (spec:L25035). A payment with a `FAILED` refund takes no more ("no
//!   further refunds are allowed on that payment", Refunds API reference), nor one with 20 refunds
//!   (the refund guide's limit): 400 PAYMENT_NOT_REFUNDABLE (that code for both is UNCONFIRMED).
//!   Refunds older than a year are not modelled. Pending and completed refunds count against what
//!   is left, and in `refunded_money` (UNCONFIRMED whether Square counts pending ones there).
//! - **A refund's life** (PaymentRefund spec:L43939: `PENDING`, `COMPLETED`, `REJECTED`, `FAILED`;
//!   a new refund starts `PENDING`, the Refunds API reference): 200 `{"refund"}` with `id`
//!   `<payment id>_<43 alphanumerics>` (every spec example), `status`, `amount_money`,
//!   `payment_id`, `location_id`, `reason`, `created_at`, `updated_at`, and `refund.created`.
//!   A refund of an ordinary card answers `PENDING` and is `COMPLETED` the very next moment the
//!   fake looks (its next request or tick: `GET /v2/refunds/{id}` reads it so) with
//!   `refund.updated` (UNCONFIRMED: how long Square's stay pending; the fake's choice, so that an
//!   adapter must handle `PENDING` and can always learn the final state by GET or webhook). A
//!   `pm_fake_refund_pending` payment's refunds stay `PENDING` for `refund_pending_for`, then
//!   complete (`refund.updated`); a `pm_card_refundFail` payment's read `COMPLETED`, then `FAILED`
//!   after `refund_fail_after` (`refund.updated`), their amount refundable no more (above). The
//!   fake never answers `REJECTED`. The payment's `refund_ids`, `refunded_money`, `updated_at` and
//!   `version_token` follow (no `payment.updated`: its status does not change).
//! - **Webhooks** (spec:L43665, L44043, L45410, L45669; the webhook validation guide; square's
//!   SDKs' `webhooks_helper`): `{"merchant_id","type","event_id" (a UUID from the seed),
//!   "created_at","data":{"type":"payment"|"refund","id","object":{"payment"|"refund":{…}}}}`;
//!   `payment.created` for every create that made a payment (failed ones too), `payment.updated`
//!   at every status change (complete, cancel, cancel by key, the delay action, a pending payment
//!   moving on: spec:L44043, "when payment.status or card_details.status changes"),
//!   `refund.created` for every refund, `refund.updated` at every refund status change. The
//!   server signs each delivery with `x-square-hmacsha256-signature`: standard base64 of
//!   HMAC-SHA256, keyed with the signature key (`FakePspConfig::webhook_secret`), of the
//!   notification URL (the URL the fake POSTs to) followed by the raw body
//!   ([`sign_square_webhook`](crate::sign_square_webhook)).
//! - **Inspection** (the crate's contract): `_fake/charges` entries carry `provider: "square"`,
//!   `status` (the Payment's), `outcome`, `amount`, `currency`, `payment_method` (the
//!   `source_id` as sent), `payment_id` (the `reference_id`, kept as the ledger's
//!   `metadata.payment_id`), `idempotency_key`, `capture_method` (`manual` for `autocomplete:
//!   false`), `captures` (the delay action's COMPLETE is one under no key), `cancels` (a cancel
//!   by key carries it; the delay action's CANCEL is `automatic` under none), and `object`: the
//!   Payment as `GET /v2/payments/{id}` answers it. `_fake/refunds` entries carry the refund's
//!   status words and the payment's `reference_id` as `payment_id`.
//!
//! [ledger]: crate::ledger

mod json;
mod params;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use self::json::{
    bad_request, decline_error, error, event, invalid, new_payment_id, no_such_payment, not_found,
    payment_json, payment_status, refund_error, refund_json, refund_status, version_token,
    DEFAULT_LOCATION_ID, INVALID_REQUEST_ERROR,
};
use self::params::{Body, CreatePayment, RefundPayment};
use crate::ledger::{
    millis, Attempt, CancelAttempt, CaptureAttempt, CaptureMethod, Face, FakeCharge, Fingerprint,
    Handled, Hold, Intent, KeyRefusals, KeyState, Ledger, ModelEvent, NewCharge, OnAction, OnLapse,
    Refund, RefundAttempt, RefundStatus, Reply, Status, WireRequest,
};

/// Square's sandbox nonces the fake knows, and the ledger's test token each charges like.
const SANDBOX_NONCES: &[(&str, &str)] = &[
    ("cnon:card-nonce-ok", "pm_card_visa"),
    ("cnon:card-nonce-declined", "pm_card_visa_chargeDeclined"),
];

/// At most 20 refunds per payment (the refund guide).
const MAX_REFUNDS_PER_PAYMENT: usize = 20;

/// The Square face's idempotency refusals (see the module docs).
const KEY_REFUSALS: KeyRefusals = KeyRefusals {
    mismatch: key_reused,
    in_use: key_in_use,
};

/// What Square does when a delayed payment's `delay_duration` passes (`delay_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum DelayAction {
    /// `CANCEL`, the default: the payment is voided.
    #[default]
    Cancel,
    /// `COMPLETE`: the payment is captured.
    Complete,
}

impl DelayAction {
    /// The wire word.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "CANCEL",
            Self::Complete => "COMPLETE",
        }
    }
}

/// What the face keeps of a payment besides the ledger's charge: what the create said that only
/// Square shows, and the payment's timeline and version.
#[derive(Clone, Debug)]
pub(super) struct PaymentExtra {
    /// The `source_id` as sent.
    pub(super) source_id: String,
    pub(super) location_id: String,
    pub(super) reference_id: Option<String>,
    pub(super) note: Option<String>,
    pub(super) buyer_email_address: Option<String>,
    pub(super) delay_action: DelayAction,
    /// The `delay_duration` in force, in ms (the default one unless the create gave one).
    pub(super) delay_duration_ms: i64,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
    pub(super) captured_at_ms: Option<i64>,
    pub(super) voided_at_ms: Option<i64>,
    /// Bumped at every change; the `version_token` is derived from it.
    pub(super) version: u64,
}

impl PaymentExtra {
    /// The payment's change at `at_ms` to what `intent` is now: a new version, `updated_at`,
    /// and the timeline entry of a capture or void.
    fn changed(&mut self, intent: &Intent, at_ms: i64) {
        self.version = self.version.saturating_add(1);
        self.updated_ms = at_ms;
        match intent.status {
            Status::Succeeded => {
                self.captured_at_ms.get_or_insert(at_ms);
            }
            Status::Canceled => {
                self.voided_at_ms.get_or_insert(at_ms);
            }
            _ => {}
        }
    }
}

/// What the face keeps of a refund besides the ledger's.
#[derive(Clone, Debug)]
pub(super) struct RefundExtra {
    /// The refunded payment's location.
    pub(super) location_id: String,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
}

/// The Square face: the access token it accepts, the raised minimums it enforces, and what it
/// keeps of each payment and refund besides the ledger's. Cells, because the ledger asks for
/// events of time-driven changes through `&self`.
#[derive(Debug)]
pub(crate) struct SquareFace {
    /// The only access token accepted, as `Authorization: Bearer <token>`.
    api_key: String,
    /// Per lower-case currency, a minimum amount (minor units).
    minimum_overrides: BTreeMap<String, i64>,
    /// Payment id → what only Square shows of it.
    payments: RefCell<BTreeMap<String, PaymentExtra>>,
    /// Refund id → what only Square shows of it.
    refunds: RefCell<BTreeMap<String, RefundExtra>>,
}

impl SquareFace {
    /// A face accepting the access token `api_key`, enforcing `minimum_overrides`.
    pub(crate) fn new(api_key: String, minimum_overrides: BTreeMap<String, i64>) -> Self {
        Self {
            api_key,
            minimum_overrides,
            payments: RefCell::new(BTreeMap::new()),
            refunds: RefCell::new(BTreeMap::new()),
        }
    }

    /// What the face keeps of payment `intent`; a stand-in if it kept nothing (never, since
    /// every payment is made here; kept total).
    fn extra(&self, intent: &Intent) -> PaymentExtra {
        self.payments
            .borrow()
            .get(&intent.id)
            .cloned()
            .unwrap_or_else(|| PaymentExtra {
                source_id: intent.payment_method.clone(),
                location_id: DEFAULT_LOCATION_ID.to_owned(),
                reference_id: intent.metadata.get("payment_id").cloned(),
                note: None,
                buyer_email_address: None,
                delay_action: DelayAction::Cancel,
                delay_duration_ms: 0,
                created_ms: intent.created.saturating_mul(1000),
                updated_ms: intent.created.saturating_mul(1000),
                captured_at_ms: None,
                voided_at_ms: None,
                version: 1,
            })
    }

    /// Records that payment `intent` changed at `at_ms`.
    fn changed(&self, intent: &Intent, at_ms: i64) {
        if let Some(extra) = self.payments.borrow_mut().get_mut(&intent.id) {
            extra.changed(intent, at_ms);
        }
    }

    /// The payment at `index` as the face writes it now.
    fn payment_at(&self, ledger: &Ledger, index: usize) -> Value {
        let intent = &ledger.intents[index];
        payment_json(intent, &self.extra(intent), &refunds_of(ledger, &intent.id))
    }

    /// The refund at `position` as the face writes it now.
    fn refund_at(&self, ledger: &Ledger, position: usize) -> Value {
        let refund = &ledger.refunds[position];
        let extra = self.refunds.borrow().get(&refund.id).cloned();
        let extra = extra.unwrap_or_else(|| RefundExtra {
            location_id: DEFAULT_LOCATION_ID.to_owned(),
            created_ms: refund.created.saturating_mul(1000),
            updated_ms: refund.created.saturating_mul(1000),
        });
        refund_json(refund, &extra)
    }

    /// A stale `version_token` of the payment at `index`: 400 VERSION_MISMATCH; `None` when
    /// none was given or it is current.
    fn version_mismatch(
        &self,
        ledger: &Ledger,
        index: usize,
        token: Option<&str>,
    ) -> Option<Reply> {
        let intent = &ledger.intents[index];
        let current = version_token(&intent.id, self.extra(intent).version);
        token.filter(|token| *token != current).map(|_| {
            invalid(
                "VERSION_MISMATCH",
                &format!(
                    "The version token does not match payment {}'s current version.",
                    intent.id
                ),
                None,
            )
        })
    }
}

impl Face for SquareFace {
    fn name(&self) -> &'static str {
        "square"
    }

    /// Routes a request of the Square face: every request is counted and needs the token.
    fn handle(&mut self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        ledger.requests_seen += 1;
        if !authorised(&self.api_key, request.authorization) {
            return Handled::plain(error(
                401,
                "AUTHENTICATION_ERROR",
                "UNAUTHORIZED",
                "This request could not be authorized.",
                None,
            ));
        }
        let path = request.path.strip_prefix('/').unwrap_or(request.path);
        let segments: Vec<&str> = path.split('/').collect();
        match (request.method, segments.as_slice()) {
            ("POST", ["v2", "payments"]) => self.create_payment(ledger, request.body, now_ms),
            ("POST", ["v2", "payments", "cancel"]) => {
                self.cancel_by_key(ledger, request.body, now_ms)
            }
            ("GET", ["v2", "payments", id]) if !id.is_empty() => {
                Handled::plain(match ledger.by_id.get(*id) {
                    Some(&index) => {
                        Reply::json(200, &json!({"payment": self.payment_at(ledger, index)}))
                    }
                    None => no_such_payment(id),
                })
            }
            ("POST", ["v2", "payments", id, "complete"]) if !id.is_empty() => {
                self.complete(ledger, id, request.body, now_ms)
            }
            ("POST", ["v2", "payments", id, "cancel"]) if !id.is_empty() => {
                self.cancel(ledger, id, request.body, now_ms)
            }
            ("POST", ["v2", "refunds"]) => self.create_refund(ledger, request.body, now_ms),
            ("GET", ["v2", "refunds", id]) if !id.is_empty() => {
                Handled::plain(match ledger.refund_by_id.get(*id) {
                    Some(&position) => {
                        Reply::json(200, &json!({"refund": self.refund_at(ledger, position)}))
                    }
                    None => not_found(&format!("Could not find payment refund with id: {id}")),
                })
            }
            _ => Handled::plain(not_found(&format!(
                "the fake PSP's Square face does not serve {} {}",
                request.method, request.path
            ))),
        }
    }

    /// 27 alphanumerics and `ZY`.
    fn new_charge_id(&self, ledger: &mut Ledger) -> String {
        new_payment_id(ledger)
    }

    /// `<payment id>_` and 43 alphanumerics.
    fn new_refund_id(&self, ledger: &mut Ledger, charge_id: &str) -> String {
        json::new_refund_id(ledger, charge_id)
    }

    /// `payment.updated`: a pending payment completed, was approved or failed, or a delayed one
    /// was voided or completed by its delay action.
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        self.changed(&ledger.intents[index], at_ms);
        let object = self.payment_at(ledger, index);
        vec![event(ledger, "payment.updated", "payment", object, at_ms)]
    }

    /// `refund.updated`; a failed refund changes its payment's `refunded_money`, so the payment
    /// gets a new version too.
    fn refund_moved_on(
        &self,
        ledger: &mut Ledger,
        index: usize,
        _from: RefundStatus,
        at_ms: i64,
    ) -> Vec<ModelEvent> {
        let refund = &ledger.refunds[index];
        if let Some(extra) = self.refunds.borrow_mut().get_mut(&refund.id) {
            extra.updated_ms = at_ms;
        }
        if refund.status == RefundStatus::Failed {
            if let Some(&payment) = ledger.by_id.get(&refund.payment_intent) {
                self.changed(&ledger.intents[payment], at_ms);
            }
        }
        let object = self.refund_at(ledger, index);
        vec![event(ledger, "refund.updated", "refund", object, at_ms)]
    }

    fn charge_status(&self, intent: &Intent) -> &'static str {
        payment_status(intent)
    }

    fn refund_status(&self, status: RefundStatus) -> &'static str {
        refund_status(status)
    }

    /// With the `source_id` as sent as `payment_method`.
    fn inspect_charge(&self, intent: &Intent) -> FakeCharge {
        let mut charge = intent.inspect(self.name(), self.charge_status(intent));
        charge.payment_method = self.extra(intent).source_id;
        charge
    }

    /// The Payment as `GET /v2/payments/{id}` answers it.
    fn charge_object(&self, ledger: &Ledger, index: usize) -> Option<Value> {
        Some(self.payment_at(ledger, index))
    }
}

impl SquareFace {
    /// `POST /v2/payments`: validated, then run under its key.
    fn create_payment(&self, ledger: &mut Ledger, body: &[u8], now_ms: i64) -> Handled {
        let body = match params::object(body, false) {
            Ok(body) => body,
            Err(reply) => return Handled::plain(reply),
        };
        let default_delay_ms = millis(ledger.timings().authorization_expires_after);
        let create = match params::create_payment(&body, &self.minimum_overrides, default_delay_ms)
        {
            Ok(create) => create,
            Err(reply) => return Handled::plain(reply),
        };
        let key = create.idempotency_key.clone();
        let fingerprint = fingerprint("POST /v2/payments", &body);
        ledger.idempotent(KEY_REFUSALS, Some(key), fingerprint, now_ms, |ledger| {
            self.run_create(ledger, create, default_delay_ms, now_ms)
        })
    }

    /// Makes the payment a validated create asks for; a decline is a `FAILED` payment, 400.
    fn run_create(
        &self,
        ledger: &mut Ledger,
        create: CreatePayment,
        default_delay_ms: i64,
        now_ms: i64,
    ) -> Handled {
        let token = SANDBOX_NONCES
            .iter()
            .find(|(nonce, _)| *nonce == create.source_id)
            .map_or(create.source_id.as_str(), |(_, token)| token)
            .to_owned();
        let mut metadata = BTreeMap::new();
        if let Some(reference_id) = &create.reference_id {
            metadata.insert("payment_id".to_owned(), reference_id.clone());
        }
        let charge = NewCharge {
            amount: create.amount,
            currency: create.currency.clone(),
            payment_method: token,
            description: None,
            metadata,
            confirm: true,
            capture_method: if create.autocomplete {
                CaptureMethod::Automatic
            } else {
                CaptureMethod::Manual
            },
            // Buyer verification happens in the browser before the create; there is no page to
            // send the buyer to afterwards.
            on_action: if create.verification_token.is_some() {
                OnAction::AlreadyAuthenticated
            } else {
                OnAction::Fail
            },
            hold: Hold {
                expires_after: create
                    .delay_ms
                    .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                on_lapse: match create.delay_action {
                    DelayAction::Cancel => OnLapse::Release,
                    DelayAction::Complete => OnLapse::Capture,
                },
            },
        };
        let key = create.idempotency_key.clone();
        match ledger.attempt_charge(self, charge, Some(key), now_ms) {
            Attempt::UnknownMethod => Handled::plain(error(
                404,
                INVALID_REQUEST_ERROR,
                "NOT_FOUND",
                "Card nonce not found in this `sandbox` application environment.",
                Some("source_id"),
            )),
            Attempt::FailedBeforeCharge => Handled::plain(error(
                500,
                "API_ERROR",
                "INTERNAL_SERVER_ERROR",
                "An internal error occurred before the payment was attempted (fake PSP: \
                 pm_fake_error_before_charge); nothing was charged, the request can be retried.",
                None,
            )),
            Attempt::Made { intent, delivery } => {
                let extra = PaymentExtra {
                    source_id: create.source_id,
                    location_id: create
                        .location_id
                        .unwrap_or_else(|| DEFAULT_LOCATION_ID.to_owned()),
                    reference_id: create.reference_id,
                    note: create.note,
                    buyer_email_address: create.buyer_email_address,
                    delay_action: create.delay_action,
                    delay_duration_ms: create.delay_ms.unwrap_or(default_delay_ms),
                    created_ms: now_ms,
                    updated_ms: now_ms,
                    captured_at_ms: (intent.status == Status::Succeeded).then_some(now_ms),
                    voided_at_ms: None,
                    version: 1,
                };
                let object = payment_json(&intent, &extra, &[]);
                self.payments.borrow_mut().insert(intent.id.clone(), extra);
                let reply = match intent
                    .failure
                    .filter(|_| intent.status == Status::RequiresPaymentMethod)
                {
                    Some(failure) => Reply::json(
                        400,
                        &json!({"errors": [decline_error(failure)], "payment": object}),
                    ),
                    None => Reply::json(200, &json!({"payment": object})),
                };
                let event = event(ledger, "payment.created", "payment", object, now_ms);
                ledger.insert(self, *intent, now_ms);
                Handled {
                    reply,
                    replayed: false,
                    delivery,
                    events: vec![event],
                }
            }
        }
    }

    /// `POST /v2/payments/{id}/complete`: `APPROVED` → `COMPLETED`.
    fn complete(&self, ledger: &mut Ledger, id: &str, body: &[u8], now_ms: i64) -> Handled {
        let version =
            match params::object(body, false).and_then(|body| params::complete_payment(&body)) {
                Ok(version) => version,
                Err(reply) => return Handled::plain(reply),
            };
        let Some(&index) = ledger.by_id.get(id) else {
            return Handled::plain(no_such_payment(id));
        };
        if let Some(reply) = self.version_mismatch(ledger, index, version.as_deref()) {
            return Handled::plain(reply);
        }
        let status = payment_status(&ledger.intents[index]);
        match ledger.capture(self, id, None, None, now_ms) {
            CaptureAttempt::Made(index) => self.payment_changed(ledger, index, now_ms),
            CaptureAttempt::NoSuchCharge => Handled::plain(no_such_payment(id)),
            CaptureAttempt::UnexpectedState(_) | CaptureAttempt::Exceeds => {
                Handled::plain(bad_request(&format!(
                    "Payment {id} is {status}: only an APPROVED payment can be completed."
                )))
            }
        }
    }

    /// `POST /v2/payments/{id}/cancel`: `APPROVED` → `CANCELED`.
    fn cancel(&self, ledger: &mut Ledger, id: &str, body: &[u8], now_ms: i64) -> Handled {
        if let Err(reply) =
            params::object(body, true).and_then(|body| params::cancel_payment(&body))
        {
            return Handled::plain(reply);
        }
        let Some(&index) = ledger.by_id.get(id) else {
            return Handled::plain(no_such_payment(id));
        };
        let intent = &ledger.intents[index];
        if intent.status != Status::RequiresCapture {
            return Handled::plain(bad_request(&format!(
                "Payment {id} is {}: only an APPROVED payment can be canceled.",
                payment_status(intent)
            )));
        }
        match ledger.cancel(self, id, None, None, now_ms) {
            CancelAttempt::Canceled(index) => self.payment_changed(ledger, index, now_ms),
            CancelAttempt::NoSuchCharge => Handled::plain(no_such_payment(id)),
            // Answered above; kept total.
            CancelAttempt::NotCancelable(_) => {
                Handled::plain(bad_request(&format!("Payment {id} cannot be canceled.")))
            }
        }
    }

    /// `POST /v2/payments/cancel`: voids the payment the create under the key made, if the key
    /// is remembered and the payment is `APPROVED`.
    fn cancel_by_key(&self, ledger: &mut Ledger, body: &[u8], now_ms: i64) -> Handled {
        let key = match params::object(body, false).and_then(|body| params::cancel_by_key(&body)) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let nothing = || Handled::plain(Reply::json(200, &json!({})));
        let id = match ledger.key_state(&key) {
            KeyState::Unknown | KeyState::Answered { created: None } => return nothing(),
            KeyState::InFlight => return Handled::plain(key_in_use(&key)),
            KeyState::Answered { created: Some(id) } => id,
        };
        let Some(&index) = ledger.by_id.get(&id) else {
            return nothing();
        };
        let intent = &ledger.intents[index];
        match intent.status {
            Status::RequiresCapture => {}
            Status::Canceled | Status::RequiresPaymentMethod => return nothing(),
            Status::Succeeded
            | Status::Processing
            | Status::RequiresAction
            | Status::RequiresConfirmation => {
                return Handled::plain(bad_request(&format!(
                    "Payment {id} made under idempotency key {key} is {} and cannot be canceled.",
                    payment_status(intent)
                )))
            }
        }
        match ledger.cancel(self, &id, None, Some(key), now_ms) {
            CancelAttempt::Canceled(index) => {
                let mut handled = self.payment_changed(ledger, index, now_ms);
                handled.reply = Reply::json(200, &json!({}));
                handled
            }
            // Checked above; kept total.
            CancelAttempt::NoSuchCharge | CancelAttempt::NotCancelable(_) => nothing(),
        }
    }

    /// The answer to a complete or cancel that changed the payment at `index`: a new version,
    /// `payment.updated`, 200 `{"payment"}`.
    fn payment_changed(&self, ledger: &mut Ledger, index: usize, now_ms: i64) -> Handled {
        self.changed(&ledger.intents[index], now_ms);
        let object = self.payment_at(ledger, index);
        let event = event(ledger, "payment.updated", "payment", object.clone(), now_ms);
        Handled::now(Reply::json(200, &json!({"payment": object})), vec![event])
    }

    /// `POST /v2/refunds`: validated, then run under its key.
    fn create_refund(&self, ledger: &mut Ledger, body: &[u8], now_ms: i64) -> Handled {
        let body = match params::object(body, false) {
            Ok(body) => body,
            Err(reply) => return Handled::plain(reply),
        };
        let refund = match params::refund_payment(&body) {
            Ok(refund) => refund,
            Err(reply) => return Handled::plain(reply),
        };
        let key = refund.idempotency_key.clone();
        let fingerprint = fingerprint("POST /v2/refunds", &body);
        ledger.idempotent(KEY_REFUSALS, Some(key), fingerprint, now_ms, |ledger| {
            self.run_refund(ledger, refund, now_ms)
        })
    }

    /// Refunds a `COMPLETED` payment if it may be refunded that much (see the module docs).
    fn run_refund(&self, ledger: &mut Ledger, request: RefundPayment, now_ms: i64) -> Handled {
        let id = request.payment_id.as_str();
        let Some(&index) = ledger.by_id.get(id) else {
            return Handled::plain(no_such_payment(id));
        };
        if let Some(reply) =
            self.version_mismatch(ledger, index, request.payment_version_token.as_deref())
        {
            return Handled::plain(reply);
        }
        let intent = &ledger.intents[index];
        if request.currency != intent.currency {
            return Handled::plain(invalid(
                "CURRENCY_MISMATCH",
                &format!(
                    "The refund's currency {} is not the payment's, {}.",
                    request.currency.to_ascii_uppercase(),
                    intent.currency.to_ascii_uppercase()
                ),
                Some("amount_money.currency"),
            ));
        }
        match intent.status {
            Status::Succeeded => {}
            Status::RequiresCapture => {
                return Handled::plain(refund_error(
                    "REFUND_ERROR_PAYMENT_NEEDS_COMPLETION",
                    &format!(
                        "Payment {id} is APPROVED and needs to be completed (or canceled) first."
                    ),
                ))
            }
            _ => {
                return Handled::plain(not_refundable(&format!(
                    "Payment {id} is {}: only a COMPLETED payment can be refunded.",
                    payment_status(intent)
                )))
            }
        }
        let earlier = refunds_of(ledger, id);
        if earlier
            .iter()
            .any(|refund| refund.status == RefundStatus::Failed)
        {
            return Handled::plain(not_refundable(&format!(
                "Payment {id} has a FAILED refund: no further refunds are allowed on it."
            )));
        }
        if earlier.len() >= MAX_REFUNDS_PER_PAYMENT {
            return Handled::plain(not_refundable(&format!(
                "Payment {id} already has {MAX_REFUNDS_PER_PAYMENT} refunds."
            )));
        }
        let extra = self.extra(intent);
        let mut metadata = BTreeMap::new();
        if let Some(reference_id) = &extra.reference_id {
            metadata.insert("payment_id".to_owned(), reference_id.clone());
        }
        // Square keeps no metadata on a refund: the inspection view's `refund_id` (the payonce
        // refund it was made for) is the `reason`, where payonce writes it.
        if let Some(reason) = &request.reason {
            metadata.insert("refund_id".to_owned(), reason.clone());
        }
        let key = Some(request.idempotency_key.clone());
        let attempt = ledger.attempt_refund(
            self,
            id,
            Some(request.amount),
            request.reason.clone(),
            metadata,
            key,
            now_ms,
        );
        let position = match attempt {
            RefundAttempt::Made(position) => position,
            RefundAttempt::NoSuchCharge => return Handled::plain(no_such_payment(id)),
            RefundAttempt::NotRefundable => {
                return Handled::plain(not_refundable(&format!("Payment {id} cannot be refunded.")))
            }
            RefundAttempt::AlreadyRefunded { .. } => {
                return Handled::plain(refund_error(
                    "REFUND_AMOUNT_INVALID",
                    &format!("Payment {id} has been refunded in full: nothing is left to refund."),
                ))
            }
            RefundAttempt::Exceeds {
                amount, unrefunded, ..
            } => {
                return Handled::plain(refund_error(
                    "REFUND_AMOUNT_INVALID",
                    &format!(
                        "The refund amount {amount} exceeds the amount available to refund, \
                         {unrefunded}."
                    ),
                ))
            }
        };
        // Every new refund starts PENDING; one that the ledger made final at once completes the
        // next moment the fake looks.
        ledger.defer_refund_success(position, now_ms);
        let refund_id = ledger.refunds[position].id.clone();
        self.refunds.borrow_mut().insert(
            refund_id,
            RefundExtra {
                location_id: extra.location_id,
                created_ms: now_ms,
                updated_ms: now_ms,
            },
        );
        // The payment's refund_ids and refunded_money changed.
        self.changed(&ledger.intents[index], now_ms);
        let object = self.refund_at(ledger, position);
        let event = event(ledger, "refund.created", "refund", object.clone(), now_ms);
        Handled::now(Reply::json(200, &json!({"refund": object})), vec![event])
    }
}

/// The refunds of payment `id`, oldest first.
fn refunds_of<'l>(ledger: &'l Ledger, id: &str) -> Vec<&'l Refund> {
    ledger
        .refunds_of
        .get(id)
        .map(|positions| positions.iter().map(|&p| &ledger.refunds[p]).collect())
        .unwrap_or_default()
}

/// What an idempotency key is compared on: the endpoint and the JSON body.
fn fingerprint(route: &str, body: &Body) -> Fingerprint {
    let canonical = params::canonical(&Value::Object(body.clone()));
    Fingerprint {
        route: route.to_owned(),
        params: BTreeMap::from([("body".to_owned(), canonical)]),
    }
}

/// Whether `authorization` is `Bearer <api_key>` (the scheme in any case).
fn authorised(api_key: &str, authorization: Option<&str>) -> bool {
    authorization
        .and_then(|value| value.trim().split_once(' '))
        .is_some_and(|(scheme, token)| {
            scheme.eq_ignore_ascii_case("bearer") && token.trim() == api_key
        })
}

/// 400 REFUND_ERROR PAYMENT_NOT_REFUNDABLE.
fn not_refundable(detail: &str) -> Reply {
    refund_error("PAYMENT_NOT_REFUNDABLE", detail)
}

/// 400 IDEMPOTENCY_KEY_REUSED: the key came before with another body or on another endpoint.
fn key_reused(key: &str) -> Reply {
    invalid(
        "IDEMPOTENCY_KEY_REUSED",
        &format!("The idempotency key {key} was used before with a different request body."),
        Some("idempotency_key"),
    )
}

/// 409 CONFLICT: a request with the key is still running (UNCONFIRMED status and code).
fn key_in_use(key: &str) -> Reply {
    error(
        409,
        INVALID_REQUEST_ERROR,
        "CONFLICT",
        &format!("Another request with idempotency key {key} is still running; try again later."),
        Some("idempotency_key"),
    )
}
