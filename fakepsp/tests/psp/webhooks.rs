//! Signed webhook delivery and its misbehaviour knobs, checked by a local receiver that
//! verifies every signature with `sign_webhook`.

use std::time::{Duration, Instant};

use payonce_fake_psp::{FakePspConfig, RunningFakePsp, WebhookKnobs, DEFAULT_API_KEY};

use crate::support::{charge_form, client, create, read, start_with, Receiver};

const SECRET: &str = "whsec_test_receiver";

async fn psp_and_receiver(knobs: WebhookKnobs, fail_first: u32) -> (RunningFakePsp, Receiver) {
    let receiver = Receiver::start(SECRET, fail_first).await;
    let psp = start_with(FakePspConfig {
        webhook_url: Some(receiver.url.clone()),
        webhook_secret: SECRET.to_owned(),
        webhooks: knobs,
        ..FakePspConfig::default()
    })
    .await;
    (psp, receiver)
}

/// Creates a charge and returns the PaymentIntent id from the answer (or the 402's intent).
async fn charge(psp: &RunningFakePsp, token: &str, payment_id: &str) -> String {
    let (_, _, body) = read(
        create(&client(), psp, &charge_form(token, payment_id), None)
            .await
            .expect("answered"),
    )
    .await;
    let pi = if body["error"].is_object() {
        &body["error"]["payment_intent"]
    } else {
        &body
    };
    pi["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn every_outcome_is_delivered_signed() {
    let (psp, mut receiver) = psp_and_receiver(WebhookKnobs::default(), 0).await;

    let approved = charge(&psp, "pm_card_visa", "pay_ok").await;
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert!(delivery.json_content_type);
    assert_eq!(delivery.kind(), "payment_intent.succeeded");
    assert!(delivery.id().starts_with("evt_") && delivery.id().len() == 28);
    assert_eq!(delivery.event["object"], "event");
    assert_eq!(delivery.event["api_version"], "2024-10-28.acacia");
    assert!(delivery.event["created"].is_i64());
    let pi = &delivery.event["data"]["object"];
    assert_eq!(pi["id"], approved.as_str());
    assert_eq!(pi["status"], "succeeded");
    assert_eq!(pi["metadata"]["payment_id"], "pay_ok");

    let declined = charge(&psp, "pm_card_chargeDeclinedInsufficientFunds", "pay_no").await;
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(delivery.kind(), "payment_intent.payment_failed");
    assert_eq!(delivery.event["data"]["object"]["id"], declined.as_str());
    assert_eq!(
        delivery.event["data"]["object"]["last_payment_error"]["decline_code"],
        "insufficient_funds"
    );

    let cancel = client()
        .post(format!(
            "{}/v1/payment_intents/{declined}/cancel",
            psp.base_url()
        ))
        .bearer_auth(DEFAULT_API_KEY)
        .send()
        .await
        .expect("answered");
    assert_eq!(cancel.status().as_u16(), 200);
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(delivery.kind(), "payment_intent.canceled");
    assert_eq!(delivery.event["data"]["object"]["status"], "canceled");

    // Errors that create nothing send nothing.
    charge_ignoring_answer(&psp, "pm_fake_error_before_charge").await;
    assert!(receiver
        .next_within(Duration::from_millis(200))
        .await
        .is_none());
}

async fn charge_ignoring_answer(psp: &RunningFakePsp, token: &str) {
    let _ = create(&client(), psp, &charge_form(token, "p"), None).await;
}

#[tokio::test]
async fn a_wrong_secret_does_not_verify() {
    let receiver_expecting_other = Receiver::start("whsec_other", 0).await;
    let psp = start_with(FakePspConfig {
        webhook_url: Some(receiver_expecting_other.url.clone()),
        ..FakePspConfig::default()
    })
    .await;
    let mut receiver = receiver_expecting_other;
    charge(&psp, "pm_card_visa", "p").await;
    assert!(!receiver.next().await.signature_valid);
}

#[tokio::test]
async fn lost_response_still_sends_the_webhook() {
    let (psp, mut receiver) = psp_and_receiver(WebhookKnobs::default(), 0).await;
    charge_ignoring_answer(&psp, "pm_fake_lost_response").await;
    let delivery = receiver.next().await;
    assert_eq!(delivery.kind(), "payment_intent.succeeded");
    assert_eq!(
        delivery.event["data"]["object"]["id"],
        psp.charges()[0].id.as_str()
    );
}

#[tokio::test]
async fn duplicates_knob_delivers_n_plus_one_copies_with_one_event_id() {
    let knobs = WebhookKnobs {
        duplicates: 2,
        ..WebhookKnobs::default()
    };
    let (psp, mut receiver) = psp_and_receiver(knobs, 0).await;
    charge(&psp, "pm_card_visa", "pay_dup").await;
    let copies = [
        receiver.next().await,
        receiver.next().await,
        receiver.next().await,
    ];
    assert!(copies.iter().all(|d| d.signature_valid));
    assert!(copies.iter().all(|d| d.id() == copies[0].id()));
    assert!(copies
        .iter()
        .all(|d| d.kind() == "payment_intent.succeeded"));
    assert!(receiver
        .next_within(Duration::from_millis(200))
        .await
        .is_none());

    // Knobs can be changed on the fly, for events produced afterwards.
    psp.set_webhook_knobs(WebhookKnobs::default());
    charge(&psp, "pm_card_visa", "pay_single").await;
    assert_eq!(
        receiver.next().await.event["data"]["object"]["metadata"]["payment_id"],
        "pay_single"
    );
    assert!(receiver
        .next_within(Duration::from_millis(200))
        .await
        .is_none());
}

#[tokio::test]
async fn refused_deliveries_are_retried_with_the_same_event() {
    let (psp, mut receiver) = psp_and_receiver(WebhookKnobs::default(), 2).await;
    let id = charge(&psp, "pm_card_visa", "pay_retry").await;
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(delivery.event["data"]["object"]["id"], id.as_str());
    assert!(receiver
        .next_within(Duration::from_millis(200))
        .await
        .is_none());
}

#[tokio::test]
async fn delay_knob_holds_events_back_but_not_the_api_answer() {
    let knobs = WebhookKnobs {
        delay: Duration::from_millis(400),
        ..WebhookKnobs::default()
    };
    let (psp, mut receiver) = psp_and_receiver(knobs, 0).await;
    let started = Instant::now();
    charge(&psp, "pm_card_visa", "pay_late").await;
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "API answer not delayed"
    );
    receiver.next().await;
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn reorder_knob_delivers_newest_first_within_the_delay() {
    let knobs = WebhookKnobs {
        reorder: true,
        delay: Duration::from_millis(300),
        ..WebhookKnobs::default()
    };
    let (psp, mut receiver) = psp_and_receiver(knobs, 0).await;
    charge(&psp, "pm_card_visa_chargeDeclined", "pay_r").await;
    charge(&psp, "pm_card_visa", "pay_r").await;
    assert_eq!(receiver.next().await.kind(), "payment_intent.succeeded");
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.payment_failed"
    );
}

#[tokio::test]
async fn webhook_url_can_be_set_and_cleared_at_runtime() {
    let mut receiver = Receiver::start(payonce_fake_psp::DEFAULT_WEBHOOK_SECRET, 0).await;
    let psp = start_with(FakePspConfig::default()).await;
    charge(&psp, "pm_card_visa", "before").await;
    psp.set_webhook_url(Some(receiver.url.clone()));
    charge(&psp, "pm_card_visa", "during").await;
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(
        delivery.event["data"]["object"]["metadata"]["payment_id"],
        "during"
    );
    psp.set_webhook_url(None);
    charge(&psp, "pm_card_visa", "after").await;
    assert!(receiver
        .next_within(Duration::from_millis(200))
        .await
        .is_none());
}

#[tokio::test]
async fn processing_and_requires_action_settle_later_with_their_webhooks() {
    let receiver = Receiver::start(SECRET, 0).await;
    let psp = start_with(FakePspConfig {
        webhook_url: Some(receiver.url.clone()),
        webhook_secret: SECRET.to_owned(),
        processing_for: Duration::from_millis(300),
        requires_action_for: Duration::from_millis(600),
        ..FakePspConfig::default()
    })
    .await;
    let mut receiver = receiver;
    // GIVEN one charge left processing and one waiting for authentication
    let (_, _, processing) = read(
        create(
            &client(),
            &psp,
            &charge_form("pm_fake_processing", "pay_p"),
            None,
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(processing["status"], "processing");
    let (_, _, action) = read(
        create(
            &client(),
            &psp,
            &charge_form("pm_fake_requires_action", "pay_a"),
            None,
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(action["status"], "requires_action");
    assert_eq!(receiver.next().await.kind(), "payment_intent.processing");
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.requires_action"
    );
    assert!(psp.charges().iter().all(|c| c.outcome == "pending"));
    // WHEN their time passes (nobody calls the API)
    let succeeded = receiver.next().await;
    let failed = receiver.next().await;
    // THEN the server's ticker moved them on and sent the webhooks, in that order
    assert!(succeeded.signature_valid && failed.signature_valid);
    assert_eq!(succeeded.kind(), "payment_intent.succeeded");
    assert_eq!(succeeded.event["data"]["object"]["id"], processing["id"]);
    assert_eq!(failed.kind(), "payment_intent.payment_failed");
    assert_eq!(
        failed.event["data"]["object"]["last_payment_error"]["code"],
        "authentication_required"
    );
    let outcomes: Vec<String> = psp.charges().into_iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, ["succeeded", "failed"]);
}

/// `POST /_fake/webhooks/hold` keeps every event back, however long, while the API still
/// answers; `POST /_fake/webhooks/release` sends what was held, in order, and delivery goes on
/// as before.
#[tokio::test]
async fn held_webhooks_wait_for_the_release_and_then_go_in_order() {
    let (psp, mut receiver) = psp_and_receiver(WebhookKnobs::default(), 0).await;
    let control = |path: &str| {
        client()
            .post(format!("{}/_fake/webhooks/{path}", psp.base_url()))
            .send()
    };
    assert_eq!(control("hold").await.expect("answered").status(), 204);

    let declined = charge(&psp, "pm_card_visa_chargeDeclined", "pay_held").await;
    let approved = charge(&psp, "pm_card_visa", "pay_held").await;
    assert!(
        receiver
            .next_within(Duration::from_millis(500))
            .await
            .is_none(),
        "nothing is delivered while held"
    );

    assert_eq!(control("release").await.expect("answered").status(), 204);
    let first = receiver.next().await;
    assert_eq!(first.kind(), "payment_intent.payment_failed");
    assert_eq!(first.event["data"]["object"]["id"], declined.as_str());
    let second = receiver.next().await;
    assert_eq!(second.kind(), "payment_intent.succeeded");
    assert_eq!(second.event["data"]["object"]["id"], approved.as_str());

    let after = charge(&psp, "pm_card_visa", "pay_after").await;
    assert_eq!(
        receiver.next().await.event["data"]["object"]["id"],
        after.as_str()
    );
}
