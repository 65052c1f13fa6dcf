//! The PSP state machine: one synchronous, deterministic model of charges and refunds that both
//! the fake PSP's HTTP server and payonce's in-process simulation call, speaking Stripe's
//! PaymentIntents and Refunds (this module, the default face), Omise's Charges, Refunds and
//! Search (the `omise` module) or 2C2P's Payment Token, Do Payment and Payment Inquiry (the
//! `twoc2p` module), as [`ModelConfig::provider`] says. One model speaks one face.
//!
//! What the faces share is everything but the wire: the charges and refunds themselves and their
//! time-driven transitions, the test tokens and what each does (`behaviour`), the idempotency
//! layer (stored answers replayed, other parameters or an answer still being computed refused,
//! keys forgotten 24–48 h after), search lag, and the provider-neutral operations each face
//! calls after validating a request in its own terms — `Inner::attempt_charge` and
//! `Inner::attempt_refund`. Each face parses its requests, authenticates them, and writes its
//! own objects, errors and webhook events.
//!
//! The model takes a request as it came off the wire ([`WireRequest`]) and the time, and returns
//! the answer to write ([`WireAnswer`]): status, body, whether it is an idempotent replay, how to
//! deliver it, and the webhook events it caused. It knows nothing of sockets, async runtimes or
//! the system clock: time is passed in (epoch ms, never running backwards inside the model), and
//! every random choice (ids, how long an idempotency key is remembered, search lag) comes from a
//! [`fastrand::Rng`] seeded in [`StripeModel::new`], so one seed and one call sequence give
//! byte-identical answers. Maps whose order could reach an answer are `BTreeMap`s.
//!
//! The Stripe face is as strict as Stripe wherever Stripe is strict, so code tested against it
//! cannot rely on a kinder PSP than production. Each rule names the Stripe documentation it
//! follows (the Omise face's rules are in the `omise` module):
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
//!   `requires_capture`, `requires_confirmation`, `requires_action`, `processing`.
//! - **Search** ("Search", docs.stripe.com/search, "Data freshness"): not read-after-write; each
//!   PaymentIntent, and each change to it, shows up only after a random lag. Retrieving by id is
//!   read-after-write.
//! - **Authentication** ("Authentication" in the API reference): a missing or wrong secret key →
//!   401 before anything else is looked at.
//! - **Refunds** ("Create a refund", "The Refund object", "Error codes"): `POST /v1/refunds` takes
//!   `payment_intent` (required here), `amount` (at least 1; default: what is left unrefunded),
//!   `reason` (`duplicate`, `fraudulent`, `requested_by_customer`) and `metadata`, under an
//!   idempotency key exactly like a PaymentIntent create. Parameter errors come before the key;
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

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};

use crate::behaviour::{behaviour_for, refund_behaviour_for, Behaviour, RefundBehaviour};
use crate::params::{optional_enum, parse_form, CreateParams, Params, RefundParams};
use crate::reply::{self, Reply};
use crate::state::{Failure, FakeCharge, FakeRefund, Intent, Refund, RefundStatus, Status};
use crate::Provider;

/// The API version stamped on every event: from 2024-10-28 on, Stripe sends `refund.created`,
/// `refund.updated` and `refund.failed` for charge refunds too ("Changelog", 2024-10-28.acacia).
const API_VERSION: &str = "2024-10-28.acacia";

/// Why a `pm_card_refundFail` refund fails (Stripe's test card answers so; "The Refund object":
/// `failure_reason` is one of `lost_or_stolen_card`, `expired_or_canceled_card`, ...).
const REFUND_FAILURE_REASON: &str = "expired_or_canceled_card";

/// Stripe's limit on `Idempotency-Key` length ("Idempotent requests": "up to 255 characters").
pub(crate) const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A stored idempotency key is kept at least this long ("Idempotent requests": keys may be
/// removed once they are at least 24 hours old)...
const KEY_KEPT_AT_LEAST_MS: i64 = 24 * 60 * 60 * 1000;

/// ...and forgotten no later than this, so that nobody can rely on forgetting at exactly 24 h.
const KEY_KEPT_AT_MOST_MS: i64 = 48 * 60 * 60 * 1000;

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

/// How the model behaves where Stripe's behaviour depends on time or configuration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The wire format the model speaks; Stripe by default.
    pub provider: Provider,
    /// The only secret key accepted, as `Authorization: Bearer <api_key>` (Stripe) or as the
    /// HTTP Basic user name (Omise); anything else is 401.
    pub api_key: String,
    /// Each PaymentIntent, and each later change to it, becomes visible to search after a lag
    /// drawn at random in `[0, search_lag_max]`. Stripe: usually under a minute, up to about an
    /// hour during incidents. Zero makes search read-after-write.
    pub search_lag_max: Duration,
    /// How long a `pm_fake_processing` PaymentIntent stays `processing` before it succeeds.
    pub processing_for: Duration,
    /// How long a `pm_fake_requires_action` PaymentIntent stays `requires_action` before it fails
    /// with `authentication_required` (nobody ever authenticates).
    pub requires_action_for: Duration,
    /// How long a `pm_fake_slow` answer is held back ([`Delivery::After`]).
    pub slow_delay: Duration,
    /// Per lowercase currency, a minimum charge above Stripe's table (minor units): a charge
    /// settled in another currency must convert to at least the settlement currency's minimum,
    /// so the effective minimum moves with exchange rates. Empty by default.
    pub minimum_overrides: BTreeMap<String, i64>,
    /// How long a refund of a `pm_card_refundFail` charge reads `succeeded` before it fails.
    pub refund_fail_after: Duration,
    /// How long a refund of a `pm_fake_refund_pending` charge stays `pending` before it succeeds.
    pub refund_pending_for: Duration,
    /// Omise face only: whether `Idempotency-Key` works as on the Stripe face (the default) or is
    /// ignored. Omise's documentation does not confirm the header; see the `omise` module.
    pub omise_honours_idempotency_key: bool,
    /// Omise face only: whether `Idempotency-Key` works on refund creates (when keys work at
    /// all). Off, a re-sent refund creates a second one: Omise documents no idempotency for
    /// refunds, and the simulation turns this off per seed.
    pub omise_honours_refund_keys: bool,
    /// 2C2P face only: the one merchant (`merchantID`) it knows; its secret key is `api_key`.
    pub twoc2p_merchant_id: String,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            provider: Provider::Stripe,
            api_key: crate::DEFAULT_API_KEY.to_owned(),
            search_lag_max: Duration::ZERO,
            processing_for: Duration::from_secs(5 * 60),
            requires_action_for: Duration::from_secs(60 * 60),
            // Long enough to outlast any sane client timeout, which is the point of the token.
            slow_delay: Duration::from_secs(30),
            minimum_overrides: BTreeMap::new(),
            refund_fail_after: Duration::from_secs(60),
            refund_pending_for: Duration::from_secs(10 * 60),
            omise_honours_idempotency_key: true,
            omise_honours_refund_keys: true,
            twoc2p_merchant_id: crate::DEFAULT_TWOC2P_MERCHANT_ID.to_owned(),
        }
    }
}

/// One API request as it came off the wire.
#[derive(Clone, Copy, Debug)]
pub struct WireRequest<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The path without the query, e.g. `/v1/payment_intents/pi_x/cancel` (Stripe) or
    /// `/charges/chrg_test_x/refunds` (Omise).
    pub path: &'a str,
    /// The raw query string, if any (search, lists).
    pub query: Option<&'a str>,
    /// The raw `Authorization` header value, if any.
    pub authorization: Option<&'a str>,
    /// The raw `Idempotency-Key` header value, if any. Ignored on `GET`, as at Stripe.
    pub idempotency_key: Option<&'a str>,
    /// The `application/x-www-form-urlencoded` body.
    pub body: &'a [u8],
}

/// How the server must deliver an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Write it now.
    Now,
    /// Write nothing at all and close the connection: the request took effect, the caller never
    /// learns it (`pm_fake_lost_response`).
    Sever,
    /// Write it after this long (`pm_fake_slow`).
    After(Duration),
}

/// The model's answer to one request.
#[derive(Clone, Debug)]
pub struct WireAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: String,
    /// Answered from the idempotency cache (the server sets `Idempotent-Replayed: true`).
    pub replayed: bool,
    /// How to deliver it.
    pub delivery: Delivery,
    /// The webhook events to send, in the order they happened: those of time-driven transitions
    /// that fell due by this request's time and were not yet handed out by [`StripeModel::tick`],
    /// then those the request itself caused. Every event is handed out exactly once.
    pub events: Vec<ModelEvent>,
}

/// One webhook event.
#[derive(Clone, Debug)]
pub struct ModelEvent {
    /// `evt_...` (Stripe) or `evnt_test_...` (Omise), also the de-duplication key receivers use.
    pub id: String,
    /// E.g. `payment_intent.succeeded`, `refund.created`, `charge.refunded` (Stripe's `type`) or
    /// `charge.create`, `charge.complete`, `refund.create` (Omise's `key`).
    pub kind: String,
    /// The event JSON in the face's format, serialised once so that every copy and retry sends
    /// the same bytes.
    pub body: String,
}

/// The Stripe PaymentIntents and Refunds model. All methods take `&self` (the state sits behind a
/// mutex), so one model can be shared between threads; each call is atomic.
#[derive(Debug)]
pub struct StripeModel {
    config: ModelConfig,
    inner: Mutex<Inner>,
}

impl StripeModel {
    /// A model with no PaymentIntents, drawing all its randomness from `seed`.
    pub fn new(config: ModelConfig, seed: u64) -> Self {
        Self {
            config,
            inner: Mutex::new(Inner {
                rng: fastrand::Rng::with_seed(seed),
                clock_ms: i64::MIN,
                requests_seen: 0,
                intents: Vec::new(),
                by_id: BTreeMap::new(),
                refunds: Vec::new(),
                refund_by_id: BTreeMap::new(),
                refunds_of: BTreeMap::new(),
                keys: BTreeMap::new(),
                due_events: Vec::new(),
                twoc2p: crate::twoc2p::Invoices::default(),
            }),
        }
    }

    /// Handles one API request atomically at `now_ms` (epoch ms). Time-driven transitions due by
    /// then are applied first, so the request sees the world as it is at `now_ms`.
    pub fn handle(&self, request: &WireRequest<'_>, now_ms: i64) -> WireAnswer {
        let mut inner = self.lock();
        let now_ms = inner.observe(&self.config, now_ms);
        let handled = match self.config.provider {
            Provider::Stripe => inner.dispatch(&self.config, request, now_ms),
            Provider::Omise => inner.omise_dispatch(&self.config, request, now_ms),
            Provider::TwoC2p => inner.twoc2p_dispatch(&self.config, request, now_ms),
        };
        let mut events = std::mem::take(&mut inner.due_events);
        events.extend(handled.events);
        WireAnswer {
            status: handled.reply.status,
            body: handled.reply.body,
            replayed: handled.replayed,
            delivery: handled.delivery,
            events,
        }
    }

    /// Advances time-driven transitions up to `now_ms` (`processing` → `succeeded`,
    /// `requires_action` → `requires_payment_method`, refund `pending` → `succeeded` and
    /// `succeeded` → `failed`) and returns the events not yet handed out, in the order they
    /// happened.
    pub fn tick(&self, now_ms: i64) -> Vec<ModelEvent> {
        let mut inner = self.lock();
        inner.observe(&self.config, now_ms);
        std::mem::take(&mut inner.due_events)
    }

    /// When [`tick`](Self::tick) next has something to do (epoch ms), if ever: the earliest
    /// pending time-driven transition, or the latest time seen if events are waiting already.
    pub fn next_transition_ms(&self) -> Option<i64> {
        let inner = self.lock();
        if !inner.due_events.is_empty() {
            return Some(inner.clock_ms);
        }
        let intents = inner.intents.iter().filter_map(|intent| intent.due_ms);
        let refunds = inner.refunds.iter().filter_map(|refund| refund.due_ms);
        intents.chain(refunds).min()
    }

    /// How many PaymentIntents (charges) exist: [`StripeModel::charges`]' length, without
    /// copying them.
    pub fn charge_count(&self) -> usize {
        self.lock().intents.len()
    }

    /// Every PaymentIntent (charge) in creation order, as it is now, in the face's words.
    pub fn charges(&self) -> Vec<FakeCharge> {
        let provider = self.config.provider;
        let inner = self.lock();
        inner
            .intents
            .iter()
            .map(|c| c.to_charge(provider))
            .collect()
    }

    /// Every Refund in creation order, as it is now, in the face's words.
    pub fn refunds(&self) -> Vec<FakeRefund> {
        let provider = self.config.provider;
        let inner = self.lock();
        inner.refunds.iter().map(|r| r.to_fake(provider)).collect()
    }

    /// The wire format this model speaks.
    pub fn provider(&self) -> Provider {
        self.config.provider
    }

    /// Requests seen so far, whatever their answer (401s included): those on `/v1/*` (Stripe),
    /// every request the model is handed (Omise).
    pub fn requests_seen(&self) -> u64 {
        self.lock().requests_seen
    }

    /// Marks `key` as held by a request that is still running, as if one had been received and
    /// not yet answered: until [`end_in_flight`](Self::end_in_flight), requests with that key get
    /// 409 `idempotency_key_in_use`. Returns `false` (and changes nothing) if the key is already
    /// in flight or has a stored answer, which a running request could not coexist with.
    pub fn begin_in_flight(&self, key: &str) -> bool {
        let mut inner = self.lock();
        let now_ms = inner.clock_ms;
        inner.forget_pruned_keys(now_ms);
        if inner.keys.contains_key(key) {
            return false;
        }
        inner.keys.insert(key.to_owned(), KeyEntry::InFlight);
        true
    }

    /// Releases a key marked by [`begin_in_flight`](Self::begin_in_flight) without storing an
    /// answer, like a request that failed before the endpoint did anything. Returns whether the
    /// key was in flight.
    pub fn end_in_flight(&self, key: &str) -> bool {
        let mut inner = self.lock();
        if matches!(inner.keys.get(key), Some(KeyEntry::InFlight)) {
            inner.keys.remove(key);
            return true;
        }
        false
    }

    /// Locks the state. Every critical section leaves it consistent before anything can panic,
    /// so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What an idempotency key is compared on: the endpoint and its parsed parameter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    /// Method and concrete path, e.g. `POST /v1/payment_intents/pi_1/cancel`: Stripe refuses a
    /// key reused on another endpoint just like one reused with other parameters.
    pub(crate) route: String,
    /// The parsed parameters (order and percent-encoding do not matter).
    pub(crate) params: Params,
}

/// How a face words the idempotency layer's two refusals; the layer itself is shared.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyRefusals {
    /// The key was first used with other parameters or on another endpoint.
    pub(crate) mismatch: fn(&str) -> Reply,
    /// A request holding the key is still running.
    pub(crate) in_use: fn(&str) -> Reply,
}

/// The Stripe face's refusals: 400 `idempotency_error` and 409 `idempotency_key_in_use`.
const STRIPE_KEY_REFUSALS: KeyRefusals = KeyRefusals {
    mismatch: reply::idempotency_mismatch,
    in_use: reply::idempotency_in_use,
};

/// What the model holds for a key.
#[derive(Debug)]
enum KeyEntry {
    /// A request holding the key is running ([`StripeModel::begin_in_flight`]).
    InFlight,
    /// The stored answer, replayed to later requests with the same fingerprint.
    Done {
        fingerprint: Fingerprint,
        reply: Reply,
        /// From this moment (epoch ms) the key is forgotten.
        prune_at_ms: i64,
    },
}

/// The outcome of presenting an idempotency key.
#[derive(Debug)]
enum Claim {
    /// Unknown key: run the request.
    Fresh,
    /// Answered before with the same parameters: send this again.
    Replay(Reply),
    /// Answered before, with other parameters or on another endpoint.
    Mismatch,
    /// Another request with this key is running.
    InUse,
}

/// A request's answer before it becomes a [`WireAnswer`].
#[derive(Debug)]
pub(crate) struct Handled {
    pub(crate) reply: Reply,
    pub(crate) replayed: bool,
    pub(crate) delivery: Delivery,
    pub(crate) events: Vec<ModelEvent>,
}

impl Handled {
    /// An answer written at once that caused no events.
    pub(crate) fn plain(reply: Reply) -> Self {
        Self {
            reply,
            replayed: false,
            delivery: Delivery::Now,
            events: Vec::new(),
        }
    }
}

/// A time-driven transition waiting in the model; ordered so that transitions due at the same
/// moment apply in a fixed order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// `intents[i]` moves on.
    Intent(usize),
    /// `refunds[i]` moves on.
    Refund(usize),
}

/// Everything the model remembers, whatever its face.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) rng: fastrand::Rng,
    /// The latest time seen, epoch ms; time never runs backwards inside the model.
    clock_ms: i64,
    pub(crate) requests_seen: u64,
    /// In creation order, which is the order `charges()` and search report.
    pub(crate) intents: Vec<Intent>,
    /// id → position in `intents`.
    pub(crate) by_id: BTreeMap<String, usize>,
    /// In creation order, which is the order `refunds()` reports (lists go newest first).
    pub(crate) refunds: Vec<Refund>,
    /// id → position in `refunds`.
    pub(crate) refund_by_id: BTreeMap<String, usize>,
    /// PaymentIntent id → positions in `refunds` of its refunds, oldest first.
    pub(crate) refunds_of: BTreeMap<String, Vec<usize>>,
    keys: BTreeMap<String, KeyEntry>,
    /// Events of time-driven transitions not yet handed out.
    due_events: Vec<ModelEvent>,
    /// The 2C2P face's invoices and payment tokens (empty on the other faces).
    pub(crate) twoc2p: crate::twoc2p::Invoices,
}

/// A charge request a face has validated, in the model's own terms.
#[derive(Clone, Debug)]
pub(crate) struct NewCharge {
    /// Minor units, within the face's limits for the currency.
    pub(crate) amount: i64,
    /// Lowercase ISO code.
    pub(crate) currency: String,
    /// The test token, which picks the behaviour.
    pub(crate) payment_method: String,
    /// Kept for faces that show it (Omise).
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    /// Attempt the charge now; `false` only creates it (Stripe's `confirm=false`).
    pub(crate) confirm: bool,
}

/// What attempting a charge came to, before a face writes it.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The token names no payment method: nothing was created.
    UnknownMethod,
    /// `pm_fake_error_before_charge`: the PSP failed before charging; nothing was created, and
    /// the face's 5xx answer is not stored under the key.
    FailedBeforeCharge,
    /// The charge, not yet recorded: the face writes its answer and events from it, then hands
    /// it to [`Inner::insert`] (in that order, so that one seed draws ids in one order).
    Made {
        intent: Box<Intent>,
        delivery: Delivery,
    },
}

/// What attempting a refund came to, before a face writes it.
#[derive(Debug)]
pub(crate) enum RefundAttempt {
    /// No charge with that id.
    NoSuchCharge,
    /// The charge did not succeed, so there is nothing to refund.
    NotRefundable,
    /// Pending and succeeded refunds already hold the whole amount.
    AlreadyRefunded { charge: String },
    /// More than is left to refund was asked for.
    Exceeds {
        amount: i64,
        unrefunded: i64,
        currency: String,
    },
    /// The refund, recorded at this position of `refunds`.
    Made(usize),
}

impl Inner {
    /// Moves the clock to `now_ms` (never backwards), applies the transitions due by then and
    /// forgets pruned keys. Returns the model's time.
    fn observe(&mut self, config: &ModelConfig, now_ms: i64) -> i64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        let now_ms = self.clock_ms;
        self.advance(config, now_ms);
        self.forget_pruned_keys(now_ms);
        now_ms
    }

    /// Applies every time-driven transition due by `now_ms`, in the order they fell due.
    fn advance(&mut self, config: &ModelConfig, now_ms: i64) {
        let intents = self
            .intents
            .iter()
            .enumerate()
            .filter_map(|(index, intent)| intent.due_ms.map(|due_ms| (due_ms, Due::Intent(index))));
        let refunds = self
            .refunds
            .iter()
            .enumerate()
            .filter_map(|(index, refund)| refund.due_ms.map(|due_ms| (due_ms, Due::Refund(index))));
        let mut due: Vec<(i64, Due)> = intents
            .chain(refunds)
            .filter(|(due_ms, _)| *due_ms <= now_ms)
            .collect();
        due.sort_unstable();
        for (at_ms, what) in due {
            match what {
                Due::Intent(index) => self.advance_intent(config, index, at_ms),
                Due::Refund(index) => self.advance_refund(config, index, at_ms),
            }
        }
    }

    /// `processing` → `succeeded`, or `requires_action` → `requires_payment_method` with
    /// `authentication_required`, at `at_ms`.
    fn advance_intent(&mut self, config: &ModelConfig, index: usize, at_ms: i64) {
        let intent = &mut self.intents[index];
        intent.due_ms = None;
        let kind = match intent.status {
            Status::Processing => {
                intent.status = Status::Succeeded;
                "payment_intent.succeeded"
            }
            Status::RequiresAction => {
                intent.status = Status::RequiresPaymentMethod;
                intent.failure = Some(Failure::AuthenticationRequired);
                "payment_intent.payment_failed"
            }
            _ => return,
        };
        self.record_search_version(config, index, at_ms);
        if config.provider == Provider::Omise {
            let event = self.omise_charge_complete(index, at_ms);
            self.due_events.push(event);
            return;
        }
        if config.provider == Provider::TwoC2p {
            let event = self.twoc2p_notification(config, &self.intents[index]);
            self.due_events.extend(event);
            return;
        }
        let object = self.intents[index].to_json();
        // Not caused by an API request, so the event names none.
        let event = self.event(kind, object, at_ms, None);
        self.due_events.push(event);
    }

    /// A refund's status change at `at_ms`: `pending` → `succeeded` (`pm_fake_refund_pending`),
    /// or `succeeded` → `failed` with `expired_or_canceled_card` (`pm_card_refundFail`), which
    /// makes its amount refundable again. The Omise face sends no event for it: Omise documents
    /// no event for a refund's later change.
    fn advance_refund(&mut self, config: &ModelConfig, index: usize, at_ms: i64) {
        let refund = &mut self.refunds[index];
        refund.due_ms = None;
        let previous_attributes = match refund.status {
            RefundStatus::Pending => {
                refund.status = RefundStatus::Succeeded;
                json!({"status": "pending"})
            }
            RefundStatus::Succeeded => {
                refund.status = RefundStatus::Failed;
                refund.failure_reason = Some(REFUND_FAILURE_REASON);
                json!({"status": "succeeded", "failure_reason": null})
            }
            RefundStatus::Failed => return,
        };
        if config.provider != Provider::Stripe {
            return;
        }
        let status = refund.status;
        let payment_intent = refund.payment_intent.clone();
        let object = refund.to_json();
        // Not caused by an API request, so the events name none.
        let updated = self.event_with(
            "refund.updated",
            json!({"object": object, "previous_attributes": previous_attributes}),
            at_ms,
            None,
        );
        self.due_events.push(updated);
        let follow_up = match status {
            RefundStatus::Failed => Some(self.event("refund.failed", object, at_ms, None)),
            RefundStatus::Succeeded => self
                .charge_json(&payment_intent)
                .map(|charge| self.event("charge.refunded", charge, at_ms, None)),
            RefundStatus::Pending => None,
        };
        self.due_events.extend(follow_up);
    }

    /// Forgets every stored key whose prune time has come.
    fn forget_pruned_keys(&mut self, now_ms: i64) {
        self.keys.retain(|_, entry| match entry {
            KeyEntry::InFlight => true,
            KeyEntry::Done { prune_at_ms, .. } => *prune_at_ms > now_ms,
        });
    }

    /// Routes a request. Only `/v1/*` is counted and needs the API key.
    fn dispatch(
        &mut self,
        config: &ModelConfig,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let rest = if request.path == "/v1" {
            Some("")
        } else {
            request.path.strip_prefix("/v1/")
        };
        let Some(rest) = rest else {
            return Handled::plain(unrecognized(request));
        };
        self.requests_seen += 1;
        // Stripe API reference, "Authentication": requests without a valid secret key fail
        // before anything else is looked at.
        let authorised = request
            .authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|key| key.trim() == config.api_key);
        if !authorised {
            return Handled::plain(reply::unauthorized());
        }
        let segments: Vec<&str> = rest.split('/').collect();
        match (request.method, segments.as_slice()) {
            ("POST", ["payment_intents"]) => self.create(config, request, now_ms),
            ("GET", ["payment_intents", "search"]) => {
                Handled::plain(self.search(request.query, now_ms))
            }
            ("GET", ["payment_intents", id]) if !id.is_empty() => Handled::plain(self.retrieve(id)),
            ("POST", ["payment_intents", id, "cancel"]) if !id.is_empty() => {
                self.cancel(config, id, request, now_ms)
            }
            ("POST", ["refunds"]) => self.create_refund(config, request, now_ms),
            ("GET", ["refunds"]) => Handled::plain(self.list_refunds(request.query)),
            ("GET", ["refunds", id]) if !id.is_empty() => Handled::plain(self.retrieve_refund(id)),
            _ => Handled::plain(unrecognized(request)),
        }
    }

    /// Runs `run` under the idempotency key, if there is one: replays or refuses (in the words of
    /// `refusals`) instead when the key is known, stores the answer afterwards unless it is a
    /// server error.
    pub(crate) fn idempotent(
        &mut self,
        refusals: KeyRefusals,
        key: Option<String>,
        fingerprint: Fingerprint,
        now_ms: i64,
        run: impl FnOnce(&mut Self) -> Handled,
    ) -> Handled {
        let Some(key) = key else {
            return run(self);
        };
        match self.claim(&key, &fingerprint) {
            Claim::Fresh => {}
            Claim::Replay(reply) => {
                return Handled {
                    reply,
                    replayed: true,
                    // The effect happened long ago; a retry is answered at once.
                    delivery: Delivery::Now,
                    events: Vec::new(),
                };
            }
            Claim::Mismatch => return Handled::plain((refusals.mismatch)(&key)),
            Claim::InUse => return Handled::plain((refusals.in_use)(&key)),
        }
        let handled = run(self);
        if handled.reply.is_storable() {
            let kept_ms = self.rng.i64(KEY_KEPT_AT_LEAST_MS..=KEY_KEPT_AT_MOST_MS);
            self.keys.insert(
                key,
                KeyEntry::Done {
                    fingerprint,
                    reply: handled.reply.clone(),
                    prune_at_ms: now_ms.saturating_add(kept_ms),
                },
            );
        }
        handled
    }

    /// The answer to a key the model already holds, given before the endpoint validates anything:
    /// Stripe's idempotency layer sits in front of the endpoints, replays a saved result for the
    /// same parameters, refuses other parameters with `idempotency_error` and a key whose request
    /// is still running with 409 ("Idempotent requests"). `None` for a key it does not hold.
    pub(crate) fn known_key(
        &self,
        refusals: KeyRefusals,
        key: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> Option<Handled> {
        let key = key?;
        match self.claim(key, fingerprint) {
            Claim::Fresh => None,
            Claim::Replay(reply) => Some(Handled {
                reply,
                replayed: true,
                delivery: Delivery::Now,
                events: Vec::new(),
            }),
            Claim::Mismatch => Some(Handled::plain((refusals.mismatch)(key))),
            Claim::InUse => Some(Handled::plain((refusals.in_use)(key))),
        }
    }

    /// Presents an idempotency key (pruned keys are already forgotten).
    fn claim(&self, key: &str, fingerprint: &Fingerprint) -> Claim {
        match self.keys.get(key) {
            None => Claim::Fresh,
            Some(KeyEntry::InFlight) => Claim::InUse,
            Some(KeyEntry::Done {
                fingerprint: stored,
                reply,
                ..
            }) => {
                if stored == fingerprint {
                    Claim::Replay(reply.clone())
                } else {
                    Claim::Mismatch
                }
            }
        }
    }

    /// `POST /v1/payment_intents`.
    fn create(&mut self, config: &ModelConfig, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        let params = parse_form(request.body);
        let key = match idempotency_key(request.idempotency_key) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: "POST /v1/payment_intents".to_owned(),
            params: params.clone(),
        };
        if let Some(answer) = self.known_key(STRIPE_KEY_REFUSALS, key.as_deref(), &fingerprint) {
            return answer;
        }
        // Validation comes before a new key is saved: Stripe saves nothing for a request that
        // fails it.
        let create = match CreateParams::from_params(&params) {
            Ok(create) => create,
            Err(reply) => return Handled::plain(reply),
        };
        // A minimum above the table's: what a charge settled in another currency meets when the
        // exchange rate moves ("a charge must convert to at least the minimum").
        if let Some(&minimum) = config.minimum_overrides.get(&create.currency) {
            if create.amount < minimum {
                return Handled::plain(crate::reply::amount_too_small(minimum, &create.currency));
            }
        }
        let creation_key = key.clone();
        self.idempotent(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, |model| {
            model.run_create(config, create, creation_key, now_ms)
        })
    }

    /// Creates the PaymentIntent a validated request asks for.
    fn run_create(
        &mut self,
        config: &ModelConfig,
        create: CreateParams,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let confirm = create.confirm;
        let charge = NewCharge {
            amount: create.amount,
            currency: create.currency,
            payment_method: create.payment_method,
            description: None,
            metadata: create.metadata,
            confirm,
        };
        let token = charge.payment_method.clone();
        let (intent, delivery) = match self.attempt_charge(config, charge, key, now_ms) {
            // Stripe attaches the PaymentMethod at creation, so an id that names nothing is
            // `resource_missing` whether or not it is confirmed.
            Attempt::UnknownMethod => return Handled::plain(no_such_payment_method(&token)),
            Attempt::FailedBeforeCharge => {
                return Handled::plain(reply::api_error(
                    "An unexpected error occurred before the charge was attempted (fake PSP: \
                     pm_fake_error_before_charge). Nothing was charged; the request can be retried.",
                ))
            }
            Attempt::Made { intent, delivery } => (*intent, delivery),
        };
        if !confirm {
            // Nothing attempted, so the token's behaviour does not matter yet, and Stripe sends
            // no event a receiver would act on.
            let reply = Reply::json(200, &intent.to_json());
            self.insert(config, intent, now_ms);
            return Handled::plain(reply);
        }

        let (reply, kind) = match (intent.status, intent.failure) {
            (Status::Succeeded, _) => (
                Reply::json(200, &intent.to_json()),
                "payment_intent.succeeded",
            ),
            // A failed attempt: back to `requires_payment_method`, answered with a 402 carrying
            // the PaymentIntent, as Stripe answers a declined confirm.
            (Status::RequiresPaymentMethod, Some(Failure::Declined(decline))) => (
                reply::card_declined(
                    decline.decline_code,
                    decline.message,
                    intent.latest_charge.as_deref(),
                    intent.to_json(),
                ),
                "payment_intent.payment_failed",
            ),
            (Status::Processing, _) => (
                Reply::json(200, &intent.to_json()),
                "payment_intent.processing",
            ),
            (Status::RequiresAction, _) => (
                Reply::json(200, &intent.to_json()),
                "payment_intent.requires_action",
            ),
            // A confirmed attempt ends in one of the above; kept total rather than panicking.
            _ => return Handled::plain(no_such_payment_method(&intent.payment_method)),
        };
        let event = self.event(
            kind,
            intent.to_json(),
            now_ms,
            intent.idempotency_key.clone(),
        );
        self.insert(config, intent, now_ms);
        Handled {
            reply,
            replayed: false,
            delivery,
            events: vec![event],
        }
    }

    /// Attempts a charge a face has validated, as its token says (`behaviour`), without
    /// recording it: the provider-neutral half of a create. Ids are drawn in a fixed order (the
    /// charge's, then its attempt's), so one seed and one call sequence give the same ids.
    ///
    /// - An unknown token creates nothing ([`Attempt::UnknownMethod`]).
    /// - `pm_fake_error_before_charge`, confirmed, creates nothing
    ///   ([`Attempt::FailedBeforeCharge`]).
    /// - Unconfirmed, any known token creates a charge waiting in `requires_confirmation`.
    /// - Confirmed: approvals (and the lost-response and slow tokens, which tell the server how
    ///   to misdeliver the answer) succeed; declines fail with their [`Failure`]; the processing
    ///   and requires-action tokens wait, due to move on after `processing_for` and
    ///   `requires_action_for`.
    pub(crate) fn attempt_charge(
        &mut self,
        config: &ModelConfig,
        charge: NewCharge,
        key: Option<String>,
        now_ms: i64,
    ) -> Attempt {
        let behaviour = behaviour_for(&charge.payment_method);
        if behaviour == Behaviour::Unknown {
            return Attempt::UnknownMethod;
        }
        if charge.confirm && behaviour == Behaviour::ErrorBeforeCharge {
            return Attempt::FailedBeforeCharge;
        }
        let id = self.charge_id(config);
        let mut intent = Intent {
            id,
            amount: charge.amount,
            currency: charge.currency,
            status: Status::RequiresConfirmation,
            payment_method: charge.payment_method,
            description: charge.description,
            metadata: charge.metadata,
            idempotency_key: key,
            created: now_ms.div_euclid(1000),
            latest_charge: None,
            failure: None,
            cancellation_reason: None,
            due_ms: None,
            search_versions: Vec::new(),
        };
        let mut delivery = Delivery::Now;
        if !charge.confirm {
            return Attempt::Made {
                intent: Box::new(intent),
                delivery,
            };
        }
        match behaviour {
            Behaviour::Approve | Behaviour::LostResponse | Behaviour::Slow => {
                if behaviour == Behaviour::LostResponse {
                    delivery = Delivery::Sever;
                } else if behaviour == Behaviour::Slow {
                    delivery = Delivery::After(config.slow_delay);
                }
                intent.status = Status::Succeeded;
                intent.latest_charge = Some(self.attempt_id(config, &intent.id));
            }
            Behaviour::Decline(decline) => {
                intent.status = Status::RequiresPaymentMethod;
                intent.latest_charge = Some(self.attempt_id(config, &intent.id));
                intent.failure = Some(Failure::Declined(decline));
            }
            Behaviour::Processing => {
                intent.status = Status::Processing;
                intent.latest_charge = Some(self.attempt_id(config, &intent.id));
                intent.due_ms = Some(now_ms.saturating_add(millis(config.processing_for)));
            }
            Behaviour::RequiresAction => {
                intent.status = Status::RequiresAction;
                intent.due_ms = Some(now_ms.saturating_add(millis(config.requires_action_for)));
            }
            // Both answered above; kept total rather than panicking.
            Behaviour::ErrorBeforeCharge | Behaviour::Unknown => return Attempt::UnknownMethod,
        }
        Attempt::Made {
            intent: Box::new(intent),
            delivery,
        }
    }

    /// A new charge's id: `pi_...` (Stripe) or `chrg_test_...` (Omise).
    fn charge_id(&mut self, config: &ModelConfig) -> String {
        match config.provider {
            Provider::Stripe => self.new_id("pi"),
            Provider::Omise => self.new_omise_id("chrg"),
            Provider::TwoC2p => self.new_tran_ref(),
        }
    }

    /// The id of a charge attempt on charge `id`: a new `ch_...` (Stripe: a PaymentIntent's
    /// Charge), or the charge itself (Omise, whose charge is the attempt).
    fn attempt_id(&mut self, config: &ModelConfig, id: &str) -> String {
        match config.provider {
            Provider::Stripe => self.new_id("ch"),
            Provider::Omise | Provider::TwoC2p => id.to_owned(),
        }
    }

    /// `GET /v1/payment_intents/{id}`: read-after-write.
    fn retrieve(&self, id: &str) -> Reply {
        match self.by_id.get(id) {
            Some(&index) => Reply::json(200, &self.intents[index].to_json()),
            None => no_such_intent(id),
        }
    }

    /// `GET /v1/payment_intents/search?query=metadata['<k>']:'<v>'[&limit=N][&page=P]`: what the
    /// search index shows at `now_ms`, in creation order.
    fn search(&self, query: Option<&str>, now_ms: i64) -> Reply {
        let params = parse_form(query.unwrap_or_default().as_bytes());
        if let Some(unknown) = params
            .keys()
            .find(|name| !["query", "limit", "page"].contains(&name.as_str()))
        {
            return reply::parameter_unknown(unknown);
        }
        let Some(query) = params.get("query").filter(|q| !q.is_empty()) else {
            return reply::parameter_missing("query");
        };
        let Some((key, value)) = parse_metadata_query(query) else {
            return reply::invalid_request(
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
                return reply::invalid_request(
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
                    return reply::invalid_request(
                        Some("parameter_invalid"),
                        Some("page"),
                        &format!("Invalid page cursor: {page}"),
                    )
                }
            },
        };
        let matches: Vec<&Value> = self
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

    /// `POST /v1/payment_intents/{id}/cancel`.
    fn cancel(
        &mut self,
        config: &ModelConfig,
        id: &str,
        request: &WireRequest<'_>,
        now_ms: i64,
    ) -> Handled {
        let params = parse_form(request.body);
        if let Some(unknown) = params.keys().find(|name| *name != "cancellation_reason") {
            return Handled::plain(reply::parameter_unknown(unknown));
        }
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
        self.idempotent(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, |model| {
            model.run_cancel(config, id, reason, request_key, now_ms)
        })
    }

    /// Cancels a PaymentIntent that may still be cancelled ("Cancel a PaymentIntent").
    fn run_cancel(
        &mut self,
        config: &ModelConfig,
        id: &str,
        reason: Option<String>,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let Some(&index) = self.by_id.get(id) else {
            return Handled::plain(no_such_intent(id));
        };
        let intent = &mut self.intents[index];
        if !intent.status.is_cancelable() {
            let message = format!(
                "You cannot cancel this PaymentIntent because it has a status of {}. Only a \
                 PaymentIntent with one of the following statuses may be canceled: \
                 requires_payment_method, requires_capture, requires_confirmation, \
                 requires_action, processing.",
                intent.status.as_str()
            );
            return Handled::plain(reply::unexpected_state(&message, intent.to_json()));
        }
        intent.status = Status::Canceled;
        intent.cancellation_reason = reason;
        // A cancelled intent no longer succeeds or fails by itself.
        intent.due_ms = None;
        let object = intent.to_json();
        self.record_search_version(config, index, now_ms);
        let event = self.event("payment_intent.canceled", object.clone(), now_ms, key);
        Handled {
            reply: Reply::json(200, &object),
            replayed: false,
            delivery: Delivery::Now,
            events: vec![event],
        }
    }

    /// `POST /v1/refunds`.
    fn create_refund(
        &mut self,
        config: &ModelConfig,
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
        if let Some(answer) = self.known_key(STRIPE_KEY_REFUSALS, key.as_deref(), &fingerprint) {
            return answer;
        }
        // Validation comes before a new key is saved: Stripe saves nothing for a request that
        // fails it.
        let refund = match RefundParams::from_params(&params) {
            Ok(refund) => refund,
            Err(reply) => return Handled::plain(reply),
        };
        let creation_key = key.clone();
        self.idempotent(STRIPE_KEY_REFUSALS, key, fingerprint, now_ms, |model| {
            model.run_refund(config, refund, creation_key, now_ms)
        })
    }

    /// Refunds (part of) a succeeded PaymentIntent's charge, if enough of it is left.
    fn run_refund(
        &mut self,
        config: &ModelConfig,
        request: RefundParams,
        key: Option<String>,
        now_ms: i64,
    ) -> Handled {
        let payment_intent = request.payment_intent;
        let attempt = self.attempt_refund(
            config,
            &payment_intent,
            request.amount,
            request.reason,
            request.metadata,
            key.clone(),
            now_ms,
        );
        let position = match attempt {
            RefundAttempt::NoSuchCharge => {
                return Handled::plain(reply::invalid_request(
                    Some("resource_missing"),
                    Some("payment_intent"),
                    &format!("No such payment_intent: '{payment_intent}'"),
                ))
            }
            RefundAttempt::NotRefundable => {
                return Handled::plain(reply::charge_not_refundable(&payment_intent))
            }
            RefundAttempt::AlreadyRefunded { charge } => {
                return Handled::plain(reply::charge_already_refunded(&charge))
            }
            RefundAttempt::Exceeds {
                amount,
                unrefunded,
                currency,
            } => {
                return Handled::plain(reply::refund_exceeds_unrefunded(
                    amount, unrefunded, &currency,
                ))
            }
            RefundAttempt::Made(position) => position,
        };
        let refund = &self.refunds[position];
        let (object, status) = (refund.to_json(), refund.status);
        let mut events = vec![self.event("refund.created", object.clone(), now_ms, key.clone())];
        if status == RefundStatus::Succeeded {
            if let Some(charge) = self.charge_json(&payment_intent) {
                events.push(self.event("charge.refunded", charge, now_ms, key));
            }
        }
        Handled {
            reply: Reply::json(200, &object),
            replayed: false,
            delivery: Delivery::Now,
            events,
        }
    }

    /// Refunds `amount` (default: what is left) of the succeeded charge `charge_id` if that much
    /// is left, and records the refund: the provider-neutral half of a refund create. Pending and
    /// succeeded refunds hold their amount, failed ones gave it back. The refund's fate follows
    /// the charge's token (`refund_behaviour_for`): succeeded for good, succeeded until it fails
    /// after `refund_fail_after`, or pending until it succeeds after `refund_pending_for`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attempt_refund(
        &mut self,
        config: &ModelConfig,
        charge_id: &str,
        amount: Option<i64>,
        reason: Option<String>,
        metadata: BTreeMap<String, String>,
        key: Option<String>,
        now_ms: i64,
    ) -> RefundAttempt {
        let Some(&index) = self.by_id.get(charge_id) else {
            return RefundAttempt::NoSuchCharge;
        };
        let intent = &self.intents[index];
        if intent.status != Status::Succeeded {
            return RefundAttempt::NotRefundable;
        }
        let (payment_intent, charge) = (intent.id.clone(), intent.latest_charge.clone());
        let (currency, payment_method) = (intent.currency.clone(), intent.payment_method.clone());
        // Pending refunds hold their amount as succeeded ones do; failed ones gave it back.
        let unrefunded = intent.amount - self.amount_held(&payment_intent);
        if unrefunded <= 0 {
            return RefundAttempt::AlreadyRefunded {
                charge: charge.unwrap_or(payment_intent),
            };
        }
        let amount = amount.unwrap_or(unrefunded);
        if amount > unrefunded {
            return RefundAttempt::Exceeds {
                amount,
                unrefunded,
                currency,
            };
        }
        let (status, due_ms) = match refund_behaviour_for(&payment_method) {
            RefundBehaviour::Succeed => (RefundStatus::Succeeded, None),
            RefundBehaviour::FailLater => (
                RefundStatus::Succeeded,
                Some(now_ms.saturating_add(millis(config.refund_fail_after))),
            ),
            RefundBehaviour::PendingThenSucceed => (
                RefundStatus::Pending,
                Some(now_ms.saturating_add(millis(config.refund_pending_for))),
            ),
        };
        let id = match config.provider {
            Provider::Stripe => self.new_id("re"),
            Provider::Omise => self.new_omise_id("rfnd"),
            // The 2C2P face has no refund route; kept total.
            Provider::TwoC2p => self.new_id("rfnd"),
        };
        let refund = Refund {
            id,
            amount,
            currency,
            payment_intent: payment_intent.clone(),
            charge,
            status,
            reason,
            failure_reason: None,
            metadata,
            idempotency_key: key,
            created: now_ms.div_euclid(1000),
            due_ms,
        };
        let position = self.refunds.len();
        self.refund_by_id.insert(refund.id.clone(), position);
        self.refunds_of
            .entry(payment_intent)
            .or_default()
            .push(position);
        self.refunds.push(refund);
        RefundAttempt::Made(position)
    }

    /// What the refunds of a PaymentIntent hold of its amount now (pending and succeeded ones).
    pub(crate) fn amount_held(&self, payment_intent: &str) -> i64 {
        self.refunds_of.get(payment_intent).map_or(0, |positions| {
            positions
                .iter()
                .map(|&position| &self.refunds[position])
                .filter(|refund| refund.status.holds_amount())
                .map(|refund| refund.amount)
                .sum()
        })
    }

    /// The Charge of a PaymentIntent with its refunds, newest first, as `charge.refunded` carries
    /// it; `None` for an unknown PaymentIntent.
    fn charge_json(&self, payment_intent: &str) -> Option<Value> {
        let intent = &self.intents[*self.by_id.get(payment_intent)?];
        let refunds: Vec<&Refund> = self
            .refunds_of
            .get(payment_intent)
            .map(|positions| {
                positions
                    .iter()
                    .rev()
                    .map(|&position| &self.refunds[position])
                    .collect()
            })
            .unwrap_or_default();
        Some(intent.charge_json(&refunds))
    }

    /// `GET /v1/refunds/{id}`: read-after-write.
    fn retrieve_refund(&self, id: &str) -> Reply {
        match self.refund_by_id.get(id) {
            Some(&position) => Reply::json(200, &self.refunds[position].to_json()),
            None => reply::resource_missing("id", &format!("No such refund: '{id}'")),
        }
    }

    /// `GET /v1/refunds[?payment_intent=pi_...][&charge=ch_...][&limit=N][&starting_after=re_...]`:
    /// every matching refund as it is now, newest first ("List all refunds"). Unlike search, a
    /// list is read-after-write.
    fn list_refunds(&self, query: Option<&str>) -> Reply {
        let params = parse_form(query.unwrap_or_default().as_bytes());
        if let Some(unknown) = params.keys().find(|name| {
            !["payment_intent", "charge", "limit", "starting_after"].contains(&name.as_str())
        }) {
            return reply::parameter_unknown(unknown);
        }
        let limit = match params.get("limit").map(|limit| limit.parse::<usize>()) {
            None => LIST_LIMIT_DEFAULT,
            Some(Ok(limit)) if (1..=LIST_LIMIT_MAX).contains(&limit) => limit,
            Some(_) => {
                return reply::invalid_request(
                    Some("parameter_invalid_integer"),
                    Some("limit"),
                    &format!("This value must be between 1 and {LIST_LIMIT_MAX}."),
                )
            }
        };
        let payment_intent = params.get("payment_intent");
        if let Some(id) = payment_intent.filter(|id| !self.by_id.contains_key(id.as_str())) {
            return reply::invalid_request(
                Some("resource_missing"),
                Some("payment_intent"),
                &format!("No such payment_intent: '{id}'"),
            );
        }
        let charge = params.get("charge");
        if let Some(id) = charge.filter(|id| {
            !self
                .intents
                .iter()
                .any(|intent| intent.latest_charge.as_ref() == Some(*id))
        }) {
            return reply::invalid_request(
                Some("resource_missing"),
                Some("charge"),
                &format!("No such charge: '{id}'"),
            );
        }
        // Refunds older than the cursor, which must name a refund.
        let before = match params.get("starting_after") {
            None => self.refunds.len(),
            Some(cursor) => match self.refund_by_id.get(cursor) {
                Some(&position) => position,
                None => {
                    return reply::invalid_request(
                        Some("resource_missing"),
                        Some("starting_after"),
                        &format!("No such refund: '{cursor}'"),
                    )
                }
            },
        };
        let mut matching = self.refunds[..before].iter().rev().filter(|refund| {
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

    /// Records a new PaymentIntent (charge).
    pub(crate) fn insert(&mut self, config: &ModelConfig, intent: Intent, now_ms: i64) {
        let index = self.intents.len();
        self.by_id.insert(intent.id.clone(), index);
        self.intents.push(intent);
        self.record_search_version(config, index, now_ms);
    }

    /// Queues the PaymentIntent (charge) as it is now, in the face's format, for the search
    /// index, visible after a random lag and never before an earlier version.
    pub(crate) fn record_search_version(&mut self, config: &ModelConfig, index: usize, at_ms: i64) {
        let lag_max_ms = millis(config.search_lag_max);
        let lag_ms = if lag_max_ms == 0 {
            0
        } else {
            self.rng.i64(0..=lag_max_ms)
        };
        let snapshot = match config.provider {
            Provider::Stripe => self.intents[index].to_json(),
            Provider::Omise => self.omise_charge_json(index),
            // 2C2P has no search; the snapshot is never read.
            Provider::TwoC2p => Value::Null,
        };
        let intent = &mut self.intents[index];
        let earliest = intent
            .search_versions
            .last()
            .map_or(i64::MIN, |(visible_from_ms, _)| *visible_from_ms);
        let visible_from_ms = at_ms.saturating_add(lag_ms).max(earliest);
        intent.search_versions.push((visible_from_ms, snapshot));
    }

    /// An event of `kind` about an object (`object`, its JSON at that moment), caused at `at_ms`
    /// by the request with idempotency key `key`, if any.
    fn event(&mut self, kind: &str, object: Value, at_ms: i64, key: Option<String>) -> ModelEvent {
        self.event_with(kind, json!({ "object": object }), at_ms, key)
    }

    /// An event of `kind` whose `data` is given whole (`object`, and `previous_attributes` for
    /// `*.updated` events).
    fn event_with(
        &mut self,
        kind: &str,
        data: Value,
        at_ms: i64,
        key: Option<String>,
    ) -> ModelEvent {
        let id = self.new_id("evt");
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

    /// `<prefix>_` followed by 24 random alphanumerics, like Stripe's object ids.
    fn new_id(&mut self, prefix: &str) -> String {
        let rng = &mut self.rng;
        let mut id = String::with_capacity(prefix.len() + 25);
        id.push_str(prefix);
        id.push('_');
        id.extend(std::iter::repeat_with(|| rng.alphanumeric()).take(24));
        id
    }
}

/// Whether an `Idempotency-Key` value is one the fake accepts: 1 to 255 visible ASCII characters
/// (Stripe, "Idempotent requests": up to 255 characters).
pub(crate) fn is_valid_idempotency_key(key: &str) -> bool {
    let visible = key.bytes().all(|b| (0x20..0x7f).contains(&b));
    !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LEN && visible
}

/// The `Idempotency-Key` header, validated ("Idempotent requests": up to 255 characters).
fn idempotency_key(raw: Option<&str>) -> Result<Option<String>, Reply> {
    let Some(key) = raw else {
        return Ok(None);
    };
    if is_valid_idempotency_key(key) {
        Ok(Some(key.to_owned()))
    } else {
        Err(reply::invalid_request(
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
    reply::resource_missing("id", &format!("No such payment_intent: '{id}'"))
}

/// 400 for a `payment_method` that names no PaymentMethod.
fn no_such_payment_method(token: &str) -> Reply {
    reply::invalid_request(
        Some("resource_missing"),
        Some("payment_method"),
        &format!("No such PaymentMethod: '{token}'"),
    )
}

/// 404 for a route the fake does not serve, in Stripe's words.
fn unrecognized(request: &WireRequest<'_>) -> Reply {
    reply::resource_missing(
        "url",
        &format!(
            "Unrecognized request URL ({}: {}).",
            request.method, request.path
        ),
    )
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
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

    /// Some moment in 2027, epoch ms.
    const T0: i64 = 1_800_000_000_000;
    const HOUR_MS: i64 = 60 * 60 * 1000;
    const HOUR_S: u64 = 60 * 60;
    const INTENTS: &str = "/v1/payment_intents";

    fn model() -> StripeModel {
        model_with(ModelConfig::default())
    }

    fn model_with(config: ModelConfig) -> StripeModel {
        StripeModel::new(config, 7)
    }

    fn bearer() -> String {
        format!("Bearer {}", crate::DEFAULT_API_KEY)
    }

    fn post(
        model: &StripeModel,
        path: &str,
        body: &str,
        key: Option<&str>,
        now_ms: i64,
    ) -> WireAnswer {
        let authorization = bearer();
        model.handle(
            &WireRequest {
                method: "POST",
                path,
                query: None,
                authorization: Some(&authorization),
                idempotency_key: key,
                body: body.as_bytes(),
            },
            now_ms,
        )
    }

    fn get(model: &StripeModel, path: &str, query: Option<&str>, now_ms: i64) -> WireAnswer {
        let authorization = bearer();
        model.handle(
            &WireRequest {
                method: "GET",
                path,
                query,
                authorization: Some(&authorization),
                idempotency_key: None,
                body: b"",
            },
            now_ms,
        )
    }

    /// The confirmed create request payonce sends.
    fn charge(token: &str, payment_id: &str) -> String {
        format!(
            "amount=3000&currency=jpy&payment_method={token}&confirm=true\
             &error_on_requires_action=true&automatic_payment_methods[enabled]=true\
             &automatic_payment_methods[allow_redirects]=never&metadata[payment_id]={payment_id}"
        )
    }

    /// A create request that only fences (no confirm-only parameters, which Stripe refuses).
    fn fence(token: &str, payment_id: &str) -> String {
        format!(
            "amount=3000&currency=jpy&payment_method={token}&confirm=false\
             &metadata[payment_id]={payment_id}"
        )
    }

    fn json(answer: &WireAnswer) -> Value {
        serde_json::from_str(&answer.body).unwrap_or(Value::Null)
    }

    fn error_code(answer: &WireAnswer) -> Value {
        json(answer)["error"]["code"].clone()
    }

    fn search_query(payment_id: &str) -> String {
        format!("query=metadata%5B%27payment_id%27%5D%3A%27{payment_id}%27")
    }

    fn search_ids(model: &StripeModel, payment_id: &str, now_ms: i64) -> Vec<String> {
        let query = format!("{}&limit=100", search_query(payment_id));
        let answer = get(model, "/v1/payment_intents/search", Some(&query), now_ms);
        assert_eq!(answer.status, 200, "{}", answer.body);
        json(&answer)["data"]
            .as_array()
            .map(|data| {
                data.iter()
                    .filter_map(|pi| pi["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn kinds(events: &[ModelEvent]) -> Vec<&str> {
        events.iter().map(|event| event.kind.as_str()).collect()
    }

    // Rule 1: idempotency ("Idempotent requests").

    #[test]
    fn idempotency_replays_the_stored_answer_for_the_same_endpoint_and_parameters() {
        // GIVEN an approval, a decline and an unknown token, each made under its own key
        let model = model();
        for (token, key, status) in [
            ("pm_card_visa", "k-ok", 200),
            ("pm_card_visa_chargeDeclined", "k-declined", 402),
            ("pm_card_nope", "k-unknown", 400),
        ] {
            let first = post(&model, INTENTS, &charge(token, "pay_1"), Some(key), T0);
            assert_eq!((first.status, first.replayed), (status, false), "{token}");
            // WHEN the same parameters come again, in another order and encoding
            let body = charge(token, "pay_1");
            let reordered: Vec<&str> = body.split('&').rev().collect();
            let reordered = reordered.join("&").replace("metadata[", "metadata%5B");
            let again = post(&model, INTENTS, &reordered, Some(key), T0 + HOUR_MS);
            // THEN the stored answer comes back byte for byte, flagged, at once, with no events
            assert_eq!(again.status, first.status, "{token}");
            assert_eq!(again.body, first.body, "{token}");
            assert!(again.replayed);
            assert_eq!(again.delivery, Delivery::Now);
            assert!(again.events.is_empty());
        }
        // AND only the approval and the decline created a PaymentIntent, once each
        let charges = model.charges();
        assert_eq!(charges.len(), 2);
        assert_eq!(charges[0].idempotency_key.as_deref(), Some("k-ok"));
    }

    #[test]
    fn idempotency_key_reused_with_other_parameters_or_on_another_endpoint_is_an_idempotency_error()
    {
        // GIVEN a charge made under key k
        let model = model();
        let first = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        let id = json(&first)["id"].as_str().unwrap_or_default().to_owned();
        // WHEN k comes back with other parameters, or on the cancel endpoint
        let other_params = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_2"),
            Some("k"),
            T0,
        );
        let other_endpoint = post(
            &model,
            &format!("/v1/payment_intents/{id}/cancel"),
            "",
            Some("k"),
            T0,
        );
        // THEN both are 400 idempotency_error, not replays, and nothing changed
        for answer in [&other_params, &other_endpoint] {
            assert_eq!(answer.status, 400);
            assert!(!answer.replayed);
            assert_eq!(json(answer)["error"]["type"], "idempotency_error");
            assert!(answer.events.is_empty());
        }
        let charges = model.charges();
        assert_eq!(charges.len(), 1);
        assert_eq!(charges[0].status, "succeeded");
    }

    #[test]
    fn idempotency_key_in_flight_is_409_until_released() {
        // GIVEN a key held by a request that is still running
        let model = model();
        assert!(model.begin_in_flight("k"));
        assert!(!model.begin_in_flight("k"), "one holder at a time");
        // WHEN requests with that key arrive
        for _ in 0..2 {
            let busy = post(
                &model,
                INTENTS,
                &charge("pm_card_visa", "pay_1"),
                Some("k"),
                T0,
            );
            // THEN each gets 409 idempotency_key_in_use and the key stays in flight
            assert_eq!(busy.status, 409);
            assert_eq!(json(&busy)["error"]["type"], "invalid_request_error");
            assert_eq!(error_code(&busy), "idempotency_key_in_use");
            assert!(!busy.replayed);
        }
        assert!(model.charges().is_empty());
        // AND once released, the key runs normally
        assert!(model.end_in_flight("k"));
        assert!(!model.end_in_flight("k"));
        let ok = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        assert_eq!((ok.status, ok.replayed), (200, false));
        // AND a key with a stored answer cannot be taken in flight
        assert!(!model.begin_in_flight("k"));
    }

    #[test]
    fn idempotency_keys_are_kept_at_least_24h_and_forgotten_at_random_by_48h() {
        // GIVEN 100 keys stored at T0 (two models with one seed: each check below retries, and
        // a retry of a forgotten key stores it anew)
        let keys: Vec<String> = (0..100).map(|i| format!("k-{i}")).collect();
        let stored = || {
            let model = model();
            for (i, key) in keys.iter().enumerate() {
                let body = charge("pm_card_visa", &format!("pay_{i}"));
                assert_eq!(post(&model, INTENTS, &body, Some(key), T0).status, 200);
            }
            model
        };
        let replayed_at = |model: &StripeModel, now_ms: i64| -> usize {
            keys.iter()
                .enumerate()
                .filter(|(i, key)| {
                    let body = charge("pm_card_visa", &format!("pay_{i}"));
                    post(model, INTENTS, &body, Some(key), now_ms).replayed
                })
                .count()
        };
        let (first, second) = (stored(), stored());
        // THEN every key is remembered until just before 24 h
        assert_eq!(replayed_at(&first, T0 + 24 * HOUR_MS - 1), 100);
        // AND none is remembered at 48 h
        assert_eq!(replayed_at(&first, T0 + 48 * HOUR_MS), 0);
        assert_eq!(first.charges().len(), 200, "each forgotten key ran again");
        // AND at 36 h some are forgotten and some are not: nobody can count on either
        let at_36h = replayed_at(&second, T0 + 36 * HOUR_MS);
        assert!(
            0 < at_36h && at_36h < 100,
            "{at_36h} of 100 remembered at 36 h"
        );
    }

    #[test]
    fn idempotency_a_500_before_the_charge_stores_nothing_under_the_key() {
        // GIVEN a request that fails with 500 before charging
        let model = model();
        let body = charge("pm_fake_error_before_charge", "pay_1");
        for _ in 0..2 {
            let failed = post(&model, INTENTS, &body, Some("k"), T0);
            // THEN it is never replayed and creates nothing
            assert_eq!((failed.status, failed.replayed), (500, false));
            assert_eq!(json(&failed)["error"]["type"], "api_error");
            assert!(failed.events.is_empty());
        }
        assert!(model.charges().is_empty());
        // AND the key is free even for other parameters
        let ok = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        assert_eq!((ok.status, ok.replayed), (200, false));
    }

    // Rule 2: validation errors come before the key and store nothing.

    #[test]
    fn validation_errors_are_answered_before_the_key_and_store_nothing() {
        let model = model();
        let base = "currency=jpy&payment_method=pm_card_visa";
        let cases = [
            (format!("{base}&confirm=true"), json!("parameter_missing")),
            (
                format!("amount=abc&{base}"),
                json!("parameter_invalid_integer"),
            ),
            (
                "amount=3000&currency=xyz&payment_method=pm_card_visa".to_owned(),
                json!("parameter_invalid"),
            ),
            (format!("amount=49&{base}"), json!("amount_too_small")),
            (
                format!("amount=100000000&{base}"),
                json!("amount_too_large"),
            ),
            (
                format!("amount=3000&{base}&colour=red"),
                json!("parameter_unknown"),
            ),
            // Confirm-only parameter without confirm: Stripe documents no code for it.
            (format!("amount=3000&{base}&off_session=true"), Value::Null),
        ];
        for (body, code) in &cases {
            // GIVEN the key is held by a running request
            assert!(model.begin_in_flight("held"));
            // WHEN an invalid request comes with it
            let refused = post(&model, INTENTS, body, Some("held"), T0);
            // THEN the idempotency layer, in front of the endpoint, answers 409 first
            assert_eq!(refused.status, 409, "{body}");
            assert!(refused.events.is_empty());
            assert!(model.end_in_flight("held"), "still held, untouched");
            // AND under a free key it is refused for its parameters and stores nothing: a later
            // valid request with the key runs
            let key = format!("k-{body}");
            let fresh = post(&model, INTENTS, body, Some(&key), T0);
            assert_eq!(fresh.status, 400, "{body}");
            assert_eq!(json(&fresh)["error"]["type"], "invalid_request_error");
            assert_eq!(&error_code(&fresh), code, "{body}");
            let ok = post(
                &model,
                INTENTS,
                &charge("pm_card_visa", "p"),
                Some(&key),
                T0,
            );
            assert_eq!((ok.status, ok.replayed), (200, false), "{body}");
        }
        assert_eq!(model.charges().len(), cases.len());
    }

    // Rule 3: confirm-only parameters.

    #[test]
    fn confirm_only_parameters_without_confirm_are_refused_naming_the_parameter() {
        let model = model();
        let cases = [
            ("error_on_requires_action=true", "error_on_requires_action"),
            ("error_on_requires_action=false", "error_on_requires_action"),
            ("off_session=true", "off_session"),
            ("return_url=https%3A%2F%2Fshop.example%2Fdone", "return_url"),
            ("mandate=mandate_1", "mandate"),
            (
                "mandate_data[customer_acceptance][type]=online",
                "mandate_data",
            ),
        ];
        let base = "amount=3000&currency=jpy&payment_method=pm_card_visa";
        for (extra, param) in cases {
            // WHEN the parameter comes with confirm=false, or with no confirm at all
            for confirm in ["&confirm=false", ""] {
                let refused = post(
                    &model,
                    INTENTS,
                    &format!("{base}{confirm}&{extra}"),
                    None,
                    T0,
                );
                // THEN 400 invalid_request_error naming it
                assert_eq!(refused.status, 400, "{extra}{confirm}");
                assert_eq!(json(&refused)["error"]["type"], "invalid_request_error");
                assert_eq!(json(&refused)["error"]["param"], param);
            }
            // AND with confirm=true it is accepted
            let ok = post(
                &model,
                INTENTS,
                &format!("{base}&confirm=true&{extra}"),
                None,
                T0,
            );
            assert_eq!(ok.status, 200, "{extra}: {}", ok.body);
        }
        assert_eq!(model.charges().len(), cases.len());
    }

    // Rule 4: charge limits per currency.

    #[test]
    fn a_raised_minimum_refuses_what_the_table_accepts_and_stores_nothing() {
        // Stripe, "Minimum and maximum charge amounts": a charge must convert to at least the
        // settlement currency's minimum, so the effective minimum moves with exchange rates.
        let model = StripeModel::new(
            ModelConfig {
                minimum_overrides: [("thb".to_owned(), 2_000)].into(),
                ..ModelConfig::default()
            },
            7,
        );
        let body = "amount=1500&currency=thb&payment_method=pm_card_visa&confirm=true";
        let request = WireRequest {
            method: "POST",
            path: "/v1/payment_intents",
            query: None,
            authorization: Some("Bearer sk_test_payonce_fake"),
            idempotency_key: Some("k-raised"),
            body: body.as_bytes(),
        };
        let refused = model.handle(&request, 1_000);
        assert_eq!(refused.status, 400);
        assert!(
            refused.body.contains("amount_too_small"),
            "{}",
            refused.body
        );
        assert!(model.charges().is_empty());
        let ok = "amount=2000&currency=thb&payment_method=pm_card_visa&confirm=true";
        let accepted = model.handle(
            &WireRequest {
                body: ok.as_bytes(),
                ..request
            },
            2_000,
        );
        assert_eq!(
            accepted.status, 200,
            "nothing was stored under the key: {}",
            accepted.body
        );
    }

    #[test]
    fn amounts_below_the_currency_minimum_are_amount_too_small() {
        let model = model();
        for (currency, minimum) in [
            ("usd", 50),
            ("eur", 50),
            ("gbp", 30),
            ("sgd", 50),
            ("thb", 1000),
            ("jpy", 50),
            ("hkd", 400),
        ] {
            let body = |amount: i64| {
                format!(
                    "amount={amount}&currency={currency}&payment_method=pm_card_visa&confirm=true"
                )
            };
            let small = post(&model, INTENTS, &body(minimum - 1), None, T0);
            assert_eq!(small.status, 400, "{currency}");
            assert_eq!(error_code(&small), "amount_too_small");
            assert_eq!(json(&small)["error"]["param"], "amount");
            assert_eq!(post(&model, INTENTS, &body(minimum), None, T0).status, 200);
        }
        assert_eq!(model.charges().len(), 7);
    }

    #[test]
    fn amounts_above_eight_digits_are_amount_too_large() {
        let model = model();
        let body = |amount: i64| {
            format!("amount={amount}&currency=usd&payment_method=pm_card_visa&confirm=true")
        };
        let large = post(&model, INTENTS, &body(100_000_000), None, T0);
        assert_eq!(large.status, 400);
        assert_eq!(error_code(&large), "amount_too_large");
        assert_eq!(json(&large)["error"]["param"], "amount");
        assert_eq!(
            post(&model, INTENTS, &body(99_999_999), None, T0).status,
            200
        );
        assert_eq!(model.charges().len(), 1);
    }

    #[test]
    fn currencies_without_a_documented_minimum_are_refused() {
        let model = model();
        for currency in ["xyz", "krw", "us"] {
            let body = format!("amount=5000&currency={currency}&payment_method=pm_card_visa");
            let refused = post(&model, INTENTS, &body, None, T0);
            assert_eq!(refused.status, 400, "{currency}");
            assert_eq!(json(&refused)["error"]["param"], "currency");
        }
        // Case does not matter; the answer is lowercase.
        let upper = post(
            &model,
            INTENTS,
            "amount=5000&currency=USD&payment_method=pm_card_visa",
            None,
            T0,
        );
        assert_eq!(json(&upper)["currency"], "usd");
    }

    // Rule 5: behaviour by token.

    #[test]
    fn test_card_tokens_approve_or_decline_like_stripes() {
        let model = model();
        for token in ["pm_card_visa", "pm_card_mastercard", "pm_card_refundFail"] {
            let ok = post(&model, INTENTS, &charge(token, "pay_ok"), None, T0);
            assert_eq!(ok.status, 200, "{token}");
            assert_eq!(json(&ok)["status"], "succeeded");
            assert_eq!(json(&ok)["amount_received"], 3000);
            assert!(json(&ok)["latest_charge"]
                .as_str()
                .is_some_and(|c| c.starts_with("ch_")));
            assert_eq!(kinds(&ok.events), ["payment_intent.succeeded"]);
        }
        for (token, decline_code) in [
            ("pm_card_visa_chargeDeclined", "generic_decline"),
            (
                "pm_card_chargeDeclinedInsufficientFunds",
                "insufficient_funds",
            ),
        ] {
            let declined = post(&model, INTENTS, &charge(token, "pay_no"), None, T0);
            assert_eq!(declined.status, 402);
            let error = &json(&declined)["error"];
            assert_eq!(error["type"], "card_error");
            assert_eq!(error["decline_code"], decline_code);
            assert_eq!(error["payment_intent"]["status"], "requires_payment_method");
            assert_eq!(kinds(&declined.events), ["payment_intent.payment_failed"]);
        }
        let outcomes: Vec<String> = model.charges().into_iter().map(|c| c.outcome).collect();
        assert_eq!(
            outcomes,
            ["succeeded", "succeeded", "succeeded", "failed", "failed"]
        );
    }

    #[test]
    fn fault_tokens_tell_the_server_how_to_misdeliver() {
        let config = ModelConfig {
            slow_delay: Duration::from_millis(1234),
            ..ModelConfig::default()
        };
        let model = model_with(config);
        let lost = post(
            &model,
            INTENTS,
            &charge("pm_fake_lost_response", "p"),
            Some("k1"),
            T0,
        );
        assert_eq!((lost.status, lost.delivery), (200, Delivery::Sever));
        assert_eq!(kinds(&lost.events), ["payment_intent.succeeded"]);
        let slow = post(
            &model,
            INTENTS,
            &charge("pm_fake_slow", "p"),
            Some("k2"),
            T0,
        );
        assert_eq!(slow.status, 200);
        assert_eq!(slow.delivery, Delivery::After(Duration::from_millis(1234)));
        // Both charged and stored before the answer went (or did not go) out.
        for key in ["k1", "k2"] {
            let token = if key == "k1" {
                "pm_fake_lost_response"
            } else {
                "pm_fake_slow"
            };
            let retry = post(&model, INTENTS, &charge(token, "p"), Some(key), T0 + 1);
            assert_eq!((retry.replayed, retry.delivery), (true, Delivery::Now));
        }
        assert_eq!(model.charges().len(), 2);
    }

    #[test]
    fn processing_token_succeeds_once_processing_for_has_passed() {
        // GIVEN a pm_fake_processing charge
        let model = model();
        let created = post(
            &model,
            INTENTS,
            &charge("pm_fake_processing", "pay_p"),
            Some("k"),
            T0,
        );
        assert_eq!(created.status, 200);
        assert_eq!(json(&created)["status"], "processing");
        assert_eq!(kinds(&created.events), ["payment_intent.processing"]);
        assert_eq!(model.charges()[0].outcome, "pending");
        let due = T0 + millis(ModelConfig::default().processing_for);
        assert_eq!(model.next_transition_ms(), Some(due));
        // WHEN time reaches processing_for
        assert!(model.tick(due - 1).is_empty());
        let events = model.tick(due);
        // THEN it has succeeded, with one payment_intent.succeeded event dated then
        assert_eq!(kinds(&events), ["payment_intent.succeeded"]);
        let event: Value = serde_json::from_str(&events[0].body).unwrap_or(Value::Null);
        assert_eq!(event["data"]["object"]["status"], "succeeded");
        assert_eq!(event["created"], due / 1000);
        assert_eq!(event["request"]["idempotency_key"], Value::Null);
        assert_eq!(model.charges()[0].status, "succeeded");
        assert_eq!(model.charges()[0].outcome, "succeeded");
        assert_eq!(model.next_transition_ms(), None);
        assert!(model.tick(due + HOUR_MS).is_empty());
    }

    #[test]
    fn requires_action_token_fails_with_authentication_required_after_requires_action_for() {
        // GIVEN a pm_fake_requires_action charge
        let model = model();
        let created = post(
            &model,
            INTENTS,
            &charge("pm_fake_requires_action", "pay_a"),
            None,
            T0,
        );
        assert_eq!(created.status, 200);
        assert_eq!(json(&created)["status"], "requires_action");
        assert_eq!(json(&created)["next_action"]["type"], "use_stripe_sdk");
        assert_eq!(kinds(&created.events), ["payment_intent.requires_action"]);
        let id = json(&created)["id"].as_str().unwrap_or_default().to_owned();
        // WHEN requires_action_for has passed and someone retrieves it (no tick in between)
        let due = T0 + millis(ModelConfig::default().requires_action_for);
        let retrieved = get(&model, &format!("{INTENTS}/{id}"), None, due);
        // THEN it is back in requires_payment_method with authentication_required
        let pi = json(&retrieved);
        assert_eq!(pi["status"], "requires_payment_method");
        assert_eq!(pi["last_payment_error"]["code"], "authentication_required");
        assert_eq!(pi["next_action"], Value::Null);
        // AND the failure's event came with the first answer given after it happened, once
        assert_eq!(kinds(&retrieved.events), ["payment_intent.payment_failed"]);
        assert!(model.tick(due).is_empty());
        assert_eq!(model.charges()[0].outcome, "failed");
    }

    #[test]
    fn unknown_token_is_resource_missing_confirmed_or_not() {
        let model = model();
        for body in [charge("pm_card_nope", "p"), fence("pm_card_nope", "p")] {
            let refused = post(&model, INTENTS, &body, None, T0);
            assert_eq!(refused.status, 400);
            assert_eq!(
                json(&refused),
                json!({"error": {
                    "type": "invalid_request_error",
                    "code": "resource_missing",
                    "param": "payment_method",
                    "message": "No such PaymentMethod: 'pm_card_nope'",
                }})
            );
        }
        assert!(model.charges().is_empty());
    }

    // Rule 6: confirm=false fences.

    #[test]
    fn unconfirmed_create_waits_in_requires_confirmation_without_events() {
        let model = model();
        // Even a token that would fail is fine: nothing is attempted.
        let fenced = post(
            &model,
            INTENTS,
            &fence("pm_fake_error_before_charge", "pay_f"),
            Some("k"),
            T0,
        );
        assert_eq!(fenced.status, 200, "{}", fenced.body);
        assert_eq!(json(&fenced)["status"], "requires_confirmation");
        assert_eq!(json(&fenced)["latest_charge"], Value::Null);
        assert!(fenced.events.is_empty());
        assert_eq!(model.charges()[0].outcome, "pending");
        assert_eq!(model.next_transition_ms(), None);
    }

    // Rule 7: cancel.

    #[test]
    fn cancel_works_from_every_non_final_status_and_emits_canceled() {
        let model = model();
        let ids: Vec<String> = [
            fence("pm_card_visa", "p1"),
            charge("pm_card_visa_chargeDeclined", "p2"),
            charge("pm_fake_requires_action", "p3"),
            charge("pm_fake_processing", "p4"),
        ]
        .iter()
        .map(|body| {
            let answer = post(&model, INTENTS, body, None, T0);
            let pi = json(&answer);
            let pi = if pi["error"].is_object() {
                pi["error"]["payment_intent"].clone()
            } else {
                pi
            };
            pi["id"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
        for id in &ids {
            let canceled = post(
                &model,
                &format!("{INTENTS}/{id}/cancel"),
                "cancellation_reason=abandoned",
                Some(&format!("cancel-{id}")),
                T0 + 1000,
            );
            assert_eq!(canceled.status, 200, "{}", canceled.body);
            assert_eq!(json(&canceled)["status"], "canceled");
            assert_eq!(json(&canceled)["cancellation_reason"], "abandoned");
            assert_eq!(kinds(&canceled.events), ["payment_intent.canceled"]);
            let event: Value =
                serde_json::from_str(&canceled.events[0].body).unwrap_or(Value::Null);
            assert_eq!(event["request"]["idempotency_key"], format!("cancel-{id}"));
        }
        // A cancelled processing or requires_action intent no longer moves by itself.
        assert!(model.tick(T0 + 10 * HOUR_MS).is_empty());
        assert!(model.charges().iter().all(|c| c.outcome == "canceled"));
    }

    #[test]
    fn cancel_of_a_succeeded_or_canceled_intent_is_unexpected_state() {
        let model = model();
        let ok = post(&model, INTENTS, &charge("pm_card_visa", "p"), None, T0);
        let succeeded = json(&ok)["id"].as_str().unwrap_or_default().to_owned();
        let fenced = post(&model, INTENTS, &fence("pm_card_visa", "q"), None, T0);
        let canceled = json(&fenced)["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            post(
                &model,
                &format!("{INTENTS}/{canceled}/cancel"),
                "",
                None,
                T0
            )
            .status,
            200
        );
        for id in [&succeeded, &canceled] {
            let refused = post(&model, &format!("{INTENTS}/{id}/cancel"), "", None, T0);
            assert_eq!(refused.status, 400);
            assert_eq!(error_code(&refused), "payment_intent_unexpected_state");
            assert_eq!(json(&refused)["error"]["payment_intent"]["id"], id.as_str());
            assert!(refused.events.is_empty());
        }
        let missing = post(
            &model,
            &format!("{INTENTS}/pi_missing/cancel"),
            "",
            None,
            T0,
        );
        assert_eq!(missing.status, 404);
        assert_eq!(model.charges()[0].status, "succeeded");
    }

    // Rule 8: search is not read-after-write.

    #[test]
    fn search_sees_an_intent_only_after_its_lag_but_retrieve_sees_it_at_once() {
        // GIVEN a search lag of up to an hour
        let model = model_with(ModelConfig {
            search_lag_max: Duration::from_secs(60 * 60),
            ..ModelConfig::default()
        });
        let created: Vec<String> = (0..20)
            .map(|_| {
                let answer = post(&model, INTENTS, &charge("pm_card_visa", "pay_s"), None, T0);
                json(&answer)["id"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        // THEN retrieve is read-after-write
        for id in &created {
            assert_eq!(
                get(&model, &format!("{INTENTS}/{id}"), None, T0).status,
                200
            );
        }
        // AND search shows them gradually, all of them by the maximum lag, in creation order
        let mid = search_ids(&model, "pay_s", T0 + 30 * 60 * 1000).len();
        assert!(0 < mid && mid < 20, "{mid} of 20 visible half-way");
        let query = format!("{}&limit=100", search_query("pay_s"));
        let all = get(
            &model,
            "/v1/payment_intents/search",
            Some(&query),
            T0 + HOUR_MS,
        );
        let ids: Vec<String> = json(&all)["data"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|pi| pi["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(ids, created);
    }

    #[test]
    fn search_lags_behind_updates_too() {
        // GIVEN 20 intents that search shows as processing, up to a minute behind
        let model = model_with(ModelConfig {
            search_lag_max: Duration::from_secs(60),
            processing_for: Duration::from_secs(120),
            ..ModelConfig::default()
        });
        for _ in 0..20 {
            post(
                &model,
                INTENTS,
                &charge("pm_fake_processing", "pay_u"),
                None,
                T0,
            );
        }
        let statuses_in_search = |now_ms: i64| -> Vec<Value> {
            let query = format!("{}&limit=100", search_query("pay_u"));
            let answer = get(&model, "/v1/payment_intents/search", Some(&query), now_ms);
            json(&answer)["data"]
                .as_array()
                .map(|data| data.iter().map(|pi| pi["status"].clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(
            statuses_in_search(T0 + 60_000),
            vec![json!("processing"); 20]
        );
        // WHEN they all succeed at T0 + 120 s
        let settled = T0 + 120_000;
        assert!(model.charges().iter().all(|c| c.status == "processing"));
        let half_way = statuses_in_search(settled + 30_000);
        assert!(model.charges().iter().all(|c| c.status == "succeeded"));
        // THEN half a minute later search still shows some of them processing
        let stale = half_way.iter().filter(|s| *s == "processing").count();
        assert!(
            0 < stale && stale < 20,
            "{stale} of 20 still processing in search"
        );
        // AND once the maximum lag has passed, all of them succeeded, and never flip back
        assert_eq!(
            statuses_in_search(settled + 60_000),
            vec![json!("succeeded"); 20]
        );
        assert_eq!(
            statuses_in_search(settled + HOUR_MS),
            vec![json!("succeeded"); 20]
        );
    }

    #[test]
    fn search_pages_with_limit_and_cursor() {
        let model = model();
        for _ in 0..3 {
            post(
                &model,
                INTENTS,
                &charge("pm_card_visa", "pay_page"),
                None,
                T0,
            );
        }
        let query = format!("{}&limit=2", search_query("pay_page"));
        let first = json(&get(&model, "/v1/payment_intents/search", Some(&query), T0));
        assert_eq!(first["data"].as_array().map(Vec::len), Some(2));
        assert_eq!(first["has_more"], true);
        let cursor = first["next_page"].as_str().unwrap_or_default();
        let query = format!("{query}&page={cursor}");
        let second = json(&get(&model, "/v1/payment_intents/search", Some(&query), T0));
        assert_eq!(second["data"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            (&second["has_more"], &second["next_page"]),
            (&json!(false), &Value::Null)
        );
        let bad = get(
            &model,
            "/v1/payment_intents/search",
            Some("query=status%3A%27succeeded%27"),
            T0,
        );
        assert_eq!(bad.status, 400);
        let missing = get(&model, "/v1/payment_intents/search", None, T0);
        assert_eq!(error_code(&missing), "parameter_missing");
    }

    // Rule 9: authentication first.

    #[test]
    fn wrong_or_missing_api_key_is_401_before_anything_else_and_counted() {
        let model = model();
        assert!(model.begin_in_flight("k"));
        for authorization in [
            None,
            Some("Bearer sk_test_wrong"),
            Some("sk_test_payonce_fake"),
        ] {
            for (method, path, body) in [
                ("POST", INTENTS, "amount=1"),
                ("GET", "/v1/payment_intents/pi_x", ""),
                ("POST", "/v1/nowhere", ""),
            ] {
                let answer = model.handle(
                    &WireRequest {
                        method,
                        path,
                        query: None,
                        authorization,
                        idempotency_key: Some("k"),
                        body: body.as_bytes(),
                    },
                    T0,
                );
                // THEN 401 wins over 409 in flight, 400 validation and 404 unknown route
                assert_eq!(answer.status, 401, "{authorization:?} {path}");
                assert_eq!(
                    json(&answer),
                    json!({"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}})
                );
            }
        }
        assert_eq!(model.requests_seen(), 9);
        assert!(model.charges().is_empty());
        // Outside /v1 nothing is counted or authenticated.
        let answer = model.handle(
            &WireRequest {
                method: "GET",
                path: "/elsewhere",
                query: None,
                authorization: None,
                idempotency_key: None,
                body: b"",
            },
            T0,
        );
        assert_eq!(answer.status, 404);
        assert_eq!(model.requests_seen(), 9);
    }

    // Rule 10: refunds.

    const REFUNDS: &str = "/v1/refunds";

    /// A succeeded PaymentIntent of 3000 jpy charged with `token`; returns its id.
    fn paid(model: &StripeModel, token: &str, payment_id: &str) -> String {
        let answer = post(model, INTENTS, &charge(token, payment_id), None, T0);
        assert_eq!(answer.status, 200, "{}", answer.body);
        json(&answer)["id"].as_str().unwrap_or_default().to_owned()
    }

    /// The refund request payonce sends, plus `extra` (e.g. `&amount=500`).
    fn refund_body(payment_intent: &str, extra: &str) -> String {
        format!(
            "payment_intent={payment_intent}&reason=requested_by_customer\
             &metadata[payment_id]=pay_1&metadata[refund_id]=ref_1{extra}"
        )
    }

    fn event_json(event: &ModelEvent) -> Value {
        serde_json::from_str(&event.body).unwrap_or(Value::Null)
    }

    #[test]
    fn refunds_honour_idempotency_keys_like_creates() {
        // Stripe, "Idempotent requests" and "Create a refund": the first answer under a key is
        // replayed; other parameters or another endpoint → 400 idempotency_error; a key in
        // flight → 409.
        // GIVEN a refund made under key k
        let model = model();
        let pi = paid(&model, "pm_card_visa", "pay_1");
        let body = refund_body(&pi, "&amount=1000");
        let first = post(&model, REFUNDS, &body, Some("k"), T0 + 1000);
        assert_eq!(
            (first.status, first.replayed),
            (200, false),
            "{}",
            first.body
        );
        assert_eq!(kinds(&first.events), ["refund.created", "charge.refunded"]);
        let created = event_json(&first.events[0]);
        assert_eq!(created["api_version"], "2024-10-28.acacia");
        assert_eq!(created["request"]["idempotency_key"], "k");
        assert_eq!(created["data"]["object"], json(&first));
        // WHEN the same parameters come again, in another order
        let reordered: Vec<&str> = body.split('&').rev().collect();
        let again = post(
            &model,
            REFUNDS,
            &reordered.join("&"),
            Some("k"),
            T0 + HOUR_MS,
        );
        // THEN the stored answer comes back byte for byte, with no events, and one refund exists
        assert_eq!((again.status, again.replayed), (200, true));
        assert_eq!(again.body, first.body);
        assert!(again.events.is_empty());
        assert_eq!(model.refunds().len(), 1);
        // AND k with another amount, or on the PaymentIntents endpoint, is idempotency_error
        for answer in [
            post(
                &model,
                REFUNDS,
                &refund_body(&pi, "&amount=999"),
                Some("k"),
                T0,
            ),
            post(
                &model,
                INTENTS,
                &charge("pm_card_visa", "pay_1"),
                Some("k"),
                T0,
            ),
        ] {
            assert_eq!(answer.status, 400);
            assert_eq!(json(&answer)["error"]["type"], "idempotency_error");
            assert!(answer.events.is_empty());
        }
        // AND a key held by a running request is 409 idempotency_key_in_use
        assert!(model.begin_in_flight("busy"));
        let busy = post(&model, REFUNDS, &body, Some("busy"), T0);
        assert_eq!(
            (busy.status, error_code(&busy)),
            (409, json!("idempotency_key_in_use"))
        );
        assert!(!model.begin_in_flight("k"), "k has a stored answer");
        assert_eq!(model.refunds().len(), 1);
        assert_eq!(model.refunds()[0].idempotency_key.as_deref(), Some("k"));
    }

    #[test]
    fn refund_validation_errors_are_answered_before_the_key_and_store_nothing() {
        // Stripe, "Idempotent requests": no result is saved when the parameters fail validation;
        // "Create a refund": `reason` is one of three values, `amount` a positive integer.
        let model = model();
        let pi = paid(&model, "pm_card_visa", "pay_1");
        let cases = [
            ("amount=500".to_owned(), "parameter_missing"),
            (refund_body(&pi, "&amount=0"), "parameter_invalid_integer"),
            (refund_body(&pi, "&amount=-5"), "parameter_invalid_integer"),
            (refund_body(&pi, "&amount=ten"), "parameter_invalid_integer"),
            (
                format!("payment_intent={pi}&reason=changed_mind"),
                "parameter_invalid",
            ),
            (
                format!("payment_intent={pi}&charge=ch_1"),
                "parameter_unknown",
            ),
        ];
        for (body, code) in &cases {
            // GIVEN the key is held by a running request
            assert!(model.begin_in_flight("held"));
            // WHEN an invalid refund comes with it
            let refused = post(&model, REFUNDS, body, Some("held"), T0);
            // THEN the idempotency layer, in front of the endpoint, answers 409 first
            assert_eq!(refused.status, 409, "{body}");
            assert!(refused.events.is_empty());
            // AND under a fresh key it is refused for its parameters
            let fresh = post(&model, REFUNDS, body, Some(&format!("fresh-{body}")), T0);
            assert_eq!(fresh.status, 400, "{body}");
            assert_eq!(json(&fresh)["error"]["type"], "invalid_request_error");
            assert_eq!(error_code(&fresh), json!(code), "{body}");
            assert!(model.end_in_flight("held"), "still held, untouched");
            // AND under a free key nothing is stored: a valid refund with the key then runs
            let key = format!("k-{body}");
            assert_eq!(post(&model, REFUNDS, body, Some(&key), T0).status, 400);
            let ok = post(
                &model,
                REFUNDS,
                &refund_body(&pi, "&amount=1"),
                Some(&key),
                T0,
            );
            assert_eq!(
                (ok.status, ok.replayed),
                (200, false),
                "{body}: {}",
                ok.body
            );
        }
        assert_eq!(model.refunds().len(), cases.len());
    }

    #[test]
    fn refunds_of_missing_or_unsucceeded_intents_are_refused_and_create_nothing() {
        // Stripe, "Create a refund" and "Error codes": an unknown PaymentIntent is
        // `resource_missing`; one without a succeeded charge `charge_not_refundable`. Such an
        // answer comes after the endpoint began, so it is stored under the key like any other
        // ("Idempotent requests").
        let model = model_with(ModelConfig {
            processing_for: Duration::from_secs(HOUR_S),
            ..ModelConfig::default()
        });
        let declined = post(
            &model,
            INTENTS,
            &charge("pm_card_visa_chargeDeclined", "p1"),
            None,
            T0,
        );
        let declined = json(&declined)["error"]["payment_intent"]["id"].clone();
        let fenced = post(&model, INTENTS, &fence("pm_card_visa", "p2"), None, T0);
        let processing = post(
            &model,
            INTENTS,
            &charge("pm_fake_processing", "p3"),
            None,
            T0,
        );
        let mut cases = vec![("pi_missing".to_owned(), "resource_missing")];
        for intent in [
            declined,
            json(&fenced)["id"].clone(),
            json(&processing)["id"].clone(),
        ] {
            cases.push((
                intent.as_str().unwrap_or_default().to_owned(),
                "charge_not_refundable",
            ));
        }
        for (pi, code) in &cases {
            let key = format!("k-{pi}");
            let refused = post(&model, REFUNDS, &refund_body(pi, ""), Some(&key), T0);
            assert_eq!(refused.status, 400, "{pi}: {}", refused.body);
            assert_eq!(json(&refused)["error"]["type"], "invalid_request_error");
            assert_eq!(error_code(&refused), json!(code), "{pi}");
            assert!(refused.events.is_empty());
            let replayed = post(&model, REFUNDS, &refund_body(pi, ""), Some(&key), T0 + 1);
            assert_eq!((replayed.replayed, replayed.body), (true, refused.body));
        }
        let missing = post(&model, REFUNDS, &refund_body("pi_missing", ""), None, T0);
        assert_eq!(json(&missing)["error"]["param"], "payment_intent");
        assert!(model.refunds().is_empty());
    }

    #[test]
    fn partial_refunds_add_up_to_the_charge_then_charge_already_refunded() {
        // Stripe, "Create a refund": a charge may be refunded in parts until all of it is; an
        // already refunded charge, or more than is left, is refused. The message of the latter
        // is Stripe's, with `param: amount` and no code ("Error codes" has none for it).
        let model = model();
        let pi = paid(&model, "pm_card_visa", "pay_1");
        let mut refunded = 0;
        for (amount, key) in [(1000, "r1"), (1500, "r2")] {
            let ok = post(
                &model,
                REFUNDS,
                &refund_body(&pi, &format!("&amount={amount}")),
                Some(key),
                T0,
            );
            assert_eq!(ok.status, 200, "{}", ok.body);
            refunded += amount;
            let charge = &event_json(&ok.events[1])["data"]["object"];
            assert_eq!(charge["amount_refunded"], refunded);
            assert_eq!(charge["refunded"], false);
            assert_eq!(charge["payment_intent"], pi.as_str());
        }
        // WHEN more than the 500 left is asked for
        let too_much = post(
            &model,
            REFUNDS,
            &refund_body(&pi, "&amount=600"),
            Some("r3"),
            T0,
        );
        // THEN it is refused in Stripe's words and nothing is refunded
        assert_eq!(
            json(&too_much),
            json!({"error": {
                "type": "invalid_request_error",
                "param": "amount",
                "message": "Refund amount (¥600) is greater than unrefunded amount on charge (¥500)",
            }})
        );
        assert!(too_much.events.is_empty());
        // AND without an amount, the rest is refunded
        let rest = post(&model, REFUNDS, &refund_body(&pi, ""), Some("r4"), T0);
        assert_eq!(json(&rest)["amount"], 500);
        let refund = json(&rest);
        assert_eq!(refund["object"], "refund");
        assert!(refund["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("re_")));
        assert_eq!(refund["status"], "succeeded");
        assert_eq!(refund["currency"], "jpy");
        assert_eq!(refund["payment_intent"], pi.as_str());
        let intent = json(&get(&model, &format!("{INTENTS}/{pi}"), None, T0));
        assert_eq!(refund["charge"], intent["latest_charge"]);
        assert_eq!(refund["reason"], "requested_by_customer");
        assert_eq!(refund["metadata"]["refund_id"], "ref_1");
        assert!(refund.get("failure_reason").is_none());
        let charge = &event_json(&rest.events[1])["data"]["object"];
        assert_eq!(
            (&charge["amount_refunded"], &charge["refunded"]),
            (&json!(3000), &json!(true))
        );
        assert_eq!(charge["refunds"]["data"][0]["id"], refund["id"]);
        assert_eq!(charge["refunds"]["total_count"], 3);
        // AND any further refund, with or without an amount, is charge_already_refunded
        for extra in ["", "&amount=1"] {
            let refused = post(&model, REFUNDS, &refund_body(&pi, extra), None, T0);
            assert_eq!(refused.status, 400);
            assert_eq!(error_code(&refused), "charge_already_refunded");
        }
        let refunds = model.refunds();
        let amounts: Vec<i64> = refunds.iter().map(|r| r.amount).collect();
        assert_eq!(amounts, [1000, 1500, 500]);
        assert!(refunds
            .iter()
            .all(|r| r.outcome == "succeeded" && r.provider == "stripe"));
        assert_eq!(refunds[2].payment_id.as_deref(), Some("pay_1"));
        assert_eq!(refunds[2].refund_id.as_deref(), Some("ref_1"));
        assert_eq!(refunds[2].idempotency_key.as_deref(), Some("r4"));
        let charges = model.charges();
        assert_eq!(
            (
                charges[0].provider.as_str(),
                charges[0].payment_id.as_deref()
            ),
            ("stripe", Some("pay_1"))
        );
    }

    #[test]
    fn pending_refunds_count_against_what_is_left() {
        // Stripe, "The Refund object": `pending` is a refund not final yet; the amount it holds
        // is no longer refundable (Stripe deducts a refund when it is created).
        // GIVEN a pm_fake_refund_pending charge with a pending refund of 2000
        let model = model();
        let pi = paid(&model, "pm_fake_refund_pending", "pay_1");
        let pending = post(&model, REFUNDS, &refund_body(&pi, "&amount=2000"), None, T0);
        assert_eq!(json(&pending)["status"], "pending");
        assert_eq!(kinds(&pending.events), ["refund.created"]);
        assert_eq!(model.refunds()[0].outcome, "pending");
        // WHEN 1001 more is asked for
        let too_much = post(&model, REFUNDS, &refund_body(&pi, "&amount=1001"), None, T0);
        // THEN only the 1000 not held by the pending refund is left
        assert_eq!(too_much.status, 400);
        assert_eq!(
            json(&too_much)["error"]["message"],
            "Refund amount (¥1001) is greater than unrefunded amount on charge (¥1000)"
        );
        let rest = post(&model, REFUNDS, &refund_body(&pi, ""), None, T0);
        assert_eq!(
            (json(&rest)["amount"].clone(), json(&rest)["status"].clone()),
            (json!(1000), json!("pending"))
        );
        let none_left = post(&model, REFUNDS, &refund_body(&pi, "&amount=1"), None, T0);
        assert_eq!(error_code(&none_left), "charge_already_refunded");
        assert_eq!(model.refunds().len(), 2);
    }

    #[test]
    fn pending_refund_token_succeeds_once_refund_pending_for_has_passed() {
        // Stripe, "The Refund object" (statuses) and "Types of events" (`refund.updated`): a
        // pending refund becomes succeeded later; `charge.refunded` follows the success.
        let model = model();
        let pi = paid(&model, "pm_fake_refund_pending", "pay_1");
        let created = post(&model, REFUNDS, &refund_body(&pi, ""), Some("k"), T0);
        let id = json(&created)["id"].as_str().unwrap_or_default().to_owned();
        let due = T0 + millis(ModelConfig::default().refund_pending_for);
        assert_eq!(model.next_transition_ms(), Some(due));
        assert!(model.tick(due - 1).is_empty());
        // WHEN refund_pending_for has passed
        let events = model.tick(due);
        // THEN it succeeded, with refund.updated naming the old status, then charge.refunded
        assert_eq!(kinds(&events), ["refund.updated", "charge.refunded"]);
        let updated = event_json(&events[0]);
        assert_eq!(updated["data"]["object"]["status"], "succeeded");
        assert_eq!(
            updated["data"]["previous_attributes"],
            json!({"status": "pending"})
        );
        assert_eq!(updated["created"], due / 1000);
        assert_eq!(updated["request"]["idempotency_key"], Value::Null);
        assert_eq!(
            event_json(&events[1])["data"]["object"]["amount_refunded"],
            3000
        );
        let retrieved = get(&model, &format!("{REFUNDS}/{id}"), None, due);
        assert_eq!(json(&retrieved)["status"], "succeeded");
        assert_eq!(model.refunds()[0].outcome, "succeeded");
        assert_eq!(model.next_transition_ms(), None);
    }

    #[test]
    fn refund_fail_card_refunds_read_succeeded_then_fail_and_give_the_amount_back() {
        // Stripe, "Testing" → "Refunds" (asynchronous failure: the refund begins `succeeded`,
        // later turns `failed`) and "Refunds" → "Failed refunds" (`failure_reason`, the funds
        // return to the balance).
        // GIVEN a pm_card_refundFail charge refunded in full
        let model = model();
        let pi = paid(&model, "pm_card_refundFail", "pay_1");
        let created = post(&model, REFUNDS, &refund_body(&pi, ""), Some("k1"), T0);
        let refund = json(&created);
        assert_eq!(
            (refund["status"].clone(), refund["amount"].clone()),
            (json!("succeeded"), json!(3000))
        );
        assert_eq!(
            kinds(&created.events),
            ["refund.created", "charge.refunded"]
        );
        let again = post(&model, REFUNDS, &refund_body(&pi, ""), None, T0 + 1);
        assert_eq!(error_code(&again), "charge_already_refunded");
        // WHEN refund_fail_after has passed
        let due = T0 + millis(ModelConfig::default().refund_fail_after);
        assert_eq!(model.next_transition_ms(), Some(due));
        assert!(model.tick(due - 1).is_empty());
        let events = model.tick(due);
        // THEN it failed with expired_or_canceled_card: refund.updated, then refund.failed
        assert_eq!(kinds(&events), ["refund.updated", "refund.failed"]);
        let updated = event_json(&events[0]);
        assert_eq!(
            updated["data"]["previous_attributes"],
            json!({"status": "succeeded", "failure_reason": null})
        );
        let failed = &event_json(&events[1])["data"]["object"];
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["failure_reason"], "expired_or_canceled_card");
        assert_eq!(failed["id"], refund["id"]);
        let id = refund["id"].as_str().unwrap_or_default();
        let retrieved = json(&get(&model, &format!("{REFUNDS}/{id}"), None, due));
        assert_eq!(retrieved["failure_reason"], "expired_or_canceled_card");
        let fake = &model.refunds()[0];
        assert_eq!(
            (fake.outcome.as_str(), fake.failure_reason.as_deref()),
            ("failed", Some("expired_or_canceled_card"))
        );
        // AND the amount is refundable again (and that refund fails later too)
        let retry = post(&model, REFUNDS, &refund_body(&pi, ""), Some("k2"), due + 1);
        assert_eq!(retry.status, 200, "{}", retry.body);
        assert_eq!(json(&retry)["amount"], 3000);
        assert_eq!(json(&retry)["status"], "succeeded");
        assert_eq!(
            model.next_transition_ms(),
            Some(due + 1 + millis(ModelConfig::default().refund_fail_after))
        );
    }

    #[test]
    fn refund_lists_are_newest_first_read_after_write_and_page() {
        // Stripe, "List all refunds": newest first, `limit` 1 to 100, `has_more`,
        // `starting_after`; "Retrieve a refund" by id.
        let model = model();
        let (pi1, pi2) = (
            paid(&model, "pm_card_visa", "pay_1"),
            paid(&model, "pm_card_visa", "pay_2"),
        );
        let ids: Vec<String> = [(&pi1, 1), (&pi2, 2), (&pi1, 3)]
            .iter()
            .map(|(pi, n)| {
                let answer = post(
                    &model,
                    REFUNDS,
                    &refund_body(pi, &format!("&amount={n}")),
                    None,
                    T0,
                );
                json(&answer)["id"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        let list = |query: &str| json(&get(&model, REFUNDS, Some(query), T0));
        let listed_ids = |list: &Value| -> Vec<String> {
            list["data"]
                .as_array()
                .map(|data| {
                    data.iter()
                        .filter_map(|r| r["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        // THEN the same instant's list shows them, newest first
        let of_pi1 = list(&format!("payment_intent={pi1}"));
        assert_eq!(listed_ids(&of_pi1), [ids[2].clone(), ids[0].clone()]);
        assert_eq!(
            (&of_pi1["object"], &of_pi1["has_more"], &of_pi1["url"]),
            (&json!("list"), &json!(false), &json!("/v1/refunds"))
        );
        let all = list("");
        assert_eq!(
            listed_ids(&all),
            [ids[2].clone(), ids[1].clone(), ids[0].clone()]
        );
        // AND pages with limit and starting_after
        let first = list(&format!("payment_intent={pi1}&limit=1"));
        assert_eq!(
            (listed_ids(&first), &first["has_more"]),
            (vec![ids[2].clone()], &json!(true))
        );
        let second = list(&format!(
            "payment_intent={pi1}&limit=1&starting_after={}",
            ids[2]
        ));
        assert_eq!(
            (listed_ids(&second), &second["has_more"]),
            (vec![ids[0].clone()], &json!(false))
        );
        // AND refuses what it does not know
        for (query, param) in [
            ("payment_intent=pi_missing", "payment_intent"),
            ("limit=0", "limit"),
            ("limit=101", "limit"),
            ("starting_after=re_missing", "starting_after"),
            ("created=1", "created"),
        ] {
            let refused = get(&model, REFUNDS, Some(query), T0);
            assert_eq!(refused.status, 400, "{query}");
            assert_eq!(json(&refused)["error"]["param"], param);
        }
        // AND retrieves one by id, 404 for an unknown one
        let one = get(&model, &format!("{REFUNDS}/{}", ids[1]), None, T0);
        assert_eq!(
            (one.status, json(&one)["payment_intent"].clone()),
            (200, json!(pi2))
        );
        let missing = get(&model, &format!("{REFUNDS}/re_missing"), None, T0);
        assert_eq!(
            (missing.status, error_code(&missing)),
            (404, json!("resource_missing"))
        );
    }

    /// A call sequence touching every refund path.
    fn run_refund_script(model: &StripeModel) -> Vec<String> {
        let mut trace = Vec::new();
        let mut record = |answer: WireAnswer| {
            trace.push(format!(
                "{} {} {}",
                answer.status, answer.replayed, answer.body
            ));
            trace.extend(
                answer
                    .events
                    .into_iter()
                    .map(|e| format!("{} {}", e.id, e.body)),
            );
        };
        let mut intents = Vec::new();
        for token in [
            "pm_card_visa",
            "pm_card_refundFail",
            "pm_fake_refund_pending",
        ] {
            let answer = post(model, INTENTS, &charge(token, "a"), None, T0);
            intents.push(json(&answer)["id"].as_str().unwrap_or_default().to_owned());
            record(answer);
        }
        for (i, pi) in intents.iter().enumerate() {
            let key = format!("r{i}");
            record(post(
                model,
                REFUNDS,
                &refund_body(pi, "&amount=1000"),
                Some(&key),
                T0 + 5,
            ));
            record(post(
                model,
                REFUNDS,
                &refund_body(pi, "&amount=1000"),
                Some(&key),
                T0 + 6,
            ));
            record(post(
                model,
                REFUNDS,
                &refund_body(pi, "&amount=5000"),
                None,
                T0 + 7,
            ));
        }
        record(get(model, REFUNDS, Some("limit=2"), T0 + 8));
        trace.extend(model.tick(T0 + HOUR_MS).into_iter().map(|e| e.body));
        trace.push(serde_json::to_string(&model.refunds()).unwrap_or_default());
        trace
    }

    #[test]
    fn refunds_are_byte_identical_for_one_seed_and_call_sequence() {
        // The model's own rule (no Stripe page): one seed and one call sequence give the same
        // refund ids, answers and events, so a simulation seed replays exactly.
        let first = run_refund_script(&StripeModel::new(ModelConfig::default(), 42));
        let second = run_refund_script(&StripeModel::new(ModelConfig::default(), 42));
        assert_eq!(first, second);
        let other = run_refund_script(&StripeModel::new(ModelConfig::default(), 43));
        assert_ne!(first, other, "the seed decides ids");
    }

    // Determinism and bookkeeping.

    /// A call sequence touching every source of randomness.
    fn run_script(model: &StripeModel) -> Vec<String> {
        let mut trace = Vec::new();
        let mut record = |answer: WireAnswer| {
            trace.push(format!(
                "{} {} {}",
                answer.status, answer.replayed, answer.body
            ));
            trace.extend(
                answer
                    .events
                    .into_iter()
                    .map(|e| format!("{} {}", e.id, e.body)),
            );
        };
        record(post(
            model,
            INTENTS,
            &charge("pm_card_visa", "a"),
            Some("k1"),
            T0,
        ));
        record(post(
            model,
            INTENTS,
            &charge("pm_card_visa_chargeDeclined", "a"),
            Some("k2"),
            T0 + 5,
        ));
        record(post(
            model,
            INTENTS,
            &charge("pm_fake_processing", "b"),
            None,
            T0 + 9,
        ));
        record(post(
            model,
            INTENTS,
            &charge("pm_card_visa", "a"),
            Some("k1"),
            T0 + 30 * HOUR_MS,
        ));
        record(get(
            model,
            "/v1/payment_intents/search",
            Some(&search_query("a")),
            T0 + 31 * HOUR_MS,
        ));
        trace.extend(model.tick(T0 + 40 * HOUR_MS).into_iter().map(|e| e.body));
        trace.push(serde_json::to_string(&model.charges()).unwrap_or_default());
        trace
    }

    #[test]
    fn same_seed_and_calls_give_byte_identical_answers() {
        let config = || ModelConfig {
            search_lag_max: Duration::from_secs(600),
            ..ModelConfig::default()
        };
        let first = run_script(&StripeModel::new(config(), 42));
        let second = run_script(&StripeModel::new(config(), 42));
        assert_eq!(first, second);
        let other = run_script(&StripeModel::new(config(), 43));
        assert_ne!(first, other, "the seed decides ids");
    }

    #[test]
    fn time_never_runs_backwards() {
        let model = model_with(ModelConfig {
            processing_for: Duration::from_secs(1),
            ..ModelConfig::default()
        });
        post(
            &model,
            INTENTS,
            &charge("pm_fake_processing", "p"),
            None,
            T0,
        );
        assert_eq!(kinds(&model.tick(T0 + 1000)), ["payment_intent.succeeded"]);
        // An earlier time afterwards is taken as the latest one seen.
        let late = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "p"),
            None,
            T0 - HOUR_MS,
        );
        assert_eq!(json(&late)["created"], (T0 + 1000) / 1000);
    }

    #[test]
    fn unknown_routes_are_404_in_stripes_shape() {
        let model = model();
        for (method, path) in [
            ("GET", "/v1/payment_intents"),
            ("POST", "/v1/payment_intents/pi_1"),
            ("GET", "/v1/payment_intents/"),
            ("DELETE", "/v1/payment_intents/pi_1"),
            ("GET", "/v1"),
        ] {
            let authorization = bearer();
            let answer = model.handle(
                &WireRequest {
                    method,
                    path,
                    query: None,
                    authorization: Some(&authorization),
                    idempotency_key: None,
                    body: b"",
                },
                T0,
            );
            assert_eq!(answer.status, 404, "{method} {path}");
            assert_eq!(json(&answer)["error"]["param"], "url");
        }
    }

    #[test]
    fn idempotency_keys_must_be_1_to_255_visible_characters() {
        let model = model();
        let long = "k".repeat(256);
        for key in ["", long.as_str(), "tab\there"] {
            let refused = post(&model, INTENTS, &charge("pm_card_visa", "p"), Some(key), T0);
            assert_eq!(refused.status, 400);
        }
        assert!(model.charges().is_empty());
        let ok = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "p"),
            Some(&"k".repeat(255)),
            T0,
        );
        assert_eq!(ok.status, 200);
    }

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
