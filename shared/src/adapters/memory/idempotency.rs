//! The embedded idempotency store: a mutex-guarded map with DynamoDB's conditions.

use crate::adapters::faults::Faults;
use crate::clock::{system_clock, SharedClock};
use crate::idempotency::{
    check_completed_size, Claim, ClaimOutcome, IdempotencyRecord, IdempotencyStore, Lease,
    LeaseToken, RecordKey, RecordState, StoreError, TakeoverOutcome,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// In-memory [`IdempotencyStore`]. Expired records stay until overwritten, as with a TTL
/// that has not run yet, and read as absent.
#[derive(Debug, Clone)]
pub struct MemoryIdempotencyStore {
    records: Arc<Mutex<HashMap<RecordKey, IdempotencyRecord>>>,
    clock: SharedClock,
    faults: Faults,
}

impl Default for MemoryIdempotencyStore {
    fn default() -> Self {
        Self::new(system_clock())
    }
}

impl MemoryIdempotencyStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            records: Arc::default(),
            clock,
            faults: Faults::none(),
        }
    }

    /// The store's fault-injection hook.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The record as stored, expired or not (for tests and diagnostics).
    pub fn raw(&self, key: &RecordKey) -> Option<IdempotencyRecord> {
        self.lock().get(key).cloned()
    }

    /// Every stored record, expired or not.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the store holds no record at all.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RecordKey, IdempotencyRecord>> {
        // A panic while holding the lock cannot leave a record half-written (each operation
        // replaces whole values), so a poisoned map is still consistent.
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_faults(&self, key: &RecordKey) -> Result<(), StoreError> {
        if self.faults.take_conflict() {
            return Err(StoreError::Conflict {
                item: key.to_string(),
            });
        }
        Ok(())
    }
}

/// The fencing condition shared by takeover, complete and release: `#lease_token = :mine`.
fn holds_lease(record: Option<&IdempotencyRecord>, token: &LeaseToken) -> bool {
    record
        .and_then(IdempotencyRecord::lease)
        .is_some_and(|lease| &lease.token == token)
}

#[async_trait]
impl IdempotencyStore for MemoryIdempotencyStore {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.check_faults(&claim.key)?;
        let now_ms = self.now_ms();
        let mut records = self.lock();
        if let Some(existing) = records.get(&claim.key) {
            if !existing.is_expired_at(now_ms) {
                return Ok(ClaimOutcome::Existing(existing.clone()));
            }
        }
        let record = IdempotencyRecord {
            key: claim.key.clone(),
            state: RecordState::InProgress {
                lease: Lease {
                    token: claim.lease_token.clone(),
                    until_ms: claim.lease_until_ms,
                },
            },
            fingerprint: claim.fingerprint.clone(),
            attempt_id: claim.attempt_id.clone(),
            created_at_ms: now_ms,
            expires_at_s: claim.expires_at_s,
        };
        records.insert(claim.key.clone(), record.clone());
        Ok(ClaimOutcome::Claimed(record))
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<TakeoverOutcome, StoreError> {
        self.check_faults(key)?;
        let mut records = self.lock();
        let current = records.get_mut(key);
        if !holds_lease(current.as_deref(), seen) {
            return Ok(TakeoverOutcome::Lost(current.map(|r| r.clone())));
        }
        let Some(record) = current else {
            return Ok(TakeoverOutcome::Lost(None));
        };
        record.state = RecordState::InProgress {
            lease: lease.clone(),
        };
        Ok(TakeoverOutcome::TakenOver(record.clone()))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        lease: &LeaseToken,
        result: &str,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        check_completed_size(key, result)?;
        self.check_faults(key)?;
        let mut records = self.lock();
        match records.get_mut(key) {
            Some(record) if holds_lease(Some(record), lease) => {
                record.state = RecordState::Completed {
                    result: result.to_owned(),
                };
                record.expires_at_s = expires_at_s;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost { key: key.clone() }),
        }
    }

    async fn release(&self, key: &RecordKey, lease: &LeaseToken) -> Result<(), StoreError> {
        self.check_faults(key)?;
        let mut records = self.lock();
        if !holds_lease(records.get(key), lease) {
            return Err(StoreError::LeaseLost { key: key.clone() });
        }
        records.remove(key);
        Ok(())
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.check_faults(key)?;
        let now_ms = self.now_ms();
        Ok(self
            .lock()
            .get(key)
            .filter(|r| !r.is_expired_at(now_ms))
            .cloned())
    }
}
