//! The store port: the five operations a backend implements. All decisions (mismatch,
//! replay, lease, takeover) live in the layer above; a backend only makes each operation
//! atomic and conditional.

use super::{Fingerprint, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordState};
use async_trait::async_trait;

/// A request to claim a key for a new attempt.
#[derive(Clone, Debug)]
pub struct Claim {
    /// The record to create.
    pub key: RecordKey,
    /// Fingerprint of the request.
    pub fingerprint: Fingerprint,
    /// Identity of the new attempt (kept across takeovers).
    pub attempt_id: String,
    /// Fencing token of the claimer's lease.
    pub lease_token: LeaseToken,
    /// When the claimer's lease lapses, epoch milliseconds.
    pub lease_until_ms: i64,
    /// When the record expires, epoch seconds.
    pub expires_at_s: i64,
    /// The id of the request that claims the key (its `x-request-id`), when the caller has one:
    /// a stored problem replayed later names it as its `instance`.
    pub request_id: Option<String>,
}

impl Claim {
    /// The in-progress record this claim creates at `now_ms`, its lease held by the claimer.
    pub fn record(&self, now_ms: i64) -> IdempotencyRecord {
        IdempotencyRecord {
            key: self.key.clone(),
            state: RecordState::InProgress {
                lease: Lease {
                    token: self.lease_token.clone(),
                    until_ms: self.lease_until_ms,
                },
            },
            fingerprint: self.fingerprint.clone(),
            attempt_id: self.attempt_id.clone(),
            created_at_ms: now_ms,
            expires_at_s: self.expires_at_s,
            request_id: self.request_id.clone(),
        }
    }
}

/// What a claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The record was absent (or expired) and is now ours, `IN_PROGRESS`.
    Claimed(IdempotencyRecord),
    /// A live record exists; it is returned as it was, and nothing was written.
    Existing(IdempotencyRecord),
}

impl ClaimOutcome {
    /// What a refused claim of `claim` found in `existing`. A record holding the claim's own
    /// lease is this very claim: its answer was lost, and the SDK's retry met it. That counts as
    /// claimed, not as someone else's request in progress.
    pub fn refused(claim: &Claim, existing: IdempotencyRecord) -> Self {
        if existing
            .lease()
            .is_some_and(|lease| lease.token == claim.lease_token)
            && !own_writes_forgotten()
        {
            Self::Claimed(existing)
        } else {
            Self::Existing(existing)
        }
    }
}

/// What a takeover found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakeoverOutcome {
    /// The lease is ours now; the record as it stands after the takeover.
    TakenOver(IdempotencyRecord),
    /// Someone else moved first; the record as it stands now, if it still exists.
    Lost(Option<IdempotencyRecord>),
}

impl TakeoverOutcome {
    /// What a refused takeover to `lease` found in `current`: a record that holds exactly that
    /// lease was taken over by this very request (its answer was lost and the retry met it).
    pub fn refused(lease: &Lease, current: Option<IdempotencyRecord>) -> Self {
        match current {
            Some(record) if record.lease() == Some(lease) && !own_writes_forgotten() => {
                Self::TakenOver(record)
            }
            other => Self::Lost(other),
        }
    }
}

/// The planted hole that forgets a write's own earlier try (see
/// [`crate::mutations::Mutation::LostAnswerIsARefusal`]).
pub(crate) fn own_writes_forgotten() -> bool {
    crate::mutations::active(crate::mutations::Mutation::LostAnswerIsARefusal)
}

/// Errors of a store; backend errors keep their source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A fenced write was refused: the lease token is no longer the record's.
    #[error("the lease on {key} is no longer held by this invocation")]
    LeaseLost {
        /// The record concerned.
        key: RecordKey,
    },
    /// A concurrent transaction touched the same item (DynamoDB `TransactionConflict`); retryable.
    #[error("a concurrent transaction touched {item}")]
    Conflict {
        /// The item concerned (a record key, an order or a payment).
        item: String,
    },
    /// The record would exceed the item size limit; nothing was written.
    #[error("the idempotency record {key} would be {size_bytes} bytes, over the {limit_bytes}-byte item limit; store a smaller result")]
    ItemTooLarge {
        /// The record concerned.
        key: RecordKey,
        /// Its computed size.
        size_bytes: usize,
        /// The limit.
        limit_bytes: usize,
    },
    /// A stored item could not be read as a record.
    #[error("the stored idempotency record {key} is malformed: {reason}")]
    Corrupt {
        /// The record concerned.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend refused the request as such (it is malformed, the caller lacks permission,
    /// the table is missing): sending it again is refused again until someone changes the
    /// request or the deployment.
    #[error("the idempotency store refused {operation}")]
    Refused {
        /// The store operation that was refused.
        operation: &'static str,
        /// The backend's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backend failed (network, throttling, a server error...).
    #[error("the idempotency store failed during {operation}")]
    Backend {
        /// The store operation that failed.
        operation: &'static str,
        /// The backend's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A backend for idempotency records.
///
/// Every method is one atomic, conditional request. Time comes from the store's own clock
/// ([`IdempotencyStore::now_ms`]) so conditions and the layer above agree on "now".
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// The store's notion of now, in epoch milliseconds.
    fn now_ms(&self) -> i64;

    /// Creates the record if it is absent or expired; otherwise returns the existing one
    /// and writes nothing.
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError>;

    /// Moves the lease of an `IN_PROGRESS` record from `seen` to `lease` and sets its expiry to
    /// `expires_at_s` (never before the new lease ends), changing nothing else: the attempt
    /// identity and the fingerprint stay.
    async fn take_over(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &super::Lease,
        expires_at_s: i64,
    ) -> Result<TakeoverOutcome, StoreError>;

    /// Marks the record `COMPLETED` with `result`, clears the lease and sets a new expiry;
    /// refused with [`StoreError::LeaseLost`] unless `lease` is still the record's token.
    async fn complete(
        &self,
        key: &RecordKey,
        lease: &LeaseToken,
        result: &str,
        expires_at_s: i64,
    ) -> Result<(), StoreError>;

    /// Hands the lease back after a failure: the record stays `IN_PROGRESS` with its attempt
    /// id and fingerprint, its lease ended ([`Lease::RELEASED_UNTIL_MS`](super::Lease::RELEASED_UNTIL_MS)),
    /// so the next request with the key takes the attempt over at once, under the same id.
    /// Refused with [`StoreError::LeaseLost`] unless `lease` is still the record's token.
    async fn release(&self, key: &RecordKey, lease: &LeaseToken) -> Result<(), StoreError>;

    /// Reads the record consistently; an expired record reads as `None`.
    async fn get(&self, key: &RecordKey) -> Result<Option<IdempotencyRecord>, StoreError>;
}

impl StoreError {
    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Conflict { .. } | Self::Backend { .. })
    }
}

/// How a store failure is reported to the Lambda runtime: a retryable or non-retryable
/// `error_type`, and the message with its source chain.
#[cfg(feature = "runtime")]
impl From<StoreError> for lambda_runtime::Diagnostic {
    fn from(error: StoreError) -> Self {
        let kind = if error.is_retryable() {
            "payonce.Retryable"
        } else {
            "payonce.NonRetryable"
        };
        Self {
            error_type: kind.to_owned(),
            error_message: crate::error_chain(&error),
        }
    }
}
