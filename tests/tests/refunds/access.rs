//! Who may refund and who may read a payment: refunds need the `payments:refund` scope; with
//! it staff read any user's payment, without it a customer reads only their own.

use payonce_tests::stack::{refund_event, PaymentStack, STAFF, STAFF_SCOPES};
use serde_json::json;

#[tokio::test]
async fn a_token_without_the_refund_scope_is_refused_and_nothing_happens() {
    let stack = PaymentStack::start().await;
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();
    let body = json!({"amount": 1000}).to_string();

    // WHEN the payment's own customer, a token with other scopes, and no token at all try
    let cases = [
        (Some("alice"), &[][..], 403, "/problems/insufficient-scope"),
        (
            Some("bob"),
            &["payments:read", "payments:refunds"][..],
            403,
            "/problems/insufficient-scope",
        ),
        (None, &[][..], 401, "/problems/unauthorized"),
    ];
    for (i, (sub, scopes, status, problem)) in cases.into_iter().enumerate() {
        let reply = stack
            .refund_request(refund_event(
                &payment_id,
                sub,
                scopes,
                Some(&format!("k{i}")),
                &body,
            ))
            .await;
        // THEN each is refused with its problem type
        assert_eq!(
            (reply.status, reply.problem_type()),
            (status, problem),
            "{sub:?} {scopes:?}: {}",
            reply.body
        );
    }

    // AND nothing was written, and the PSP saw nothing
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    assert!(stack.psp.refunds().is_empty());
    // AND the same request with the scope goes through
    let staff = stack
        .refund(&payment_id, "k0", json!({"amount": 1000}))
        .await;
    assert_eq!(staff.status, 201, "{}", staff.body);
    assert_eq!(stack.psp.refunds().len(), 1);
}

#[tokio::test]
async fn get_payment_shows_refunded_amounts_and_refunds_to_its_owner_and_to_staff_only() {
    let stack = PaymentStack::start().await;
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;

    // GIVEN no refund yet: succeeded, nothing refunded
    let fresh = stack.get_payment("alice", &[], &payment_id).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(
        (
            fresh.json["status"].as_str(),
            fresh.json["amount_refunded"].as_i64(),
            fresh.json["amount_refund_pending"].as_i64(),
            fresh.json["refunds"].as_array().map(Vec::len)
        ),
        (Some("succeeded"), Some(0), Some(0), Some(0))
    );

    // WHEN 1000 of 3000 is refunded
    let first = stack
        .refund(
            &payment_id,
            "r1",
            json!({"amount": 1000, "reason": "requested_by_customer"}),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.body);

    // THEN the payment reads partially refunded, with the refund
    let partial = stack.get_payment("alice", &[], &payment_id).await;
    assert_eq!(
        (
            partial.json["status"].as_str(),
            partial.json["amount"].as_i64(),
            partial.json["amount_refunded"].as_i64(),
            partial.json["amount_refund_pending"].as_i64()
        ),
        (Some("partially_refunded"), Some(3000), Some(1000), Some(0)),
        "{}",
        partial.body
    );
    assert_eq!(
        partial.json["refunds"],
        json!([{
            "refund_id": first.json["refund_id"],
            "amount": 1000,
            "status": "succeeded",
            "reason": "requested_by_customer",
            "provider_refund_id": first.json["provider_refund_id"],
        }])
    );
    // AND staff read the same, though it is alice's payment
    let staff = stack.get_payment(STAFF, STAFF_SCOPES, &payment_id).await;
    assert_eq!(staff.status, 200, "{}", staff.body);
    assert_eq!(staff.json, partial.json);
    // AND another customer cannot see it at all, with or without unrelated scopes
    for scopes in [&[][..], &["payments:read"][..]] {
        let bob = stack.get_payment("bob", scopes, &payment_id).await;
        assert_eq!(
            (bob.status, bob.problem_type()),
            (404, "/problems/not-found"),
            "{}",
            bob.body
        );
        assert!(!bob.body.contains("amount"), "{}", bob.body);
    }

    // WHEN the rest is refunded (no amount: everything left)
    let rest = stack.refund(&payment_id, "r2", json!({})).await;
    assert_eq!(rest.status, 201, "{}", rest.body);
    assert_eq!(rest.json["amount"], 2000);

    // THEN the payment reads refunded, with both refunds in order
    let full = stack.get_payment("alice", &[], &payment_id).await;
    assert_eq!(
        (
            full.json["status"].as_str(),
            full.json["amount_refunded"].as_i64(),
            full.json["amount_refund_pending"].as_i64()
        ),
        (Some("refunded"), Some(3000), Some(0)),
        "{}",
        full.body
    );
    let ids: Vec<_> = full.json["refunds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["refund_id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            first.json["refund_id"].clone(),
            rest.json["refund_id"].clone()
        ]
    );
    assert_eq!(full.json["refunds"][1]["reason"], serde_json::Value::Null);
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(3000), Some(0), Some(2))
    );
}
