//! 3-D Secure on 2C2P through the charge handler, against DynamoDB Local and the fake PSP's
//! 2C2P face over HTTP: a payment with a `return_url` asks for 3-D Secure, waits for the
//! customer at the redirect Do Payment names, and is settled by the backend notification or the
//! inquiry reconcile makes; without one, a card that needs it is soft-declined at once.

use std::time::Duration;

use payonce::adapters::psp::twoc2p_webhook::TwoC2pNotifications;
use payonce::domain::{Currency, FailureKind, PaymentStatus};
use payonce::service::settle::EventApplied;
use payonce::service::webhooks::Processed;
use payonce_fake_psp::{FakePspConfig, DEFAULT_TWOC2P_MERCHANT_ID};
use payonce_tests::stack::{PaymentStack, CHECKOUT_ORIGIN, FAKE_API_KEY};
use payonce_tests::webhook_sink::WebhookSink;
use serde_json::{json, Value};

use super::{authenticate, order_state};

/// The test checkout's return page.
pub(super) fn return_url() -> String {
    format!("{CHECKOUT_ORIGIN}/checkout/return?from=psp")
}

/// A payment of `order` (THB 50.00) with `payment_method`, with or without the return URL.
pub(super) fn body(order: &str, payment_method: &str, with_return_url: bool) -> Value {
    let mut body = json!({"order_id": order, "order_version": 1, "payment_method": payment_method});
    if with_return_url {
        body["return_url"] = json!(return_url());
    }
    body
}

async fn stack_of(config: FakePspConfig) -> (PaymentStack, String) {
    let stack = PaymentStack::start_with(config, Default::default()).await;
    let order = stack.create_order_of("alice", Currency::Thb, 1, 5000).await;
    (stack, order)
}

/// The verified claims of a 2C2P backend notification body (`{"payload":"<JWT>"}`), signed with
/// the merchant's secret key (the stack's fake API key).
fn notification_claims(body: &str) -> Value {
    let verifier = TwoC2pNotifications::new(DEFAULT_TWOC2P_MERCHANT_ID, FAKE_API_KEY).unwrap();
    let envelope: Value = serde_json::from_str(body).expect("a JSON notification");
    let token = envelope["payload"].as_str().expect("a payload");
    serde_json::from_slice(
        &verifier
            .verify_token(token)
            .expect("signed by the merchant key"),
    )
    .unwrap()
}

/// Waits for the notification that says `resp_code`; its body.
pub(super) async fn notification(sink: &WebhookSink, resp_code: &str) -> String {
    let found = sink
        .wait_for(1, |envelope| {
            envelope["payload"].is_string()
                && notification_claims(&envelope.to_string())["respCode"] == resp_code
        })
        .await;
    found[0].clone()
}

/// Pays `order` with the 3-D Secure card and a return URL: 202 `requires_action`, after the
/// Payment Token, the Do Payment and the inquiry. The payment id and the redirect.
pub(super) async fn start_3ds(stack: &PaymentStack, order: &str, key: &str) -> (String, String) {
    let seen = stack.psp.requests_seen();
    let first = stack
        .pay(
            "alice",
            key,
            body(order, "pm_card_threeDSecure2Required", true),
        )
        .await;
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (202, Some("requires_action")),
        "{}",
        first.body
    );
    assert_eq!(
        stack.psp.requests_seen() - seen,
        3,
        "token, payment, inquiry"
    );
    let url = first.json["next_action"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        url.starts_with(&stack.psp.base_url()) && url.contains("/_fake/authenticate/"),
        "{url}"
    );
    let id = first.json["payment_id"].as_str().unwrap().to_owned();
    let stored = stack.payment(&id).await;
    assert_eq!(stored.status, PaymentStatus::RequiresAction);
    assert_eq!(
        stored.progress.next_action.as_ref().map(|a| a.url.as_str()),
        Some(url.as_str())
    );
    (id, url)
}

#[tokio::test]
async fn a_2c2p_3ds_card_waits_for_the_customer_then_the_notification_pays_it_once() {
    // GIVEN a 2C2P deployment and a card that asks for 3-D Secure
    let (stack, order) = stack_of(FakePspConfig::twoc2p()).await;
    let sink = stack.webhook_sink().await;

    // WHEN it is paid with a return URL THEN it waits for the customer, the charge pending
    let (id, url) = start_3ds(&stack, &order, "2c2p-3ds").await;
    let charges = stack.psp.charges();
    assert_eq!((charges.len(), charges[0].outcome.as_str()), (1, "pending"));
    // AND the order is held: another attempt is refused, nothing sent
    let seen = stack.psp.requests_seen();
    let blocked = stack
        .pay("alice", "2c2p-visa", body(&order, "pm_card_visa", false))
        .await;
    assert_eq!(blocked.status, 409, "{}", blocked.body);
    // AND the return page's replay answers from the store
    let replay = stack
        .pay(
            "alice",
            "2c2p-3ds",
            body(&order, "pm_card_threeDSecure2Required", true),
        )
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (202, Some("true"))
    );
    assert_eq!(stack.psp.requests_seen(), seen);

    // WHEN the customer completes it and 2C2P's notification is processed
    let (status, location) = authenticate(&url, "complete").await;
    assert_eq!((status, location), (303, Some(return_url())));
    let paid = notification(&sink, "0000").await;
    let applied = stack.deliver(&paid).await.unwrap();
    assert!(
        matches!(applied, Processed::Applied(EventApplied::Moved(_))),
        "{applied:?}"
    );

    // THEN the payment succeeded once, the order is paid, and the replay shows it
    let replay = stack
        .pay(
            "alice",
            "2c2p-3ds",
            body(&order, "pm_card_threeDSecure2Required", true),
        )
        .await;
    assert_eq!(
        (replay.status, replay.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        replay.body
    );
    assert_eq!(stack.psp.succeeded_charges_for(&id), 1);
    assert_eq!(order_state(&stack, &order).await, "paid");
    // AND the notification again moves nothing
    let again = stack.deliver(&paid).await.unwrap();
    assert!(
        matches!(applied_kind(&again), "duplicate" | "unchanged"),
        "{again:?}"
    );
    assert_eq!(stack.payment(&id).await.status, PaymentStatus::Succeeded);
}

fn applied_kind(processed: &Processed) -> &'static str {
    match processed {
        Processed::Applied(EventApplied::Moved(_)) => "moved",
        Processed::Applied(EventApplied::Unchanged(_)) => "unchanged",
        Processed::Applied(EventApplied::Duplicate) => "duplicate",
        _ => "other",
    }
}

#[tokio::test]
async fn a_failed_2c2p_authentication_is_authentication_failed_and_another_card_pays() {
    // GIVEN a 2C2P payment waiting for 3-D Secure
    let (stack, order) = stack_of(FakePspConfig::twoc2p()).await;
    let sink = stack.webhook_sink().await;
    let (id, url) = start_3ds(&stack, &order, "2c2p-3ds-fail").await;

    // WHEN the customer fails the challenge and 2C2P's notification (0004) is processed
    let (status, location) = authenticate(&url, "fail").await;
    assert_eq!((status, location), (303, Some(return_url())));
    let failed = notification(&sink, "0004").await;
    stack.deliver(&failed).await.unwrap();

    // THEN it is failed as a failed authentication (2C2P's soft decline answers both), the
    // replay 402 authentication-failed, the order free again
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.failure.map(|f| f.kind)),
        (
            PaymentStatus::Failed,
            Some(FailureKind::AuthenticationFailed)
        )
    );
    let replay = stack
        .pay(
            "alice",
            "2c2p-3ds-fail",
            body(&order, "pm_card_threeDSecure2Required", true),
        )
        .await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/authentication-failed"),
        "{}",
        replay.body
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    // AND another card pays it: two charges, one succeeded
    let other = stack
        .pay("alice", "2c2p-other", body(&order, "pm_card_visa", false))
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
async fn reconcile_settles_a_completed_2c2p_authentication_whose_notification_was_lost() {
    // GIVEN a 2C2P payment waiting for 3-D Secure, and no notification reaching payonce
    let (stack, order) = stack_of(FakePspConfig::twoc2p()).await;
    let (id, url) = start_3ds(&stack, &order, "2c2p-3ds-lost").await;

    // WHEN the customer completes it and reconcile runs
    assert_eq!(authenticate(&url, "complete").await.0, 303);
    stack.clock.advance(Duration::from_secs(10 * 60));
    let report = stack.reconcile().await;

    // THEN the inquiry settles it: succeeded once, the order paid
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(stack.payment(&id).await.status, PaymentStatus::Succeeded);
    assert_eq!(stack.psp.succeeded_charges_for(&id), 1);
    assert_eq!(order_state(&stack, &order).await, "paid");
}

#[tokio::test]
async fn a_2c2p_card_that_needs_3ds_without_a_return_url_is_authentication_required_at_once() {
    // GIVEN a 2C2P deployment and a card that needs 3-D Secure
    let (stack, order) = stack_of(FakePspConfig::twoc2p()).await;
    let request = body(&order, "pm_card_threeDSecure2Required", false);

    // WHEN it is paid without a return URL (payonce asks 2C2P for no 3-D Secure)
    let first = stack.pay("alice", "2c2p-no-return", request.clone()).await;

    // THEN 402 authentication-required, stored, the order free, the charge failed at 2C2P
    assert_eq!(
        (first.status, first.problem_type()),
        (402, "/problems/authentication-required"),
        "{}",
        first.body
    );
    let id = first.json["payment_id"].as_str().unwrap().to_owned();
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.failure.map(|f| f.kind)),
        (
            PaymentStatus::Failed,
            Some(FailureKind::AuthenticationRequired)
        )
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    let charges = stack.psp.charges();
    assert_eq!((charges.len(), charges[0].outcome.as_str()), (1, "failed"));
    // AND the replay answers the same from the store
    let seen = stack.psp.requests_seen();
    let replay = stack.pay("alice", "2c2p-no-return", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/authentication-required")
    );
    assert_eq!(stack.psp.requests_seen(), seen);
}

#[tokio::test]
async fn an_abandoned_2c2p_action_holds_the_order_until_2c2p_ends_it() {
    // GIVEN a 2C2P payment the customer left at the 3-D Secure page, which 2C2P lapses after a
    // second
    let config = FakePspConfig {
        requires_action_for: Duration::from_secs(1),
        ..FakePspConfig::twoc2p()
    };
    let (stack, order) = stack_of(config).await;
    let (id, _url) = start_3ds(&stack, &order, "2c2p-3ds-left").await;

    // WHEN reconcile runs past the action's hour while 2C2P still waits
    stack.clock.advance(Duration::from_secs(2 * 3600));
    let seen = stack.psp.requests_seen();
    let report = stack.reconcile().await;

    // THEN nothing is canceled on payonce's own say (2C2P has no cancel for it): one inquiry,
    // the payment still waiting, the order held
    assert_eq!((report.pending, report.errors), (1, 0), "{report:?}");
    assert_eq!(stack.psp.requests_seen() - seen, 1, "one inquiry");
    assert_eq!(
        stack.payment(&id).await.status,
        PaymentStatus::RequiresAction
    );
    let blocked = stack
        .pay("alice", "2c2p-next", body(&order, "pm_card_visa", false))
        .await;
    assert_eq!(blocked.status, 409, "{}", blocked.body);
    // AND the checkout's cancel cannot end it: 409, nothing sent to 2C2P, still waiting
    let seen = stack.psp.requests_seen();
    let cancel = stack.cancel("alice", &[], &id, "2c2p-cancel").await;
    assert_eq!(
        (cancel.status, cancel.problem_type()),
        (409, "/problems/payment-not-cancelable"),
        "{}",
        cancel.body
    );
    assert_eq!(stack.psp.requests_seen(), seen);
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.operation.is_none()),
        (PaymentStatus::RequiresAction, true)
    );

    // WHEN 2C2P has lapsed the action (0004) and the next check is due
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stack.clock.advance(Duration::from_secs(2 * 3600));
    let report = stack.reconcile().await;

    // THEN the inquiry fails it as a failed authentication, the order is free, and another
    // card pays: two charges at 2C2P, one succeeded
    assert_eq!((report.declined, report.errors), (1, 0), "{report:?}");
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.failure.map(|f| f.kind)),
        (
            PaymentStatus::Failed,
            Some(FailureKind::AuthenticationFailed)
        )
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    let other = stack
        .pay(
            "alice",
            "2c2p-next-card",
            body(&order, "pm_card_visa", false),
        )
        .await;
    assert_eq!(other.status, 201, "{}", other.body);
    assert_eq!(stack.psp.charges().len(), 2);
    assert_eq!(stack.psp.succeeded_charges_for(&id), 0);
    assert_eq!(order_state(&stack, &order).await, "paid");
}
