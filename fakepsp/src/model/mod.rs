//! The fake PSP's model: one synchronous, deterministic state machine of charges and refunds
//! that both the fake PSP's HTTP server and payonce's in-process simulation call, speaking one
//! PSP's wire format — Stripe's PaymentIntents and Refunds (`faces::stripe`, the default),
//! Omise's Charges, Refunds and Search (`faces::omise`), 2C2P's Payment Token, Do Payment,
//! Payment Inquiry and Payment Maintenance API (`faces::twoc2p`), Square's Payments and Refunds
//! (`faces::square`) or
//! PayPal's OAuth, Orders v2 and Payments v2 (`faces::paypal`) — as [`ModelConfig::provider`]
//! says. One model speaks one face.
//!
//! A [`FakeModel`] is the provider-neutral ledger (`crate::ledger`: charges, refunds, the
//! idempotency layer, time-driven transitions, search lag, the test tokens) with the face
//! [`ModelConfig::provider`] names in front of it. This module only picks the face and holds the
//! two behind one lock; the rules and the PSP documentation each follows are in the face
//! modules.
//!
//! The model takes a request as it came off the wire ([`WireRequest`]) and the time, and returns
//! the answer to write ([`WireAnswer`]): status, body, whether it is an idempotent replay, how to
//! deliver it, and the webhook events it caused. It knows nothing of sockets, async runtimes or
//! the system clock: time is passed in (epoch ms, never running backwards inside the model), and
//! every random choice (ids, how long an idempotency key is remembered, search lag) comes from a
//! [`fastrand::Rng`] seeded in [`FakeModel::new`], so one seed and one call sequence give
//! byte-identical answers — except the 2C2P Payment Maintenance API's envelopes, whose RSA
//! padding, PSS salt, content keys and IVs (and, unless given, RSA keys) come from aws-lc's own
//! randomness: what they carry is deterministic, their bytes are not.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::faces::twoc2p::maintenance::TwoC2pAction;
use crate::faces::{OmiseFace, PayPalFace, PayPalSettings, SquareFace, StripeFace, TwoC2pFace};
pub use crate::ledger::{
    Delivery, FakeCancel, FakeCapture, FakeCharge, FakeRefund, ModelEvent, PageAnswer, WireAnswer,
    WireRequest,
};
use crate::ledger::{Face, Ledger, Timings};
use crate::provider::Provider;
use crate::twoc2p_keys::{TwoC2pMaintenanceKeys, TwoC2pMerchantKeys};

/// How the model behaves where a PSP's behaviour depends on time or configuration, and which
/// face it speaks.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The wire format the model speaks; Stripe by default.
    pub provider: Provider,
    /// The only secret key accepted, as `Authorization: Bearer <api_key>` (Stripe, Square) or
    /// as the HTTP Basic user name (Omise); anything else is 401. The 2C2P face's merchant
    /// secret key.
    pub api_key: String,
    /// Each PaymentIntent, and each later change to it, becomes visible to search after a lag
    /// drawn at random in `[0, search_lag_max]`. Stripe: usually under a minute, up to about an
    /// hour during incidents. Zero makes search read-after-write.
    pub search_lag_max: Duration,
    /// How long a `pm_fake_processing` PaymentIntent stays `processing` before it succeeds.
    pub processing_for: Duration,
    /// How long a `pm_fake_requires_action` PaymentIntent stays `requires_action` before it fails
    /// with `authentication_required` (nobody ever authenticates); on the PayPal face, how long an
    /// order waits for its payer's approval before it lapses.
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
    /// ignored. Omise's documentation does not confirm the header; see the `faces::omise` module.
    pub omise_honours_idempotency_key: bool,
    /// Omise face only: whether `Idempotency-Key` works on refund creates (when keys work at
    /// all). Off, a re-sent refund creates a second one: Omise documents no idempotency for
    /// refunds, and the simulation turns this off per seed.
    pub omise_honours_refund_keys: bool,
    /// 2C2P face only: the one merchant (`merchantID`) it knows; its secret key is `api_key`.
    pub twoc2p_merchant_id: String,
    /// 2C2P face only: whether a payment waiting for 3-D Secure is unknown to the Payment
    /// Inquiry (`2002`, no `tranRef`) until the challenge ends, rather than `0001` pending. What
    /// 2C2P answers then is UNCONFIRMED; the simulation runs both.
    pub twoc2p_challenge_unregistered: bool,
    /// 2C2P face only: the Payment Maintenance API's RSA keys; `None` (the default) makes both
    /// pairs on first use (the first maintenance request, or
    /// [`FakeModel::twoc2p_keys`]), so a model that never sees one never pays for RSA key
    /// generation.
    pub twoc2p_maintenance_keys: Option<TwoC2pMaintenanceKeys>,
    /// 2C2P face only: how long after it succeeded a charge settles (maintenance status `A` →
    /// `S`: voidable before, refundable after), on the model's clock; zero (the default)
    /// settles at once. On a manual-settlement account, counted from the settle (`S`) request.
    pub twoc2p_settle_after: Duration,
    /// 2C2P face only: the merchant account's "manual settlement" setting (off by default).
    /// On, every payment the PGW face approves is only an authorization (the ledger's manual
    /// capture: `_fake/charges` outcome `authorized`, nothing captured) until the Payment
    /// Maintenance API settles it (`processType` `S`, the whole amount) or voids it (`V`); one
    /// never settled lapses after [`authorization_expires_after`](Self::authorization_expires_after)
    /// (maintenance status `V`). The PGW face's answers and notifications read exactly as for
    /// an approved payment (`0000`): 2C2P tells an authorization apart nowhere there. Off, `S`
    /// answers `32` "settlement is not required".
    pub twoc2p_manual_settlement: bool,
    /// How long an authorization (a `capture_method=manual` PaymentIntent in
    /// `requires_capture`) may be captured before the PSP cancels it with
    /// `cancellation_reason: automatic`. Stripe: 7 days for online card payments ("Place a hold
    /// on a payment method"). On the PayPal face, an authorization's `expiration_time`.
    pub authorization_expires_after: Duration,
    /// The fake's own base URL (`http://127.0.0.1:PORT`, no trailing slash), where it sends
    /// customers to act: `next_action.redirect_to_url.url` (Stripe) or `authorize_uri` (Omise)
    /// is `<base_url>/_fake/authenticate/<id>`; PayPal's links point under it. The server sets
    /// it to the address it listens on.
    pub base_url: String,
    /// PayPal face only: the OAuth client id; the client secret is `api_key`.
    pub paypal_client_id: String,
    /// PayPal face only: how long an access token lives (`expires_in`); 32 400 s by default.
    pub paypal_token_lifetime: Duration,
    /// PayPal face only: how long an Orders API `PayPal-Request-Id` is remembered (exactly);
    /// 6 h by default. Payments API ids are remembered 45 days.
    pub paypal_request_id_ttl: Duration,
    /// PayPal face only: a create with a vaulted payment source charges at once (`true`, the
    /// default) or leaves the order `CREATED` for `/capture` or `/authorize`.
    pub paypal_one_step_vault: bool,
    /// PayPal face only: the account's "unique invoice id" setting (on by default).
    pub paypal_unique_invoice_id: bool,
}

/// [`ModelConfig::base_url`] until the server sets its own: a name that resolves nowhere.
pub const UNSERVED_BASE_URL: &str = "http://fake-psp.invalid";

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            provider: Provider::Stripe,
            api_key: crate::provider::DEFAULT_API_KEY.to_owned(),
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
            twoc2p_merchant_id: crate::provider::DEFAULT_TWOC2P_MERCHANT_ID.to_owned(),
            twoc2p_challenge_unregistered: false,
            twoc2p_maintenance_keys: None,
            twoc2p_settle_after: Duration::ZERO,
            twoc2p_manual_settlement: false,
            authorization_expires_after: Duration::from_secs(7 * 24 * 60 * 60),
            base_url: UNSERVED_BASE_URL.to_owned(),
            paypal_client_id: crate::provider::DEFAULT_PAYPAL_CLIENT_ID.to_owned(),
            // A live token's `expires_in` (research §1).
            paypal_token_lifetime: Duration::from_secs(32_400),
            // "The server stores keys for 6 hours."
            paypal_request_id_ttl: Duration::from_secs(6 * 60 * 60),
            paypal_one_step_vault: true,
            paypal_unique_invoice_id: true,
        }
    }
}

/// The fake PSP's model, whatever its face (Stripe, Omise, 2C2P, Square or PayPal). All methods take `&self` (the
/// state sits behind a mutex), so one model can be shared between threads; each call is atomic.
#[derive(Debug)]
pub struct FakeModel {
    provider: Provider,
    inner: Mutex<Served>,
}

/// The ledger and the face in front of it, locked together.
#[derive(Debug)]
struct Served {
    ledger: Ledger,
    face: Box<dyn Face>,
}

impl FakeModel {
    /// A model with no PaymentIntents, drawing all its randomness from `seed`.
    pub fn new(config: ModelConfig, seed: u64) -> Self {
        // Taken apart whole, so that a field added to the config cannot go unused here.
        let ModelConfig {
            provider,
            api_key,
            search_lag_max,
            processing_for,
            requires_action_for,
            slow_delay,
            minimum_overrides,
            refund_fail_after,
            refund_pending_for,
            omise_honours_idempotency_key,
            omise_honours_refund_keys,
            twoc2p_merchant_id,
            twoc2p_challenge_unregistered,
            twoc2p_maintenance_keys,
            twoc2p_settle_after,
            twoc2p_manual_settlement,
            authorization_expires_after,
            base_url,
            paypal_client_id,
            paypal_token_lifetime,
            paypal_request_id_ttl,
            paypal_one_step_vault,
            paypal_unique_invoice_id,
        } = config;
        let timings = Timings {
            search_lag_max,
            processing_for,
            requires_action_for,
            slow_delay,
            refund_fail_after,
            refund_pending_for,
            authorization_expires_after,
        };
        // The face the provider names: adding a PSP is one face module and one arm here.
        let face: Box<dyn Face> = match provider {
            Provider::Stripe => Box::new(StripeFace::new(api_key, minimum_overrides, base_url)),
            Provider::Omise => Box::new(OmiseFace::new(
                api_key,
                minimum_overrides,
                omise_honours_idempotency_key,
                omise_honours_refund_keys,
                base_url,
            )),
            Provider::TwoC2p => Box::new(
                TwoC2pFace::new(api_key, twoc2p_merchant_id, minimum_overrides, base_url)
                    .with_challenge_unregistered(twoc2p_challenge_unregistered)
                    .with_maintenance(twoc2p_maintenance_keys, twoc2p_settle_after)
                    .with_manual_settlement(twoc2p_manual_settlement),
            ),
            Provider::Square => Box::new(SquareFace::new(api_key, minimum_overrides)),
            // PayPal documents no minimum amount, so `minimum_overrides` does not apply.
            Provider::PayPal => Box::new(PayPalFace::new(PayPalSettings {
                client_id: paypal_client_id,
                client_secret: api_key,
                token_lifetime: paypal_token_lifetime,
                request_id_ttl: paypal_request_id_ttl,
                one_step_vault: paypal_one_step_vault,
                unique_invoice_id: paypal_unique_invoice_id,
                base_url,
            })),
        };
        Self {
            provider,
            inner: Mutex::new(Served {
                ledger: Ledger::new(timings, seed),
                face,
            }),
        }
    }

    /// Handles one API request atomically at `now_ms` (epoch ms). Time-driven transitions due by
    /// then are applied first, so the request sees the world as it is at `now_ms`.
    pub fn handle(&self, request: &WireRequest<'_>, now_ms: i64) -> WireAnswer {
        let mut served = self.lock();
        let Served { ledger, face } = &mut *served;
        let now_ms = ledger.observe(face.as_ref(), now_ms);
        let handled = face.handle(ledger, request, now_ms);
        let mut events = ledger.take_due_events();
        events.extend(handled.events);
        WireAnswer {
            status: handled.reply.status,
            body: handled.reply.body,
            replayed: handled.replayed,
            delivery: handled.delivery,
            events,
        }
    }

    /// Serves the customer-facing page of the charge `charge_id` at `now_ms`: `GET` (`form:
    /// None`) shows it, `POST` (`form`: its urlencoded body) answers it — on the Stripe face, the
    /// authentication page of a PaymentIntent waiting in `requires_action`. Not an API request:
    /// not authenticated, not counted, not under an idempotency key. Time-driven transitions
    /// due by then are applied first, and their events come first.
    pub fn action_page(&self, charge_id: &str, form: Option<&[u8]>, now_ms: i64) -> PageAnswer {
        let mut served = self.lock();
        let Served { ledger, face } = &mut *served;
        let now_ms = ledger.observe(face.as_ref(), now_ms);
        let mut page = face.action_page(ledger, charge_id, form, now_ms);
        let mut events = ledger.take_due_events();
        events.append(&mut page.events);
        page.events = events;
        page
    }

    /// Advances time-driven transitions up to `now_ms` (`processing` → `succeeded`,
    /// `requires_action` → `requires_payment_method`, refund `pending` → `succeeded` and
    /// `succeeded` → `failed`) and returns the events not yet handed out, in the order they
    /// happened.
    pub fn tick(&self, now_ms: i64) -> Vec<ModelEvent> {
        let mut served = self.lock();
        let Served { ledger, face } = &mut *served;
        ledger.observe(face.as_ref(), now_ms);
        ledger.take_due_events()
    }

    /// When [`tick`](Self::tick) next has something to do (epoch ms), if ever: the earliest
    /// pending time-driven transition, or the latest time seen if events are waiting already.
    pub fn next_transition_ms(&self) -> Option<i64> {
        self.lock().ledger.next_transition_ms()
    }

    /// How many PaymentIntents (charges) exist: [`FakeModel::charges`]' length, without
    /// copying them.
    pub fn charge_count(&self) -> usize {
        self.lock().ledger.intents.len()
    }

    /// Every PaymentIntent (charge) in creation order, as it is now, in the face's words.
    pub fn charges(&self) -> Vec<FakeCharge> {
        let served = self.lock();
        let (ledger, face) = (&served.ledger, &served.face);
        ledger
            .intents
            .iter()
            .enumerate()
            .map(|(index, intent)| {
                let mut charge = face.inspect_charge(intent);
                charge.object = face.charge_object(ledger, index);
                charge
            })
            .collect()
    }

    /// Every Refund in creation order, as it is now, in the face's words.
    pub fn refunds(&self) -> Vec<FakeRefund> {
        let served = self.lock();
        let (ledger, face) = (&served.ledger, &served.face);
        ledger
            .refunds
            .iter()
            .map(|r| face.inspect_refund(r))
            .collect()
    }

    /// 2C2P face only: the merchant's side of the Payment Maintenance API's keys (made now if
    /// they were not given and not yet made) and the action endpoint's URL under
    /// [`ModelConfig::base_url`]; `None` on the other faces, or if the configured keys are
    /// unusable.
    pub fn twoc2p_keys(&self) -> Option<TwoC2pMerchantKeys> {
        let mut served = self.lock();
        let face: &mut dyn std::any::Any = served.face.as_mut();
        face.downcast_mut::<TwoC2pFace>()
            .and_then(TwoC2pFace::merchant_keys)
    }

    /// 2C2P face only: every Payment Maintenance API call so far, in order (what
    /// `GET /_fake/2c2p/actions` lists); `None` on the other faces.
    pub fn twoc2p_actions(&self) -> Option<Vec<TwoC2pAction>> {
        let served = self.lock();
        let face: &dyn std::any::Any = served.face.as_ref();
        face.downcast_ref::<TwoC2pFace>().map(TwoC2pFace::actions)
    }

    /// The wire format this model speaks.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Requests seen so far, whatever their answer (401s included): those on `/v1/*` (Stripe),
    /// every request the model is handed (Omise, 2C2P, Square, PayPal: token calls included).
    pub fn requests_seen(&self) -> u64 {
        self.lock().ledger.requests_seen
    }

    /// Marks `key` as held by a request that is still running, as if one had been received and
    /// not yet answered: until [`end_in_flight`](Self::end_in_flight), requests with that key get
    /// 409 `idempotency_key_in_use`. Returns `false` (and changes nothing) if the key is already
    /// in flight or has a stored answer, which a running request could not coexist with.
    pub fn begin_in_flight(&self, key: &str) -> bool {
        self.lock().ledger.begin_in_flight(key)
    }

    /// Releases a key marked by [`begin_in_flight`](Self::begin_in_flight) without storing an
    /// answer, like a request that failed before the endpoint did anything. Returns whether the
    /// key was in flight.
    pub fn end_in_flight(&self, key: &str) -> bool {
        self.lock().ledger.end_in_flight(key)
    }

    /// Locks the state. Every critical section leaves it consistent before anything can panic,
    /// so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, Served> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
