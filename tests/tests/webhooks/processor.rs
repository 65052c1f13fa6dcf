//! The processor applies each event exactly once and only moves states forward.

use super::event;
use payonce::service::webhooks::{Processed, QueuedEvent};
use payonce::service::EventApplied;
use payonce_tests::stack::PaymentStack;
use serde_json::json;
use std::sync::Arc;

async fn deliver(stack: &PaymentStack, body: &str) -> Processed {
    stack
        .processor
        .process(&QueuedEvent {
            message_id: "m",
            provider: Some("fake"),
            body,
        })
        .await
        .expect("processing succeeds")
}

#[tokio::test]
async fn the_same_event_five_times_in_sequence_is_one_transition() {
    let stack = PaymentStack::start().await;
    let (order, payment_id) = super::processing_payment(&stack, "alice", "k").await;
    let body = event("evt_seq", "payment_intent.succeeded", &payment_id, "pi_seq");

    stack.counter.reset();
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        outcomes.push(deliver(&stack, &body).await);
    }

    assert!(
        matches!(&outcomes[0], Processed::Applied(EventApplied::Moved(p)) if p.status.as_str() == "succeeded")
    );
    // The redeliveries find the payment where the first left it: nothing to do, nothing written.
    assert!(
        outcomes[1..]
            .iter()
            .all(|o| matches!(o, Processed::Applied(EventApplied::Unchanged(p)) if p.status.as_str() == "succeeded")),
        "{outcomes:?}"
    );
    assert_eq!(
        stack.counter.by_operation().get("TransactWriteItems"),
        Some(&1),
        "{:?}",
        stack.counter.by_operation()
    );
    let (idempotency, payments) = stack.snapshot().await;
    assert_eq!(
        idempotency
            .keys()
            .filter(|pk| pk.starts_with("webhook#fake#evt_seq"))
            .count(),
        1
    );
    assert!(payments[&format!("payment#{payment_id}")]["status"].contains("succeeded"));
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
    // The idempotency record's mirror follows, so the client's retry sees the outcome.
    let replay = stack.pay("alice", "k", json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"})).await;
    assert_eq!(
        (replay.status, replay.json["status"].as_str()),
        (201, Some("succeeded"))
    );
    assert_eq!(replay.json["provider_payment_id"], "pi_seq");
}

#[tokio::test]
async fn the_webhook_confirming_a_recorded_success_is_one_read_and_no_write() {
    // GIVEN a payment the charge already recorded as succeeded
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let reply = stack
        .pay(
            "alice",
            "k",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(
        (reply.status, reply.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        reply.body
    );
    let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();
    let intent = reply.json["provider_payment_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (idempotency_before, payments_before) = stack.snapshot().await;

    // WHEN the PSP's success webhook for that intent arrives, and is redelivered
    stack.counter.reset();
    let body = event(
        "evt_confirm",
        "payment_intent.succeeded",
        &payment_id,
        &intent,
    );
    let first = deliver(&stack, &body).await;
    let again = deliver(&stack, &body).await;

    // THEN each delivery is one consistent read of the payment and nothing else
    for outcome in [&first, &again] {
        assert!(
            matches!(outcome, Processed::Applied(EventApplied::Unchanged(p)) if p.status.as_str() == "succeeded"),
            "{outcome:?}"
        );
    }
    assert_eq!(
        stack.counter.by_operation(),
        [("GetItem".to_owned(), 2)].into_iter().collect(),
    );
    // AND no item changed: no dedup record, the payment and order as the charge left them
    let (idempotency_after, payments_after) = stack.snapshot().await;
    assert_eq!(idempotency_after, idempotency_before);
    assert_eq!(payments_after, payments_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_event_five_times_at_once_is_one_transition() {
    let stack = Arc::new(PaymentStack::start().await);
    let (order, payment_id) = super::processing_payment(&stack, "alice", "k").await;
    let body = Arc::new(event(
        "evt_par",
        "payment_intent.succeeded",
        &payment_id,
        "pi_par",
    ));
    let before = stack.item(&format!("payment#{payment_id}")).await.unwrap();

    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let (stack, body) = (stack.clone(), body.clone());
            tokio::spawn(async move { deliver(&stack, &body).await })
        })
        .collect();
    let mut moved = 0;
    for task in tasks {
        match task.await.unwrap() {
            Processed::Applied(EventApplied::Moved(_)) => moved += 1,
            Processed::Applied(EventApplied::Duplicate | EventApplied::Unchanged(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    assert_eq!(moved, 1);
    let after = stack.item(&format!("payment#{payment_id}")).await.unwrap();
    assert!(before["status"].contains("processing"));
    assert!(after["status"].contains("succeeded"));
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
}

#[tokio::test]
async fn a_late_failure_never_overrides_success_and_success_beats_an_earlier_failure() {
    let stack = PaymentStack::start().await;

    // succeeded, then payment_failed: stays succeeded
    let (order, payment_id) = super::processing_payment(&stack, "alice", "k1").await;
    deliver(
        &stack,
        &event("evt_a1", "payment_intent.succeeded", &payment_id, "pi_a"),
    )
    .await;
    let late = deliver(
        &stack,
        &event(
            "evt_a2",
            "payment_intent.payment_failed",
            &payment_id,
            "pi_a",
        ),
    )
    .await;
    assert!(
        matches!(late, Processed::Applied(EventApplied::Unchanged(ref p)) if p.status.as_str() == "succeeded"),
        "{late:?}"
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
    let replay = stack.pay("alice", "k1", json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"})).await;
    assert_eq!(replay.status, 201);

    // payment_failed arriving first, then the success (reordered): the money moved, so succeeded
    let (order, payment_id) = super::processing_payment(&stack, "bob", "k2").await;
    deliver(
        &stack,
        &event(
            "evt_b1",
            "payment_intent.payment_failed",
            &payment_id,
            "pi_b",
        ),
    )
    .await;
    assert_eq!(
        stack.get_order("bob", &order).await.json["payment_state"],
        "unpaid"
    );
    let failed_replay = stack.pay("bob", "k2", json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"})).await;
    assert_eq!(
        (failed_replay.status, failed_replay.problem_type()),
        (402, "/problems/card-declined")
    );
    deliver(
        &stack,
        &event("evt_b2", "payment_intent.succeeded", &payment_id, "pi_b"),
    )
    .await;
    assert_eq!(
        stack.get_order("bob", &order).await.json["payment_state"],
        "paid"
    );
    let final_replay = stack.pay("bob", "k2", json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"})).await;
    assert_eq!(final_replay.status, 201);
}

#[tokio::test]
async fn a_success_arriving_before_the_charge_handler_finished_leaves_one_consistent_state() {
    // The PSP charges at once but answers only after the handler's PSP timeout; its webhook
    // is applied while the handler is still waiting.
    let psp = payonce_fake_psp::FakePspConfig {
        slow_delay: std::time::Duration::from_secs(5),
        ..Default::default()
    };
    let charge = payonce::service::ChargeConfig {
        psp_timeout: std::time::Duration::from_millis(1500),
        ..Default::default()
    };
    let stack = Arc::new(PaymentStack::start_with(psp, charge).await);
    let order = stack.create_order("alice").await;
    let body = json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_slow"});
    let paying = {
        let (stack, body) = (stack.clone(), body.clone());
        tokio::spawn(async move { stack.pay("alice", "k-slow", body).await })
    };
    let charge = loop {
        if let Some(charge) = stack.psp.charges().into_iter().next() {
            break charge;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let payment_id = charge.metadata["payment_id"].clone();
    let applied = deliver(
        &stack,
        &event(
            "evt_early",
            "payment_intent.succeeded",
            &payment_id,
            &charge.id,
        ),
    )
    .await;
    assert!(
        matches!(applied, Processed::Applied(EventApplied::Moved(_))),
        "{applied:?}"
    );

    let reply = paying.await.unwrap();
    // The handler's own view was "unknown", but it records what the webhook established.
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(reply.json["status"], "succeeded");
    let replay = stack.pay("alice", "k-slow", body).await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
    assert_eq!(stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn events_we_do_not_apply_are_acknowledged_and_unknown_payments_are_retried() {
    let stack = PaymentStack::start().await;
    let other =
        json!({"id": "evt_x", "type": "customer.created", "data": {"object": {"id": "cus_1"}}})
            .to_string();
    assert!(matches!(
        deliver(&stack, &other).await,
        Processed::Ignored(_)
    ));
    let before = stack.snapshot().await;
    let missing = event(
        "evt_missing",
        "payment_intent.succeeded",
        "pay_unknown",
        "pi_x",
    );
    let failed = stack
        .processor
        .process(&QueuedEvent {
            message_id: "m",
            provider: Some("fake"),
            body: &missing,
        })
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(
        stack.snapshot().await,
        before,
        "a failed event leaves no dedup record behind"
    );
}
