//! Request budgets, counted by an SDK interceptor on the DynamoDB client.

use payonce::adapters::dynamodb::IdempotencyAttributes;
use payonce::clock::Clock;
use payonce::idempotency::{
    check_completed_size, Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey, Outcome,
    RecordKey, RunError, RunRequest, StoreError, MAX_ITEM_BYTES,
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

/// A completion DynamoDB refuses as such (here a malformed update: the result attribute is
/// named like the status) is sent once, not retried: sending it again is refused again. The
/// run reports the refusal, and the lease lapses for a retry once the deployment is fixed.
#[tokio::test]
async fn a_refused_completion_is_sent_once() {
    let h = payonce_tests::dynamo_harness_with(IdempotencyAttributes {
        data: "status".into(),
        ..IdempotencyAttributes::default()
    })
    .await;
    let layer = Idempotency::new(h.store().clone(), IdempotencyConfig::default());
    let key = IdempotencyKey::parse("refused-1").unwrap();
    let request = RunRequest {
        scope: "budget",
        user: "alice",
        key: &key,
        fingerprint: Fingerprint::of_value(&json!({"a": 1})),
        deadline_ms: h.clock().now_ms() + 10_000,
    };
    h.counter().reset();
    let refused = layer
        .run(request, |_| async {
            Ok::<_, std::convert::Infallible>(json!({"id": 7}))
        })
        .await;
    assert!(
        matches!(refused, Err(RunError::Store(StoreError::Refused { .. }))),
        "{refused:?}"
    );
    assert_eq!(
        h.counter().by_operation(),
        counts(&[("PutItem", 1), ("UpdateItem", 1)])
    );
}

/// The size check counts the table's own attribute names: with a long result attribute name,
/// a result that fits the default layout is over the limit here, and is completed as the fact
/// that it was too large (never refused by DynamoDB, never run again).
#[tokio::test]
async fn the_size_check_counts_renamed_attributes() {
    let data = "r".repeat(1_000);
    let h = payonce_tests::dynamo_harness_with(IdempotencyAttributes {
        data: data.clone().into(),
        ..IdempotencyAttributes::default()
    })
    .await;
    let layer = Idempotency::new(h.store().clone(), IdempotencyConfig::default());
    let key = IdempotencyKey::parse("renamed-1").unwrap();
    let record = RecordKey::new("budget", "alice", &key);
    let value = json!("x".repeat(MAX_ITEM_BYTES - 1_000));
    let stored = serde_json::to_string(&value).unwrap();
    assert!(
        check_completed_size(&record, &stored).is_ok(),
        "fits the default layout"
    );
    let request = || RunRequest {
        scope: "budget",
        user: "alice",
        key: &key,
        fingerprint: Fingerprint::of_value(&json!({"a": 1})),
        deadline_ms: h.clock().now_ms() + 10_000,
    };
    let runs = std::sync::atomic::AtomicU32::new(0);
    let work = || async {
        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok::<_, std::convert::Infallible>(value.clone())
    };
    assert_eq!(
        layer.run(request(), |_| work()).await.unwrap(),
        Outcome::Fresh(value.clone())
    );
    let again = layer.run(request(), |_| work()).await.unwrap();
    assert!(
        matches!(again, Outcome::TooLargeToReplay { size_bytes } if size_bytes > MAX_ITEM_BYTES),
        "{again:?}"
    );
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}
