//! A webhook's effect is checked against our payment before anything is applied: an event that
//! reports another amount, another currency or the PSP's other mode changes nothing, is
//! recorded as processed, and raises an alarm.

use super::event;
use payonce::service::webhooks::{Processed, ProcessorConfig, QueuedEvent, WebhookProcessor};
use payonce::service::EventApplied;
use payonce_tests::stack::{webhook_providers, PaymentStack};
use serde_json::{json, Value};

fn succeeded_event(event_id: &str, payment_id: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut body: Value = serde_json::from_str(&event(
        event_id,
        "payment_intent.succeeded",
        payment_id,
        "pi_1",
    ))
    .unwrap();
    edit(&mut body);
    body.to_string()
}

async fn process(
    processor: &WebhookProcessor<payonce::adapters::dynamodb::DynamoPaymentStore>,
    body: &str,
) -> Processed {
    processor
        .process(&QueuedEvent {
            message_id: "m",
            provider: Some("fake"),
            body,
        })
        .await
        .expect("processing succeeds")
}

#[tokio::test]
async fn an_event_with_another_amount_or_currency_applies_nothing_and_is_recorded() {
    let stack = PaymentStack::start().await;
    let (order, payment_id) = super::processing_payment(&stack, "alice", "k").await;
    let cases = [
        ("evt_amount", json!(2999), json!("jpy")),
        ("evt_currency", json!(3000), json!("usd")),
    ];
    for (event_id, amount, currency) in cases {
        let body = succeeded_event(event_id, &payment_id, |e| {
            e["data"]["object"]["amount"] = amount.clone();
            e["data"]["object"]["currency"] = currency.clone();
        });
        let first = process(&stack.processor, &body).await;
        assert!(
            matches!(&first, Processed::Applied(EventApplied::Rejected(p)) if p.status.as_str() == "processing"),
            "{event_id}: {first:?}"
        );
        // Recorded as processed: a redelivery is a duplicate, and still nothing moves.
        assert_eq!(
            process(&stack.processor, &body).await,
            Processed::Applied(EventApplied::Duplicate),
            "{event_id}"
        );
        let payment = stack.payment(&payment_id).await;
        assert_eq!(payment.status.as_str(), "processing", "{event_id}");
        assert_eq!(payment.provider_payment_id, None, "{event_id}");
        let order_now = stack.get_order("alice", &order).await;
        assert_eq!(order_now.json["payment_state"], "processing", "{event_id}");
        let (idempotency, _) = stack.snapshot().await;
        assert!(
            idempotency.contains_key(&format!("webhook#fake#{event_id}")),
            "{event_id}: the event is recorded"
        );
    }
    // The PSP's own word, with the payment's amount and currency, applies.
    let good = succeeded_event("evt_good", &payment_id, |_| {});
    assert!(matches!(
        process(&stack.processor, &good).await,
        Processed::Applied(EventApplied::Moved(p)) if p.status.as_str() == "succeeded"
    ));
}

#[tokio::test]
async fn an_event_from_the_psps_other_mode_applies_nothing() {
    let stack = PaymentStack::start().await;
    let (_, payment_id) = super::processing_payment(&stack, "alice", "k").await;
    let test_mode = WebhookProcessor::new(
        stack.processor.store().clone(),
        webhook_providers(),
        ProcessorConfig {
            livemode: Some(false),
            ..ProcessorConfig::default()
        },
    );
    let live = succeeded_event("evt_live", &payment_id, |e| e["livemode"] = json!(true));
    assert_eq!(
        process(&test_mode, &live).await,
        Processed::Ignored("other mode")
    );
    let payment = stack.payment(&payment_id).await;
    assert_eq!(payment.status.as_str(), "processing");
    let (idempotency, _) = stack.snapshot().await;
    assert!(idempotency.contains_key("webhook#fake#evt_live"));
    // Without a mode of its own, an event without one, or of the same mode, applies.
    let same = succeeded_event("evt_test", &payment_id, |e| e["livemode"] = json!(false));
    assert!(matches!(
        process(&test_mode, &same).await,
        Processed::Applied(EventApplied::Moved(_))
    ));
}

/// The review's revived decline: a correctly signed `payment_intent.succeeded` for *another*
/// PaymentIntent (another integration on the account, a Dashboard user), naming our declined
/// payment with its amount. Once the PSP's id is stored, word about another one applies nothing:
/// the payment stays declined, its order unpaid, and the event is recorded with an alarm.
#[tokio::test]
async fn a_signed_success_for_another_intent_never_revives_a_declined_payment() {
    let stack = PaymentStack::start().await;
    // GIVEN a payment the PSP declined (its PaymentIntent's id stored)
    let order = stack.create_order("alice").await;
    let reply = stack
        .pay(
            "alice",
            "k",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa_chargeDeclined"}),
        )
        .await;
    assert_eq!(reply.status, 402, "{}", reply.body);
    let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();
    let declined = stack.payment(&payment_id).await;
    let ours = declined.provider_payment_id.clone().expect("the PSP's id");

    // WHEN a signed success arrives naming our payment, with its amount, for another intent
    let foreign = event(
        "evt_foreign",
        "payment_intent.succeeded",
        &payment_id,
        "pi_someone_else",
    );
    assert_ne!(ours, "pi_someone_else");
    let first = process(&stack.processor, &foreign).await;

    // THEN nothing moves: still declined under its own intent, the order unpaid
    assert!(
        matches!(&first, Processed::Applied(EventApplied::Rejected(p)) if p.status.as_str() == "failed"),
        "{first:?}"
    );
    let after = stack.payment(&payment_id).await;
    assert_eq!(after, declined);
    let order_now = stack.get_order("alice", &order).await;
    assert_eq!(order_now.json["payment_state"], "unpaid");
    // AND it is recorded as processed: a redelivery is a duplicate
    assert_eq!(
        process(&stack.processor, &foreign).await,
        Processed::Applied(EventApplied::Duplicate)
    );
    let (idempotency, _) = stack.snapshot().await;
    assert!(idempotency.contains_key("webhook#fake#evt_foreign"));
}

/// An event of a Stripe Connect account is another business's: payonce charges on its own
/// account only, so it applies nothing (recorded, with an alarm), even naming our payment with
/// its amount and the right intent.
#[tokio::test]
async fn an_event_of_a_connected_account_applies_nothing() {
    let stack = PaymentStack::start().await;
    let (order, payment_id) = super::processing_payment(&stack, "alice", "k").await;
    let connected = succeeded_event("evt_connect", &payment_id, |e| {
        e["account"] = json!("acct_1Nv0FGQ9RKHgCVdK")
    });
    assert_eq!(
        process(&stack.processor, &connected).await,
        Processed::Ignored("connected account")
    );
    let payment = stack.payment(&payment_id).await;
    assert_eq!(payment.status.as_str(), "processing");
    let order_now = stack.get_order("alice", &order).await;
    assert_eq!(order_now.json["payment_state"], "processing");
    let (idempotency, _) = stack.snapshot().await;
    assert!(idempotency.contains_key("webhook#fake#evt_connect"));
}
