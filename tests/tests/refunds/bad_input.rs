//! Refund requests refused before anything is claimed: each with its problem type, nothing
//! written and nothing sent to the PSP.

use payonce_tests::stack::{refund_event, PaymentStack, STAFF, STAFF_SCOPES};
use serde_json::json;

#[tokio::test]
async fn malformed_refund_requests_are_refused_with_their_problem_and_write_nothing() {
    let stack = PaymentStack::start().await;
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();

    let cases: &[(&str, Option<&str>, &str, u16, &str)] = &[
        (
            "zero",
            Some("k-zero"),
            r#"{"amount": 0}"#,
            400,
            "invalid-request",
        ),
        (
            "negative",
            Some("k-neg"),
            r#"{"amount": -100}"#,
            400,
            "invalid-request",
        ),
        (
            "float",
            Some("k-float"),
            r#"{"amount": 1.5}"#,
            400,
            "invalid-request",
        ),
        (
            "string",
            Some("k-string"),
            r#"{"amount": "100"}"#,
            400,
            "invalid-request",
        ),
        (
            "huge",
            Some("k-huge"),
            r#"{"amount": 100000000000000000}"#,
            400,
            "invalid-request",
        ),
        (
            "unknown reason",
            Some("k-reason"),
            r#"{"amount": 100, "reason": "changed_mind"}"#,
            400,
            "invalid-request",
        ),
        (
            "unknown field",
            Some("k-field"),
            r#"{"amount": 100, "currency": "jpy"}"#,
            400,
            "invalid-request",
        ),
        (
            "not an object",
            Some("k-array"),
            r#"[100]"#,
            400,
            "invalid-request",
        ),
        (
            "not JSON",
            Some("k-json"),
            r#"{"amount": 100"#,
            400,
            "malformed-json",
        ),
        (
            "no key",
            None,
            r#"{"amount": 100}"#,
            400,
            "idempotency-key-missing",
        ),
        (
            "above the captured amount",
            Some("k-above"),
            r#"{"amount": 3001}"#,
            409,
            "refund-exceeds-remaining",
        ),
    ];
    for (what, key, body, status, problem) in cases {
        let reply = stack
            .refund_request(refund_event(
                &payment_id,
                Some(STAFF),
                STAFF_SCOPES,
                *key,
                body,
            ))
            .await;
        assert_eq!(
            (reply.status, reply.problem_type()),
            (*status, format!("/problems/{problem}").as_str()),
            "{what}: {}",
            reply.body
        );
    }
    let above = stack
        .refund(&payment_id, "k-above-2", json!({"amount": 3001}))
        .await;
    assert_eq!(above.json["remaining_amount"], 3000, "{}", above.body);

    // THEN nothing was written (no refund, no amount held, no record) and the PSP saw nothing
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    assert!(stack.psp.refunds().is_empty());
}

#[tokio::test]
async fn refunds_of_unsucceeded_or_unknown_payments_are_refused_and_write_nothing() {
    let stack = PaymentStack::start().await;
    // GIVEN a declined payment and one whose outcome is not known yet
    let declined_order = stack.create_order("alice").await;
    let declined = stack
        .pay(
            "alice",
            "pay-declined",
            json!({"order_id": declined_order, "order_version": 1, "payment_method": "pm_card_visa_chargeDeclined"}),
        )
        .await;
    assert_eq!(declined.status, 402, "{}", declined.body);
    let declined_id = declined.json["payment_id"].as_str().unwrap().to_owned();
    let processing_order = stack.create_order("alice").await;
    let processing = stack
        .pay(
            "alice",
            "pay-processing",
            json!({"order_id": processing_order, "order_version": 1, "payment_method": "pm_fake_lost_response"}),
        )
        .await;
    assert_eq!(processing.status, 202, "{}", processing.body);
    let processing_id = processing.json["payment_id"].as_str().unwrap().to_owned();
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();

    // WHEN staff tries to refund them, and a payment that does not exist
    let oversized = format!("pay_{}", "0".repeat(5000));
    let cases = [
        (
            declined_id.as_str(),
            409,
            "payment-not-refundable",
            Some("failed"),
        ),
        (
            processing_id.as_str(),
            409,
            "payment-not-refundable",
            Some("processing"),
        ),
        (
            "pay_00000000000000000000000000000000",
            404,
            "not-found",
            None,
        ),
        // A path naming no possible id matches no route, like API Gateway's: 404.
        ("pay_with.a.dot", 404, "route-not-found", None),
        (oversized.as_str(), 404, "route-not-found", None),
    ];
    for (i, (payment_id, status, problem, payment_status)) in cases.into_iter().enumerate() {
        let reply = stack
            .refund(payment_id, &format!("r{i}"), json!({"amount": 100}))
            .await;
        // THEN each is refused with its problem type
        assert_eq!(
            (reply.status, reply.problem_type()),
            (status, format!("/problems/{problem}").as_str()),
            "{payment_id}: {}",
            reply.body
        );
        assert_eq!(
            reply.json["payment_status"].as_str(),
            payment_status,
            "{}",
            reply.body
        );
    }

    // AND nothing was written and the PSP saw nothing
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    assert!(stack.psp.refunds().is_empty());
}

#[tokio::test]
async fn a_key_reused_for_another_refund_or_a_refund_past_what_is_left_writes_nothing() {
    let stack = PaymentStack::start().await;
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    // GIVEN 1000 of 3000 refunded under key r1
    let first = stack
        .refund(&payment_id, "r1", json!({"amount": 1000}))
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();

    // WHEN r1 is sent with another amount, or another reason
    for body in [
        json!({"amount": 999}),
        json!({"amount": 1000, "reason": "fraudulent"}),
        json!({}),
    ] {
        let reply = stack.refund(&payment_id, "r1", body.clone()).await;
        // THEN 422 mismatch
        assert_eq!(
            (reply.status, reply.problem_type()),
            (422, "/problems/idempotency-key-mismatch"),
            "{body}: {}",
            reply.body
        );
    }
    // WHEN a new key asks for more than the 2000 left
    let above = stack
        .refund(&payment_id, "r2", json!({"amount": 2001}))
        .await;
    // THEN 409 with what remains
    assert_eq!(
        (above.status, above.problem_type()),
        (409, "/problems/refund-exceeds-remaining"),
        "{}",
        above.body
    );
    assert_eq!(above.json["remaining_amount"], 2000);
    // AND nothing was written, and the PSP saw nothing
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);

    // WHEN the rest is refunded, a further refund without amount finds nothing left
    let rest = stack.refund(&payment_id, "r3", json!({})).await;
    assert_eq!(
        (rest.status, rest.json["amount"].as_i64()),
        (201, Some(2000))
    );
    let before = stack.snapshot().await;
    let nothing = stack.refund(&payment_id, "r4", json!({})).await;
    assert_eq!(
        (
            nothing.status,
            nothing.problem_type(),
            nothing.json["remaining_amount"].as_i64()
        ),
        (409, "/problems/refund-exceeds-remaining", Some(0)),
        "{}",
        nothing.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.refunds().len(), 2);
}
