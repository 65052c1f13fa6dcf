//! Cleanup: deletes expired idempotency and webhook-dedup records that TTL has not
//! removed yet (TTL can lag by ~48 h), conditionally — never a record holding a live lease —
//! in bounded runs that checkpoint their cursor, so an interrupted sweep resumes where it stopped.

use crate::idempotency::StoreError;
use crate::ports::ExpiredSweep;
use serde::Serialize;

/// Tunables of cleanup.
#[derive(Debug, Clone)]
pub struct CleanupConfig {
    /// Items scanned per page.
    pub page_size: u32,
    /// Pages per run.
    pub max_pages: u32,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        Self {
            page_size: 200,
            max_pages: 100,
        }
    }
}

impl CleanupConfig {
    /// Defaults overridden by `CLEANUP_PAGE_SIZE`, `CLEANUP_MAX_PAGES`.
    pub fn from_env() -> Result<Self, crate::config::ConfigError> {
        let d = Self::default();
        Ok(Self {
            page_size: crate::config::number("CLEANUP_PAGE_SIZE", d.page_size)?,
            max_pages: crate::config::number("CLEANUP_MAX_PAGES", d.max_pages)?,
        })
    }
}

/// What one cleanup run did (returned by the function and logged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CleanupReport {
    /// Pages scanned.
    pub pages: u32,
    /// Idempotency records deleted.
    pub deleted_records: u32,
    /// Webhook dedup records deleted.
    pub deleted_events: u32,
    /// Expired on scan but not deleted (renewed or leased meanwhile).
    pub skipped: u32,
    /// Whether the sweep reached the end of the table (false: the next run resumes).
    pub finished: bool,
}

/// Runs one bounded sweep from the saved checkpoint.
pub async fn sweep<S: ExpiredSweep + ?Sized>(
    store: &S,
    config: &CleanupConfig,
) -> Result<CleanupReport, StoreError> {
    let mut report = CleanupReport::default();
    let mut cursor = store.load_checkpoint().await?;
    if cursor.is_some() {
        tracing::info!("resuming an interrupted cleanup sweep");
    }
    while report.pages < config.max_pages {
        let (keys, next) = store.scan_expired(config.page_size, cursor.take()).await?;
        report.pages += 1;
        for key in keys {
            match store.delete_expired(&key).await? {
                true if key.starts_with("webhook#") => report.deleted_events += 1,
                true => report.deleted_records += 1,
                false => report.skipped += 1,
            }
        }
        // Saved after each page: a crash re-scans at most one page (deletes are idempotent).
        store.save_checkpoint(next.as_deref()).await?;
        cursor = next;
        if cursor.is_none() {
            report.finished = true;
            break;
        }
    }
    tracing::info!(
        pages = report.pages,
        deleted_records = report.deleted_records,
        deleted_events = report.deleted_events,
        skipped = report.skipped,
        finished = report.finished,
        "cleanup run"
    );
    Ok(report)
}
