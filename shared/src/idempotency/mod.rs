//! Payment-agnostic idempotency for Lambda handlers on DynamoDB.
//!
//! A handler wraps its work with [`Idempotency::run`]: the first request with a key claims a
//! record and runs the work under a lease; a duplicate is answered from the record with one
//! store request; a different request under the same key is a mismatch; a crashed invocation's
//! lease lapses and the next request takes the attempt over, keeping its identity.
//!
//! Backends implement [`IdempotencyStore`]: DynamoDB in `adapters::dynamodb`, the embedded
//! store in `adapters::memory`. Both pass one conformance suite.

#[cfg(feature = "runtime")]
pub mod events;
mod fingerprint;
mod key;
#[cfg(feature = "http")]
pub mod layer;
mod record;
mod run;
mod store;

pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, InvalidKey, RecordKey, MAX_KEY_LEN};
pub use record::{
    check_completed_size, check_completed_size_named, stored_request_id, CompletedNames,
    IdempotencyRecord, Lease, LeaseToken, RecordState, RecordStatus, MAX_ATTEMPT_ID_BYTES,
    MAX_ITEM_BYTES, MAX_REQUEST_ID_BYTES,
};
pub use run::{
    decide, Attempt, Decision, Idempotency, IdempotencyConfig, Outcome, RunError, RunRequest,
};
pub(crate) use store::own_writes_forgotten;
pub use store::{Claim, ClaimOutcome, IdempotencyStore, StoreError, TakeoverOutcome};

#[cfg(feature = "runtime")]
pub use events::{EventError, IdempotentEvents};
#[cfg(feature = "http")]
pub use layer::{IdempotencyLayer, Idempotent};
