//! Scheduled event → one bounded reconcile run → its report (also logged).

use payonce::ports::{ChargeStore, InflightScan, OperationStore, OrderStore, Psp, RefundStore};
use payonce::service::reconcile::{ReconcileReport, Reconciler};

/// Time kept back from the invocation's deadline: one attempt may take a lookup, a fence, a
/// cancel or a re-sent create with its busy retries, and its write.
const DEADLINE_RESERVE_MS: i64 = 60_000;

/// Handles one scheduled invocation; the event's content does not matter. With the invocation's
/// deadline (epoch milliseconds) the run stops taking attempts in time to finish the last one;
/// without a plausible one (local tools pass a duration) it runs for its configured bound.
pub async fn handle<
    S: ChargeStore + RefundStore + OperationStore + OrderStore + InflightScan,
    P: Psp,
>(
    reconciler: &Reconciler<S, P>,
    _event: serde_json::Value,
    deadline_ms: Option<i64>,
) -> Result<ReconcileReport, payonce::idempotency::StoreError> {
    let now_ms = payonce::clock::Clock::now_ms(&payonce::clock::SystemClock);
    let report = match deadline_ms.filter(|d| *d > now_ms) {
        Some(deadline_ms) => {
            reconciler
                .run_until(deadline_ms - DEADLINE_RESERVE_MS)
                .await?
        }
        None => reconciler.run().await?,
    };
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
        out_of_time = report.out_of_time,
        "reconcile run"
    );
    Ok(report)
}
