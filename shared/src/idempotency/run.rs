//! The high-level API: [`Idempotency::run`] and the pure decision it is built on.

use super::{
    Claim, ClaimOutcome, Fingerprint, IdempotencyKey, IdempotencyRecord, IdempotencyStore, Lease,
    LeaseToken, RecordKey, RecordState, StoreError, TakeoverOutcome,
};
use crate::clock::duration_ms;
use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;
use std::time::Duration;

/// Tunables of the idempotency layer, with defaults suited to an API Gateway-fronted Lambda.
#[derive(Clone, Debug)]
pub struct IdempotencyConfig {
    /// How long a record is kept after its last outcome (default 24 h). Cap it at the
    /// downstream provider's own key retention.
    pub retention: Duration,
    /// Added to the invocation deadline to form the lease, covering clock skew between
    /// instances and the time the runtime needs to kill a timed-out invocation (default 5 s).
    pub lease_margin: Duration,
    /// How many times a transaction conflict is retried before answering `InProgress` (default 3).
    pub conflict_retries: u32,
    /// Base of the jittered exponential backoff between conflict retries (default 25 ms).
    pub conflict_backoff: Duration,
    /// The longest `retry_after` an in-progress answer suggests (default 5 s): the holder may
    /// finish long before its lease ends, and a client told to wait for the whole lease of a
    /// 15-minute function would wait that long.
    pub max_retry_after: Duration,
    /// How many times a completion write that failed with a retryable error is sent again
    /// before the result is given up on (default 3): the work has run, and losing its record
    /// means a retry runs it again.
    pub completion_retries: u32,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(24 * 3600),
            lease_margin: Duration::from_secs(5),
            conflict_retries: 3,
            conflict_backoff: Duration::from_millis(25),
            max_retry_after: Duration::from_secs(5),
            completion_retries: 3,
        }
    }
}

impl IdempotencyConfig {
    /// The defaults, with what the environment sets (names as in Powertools for AWS Lambda
    /// where the idea is the same):
    ///
    /// | variable | field | default |
    /// |---|---|---|
    /// | `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` | [`retention`](Self::retention) (Powertools' `expires_after_seconds`) | 86400 |
    /// | `IDEMPOTENCY_LEASE_MARGIN_MS` | [`lease_margin`](Self::lease_margin) | 5000 |
    /// | `IDEMPOTENCY_CONFLICT_RETRIES` | [`conflict_retries`](Self::conflict_retries) | 3 |
    pub fn from_env() -> Result<Self, crate::env::EnvError> {
        let defaults = Self::default();
        let seconds = crate::env::number(
            "IDEMPOTENCY_EXPIRES_AFTER_SECONDS",
            u32::try_from(defaults.retention.as_secs()).unwrap_or(u32::MAX),
        )?;
        if seconds == 0 {
            return Err(crate::env::EnvError::Invalid {
                name: "IDEMPOTENCY_EXPIRES_AFTER_SECONDS",
                reason: "a record must be kept for at least one second".into(),
            });
        }
        Ok(Self {
            retention: Duration::from_secs(u64::from(seconds)),
            lease_margin: crate::env::millis("IDEMPOTENCY_LEASE_MARGIN_MS", defaults.lease_margin)?,
            conflict_retries: crate::env::number(
                "IDEMPOTENCY_CONFLICT_RETRIES",
                defaults.conflict_retries,
            )?,
            ..defaults
        })
    }

    /// The same configuration keeping records for `expires_after` (Powertools'
    /// `expires_after_seconds`). Cap it at the downstream provider's own key retention.
    pub fn expires_after(mut self, expires_after: Duration) -> Self {
        self.retention = expires_after;
        self
    }

    /// Refuses a retention shorter than a lease of an invocation running for `timeout`
    /// (`timeout` + [`lease_margin`](Self::lease_margin)): such a record could expire while its
    /// work still runs, and a duplicate would then claim the key afresh and run it again.
    /// Records are kept at least until their lease ends whatever the retention, but a
    /// retention this short says the configuration is wrong.
    pub fn check_timeout(&self, timeout: Duration) -> Result<(), crate::env::EnvError> {
        let lease = timeout.saturating_add(self.lease_margin);
        if self.retention < lease {
            return Err(crate::env::EnvError::Invalid {
                name: "IDEMPOTENCY_EXPIRES_AFTER_SECONDS",
                reason: format!(
                    "a retention of {} s is shorter than the lease of a {} s invocation plus its {} ms margin",
                    self.retention.as_secs(),
                    timeout.as_secs(),
                    self.lease_margin.as_millis()
                ),
            });
        }
        Ok(())
    }

    /// When a record written at `now_ms` under `lease` expires: after the retention, and never
    /// before the lease ends (a record that expired while its work ran could be claimed afresh).
    fn expires_at_s(&self, now_ms: i64, lease: &Lease) -> i64 {
        let retained = (now_ms + duration_ms(self.retention)).div_euclid(1000);
        // The first whole second after the lease's end.
        retained.max(lease.until_ms.div_euclid(1000) + 1)
    }
}

/// One idempotent request, as a handler describes it.
#[derive(Clone, Debug)]
pub struct RunRequest<'a> {
    /// Stable operation name, e.g. `orders.create`. Must not contain `#`.
    pub scope: &'a str,
    /// The authenticated user (JWT `sub`). Must not contain `#`.
    pub user: &'a str,
    /// The client's key.
    pub key: &'a IdempotencyKey,
    /// Fingerprint of what the client sent.
    pub fingerprint: Fingerprint,
    /// The invocation's deadline in epoch milliseconds (Lambda: `Context::deadline`).
    pub deadline_ms: i64,
}

/// The attempt the work runs as: stable across takeovers and failures.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attempt {
    /// Identity created at the first claim (derive downstream idempotency keys from it). It
    /// stays the same for every run under the key until the record completes or expires: after
    /// a takeover, and after a failure (an error, a panic, a timeout, a 5xx answer).
    pub attempt_id: String,
    /// Epoch milliseconds of the first claim.
    pub created_at_ms: i64,
    /// True when an earlier invocation ran under this attempt and did not complete it (its lease
    /// lapsed, or it failed and handed the attempt back): the work may already have partly
    /// happened, so its side effects must be idempotent.
    pub taken_over: bool,
}

/// What [`Idempotency::run`] answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The work ran in this invocation and its result is stored.
    Fresh(T),
    /// The work had already completed; its stored result, with no work done now.
    Replayed(T),
    /// Another invocation holds the lease (or the store stayed contended); retry later.
    InProgress {
        /// How long until the holder's lease lapses (at least one second).
        retry_after: Duration,
    },
    /// The key was used for a different request; nothing was written.
    Mismatch,
    /// The work completed under this key before, but its result was too large to store (the
    /// item limit), so the record keeps only that fact: the work is not run again, and there is
    /// nothing to replay.
    TooLargeToReplay {
        /// The size the result's record would have had.
        size_bytes: usize,
    },
}

/// Why [`Idempotency::run`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The work failed; the lease was handed back, so a retry with the same key takes the
    /// attempt over at once, under the same attempt id.
    #[error("the idempotent operation failed")]
    Work(#[source] E),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored result could not be deserialised into the handler's type.
    #[error("the stored result of {key} cannot be read back")]
    UnreadableResult {
        /// The record concerned.
        key: RecordKey,
        /// The deserialisation error.
        #[source]
        source: serde_json::Error,
    },
    /// The work's result could not be serialised for storage; the lease was handed back.
    #[error("the result cannot be serialised for storage")]
    UnserialisableResult(#[source] serde_json::Error),
}

/// What to do about an existing record, decided without I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The key belongs to another request.
    Mismatch,
    /// The stored result answers the request.
    Replay,
    /// A live lease is held by someone else.
    Wait {
        /// Until the lease lapses.
        retry_after: Duration,
    },
    /// The lease lapsed: take the attempt over from the holder of this token.
    TakeOver {
        /// The lapsed lease's token, which the takeover is conditioned on.
        seen: LeaseToken,
    },
}

/// The decision rule, in its order: other fingerprint → mismatch (even while in progress);
/// completed → replay; live lease → wait; lapsed lease → takeover.
pub fn decide(existing: &IdempotencyRecord, fingerprint: &Fingerprint, now_ms: i64) -> Decision {
    if &existing.fingerprint != fingerprint {
        return Decision::Mismatch;
    }
    match &existing.state {
        RecordState::Completed { .. } => Decision::Replay,
        RecordState::InProgress { lease } if lease.until_ms > now_ms => Decision::Wait {
            retry_after: retry_after_ms(lease.until_ms - now_ms),
        },
        RecordState::InProgress { lease } => Decision::TakeOver {
            seen: lease.token.clone(),
        },
    }
}

/// Whole seconds, rounded up, never below one: what a `Retry-After` header can carry.
fn retry_after_ms(ms: i64) -> Duration {
    let secs = u64::try_from((ms + 999) / 1000).unwrap_or(1).max(1);
    Duration::from_secs(secs)
}

/// How many times a run re-reads the situation after losing a race before it answers `InProgress`.
const MAX_RACES: u32 = 4;

/// The idempotency layer over a store.
#[derive(Debug, Clone)]
pub struct Idempotency<S> {
    store: S,
    config: IdempotencyConfig,
}

impl<S: IdempotencyStore> Idempotency<S> {
    /// The layer over `store` with `config`.
    pub fn new(store: S, config: IdempotencyConfig) -> Self {
        Self { store, config }
    }

    /// The underlying store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &IdempotencyConfig {
        &self.config
    }

    /// Runs `work` at most once per (scope, user, key), and answers duplicates from the store.
    ///
    /// Store requests: a first run costs two (claim, complete); a duplicate costs one (the
    /// claim, which returns the existing record). If `work` fails the lease is handed back
    /// (fenced by its token) and the error returned: the record keeps its attempt id and
    /// fingerprint, so a retry with the same key takes the attempt over at once and runs under
    /// the same id, and a different request under the key is a mismatch. A result too large to
    /// store completes the record without it ([`Outcome::TooLargeToReplay`] for duplicates).
    ///
    /// ```
    /// use payonce::adapters::memory::MemoryIdempotencyStore;
    /// use payonce::idempotency::{Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey, Outcome, RunRequest};
    /// use std::convert::Infallible;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let idempotency = Idempotency::new(MemoryIdempotencyStore::default(), IdempotencyConfig::default());
    /// let key = IdempotencyKey::parse("6f1c0d9e-3b5a-4f0e-9d61-2b7c8a1e4f55").unwrap();
    /// let request = || RunRequest {
    ///     scope: "things.create",
    ///     user: "alice",
    ///     key: &key,
    ///     fingerprint: Fingerprint::of_json(br#"{"name": "lamp"}"#).unwrap(),
    ///     deadline_ms: idempotency.store().now_ms() + 10_000,
    /// };
    /// # use payonce::idempotency::IdempotencyStore;
    /// let first = idempotency
    ///     .run(request(), |attempt| async move { Ok::<_, Infallible>(format!("thing_{}", attempt.attempt_id)) })
    ///     .await
    ///     .unwrap();
    /// let again = idempotency
    ///     .run(request(), |_| async { unreachable!("a duplicate never runs the work") as Result<String, Infallible> })
    ///     .await
    ///     .unwrap();
    /// let (Outcome::Fresh(created), Outcome::Replayed(replayed)) = (first, again) else { panic!() };
    /// assert_eq!(created, replayed);
    /// # }
    /// ```
    pub async fn run<T, E, F, Fut>(
        &self,
        request: RunRequest<'_>,
        work: F,
    ) -> Result<Outcome<T>, RunError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = RecordKey::new(request.scope, request.user, request.key);
        let (lease, attempt) = match self.acquire(&key, &request).await? {
            Acquired::Lease(lease, attempt) => (lease, attempt),
            Acquired::Mismatch => return Ok(Outcome::Mismatch),
            Acquired::Wait(retry_after) => return Ok(Outcome::InProgress { retry_after }),
            Acquired::Replay(record) => return self.replay(&key, &record),
        };

        let value = match work(attempt).await {
            Ok(value) => value,
            Err(error) => {
                self.release_after_failure(&key, &lease.token).await;
                return Err(RunError::Work(error));
            }
        };
        let result = match serde_json::to_string(&value) {
            Ok(result) => result,
            Err(error) => {
                self.release_after_failure(&key, &lease.token).await;
                return Err(RunError::UnserialisableResult(error));
            }
        };
        let expires_at_s = self.config.expires_at_s(self.store.now_ms(), &lease);
        let completed = self
            .complete_with_retries(
                &key,
                &lease.token,
                &result,
                expires_at_s,
                request.deadline_ms,
            )
            .await;
        match completed {
            Ok(()) => Ok(Outcome::Fresh(value)),
            Err(StoreError::ItemTooLarge { size_bytes, .. }) => {
                // The result can never be stored. The work ran: complete the record without it,
                // so a duplicate is told so instead of running the work again.
                let marker = super::record::too_large_marker(size_bytes);
                self.complete_with_retries(
                    &key,
                    &lease.token,
                    &marker,
                    expires_at_s,
                    request.deadline_ms,
                )
                .await?;
                tracing::warn!(record = %key, size_bytes, "the result is too large to store: completed without it, duplicates cannot be replayed");
                Ok(Outcome::Fresh(value))
            }
            // Lease lost: a takeover owns the record now. Anything else: the lease lapses and
            // the next request takes the attempt over. Either way the record is not ours to touch.
            Err(error) => Err(error.into()),
        }
    }

    /// The completion write, sent again on a retryable failure (a conflict, a throttle, a lost
    /// connection) while the invocation has time: the work has run, and a lost record means a
    /// retry runs it again. A write whose answer was lost and that is sent again meets itself
    /// and succeeds (the store recognises its own lease and result).
    async fn complete_with_retries(
        &self,
        key: &RecordKey,
        token: &LeaseToken,
        result: &str,
        expires_at_s: i64,
        deadline_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tries = 0;
        loop {
            let completed = self
                .with_conflict_retries(deadline_ms, || {
                    self.store.complete(key, token, result, expires_at_s)
                })
                .await;
            match completed {
                Err(error) if error.is_retryable() && tries < self.config.completion_retries => {
                    let pause_ms = backoff_ms(self.config.conflict_backoff, tries);
                    if self.store.now_ms() + pause_ms >= deadline_ms {
                        return Err(error);
                    }
                    tries += 1;
                    tracing::warn!(record = %key, error = %error, "the completion write failed; sending it again");
                    tokio::time::sleep(Duration::from_millis(pause_ms.unsigned_abs())).await;
                }
                other => return other,
            }
        }
    }

    /// Claims the key or takes a lapsed attempt over; otherwise says how to answer.
    async fn acquire(
        &self,
        key: &RecordKey,
        request: &RunRequest<'_>,
    ) -> Result<Acquired, StoreError> {
        let lease = Lease {
            token: LeaseToken::generate(),
            until_ms: request.deadline_ms + duration_ms(self.config.lease_margin),
        };
        let mut races = 0;
        loop {
            let now_ms = self.store.now_ms();
            let claim = Claim {
                key: key.clone(),
                fingerprint: request.fingerprint.clone(),
                attempt_id: crate::ids::new_uuid().to_string(),
                lease_token: lease.token.clone(),
                lease_until_ms: lease.until_ms,
                expires_at_s: self.config.expires_at_s(now_ms, &lease),
                // Runs store results, never problems: no replay needs the first request's id.
                request_id: None,
            };
            let claimed = self
                .with_conflict_retries(request.deadline_ms, || self.store.claim(&claim))
                .await;
            let existing = match claimed {
                Ok(ClaimOutcome::Claimed(record)) => {
                    return Ok(Acquired::Lease(lease, attempt_of(&record, false)))
                }
                Ok(ClaimOutcome::Existing(record)) => record,
                Err(StoreError::Conflict { .. }) => return Ok(contended()),
                Err(other) => return Err(other),
            };
            let mut current = Some(existing);
            // Follow the record through lost takeover races until it is decided or gone.
            while let Some(record) = current.take() {
                match decide(&record, &request.fingerprint, self.store.now_ms()) {
                    Decision::TakeOver { seen } => {
                        races += 1;
                        if races > MAX_RACES {
                            return Ok(contended());
                        }
                        let expires_at_s = self.config.expires_at_s(self.store.now_ms(), &lease);
                        let outcome = self
                            .with_conflict_retries(request.deadline_ms, || {
                                self.store.take_over(key, &seen, &lease, expires_at_s)
                            })
                            .await;
                        match outcome {
                            Ok(TakeoverOutcome::TakenOver(record)) => {
                                tracing::info!(record = %key, attempt_id = %record.attempt_id, "took over a lapsed attempt");
                                return Ok(Acquired::Lease(lease, attempt_of(&record, true)));
                            }
                            Ok(TakeoverOutcome::Lost(now)) => current = now,
                            Err(StoreError::Conflict { .. }) => return Ok(contended()),
                            Err(other) => return Err(other),
                        }
                    }
                    Decision::Mismatch => return Ok(Acquired::Mismatch),
                    Decision::Wait { retry_after } => {
                        return Ok(Acquired::Wait(retry_after.min(self.config.max_retry_after)))
                    }
                    Decision::Replay => return Ok(Acquired::Replay(record)),
                }
            }
            // The record vanished under us (released or expired): claim again.
            races += 1;
            if races > MAX_RACES {
                return Ok(contended());
            }
        }
    }

    fn replay<T: DeserializeOwned, E>(
        &self,
        key: &RecordKey,
        record: &IdempotencyRecord,
    ) -> Result<Outcome<T>, RunError<E>> {
        let stored = match &record.state {
            RecordState::Completed { result } => result.as_str(),
            RecordState::InProgress { .. } => "null",
        };
        if let Some(size_bytes) = super::record::too_large_size(stored) {
            return Ok(Outcome::TooLargeToReplay { size_bytes });
        }
        serde_json::from_str(stored)
            .map(Outcome::Replayed)
            .map_err(|source| RunError::UnreadableResult {
                key: key.clone(),
                source,
            })
    }

    async fn release_after_failure(&self, key: &RecordKey, token: &LeaseToken) {
        if let Err(error) = self.store.release(key, token).await {
            // The lease lapses by itself; the next request takes the attempt over.
            tracing::warn!(record = %key, error = %error, "could not release the idempotency record after a failure");
        }
    }

    /// Retries a store call that reports a transaction conflict, with jittered exponential
    /// backoff, while the invocation has time left.
    async fn with_conflict_retries<R, F, Fut>(
        &self,
        deadline_ms: i64,
        mut call: F,
    ) -> Result<R, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<R, StoreError>>,
    {
        let mut attempt = 0;
        loop {
            match call().await {
                Err(StoreError::Conflict { item }) if attempt < self.config.conflict_retries => {
                    let pause_ms = backoff_ms(self.config.conflict_backoff, attempt);
                    if self.store.now_ms() + pause_ms >= deadline_ms {
                        return Err(StoreError::Conflict { item });
                    }
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(pause_ms.unsigned_abs())).await;
                }
                other => return other,
            }
        }
    }
}

/// The pause before retry number `attempt` (from 0): jittered, doubling from `base`.
fn backoff_ms(base: Duration, attempt: u32) -> i64 {
    let base = duration_ms(base).max(1) << attempt.min(10);
    fastrand::i64(base / 2..=base)
}

/// What acquiring a key came to.
enum Acquired {
    Lease(Lease, Attempt),
    Mismatch,
    Wait(Duration),
    Replay(IdempotencyRecord),
}

/// The answer when the store stays contended: ask the client to come back shortly.
fn contended() -> Acquired {
    Acquired::Wait(Duration::from_secs(1))
}

fn attempt_of(record: &IdempotencyRecord, taken_over: bool) -> Attempt {
    Attempt {
        attempt_id: record.attempt_id.clone(),
        created_at_ms: record.created_at_ms,
        taken_over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_shorter_than_a_lease_is_refused() {
        let config = IdempotencyConfig::default().expires_after(Duration::from_secs(30));
        // 30 s of invocation + the 5 s margin do not fit in 30 s of retention.
        assert!(config.check_timeout(Duration::from_secs(30)).is_err());
        assert!(config.check_timeout(Duration::from_secs(25)).is_ok());
    }

    #[test]
    fn a_record_expires_after_its_lease_whatever_the_retention() {
        let config = IdempotencyConfig::default().expires_after(Duration::from_secs(1));
        let lease = Lease {
            token: LeaseToken::generate(),
            until_ms: 1_000_000 + 900_500,
        };
        let expires_at_s = config.expires_at_s(1_000_000, &lease);
        assert!(expires_at_s * 1000 > lease.until_ms, "{expires_at_s}");
        // A long retention is kept as it is.
        let day = IdempotencyConfig::default();
        assert_eq!(
            day.expires_at_s(1_000_000, &lease),
            (1_000_000 + 86_400_000) / 1000
        );
    }
}
