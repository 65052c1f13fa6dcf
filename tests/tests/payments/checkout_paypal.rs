//! Checkout flows on PayPal through the handlers, against DynamoDB Local and the fake PSP's
//! PayPal face over HTTP.
//!
//! A charge is a PayPal order created under `PayPal-Request-Id: payonce-charge-<payment_id>`.
//! A vaulted card is charged in the create itself (the fake's default, one step), or the order
//! is left `CREATED` and payonce stores its id, then captures it under
//! `payonce-capture-<payment_id>` (two steps). `paypal` sends the buyer to approve at PayPal;
//! reconcile captures the approved order. A manual capture authorizes at once; staff capture
//! (whole or in part) or void the authorization. PayPal has no lookup by our reference: a create
//! whose answer was lost is sent again under its request id, at once and by reconcile, and
//! PayPal answers with the order the first one made.
//!
//! Every test talks to the fake through the PayPal adapter over a transport that records each
//! call (its route and `PayPal-Request-Id`), so each flow says exactly what PayPal was sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lambda_http::Request;
use payonce::adapters::dynamodb::DynamoPaymentStore;
use payonce::adapters::memory::MemoryQueue;
use payonce::adapters::psp::transport::{
    CallFailure, HttpTransport, PspTransport, WireCall, WireReply,
};
use payonce::adapters::psp::{ConfiguredPsp, PayPalPsp};
use payonce::clock::Clock;
use payonce::domain::{
    CancellationReason, Currency, FailureKind, OperationKind, Payment, PaymentStatus, PspKind,
    RefundSettlement, Settlement,
};
use payonce::ports::{
    ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspError, PspLookup, PspOutcome,
    QueueReceive, RefundOutcome, RefundRequest,
};
use payonce::service::reconcile::{ReconcileConfig, ReconcileReport, Reconciler};
use payonce::service::settle::EventApplied;
use payonce::service::webhooks::Processed;
use payonce::service::{
    ChargeConfig, ChargeService, CrashPoint, OperationConfig, OperationService, RefundService,
};
use payonce_fake_psp::{
    sign_paypal_webhook, FakeCharge, FakePspConfig, DEFAULT_PAYPAL_CLIENT_ID,
    DEFAULT_PAYPAL_WEBHOOK_ID, PAYPAL_AUTH_ALGO,
};
use payonce_tests::stack::{
    api_event, refund_event, scoped_api_event, PaymentStack, Reply, CHECKOUT_ORIGIN, FAKE_API_KEY,
    STAFF, STAFF_SCOPES,
};
use payonce_tests::webhook_sink::WebhookSink;
use serde_json::{json, Value};

use super::{authenticate, order_state};

/// The order total, in cents (USD 30.00).
const AMOUNT: i64 = 3000;

/// One call the adapter sent: what it asked for (its route, ids left out) and its
/// `PayPal-Request-Id`, if any.
type Call = (&'static str, Option<String>);

/// Every call the adapters of a test sent to the fake, in order (OAuth token calls included).
#[derive(Clone, Default)]
struct Wire(Arc<Mutex<Vec<Call>>>);

impl Wire {
    /// The calls so far, token calls left out (each adapter buys its own token once).
    fn calls(&self) -> Vec<Call> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(kind, _)| *kind != "token")
            .cloned()
            .collect()
    }

    /// How many calls, token calls included: what the fake must have seen.
    fn sent(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }

    /// The calls after the first `from` of [`Wire::calls`].
    fn since(&self, from: usize) -> Vec<Call> {
        self.calls().split_off(from)
    }
}

/// What a PayPal call asks for, from its method and path.
fn kind_of(method: &str, path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["v1", "oauth2", "token"]) => "token",
        ("POST", ["v2", "checkout", "orders"]) => "create",
        ("GET", ["v2", "checkout", "orders", _]) => "get order",
        ("POST", ["v2", "checkout", "orders", _, "capture"]) => "capture order",
        ("POST", ["v2", "checkout", "orders", _, "authorize"]) => "authorize order",
        ("POST", ["v2", "payments", "authorizations", _, "capture"]) => "capture authorization",
        ("POST", ["v2", "payments", "authorizations", _, "void"]) => "void",
        ("POST", ["v2", "payments", "captures", _, "refund"]) => "refund",
        _ => "other",
    }
}

/// HTTP to the fake, each call written down first.
struct Recording {
    http: HttpTransport,
    wire: Wire,
}

#[async_trait]
impl PspTransport for Recording {
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure> {
        let request_id = call.header("PayPal-Request-Id").map(str::to_owned);
        self.wire
            .0
            .lock()
            .unwrap()
            .push((kind_of(call.method, &call.path), request_id));
        self.http.send(call, timeout).await
    }
}

/// The PSP every function of these tests holds: the deployment's adapter enum with PayPal in
/// it, over the recording transport.
type RecordedPayPal = ConfiguredPsp<Recording>;

/// A PayPal stack: the shared [`PaymentStack`] (its tables, clock and fake), with the charge,
/// capture/cancel and refund functions and reconcile built over recorded PayPal adapters, and
/// a new order of alice's (USD 30.00).
struct PayPalStack {
    stack: PaymentStack,
    wire: Wire,
    charge: ChargeService<DynamoPaymentStore, RecordedPayPal>,
    operations: OperationService<DynamoPaymentStore, RecordedPayPal>,
    refunds: RefundService<DynamoPaymentStore, RecordedPayPal>,
    order: String,
}

impl PayPalStack {
    /// The fake's PayPal face as `fake` sets it up, charge settings `charge`.
    async fn start(fake: FakePspConfig, charge: ChargeConfig) -> Self {
        let stack = PaymentStack::start_with(fake, charge).await;
        let order = stack
            .create_order_of("alice", Currency::Usd, 1, AMOUNT)
            .await;
        let wire = Wire::default();
        let adapter = || recorded_paypal(&stack, &wire);
        let charge = stack.charge_with(adapter());
        let operations = OperationService::new(
            stack.charge.store().clone(),
            adapter(),
            OperationConfig::default(),
        );
        let refunds = stack.refunds_with(adapter());
        Self {
            charge,
            operations,
            refunds,
            wire,
            order,
            stack,
        }
    }

    /// The fake's defaults: a vaulted card is charged in the create.
    async fn one_step() -> Self {
        Self::start(FakePspConfig::paypal(), ChargeConfig::default()).await
    }

    /// A vaulted card's order is left `CREATED` for payonce's capture.
    async fn two_step() -> Self {
        Self::start(
            FakePspConfig {
                paypal_one_step_vault: false,
                ..FakePspConfig::paypal()
            },
            ChargeConfig::default(),
        )
        .await
    }

    /// A new recorded adapter (a function's own, with its own token).
    fn psp(&self) -> RecordedPayPal {
        recorded_paypal(&self.stack, &self.wire)
    }

    /// POST /payments as alice under `key`.
    async fn pay(&self, key: &str, body: Value) -> Reply {
        self.stack
            .pay_through(&self.charge, "alice", key, body)
            .await
    }

    /// Pays this stack's order under `key` with `payment_method` and `extra` fields.
    async fn pay_with(&self, key: &str, payment_method: &str, extra: Value) -> Reply {
        self.pay(key, body(&self.order, payment_method, extra))
            .await
    }

    /// POST /payments/{id}/capture as staff under `key`.
    async fn capture(&self, payment_id: &str, key: &str, body: Value) -> Reply {
        self.operate(scoped_api_event(
            "POST",
            &format!("/payments/{payment_id}/capture"),
            Some(STAFF),
            STAFF_SCOPES,
            &[("idempotency-key", key)],
            &body.to_string(),
        ))
        .await
    }

    /// POST /payments/{id}/cancel as staff under `key`.
    async fn cancel(&self, payment_id: &str, key: &str) -> Reply {
        self.operate(scoped_api_event(
            "POST",
            &format!("/payments/{payment_id}/cancel"),
            Some(STAFF),
            STAFF_SCOPES,
            &[("idempotency-key", key)],
            "",
        ))
        .await
    }

    /// POST /payments/{id}/refunds as staff under `key`.
    async fn refund(&self, payment_id: &str, key: &str, body: Value) -> Reply {
        self.operate(refund_event(
            payment_id,
            Some(STAFF),
            STAFF_SCOPES,
            Some(key),
            &body.to_string(),
        ))
        .await
    }

    /// The refund function (refunds, captures, cancels) handles `event`.
    async fn operate(&self, event: Request) -> Reply {
        Reply::from(payonce_refund::handler::handle(&self.refunds, &self.operations, event).await)
    }

    /// One reconcile run with the default settings, over a recorded adapter of its own.
    async fn reconcile(&self) -> ReconcileReport {
        self.reconcile_with(self.psp()).await
    }

    /// Serves the processor's reconcile requests (as the reconcile function's SQS trigger),
    /// through this stack's recorded adapter: each taken off the queue and reconciled.
    async fn reconcile_requested(&self) -> ReconcileReport {
        let requests = &self.stack.reconcile_requests;
        let messages = requests
            .receive(10, Duration::from_secs(720))
            .await
            .expect("the request queue");
        let report = Reconciler::new(
            self.stack.charge.store().clone(),
            self.psp(),
            ReconcileConfig::default(),
        )
        .reconcile_requested(messages.iter().map(|m| m.body.as_str()))
        .await;
        for message in &messages {
            requests
                .delete(&message.receipt_handle)
                .await
                .expect("delete the request");
        }
        report
    }

    /// One reconcile run with the default settings, calling `psp`.
    async fn reconcile_with<P: Psp>(&self, psp: P) -> ReconcileReport {
        Reconciler::new(
            self.stack.charge.store().clone(),
            psp,
            ReconcileConfig::default(),
        )
        .run()
        .await
        .expect("the reconcile run")
    }

    /// The fake's one PayPal order for `payment_id`.
    fn order_of(&self, payment_id: &str) -> FakeCharge {
        let mut orders: Vec<FakeCharge> = self
            .stack
            .psp
            .charges()
            .into_iter()
            .filter(|c| c.payment_id.as_deref() == Some(payment_id))
            .collect();
        assert_eq!(orders.len(), 1, "{orders:#?}");
        orders.remove(0)
    }

    /// Everything the fake was sent is what the adapters sent: no call of any other client.
    fn assert_fake_saw_only_the_wire(&self) {
        assert_eq!(self.stack.psp.requests_seen(), self.wire.sent());
    }

    /// The payment state of the order, as the API shows it.
    async fn order_state(&self) -> String {
        order_state(&self.stack, &self.order).await
    }
}

/// The PayPal adapter over HTTP to the stack's fake (its client id, the shared secret; 1 s to
/// connect, 5 s per request), writing each call down on `wire`.
fn recorded_paypal(stack: &PaymentStack, wire: &Wire) -> RecordedPayPal {
    let http = HttpTransport::new(
        stack.psp.base_url(),
        Duration::from_secs(1),
        Duration::from_secs(5),
    )
    .expect("HTTP client");
    let transport = Recording {
        http,
        wire: wire.clone(),
    };
    ConfiguredPsp::PayPal(PayPalPsp::with_transport(
        transport,
        "paypal",
        DEFAULT_PAYPAL_CLIENT_ID,
        FAKE_API_KEY,
        Duration::from_secs(5),
    ))
}

/// A payment of `order` with `payment_method` and `extra` fields.
fn body(order: &str, payment_method: &str, extra: Value) -> Value {
    let mut body = json!({"order_id": order, "order_version": 1, "payment_method": payment_method});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// The test checkout's return page.
fn return_url() -> String {
    format!("{CHECKOUT_ORIGIN}/checkout/return")
}

/// The create's request id of `payment_id`.
fn charge_key(payment_id: &str) -> Option<String> {
    Some(format!("payonce-charge-{payment_id}"))
}

/// The order capture's (and a staff capture's) request id of `payment_id`.
fn capture_key(payment_id: &str) -> Option<String> {
    Some(format!("payonce-capture-{payment_id}"))
}

/// The request id of refund `n` of `payment_id`.
fn refund_key(payment_id: &str, n: u32) -> Option<String> {
    Some(format!("payonce-refund-{payment_id}-{n}"))
}

/// The payment id of an answer.
fn payment_id_of(reply: &Reply) -> String {
    reply.json["payment_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no payment_id: {}", reply.body))
        .to_owned()
}

/// Asserts a 201 `succeeded` answer; its payment id.
fn assert_succeeded(reply: &Reply) -> String {
    assert_eq!(
        (reply.status, reply.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        reply.body
    );
    payment_id_of(reply)
}

/// Asserts the payment is stored succeeded under PayPal's order `order_id`.
async fn assert_stored_paid(pp: &PayPalStack, payment_id: &str, order_id: &str) {
    let stored = pp.stack.payment(payment_id).await;
    assert_eq!(
        (
            stored.status,
            stored.provider_payment_id.as_deref(),
            stored.failure.map(|f| f.kind)
        ),
        (PaymentStatus::Succeeded, Some(order_id), None)
    );
    assert_eq!(pp.order_state().await, "paid");
}

/// Asserts PayPal holds `order` completed with exactly one capture of the whole amount.
fn assert_captured_once(order: &FakeCharge) {
    assert_eq!(
        (
            order.status.as_str(),
            order.outcome.as_str(),
            order.amount_captured
        ),
        ("COMPLETED", "succeeded", Some(AMOUNT)),
        "{order:#?}"
    );
    assert!(order.captures.len() <= 1, "{order:#?}");
}

#[tokio::test]
async fn a_vaulted_card_pays_the_order_in_one_create_and_the_replay_calls_paypal_no_more() {
    // GIVEN a PayPal deployment whose vaulted cards are charged in the create
    let pp = PayPalStack::one_step().await;
    let request = body(&pp.order, "pm_card_visa", json!({}));

    // WHEN alice pays with a vaulted card
    let paid = pp.pay("pp-visa", request.clone()).await;

    // THEN 201 succeeded after one create under the charge's request id
    let id = assert_succeeded(&paid);
    assert_eq!(pp.wire.calls(), vec![("create", charge_key(&id))]);
    pp.assert_fake_saw_only_the_wire();
    // AND PayPal holds one order of ours, completed and captured once, whole
    let order = pp.order_of(&id);
    assert_captured_once(&order);
    assert_eq!(
        (
            order.idempotency_key.clone(),
            order.payment_method.as_str(),
            order.capture_method.as_str(),
            order.amount,
            order.currency.as_str()
        ),
        (charge_key(&id), "pm_card_visa", "automatic", AMOUNT, "usd")
    );
    assert_eq!(pp.stack.psp.succeeded_charges_for(&id), 1);
    // AND the payment is stored succeeded under the order's id, the order paid
    assert_eq!(paid.json["provider_payment_id"], order.id.as_str());
    assert_eq!(paid.json["provider"], "paypal");
    assert_stored_paid(&pp, &id, &order.id).await;

    // WHEN the same key comes again
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.pay("pp-visa", request).await;

    // THEN the same answer from the store, and PayPal is not called
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json, paid.json);
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    assert_eq!(pp.wire.calls().len(), 1);
    // AND reconcile has nothing to do
    pp.stack.clock.advance(Duration::from_secs(180));
    assert_eq!(pp.reconcile().await.examined, 0);
    assert_eq!(pp.wire.calls().len(), 1);
}

#[tokio::test]
async fn a_vaulted_card_order_left_created_is_stored_then_captured_once_under_the_capture_key() {
    // GIVEN a PayPal deployment that leaves a vaulted card's order CREATED for a second call
    let pp = PayPalStack::two_step().await;
    let request = body(&pp.order, "pm_card_visa", json!({}));

    // WHEN alice pays with a vaulted card
    let paid = pp.pay("pp-two-step", request.clone()).await;

    // THEN 201 succeeded: the create, then the order's capture under the capture's request id
    let id = assert_succeeded(&paid);
    assert_eq!(
        pp.wire.calls(),
        vec![
            ("create", charge_key(&id)),
            ("capture order", capture_key(&id))
        ]
    );
    pp.assert_fake_saw_only_the_wire();
    // AND PayPal captured the one order once, under that request id
    let order = pp.order_of(&id);
    assert_captured_once(&order);
    assert_eq!(order.captures.len(), 1, "{order:#?}");
    assert_eq!(
        (
            order.captures[0].amount,
            order.captures[0].idempotency_key.clone()
        ),
        (AMOUNT, capture_key(&id))
    );
    assert_stored_paid(&pp, &id, &order.id).await;

    // AND the replay calls PayPal no more
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.pay("pp-two-step", request).await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
}

/// Pays the order under `key` with a card PayPal declines: asserts 402 card-declined with
/// `decline_code` after one create, the payment stored failed as declined, the order released,
/// nothing captured, and the replay from the store alone; returns the payment id.
async fn assert_declined(pp: &PayPalStack, key: &str, card: &str, decline_code: &str) -> String {
    let from = pp.wire.calls().len();
    let request = body(&pp.order, card, json!({}));
    let declined = pp.pay(key, request.clone()).await;
    assert_eq!(
        (declined.status, declined.problem_type()),
        (402, "/problems/card-declined"),
        "{}",
        declined.body
    );
    assert_eq!(
        declined.json["decline_code"], decline_code,
        "{}",
        declined.body
    );
    let id = payment_id_of(&declined);
    assert_eq!(pp.wire.since(from), vec![("create", charge_key(&id))]);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.failure.as_ref().map(|f| f.kind),
            stored
                .failure
                .as_ref()
                .and_then(|f| f.decline_code.as_deref())
        ),
        (
            PaymentStatus::Failed,
            Some(FailureKind::Declined),
            Some(decline_code)
        )
    );
    assert_eq!(pp.order_state().await, "unpaid");
    assert_eq!(pp.stack.psp.succeeded_charges_for(&id), 0);
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.pay(key, request).await;
    assert_eq!(
        (
            replay.status,
            replay.problem_type(),
            replay.header("idempotent-replayed")
        ),
        (402, "/problems/card-declined", Some("true"))
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    id
}

#[tokio::test]
async fn a_declined_vaulted_card_is_402_the_order_free_and_a_second_card_pays_it() {
    // GIVEN a PayPal deployment that charges vaulted cards in the create
    let pp = PayPalStack::one_step().await;

    // WHEN a card PayPal declines in the order's capture pays (201, a DECLINED capture)
    // THEN 402 card-declined with the capture's reason; PayPal's order is stored, declined
    let declined = assert_declined(
        &pp,
        "pp-declined",
        "pm_card_visa_chargeDeclined",
        "DECLINED_BY_RISK_FRAUD_FILTERS",
    )
    .await;
    let order = pp.order_of(&declined);
    assert_eq!(
        (order.outcome.as_str(), order.amount_captured),
        ("failed", None),
        "{order:#?}"
    );
    assert_eq!(
        pp.stack
            .payment(&declined)
            .await
            .provider_payment_id
            .as_deref(),
        Some(order.id.as_str())
    );

    // WHEN a card PayPal refuses outright pays (422 INSTRUMENT_DECLINED: no order made)
    // THEN 402 card-declined too, and no order of it at PayPal
    let refused = assert_declined(
        &pp,
        "pp-no-funds",
        "pm_card_chargeDeclinedInsufficientFunds",
        "INSTRUMENT_DECLINED",
    )
    .await;
    assert!(pp
        .stack
        .psp
        .charges()
        .iter()
        .all(|c| c.payment_id.as_deref() != Some(refused.as_str())));
    assert_eq!(pp.stack.payment(&refused).await.provider_payment_id, None);

    // WHEN a second card pays the order
    let paid = pp
        .pay_with("pp-second-card", "pm_card_mastercard", json!({}))
        .await;

    // THEN it is paid once: two orders at PayPal, one captured
    let id = assert_succeeded(&paid);
    let orders = pp.stack.psp.charges();
    assert_eq!(orders.len(), 2, "{orders:#?}");
    assert_eq!(
        orders.iter().filter(|o| o.outcome == "succeeded").count(),
        1
    );
    assert_stored_paid(&pp, &id, &pp.order_of(&id).id).await;
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn a_two_step_order_whose_capture_is_declined_fails_the_payment_and_frees_the_order() {
    // GIVEN a PayPal deployment that leaves a vaulted card's order CREATED for payonce's capture
    let pp = PayPalStack::two_step().await;
    let request = body(
        &pp.order,
        "pm_card_chargeDeclinedInsufficientFunds",
        json!({}),
    );

    // WHEN alice pays with a card PayPal refuses at the capture (422 INSTRUMENT_DECLINED)
    let declined = pp.pay("pp-capture-declined", request.clone()).await;

    // THEN the create, then the capture, whose refusal is read against the order (not
    // captured meanwhile); PayPal moved no money
    let id = payment_id_of(&declined);
    assert_eq!(
        pp.wire.calls(),
        vec![
            ("create", charge_key(&id)),
            ("capture order", capture_key(&id)),
            ("get order", None)
        ],
        "{}",
        declined.body
    );
    let order = pp.order_of(&id);
    assert_eq!(
        (
            order.amount_captured,
            pp.stack.psp.succeeded_charges_for(&id)
        ),
        (None, 0),
        "{order:#?}"
    );
    // AND the answer is a decline: 402 card-declined, the payment failed under the order's
    // id, the order free for another card (nothing can capture a vaulted order PayPal
    // refused: its buyer is not there to pick another funding source)
    assert_eq!(
        (declined.status, declined.problem_type()),
        (402, "/problems/card-declined"),
        "{}",
        declined.body
    );
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.failure.map(|f| f.kind),
            stored.provider_payment_id.as_deref()
        ),
        (
            PaymentStatus::Failed,
            Some(FailureKind::Declined),
            Some(order.id.as_str())
        )
    );
    assert_eq!(pp.order_state().await, "unpaid");
    // AND reconcile has nothing left to do, and another card pays the order
    pp.stack.clock.advance(Duration::from_secs(180));
    assert_eq!(pp.reconcile().await.examined, 0);
    let paid = pp
        .pay_with("pp-capture-other", "pm_card_visa", json!({}))
        .await;
    let paid_id = assert_succeeded(&paid);
    assert_eq!(pp.stack.psp.succeeded_charges_for(&paid_id), 1);
    assert_eq!(pp.order_state().await, "paid");
}

/// A signed delivery of `body` as PayPal sends it, signed by the fake's key for the fake's
/// webhook id with a transmission time of now.
fn paypal_delivery(pp: &PayPalStack, body: &str) -> Request {
    let signer = pp.stack.psp.paypal_signer().expect("the PayPal face signs");
    let transmission_id = uuid::Uuid::new_v4().to_string();
    let now_ms = payonce::clock::SystemClock.now_ms();
    let transmission_time = payonce::logging::rfc3339_ms(now_ms - now_ms % 1000);
    let signature = sign_paypal_webhook(
        &signer,
        &transmission_id,
        &transmission_time,
        DEFAULT_PAYPAL_WEBHOOK_ID,
        body.as_bytes(),
    );
    let cert_url = pp
        .stack
        .psp
        .paypal_cert_url()
        .expect("the fake's certificate");
    api_event(
        "POST",
        "/webhooks/paypal",
        None,
        &[
            ("paypal-transmission-id", &transmission_id),
            ("paypal-transmission-time", &transmission_time),
            ("paypal-transmission-sig", &signature),
            ("paypal-cert-url", &cert_url),
            ("paypal-auth-algo", PAYPAL_AUTH_ALGO),
        ],
        body,
    )
}

/// Hands PayPal's delivery of `body` to the webhook receiver (which verifies it against the
/// certificate it fetches from the fake) and the one message it queued to the processor.
async fn receive_and_process(pp: &PayPalStack, body: &str) -> Processed {
    let queue = MemoryQueue::new(pp.stack.clock.clone(), 262_144);
    let receiver = pp.stack.receiver(queue.clone());
    let received =
        Reply::from(payonce_webhook::receiver::handle(&receiver, paypal_delivery(pp, body)).await);
    assert_eq!(received.status, 200, "{}", received.body);
    let queued = queue
        .receive(10, Duration::from_secs(30))
        .await
        .expect("the queue");
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].body, body, "queued byte for byte");
    assert_eq!(
        queued[0].attributes.get("provider").map(String::as_str),
        Some("paypal")
    );
    pp.stack
        .deliver(&queued[0].body)
        .await
        .expect("the processor")
}

/// The fake's deliveries of `event_type` about our `payment_id` (a checkout order's purchase
/// unit, or a capture's or authorization's `custom_id`).
async fn webhooks_of(
    sink: &WebhookSink,
    count: usize,
    event_type: &str,
    payment_id: &str,
) -> Vec<String> {
    sink.wait_for(count, |event| {
        event["event_type"] == event_type
            && (event["resource"]["custom_id"] == payment_id
                || event["resource"]["purchase_units"][0]["custom_id"] == payment_id)
    })
    .await
}

#[tokio::test]
async fn the_buyer_approves_at_paypal_and_the_approval_webhook_has_the_order_captured_at_once() {
    // GIVEN a PayPal deployment, its webhooks kept
    let pp = PayPalStack::one_step().await;
    let sink = pp.stack.webhook_sink().await;
    let request = body(&pp.order, "paypal", json!({"return_url": return_url()}));

    // WHEN alice pays with her PayPal account, with somewhere to come back to
    let first = pp.pay("pp-buyer", request.clone()).await;

    // THEN 202 requires_action: PayPal's approval page is where to send her, until when
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (202, Some("requires_action")),
        "{}",
        first.body
    );
    assert!(first.header("retry-after").is_some());
    let id = payment_id_of(&first);
    let order = pp.order_of(&id);
    let action = &first.json["next_action"];
    assert_eq!(action["type"], "redirect");
    let url = action["url"].as_str().unwrap().to_owned();
    assert_eq!(
        url,
        format!(
            "{}/_fake/authenticate/{}",
            pp.stack.psp.base_url(),
            order.id
        )
    );
    assert_eq!(
        action["expires_at"].as_i64(),
        Some(pp.stack.clock.now_ms() / 1000 + 3600)
    );
    // AND one create was sent; PayPal's order waits for its buyer, nothing captured
    assert_eq!(pp.wire.calls(), vec![("create", charge_key(&id))]);
    assert_eq!(
        (
            order.status.as_str(),
            order.outcome.as_str(),
            order.payment_method.as_str()
        ),
        ("PAYER_ACTION_REQUIRED", "pending", "paypal")
    );
    // AND the payment is stored waiting under the order's id, the order held
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.provider_payment_id.as_deref(),
            stored.progress.next_action.map(|a| a.url)
        ),
        (
            PaymentStatus::RequiresAction,
            Some(order.id.as_str()),
            Some(url.clone())
        )
    );
    assert_eq!(pp.order_state().await, "processing");
    // AND the checkout asking again gets the same answer, from the store alone
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.pay("pp-buyer", request.clone()).await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (202, Some("true"))
    );
    assert_eq!(replay.json["next_action"], first.json["next_action"]);
    assert_eq!(pp.stack.psp.requests_seen(), seen);

    // WHEN alice approves at PayPal
    let (status, location) = authenticate(&url, "complete").await;

    // THEN PayPal sends her back to the return page with the order's token; the order is
    // approved, still not captured
    assert_eq!(status, 303);
    let location = location.expect("a redirect");
    assert!(
        location.starts_with(&format!("{}?token={}&PayerID=", return_url(), order.id)),
        "{location}"
    );
    let approved = pp.order_of(&id);
    assert_eq!(
        (approved.status.as_str(), approved.amount_captured),
        ("APPROVED", None)
    );

    // WHEN PayPal's CHECKOUT.ORDER.APPROVED is received and processed
    let approval = webhooks_of(&sink, 1, "CHECKOUT.ORDER.APPROVED", &id).await;
    let seen = pp.stack.psp.requests_seen();
    let processed = receive_and_process(&pp, &approval[0]).await;

    // THEN it is verified and read, but captures nothing itself (the processor never calls
    // PayPal): it asks reconcile to capture the order now, with one request
    assert!(
        !matches!(processed, Processed::Applied(EventApplied::Moved(_))),
        "{processed:?}"
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    assert_eq!(
        pp.stack.payment(&id).await.status,
        PaymentStatus::RequiresAction
    );
    assert_eq!(
        pp.stack.reconcile_requests.bodies(),
        [format!(r#"{{"reconcile":"{id}"}}"#)]
    );

    // WHEN reconcile serves the request, at once (not waiting for its schedule)
    let report = pp.reconcile_requested().await;

    // THEN it reads the order approved and captures it under the capture's request id: paid
    assert_eq!(
        (report.examined, report.succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        pp.wire.since(1),
        vec![("get order", None), ("capture order", capture_key(&id))]
    );
    let captured = pp.order_of(&id);
    assert_captured_once(&captured);
    assert_eq!(captured.captures.len(), 1, "{captured:#?}");
    assert_eq!(captured.captures[0].idempotency_key, capture_key(&id));
    assert_stored_paid(&pp, &id, &order.id).await;
    // AND the return page's replay now shows it paid, from the store
    let seen = pp.stack.psp.requests_seen();
    let paid = pp.pay("pp-buyer", request).await;
    assert_eq!(
        (paid.status, paid.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        paid.body
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    // AND PayPal's PAYMENT.CAPTURE.COMPLETED changes nothing and asks for nothing, nor does
    // the approval delivered again (the payment is settled); a scheduled run captures nothing
    // more
    let completed = webhooks_of(&sink, 1, "PAYMENT.CAPTURE.COMPLETED", &id).await;
    let processed = receive_and_process(&pp, &completed[0]).await;
    assert!(
        !matches!(processed, Processed::Applied(EventApplied::Moved(_))),
        "{processed:?}"
    );
    assert!(pp.stack.reconcile_requests.is_empty());
    receive_and_process(&pp, &approval[0]).await;
    assert!(pp.stack.reconcile_requests.is_empty());
    pp.stack.clock.advance(Duration::from_secs(600));
    assert_eq!(pp.reconcile().await.examined, 0);
    assert_eq!(pp.wire.calls().len(), 3);
    assert_eq!(pp.order_of(&id).captures.len(), 1);
    assert_eq!(authenticate(&url, "complete").await.0, 409);
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn a_buyer_who_never_approves_holds_the_order_until_paypal_lets_it_lapse() {
    // GIVEN a PayPal whose unapproved orders lapse after a second (PayPal: 3 hours), and alice
    // sent to approve at PayPal
    let fake = FakePspConfig {
        requires_action_for: Duration::from_secs(1),
        ..FakePspConfig::paypal()
    };
    let pp = PayPalStack::start(fake, ChargeConfig::default()).await;
    let request = body(&pp.order, "paypal", json!({"return_url": return_url()}));
    let first = pp.pay("pp-abandoned", request.clone()).await;
    assert_eq!(first.status, 202, "{}", first.body);
    let id = payment_id_of(&first);
    let url = first.json["next_action"]["url"]
        .as_str()
        .unwrap()
        .to_owned();

    // WHEN she cancels at PayPal
    let (status, location) = authenticate(&url, "fail").await;

    // THEN PayPal sends her back with the order's token, and the order waits as it was
    assert_eq!(status, 303);
    let order = pp.order_of(&id);
    assert_eq!(
        location,
        Some(format!("{}?token={}", return_url(), order.id))
    );
    assert_eq!(order.status, "PAYER_ACTION_REQUIRED");

    // WHEN she asks payonce to cancel her waiting payment (to pay another way)
    let from = pp.wire.calls().len();
    let event = scoped_api_event(
        "POST",
        &format!("/payments/{id}/cancel"),
        Some("alice"),
        &[],
        &[("idempotency-key", "pp-abandoned-cancel")],
        "",
    );
    let cancel = pp.operate(event).await;

    // THEN PayPal cannot void an order nobody approved (it lapses by itself), so nothing can
    // confirm the cancel and the order stays held: 409, the payment still waiting
    assert_eq!(
        (cancel.status, cancel.problem_type()),
        (409, "/problems/payment-not-cancelable"),
        "{}",
        cancel.body
    );
    assert_eq!(pp.wire.since(from), vec![("get order", None)]);
    assert_eq!(
        pp.stack.payment(&id).await.status,
        PaymentStatus::RequiresAction
    );
    assert_eq!(pp.order_state().await, "processing");

    // WHEN PayPal lets the order lapse, and reconcile runs
    tokio::time::sleep(Duration::from_millis(1500)).await;
    pp.stack.clock.advance(Duration::from_secs(180));
    let from = pp.wire.calls().len();
    let report = pp.reconcile().await;

    // THEN the order PayPal no longer knows (404) is read as canceled: nothing can be captured
    // under it; the payment is canceled as abandoned, the order free, nothing captured
    assert_eq!((report.examined, report.errors), (1, 0), "{report:?}");
    assert_eq!(pp.wire.since(from), vec![("get order", None)]);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.progress.cancellation_reason),
        (PaymentStatus::Canceled, Some(CancellationReason::Abandoned)),
        "{report:?}"
    );
    assert_eq!(pp.order_state().await, "unpaid");
    assert_eq!(pp.stack.psp.succeeded_charges_for(&id), 0);
    // AND the return page's replay says nothing was charged, and a card pays the order
    let replay = pp.pay("pp-abandoned", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/payment-failed"),
        "{}",
        replay.body
    );
    let paid = pp
        .pay_with("pp-after-abandon", "pm_card_visa", json!({}))
        .await;
    assert_succeeded(&paid);
    assert_eq!(pp.order_state().await, "paid");
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn a_manual_capture_of_the_buyers_approval_is_refused_before_anything_is_written() {
    // GIVEN a PayPal deployment
    let pp = PayPalStack::one_step().await;
    let before = pp.stack.snapshot().await;

    // WHEN alice asks to hold a payment the buyer approves at PayPal
    let refused = pp
        .pay_with(
            "pp-manual-approval",
            "paypal",
            json!({"capture": "manual", "return_url": return_url()}),
        )
        .await;

    // THEN 400 invalid-request: PayPal authorizes only a vaulted source; nothing was written,
    // nothing sent
    assert_eq!(
        (refused.status, refused.problem_type()),
        (400, "/problems/invalid-request"),
        "{}",
        refused.body
    );
    assert_eq!(pp.stack.snapshot().await, before, "no table changed");
    assert_eq!(pp.wire.calls(), vec![]);
    assert_eq!(pp.stack.psp.requests_seen(), 0);

    // AND the key was not kept: the same key holds a vaulted card's payment
    let held = pp
        .pay_with(
            "pp-manual-approval",
            "pm_card_visa",
            json!({"capture": "manual"}),
        )
        .await;
    assert_eq!(
        (held.status, held.json["status"].as_str()),
        (201, Some("authorized")),
        "{}",
        held.body
    );
}

#[tokio::test]
async fn a_payment_that_needs_its_buyer_without_a_return_url_is_402_authentication_required() {
    // GIVEN a PayPal deployment
    let pp = PayPalStack::one_step().await;

    // WHEN alice asks to approve at PayPal without a return URL
    let request = body(&pp.order, "paypal", json!({}));
    let refused = pp.pay("pp-buyer-no-return", request.clone()).await;

    // THEN 402 authentication-required (as a card that needs authentication: a wallet's
    // approval with nowhere to come back to), decided before anything is sent: no order at
    // PayPal; the payment failed, the order released
    assert_eq!(
        (refused.status, refused.problem_type()),
        (402, "/problems/authentication-required"),
        "{}",
        refused.body
    );
    assert_eq!(pp.wire.calls(), vec![]);
    assert!(pp.stack.psp.charges().is_empty());
    let id = payment_id_of(&refused);
    assert_eq!(
        pp.stack.payment(&id).await.failure.map(|f| f.kind),
        Some(FailureKind::AuthenticationRequired)
    );
    assert_eq!(pp.order_state().await, "unpaid");
    let replay = pp.pay("pp-buyer-no-return", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/authentication-required")
    );

    // WHEN a vaulted card that needs 3-D Secure pays without a return URL
    let card = pp
        .pay_with(
            "pp-3ds-no-return",
            "pm_card_threeDSecure2Required",
            json!({}),
        )
        .await;

    // THEN PayPal refuses the create (422 PAYER_ACTION_REQUIRED, no order made): 402
    // authentication-required too
    assert_eq!(
        (card.status, card.problem_type()),
        (402, "/problems/authentication-required"),
        "{}",
        card.body
    );
    let card_id = payment_id_of(&card);
    assert_eq!(pp.wire.calls(), vec![("create", charge_key(&card_id))]);
    assert!(pp.stack.psp.charges().is_empty());
    assert_eq!(pp.order_state().await, "unpaid");

    // AND a vaulted card without 3-D Secure pays the order
    let paid = pp
        .pay_with("pp-after-refusals", "pm_card_visa", json!({}))
        .await;
    assert_succeeded(&paid);
    assert_eq!(pp.order_state().await, "paid");
}

/// Pays the order under `key` for a manual capture: asserts 201 `authorized` after the create
/// (intent AUTHORIZE, authorized at once); returns the answer.
async fn authorize(pp: &PayPalStack, key: &str) -> Value {
    let from = pp.wire.calls().len();
    let reply = pp
        .pay_with(key, "pm_card_visa", json!({"capture": "manual"}))
        .await;
    assert_eq!(
        (reply.status, reply.json["status"].as_str()),
        (201, Some("authorized")),
        "{}",
        reply.body
    );
    let id = payment_id_of(&reply);
    assert_eq!(pp.wire.since(from), vec![("create", charge_key(&id))]);
    reply.json
}

#[tokio::test]
async fn a_paypal_manual_capture_is_authorized_then_captured_whole_once_by_staff() {
    // GIVEN a PayPal deployment and an order
    let pp = PayPalStack::one_step().await;

    // WHEN alice pays it for a manual capture
    let authorized = authorize(&pp, "pp-manual").await;

    // THEN 201 authorized with what may be captured and until when (PayPal's expiration_time)
    assert_eq!(
        (
            authorized["capture"].as_str(),
            authorized["amount_capturable"].as_i64()
        ),
        (Some("manual"), Some(AMOUNT))
    );
    let capture_before = authorized["capture_before"]
        .as_i64()
        .expect("capture_before");
    let now_s = pp.stack.clock.now_ms() / 1000;
    assert!(capture_before > now_s, "{authorized}");
    let id = authorized["payment_id"].as_str().unwrap().to_owned();
    let order = pp.order_of(&id);
    // AND PayPal holds the order authorized (intent AUTHORIZE), nothing captured
    assert_eq!(
        (
            order.status.as_str(),
            order.outcome.as_str(),
            order.capture_method.as_str(),
            order.captures.len()
        ),
        ("COMPLETED", "authorized", "manual", 0),
        "{order:#?}"
    );
    // AND the payment is stored authorized under the order's id, the order held
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.provider_payment_id.as_deref(),
            stored.progress.amount_capturable
        ),
        (PaymentStatus::Authorized, Some(order.id.as_str()), AMOUNT)
    );
    assert_eq!(pp.order_state().await, "authorized");
    // AND another attempt on the order is refused
    let again = pp
        .pay_with("pp-manual-again", "pm_card_visa", json!({}))
        .await;
    assert_eq!(
        (again.status, again.problem_type()),
        (409, "/problems/order-already-authorized"),
        "{}",
        again.body
    );

    // WHEN staff capture all of it
    let from = pp.wire.calls().len();
    let captured = pp.capture(&id, "pp-cap", json!({})).await;

    // THEN 201 succeeded with what was captured: the order read, then its authorization
    // captured under the capture's request id
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(
        (
            captured.json["status"].as_str(),
            captured.json["amount_captured"].as_i64()
        ),
        (Some("succeeded"), Some(AMOUNT))
    );
    assert_eq!(
        pp.wire.since(from),
        vec![
            ("get order", None),
            ("capture authorization", capture_key(&id))
        ]
    );
    let order = pp.order_of(&id);
    assert_eq!(
        (order.outcome.as_str(), order.amount_captured),
        ("succeeded", Some(AMOUNT)),
        "{order:#?}"
    );
    assert_eq!(order.captures.len(), 1, "{order:#?}");
    assert_eq!(
        (
            order.captures[0].amount,
            order.captures[0].idempotency_key.clone()
        ),
        (AMOUNT, capture_key(&id))
    );
    assert_stored_paid(&pp, &id, &order.id).await;

    // WHEN the same key comes again, and another key asks again
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.capture(&id, "pp-cap", json!({})).await;
    let other = pp.capture(&id, "pp-cap-2", json!({})).await;

    // THEN the replay answers from the store, the other key is refused, PayPal not called
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(
        (other.status, other.problem_type()),
        (409, "/problems/payment-not-capturable"),
        "{}",
        other.body
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    assert_eq!(pp.order_of(&id).captures.len(), 1);
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn a_paypal_partial_capture_captures_that_part_once_and_bounds_the_refunds() {
    // GIVEN a PayPal authorization of 30.00 (PayPal captures an authorization in part)
    let pp = PayPalStack::one_step().await;
    let sink = pp.stack.webhook_sink().await;
    assert!(pp.psp().captures_partially());
    let authorized = authorize(&pp, "pp-part").await;
    let id = authorized["payment_id"].as_str().unwrap().to_owned();

    // WHEN staff capture 10.00 of it, and more than it holds under another key
    let from = pp.wire.calls().len();
    let too_much = pp
        .capture(&id, "pp-cap-too-much", json!({"amount": AMOUNT + 1}))
        .await;
    let part = pp
        .capture(&id, "pp-cap-part", json!({"amount": 1000}))
        .await;

    // THEN more is refused before anything is sent; the part is captured once, the rest
    // released (a final capture)
    assert_eq!(
        (too_much.status, too_much.problem_type()),
        (409, "/problems/capture-exceeds-authorized"),
        "{}",
        too_much.body
    );
    assert_eq!(part.status, 201, "{}", part.body);
    assert_eq!(
        (
            part.json["status"].as_str(),
            part.json["amount_captured"].as_i64()
        ),
        (Some("succeeded"), Some(1000))
    );
    assert_eq!(
        pp.wire.since(from),
        vec![
            ("get order", None),
            ("capture authorization", capture_key(&id))
        ]
    );
    let order = pp.order_of(&id);
    assert_eq!(order.amount_captured, Some(1000), "{order:#?}");
    assert_eq!(order.captures.len(), 1, "{order:#?}");
    assert_eq!(order.captures[0].amount, 1000);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.amount_captured()),
        (PaymentStatus::Succeeded, 1000)
    );
    assert_eq!(pp.order_state().await, "paid");
    // AND PayPal's PAYMENT.CAPTURE.COMPLETED, reporting the 10.00 captured (not the 30.00
    // authorized), agrees with the books: it changes nothing and is no mismatch
    let completed = webhooks_of(&sink, 1, "PAYMENT.CAPTURE.COMPLETED", &id).await;
    let processed = receive_and_process(&pp, &completed[0]).await;
    assert!(
        matches!(processed, Processed::Applied(EventApplied::Unchanged(_))),
        "{processed:?}"
    );

    // WHEN staff refund more than was captured, then all of it
    let above = pp
        .refund(&id, "pp-refund-above", json!({"amount": 1001}))
        .await;
    let from = pp.wire.calls().len();
    let all = pp.refund(&id, "pp-refund-all", json!({})).await;

    // THEN the refund is bounded by the capture: 409, then 10.00 refunded once from the
    // authorization's capture
    assert_eq!(
        (above.status, above.problem_type()),
        (409, "/problems/refund-exceeds-remaining"),
        "{}",
        above.body
    );
    assert_eq!(
        (
            all.status,
            all.json["amount"].as_i64(),
            all.json["status"].as_str()
        ),
        (201, Some(1000), Some("succeeded")),
        "{}",
        all.body
    );
    assert_eq!(
        pp.wire.since(from),
        vec![("get order", None), ("refund", refund_key(&id, 1))]
    );
    let refunds = pp.stack.psp.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:#?}");
    assert_eq!(
        (refunds[0].amount, refunds[0].status.as_str()),
        (1000, "COMPLETED")
    );
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn staff_cancel_of_a_paypal_authorization_voids_it_and_frees_the_order() {
    // GIVEN a PayPal authorization
    let pp = PayPalStack::one_step().await;
    let authorized = authorize(&pp, "pp-to-cancel").await;
    let id = authorized["payment_id"].as_str().unwrap().to_owned();

    // WHEN staff cancel it
    let from = pp.wire.calls().len();
    let canceled = pp.cancel(&id, "pp-cancel").await;

    // THEN 200 canceled: the order read, then its authorization voided (no request id);
    // PayPal's order voided, nothing captured
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    assert_eq!(canceled.json["status"], "canceled");
    assert_eq!(
        pp.wire.since(from),
        vec![("get order", None), ("void", None)]
    );
    let order = pp.order_of(&id);
    assert_eq!(
        (
            order.status.as_str(),
            order.outcome.as_str(),
            order.cancels.len(),
            order.captures.len(),
            order.amount_captured
        ),
        ("VOIDED", "canceled", 1, 0, None),
        "{order:#?}"
    );
    // AND the payment is stored canceled as requested, the order unpaid
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.progress.cancellation_reason),
        (PaymentStatus::Canceled, Some(CancellationReason::Requested))
    );
    assert_eq!(pp.order_state().await, "unpaid");
    // AND the replay answers from the store; a capture now is refused, nothing sent
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.cancel(&id, "pp-cancel").await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (200, Some("true")),
        "{}",
        replay.body
    );
    let late = pp.capture(&id, "pp-cap-after-cancel", json!({})).await;
    assert_eq!(
        (late.status, late.problem_type()),
        (409, "/problems/payment-not-capturable")
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);

    // WHEN alice pays the order again with another key
    let again = pp
        .pay_with("pp-after-cancel", "pm_card_visa", json!({}))
        .await;

    // THEN it is paid: two orders at PayPal, the voided one and one captured
    let paid = assert_succeeded(&again);
    assert_eq!(pp.stack.psp.charges().len(), 2);
    assert_eq!(pp.stack.psp.succeeded_charges_for(paid.as_str()), 1);
    assert_eq!(pp.order_state().await, "paid");
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn a_capture_after_the_paypal_authorization_lapsed_is_402_and_frees_the_order() {
    // GIVEN a PayPal authorization that lapses after a moment
    let fake = FakePspConfig {
        authorization_expires_after: Duration::from_millis(300),
        ..FakePspConfig::paypal()
    };
    let pp = PayPalStack::start(fake, ChargeConfig::default()).await;
    let authorized = authorize(&pp, "pp-lapse").await;
    let id = authorized["payment_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let order = pp.order_of(&id);
    assert_eq!(order.outcome, "canceled", "{order:#?}");

    // WHEN staff capture it
    let from = pp.wire.calls().len();
    let refused = pp.capture(&id, "pp-cap-late", json!({})).await;

    // THEN 402 capture-failed: the order read says its authorization lapsed, so nothing is
    // sent to capture; the payment is stored canceled as expired, the order free, nothing
    // captured
    assert_eq!(
        (refused.status, refused.problem_type()),
        (402, "/problems/capture-failed"),
        "{}",
        refused.body
    );
    assert_eq!(pp.wire.since(from), vec![("get order", None)]);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.progress.cancellation_reason),
        (PaymentStatus::Canceled, Some(CancellationReason::Expired))
    );
    assert_eq!(pp.order_state().await, "unpaid");
    let order = pp.order_of(&id);
    assert_eq!(
        (order.captures.len(), order.amount_captured),
        (0, None),
        "{order:#?}"
    );
    // AND the key replays the refusal from the store
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.capture(&id, "pp-cap-late", json!({})).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/capture-failed")
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn a_lost_create_answer_is_learned_from_paypals_replay_under_the_same_request_id() {
    // GIVEN a PayPal deployment (a vaulted card charged in the create)
    let pp = PayPalStack::one_step().await;
    let request = body(&pp.order, "pm_fake_lost_response", json!({}));

    // WHEN PayPal makes and captures the order, and the create's answer is lost
    let paid = pp.pay("pp-lost-create", request.clone()).await;

    // THEN the adapter sends the create again at once under the same request id, PayPal
    // answers with the order the first one made: 201 succeeded, one order, captured once
    let id = assert_succeeded(&paid);
    assert_eq!(
        pp.wire.calls(),
        vec![("create", charge_key(&id)), ("create", charge_key(&id))]
    );
    let order = pp.order_of(&id);
    assert_captured_once(&order);
    assert_eq!(pp.stack.psp.charges().len(), 1);
    assert_stored_paid(&pp, &id, &order.id).await;
    // AND the replay and reconcile call PayPal no more
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.pay("pp-lost-create", request).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    pp.stack.clock.advance(Duration::from_secs(180));
    assert_eq!(pp.reconcile().await.examined, 0);
    assert_eq!(pp.stack.psp.requests_seen(), seen);
}

/// Pays the order under `key` with an invocation that dies after PayPal answered the create,
/// before the order id is stored: asserts the 500 and what is stored (processing, no id, the
/// order held); returns the payment id.
async fn crash_before_the_id_is_stored(pp: &PayPalStack, key: &str) -> String {
    pp.charge.inject_crash(CrashPoint::AfterPspCall);
    let crashed = pp.pay_with(key, "pm_card_visa", json!({})).await;
    assert_eq!(crashed.status, 500, "{}", crashed.body);
    let orders = pp.stack.psp.charges();
    assert_eq!(orders.len(), 1, "{orders:#?}");
    let id = orders[0].payment_id.clone().expect("our custom_id");
    assert_eq!(pp.wire.calls(), vec![("create", charge_key(&id))]);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.provider_payment_id),
        (PaymentStatus::Processing, None)
    );
    assert_eq!(pp.order_state().await, "processing");
    id
}

#[tokio::test]
async fn a_crash_before_the_order_id_is_stored_is_finished_by_reconciles_resend_under_the_same_key()
{
    // GIVEN a PayPal deployment that leaves a vaulted card's order CREATED, and an invocation
    // that died after the create, before storing the order's id
    let pp = PayPalStack::two_step().await;
    let id = crash_before_the_id_is_stored(&pp, "pp-crash").await;
    assert_eq!(pp.order_of(&id).status, "CREATED");

    // WHEN reconcile runs before the attempt is old enough to give up on
    pp.stack.clock.advance(Duration::from_secs(180));
    let early = pp.reconcile().await;

    // THEN it waits: with no order id there is nothing to ask PayPal
    assert_eq!(
        (early.examined, early.pending, early.errors),
        (1, 1, 0),
        "{early:?}"
    );
    assert_eq!(pp.wire.calls().len(), 1);

    // WHEN it runs past abandon_after (20 minutes), well within PayPal's 6 hours
    pp.stack.clock.advance(Duration::from_secs(20 * 60));
    let late = pp.reconcile().await;

    // THEN it sends the create again under the same request id; PayPal answers with the one
    // order, whose id is stored, then captured: succeeded
    assert_eq!(
        (late.examined, late.succeeded, late.errors),
        (1, 1, 0),
        "{late:?}"
    );
    assert_eq!(
        pp.wire.since(1),
        vec![
            ("create", charge_key(&id)),
            ("capture order", capture_key(&id))
        ]
    );
    // AND PayPal holds exactly one order of the payment, captured once
    let orders = pp.stack.psp.charges();
    assert_eq!(orders.len(), 1, "{orders:#?}");
    assert_captured_once(&orders[0]);
    assert_eq!(orders[0].captures.len(), 1, "{:#?}", orders[0]);
    assert_stored_paid(&pp, &id, &orders[0].id).await;
    // AND the client's retry replays the success, and a second run finds nothing to do
    let seen = pp.stack.psp.requests_seen();
    let replay = pp.pay_with("pp-crash", "pm_card_visa", json!({})).await;
    assert_eq!(
        (replay.status, payment_id_of(&replay)),
        (201, id.clone()),
        "{}",
        replay.body
    );
    assert_eq!(pp.reconcile().await.examined, 0);
    assert_eq!(pp.stack.psp.requests_seen(), seen);
}

/// Pays under `key` with a card PayPal refuses in the create (422 INSTRUMENT_DECLINED) on an
/// invocation that dies before it hears the answer: the attempt's id and the request's body.
async fn crash_after_a_refused_create(pp: &PayPalStack, key: &str) -> (String, Value) {
    pp.charge.inject_crash(CrashPoint::AfterPspCall);
    let request = body(
        &pp.order,
        "pm_card_chargeDeclinedInsufficientFunds",
        json!({}),
    );
    let crashed = pp.pay(key, request.clone()).await;
    assert_eq!(crashed.status, 500, "{}", crashed.body);
    let id = pp.stack.charge_record("alice", key).await.attempt_id;
    assert_eq!(pp.wire.calls(), vec![("create", charge_key(&id))]);
    (id, request)
}

#[tokio::test]
async fn a_refusal_heard_only_by_a_takeover_is_not_believed_until_reconcile_sends_after_the_first_ended(
) {
    // GIVEN an invocation that sent a create PayPal refuses (422 INSTRUMENT_DECLINED) and died
    // before it heard the answer
    let pp = PayPalStack::one_step().await;
    let (id, request) = crash_after_a_refused_create(&pp, "pp-takeover").await;

    // WHEN the client's retry takes the lapsed attempt over and PayPal refuses its create too
    pp.stack.clock.advance(Duration::from_secs(35));
    let from = pp.wire.calls().len();
    let retry = pp.pay("pp-takeover", request.clone()).await;

    // THEN the refusal is not believed (PayPal may fail a request whose id's first still runs,
    // and that first may yet charge): 202 processing, the order still held by the attempt
    assert_eq!(retry.status, 202, "{}", retry.body);
    assert_eq!(retry.json["status"], "processing");
    assert_eq!(payment_id_of(&retry), id);
    assert_eq!(pp.wire.since(from), vec![("create", charge_key(&id))]);
    assert_eq!(
        pp.stack.payment(&id).await.status,
        PaymentStatus::Processing
    );
    assert_eq!(pp.order_state().await, "processing");

    // WHEN reconcile sends the create again once the first has surely ended (20 minutes)
    pp.stack.clock.advance(Duration::from_secs(20 * 60));
    let late = pp.reconcile().await;

    // THEN PayPal's refusal is the payment's decline: failed, the order free, nothing charged
    assert_eq!(
        (late.examined, late.declined, late.errors),
        (1, 1, 0),
        "{late:?}"
    );
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.failure.as_ref().map(|f| f.kind),
            stored
                .failure
                .as_ref()
                .and_then(|f| f.decline_code.as_deref())
        ),
        (
            PaymentStatus::Failed,
            Some(FailureKind::Declined),
            Some("INSTRUMENT_DECLINED")
        )
    );
    assert_eq!(pp.order_state().await, "unpaid");
    assert_eq!(pp.stack.psp.succeeded_charges_for(&id), 0);
    // AND the key replays the decline
    let replay = pp.pay("pp-takeover", request).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/card-declined"),
        "{}",
        replay.body
    );
}

#[tokio::test]
async fn a_refusal_heard_by_a_takeover_long_after_the_holder_died_is_the_payments_decline() {
    // GIVEN an invocation that sent a create PayPal refuses and died before hearing the answer
    let pp = PayPalStack::one_step().await;
    let (id, request) = crash_after_a_refused_create(&pp, "pp-late-takeover").await;

    // WHEN the client's retry takes the attempt over only half an hour later (nothing of the
    // dead holder's call can still run at PayPal) and PayPal refuses the create again
    pp.stack.clock.advance(Duration::from_secs(30 * 60));
    let retry = pp.pay("pp-late-takeover", request).await;

    // THEN the refusal is the payment's decline: 402, failed, the order free for another card
    assert_eq!(
        (retry.status, retry.problem_type()),
        (402, "/problems/card-declined"),
        "{}",
        retry.body
    );
    assert_eq!(payment_id_of(&retry), id);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.failure.as_ref().map(|f| f.kind)),
        (PaymentStatus::Failed, Some(FailureKind::Declined))
    );
    assert_eq!(pp.order_state().await, "unpaid");
    assert_eq!(pp.stack.psp.succeeded_charges_for(&id), 0);
}

#[tokio::test]
async fn a_crash_before_the_order_id_is_stored_is_never_resent_past_paypals_request_id_window() {
    // GIVEN an invocation that died after PayPal charged the vaulted card in the create, before
    // storing the order's id
    let pp = PayPalStack::one_step().await;
    let id = crash_before_the_id_is_stored(&pp, "pp-crash-late").await;

    // WHEN reconcile first runs more than 5 hours later (PayPal keeps request ids 6 hours; a
    // re-send near or past that could make a second order)
    pp.stack.clock.advance(Duration::from_secs(5 * 3600 + 60));
    let report = pp.reconcile().await;

    // THEN nothing is sent: the attempt waits for an operator, the order held, one order at
    // PayPal
    assert_eq!(
        (report.examined, report.pending, report.abandoned),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(pp.wire.calls().len(), 1);
    assert_eq!(
        pp.stack.payment(&id).await.status,
        PaymentStatus::Processing
    );
    assert_eq!(pp.order_state().await, "processing");
    // AND the client's retry (once reconcile's lease on the attempt lapsed) does not send it
    // again either: the state as stored
    pp.stack.clock.advance(Duration::from_secs(61));
    let retry = pp
        .pay_with("pp-crash-late", "pm_card_visa", json!({}))
        .await;
    assert_eq!(
        (retry.status, retry.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        retry.body
    );
    assert_eq!(pp.wire.calls().len(), 1);
    assert_eq!(pp.stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn a_lost_order_capture_answer_is_read_back_and_paypal_captures_once() {
    // GIVEN a PayPal deployment that leaves a vaulted card's order CREATED, and a capture whose
    // answer is lost after PayPal captured the order
    let pp = PayPalStack::two_step().await;
    let request = body(&pp.order, "pm_fake_lost_response", json!({}));
    let first = pp.pay("pp-lost-capture", request.clone()).await;

    // THEN 202 processing: the order id stored, the capture's outcome unknown, the order held
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        first.body
    );
    let id = payment_id_of(&first);
    assert_eq!(
        pp.wire.calls(),
        vec![
            ("create", charge_key(&id)),
            ("capture order", capture_key(&id))
        ]
    );
    let order = pp.order_of(&id);
    assert_captured_once(&order);
    let stored = pp.stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.provider_payment_id.as_deref()),
        (PaymentStatus::Processing, Some(order.id.as_str()))
    );
    assert_eq!(pp.order_state().await, "processing");

    // WHEN the client asks again with the key
    let seen = pp.stack.psp.requests_seen();
    let retry = pp.pay("pp-lost-capture", request.clone()).await;

    // THEN the same answer from the store: nothing is sent again from the request path
    assert_eq!(
        (
            retry.status,
            retry.json["status"].as_str(),
            retry.header("idempotent-replayed")
        ),
        (202, Some("processing"), Some("true")),
        "{}",
        retry.body
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);

    // WHEN reconcile runs once the attempt is old enough
    pp.stack.clock.advance(Duration::from_secs(180));
    let report = pp.reconcile().await;

    // THEN it reads the order by its stored id, captured: succeeded, no capture sent again
    assert_eq!(
        (report.examined, report.succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(pp.wire.since(2), vec![("get order", None)]);
    let order = pp.order_of(&id);
    assert_captured_once(&order);
    assert_eq!(order.captures.len(), 1, "{order:#?}");
    assert_stored_paid(&pp, &id, &order.id).await;
    // AND the client's retry now replays the success, and a second run has nothing to do
    let paid = pp.pay("pp-lost-capture", request).await;
    assert_succeeded(&paid);
    assert_eq!(pp.reconcile().await.examined, 0);
    assert_eq!(pp.wire.calls().len(), 3);
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn an_order_capture_sent_again_after_paypal_forgot_its_request_id_reads_already_captured() {
    // GIVEN a PayPal that forgets request ids after a second (PayPal: 6 hours) and leaves a
    // vaulted card's order CREATED; a capture whose answer was lost after PayPal captured
    let fake = FakePspConfig {
        paypal_one_step_vault: false,
        paypal_request_id_ttl: Duration::from_secs(1),
        ..FakePspConfig::paypal()
    };
    let pp = PayPalStack::start(fake, ChargeConfig::default()).await;
    let first = pp
        .pay_with("pp-forgotten", "pm_fake_lost_response", json!({}))
        .await;
    assert_eq!(first.status, 202, "{}", first.body);
    let id = payment_id_of(&first);
    let payment = pp.stack.payment(&id).await;
    let order_id = payment.provider_payment_id.clone().expect("the order id");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // WHEN the order's capture is sent again, exactly as the charge path sends it
    let from = pp.wire.calls().len();
    let request = OperationRequest {
        kind: OperationKind::Capture,
        payment_id: id.clone(),
        provider_payment_id: order_id.clone(),
        amount: None,
        payment_amount: 1000,
        capture: payonce::domain::CaptureMethod::Automatic,
        currency: Currency::Usd,
        idempotency_key: OperationKind::Capture.psp_key(&id),
    };
    let outcome = pp.psp().operate(&request, Duration::from_secs(5)).await;

    // THEN PayPal refuses it (422 ORDER_ALREADY_CAPTURED: one capture per order) and the order
    // read back says captured: the capture's answer, nothing captured twice
    assert_eq!(
        outcome,
        OperationOutcome::Answered(Settlement::Captured {
            provider_payment_id: order_id.clone(),
            amount_captured: AMOUNT
        })
    );
    assert_eq!(
        pp.wire.since(from),
        vec![("capture order", capture_key(&id)), ("get order", None)]
    );
    let order = pp.order_of(&id);
    assert_captured_once(&order);
    assert_eq!(order.captures.len(), 1, "{order:#?}");

    // AND reconcile settles the payment from the order, sending no capture
    pp.stack.clock.advance(Duration::from_secs(180));
    let from = pp.wire.calls().len();
    let report = pp.reconcile().await;
    assert_eq!((report.examined, report.succeeded), (1, 1), "{report:?}");
    assert_eq!(pp.wire.since(from), vec![("get order", None)]);
    assert_stored_paid(&pp, &id, &order_id).await;
    assert_eq!(pp.stack.psp.charges().len(), 1);
}

#[tokio::test]
async fn paypal_refunds_in_part_then_the_rest_each_once_under_their_request_ids() {
    // GIVEN a PayPal payment of 30.00
    let pp = PayPalStack::one_step().await;
    let id = assert_succeeded(&pp.pay_with("pp-to-refund", "pm_card_visa", json!({})).await);
    let order_id = pp.order_of(&id).id;

    // WHEN staff refund 10.00, then the rest
    let from = pp.wire.calls().len();
    let part = pp.refund(&id, "pp-r1", json!({"amount": 1000})).await;
    let rest = pp.refund(&id, "pp-r2", json!({})).await;

    // THEN each is refunded once from the order's capture, under its own request id
    for (reply, amount) in [(&part, 1000), (&rest, 2000)] {
        assert_eq!(
            (
                reply.status,
                reply.json["status"].as_str(),
                reply.json["amount"].as_i64()
            ),
            (201, Some("succeeded"), Some(amount)),
            "{}",
            reply.body
        );
    }
    assert_eq!(
        pp.wire.since(from),
        vec![
            ("get order", None),
            ("refund", refund_key(&id, 1)),
            ("get order", None),
            ("refund", refund_key(&id, 2)),
        ]
    );
    let refunds = pp.stack.psp.refunds();
    assert_eq!(refunds.len(), 2, "{refunds:#?}");
    for (refund, (reply, amount)) in refunds.iter().zip([(&part, 1000), (&rest, 2000)]) {
        assert_eq!(
            (
                refund.status.as_str(),
                refund.amount,
                refund.payment_intent.as_str(),
                refund.refund_id.as_deref(),
                Some(refund.id.as_str())
            ),
            (
                "COMPLETED",
                amount,
                order_id.as_str(),
                reply.json["refund_id"].as_str(),
                reply.json["provider_refund_id"].as_str()
            )
        );
    }
    // AND the payment reads refunded, nothing left to refund
    let details = pp.stack.get_payment(STAFF, STAFF_SCOPES, &id).await;
    assert_eq!(
        (
            details.json["status"].as_str(),
            details.json["amount_refunded"].as_i64()
        ),
        (Some("refunded"), Some(AMOUNT)),
        "{}",
        details.body
    );
    let seen = pp.stack.psp.requests_seen();
    let nothing = pp.refund(&id, "pp-r3", json!({})).await;
    assert_eq!(
        (nothing.status, nothing.problem_type()),
        (409, "/problems/refund-exceeds-remaining"),
        "{}",
        nothing.body
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    // AND the first key replays its refund from the store
    let replay = pp.refund(&id, "pp-r1", json!({"amount": 1000})).await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    pp.assert_fake_saw_only_the_wire();
}

/// PayPal with faults on its refunds: answers lost after PayPal made the refund
/// (`lose_answers`), or a look at the order's refunds that does not show ours
/// (`hide_refunds`); every other call goes through as it is.
struct RefundFaults<P> {
    inner: P,
    lose_answers: bool,
    hide_refunds: bool,
}

#[async_trait]
impl<P: Psp> Psp for RefundFaults<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> PspKind {
        self.inner.kind()
    }
    fn supports_refunds(&self) -> bool {
        self.inner.supports_refunds()
    }
    fn charge_keys_kept(&self) -> Duration {
        self.inner.charge_keys_kept()
    }
    fn captures_partially(&self) -> bool {
        self.inner.captures_partially()
    }
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        self.inner.create_charge(request, timeout).await
    }
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.inner.lookup(payment_id).await
    }
    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        self.inner.lookup_payment(payment).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.inner.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.inner.cancel(provider_payment_id).await
    }
    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        self.inner.operate(request, timeout).await
    }
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        let answered = self.inner.create_refund(request, timeout).await;
        if self.lose_answers {
            return RefundOutcome::Unknown {
                reason: format!("the answer was lost: {answered:?}"),
            };
        }
        answered
    }
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        if self.hide_refunds {
            return Ok(None);
        }
        self.inner
            .lookup_refund(provider_payment_id, refund_id)
            .await
    }
}

impl PayPalStack {
    /// POST /payments/{id}/refunds as staff under `key`, through a refund function whose
    /// PayPal loses its answers.
    async fn refund_losing_the_answer(&self, payment_id: &str, key: &str, body: Value) -> Reply {
        let losing = self.stack.refunds_with(RefundFaults {
            inner: self.psp(),
            lose_answers: true,
            hide_refunds: false,
        });
        let event = refund_event(
            payment_id,
            Some(STAFF),
            STAFF_SCOPES,
            Some(key),
            &body.to_string(),
        );
        Reply::from(payonce_refund::handler::handle(&losing, &self.operations, event).await)
    }
}

#[tokio::test]
async fn a_lost_refund_answer_sent_again_finds_the_refund_paypal_made_and_posts_nothing() {
    // GIVEN a PayPal payment of 30.00, and a refund of 12.00 whose answer is lost after PayPal
    // made it
    let pp = PayPalStack::one_step().await;
    let id = assert_succeeded(
        &pp.pay_with("pp-lost-refund", "pm_card_visa", json!({}))
            .await,
    );
    let from = pp.wire.calls().len();
    let request = json!({"amount": 1200});
    let lost = pp
        .refund_losing_the_answer(&id, "pp-r-lost", request.clone())
        .await;

    // THEN 202 pending: its outcome unknown, the amount held, though PayPal refunded
    assert_eq!(
        (lost.status, lost.json["status"].as_str()),
        (202, Some("pending")),
        "{}",
        lost.body
    );
    assert_eq!(
        pp.wire.since(from),
        vec![("get order", None), ("refund", refund_key(&id, 1))]
    );
    assert_eq!(pp.stack.psp.refunds().len(), 1);
    assert_eq!(
        pp.stack.refund_attributes(&id).await,
        (None, Some(1200), Some(1))
    );
    let refund_id = lost.json["refund_id"].as_str().unwrap().to_owned();
    // AND staff asking again are answered from the store
    let seen = pp.stack.psp.requests_seen();
    let again = pp.refund(&id, "pp-r-lost", request.clone()).await;
    assert_eq!(
        (again.status, again.header("idempotent-replayed")),
        (202, Some("true")),
        "{}",
        again.body
    );
    assert_eq!(pp.stack.psp.requests_seen(), seen);

    // WHEN reconcile runs, and its look at the order's refunds does not show ours
    pp.stack.clock.advance(Duration::from_secs(180));
    let from = pp.wire.calls().len();
    let report = pp
        .reconcile_with(RefundFaults {
            inner: pp.psp(),
            lose_answers: false,
            hide_refunds: true,
        })
        .await;

    // THEN it sends the refund again, and the re-send finds ours on the order before posting
    // anything (a key PayPal no longer kept could not make a second refund): succeeded, still
    // one refund at PayPal
    assert_eq!(
        (report.refunds_succeeded, report.errors),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(pp.wire.since(from), vec![("get order", None)]);
    let refunds = pp.stack.psp.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:#?}");
    assert_eq!(
        (
            refunds[0].amount,
            refunds[0].status.as_str(),
            refunds[0].refund_id.as_deref()
        ),
        (1200, "COMPLETED", Some(refund_id.as_str()))
    );
    assert_eq!(
        pp.stack.refund_attributes(&id).await,
        (Some(1200), Some(0), Some(1))
    );
    let replay = pp.refund(&id, "pp-r-lost", request).await;
    assert_eq!(
        (
            replay.status,
            replay.json["status"].as_str(),
            replay.json["provider_refund_id"].as_str()
        ),
        (201, Some("succeeded"), Some(refunds[0].id.as_str())),
        "{}",
        replay.body
    );

    // WHEN another refund's answer is lost, and reconcile looks at the order as it is
    let lost = pp
        .refund_losing_the_answer(&id, "pp-r-lost-2", json!({"amount": 800}))
        .await;
    assert_eq!(lost.status, 202, "{}", lost.body);
    pp.stack.clock.advance(Duration::from_secs(180));
    let from = pp.wire.calls().len();
    let report = pp.reconcile().await;

    // THEN it finds the refund among the order's refunds (by our refund id), sending nothing
    assert_eq!(
        (report.refunds_succeeded, report.errors),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(pp.wire.since(from), vec![("get order", None)]);
    assert_eq!(pp.stack.psp.refunds().len(), 2);
    assert_eq!(
        pp.stack.refund_attributes(&id).await,
        (Some(2000), Some(0), Some(2))
    );
    pp.assert_fake_saw_only_the_wire();
}

#[tokio::test]
async fn the_capture_completed_webhook_settles_a_payment_whose_create_answer_was_lost() {
    // GIVEN a PayPal deployment whose charge calls have under a second (the adapter sends a
    // lost create again only with a second left), its webhooks kept
    let charge = ChargeConfig {
        psp_timeout: Duration::from_millis(900),
        ..ChargeConfig::default()
    };
    let pp = PayPalStack::start(FakePspConfig::paypal(), charge).await;
    let sink = pp.stack.webhook_sink().await;

    // WHEN PayPal charges the vaulted card in the create and its answer is lost
    let first = pp
        .pay_with("pp-lost-webhook", "pm_fake_lost_response", json!({}))
        .await;

    // THEN 202 processing: no order id known, the order held, PayPal captured
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        first.body
    );
    let id = payment_id_of(&first);
    assert_eq!(pp.wire.calls(), vec![("create", charge_key(&id))]);
    assert_eq!(pp.stack.payment(&id).await.provider_payment_id, None);
    assert_eq!(pp.order_state().await, "processing");
    let order = pp.order_of(&id);
    assert_captured_once(&order);

    // WHEN PayPal's PAYMENT.CAPTURE.COMPLETED is received and processed
    let completed = webhooks_of(&sink, 1, "PAYMENT.CAPTURE.COMPLETED", &id).await;
    let seen = pp.stack.psp.requests_seen();
    let processed = receive_and_process(&pp, &completed[0]).await;

    // THEN it settles the payment succeeded under the order its capture names, the order
    // paid, without any call to PayPal
    assert!(
        matches!(processed, Processed::Applied(EventApplied::Moved(_))),
        "{processed:?}"
    );
    assert_stored_paid(&pp, &id, &order.id).await;
    assert_eq!(pp.stack.psp.requests_seen(), seen);
    // AND the same delivery again is a duplicate, and reconcile finds nothing to do
    let again = receive_and_process(&pp, &completed[0]).await;
    assert!(
        matches!(
            again,
            Processed::Applied(EventApplied::Duplicate | EventApplied::Unchanged(_))
        ),
        "{again:?}"
    );
    pp.stack.clock.advance(Duration::from_secs(180));
    assert_eq!(pp.reconcile().await.examined, 0);
    assert_eq!(pp.wire.calls().len(), 1);
    // AND the client's retry replays the success
    let replay = pp
        .pay_with("pp-lost-webhook", "pm_fake_lost_response", json!({}))
        .await;
    assert_eq!(
        (replay.status, replay.json["provider_payment_id"].as_str()),
        (201, Some(order.id.as_str())),
        "{}",
        replay.body
    );
    pp.assert_fake_saw_only_the_wire();
}
