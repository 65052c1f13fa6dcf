//! Scheduled event → one bounded reconcile run → its report (also logged); a batch of requests
//! from the reconcile-request queue (SQS) → each payment they name reconciled now.

use payonce::ports::{ChargeStore, InflightScan, OperationStore, OrderStore, Psp, RefundStore};
use payonce::service::reconcile::{ReconcileReport, Reconciler};

/// Time kept back from the invocation's deadline: one attempt may take a lookup, a fence, a
/// cancel or a re-sent create with its busy retries, and its write.
const DEADLINE_RESERVE_MS: i64 = 60_000;

/// Why an invocation failed (Lambda retries it: the schedule's next run, or SQS redelivering
/// the requests).
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// The store failed before the run could list anything.
    #[error(transparent)]
    Store(#[from] payonce::idempotency::StoreError),
    /// Some requested payments could not be reconciled (the store or the PSP failed).
    #[error("{0} requested payments could not be reconciled")]
    Requests(u32),
}

/// The bodies of an SQS event's records, if `event` is one (`Records` from `aws:sqs`).
fn sqs_bodies(event: &serde_json::Value) -> Option<Vec<&str>> {
    let records = event.get("Records")?.as_array()?;
    records
        .iter()
        .map(|record| {
            (record["eventSource"].as_str() == Some("aws:sqs"))
                .then(|| record["body"].as_str())
                .flatten()
        })
        .collect()
}

/// Handles one invocation. A batch of reconcile requests (an SQS event) reconciles each payment
/// they name; it fails, so SQS delivers it again, when one could not be (the scheduled run
/// looks at that payment too). Any other event is a scheduled run, whatever its content: with
/// the invocation's deadline (epoch milliseconds) it stops taking attempts in time to finish
/// the last one; without a plausible one (local tools pass a duration) it runs for its
/// configured bound.
pub async fn handle<
    S: ChargeStore + RefundStore + OperationStore + OrderStore + InflightScan,
    P: Psp,
>(
    reconciler: &Reconciler<S, P>,
    event: serde_json::Value,
    deadline_ms: Option<i64>,
) -> Result<ReconcileReport, HandleError> {
    if let Some(bodies) = sqs_bodies(&event) {
        let report = reconciler.reconcile_requested(bodies).await;
        tracing::info!(
            requested = report.examined,
            succeeded = report.succeeded,
            declined = report.declined,
            pending = report.pending,
            skipped = report.skipped,
            already_settled = report.already_settled,
            errors = report.errors,
            "reconcile on request"
        );
        return match report.errors {
            0 => Ok(report),
            failed => Err(HandleError::Requests(failed)),
        };
    }
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
