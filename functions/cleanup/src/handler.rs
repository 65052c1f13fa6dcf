//! Scheduled event → one bounded, checkpointed sweep → its report (logged by the sweep).

use payonce::ports::ExpiredSweep;
use payonce::service::cleanup::{sweep, CleanupConfig, CleanupReport};

/// Handles one scheduled invocation; the event's content does not matter.
pub async fn handle<S: ExpiredSweep>(
    store: &S,
    config: &CleanupConfig,
    _event: serde_json::Value,
) -> Result<CleanupReport, payonce::idempotency::StoreError> {
    sweep(store, config).await
}
