//! Refunds the PSP does not carry out: one that reads succeeded and fails later
//! (`pm_card_refundFail`), and one the PSP refuses at once.

use super::{item_statuses, psp_key, psp_refunds_for};
use payonce::domain::{Currency, RefundSettlement, RefundStatus};
use payonce::ports::{Psp, RefundOutcome, RefundRequest};
use payonce::service::refund::RefundApplied;
use payonce::service::webhooks::Processed;
use payonce_fake_psp::FakePspConfig;
use payonce_tests::logs::LogCapture;
use payonce_tests::stack::{string_attribute, stripe_for, PaymentStack, STAFF, STAFF_SCOPES};
use payonce_tests::webhook_sink::is_event;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_refund_that_fails_after_succeeding_gives_its_amount_back_and_a_new_refund_can_follow() {
    let (logs, _capture) = LogCapture::install();
    let stack = PaymentStack::start_with(
        FakePspConfig {
            refund_fail_after: Duration::from_millis(500),
            ..FakePspConfig::default()
        },
        Default::default(),
    )
    .await;
    let sink = stack.webhook_sink().await;
    // GIVEN a payment with Stripe's test card whose refunds fail later
    let payment_id = stack
        .paid_payment("alice", "pay", "pm_card_refundFail")
        .await;

    // WHEN staff refunds 1000 of it, THEN the PSP first answers succeeded
    let first = stack
        .refund(&payment_id, "first", json!({"amount": 1000}))
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.json["status"], "succeeded");
    let refund_id = first.json["refund_id"].as_str().unwrap().to_owned();
    let psp_refund = first.json["provider_refund_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(1))
    );
    assert_eq!(
        stack.get_payment("alice", &[], &payment_id).await.json["status"],
        "partially_refunded"
    );

    // WHEN the PSP fails it and its refund.updated and refund.failed webhooks are processed
    let updated = sink
        .wait_for(1, |e| is_event(e, "refund.updated", &psp_refund))
        .await;
    let failed = sink
        .wait_for(1, |e| is_event(e, "refund.failed", &psp_refund))
        .await;
    let on_update = stack.deliver(&updated[0]).await.unwrap();
    let on_failed = stack.deliver(&failed[0]).await.unwrap();

    // THEN the first moves the refund to failed, the second changes nothing more
    let Processed::Refund(RefundApplied::Moved(moved)) = &on_update else {
        panic!("expected the refund to move: {on_update:?}")
    };
    assert_eq!(
        (moved.status, moved.failure_code.as_deref()),
        (RefundStatus::Failed, Some("expired_or_canceled_card"))
    );
    assert!(
        matches!(&on_failed, Processed::Refund(RefundApplied::Unchanged(r)) if r.status == RefundStatus::Failed),
        "{on_failed:?}"
    );
    // AND the refunded amount is given back: nothing refunded, nothing pending
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(0), Some(0), Some(1))
    );
    let items = stack.refund_items(&payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(format!("refund#{refund_id}"), "failed".to_owned())]
    );
    assert_eq!(
        string_attribute(&items[&format!("refund#{refund_id}")], "failure_code").as_deref(),
        Some("expired_or_canceled_card")
    );
    // AND the alarm for a refund that failed after succeeding was raised, once
    assert_eq!(logs.alarms("refund-failed-late").len(), 1);
    // AND the payment reads succeeded again, with the refund shown failed
    let details = stack.get_payment("alice", &[], &payment_id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64(),
            details.json["amount_refund_pending"].as_i64(),
            details.json["refunds"][0]["status"].as_str()
        ),
        (Some("succeeded"), Some(0), Some(0), Some("failed")),
        "{}",
        details.body
    );
    // AND the first key now replays the failure
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
    assert_eq!(replay.json["failure_code"], "expired_or_canceled_card");

    // WHEN a new refund is asked for with a new key
    let second = stack
        .refund(&payment_id, "second", json!({"amount": 1000}))
        .await;

    // THEN it is sent to the PSP as refund 2, under its own key, and holds the amount again
    assert_eq!(second.status, 201, "{}", second.body);
    let second_id = second.json["refund_id"].as_str().unwrap();
    assert!(second_id.ends_with("_2"), "{second_id}");
    let at_psp = psp_refunds_for(&stack, second_id);
    assert_eq!(at_psp.len(), 1);
    assert_eq!(
        at_psp[0].idempotency_key.as_deref(),
        Some(psp_key(&payment_id, "2").as_str())
    );
    assert_eq!(stack.psp.refunds().len(), 2);
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(2))
    );
}

#[tokio::test]
async fn a_refund_the_psp_refuses_at_once_is_402_stored_and_replayed_and_frees_its_amount() {
    let stack = PaymentStack::start().await;
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    let intent = stack
        .payment(&payment_id)
        .await
        .provider_payment_id
        .unwrap();
    // GIVEN the PSP charge was fully refunded out of band, straight at the PSP
    let out_of_band = stripe_for(&stack.psp)
        .create_refund(
            &RefundRequest {
                refund_id: "dashboard".into(),
                payment_id: payment_id.clone(),
                provider_payment_id: intent,
                amount: 3000,
                currency: Currency::Jpy,
                reason: None,
                idempotency_key: "dashboard-refund".into(),
                resend: false,
                provider_refund_id: None,
                captured: 0,
            },
            Duration::from_secs(5),
        )
        .await;
    assert!(
        matches!(
            out_of_band,
            RefundOutcome::Answered(RefundSettlement::Succeeded { .. })
        ),
        "{out_of_band:?}"
    );

    // WHEN staff refunds through payonce, which still sees 3000 refundable
    let reply = stack
        .refund(&payment_id, "refused", json!({"amount": 500}))
        .await;

    // THEN 402 refund-failed with the PSP's reason, as a fresh answer
    assert_eq!(
        (
            reply.status,
            reply.problem_type(),
            reply.header("idempotent-replayed")
        ),
        (402, "/problems/refund-failed", None),
        "{}",
        reply.body
    );
    assert_eq!(reply.json["failure_code"], "charge_already_refunded");
    let refund_id = reply.json["refund_id"].as_str().unwrap().to_owned();
    // AND its instance is this request's id, the x-request-id header
    let first_request = reply.header("x-request-id").unwrap().to_owned();
    assert_eq!(reply.json["instance"], first_request.as_str());
    // AND the PSP made no refund for it
    assert_eq!(stack.psp.refunds().len(), 1, "only the out-of-band one");
    assert!(psp_refunds_for(&stack, &refund_id).is_empty());
    // AND the refund is stored failed, its amount no longer held
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(0), Some(0), Some(1))
    );
    let items = stack.refund_items(&payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(format!("refund#{refund_id}"), "failed".to_owned())]
    );
    let record = stack.refund_record(STAFF, "refused").await.unwrap();
    assert_eq!(record.lease(), None, "the record is completed");
    // AND the same key replays the 402
    let replay = stack
        .refund(&payment_id, "refused", json!({"amount": 500}))
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
    assert_eq!(
        (
            replay.json["refund_id"].as_str(),
            replay.json["failure_code"].as_str()
        ),
        (Some(refund_id.as_str()), Some("charge_already_refunded"))
    );
    // AND the replayed problem names the original request, while x-request-id is its own
    assert_eq!(replay.json["instance"], first_request.as_str());
    assert_ne!(replay.header("x-request-id"), Some(first_request.as_str()));
    assert_eq!(stack.psp.refunds().len(), 1);
    // AND the payment shows nothing refunded or pending, and the failed refund
    let details = stack.get_payment(STAFF, STAFF_SCOPES, &payment_id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64(),
            details.json["amount_refund_pending"].as_i64(),
            details.json["refunds"][0]["status"].as_str()
        ),
        (Some("succeeded"), Some(0), Some(0), Some("failed")),
        "{}",
        details.body
    );
}
