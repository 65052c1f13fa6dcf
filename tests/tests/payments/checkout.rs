//! Checkout flows beyond a one-step charge: a `return_url` for a customer action (3-D Secure)
//! and `capture: "manual"`, through the charge handler against DynamoDB Local and the fake PSP.

use payonce::domain::Currency;
use payonce_fake_psp::FakePspConfig;
use payonce_tests::stack::{PaymentStack, CHECKOUT_ORIGIN};
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
