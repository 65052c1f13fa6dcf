//! The idempotency layer every face that takes an `Idempotency-Key` shares: the first answer
//! under a key is replayed for the same endpoint and parameters, another endpoint or other
//! parameters are refused, a key whose request is still running is refused, and each stored key is
//! forgotten at a random moment 24–48 h after it was stored (Stripe, "Idempotent requests", which
//! the other faces borrow). A face decides what a key is compared on ([`Fingerprint`]) and how the
//! refusals read ([`KeyRefusals`]); this module holds the memory.

use std::collections::BTreeMap;

use super::{Delivery, Handled, Ledger, Reply};

/// Stripe's limit on `Idempotency-Key` length ("Idempotent requests": "up to 255 characters").
pub(crate) const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A stored idempotency key is kept at least this long ("Idempotent requests": keys may be
/// removed once they are at least 24 hours old)...
const KEY_KEPT_AT_LEAST_MS: i64 = 24 * 60 * 60 * 1000;

/// ...and forgotten no later than this, so that nobody can rely on forgetting at exactly 24 h.
const KEY_KEPT_AT_MOST_MS: i64 = 48 * 60 * 60 * 1000;

/// What an idempotency key is compared on: the endpoint and its parsed parameter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    /// Method and concrete path, e.g. `POST /v1/payment_intents/pi_1/cancel`: Stripe refuses a
    /// key reused on another endpoint just like one reused with other parameters.
    pub(crate) route: String,
    /// The parsed parameters (order and percent-encoding do not matter).
    pub(crate) params: BTreeMap<String, String>,
}

/// How a face words the idempotency layer's two refusals; the layer itself is shared.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyRefusals {
    /// The key was first used with other parameters or on another endpoint.
    pub(crate) mismatch: fn(&str) -> Reply,
    /// A request holding the key is still running.
    pub(crate) in_use: fn(&str) -> Reply,
}

/// What the model holds for a key.
#[derive(Debug)]
pub(super) enum KeyEntry {
    /// A request holding the key is running ([`Ledger::begin_in_flight`]).
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

impl Ledger {
    /// Forgets every stored key whose prune time has come.
    pub(super) fn forget_pruned_keys(&mut self, now_ms: i64) {
        self.keys.retain(|_, entry| match entry {
            KeyEntry::InFlight => true,
            KeyEntry::Done { prune_at_ms, .. } => *prune_at_ms > now_ms,
        });
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
        if let Some(answer) = self.known_key(refusals, Some(&key), &fingerprint) {
            return answer;
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

    /// A create as Stripe's idempotency layer runs it ("Idempotent requests"), which the faces
    /// that take keys share: a key the ledger holds is answered from memory (by
    /// [`known_key`](Self::known_key)) before the parameters are looked at; then `validate` runs,
    /// and its refusal is answered without storing anything under the key (results are saved only
    /// once an endpoint began executing); only then does `run` run under the key
    /// ([`idempotent`](Self::idempotent)).
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

    /// The answer to a key the ledger already holds, given before the endpoint validates anything:
    /// Stripe's idempotency layer sits in front of the endpoints, replays a saved result for the
    /// same parameters, refuses other parameters with `idempotency_error` and a key whose request
    /// is still running with 409 ("Idempotent requests"). `None` for a key it does not hold.
    fn known_key(
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
                // The effect happened long ago; a retry is answered at once.
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

    /// Marks `key` as held by a request that is still running, as if one had been received and
    /// not yet answered: until [`end_in_flight`](Self::end_in_flight), requests with that key get
    /// the face's in-use refusal. Returns `false` (and changes nothing) if the key is already in
    /// flight or has a stored answer, which a running request could not coexist with.
    pub(crate) fn begin_in_flight(&mut self, key: &str) -> bool {
        let now_ms = self.clock_ms;
        self.forget_pruned_keys(now_ms);
        if self.keys.contains_key(key) {
            return false;
        }
        self.keys.insert(key.to_owned(), KeyEntry::InFlight);
        true
    }

    /// Releases a key marked by [`begin_in_flight`](Self::begin_in_flight) without storing an
    /// answer, like a request that failed before the endpoint did anything. Returns whether the
    /// key was in flight.
    pub(crate) fn end_in_flight(&mut self, key: &str) -> bool {
        if matches!(self.keys.get(key), Some(KeyEntry::InFlight)) {
            self.keys.remove(key);
            return true;
        }
        false
    }
}

/// Whether an `Idempotency-Key` value is one the fake accepts: 1 to 255 visible ASCII characters
/// (Stripe, "Idempotent requests": up to 255 characters).
pub(crate) fn is_valid_idempotency_key(key: &str) -> bool {
    let visible = key.bytes().all(|b| (0x20..0x7f).contains(&b));
    !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LEN && visible
}
