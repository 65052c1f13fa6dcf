//! The idempotency-key memory every face that takes an `Idempotency-Key` shares: per key, a
//! request still running or the stored answer with what it was compared on, until the key is
//! forgotten. The rules that use it (replay for the same endpoint and parameters, refuse other
//! parameters or a key in flight, forget each stored key at a random moment 24–48 h after it was
//! stored: Stripe, "Idempotent requests", which the other faces borrow) are the ledger's
//! (`Ledger::idempotent`, `Ledger::validated`). A face decides what a key is compared on
//! ([`Fingerprint`]) and how the refusals read ([`KeyRefusals`]). A face whose PSP documents how
//! long it keeps keys, or answers a replay with the latest state of what the first request made,
//! presents and stores keys itself (`Ledger::recall`, `Ledger::remember`), with a [`Retention`]
//! and a subject kept beside the answer ([`Stored`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::wire::Reply;

/// Stripe's limit on `Idempotency-Key` length ("Idempotent requests": "up to 255 characters").
pub(crate) const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A stored idempotency key is kept at least this long ("Idempotent requests": keys may be
/// removed once they are at least 24 hours old)...
pub(super) const KEY_KEPT_AT_LEAST_MS: i64 = 24 * 60 * 60 * 1000;

/// ...and forgotten no later than this, so that nobody can rely on forgetting at exactly 24 h.
pub(super) const KEY_KEPT_AT_MOST_MS: i64 = 48 * 60 * 60 * 1000;

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

/// How long a stored answer is kept under its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retention {
    /// Until a random moment 24–48 h after it was stored (Stripe: "at least 24 hours old"; the
    /// faces that borrow Stripe's rule): the moment is drawn from the ledger's randomness.
    Random,
    /// Exactly this long after it was stored, for a PSP that documents how long it keeps keys;
    /// draws nothing.
    Exactly(Duration),
}

/// What the memory holds for a key.
#[derive(Debug)]
enum KeyEntry {
    /// A request holding the key is running ([`Keys::begin_in_flight`]).
    InFlight,
    /// The stored answer, replayed to later requests with the same fingerprint.
    Done {
        fingerprint: Fingerprint,
        reply: Reply,
        /// The id of the charge the request that stored the answer created, if it created one.
        created: Option<String>,
        /// What the answer is about, in the face's words, for a face whose replays answer the
        /// latest state of it rather than the stored answer; `None` for the others.
        subject: Option<String>,
        /// From this moment (epoch ms) the key is forgotten.
        prune_at_ms: i64,
    },
}

/// The outcome of presenting an idempotency key.
#[derive(Debug)]
pub(crate) enum Claim {
    /// Unknown key: run the request.
    Fresh,
    /// Answered before with the same parameters: send `reply` again, or (a face that answers
    /// replays with the latest state) what `subject` names as it is now.
    Replay {
        reply: Reply,
        subject: Option<String>,
    },
    /// Answered before, with other parameters or on another endpoint.
    Mismatch,
    /// Another request with this key is running.
    InUse,
}

/// What the memory holds for a key now, without presenting it ([`Keys::state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyState {
    /// Never seen, or forgotten.
    Unknown,
    /// A request holding the key is running.
    InFlight,
    /// Answered and remembered; `created` is the id of the charge that request created, if it
    /// created one.
    Answered { created: Option<String> },
}

/// An answer to store under a key, with what the idempotency layer keeps beside it.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    /// The answer.
    pub(crate) reply: Reply,
    /// The id of the charge the request created, if it created one.
    pub(crate) created: Option<String>,
    /// What the answer is about, in the face's words, for a face whose replays answer the
    /// latest state of it; `None` replays the answer itself.
    pub(crate) subject: Option<String>,
}

/// Every key held: in flight, or answered and not yet forgotten.
#[derive(Debug, Default)]
pub(super) struct Keys {
    entries: BTreeMap<String, KeyEntry>,
}

impl Keys {
    /// Presents an idempotency key (pruned keys are already forgotten).
    pub(super) fn claim(&self, key: &str, fingerprint: &Fingerprint) -> Claim {
        match self.entries.get(key) {
            None => Claim::Fresh,
            Some(KeyEntry::InFlight) => Claim::InUse,
            Some(KeyEntry::Done {
                fingerprint: stored,
                reply,
                subject,
                ..
            }) => {
                if stored == fingerprint {
                    Claim::Replay {
                        reply: reply.clone(),
                        subject: subject.clone(),
                    }
                } else {
                    Claim::Mismatch
                }
            }
        }
    }

    /// What the memory holds for `key` (pruned keys are already forgotten).
    pub(super) fn state(&self, key: &str) -> KeyState {
        match self.entries.get(key) {
            None => KeyState::Unknown,
            Some(KeyEntry::InFlight) => KeyState::InFlight,
            Some(KeyEntry::Done { created, .. }) => KeyState::Answered {
                created: created.clone(),
            },
        }
    }

    /// Stores the answer under `key`, with the id of the charge its request `created` (if
    /// any) and its `subject` (if the face names one), to be forgotten from `prune_at_ms`
    /// (epoch ms).
    pub(super) fn store(
        &mut self,
        key: String,
        fingerprint: Fingerprint,
        stored: Stored,
        prune_at_ms: i64,
    ) {
        let Stored {
            reply,
            created,
            subject,
        } = stored;
        let entry = KeyEntry::Done {
            fingerprint,
            reply,
            created,
            subject,
            prune_at_ms,
        };
        self.entries.insert(key, entry);
    }

    /// Forgets every stored key whose prune time has come.
    pub(super) fn forget_pruned(&mut self, now_ms: i64) {
        self.entries.retain(|_, entry| match entry {
            KeyEntry::InFlight => true,
            KeyEntry::Done { prune_at_ms, .. } => *prune_at_ms > now_ms,
        });
    }

    /// Marks `key` as held by a request that is still running. Returns `false` (and changes
    /// nothing) if the key is already in flight or has a stored answer.
    pub(super) fn begin_in_flight(&mut self, key: &str) -> bool {
        if self.entries.contains_key(key) {
            return false;
        }
        self.entries.insert(key.to_owned(), KeyEntry::InFlight);
        true
    }

    /// Releases a key marked by [`begin_in_flight`](Self::begin_in_flight) without storing an
    /// answer. Returns whether the key was in flight.
    pub(super) fn end_in_flight(&mut self, key: &str) -> bool {
        if matches!(self.entries.get(key), Some(KeyEntry::InFlight)) {
            self.entries.remove(key);
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
