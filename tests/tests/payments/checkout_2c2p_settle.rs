//! Authorize now, capture later on a 2C2P account that settles manually, through the handlers,
//! against DynamoDB Local and the fake PSP's 2C2P face over HTTP (its Payment Maintenance API
//! with the keys it made).
//!
//! On such an account every approved payment waits for a settle (`S`): a manual capture stays
//! authorized until staff capture it (a settle of the whole) or cancel it (a void); an automatic
//! payment is settled by the charge path at once, or by reconcile when that answer was lost. A
//! settle sent again is answered `39` (already settled), which reads as the capture it is.

use std::time::Duration;

use payonce::domain::{CancellationReason, Currency, PaymentStatus};
use payonce::service::ChargeConfig;
use payonce_fake_psp::{FakeCharge, FakePspConfig, TwoC2pAction};
use payonce_tests::stack::{PaymentStack, STAFF, STAFF_SCOPES};
use serde_json::{json, Value};

use super::{order_state, LosesOperationAnswers};

/// The order total, in satang (THB 50.00).
const AMOUNT: i64 = 5000;

/// A stack on a 2C2P account that settles manually, and a new order of alice's.
async fn settling_stack() -> (PaymentStack, String) {
    let mut config = FakePspConfig::twoc2p();
    config.twoc2p_manual_settlement = true;
    let stack = PaymentStack::start_with(config, ChargeConfig::default()).await;
    let order = stack
        .create_order_of("alice", Currency::Thb, 1, AMOUNT)
        .await;
    (stack, order)
}

fn body(order: &str, extra: Value) -> Value {
    let mut body = json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// The fake's one 2C2P charge for `payment_id`.
fn charge_of(stack: &PaymentStack, payment_id: &str) -> FakeCharge {
    let mut charges: Vec<FakeCharge> = stack
        .psp
        .charges()
        .into_iter()
        .filter(|c| c.payment_id.as_deref() == Some(payment_id))
        .collect();
    assert_eq!(charges.len(), 1, "{charges:#?}");
    charges.remove(0)
}

/// The maintenance calls the fake answered, as `processType respCode`.
fn actions(stack: &PaymentStack) -> Vec<String> {
    stack
        .psp
        .twoc2p_actions()
        .unwrap_or_default()
        .iter()
        .map(
            |TwoC2pAction {
                 process_type,
                 resp_code,
                 ..
             }| {
                format!(
                    "{} {}",
                    process_type.as_deref().unwrap_or("-"),
                    resp_code.as_deref().unwrap_or("-")
                )
            },
        )
        .collect()
}

/// Pays alice's `order` under `key` for a manual capture: 201 `authorized` after the Payment
/// Token, the Do Payment and the inquiry, and no settle. The answer.
async fn authorize(stack: &PaymentStack, order: &str, key: &str) -> Value {
    let seen = stack.psp.requests_seen();
    let reply = stack
        .pay("alice", key, body(order, json!({"capture": "manual"})))
        .await;
    assert_eq!(
        (reply.status, reply.json["status"].as_str()),
        (201, Some("authorized")),
        "{}",
        reply.body
    );
    assert_eq!(
        stack.psp.requests_seen() - seen,
        3,
        "token, payment, inquiry"
    );
    assert!(actions(stack).is_empty(), "{:?}", actions(stack));
    reply.json
}

#[tokio::test]
async fn a_2c2p_manual_capture_is_authorized_then_settled_whole_once_by_staff() {
    // GIVEN a 2C2P account that settles manually, and an order
    let (stack, order) = settling_stack().await;

    // WHEN alice pays it for a manual capture
    let authorized = authorize(&stack, &order, "2c2p-manual").await;

    // THEN 201 authorized for the whole amount; 2C2P holds an authorization, nothing captured
    assert_eq!(authorized["capture"], "manual");
    assert_eq!(authorized["amount_capturable"], AMOUNT);
    let id = authorized["payment_id"].as_str().unwrap().to_owned();
    let charge = charge_of(&stack, &id);
    assert_eq!(
        (charge.outcome.as_str(), charge.captures.len()),
        ("authorized", 0),
        "{charge:#?}"
    );
    let stored = stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.provider_payment_id.as_deref(),
            stored.progress.amount_capturable
        ),
        (
            PaymentStatus::Authorized,
            charge.invoice_no.as_deref(),
            AMOUNT
        )
    );
    assert_eq!(order_state(&stack, &order).await, "authorized");

    // WHEN staff capture it
    let seen = stack.psp.requests_seen();
    let captured = stack.capture(&id, "2c2p-cap", json!({})).await;

    // THEN 201 succeeded after one settle of the whole; 2C2P captured it once
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(
        (
            captured.json["status"].as_str(),
            &captured.json["amount_captured"]
        ),
        (Some("succeeded"), &json!(AMOUNT))
    );
    assert_eq!(stack.psp.requests_seen() - seen, 1, "the settle");
    assert_eq!(actions(&stack), ["S 00"]);
    let charge = charge_of(&stack, &id);
    assert_eq!(
        (charge.amount_captured, charge.captures.len()),
        (Some(AMOUNT), 1),
        "{charge:#?}"
    );
    assert_eq!(stack.psp.succeeded_charges_for(&id), 1);
    assert_eq!(order_state(&stack, &order).await, "paid");
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.amount_captured()),
        (PaymentStatus::Succeeded, AMOUNT)
    );

    // WHEN the same capture key comes again THEN it replays, 2C2P not called
    let seen = stack.psp.requests_seen();
    let replay = stack.capture(&id, "2c2p-cap", json!({})).await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(stack.psp.requests_seen(), seen);

    // AND the captured payment refunds through the same API
    let refund = stack
        .refund(&id, "2c2p-settled-refund", json!({"amount": 2000}))
        .await;
    assert_eq!(refund.status, 201, "{}", refund.body);
    assert_eq!(refund.json["status"], "succeeded");
    assert_eq!(stack.psp.refunds().len(), 1);
}

#[tokio::test]
async fn an_automatic_2c2p_payment_on_a_settling_account_is_settled_by_the_charge_itself() {
    // GIVEN a 2C2P account that settles manually
    let (stack, order) = settling_stack().await;

    // WHEN alice pays with an automatic capture (the default)
    stack.counter.reset();
    let paid = stack
        .pay("alice", "2c2p-auto", body(&order, json!({})))
        .await;
    // (in at most 4 DynamoDB requests, as on Square: the invoice is stored before the settle)
    assert!(
        stack.counter.total() <= 4,
        "{:?}",
        stack.counter.by_operation()
    );

    // THEN 201 succeeded: the approval was settled at once, a fourth call
    assert_eq!(
        (paid.status, paid.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        paid.body
    );
    assert_eq!(
        stack.psp.requests_seen(),
        4,
        "token, payment, inquiry, settle"
    );
    assert_eq!(actions(&stack), ["S 00"]);
    let id = paid.json["payment_id"].as_str().unwrap().to_owned();
    let charge = charge_of(&stack, &id);
    assert_eq!(
        (charge.amount_captured, charge.captures.len()),
        (Some(AMOUNT), 1),
        "{charge:#?}"
    );
    assert_eq!(order_state(&stack, &order).await, "paid");
}

#[tokio::test]
async fn a_partial_capture_on_2c2p_is_refused_before_anything_is_sent_and_the_whole_goes_through() {
    // GIVEN an authorized 2C2P payment
    let (stack, order) = settling_stack().await;
    let authorized = authorize(&stack, &order, "2c2p-part").await;
    let id = authorized["payment_id"].as_str().unwrap().to_owned();
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();

    // WHEN staff capture part of it
    let part = stack
        .capture(&id, "2c2p-cap-part", json!({"amount": 1000}))
        .await;

    // THEN 400 invalid-request: 2C2P is settled whole; nothing written, nothing sent
    assert_eq!(
        (part.status, part.problem_type()),
        (400, "/problems/invalid-request"),
        "{}",
        part.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    assert_eq!(charge_of(&stack, &id).captures.len(), 0);

    // AND the whole, spelled out, is settled once
    let whole = stack
        .capture(&id, "2c2p-cap-whole", json!({"amount": AMOUNT}))
        .await;
    assert_eq!(whole.status, 201, "{}", whole.body);
    assert_eq!(charge_of(&stack, &id).captures.len(), 1);
    assert_eq!(order_state(&stack, &order).await, "paid");
}

#[tokio::test]
async fn staff_cancel_voids_the_2c2p_authorization_and_frees_the_order() {
    // GIVEN an authorized 2C2P payment
    let (stack, order) = settling_stack().await;
    let authorized = authorize(&stack, &order, "2c2p-to-void").await;
    let id = authorized["payment_id"].as_str().unwrap().to_owned();

    // WHEN staff cancel it
    let canceled = stack.cancel(STAFF, STAFF_SCOPES, &id, "2c2p-void").await;

    // THEN 200 canceled after one void; 2C2P holds nothing captured, the order is free
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    assert_eq!(canceled.json["status"], "canceled");
    assert_eq!(actions(&stack), ["V 00"]);
    let charge = charge_of(&stack, &id);
    assert_eq!(
        (charge.outcome.as_str(), charge.captures.len()),
        ("canceled", 0),
        "{charge:#?}"
    );
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.progress.cancellation_reason),
        (PaymentStatus::Canceled, Some(CancellationReason::Requested))
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");

    // AND a capture after it is refused from the store, nothing sent
    let seen = stack.psp.requests_seen();
    let late = stack.capture(&id, "2c2p-cap-late", json!({})).await;
    assert_eq!(
        (late.status, late.problem_type()),
        (409, "/problems/payment-not-capturable"),
        "{}",
        late.body
    );
    assert_eq!(stack.psp.requests_seen(), seen);
}

#[tokio::test]
async fn a_settle_whose_answer_was_lost_is_sent_again_by_reconcile_and_already_settled_is_captured()
{
    // GIVEN a charge function whose settle of the approval is done by 2C2P but its answer lost
    let (stack, order) = settling_stack().await;
    let losing = stack.charge_with(LosesOperationAnswers(payonce_tests::stack::psp_for(
        &stack.psp,
    )));
    let request = body(&order, json!({}));

    // WHEN alice pays
    let first = stack
        .pay_through(&losing, "alice", "2c2p-lost-settle", request.clone())
        .await;

    // THEN 202 processing: the invoice is stored, the settle's outcome unknown though 2C2P
    // captured; the order held
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        first.body
    );
    let id = first.json["payment_id"].as_str().unwrap().to_owned();
    assert_eq!(charge_of(&stack, &id).captures.len(), 1);
    let stored = stack.payment(&id).await;
    assert_eq!(stored.status, PaymentStatus::Processing);
    assert!(stored.provider_payment_id.is_some());
    assert_eq!(order_state(&stack, &order).await, "processing");

    // WHEN reconcile runs once the attempt is old enough
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;

    // THEN it reads the approval, settles again, and 2C2P's "already settled" is the capture:
    // succeeded, captured once
    assert_eq!(
        (report.examined, report.succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(actions(&stack), ["S 00", "S 39"]);
    let charge = charge_of(&stack, &id);
    assert_eq!(
        (charge.amount_captured, charge.captures.len()),
        (Some(AMOUNT), 1),
        "{charge:#?}"
    );
    assert_eq!(stack.psp.succeeded_charges_for(&id), 1);
    assert_eq!(order_state(&stack, &order).await, "paid");
    let replay = stack.pay("alice", "2c2p-lost-settle", request).await;
    assert_eq!(
        (replay.status, replay.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        replay.body
    );
}

#[tokio::test]
async fn without_manual_settlement_a_2c2p_manual_capture_is_refused_unclaimed() {
    // GIVEN a 2C2P account that settles automatically, with the maintenance keys
    let stack = PaymentStack::start_with(FakePspConfig::twoc2p(), ChargeConfig::default()).await;
    let order = stack
        .create_order_of("alice", Currency::Thb, 1, AMOUNT)
        .await;
    let before = stack.snapshot().await;

    // WHEN a manual capture is asked THEN 409 capture-not-supported, nothing written or sent
    let reply = stack
        .pay(
            "alice",
            "2c2p-no-manual",
            body(&order, json!({"capture": "manual"})),
        )
        .await;
    assert_eq!(
        (reply.status, reply.problem_type()),
        (409, "/problems/capture-not-supported"),
        "{}",
        reply.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), 0);
}

#[tokio::test]
async fn a_3ds_payment_on_a_settling_account_is_settled_once_the_notification_names_its_approval() {
    // GIVEN a 2C2P account that settles manually, and a card that asks for 3-D Secure
    let (stack, order) = settling_stack().await;
    let sink = stack.webhook_sink().await;
    let (id, url) = super::checkout_2c2p::start_3ds(&stack, &order, "2c2p-3ds-settle").await;
    // AND the checkout's cancel of it is refused without a call: an automatic payment is settled
    // by payonce outside any claim, so no void may race that settle
    let seen = stack.psp.requests_seen();
    let cancel = stack.cancel("alice", &[], &id, "2c2p-3ds-cancel").await;
    assert_eq!(
        (cancel.status, cancel.problem_type()),
        (409, "/problems/payment-not-cancelable"),
        "{}",
        cancel.body
    );
    assert_eq!(stack.psp.requests_seen(), seen);
    assert!(stack.payment(&id).await.operation.is_none());

    // WHEN the customer completes it and 2C2P's notification of the approval is processed
    let (status, _) = super::authenticate(&url, "complete").await;
    assert_eq!(status, 303);
    let approved = super::checkout_2c2p::notification(&sink, "0000").await;
    stack.deliver(&approved).await.unwrap();

    // THEN the approval is an authorization, not a success: nothing settled yet, the order held
    let stored = stack.payment(&id).await;
    assert_ne!(stored.status, PaymentStatus::Succeeded, "{stored:?}");
    assert!(actions(&stack).is_empty(), "{:?}", actions(&stack));
    assert_eq!(charge_of(&stack, &id).captures.len(), 0);
    assert_ne!(order_state(&stack, &order).await, "paid");

    // WHEN reconcile serves the request the processor queued for payonce's second step
    let report = stack.reconcile_requested().await;

    // THEN it settles the whole once: succeeded, the order paid
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(actions(&stack), ["S 00"]);
    let charge = charge_of(&stack, &id);
    assert_eq!(
        (charge.amount_captured, charge.captures.len()),
        (Some(AMOUNT), 1),
        "{charge:#?}"
    );
    assert_eq!(stack.payment(&id).await.status, PaymentStatus::Succeeded);
    assert_eq!(order_state(&stack, &order).await, "paid");
    // AND the notification again moves nothing, nor sends anything
    stack.deliver(&approved).await.unwrap();
    assert_eq!(stack.payment(&id).await.status, PaymentStatus::Succeeded);
    assert_eq!(actions(&stack), ["S 00"]);
}

#[tokio::test]
async fn a_settle_after_the_acquirer_let_the_authorization_lapse_is_402_and_frees_the_order() {
    // GIVEN a 2C2P authorization the acquirer lets lapse after a moment
    let config = FakePspConfig {
        twoc2p_manual_settlement: true,
        authorization_expires_after: Duration::from_millis(300),
        ..FakePspConfig::twoc2p()
    };
    let stack = PaymentStack::start_with(config, ChargeConfig::default()).await;
    let order = stack
        .create_order_of("alice", Currency::Thb, 1, AMOUNT)
        .await;
    let authorized = authorize(&stack, &order, "2c2p-lapse").await;
    let id = authorized["payment_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(charge_of(&stack, &id).outcome, "canceled");

    // WHEN staff capture it
    let refused = stack.capture(&id, "2c2p-cap-late", json!({})).await;

    // THEN 402 capture-failed: the settle meets a voided transaction, so the payment is stored
    // canceled as expired, the order free again, nothing captured
    assert_eq!(
        (refused.status, refused.problem_type()),
        (402, "/problems/capture-failed"),
        "{}",
        refused.body
    );
    assert_eq!(actions(&stack), ["S 31"]);
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.progress.cancellation_reason),
        (PaymentStatus::Canceled, Some(CancellationReason::Expired))
    );
    assert_eq!(order_state(&stack, &order).await, "unpaid");
    assert_eq!(charge_of(&stack, &id).captures.len(), 0);
}
