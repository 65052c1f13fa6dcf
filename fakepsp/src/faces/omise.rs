//! The Omise face: Omise's Charges, Refunds and Search wire format over the [ledger]
//! (`ModelConfig::provider = Provider::Omise`). The charges, refunds, test tokens, time-driven
//! transitions, search lag and injected failures are the ledger's, exactly as on the Stripe face;
//! this module only reads Omise's requests and writes Omise's objects, errors and events. It
//! calls the ledger's provider-neutral operations (`Ledger::attempt_charge`,
//! `Ledger::attempt_refund`, the idempotency layer, `Ledger::insert`) after validating a request in
//! Omise's terms.
//!
//! Sources are `docs/psp-research.md` (Omise §1–§7) and the Omise pages it cites; the inspection
//! fields are this crate's own contract (its top-level docs). Each rule names what it follows; where Omise's
//! documentation says nothing, the rule says so and what the fake does instead:
//!
//! - **Authentication** ("Errors" → "Authentication failure", www.omise.co/api-errors; every
//!   example's `curl -u skey_…:`): HTTP Basic with the secret key as the user name. A missing or
//!   wrong key → 401 `{"object":"error","code":"authentication_failure",...}` before anything
//!   else is looked at. The password is ignored (Omise's examples send an empty one). Every
//!   request the face is handed is counted. `Omise-Version` is accepted and ignored: the face
//!   writes the 2019-05-29 shapes (`created_at`, `refunded_amount`) whatever it says.
//! - **Charge create** ("Charges API", www.omise.co/charges-api): `POST /charges`, form-encoded
//!   `amount` (smallest unit), `currency`, `card` (the test token), `capture` (`true`, Omise's
//!   default, or `false`: below), `authorization_type` (below), `description`, `metadata[...]`,
//!   `return_uri` (used only by the 3-D Secure cards, below; others ignore it and answer
//!   `return_uri: null` as before). A declined card is not an HTTP error: the charge is created and answered 200
//!   with `status` `failed` and a `failure_code` (notes §1: Omise's WooCommerce plugin; a failed
//!   test charge in omise-php's fixtures). Tokens behave as on the Stripe face (`behaviour`):
//!   approvals `successful`; `pm_card_visa_chargeDeclined` `failed` with `payment_rejected` and
//!   `pm_card_chargeDeclinedInsufficientFunds` with `insufficient_fund` (the failure codes of
//!   Omise's test cards, docs.omise.co/api-testing); `pm_fake_processing` and
//!   `pm_fake_requires_action` `pending` (the latter with an `authorize_uri` on no host, like a
//!   3-D Secure charge nobody can answer); the lost-response, slow and error-before-charge tokens
//!   as on the Stripe face.
//! - **3-D Secure** ("How to implement 3-D Secure", docs.omise.co/how-to-implement-3-D-Secure:
//!   "Make a charge … and provide a return_uri", "The response Charge object will contain …
//!   authorize_uri, you must redirect your user to this URL", the cardholder "will be redirected
//!   back to the URL provided in the return_uri"; the charge is then read again; omise-woocommerce:
//!   3-D Secure is `status == pending && !authorized && !paid && authorize_uri`): the Stripe
//!   face's 3-D Secure cards `pm_card_threeDSecure2Required` and `pm_card_authenticationRequired`
//!   ask for it on every charge. With a (non-empty) `return_uri` the charge is `pending`,
//!   `authorized: false`, `paid: false`, `authorize_uri` the fake's own page
//!   `<base_url>/_fake/authenticate/<chrg id>` (kept once answered) and `return_uri` as given.
//!   The page (`FakeModel::action_page`, the same page and HTML as the Stripe face's) answers
//!   *Complete* with a charge `successful` (or authorized, with `capture=false`) and *Fail* with a
//!   charge `failed`, `failure_code` `failed_processing` (UNCONFIRMED: no Omise page seen names a
//!   3-D Secure failure code; this is the general failure of Omise's failure-code list), each with
//!   `charge.complete` ("When completing 3DS payment, Omise will send a 'charge.complete' event",
//!   omise-woocommerce) and 303 to the `return_uri` exactly as given (Omise documents no query
//!   parameters added); a second answer is 409 and moves nothing. A page never answered
//!   expires the charge after `requires_action_for`, as `pm_fake_requires_action` does (below;
//!   UNCONFIRMED: Omise's own timeout for an abandoned 3-D Secure charge). Without a `return_uri`
//!   the charge is refused, 400 `invalid_charge`, nothing created (UNCONFIRMED: Omise documents
//!   `return_uri` as the step that makes 3-D Secure work and its support advises always sending
//!   one, omise/omise-php#52, but not the answer without it; a refusal keeps a 3-D Secure card
//!   from ever being charged unauthenticated). It is answered after the key, so it is stored.
//! - **Manual capture** ("Does Omise support Authorize and Hold only?": "set the parameter capture
//!   as false. This will authorize the charge but leave it pending", "An authorized charge will
//!   expire after 7 days", "If the authorization expires the capture will fail"; "Capture",
//!   docs.omise.co/capture: Full Manual Capture `authorization_type=final_auth`, the default, is a
//!   single full-amount capture; Single Partial Capture `pre_auth` only for merchants contracted
//!   with Omise Thailand; multiple partial captures are not supported): `capture=false`
//!   authorizes: `status` `pending`, `authorized: true`, `captured`/`paid: false`, `capturable`
//!   and `reversible` `true`, `expires_at` `authorization_expires_after` (7 days) ahead, plus
//!   `authorization_type`, `authorized_amount`, `captured_amount` (omise-go's `Charge` fields;
//!   they appear only on `capture=false` charges so that every other answer stays byte for byte
//!   what it was). `authorization_type` with `capture=true`, `pre_auth` in another currency than
//!   thb (the fake's Thai account), or another value → 400 `bad_request` (the fake's choice of
//!   code). `POST /charges/{id}/capture` takes only `capture_amount` (a positive integer, else
//!   400 `invalid_amount` before the key): without it the whole amount is captured; with it, only
//!   on a `pre_auth` charge and at most the authorized amount (else 400 `failed_capture`; the
//!   code for these two is UNCONFIRMED), the rest released. Captured, the charge is `successful`,
//!   `paid`, `captured_amount` the amount, `refundable` up to it, with `charge.capture` ([3P]
//!   mage2.pro; notes §4). A charge that is not an authorization (captured, reversed, failed,
//!   pending on 3-D Secure, automatic) → 400 `failed_capture` ("Failed Capture": "the charge may
//!   not be authorized or already captured", api-errors); a lapsed one → 400 `expired_charge`
//!   ("Expired Charge": capturing a charge whose authorization expired). `POST
//!   /charges/{id}/reverse` takes no parameters (any → 400 `bad_request`) and voids an
//!   authorization: `status` `reversed`, `reversed: true`, with `charge.reverse` (UNCONFIRMED
//!   event key); anything else → 400 `failed_reverse` (UNCONFIRMED: the code appears only on an
//!   unreliable third-party copy of Omise's pages, notes §2; the official list shows
//!   `failed_void` for refund voids). Both run under `Idempotency-Key` exactly as a create (and
//!   are ignored with it when `omise_honours_idempotency_key = false`), route `POST
//!   /charges/{id}/capture` or `/reverse`: replay, other parameters or endpoint → 400, in flight →
//!   409. An authorization not captured within `authorization_expires_after` is released: status
//!   `reversed` ("Capture", Japan page: uncaptured within the authorization period, "the amount is
//!   released automatically and the charge's status changes to reversed") with `expired: true`,
//!   and `charge.expire` (UNCONFIRMED event key). Omise Japan's period is 29 days ("Capture",
//!   Japan; notes §3 say 30); the fake uses the one knob every face shares.
//! - **Charge statuses** (notes §3: `successful`, `failed`, `pending`, `reversed`, `expired`, from
//!   omise-go-v2 and omise-java): a pending charge completes with a `charge.complete` event —
//!   `pm_fake_processing` → `successful` after `processing_for`; `pm_fake_requires_action`, and
//!   a 3-D Secure card whose page nobody answers, → `expired` with `failure_code` `timeout` after
//!   `requires_action_for` (3-D Secure never done: "payer did not act before charge
//!   expiration", Omise's Magento plugin error mapping).
//!   `reversed` is a reversed (voided) or lapsed authorization (below).
//! - **Tokens are reusable here.** Omise's tokens are single use ("Any attempt to re-use a token
//!   will result in a `used_token` error", api-errors); the Stripe face has no notion of a used
//!   payment method, and both faces share the tokens, so the fake never answers `used_token`:
//!   its tokens are reusable test tokens. What protects a re-send here is the idempotency key.
//! - **Unknown token** (omise-go's live test `TestCharge_Network_Invalid`: 404 `not_found`
//!   "token … was not found"): 404 `not_found`, nothing created.
//! - **Charge limits** ("Currency and amount", omise.co/en/currency-and-amount): per account
//!   country — thb 2 000 to 15 000 000, jpy 100 to 6 000 000, sgd 100 to 2 000 000, myr 100 to
//!   10 000 000 (smallest units); outside them → 400 `invalid_charge` (the code below the minimum
//!   is UNCONFIRMED; omise-go's live test shows `invalid_charge` for an unsupported currency,
//!   which any other currency gets). `ModelConfig::minimum_overrides` raise minimums as on the
//!   Stripe face.
//! - **Validation before the key**, as on the Stripe face: a refused request stores nothing under
//!   its key. Unknown parameters → 400 `bad_request` (Omise: "several types of invalid requests
//!   return `bad_request`"; refusing what the fake does not model is the fake's choice, as on the
//!   Stripe face), so are a `capture` that is not a boolean, a refused `authorization_type`
//!   (above) and malformed `metadata`; no `card` → 400 `missing_card`; a malformed `amount` → 400
//!   `invalid_charge`.
//! - **Idempotency** (`Idempotency-Key` on `POST /charges`, `POST /charges/{id}/refunds`,
//!   `/capture` and `/reverse`):
//!   **Omise's documentation does not confirm it** (notes §2; only an unreliable third-party page
//!   does). The fake implements the Stripe face's semantics anyway — the first answer replayed
//!   for the same endpoint and parameters (with the fake's `Idempotent-Replayed: true` header),
//!   other parameters or another endpoint → 400 `bad_request`, a key in flight → 409 (a status
//!   Omise does not list; code `conflict`), keys forgotten 24–48 h after — because payonce sends
//!   the header and a test must be able to see it work. With `omise_honours_idempotency_key =
//!   false` the face ignores the header (it is still recorded on what it creates), so a re-send
//!   creates again: what payonce must survive if Omise ignores it. `omise_honours_refund_keys =
//!   false` does the same for refund creates only.
//! - **Retrieve and search** ("Search", www.omise.co/search-query-and-filters): `GET
//!   /charges/{id}` is read-after-write. `GET /search?scope=charge&query=…&page=&per_page=&order=`
//!   matches `query` (case-insensitive, as a substring) against `description` (a documented
//!   attribute) and `metadata` values (UNCONFIRMED at Omise); 30 per page, newest first by
//!   default; `page` from 1 (`invalid_page` otherwise); another scope → 400 `invalid_scope`,
//!   `filters[...]` → 400 `invalid_filters` (not modelled). Search lags like the Stripe face's
//!   (Omise documents no freshness: notes §4): each charge, and each change to it (a status
//!   change, a refund), shows up after a random lag of up to `search_lag_max`.
//! - **Refunds** ("Refunds API", www.omise.co/refunds-api): `POST /charges/{id}/refunds` with
//!   `amount` (required; malformed or missing → 400 `invalid_amount`), `metadata[...]`, `void`
//!   (only `false`: voids are not modelled). An unknown charge → 404 `not_found`; a charge not
//!   `successful`, fully refunded, asked for more than is left, or already carrying 15 refunds
//!   (refundable only with "fewer than 15 refunds") → 400 `failed_refund` (listed under 400,
//!   api-errors). The refund object: `object` `refund`, `id` `rfnd_test_…`, `amount`, `currency`,
//!   `charge`, `voided` (always `false`), `metadata`, `created_at`, and the deprecated `status`:
//!   `closed` (the only value Omise shows, omise-php's fixture). The fates of the Stripe face's
//!   refund tokens are kept, in shapes Omise does not document (UNCONFIRMED): a
//!   `pm_fake_refund_pending` charge's refunds read `pending` until `refund_pending_for`, a
//!   `pm_card_refundFail` charge's read `closed`, then `failed` after `refund_fail_after` (their
//!   amount refundable again). Refund lists: `GET /charges/{id}/refunds?limit=&offset=&order=`
//!   (`limit` 1–100, default 20; `chronological` by default), read-after-write; `GET
//!   /charges/{id}/refunds/{rfnd_id}` retrieves one.
//! - **Events** ("Webhooks", docs.omise.co/api-webhooks; "Events API"): `{"object":"event","id":
//!   "evnt_test_…","key":…,"livemode":false,"created_at":…,"data":{…}}`: `charge.create` for
//!   every created charge, `charge.complete` when a pending charge completes (by itself or on the
//!   authentication page), `charge.capture`, `charge.reverse` and `charge.expire` (above),
//!   `refund.create` for every refund. Omise documents no event for a refund's later change; none is sent. The
//!   server signs them (`webhooks`): `Omise-Signature` = hex HMAC-SHA256 of
//!   `<Omise-Signature-Timestamp>.<body>` keyed with the base64-decoded secret.
//! - **Errors** ("The error object", api-errors): `{"object":"error","location":…,"code":…,
//!   "message":…}`. `pm_fake_error_before_charge` → 500 `internal_error` (Omise's 5xx body is
//!   undocumented), never stored under the key.
//!
//! [ledger]: crate::ledger

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::faces::dates::iso8601;
use crate::faces::form::{collect_metadata, parse_form, Params};
use crate::faces::page::{answer_page, AUTHENTICATE_PATH};
use crate::ledger::{
    is_valid_idempotency_key, millis, Attempt, CancelAttempt, CaptureAttempt, CaptureMethod,
    Decline, Face, Failure, Fingerprint, Handled, Hold, Intent, KeyRefusals, Ledger, ModelEvent,
    NewCharge, OnAction, PageAnswer, Refund, RefundAttempt, RefundStatus, Reply, Status,
    WireRequest, MAX_IDEMPOTENCY_KEY_LEN,
};

/// Where Omise's error objects point (`location`), followed by `#<code with hyphens>`.
const API_ERRORS: &str = "https://www.omise.co/api-errors";

/// Search answers this many charges per page unless `per_page` says otherwise ("Search":
/// 30 per page by default).
const SEARCH_PER_PAGE_DEFAULT: usize = 30;

/// A list answers this many objects unless `limit` says otherwise (Omise lists: default 20).
const LIST_LIMIT_DEFAULT: usize = 20;

/// The largest `limit` of a list (Omise lists: up to 100, notes §4), and of `per_page` in search
/// (Omise documents none).
const PAGE_SIZE_MAX: usize = 100;

/// A charge is refundable only with "fewer than 15 refunds" ("Refunds API").
const MAX_REFUNDS_PER_CHARGE: usize = 15;

/// The `failure_code` of a charge whose 3-D Secure was never done ("payer did not act before
/// charge expiration", Omise's Magento plugin error mapping).
const TIMEOUT_CODE: &str = "timeout";

/// Its `failure_message`, in the fake's words.
const TIMEOUT_MESSAGE: &str = "the payer did not authenticate before the charge expired";

/// The `failure_code` of a charge whose 3-D Secure the customer failed on the fake's page:
/// UNCONFIRMED (Omise's pages seen list no 3-D Secure failure code; this is the general "processing
/// failed" code of Omise's failure-code list, omise-magento `omise_error_mapping.xml`).
const AUTHENTICATION_FAILED_CODE: &str = "failed_processing";

/// Its `failure_message`, in the fake's words.
const AUTHENTICATION_FAILED_MESSAGE: &str = "3-D Secure authentication failed";

/// `authorization_type` of a manual capture that may capture less than authorized ("Capture":
/// Single Partial Capture, Omise Thailand merchants only).
const PRE_AUTH: &str = "pre_auth";

/// `authorization_type` of a manual capture captured in full only ("Capture": Full Manual
/// Capture, the default).
const FINAL_AUTH: &str = "final_auth";

/// The charge parameters the face understands besides `metadata[...]`.
const CHARGE_PARAMETERS: &[&str] = &[
    "amount",
    "authorization_type",
    "capture",
    "card",
    "currency",
    "description",
    "return_uri",
];

/// The refund parameters the face understands besides `metadata[...]`.
const REFUND_PARAMETERS: &[&str] = &["amount", "void"];

/// The capture parameters the face understands.
const CAPTURE_PARAMETERS: &[&str] = &["capture_amount"];

/// The Omise face's idempotency refusals (Omise documents none; see the module docs).
const KEY_REFUSALS: KeyRefusals = KeyRefusals {
    mismatch: idempotency_mismatch,
    in_use: idempotency_in_use,
};

/// The Omise face: the secret key it accepts, the raised minimums it enforces, and whether it
/// honours `Idempotency-Key` (see the module docs).
#[derive(Debug)]
pub(crate) struct OmiseFace {
    /// The only secret key accepted, as the HTTP Basic user name; anything else is 401.
    api_key: String,
    /// Per lowercase currency, a minimum charge above Omise's limits (minor units).
    minimum_overrides: BTreeMap<String, i64>,
    /// Whether `Idempotency-Key` works as on the Stripe face or is ignored.
    honours_idempotency_key: bool,
    /// Whether `Idempotency-Key` works on refund creates (when keys work at all).
    honours_refund_keys: bool,
    /// The fake's own base URL, where `authorize_uri` sends the customer.
    base_url: String,
    /// The charges created with `authorization_type=pre_auth` (the only ones a partial capture
    /// is allowed on). Omise's own word about a charge, so the face keeps it, not the ledger;
    /// a cell because the ledger asks for snapshots through `&self`.
    pre_auth: RefCell<BTreeSet<String>>,
}

impl OmiseFace {
    /// A face accepting `api_key`, enforcing `minimum_overrides` over Omise's limits, honouring
    /// keys as the two switches say, serving its authentication pages under `base_url`.
    pub(crate) fn new(
        api_key: String,
        minimum_overrides: BTreeMap<String, i64>,
        honours_idempotency_key: bool,
        honours_refund_keys: bool,
        base_url: String,
    ) -> Self {
        Self {
            api_key,
            minimum_overrides,
            honours_idempotency_key,
            honours_refund_keys,
            base_url,
            pre_auth: RefCell::new(BTreeSet::new()),
        }
    }

    /// Whether the charge `id` was created with `authorization_type=pre_auth`.
    fn is_pre_auth(&self, id: &str) -> bool {
        self.pre_auth.borrow().contains(id)
    }
}

impl Face for OmiseFace {
    fn name(&self) -> &'static str {
        "omise"
    }

    /// Routes a request of the Omise face: every request is counted and needs the secret key.
    fn handle(&mut self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        ledger.requests_seen += 1;
        // "Authentication failure": a key that is not valid fails before anything else.
        if !authorised(self, request.authorization) {
            return Handled::plain(error(
                401,
                "authentication_failure",
                "authentication failed",
            ));
        }
        let path = request.path.strip_prefix('/').unwrap_or(request.path);
        let segments: Vec<&str> = path.split('/').collect();
        match (request.method, segments.as_slice()) {
            ("POST", ["charges"]) => self.create_charge(ledger, request, now_ms),
            ("GET", ["charges", id]) if !id.is_empty() => {
                Handled::plain(retrieve_charge(self, ledger, id))
            }
            ("POST", ["charges", id, "capture"]) if !id.is_empty() => {
                self.capture_charge(ledger, id, request, now_ms)
            }
            ("POST", ["charges", id, "reverse"]) if !id.is_empty() => {
                self.reverse_charge(ledger, id, request, now_ms)
            }
            ("GET", ["search"]) => Handled::plain(search(ledger, request.query, now_ms)),
            ("POST", ["charges", id, "refunds"]) if !id.is_empty() => {
                self.create_refund(ledger, id, request, now_ms)
            }
            ("GET", ["charges", id, "refunds"]) if !id.is_empty() => {
                Handled::plain(list_refunds(ledger, id, request.query))
            }
            ("GET", ["charges", id, "refunds", refund]) if !id.is_empty() => {
                Handled::plain(retrieve_refund(ledger, id, refund))
            }
            _ => Handled::plain(error(
                404,
                "not_found",
                &format!(
                    "the fake PSP's Omise face does not serve {} {}",
                    request.method, request.path
                ),
            )),
        }
    }

    /// `chrg_test_...`.
    fn new_charge_id(&self, ledger: &mut Ledger) -> String {
        new_id(ledger, "chrg")
    }

    /// `rfnd_test_...`.
    fn new_refund_id(&self, ledger: &mut Ledger, _charge_id: &str) -> String {
        new_id(ledger, "rfnd")
    }

    fn search_snapshot(&self, ledger: &Ledger, index: usize) -> Value {
        charge_json_at(self, ledger, index)
    }

    /// `charge.complete` when a pending charge completes (by itself, or on the authentication
    /// page), `charge.expire` when an authorization lapsed uncaptured. A refund's later change
    /// sends nothing: Omise documents no event for it.
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        let key = if ledger.intents[index].authorization_lapsed() {
            "charge.expire"
        } else {
            "charge.complete"
        };
        let object = charge_json_at(self, ledger, index);
        vec![event(ledger, key, object, at_ms)]
    }

    /// The authentication page of a 3-D Secure charge waiting in `pending`: `GET` shows the
    /// amount and two buttons, `POST result=complete|fail` answers it once and sends the customer
    /// back to the `return_uri` as given (Omise: "redirected back to the URL provided in the
    /// return_uri"). Unknown → 404; not waiting (any more) → 409, nothing changes.
    fn action_page(
        &self,
        ledger: &mut Ledger,
        charge_id: &str,
        form: Option<&[u8]>,
        now_ms: i64,
    ) -> PageAnswer {
        answer_page(self, ledger, charge_id, form, now_ms)
    }

    fn charge_status(&self, intent: &Intent) -> &'static str {
        charge_status(intent)
    }

    fn refund_status(&self, status: RefundStatus) -> &'static str {
        refund_status(status)
    }
}

impl OmiseFace {
    /// `POST /charges`: validated before the key, then run under it.
    fn create_charge(
        &self,
        ledger: &mut Ledger,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        let (key, recorded) = match request_key(self, request.idempotency_key) {
            Ok(keys) => keys,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: "POST /charges".to_owned(),
            params: params.clone(),
        };
        let validate = || charge_params(self, &params);
        let run = |ledger: &mut Ledger, charge| self.run_charge(ledger, charge, recorded, now_ms);
        ledger.validated(KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Makes the charge a validated request asks for; a declined card is a `failed` charge, 200.
    fn run_charge(
        &self,
        ledger: &mut Ledger,
        (charge, pre_auth): (NewCharge, bool),
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let token = charge.payment_method.clone();
        match ledger.attempt_charge(self, charge, key, now_ms) {
            Attempt::UnknownMethod => Handled::plain(error(
                404,
                "not_found",
                &format!("token {token} was not found"),
            )),
            Attempt::FailedBeforeCharge => Handled::plain(error(
                500,
                "internal_error",
                "an unexpected error occurred before the charge was attempted (fake PSP: \
                 pm_fake_error_before_charge); nothing was charged, the request can be retried",
            )),
            Attempt::Made {
                mut intent,
                delivery,
            } => {
                // A card that needs 3-D Secure, and no return_uri to send the customer back to.
                if intent.status == Status::RequiresPaymentMethod
                    && intent.failure == Some(Failure::AuthenticationRequired)
                {
                    return Handled::plain(invalid_charge(
                        "return_uri is required: the card needs 3-D Secure authentication",
                    ));
                }
                if intent.status == Status::RequiresAction && intent.return_url.is_some() {
                    intent.action_url = Some(format!(
                        "{}{AUTHENTICATE_PATH}/{}",
                        self.base_url, intent.id
                    ));
                    // A challenge nobody answers expires (`expired`, `timeout`), as Omise's
                    // pending charges do.
                    let lapses_ms =
                        now_ms.saturating_add(millis(ledger.timings().requires_action_for));
                    intent.due_ms.get_or_insert(lapses_ms);
                }
                if pre_auth {
                    self.pre_auth.borrow_mut().insert(intent.id.clone());
                }
                let object = charge_json(&intent, &[], pre_auth);
                let event = event(ledger, "charge.create", object.clone(), now_ms);
                ledger.insert(self, *intent, now_ms);
                Handled {
                    reply: Reply::json(200, &object),
                    replayed: false,
                    delivery,
                    events: vec![event],
                }
            }
        }
    }

    /// `POST /charges/{id}/refunds`: validated before the key, then run under it.
    fn create_refund(
        &self,
        ledger: &mut Ledger,
        charge: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        let (key, recorded) = match request_key(self, request.idempotency_key) {
            Ok((_, recorded)) if !self.honours_refund_keys => (None, recorded),
            Ok(keys) => keys,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: format!("POST /charges/{charge}/refunds"),
            params: params.clone(),
        };
        let validate = || refund_params(&params);
        let run = |ledger: &mut Ledger, (amount, metadata)| {
            self.run_refund(ledger, charge, amount, metadata, recorded, now_ms)
        };
        ledger.validated(KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Refunds `amount` of a successful charge if that much is left.
    fn run_refund(
        &self,
        ledger: &mut Ledger,
        charge: &str,
        amount: i64,
        metadata: BTreeMap<String, String>,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        if ledger
            .refunds_of
            .get(charge)
            .is_some_and(|refunds| refunds.len() >= MAX_REFUNDS_PER_CHARGE)
        {
            return Handled::plain(failed_refund(&format!(
                "charge {charge} already has {MAX_REFUNDS_PER_CHARGE} refunds"
            )));
        }
        let attempt =
            ledger.attempt_refund(self, charge, Some(amount), None, metadata, key, now_ms);
        let position = match attempt {
            RefundAttempt::NoSuchCharge => return Handled::plain(no_such_charge(charge)),
            RefundAttempt::NotRefundable => {
                return Handled::plain(failed_refund(&format!(
                    "charge {charge} is not successful, so it cannot be refunded"
                )))
            }
            RefundAttempt::AlreadyRefunded { .. } => {
                return Handled::plain(failed_refund(&format!(
                    "charge {charge} has been fully refunded"
                )))
            }
            RefundAttempt::Exceeds {
                amount, unrefunded, ..
            } => {
                return Handled::plain(failed_refund(&format!(
                    "amount {amount} exceeds the {unrefunded} left to refund on charge {charge}"
                )))
            }
            RefundAttempt::Made(position) => position,
        };
        let object = refund_json(&ledger.refunds[position]);
        let event = event(ledger, "refund.create", object.clone(), now_ms);
        // The charge changed (`refunded_amount`, `refunds`): search shows it after its lag.
        if let Some(&index) = ledger.by_id.get(charge) {
            ledger.record_search_version(self, index, now_ms);
        }
        Handled::now(Reply::json(200, &object), vec![event])
    }

    /// `POST /charges/{id}/capture` (`capture_amount`): validated before the key, then run
    /// under it like a create.
    fn capture_charge(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        let (key, recorded) = match request_key(self, request.idempotency_key) {
            Ok(keys) => keys,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: format!("POST /charges/{id}/capture"),
            params: params.clone(),
        };
        let validate = || capture_params(&params);
        let run =
            |ledger: &mut Ledger, amount| self.run_capture(ledger, id, amount, recorded, now_ms);
        ledger.validated(KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Captures an authorized charge: in full, or (`pre_auth` only) `capture_amount` of it.
    fn run_capture(
        &self,
        ledger: &mut Ledger,
        id: &str,
        amount: Option<i64>,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let Some(&index) = ledger.by_id.get(id) else {
            return Handled::plain(no_such_charge(id));
        };
        let intent = &ledger.intents[index];
        if intent.authorization_lapsed() {
            return Handled::plain(error(
                400,
                "expired_charge",
                &format!("charge {id} expired: its authorization lapsed uncaptured"),
            ));
        }
        if intent.status != Status::RequiresCapture {
            return Handled::plain(failed_capture(&format!(
                "charge {id} is {}: only an authorized, uncaptured charge can be captured",
                charge_status(intent)
            )));
        }
        if let Some(amount) = amount {
            if !self.is_pre_auth(id) {
                return Handled::plain(failed_capture(&format!(
                    "capture_amount is only allowed on a charge with authorization_type=pre_auth;                      charge {id} is captured in full"
                )));
            }
            if amount > intent.amount {
                return Handled::plain(failed_capture(&format!(
                    "capture_amount {amount} exceeds the {} authorized on charge {id}",
                    intent.amount
                )));
            }
        }
        match ledger.capture(self, id, amount, key, now_ms) {
            CaptureAttempt::NoSuchCharge => Handled::plain(no_such_charge(id)),
            // Both answered above; kept total.
            CaptureAttempt::UnexpectedState(_) | CaptureAttempt::Exceeds => {
                Handled::plain(failed_capture(&format!("charge {id} cannot be captured")))
            }
            CaptureAttempt::Made(index) => {
                let object = charge_json_at(self, ledger, index);
                let event = event(ledger, "charge.capture", object.clone(), now_ms);
                Handled::now(Reply::json(200, &object), vec![event])
            }
        }
    }

    /// `POST /charges/{id}/reverse` (no parameters): validated before the key, then run under
    /// it like a create.
    fn reverse_charge(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        let (key, recorded) = match request_key(self, request.idempotency_key) {
            Ok(keys) => keys,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: format!("POST /charges/{id}/reverse"),
            params: params.clone(),
        };
        let validate = || match params.keys().next() {
            Some(unknown) => Err(bad_request(&format!(
                "unknown parameter: {unknown} (the fake PSP refuses what it does not model)"
            ))),
            None => Ok(()),
        };
        let run = |ledger: &mut Ledger, ()| self.run_reverse(ledger, id, recorded, now_ms);
        ledger.validated(KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Reverses (voids) an authorized, uncaptured charge; the hold is released.
    fn run_reverse(
        &self,
        ledger: &mut Ledger,
        id: &str,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let Some(&index) = ledger.by_id.get(id) else {
            return Handled::plain(no_such_charge(id));
        };
        let intent = &ledger.intents[index];
        if intent.status != Status::RequiresCapture {
            return Handled::plain(failed_reverse(&format!(
                "charge {id} is {}: only an authorized, uncaptured charge can be reversed",
                charge_status(intent)
            )));
        }
        match ledger.cancel(self, id, None, key, now_ms) {
            CancelAttempt::NoSuchCharge => Handled::plain(no_such_charge(id)),
            // Answered above; kept total.
            CancelAttempt::NotCancelable(_) => {
                Handled::plain(failed_reverse(&format!("charge {id} cannot be reversed")))
            }
            CancelAttempt::Canceled(index) => {
                let object = charge_json_at(self, ledger, index);
                let event = event(ledger, "charge.reverse", object.clone(), now_ms);
                Handled::now(Reply::json(200, &object), vec![event])
            }
        }
    }
}

/// `GET /charges/{id}`: read-after-write.
fn retrieve_charge(face: &OmiseFace, ledger: &Ledger, id: &str) -> Reply {
    match ledger.by_id.get(id) {
        Some(&index) => Reply::json(200, &charge_json_at(face, ledger, index)),
        None => no_such_charge(id),
    }
}

/// The charge at `index` as Omise serialises it, with its refunds as they are now.
fn charge_json_at(face: &OmiseFace, ledger: &Ledger, index: usize) -> Value {
    let intent = &ledger.intents[index];
    let pre_auth = face.is_pre_auth(&intent.id);
    charge_json(intent, &refunds_of_charge(ledger, &intent.id), pre_auth)
}

/// The refunds of a charge, oldest first.
fn refunds_of_charge<'l>(ledger: &'l Ledger, charge: &str) -> Vec<&'l Refund> {
    ledger
        .refunds_of
        .get(charge)
        .map(|positions| positions.iter().map(|&p| &ledger.refunds[p]).collect())
        .unwrap_or_default()
}

/// `GET /search?scope=charge&query=…[&page=N][&per_page=N][&order=…]`: what the search
/// index shows at `now_ms`.
fn search(ledger: &Ledger, query: Option<&str>, now_ms: i64) -> Reply {
    let params = parse_form(query.unwrap_or_default().as_bytes());
    if params.keys().any(|name| name.starts_with("filters")) {
        return error(
            400,
            "invalid_filters",
            "the fake PSP does not implement search filters",
        );
    }
    if let Some(unknown) = params
        .keys()
        .find(|name| !["scope", "query", "page", "per_page", "order"].contains(&name.as_str()))
    {
        return bad_request(&format!("unknown parameter: {unknown}"));
    }
    if params.get("scope").map(String::as_str) != Some("charge") {
        return error(
            400,
            "invalid_scope",
            "scope must be charge, the only one the fake PSP models",
        );
    }
    let page = match params.get("page").map(|page| page.parse::<usize>()) {
        None => 1,
        Some(Ok(page)) if page >= 1 => page,
        Some(_) => return error(400, "invalid_page", "page must be a positive integer"),
    };
    let per_page = match parse_limit(&params, "per_page", SEARCH_PER_PAGE_DEFAULT) {
        Ok(per_page) => per_page,
        Err(reply) => return reply,
    };
    let newest_first = match order(&params, "reverse_chronological") {
        Ok(newest_first) => newest_first,
        Err(reply) => return reply,
    };
    let text = params
        .get("query")
        .map(|text| text.to_lowercase())
        .unwrap_or_default();
    let mut matches: Vec<&Value> = ledger
        .intents
        .iter()
        .filter_map(|intent| intent.searchable_at(now_ms))
        .filter(|snapshot| search_matches(snapshot, &text))
        .collect();
    if newest_first {
        matches.reverse();
    }
    let total = matches.len();
    let data: Vec<Value> = matches
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .cloned()
        .collect();
    Reply::json(
        200,
        &json!({
            "object": "search",
            "location": "/search",
            "scope": "charge",
            "query": params.get("query").cloned().unwrap_or_default(),
            "filters": {},
            "order": if newest_first { "reverse_chronological" } else { "chronological" },
            "page": page,
            "per_page": per_page,
            "total": total,
            "total_pages": total.div_ceil(per_page),
            "data": data,
        }),
    )
}

/// `GET /charges/{id}/refunds[?limit=N][&offset=N][&order=…]`: read-after-write.
fn list_refunds(ledger: &Ledger, charge: &str, query: Option<&str>) -> Reply {
    let params = parse_form(query.unwrap_or_default().as_bytes());
    if let Some(unknown) = params
        .keys()
        .find(|name| !["limit", "offset", "order"].contains(&name.as_str()))
    {
        return bad_request(&format!("unknown parameter: {unknown}"));
    }
    if !ledger.by_id.contains_key(charge) {
        return no_such_charge(charge);
    }
    let limit = match parse_limit(&params, "limit", LIST_LIMIT_DEFAULT) {
        Ok(limit) => limit,
        Err(reply) => return reply,
    };
    let offset = match params.get("offset").map(|offset| offset.parse::<usize>()) {
        None => 0,
        Some(Ok(offset)) => offset,
        Some(Err(_)) => return bad_request("offset must be a non-negative integer"),
    };
    let newest_first = match order(&params, "chronological") {
        Ok(newest_first) => newest_first,
        Err(reply) => return reply,
    };
    let mut refunds = refunds_of_charge(ledger, charge);
    if newest_first {
        refunds.reverse();
    }
    let total = refunds.len();
    let data: Vec<Value> = refunds
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(refund_json)
        .collect();
    Reply::json(
        200,
        &json!({
            "object": "list",
            "location": format!("/charges/{charge}/refunds"),
            "order": if newest_first { "reverse_chronological" } else { "chronological" },
            "limit": limit,
            "offset": offset,
            "total": total,
            "data": data,
        }),
    )
}

/// `GET /charges/{id}/refunds/{rfnd_id}`: read-after-write.
fn retrieve_refund(ledger: &Ledger, charge: &str, id: &str) -> Reply {
    match ledger.refund_by_id.get(id).map(|&p| &ledger.refunds[p]) {
        Some(refund) if refund.payment_intent == charge => Reply::json(200, &refund_json(refund)),
        _ => error(404, "not_found", &format!("refund {id} was not found")),
    }
}

/// An Omise event of `key` about `data` (the object as it is at `at_ms`).
fn event(ledger: &mut Ledger, key: &str, data: Value, at_ms: i64) -> ModelEvent {
    let id = new_id(ledger, "evnt");
    let body = json!({
        "object": "event",
        "id": id,
        "livemode": false,
        "location": format!("/events/{id}"),
        "key": key,
        "created_at": iso8601(at_ms.div_euclid(1000)),
        "data": data,
    });
    ModelEvent {
        id,
        kind: key.to_owned(),
        body: body.to_string(),
    }
}

/// `<prefix>_test_` followed by 19 random lowercase alphanumerics, like Omise's test-mode
/// ids (`chrg_test_4yq7duw15p9hdrjp8oq`, matching `/chrg(_test)?_[0-9a-z]+/`).
fn new_id(ledger: &mut Ledger, prefix: &str) -> String {
    let rng = &mut ledger.rng;
    let mut id = String::with_capacity(prefix.len() + 25);
    id.push_str(prefix);
    id.push_str("_test_");
    id.extend(std::iter::repeat_with(|| rng.digit(36)).take(19));
    id
}

/// Whether `authorization` is HTTP Basic with the secret key as the user name (any password).
fn authorised(config: &OmiseFace, authorization: Option<&str>) -> bool {
    let Some((scheme, credentials)) = authorization.and_then(|value| value.trim().split_once(' '))
    else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    base64::engine::general_purpose::STANDARD
        .decode(credentials.trim())
        .ok()
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .is_some_and(|text| {
            text.split_once(':')
                .is_some_and(|(user, _password)| user == config.api_key)
        })
}

/// The key a create runs under (`None` when the face ignores keys) and the one it records on
/// what it creates; a malformed key is refused only when keys are honoured.
fn request_key(
    config: &OmiseFace,
    raw: Option<&str>,
) -> Result<(Option<String>, Option<String>), Reply> {
    let recorded = raw.map(str::to_owned);
    if !config.honours_idempotency_key {
        return Ok((None, recorded));
    }
    match raw {
        None => Ok((None, None)),
        Some(key) if is_valid_idempotency_key(key) => Ok((recorded.clone(), recorded)),
        Some(_) => Err(bad_request(&format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters"
        ))),
    }
}

/// Validates a charge create in Omise's terms (see the module docs for each refusal); with it,
/// whether the charge is a `pre_auth` authorization.
fn charge_params(config: &OmiseFace, params: &Params) -> Result<(NewCharge, bool), Reply> {
    if let Some(unknown) = params
        .keys()
        .find(|name| !CHARGE_PARAMETERS.contains(&name.as_str()) && !name.starts_with("metadata"))
    {
        return Err(bad_request(&format!(
            "unknown parameter: {unknown} (the fake PSP refuses what it does not model)"
        )));
    }
    let amount = match params.get("amount").map(|amount| amount.parse::<i64>()) {
        Some(Ok(amount)) if amount >= 1 => amount,
        Some(_) => return Err(invalid_charge("amount must be a positive integer")),
        None => return Err(invalid_charge("amount is required")),
    };
    let currency = params
        .get("currency")
        .map(|currency| currency.to_ascii_lowercase())
        .unwrap_or_default();
    let Some((minimum, maximum)) = crate::currency::omise_limits_minor(&currency) else {
        return Err(invalid_charge("currency is currently not supported"));
    };
    let Some(card) = params.get("card").filter(|card| !card.is_empty()) else {
        return Err(error(400, "missing_card", "request contains no card"));
    };
    let capture_method = match params.get("capture").map(String::as_str) {
        None | Some("true") => CaptureMethod::Automatic,
        Some("false") => CaptureMethod::Manual,
        Some(other) => return Err(bad_request(&format!("capture must be a boolean: {other}"))),
    };
    let pre_auth = match params.get("authorization_type").map(String::as_str) {
        None => false,
        Some(_) if capture_method == CaptureMethod::Automatic => {
            return Err(bad_request(
                "authorization_type is only allowed with capture=false (a manual capture)",
            ))
        }
        Some(FINAL_AUTH) => false,
        Some(PRE_AUTH) if currency == "thb" => true,
        Some(PRE_AUTH) => {
            return Err(bad_request(
                "authorization_type=pre_auth (single partial capture) is only available to \
                 merchants contracted with Omise Thailand (currency thb)",
            ))
        }
        Some(other) => {
            return Err(bad_request(&format!(
                "authorization_type must be {FINAL_AUTH} or {PRE_AUTH}: {other}"
            )))
        }
    };
    // A card that needs 3-D Secure waits for the customer only if there is somewhere to send
    // them back to; without a return_uri the charge is refused (see the module docs).
    let on_action = match params.get("return_uri").filter(|uri| !uri.is_empty()) {
        Some(return_uri) => OnAction::Wait {
            return_url: Some(return_uri.clone()),
        },
        None => OnAction::Fail,
    };
    let metadata = collect_metadata(params)
        .map_err(|name| bad_request(&format!("invalid metadata parameter: {name}")))?;
    let minimum = config
        .minimum_overrides
        .get(&currency)
        .map_or(minimum, |&raised| raised.max(minimum));
    if amount < minimum {
        return Err(invalid_charge(&format!(
            "amount must be at least {minimum} (in the smallest unit of {currency})"
        )));
    }
    if amount > maximum {
        return Err(invalid_charge(&format!(
            "amount must be at most {maximum} (in the smallest unit of {currency})"
        )));
    }
    let charge = NewCharge {
        amount,
        currency,
        payment_method: card.clone(),
        description: params.get("description").cloned(),
        metadata,
        // Omise charges a card when it is created; there is no unconfirmed charge.
        confirm: true,
        capture_method,
        on_action,
        hold: Hold::default(),
    };
    Ok((charge, pre_auth))
}

/// Validates a capture in Omise's terms: only `capture_amount`, a positive integer, if given.
fn capture_params(params: &Params) -> Result<Option<i64>, Reply> {
    if let Some(unknown) = params
        .keys()
        .find(|name| !CAPTURE_PARAMETERS.contains(&name.as_str()))
    {
        return Err(bad_request(&format!(
            "unknown parameter: {unknown} (the fake PSP refuses what it does not model)"
        )));
    }
    match params
        .get("capture_amount")
        .map(|amount| amount.parse::<i64>())
    {
        None => Ok(None),
        Some(Ok(amount)) if amount >= 1 => Ok(Some(amount)),
        Some(_) => Err(error(
            400,
            "invalid_amount",
            "capture_amount must be a positive integer",
        )),
    }
}

/// Validates a refund create in Omise's terms: its amount and metadata.
fn refund_params(params: &Params) -> Result<(i64, BTreeMap<String, String>), Reply> {
    if let Some(unknown) = params
        .keys()
        .find(|name| !REFUND_PARAMETERS.contains(&name.as_str()) && !name.starts_with("metadata"))
    {
        return Err(bad_request(&format!(
            "unknown parameter: {unknown} (the fake PSP refuses what it does not model)"
        )));
    }
    let amount = match params.get("amount").map(|amount| amount.parse::<i64>()) {
        Some(Ok(amount)) if amount >= 1 => amount,
        Some(_) => {
            return Err(error(
                400,
                "invalid_amount",
                "amount must be a positive integer",
            ))
        }
        None => return Err(error(400, "invalid_amount", "amount is required")),
    };
    match params.get("void").map(String::as_str) {
        None | Some("false") => {}
        Some(_) => {
            return Err(bad_request(
                "void is not modelled by the fake PSP: only void=false is accepted",
            ))
        }
    }
    let metadata = collect_metadata(params)
        .map_err(|name| bad_request(&format!("invalid metadata parameter: {name}")))?;
    Ok((amount, metadata))
}

/// `name` as a page size: `default` when absent, else 1 to 100.
fn parse_limit(params: &Params, name: &str, default: usize) -> Result<usize, Reply> {
    match params.get(name).map(|limit| limit.parse::<usize>()) {
        None => Ok(default),
        Some(Ok(limit)) if (1..=PAGE_SIZE_MAX).contains(&limit) => Ok(limit),
        Some(_) => Err(bad_request(&format!(
            "{name} must be an integer from 1 to {PAGE_SIZE_MAX}"
        ))),
    }
}

/// Whether `order` asks for newest first (`reverse_chronological`); `default` when absent.
fn order(params: &Params, default: &str) -> Result<bool, Reply> {
    match params.get("order").map_or(default, String::as_str) {
        "chronological" => Ok(false),
        "reverse_chronological" => Ok(true),
        other => Err(bad_request(&format!(
            "order must be chronological or reverse_chronological: {other}"
        ))),
    }
}

/// Whether a charge snapshot matches a search text (lowercase): in its `description` or any
/// `metadata` value, as a substring; an empty text matches every charge.
fn search_matches(snapshot: &Value, text: &str) -> bool {
    let contains = |value: &Value| {
        value
            .as_str()
            .is_some_and(|value| value.to_lowercase().contains(text))
    };
    text.is_empty()
        || contains(&snapshot["description"])
        || snapshot["metadata"]
            .as_object()
            .is_some_and(|metadata| metadata.values().any(contains))
}

/// The charge's `status` in Omise's words: `successful`, `failed`, `pending`, `expired` (3-D
/// Secure never done) or `reversed` (cancelled).
fn charge_status(intent: &Intent) -> &'static str {
    match intent.status {
        Status::Succeeded => "successful",
        // An authorization not yet captured is `pending` too (with `authorized: true`).
        Status::RequiresConfirmation
        | Status::RequiresAction
        | Status::Processing
        | Status::RequiresCapture => "pending",
        Status::RequiresPaymentMethod => match intent.failure {
            Some(Failure::AuthenticationRequired) => "expired",
            Some(Failure::Declined(_) | Failure::AuthenticationFailed) | None => "failed",
        },
        Status::Canceled => "reversed",
    }
}

/// The refund's deprecated `status` in Omise's words: `closed` (done; the only value Omise
/// shows), `pending` or `failed` (the Stripe face's fates, UNCONFIRMED at Omise).
fn refund_status(status: RefundStatus) -> &'static str {
    match status {
        RefundStatus::Succeeded => "closed",
        RefundStatus::Pending => "pending",
        RefundStatus::Failed => "failed",
    }
}

/// A charge as Omise serialises it (shape of omise-go's `charges-post` fixture, API version
/// 2019-05-29), with `refunds` its refunds oldest first; `pre_auth` for a charge created with
/// `authorization_type=pre_auth`. A manual capture (`capture=false`) also carries
/// `authorization_type`, `authorized_amount`, `captured_amount`, `capturable`, `reversible`
/// and `expires_at` (omise-go's `Charge`); automatic captures leave them out, so that their
/// answers stay byte for byte what they were.
fn charge_json(intent: &Intent, refunds: &[&Refund], pre_auth: bool) -> Value {
    let status = charge_status(intent);
    let successful = status == "successful";
    let manual = intent.capture_method == CaptureMethod::Manual;
    // Held and not captured: what a capture or a reverse may act on.
    let held = intent.status == Status::RequiresCapture;
    let lapsed = intent.authorization_lapsed();
    let refunded_amount: i64 = refunds
        .iter()
        .filter(|refund| refund.status.holds_amount())
        .map(|refund| refund.amount)
        .sum();
    let (failure_code, failure_message) = match intent.failure {
        Some(Failure::Declined(decline)) => {
            let (code, message) = decline_failure(decline);
            (Some(code), Some(message))
        }
        Some(Failure::AuthenticationRequired) => (Some(TIMEOUT_CODE), Some(TIMEOUT_MESSAGE)),
        Some(Failure::AuthenticationFailed) => (
            Some(AUTHENTICATION_FAILED_CODE),
            Some(AUTHENTICATION_FAILED_MESSAGE),
        ),
        None => (None, None),
    };
    let location = format!("/charges/{}", intent.id);
    // A 3-D Secure charge sends the customer to the fake's own page, and keeps the URI once
    // answered; `pm_fake_requires_action` waits at a URI with no host (no page to send anyone
    // to) while it waits.
    let authorize_uri = intent.action_url.clone().or_else(|| {
        (intent.status == Status::RequiresAction)
            .then(|| format!("https://fake-psp.invalid/payments/{}/authorize", intent.id))
    });
    let data: Vec<Value> = refunds
        .iter()
        .take(LIST_LIMIT_DEFAULT)
        .map(|refund| refund_json(refund))
        .collect();
    let mut object = json!({
        "object": "charge",
        "id": intent.id,
        "location": location,
        "livemode": false,
        "amount": intent.amount,
        "currency": intent.currency,
        "description": intent.description,
        "metadata": intent.metadata,
        "status": status,
        "capture": !manual,
        // Reversed charges were all authorizations first (only those can be reversed here).
        "authorized": successful || held || status == "reversed",
        "captured": successful,
        "paid": successful,
        "reversed": status == "reversed",
        "expired": status == "expired" || lapsed,
        "refundable": successful && refunded_amount < intent.amount_received(),
        "failure_code": failure_code,
        "failure_message": failure_message,
        "authorize_uri": authorize_uri,
        "return_uri": intent.return_url,
        "refunded_amount": refunded_amount,
        "refunds": {
            "object": "list",
            "location": format!("{location}/refunds"),
            "order": "chronological",
            "limit": LIST_LIMIT_DEFAULT,
            "offset": 0,
            "total": refunds.len(),
            "data": data,
        },
        "created_at": iso8601(intent.created),
    });
    if manual {
        let authorized = successful || held || status == "reversed";
        object["authorization_type"] = json!(if pre_auth { PRE_AUTH } else { FINAL_AUTH });
        object["authorized_amount"] = json!(if authorized { intent.amount } else { 0 });
        object["captured_amount"] = json!(intent.amount_received());
        object["capturable"] = json!(held);
        object["reversible"] = json!(held);
        object["expires_at"] = json!(intent
            .capture_before_ms
            .map(|ms| iso8601(ms.div_euclid(1000))));
    }
    object
}

/// Omise's `failure_code` for a decline, one its test cards produce ("Testing" page,
/// docs.omise.co/api-testing: `insufficient_fund`, `stolen_or_lost_card`, `failed_processing`,
/// `payment_rejected`), and the `failure_message` sent with it: the fake's wording (the Omise
/// pages seen do not show the messages; payonce reads only the code).
fn decline_failure(decline: Decline) -> (&'static str, &'static str) {
    match decline {
        // Omise's Magento plugin mapping (omise_error_mapping.xml): "rejected by issuer".
        Decline::Generic => ("payment_rejected", "payment was rejected by the issuer"),
        Decline::InsufficientFunds => (
            "insufficient_fund",
            "insufficient funds in the account or the card has reached the credit limit",
        ),
    }
}

/// A refund as Omise serialises it ("Refunds API"; omise-php's `refunds-post` fixture).
fn refund_json(refund: &Refund) -> Value {
    json!({
        "object": "refund",
        "id": refund.id,
        "location": format!("/charges/{}/refunds/{}", refund.payment_intent, refund.id),
        "livemode": false,
        "amount": refund.amount,
        "currency": refund.currency,
        "charge": refund.payment_intent,
        "status": refund_status(refund.status),
        "voided": false,
        "metadata": refund.metadata,
        "transaction": null,
        "created_at": iso8601(refund.created),
    })
}

/// An Omise error object ("The error object": `object`, `location`, `code`, `message`).
fn error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(
        status,
        &json!({
            "object": "error",
            "location": format!("{API_ERRORS}#{}", code.replace('_', "-")),
            "code": code,
            "message": message,
        }),
    )
}

/// 400 `bad_request` ("several types of invalid requests return `bad_request`").
fn bad_request(message: &str) -> Reply {
    error(400, "bad_request", message)
}

/// 400 `invalid_charge`: the charge request is invalid (amount, currency).
fn invalid_charge(message: &str) -> Reply {
    error(400, "invalid_charge", message)
}

/// 400 `failed_capture` ("Failed Capture": the charge could not be captured, e.g. it is not
/// authorized or already captured).
fn failed_capture(message: &str) -> Reply {
    error(400, "failed_capture", message)
}

/// 400 `failed_reverse`: the charge cannot be reversed (the code is UNCONFIRMED; see the module
/// docs).
fn failed_reverse(message: &str) -> Reply {
    error(400, "failed_reverse", message)
}

/// 400 `failed_refund`: the charge cannot be refunded that much.
fn failed_refund(message: &str) -> Reply {
    error(400, "failed_refund", message)
}

/// 404 `not_found` for an unknown charge ("Not found": "… was not found").
fn no_such_charge(id: &str) -> Reply {
    error(404, "not_found", &format!("charge {id} was not found"))
}

/// 400 `bad_request` for a key first used with other parameters or on another endpoint (the
/// Stripe face's rule; Omise documents no answer).
fn idempotency_mismatch(key: &str) -> Reply {
    bad_request(&format!(
        "Idempotency-Key {key} was first used with other parameters or on another endpoint \
         (fake PSP: the Stripe face's rule; Omise documents none)"
    ))
}

/// 409 `conflict` for a key whose request is still running (the Stripe face's rule; Omise
/// documents no answer, nor the status).
fn idempotency_in_use(key: &str) -> Reply {
    error(
        409,
        "conflict",
        &format!(
            "another request with Idempotency-Key {key} is still running (fake PSP: the \
             Stripe face's rule; Omise documents none); try again later"
        ),
    )
}
