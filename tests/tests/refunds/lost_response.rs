//! A refund whose PSP answer was lost is answered 202 and settled later, by the PSP's webhook
//! alone or by reconcile alone, exactly once.

use super::{item_statuses, psp_key, psp_refunds_for, FaultyRefunds, RefundFault};
use payonce::domain::RefundStatus;
use payonce::service::refund::RefundApplied;
use payonce::service::webhooks::Processed;
use payonce_tests::stack::{stripe_for, PaymentStack, Reply, STAFF, STAFF_SCOPES};
use payonce_tests::webhook_sink::is_event;
use serde_json::{json, Value};
use std::time::Duration;

/// A refund of 1200 of a fresh 3000 payment, through a PSP whose answer is lost (`fault`:
/// after reaching it, or before): asserts the 202 and returns (payment id, the 202).
async fn lost_refund(stack: &PaymentStack, fault: RefundFault) -> (String, Reply) {
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    let lost = stack.refunds_with(FaultyRefunds {
        inner: stripe_for(&stack.psp),
        fault,
    });
    let reply = stack
        .refund_through(&lost, &payment_id, "lost", json!({"amount": 1200}))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(
        (
            reply.json["status"].as_str(),
            reply.json["amount"].as_i64(),
            &reply.json["provider_refund_id"]
        ),
        (Some("pending"), Some(1200), &Value::Null)
    );
    assert!(reply.header("retry-after").is_some(), "{reply:?}");
    assert_eq!(reply.header("idempotent-replayed"), None);
    // The amount is held while the outcome is unknown.
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (None, Some(1200), Some(1))
    );
    let details = stack.get_payment(STAFF, STAFF_SCOPES, &payment_id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64(),
            details.json["amount_refund_pending"].as_i64(),
            details.json["refunds"][0]["status"].as_str()
        ),
        (Some("succeeded"), Some(0), Some(1200), Some("pending")),
        "{}",
        details.body
    );
    // A retry before anything settled it replays the pending refund.
    let retry = stack
        .refund(&payment_id, "lost", json!({"amount": 1200}))
        .await;
    assert_eq!(
        (retry.status, retry.header("idempotent-replayed")),
        (202, Some("true")),
        "{}",
        retry.body
    );
    assert_eq!(retry.json, reply.json);
    (payment_id, reply)
}

/// The refund settled to succeeded with the PSP's `re_…`: stored, replayed, shown.
async fn assert_settled_once(stack: &PaymentStack, payment_id: &str, refund_id: &str) {
    let at_psp = psp_refunds_for(stack, refund_id);
    assert_eq!(at_psp.len(), 1, "one PSP refund: {at_psp:#?}");
    assert_eq!(
        (
            at_psp[0].status.as_str(),
            at_psp[0].amount,
            at_psp[0].idempotency_key.clone()
        ),
        ("succeeded", 1200, Some(psp_key(payment_id, "1")))
    );
    assert_eq!(stack.psp.refunds().len(), 1);
    assert_eq!(
        stack.refund_attributes(payment_id).await,
        (Some(1200), Some(0), Some(1))
    );
    let items = stack.refund_items(payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(format!("refund#{refund_id}"), "succeeded".to_owned())]
    );
    let item = &items[&format!("refund#{refund_id}")];
    assert_eq!(
        item.get("provider_refund_id").map(String::as_str),
        Some(format!("S(\"{}\")", at_psp[0].id).as_str())
    );
    // The client's retry now replays the outcome.
    let replay = stack
        .refund(payment_id, "lost", json!({"amount": 1200}))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(
        (
            replay.json["status"].as_str(),
            replay.json["refund_id"].as_str(),
            replay.json["provider_refund_id"].as_str()
        ),
        (
            Some("succeeded"),
            Some(refund_id),
            Some(at_psp[0].id.as_str())
        )
    );
    let details = stack.get_payment(STAFF, STAFF_SCOPES, payment_id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64(),
            details.json["amount_refund_pending"].as_i64()
        ),
        (Some("partially_refunded"), Some(1200), Some(0)),
        "{}",
        details.body
    );
}

#[tokio::test]
async fn a_lost_refund_answer_is_202_then_settled_by_the_psps_webhook_alone() {
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    // GIVEN a refund the PSP made but whose answer was lost: 202 pending
    let (payment_id, reply) = lost_refund(&stack, RefundFault::AnswerLost).await;
    let refund_id = reply.json["refund_id"].as_str().unwrap().to_owned();
    let psp_refund = psp_refunds_for(&stack, &refund_id)[0].id.clone();

    // WHEN the PSP's own refund.created webhook is processed
    let created = sink
        .wait_for(1, |e| is_event(e, "refund.created", &psp_refund))
        .await;
    let processed = stack.deliver(&created[0]).await.unwrap();

    // THEN the refund is succeeded and the payment's amounts moved
    let Processed::Refund(RefundApplied::Moved(after)) = &processed else {
        panic!("expected the refund to move: {processed:?}")
    };
    assert_eq!(
        (after.status, after.provider_refund_id.as_deref()),
        (RefundStatus::Succeeded, Some(psp_refund.as_str()))
    );
    assert_settled_once(&stack, &payment_id, &refund_id).await;
    // AND the same event again is a duplicate, and the charge.refunded that followed finds no
    // pending refund to make due
    assert_eq!(
        stack.deliver(&created[0]).await.unwrap(),
        Processed::Refund(RefundApplied::Duplicate)
    );
    let charge_refunded = sink.wait_for(1, |e| e["type"] == "charge.refunded").await;
    assert_eq!(
        stack.deliver(&charge_refunded[0]).await.unwrap(),
        Processed::RefundsDue(0)
    );
    assert_settled_once(&stack, &payment_id, &refund_id).await;
}

#[tokio::test]
async fn a_lost_refund_answer_is_202_then_settled_by_reconcile_alone() {
    // No webhooks at all: the fake PSP delivers none unless told where.
    let stack = PaymentStack::start().await;
    let (payment_id, reply) = lost_refund(&stack, RefundFault::AnswerLost).await;
    let refund_id = reply.json["refund_id"].as_str().unwrap().to_owned();

    // WHEN reconcile runs before the refund is old enough, THEN it leaves it to webhooks
    let early = stack.reconcile().await;
    assert_eq!(early.examined, 0, "{early:?}");
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (None, Some(1200), Some(1))
    );

    // WHEN it runs past its minimum age
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;

    // THEN the PSP's list of the charge's refunds settles it, without a second PSP refund
    assert_eq!(
        (report.examined, report.refunds_succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_settled_once(&stack, &payment_id, &refund_id).await;
    // AND the next run has nothing left to do
    stack.clock.advance(Duration::from_secs(600));
    let again = stack.reconcile().await;
    assert_eq!(again.examined, 0, "{again:?}");
    assert_settled_once(&stack, &payment_id, &refund_id).await;
}

#[tokio::test]
async fn a_refund_lost_before_the_psp_saw_it_is_sent_by_reconcile_once_under_its_key() {
    let stack = PaymentStack::start().await;
    // GIVEN a refund whose request was lost on the way: 202, and the PSP has nothing
    let (payment_id, reply) = lost_refund(&stack, RefundFault::RequestLost).await;
    let refund_id = reply.json["refund_id"].as_str().unwrap().to_owned();
    assert!(stack.psp.refunds().is_empty());

    // WHEN reconcile runs past the refund's minimum age, twice
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;
    stack.clock.advance(Duration::from_secs(600));
    let again = stack.reconcile().await;

    // THEN the first run sent it, once, under the refund's own key, and the second found it done
    assert_eq!(
        (report.examined, report.refunds_succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(again.examined, 0, "{again:?}");
    assert_settled_once(&stack, &payment_id, &refund_id).await;
}

#[tokio::test]
async fn a_refund_event_with_another_amount_or_currency_applies_nothing() {
    let stack = PaymentStack::start().await;
    let (payment_id, reply) = lost_refund(&stack, RefundFault::AnswerLost).await;
    let refund_id = reply.json["refund_id"].as_str().unwrap().to_owned();
    for (event_id, amount, currency) in [
        ("evt_r_amount", 1300, "jpy"),
        ("evt_r_currency", 1200, "usd"),
    ] {
        let body = json!({
            "id": event_id, "object": "event", "type": "refund.updated", "livemode": false,
            "data": {"object": {
                "id": "re_forged", "object": "refund", "amount": amount, "currency": currency,
                "payment_intent": "pi_x", "status": "succeeded",
                "metadata": {"refund_id": refund_id, "payment_id": payment_id},
            }},
        })
        .to_string();
        let processed = stack.deliver(&body).await.expect("processed");
        assert!(
            matches!(&processed, Processed::Refund(RefundApplied::Rejected(r)) if r.status == RefundStatus::Pending),
            "{event_id}: {processed:?}"
        );
        // Still pending with its amount held; the event is recorded (a redelivery is a duplicate).
        assert_eq!(
            stack.refund_attributes(&payment_id).await,
            (None, Some(1200), Some(1)),
            "{event_id}"
        );
        assert_eq!(
            stack.deliver(&body).await.expect("processed"),
            Processed::Refund(RefundApplied::Duplicate),
            "{event_id}"
        );
    }
}
