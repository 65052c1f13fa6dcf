//! Scheduled event → one bounded reconcile run → its report (also logged).

use payonce::idempotency::IdempotencyStore;
use payonce::ports::{ChargeStore, InflightScan, Psp};
use payonce::service::reconcile::{ReconcileReport, Reconciler};

/// Handles one scheduled invocation; the event's content does not matter.
pub async fn handle<S: ChargeStore + InflightScan, I: IdempotencyStore, P: Psp>(
    reconciler: &Reconciler<S, I, P>,
    _event: serde_json::Value,
) -> Result<ReconcileReport, payonce::idempotency::StoreError> {
    let report = reconciler.run().await?;
    tracing::info!(
        examined = report.examined,
        succeeded = report.succeeded,
        declined = report.declined,
        abandoned = report.abandoned,
        pending = report.pending,
        skipped = report.skipped,
        already_settled = report.already_settled,
        errors = report.errors,
        more = report.cursor.is_some(),
        "reconcile run"
    );
    Ok(report)
}
