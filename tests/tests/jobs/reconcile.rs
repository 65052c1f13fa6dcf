//! Reconcile settles what webhooks and handlers left behind, exactly once.

use payonce::service::reconcile::{ReconcileConfig, Reconciled};
use payonce::service::webhooks::{Processed, QueuedEvent};
use payonce::service::{CrashPoint, EventApplied};
use payonce_tests::stack::PaymentStack;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn pay_body(order: &str, payment_method: &str) -> serde_json::Value {
    json!({"order_id": order, "order_version": 1, "payment_method": payment_method})
}

#[tokio::test]
async fn a_crash_after_the_psp_charged_with_no_webhook_is_settled_to_succeeded() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    // GIVEN the PSP charged and the invocation died before recording it; no webhook comes
    stack.charge.inject_crash(CrashPoint::AfterPspCall);
    assert_eq!(
        stack
            .pay("alice", "k", pay_body(&order, "pm_card_visa"))
            .await
            .status,
        500
    );
    let payment_id = stack.psp.charges()[0].metadata["payment_id"].clone();

    // WHEN reconcile runs once the attempt is old enough
    stack.clock.advance(Duration::from_secs(180));
    let report = stack
        .reconciler(ReconcileConfig::default())
        .run()
        .await
        .unwrap();

    // THEN it is succeeded, the order paid, the key replays 201, and the PSP holds one charge
    assert_eq!(
        (report.examined, report.succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
    let replay = stack
        .pay("alice", "k", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json["payment_id"], payment_id.as_str());
    assert_eq!(stack.psp.charges().len(), 1);
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);

    // AND a second run finds nothing left to do
    let again = stack
        .reconciler(ReconcileConfig::default())
        .run()
        .await
        .unwrap();
    assert_eq!(
        again.examined, 0,
        "settled attempts leave the in-flight index"
    );
}

#[tokio::test]
async fn an_attempt_the_psp_never_saw_is_failed_when_old_enough_and_a_younger_one_is_untouched() {
    let stack = PaymentStack::start().await;
    let old_order = stack.create_order("alice").await;
    let young_order = stack.create_order("alice").await;

    // GIVEN an attempt that died after its claim, before the PSP call, 21 minutes ago...
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    stack
        .pay("alice", "old", pay_body(&old_order, "pm_card_visa"))
        .await;
    stack.clock.advance(Duration::from_secs(21 * 60));
    // ...and another that died the same way 3 minutes ago
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    stack
        .pay("alice", "young", pay_body(&young_order, "pm_card_visa"))
        .await;
    stack.clock.advance(Duration::from_secs(180));
    let young_before = stack
        .snapshot()
        .await
        .1
        .into_iter()
        .filter(|(_, item)| {
            item.get("order_id")
                .is_some_and(|o| o.contains(&young_order))
        })
        .collect::<Vec<_>>();

    let report = stack
        .reconciler(ReconcileConfig::default())
        .run()
        .await
        .unwrap();

    // THEN the old one is failed after its PSP key was fenced, and its order released
    assert_eq!(
        (
            report.examined,
            report.abandoned,
            report.pending,
            report.errors
        ),
        (2, 1, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        stack.get_order("alice", &old_order).await.json["payment_state"],
        "unpaid"
    );
    let replay = stack
        .pay("alice", "old", pay_body(&old_order, "pm_card_visa"))
        .await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/payment-failed"),
        "{}",
        replay.body
    );
    let fenced = stack.psp.charges();
    assert_eq!(fenced.len(), 1, "the fence created one unconfirmed intent");
    assert_eq!(fenced[0].status, "canceled");
    assert_eq!(
        fenced.iter().filter(|c| c.status == "succeeded").count(),
        0,
        "nothing was charged"
    );
    // AND the order can be paid anew
    assert_eq!(
        stack
            .pay("alice", "old-2", pay_body(&old_order, "pm_card_visa"))
            .await
            .status,
        201
    );

    // AND the young one is untouched
    assert_eq!(
        stack.get_order("alice", &young_order).await.json["payment_state"],
        "processing"
    );
    let young_after = stack
        .snapshot()
        .await
        .1
        .into_iter()
        .filter(|(_, item)| {
            item.get("order_id")
                .is_some_and(|o| o.contains(&young_order))
        })
        .collect::<Vec<_>>();
    assert_eq!(young_before, young_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_runs_at_once_over_two_hundred_stuck_attempts_settle_each_once() {
    let stack = Arc::new(PaymentStack::start().await);
    // GIVEN 200 attempts whose PSP answer was lost and whose webhooks never came
    let mut orders = Vec::new();
    for i in 0..200 {
        let order = stack.create_order("alice").await;
        let reply = stack
            .pay(
                "alice",
                &format!("k{i}"),
                pay_body(&order, "pm_fake_lost_response"),
            )
            .await;
        assert_eq!(reply.status, 202);
        orders.push(order);
    }
    stack.clock.advance(Duration::from_secs(600));

    // WHEN two reconcile runs overlap
    let config = ReconcileConfig {
        page_size: 25,
        max_pages: 20,
        ..Default::default()
    };
    let (a, b) = tokio::join!(
        {
            let stack = stack.clone();
            let config = config.clone();
            tokio::spawn(async move { stack.reconciler(config).run().await })
        },
        {
            let stack = stack.clone();
            tokio::spawn(async move { stack.reconciler(config).run().await })
        }
    );
    let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());

    // THEN between them every attempt was settled exactly once, with no error surfaced
    assert_eq!(a.succeeded + b.succeeded, 200, "{a:?} {b:?}");
    assert_eq!((a.errors, b.errors), (0, 0));
    for order in &orders {
        assert_eq!(
            stack.item(&format!("order#{order}")).await.unwrap()["payment_state"],
            "S(\"paid\")"
        );
    }
    assert_eq!(stack.psp.charges().len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_racing_a_webhook_makes_one_transition() {
    for round in 0..5 {
        let stack = Arc::new(PaymentStack::start().await);
        let order = stack.create_order("alice").await;
        let reply = stack
            .pay("alice", "k", pay_body(&order, "pm_fake_lost_response"))
            .await;
        let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();
        let intent = stack.psp.charges()[0].id.clone();
        stack.clock.advance(Duration::from_secs(600));
        let body = crate::webhooks::event(
            &format!("evt_race_{round}"),
            "payment_intent.succeeded",
            &payment_id,
            &intent,
        );

        let (reconciled, webhook) = tokio::join!(
            {
                let stack = stack.clone();
                let id = payment_id.clone();
                tokio::spawn(async move {
                    stack
                        .reconciler(ReconcileConfig::default())
                        .reconcile_one(&id)
                        .await
                        .unwrap()
                })
            },
            {
                let stack = stack.clone();
                tokio::spawn(async move {
                    stack
                        .processor
                        .process(&QueuedEvent {
                            message_id: "m",
                            provider: Some("fake"),
                            body: &body,
                        })
                        .await
                        .unwrap()
                })
            }
        );
        let (reconciled, webhook) = (reconciled.unwrap(), webhook.unwrap());
        let reconcile_moved = reconciled == Reconciled::Succeeded;
        let webhook_moved = matches!(webhook, Processed::Applied(EventApplied::Moved(_)));
        assert!(
            reconcile_moved ^ webhook_moved,
            "round {round}: exactly one transition ({reconciled:?}, {webhook:?})"
        );
        assert_eq!(
            stack.get_order("alice", &order).await.json["payment_state"],
            "paid"
        );
        let replay = stack
            .pay("alice", "k", pay_body(&order, "pm_fake_lost_response"))
            .await;
        assert_eq!(replay.status, 201);
        assert_eq!(replay.json["provider_payment_id"], intent.as_str());
    }
}
