//! The idempotency record: what is stored under a [`RecordKey`] and how big it may get.

use super::{Fingerprint, RecordKey, StoreError};
use std::fmt;

/// DynamoDB's item size limit (400 KB), which every store enforces alike.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// Upper bound for the stored size of one number attribute (DynamoDB: up to 21 bytes).
const NUMBER_ATTRIBUTE_BYTES: usize = 21;

/// The lifecycle state of a record. `EXPIRED` is never stored: it is derived from
/// `expires_at_s` on read, and an expired record is treated as absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordStatus {
    /// An invocation holds (or held) a lease and is doing the work.
    InProgress,
    /// The work finished and its result is stored.
    Completed,
}

impl RecordStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "IN_PROGRESS",
            Self::Completed => "COMPLETED",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "IN_PROGRESS" => Some(Self::InProgress),
            "COMPLETED" => Some(Self::Completed),
            _ => None,
        }
    }
}

/// The fencing token of one lease: only its holder may complete or release the record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// A fresh, unguessable token.
    pub fn generate() -> Self {
        Self(crate::ids::new_uuid().to_string())
    }

    /// Wraps a token read back from the store.
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }

    /// The token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lease currently held on a record: its token and when it lapses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Fencing token.
    pub token: LeaseToken,
    /// Epoch milliseconds after which another invocation may take the record over.
    pub until_ms: i64,
}

impl Lease {
    /// `until_ms` of a lease its holder gave back on purpose, as opposed to one that lapsed
    /// because its holder died: the charge path when the PSP was never reached, the generic
    /// layer when its work failed (the attempt id stays for the retry).
    pub const RELEASED_UNTIL_MS: i64 = 0;

    /// Whether the holder gave the lease back on purpose (see [`Lease::RELEASED_UNTIL_MS`]).
    pub fn was_released(&self) -> bool {
        self.until_ms == Self::RELEASED_UNTIL_MS
    }
}

/// Where a record stands, with what each state carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// An invocation holds (or held, if lapsed) this lease and is doing the work.
    InProgress {
        /// The current lease.
        lease: Lease,
    },
    /// The work finished; its result (JSON) is stored.
    Completed {
        /// The stored result.
        result: String,
    },
}

/// One stored idempotency record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// `<scope>#<user>#<key>`.
    pub key: RecordKey,
    /// In progress (with its lease) or completed (with its result).
    pub state: RecordState,
    /// Fingerprint of the request that created the record.
    pub fingerprint: Fingerprint,
    /// The attempt's identity, chosen at the first claim and never rewritten (e.g. the
    /// payment id, from which the PSP idempotency key is derived).
    pub attempt_id: String,
    /// Epoch milliseconds of the first claim.
    pub created_at_ms: i64,
    /// Epoch seconds after which the record reads as absent (the DynamoDB TTL attribute).
    pub expires_at_s: i64,
    /// The id of the request that claimed the key (see [`super::Claim::request_id`]); never
    /// rewritten, like the attempt. `None` when the claimer gave none.
    pub request_id: Option<String>,
}

impl IdempotencyRecord {
    /// The state's stored name.
    pub fn status(&self) -> RecordStatus {
        match self.state {
            RecordState::InProgress { .. } => RecordStatus::InProgress,
            RecordState::Completed { .. } => RecordStatus::Completed,
        }
    }

    /// The lease, while in progress.
    pub fn lease(&self) -> Option<&Lease> {
        match &self.state {
            RecordState::InProgress { lease } => Some(lease),
            RecordState::Completed { .. } => None,
        }
    }

    /// Whether the record has expired at `now_ms` (and so must be treated as absent).
    pub fn is_expired_at(&self, now_ms: i64) -> bool {
        self.expires_at_s < now_ms.div_euclid(1000)
    }
}

/// Longest attempt identity a record may hold, in bytes.
pub const MAX_ATTEMPT_ID_BYTES: usize = 255;

/// Longest request id a record may hold, in bytes (longer ones are cut when claimed).
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// `id` as a record keeps it: at most [`MAX_REQUEST_ID_BYTES`] (cut at a character boundary),
/// `None` when empty.
pub fn stored_request_id(id: &str) -> Option<String> {
    let mut end = id.len().min(MAX_REQUEST_ID_BYTES);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    (end > 0).then(|| id[..end].to_owned())
}

/// What a completed record holds instead of a result too large to store: the fact, and the size.
/// A stored result is always JSON, and no JSON text begins with `!`, so no result reads as one.
const TOO_LARGE_PREFIX: &str = "!too-large ";

/// The stored form of "completed, its result of `size_bytes` too large to keep".
pub(crate) fn too_large_marker(size_bytes: usize) -> String {
    format!("{TOO_LARGE_PREFIX}{size_bytes}")
}

/// The size a stored result of [`too_large_marker`] names, or `None` for a real result.
pub(crate) fn too_large_size(stored: &str) -> Option<usize> {
    stored.strip_prefix(TOO_LARGE_PREFIX)?.parse().ok()
}

/// Longest lease token a record may hold, in bytes (tokens are UUIDs, 36 bytes).
const MAX_LEASE_TOKEN_BYTES: usize = 64;

/// The names a completed record's attributes are stored under, where a store may rename them.
#[derive(Debug, Clone, Copy)]
pub struct CompletedNames<'a> {
    /// The partition key.
    pub key: &'a str,
    /// `COMPLETED`.
    pub status: &'a str,
    /// The request's fingerprint.
    pub validation: &'a str,
    /// The result.
    pub data: &'a str,
    /// The TTL attribute.
    pub expiry: &'a str,
}

impl CompletedNames<'static> {
    /// payonce's own layout.
    pub const DEFAULT: Self = Self {
        key: "pk",
        status: "status",
        validation: "fingerprint",
        data: "result",
        expiry: "expires_at",
    };
}

/// Refuses, before any write, a result that would make the completed record exceed
/// [`MAX_ITEM_BYTES`] in payonce's own layout; see [`check_completed_size_named`].
pub fn check_completed_size(key: &RecordKey, result: &str) -> Result<(), StoreError> {
    check_completed_size_named(key, result, &CompletedNames::DEFAULT)
}

/// Refuses, before any write, a result that would make the completed record, its attributes
/// named `names`, exceed [`MAX_ITEM_BYTES`]. Counts as DynamoDB does (attribute names plus
/// values), taking the largest possible attempt id, request id, lease token (kept on the
/// completed record) and number sizes, so what passes here always fits.
pub fn check_completed_size_named(
    key: &RecordKey,
    result: &str,
    names: &CompletedNames<'_>,
) -> Result<(), StoreError> {
    let strings = [
        (names.key, key.as_str().len()),
        (names.status, RecordStatus::Completed.as_str().len()),
        (names.validation, 64),
        ("attempt_id", MAX_ATTEMPT_ID_BYTES),
        ("request_id", MAX_REQUEST_ID_BYTES),
        ("lease_token", MAX_LEASE_TOKEN_BYTES),
        (names.data, result.len()),
    ];
    let numbers = ["created_at_ms", names.expiry];
    let size_bytes = strings
        .iter()
        .map(|(name, len)| name.len() + len)
        .sum::<usize>()
        + numbers
            .iter()
            .map(|name| name.len() + NUMBER_ATTRIBUTE_BYTES)
            .sum::<usize>();
    if size_bytes > MAX_ITEM_BYTES {
        return Err(StoreError::ItemTooLarge {
            key: key.clone(),
            size_bytes,
            limit_bytes: MAX_ITEM_BYTES,
        });
    }
    Ok(())
}
