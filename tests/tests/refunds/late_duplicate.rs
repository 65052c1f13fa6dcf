//! A late duplicate charge: an attempt the PSP charged after another attempt paid its order. Its
//! success is recorded with an automatic refund of the whole amount (`reason: duplicate`), which
//! reconcile sends under the refund's own key, once, however often the success arrives.

use super::{item_statuses, psp_key};
use payonce::domain::{refund_id_for, Payment, PaymentStatus};
use payonce::ports::{ChargeRequest, Psp, PspOutcome};
use payonce::service::webhooks::Processed;
use payonce::service::EventApplied;
use payonce_tests::logs::LogCapture;
use payonce_tests::stack::{string_attribute, stripe_for, PaymentStack, STAFF, STAFF_SCOPES};
use payonce_tests::webhook_sink::{is_event, WebhookSink};
use serde_json::{json, Value};
use std::time::Duration;

/// Attempt A of a new order of alice could not connect to the PSP and released the order;
/// attempt B then paid it. Returns (order, A as stored, B's payment id).
async fn order_paid_by_a_second_attempt(stack: &PaymentStack) -> (String, Payment, String) {
    let order = stack.create_order("alice").await;
    let body = json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
    let unsent = stack
        .pay_through(&stack.cut_off_charge(), "alice", "key-a", body)
        .await;
    assert_eq!(
        (unsent.status, unsent.problem_type()),
        (503, "/problems/psp-unavailable"),
        "{}",
        unsent.body
    );
    let a = stack
        .payment(&stack.charge_record("alice", "key-a").await.attempt_id)
        .await;
    assert_eq!(a.status, PaymentStatus::Processing);
    let b = stack
        .pay_order("alice", "key-b", &order, "pm_card_mastercard")
        .await;
    (order, a, b)
}

/// The PSP charges A after all, under A's own key (the call that "could not connect" got
/// through another way); returns the PaymentIntent's id.
async fn psp_charges_late(stack: &PaymentStack, attempt: &Payment) -> String {
    let outcome = stripe_for(&stack.psp)
        .create_charge(&ChargeRequest::for_payment(attempt), Duration::from_secs(5))
        .await;
    let PspOutcome::Approved {
        provider_payment_id,
    } = outcome
    else {
        panic!("expected the PSP to charge, got {outcome:?}")
    };
    provider_payment_id
}

/// An order paid by attempt B and attempt A the PSP charged late (see
/// [`order_paid_by_a_second_attempt`], [`psp_charges_late`]): (order, A, B's payment id, A's
/// PaymentIntent, the `payment_intent.succeeded` events the PSP sent for it).
async fn late_success(
    stack: &PaymentStack,
    sink: &WebhookSink,
) -> (String, Payment, String, String, Vec<String>) {
    let (order, a, b) = order_paid_by_a_second_attempt(stack).await;
    let intent = psp_charges_late(stack, &a).await;
    let succeeded = sink
        .wait_for(1, |e| is_event(e, "payment_intent.succeeded", &intent))
        .await;
    (order, a, b, intent, succeeded)
}

/// `body` as another delivery of the same news under a new event id.
fn with_event_id(body: &str, event_id: &str) -> String {
    let mut event: Value = serde_json::from_str(body).unwrap();
    event["id"] = event_id.into();
    event.to_string()
}

/// A succeeded, its order still B's, and its duplicate refund created: pending (or
/// `refund_status`), the whole amount, reason duplicate, no idempotency record.
async fn assert_duplicate_refund(
    stack: &PaymentStack,
    order: &str,
    a: &Payment,
    b: &str,
    refund_status: &str,
) {
    let now = stack.payment(&a.payment_id).await;
    assert_eq!(
        (now.status, now.duplicate_refund),
        (PaymentStatus::Succeeded, true)
    );
    let dup = refund_id_for(&a.payment_id, "dup");
    let items = stack.refund_items(&a.payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(format!("refund#{dup}"), refund_status.to_owned())]
    );
    let item = &items[&format!("refund#{dup}")];
    assert_eq!(
        (
            string_attribute(item, "reason").as_deref(),
            string_attribute(item, "number").as_deref(),
            item.get("amount").map(String::as_str),
            item.contains_key("idempotency_pk")
        ),
        (Some("duplicate"), Some("dup"), Some("N(\"3000\")"), false)
    );
    // (B's charge left the order stored as B holds it, which reads as paid)
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(
        (
            string_attribute(&order_item, "payment_state").as_deref(),
            string_attribute(&order_item, "payment_id").as_deref()
        ),
        (Some("processing"), Some(b))
    );
    assert_eq!(
        stack.get_order("alice", order).await.json["payment_state"],
        "paid"
    );
    let b_now = stack.payment(b).await;
    assert_eq!(
        (b_now.status, b_now.duplicate_refund, b_now.refund_pending),
        (PaymentStatus::Succeeded, false, 0)
    );
}

/// Exactly one PSP refund: A's charge, in full, as a duplicate, under A's `dup` key; stored as
/// succeeded; and the order paid once in net.
async fn assert_refunded_once(stack: &PaymentStack, a: &Payment, b: &str, intent: &str) {
    let dup = refund_id_for(&a.payment_id, "dup");
    let refunds = stack.psp.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:#?}");
    assert_eq!(
        (
            refunds[0].idempotency_key.clone(),
            refunds[0].reason.as_deref(),
            refunds[0].amount,
            refunds[0].payment_intent.as_str(),
            refunds[0].refund_id.as_deref(),
            refunds[0].status.as_str()
        ),
        (
            Some(psp_key(&a.payment_id, "dup")),
            Some("duplicate"),
            3000,
            intent,
            Some(dup.as_str()),
            "succeeded"
        )
    );
    assert_eq!(
        stack.refund_attributes(&a.payment_id).await,
        (Some(3000), Some(0), None)
    );
    let details = stack.get_payment(STAFF, STAFF_SCOPES, &a.payment_id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64(),
            details.json["refunds"][0]["refund_id"].as_str(),
            details.json["refunds"][0]["reason"].as_str()
        ),
        (
            Some("refunded"),
            Some(3000),
            Some(dup.as_str()),
            Some("duplicate")
        ),
        "{}",
        details.body
    );
    // Two charges succeeded at the PSP, one refunded in full: the order is paid once in net.
    assert_eq!(stack.psp.succeeded_charges_for(&a.payment_id), 1);
    assert_eq!(stack.psp.succeeded_charges_for(b), 1);
    let charged: i64 = stack
        .psp
        .charges()
        .iter()
        .filter(|c| c.status == "succeeded")
        .map(|c| c.amount)
        .sum();
    let refunded: i64 = refunds
        .iter()
        .filter(|r| r.status == "succeeded")
        .map(|r| r.amount)
        .sum();
    assert_eq!(charged - refunded, 3000);
}

#[tokio::test]
async fn a_late_duplicate_success_by_webhook_is_refunded_once_by_reconcile() {
    let (logs, _capture) = LogCapture::install();
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    // GIVEN an order paid by attempt B, and attempt A the PSP charged late
    let (order, a, b, intent, succeeded) = late_success(&stack, &sink).await;

    // WHEN A's payment_intent.succeeded arrives, is redelivered, and arrives under another id
    let first = stack.deliver(&succeeded[0]).await.unwrap();
    let redelivered = stack.deliver(&succeeded[0]).await.unwrap();
    let other = stack
        .deliver(&with_event_id(&succeeded[0], "evt_again_1"))
        .await
        .unwrap();

    // THEN the first moves A to succeeded, the others change nothing
    assert!(
        matches!(&first, Processed::Applied(EventApplied::Moved(p)) if p.status == PaymentStatus::Succeeded),
        "{first:?}"
    );
    assert!(
        matches!(&redelivered, Processed::Applied(EventApplied::Unchanged(_))),
        "{redelivered:?}"
    );
    assert!(
        matches!(&other, Processed::Applied(EventApplied::Unchanged(_))),
        "{other:?}"
    );
    // AND one duplicate refund of the whole amount is pending, the amount held, the order
    // still B's
    assert_duplicate_refund(&stack, &order, &a, &b, "pending").await;
    assert_eq!(
        stack.refund_attributes(&a.payment_id).await,
        (None, Some(3000), None)
    );
    // AND the late-duplicate alarm was raised once, for A
    let alarms = logs.alarms("late-duplicate-charge");
    assert_eq!(alarms.len(), 1, "{alarms:#?}");
    assert_eq!(alarms[0]["payment_id"], a.payment_id.as_str());
    // AND nothing was refunded yet: the processor holds no PSP credentials
    assert!(stack.psp.refunds().is_empty());

    // WHEN reconcile runs past the refund's minimum age
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;

    // THEN it sent the refund, once
    assert_eq!(
        (report.examined, report.refunds_succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_duplicate_refund(&stack, &order, &a, &b, "succeeded").await;
    assert_refunded_once(&stack, &a, &b, &intent).await;

    // WHEN the success arrives yet again, every event the PSP sent is processed once more,
    // and reconcile runs again
    let again = stack
        .deliver(&with_event_id(&succeeded[0], "evt_again_2"))
        .await
        .unwrap();
    assert!(
        matches!(&again, Processed::Applied(EventApplied::Unchanged(_))),
        "{again:?}"
    );
    for body in sink.bodies() {
        stack.deliver(&body).await.unwrap();
    }
    stack.clock.advance(Duration::from_secs(600));
    let later = stack.reconcile().await;

    // THEN nothing more happens: still one refund, one alarm
    assert_eq!(later.examined, 0, "{later:?}");
    assert_duplicate_refund(&stack, &order, &a, &b, "succeeded").await;
    assert_refunded_once(&stack, &a, &b, &intent).await;
    assert_eq!(logs.alarms("late-duplicate-charge").len(), 1);
}

#[tokio::test]
async fn a_late_duplicate_success_found_by_reconcile_then_by_webhook_is_refunded_once() {
    let (logs, _capture) = LogCapture::install();
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    // GIVEN an order paid by attempt B, and attempt A the PSP charged late, with no webhook yet
    let (order, a, b) = order_paid_by_a_second_attempt(&stack).await;
    let intent = psp_charges_late(&stack, &a).await;

    // WHEN reconcile finds A's success
    stack.clock.advance(Duration::from_secs(180));
    let found = stack.reconcile().await;

    // THEN A is succeeded with its duplicate refund pending (not due in the same run)
    assert_eq!(
        (
            found.examined,
            found.succeeded,
            found.refunds_succeeded,
            found.errors
        ),
        (1, 1, 0, 0),
        "{found:?}"
    );
    assert_duplicate_refund(&stack, &order, &a, &b, "pending").await;
    assert!(stack.psp.refunds().is_empty());
    assert_eq!(logs.alarms("late-duplicate-charge").len(), 1);

    // WHEN A's webhook then arrives, twice
    let succeeded = sink
        .wait_for(1, |e| is_event(e, "payment_intent.succeeded", &intent))
        .await;
    let first = stack.deliver(&succeeded[0]).await.unwrap();
    let second = stack.deliver(&succeeded[0]).await.unwrap();

    // THEN it changes nothing: still one duplicate refund
    assert!(
        matches!(&first, Processed::Applied(EventApplied::Unchanged(_))),
        "{first:?}"
    );
    assert!(
        matches!(&second, Processed::Applied(EventApplied::Unchanged(_))),
        "{second:?}"
    );
    assert_duplicate_refund(&stack, &order, &a, &b, "pending").await;
    assert_eq!(logs.alarms("late-duplicate-charge").len(), 1);

    // WHEN reconcile runs again past the refund's minimum age, and once more
    stack.clock.advance(Duration::from_secs(180));
    let sent = stack.reconcile().await;
    stack.clock.advance(Duration::from_secs(600));
    let later = stack.reconcile().await;

    // THEN the refund was sent once and nothing was left for the last run
    assert_eq!(
        (sent.examined, sent.refunds_succeeded, sent.errors),
        (1, 1, 0),
        "{sent:?}"
    );
    assert_eq!(later.examined, 0, "{later:?}");
    assert_duplicate_refund(&stack, &order, &a, &b, "succeeded").await;
    assert_refunded_once(&stack, &a, &b, &intent).await;
}

#[tokio::test]
async fn a_late_duplicate_whose_marking_answer_is_lost_still_alarms_and_is_refunded_once() {
    let (logs, _capture) = LogCapture::install();
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    // GIVEN an order paid by attempt B, and attempt A the PSP charged late
    let (order, a, b, intent, succeeded) = late_success(&stack, &sink).await;

    // WHEN A's success arrives, and every answer to the write that marks A a late duplicate (A,
    // its refund and the event, after the write with the order was refused) is lost: the SDK
    // tries it three times, DynamoDB applies it once, and the processor sees only a failure
    stack.lost_answers.lose_next("TransactWriteItems", 3);
    let first = stack.deliver(&succeeded[0]).await;
    assert_eq!(stack.lost_answers.lost().len(), 3);
    assert!(first.is_err(), "{first:?}");

    // THEN A is recorded, succeeded, with one duplicate refund pending, the order B's
    assert_duplicate_refund(&stack, &order, &a, &b, "pending").await;
    // AND the late-duplicate alarm was raised, once, for A, though no answer said the write
    // applied (the redelivery below finds A marked and changes nothing)
    let alarms = logs.alarms("late-duplicate-charge");
    assert_eq!(alarms.len(), 1, "{alarms:#?}");
    assert_eq!(alarms[0]["payment_id"], a.payment_id.as_str());

    // WHEN the success is redelivered and reconcile runs past the refund's minimum age
    let redelivered = stack.deliver(&succeeded[0]).await;
    assert!(
        matches!(
            &redelivered,
            Ok(Processed::Applied(EventApplied::Unchanged(_)))
        ),
        "{redelivered:?}"
    );
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;

    // THEN the duplicate is refunded once, and no further alarm is raised
    assert_eq!(
        (report.refunds_succeeded, report.errors),
        (1, 0),
        "{report:?}"
    );
    assert_duplicate_refund(&stack, &order, &a, &b, "succeeded").await;
    assert_refunded_once(&stack, &a, &b, &intent).await;
    assert_eq!(logs.alarms("late-duplicate-charge").len(), 1);
}
