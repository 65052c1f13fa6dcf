//! The Stripe face: Stripe's PaymentIntents and Refunds wire format over the [ledger]
//! (`ModelConfig::provider = Provider::Stripe`, the default). The charges, refunds, test tokens,
//! time-driven transitions, search lag and injected failures are the ledger's; this module only
//! reads Stripe's form-encoded requests and writes Stripe's objects (`json`), errors (`errors`)
//! and events. It calls the ledger's provider-neutral operations (`Ledger::attempt_charge`,
//! `Ledger::attempt_refund`, the idempotency layer, `Ledger::insert`) after validating a request
//! in Stripe's terms (`params`).
//!
//! The Stripe rules it follows, with the documentation each comes from (the Omise face's rules
//! are in the `faces::omise` module):
//!
//! - **Idempotency** ("Idempotent requests", docs.stripe.com/api/idempotent_requests): the first
//!   answer under a key is replayed for the same endpoint and parameters; another endpoint or
//!   other parameters → 400 `idempotency_error`; a key whose request is still running → 409
//!   `idempotency_key_in_use`; keys may be pruned once at least 24 h old, so each stored key is
//!   forgotten at a random moment between 24 h and 48 h after it was stored.
//! - **Validation before the key**: parameter errors are answered before the key is looked at and
//!   store nothing under it ("Idempotent requests": results are saved only once an endpoint began
//!   executing, not when incoming parameters fail validation).
//! - **Confirm-only parameters** ("Create a PaymentIntent": "This parameter can only be used with
//!   confirm=true"): `error_on_requires_action`, `mandate`, `mandate_data`, `off_session`,
//!   `return_url` without `confirm=true` → 400 naming the parameter.
//! - **Charge limits** ("Supported currencies" → "Minimum and maximum charge amounts"): below the
//!   currency's minimum → `amount_too_small`, above eight digits → `amount_too_large`.
//! - **Cancel** ("Cancel a PaymentIntent"): only from `requires_payment_method`,
//!   `requires_capture`, `requires_confirmation`, `requires_action`, `processing`, else 400
//!   `payment_intent_unexpected_state`; `cancellation_reason` one of `duplicate`, `fraudulent`,
//!   `requested_by_customer`, `abandoned`; under an idempotency key; `payment_intent.canceled`.
//!   Cancelling an authorization releases it (its charge reads refunded).
//! - **3-D Secure test cards** ("Testing" → "3D Secure authentication":
//!   `pm_card_threeDSecure2Required`, `pm_card_authenticationRequired`, which ask for
//!   authentication on every charge; "Create a PaymentIntent": `error_on_requires_action`,
//!   `return_url`): with `error_on_requires_action=true` the confirm fails with 402 `card_error`
//!   `authentication_required` and the PaymentIntent goes to `requires_payment_method`
//!   (`payment_intent.payment_failed`), even with a `return_url`; with a `return_url` it waits in
//!   `requires_action` with `next_action.redirect_to_url` (`url` the fake's own
//!   `/_fake/authenticate/{id}`, `return_url` as given) and `payment_intent.requires_action`;
//!   with neither, `next_action.use_stripe_sdk`. An action never answered waits until cancelled.
//!   `off_session` (other than `false`) fails like `error_on_requires_action` ("Create a
//!   PaymentIntent" → `off_session`: the customer is not in the checkout flow).
//!   `return_url` must parse as a URL (`url_invalid`).
//! - **The redirect back** ("Payment Intents" → "Redirect to URL": the customer returns to
//!   `return_url` with `payment_intent` and `redirect_status` in the query): the fake's page
//!   answers a completed authentication with 303 to
//!   `<return_url>?payment_intent=<id>&redirect_status=succeeded` (`&` if the URL has a query;
//!   `failed` for a failed one). Completed, the PaymentIntent succeeds, or is authorized for a
//!   manual capture; failed, it is `requires_payment_method` with
//!   `payment_intent_authentication_failure` ("Error codes"). A second answer is 409 and moves
//!   nothing.
//! - **Manual capture** ("Place a hold on a payment method", "Capture a PaymentIntent"):
//!   `capture_method=manual` (also on an unconfirmed create; `automatic_async` is not
//!   modelled and refused) authorizes only: `requires_capture`, `amount_capturable` the amount,
//!   `payment_intent.amount_capturable_updated`, and the charge's
//!   `payment_method_details.card.capture_before` (epoch s) `authorization_expires_after` (7
//!   days, the card-not-present window) ahead. `POST .../capture` takes `amount_to_capture` (1
//!   to `amount_capturable`, default all) under an idempotency key like a create: from
//!   `requires_capture` it succeeds with `amount_received` the captured amount, the rest
//!   released (`payment_intent.succeeded`); from anything else 400
//!   `payment_intent_unexpected_state`; more than capturable 400 with Stripe's message (code
//!   `amount_too_large` on `amount_to_capture`: the code is not documented). Uncaptured once
//!   `authorization_expires_after` has passed, the PaymentIntent is canceled with
//!   `cancellation_reason: automatic` (`payment_intent.canceled`; "the funds are released and
//!   the payment status changes to canceled").
//! - **Expanding** ("Expanding responses"): `expand[]=latest_charge` on create, retrieve,
//!   capture and cancel inlines the Charge; any other expansion is refused. Events never expand.
//!   Unlike Stripe, which always sends them, `capture_method` and `amount_capturable` appear only
//!   on manual-capture PaymentIntents and `payment_method_details` only on their Charges, so that
//!   every answer about an automatic capture stays byte for byte what it was (absent reads as
//!   `automatic`, 0, no `capture_before`).
//! - **Search** ("Search", docs.stripe.com/search, "Data freshness"): not read-after-write; each
//!   PaymentIntent, and each change to it, shows up only after a random lag. Retrieving by id is
//!   read-after-write.
//! - **Authentication** ("Authentication" in the API reference): a missing or wrong secret key →
//!   401 before anything else is looked at.
//! - **Refunds** ("Create a refund", "The Refund object", "Error codes"): `POST /v1/refunds` takes
//!   `payment_intent` (required here), `amount` (at least 1; default: what is left unrefunded),
//!   `reason` (`duplicate`, `fraudulent`, `requested_by_customer`) and `metadata`, under an
//!   idempotency key exactly like a PaymentIntent create, of at most what was captured
//!   (`amount_received`). Parameter errors come before the key;
//!   the rest is answered after it and stored like any answer: an unknown PaymentIntent → 400
//!   `resource_missing` on `payment_intent`; one without a succeeded charge → 400
//!   `charge_not_refundable`; nothing left to refund → 400 `charge_already_refunded`; more than
//!   is left → 400 on `amount` with Stripe's message and no code (Stripe sends none). Pending and
//!   succeeded refunds hold their amount, a failed one gives it back.
//! - **Refund failure** ("Testing" → "Refunds", and "Refunds" → "Failed refunds"): a refund of a
//!   `pm_card_refundFail` charge is answered `succeeded`, then fails with `failure_reason`
//!   `expired_or_canceled_card` once `refund_fail_after` has passed. A `pm_fake_refund_pending`
//!   charge's refunds stay `pending` for `refund_pending_for`, then succeed.
//! - **Refund lists** ("List all refunds"): newest first, `limit` 1 to 100 (default 10),
//!   `has_more`, `starting_after`; read-after-write, unlike search. `GET /v1/refunds/{id}` too.
//! - **Events** ("Types of events"; API version 2024-10-28.acacia, from which `refund.*` events
//!   cover charge refunds): a refund create sends `refund.created`, then `charge.refunded` if the
//!   refund succeeded; a refund's status change sends `refund.updated` (with
//!   `previous_attributes`), then `refund.failed` if it failed or `charge.refunded` if it
//!   succeeded.
//!
//! [ledger]: crate::ledger

mod errors;
mod json;
mod params;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use self::json::{
    charge_json, decline_code, decline_message, StripeJson as _, AUTHENTICATION_REQUIRED_MESSAGE,
};
use self::params::{
    expand_latest_charge, optional_enum, CaptureParams, CreateParams, RefundParams,
};
use crate::faces::form::parse_form;
use crate::faces::page::{authentication_form, form_result, page, AUTHENTICATE_PATH};
use crate::ledger::{
    escape_html, is_valid_idempotency_key, ActionAttempt, Attempt, CancelAttempt, CaptureAttempt,
    Face, Failure, Fingerprint, Handled, Hold, Intent, KeyRefusals, Ledger, ModelEvent, NewCharge,
    OnAction, PageAnswer, Refund, RefundAttempt, RefundStatus, Reply, Status, WireRequest,
    MAX_IDEMPOTENCY_KEY_LEN,
};

/// The API version stamped on every event: from 2024-10-28 on, Stripe sends `refund.created`,
/// `refund.updated` and `refund.failed` for charge refunds too ("Changelog", 2024-10-28.acacia).
const API_VERSION: &str = "2024-10-28.acacia";

/// Search answers this many results unless `limit` says otherwise ("Search PaymentIntents").
const SEARCH_LIMIT_DEFAULT: usize = 10;

/// The largest `limit` search accepts ("Search PaymentIntents": between 1 and 100).
const SEARCH_LIMIT_MAX: usize = 100;

/// A list answers this many objects unless `limit` says otherwise ("List all refunds").
const LIST_LIMIT_DEFAULT: usize = 10;

/// The largest `limit` a list accepts ("List all refunds": between 1 and 100).
const LIST_LIMIT_MAX: usize = 100;

/// The prefix of the `page` cursors search hands out.
const PAGE_CURSOR_PREFIX: &str = "fakepage_";

/// The Stripe face's refusals: 400 `idempotency_error` and 409 `idempotency_key_in_use`.
const STRIPE_KEY_REFUSALS: KeyRefusals = KeyRefusals {
    mismatch: errors::idempotency_mismatch,
    in_use: errors::idempotency_in_use,
};

/// The Stripe face: the secret key it accepts and the raised minimums it enforces.
#[derive(Debug)]
pub(crate) struct StripeFace {
    /// The only secret key accepted, as `Authorization: Bearer <api_key>`; anything else is 401.
    api_key: String,
    /// Per lowercase currency, a minimum charge above Stripe's table (minor units): a charge
    /// settled in another currency must convert to at least the settlement currency's minimum.
    minimum_overrides: BTreeMap<String, i64>,
    /// The fake's own base URL, where `next_action.redirect_to_url.url` sends the customer.
    base_url: String,
}

impl StripeFace {
    /// A face accepting `api_key`, enforcing `minimum_overrides` over Stripe's table, serving
    /// its authentication pages under `base_url`.
    pub(crate) fn new(
        api_key: String,
        minimum_overrides: BTreeMap<String, i64>,
        base_url: String,
    ) -> Self {
        Self {
            api_key,
            minimum_overrides,
            base_url,
        }
    }
}

impl Face for StripeFace {
    fn name(&self) -> &'static str {
        "stripe"
    }

    /// Routes a request. Only `/v1/*` is counted and needs the API key.
    fn handle(&mut self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        let rest = if request.path == "/v1" {
            Some("")
        } else {
            request.path.strip_prefix("/v1/")
        };
        let Some(rest) = rest else {
            return Handled::plain(unrecognized(request));
        };
        ledger.requests_seen += 1;
        // Stripe API reference, "Authentication": requests without a valid secret key fail
        // before anything else is looked at.
        let authorised = request
            .authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|key| key.trim() == self.api_key);
        if !authorised {
            return Handled::plain(errors::unauthorized());
        }
        let segments: Vec<&str> = rest.split('/').collect();
        match (request.method, segments.as_slice()) {
            ("POST", ["payment_intents"]) => self.create(ledger, request, now_ms),
            ("GET", ["payment_intents", "search"]) => {
                Handled::plain(search(ledger, request.query, now_ms))
            }
            ("GET", ["payment_intents", id]) if !id.is_empty() => {
                Handled::plain(retrieve(ledger, id, request.query))
            }
            ("POST", ["payment_intents", id, "cancel"]) if !id.is_empty() => {
                self.cancel(ledger, id, request, now_ms)
            }
            ("POST", ["payment_intents", id, "capture"]) if !id.is_empty() => {
                self.capture(ledger, id, request, now_ms)
            }
            ("POST", ["refunds"]) => self.create_refund(ledger, request, now_ms),
            ("GET", ["refunds"]) => Handled::plain(list_refunds(ledger, request.query)),
            ("GET", ["refunds", id]) if !id.is_empty() => {
                Handled::plain(retrieve_refund(ledger, id))
            }
            _ => Handled::plain(unrecognized(request)),
        }
    }

    /// `pi_...`.
    fn new_charge_id(&self, ledger: &mut Ledger) -> String {
        ledger.new_id("pi")
    }

    /// A new `ch_...`: a PaymentIntent's Charge.
    fn new_attempt_id(&self, ledger: &mut Ledger, _charge_id: &str) -> String {
        ledger.new_id("ch")
    }

    /// `re_...`.
    fn new_refund_id(&self, ledger: &mut Ledger, _charge_id: &str) -> String {
        ledger.new_id("re")
    }

    fn search_snapshot(&self, ledger: &Ledger, index: usize) -> Value {
        ledger.intents[index].to_json()
    }

    /// `payment_intent.succeeded`, `payment_intent.amount_capturable_updated` (authorized),
    /// `payment_intent.canceled` (an authorization that lapsed) or
    /// `payment_intent.payment_failed`.
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent> {
        let intent = &ledger.intents[index];
        let kind = match intent.status {
            Status::Succeeded => "payment_intent.succeeded",
            Status::RequiresCapture => "payment_intent.amount_capturable_updated",
            Status::Canceled => "payment_intent.canceled",
            _ => "payment_intent.payment_failed",
        };
        let object = intent.to_json();
        // Not caused by an API request, so the event names none.
        vec![event(ledger, kind, object, at_ms, None)]
    }

    /// `refund.updated` (with `previous_attributes`), then `refund.failed` if it failed or
    /// `charge.refunded` if it succeeded.
    fn refund_moved_on(
        &self,
        ledger: &mut Ledger,
        index: usize,
        from: RefundStatus,
        at_ms: i64,
    ) -> Vec<ModelEvent> {
        let previous_attributes = match from {
            RefundStatus::Pending => json!({"status": "pending"}),
            RefundStatus::Succeeded | RefundStatus::Failed => {
                json!({"status": "succeeded", "failure_reason": null})
            }
        };
        let refund = &ledger.refunds[index];
        let status = refund.status;
        let payment_intent = refund.payment_intent.clone();
        let object = refund.to_json();
        // Not caused by an API request, so the events name none.
        let updated = event_with(
            ledger,
            "refund.updated",
            json!({"object": object, "previous_attributes": previous_attributes}),
            at_ms,
            None,
        );
        let follow_up = match status {
            RefundStatus::Failed => Some(event(ledger, "refund.failed", object, at_ms, None)),
            RefundStatus::Succeeded => charge_object(ledger, &payment_intent)
                .map(|charge| event(ledger, "charge.refunded", charge, at_ms, None)),
            RefundStatus::Pending => None,
        };
        std::iter::once(updated).chain(follow_up).collect()
    }

    fn charge_status(&self, intent: &Intent) -> &'static str {
        intent.status.as_str()
    }

    /// The authentication page of a PaymentIntent waiting in `requires_action`: `GET` shows
    /// the amount and two buttons, `POST result=complete|fail` answers it once and redirects
    /// the customer to the `return_url` as Stripe does (`payment_intent` and `redirect_status`
    /// appended to its query). Unknown → 404; not waiting (any more) → 409, nothing changes.
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
                    "Unknown payment",
                    &format!("No such payment_intent: '{}'.", escape_html(charge_id)),
                ),
            );
        };
        let Some(form) = form else {
            let intent = &ledger.intents[index];
            if intent.status != Status::RequiresAction {
                return not_waiting(intent);
            }
            return PageAnswer::html(200, authentication_form(intent));
        };
        let completed = match form_result(form) {
            Ok(completed) => completed,
            Err(refused) => return refused,
        };
        match ledger.complete_action(self, charge_id, completed, now_ms) {
            ActionAttempt::NoSuchCharge => PageAnswer::html(
                404,
                page(
                    "Unknown payment",
                    &format!("No such payment_intent: '{}'.", escape_html(charge_id)),
                ),
            ),
            ActionAttempt::NotWaiting(index) => not_waiting(&ledger.intents[index]),
            ActionAttempt::Done { index, events } => {
                let intent = &ledger.intents[index];
                let redirect_status = if completed { "succeeded" } else { "failed" };
                let outcome = format!(
                    "Authentication {}: the payment is now {}.",
                    if completed { "completed" } else { "failed" },
                    intent.status.as_str()
                );
                match &intent.return_url {
                    Some(return_url) => {
                        let location = redirect_location(return_url, &intent.id, redirect_status);
                        let html = page(
                            "Redirecting",
                            &format!(
                                "{outcome} <a href=\"{}\">Continue</a>",
                                escape_html(&location)
                            ),
                        );
                        PageAnswer {
                            status: 303,
                            location: Some(location),
                            html,
                            events,
                        }
                    }
                    None => PageAnswer {
                        status: 200,
                        location: None,
                        html: page("Done", &outcome),
                        events,
                    },
                }
            }
        }
    }
}

impl StripeFace {
    /// `POST /v1/payment_intents`.
    fn create(&self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        let params = parse_form(request.body);
        let key = match idempotency_key(request.idempotency_key) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: "POST /v1/payment_intents".to_owned(),
            params: params.clone(),
        };
        let validate = || {
            let create = CreateParams::from_params(&params)?;
            // A minimum above the table's: what a charge settled in another currency meets when
            // the exchange rate moves ("a charge must convert to at least the minimum").
            if let Some(&minimum) = self.minimum_overrides.get(&create.currency) {
                if create.amount < minimum {
                    return Err(errors::amount_too_small(minimum, &create.currency));
                }
            }
            Ok(create)
        };
        let creation_key = key.clone();
        let run =
            |ledger: &mut Ledger, create| self.run_create(ledger, create, creation_key, now_ms);
        ledger.validated(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Creates the PaymentIntent a validated request asks for.
    fn run_create(
        &self,
        ledger: &mut Ledger,
        create: CreateParams,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let confirm = create.confirm;
        let expand = create.expand_latest_charge;
        // Stripe, "Create a PaymentIntent": `error_on_requires_action` fails the attempt instead
        // of asking for an action, whether or not a `return_url` came too; so does `off_session`
        // (the customer is not there: a card that needs authentication fails with
        // `authentication_required`).
        let on_action = if create.error_on_requires_action || create.off_session {
            OnAction::Fail
        } else {
            OnAction::Wait {
                return_url: create.return_url,
            }
        };
        let charge = NewCharge {
            amount: create.amount,
            currency: create.currency,
            payment_method: create.payment_method,
            description: None,
            metadata: create.metadata,
            confirm,
            capture_method: create.capture_method,
            on_action,
            hold: Hold::default(),
        };
        let token = charge.payment_method.clone();
        let (mut intent, delivery) = match ledger.attempt_charge(self, charge, key, now_ms) {
            // Stripe attaches the PaymentMethod at creation, so an id that names nothing is
            // `resource_missing` whether or not it is confirmed.
            Attempt::UnknownMethod => return Handled::plain(no_such_payment_method(&token)),
            Attempt::FailedBeforeCharge => {
                return Handled::plain(errors::api_error(
                    "An unexpected error occurred before the charge was attempted (fake PSP: \
                     pm_fake_error_before_charge). Nothing was charged; the request can be retried.",
                ))
            }
            Attempt::Made { intent, delivery } => (*intent, delivery),
        };
        if intent.status == Status::RequiresAction && intent.return_url.is_some() {
            intent.action_url = Some(format!(
                "{}{AUTHENTICATE_PATH}/{}",
                self.base_url, intent.id
            ));
        }
        // What the answer shows: the PaymentIntent, its Charge inlined if asked for (it has no
        // refunds yet).
        let answered = |intent: &Intent| {
            let mut object = intent.to_json();
            if expand && intent.latest_charge.is_some() {
                object["latest_charge"] = charge_json(intent, &[]);
            }
            object
        };
        if !confirm {
            // Nothing attempted, so the token's behaviour does not matter yet, and Stripe sends
            // no event a receiver would act on.
            let reply = Reply::json(200, &answered(&intent));
            ledger.insert(self, intent, now_ms);
            return Handled::plain(reply);
        }

        let (reply, kind) = match (intent.status, intent.failure) {
            (Status::Succeeded, _) => (
                Reply::json(200, &answered(&intent)),
                "payment_intent.succeeded",
            ),
            (Status::RequiresCapture, _) => (
                Reply::json(200, &answered(&intent)),
                "payment_intent.amount_capturable_updated",
            ),
            // A card that needs authentication, confirmed with `error_on_requires_action`:
            // Stripe fails the confirm with a 402 carrying the PaymentIntent.
            (Status::RequiresPaymentMethod, Some(Failure::AuthenticationRequired)) => (
                errors::authentication_required(AUTHENTICATION_REQUIRED_MESSAGE, answered(&intent)),
                "payment_intent.payment_failed",
            ),
            // A failed attempt: back to `requires_payment_method`, answered with a 402 carrying
            // the PaymentIntent, as Stripe answers a declined confirm.
            (Status::RequiresPaymentMethod, Some(Failure::Declined(decline))) => (
                errors::card_declined(
                    decline_code(decline),
                    decline_message(decline),
                    intent.latest_charge.as_deref(),
                    answered(&intent),
                ),
                "payment_intent.payment_failed",
            ),
            (Status::Processing, _) => (
                Reply::json(200, &answered(&intent)),
                "payment_intent.processing",
            ),
            (Status::RequiresAction, _) => (
                Reply::json(200, &answered(&intent)),
                "payment_intent.requires_action",
            ),
            // A confirmed attempt ends in one of the above; kept total rather than panicking.
            _ => return Handled::plain(no_such_payment_method(&intent.payment_method)),
        };
        let event = event(
            ledger,
            kind,
            intent.to_json(),
            now_ms,
            intent.idempotency_key.clone(),
        );
        ledger.insert(self, intent, now_ms);
        Handled {
            reply,
            replayed: false,
            delivery,
            events: vec![event],
        }
    }

    /// `POST /v1/payment_intents/{id}/cancel`.
    fn cancel(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        if let Some(unknown) = params
            .keys()
            .find(|name| *name != "cancellation_reason" && !name.starts_with("expand"))
        {
            return Handled::plain(errors::parameter_unknown(unknown));
        }
        let expand = match expand_latest_charge(&params) {
            Ok(expand) => expand,
            Err(reply) => return Handled::plain(reply),
        };
        let reason = match optional_enum(
            &params,
            "cancellation_reason",
            &[
                "duplicate",
                "fraudulent",
                "requested_by_customer",
                "abandoned",
            ],
        ) {
            Ok(reason) => reason.map(str::to_owned),
            Err(reply) => return Handled::plain(reply),
        };
        let key = match idempotency_key(request.idempotency_key) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: format!("POST /v1/payment_intents/{id}/cancel"),
            params,
        };
        let request_key = key.clone();
        ledger.idempotent(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, |ledger| {
            self.run_cancel(ledger, id, reason, expand, request_key, now_ms)
        })
    }

    /// Cancels a PaymentIntent that may still be cancelled ("Cancel a PaymentIntent"),
    /// releasing an authorization.
    fn run_cancel(
        &self,
        ledger: &mut Ledger,
        id: &str,
        reason: Option<String>,
        expand: bool,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        match ledger.cancel(self, id, reason, key.clone(), now_ms) {
            CancelAttempt::NoSuchCharge => Handled::plain(no_such_intent(id)),
            CancelAttempt::NotCancelable(index) => {
                let intent = &ledger.intents[index];
                let message = format!(
                    "You cannot cancel this PaymentIntent because it has a status of {}. Only a \
                     PaymentIntent with one of the following statuses may be canceled: \
                     requires_payment_method, requires_capture, requires_confirmation, \
                     requires_action, processing.",
                    intent.status.as_str()
                );
                Handled::plain(errors::unexpected_state(&message, intent.to_json()))
            }
            CancelAttempt::Canceled(index) => {
                let object = ledger.intents[index].to_json();
                let shown = shown(ledger, index, expand);
                let event = event(ledger, "payment_intent.canceled", object, now_ms, key);
                Handled::now(Reply::json(200, &shown), vec![event])
            }
        }
    }

    /// `POST /v1/payment_intents/{id}/capture` (`amount_to_capture`, `expand[]`), under an
    /// idempotency key like a create: parameter errors before the key, the rest stored.
    fn capture(
        &self,
        ledger: &mut Ledger,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        let key = match idempotency_key(request.idempotency_key) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: format!("POST /v1/payment_intents/{id}/capture"),
            params: params.clone(),
        };
        let validate = || CaptureParams::from_params(&params);
        let request_key = key.clone();
        let run = |ledger: &mut Ledger, capture| {
            self.run_capture(ledger, id, capture, request_key, now_ms)
        };
        ledger.validated(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Captures (part of) an authorized PaymentIntent ("Capture a PaymentIntent"): only from
    /// `requires_capture`, at most `amount_capturable`; what is not captured is released.
    fn run_capture(
        &self,
        ledger: &mut Ledger,
        id: &str,
        capture: CaptureParams,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let amount = capture.amount_to_capture;
        match ledger.capture(self, id, amount, key.clone(), now_ms) {
            CaptureAttempt::NoSuchCharge => Handled::plain(no_such_intent(id)),
            CaptureAttempt::UnexpectedState(index) => {
                let intent = &ledger.intents[index];
                let message = format!(
                    "This PaymentIntent could not be captured because it has a status of {}. \
                     Only a PaymentIntent with one of the following statuses may be captured: \
                     requires_capture.",
                    intent.status.as_str()
                );
                Handled::plain(errors::unexpected_state(&message, intent.to_json()))
            }
            CaptureAttempt::Exceeds => Handled::plain(errors::capture_exceeds_capturable()),
            CaptureAttempt::Made(index) => {
                let object = ledger.intents[index].to_json();
                let shown = shown(ledger, index, capture.expand_latest_charge);
                let event = event(ledger, "payment_intent.succeeded", object, now_ms, key);
                Handled::now(Reply::json(200, &shown), vec![event])
            }
        }
    }

    /// `POST /v1/refunds`.
    fn create_refund(
        &self,
        ledger: &mut Ledger,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        let key = match idempotency_key(request.idempotency_key) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: "POST /v1/refunds".to_owned(),
            params: params.clone(),
        };
        let validate = || RefundParams::from_params(&params);
        let creation_key = key.clone();
        let run =
            |ledger: &mut Ledger, refund| self.run_refund(ledger, refund, creation_key, now_ms);
        ledger.validated(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, validate, run)
    }

    /// Refunds (part of) a succeeded PaymentIntent's charge, if enough of it is left.
    fn run_refund(
        &self,
        ledger: &mut Ledger,
        request: RefundParams,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let payment_intent = request.payment_intent;
        let attempt = ledger.attempt_refund(
            self,
            &payment_intent,
            request.amount,
            request.reason,
            request.metadata,
            key.clone(),
            now_ms,
        );
        let position = match attempt {
            RefundAttempt::NoSuchCharge => {
                return Handled::plain(errors::invalid_request(
                    Some("resource_missing"),
                    Some("payment_intent"),
                    &format!("No such payment_intent: '{payment_intent}'"),
                ))
            }
            RefundAttempt::NotRefundable => {
                return Handled::plain(errors::charge_not_refundable(&payment_intent))
            }
            RefundAttempt::AlreadyRefunded { charge } => {
                return Handled::plain(errors::charge_already_refunded(&charge))
            }
            RefundAttempt::Exceeds {
                amount,
                unrefunded,
                currency,
            } => {
                return Handled::plain(errors::refund_exceeds_unrefunded(
                    amount, unrefunded, &currency,
                ))
            }
            RefundAttempt::Made(position) => position,
        };
        let refund = &ledger.refunds[position];
        let (object, status) = (refund.to_json(), refund.status);
        let mut events = vec![event(
            ledger,
            "refund.created",
            object.clone(),
            now_ms,
            key.clone(),
        )];
        if status == RefundStatus::Succeeded {
            if let Some(charge) = charge_object(ledger, &payment_intent) {
                events.push(event(ledger, "charge.refunded", charge, now_ms, key));
            }
        }
        Handled::now(Reply::json(200, &object), events)
    }
}

/// `GET /v1/payment_intents/{id}[?expand[]=latest_charge]`: read-after-write.
fn retrieve(ledger: &Ledger, id: &str, query: Option<&str>) -> Reply {
    let Some(&index) = ledger.by_id.get(id) else {
        return no_such_intent(id);
    };
    let params = parse_form(query.unwrap_or_default().as_bytes());
    match expand_latest_charge(&params) {
        Ok(expand) => Reply::json(200, &shown(ledger, index, expand)),
        Err(reply) => reply,
    }
}

/// The PaymentIntent at `index` as an answer shows it: with `expand`, its Charge (and that
/// Charge's refunds) inlined as `latest_charge` ("Expanding responses"), once there is one.
fn shown(ledger: &Ledger, index: usize, expand: bool) -> Value {
    let intent = &ledger.intents[index];
    let mut object = intent.to_json();
    if expand && intent.latest_charge.is_some() {
        if let Some(charge) = charge_object(ledger, &intent.id) {
            object["latest_charge"] = charge;
        }
    }
    object
}

/// The customer's redirect back to `return_url` after an authentication, as Stripe sends it:
/// `payment_intent=<id>&redirect_status=succeeded|failed` appended to its query (after `&` if it
/// has one already), before any fragment.
fn redirect_location(return_url: &str, payment_intent: &str, redirect_status: &str) -> String {
    let (base, fragment) = match return_url.split_once('#') {
        Some((base, fragment)) => (base, Some(fragment)),
        None => (return_url, None),
    };
    let separator = match base.find('?') {
        Some(at) if at + 1 == base.len() || base.ends_with('&') => "",
        Some(_) => "&",
        None => "?",
    };
    let mut location = format!(
        "{base}{separator}payment_intent={payment_intent}&redirect_status={redirect_status}"
    );
    if let Some(fragment) = fragment {
        location.push('#');
        location.push_str(fragment);
    }
    location
}

/// 409: the PaymentIntent is no longer waiting for an authentication; nothing changed.
fn not_waiting(intent: &Intent) -> PageAnswer {
    PageAnswer::html(
        409,
        page(
            "Nothing to authenticate",
            &format!(
                "The payment <code>{}</code> is {}: it is not waiting for authentication.",
                escape_html(&intent.id),
                intent.status.as_str()
            ),
        ),
    )
}

/// `GET /v1/payment_intents/search?query=metadata['<k>']:'<v>'[&limit=N][&page=P]`: what the
/// search index shows at `now_ms`, in creation order.
fn search(ledger: &Ledger, query: Option<&str>, now_ms: i64) -> Reply {
    let params = parse_form(query.unwrap_or_default().as_bytes());
    if let Some(unknown) = params
        .keys()
        .find(|name| !["query", "limit", "page"].contains(&name.as_str()))
    {
        return errors::parameter_unknown(unknown);
    }
    let Some(query) = params.get("query").filter(|q| !q.is_empty()) else {
        return errors::parameter_missing("query");
    };
    let Some((key, value)) = parse_metadata_query(query) else {
        return errors::invalid_request(
            Some("parameter_invalid"),
            Some("query"),
            &format!(
                "The fake PSP only understands queries of the form metadata['key']:'value'; \
                 got: {query}"
            ),
        );
    };
    let limit = match params.get("limit").map(|limit| limit.parse::<usize>()) {
        None => SEARCH_LIMIT_DEFAULT,
        Some(Ok(limit)) if (1..=SEARCH_LIMIT_MAX).contains(&limit) => limit,
        Some(_) => {
            return errors::invalid_request(
                Some("parameter_invalid_integer"),
                Some("limit"),
                &format!("This value must be between 1 and {SEARCH_LIMIT_MAX}."),
            )
        }
    };
    let offset = match params.get("page") {
        None => 0,
        Some(page) => match page
            .strip_prefix(PAGE_CURSOR_PREFIX)
            .and_then(|offset| offset.parse::<usize>().ok())
        {
            Some(offset) => offset,
            None => {
                return errors::invalid_request(
                    Some("parameter_invalid"),
                    Some("page"),
                    &format!("Invalid page cursor: {page}"),
                )
            }
        },
    };
    let matches: Vec<&Value> = ledger
        .intents
        .iter()
        .filter_map(|intent| intent.searchable_at(now_ms))
        .filter(|snapshot| snapshot["metadata"][key.as_str()].as_str() == Some(value.as_str()))
        .collect();
    let end = offset.saturating_add(limit);
    let data: Vec<Value> = matches
        .iter()
        .skip(offset)
        .take(limit)
        .map(|snapshot| (*snapshot).clone())
        .collect();
    let has_more = matches.len() > end;
    let next_page = has_more.then(|| format!("{PAGE_CURSOR_PREFIX}{end}"));
    Reply::json(
        200,
        &json!({
            "object": "search_result",
            "data": data,
            "has_more": has_more,
            "next_page": next_page,
            "url": "/v1/payment_intents/search",
        }),
    )
}

/// The Charge of a PaymentIntent with its refunds, newest first, as `charge.refunded` carries
/// it; `None` for an unknown PaymentIntent.
fn charge_object(ledger: &Ledger, payment_intent: &str) -> Option<Value> {
    let intent = &ledger.intents[*ledger.by_id.get(payment_intent)?];
    let refunds: Vec<&Refund> = ledger
        .refunds_of
        .get(payment_intent)
        .map(|positions| {
            positions
                .iter()
                .rev()
                .map(|&position| &ledger.refunds[position])
                .collect()
        })
        .unwrap_or_default();
    Some(charge_json(intent, &refunds))
}

/// `GET /v1/refunds/{id}`: read-after-write.
fn retrieve_refund(ledger: &Ledger, id: &str) -> Reply {
    match ledger.refund_by_id.get(id) {
        Some(&position) => Reply::json(200, &ledger.refunds[position].to_json()),
        None => errors::resource_missing("id", &format!("No such refund: '{id}'")),
    }
}

/// `GET /v1/refunds[?payment_intent=pi_...][&charge=ch_...][&limit=N][&starting_after=re_...]`:
/// every matching refund as it is now, newest first ("List all refunds"). Unlike search, a
/// list is read-after-write.
fn list_refunds(ledger: &Ledger, query: Option<&str>) -> Reply {
    let params = parse_form(query.unwrap_or_default().as_bytes());
    if let Some(unknown) = params.keys().find(|name| {
        !["payment_intent", "charge", "limit", "starting_after"].contains(&name.as_str())
    }) {
        return errors::parameter_unknown(unknown);
    }
    let limit = match params.get("limit").map(|limit| limit.parse::<usize>()) {
        None => LIST_LIMIT_DEFAULT,
        Some(Ok(limit)) if (1..=LIST_LIMIT_MAX).contains(&limit) => limit,
        Some(_) => {
            return errors::invalid_request(
                Some("parameter_invalid_integer"),
                Some("limit"),
                &format!("This value must be between 1 and {LIST_LIMIT_MAX}."),
            )
        }
    };
    let payment_intent = params.get("payment_intent");
    if let Some(id) = payment_intent.filter(|id| !ledger.by_id.contains_key(id.as_str())) {
        return errors::invalid_request(
            Some("resource_missing"),
            Some("payment_intent"),
            &format!("No such payment_intent: '{id}'"),
        );
    }
    let charge = params.get("charge");
    if let Some(id) = charge.filter(|id| {
        !ledger
            .intents
            .iter()
            .any(|intent| intent.latest_charge.as_ref() == Some(*id))
    }) {
        return errors::invalid_request(
            Some("resource_missing"),
            Some("charge"),
            &format!("No such charge: '{id}'"),
        );
    }
    // Refunds older than the cursor, which must name a refund.
    let before = match params.get("starting_after") {
        None => ledger.refunds.len(),
        Some(cursor) => match ledger.refund_by_id.get(cursor) {
            Some(&position) => position,
            None => {
                return errors::invalid_request(
                    Some("resource_missing"),
                    Some("starting_after"),
                    &format!("No such refund: '{cursor}'"),
                )
            }
        },
    };
    let mut matching = ledger.refunds[..before].iter().rev().filter(|refund| {
        payment_intent.is_none_or(|id| refund.payment_intent == *id)
            && charge.is_none_or(|id| refund.charge.as_ref() == Some(id))
    });
    let data: Vec<Value> = matching.by_ref().take(limit).map(Refund::to_json).collect();
    let has_more = matching.next().is_some();
    Reply::json(
        200,
        &json!({
            "object": "list",
            "data": data,
            "has_more": has_more,
            "url": "/v1/refunds",
        }),
    )
}

/// An event of `kind` about an object (`object`, its JSON at that moment), caused at `at_ms`
/// by the request with idempotency key `key`, if any.
fn event(
    ledger: &mut Ledger,
    kind: &str,
    object: Value,
    at_ms: i64,
    key: Option<String>,
) -> ModelEvent {
    event_with(ledger, kind, json!({ "object": object }), at_ms, key)
}

/// An event of `kind` whose `data` is given whole (`object`, and `previous_attributes` for
/// `*.updated` events).
fn event_with(
    ledger: &mut Ledger,
    kind: &str,
    data: Value,
    at_ms: i64,
    key: Option<String>,
) -> ModelEvent {
    let id = ledger.new_id("evt");
    let body = json!({
        "id": id,
        "object": "event",
        "type": kind,
        "created": at_ms.div_euclid(1000),
        "api_version": API_VERSION,
        "livemode": false,
        "data": data,
        "request": { "id": null, "idempotency_key": key },
    });
    ModelEvent {
        id,
        kind: kind.to_owned(),
        body: body.to_string(),
    }
}

/// The `Idempotency-Key` header, validated ("Idempotent requests": up to 255 characters).
fn idempotency_key(raw: Option<&str>) -> Result<Option<String>, Reply> {
    let Some(key) = raw else {
        return Ok(None);
    };
    if is_valid_idempotency_key(key) {
        Ok(Some(key.to_owned()))
    } else {
        Err(errors::invalid_request(
            None,
            None,
            &format!(
                "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters."
            ),
        ))
    }
}

/// 404 for an unknown PaymentIntent id.
fn no_such_intent(id: &str) -> Reply {
    errors::resource_missing("id", &format!("No such payment_intent: '{id}'"))
}

/// 400 for a `payment_method` that names no PaymentMethod.
fn no_such_payment_method(token: &str) -> Reply {
    errors::invalid_request(
        Some("resource_missing"),
        Some("payment_method"),
        &format!("No such PaymentMethod: '{token}'"),
    )
}

/// 404 for a route the fake does not serve, in Stripe's words.
fn unrecognized(request: &WireRequest<'_>) -> Reply {
    errors::resource_missing(
        "url",
        &format!(
            "Unrecognized request URL ({}: {}).",
            request.method, request.path
        ),
    )
}

/// Parses `metadata['<key>']:'<value>'` (single or double quotes, optional spaces around `:`).
fn parse_metadata_query(query: &str) -> Option<(String, String)> {
    let rest = query.trim().strip_prefix("metadata[")?;
    let (key, rest) = quoted(rest)?;
    let rest = rest.strip_prefix(']')?.trim_start().strip_prefix(':')?;
    let (value, rest) = quoted(rest.trim_start())?;
    (rest.trim().is_empty() && !key.is_empty()).then(|| (key.to_owned(), value.to_owned()))
}

/// Splits `'text'rest` or `"text"rest` into `text` and `rest`.
fn quoted(input: &str) -> Option<(&str, &str)> {
    let quote = input.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = &input[1..];
    let end = inner.find(quote)?;
    Some((&inner[..end], &inner[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_queries_accept_both_quote_styles() {
        let expected = Some(("payment_id".to_owned(), "pay_1".to_owned()));
        assert_eq!(
            parse_metadata_query("metadata['payment_id']:'pay_1'"),
            expected
        );
        assert_eq!(
            parse_metadata_query("metadata[\"payment_id\"]:\"pay_1\""),
            expected
        );
        assert_eq!(
            parse_metadata_query(" metadata['payment_id'] : 'pay_1' "),
            expected
        );
        assert_eq!(
            parse_metadata_query("metadata['k']:''"),
            Some(("k".to_owned(), String::new()))
        );
    }

    #[test]
    fn other_query_forms_are_refused() {
        for query in [
            "status:'succeeded'",
            "metadata['payment_id']:'pay_1' AND status:'succeeded'",
            "metadata[payment_id]:'pay_1'",
            "metadata['payment_id']:pay_1",
            "metadata['payment_id':'pay_1'",
            "metadata['']:'x'",
            "metadata['a\"]:'x'",
        ] {
            assert_eq!(parse_metadata_query(query), None, "{query}");
        }
    }
}
