//! The conformance cases, each written once for any [`Face`].

use super::harness::{post, Delivery, Pipeline, WebhookEndpoint};
use super::{Approval, EventFacts, Face, FenceProof, LookupBy, PayerAction};
use payonce::adapters::psp::twoc2p_ids::invoice_no_for;
use payonce::clock::{Clock, SystemClock};
use payonce::domain::{OperationKind, Payment, PaymentStatus, Progress, Settlement};
use payonce::ports::{
    charge_key, ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspLookup,
    PspOutcome,
};
use payonce::service::webhooks::{Processed, QueuedEvent, PROVIDER_ATTRIBUTE};
use payonce::service::{ChargeConfig, EventApplied};
use payonce_fake_psp::{FakeCharge, FakePspConfig};
use payonce_tests::stack::{adapter_at, api_event, PaymentStack, Reply, CHECKOUT_ORIGIN};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const USER: &str = "alice";

/// A stack on the face's fake PSP, with default charge settings.
async fn stack<F: Face>() -> PaymentStack {
    stack_with::<F>(F::fake(), ChargeConfig::default()).await
}

/// A stack on `fake` (the face's, adjusted) and these charge settings.
async fn stack_with<F: Face>(fake: FakePspConfig, charge: ChargeConfig) -> PaymentStack {
    let stack = PaymentStack::start_with(fake, charge).await;
    assert_eq!(stack.charge.psp().name(), F::NAME);
    assert_eq!(stack.webhook_provider, F::WEBHOOK_PROVIDER);
    stack
}

/// The face's fake with charges that stay non-final for an hour (`pm_fake_processing`,
/// `pm_fake_requires_action`), or settle after `processing_for`.
fn waiting<F: Face>(processing_for: Duration) -> FakePspConfig {
    FakePspConfig {
        processing_for,
        requires_action_for: Duration::from_secs(3600),
        ..F::fake()
    }
}

/// A new order of [`Face::AMOUNT`] in [`Face::CURRENCY`] through the orders API.
async fn order<F: Face>(stack: &PaymentStack, user: &str) -> String {
    stack.create_order_of(user, F::CURRENCY, 1, F::AMOUNT).await
}

fn pay_body(order: &str, payment_method: &str) -> Value {
    json!({"order_id": order, "order_version": 1, "payment_method": payment_method})
}

fn payment_id(reply: &Reply) -> String {
    reply.json["payment_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no payment_id in {}", reply.body))
        .to_owned()
}

async fn order_state(stack: &PaymentStack, user: &str, order: &str) -> String {
    stack.get_order(user, order).await.json["payment_state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The fake's charges for our payment.
fn charges_for(stack: &PaymentStack, payment_id: &str) -> Vec<FakeCharge> {
    stack
        .psp
        .charges()
        .into_iter()
        .filter(|c| c.payment_id.as_deref() == Some(payment_id))
        .collect()
}

/// The one charge the fake holds for our payment.
fn the_charge(stack: &PaymentStack, payment_id: &str) -> FakeCharge {
    let mut charges = charges_for(stack, payment_id);
    assert_eq!(charges.len(), 1, "{charges:#?}");
    charges.remove(0)
}

/// The dedup records of the face's webhooks.
async fn dedup_records(stack: &PaymentStack) -> Vec<String> {
    let prefix = format!("webhook#{}#", stack.webhook_provider);
    stack
        .snapshot()
        .await
        .0
        .into_keys()
        .filter(|pk| pk.starts_with(&prefix))
        .collect()
}

/// A charge request for a new payment id of the face's amount and currency.
fn charge_request<F: Face>(payment_method: &str) -> ChargeRequest {
    let payment_id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    ChargeRequest {
        idempotency_key: charge_key(&payment_id),
        payment_id,
        amount: F::AMOUNT,
        currency: F::CURRENCY,
        payment_method: payment_method.into(),
        return_url: None,
        capture: payonce::domain::CaptureMethod::Automatic,
        earlier_may_run: false,
    }
}

/// The payment `request` is the charge of, as stored with the PSP's id `stored_id` (`None`:
/// none stored), for a lookup as reconcile makes it.
fn stored_payment<F: Face>(request: &ChargeRequest, stored_id: Option<&str>) -> Payment {
    let now_ms = SystemClock.now_ms();
    Payment {
        payment_id: request.payment_id.clone(),
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        order_version: 1,
        owner: USER.to_owned(),
        amount: request.amount,
        currency: request.currency,
        payment_method: request.payment_method.clone(),
        provider: F::NAME.to_owned(),
        provider_payment_id: stored_id.map(str::to_owned),
        status: PaymentStatus::Processing,
        failure: None,
        capture: request.capture,
        return_url: request.return_url.clone(),
        progress: Progress::default(),
        operation: None,
        operation_count: 0,
        idempotency_pk: format!("payments.create#{USER}#k"),
        psp_maybe_reached: false,
        amount_refunded: 0,
        refund_pending: 0,
        refund_count: 0,
        duplicate_refund: false,
        refund_required: false,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        check_at_ms: now_ms,
    }
}

/// Looks `request`'s charge up as payonce does on the face: by our payment id, or by the PSP's
/// id stored on the payment (`stored_id`; `None`: none stored). Where only the stored id works,
/// the lookup by our id is asserted to find nothing without a call.
async fn look_up<F: Face>(
    stack: &PaymentStack,
    request: &ChargeRequest,
    stored_id: Option<&str>,
) -> PspLookup {
    let psp = stack.charge.psp();
    match F::LOOKUP {
        LookupBy::OurId => psp.lookup(&request.payment_id).await.expect("lookup"),
        LookupBy::StoredId => {
            let seen = stack.psp.requests_seen();
            let by_ours = psp.lookup(&request.payment_id).await.expect("lookup");
            assert_eq!(by_ours, PspLookup::NotFound, "no search by our reference");
            assert_eq!(stack.psp.requests_seen(), seen, "and no call for it");
            psp.lookup_payment(&stored_payment::<F>(request, stored_id))
                .await
                .expect("lookup by the stored id")
        }
    }
}

/// The completion of `request`'s approved PSP payment `provider_payment_id`, as the charge path
/// asks it (a capture of all of it under the payment's capture key).
fn completion(request: &ChargeRequest, provider_payment_id: &str) -> OperationRequest {
    OperationRequest {
        kind: OperationKind::Capture,
        payment_id: request.payment_id.clone(),
        provider_payment_id: provider_payment_id.to_owned(),
        amount: None,
        payment_amount: request.amount,
        capture: request.capture,
        currency: request.currency,
        idempotency_key: OperationKind::Capture.psp_key(&request.payment_id),
    }
}

/// Whether `settlement` is the PSP's word that it approved a good card: succeeded, on a PSP
/// that approves then is completed authorized, on one that captures at once captured.
fn is_approval<F: Face>(settlement: &Settlement) -> bool {
    match F::APPROVAL {
        Approval::Charges => matches!(settlement, Settlement::Succeeded { .. }),
        Approval::ApprovesThenCompleted => matches!(settlement, Settlement::Authorized { .. }),
        Approval::Captures => matches!(settlement, Settlement::Captured { .. }),
    }
}

/// On a PSP that approves then is completed (Square), after its webhook about the approval of
/// `payment_id` (paying `order`) was processed:
/// THEN the webhook only named the PSP payment: the payment is stored processing under the PSP's
/// id, the order held, nothing captured at the PSP;
/// AND a reconcile run completes it, by a lookup by the stored id, then the completion: one
/// capture at the PSP.
async fn complete_by_reconcile<F: Face>(
    stack: &PaymentStack,
    user: &str,
    order: &str,
    payment_id: &str,
) {
    let charge = the_charge(stack, payment_id);
    let stored = stack.payment(payment_id).await;
    assert_eq!(
        (
            stored.status.as_str(),
            stored.provider_payment_id.as_deref()
        ),
        ("processing", Some(F::psp_id(&charge).as_str())),
        "the webhook fills in the id and leaves the payment processing"
    );
    assert_eq!(charge.outcome, "authorized", "{charge:#?}");
    assert_eq!(order_state(stack, user, order).await, "processing");
    let seen = stack.psp.requests_seen();
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;
    assert_eq!(
        (report.succeeded, report.errors),
        (1, 0),
        "reconcile completes it: {report:?}"
    );
    assert_eq!(
        stack.psp.requests_seen() - seen,
        2,
        "a lookup by the stored id, then the completion"
    );
    let charge = the_charge(stack, payment_id);
    assert_eq!(
        (charge.outcome.as_str(), charge.captures.len()),
        ("succeeded", 1),
        "{charge:#?}"
    );
}

/// The facts of an event about `payment_id` (charge `provider_payment_id`) for the face's amount.
fn facts<F: Face>(payment_id: &str, provider_payment_id: &str, succeeded: bool) -> EventFacts {
    EventFacts {
        event_id: uuid::Uuid::new_v4().simple().to_string(),
        payment_id: payment_id.to_owned(),
        provider_payment_id: provider_payment_id.to_owned(),
        amount: F::AMOUNT,
        currency: F::CURRENCY,
        succeeded,
    }
}

/// GIVEN a payment of a new order left `processing` (the PSP holds a non-final charge): returns
/// the order, the payment id and the PSP's charge id.
async fn processing_payment<F: Face>(
    stack: &PaymentStack,
    user: &str,
    key: &str,
) -> (String, String, String) {
    let order = order::<F>(stack, user).await;
    let reply = stack
        .pay(user, key, pay_body(&order, "pm_fake_processing"))
        .await;
    assert_eq!(
        (reply.status, reply.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        reply.body
    );
    let payment_id = payment_id(&reply);
    let charge = the_charge(stack, &payment_id);
    (order, payment_id, F::psp_id(&charge))
}

/// THEN the payment of `order` paid under `key` is succeeded as the PSP's charge `charge_id`:
/// stored, replayed 201 to the client's retry, the order paid, one successful charge at the PSP.
async fn assert_paid_once<F: Face>(
    stack: &PaymentStack,
    user: &str,
    key: &str,
    order: &str,
    payment_method: &str,
    payment_id: &str,
) {
    let payment = stack.payment(payment_id).await;
    assert_eq!(payment.status.as_str(), "succeeded");
    let charge = the_charge(stack, payment_id);
    assert_eq!(
        payment.provider_payment_id.as_deref(),
        Some(F::psp_id(&charge).as_str())
    );
    assert_eq!(charge.outcome, "succeeded");
    assert_eq!(order_state(stack, user, order).await, "paid");
    let replay = stack.pay(user, key, pay_body(order, payment_method)).await;
    assert_eq!(
        (
            replay.status,
            replay.json["status"].as_str(),
            replay.header("idempotent-replayed")
        ),
        (201, Some("succeeded"), Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json["payment_id"], payment_id);
    assert_eq!(stack.psp.succeeded_charges_for(payment_id), 1);
}

pub async fn approve<F: Face>() {
    let stack = stack::<F>().await;
    let order = order::<F>(&stack, USER).await;

    // WHEN a good card pays
    let reply = stack.pay(USER, "k", pay_body(&order, "pm_card_visa")).await;

    // THEN 201 with the payment, as the PSP charged it once, in the face's requests
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(stack.psp.requests_seen(), F::CHARGE_REQUESTS);
    let payment_id = payment_id(&reply);
    let charge = the_charge(&stack, &payment_id);
    if F::APPROVAL == Approval::ApprovesThenCompleted {
        // Approved only at the create, then completed whole once its id was stored
        assert_eq!(
            (
                charge.capture_method.as_str(),
                charge.captures.len(),
                charge.amount_captured
            ),
            ("manual", 1, Some(F::AMOUNT)),
            "{charge:#?}"
        );
        assert!(charge.cancels.is_empty(), "{charge:#?}");
    }
    assert_eq!(
        (
            reply.json["status"].as_str(),
            reply.json["provider"].as_str(),
            reply.json["provider_payment_id"].as_str(),
            reply.json["amount"].as_i64(),
            reply.json["currency"].as_str(),
        ),
        (
            Some("succeeded"),
            Some(F::NAME),
            Some(F::psp_id(&charge).as_str()),
            Some(F::AMOUNT),
            Some(F::CURRENCY.as_str())
        )
    );
    assert_eq!(
        (
            charge.amount,
            charge.currency.as_str(),
            charge.provider.as_str()
        ),
        (F::AMOUNT, F::CURRENCY.as_str(), F::NAME)
    );
    assert_eq!(stack.psp.charges().len(), 1);
    assert_paid_once::<F>(&stack, USER, "k", &order, "pm_card_visa", &payment_id).await;
}

pub async fn decline<F: Face>() {
    let stack = stack::<F>().await;
    let order = order::<F>(&stack, USER).await;

    // WHEN the issuer declines the card
    let reply = stack
        .pay(USER, "k", pay_body(&order, "pm_card_visa_chargeDeclined"))
        .await;

    // THEN 402 card-declined with the PSP's decline code, stored and replayed
    assert_eq!(
        (
            reply.status,
            reply.problem_type(),
            reply.json["decline_code"].as_str()
        ),
        (402, "/problems/card-declined", Some(F::DECLINE_CODE)),
        "{}",
        reply.body
    );
    let declined = payment_id(&reply);
    assert_eq!(stack.payment(&declined).await.status.as_str(), "failed");
    assert_eq!(the_charge(&stack, &declined).outcome, "failed");
    let replay = stack
        .pay(USER, "k", pay_body(&order, "pm_card_visa_chargeDeclined"))
        .await;
    assert_eq!(
        (
            replay.status,
            replay.problem_type(),
            replay.header("idempotent-replayed")
        ),
        (402, "/problems/card-declined", Some("true"))
    );
    // AND the order is payable again, with another card under another key
    assert_eq!(order_state(&stack, USER, &order).await, "unpaid");
    let again = stack
        .pay(USER, "k2", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(order_state(&stack, USER, &order).await, "paid");
    assert_eq!(stack.psp.succeeded_charges_for(&declined), 0);
    assert_eq!(stack.psp.charges().len(), 2);
}

pub async fn rejected_method<F: Face>() {
    let stack = stack::<F>().await;
    let order = order::<F>(&stack, USER).await;

    // WHEN the payment method is one the PSP does not know
    let reply = stack
        .pay(USER, "k", pay_body(&order, "pm_card_nonexistent"))
        .await;

    // THEN the stack's answer for a refused method, nothing charged, the order payable again
    assert_eq!(
        (reply.status, reply.problem_type()),
        F::REJECTED_METHOD_ANSWER,
        "{}",
        reply.body
    );
    assert!(stack.psp.requests_seen() > 0, "the PSP itself refused it");
    assert!(stack.psp.charges().is_empty(), "{:#?}", stack.psp.charges());
    assert_eq!(
        stack.payment(&payment_id(&reply)).await.status.as_str(),
        "failed"
    );
    assert_eq!(order_state(&stack, USER, &order).await, "unpaid");
    let replay = stack
        .pay(USER, "k", pay_body(&order, "pm_card_nonexistent"))
        .await;
    assert_eq!(
        (
            replay.status,
            replay.problem_type(),
            replay.header("idempotent-replayed")
        ),
        (
            F::REJECTED_METHOD_ANSWER.0,
            F::REJECTED_METHOD_ANSWER.1,
            Some("true")
        )
    );
}

pub async fn below_minimum<F: Face>() {
    let stack = stack::<F>().await;
    // GIVEN an order below the PSP's minimum, stored past the orders API's checks
    let order = stack.store_order(USER, F::CURRENCY, F::BELOW_MINIMUM).await;

    // WHEN it is paid
    let reply = stack.pay(USER, "k", pay_body(&order, "pm_card_visa")).await;

    // THEN the PSP refused it, and the stack's answer says so; nothing was charged
    assert_eq!(
        (reply.status, reply.problem_type()),
        F::BELOW_MINIMUM_ANSWER,
        "{}",
        reply.body
    );
    assert!(stack.psp.requests_seen() > 0, "the PSP itself refused it");
    assert!(stack.psp.charges().is_empty(), "{:#?}", stack.psp.charges());
    assert_eq!(
        stack.payment(&payment_id(&reply)).await.status.as_str(),
        "failed"
    );
    assert_eq!(order_state(&stack, USER, &order).await, "unpaid");
}

pub async fn order_below_minimum<F: Face>() {
    let stack = stack::<F>().await;
    let before = stack.snapshot().await;

    // WHEN a client creates an order the PSP would refuse to charge
    let body = json!({"currency": F::CURRENCY.as_str(),
                      "items": [{"sku": "A1", "quantity": 1, "unit_amount": F::BELOW_MINIMUM}]});
    let reply = stack
        .orders_request(api_event(
            "POST",
            "/orders",
            Some(USER),
            &[],
            &body.to_string(),
        ))
        .await;

    // THEN the orders API refuses it up front, writing nothing
    assert_eq!(
        (reply.status, reply.problem_type()),
        (400, F::BELOW_MINIMUM_ORDER_PROBLEM),
        "{}",
        reply.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), 0);
}

pub async fn lost_response<F: Face>() {
    let stack = stack::<F>().await;
    let pipeline = Pipeline::new(&stack).await;
    // The fake's webhooks go through the real receiver into SQS.
    let _endpoint = WebhookEndpoint::start(&stack, Some(pipeline.receiver.clone())).await;
    let order = order::<F>(&stack, USER).await;

    // WHEN the PSP charges and the answer is lost on the way back
    let first = stack
        .pay(USER, "k", pay_body(&order, "pm_fake_lost_response"))
        .await;

    // THEN the client is told what the stack knows (202 processing, or 201 where the adapter's
    // next call learnt the outcome)
    assert_eq!(first.status, F::LOST_RESPONSE_STATUS, "{}", first.body);
    let payment_id = payment_id(&first);
    if first.status == 202 {
        assert_eq!(first.json["status"], "processing");
        assert!(first.header("retry-after").is_some());
    }
    if F::LOOKUP == LookupBy::StoredId {
        // (A PSP that cannot be searched by our reference: the create, then its re-send under
        // the key, which the PSP answers with the one payment; on Square then the completion)
        assert_eq!(stack.psp.requests_seen(), F::CHARGE_REQUESTS + 1);
    }
    // AND the PSP's own webhooks, through receiver, SQS and processor, settle it
    pipeline.drain(&stack, F::CHARGE_WEBHOOKS).await;
    // (Where the charge already knew the outcome, the webhook changes nothing and leaves no
    // dedup record.)
    assert_eq!(
        dedup_records(&stack).await.is_empty(),
        first.status != 202,
        "the webhook was processed"
    );
    assert_eq!(pipeline.depth().await, 0);
    // AND the client's retry replays the success: one charge
    assert_paid_once::<F>(
        &stack,
        USER,
        "k",
        &order,
        "pm_fake_lost_response",
        &payment_id,
    )
    .await;
    assert_eq!(stack.psp.charges().len(), 1);
}

/// WHEN POST /payments goes through `charge` (a PSP that is never reached); THEN 503, nothing
/// charged, the order released; AND a retry with the same key through the stack's own PSP
/// takes the attempt over and pays once, under the same payment id.
async fn assert_not_sent_then_retried<F: Face>(
    stack: &PaymentStack,
    charge: &payonce::service::ChargeService<
        payonce::adapters::dynamodb::DynamoPaymentStore,
        payonce::adapters::psp::ConfiguredPsp,
    >,
    requests_expected: u64,
) {
    let order = order::<F>(stack, USER).await;
    let reply = stack
        .pay_through(charge, USER, "k", pay_body(&order, "pm_card_visa"))
        .await;
    assert_eq!(
        (reply.status, reply.problem_type()),
        (503, "/problems/psp-unavailable"),
        "{}",
        reply.body
    );
    assert!(reply.header("retry-after").is_some());
    assert_eq!(stack.psp.requests_seen(), requests_expected);
    assert!(stack.psp.charges().is_empty());
    assert_eq!(order_state(stack, USER, &order).await, "unpaid");
    let attempt = stack.charge_record(USER, "k").await.attempt_id;

    let retry = stack.pay(USER, "k", pay_body(&order, "pm_card_visa")).await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(
        payment_id(&retry),
        attempt,
        "the same attempt, the same PSP key"
    );
    assert_eq!(stack.psp.succeeded_charges_for(&attempt), 1);
    assert_eq!(stack.psp.charges().len(), 1);
    assert_eq!(order_state(stack, USER, &order).await, "paid");
}

pub async fn not_sent_unreachable<F: Face>() {
    let stack = stack::<F>().await;
    // An invocation cut off from the PSP: the face's adapter at a closed port.
    assert_not_sent_then_retried::<F>(&stack, &stack.cut_off_charge(), 0).await;
}

pub async fn not_sent_credentials_refused<F: Face>() {
    let stack = stack::<F>().await;
    // The PSP refuses our credentials (Stripe and Omise 401; 2C2P 9042, our JWT's signature).
    let wrong = adapter_at(
        stack.psp.provider(),
        &stack.psp.base_url(),
        "not-the-key-the-psp-knows",
    );
    assert_not_sent_then_retried::<F>(&stack, &stack.charge_with(wrong), 1).await;
}

pub async fn slow<F: Face>() {
    // GIVEN a PSP that charges at once but answers after the charge path's PSP timeout
    let fake = FakePspConfig {
        slow_delay: Duration::from_secs(5),
        ..F::fake()
    };
    let charge = ChargeConfig {
        psp_timeout: Duration::from_millis(1500),
        ..ChargeConfig::default()
    };
    let stack = stack_with::<F>(fake, charge).await;
    let pipeline = Pipeline::new(&stack).await;
    let _endpoint = WebhookEndpoint::start(&stack, Some(pipeline.receiver.clone())).await;
    let order = order::<F>(&stack, USER).await;

    // WHEN the client pays
    let first = stack.pay(USER, "k", pay_body(&order, "pm_fake_slow")).await;

    // THEN 202 pending: the outcome is unknown to the stack. (An adapter that asks the PSP after
    // a lost answer, 2C2P's inquiry, asks with the time left after the timed-out call: when that
    // sliver is enough on loopback it learns the success, and answers 201.)
    let payment_id = payment_id(&first);
    if F::LOST_RESPONSE_STATUS == 201 && first.status == 201 {
        assert_eq!(first.json["status"], "succeeded", "{}", first.body);
    } else {
        assert_eq!(
            (first.status, first.json["status"].as_str()),
            (202, Some("processing")),
            "{}",
            first.body
        );
        assert_eq!(
            stack.payment(&payment_id).await.status.as_str(),
            "processing"
        );
        assert_eq!(order_state(&stack, USER, &order).await, "processing");
    }
    // AND the PSP's webhook settles it later (on Square: names the approved payment, which a
    // reconcile run completes); the retry replays the success, one charge
    for _ in 0..200 {
        pipeline.poll(&stack).await;
        let stored = stack.payment(&payment_id).await;
        let moved = match F::APPROVAL {
            Approval::Charges | Approval::Captures => stored.status.as_str() != "processing",
            Approval::ApprovesThenCompleted => {
                stored.status.as_str() != "processing" || stored.provider_payment_id.is_some()
            }
        };
        if moved {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if F::APPROVAL == Approval::ApprovesThenCompleted && first.status == 202 {
        complete_by_reconcile::<F>(&stack, USER, &order, &payment_id).await;
    }
    assert_paid_once::<F>(&stack, USER, "k", &order, "pm_fake_slow", &payment_id).await;
    assert_eq!(stack.psp.charges().len(), 1);
}

pub async fn lookup_states<F: Face>() {
    let stack = stack_with::<F>(
        waiting::<F>(Duration::from_secs(3600)),
        ChargeConfig::default(),
    )
    .await;
    let psp = stack.charge.psp();
    let timeout = Duration::from_secs(10);

    // Approved: succeeded; on a PSP that approves then is completed, authorized for the whole
    // amount until completed, then captured
    let approved = charge_request::<F>("pm_card_visa");
    let created = psp.create_charge(&approved, timeout).await;
    let id = F::psp_id(&the_charge(&stack, &approved.payment_id));
    match F::APPROVAL {
        Approval::Charges => {
            let lookup = look_up::<F>(&stack, &approved, Some(&id)).await;
            assert!(
                matches!(&lookup, PspLookup::Succeeded { provider_payment_id, .. } if *provider_payment_id == id),
                "{lookup:?}"
            );
        }
        Approval::Captures => {
            // Charged in the create; the lookup reads the capture, of the whole amount
            assert_eq!(
                created,
                PspOutcome::Approved {
                    provider_payment_id: id.clone()
                }
            );
            let lookup = look_up::<F>(&stack, &approved, Some(&id)).await;
            assert!(
                matches!(&lookup, PspLookup::Captured { provider_payment_id, amount_captured, amount }
                    if *provider_payment_id == id && *amount_captured == F::AMOUNT
                        && amount.as_ref().map(|a| (a.minor, a.currency.as_str()))
                            == Some((F::AMOUNT, F::CURRENCY.as_str()))),
                "{lookup:?}"
            );
            assert_eq!(stack.psp.succeeded_charges_for(&approved.payment_id), 1);
        }
        Approval::ApprovesThenCompleted => {
            assert!(
                matches!(&created, PspOutcome::Authorized { provider_payment_id, amount_capturable, .. }
                    if *provider_payment_id == id && *amount_capturable == F::AMOUNT),
                "{created:?}"
            );
            let lookup = look_up::<F>(&stack, &approved, Some(&id)).await;
            assert!(
                matches!(&lookup, PspLookup::Authorized { provider_payment_id, amount_capturable, .. }
                    if *provider_payment_id == id && *amount_capturable == F::AMOUNT),
                "{lookup:?}"
            );
            assert_eq!(stack.psp.succeeded_charges_for(&approved.payment_id), 0);
            let completed = psp.operate(&completion(&approved, &id), timeout).await;
            assert!(
                matches!(&completed, OperationOutcome::Answered(Settlement::Captured { provider_payment_id, .. })
                    if *provider_payment_id == id),
                "{completed:?}"
            );
            let lookup = look_up::<F>(&stack, &approved, Some(&id)).await;
            if F::LOOKUP_TELLS_COMPLETED {
                assert!(
                    matches!(&lookup, PspLookup::Captured { provider_payment_id, amount_captured, .. }
                        if *provider_payment_id == id && *amount_captured == F::AMOUNT),
                    "{lookup:?}"
                );
            } else {
                // Still read as approved; the completion sent again is answered with the
                // capture it made, and makes none.
                assert!(
                    matches!(&lookup, PspLookup::Authorized { provider_payment_id, .. } if *provider_payment_id == id),
                    "{lookup:?}"
                );
                let again = psp.operate(&completion(&approved, &id), timeout).await;
                assert_eq!(again, completed);
            }
            assert_eq!(stack.psp.succeeded_charges_for(&approved.payment_id), 1);
        }
    }

    // Declined, with the decline code the charge path reports
    let declined = charge_request::<F>("pm_card_visa_chargeDeclined");
    psp.create_charge(&declined, timeout).await;
    let id = F::psp_id(&the_charge(&stack, &declined.payment_id));
    let lookup = look_up::<F>(&stack, &declined, Some(&id)).await;
    assert!(
        matches!(&lookup, PspLookup::Declined { provider_payment_id, decline_code, .. }
            if *provider_payment_id == id && decline_code == F::DECLINE_CODE),
        "{lookup:?}"
    );

    // Non-final states are pending, never "not found"
    for token in ["pm_fake_processing", "pm_fake_requires_action"] {
        if token == "pm_fake_requires_action" && F::PAYER_ACTION == PayerAction::NeedsReturnUrl {
            payer_must_act::<F>(&stack, token).await;
            continue;
        }
        let waiting = charge_request::<F>(token);
        let created = psp.create_charge(&waiting, timeout).await;
        let charge = the_charge(&stack, &waiting.payment_id);
        // Undecided: unknown; a PSP that cannot be asked by our reference names the payment,
        // for its id to be stored.
        match F::LOOKUP {
            LookupBy::OurId => assert!(
                matches!(created, PspOutcome::Unknown { .. }),
                "{token}: {created:?}"
            ),
            LookupBy::StoredId => assert_eq!(
                created,
                PspOutcome::Pending {
                    provider_payment_id: F::psp_id(&charge)
                },
                "{token}"
            ),
        }
        assert_eq!(charge.outcome, "pending", "{token}");
        let lookup = look_up::<F>(&stack, &waiting, Some(&F::psp_id(&charge))).await;
        assert!(
            matches!(&lookup, PspLookup::Pending { provider_payment_id, .. } if *provider_payment_id == F::psp_id(&charge)),
            "{token}: {lookup:?}"
        );
    }

    // Not found: an attempt the PSP never saw (where only a stored id is looked up, an attempt
    // with none is not found without a call)
    let never = charge_request::<F>("pm_card_visa");
    let seen = stack.psp.requests_seen();
    let lookup = look_up::<F>(&stack, &never, None).await;
    assert!(matches!(lookup, PspLookup::NotFound), "{lookup:?}");
    if F::LOOKUP == LookupBy::StoredId {
        assert_eq!(stack.psp.requests_seen(), seen);
    }
    // (One more where the payer's action was asked for both without and with a return URL.)
    let payer_charges = usize::from(F::PAYER_ACTION == PayerAction::NeedsReturnUrl);
    assert_eq!(stack.psp.charges().len(), 4 + payer_charges);
}

/// On a PSP that hands a payer's action only to a create with somewhere to send them back to
/// (`token`, whose payer must act): without a return URL the create is answered as an
/// authentication nobody can be sent to, naming the charge the PSP made; with one, as the
/// action, at the PSP's page. Either way the charge waits for its payer (nothing is charged),
/// and a lookup by the stored id says where.
async fn payer_must_act<F: Face>(stack: &PaymentStack, token: &str) {
    let psp = stack.charge.psp();
    let timeout = Duration::from_secs(10);
    let nowhere = charge_request::<F>(token);
    let answered = psp.create_charge(&nowhere, timeout).await;
    let charge = the_charge(stack, &nowhere.payment_id);
    let id = F::psp_id(&charge);
    assert_eq!(
        answered,
        PspOutcome::AuthenticationRequired {
            provider_payment_id: Some(id.clone())
        },
        "{token}"
    );
    assert_eq!(charge.outcome, "pending", "{token}");
    let lookup = look_up::<F>(stack, &nowhere, Some(&id)).await;
    assert!(
        matches!(&lookup, PspLookup::ActionRequired { provider_payment_id, .. } if *provider_payment_id == id),
        "{token}: {lookup:?}"
    );
    let waiting = ChargeRequest {
        return_url: Some(format!("{CHECKOUT_ORIGIN}/return")),
        ..charge_request::<F>(token)
    };
    let created = psp.create_charge(&waiting, timeout).await;
    let charge = the_charge(stack, &waiting.payment_id);
    let id = F::psp_id(&charge);
    let PspOutcome::ActionRequired {
        provider_payment_id,
        redirect_url,
    } = created
    else {
        panic!("{token}: {created:?}")
    };
    assert_eq!(provider_payment_id, id, "{token}");
    assert_eq!(charge.outcome, "pending", "{token}");
    let lookup = look_up::<F>(stack, &waiting, Some(&id)).await;
    assert_eq!(
        lookup,
        PspLookup::ActionRequired {
            provider_payment_id: id,
            redirect_url
        },
        "{token}"
    );
    assert_eq!(stack.psp.succeeded_charges_for(&nowhere.payment_id), 0);
    assert_eq!(stack.psp.succeeded_charges_for(&waiting.payment_id), 0);
}

pub async fn fence<F: Face>() {
    let stack = stack::<F>().await;
    let psp = stack.charge.psp();

    // A key never sent
    let unused = charge_request::<F>("pm_card_visa");
    let seen = stack.psp.requests_seen();
    let fence = psp.fence(&unused).await.expect("fence");
    match F::FENCE {
        FenceProof::Unprovable => {
            assert_eq!(fence, Fence::Unprovable);
            assert_eq!(stack.psp.requests_seen(), seen, "nothing was asked");
        }
        FenceProof::CanceledIntent | FenceProof::TakenInvoice => {
            let Fence::NeverRan {
                provider_payment_id,
            } = fence
            else {
                panic!("an unused key is proven unused: {fence:?}")
            };
            psp.cancel(&provider_payment_id).await.expect("cancel");
            if F::FENCE == FenceProof::CanceledIntent {
                // The fence's own intent, under the attempt's key, canceled.
                let blocker = the_charge(&stack, &unused.payment_id);
                assert_eq!(
                    (
                        blocker.id.as_str(),
                        blocker.outcome.as_str(),
                        blocker.idempotency_key.as_deref()
                    ),
                    (
                        provider_payment_id.as_str(),
                        "canceled",
                        Some(unused.idempotency_key.as_str())
                    )
                );
            } else {
                // The invoice itself, now taken; no charge exists.
                assert_eq!(
                    Some(provider_payment_id.clone()),
                    invoice_no_for(&unused.payment_id)
                );
                assert!(charges_for(&stack, &unused.payment_id).is_empty());
            }
            // A late create of the original attempt can never charge under the key.
            let late = psp.create_charge(&unused, Duration::from_secs(10)).await;
            assert!(!matches!(late, PspOutcome::Approved { .. }), "{late:?}");
            assert_eq!(stack.psp.succeeded_charges_for(&unused.payment_id), 0);
            let lookup = psp.lookup(&unused.payment_id).await.expect("lookup");
            assert!(
                matches!(lookup, PspLookup::NotFound | PspLookup::Canceled { .. }),
                "{lookup:?}"
            );
            // Fencing again: Stripe replays the fence's own answer (the same blocking intent),
            // 2C2P refuses a second token for the invoice (used), and its inquiry finds no
            // transaction: used without a charge.
            let again = psp.fence(&unused).await.expect("fence");
            let expected = match F::FENCE {
                FenceProof::CanceledIntent => Fence::NeverRan {
                    provider_payment_id: provider_payment_id.clone(),
                },
                _ => Fence::UsedWithoutCharge,
            };
            assert_eq!(again, expected);
            assert_eq!(stack.psp.succeeded_charges_for(&unused.payment_id), 0);
        }
        FenceProof::Resend => {
            // No proof and no call: the PSP keeps the key long enough for reconcile to send the
            // create again under it
            assert_eq!(fence, Fence::Resend);
            assert_eq!(stack.psp.requests_seen(), seen, "nothing was asked");
            assert_eq!(psp.charge_keys_kept(), Duration::from_secs(6 * 3600));
            // The re-send reconcile makes charges once under the key
            let resent = psp.create_charge(&unused, Duration::from_secs(10)).await;
            let PspOutcome::Approved {
                provider_payment_id,
            } = resent.clone()
            else {
                panic!("the re-send charges: {resent:?}")
            };
            let charge = the_charge(&stack, &unused.payment_id);
            assert_eq!(
                (charge.id.as_str(), charge.idempotency_key.as_deref()),
                (
                    provider_payment_id.as_str(),
                    Some(unused.idempotency_key.as_str())
                )
            );
            // AND a late create of the original attempt under the same key is answered with
            // that one charge: nothing more is charged
            let late = psp.create_charge(&unused, Duration::from_secs(10)).await;
            assert_eq!(late, resent);
            assert_eq!(charges_for(&stack, &unused.payment_id).len(), 1);
            assert_eq!(stack.psp.succeeded_charges_for(&unused.payment_id), 1);
        }
        FenceProof::VoidedByKey => {
            // One cancel by the key, which found nothing and made nothing.
            assert_eq!(fence, Fence::Voided);
            assert_eq!(stack.psp.requests_seen(), seen + 1, "one cancel by key");
            assert!(charges_for(&stack, &unused.payment_id).is_empty());
            // A late create of the original attempt is approved at most: no money moves
            // under the key, and payonce never completes a payment of an attempt it gave up
            // (its id is never stored, and nothing else is looked up).
            let late = psp.create_charge(&unused, Duration::from_secs(10)).await;
            assert!(
                matches!(late, PspOutcome::Authorized { .. }),
                "approved only: {late:?}"
            );
            assert_eq!(stack.psp.succeeded_charges_for(&unused.payment_id), 0);
            let lookup = look_up::<F>(&stack, &unused, None).await;
            assert_eq!(lookup, PspLookup::NotFound);
            // Fencing again voids what the late create approved, under the attempt's key.
            let again = psp.fence(&unused).await.expect("fence");
            assert_eq!(again, Fence::Voided);
            let voided = the_charge(&stack, &unused.payment_id);
            assert_eq!(
                (
                    voided.outcome.as_str(),
                    voided.cancels.len(),
                    voided
                        .cancels
                        .first()
                        .and_then(|c| c.idempotency_key.clone()),
                    voided.captures.len()
                ),
                (
                    "canceled",
                    1,
                    Some(payonce::adapters::psp::square::charge_key(
                        &unused.payment_id
                    )),
                    0
                ),
                "{voided:#?}"
            );
            assert_eq!(stack.psp.succeeded_charges_for(&unused.payment_id), 0);
        }
    }

    if F::APPROVAL == Approval::ApprovesThenCompleted && F::FENCE == FenceProof::VoidedByKey {
        // A key whose payment was approved and never completed (the invocation died before
        // it stored the id): the fence voids it, and nothing moved.
        let approved = charge_request::<F>("pm_card_visa");
        let created = psp.create_charge(&approved, Duration::from_secs(10)).await;
        assert!(
            matches!(created, PspOutcome::Authorized { .. }),
            "{created:?}"
        );
        let fence = psp.fence(&approved).await.expect("fence");
        assert_eq!(fence, Fence::Voided);
        let voided = the_charge(&stack, &approved.payment_id);
        assert_eq!(
            (voided.outcome.as_str(), voided.cancels.len()),
            ("canceled", 1),
            "{voided:#?}"
        );
        assert_eq!(stack.psp.succeeded_charges_for(&approved.payment_id), 0);
    }

    // A key that charged (on a PSP that approves then is completed: approved, then completed,
    // as the charge path does once the id is stored)
    let used = charge_request::<F>("pm_card_visa");
    let created = psp.create_charge(&used, Duration::from_secs(10)).await;
    match (F::APPROVAL, &created) {
        (Approval::Charges | Approval::Captures, PspOutcome::Approved { .. }) => {}
        (
            Approval::ApprovesThenCompleted,
            PspOutcome::Authorized {
                provider_payment_id,
                ..
            },
        ) => {
            let completed = psp
                .operate(
                    &completion(&used, provider_payment_id),
                    Duration::from_secs(10),
                )
                .await;
            assert!(
                matches!(
                    completed,
                    OperationOutcome::Answered(Settlement::Captured { .. })
                ),
                "{completed:?}"
            );
        }
        _ => panic!("{created:?}"),
    }
    let fence = psp.fence(&used).await;
    match F::FENCE {
        FenceProof::Unprovable => assert_eq!(fence.expect("fence"), Fence::Unprovable),
        FenceProof::CanceledIntent | FenceProof::TakenInvoice => {
            assert_eq!(fence.expect("fence"), Fence::KeyUsed);
        }
        // Square refuses to cancel a completed payment: the refusal proves nothing, and the
        // payment stays as it was (reconcile looks it up by its stored id).
        FenceProof::VoidedByKey => {
            assert!(fence.is_err(), "{fence:?}");
            assert!(the_charge(&stack, &used.payment_id).cancels.is_empty());
        }
        // The re-send is answered with what the key made: the same charge, not a second.
        FenceProof::Resend => {
            assert_eq!(fence.expect("fence"), Fence::Resend);
            let again = psp.create_charge(&used, Duration::from_secs(10)).await;
            assert_eq!(again, created);
        }
    }
    assert_eq!(stack.psp.succeeded_charges_for(&used.payment_id), 1);
    assert_eq!(charges_for(&stack, &used.payment_id).len(), 1);
}

pub async fn refund<F: Face>() {
    let stack = stack::<F>().await;
    let order = order::<F>(&stack, USER).await;
    let reply = stack.pay(USER, "k", pay_body(&order, "pm_card_visa")).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let payment_id = payment_id(&reply);
    let seen = stack.psp.requests_seen();
    let before = stack.snapshot().await;

    // WHEN staff refund part of it
    let refunded = F::AMOUNT / 3;
    let reply = stack
        .refund(&payment_id, "r1", json!({"amount": refunded}))
        .await;

    if F::REFUNDS {
        if F::REFUND_STARTS_PENDING {
            // THEN 202 pending, the amount held on the payment while the PSP holds it pending
            assert_eq!(
                (reply.status, reply.json["status"].as_str()),
                (202, Some("pending")),
                "{}",
                reply.body
            );
            assert_eq!(stack.psp.refunds().len(), 1);
            assert_eq!(
                stack.refund_attributes(&payment_id).await,
                (None, Some(refunded), Some(1))
            );
            // AND a reconcile run looks it up at the PSP and settles it succeeded
            stack.clock.advance(Duration::from_secs(180));
            let report = stack.reconcile().await;
            assert_eq!(
                (report.refunds_succeeded, report.errors),
                (1, 0),
                "{report:?}"
            );
        } else {
            // THEN 201 and one refund at the PSP, recorded on the payment
            assert_eq!(
                (reply.status, reply.json["status"].as_str()),
                (201, Some("succeeded")),
                "{}",
                reply.body
            );
        }
        let refunds = stack.psp.refunds();
        assert_eq!(refunds.len(), 1, "{refunds:#?}");
        assert_eq!(
            (refunds[0].amount, refunds[0].payment_id.as_deref()),
            (refunded, Some(payment_id.as_str()))
        );
        assert_eq!(
            stack.refund_attributes(&payment_id).await,
            (Some(refunded), Some(0), Some(1))
        );
        let replay = stack
            .refund(&payment_id, "r1", json!({"amount": refunded}))
            .await;
        assert_eq!(replay.status, 201, "{}", replay.body);
        assert_eq!(stack.psp.refunds().len(), 1);
    } else {
        // THEN 409 refund-not-supported: no PSP call, nothing written
        assert_eq!(
            (reply.status, reply.problem_type()),
            (409, "/problems/refund-not-supported"),
            "{}",
            reply.body
        );
        assert_eq!(stack.psp.requests_seen(), seen);
        assert!(stack.psp.refunds().is_empty());
        assert_eq!(stack.snapshot().await, before);
    }
}

pub async fn webhook_five_times_in_sequence<F: Face>() {
    let stack = stack_with::<F>(
        waiting::<F>(Duration::from_secs(2)),
        ChargeConfig::default(),
    )
    .await;
    let endpoint = WebhookEndpoint::start(&stack, None).await;
    let pipeline = Pipeline::new(&stack).await;
    // GIVEN a payment left processing, and the PSP's own webhook of its approval (a success;
    // on Square the approval payonce completes)
    let (order, payment_id, _) = processing_payment::<F>(&stack, USER, "k").await;
    let delivery = endpoint
        .wait_for_approval(&stack, &payment_id, is_approval::<F>)
        .await;

    // WHEN that delivery reaches the receiver five times
    for _ in 0..5 {
        let reply = pipeline.post(F::WEBHOOK_PROVIDER, &delivery).await;
        assert_eq!(
            reply.status, 200,
            "every delivery is acknowledged: {}",
            reply.body
        );
    }
    stack.counter.reset();
    let processed = pipeline.drain(&stack, 5).await;

    // THEN five messages were processed, one transition written (none where the undecided
    // create already stored what the approval says), the queue drained
    let transitions = u64::from(!approval_already_stored::<F>());
    assert_eq!(processed.len(), 5);
    assert_eq!(
        stack
            .counter
            .by_operation()
            .get("TransactWriteItems")
            .copied()
            .unwrap_or(0),
        transitions,
        "transitions: {:?}",
        stack.counter.by_operation()
    );
    assert_eq!(pipeline.depth().await, 0);
    assert_eq!(dedup_records(&stack).await.len() as u64, transitions);
    if F::APPROVAL == Approval::ApprovesThenCompleted {
        complete_by_reconcile::<F>(&stack, USER, &order, &payment_id).await;
    }
    assert_paid_once::<F>(&stack, USER, "k", &order, "pm_fake_processing", &payment_id).await;
}

pub async fn webhook_five_times_at_once<F: Face>() {
    let stack = Arc::new(
        stack_with::<F>(
            waiting::<F>(Duration::from_secs(2)),
            ChargeConfig::default(),
        )
        .await,
    );
    let endpoint = WebhookEndpoint::start(&stack, None).await;
    let pipeline = Pipeline::new(&stack).await;
    let (order, payment_id, _) = processing_payment::<F>(&stack, USER, "k").await;
    let delivery = Arc::new(
        endpoint
            .wait_for_approval(&stack, &payment_id, is_approval::<F>)
            .await,
    );

    // WHEN the delivery reaches the receiver five times at once
    let posts: Vec<_> = (0..5)
        .map(|_| {
            let (receiver, delivery) = (pipeline.receiver.clone(), delivery.clone());
            tokio::spawn(async move { post(&receiver, F::WEBHOOK_PROVIDER, &delivery).await })
        })
        .collect();
    for posted in posts {
        let reply = posted.await.expect("the delivery task");
        assert_eq!(
            reply.status, 200,
            "every delivery is acknowledged: {}",
            reply.body
        );
    }
    // AND five processor invocations apply the five messages at once
    let mut messages = Vec::new();
    for _ in 0..100 {
        messages.extend(
            payonce::ports::QueueReceive::receive(&pipeline.queue, 10, Duration::from_secs(30))
                .await
                .expect("receive"),
        );
        if messages.len() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(messages.len(), 5);
    let applied: Vec<_> = messages
        .iter()
        .map(|message| {
            let (stack, message) = (stack.clone(), message.clone());
            tokio::spawn(async move {
                let provider = message.attributes.get(PROVIDER_ATTRIBUTE).cloned();
                stack
                    .processor
                    .process(&QueuedEvent {
                        message_id: &message.message_id,
                        provider: provider.as_deref(),
                        body: &message.body,
                    })
                    .await
                    .expect("processing succeeds")
            })
        })
        .collect();
    let mut moved = 0;
    for task in applied {
        match task.await.expect("the processing task") {
            Processed::Applied(EventApplied::Moved(_)) => moved += 1,
            Processed::Applied(EventApplied::Duplicate | EventApplied::Unchanged(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    for message in &messages {
        payonce::ports::QueueReceive::delete(&pipeline.queue, &message.receipt_handle)
            .await
            .expect("delete");
    }

    // THEN one transition, one dedup record (none where the undecided create already stored
    // what the approval says), the queue drained
    let transitions = usize::from(!approval_already_stored::<F>());
    assert_eq!(moved, transitions);
    assert_eq!(pipeline.depth().await, 0);
    assert_eq!(dedup_records(&stack).await.len(), transitions);
    if F::APPROVAL == Approval::ApprovesThenCompleted {
        complete_by_reconcile::<F>(&stack, USER, &order, &payment_id).await;
    }
    assert_paid_once::<F>(&stack, USER, "k", &order, "pm_fake_processing", &payment_id).await;
}

/// Whether the payment [`processing_payment`] leaves already holds all the approval's webhook
/// says: on a PSP that approves then is completed and cannot be asked by our reference, the
/// undecided create's answer stored the PSP id, and the approval only names it again. (Where
/// the approval is the capture itself, it settles the payment.)
fn approval_already_stored<F: Face>() -> bool {
    F::APPROVAL == Approval::ApprovesThenCompleted && F::LOOKUP == LookupBy::StoredId
}

/// Posts each delivery and processes it before the next, so the processor sees them in order.
async fn deliver_in_order(stack: &PaymentStack, pipeline: &Pipeline, deliveries: &[Delivery]) {
    for delivery in deliveries {
        let reply = pipeline.post(stack.webhook_provider, delivery).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        pipeline.drain(stack, 1).await;
    }
}

pub async fn webhooks_reordered<F: Face>() {
    let stack = stack_with::<F>(
        waiting::<F>(Duration::from_secs(3600)),
        ChargeConfig::default(),
    )
    .await;
    let pipeline = Pipeline::new(&stack).await;
    let now_s = SystemClock.now_s();
    // GIVEN two payments left processing, each with a decline and a success reported
    let (order_a, payment_a, charge_a) = processing_payment::<F>(&stack, "ann", "ka").await;
    let (order_b, payment_b, charge_b) = processing_payment::<F>(&stack, "bob", "kb").await;
    let events = |payment: &str, charge: &str| {
        [false, true]
            .map(|succeeded| F::event(&facts::<F>(payment, charge, succeeded), now_s, &stack.psp))
    };

    // WHEN A's arrive as they happened: the decline, then the success
    let [declined, succeeded] = events(&payment_a, &charge_a);
    deliver_in_order(&stack, &pipeline, &[declined]).await;
    assert_eq!(stack.payment(&payment_a).await.status.as_str(), "failed");
    assert_eq!(order_state(&stack, "ann", &order_a).await, "unpaid");
    let replay = stack
        .pay("ann", "ka", pay_body(&order_a, "pm_fake_processing"))
        .await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/card-declined")
    );
    deliver_in_order(&stack, &pipeline, &[succeeded]).await;
    // AND B's arrive reversed: the success, then the decline
    let [declined, succeeded] = events(&payment_b, &charge_b);
    deliver_in_order(&stack, &pipeline, &[succeeded, declined]).await;

    if !F::SUCCESS_EVENT_MOVES_MONEY {
        // THEN both end declined: an approval moves no money and revives nothing; the
        // authorizations lapse unsettled
        reordered_approvals_settle_nothing(&stack, &pipeline, [&payment_a, &payment_b]).await;
        return;
    }
    // THEN both end in the same state: the money moved, so succeeded and paid
    for (user, key, order, payment) in [
        ("ann", "ka", &order_a, &payment_a),
        ("bob", "kb", &order_b, &payment_b),
    ] {
        let stored = stack.payment(payment).await;
        assert_eq!(stored.status.as_str(), "succeeded", "{user}");
        assert_eq!(order_state(&stack, user, order).await, "paid", "{user}");
        let replay = stack
            .pay(user, key, pay_body(order, "pm_fake_processing"))
            .await;
        assert_eq!(replay.status, 201, "{user}: {}", replay.body);
    }
    assert_eq!(
        stack.payment(&payment_a).await.provider_payment_id,
        Some(charge_a)
    );
    assert_eq!(
        stack.payment(&payment_b).await.provider_payment_id,
        Some(charge_b)
    );
    // A dedup record for each of the three events that moved a payment; B's late decline
    // changed nothing and cost no write.
    assert_eq!(dedup_records(&stack).await.len(), 3);
    assert_eq!(pipeline.depth().await, 0);
}

/// Where the PSP's webhook of a good card is only an approval: `payments`, each told declined
/// and approved in either order (and reconciled as the processor asked), end failed with
/// nothing captured.
async fn reordered_approvals_settle_nothing(
    stack: &PaymentStack,
    pipeline: &Pipeline,
    payments: [&str; 2],
) {
    stack.reconcile_requested().await;
    for payment in payments {
        assert_eq!(stack.payment(payment).await.status.as_str(), "failed");
        assert_eq!(stack.psp.succeeded_charges_for(payment), 0);
    }
    assert_eq!(pipeline.depth().await, 0);
}

pub async fn late_failure<F: Face>() {
    let stack = stack::<F>().await;
    let pipeline = Pipeline::new(&stack).await;
    // GIVEN a payment the PSP approved
    let order = order::<F>(&stack, USER).await;
    let reply = stack.pay(USER, "k", pay_body(&order, "pm_card_visa")).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let payment_id = payment_id(&reply);
    let charge = F::psp_id(&the_charge(&stack, &payment_id));
    let before = stack.item(&format!("payment#{payment_id}")).await;

    // WHEN a failure event for it arrives afterwards
    let late = F::event(
        &facts::<F>(&payment_id, &charge, false),
        SystemClock.now_s(),
        &stack.psp,
    );
    let answer = pipeline.post(F::WEBHOOK_PROVIDER, &late).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    stack.counter.reset();
    let processed = pipeline.drain(&stack, 1).await;

    // THEN it changes nothing: one read of the payment and no write at all, the payment as it
    // was, the order paid, no dedup record (a redelivery would change nothing either)
    assert_eq!(processed.len(), 1);
    assert_eq!(
        stack.counter.by_operation(),
        [("GetItem".to_owned(), 1)].into_iter().collect(),
    );
    assert_eq!(stack.item(&format!("payment#{payment_id}")).await, before);
    assert!(dedup_records(&stack).await.is_empty());
    assert_paid_once::<F>(&stack, USER, "k", &order, "pm_card_visa", &payment_id).await;
}

pub async fn signature_attacks<F: Face>() {
    let stack = stack::<F>().await;
    let pipeline = Pipeline::new(&stack).await;
    let now_s = SystemClock.now_s();
    let facts = facts::<F>(
        &format!("pay_{}", uuid::Uuid::new_v4().simple()),
        "charge_1",
        true,
    );
    let valid = F::event(&facts, now_s, &stack.psp);

    // WHEN every forgery of the face's scheme, an unknown provider and an oversized body arrive
    for attack in F::attacks(&facts, now_s, &stack.psp) {
        let reply = pipeline.post(F::WEBHOOK_PROVIDER, &attack.delivery).await;
        assert_eq!(
            (reply.status, reply.problem_type()),
            (attack.status, attack.problem),
            "{}: {}",
            attack.name,
            reply.body
        );
    }
    let unknown = pipeline.post("adyen", &valid).await;
    assert_eq!(
        (unknown.status, unknown.problem_type()),
        (404, "/problems/not-found")
    );
    let huge = Delivery {
        headers: valid.headers.clone(),
        body: "x".repeat(1024 * 1024 + 1),
    };
    let too_large = pipeline.post(F::WEBHOOK_PROVIDER, &huge).await;
    assert_eq!(
        (too_large.status, too_large.problem_type()),
        (413, "/problems/body-too-large")
    );

    // THEN nothing was enqueued
    assert_eq!(pipeline.depth().await, 0, "nothing was enqueued");
    // AND the genuine delivery is (the refusals were the scheme's, not the queue's)
    let accepted = pipeline.post(F::WEBHOOK_PROVIDER, &valid).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    assert_eq!(pipeline.depth().await, 1);
}
