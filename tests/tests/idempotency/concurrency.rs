//! Storms of identical requests against DynamoDB Local: exactly one runs the work.

use payonce::clock::Clock;
use payonce::idempotency::{
    Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey, Outcome, RunRequest,
};
use payonce_tests::StoreHarness;
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PARALLEL: usize = 50;
const KEYS: usize = 20;

/// 50 parallel runs of one key, repeated for 20 keys: each key runs its work exactly once;
/// every other caller sees InProgress (while it runs) or the replayed result (after).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_parallel_claims_of_one_key_run_the_work_once() {
    let h = payonce_tests::dynamo_harness().await;
    let layer = Arc::new(Idempotency::new(
        h.store().clone(),
        IdempotencyConfig::default(),
    ));
    let fp = Fingerprint::of_value(&json!({"order": 1}));

    for round in 0..KEYS {
        let key = IdempotencyKey::parse(&format!("storm-{round}")).unwrap();
        let runs = Arc::new(AtomicU32::new(0));
        let barrier = Arc::new(tokio::sync::Barrier::new(PARALLEL));
        let mut tasks = Vec::with_capacity(PARALLEL);
        for _ in 0..PARALLEL {
            let (layer, key, fp, runs, barrier) = (
                layer.clone(),
                key.clone(),
                fp.clone(),
                runs.clone(),
                barrier.clone(),
            );
            let deadline_ms = h.clock().now_ms() + 10_000;
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let request = RunRequest {
                    scope: "storm",
                    user: "alice",
                    key: &key,
                    fingerprint: fp,
                    deadline_ms,
                };
                layer
                    .run(request, |attempt| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // Long enough that the other callers arrive while the lease is held.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, std::convert::Infallible>(attempt.attempt_id)
                    })
                    .await
                    .expect("run succeeds")
            }));
        }
        let mut fresh = Vec::new();
        let (mut replayed, mut in_progress) = (Vec::new(), 0);
        for task in tasks {
            match task.await.unwrap() {
                Outcome::Fresh(id) => fresh.push(id),
                Outcome::Replayed(id) => replayed.push(id),
                Outcome::InProgress { retry_after } => {
                    assert!(retry_after >= Duration::from_secs(1));
                    in_progress += 1;
                }
                other @ (Outcome::Mismatch | Outcome::TooLargeToReplay { .. }) => {
                    panic!("identical small requests answer {other:?}")
                }
            }
        }
        assert_eq!(fresh.len(), 1, "round {round}: exactly one Fresh");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "round {round}: the work ran once"
        );
        assert!(
            replayed.iter().all(|id| id == &fresh[0]),
            "round {round}: replays carry the one result"
        );
        assert_eq!(1 + replayed.len() + in_progress, PARALLEL);
    }
}
