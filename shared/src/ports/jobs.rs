//! The scheduled jobs' reads: attempts due a check (reconcile) and expired records (cleanup).

use crate::idempotency::StoreError;
use async_trait::async_trait;

/// Finds attempts still in `processing` whose next check is due (the sparse GSI; eventually
/// consistent, so callers re-read each one consistently), and schedules their next check.
#[async_trait]
pub trait InflightScan: Send + Sync {
    /// Up to `limit` payment ids whose check is due at `due_at_ms`, most overdue first, after
    /// `cursor`; with the cursor to continue from, if there are more.
    async fn list_inflight(
        &self,
        due_at_ms: i64,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError>;

    /// Moves the next check of `payment_id` to `check_at_ms`, if it is still processing.
    async fn defer_check(&self, payment_id: &str, check_at_ms: i64) -> Result<(), StoreError>;
}

/// Sweeps records that expired but that TTL has not deleted yet (the cleanup job).
#[async_trait]
pub trait ExpiredSweep: Send + Sync {
    /// Scans one page of up to `limit` items after `cursor`; returns the keys of the expired
    /// ones and the cursor of the next page, if any.
    async fn scan_expired(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError>;
    /// Deletes `key` if it is still expired and holds no live lease; false if it did not.
    async fn delete_expired(&self, key: &str) -> Result<bool, StoreError>;
    /// The cursor an interrupted sweep stopped at.
    async fn load_checkpoint(&self) -> Result<Option<String>, StoreError>;
    /// Saves (or, with `None`, clears) the sweep's cursor.
    async fn save_checkpoint(&self, cursor: Option<&str>) -> Result<(), StoreError>;
}
