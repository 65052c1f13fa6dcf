//! The provider-neutral core of the fake PSP: one synchronous, deterministic ledger of charges
//! and refunds that every face (`crate::faces`) serves in its own wire format.
//!
//! What the faces share is everything but the wire: the charges and refunds themselves and
//! their time-driven transitions ([`Timings`]), the test tokens and what each does
//! (`behaviour`), the idempotency layer (`idempotency`), search lag, and the operations each
//! face calls after validating a request in its own terms — [`Ledger::attempt_charge`],
//! [`Ledger::attempt_refund`], [`Ledger::insert`], [`Ledger::capture`], [`Ledger::cancel`],
//! [`Ledger::void`] for a succeeded charge whose funds have not moved yet,
//! [`Ledger::confirm`] for a charge created unconfirmed (or approved by its customer,
//! [`Ledger::await_approval`]), and [`Ledger::complete_action`] for a customer's answer on the
//! face's action page. How a charge treats a token that asks for a customer action
//! ([`OnAction`]) and when its funds are taken ([`CaptureMethod`]) are the face's to say from
//! the request; what follows is the ledger's. A face parses its requests, authenticates them,
//! and writes its own objects, errors and webhook events; where the ledger needs the
//! face's words (ids, search snapshots, the events of a time-driven transition, the inspection
//! status) it asks through the [`Face`] trait. Nothing here knows a wire format, and nothing
//! here imports a face.
//!
//! The ledger takes the time as a parameter (epoch ms, never running backwards inside it) and
//! draws every random choice (ids, how long an idempotency key is remembered, search lag) from
//! one [`fastrand::Rng`] seeded in [`Ledger::new`], so one seed and one call sequence give
//! byte-identical answers. Maps whose order could reach an answer are `BTreeMap`s.

mod behaviour;
mod charge;
mod idempotency;
mod inspect;
mod wire;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

pub(crate) use self::behaviour::{asks_for_action, Decline};
use self::behaviour::{behaviour_for, refund_behaviour_for, Behaviour, RefundBehaviour};
use self::charge::{Cancel, Capture};
pub(crate) use self::charge::{
    CaptureMethod, Failure, Hold, Intent, OnAction, OnLapse, Refund, RefundStatus, Status,
};
pub(crate) use self::idempotency::{
    is_valid_idempotency_key, Fingerprint, KeyRefusals, MAX_IDEMPOTENCY_KEY_LEN,
};
pub(crate) use self::idempotency::{Claim, KeyState, Retention, Stored};
use self::idempotency::{Keys, KEY_KEPT_AT_LEAST_MS, KEY_KEPT_AT_MOST_MS};
pub use self::inspect::{FakeCancel, FakeCapture, FakeCharge, FakeRefund};
pub use self::wire::{Delivery, ModelEvent, PageAnswer, WireAnswer, WireRequest};
pub(crate) use self::wire::{Handled, Reply};

/// Why a `pm_card_refundFail` refund fails (Stripe's test card answers so; "The Refund object":
/// `failure_reason` is one of `lost_or_stolen_card`, `expired_or_canceled_card`, ...). The
/// ledger keeps it whatever the face.
const REFUND_FAILURE_REASON: &str = "expired_or_canceled_card";

/// How long the ledger's time-driven transitions take, and how long a slow answer is held back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timings {
    /// Each charge, and each later change to it, becomes visible to search after a lag drawn at
    /// random in `[0, search_lag_max]`; zero makes search read-after-write.
    pub(crate) search_lag_max: Duration,
    /// How long a `pm_fake_processing` charge stays `processing` before it succeeds.
    pub(crate) processing_for: Duration,
    /// How long a `pm_fake_requires_action` charge stays `requires_action` before it fails.
    pub(crate) requires_action_for: Duration,
    /// How long a `pm_fake_slow` answer is held back ([`Delivery::After`]).
    pub(crate) slow_delay: Duration,
    /// How long a refund of a `pm_card_refundFail` charge reads `succeeded` before it fails.
    pub(crate) refund_fail_after: Duration,
    /// How long a refund of a `pm_fake_refund_pending` charge stays `pending` before it succeeds.
    pub(crate) refund_pending_for: Duration,
    /// How long an authorization (a manual-capture charge in `requires_capture`) may be
    /// captured before the PSP cancels it (`cancellation_reason: automatic`).
    pub(crate) authorization_expires_after: Duration,
}

/// One PSP's wire format over the ledger. A face answers requests ([`handle`](Self::handle)),
/// calling the ledger's neutral operations after validating each in its own terms; the ledger
/// calls back for the few things only the face can word. Adding a PSP is one type implementing
/// this, and one arm where the model picks its face (`crate::model`). A face is `Any`, so the
/// model can reach what only one face has (the 2C2P face's maintenance keys and call log)
/// without this trait naming it.
pub(crate) trait Face: fmt::Debug + Send + std::any::Any {
    /// The face's name, as `GET /_fake/charges` reports it (`stripe`, `omise`, `2c2p`,
    /// `square`, `paypal`).
    fn name(&self) -> &'static str;

    /// Answers one request at `now_ms`; what fell due by then has already been applied.
    fn handle(&mut self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled;

    /// A new charge's id, drawn from the ledger's randomness.
    fn new_charge_id(&self, ledger: &mut Ledger) -> String;

    /// The id of a charge attempt on charge `charge_id`; by default the charge itself (a face
    /// whose charge is the attempt).
    fn new_attempt_id(&self, _ledger: &mut Ledger, charge_id: &str) -> String {
        charge_id.to_owned()
    }

    /// A new refund's id for a refund of the charge `charge_id`, drawn from the ledger's
    /// randomness (a face whose refund ids name their charge uses `charge_id`).
    fn new_refund_id(&self, ledger: &mut Ledger, charge_id: &str) -> String;

    /// The charge at `index` as the face's search shows it now; by default nothing (a face
    /// without search, whose snapshots are never read).
    fn search_snapshot(&self, _ledger: &Ledger, _index: usize) -> Value {
        Value::Null
    }

    /// The events of the charge at `index` having just moved on at `at_ms`, by itself
    /// (`processing` → `succeeded` or `requires_capture`, `requires_action` →
    /// `requires_payment_method`, `requires_capture` → `canceled` once the authorization lapsed)
    /// or by the customer's hand ([`Ledger::complete_action`]: `requires_action` → `succeeded`,
    /// `requires_capture` or `requires_payment_method`).
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, at_ms: i64) -> Vec<ModelEvent>;

    /// The events of the refund at `index` having just moved on by itself from `from` at
    /// `at_ms`; by default none.
    fn refund_moved_on(
        &self,
        _ledger: &mut Ledger,
        _index: usize,
        _from: RefundStatus,
        _at_ms: i64,
    ) -> Vec<ModelEvent> {
        Vec::new()
    }

    /// `GET` (`form: None`) or `POST` (`form`: the urlencoded body) of the page where the
    /// customer answers the action the charge `charge_id` waits for, at `now_ms`. By default
    /// there is no such page (404): a face whose charges never wait on the fake's page.
    fn action_page(
        &self,
        _ledger: &mut Ledger,
        charge_id: &str,
        _form: Option<&[u8]>,
        _now_ms: i64,
    ) -> PageAnswer {
        PageAnswer::html(404, format!("No such payment: {}", escape_html(charge_id)))
    }

    /// A charge's status in the face's words, for the inspection view.
    fn charge_status(&self, intent: &Intent) -> &'static str;

    /// A refund's status in the face's words, for the inspection view; by default the ledger's.
    fn refund_status(&self, status: RefundStatus) -> &'static str {
        status.as_str()
    }

    /// The inspection view of a refund: [`Refund::inspect`] with the face's name and status
    /// words.
    fn inspect_refund(&self, refund: &Refund) -> FakeRefund {
        refund.inspect(self.name(), self.refund_status(refund.status))
    }

    /// The inspection view of a charge; by default [`Intent::inspect`] with the face's name and
    /// status words.
    fn inspect_charge(&self, intent: &Intent) -> FakeCharge {
        intent.inspect(self.name(), self.charge_status(intent))
    }

    /// The charge at `index` as the face's API shows it now, for the inspection view's
    /// [`FakeCharge::object`]; by default none.
    fn charge_object(&self, _ledger: &Ledger, _index: usize) -> Option<Value> {
        None
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

/// Everything the model remembers, whatever its face: charges, refunds, idempotency keys, the
/// clock, and the events of time-driven transitions not yet handed out.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// How long the time-driven transitions take.
    timings: Timings,
    /// Every random choice (ids, how long a key is remembered, search lag) comes from here.
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
    /// The idempotency keys held.
    keys: Keys,
    /// Events of time-driven transitions not yet handed out.
    due_events: Vec<ModelEvent>,
}

/// A charge request a face has validated, in the ledger's own terms.
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
    /// Capture at once, or authorize only.
    pub(crate) capture_method: CaptureMethod,
    /// What to do if the token asks for a customer action.
    pub(crate) on_action: OnAction,
    /// With a manual capture: how long the authorization is held and what happens once it
    /// lapses (the default: the ledger's `authorization_expires_after`, then released).
    pub(crate) hold: Hold,
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
    /// it to [`Ledger::insert`] (in that order, so that one seed draws ids in one order).
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

/// What the customer's answer to an action (authentication) came to.
#[derive(Debug)]
pub(crate) enum ActionAttempt {
    /// No charge with that id.
    NoSuchCharge,
    /// The charge at this index is not waiting for an action (any more): nothing changed.
    NotWaiting(usize),
    /// The charge at this index moved on, with the events the face words for it.
    Done {
        index: usize,
        events: Vec<ModelEvent>,
    },
}

/// What a capture request came to, before a face writes it.
#[derive(Debug)]
pub(crate) enum CaptureAttempt {
    /// No charge with that id.
    NoSuchCharge,
    /// The charge at this index is not `requires_capture`: nothing changed.
    UnexpectedState(usize),
    /// More than the charge has capturable was asked for: nothing changed.
    Exceeds,
    /// The charge at this index was captured.
    Made(usize),
}

/// What a confirm ([`Ledger::confirm`]) came to.
#[derive(Debug)]
pub(crate) enum ConfirmAttempt {
    /// No charge with that id.
    NoSuchCharge,
    /// The charge is not `requires_confirmation`: nothing changed.
    UnexpectedState,
    /// `pm_fake_error_before_charge`: the PSP failed before charging; nothing changed, and the
    /// face's 5xx answer is not stored under a key.
    FailedBeforeCharge,
    /// The charge at this index was attempted; the answer is delivered as `delivery` says.
    Made { index: usize, delivery: Delivery },
}

/// What a cancel request came to, before a face writes it.
#[derive(Debug)]
pub(crate) enum CancelAttempt {
    /// No charge with that id.
    NoSuchCharge,
    /// The charge at this index is in a status that cannot be cancelled: nothing changed.
    NotCancelable(usize),
    /// The charge at this index was cancelled.
    Canceled(usize),
}

impl Ledger {
    /// The time-driven transitions' settings.
    pub(crate) fn timings(&self) -> &Timings {
        &self.timings
    }

    /// A ledger with no charges, drawing all its randomness from `seed`.
    pub(crate) fn new(timings: Timings, seed: u64) -> Self {
        Self {
            timings,
            rng: fastrand::Rng::with_seed(seed),
            clock_ms: i64::MIN,
            requests_seen: 0,
            intents: Vec::new(),
            by_id: BTreeMap::new(),
            refunds: Vec::new(),
            refund_by_id: BTreeMap::new(),
            refunds_of: BTreeMap::new(),
            keys: Keys::default(),
            due_events: Vec::new(),
        }
    }

    /// The events of time-driven transitions not yet handed out, in the order they happened;
    /// each is handed out once.
    pub(crate) fn take_due_events(&mut self) -> Vec<ModelEvent> {
        std::mem::take(&mut self.due_events)
    }

    /// When the next time-driven transition falls due (epoch ms), if ever, or the latest time
    /// seen if events are waiting already.
    pub(crate) fn next_transition_ms(&self) -> Option<i64> {
        if !self.due_events.is_empty() {
            return Some(self.clock_ms);
        }
        let intents = self.intents.iter().filter_map(|intent| intent.due_ms);
        let refunds = self.refunds.iter().filter_map(|refund| refund.due_ms);
        intents.chain(refunds).min()
    }

    /// Moves the clock to `now_ms` (never backwards), applies the transitions due by then and
    /// forgets pruned keys. Returns the ledger's time.
    pub(crate) fn observe(&mut self, face: &dyn Face, now_ms: i64) -> i64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        let now_ms = self.clock_ms;
        self.advance(face, now_ms);
        self.keys.forget_pruned(now_ms);
        now_ms
    }

    /// Applies every time-driven transition due by `now_ms`, in the order they fell due.
    fn advance(&mut self, face: &dyn Face, now_ms: i64) {
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
                Due::Intent(index) => self.advance_intent(face, index, at_ms),
                Due::Refund(index) => self.advance_refund(face, index, at_ms),
            }
        }
    }

    /// `processing` → `succeeded` (or `requires_capture`, for a manual capture),
    /// `requires_action` → `requires_payment_method` with `authentication_required`, or
    /// `requires_capture` → `canceled` (`automatic`) once the authorization lapsed, at `at_ms`;
    /// the face words the events.
    fn advance_intent(&mut self, face: &dyn Face, index: usize, at_ms: i64) {
        let expires_after_ms = self.hold_ms(&self.intents[index]);
        let intent = &mut self.intents[index];
        intent.due_ms = None;
        match intent.status {
            Status::Processing if intent.capture_method == CaptureMethod::Manual => {
                intent.authorize(at_ms, expires_after_ms);
            }
            Status::Processing => {
                intent.status = Status::Succeeded;
                intent.succeeded_ms = Some(at_ms);
            }
            Status::RequiresAction => {
                intent.status = Status::RequiresPaymentMethod;
                intent.failure = Some(Failure::AuthenticationRequired);
            }
            Status::RequiresCapture if intent.hold.on_lapse == OnLapse::Capture => {
                // The PSP's own capture, of everything authorized, under no key.
                intent.status = Status::Succeeded;
                intent.succeeded_ms = Some(at_ms);
                intent.amount_captured = Some(intent.amount);
                intent.captures.push(Capture {
                    amount: intent.amount,
                    idempotency_key: None,
                });
            }
            Status::RequiresCapture => {
                intent.status = Status::Canceled;
                intent.cancellation_reason = Some(AUTHORIZATION_LAPSED.to_owned());
                intent.cancels.push(Cancel {
                    idempotency_key: None,
                    cancellation_reason: intent.cancellation_reason.clone(),
                });
            }
            _ => return,
        }
        self.record_search_version(face, index, at_ms);
        let events = face.charge_moved_on(self, index, at_ms);
        self.due_events.extend(events);
    }

    /// A refund's status change at `at_ms`: `pending` → `succeeded` (`pm_fake_refund_pending`),
    /// or `succeeded` → `failed` with `expired_or_canceled_card` (`pm_card_refundFail`), which
    /// makes its amount refundable again; the face words the events, if it sends any.
    fn advance_refund(&mut self, face: &dyn Face, index: usize, at_ms: i64) {
        let refund = &mut self.refunds[index];
        refund.due_ms = None;
        let from = refund.status;
        match from {
            RefundStatus::Pending => refund.status = RefundStatus::Succeeded,
            RefundStatus::Succeeded => {
                refund.status = RefundStatus::Failed;
                refund.failure_reason = Some(REFUND_FAILURE_REASON);
            }
            RefundStatus::Failed => return,
        }
        let events = face.refund_moved_on(self, index, from, at_ms);
        self.due_events.extend(events);
    }

    /// Runs `run` under the idempotency key, if there is one: replays or refuses (in the words of
    /// `refusals`) instead when the key is known, stores the answer afterwards unless it is a
    /// server error, to be forgotten at a random moment 24–48 h later.
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
        if let Some(answer) = self.known_key(refusals, Some(&key), &fingerprint) {
            return answer;
        }
        // Charges are only ever appended: one at this position is the one the request made.
        let charges_before = self.intents.len();
        let handled = run(self);
        if handled.reply.is_storable() {
            let created = self
                .intents
                .get(charges_before)
                .map(|intent| intent.id.clone());
            let stored = Stored {
                reply: handled.reply.clone(),
                created,
                subject: None,
            };
            self.remember(key, fingerprint, stored, Retention::Random, now_ms);
        }
        handled
    }

    /// Presents `key` with `fingerprint` to the idempotency layer without answering: what a face
    /// that words its own replays acts on ([`Claim`]). Pruned keys are already forgotten.
    pub(crate) fn recall(&self, key: &str, fingerprint: &Fingerprint) -> Claim {
        self.keys.claim(key, fingerprint)
    }

    /// Stores `stored` under `key` at `now_ms`, kept as `retention` says ([`Retention::Random`]
    /// draws the moment from the ledger's randomness, then and only then).
    pub(crate) fn remember(
        &mut self,
        key: String,
        fingerprint: Fingerprint,
        stored: Stored,
        retention: Retention,
        now_ms: i64,
    ) {
        let kept_ms = match retention {
            Retention::Random => self.rng.i64(KEY_KEPT_AT_LEAST_MS..=KEY_KEPT_AT_MOST_MS),
            Retention::Exactly(kept) => millis(kept),
        };
        let prune_at_ms = now_ms.saturating_add(kept_ms);
        self.keys.store(key, fingerprint, stored, prune_at_ms);
    }

    /// What the idempotency layer holds for `key` now: nothing (never seen, or forgotten), a
    /// request still running, or a stored answer with the id of the charge its request created,
    /// if any. Lets a face act on "the charge made under this key" only for as long as the key
    /// is remembered, as a PSP that looks a key up in its idempotency store would.
    pub(crate) fn key_state(&self, key: &str) -> KeyState {
        self.keys.state(key)
    }

    /// A create as Stripe's idempotency layer runs it ("Idempotent requests"), which the faces
    /// that take keys share: a key the ledger holds is answered from memory before the parameters
    /// are looked at; then `validate` runs, and its refusal is answered without storing anything
    /// under the key (results are saved only once an endpoint began executing); only then does
    /// `run` run under the key ([`idempotent`](Self::idempotent)).
    pub(crate) fn validated<V>(
        &mut self,
        refusals: KeyRefusals,
        key: Option<String>,
        fingerprint: Fingerprint,
        now_ms: i64,
        validate: impl FnOnce() -> Result<V, Reply>,
        run: impl FnOnce(&mut Self, V) -> Handled,
    ) -> Handled {
        if let Some(answer) = self.known_key(refusals, key.as_deref(), &fingerprint) {
            return answer;
        }
        let valid = match validate() {
            Ok(valid) => valid,
            Err(reply) => return Handled::plain(reply),
        };
        self.idempotent(refusals, key, fingerprint, now_ms, |ledger| {
            run(ledger, valid)
        })
    }

    /// The answer to a key the ledger already holds, given before the endpoint validates
    /// anything: Stripe's idempotency layer sits in front of the endpoints, replays a saved
    /// result for the same parameters, refuses other parameters with `idempotency_error` and a
    /// key whose request is still running with 409 ("Idempotent requests"). `None` for a key it
    /// does not hold.
    fn known_key(
        &self,
        refusals: KeyRefusals,
        key: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> Option<Handled> {
        let key = key?;
        match self.keys.claim(key, fingerprint) {
            Claim::Fresh => None,
            Claim::Replay { reply, .. } => Some(Handled {
                reply,
                replayed: true,
                // The effect happened long ago; a retry is answered at once.
                delivery: Delivery::Now,
                events: Vec::new(),
            }),
            Claim::Mismatch => Some(Handled::plain((refusals.mismatch)(key))),
            Claim::InUse => Some(Handled::plain((refusals.in_use)(key))),
        }
    }

    /// Marks `key` as held by a request that is still running, as if one had been received and
    /// not yet answered: until [`end_in_flight`](Self::end_in_flight), requests with that key get
    /// the face's in-use refusal. Returns `false` (and changes nothing) if the key is already in
    /// flight or has a stored answer, which a running request could not coexist with.
    pub(crate) fn begin_in_flight(&mut self, key: &str) -> bool {
        let now_ms = self.clock_ms;
        self.keys.forget_pruned(now_ms);
        self.keys.begin_in_flight(key)
    }

    /// Releases a key marked by [`begin_in_flight`](Self::begin_in_flight) without storing an
    /// answer, like a request that failed before the endpoint did anything. Returns whether the
    /// key was in flight.
    pub(crate) fn end_in_flight(&mut self, key: &str) -> bool {
        self.keys.end_in_flight(key)
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
    ///   `requires_action_for`; the authenticate tokens fail, wait without a time limit, or wait
    ///   for the customer's approval for at most `requires_action_for`, as `on_action` says
    ///   (unknown to a face that cannot ask for an action).
    /// - With a manual capture, what would have succeeded is authorized (`requires_capture`)
    ///   instead, until captured, cancelled, or `authorization_expires_after` has passed.
    pub(crate) fn attempt_charge(
        &mut self,
        face: &dyn Face,
        charge: NewCharge,
        key: Option<String>,
        now_ms: i64,
    ) -> Attempt {
        let mut behaviour = behaviour_for(&charge.payment_method);
        // Authentication done before the request: nothing is left to ask the customer.
        if behaviour == Behaviour::Authenticate
            && charge.on_action == OnAction::AlreadyAuthenticated
        {
            behaviour = Behaviour::Approve;
        }
        if behaviour == Behaviour::Unknown
            || (behaviour == Behaviour::Authenticate && charge.on_action == OnAction::Unsupported)
        {
            return Attempt::UnknownMethod;
        }
        if charge.confirm && behaviour == Behaviour::ErrorBeforeCharge {
            return Attempt::FailedBeforeCharge;
        }
        let id = face.new_charge_id(self);
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
            capture_method: charge.capture_method,
            amount_captured: None,
            capture_before_ms: None,
            action_url: None,
            return_url: None,
            hold: charge.hold,
            confirm_after_action: false,
            authenticated: false,
            captures: Vec::new(),
            cancels: Vec::new(),
            search_versions: Vec::new(),
            succeeded_ms: None,
        };
        if !charge.confirm {
            return Attempt::Made {
                intent: Box::new(intent),
                delivery: Delivery::Now,
            };
        }
        match self.run_attempt(face, &mut intent, behaviour, charge.on_action, now_ms) {
            Some(delivery) => Attempt::Made {
                intent: Box::new(intent),
                delivery,
            },
            // Answered above; kept total rather than panicking.
            None => Attempt::UnknownMethod,
        }
    }

    /// Attempts `intent` (not yet recorded, or taken out of `intents`) with `behaviour`, its
    /// token's: what a confirmed create and [`confirm`](Self::confirm) share. Draws the attempt's
    /// id when the token attempts a charge. Returns how to deliver the answer, or `None` (and
    /// changes nothing) for a behaviour that attempts nothing (unknown, error before charge, or
    /// an action the face cannot ask for), which the callers answer before.
    fn run_attempt(
        &mut self,
        face: &dyn Face,
        intent: &mut Intent,
        behaviour: Behaviour,
        on_action: OnAction,
        now_ms: i64,
    ) -> Option<Delivery> {
        let mut delivery = Delivery::Now;
        match behaviour {
            Behaviour::Approve | Behaviour::LostResponse | Behaviour::Slow => {
                if behaviour == Behaviour::LostResponse {
                    delivery = Delivery::Sever;
                } else if behaviour == Behaviour::Slow {
                    delivery = Delivery::After(self.timings.slow_delay);
                }
                intent.status = Status::Succeeded;
                intent.latest_charge = Some(face.new_attempt_id(self, &intent.id));
                if intent.capture_method == CaptureMethod::Manual {
                    let expires_after_ms = self.hold_ms(intent);
                    intent.authorize(now_ms, expires_after_ms);
                } else {
                    intent.succeeded_ms = Some(now_ms);
                }
            }
            Behaviour::Decline(decline) => {
                intent.status = Status::RequiresPaymentMethod;
                intent.latest_charge = Some(face.new_attempt_id(self, &intent.id));
                intent.failure = Some(Failure::Declined(decline));
            }
            Behaviour::Processing => {
                intent.status = Status::Processing;
                intent.latest_charge = Some(face.new_attempt_id(self, &intent.id));
                intent.due_ms = Some(now_ms.saturating_add(millis(self.timings.processing_for)));
            }
            Behaviour::RequiresAction => {
                intent.status = Status::RequiresAction;
                intent.due_ms =
                    Some(now_ms.saturating_add(millis(self.timings.requires_action_for)));
            }
            Behaviour::Authenticate => match on_action {
                OnAction::Fail => {
                    intent.status = Status::RequiresPaymentMethod;
                    intent.failure = Some(Failure::AuthenticationRequired);
                }
                OnAction::Wait { return_url } => {
                    intent.status = Status::RequiresAction;
                    intent.return_url = return_url;
                }
                OnAction::WaitForApproval { return_url } => {
                    self.wait_for_approval(intent, return_url, now_ms);
                }
                // Turned into an approval, or refused, by the callers; kept total.
                OnAction::Unsupported | OnAction::AlreadyAuthenticated => return None,
            },
            Behaviour::ErrorBeforeCharge | Behaviour::Unknown => return None,
        }
        Some(delivery)
    }

    /// `intent` waits in `requires_action` for its customer's approval, sent back to
    /// `return_url`, for at most `requires_action_for`; approved, it waits for the merchant's
    /// confirm ([`OnAction::WaitForApproval`]).
    fn wait_for_approval(&self, intent: &mut Intent, return_url: Option<String>, now_ms: i64) {
        intent.status = Status::RequiresAction;
        intent.return_url = return_url;
        intent.confirm_after_action = true;
        intent.due_ms = Some(now_ms.saturating_add(millis(self.timings.requires_action_for)));
    }

    /// Makes a charge just created unconfirmed (`requires_confirmation`, not yet recorded) wait
    /// for its customer's approval first, whatever its token, as
    /// [`OnAction::WaitForApproval`] does for a token that asks for authentication: a PSP whose
    /// customer approves every such payment on the PSP's own page (a wallet, a redirect payment
    /// method). Returns `false`, changing nothing, for a charge in any other status.
    pub(crate) fn await_approval(
        &self,
        intent: &mut Intent,
        return_url: Option<String>,
        now_ms: i64,
    ) -> bool {
        if intent.status != Status::RequiresConfirmation {
            return false;
        }
        self.wait_for_approval(intent, return_url, now_ms);
        true
    }

    /// Confirms the charge `charge_id` waiting in `requires_confirmation` at `now_ms`: attempts
    /// it with its token exactly as a confirmed create would (`on_action` for a token that asks
    /// for authentication, unless the customer already completed an action for it), drawing the
    /// attempt's id then. `pm_fake_error_before_charge` changes nothing
    /// ([`ConfirmAttempt::FailedBeforeCharge`]); any other status is refused, changing nothing.
    pub(crate) fn confirm(
        &mut self,
        face: &dyn Face,
        charge_id: &str,
        on_action: OnAction,
        now_ms: i64,
    ) -> ConfirmAttempt {
        let Some(&index) = self.by_id.get(charge_id) else {
            return ConfirmAttempt::NoSuchCharge;
        };
        if self.intents[index].status != Status::RequiresConfirmation {
            return ConfirmAttempt::UnexpectedState;
        }
        let mut intent = self.intents[index].clone();
        let on_action = if intent.authenticated {
            OnAction::AlreadyAuthenticated
        } else {
            on_action
        };
        let mut behaviour = behaviour_for(&intent.payment_method);
        if behaviour == Behaviour::Authenticate && on_action == OnAction::AlreadyAuthenticated {
            behaviour = Behaviour::Approve;
        }
        if behaviour == Behaviour::ErrorBeforeCharge {
            return ConfirmAttempt::FailedBeforeCharge;
        }
        let Some(delivery) = self.run_attempt(face, &mut intent, behaviour, on_action, now_ms)
        else {
            return ConfirmAttempt::UnexpectedState;
        };
        self.intents[index] = intent;
        self.record_search_version(face, index, now_ms);
        ConfirmAttempt::Made { index, delivery }
    }

    /// Refunds `amount` (default: what is left) of the succeeded charge `charge_id` if that much
    /// is left, and records the refund: the provider-neutral half of a refund create. Pending and
    /// succeeded refunds hold their amount, failed ones gave it back. The refund's fate follows
    /// the charge's token (`refund_behaviour_for`): succeeded for good, succeeded until it fails
    /// after `refund_fail_after`, or pending until it succeeds after `refund_pending_for`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attempt_refund(
        &mut self,
        face: &dyn Face,
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
        // Pending refunds hold their amount as succeeded ones do; failed ones gave it back. What
        // can be refunded is what was captured, not what was authorized.
        let unrefunded = intent.amount_received() - self.amount_held(&payment_intent);
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
                Some(now_ms.saturating_add(millis(self.timings.refund_fail_after))),
            ),
            RefundBehaviour::PendingThenSucceed => (
                RefundStatus::Pending,
                Some(now_ms.saturating_add(millis(self.timings.refund_pending_for))),
            ),
        };
        let id = face.new_refund_id(self, &payment_intent);
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

    /// The customer's answer to the action the charge `charge_id` waits for, at `now_ms`:
    /// `completed` authorizes it (`succeeded`, or `requires_capture` for a manual capture) — or,
    /// for a charge that waits for approval ([`OnAction::WaitForApproval`]), leaves it
    /// `requires_confirmation`, authenticated, for the merchant's confirm — otherwise it fails
    /// with [`Failure::AuthenticationFailed`]. A charge not waiting for an
    /// action any more is left as it is, so a second answer never moves it twice.
    pub(crate) fn complete_action(
        &mut self,
        face: &dyn Face,
        charge_id: &str,
        completed: bool,
        now_ms: i64,
    ) -> ActionAttempt {
        let Some(&index) = self.by_id.get(charge_id) else {
            return ActionAttempt::NoSuchCharge;
        };
        if self.intents[index].status != Status::RequiresAction {
            return ActionAttempt::NotWaiting(index);
        }
        let expires_after_ms = self.hold_ms(&self.intents[index]);
        let id = self.intents[index].id.clone();
        // Approved for the merchant to confirm later: nothing is attempted yet.
        let approved_only = completed && self.intents[index].confirm_after_action;
        let attempt = (completed && !approved_only).then(|| face.new_attempt_id(self, &id));
        let intent = &mut self.intents[index];
        intent.due_ms = None;
        if approved_only {
            intent.status = Status::RequiresConfirmation;
            intent.authenticated = true;
        } else if let Some(attempt) = attempt {
            intent.latest_charge = Some(attempt);
            if intent.capture_method == CaptureMethod::Manual {
                intent.authorize(now_ms, expires_after_ms);
            } else {
                intent.status = Status::Succeeded;
                intent.succeeded_ms = Some(now_ms);
            }
        } else {
            intent.status = Status::RequiresPaymentMethod;
            intent.failure = Some(Failure::AuthenticationFailed);
        }
        self.record_search_version(face, index, now_ms);
        let events = face.charge_moved_on(self, index, now_ms);
        ActionAttempt::Done { index, events }
    }

    /// Captures `amount` (default: all that is capturable) of the authorized charge
    /// `charge_id`, under `key`, at `now_ms`: it succeeds with that amount received, and what
    /// was not captured is released. Anything but `requires_capture` is refused, as is more
    /// than is capturable; a refusal changes nothing.
    pub(crate) fn capture(
        &mut self,
        face: &dyn Face,
        charge_id: &str,
        amount: Option<i64>,
        key: Option<String>,
        now_ms: i64,
    ) -> CaptureAttempt {
        let Some(&index) = self.by_id.get(charge_id) else {
            return CaptureAttempt::NoSuchCharge;
        };
        let intent = &mut self.intents[index];
        if intent.status != Status::RequiresCapture {
            return CaptureAttempt::UnexpectedState(index);
        }
        let capturable = intent.amount_capturable();
        let amount = amount.unwrap_or(capturable);
        if amount > capturable {
            return CaptureAttempt::Exceeds;
        }
        intent.status = Status::Succeeded;
        intent.succeeded_ms = Some(now_ms);
        intent.amount_captured = Some(amount);
        intent.due_ms = None;
        intent.captures.push(Capture {
            amount,
            idempotency_key: key,
        });
        self.record_search_version(face, index, now_ms);
        CaptureAttempt::Made(index)
    }

    /// Cancels the charge `charge_id` with `reason`, under `key`, at `now_ms`, if its status
    /// allows it ([`Status::is_cancelable`]); an authorization is released. A cancelled charge
    /// no longer moves on by itself.
    pub(crate) fn cancel(
        &mut self,
        face: &dyn Face,
        charge_id: &str,
        reason: Option<String>,
        key: Option<String>,
        now_ms: i64,
    ) -> CancelAttempt {
        let Some(&index) = self.by_id.get(charge_id) else {
            return CancelAttempt::NoSuchCharge;
        };
        let intent = &mut self.intents[index];
        if !intent.status.is_cancelable() {
            return CancelAttempt::NotCancelable(index);
        }
        intent.status = Status::Canceled;
        intent.cancellation_reason = reason;
        intent.due_ms = None;
        intent.cancels.push(Cancel {
            idempotency_key: key,
            cancellation_reason: intent.cancellation_reason.clone(),
        });
        self.record_search_version(face, index, now_ms);
        CancelAttempt::Canceled(index)
    }

    /// Voids the succeeded charge `charge_id` at `now_ms` before its funds moved (a PSP that
    /// lets the merchant void a captured payment until it settles, which the face judges): it
    /// is cancelled with `reason`, nothing captured, and no longer refundable. Refused, changing
    /// nothing, for a charge in any other status or one that refunds already hold part of.
    pub(crate) fn void(
        &mut self,
        face: &dyn Face,
        charge_id: &str,
        reason: Option<String>,
        now_ms: i64,
    ) -> CancelAttempt {
        let Some(&index) = self.by_id.get(charge_id) else {
            return CancelAttempt::NoSuchCharge;
        };
        if self.intents[index].status != Status::Succeeded || self.amount_held(charge_id) > 0 {
            return CancelAttempt::NotCancelable(index);
        }
        let intent = &mut self.intents[index];
        intent.status = Status::Canceled;
        intent.amount_captured = None;
        intent.cancellation_reason = reason;
        intent.due_ms = None;
        intent.cancels.push(Cancel {
            idempotency_key: None,
            cancellation_reason: intent.cancellation_reason.clone(),
        });
        self.record_search_version(face, index, now_ms);
        CancelAttempt::Canceled(index)
    }

    /// How long the charge's authorization is held, in ms: its own [`Hold`], else the ledger's
    /// `authorization_expires_after`.
    fn hold_ms(&self, intent: &Intent) -> i64 {
        millis(
            intent
                .hold
                .expires_after
                .unwrap_or(self.timings.authorization_expires_after),
        )
    }

    /// Makes the refund at `position`, just made and succeeded for good, read `pending` until
    /// `at_ms` first, then succeed by itself (with the face's events for that change): for a PSP
    /// whose every refund starts pending. A refund with anything else in store (pending, or
    /// due to fail later) is left as it is. Returns whether it changed.
    pub(crate) fn defer_refund_success(&mut self, position: usize, at_ms: i64) -> bool {
        let Some(refund) = self.refunds.get_mut(position) else {
            return false;
        };
        if refund.status != RefundStatus::Succeeded || refund.due_ms.is_some() {
            return false;
        }
        refund.status = RefundStatus::Pending;
        refund.due_ms = Some(at_ms);
        true
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

    /// Records a new PaymentIntent (charge).
    pub(crate) fn insert(&mut self, face: &dyn Face, intent: Intent, now_ms: i64) {
        let index = self.intents.len();
        self.by_id.insert(intent.id.clone(), index);
        self.intents.push(intent);
        self.record_search_version(face, index, now_ms);
    }

    /// Queues the PaymentIntent (charge) as it is now, in the face's format, for the search
    /// index, visible after a random lag and never before an earlier version.
    pub(crate) fn record_search_version(&mut self, face: &dyn Face, index: usize, at_ms: i64) {
        let lag_max_ms = millis(self.timings.search_lag_max);
        let lag_ms = if lag_max_ms == 0 {
            0
        } else {
            self.rng.i64(0..=lag_max_ms)
        };
        let snapshot = face.search_snapshot(self, index);
        let intent = &mut self.intents[index];
        let earliest = intent
            .search_versions
            .last()
            .map_or(i64::MIN, |(visible_from_ms, _)| *visible_from_ms);
        let visible_from_ms = at_ms.saturating_add(lag_ms).max(earliest);
        intent.search_versions.push((visible_from_ms, snapshot));
    }

    /// `<prefix>_` followed by 24 random alphanumerics, like Stripe's object ids.
    pub(crate) fn new_id(&mut self, prefix: &str) -> String {
        let rng = &mut self.rng;
        let mut id = String::with_capacity(prefix.len() + 25);
        id.push_str(prefix);
        id.push('_');
        id.extend(std::iter::repeat_with(|| rng.alphanumeric()).take(24));
        id
    }
}

/// The `cancellation_reason` of an authorization the PSP cancelled because it lapsed
/// uncaptured (Stripe's word).
const AUTHORIZATION_LAPSED: &str = "automatic";

impl Intent {
    /// Whether the charge is cancelled because its authorization lapsed uncaptured (the PSP's
    /// own cancel, `cancellation_reason: automatic`), not by the merchant.
    pub(crate) fn authorization_lapsed(&self) -> bool {
        self.status == Status::Canceled
            && self.cancellation_reason.as_deref() == Some(AUTHORIZATION_LAPSED)
    }

    /// Authorized at `at_ms` for a manual capture: `requires_capture` until captured, cancelled,
    /// or `expires_after_ms` has passed.
    fn authorize(&mut self, at_ms: i64, expires_after_ms: i64) {
        let capture_before_ms = at_ms.saturating_add(expires_after_ms);
        self.status = Status::RequiresCapture;
        self.capture_before_ms = Some(capture_before_ms);
        self.due_ms = Some(capture_before_ms);
    }
}

/// `text` safe to put in HTML text or a quoted attribute.
pub(crate) fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
