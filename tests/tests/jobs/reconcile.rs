//! Reconcile settles what webhooks and handlers left behind, exactly once.

use payonce::clock::Clock;
use payonce::domain::{FailureKind, Payment, PaymentStatus};
use payonce::ports::{ChargeRequest, ChargeStore, Psp, PspOutcome};
use payonce::service::reconcile::{ReconcileConfig, Reconciled};
use payonce::service::webhooks::{Processed, QueuedEvent};
use payonce::service::{CrashPoint, EventApplied};
use payonce_fake_psp::FakePspConfig;
use payonce_tests::stack::{api_event, completed_view, stripe_for, PaymentStack};
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
    let report = stack.reconcile().await;

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
    let again = stack.reconcile().await;
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

    let run_at_ms = stack.clock.now_ms();
    let report = stack.reconcile().await;

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

    // AND the young one is untouched, but for its next check: half its age (3 minutes) from
    // the run, pushed back by the recheck bounds' minimum of a minute at least; and the lapsed
    // lease on its key's record, which reconcile took while it asked the PSP
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
    let expected = young_before
        .into_iter()
        .map(|(pk, mut item)| {
            if pk.starts_with("payment#") {
                item.insert(
                    "check_at_ms".into(),
                    format!("N(\"{}\")", run_at_ms + 90_000),
                );
                let (_, now) = young_after
                    .iter()
                    .find(|(p, _)| *p == pk)
                    .expect("the young payment");
                assert_ne!(now["lease_token"], item["lease_token"], "the lease taken");
                for lease in ["lease_token", "lease_until_ms"] {
                    item.insert(lease.into(), now[lease].clone());
                }
            }
            (pk, item)
        })
        .collect::<Vec<_>>();
    assert_eq!(young_after, expected);
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

async fn payment(stack: &PaymentStack, payment_id: &str) -> Payment {
    stack
        .charge
        .store()
        .get_payment(payment_id)
        .await
        .expect("read the payment")
        .expect("the payment exists")
}

#[tokio::test]
async fn a_fenced_key_the_strict_psp_never_saw_is_abandoned_and_its_intent_cancelled() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    // GIVEN an attempt that died after its claim, before calling the PSP, 21 minutes ago
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    let crashed = stack
        .pay("alice", "key-fence", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(crashed.status, 500);
    let payment_id = stack.charge_record("alice", "key-fence").await.attempt_id;
    stack.clock.advance(Duration::from_secs(21 * 60));
    assert_eq!(stack.psp.requests_seen(), 0);

    // WHEN reconcile runs against the fake PSP over HTTP, which refuses confirm-only
    // parameters sent without confirm=true as Stripe does
    let report = stack.reconcile().await;

    // THEN the fence went through and the attempt is abandoned, with no error
    assert_eq!(
        (report.examined, report.abandoned, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    // AND the payment failed as abandoned (inferred, not a PSP refusal) and left the index
    let failed = payment(&stack, &payment_id).await;
    assert_eq!(failed.status, PaymentStatus::Failed);
    assert_eq!(
        failed.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Abandoned)
    );
    let item = stack.item(&format!("payment#{payment_id}")).await.unwrap();
    assert_eq!(item["failure_kind"], "S(\"abandoned\")");
    assert!(!item.contains_key("inflight"), "{item:?}");
    // AND the order is released, naming no attempt
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"unpaid\")");
    assert!(!order_item.contains_key("payment_id"), "{order_item:?}");
    // AND the key is COMPLETED with the failed payment
    let record = stack.charge_record("alice", "key-fence").await;
    assert_eq!(record.lease(), None);
    assert_eq!(completed_view(&record).status, PaymentStatus::Failed);
    // AND the PSP's ledger holds only the fence's intent under the attempt's key, canceled
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(
        (
            charges[0].status.as_str(),
            charges[0].outcome.as_str(),
            charges[0].idempotency_key.clone(),
            charges[0].metadata.get("payment_id"),
            charges[0].amount
        ),
        (
            "canceled",
            "canceled",
            Some(format!("payonce-charge-{payment_id}")),
            Some(&payment_id),
            3000
        )
    );
    // AND it took one lookup, one fence and one cancel
    assert_eq!(stack.psp.requests_seen(), 3);
}

#[tokio::test]
async fn intents_processing_or_requiring_action_are_pending_and_neither_fenced_nor_failed() {
    // GIVEN a PSP whose processing and requires_action intents stay so for an hour
    let stack = PaymentStack::start_with(
        FakePspConfig {
            processing_for: Duration::from_secs(3600),
            requires_action_for: Duration::from_secs(3600),
            ..FakePspConfig::default()
        },
        Default::default(),
    )
    .await;
    // AND an attempt left in each of those states (the create answered a non-final intent)
    let mut attempts = Vec::new();
    for (token, status) in [
        ("pm_fake_processing", "processing"),
        ("pm_fake_requires_action", "requires_action"),
    ] {
        let order = stack.create_order("alice").await;
        let reply = stack.pay("alice", token, pay_body(&order, token)).await;
        assert_eq!(
            (reply.status, reply.json["status"].as_str()),
            (202, Some("processing")),
            "{token}: {}",
            reply.body
        );
        let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();
        attempts.push((order, payment_id, status));
    }
    // AND both are older than the age at which an attempt the PSP cannot find gets fenced
    stack.clock.advance(Duration::from_secs(21 * 60));
    let seen = stack.psp.requests_seen();
    let run_at_ms = stack.clock.now_ms();

    // WHEN reconcile runs
    let report = stack.reconcile().await;

    // THEN both are pending: looked up once each, never fenced, failed or cancelled
    assert_eq!(
        (
            report.examined,
            report.pending,
            report.abandoned,
            report.declined,
            report.succeeded,
            report.errors
        ),
        (2, 2, 0, 0, 0, 0),
        "{report:?}"
    );
    assert_eq!(stack.psp.requests_seen() - seen, 2, "one lookup each");
    for (order, payment_id, status) in &attempts {
        let pending = payment(&stack, payment_id).await;
        assert_eq!(
            (pending.status, pending.failure.clone()),
            (PaymentStatus::Processing, None),
            "{status}"
        );
        let order_item = stack.item(&format!("order#{order}")).await.unwrap();
        assert_eq!(order_item["payment_state"], "S(\"processing\")", "{status}");
        // AND its next check is pushed back by half its age (21 minutes)
        assert_eq!(pending.check_at_ms, run_at_ms + 630_000, "{status}");
        let charge = stack
            .psp
            .charges()
            .into_iter()
            .find(|c| c.metadata.get("payment_id") == Some(payment_id))
            .unwrap();
        assert_eq!(
            (charge.status.as_str(), charge.outcome.as_str()),
            (*status, "pending")
        );
    }
    assert_eq!(stack.psp.charges().len(), 2);

    // AND a run right after leaves them alone until that check is due
    let again = stack.reconcile().await;
    assert_eq!(again.examined, 0, "{again:?}");
    assert_eq!(stack.psp.requests_seen() - seen, 2);
}

#[tokio::test]
async fn an_attempt_older_than_the_fence_window_that_the_psp_cannot_find_is_not_fenced() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    // GIVEN an attempt that died before calling the PSP, 23 hours and a minute ago: the PSP may
    // forget keys from 24 hours on, so a fence now could prove nothing
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    stack
        .pay("alice", "key-old", pay_body(&order, "pm_card_visa"))
        .await;
    let payment_id = stack.charge_record("alice", "key-old").await.attempt_id;
    stack.clock.advance(Duration::from_secs(23 * 3600 + 60));

    // WHEN reconcile runs
    let report = stack.reconcile().await;

    // THEN it only looked the attempt up: no fence, nothing created at the PSP
    assert_eq!(
        (
            report.examined,
            report.pending,
            report.abandoned,
            report.errors
        ),
        (1, 1, 0, 0),
        "{report:?}"
    );
    assert_eq!(stack.psp.requests_seen(), 1, "the lookup alone");
    assert!(stack.psp.charges().is_empty(), "{:?}", stack.psp.charges());
    // AND the attempt stays processing for an operator, its order reserved
    let stuck = payment(&stack, &payment_id).await;
    assert_eq!(
        (stuck.status, stuck.failure),
        (PaymentStatus::Processing, None)
    );
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"processing\")");
    assert_eq!(order_item["payment_id"], format!("S(\"{payment_id}\")"));
}

/// An order whose version-1 attempt was released (its PSP call could not connect) and which was
/// then edited to version 2 (3 × 1500 JPY); returns the order and the attempt, still processing.
async fn released_then_edited(stack: &PaymentStack) -> (String, Payment) {
    let order = stack.create_order("alice").await;
    let unsent = stack
        .pay_through(
            &stack.cut_off_charge(),
            "alice",
            "key-v1",
            pay_body(&order, "pm_card_visa"),
        )
        .await;
    assert_eq!(
        (unsent.status, unsent.problem_type()),
        (503, "/problems/psp-unavailable"),
        "{}",
        unsent.body
    );
    let attempt = payment(
        stack,
        &stack.charge_record("alice", "key-v1").await.attempt_id,
    )
    .await;
    assert_eq!(attempt.status, PaymentStatus::Processing);
    let patch = json!({"version": 1, "items": [{"sku": "A1", "quantity": 3, "unit_amount": 1500}]});
    let revised = stack
        .orders_request(api_event(
            "PATCH",
            &format!("/orders/{order}"),
            Some("alice"),
            &[],
            &patch.to_string(),
        ))
        .await;
    assert_eq!(revised.status, 200, "{}", revised.body);
    assert_eq!(revised.json["version"], 2);
    (order, attempt)
}

/// The PSP charges `attempt` after all, under its own key (the call that "could not connect"
/// got through another way); returns the intent's id.
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

/// The order is at version 2, unpaid, naming no attempt, with the edited amount.
async fn assert_edited_order_unpaid(stack: &PaymentStack, order: &str) {
    let read = stack.get_order("alice", order).await;
    assert_eq!(
        (
            read.json["version"].as_i64(),
            read.json["amount"].as_i64(),
            read.json["payment_state"].as_str()
        ),
        (Some(2), Some(4500), Some("unpaid")),
        "{}",
        read.body
    );
    let item = stack.item(&format!("order#{order}")).await.unwrap();
    assert!(!item.contains_key("payment_id"), "{item:?}");
}

#[tokio::test]
async fn a_late_success_found_by_reconcile_never_pays_the_edited_version_of_the_order() {
    let stack = PaymentStack::start().await;
    // GIVEN attempt A on version 1, released, the order then edited to version 2
    let (order, attempt) = released_then_edited(&stack).await;
    // AND the PSP charged A after all, and no webhook came
    let intent = psp_charges_late(&stack, &attempt).await;
    stack.clock.advance(Duration::from_secs(180));

    // WHEN reconcile finds A's success
    let report = stack.reconcile().await;

    // THEN A is succeeded with the PSP's intent
    assert_eq!(
        (report.examined, report.succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    let settled = payment(&stack, &attempt.payment_id).await;
    assert_eq!(
        (settled.status, settled.provider_payment_id.as_deref()),
        (PaymentStatus::Succeeded, Some(intent.as_str()))
    );
    // AND the order stays unpaid at version 2: A paid version 1, which no longer exists
    assert_edited_order_unpaid(&stack, &order).await;
    // AND A's key replays its success
    let replay = stack
        .pay("alice", "key-v1", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(
        (replay.status, replay.json["payment_id"].as_str()),
        (201, Some(attempt.payment_id.as_str())),
        "{}",
        replay.body
    );
    assert_eq!(stack.psp.succeeded_charges_for(&attempt.payment_id), 1);
    assert_eq!(stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn a_late_success_by_webhook_never_pays_the_edited_version_of_the_order() {
    let stack = PaymentStack::start().await;
    // GIVEN attempt A on version 1, released, the order then edited to version 2
    let (order, attempt) = released_then_edited(&stack).await;
    // AND the PSP charged A after all
    let intent = psp_charges_late(&stack, &attempt).await;

    // WHEN A's payment_intent.succeeded webhook arrives
    let body = crate::webhooks::event(
        "evt_late_success",
        "payment_intent.succeeded",
        &attempt.payment_id,
        &intent,
    );
    let processed = stack
        .processor
        .process(&QueuedEvent {
            message_id: "m-late",
            provider: Some("fake"),
            body: &body,
        })
        .await
        .unwrap();

    // THEN A is succeeded
    assert!(
        matches!(processed, Processed::Applied(EventApplied::Moved(_))),
        "{processed:?}"
    );
    let settled = payment(&stack, &attempt.payment_id).await;
    assert_eq!(
        (settled.status, settled.provider_payment_id.as_deref()),
        (PaymentStatus::Succeeded, Some(intent.as_str()))
    );
    // AND the order stays unpaid at version 2
    assert_edited_order_unpaid(&stack, &order).await;
}

#[tokio::test]
async fn a_charge_found_for_another_amount_is_never_booked_and_raises_the_alarm() {
    let (logs, _capture) = payonce_tests::logs::LogCapture::install();
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    // GIVEN an attempt of 3000 JPY that died after its claim, before calling the PSP
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    let crashed = stack
        .pay("alice", "key-other", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(crashed.status, 500);
    let payment_id = stack.charge_record("alice", "key-other").await.attempt_id;
    // AND a charge at the PSP that names our payment id but is for another amount (not ours:
    // another key, another amount)
    let stranger = stripe_for(&stack.psp)
        .create_charge(
            &ChargeRequest {
                payment_id: payment_id.clone(),
                amount: 2999,
                currency: payonce::domain::Currency::Jpy,
                payment_method: "pm_card_visa".into(),
                idempotency_key: format!("someone-else-{payment_id}"),
                return_url: None,
                capture: payonce::domain::CaptureMethod::Automatic,
                earlier_may_run: false,
            },
            Duration::from_secs(5),
        )
        .await;
    assert!(
        matches!(stranger, PspOutcome::Approved { .. }),
        "{stranger:?}"
    );
    stack.clock.advance(Duration::from_secs(180));

    // WHEN reconcile looks the attempt up
    let report = stack.reconcile().await;

    // THEN nothing is booked: the attempt is still processing, the order still held by it
    assert_eq!(
        (report.examined, report.succeeded, report.pending),
        (1, 0, 1),
        "{report:?}"
    );
    assert_eq!(
        payment(&stack, &payment_id).await.status,
        PaymentStatus::Processing
    );
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"processing\")");
    // AND the untrusted-answer alarm names the payment and both amounts
    let alarms = logs.alarms("psp-answer-untrusted");
    assert_eq!(alarms.len(), 1, "{alarms:#?}");
    assert_eq!(alarms[0]["payment_id"], payment_id.as_str());
    assert_eq!(alarms[0]["amount"], 3000);
}

#[tokio::test]
async fn a_2c2p_invoice_whose_token_was_never_spent_is_abandoned_once_its_invocation_is_gone() {
    // GIVEN 2C2P issued the attempt's payment token, then failed the Do Payment before any
    // transaction (9993): the attempt is unknown (202) — the sim's seed 144 on the 2C2P model
    let stack = PaymentStack::start_with(
        FakePspConfig::twoc2p(),
        payonce::service::ChargeConfig::default(),
    )
    .await;
    let order = stack.create_order("alice").await;
    let reply = stack
        .pay(
            "alice",
            "k-9993",
            pay_body(&order, "pm_fake_error_before_charge"),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();
    assert!(stack.psp.charges().is_empty());

    // WHEN reconcile runs once the attempt is older than the abandon delay
    stack.clock.advance(Duration::from_secs(21 * 60));
    let report = stack.reconcile().await;

    // THEN the invoice is proven used without a charge (9015, then a signed "not found"), and
    // the attempt abandoned: failed, the order payable again, nothing charged
    assert_eq!(
        (report.examined, report.abandoned, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    let failed = payment(&stack, &payment_id).await;
    assert_eq!(failed.status, PaymentStatus::Failed);
    assert_eq!(
        failed.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Abandoned)
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "unpaid"
    );
    assert!(stack.psp.charges().is_empty());
    // AND a new key pays the order
    let again = stack
        .pay("alice", "k-again", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(again.status, 201, "{}", again.body);
}
