//! Checkout flows beyond a one-step charge: a `return_url` for a customer action (3-D Secure)
//! and `capture: "manual"`, through the charge handler against DynamoDB Local and the fake PSP.

use payonce::clock::Clock;
use payonce::domain::{CancellationReason, Currency, FailureKind, PaymentStatus};
use payonce::service::settle::EventApplied;
use payonce::service::webhooks::Processed;
use payonce_fake_psp::FakePspConfig;
use payonce_tests::stack::{PaymentStack, CHECKOUT_ORIGIN};
use payonce_tests::webhook_sink::is_event;

use super::{authenticate, order_state};
use serde_json::json;

#[tokio::test]
async fn a_manual_capture_on_a_psp_that_cannot_capture_later_is_refused_before_anything_is_claimed()
{
    // GIVEN a 2C2P deployment, whose captures need the Payment Maintenance API
    let stack = PaymentStack::start_with(FakePspConfig::twoc2p(), Default::default()).await;
    let order = stack.create_order_of("alice", Currency::Thb, 1, 5000).await;
    let before = stack.snapshot().await;

    // WHEN a payment asks to be captured later
    let reply = stack
        .pay(
            "alice",
            "manual-1",
            json!({"order_id": order, "order_version": 1,
                   "payment_method": "pm_card_visa", "capture": "manual"}),
        )
        .await;

    // THEN it is refused with 409 capture-not-supported, nothing is written, the PSP saw nothing
    assert_eq!(
        (reply.status, reply.problem_type()),
        (409, "/problems/capture-not-supported"),
        "{}",
        reply.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), 0);
    // AND the same key still pays the order at once
    let paid = stack
        .pay(
            "alice",
            "manual-1",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(paid.status, 201, "{}", paid.body);
}

#[tokio::test]
async fn the_return_url_and_capture_are_part_of_the_fingerprint_only_when_given() {
    // GIVEN a payment made without the optional fields
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let plain = json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
    let first = stack.pay("alice", "fp-1", plain.clone()).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let charges = stack.psp.charges().len();

    // WHEN the same key comes again with `capture: "automatic"` spelled out, THEN it replays
    let mut automatic = plain.clone();
    automatic["capture"] = json!("automatic");
    let again = stack.pay("alice", "fp-1", automatic).await;
    assert_eq!(
        (again.status, again.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        again.body
    );
    // AND with a return URL or manual capture it is another request: 422, nothing written
    let before = stack.snapshot().await;
    for (field, value) in [
        ("return_url", json!(format!("{CHECKOUT_ORIGIN}/return"))),
        ("capture", json!("manual")),
    ] {
        let mut other = plain.clone();
        other[field] = value;
        let reply = stack.pay("alice", "fp-1", other).await;
        assert_eq!(
            (reply.status, reply.problem_type()),
            (422, "/problems/idempotency-key-mismatch"),
            "{field}: {}",
            reply.body
        );
    }
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.charges().len(), charges, "no new charge");
}

/// The body of a payment of `order` with `payment_method` and `extra` fields.
fn body(order: &str, payment_method: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut body = json!({"order_id": order, "order_version": 1, "payment_method": payment_method});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// The return URL of the test checkout.
fn return_url() -> String {
    format!("{CHECKOUT_ORIGIN}/checkout/return")
}

#[tokio::test]
async fn a_card_that_asks_for_3ds_waits_for_the_customer_then_pays_once() {
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    let order = stack.create_order("alice").await;
    let request = body(
        &order,
        "pm_card_threeDSecure2Required",
        json!({"return_url": return_url()}),
    );

    // WHEN the card asks for 3-D Secure
    let first = stack.pay("alice", "3ds-1", request.clone()).await;

    // THEN 202 requires_action with where to send the customer and until when
    assert_eq!(first.status, 202, "{}", first.body);
    assert_eq!(first.json["status"], "requires_action");
    assert!(first.header("retry-after").is_some());
    let action = &first.json["next_action"];
    assert_eq!(action["type"], "redirect");
    let url = action["url"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with(&format!("{}/_fake/authenticate/", stack.psp.base_url())),
        "{url}"
    );
    assert_eq!(
        action["expires_at"].as_i64(),
        Some(stack.clock.now_ms() / 1000 + 3600)
    );
    // AND one charge waits at the PSP, the payment is stored waiting, the order stays held
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].outcome, "pending");
    let stored = stack.payment(&payment_id).await;
    assert_eq!(stored.status, PaymentStatus::RequiresAction);
    assert_eq!(
        stored.progress.next_action.map(|a| a.url),
        Some(url.clone())
    );
    assert_eq!(order_state(&stack, &order).await, "processing");

    // WHEN the checkout asks again with the same key (the return page, a reload)
    let seen = stack.psp.requests_seen();
    let replay = stack.pay("alice", "3ds-1", request.clone()).await;
    // THEN the same answer, from the store alone
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (202, Some("true"))
    );
    assert_eq!(replay.json["next_action"], first.json["next_action"]);
    assert_eq!(stack.psp.requests_seen(), seen, "a replay calls no PSP");

    // WHEN the customer completes the authentication
    let (status, location) = authenticate(&url, "complete").await;
    let pi = charges[0].id.clone();
    assert_eq!(status, 303);
    assert_eq!(
        location,
        Some(format!(
            "{}?payment_intent={pi}&redirect_status=succeeded",
            return_url()
        ))
    );
    // AND the PSP's webhook is processed
    let succeeded = sink
        .wait_for(1, |e| is_event(e, "payment_intent.succeeded", &pi))
        .await;
    assert!(matches!(
        stack.deliver(&succeeded[0]).await.unwrap(),
        Processed::Applied(EventApplied::Moved(_))
    ));
    // THEN the return page's replay shows it paid, one charge in the ledger, the order paid
    let paid = stack.pay("alice", "3ds-1", request.clone()).await;
    assert_eq!(
        (paid.status, paid.json["status"].as_str()),
        (201, Some("succeeded"))
    );
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
    assert_eq!(stack.psp.charges().len(), 1);
    assert_eq!(order_state(&stack, &order).await, "paid");
    // AND a second submit of the page changes nothing
    assert_eq!(authenticate(&url, "complete").await.0, 409);
    assert_eq!(stack.psp.succeeded_charges_for(&payment_id), 1);
}

#[tokio::test]
async fn a_failed_authentication_releases_the_order_for_another_card() {
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    let order = stack.create_order("alice").await;
    let request = body(
        &order,
        "pm_card_authenticationRequired",
        json!({"return_url": return_url()}),
    );
    let first = stack.pay("alice", "3ds-fail", request.clone()).await;
    assert_eq!(first.status, 202, "{}", first.body);
    let url = first.json["next_action"]["url"]
        .as_str()
        .unwrap()
        .to_owned();

    // WHEN the customer fails the authentication and the PSP's webhook is processed
    let (status, location) = authenticate(&url, "fail").await;
    assert_eq!(status, 303);
    assert!(location.unwrap().ends_with("redirect_status=failed"));
    let pi = stack.psp.charges()[0].id.clone();
    let failed = sink
        .wait_for(1, |e| is_event(e, "payment_intent.payment_failed", &pi))
        .await;
    stack.deliver(&failed[0]).await.unwrap();

    // THEN the replay is 402 authentication-failed, the order free again
    let replay = stack.pay("alice", "3ds-fail", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/authentication-failed"),
        "{}",
        replay.body
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    // AND another card pays it with a new key: two charges, one succeeded
    let other = stack
        .pay(
            "alice",
            "3ds-other",
            body(&order, "pm_card_visa", json!({})),
        )
        .await;
    assert_eq!(other.status, 201, "{}", other.body);
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 2);
    assert_eq!(
        charges.iter().filter(|c| c.outcome == "succeeded").count(),
        1
    );
    assert_eq!(order_state(&stack, &order).await, "paid");
}

#[tokio::test]
async fn a_card_that_needs_3ds_without_a_return_url_fails_and_frees_the_order() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let request = body(&order, "pm_card_threeDSecure2Required", json!({}));

    // WHEN it is paid without a return URL
    let first = stack.pay("alice", "3ds-none", request.clone()).await;

    // THEN 402 authentication-required, stored: the replay answers the same without the PSP
    assert_eq!(
        (first.status, first.problem_type()),
        (402, "/problems/authentication-required"),
        "{}",
        first.body
    );
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
    let stored = stack.payment(&payment_id).await;
    assert_eq!(
        (stored.status, stored.failure.map(|f| f.kind)),
        (
            PaymentStatus::Failed,
            Some(FailureKind::AuthenticationRequired)
        )
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    let seen = stack.psp.requests_seen();
    let replay = stack.pay("alice", "3ds-none", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/authentication-required")
    );
    assert_eq!(stack.psp.requests_seen(), seen);
    assert_eq!(stack.psp.charges()[0].outcome, "failed");
}

#[tokio::test]
async fn a_manual_capture_authorizes_and_holds_the_order() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let request = body(&order, "pm_card_visa", json!({"capture": "manual"}));

    // WHEN a payment asks to be captured later
    let first = stack.pay("alice", "manual-1", request.clone()).await;

    // THEN 201 authorized with what may be captured and until when
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.json["status"], "authorized");
    assert_eq!(first.json["capture"], "manual");
    assert_eq!(first.json["amount_capturable"], 3000);
    let capture_before = first.json["capture_before"]
        .as_i64()
        .expect("capture_before");
    assert!(capture_before > stack.clock.now_ms() / 1000 + 6 * 86_400);
    // AND the payment is stored authorized, with what may be captured and until when
    let id = first.json["payment_id"].as_str().unwrap();
    let stored = stack.payment(id).await;
    assert_eq!(
        (
            stored.status,
            stored.progress.amount_capturable,
            stored.progress.capture_before_ms.map(|ms| ms / 1000)
        ),
        (PaymentStatus::Authorized, 3000, Some(capture_before))
    );
    // AND its replay answers the same from the store, sending nothing
    let seen = stack.psp.requests_seen();
    let replay = stack.pay("alice", "manual-1", request.clone()).await;
    assert_eq!((replay.status, &replay.json), (201, &first.json));
    assert_eq!(stack.psp.requests_seen(), seen);
    // AND the PSP holds one authorization, nothing captured
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].outcome, "authorized");
    assert_eq!(
        stack
            .psp
            .succeeded_charges_for(&charges[0].payment_id.clone().unwrap()),
        0
    );
    // AND the order reads authorized: a new attempt and an edit are refused, nothing written
    assert_eq!(order_state(&stack, &order).await, "authorized");
    let before = stack.snapshot().await;
    let again = stack
        .pay("alice", "manual-2", body(&order, "pm_card_visa", json!({})))
        .await;
    assert_eq!(
        (again.status, again.problem_type()),
        (409, "/problems/order-already-authorized"),
        "{}",
        again.body
    );
    let edit = stack
        .orders_request(payonce_tests::stack::api_event(
            "PATCH",
            &format!("/orders/{order}"),
            Some("alice"),
            &[],
            &json!({"items": [{"sku": "B", "quantity": 1, "unit_amount": 100}]}).to_string(),
        ))
        .await;
    assert_eq!(
        (edit.status, edit.problem_type()),
        (409, "/problems/order-already-authorized"),
        "{}",
        edit.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.charges().len(), 1);
    // AND the replay answers the authorization again
    let replay = stack.pay("alice", "manual-1", request).await;
    assert_eq!(
        (replay.status, replay.json["status"].as_str()),
        (201, Some("authorized"))
    );
}

#[tokio::test]
async fn reconcile_cancels_an_action_left_past_its_expiry_and_only_then_frees_the_order() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let request = body(
        &order,
        "pm_card_threeDSecure2Required",
        json!({"return_url": return_url()}),
    );
    let first = stack.pay("alice", "3ds-abandoned", request.clone()).await;
    assert_eq!(first.status, 202, "{}", first.body);
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();

    // WHEN reconcile runs while the action is still open
    stack.clock.advance(std::time::Duration::from_secs(10 * 60));
    let early = stack.reconcile().await;
    // THEN it leaves the payment waiting and cancels nothing
    assert_eq!((early.examined, early.pending), (1, 1), "{early:?}");
    assert_eq!(
        stack.payment(&payment_id).await.status,
        PaymentStatus::RequiresAction
    );
    assert!(stack.psp.charges()[0].cancels.is_empty());

    // WHEN the customer never came back and the action's hour has passed
    stack.clock.advance(std::time::Duration::from_secs(3600));
    let late = stack.reconcile().await;
    // THEN the action is canceled at the PSP, the payment canceled, the order free again
    assert_eq!(late.abandoned, 1, "{late:?}");
    let canceled = stack.payment(&payment_id).await;
    assert_eq!(
        (canceled.status, canceled.progress.cancellation_reason),
        (PaymentStatus::Canceled, Some(CancellationReason::Abandoned))
    );
    let charges = stack.psp.charges();
    assert_eq!(charges[0].outcome, "canceled");
    assert_eq!(charges[0].cancels.len(), 1);
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    // AND the customer coming back late is told, from the store, that nothing was charged
    let replay = stack.pay("alice", "3ds-abandoned", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/payment-failed"),
        "{}",
        replay.body
    );
    // AND the payment left reconcile's watch
    let after = stack.reconcile().await;
    assert_eq!(after.examined, 0, "{after:?}");
}

#[tokio::test]
async fn reconcile_leaves_an_authorization_to_be_captured_and_looks_again_later() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let first = stack
        .pay(
            "alice",
            "manual-watch",
            body(&order, "pm_card_visa", json!({"capture": "manual"})),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();
    let before = stack.payment(&payment_id).await;

    stack.clock.advance(std::time::Duration::from_secs(10 * 60));
    let report = stack.reconcile().await;

    // THEN it stays authorized, nothing is canceled, and its next look is pushed back
    assert_eq!((report.examined, report.pending), (1, 1), "{report:?}");
    let after = stack.payment(&payment_id).await;
    assert_eq!(after.status, PaymentStatus::Authorized);
    assert!(after.check_at_ms > before.check_at_ms, "{after:?}");
    assert!(stack.psp.charges()[0].cancels.is_empty());
    assert_eq!(order_state(&stack, &order).await, "authorized");
}
