//! The embedded idempotency store: a mutex-guarded map with DynamoDB's conditions.
//!
//! Its lock also guards everything else the embedded adapters keep (webhook dedup records,
//! the cleanup checkpoint, orders and payments): DynamoDB's transactions span the idempotency
//! table and the payments table, so the embedded twin holds one lock across all of them.

use super::tables::{MemoryTables, SharedTables};
use crate::adapters::faults::Faults;
use crate::clock::{system_clock, SharedClock};
use crate::idempotency::{
    check_completed_size, Claim, ClaimOutcome, IdempotencyRecord, IdempotencyStore, Lease,
    LeaseToken, RecordKey, RecordState, StoreError, TakeoverOutcome,
};
#[cfg(feature = "payments")]
use crate::ports::ExpiredSweep;
use async_trait::async_trait;
use std::sync::MutexGuard;

/// In-memory [`IdempotencyStore`]. Expired records stay until overwritten, as with a TTL
/// that has not run yet, and read as absent.
///
/// Clones share the same records; so does a
/// `MemoryPaymentStore` built on it (feature `payments`), as the DynamoDB adapters
/// share the idempotency table.
#[derive(Debug, Clone)]
pub struct MemoryIdempotencyStore {
    tables: SharedTables,
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
            tables: SharedTables::default(),
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
        self.lock().records.get(key).cloned()
    }

    /// Every stored record, expired or not.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether the store holds no record at all.
    pub fn is_empty(&self) -> bool {
        self.lock().records.is_empty()
    }

    /// The shared tables, locked: one lock for every item, so a multi-item write is atomic.
    pub(crate) fn lock(&self) -> MutexGuard<'_, MemoryTables> {
        self.tables.lock()
    }

    fn check_faults(&self, key: &RecordKey) -> Result<(), StoreError> {
        if self.faults.take_conflict() {
            return Err(StoreError::Conflict {
                item: key.to_string(),
            });
        }
        if self.faults.take_backend_failure() {
            return Err(StoreError::Backend {
                operation: "an injected fault",
                source: "the request failed on the way (injected)".into(),
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
        let mut tables = self.lock();
        let records = &mut tables.records;
        if let Some(existing) = records.get(&claim.key) {
            if !existing.is_expired_at(now_ms) {
                return Ok(ClaimOutcome::refused(claim, existing.clone()));
            }
        }
        let record = claim.record(now_ms);
        records.insert(claim.key.clone(), record.clone());
        Ok(ClaimOutcome::Claimed(record))
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        expires_at_s: i64,
    ) -> Result<TakeoverOutcome, StoreError> {
        self.check_faults(key)?;
        let mut tables = self.lock();
        let current = tables.records.get_mut(key);
        if !holds_lease(current.as_deref(), seen) {
            return Ok(TakeoverOutcome::refused(lease, current.map(|r| r.clone())));
        }
        let Some(record) = current else {
            return Ok(TakeoverOutcome::Lost(None));
        };
        record.state = RecordState::InProgress {
            lease: lease.clone(),
        };
        record.expires_at_s = expires_at_s;
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
        let mut tables = self.lock();
        let tables = &mut *tables;
        match tables.records.get_mut(key) {
            Some(record) if holds_lease(Some(record), lease) => {
                record.state = RecordState::Completed {
                    result: result.to_owned(),
                };
                record.expires_at_s = expires_at_s;
                tables.completed_by.insert(key.clone(), lease.clone());
                Ok(())
            }
            // This very completion's earlier try (its answer lost): done.
            Some(record)
                if matches!(&record.state, RecordState::Completed { result: stored } if stored == result)
                    && tables.completed_by.get(key) == Some(lease)
                    && !crate::idempotency::own_writes_forgotten() =>
            {
                Ok(())
            }
            _ => Err(StoreError::LeaseLost { key: key.clone() }),
        }
    }

    async fn release(&self, key: &RecordKey, lease: &LeaseToken) -> Result<(), StoreError> {
        self.check_faults(key)?;
        let mut tables = self.lock();
        let records = &mut tables.records;
        match records.get(key) {
            // Gone: swept once expired.
            None if !crate::idempotency::own_writes_forgotten() => return Ok(()),
            current if !holds_lease(current, lease) => {
                return Err(StoreError::LeaseLost { key: key.clone() })
            }
            _ => {}
        }
        // Handed back, not deleted: the attempt id and fingerprint stay for the retry.
        if let Some(RecordState::InProgress { lease }) = records.get_mut(key).map(|r| &mut r.state)
        {
            lease.until_ms = Lease::RELEASED_UNTIL_MS;
        }
        Ok(())
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.check_faults(key)?;
        let now_ms = self.now_ms();
        Ok(self
            .lock()
            .records
            .get(key)
            .filter(|r| !r.is_expired_at(now_ms))
            .cloned())
    }
}

/// Every item of the idempotency "table" as the sweep sees it: its key and whether it has
/// expired at `now_ms` (records and webhook dedup records share one key space, as in DynamoDB).
#[cfg(feature = "payments")]
fn swept_items(tables: &MemoryTables, now_ms: i64) -> Vec<(&str, bool)> {
    let now_s = now_ms.div_euclid(1000);
    tables
        .records
        .iter()
        .map(|(key, record)| (key.as_str(), record.is_expired_at(now_ms)))
        .chain(
            tables
                .events
                .iter()
                .map(|(key, expires_at_s)| (key.as_str(), *expires_at_s < now_s)),
        )
        .chain(
            tables
                .counters
                .iter()
                .map(|(key, counter)| (key.as_str(), counter.expires_at_s < now_s)),
        )
        .collect()
}

#[cfg(feature = "payments")]
#[async_trait]
impl ExpiredSweep for MemoryIdempotencyStore {
    async fn scan_expired(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let now_ms = self.now_ms();
        let tables = self.lock();
        // Keys in order, so the cursor (the last key of a page) is a position that survives
        // deletes between pages; like a DynamoDB scan, `limit` counts the items read, expired
        // or not.
        let mut page: Vec<(&str, bool)> = swept_items(&tables, now_ms)
            .into_iter()
            .filter(|(key, _)| cursor.as_deref().is_none_or(|after| *key > after))
            .collect();
        page.sort_unstable_by(|a, b| a.0.cmp(b.0));
        // DynamoDB refuses a limit of 0; a page of one still moves the sweep forward.
        let page_len = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
        let next = if page.len() > page_len {
            page.get(page_len - 1).map(|(key, _)| (*key).to_owned())
        } else {
            None
        };
        page.truncate(page_len);
        let expired = page
            .into_iter()
            .filter(|(_, expired)| *expired)
            .map(|(key, _)| key.to_owned())
            .collect();
        Ok((expired, next))
    }

    async fn delete_expired(&self, key: &str) -> Result<bool, StoreError> {
        let now_ms = self.now_ms();
        let mut tables = self.lock();
        let record_key = RecordKey::from_stored(key.to_owned());
        if let Some(record) = tables.records.get(&record_key) {
            // DynamoDB's condition: still expired AND no lease that is still running.
            let leased = record.lease().is_some_and(|lease| lease.until_ms >= now_ms);
            if !record.is_expired_at(now_ms) || leased {
                return Ok(false);
            }
            tables.records.remove(&record_key);
            return Ok(true);
        }
        if let Some(counter) = tables.counters.get(key) {
            if counter.expires_at_s < now_ms.div_euclid(1000) {
                tables.counters.remove(key);
                return Ok(true);
            }
            return Ok(false);
        }
        match tables.events.get(key) {
            Some(expires_at_s) if *expires_at_s < now_ms.div_euclid(1000) => {
                tables.events.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn load_checkpoint(&self) -> Result<Option<String>, StoreError> {
        Ok(self.lock().checkpoint.clone())
    }

    async fn save_checkpoint(&self, cursor: Option<&str>) -> Result<(), StoreError> {
        self.lock().checkpoint = cursor.map(str::to_owned);
        Ok(())
    }
}
