//! Webhooks: signature-verified receiver, SQS buffer, exactly-once processor.

mod cross_check;
mod pipeline;
mod processor;
mod receiver;

use payonce_tests::stack::PaymentStack;
use serde_json::json;

/// GIVEN an order of `user` whose payment is processing (the PSP charged 3000 JPY, the answer
/// was lost): the order's and the payment's ids.
async fn processing_payment(stack: &PaymentStack, user: &str, key: &str) -> (String, String) {
    let order = stack.create_order(user).await;
    let body =
        json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"});
    let reply = stack.pay(user, key, body).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    (order, reply.json["payment_id"].as_str().unwrap().to_owned())
}

/// A Stripe-shaped event about our attempt `payment_id` (PaymentIntent `intent_id`).
pub fn event(event_id: &str, kind: &str, payment_id: &str, intent_id: &str) -> String {
    let status = if kind == "payment_intent.succeeded" {
        "succeeded"
    } else {
        "requires_payment_method"
    };
    let mut object = json!({
        "id": intent_id,
        "object": "payment_intent",
        "amount": 3000,
        "currency": "jpy",
        "status": status,
        "metadata": {"payment_id": payment_id},
    });
    if kind == "payment_intent.payment_failed" {
        object["last_payment_error"] = json!({"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"});
    }
    json!({"id": event_id, "object": "event", "type": kind, "created": 1_796_000_000, "data": {"object": object}}).to_string()
}
