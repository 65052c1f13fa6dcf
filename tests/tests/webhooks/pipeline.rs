//! Receiver → SQS (moto) → processor, as Lambda's event source mapping runs it: a batch with a
//! poison message. (The lost-response story end to end with the fake PSP's own webhook, and one
//! delivery five times, run for every PSP in the conformance suite.)

use payonce::adapters::sqs::SqsQueue;
use payonce::clock::{system_clock, Clock, SystemClock};
use payonce::ports::QueueReceive;
use payonce::service::webhooks::WebhookReceiver;
use payonce_fake_psp::{sign_webhook, DEFAULT_WEBHOOK_SECRET};
use payonce_tests::queue::sqs_event;
use payonce_tests::queue::SqsHarness;
use payonce_tests::stack::{api_event, webhook_providers, PaymentStack, Reply};
use serde_json::json;
use std::time::Duration;

/// One poll of the event source mapping: receive, invoke the processor, delete what succeeded.
async fn poll_once(stack: &PaymentStack, queue: &SqsQueue, visibility: Duration) -> usize {
    let messages = queue.receive(10, visibility).await.unwrap();
    if messages.is_empty() {
        return 0;
    }
    let response = payonce_webhook::processor::handle(&stack.processor, sqs_event(&messages)).await;
    let failed: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    for message in &messages {
        if !failed.contains(&message.message_id) {
            queue.delete(&message.receipt_handle).await.unwrap();
        }
    }
    messages.len()
}

#[tokio::test]
async fn a_batch_with_a_poison_message_applies_nine_once_and_dead_letters_the_poison() {
    let stack = PaymentStack::start().await;
    let sqs = SqsHarness::with_redrive(5, Duration::from_secs(1)).await;
    let queue = SqsQueue::new(sqs.client.clone(), sqs.queue_url.clone(), 262_144);
    let dlq = SqsQueue::new(sqs.client.clone(), sqs.dlq_url.clone(), 262_144);
    let receiver = WebhookReceiver::new(webhook_providers(), queue.clone(), system_clock());

    // GIVEN nine payments processing and their success events, plus one for a payment we never had
    let mut payments = Vec::new();
    for i in 0..9 {
        let order = stack.create_order("alice").await;
        let reply = stack.pay("alice", &format!("k{i}"), json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"})).await;
        assert_eq!(reply.status, 202);
        payments.push((order, reply.json["payment_id"].as_str().unwrap().to_owned()));
    }
    let mut bodies: Vec<String> = payments
        .iter()
        .enumerate()
        .map(|(i, (_, pid))| {
            super::event(
                &format!("evt_batch_{i}"),
                "payment_intent.succeeded",
                pid,
                &format!("pi_batch_{i}"),
            )
        })
        .collect();
    bodies.insert(
        4,
        super::event(
            "evt_poison",
            "payment_intent.succeeded",
            "pay_never_existed",
            "pi_poison",
        ),
    );
    for body in &bodies {
        let signature = sign_webhook(DEFAULT_WEBHOOK_SECRET, SystemClock.now_s(), body.as_bytes());
        let reply = Reply::from(
            payonce_webhook::receiver::handle(
                &receiver,
                api_event(
                    "POST",
                    "/webhooks/fake",
                    None,
                    &[("stripe-signature", &signature)],
                    body,
                ),
            )
            .await,
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    // WHEN the processor drains the queue, the poison being retried until SQS gives up on it
    stack.counter.reset();
    let first = poll_once(&stack, &queue, Duration::from_secs(1)).await;
    assert_eq!(first, 10, "one batch of ten");
    assert_eq!(
        stack.counter.by_operation().get("TransactWriteItems"),
        Some(&9),
        "nine applied once"
    );
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        poll_once(&stack, &queue, Duration::from_secs(1)).await;
        if dlq.depth().await.unwrap() == 1 {
            break;
        }
    }

    // THEN nine payments are settled once, the poison alone is in the DLQ: sent = applied + DLQ
    assert_eq!(queue.depth().await.unwrap(), 0);
    let dead = dlq.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].body.contains("evt_poison"));
    for (order, payment_id) in &payments {
        assert_eq!(
            stack.get_order("alice", order).await.json["payment_state"],
            "paid",
            "{payment_id}"
        );
    }
    assert_eq!(
        stack.counter.by_operation().get("TransactWriteItems"),
        Some(&9),
        "no event was applied twice"
    );
    let dedup = stack
        .snapshot()
        .await
        .0
        .keys()
        .filter(|pk| pk.starts_with("webhook#"))
        .count();
    assert_eq!(bodies.len(), dedup + dead.len());
}
