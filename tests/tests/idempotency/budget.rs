//! Request budgets, counted by an SDK interceptor on the DynamoDB client.

use payonce::clock::Clock;
use payonce::idempotency::{
    Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey, Outcome, RunRequest,
};
use payonce_tests::StoreHarness;
use serde_json::json;
use std::collections::BTreeMap;

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(op, n)| (op.to_string(), *n)).collect()
}

#[tokio::test]
async fn a_first_run_costs_two_requests_and_a_duplicate_one() {
    let h = payonce_tests::dynamo_harness().await;
    let layer = Idempotency::new(h.store().clone(), IdempotencyConfig::default());
    let key = IdempotencyKey::parse("budget-1").unwrap();
    let fp = Fingerprint::of_value(&json!({"a": 1}));
    let request = || RunRequest {
        scope: "budget",
        user: "alice",
        key: &key,
        fingerprint: fp.clone(),
        deadline_ms: h.clock().now_ms() + 10_000,
    };
    let work = || async { Ok::<_, std::convert::Infallible>(json!({"id": 7})) };

    // First run: claim + complete.
    h.counter().reset();
    assert_eq!(
        layer.run(request(), |_| work()).await.unwrap(),
        Outcome::Fresh(json!({"id": 7}))
    );
    assert_eq!(
        h.counter().by_operation(),
        counts(&[("PutItem", 1), ("UpdateItem", 1)])
    );

    // Duplicate after completion: the claim alone, which returns the stored record.
    h.counter().reset();
    assert_eq!(
        layer.run(request(), |_| work()).await.unwrap(),
        Outcome::Replayed(json!({"id": 7}))
    );
    assert_eq!(h.counter().by_operation(), counts(&[("PutItem", 1)]));

    // Mismatch: also the claim alone.
    h.counter().reset();
    let other = RunRequest {
        fingerprint: Fingerprint::of_value(&json!({"a": 2})),
        ..request()
    };
    assert_eq!(
        layer.run(other, |_| work()).await.unwrap(),
        Outcome::Mismatch
    );
    assert_eq!(h.counter().by_operation(), counts(&[("PutItem", 1)]));
}

#[tokio::test]
async fn a_duplicate_while_in_flight_costs_one_request() {
    let h = payonce_tests::dynamo_harness().await;
    let layer = Idempotency::new(h.store().clone(), IdempotencyConfig::default());
    let key = IdempotencyKey::parse("budget-2").unwrap();
    let fp = Fingerprint::of_value(&json!({"a": 1}));
    let deadline_ms = h.clock().now_ms() + 10_000;

    let outer = layer
        .run(
            RunRequest {
                scope: "budget",
                user: "alice",
                key: &key,
                fingerprint: fp.clone(),
                deadline_ms,
            },
            |_| async {
                h.counter().reset();
                let inner = layer
                    .run(
                        RunRequest {
                            scope: "budget",
                            user: "alice",
                            key: &key,
                            fingerprint: fp.clone(),
                            deadline_ms,
                        },
                        |_| async { Ok::<_, std::convert::Infallible>(0) },
                    )
                    .await
                    .unwrap();
                assert!(matches!(inner, Outcome::InProgress { .. }), "{inner:?}");
                assert_eq!(h.counter().by_operation(), counts(&[("PutItem", 1)]));
                Ok::<_, std::convert::Infallible>(1)
            },
        )
        .await
        .unwrap();
    assert_eq!(outer, Outcome::Fresh(1));
}
