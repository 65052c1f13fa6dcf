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
//!   default), `description`, `metadata[...]`, `return_uri` (accepted, unused: the fake has no
//!   redirect flow). A declined card is not an HTTP error: the charge is created and answered 200
//!   with `status` `failed` and a `failure_code` (notes §1: Omise's WooCommerce plugin; a failed
//!   test charge in omise-php's fixtures). Tokens behave as on the Stripe face (`behaviour`):
//!   approvals `successful`; `pm_card_visa_chargeDeclined` `failed` with `payment_rejected` and
//!   `pm_card_chargeDeclinedInsufficientFunds` with `insufficient_fund` (the failure codes of
//!   Omise's test cards, docs.omise.co/api-testing); `pm_fake_processing` and
//!   `pm_fake_requires_action` `pending` (the latter with an `authorize_uri`, like a 3-D Secure
//!   charge); the lost-response, slow and error-before-charge tokens as on the Stripe face.
//! - **Charge statuses** (notes §3: `successful`, `failed`, `pending`, `reversed`, `expired`, from
//!   omise-go-v2 and omise-java): a pending charge completes with a `charge.complete` event —
//!   `pm_fake_processing` → `successful` after `processing_for`; `pm_fake_requires_action` →
//!   `expired` with `failure_code` `timeout` after `requires_action_for` (3-D Secure never done:
//!   "payer did not act before charge expiration", Omise's Magento plugin error mapping).
//!   `reversed` is how a cancelled charge would read; this face offers no way to cancel one.
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
//!   Stripe face), so are `capture=false` (authorise-only charges are not modelled) and malformed
//!   `metadata`; no `card` → 400 `missing_card`; a malformed `amount` → 400 `invalid_charge`.
//! - **Idempotency** (`Idempotency-Key` on `POST /charges` and `POST /charges/{id}/refunds`):
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
//!   every created charge, `charge.complete` when a pending charge completes, `refund.create`
//!   for every refund. Omise documents no event for a refund's later change; none is sent. The
//!   server signs them (`webhooks`): `Omise-Signature` = hex HMAC-SHA256 of
//!   `<Omise-Signature-Timestamp>.<body>` keyed with the base64-decoded secret.
//! - **Errors** ("The error object", api-errors): `{"object":"error","location":…,"code":…,
//!   "message":…}`. `pm_fake_error_before_charge` → 500 `internal_error` (Omise's 5xx body is
//!   undocumented), never stored under the key.
//!
//! [ledger]: crate::ledger

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::faces::dates::iso8601;
use crate::faces::form::{collect_metadata, parse_form, Params};
use crate::ledger::{
    is_valid_idempotency_key, Attempt, Decline, Face, Failure, Fingerprint, Handled, Intent,
    KeyRefusals, Ledger, ModelEvent, NewCharge, Refund, RefundAttempt, RefundStatus, Reply, Status,
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

/// The charge parameters the face understands besides `metadata[...]`.
const CHARGE_PARAMETERS: &[&str] = &[
    "amount",
    "capture",
    "card",
    "currency",
    "description",
    "return_uri",
];

/// The refund parameters the face understands besides `metadata[...]`.
const REFUND_PARAMETERS: &[&str] = &["amount", "void"];

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
}

impl OmiseFace {
    /// A face accepting `api_key`, enforcing `minimum_overrides` over Omise's limits, honouring
    /// keys as the two switches say.
    pub(crate) fn new(
        api_key: String,
        minimum_overrides: BTreeMap<String, i64>,
        honours_idempotency_key: bool,
        honours_refund_keys: bool,
    ) -> Self {
        Self {
            api_key,
            minimum_overrides,
            honours_idempotency_key,
            honours_refund_keys,
        }
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
                Handled::plain(retrieve_charge(ledger, id))
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
    fn new_refund_id(&self, ledger: &mut Ledger) -> String {
        new_id(ledger, "rfnd")
    }

    fn search_snapshot(&self, ledger: &Ledger, index: usize) -> Value {
        charge_json_at(ledger, index)
    }

    /// `charge.complete`. A refund's later change sends nothing: Omise documents no event for it.
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        vec![charge_complete(ledger, index, at_ms)]
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
        charge: NewCharge,
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
            Attempt::Made { intent, delivery } => {
                let object = charge_json(&intent, &[]);
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
}

/// `GET /charges/{id}`: read-after-write.
fn retrieve_charge(ledger: &Ledger, id: &str) -> Reply {
    match ledger.by_id.get(id) {
        Some(&index) => Reply::json(200, &charge_json_at(ledger, index)),
        None => no_such_charge(id),
    }
}

/// The charge at `index` as Omise serialises it, with its refunds as they are now.
fn charge_json_at(ledger: &Ledger, index: usize) -> Value {
    let intent = &ledger.intents[index];
    charge_json(intent, &refunds_of_charge(ledger, &intent.id))
}

/// The refunds of a charge, oldest first.
fn refunds_of_charge<'l>(ledger: &'l Ledger, charge: &str) -> Vec<&'l Refund> {
    ledger
        .refunds_of
        .get(charge)
        .map(|positions| positions.iter().map(|&p| &ledger.refunds[p]).collect())
        .unwrap_or_default()
}

/// The `charge.complete` event of the charge at `index`, which just left `pending`.
fn charge_complete(ledger: &mut Ledger, index: usize, at_ms: i64) -> ModelEvent {
    let object = charge_json_at(ledger, index);
    event(ledger, "charge.complete", object, at_ms)
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

/// Validates a charge create in Omise's terms (see the module docs for each refusal).
fn charge_params(config: &OmiseFace, params: &Params) -> Result<NewCharge, Reply> {
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
    match params.get("capture").map(String::as_str) {
        None | Some("true") => {}
        Some("false") => {
            return Err(bad_request(
                "capture=false (an authorise-only charge) is not modelled by the fake PSP",
            ))
        }
        Some(other) => return Err(bad_request(&format!("capture must be a boolean: {other}"))),
    }
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
    Ok(NewCharge {
        amount,
        currency,
        payment_method: card.clone(),
        description: params.get("description").cloned(),
        metadata,
        // Omise charges a card when it is created; there is no unconfirmed charge.
        confirm: true,
    })
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
        Status::RequiresConfirmation | Status::RequiresAction | Status::Processing => "pending",
        Status::RequiresPaymentMethod => match intent.failure {
            Some(Failure::AuthenticationRequired) => "expired",
            Some(Failure::Declined(_)) | None => "failed",
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
/// 2019-05-29), with `refunds` its refunds oldest first.
fn charge_json(intent: &Intent, refunds: &[&Refund]) -> Value {
    let status = charge_status(intent);
    let successful = status == "successful";
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
        None => (None, None),
    };
    let location = format!("/charges/{}", intent.id);
    // A 3-D Secure charge waits for the customer at its authorize URI (no host: the fake has
    // no page to send anyone to).
    let authorize_uri = (intent.status == Status::RequiresAction)
        .then(|| format!("https://fake-psp.invalid/payments/{}/authorize", intent.id));
    let data: Vec<Value> = refunds
        .iter()
        .take(LIST_LIMIT_DEFAULT)
        .map(|refund| refund_json(refund))
        .collect();
    json!({
        "object": "charge",
        "id": intent.id,
        "location": location,
        "livemode": false,
        "amount": intent.amount,
        "currency": intent.currency,
        "description": intent.description,
        "metadata": intent.metadata,
        "status": status,
        "capture": true,
        "authorized": successful,
        "captured": successful,
        "paid": successful,
        "reversed": status == "reversed",
        "expired": status == "expired",
        "refundable": successful && refunded_amount < intent.amount,
        "failure_code": failure_code,
        "failure_message": failure_message,
        "authorize_uri": authorize_uri,
        "return_uri": null,
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
    })
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{Delivery, FakeModel, ModelConfig, WireAnswer};
    use crate::provider::Provider;

    /// Some moment in 2027, epoch ms.
    const T0: i64 = 1_800_000_000_000;
    const HOUR_MS: i64 = 60 * 60 * 1000;

    fn config() -> ModelConfig {
        ModelConfig {
            provider: Provider::Omise,
            ..ModelConfig::default()
        }
    }

    fn model() -> FakeModel {
        FakeModel::new(config(), 7)
    }

    /// `Basic base64("<key>:<password>")`.
    fn basic(key: &str, password: &str) -> String {
        let credentials = format!("{key}:{password}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        )
    }

    fn request<'a>(
        method: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        authorization: Option<&'a str>,
        key: Option<&'a str>,
        body: &'a str,
    ) -> WireRequest<'a> {
        WireRequest {
            method,
            path,
            query,
            authorization,
            idempotency_key: key,
            body: body.as_bytes(),
        }
    }

    fn post(
        model: &FakeModel,
        path: &str,
        body: &str,
        key: Option<&str>,
        now_ms: i64,
    ) -> WireAnswer {
        let authorization = basic(crate::provider::DEFAULT_API_KEY, "");
        model.handle(
            &request("POST", path, None, Some(&authorization), key, body),
            now_ms,
        )
    }

    fn get(model: &FakeModel, path: &str, query: Option<&str>, now_ms: i64) -> WireAnswer {
        let authorization = basic(crate::provider::DEFAULT_API_KEY, "");
        model.handle(
            &request("GET", path, query, Some(&authorization), None, ""),
            now_ms,
        )
    }

    /// The charge create payonce's Omise adapter sends (`charge_call`), in yen.
    fn charge(token: &str, payment_id: &str) -> String {
        format!(
            "amount=3000&currency=jpy&card={token}&capture=true&description={payment_id}\
             &metadata[payment_id]={payment_id}"
        )
    }

    fn json(answer: &WireAnswer) -> Value {
        serde_json::from_str(&answer.body).unwrap_or(Value::Null)
    }

    fn code(answer: &WireAnswer) -> Value {
        json(answer)["code"].clone()
    }

    fn kinds(events: &[ModelEvent]) -> Vec<&str> {
        events.iter().map(|event| event.kind.as_str()).collect()
    }

    /// A successful charge's id.
    fn paid(model: &FakeModel, token: &str, payment_id: &str, now_ms: i64) -> String {
        let answer = post(model, "/charges", &charge(token, payment_id), None, now_ms);
        assert_eq!(json(&answer)["status"], "successful", "{}", answer.body);
        json(&answer)["id"].as_str().unwrap_or_default().to_owned()
    }

    /// Whether an id is `<prefix>_test_` and 19 lowercase alphanumerics, like Omise's.
    fn is_omise_id(id: &str, prefix: &str) -> bool {
        id.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("_test_"))
            .is_some_and(|rest| {
                rest.len() == 19
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
            })
    }

    // Authentication ("Errors" → "Authentication failure").

    #[test]
    fn basic_auth_with_the_secret_key_as_user_name_or_401_before_anything_else() {
        let model = model();
        let wrong = basic("skey_test_other", "");
        let bearer = format!("Bearer {}", crate::provider::DEFAULT_API_KEY);
        let no_colon = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(crate::provider::DEFAULT_API_KEY)
        );
        // WHEN the key is missing, wrong, sent as a bearer token or unreadable — on a create
        // that would otherwise be refused, and on a route that does not exist
        for authorization in [
            None,
            Some(wrong.as_str()),
            Some(bearer.as_str()),
            Some(no_colon.as_str()),
            Some("Basic !!!"),
        ] {
            for (method, path, body) in [("POST", "/charges", "amount=1"), ("GET", "/nowhere", "")]
            {
                let answer = model.handle(
                    &request(method, path, None, authorization, Some("k"), body),
                    T0,
                );
                // THEN 401 authentication_failure, in Omise's error object
                assert_eq!(answer.status, 401, "{authorization:?} {path}");
                assert_eq!(
                    json(&answer),
                    json!({
                        "object": "error",
                        "location": "https://www.omise.co/api-errors#authentication-failure",
                        "code": "authentication_failure",
                        "message": "authentication failed",
                    })
                );
            }
        }
        // AND nothing was created, every request was counted, the key stored nothing
        assert!(model.charges().is_empty());
        assert_eq!(model.requests_seen(), 10);
        // AND the right key is accepted with any password, the scheme in any case
        let lower =
            basic(crate::provider::DEFAULT_API_KEY, "ignored").replacen("Basic", "basic", 1);
        let ok = model.handle(
            &request(
                "POST",
                "/charges",
                None,
                Some(&lower),
                Some("k"),
                &charge("pm_card_visa", "p"),
            ),
            T0,
        );
        assert_eq!((ok.status, ok.replayed), (200, false), "{}", ok.body);
    }

    // Charge create and statuses ("Charges API"; test cards, "Testing").

    #[test]
    fn tokens_make_omise_charges_a_decline_is_a_failed_charge_answered_200() {
        let model = model();
        for (token, status, failure_code) in [
            ("pm_card_visa", "successful", None),
            ("pm_card_mastercard", "successful", None),
            ("pm_card_refundFail", "successful", None),
            ("pm_fake_refund_pending", "successful", None),
            (
                "pm_card_visa_chargeDeclined",
                "failed",
                Some("payment_rejected"),
            ),
            (
                "pm_card_chargeDeclinedInsufficientFunds",
                "failed",
                Some("insufficient_fund"),
            ),
            ("pm_fake_processing", "pending", None),
            ("pm_fake_requires_action", "pending", None),
        ] {
            let answer = post(&model, "/charges", &charge(token, "pay_1"), None, T0);
            assert_eq!(answer.status, 200, "{token}: {}", answer.body);
            let object = json(&answer);
            let successful = status == "successful";
            assert_eq!(object["object"], "charge");
            assert!(
                is_omise_id(object["id"].as_str().unwrap_or_default(), "chrg"),
                "{object}"
            );
            assert_eq!(object["status"], status, "{token}");
            assert_eq!(object["paid"], successful);
            assert_eq!(object["authorized"], successful);
            assert_eq!(object["captured"], successful);
            assert_eq!(object["failure_code"], json!(failure_code), "{token}");
            assert_eq!(
                object["failure_message"].is_string(),
                failure_code.is_some()
            );
            assert_eq!(object["livemode"], false);
            assert_eq!(
                (object["amount"].clone(), object["currency"].clone()),
                (json!(3000), json!("jpy"))
            );
            assert_eq!(object["description"], "pay_1");
            assert_eq!(object["metadata"], json!({"payment_id": "pay_1"}));
            assert_eq!(object["refunded_amount"], 0);
            assert_eq!(object["refunds"]["total"], 0);
            assert_eq!(object["created_at"], "2027-01-15T08:00:00Z");
            // A 3-D Secure charge waits at its authorize URI.
            assert_eq!(
                object["authorize_uri"].is_string(),
                token == "pm_fake_requires_action"
            );
            // AND one charge.create event carries the charge as answered
            assert_eq!(kinds(&answer.events), ["charge.create"], "{token}");
            let event: Value = serde_json::from_str(&answer.events[0].body).unwrap_or(Value::Null);
            assert_eq!(event["object"], "event");
            assert_eq!(event["key"], "charge.create");
            assert_eq!(event["livemode"], false);
            assert!(is_omise_id(&answer.events[0].id, "evnt"), "{event}");
            assert_eq!(event["id"], answer.events[0].id.as_str());
            assert_eq!(event["data"], object);
        }
        assert_eq!(model.charges().len(), 8);
    }

    #[test]
    fn an_unknown_token_is_404_not_found_and_creates_nothing() {
        // omise-go's live test: 404 not_found "token … was not found".
        let model = model();
        let answer = post(
            &model,
            "/charges",
            &charge("pm_card_nonexistent", "p"),
            Some("k"),
            T0,
        );
        assert_eq!(answer.status, 404);
        assert_eq!(code(&answer), "not_found");
        assert_eq!(
            json(&answer)["message"],
            "token pm_card_nonexistent was not found"
        );
        assert!(answer.events.is_empty());
        assert!(model.charges().is_empty());
        // Stored like any answer: the retry is replayed.
        let again = post(
            &model,
            "/charges",
            &charge("pm_card_nonexistent", "p"),
            Some("k"),
            T0,
        );
        assert_eq!((again.status, again.replayed), (404, true));
    }

    #[test]
    fn the_fault_tokens_tell_the_server_how_to_misdeliver_as_on_the_stripe_face() {
        let model = model();
        let lost = post(
            &model,
            "/charges",
            &charge("pm_fake_lost_response", "a"),
            Some("k1"),
            T0,
        );
        assert_eq!((lost.status, lost.delivery), (200, Delivery::Sever));
        assert_eq!(json(&lost)["status"], "successful");
        let slow = post(
            &model,
            "/charges",
            &charge("pm_fake_slow", "b"),
            Some("k2"),
            T0,
        );
        assert_eq!(
            (slow.status, slow.delivery),
            (200, Delivery::After(config().slow_delay))
        );
        // The retry of the lost one is answered at once from the key.
        let retry = post(
            &model,
            "/charges",
            &charge("pm_fake_lost_response", "a"),
            Some("k1"),
            T0 + 1,
        );
        assert_eq!((retry.replayed, retry.delivery), (true, Delivery::Now));
        assert_eq!(retry.body, lost.body);
        // A 500 before charging stores nothing and creates nothing.
        for _ in 0..2 {
            let failed = post(
                &model,
                "/charges",
                &charge("pm_fake_error_before_charge", "c"),
                Some("k3"),
                T0,
            );
            assert_eq!((failed.status, failed.replayed), (500, false));
            assert_eq!(code(&failed), "internal_error");
            assert_eq!(json(&failed)["object"], "error");
        }
        assert_eq!(model.charges().len(), 2);
        let ok = post(
            &model,
            "/charges",
            &charge("pm_card_visa", "c"),
            Some("k3"),
            T0,
        );
        assert_eq!((ok.status, ok.replayed), (200, false));
    }

    #[test]
    fn pending_charges_complete_later_with_charge_complete() {
        // Omise's statuses; 3-D Secure never done ends `expired` with `timeout`.
        let model = FakeModel::new(
            ModelConfig {
                processing_for: Duration::from_secs(60),
                requires_action_for: Duration::from_secs(120),
                ..config()
            },
            7,
        );
        let processing = post(
            &model,
            "/charges",
            &charge("pm_fake_processing", "a"),
            None,
            T0,
        );
        let three_ds = post(
            &model,
            "/charges",
            &charge("pm_fake_requires_action", "b"),
            None,
            T0,
        );
        assert!(model.tick(T0 + 59_999).is_empty());
        let first = model.tick(T0 + 60_000);
        assert_eq!(kinds(&first), ["charge.complete"]);
        let completed: Value = serde_json::from_str(&first[0].body).unwrap_or(Value::Null);
        assert_eq!(completed["data"]["id"], json(&processing)["id"]);
        assert_eq!(completed["data"]["status"], "successful");
        assert_eq!(completed["data"]["paid"], true);
        let second = model.tick(T0 + 120_000);
        assert_eq!(kinds(&second), ["charge.complete"]);
        let expired: Value = serde_json::from_str(&second[0].body).unwrap_or(Value::Null);
        assert_eq!(expired["data"]["id"], json(&three_ds)["id"]);
        assert_eq!(expired["data"]["status"], "expired");
        assert_eq!(expired["data"]["expired"], true);
        assert_eq!(expired["data"]["failure_code"], "timeout");
        assert_eq!(expired["data"]["authorize_uri"], Value::Null);
        // The inspection view: expired → failed, as the crate's docs say.
        let charges = model.charges();
        assert_eq!(
            charges
                .iter()
                .map(|c| (c.status.as_str(), c.outcome.as_str()))
                .collect::<Vec<_>>(),
            [("successful", "succeeded"), ("expired", "failed")]
        );
        // Retrieve reads the same.
        let id = json(&three_ds)["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            json(&get(&model, &format!("/charges/{id}"), None, T0 + 120_001))["status"],
            "expired"
        );
    }

    // Charge limits ("Currency and amount") and validation before the key.

    #[test]
    fn amounts_outside_the_account_country_limits_are_invalid_charge() {
        let model = model();
        for (currency, minimum, maximum) in [
            ("thb", 2_000, 15_000_000),
            ("jpy", 100, 6_000_000),
            ("sgd", 100, 2_000_000),
            ("myr", 100, 10_000_000),
        ] {
            let body =
                |amount: i64| format!("amount={amount}&currency={currency}&card=pm_card_visa");
            for amount in [minimum - 1, maximum + 1] {
                let refused = post(&model, "/charges", &body(amount), None, T0);
                assert_eq!(refused.status, 400, "{currency} {amount}");
                assert_eq!(code(&refused), "invalid_charge");
            }
            for amount in [minimum, maximum] {
                assert_eq!(
                    post(&model, "/charges", &body(amount), None, T0).status,
                    200
                );
            }
        }
        // Any other currency, in any case, is not supported.
        for currency in ["usd", "eur", "xyz", ""] {
            let refused = post(
                &model,
                "/charges",
                &format!("amount=5000&currency={currency}&card=pm_card_visa"),
                None,
                T0,
            );
            assert_eq!(code(&refused), "invalid_charge", "{currency}");
            assert_eq!(
                json(&refused)["message"],
                "currency is currently not supported"
            );
        }
        let upper = post(
            &model,
            "/charges",
            "amount=5000&currency=THB&card=pm_card_visa",
            None,
            T0,
        );
        assert_eq!(json(&upper)["currency"], "thb");
        assert_eq!(model.charges().len(), 9);
        // A raised minimum (settlement after conversion) refuses what the table accepts.
        let raised = FakeModel::new(
            ModelConfig {
                minimum_overrides: [("thb".to_owned(), 5_000)].into(),
                ..config()
            },
            7,
        );
        let refused = post(
            &raised,
            "/charges",
            "amount=4999&currency=thb&card=pm_card_visa",
            None,
            T0,
        );
        assert_eq!(code(&refused), "invalid_charge");
    }

    #[test]
    fn validation_errors_are_answered_before_the_key_and_store_nothing() {
        let model = model();
        let base = "currency=jpy&card=pm_card_visa";
        let cases = [
            (format!("amount=3000&{base}&colour=red"), "bad_request"),
            (format!("amount=3000&{base}&customer=cust_1"), "bad_request"),
            (format!("amount=abc&{base}"), "invalid_charge"),
            (format!("amount=0&{base}"), "invalid_charge"),
            (base.to_owned(), "invalid_charge"),
            ("amount=3000&currency=jpy".to_owned(), "missing_card"),
            ("amount=3000&currency=jpy&card=".to_owned(), "missing_card"),
            (format!("amount=3000&{base}&capture=false"), "bad_request"),
            (format!("amount=3000&{base}&capture=yes"), "bad_request"),
            (
                format!("amount=3000&{base}&metadata[a][b]=x"),
                "bad_request",
            ),
            (format!("amount=99&{base}"), "invalid_charge"),
        ];
        for (body, expected) in &cases {
            // GIVEN the key is held by a running request, THEN the key layer answers first
            assert!(model.begin_in_flight("held"));
            let busy = post(&model, "/charges", body, Some("held"), T0);
            assert_eq!(busy.status, 409, "{body}");
            assert_eq!(code(&busy), "conflict");
            assert!(model.end_in_flight("held"));
            // AND under a free key it is refused for its parameters and stores nothing
            let key = format!("k-{body}");
            let refused = post(&model, "/charges", body, Some(&key), T0);
            assert_eq!(refused.status, 400, "{body}");
            assert_eq!(json(&refused)["object"], "error");
            assert_eq!(&code(&refused), expected, "{body}");
            let ok = post(
                &model,
                "/charges",
                &charge("pm_card_visa", "p"),
                Some(&key),
                T0,
            );
            assert_eq!((ok.status, ok.replayed), (200, false), "{body}");
        }
        assert_eq!(model.charges().len(), cases.len());
    }

    // Idempotency (undocumented at Omise; the Stripe face's rules, and a knob to ignore it).

    #[test]
    fn idempotency_replays_refuses_other_parameters_and_can_be_switched_off() {
        let model = model();
        let first = post(
            &model,
            "/charges",
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        // The same parameters in another order and encoding: replayed byte for byte, no events.
        let body = charge("pm_card_visa", "pay_1");
        let reordered: Vec<&str> = body.split('&').rev().collect();
        let reordered = reordered.join("&").replace("metadata[", "metadata%5B");
        let again = post(&model, "/charges", &reordered, Some("k"), T0 + HOUR_MS);
        assert_eq!((again.status, again.replayed), (200, true));
        assert_eq!(again.body, first.body);
        assert!(again.events.is_empty());
        // Other parameters, or another endpoint: 400 bad_request, nothing changes.
        let other = post(
            &model,
            "/charges",
            &charge("pm_card_visa", "pay_2"),
            Some("k"),
            T0,
        );
        let id = json(&first)["id"].as_str().unwrap_or_default().to_owned();
        let elsewhere = post(
            &model,
            &format!("/charges/{id}/refunds"),
            "amount=100",
            Some("k"),
            T0,
        );
        for answer in [&other, &elsewhere] {
            assert_eq!((answer.status, answer.replayed), (400, false));
            assert_eq!(code(answer), "bad_request");
        }
        assert_eq!(model.charges().len(), 1);
        assert!(model.refunds().is_empty());
        // A malformed key is refused.
        let long = "k".repeat(256);
        let refused = post(
            &model,
            "/charges",
            &charge("pm_card_visa", "pay_3"),
            Some(&long),
            T0,
        );
        assert_eq!(
            (refused.status, code(&refused)),
            (400, json!("bad_request"))
        );

        // WHEN the face ignores keys
        let ignoring = FakeModel::new(
            ModelConfig {
                omise_honours_idempotency_key: false,
                ..config()
            },
            7,
        );
        assert!(ignoring.begin_in_flight("k"));
        let one = post(
            &ignoring,
            "/charges",
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        let two = post(
            &ignoring,
            "/charges",
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        let three = post(
            &ignoring,
            "/charges",
            &charge("pm_card_visa", "pay_9"),
            Some("k"),
            T0,
        );
        // THEN every re-send charges again (the tokens are reusable), never replayed or refused
        for answer in [&one, &two, &three] {
            assert_eq!((answer.status, answer.replayed), (200, false));
        }
        let charges = ignoring.charges();
        assert_eq!(charges.len(), 3);
        assert!(charges
            .iter()
            .all(|c| c.idempotency_key.as_deref() == Some("k")));
        // AND refunds alike
        let id = json(&one)["id"].as_str().unwrap_or_default().to_owned();
        for _ in 0..2 {
            let refund = post(
                &ignoring,
                &format!("/charges/{id}/refunds"),
                "amount=100",
                Some("r"),
                T0,
            );
            assert_eq!((refund.status, refund.replayed), (200, false));
        }
        assert_eq!(ignoring.refunds().len(), 2);
    }

    // Retrieve and search ("Search").

    #[test]
    fn retrieve_is_read_after_write_and_search_lags_behind_it() {
        let model = FakeModel::new(
            ModelConfig {
                search_lag_max: Duration::from_secs(600),
                ..config()
            },
            7,
        );
        let ids: Vec<String> = (0..20)
            .map(|i| paid(&model, "pm_card_visa", &format!("pay_{i}"), T0))
            .collect();
        for id in &ids {
            let retrieved = get(&model, &format!("/charges/{id}"), None, T0);
            assert_eq!(
                (retrieved.status, json(&retrieved)["id"].clone()),
                (200, json!(id))
            );
        }
        let found_at = |now_ms: i64| -> usize {
            (0..20)
                .filter(|i| {
                    let query = format!("scope=charge&query=pay_{i}");
                    let answer = get(&model, "/search", Some(&query), now_ms);
                    assert_eq!(answer.status, 200, "{}", answer.body);
                    json(&answer)["data"]
                        .as_array()
                        .is_some_and(|data| data.iter().any(|c| c["id"] == ids[*i].as_str()))
                })
                .count()
        };
        // Right after the writes some are not searchable yet; after the longest lag all are.
        assert!(found_at(T0) < 20);
        assert_eq!(found_at(T0 + 600_000), 20);
        assert_eq!(
            get(&model, "/charges/chrg_test_missing", None, T0).status,
            404
        );
    }

    #[test]
    fn search_matches_description_or_metadata_and_pages() {
        let model = model();
        // description only, metadata only, both, neither
        for body in [
            "amount=3000&currency=jpy&card=pm_card_visa&description=Order-ABC",
            "amount=3000&currency=jpy&card=pm_card_visa&metadata[order]=order-abc-2",
            "amount=3000&currency=jpy&card=pm_card_visa&description=x&metadata[payment_id]=ORDER-ABC",
            "amount=3000&currency=jpy&card=pm_card_visa&description=other",
        ] {
            assert_eq!(post(&model, "/charges", body, None, T0).status, 200);
        }
        let search = |query: &str| json(&get(&model, "/search", Some(query), T0));
        let all = search("scope=charge&query=order-abc");
        assert_eq!(all["object"], "search");
        assert_eq!(all["scope"], "charge");
        assert_eq!(
            (all["total"].clone(), all["total_pages"].clone()),
            (json!(3), json!(1))
        );
        assert_eq!(all["per_page"], 30);
        // Newest first by default, oldest first on request.
        let descriptions = |result: &Value| -> Vec<Value> {
            result["data"]
                .as_array()
                .map(|data| data.iter().map(|c| c["description"].clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(
            descriptions(&all),
            [json!("x"), Value::Null, json!("Order-ABC")]
        );
        let oldest = search("scope=charge&query=order-abc&order=chronological");
        assert_eq!(
            descriptions(&oldest),
            [json!("Order-ABC"), Value::Null, json!("x")]
        );
        // Pages of one.
        let second = search("scope=charge&query=order-abc&per_page=1&page=2");
        assert_eq!(
            (second["total_pages"].clone(), second["page"].clone()),
            (json!(3), json!(2))
        );
        assert_eq!(descriptions(&second), [Value::Null]);
        assert_eq!(
            search("scope=charge&query=order-abc&page=4")["data"],
            json!([])
        );
        // No query: everything.
        assert_eq!(search("scope=charge")["total"], 4);
        // Refused: another scope, filters, a bad page, an unknown parameter.
        for (query, expected) in [
            ("scope=customer&query=x", "invalid_scope"),
            ("query=x", "invalid_scope"),
            ("scope=charge&filters[amount]=30", "invalid_filters"),
            ("scope=charge&page=0", "invalid_page"),
            ("scope=charge&page=x", "invalid_page"),
            ("scope=charge&per_page=101", "bad_request"),
            ("scope=charge&order=newest", "bad_request"),
            ("scope=charge&limit=3", "bad_request"),
        ] {
            let answer = get(&model, "/search", Some(query), T0);
            assert_eq!(
                (answer.status, code(&answer)),
                (400, json!(expected)),
                "{query}"
            );
        }
    }

    // Refunds ("Refunds API").

    fn refund(
        model: &FakeModel,
        charge: &str,
        body: &str,
        key: Option<&str>,
        now_ms: i64,
    ) -> WireAnswer {
        post(
            model,
            &format!("/charges/{charge}/refunds"),
            body,
            key,
            now_ms,
        )
    }

    #[test]
    fn refunds_add_up_to_the_charge_and_more_is_failed_refund() {
        let model = model();
        let id = paid(&model, "pm_card_visa", "pay_1", T0);
        // WHEN 1000 of 3000 is refunded
        let first = refund(
            &model,
            &id,
            "amount=1000&metadata[refund_id]=rf_1&metadata[payment_id]=pay_1",
            Some("r1"),
            T0 + 1,
        );
        // THEN a closed refund object, and one refund.create event
        assert_eq!(first.status, 200, "{}", first.body);
        let object = json(&first);
        assert!(
            is_omise_id(object["id"].as_str().unwrap_or_default(), "rfnd"),
            "{object}"
        );
        assert_eq!(
            (
                object["object"].clone(),
                object["amount"].clone(),
                object["currency"].clone(),
                object["charge"].clone(),
                object["status"].clone(),
                object["voided"].clone(),
            ),
            (
                json!("refund"),
                json!(1000),
                json!("jpy"),
                json!(id),
                json!("closed"),
                json!(false)
            )
        );
        assert_eq!(
            object["metadata"],
            json!({"refund_id": "rf_1", "payment_id": "pay_1"})
        );
        assert_eq!(kinds(&first.events), ["refund.create"]);
        let event: Value = serde_json::from_str(&first.events[0].body).unwrap_or(Value::Null);
        assert_eq!(event["data"], object);
        // AND the charge shows it
        let shown = json(&get(&model, &format!("/charges/{id}"), None, T0 + 2));
        assert_eq!(shown["refunded_amount"], 1000);
        assert_eq!(shown["refunds"]["total"], 1);
        assert_eq!(shown["refunds"]["data"][0], object);
        assert_eq!(shown["refundable"], true);
        // WHEN more than the 2000 left is asked for, THEN 400 failed_refund, nothing created
        let over = refund(&model, &id, "amount=2001", Some("r2"), T0 + 3);
        assert_eq!((over.status, code(&over)), (400, json!("failed_refund")));
        assert!(over.events.is_empty());
        // AND the rest can be refunded, after which nothing is left
        assert_eq!(
            refund(&model, &id, "amount=2000", Some("r3"), T0 + 4).status,
            200
        );
        let done = refund(&model, &id, "amount=1", None, T0 + 5);
        assert_eq!((done.status, code(&done)), (400, json!("failed_refund")));
        assert_eq!(
            json(&get(&model, &format!("/charges/{id}"), None, T0 + 6))["refundable"],
            false
        );
        assert_eq!(model.refunds().len(), 2);
        // An unknown charge is not_found; a failed one cannot be refunded.
        let missing = refund(&model, "chrg_test_missing", "amount=100", None, T0);
        assert_eq!((missing.status, code(&missing)), (404, json!("not_found")));
        let declined = post(
            &model,
            "/charges",
            &charge("pm_card_visa_chargeDeclined", "pay_2"),
            None,
            T0,
        );
        let declined = json(&declined)["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let refused = refund(&model, &declined, "amount=100", None, T0);
        assert_eq!(
            (refused.status, code(&refused)),
            (400, json!("failed_refund"))
        );
        // A replay of the first refund under its key is the first answer.
        let again = refund(
            &model,
            &id,
            "amount=1000&metadata[refund_id]=rf_1&metadata[payment_id]=pay_1",
            Some("r1"),
            T0 + 7,
        );
        assert_eq!(
            (again.replayed, again.body.as_str()),
            (true, first.body.as_str())
        );
        assert_eq!(model.refunds().len(), 2);
    }

    #[test]
    fn refund_validation_comes_before_the_key_and_stores_nothing() {
        let model = model();
        let id = paid(&model, "pm_card_visa", "pay_1", T0);
        for (body, expected) in [
            ("", "invalid_amount"),
            ("amount=0", "invalid_amount"),
            ("amount=1.5", "invalid_amount"),
            ("amount=100&void=true", "bad_request"),
            ("amount=100&reason=duplicate", "bad_request"),
            ("amount=100&metadata[]=x", "bad_request"),
        ] {
            let key = format!("k-{body}");
            let refused = refund(&model, &id, body, Some(&key), T0);
            assert_eq!(
                (refused.status, code(&refused)),
                (400, json!(expected)),
                "{body}"
            );
            let ok = refund(&model, &id, "amount=100&void=false", Some(&key), T0);
            assert_eq!((ok.status, ok.replayed), (200, false), "{body}");
        }
    }

    #[test]
    fn a_charge_takes_fifteen_refunds_at_most() {
        // "Refunds API": refundable only with fewer than 15 refunds.
        let model = model();
        let id = paid(&model, "pm_card_visa", "pay_1", T0);
        for _ in 0..15 {
            assert_eq!(refund(&model, &id, "amount=100", None, T0).status, 200);
        }
        let sixteenth = refund(&model, &id, "amount=100", None, T0);
        assert_eq!(
            (sixteenth.status, code(&sixteenth)),
            (400, json!("failed_refund"))
        );
        assert_eq!(model.refunds().len(), 15);
    }

    #[test]
    fn refund_fates_follow_the_token_as_on_the_stripe_face_without_events() {
        let model = FakeModel::new(
            ModelConfig {
                refund_fail_after: Duration::from_secs(60),
                refund_pending_for: Duration::from_secs(120),
                ..config()
            },
            7,
        );
        let failing = paid(&model, "pm_card_refundFail", "pay_f", T0);
        let pending = paid(&model, "pm_fake_refund_pending", "pay_p", T0);
        let failed = refund(&model, &failing, "amount=3000", None, T0);
        let waiting = refund(&model, &pending, "amount=3000", None, T0);
        assert_eq!(json(&failed)["status"], "closed");
        assert_eq!(json(&waiting)["status"], "pending");
        // A pending refund holds its amount.
        let held = refund(&model, &pending, "amount=1", None, T0);
        assert_eq!(code(&held), "failed_refund");
        // WHEN their time comes, THEN no event (Omise documents none) and the new statuses
        assert!(model.tick(T0 + 120_000).is_empty());
        let refunds = model.refunds();
        assert_eq!(
            refunds
                .iter()
                .map(|r| (r.status.as_str(), r.outcome.as_str()))
                .collect::<Vec<_>>(),
            [("failed", "failed"), ("closed", "succeeded")]
        );
        let path = format!("/charges/{failing}/refunds/{}", refunds[0].id);
        assert_eq!(
            json(&get(&model, &path, None, T0 + 120_001))["status"],
            "failed"
        );
        // AND the failed refund's amount is refundable again
        assert_eq!(
            refund(&model, &failing, "amount=3000", None, T0 + 120_002).status,
            200
        );
    }

    #[test]
    fn refund_lists_page_with_limit_offset_and_order() {
        let model = model();
        let id = paid(&model, "pm_card_visa", "pay_1", T0);
        let other = paid(&model, "pm_card_visa", "pay_2", T0);
        let mut ids = Vec::new();
        for amount in [100, 200, 300] {
            let answer = refund(&model, &id, &format!("amount={amount}"), None, T0);
            ids.push(json(&answer)["id"].clone());
        }
        refund(&model, &other, "amount=100", None, T0);
        let list = |query: &str| {
            json(&get(
                &model,
                &format!("/charges/{id}/refunds"),
                Some(query),
                T0,
            ))
        };
        let all = list("");
        assert_eq!(all["object"], "list");
        assert_eq!(
            (
                all["total"].clone(),
                all["limit"].clone(),
                all["offset"].clone()
            ),
            (json!(3), json!(20), json!(0))
        );
        let listed = |page: &Value| -> Vec<Value> {
            page["data"]
                .as_array()
                .map(|d| d.iter().map(|r| r["id"].clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(listed(&all), ids);
        assert_eq!(listed(&list("limit=1&offset=1")), ids[1..2]);
        let newest: Vec<Value> = ids.iter().rev().cloned().collect();
        assert_eq!(listed(&list("order=reverse_chronological")), newest);
        assert_eq!(listed(&list("offset=3")), Vec::<Value>::new());
        for query in ["limit=0", "limit=101", "offset=-1", "order=x", "from=2020"] {
            let answer = get(&model, &format!("/charges/{id}/refunds"), Some(query), T0);
            assert_eq!(
                (answer.status, code(&answer)),
                (400, json!("bad_request")),
                "{query}"
            );
        }
        let missing = get(&model, "/charges/chrg_test_missing/refunds", None, T0);
        assert_eq!((missing.status, code(&missing)), (404, json!("not_found")));
        // A refund is retrieved under its own charge only.
        let first = ids[0].as_str().unwrap_or_default();
        assert_eq!(
            get(&model, &format!("/charges/{id}/refunds/{first}"), None, T0).status,
            200
        );
        assert_eq!(
            get(
                &model,
                &format!("/charges/{other}/refunds/{first}"),
                None,
                T0
            )
            .status,
            404
        );
    }

    // Inspection and determinism.

    #[test]
    fn inspection_entries_carry_the_spec_fields_for_the_omise_face() {
        let model = model();
        let id = paid(&model, "pm_card_visa", "pay_1", T0);
        post(
            &model,
            "/charges",
            &charge("pm_card_visa_chargeDeclined", "pay_2"),
            Some("k2"),
            T0,
        );
        refund(
            &model,
            &id,
            "amount=500&metadata[refund_id]=rf_1&metadata[payment_id]=pay_1",
            Some("r1"),
            T0,
        );
        let charges = model.charges();
        assert_eq!(charges.len(), 2);
        assert_eq!(
            (
                charges[0].provider.as_str(),
                charges[0].id.as_str(),
                charges[0].status.as_str(),
                charges[0].outcome.as_str(),
                charges[0].amount,
                charges[0].currency.as_str(),
                charges[0].payment_id.as_deref(),
                charges[0].idempotency_key.as_deref(),
            ),
            (
                "omise",
                id.as_str(),
                "successful",
                "succeeded",
                3000,
                "jpy",
                Some("pay_1"),
                None
            )
        );
        assert_eq!(
            (
                charges[1].status.as_str(),
                charges[1].outcome.as_str(),
                charges[1].idempotency_key.as_deref()
            ),
            ("failed", "failed", Some("k2"))
        );
        let refunds = model.refunds();
        assert_eq!(
            (
                refunds[0].provider.as_str(),
                refunds[0].status.as_str(),
                refunds[0].outcome.as_str(),
                refunds[0].amount,
                refunds[0].currency.as_str(),
                refunds[0].payment_intent.as_str(),
                refunds[0].payment_id.as_deref(),
                refunds[0].refund_id.as_deref(),
                refunds[0].idempotency_key.as_deref(),
            ),
            (
                "omise",
                "closed",
                "succeeded",
                500,
                "jpy",
                id.as_str(),
                Some("pay_1"),
                Some("rf_1"),
                Some("r1")
            )
        );
    }

    #[test]
    fn one_seed_and_one_call_sequence_give_byte_identical_answers() {
        let script = |seed: u64| -> Vec<String> {
            let model = FakeModel::new(
                ModelConfig {
                    search_lag_max: Duration::from_secs(600),
                    ..config()
                },
                seed,
            );
            let mut trace = Vec::new();
            for (i, token) in [
                "pm_card_visa",
                "pm_fake_processing",
                "pm_card_visa_chargeDeclined",
            ]
            .into_iter()
            .enumerate()
            {
                let answer = post(
                    &model,
                    "/charges",
                    &charge(token, "a"),
                    Some(&format!("k{i}")),
                    T0,
                );
                let id = json(&answer)["id"].as_str().unwrap_or_default().to_owned();
                trace.push(answer.body);
                trace.extend(answer.events.into_iter().map(|e| e.body));
                let refunded = refund(&model, &id, "amount=100", None, T0 + 1);
                trace.push(refunded.body);
            }
            trace.push(
                get(
                    &model,
                    "/search",
                    Some("scope=charge&query=a"),
                    T0 + HOUR_MS,
                )
                .body,
            );
            trace.extend(model.tick(T0 + 2 * HOUR_MS).into_iter().map(|e| e.body));
            trace
        };
        assert_eq!(script(42), script(42));
        assert_ne!(script(42), script(43), "the seed decides ids");
    }

    #[test]
    fn unknown_routes_are_404_not_found() {
        let model = model();
        for (method, path) in [
            ("GET", "/charges"),
            ("DELETE", "/charges/chrg_test_1"),
            ("POST", "/v1/payment_intents"),
            ("GET", "/customers/cust_test_1"),
        ] {
            let authorization = basic(crate::provider::DEFAULT_API_KEY, "");
            let answer = model.handle(
                &request(method, path, None, Some(&authorization), None, ""),
                T0,
            );
            assert_eq!(
                (answer.status, code(&answer)),
                (404, json!("not_found")),
                "{method} {path}"
            );
        }
    }
}
