//! A charge's idempotency record, kept on its payment item.
//!
//! The payment's id is derived from the record's key ([`crate::domain::payment_id_for`]), so
//! the charge reads the key's record and the order in one `BatchGetItem` of the payments
//! table, begins with a transaction of two items (the payment with its record, and the
//! order), and records a success with one conditional `UpdateItem` of the payment, fenced on
//! the lease token it carries. The record's attributes on the payment item:
//! `idempotency_pk` (its key), `key_status`, `fingerprint`, `request_id`, `lease_token` (kept
//! once completed: the lease it was completed under) and, while in progress, `lease_until_ms`. Its attempt is the payment, its creation
//! time the payment's; a completed record's result is the payment's view as it is now (so
//! webhooks and reconcile keep no mirror); it never expires.

use super::attributes::{number, s, string, AttributeError, Item};
use super::codec::payment_from_item;
use super::schema::{FINGERPRINT, LEASE_TOKEN, LEASE_UNTIL_MS, REQUEST_ID};
use crate::adapters::encode_view;
use crate::domain::CHARGE_RECORD_NEVER_EXPIRES_S;
use crate::idempotency::{
    Fingerprint, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordState, RecordStatus,
    StoreError,
};

/// The record's status on the payment item (the payment's own is `status`).
pub(super) const KEY_STATUS: &str = "key_status";
/// The record's key on the payment item.
pub(super) const KEY: &str = "idempotency_pk";

/// Adds an in-progress `record`'s attributes to the item of its payment.
pub(super) fn add_record(item: &mut Item, record: &IdempotencyRecord) {
    item.insert(KEY.into(), s(record.key.as_str()));
    item.insert(KEY_STATUS.into(), s(record.status().as_str()));
    item.insert(FINGERPRINT.into(), s(record.fingerprint.as_str()));
    if let Some(request_id) = &record.request_id {
        item.insert(REQUEST_ID.into(), s(request_id));
    }
    if let Some(lease) = record.lease() {
        item.insert(LEASE_TOKEN.into(), s(lease.token.as_str()));
        item.insert(LEASE_UNTIL_MS.into(), super::attributes::n(lease.until_ms));
    }
}

/// The record a payment item holds (`None` for an item written without one).
pub(super) fn record_of(item: &Item) -> Result<Option<IdempotencyRecord>, StoreError> {
    let Ok(status) = string(item, KEY_STATUS) else {
        return Ok(None);
    };
    let key = string(item, KEY).unwrap_or_default();
    let corrupt = |reason: AttributeError| StoreError::Corrupt {
        key: key.clone(),
        reason: reason.to_string(),
    };
    let payment = payment_from_item(item)?;
    let state = match RecordStatus::parse(&status) {
        Some(RecordStatus::InProgress) => RecordState::InProgress {
            lease: Lease {
                token: LeaseToken::from_stored(string(item, LEASE_TOKEN).map_err(corrupt)?),
                until_ms: number(item, LEASE_UNTIL_MS).map_err(corrupt)?,
            },
        },
        Some(RecordStatus::Completed) => RecordState::Completed {
            result: encode_view(&payment)?,
        },
        None => return Err(corrupt(AttributeError::unknown(KEY_STATUS, status))),
    };
    Ok(Some(IdempotencyRecord {
        key: RecordKey::from_stored(key.clone()),
        state,
        fingerprint: Fingerprint::from_stored(string(item, FINGERPRINT).map_err(corrupt)?),
        attempt_id: payment.payment_id,
        created_at_ms: payment.created_at_ms,
        expires_at_s: CHARGE_RECORD_NEVER_EXPIRES_S,
        request_id: string(item, REQUEST_ID).ok(),
    }))
}

/// The update and condition that complete the record held under `lease`, to join a payment
/// update: the clauses to add to its `SET` and `REMOVE` lists, its condition, and the
/// attribute names and values they use.
pub(super) struct Complete<'a> {
    pub(super) lease: &'a LeaseToken,
}

impl Complete<'_> {
    pub(super) const SET: &'static str = "#key_status = :completed";
    /// The lease's token stays on the completed record (its `key_status` says it is no lease
    /// any more): a completion whose answer was lost knows its own write by it.
    pub(super) const REMOVE: [&'static str; 1] = ["#lease_until_ms"];
    pub(super) const CONDITION: &'static str =
        "#lease_token = :mine AND #key_status = :in_progress_key";
    pub(super) const NAMES: [&'static str; 3] = [KEY_STATUS, LEASE_TOKEN, LEASE_UNTIL_MS];

    pub(super) fn values(&self) -> [(&'static str, aws_sdk_dynamodb::types::AttributeValue); 3] {
        [
            (":completed", s(RecordStatus::Completed.as_str())),
            (":mine", s(self.lease.as_str())),
            (":in_progress_key", s(RecordStatus::InProgress.as_str())),
        ]
    }
}

/// Whether an item read back after a refused fenced write still holds `lease` in progress.
pub(super) fn holds_lease(item: Option<&Item>, lease: &LeaseToken) -> bool {
    let in_progress = item
        .and_then(|item| string(item, KEY_STATUS).ok())
        .is_some_and(|status| status == RecordStatus::InProgress.as_str());
    in_progress && token_is(item, lease)
}

/// Whether an item read back after a refused fenced write carries a record completed under
/// `lease`: that completion is this very write's earlier try, whose answer was lost.
pub(super) fn completed_under(item: Option<&Item>, lease: &LeaseToken) -> bool {
    let completed = item
        .and_then(|item| string(item, KEY_STATUS).ok())
        .is_some_and(|status| status == RecordStatus::Completed.as_str());
    completed && token_is(item, lease) && !crate::idempotency::own_writes_forgotten()
}

fn token_is(item: Option<&Item>, lease: &LeaseToken) -> bool {
    item.and_then(|item| string(item, LEASE_TOKEN).ok())
        .is_some_and(|token| token == lease.as_str())
}
