//! The main path and its failure modes, one guarantee per test.

use async_trait::async_trait;
use payonce::adapters::faults::Faults;
use payonce::adapters::psp::transport::{
    CallFailure, HttpTransport, PspTransport, WireCall, WireReply,
};
use payonce::adapters::psp::StripePsp;
use payonce::domain::{Currency, FailureKind, PaymentStatus, PaymentView, RefundSettlement};
use payonce::ports::{
    ChargeRequest, ChargeStore, Fence, Psp, PspError, PspLookup, PspOutcome, RefundOutcome,
    RefundRequest,
};
use payonce::service::{ChargeService, CrashPoint};
use payonce_tests::stack::{completed_view, stripe_for, PaymentStack, FAKE_API_KEY};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

fn body(order_id: &str, payment_method: &str) -> serde_json::Value {
    json!({"order_id": order_id, "order_version": 1, "payment_method": payment_method})
}

#[tokio::test]
async fn approved_charge_pays_the_order_and_a_replay_answers_from_one_request() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    // WHEN alice pays
    stack.counter.reset();
    let first = stack
        .pay("alice", "key-approve-1", body(&order, "pm_card_visa"))
        .await;

    // THEN 201 with the payment, in at most three DynamoDB requests
    assert_eq!(first.status, 201, "{}", first.body);
    assert!(
        stack.counter.total() <= 3,
        "first charge cost {:?}",
        stack.counter.by_operation()
    );
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
    assert_eq!(first.json["status"], "succeeded");
    assert_eq!(first.json["amount"], 3000);
    assert_eq!(first.json["currency"], "jpy");
    assert_eq!(first.json["order_id"], order.as_str());
    assert!(first.json["provider_payment_id"]
        .as_str()
        .unwrap()
        .starts_with("pi_"));
    assert!(first.header("x-request-id").is_some());
    assert_eq!(first.header("idempotent-replayed"), None);

    // AND the PSP holds one charge, under the key derived from the payment
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(
        charges[0].idempotency_key.as_deref(),
        Some(format!("payonce-charge-{payment_id}").as_str())
    );
    assert_eq!(charges[0].metadata.get("payment_id"), Some(&payment_id));
    assert_eq!(charges[0].amount, 3000);

    // AND the order is paid, by this payment
    let stored = stack.get_order("alice", &order).await;
    assert_eq!(stored.json["payment_state"], "paid");
    let item = stack.item(&format!("order#{order}")).await.unwrap();
    assert!(item["payment_id"].contains(&payment_id));

    // WHEN the same request is repeated, THEN the stored payment answers, from one request
    stack.counter.reset();
    let replay = stack
        .pay("alice", "key-approve-1", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json, first.json);
    assert_eq!(
        stack.counter.by_operation(),
        [("BatchGetItem".to_owned(), 1)].into()
    );
    assert_eq!(stack.psp.charges().len(), 1);

    // AND GET /payments/{id} shows it to its owner only
    let get = stack
        .charge_request(payonce_tests::stack::api_event(
            "GET",
            &format!("/payments/{payment_id}"),
            Some("alice"),
            &[],
            "",
        ))
        .await;
    assert_eq!(get.status, 200);
    // The POST's view, with what was refunded of it (nothing).
    let mut details = first.json.clone();
    details["amount_refunded"] = json!(0);
    details["amount_refund_pending"] = json!(0);
    details["refunds"] = json!([]);
    assert_eq!(get.json, details);
}

#[tokio::test]
async fn a_key_retried_days_later_replays_its_payment_and_reused_elsewhere_is_422() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let first = stack
        .pay("alice", "key-kept", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
    // AND the key's record is on its payment: the idempotency table holds none for it
    let (records, _) = stack.snapshot().await;
    assert!(
        records
            .iter()
            .all(|(pk, _)| !pk.starts_with("payments.create#")),
        "{records:?}"
    );

    // WHEN the same request comes again three days later (past any other record's retention)
    stack.clock.advance(Duration::from_secs(3 * 86_400));
    stack.counter.reset();
    let late = stack
        .pay("alice", "key-kept", body(&order, "pm_card_visa"))
        .await;
    // THEN it replays the payment from one request, and the PSP was called once in all
    assert_eq!(
        (late.status, late.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(late.json, first.json);
    assert_eq!(
        stack.counter.by_operation(),
        [("BatchGetItem".to_owned(), 1)].into()
    );
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
    assert_eq!(stack.psp.charges().len(), 1);

    // AND the key reused for another order is a mismatch that writes nothing
    let other = stack.create_order("alice").await;
    let before = stack.snapshot().await;
    let reused = stack
        .pay("alice", "key-kept", body(&other, "pm_card_visa"))
        .await;
    assert_eq!(reused.status, 422, "{}", reused.body);
    assert_eq!(reused.json["type"], "/problems/idempotency-key-mismatch");
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn lost_response_is_answered_202_then_the_settled_payment_replays_201() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    // WHEN the PSP charges but its answer is lost
    let first = stack
        .pay("alice", "key-lost", body(&order, "pm_fake_lost_response"))
        .await;

    // THEN the client learns the payment is processing, and when to ask again
    assert_eq!(first.status, 202, "{}", first.body);
    assert_eq!(first.json["status"], "processing");
    assert!(first.header("retry-after").is_some());
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "processing"
    );

    // AND a retry before settlement replays 202 without calling the PSP again
    let seen = stack.psp.requests_seen();
    let early = stack
        .pay("alice", "key-lost", body(&order, "pm_fake_lost_response"))
        .await;
    assert_eq!(
        (early.status, early.header("idempotent-replayed")),
        (202, Some("true"))
    );
    assert_eq!(stack.psp.requests_seen(), seen);

    // WHEN the attempt is settled from the PSP (as reconcile or the webhook does)
    let lookup = payonce::ports::Psp::lookup(stack.charge.psp(), &payment_id)
        .await
        .unwrap();
    let settlement = payonce::service::settlement_of(lookup, 0).expect("the PSP knows the charge");
    payonce::service::apply_settlement(stack.charge.store(), &payment_id, &settlement)
        .await
        .unwrap();

    // THEN the same key answers 201 with the settled payment, and the order is paid
    let after = stack
        .pay("alice", "key-lost", body(&order, "pm_fake_lost_response"))
        .await;
    assert_eq!(after.status, 201, "{}", after.body);
    assert_eq!(after.header("idempotent-replayed"), Some("true"));
    assert_eq!(after.json["status"], "succeeded");
    assert_eq!(after.json["payment_id"], payment_id.as_str());
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
    assert_eq!(stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn crash_after_claim_holds_the_key_then_a_takeover_charges_once_under_the_same_psp_key() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    // GIVEN an invocation that died after claiming, before calling the PSP
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    let crashed = stack
        .pay("alice", "key-crash", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(crashed.status, 500);
    assert_eq!(crashed.problem_type(), "/problems/internal");
    assert!(
        !crashed.body.contains("crash"),
        "a 500 never carries internal detail: {}",
        crashed.body
    );
    assert_eq!(stack.psp.requests_seen(), 0);

    // WHEN the client retries within the lease, THEN 409 in use, still no PSP call
    stack.clock.advance(Duration::from_secs(10));
    let early = stack
        .pay("alice", "key-crash", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(early.status, 409);
    assert_eq!(early.problem_type(), "/problems/idempotency-key-in-use");
    let retry_after: u64 = early.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=21).contains(&retry_after), "{retry_after}");
    assert_eq!(stack.psp.requests_seen(), 0);

    // WHEN the lease has lapsed, THEN the retry takes the attempt over and pays once
    stack.clock.advance(Duration::from_secs(25));
    let late = stack
        .pay("alice", "key-crash", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(late.status, 201, "{}", late.body);
    let payment_id = late.json["payment_id"].as_str().unwrap();
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(
        charges[0].idempotency_key.as_deref(),
        Some(format!("payonce-charge-{payment_id}").as_str())
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
}

#[tokio::test]
async fn crash_after_the_psp_charged_then_takeover_reuses_the_psp_key_and_charges_once() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    // GIVEN an invocation that died after the PSP charged, before recording it
    stack.charge.inject_crash(CrashPoint::AfterPspCall);
    assert_eq!(
        stack
            .pay("alice", "key-crash-2", body(&order, "pm_card_visa"))
            .await
            .status,
        500
    );
    assert_eq!(stack.psp.charges().len(), 1);

    // WHEN the lease lapses and the client retries
    stack.clock.advance(Duration::from_secs(31));
    let retry = stack
        .pay("alice", "key-crash-2", body(&order, "pm_card_visa"))
        .await;

    // THEN the same PSP key is re-sent, the PSP replays its charge, and there is still one
    assert_eq!(retry.status, 201, "{}", retry.body);
    let payment_id = retry.json["payment_id"].as_str().unwrap();
    assert_eq!(stack.psp.charges().len(), 1);
    assert_eq!(stack.psp.succeeded_charges_for(payment_id), 1);
}

#[tokio::test]
async fn a_new_key_for_the_same_order_is_refused_while_processing_and_once_paid() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    // GIVEN an attempt stuck in processing (crashed after its claim)
    stack.charge.inject_crash(CrashPoint::AfterClaim);
    stack
        .pay("alice", "tab-1", body(&order, "pm_card_visa"))
        .await;

    // WHEN a second tab pays the same order with a new key
    let before = stack.snapshot().await;
    let second = stack
        .pay("alice", "tab-2", body(&order, "pm_card_mastercard"))
        .await;

    // THEN 409 payment-in-progress, nothing written, no PSP call
    assert_eq!(second.status, 409);
    assert_eq!(second.problem_type(), "/problems/payment-in-progress");
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), 0);

    // WHEN the first attempt completes (takeover after its lease) and a third key arrives
    stack.clock.advance(Duration::from_secs(31));
    assert_eq!(
        stack
            .pay("alice", "tab-1", body(&order, "pm_card_visa"))
            .await
            .status,
        201
    );
    let seen = stack.psp.requests_seen();
    let before = stack.snapshot().await;
    let third = stack
        .pay("alice", "tab-3", body(&order, "pm_card_visa"))
        .await;

    // THEN 409 order-already-paid, nothing written, no PSP call
    assert_eq!(third.status, 409);
    assert_eq!(third.problem_type(), "/problems/order-already-paid");
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    assert_eq!(stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn a_decline_is_stored_and_replayed_and_releases_the_order_for_another_card() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    let declined = stack
        .pay(
            "alice",
            "key-decline",
            body(&order, "pm_card_visa_chargeDeclined"),
        )
        .await;
    assert_eq!(declined.status, 402, "{}", declined.body);
    assert_eq!(declined.problem_type(), "/problems/card-declined");
    assert_eq!(declined.json["decline_code"], "generic_decline");
    assert_eq!(
        declined.header("content-type"),
        Some("application/problem+json")
    );
    let declined_id = declined.json["payment_id"].as_str().unwrap().to_owned();
    // AND its instance is this request's id, the x-request-id header
    let first_request = declined.header("x-request-id").unwrap().to_owned();
    assert_eq!(declined.json["instance"], first_request.as_str());
    // AND the record keeps that id beside the stored outcome
    assert_eq!(
        stack.charge_record("alice", "key-decline").await.request_id,
        Some(first_request.clone())
    );

    let seen = stack.psp.requests_seen();
    stack.counter.reset();
    let replay = stack
        .pay(
            "alice",
            "key-decline",
            body(&order, "pm_card_visa_chargeDeclined"),
        )
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (402, Some("true"))
    );
    // AND a failed payment may still move (a late success), so its replay is answered only
    // after the eventually consistent load is read again consistently: two reads, no write
    assert_eq!(
        stack.counter.by_operation(),
        [("BatchGetItem".to_owned(), 2)].into()
    );
    assert_eq!(replay.json["payment_id"], declined_id.as_str());
    // AND the replayed problem names the original request, while x-request-id is its own
    assert_eq!(replay.json["instance"], first_request.as_str());
    assert_ne!(replay.header("x-request-id"), Some(first_request.as_str()));
    assert_eq!(
        stack.psp.requests_seen(),
        seen,
        "a replay never calls the PSP"
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "unpaid"
    );

    let insufficient = stack
        .pay(
            "alice",
            "key-decline-2",
            body(&order, "pm_card_chargeDeclinedInsufficientFunds"),
        )
        .await;
    assert_eq!(insufficient.json["decline_code"], "insufficient_funds");

    let paid = stack
        .pay("alice", "key-new-card", body(&order, "pm_card_mastercard"))
        .await;
    assert_eq!(paid.status, 201, "{}", paid.body);
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
    let succeeded: Vec<_> = stack
        .psp
        .charges()
        .into_iter()
        .filter(|c| c.status == "succeeded")
        .collect();
    assert_eq!(succeeded.len(), 1);
}

#[tokio::test]
async fn a_rejected_payment_method_is_a_stored_402() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let rejected = stack
        .pay("alice", "key-rejected", body(&order, "pm_does_not_exist"))
        .await;
    assert_eq!(rejected.status, 402, "{}", rejected.body);
    assert_eq!(rejected.problem_type(), "/problems/payment-method-rejected");
    let replay = stack
        .pay("alice", "key-rejected", body(&order, "pm_does_not_exist"))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (402, Some("true"))
    );
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "unpaid"
    );
}

#[tokio::test]
async fn psp_unreachable_is_503_releases_the_order_and_the_retry_reuses_the_attempt() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let base = stack.psp.base_url();
    // A PSP that refuses connections: the same adapter, pointed at a closed port.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let unreachable = StripePsp::new(payonce::adapters::psp::StripeConfig::new(
        format!("http://{closed}"),
        "sk",
    ))
    .unwrap();
    let cut_off = payonce::service::ChargeService::new(
        stack.charge.store().clone(),
        unreachable,
        Default::default(),
    );
    let first = payonce_tests::stack::Reply::from(
        payonce_charge::handler::handle(
            &cut_off,
            payonce_tests::stack::api_event(
                "POST",
                "/payments",
                Some("alice"),
                &[("idempotency-key", "key-503")],
                &body(&order, "pm_card_visa").to_string(),
            ),
        )
        .await,
    );
    assert_eq!(first.status, 503, "{}", first.body);
    assert_eq!(first.problem_type(), "/problems/psp-unavailable");
    assert!(first.header("retry-after").is_some());
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "unpaid"
    );

    // The retry, with the PSP back, takes the same attempt over and pays once.
    assert!(base.starts_with("http://127.0.0.1"));
    let retry = stack
        .pay("alice", "key-503", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    let payment_id = retry.json["payment_id"].as_str().unwrap();
    assert_eq!(
        stack.psp.charges()[0].idempotency_key.as_deref(),
        Some(format!("payonce-charge-{payment_id}").as_str())
    );
    assert_eq!(stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn same_key_with_another_request_is_422_and_writes_nothing() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    assert_eq!(
        stack
            .pay("alice", "key-422", body(&order, "pm_card_visa"))
            .await
            .status,
        201
    );
    let seen = stack.psp.requests_seen();
    let before = stack.snapshot().await;

    let other_method = stack
        .pay("alice", "key-422", body(&order, "pm_card_mastercard"))
        .await;
    let other_version = stack
        .pay(
            "alice",
            "key-422",
            json!({"order_id": order, "order_version": 2, "payment_method": "pm_card_visa"}),
        )
        .await;
    // Field order and whitespace do not make a different request.
    let reordered = stack
        .charge_request(payonce_tests::stack::api_event(
            "POST",
            "/payments",
            Some("alice"),
            &[("idempotency-key", "key-422")],
            &format!("{{ \"payment_method\":\"pm_card_visa\",\n \"order_version\": 1, \"order_id\": \"{order}\" }}"),
        ))
        .await;

    for reply in [&other_method, &other_version] {
        assert_eq!(reply.status, 422, "{}", reply.body);
        assert_eq!(reply.problem_type(), "/problems/idempotency-key-mismatch");
    }
    assert_eq!(
        (reordered.status, reordered.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
}

#[tokio::test]
async fn keys_and_orders_are_scoped_per_user() {
    let stack = PaymentStack::start().await;
    let alice_order = stack.create_order("alice").await;
    let bob_order = stack.create_order("bob").await;

    let alice = stack
        .pay("alice", "shared-key", body(&alice_order, "pm_card_visa"))
        .await;
    let alice_payment = alice.json["payment_id"].as_str().unwrap().to_owned();

    // Bob's same key is his own, independent payment.
    let bob = stack
        .pay("bob", "shared-key", body(&bob_order, "pm_card_visa"))
        .await;
    assert_eq!((alice.status, bob.status), (201, 201));
    assert_ne!(bob.json["payment_id"], alice.json["payment_id"]);
    assert_eq!(bob.header("idempotent-replayed"), None);
    assert_eq!(stack.psp.charges().len(), 2);

    // Bob cannot pay, read or probe Alice's order or payment: 404, nothing written.
    let before = stack.snapshot().await;
    let pay_theirs = stack
        .pay("bob", "bob-key-2", body(&alice_order, "pm_card_visa"))
        .await;
    let read_order = stack.get_order("bob", &alice_order).await;
    let read_payment = stack
        .charge_request(payonce_tests::stack::api_event(
            "GET",
            &format!("/payments/{alice_payment}"),
            Some("bob"),
            &[],
            "",
        ))
        .await;
    for reply in [&pay_theirs, &read_order, &read_payment] {
        assert_eq!(reply.status, 404, "{}", reply.body);
        assert_eq!(reply.problem_type(), "/problems/not-found");
    }
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.charges().len(), 2);
}

#[tokio::test]
async fn a_stale_order_version_is_409_and_the_current_one_pays() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let patch = json!({"version": 1, "items": [{"sku": "A1", "quantity": 3, "unit_amount": 1500}]});
    let revised = stack
        .orders_request(payonce_tests::stack::api_event(
            "PATCH",
            &format!("/orders/{order}"),
            Some("alice"),
            &[],
            &patch.to_string(),
        ))
        .await;
    assert_eq!(revised.status, 200, "{}", revised.body);
    assert_eq!(
        (
            revised.json["version"].as_i64(),
            revised.json["amount"].as_i64()
        ),
        (Some(2), Some(4500))
    );

    let before = stack.snapshot().await;
    let stale = stack
        .pay("alice", "key-stale", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.problem_type(), "/problems/order-version-mismatch");
    assert_eq!(stale.json["current_version"], 2);
    assert_eq!(
        stack.snapshot().await,
        before,
        "a refused request stores nothing"
    );
    assert_eq!(stack.psp.requests_seen(), 0);

    let current = stack
        .pay(
            "alice",
            "key-stale",
            json!({"order_id": order, "order_version": 2, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(
        current.status, 201,
        "the key was not stored by the refusal: {}",
        current.body
    );
    assert_eq!(current.json["amount"], 4500);
    assert_eq!(stack.psp.charges()[0].amount, 4500);
}

#[tokio::test]
async fn a_takeover_that_cannot_reach_the_psp_after_the_holder_charged_keeps_the_order_reserved() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;

    // GIVEN an invocation that charged at the PSP and died before recording it
    stack.charge.inject_crash(CrashPoint::AfterPspCall);
    let crashed = stack
        .pay("alice", "key-cut-off", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(crashed.status, 500, "{}", crashed.body);
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1);
    let payment_id = charges[0].metadata["payment_id"].clone();
    let intent = charges[0].id.clone();

    // WHEN its lease lapses and the client's retry lands on an invocation that cannot connect
    // to the PSP
    stack.clock.advance(Duration::from_secs(31));
    let seen = stack.psp.requests_seen();
    let retry = stack
        .pay_through(
            &stack.cut_off_charge(),
            "alice",
            "key-cut-off",
            body(&order, "pm_card_visa"),
        )
        .await;

    // THEN the answer is 202 processing for the same payment, not 503 psp-unavailable: the
    // holder may have charged, so nothing proves the order free
    assert_eq!(retry.status, 202, "{}", retry.body);
    assert_eq!(retry.json["status"], "processing");
    assert_eq!(retry.json["payment_id"], payment_id.as_str());
    assert!(retry.header("retry-after").is_some());
    assert_eq!(
        stack.psp.requests_seen(),
        seen,
        "the cut-off call reached nothing"
    );
    // AND the order stays reserved by it, the payment processing and marked as maybe charged
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"processing\")");
    assert_eq!(order_item["payment_id"], format!("S(\"{payment_id}\")"));
    let payment = stack
        .charge
        .store()
        .get_payment(&payment_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.status, PaymentStatus::Processing);
    assert!(payment.psp_maybe_reached);
    assert_eq!(
        stack.item(&format!("payment#{payment_id}")).await.unwrap()["psp_maybe_reached"],
        "Bool(true)"
    );
    // AND the key remembers the attempt as processing (so a replay never re-sends)
    let record = stack.charge_record("alice", "key-cut-off").await;
    assert_eq!(record.attempt_id, payment_id);
    assert_eq!(completed_view(&record).status, PaymentStatus::Processing);

    // WHEN a second tab pays the same order under a new key
    let before = stack.snapshot().await;
    let second = stack
        .pay(
            "alice",
            "key-cut-off-tab-2",
            body(&order, "pm_card_mastercard"),
        )
        .await;

    // THEN 409 payment-in-progress, nothing written, no PSP call
    assert_eq!(
        (second.status, second.problem_type()),
        (409, "/problems/payment-in-progress"),
        "{}",
        second.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    // AND the PSP holds exactly one charge, succeeded, under the attempt's key
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(
        (
            charges[0].outcome.as_str(),
            charges[0].idempotency_key.clone()
        ),
        ("succeeded", Some(format!("payonce-charge-{payment_id}")))
    );

    // WHEN reconcile runs with a working PSP once the attempt is due
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;

    // THEN the payment is succeeded with the PSP's intent, and the order paid by it
    assert_eq!(
        (report.examined, report.succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    let payment = stack
        .charge
        .store()
        .get_payment(&payment_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (payment.status, payment.provider_payment_id.as_deref()),
        (PaymentStatus::Succeeded, Some(intent.as_str()))
    );
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"paid\")");
    assert_eq!(order_item["payment_id"], format!("S(\"{payment_id}\")"));
    // AND the key replays 201, and the PSP still holds that one charge
    let replay = stack
        .pay("alice", "key-cut-off", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json["status"], "succeeded");
    assert_eq!(stack.psp.charges().len(), 1);
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
}

#[tokio::test]
async fn a_psp_refusal_of_the_amount_fails_the_payment_and_releases_the_order() {
    let stack = PaymentStack::start().await;
    // GIVEN an order of 10 usd cents, below Stripe's minimum of 50, stored past the orders API
    // (which refuses it) as an order from before the minimum was enforced would be
    let order = stack.store_order("alice", Currency::Usd, 10).await;

    // WHEN alice pays it
    let refused = stack
        .pay("alice", "key-too-small", body(&order, "pm_card_visa"))
        .await;

    // THEN the PSP's amount_too_small is final: a stored 402 payment-failed, never 202
    assert_eq!(
        (refused.status, refused.problem_type()),
        (402, "/problems/payment-failed"),
        "{}",
        refused.body
    );
    let payment_id = refused.json["payment_id"].as_str().unwrap().to_owned();
    // AND the payment failed as refused, out of the in-flight index
    let payment = stack
        .charge
        .store()
        .get_payment(&payment_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.status, PaymentStatus::Failed);
    assert_eq!(
        payment.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Refused)
    );
    let payment_item = stack.item(&format!("payment#{payment_id}")).await.unwrap();
    assert_eq!(payment_item["failure_kind"], "S(\"refused\")");
    assert!(!payment_item.contains_key("inflight"), "{payment_item:?}");
    // AND the order is released, naming no attempt
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"unpaid\")");
    assert!(!order_item.contains_key("payment_id"), "{order_item:?}");
    // AND the record is COMPLETED with the failed payment, and the PSP charged nothing
    let record = stack.charge_record("alice", "key-too-small").await;
    assert_eq!(completed_view(&record).status, PaymentStatus::Failed);
    assert!(stack.psp.charges().is_empty(), "{:?}", stack.psp.charges());
    assert_eq!(stack.psp.requests_seen(), 1);

    // WHEN the same request is repeated, THEN the stored 402 answers, without a PSP call
    let replay = stack
        .pay("alice", "key-too-small", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(
        (
            replay.status,
            replay.problem_type(),
            replay.header("idempotent-replayed")
        ),
        (402, "/problems/payment-failed", Some("true"))
    );
    assert_eq!(replay.json["payment_id"], payment_id.as_str());
    assert_eq!(stack.psp.requests_seen(), 1);
}

/// A PSP that arms `conflicts` transaction conflicts on the store as soon as it answered a
/// charge, so they hit the completion write.
struct ConflictsAfterTheCharge<P> {
    inner: P,
    faults: Faults,
    conflicts: u32,
}

#[async_trait]
impl<P: Psp> Psp for ConflictsAfterTheCharge<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> payonce::domain::PspKind {
        self.inner.kind()
    }
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let outcome = self.inner.create_charge(request, timeout).await;
        self.faults.inject_conflicts(self.conflicts);
        outcome
    }
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.inner.lookup(payment_id).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.inner.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.inner.cancel(provider_payment_id).await
    }
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        self.inner.create_refund(request, timeout).await
    }
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.inner
            .lookup_refund(provider_payment_id, refund_id)
            .await
    }
}

#[tokio::test]
async fn transaction_conflicts_on_the_completion_write_are_retried_and_the_client_gets_201() {
    // 2: absorbed by the store's own retries; 6: more than those, so the charge path re-reads
    // and writes again
    for conflicts in [2, 6] {
        let stack = PaymentStack::start().await;
        let order = stack.create_order("alice").await;
        let faults = stack.charge.store().faults().clone();
        let charge = ChargeService::new(
            stack.charge.store().clone(),
            ConflictsAfterTheCharge {
                inner: stripe_for(&stack.psp),
                faults: faults.clone(),
                conflicts,
            },
            stack.charge.config().clone(),
        );

        // GIVEN DynamoDB answers the completion write with transaction conflicts
        // WHEN alice pays
        let reply = stack
            .pay_through(
                &charge,
                "alice",
                "key-conflicts",
                body(&order, "pm_card_visa"),
            )
            .await;

        // THEN she gets 201, not 409, and every armed conflict was met
        assert_eq!(reply.status, 201, "{conflicts} conflicts: {}", reply.body);
        assert_eq!(reply.json["status"], "succeeded");
        assert!(!faults.take_conflict(), "{conflicts} conflicts: some left");
        let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();
        // AND the record is COMPLETED with the succeeded payment, its lease cleared
        let record = stack.charge_record("alice", "key-conflicts").await;
        assert_eq!(record.lease(), None);
        assert_eq!(
            completed_view(&record),
            serde_json::from_value::<PaymentView>(reply.json.clone()).unwrap()
        );
        // AND the payment succeeded and the order is held by it (which reads as paid), with one
        // charge at the PSP
        let payment = stack
            .charge
            .store()
            .get_payment(&payment_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(payment.status, PaymentStatus::Succeeded);
        let order_item = stack.item(&format!("order#{order}")).await.unwrap();
        assert_eq!(order_item["payment_state"], "S(\"processing\")");
        assert_eq!(order_item["payment_id"], format!("S(\"{payment_id}\")"));
        assert_eq!(
            stack.get_order("alice", &order).await.json["payment_state"],
            "paid"
        );
        assert_eq!(stack.psp.charges().len(), 1);
        assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
        // AND a replay answers the same 201
        let replay = stack
            .pay("alice", "key-conflicts", body(&order, "pm_card_visa"))
            .await;
        assert_eq!(
            (replay.status, replay.header("idempotent-replayed")),
            (201, Some("true"))
        );
        assert_eq!(replay.json, reply.json);
    }
}

#[tokio::test]
async fn a_store_outage_answers_503_with_retry_after_and_calls_no_psp() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let before = stack.snapshot().await;

    // GIVEN the charge function cut off from DynamoDB (every request fails to connect)
    let counter = payonce::adapters::dynamodb::RequestCounter::default();
    let store = payonce::adapters::dynamodb::DynamoPaymentStore::new(
        payonce_tests::unreachable_dynamodb_client(&counter),
        stack.tables.clone(),
    );
    let cut_off = ChargeService::new(
        store,
        payonce_tests::stack::psp_for(&stack.psp),
        stack.charge.config().clone(),
    );

    // WHEN alice pays
    let answer = stack
        .pay_through(
            &cut_off,
            "alice",
            "key-outage",
            body(&order, "pm_card_visa"),
        )
        .await;

    // THEN 503 service-unavailable with Retry-After, the store was asked, the PSP never was,
    // and nothing changed
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(answer.problem_type(), "/problems/service-unavailable");
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert!(counter.total() >= 1);
    assert_eq!(stack.psp.requests_seen(), 0);
    assert_eq!(stack.snapshot().await, before);

    // WHEN DynamoDB is back, THEN the same key pays once
    let retried = stack
        .pay("alice", "key-outage", body(&order, "pm_card_visa"))
        .await;
    assert_eq!(retried.status, 201, "{}", retried.body);
    assert_eq!(stack.psp.charges().len(), 1);
}

/// The request budget of a first charge and of its replay, per PSP: what the README states. A
/// PSP that only authorizes (Square) costs one write more, to store its payment's id before the
/// completion, and a second PSP call; 2C2P's one payment is a token, the Do Payment and an
/// inquiry; PayPal's an OAuth token (once per token) and the order, charged in the create.
#[tokio::test]
async fn each_psp_charges_within_its_request_budget_and_replays_from_one_request() {
    use payonce_fake_psp::FakePspConfig;
    // (face, at most this many DynamoDB requests, exactly this many PSP calls)
    let budgets = [
        (FakePspConfig::default(), 3, 1),
        (FakePspConfig::omise(), 3, 1),
        (FakePspConfig::twoc2p(), 3, 3),
        (FakePspConfig::square(), 4, 2),
        (FakePspConfig::paypal(), 3, 2),
    ];
    for (fake, dynamodb, psp_calls) in budgets {
        let provider = fake.provider;
        // GIVEN a stack on this PSP and an order
        let stack = PaymentStack::start_with(fake, payonce::service::ChargeConfig::default()).await;
        let order = stack.create_order("alice").await;
        // WHEN alice pays
        stack.counter.reset();
        let seen = stack.psp.requests_seen();
        let first = stack
            .pay("alice", "budget-1", body(&order, "pm_card_visa"))
            .await;
        // THEN it succeeded within the PSP's budget
        assert_eq!(first.status, 201, "{provider:?}: {}", first.body);
        assert!(
            stack.counter.total() <= dynamodb,
            "{provider:?}: a first charge cost {:?}",
            stack.counter.by_operation()
        );
        assert_eq!(
            stack.psp.requests_seen() - seen,
            psp_calls,
            "{provider:?}: PSP calls of one charge"
        );
        let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
        assert_eq!(
            stack.psp.succeeded_charges_for(&payment_id),
            1,
            "{provider:?}"
        );
        // AND its replay answers from one request, with no PSP call
        stack.counter.reset();
        let seen = stack.psp.requests_seen();
        let replay = stack
            .pay("alice", "budget-1", body(&order, "pm_card_visa"))
            .await;
        assert_eq!(
            (replay.status, &replay.json),
            (201, &first.json),
            "{provider:?}"
        );
        assert_eq!(
            stack.counter.by_operation(),
            [("BatchGetItem".to_owned(), 1)].into(),
            "{provider:?}"
        );
        assert_eq!(stack.psp.requests_seen(), seen, "{provider:?}");
    }
}

/// The request budget of a first refund and of its replay, per PSP: what the README states.
/// 2C2P's refunds carry none of our ids: 2C2P's refund status is read before the refund (two
/// maintenance calls; the payment's other refunds are read only before a re-send);
/// Omise lists the charge's refunds before creating one; PayPal reads the order for its capture.
#[tokio::test]
async fn each_psp_refunds_within_its_request_budget_and_replays_from_one_request() {
    use payonce_fake_psp::FakePspConfig;
    // (face, at most this many DynamoDB requests, exactly this many PSP calls, the answer: Square
    // holds a refund pending at first)
    let budgets = [
        (FakePspConfig::default(), 3, 1, 201),
        (FakePspConfig::omise(), 3, 2, 201),
        (FakePspConfig::twoc2p(), 3, 2, 201),
        (FakePspConfig::square(), 3, 1, 202),
        // The refund function's fresh OAuth token, the order read (for its capture's id), the
        // refund.
        (FakePspConfig::paypal(), 3, 3, 201),
    ];
    for (fake, dynamodb, psp_calls, status) in budgets {
        let provider = fake.provider;
        // GIVEN a payment on this PSP
        let stack = PaymentStack::start_with(fake, payonce::service::ChargeConfig::default()).await;
        let order = stack.create_order("alice").await;
        let paid = stack
            .pay("alice", "budget-1", body(&order, "pm_card_visa"))
            .await;
        assert_eq!(paid.status, 201, "{provider:?}: {}", paid.body);
        let payment_id = paid.json["payment_id"].as_str().unwrap().to_owned();
        // WHEN staff refund part of it
        stack.counter.reset();
        let seen = stack.psp.requests_seen();
        let first = stack
            .refund(&payment_id, "refund-1", serde_json::json!({"amount": 100}))
            .await;
        // THEN it succeeded within the PSP's budget, one refund at the PSP
        assert_eq!(first.status, status, "{provider:?}: {}", first.body);
        assert!(
            stack.counter.total() <= dynamodb,
            "{provider:?}: a first refund cost {:?}",
            stack.counter.by_operation()
        );
        assert_eq!(
            stack.psp.requests_seen() - seen,
            psp_calls,
            "{provider:?}: PSP calls of one refund"
        );
        assert_eq!(stack.psp.refunds().len(), 1, "{provider:?}");
        // AND its replay answers from one request, with no PSP call
        stack.counter.reset();
        let seen = stack.psp.requests_seen();
        let replay = stack
            .refund(&payment_id, "refund-1", serde_json::json!({"amount": 100}))
            .await;
        assert_eq!(
            (replay.status, &replay.json),
            (status, &first.json),
            "{provider:?}"
        );
        assert_eq!(
            stack.counter.total(),
            1,
            "{provider:?}: {:?}",
            stack.counter.by_operation()
        );
        assert_eq!(stack.psp.requests_seen(), seen, "{provider:?}");
    }
}

/// A transport that delivers each call at once but holds the PSP's answer until the test
/// releases it: an invocation whose PSP call is slower than its lease.
#[derive(Debug, Clone)]
struct HeldAnswers {
    inner: HttpTransport,
    delivered: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait]
impl PspTransport for HeldAnswers {
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure> {
        let reply = self.inner.send(call, timeout).await;
        self.delivered.notify_one();
        self.release.notified().await;
        reply
    }
}

#[tokio::test]
async fn a_success_heard_after_the_lease_was_taken_over_still_pays_the_order() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let held = HeldAnswers {
        inner: HttpTransport::new(
            stack.psp.base_url(),
            Duration::from_secs(1),
            Duration::from_secs(5),
        )
        .expect("HTTP client"),
        delivered: Default::default(),
        release: Default::default(),
    };
    let slow = stack.charge_with(StripePsp::with_transport(
        held.clone(),
        "stripe",
        FAKE_API_KEY,
        Duration::from_secs(5),
    ));

    // GIVEN an invocation whose charge reached the PSP, and whose answer is slower than its lease
    let first = stack.pay_through(&slow, "alice", "key-slow", body(&order, "pm_card_visa"));
    let meanwhile = async {
        held.delivered.notified().await;
        assert_eq!(stack.psp.charges().len(), 1, "the PSP charged once");

        // WHEN the lease lapses and the client's retry takes the key over on an invocation cut
        // off from the PSP (it cannot learn what the first one did)
        stack.clock.advance(Duration::from_secs(31));
        let retry = stack
            .pay_through(
                &stack.cut_off_charge(),
                "alice",
                "key-slow",
                body(&order, "pm_card_visa"),
            )
            .await;
        assert_eq!(retry.status, 202, "{}", retry.body);
        assert_eq!(retry.json["status"], "processing");
        // AND only then the first invocation hears the PSP's success
        held.release.notify_one();
    };
    let (first, ()) = tokio::join!(first, meanwhile);
    let payment_id = stack.psp.charges()[0].metadata["payment_id"].clone();

    // THEN the first invocation, whose claim was taken, answers 409 idempotency-key-in-use...
    assert_eq!(
        (first.status, first.problem_type()),
        (409, "/problems/idempotency-key-in-use"),
        "{}",
        first.body
    );
    // ...but the success it heard is stored at once (no reconcile ran): the payment succeeded
    // with the PSP's intent and the order paid by it
    let payment = stack
        .charge
        .store()
        .get_payment(&payment_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (payment.status, payment.provider_payment_id.as_deref()),
        (
            PaymentStatus::Succeeded,
            Some(stack.psp.charges()[0].id.as_str())
        )
    );
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"paid\")");
    assert_eq!(order_item["payment_id"], format!("S(\"{payment_id}\")"));
    // AND the PSP holds that one charge, succeeded
    assert_eq!(stack.psp.charges().len(), 1);
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
}
