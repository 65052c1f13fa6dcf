//! A succeeded refund can still fail at the PSP: reconcile keeps looking at it for a while, so
//! a late failure whose webhooks were lost is still found, and then stops.

use super::item_statuses;
use payonce_fake_psp::FakePspConfig;
use payonce_tests::logs::LogCapture;
use payonce_tests::stack::{PaymentStack, STAFF, STAFF_SCOPES};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_refund_that_fails_late_with_its_webhooks_lost_is_found_failed_by_reconcile() {
    let (logs, _capture) = LogCapture::install();
    // No webhooks: the fake PSP delivers none unless told where.
    let stack = PaymentStack::start_with(
        FakePspConfig {
            refund_fail_after: Duration::from_millis(300),
            ..FakePspConfig::default()
        },
        Default::default(),
    )
    .await;
    // GIVEN a refund answered succeeded that the PSP then failed
    let payment_id = stack
        .paid_payment("alice", "pay", "pm_card_refundFail")
        .await;
    let first = stack
        .refund(&payment_id, "first", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        first.body
    );
    let refund_id = first.json["refund_id"].as_str().unwrap().to_owned();
    for _ in 0..200 {
        if stack.psp.refunds()[0].status == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(stack.psp.refunds()[0].status, "failed");

    // WHEN reconcile runs before the watch's first check, THEN it leaves the refund alone
    stack.clock.advance(Duration::from_secs(5 * 60));
    let early = stack.reconcile().await;
    assert_eq!(early.examined, 0, "{early:?}");
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(1))
    );

    // WHEN it runs once the watch's first check is due
    stack.clock.advance(Duration::from_secs(8 * 60));
    let report = stack.reconcile().await;

    // THEN it finds the failure: the refunded amount is given back
    assert_eq!(
        (report.examined, report.refunds_failed, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(0), Some(0), Some(1))
    );
    let items = stack.refund_items(&payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(format!("refund#{refund_id}"), "failed".to_owned())]
    );
    assert!(
        !items[&format!("refund#{refund_id}")].contains_key("inflight"),
        "a failed refund leaves the in-flight index"
    );
    assert_eq!(logs.alarms("refund-failed-late").len(), 1);
    // AND the key replays the failure, and the payment reads succeeded again
    let replay = stack
        .refund(&payment_id, "first", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (
            replay.status,
            replay.problem_type(),
            replay.header("idempotent-replayed")
        ),
        (402, "/problems/refund-failed", Some("true")),
        "{}",
        replay.body
    );
    let details = stack.get_payment(STAFF, STAFF_SCOPES, &payment_id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64()
        ),
        (Some("succeeded"), Some(0))
    );
    // AND the next run has nothing left to look at
    stack.clock.advance(Duration::from_secs(24 * 3600));
    let later = stack.reconcile().await;
    assert_eq!(later.examined, 0, "{later:?}");
    assert_eq!(stack.psp.refunds().len(), 1, "nothing was re-sent");
}

#[tokio::test]
async fn a_succeeded_refund_is_watched_without_resending_and_left_alone_after_a_week() {
    let stack = PaymentStack::start().await;
    // GIVEN a succeeded refund
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    let reply = stack
        .refund(&payment_id, "first", json!({"amount": 1000}))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let pk = format!("refund#{}", reply.json["refund_id"].as_str().unwrap());
    let settled = stack.snapshot().await;

    // WHEN reconcile looks at it once its first check is due
    stack.clock.advance(Duration::from_secs(13 * 60));
    let watched = stack.reconcile().await;

    // THEN it only looked it up: still succeeded, nothing re-sent, only its next check moved
    assert_eq!(
        (
            watched.examined,
            watched.pending,
            watched.refunds_failed,
            watched.errors
        ),
        (1, 1, 0, 0),
        "{watched:?}"
    );
    assert_eq!(stack.psp.refunds().len(), 1);
    let (idempotency, mut payments) = stack.snapshot().await;
    assert_eq!(idempotency, settled.0);
    let check_before = settled.1[&pk]["check_at_ms"].clone();
    let check_after = payments
        .get_mut(&pk)
        .unwrap()
        .insert("check_at_ms".into(), check_before);
    assert_ne!(check_after, Some(settled.1[&pk]["check_at_ms"].clone()));
    assert_eq!(payments, settled.1);

    // WHEN it is looked at again after a week
    stack.clock.advance(Duration::from_secs(8 * 24 * 3600));
    let last = stack.reconcile().await;

    // THEN the watch ends: it leaves the in-flight index, still succeeded, and is not looked at
    // again
    assert_eq!(
        (last.examined, last.already_settled, last.errors),
        (1, 1, 0),
        "{last:?}"
    );
    let item = stack.item(&pk).await.unwrap();
    assert!(!item.contains_key("inflight"), "{item:?}");
    assert_eq!(item["status"], "S(\"succeeded\")");
    stack.clock.advance(Duration::from_secs(30 * 24 * 3600));
    let after = stack.reconcile().await;
    assert_eq!(after.examined, 0, "{after:?}");
    assert_eq!(stack.psp.refunds().len(), 1);
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(1))
    );
}
