//! The Stripe PaymentIntents state machine: one synchronous, deterministic model that both the
//! fake PSP's HTTP server and payonce's in-process simulation call.
//!
//! The model takes a request as it came off the wire ([`WireRequest`]) and the time, and returns
//! the answer to write ([`WireAnswer`]): status, body, whether it is an idempotent replay, how to
//! deliver it, and the webhook events it caused. It knows nothing of sockets, async runtimes or
//! the system clock: time is passed in (epoch ms, never running backwards inside the model), and
//! every random choice (ids, how long an idempotency key is remembered, search lag) comes from a
//! [`fastrand::Rng`] seeded in [`StripeModel::new`], so one seed and one call sequence give
//! byte-identical answers. Maps whose order could reach an answer are `BTreeMap`s.
//!
//! It is as strict as Stripe wherever Stripe is strict, so code tested against it cannot rely on
//! a kinder PSP than production. Each rule names the Stripe documentation it follows:
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

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};

use crate::behaviour::{behaviour_for, Behaviour, Decline};
use crate::params::{optional_enum, parse_form, CreateParams, Params};
use crate::reply::{self, Reply};
use crate::state::{FakeCharge, Intent, Status};

/// The API version stamped on every event.
const API_VERSION: &str = "2024-06-20";

/// Stripe's limit on `Idempotency-Key` length ("Idempotent requests": "up to 255 characters").
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A stored idempotency key is kept at least this long ("Idempotent requests": keys may be
/// removed once they are at least 24 hours old)...
const KEY_KEPT_AT_LEAST_MS: i64 = 24 * 60 * 60 * 1000;

/// ...and forgotten no later than this, so that nobody can rely on forgetting at exactly 24 h.
const KEY_KEPT_AT_MOST_MS: i64 = 48 * 60 * 60 * 1000;

/// Search answers this many results unless `limit` says otherwise ("Search PaymentIntents").
const SEARCH_LIMIT_DEFAULT: usize = 10;

/// The largest `limit` search accepts ("Search PaymentIntents": between 1 and 100).
const SEARCH_LIMIT_MAX: usize = 100;

/// The prefix of the `page` cursors search hands out.
const PAGE_CURSOR_PREFIX: &str = "fakepage_";

/// How the model behaves where Stripe's behaviour depends on time or configuration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The only secret key accepted as `Authorization: Bearer <api_key>`; anything else is 401.
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
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            api_key: crate::DEFAULT_API_KEY.to_owned(),
            search_lag_max: Duration::ZERO,
            processing_for: Duration::from_secs(5 * 60),
            requires_action_for: Duration::from_secs(60 * 60),
            // Long enough to outlast any sane client timeout, which is the point of the token.
            slow_delay: Duration::from_secs(30),
            minimum_overrides: BTreeMap::new(),
        }
    }
}

/// One API request as it came off the wire.
#[derive(Clone, Copy, Debug)]
pub struct WireRequest<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The path without the query, e.g. `/v1/payment_intents/pi_x/cancel`.
    pub path: &'a str,
    /// The raw query string, if any (search).
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
    /// `evt_...`, also the de-duplication key receivers use.
    pub id: String,
    /// E.g. `payment_intent.succeeded`.
    pub kind: String,
    /// The Stripe event JSON, serialised once so that every copy and retry sends the same bytes.
    pub body: String,
}

/// The Stripe PaymentIntents model. All methods take `&self` (the state sits behind a mutex), so
/// one model can be shared between threads; each call is atomic.
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
                keys: BTreeMap::new(),
                due_events: Vec::new(),
            }),
        }
    }

    /// Handles one API request atomically at `now_ms` (epoch ms). Time-driven transitions due by
    /// then are applied first, so the request sees the world as it is at `now_ms`.
    pub fn handle(&self, request: &WireRequest<'_>, now_ms: i64) -> WireAnswer {
        let mut inner = self.lock();
        let now_ms = inner.observe(&self.config, now_ms);
        let handled = inner.dispatch(&self.config, request, now_ms);
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
    /// `requires_action` → `requires_payment_method`) and returns the events not yet handed out,
    /// in the order they happened.
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
        inner
            .intents
            .iter()
            .filter_map(|intent| intent.due_ms)
            .min()
    }

    /// Every PaymentIntent in creation order, as it is now.
    pub fn charges(&self) -> Vec<FakeCharge> {
        self.lock().intents.iter().map(Intent::to_charge).collect()
    }

    /// Requests seen on `/v1/*` so far, whatever their answer (401s included).
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
struct Fingerprint {
    /// Method and concrete path, e.g. `POST /v1/payment_intents/pi_1/cancel`: Stripe refuses a
    /// key reused on another endpoint just like one reused with other parameters.
    route: String,
    /// The parsed parameters (order and percent-encoding do not matter).
    params: Params,
}

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
struct Handled {
    reply: Reply,
    replayed: bool,
    delivery: Delivery,
    events: Vec<ModelEvent>,
}

impl Handled {
    /// An answer written at once that caused no events.
    fn plain(reply: Reply) -> Self {
        Self {
            reply,
            replayed: false,
            delivery: Delivery::Now,
            events: Vec::new(),
        }
    }
}

/// Everything the model remembers.
#[derive(Debug)]
struct Inner {
    rng: fastrand::Rng,
    /// The latest time seen, epoch ms; time never runs backwards inside the model.
    clock_ms: i64,
    requests_seen: u64,
    /// In creation order, which is the order `charges()` and search report.
    intents: Vec<Intent>,
    /// id → position in `intents`.
    by_id: BTreeMap<String, usize>,
    keys: BTreeMap<String, KeyEntry>,
    /// Events of time-driven transitions not yet handed out.
    due_events: Vec<ModelEvent>,
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
        let mut due: Vec<(i64, usize)> = self
            .intents
            .iter()
            .enumerate()
            .filter_map(|(index, intent)| {
                intent
                    .due_ms
                    .filter(|due_ms| *due_ms <= now_ms)
                    .map(|due_ms| (due_ms, index))
            })
            .collect();
        due.sort_unstable();
        for (at_ms, index) in due {
            let intent = &mut self.intents[index];
            intent.due_ms = None;
            let kind = match intent.status {
                Status::Processing => {
                    intent.status = Status::Succeeded;
                    "payment_intent.succeeded"
                }
                Status::RequiresAction => {
                    intent.status = Status::RequiresPaymentMethod;
                    intent.last_payment_error = Some(json!({
                        "type": "card_error",
                        "code": "authentication_required",
                        "decline_code": "authentication_required",
                        "message": "Your card was declined. This transaction requires authentication.",
                    }));
                    "payment_intent.payment_failed"
                }
                _ => continue,
            };
            self.record_search_version(config, index, at_ms);
            let object = self.intents[index].to_json();
            // Not caused by an API request, so the event names none.
            let event = self.event(kind, object, at_ms, None);
            self.due_events.push(event);
        }
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
            _ => Handled::plain(unrecognized(request)),
        }
    }

    /// Runs `run` under the idempotency key, if there is one: replays or refuses instead when
    /// the key is known, stores the answer afterwards unless it is a server error.
    fn idempotent(
        &mut self,
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
            Claim::Mismatch => return Handled::plain(reply::idempotency_mismatch(&key)),
            Claim::InUse => return Handled::plain(reply::idempotency_in_use(&key)),
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
        // Validation comes before the key: Stripe saves nothing for a request that fails it.
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
        let key = match idempotency_key(request.idempotency_key) {
            Ok(key) => key,
            Err(reply) => return Handled::plain(reply),
        };
        let fingerprint = Fingerprint {
            route: "POST /v1/payment_intents".to_owned(),
            params,
        };
        let creation_key = key.clone();
        self.idempotent(key, fingerprint, now_ms, |model| {
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
        let behaviour = behaviour_for(&create.payment_method);
        // The PaymentMethod is looked up whether or not it is confirmed: Stripe attaches it at
        // creation, and an id that names nothing is `resource_missing` either way.
        if behaviour == Behaviour::Unknown {
            return Handled::plain(no_such_payment_method(&create.payment_method));
        }
        if create.confirm && behaviour == Behaviour::ErrorBeforeCharge {
            return Handled::plain(reply::api_error(
                "An unexpected error occurred before the charge was attempted (fake PSP: \
                 pm_fake_error_before_charge). Nothing was charged; the request can be retried.",
            ));
        }
        let mut intent = Intent {
            id: self.new_id("pi"),
            amount: create.amount,
            currency: create.currency,
            status: Status::RequiresConfirmation,
            payment_method: create.payment_method,
            metadata: create.metadata,
            idempotency_key: key,
            created: now_ms.div_euclid(1000),
            latest_charge: None,
            last_payment_error: None,
            cancellation_reason: None,
            due_ms: None,
            search_versions: Vec::new(),
        };
        if !create.confirm {
            // Nothing attempted, so the token's behaviour does not matter yet, and Stripe sends
            // no event a receiver would act on.
            let reply = Reply::json(200, &intent.to_json());
            self.insert(config, intent, now_ms);
            return Handled::plain(reply);
        }

        let mut delivery = Delivery::Now;
        let (reply, kind) = match behaviour {
            Behaviour::Approve | Behaviour::LostResponse | Behaviour::Slow => {
                if behaviour == Behaviour::LostResponse {
                    delivery = Delivery::Sever;
                } else if behaviour == Behaviour::Slow {
                    delivery = Delivery::After(config.slow_delay);
                }
                intent.status = Status::Succeeded;
                intent.latest_charge = Some(self.new_id("ch"));
                (
                    Reply::json(200, &intent.to_json()),
                    "payment_intent.succeeded",
                )
            }
            Behaviour::Decline(decline) => self.decline(&mut intent, decline),
            Behaviour::Processing => {
                intent.status = Status::Processing;
                intent.latest_charge = Some(self.new_id("ch"));
                intent.due_ms = Some(now_ms.saturating_add(millis(config.processing_for)));
                (
                    Reply::json(200, &intent.to_json()),
                    "payment_intent.processing",
                )
            }
            Behaviour::RequiresAction => {
                intent.status = Status::RequiresAction;
                intent.due_ms = Some(now_ms.saturating_add(millis(config.requires_action_for)));
                (
                    Reply::json(200, &intent.to_json()),
                    "payment_intent.requires_action",
                )
            }
            // Both answered above; kept total rather than panicking.
            Behaviour::ErrorBeforeCharge | Behaviour::Unknown => {
                return Handled::plain(no_such_payment_method(&intent.payment_method));
            }
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

    /// Fails the charge attempt: the PaymentIntent goes back to `requires_payment_method` and
    /// the answer is a 402 carrying it, as Stripe answers a declined confirm.
    fn decline(&mut self, intent: &mut Intent, decline: Decline) -> (Reply, &'static str) {
        let charge = self.new_id("ch");
        intent.status = Status::RequiresPaymentMethod;
        intent.latest_charge = Some(charge.clone());
        intent.last_payment_error = Some(json!({
            "type": "card_error",
            "code": "card_declined",
            "decline_code": decline.decline_code,
            "message": decline.message,
            "charge": charge,
        }));
        let reply = reply::card_declined(
            decline.decline_code,
            decline.message,
            Some(&charge),
            intent.to_json(),
        );
        (reply, "payment_intent.payment_failed")
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
        self.idempotent(key, fingerprint, now_ms, |model| {
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

    /// Records a new PaymentIntent.
    fn insert(&mut self, config: &ModelConfig, intent: Intent, now_ms: i64) {
        let index = self.intents.len();
        self.by_id.insert(intent.id.clone(), index);
        self.intents.push(intent);
        self.record_search_version(config, index, now_ms);
    }

    /// Queues the PaymentIntent as it is now for the search index, visible after a random lag
    /// and never before an earlier version.
    fn record_search_version(&mut self, config: &ModelConfig, index: usize, at_ms: i64) {
        let lag_max_ms = millis(config.search_lag_max);
        let lag_ms = if lag_max_ms == 0 {
            0
        } else {
            self.rng.i64(0..=lag_max_ms)
        };
        let intent = &mut self.intents[index];
        let earliest = intent
            .search_versions
            .last()
            .map_or(i64::MIN, |(visible_from_ms, _)| *visible_from_ms);
        let visible_from_ms = at_ms.saturating_add(lag_ms).max(earliest);
        let snapshot = intent.to_json();
        intent.search_versions.push((visible_from_ms, snapshot));
    }

    /// An event of `kind` about a PaymentIntent (`object`, its JSON at that moment), caused at
    /// `at_ms` by the request with idempotency key `key`, if any.
    fn event(&mut self, kind: &str, object: Value, at_ms: i64, key: Option<String>) -> ModelEvent {
        let id = self.new_id("evt");
        let body = json!({
            "id": id,
            "object": "event",
            "type": kind,
            "created": at_ms.div_euclid(1000),
            "api_version": API_VERSION,
            "livemode": false,
            "data": { "object": object },
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

/// The `Idempotency-Key` header, validated ("Idempotent requests": up to 255 characters).
fn idempotency_key(raw: Option<&str>) -> Result<Option<String>, Reply> {
    let Some(key) = raw else {
        return Ok(None);
    };
    let visible = key.bytes().all(|b| (0x20..0x7f).contains(&b));
    if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LEN && visible {
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
fn millis(duration: Duration) -> i64 {
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
            // THEN it is refused for its parameters, not with 409: the key was never looked at
            assert_eq!(refused.status, 400, "{body}");
            assert_eq!(json(&refused)["error"]["type"], "invalid_request_error");
            assert_eq!(&error_code(&refused), code, "{body}");
            assert!(refused.events.is_empty());
            assert!(model.end_in_flight("held"), "still held, untouched");
            // AND under a free key it stores nothing: a later valid request with the key runs
            let key = format!("k-{body}");
            assert_eq!(post(&model, INTENTS, body, Some(&key), T0).status, 400);
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
