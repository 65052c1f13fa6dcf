//! The fake PSP's memory: every PaymentIntent ever created, and the idempotency cache.
//!
//! Both live behind one mutex that is never held across an `.await`, so every check-and-act
//! (claim a key, create an intent, cancel one) is atomic. That is what makes "exactly one
//! PaymentIntent per idempotency key" hold under any number of concurrent identical requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::params::Params;
use crate::reply::Reply;

/// How long a stored idempotent response is replayed, as at Stripe.
const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// One PaymentIntent as the test-inspection API (`GET /_fake/charges`,
/// [`RunningFakePsp::charges`](crate::RunningFakePsp::charges)) reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FakeCharge {
    /// The PaymentIntent id, `pi_...`.
    pub id: String,
    /// Amount in the currency's minor unit.
    pub amount: i64,
    /// Lowercase ISO currency code.
    pub currency: String,
    /// The PaymentIntent status now (`succeeded`, `requires_payment_method`, `canceled`, ...).
    pub status: String,
    /// The `payment_method` token it was created with.
    pub payment_method: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// The `Idempotency-Key` of the request that created it, if any.
    pub idempotency_key: Option<String>,
    /// Creation time, epoch seconds.
    pub created: i64,
}

/// The PaymentIntent statuses the fake can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Created with `confirm=false`; nothing attempted.
    RequiresConfirmation,
    /// The last confirm was declined.
    RequiresPaymentMethod,
    /// Charged.
    Succeeded,
    /// Cancelled.
    Canceled,
}

impl Status {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::RequiresConfirmation => "requires_confirmation",
            Self::RequiresPaymentMethod => "requires_payment_method",
            Self::Succeeded => "succeeded",
            Self::Canceled => "canceled",
        }
    }
}

/// A PaymentIntent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Intent {
    pub(crate) id: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) status: Status,
    pub(crate) payment_method: String,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) created: i64,
    /// The charge attempt (`ch_...`), set once a confirm was attempted, declined or not.
    pub(crate) latest_charge: Option<String>,
    /// Stripe's `last_payment_error` object after a decline.
    pub(crate) last_payment_error: Option<Value>,
    pub(crate) cancellation_reason: Option<String>,
}

impl Intent {
    /// The PaymentIntent as Stripe serialises it.
    pub(crate) fn to_json(&self) -> Value {
        let amount_received = if self.status == Status::Succeeded {
            self.amount
        } else {
            0
        };
        json!({
            "id": self.id,
            "object": "payment_intent",
            "amount": self.amount,
            "amount_received": amount_received,
            "currency": self.currency,
            "status": self.status.as_str(),
            "payment_method": self.payment_method,
            "metadata": self.metadata,
            "created": self.created,
            "latest_charge": self.latest_charge,
            "last_payment_error": self.last_payment_error,
            "cancellation_reason": self.cancellation_reason,
            "livemode": false,
        })
    }

    /// The test-inspection view.
    pub(crate) fn to_charge(&self) -> FakeCharge {
        FakeCharge {
            id: self.id.clone(),
            amount: self.amount,
            currency: self.currency.clone(),
            status: self.status.as_str().to_owned(),
            payment_method: self.payment_method.clone(),
            metadata: self.metadata.clone(),
            idempotency_key: self.idempotency_key.clone(),
            created: self.created,
        }
    }
}

/// `<prefix>_` followed by 24 random alphanumerics, like Stripe's object ids.
pub(crate) fn new_id(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + 25);
    id.push_str(prefix);
    id.push('_');
    id.extend(std::iter::repeat_with(fastrand::alphanumeric).take(24));
    id
}

/// Now, in epoch seconds.
pub(crate) fn now_epoch_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// What an idempotency key is compared on: the endpoint and its parsed parameter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    /// Method and concrete path, e.g. `POST /v1/payment_intents/pi_1/cancel`: Stripe refuses a
    /// key reused on another endpoint just like one reused with other parameters.
    pub(crate) route: String,
    /// The parsed parameters.
    pub(crate) params: Params,
}

/// What the cache holds for a key.
#[derive(Debug)]
enum KeyEntry {
    /// A request holding the key is running; concurrent ones get 409.
    InFlight,
    /// The stored response, replayed to later requests with the same fingerprint.
    Done {
        fingerprint: Fingerprint,
        reply: Reply,
        stored_at: Instant,
    },
}

/// The outcome of presenting an idempotency key.
#[derive(Debug)]
pub(crate) enum Claim {
    /// First use (or the earlier use left nothing behind): run the request, then hand its
    /// response to the ticket.
    Fresh(KeyTicket),
    /// Already answered with the same parameters: send this again.
    Replay(Reply),
    /// Already answered, but with other parameters.
    Mismatch,
    /// Another request with this key is running right now.
    InUse,
}

#[derive(Debug, Default)]
struct Inner {
    /// In creation order, which is the order `charges()` reports.
    intents: Vec<Intent>,
    /// id → position in `intents`.
    by_id: HashMap<String, usize>,
    keys: HashMap<String, KeyEntry>,
}

/// Why a cancel was refused.
#[derive(Debug)]
pub(crate) enum CancelError {
    /// No PaymentIntent has that id.
    NotFound,
    /// The PaymentIntent is in a status that cannot be cancelled; here it is.
    UnexpectedState(Box<Intent>),
}

/// Everything the fake PSP remembers.
#[derive(Debug, Default)]
pub(crate) struct Store {
    inner: Mutex<Inner>,
    requests_seen: AtomicU64,
}

impl Store {
    /// Locks the state. A panic elsewhere while holding the lock cannot leave it half-updated
    /// (every critical section is a single insert or update), so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one request on `/v1/*`.
    pub(crate) fn count_request(&self) {
        self.requests_seen.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests seen on `/v1/*` so far.
    pub(crate) fn requests_seen(&self) -> u64 {
        self.requests_seen.load(Ordering::Relaxed)
    }

    /// Presents an idempotency key. Check and claim are one critical section, so of many
    /// concurrent requests with one key exactly one gets [`Claim::Fresh`].
    pub(crate) fn claim(self: &Arc<Self>, key: &str, fingerprint: &Fingerprint) -> Claim {
        let mut inner = self.lock();
        match inner.keys.get(key) {
            Some(KeyEntry::InFlight) => return Claim::InUse,
            Some(KeyEntry::Done {
                fingerprint: stored,
                reply,
                stored_at,
            }) if stored_at.elapsed() < IDEMPOTENCY_TTL => {
                return if stored == fingerprint {
                    Claim::Replay(reply.clone())
                } else {
                    Claim::Mismatch
                };
            }
            // Absent, or stored so long ago that Stripe would have forgotten it.
            _ => {}
        }
        inner.keys.insert(key.to_owned(), KeyEntry::InFlight);
        Claim::Fresh(KeyTicket {
            store: Arc::clone(self),
            key: key.to_owned(),
            fingerprint: fingerprint.clone(),
            settled: false,
        })
    }

    /// Records a new PaymentIntent.
    pub(crate) fn insert(&self, intent: Intent) {
        let mut inner = self.lock();
        let position = inner.intents.len();
        inner.by_id.insert(intent.id.clone(), position);
        inner.intents.push(intent);
    }

    /// The PaymentIntent with this id.
    pub(crate) fn get(&self, id: &str) -> Option<Intent> {
        let inner = self.lock();
        inner.by_id.get(id).map(|&i| inner.intents[i].clone())
    }

    /// PaymentIntents whose `metadata[key]` is `value`, in creation order.
    pub(crate) fn search_metadata(&self, key: &str, value: &str) -> Vec<Intent> {
        self.lock()
            .intents
            .iter()
            .filter(|intent| intent.metadata.get(key).map(String::as_str) == Some(value))
            .cloned()
            .collect()
    }

    /// Cancels a PaymentIntent that has not been charged, returning it as it is now.
    pub(crate) fn cancel(&self, id: &str, reason: Option<&str>) -> Result<Intent, CancelError> {
        let mut inner = self.lock();
        let position = *inner.by_id.get(id).ok_or(CancelError::NotFound)?;
        let intent = &mut inner.intents[position];
        match intent.status {
            Status::RequiresConfirmation | Status::RequiresPaymentMethod => {
                intent.status = Status::Canceled;
                intent.cancellation_reason = reason.map(str::to_owned);
                Ok(intent.clone())
            }
            Status::Succeeded | Status::Canceled => {
                Err(CancelError::UnexpectedState(Box::new(intent.clone())))
            }
        }
    }

    /// Every PaymentIntent in creation order, as it is now.
    pub(crate) fn charges(&self) -> Vec<FakeCharge> {
        self.lock().intents.iter().map(Intent::to_charge).collect()
    }

    /// How many succeeded PaymentIntents carry `metadata.payment_id == payment_id`.
    pub(crate) fn succeeded_charges_for(&self, payment_id: &str) -> usize {
        self.lock()
            .intents
            .iter()
            .filter(|intent| {
                intent.status == Status::Succeeded
                    && intent.metadata.get("payment_id").map(String::as_str) == Some(payment_id)
            })
            .count()
    }
}

/// The right to answer a claimed idempotency key. Settle it with [`KeyTicket::complete`]; if it
/// is dropped unsettled (the handler failed or was cancelled because the client went away) the
/// key is released so a retry runs again, as Stripe does when it saved nothing.
#[derive(Debug)]
pub(crate) struct KeyTicket {
    store: Arc<Store>,
    key: String,
    fingerprint: Fingerprint,
    settled: bool,
}

impl KeyTicket {
    /// Stores `reply` for the key, unless it is a server error, which releases the key instead.
    pub(crate) fn complete(mut self, reply: &Reply) {
        self.settled = true;
        let mut inner = self.store.lock();
        if reply.is_storable() {
            inner.keys.insert(
                std::mem::take(&mut self.key),
                KeyEntry::Done {
                    fingerprint: self.fingerprint.clone(),
                    reply: reply.clone(),
                    stored_at: Instant::now(),
                },
            );
        } else {
            inner.keys.remove(&self.key);
        }
    }
}

impl Drop for KeyTicket {
    fn drop(&mut self) {
        if !self.settled {
            let mut inner = self.store.lock();
            if matches!(inner.keys.get(&self.key), Some(KeyEntry::InFlight)) {
                inner.keys.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn fingerprint(amount: &str) -> Fingerprint {
        Fingerprint {
            route: "POST /v1/payment_intents".into(),
            params: [("amount".to_owned(), amount.to_owned())].into(),
        }
    }

    fn ok_reply() -> Reply {
        Reply::json(StatusCode::OK, &json!({"id": "pi_1"}))
    }

    #[test]
    fn ids_look_like_stripes() {
        let id = new_id("pi");
        assert_eq!(id.len(), 27);
        assert!(id.starts_with("pi_"));
        assert!(id[3..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, new_id("pi"));
    }

    #[test]
    fn key_lifecycle_fresh_in_use_replay_mismatch() {
        let store = Arc::new(Store::default());
        let Claim::Fresh(ticket) = store.claim("k", &fingerprint("1")) else {
            panic!("first claim must be fresh");
        };
        assert!(matches!(store.claim("k", &fingerprint("1")), Claim::InUse));
        ticket.complete(&ok_reply());
        assert!(matches!(store.claim("k", &fingerprint("1")), Claim::Replay(r) if r == ok_reply()));
        assert!(matches!(
            store.claim("k", &fingerprint("2")),
            Claim::Mismatch
        ));
    }

    #[test]
    fn server_errors_and_dropped_tickets_release_the_key() {
        let store = Arc::new(Store::default());
        let Claim::Fresh(ticket) = store.claim("k", &fingerprint("1")) else {
            panic!("first claim must be fresh");
        };
        ticket.complete(&crate::reply::api_error("boom"));
        let Claim::Fresh(ticket) = store.claim("k", &fingerprint("2")) else {
            panic!("a 500 must not be stored");
        };
        drop(ticket);
        assert!(matches!(
            store.claim("k", &fingerprint("3")),
            Claim::Fresh(_)
        ));
    }
}
