//! `PaymentStack`: the charge, orders and refund handlers over fresh tables in DynamoDB Local,
//! the adapter of the fake PSP's face (Stripe by default, or Omise or 2C2P) talking HTTP to it on
//! loopback, that PSP's webhook schemes, a manual clock, and helpers that feed API Gateway v2
//! events (with the JWT's scopes) and read what was persisted.

use crate::lost_answers::LostAnswers;
use crate::{dynamodb_client, dynamodb_client_losing, unique_table};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use lambda_http::{Body, Request, Response};
use payonce::adapters::dynamodb::{
    create_idempotency_table, create_payments_table, DynamoIdempotencyStore, DynamoPaymentStore,
    RequestCounter, Tables,
};
use payonce::adapters::memory::MemoryQueue;
use payonce::adapters::psp::{
    ConfiguredPsp, OmiseConfig, OmisePsp, ParseOnlyWebhooks, PayPalConfig, PayPalPsp, SquareConfig,
    SquarePsp, StripeConfig, StripePsp, StripeWebhooks, TwoC2pConfig, TwoC2pPsp,
};
use payonce::clock::{system_clock, Clock, ManualClock};
use payonce::config::{webhook_parsers_for, webhook_providers_for, PspKind, PspSecrets};
use payonce::domain::{Currency, LineItem, Order, OrderPaymentState, PaymentView};
use payonce::idempotency::{
    Idempotency, IdempotencyConfig, IdempotencyRecord, RecordKey, RecordState,
};
use payonce::ports::{ChargeStore, OrderStore, Psp, QueueReceive, QueueSend};
use payonce::service::reconcile::{ReconcileConfig, ReconcileReport, Reconciler};
use payonce::service::reconcile_soon::QueuedRequests;
use payonce::service::webhooks::{
    ProcessError, Processed, ProcessorConfig, Providers, QueuedEvent, WebhookProcessor,
    WebhookReceiver,
};
use payonce::service::{
    ChargeConfig, ChargeService, OperationConfig, OperationService, OrderService, RefundConfig,
    RefundService, CAPTURE_OAUTH_SCOPE, REFUND_OAUTH_SCOPE,
};
use payonce_fake_psp::{
    FakePsp, FakePspConfig, Provider, RunningFakePsp, DEFAULT_OMISE_WEBHOOK_SECRET,
    DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_PAYPAL_WEBHOOK_ID, DEFAULT_SQUARE_SIGNATURE_KEY,
    DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_WEBHOOK_SECRET,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The API key the fake PSP and the adapter share in tests.
pub const FAKE_API_KEY: &str = "sk_test_payonce_fake";

/// The user behind the staff token of these tests: it carries the `payments:refund` and
/// `payments:capture` scopes.
pub const STAFF: &str = "staff-1";

/// The scopes of a staff token: refunds, captures and cancels, and reading any user's payment.
pub const STAFF_SCOPES: &[&str] = &[REFUND_OAUTH_SCOPE, CAPTURE_OAUTH_SCOPE];

/// Everything a payment test talks to.
pub struct PaymentStack {
    /// POST /payments, GET /payments/{id}, through the adapter of the fake PSP's face.
    pub charge: ChargeService<DynamoPaymentStore, ConfiguredPsp>,
    /// /orders.
    pub orders: OrderService<DynamoPaymentStore, DynamoIdempotencyStore>,
    /// POST /payments/{payment_id}/refunds, through the adapter of the fake PSP's face.
    pub refunds: RefundService<DynamoPaymentStore, ConfiguredPsp>,
    /// POST /payments/{payment_id}/capture and /cancel.
    pub operations: OperationService<DynamoPaymentStore, ConfiguredPsp>,
    /// The webhook processor over the same store, reading the face's events as the deployed
    /// processor reads them (see [`webhook_schemes`]).
    pub processor: WebhookProcessor<DynamoPaymentStore>,
    /// The processor's requests to reconcile a payment now (a PSP's approval waiting for
    /// payonce's capture); [`PaymentStack::reconcile_requested`] serves them.
    pub reconcile_requests: MemoryQueue,
    /// The receiver's (verifying) webhook providers of the face (see [`webhook_schemes`]).
    pub providers: Providers,
    /// The provider name the face's webhooks arrive under (`/webhooks/{name}`), which also
    /// names their dedup records (`webhook#<name>#<event id>`): `fake` for the Stripe face,
    /// `omise` and `2c2p` for the others.
    pub webhook_provider: &'static str,
    /// The fake PSP, over HTTP.
    pub psp: RunningFakePsp,
    /// The clock every store reads.
    pub clock: Arc<ManualClock>,
    /// Counts the requests of the handlers' DynamoDB client.
    pub counter: RequestCounter,
    /// Loses the answers of the handlers' DynamoDB client it is armed to lose.
    pub lost_answers: LostAnswers,
    /// The table names.
    pub tables: Tables,
    inspector: Client,
}

/// The origin of the test checkout: a `return_url` on it is allowed.
pub const CHECKOUT_ORIGIN: &str = "https://shop.example";

/// A persisted table, item by item (keyed by `pk`), for "nothing changed" assertions.
pub type TableSnapshot = BTreeMap<String, BTreeMap<String, String>>;

impl PaymentStack {
    /// A stack with default settings.
    pub async fn start() -> Self {
        Self::start_with(FakePspConfig::default(), ChargeConfig::default()).await
    }

    /// A stack with these fake PSP and charge settings.
    pub async fn start_with(psp_config: FakePspConfig, charge_config: ChargeConfig) -> Self {
        Self::start_full(psp_config, charge_config, RefundConfig::default()).await
    }

    /// A stack with these fake PSP, charge and refund settings.
    pub async fn start_full(
        psp_config: FakePspConfig,
        charge_config: ChargeConfig,
        refund_config: RefundConfig,
    ) -> Self {
        let psp = start_fake_psp(psp_config).await;
        let counter = RequestCounter::new();
        let lost_answers = LostAnswers::default();
        let client = dynamodb_client_losing(&counter, &lost_answers);
        let tables = Tables {
            idempotency: unique_table("idem"),
            payments: unique_table("pay"),
        };
        create_idempotency_table(&client, &tables.idempotency)
            .await
            .expect("create the idempotency table");
        create_payments_table(&client, &tables.payments)
            .await
            .expect("create the payments table");
        counter.reset();
        let clock = ManualClock::at_system_time();
        let store =
            DynamoPaymentStore::new(client.clone(), tables.clone()).with_clock(clock.clone());
        // The test checkout's origin is always one of the checkout origins, as the sandbox's
        // own is.
        let mut charge_config = charge_config;
        charge_config
            .checkout_origins
            .push(CHECKOUT_ORIGIN.to_owned());
        let charge = ChargeService::new(store.clone(), psp_for(&psp), charge_config);
        let refunds = RefundService::new(store.clone(), psp_for(&psp), refund_config);
        let operations =
            OperationService::new(store.clone(), psp_for(&psp), OperationConfig::default());
        let idempotency = Idempotency::new(
            DynamoIdempotencyStore::new(client, &tables.idempotency).with_clock(clock.clone()),
            IdempotencyConfig::default(),
        );
        // Orders are checked against the charge limits of the PSP that charges them.
        let orders = OrderService::new(store.clone(), idempotency).for_psp(charge.psp().kind());
        let (providers, parsers, webhook_provider) = webhook_schemes_of(&psp);
        let reconcile_requests = MemoryQueue::new(clock.clone(), 1024);
        Self {
            charge,
            processor: WebhookProcessor::new(store.clone(), parsers, ProcessorConfig::default())
                .with_reconcile_soon(Arc::new(QueuedRequests(reconcile_requests.clone()))),
            reconcile_requests,
            providers,
            webhook_provider,
            refunds,
            operations,
            orders,
            psp,
            clock,
            counter,
            lost_answers,
            tables,
            inspector: dynamodb_client(&RequestCounter::new()),
        }
    }

    /// A reconcile job over this stack's stores, clock and PSP.
    pub fn reconciler(
        &self,
        config: ReconcileConfig,
    ) -> Reconciler<DynamoPaymentStore, ConfiguredPsp> {
        Reconciler::new(self.charge.store().clone(), psp_for(&self.psp), config)
    }

    /// One reconcile run with the default settings; it must not fail.
    pub async fn reconcile(&self) -> ReconcileReport {
        self.reconciler(ReconcileConfig::default())
            .run()
            .await
            .expect("the reconcile run")
    }

    /// Serves the processor's reconcile requests as the reconcile function's SQS trigger does,
    /// with the default settings: each request taken off the queue and its payment reconciled.
    pub async fn reconcile_requested(&self) -> ReconcileReport {
        let messages = self
            .reconcile_requests
            .receive(10, Duration::from_secs(720))
            .await
            .expect("the request queue");
        let report = self
            .reconciler(ReconcileConfig::default())
            .reconcile_requested(messages.iter().map(|m| m.body.as_str()))
            .await;
        for message in &messages {
            self.reconcile_requests
                .delete(&message.receipt_handle)
                .await
                .expect("delete the request");
        }
        report
    }

    /// The charge record of `key` for `user`, as stored.
    pub async fn charge_record(&self, user: &str, key: &str) -> IdempotencyRecord {
        let key_record = RecordKey::from_stored(format!("payments.create#{user}#{key}"));
        self.charge
            .store()
            .charge_record(&key_record)
            .await
            .expect("read the record")
            .unwrap_or_else(|| panic!("no record for {key}"))
    }

    /// The idempotency store on this stack's table and clock (uncounted client).
    pub fn records(&self) -> DynamoIdempotencyStore {
        DynamoIdempotencyStore::new(self.inspector.clone(), &self.tables.idempotency)
            .with_clock(self.clock.clone())
    }

    /// The DynamoDB client that is not counted (for set-up and inspection).
    pub fn inspector(&self) -> &Client {
        &self.inspector
    }

    /// Sends an event to the charge function.
    pub async fn charge_request(&self, request: Request) -> Reply {
        Reply::from(payonce_charge::handler::handle(&self.charge, request).await)
    }

    /// The charge function over this stack's store, but with a PSP it cannot connect to: the
    /// adapter of the fake's face pointed at a closed loopback port (an invocation cut off from
    /// the PSP).
    pub fn cut_off_charge(&self) -> ChargeService<DynamoPaymentStore, ConfiguredPsp> {
        self.charge_with(cut_off_psp_for(self.psp.provider()))
    }

    /// The charge function over this stack's store and charge settings, but calling `psp`.
    pub fn charge_with<P: Psp>(&self, psp: P) -> ChargeService<DynamoPaymentStore, P> {
        ChargeService::new(
            self.charge.store().clone(),
            psp,
            self.charge.config().clone(),
        )
    }

    /// A webhook receiver with this stack's (verifying) providers on the real clock (the fake
    /// PSP signs with the time of sending), enqueueing to `queue`.
    pub fn receiver<Q: QueueSend>(&self, queue: Q) -> WebhookReceiver<Q> {
        WebhookReceiver::new(self.providers.clone(), queue, system_clock())
    }

    /// POST /payments as `user` with `key` and `body`, handled by `service` (e.g.
    /// [`PaymentStack::cut_off_charge`]) instead of this stack's charge function.
    pub async fn pay_through<P: Psp>(
        &self,
        service: &ChargeService<DynamoPaymentStore, P>,
        user: &str,
        key: &str,
        body: Value,
    ) -> Reply {
        let event = api_event(
            "POST",
            "/payments",
            Some(user),
            &[("idempotency-key", key)],
            &body.to_string(),
        );
        Reply::from(payonce_charge::handler::handle(service, event).await)
    }

    /// Stores an unpaid order of `user` for `amount` minor units of `currency` straight into the
    /// payments table, past the orders API's checks (e.g. below the PSP's minimum); returns its id.
    pub async fn store_order(&self, user: &str, currency: Currency, amount: i64) -> String {
        let now_ms = self.clock.now_ms();
        let order = Order {
            order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
            owner: user.to_owned(),
            version: 1,
            currency,
            items: vec![LineItem {
                sku: "A1".into(),
                quantity: 1,
                unit_amount: amount,
            }],
            amount,
            payment_state: OrderPaymentState::Unpaid,
            payment_id: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        };
        self.charge
            .store()
            .create_order(&order)
            .await
            .expect("store the order");
        order.order_id
    }

    /// Sends an event to the orders function.
    pub async fn orders_request(&self, request: Request) -> Reply {
        Reply::from(payonce_orders::handler::handle(&self.orders, request).await)
    }

    /// POST /payments as `user` with `key` and `body`.
    pub async fn pay(&self, user: &str, key: &str, body: Value) -> Reply {
        self.charge_request(api_event(
            "POST",
            "/payments",
            Some(user),
            &[("idempotency-key", key)],
            &body.to_string(),
        ))
        .await
    }

    /// POST /orders as `user` with `body`, without an Idempotency-Key.
    pub async fn post_order(&self, user: &str, body: &Value) -> Reply {
        self.orders_request(api_event(
            "POST",
            "/orders",
            Some(user),
            &[],
            &body.to_string(),
        ))
        .await
    }

    /// Creates an order of 2 × 1500 JPY for `user`; returns its id.
    pub async fn create_order(&self, user: &str) -> String {
        self.create_order_of(user, Currency::Jpy, 2, 1500).await
    }

    /// Creates an order of `quantity` × `unit_amount` minor units of `currency` for `user`
    /// through the orders API (asserting 201); returns its id.
    pub async fn create_order_of(
        &self,
        user: &str,
        currency: Currency,
        quantity: i64,
        unit_amount: i64,
    ) -> String {
        let body = json!({"currency": currency.as_str(), "items": [{"sku": "A1", "quantity": quantity, "unit_amount": unit_amount}]});
        let reply = self.post_order(user, &body).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json["order_id"]
            .as_str()
            .expect("order_id")
            .to_owned()
    }

    /// GET /orders/{id} as `user`.
    pub async fn get_order(&self, user: &str, order_id: &str) -> Reply {
        self.orders_request(api_event(
            "GET",
            &format!("/orders/{order_id}"),
            Some(user),
            &[],
            "",
        ))
        .await
    }

    /// Every item of both tables, read consistently through an uncounted client.
    pub async fn snapshot(&self) -> (TableSnapshot, TableSnapshot) {
        (
            self.scan(&self.tables.idempotency).await,
            self.scan(&self.tables.payments).await,
        )
    }

    async fn scan(&self, table: &str) -> TableSnapshot {
        let mut out = TableSnapshot::new();
        let mut start = None;
        loop {
            let page = self
                .inspector
                .scan()
                .table_name(table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("scan");
            for item in page.items() {
                let pk = match item.get("pk") {
                    Some(AttributeValue::S(pk)) => pk.clone(),
                    _ => String::new(),
                };
                out.insert(
                    pk,
                    item.iter()
                        .map(|(k, v)| (k.clone(), format!("{v:?}")))
                        .collect(),
                );
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return out;
            }
        }
    }

    /// The raw payments-table item with this `pk` (e.g. `order#ord_…`).
    pub async fn item(&self, pk: &str) -> Option<BTreeMap<String, String>> {
        self.scan(&self.tables.payments).await.remove(pk)
    }
}

impl PaymentStack {
    /// Sends an event to the refund function.
    pub async fn refund_request(&self, request: Request) -> Reply {
        Reply::from(payonce_refund::handler::handle(&self.refunds, &self.operations, request).await)
    }

    /// POST /payments/{payment_id}/refunds with a staff token ([`STAFF`], `payments:refund`),
    /// under `key`, with `body`.
    pub async fn refund(&self, payment_id: &str, key: &str, body: Value) -> Reply {
        self.refund_request(refund_event(
            payment_id,
            Some(STAFF),
            STAFF_SCOPES,
            Some(key),
            &body.to_string(),
        ))
        .await
    }

    /// The refund function over this stack's store and refund settings, but calling `psp`.
    pub fn refunds_with<P: Psp>(&self, psp: P) -> RefundService<DynamoPaymentStore, P> {
        RefundService::new(
            self.charge.store().clone(),
            psp,
            self.refunds.config().clone(),
        )
    }

    /// POST /payments/{payment_id}/refunds as staff, handled by `service` (e.g. one built with
    /// [`PaymentStack::refunds_with`]) instead of this stack's refund function.
    pub async fn refund_through<P: Psp>(
        &self,
        service: &RefundService<DynamoPaymentStore, P>,
        payment_id: &str,
        key: &str,
        body: Value,
    ) -> Reply {
        let event = refund_event(
            payment_id,
            Some(STAFF),
            STAFF_SCOPES,
            Some(key),
            &body.to_string(),
        );
        Reply::from(payonce_refund::handler::handle(service, &self.operations, event).await)
    }

    /// POST /payments/{payment_id}/capture as staff ([`STAFF`]) under `key`, with `body`.
    pub async fn capture(&self, payment_id: &str, key: &str, body: Value) -> Reply {
        self.operate(
            STAFF,
            STAFF_SCOPES,
            payment_id,
            "capture",
            key,
            &body.to_string(),
        )
        .await
    }

    /// POST /payments/{payment_id}/cancel as `sub` with `scopes`, under `key`, no body.
    pub async fn cancel(&self, sub: &str, scopes: &[&str], payment_id: &str, key: &str) -> Reply {
        self.operate(sub, scopes, payment_id, "cancel", key, "")
            .await
    }

    /// `POST /payments/{payment_id}/<operation>` (`capture`, `cancel`) as `sub` with `scopes`.
    pub async fn operate(
        &self,
        sub: &str,
        scopes: &[&str],
        payment_id: &str,
        operation: &str,
        key: &str,
        body: &str,
    ) -> Reply {
        self.refund_request(scoped_api_event(
            "POST",
            &format!("/payments/{payment_id}/{operation}"),
            Some(sub),
            scopes,
            &[("idempotency-key", key)],
            body,
        ))
        .await
    }

    /// The capture and cancel service over this stack's store, but calling `psp`.
    pub fn operations_with<P: Psp>(&self, psp: P) -> OperationService<DynamoPaymentStore, P> {
        OperationService::new(self.charge.store().clone(), psp, OperationConfig::default())
    }

    /// A capture (`body`) as staff under `key`, handled by `service` instead of this stack's.
    pub async fn capture_through<P: Psp>(
        &self,
        service: &OperationService<DynamoPaymentStore, P>,
        payment_id: &str,
        key: &str,
        body: Value,
    ) -> Reply {
        let event = scoped_api_event(
            "POST",
            &format!("/payments/{payment_id}/capture"),
            Some(STAFF),
            STAFF_SCOPES,
            &[("idempotency-key", key)],
            &body.to_string(),
        );
        Reply::from(payonce_refund::handler::handle(&self.refunds, service, event).await)
    }

    /// A new order of `user` (2 × 1500 JPY) authorized under `key` for a manual capture:
    /// asserts 201 `authorized` and returns the payment's id.
    pub async fn authorized_payment(&self, user: &str, key: &str) -> String {
        let order = self.create_order(user).await;
        let body = json!({"order_id": order, "order_version": 1,
                          "payment_method": "pm_card_visa", "capture": "manual"});
        let reply = self.pay(user, key, body).await;
        assert_eq!(
            (reply.status, reply.json["status"].as_str()),
            (201, Some("authorized")),
            "{}",
            reply.body
        );
        reply.json["payment_id"]
            .as_str()
            .expect("payment_id")
            .to_owned()
    }

    /// GET /payments/{payment_id} as `sub` with `scopes`.
    pub async fn get_payment(&self, sub: &str, scopes: &[&str], payment_id: &str) -> Reply {
        self.charge_request(scoped_api_event(
            "GET",
            &format!("/payments/{payment_id}"),
            Some(sub),
            scopes,
            &[],
            "",
        ))
        .await
    }

    /// A new order of `user` (2 × 1500 JPY) paid with `payment_method` under `key`: asserts
    /// 201 and returns the payment's id.
    pub async fn paid_payment(&self, user: &str, key: &str, payment_method: &str) -> String {
        let order = self.create_order(user).await;
        self.pay_order(user, key, &order, payment_method).await
    }

    /// Pays `order` (version 1) with `payment_method` under `key`: asserts 201 and returns the
    /// payment's id.
    pub async fn pay_order(
        &self,
        user: &str,
        key: &str,
        order: &str,
        payment_method: &str,
    ) -> String {
        let body = json!({"order_id": order, "order_version": 1, "payment_method": payment_method});
        let reply = self.pay(user, key, body).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json["payment_id"]
            .as_str()
            .expect("payment_id")
            .to_owned()
    }

    /// The payment as stored (consistent read).
    pub async fn payment(&self, payment_id: &str) -> payonce::domain::Payment {
        self.charge
            .store()
            .get_payment(payment_id)
            .await
            .expect("read the payment")
            .unwrap_or_else(|| panic!("no payment {payment_id}"))
    }

    /// The payment's raw refund attributes as stored: (`refunded`, `refund_pending`,
    /// `refund_count`), each `None` while absent.
    pub async fn refund_attributes(
        &self,
        payment_id: &str,
    ) -> (Option<i64>, Option<i64>, Option<i64>) {
        let item = self
            .item(&format!("payment#{payment_id}"))
            .await
            .unwrap_or_else(|| panic!("no payment item {payment_id}"));
        (
            number_attribute(&item, "refunded"),
            number_attribute(&item, "refund_pending"),
            number_attribute(&item, "refund_count"),
        )
    }

    /// Every refund item (`refund#rfd_...`) of `payment_id`, by `pk`, as stored.
    pub async fn refund_items(&self, payment_id: &str) -> TableSnapshot {
        let stem = payment_id.strip_prefix("pay_").unwrap_or(payment_id);
        let prefix = format!("refund#rfd_{stem}_");
        self.scan(&self.tables.payments)
            .await
            .into_iter()
            .filter(|(pk, _)| pk.starts_with(&prefix))
            .collect()
    }

    /// The refund idempotency record of `key` for `user`, if one is stored (expired or not).
    pub async fn refund_record(&self, user: &str, key: &str) -> Option<IdempotencyRecord> {
        self.records()
            .get_including_expired(&RecordKey::from_stored(format!(
                "{}#{user}#{key}",
                payonce::service::refund::REFUND_SCOPE
            )))
            .await
            .expect("read the record")
    }

    /// Starts a [`WebhookSink`](crate::webhook_sink::WebhookSink) and points the fake PSP's
    /// webhooks at it: verified with the Stripe scheme on the Stripe face, kept as they come on
    /// the others (whose bodies the processor reads and verifies itself).
    pub async fn webhook_sink(&self) -> crate::webhook_sink::WebhookSink {
        let sink = match self.psp.provider() {
            payonce_fake_psp::Provider::Stripe => crate::webhook_sink::WebhookSink::start().await,
            _ => crate::webhook_sink::WebhookSink::start_keeping_all().await,
        };
        self.psp.set_webhook_url(Some(sink.url()));
        sink
    }

    /// Hands `body` to the webhook processor as a queued event of the face's provider
    /// ([`PaymentStack::webhook_provider`]: `fake` for the Stripe face).
    pub async fn deliver(&self, body: &str) -> Result<Processed, ProcessError> {
        self.processor
            .process(&QueuedEvent {
                message_id: "m-test",
                provider: Some(self.webhook_provider),
                body,
            })
            .await
    }
}

/// A stored number attribute (`N("...")` in a [`TableSnapshot`] item), `None` if absent.
pub fn number_attribute(item: &BTreeMap<String, String>, name: &str) -> Option<i64> {
    item.get(name).map(|raw| {
        raw.strip_prefix("N(\"")
            .and_then(|rest| rest.strip_suffix("\")"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} is not a number: {raw}"))
    })
}

/// A stored string attribute (`S("...")` in a [`TableSnapshot`] item), `None` if absent.
pub fn string_attribute(item: &BTreeMap<String, String>, name: &str) -> Option<String> {
    item.get(name).map(|raw| {
        raw.strip_prefix("S(\"")
            .and_then(|rest| rest.strip_suffix("\")"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{name} is not a string: {raw}"))
    })
}

/// POST /payments/{payment_id}/refunds as `sub` with `scopes`, under `key` (none: no header).
pub fn refund_event(
    payment_id: &str,
    sub: Option<&str>,
    scopes: &[&str],
    key: Option<&str>,
    body: &str,
) -> Request {
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    scoped_api_event(
        "POST",
        &format!("/payments/{payment_id}/refunds"),
        sub,
        scopes,
        &headers,
        body,
    )
}

/// A fake PSP on a free loopback port, with the API key and webhook secret the tests share (the
/// face's default secret: an Omise face signs with a base64 one; a 2C2P face's merchant secret
/// key is the API key, and it signs its notifications with it).
pub async fn start_fake_psp(mut config: FakePspConfig) -> RunningFakePsp {
    config.api_key = FAKE_API_KEY.into();
    config.webhook_secret = match config.provider {
        Provider::Stripe | Provider::TwoC2p => DEFAULT_WEBHOOK_SECRET.into(),
        Provider::Omise => DEFAULT_OMISE_WEBHOOK_SECRET.into(),
        Provider::Square => DEFAULT_SQUARE_SIGNATURE_KEY.into(),
        // PayPal signs with its RSA key; the secret is unused.
        Provider::PayPal => DEFAULT_WEBHOOK_SECRET.into(),
    };
    FakePsp::start(config, "127.0.0.1:0".parse().expect("loopback address"))
        .await
        .expect("start the fake PSP")
}

/// A loopback URL nothing listens on (the port was bound, then let go).
fn closed_url() -> String {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.local_addr().expect("local address")
    };
    format!("http://{closed}")
}

/// The Stripe adapter pointed at a closed loopback port: every call fails to connect (an
/// invocation cut off from the PSP).
pub fn cut_off_psp() -> StripePsp {
    let mut stripe = StripeConfig::new(closed_url(), FAKE_API_KEY);
    stripe.connect_timeout = Duration::from_secs(1);
    StripePsp::new(stripe).expect("HTTP client")
}

/// The adapter of `provider` pointed at a closed loopback port: every call fails to connect.
pub fn cut_off_psp_for(provider: Provider) -> ConfiguredPsp {
    adapter_at(provider, &closed_url(), FAKE_API_KEY)
}

/// The adapter of the face `psp` speaks ([`stripe_for`], [`omise_for`] or [`twoc2p_for`]), as
/// the one PSP of a deployment.
pub fn psp_for(psp: &RunningFakePsp) -> ConfiguredPsp {
    match psp.provider() {
        Provider::Stripe => ConfiguredPsp::Stripe(stripe_for(psp)),
        Provider::Omise => ConfiguredPsp::Omise(omise_for(psp)),
        Provider::TwoC2p => ConfiguredPsp::TwoC2p(twoc2p_for(psp)),
        Provider::Square => ConfiguredPsp::Square(square_for(psp)),
        Provider::PayPal => ConfiguredPsp::PayPal(paypal_for(psp)),
    }
}

/// The adapter of `provider` at `base_url` (1 s to connect, 5 s per request) with `secret`:
/// Stripe's API key, Omise's secret key, or the 2C2P merchant's secret key (merchant
/// `DEFAULT_TWOC2P_MERCHANT_ID`).
pub fn adapter_at(provider: Provider, base_url: &str, secret: &str) -> ConfiguredPsp {
    let (connect, request) = (Duration::from_secs(1), Duration::from_secs(5));
    match provider {
        Provider::Stripe => {
            let mut config = StripeConfig::new(base_url, secret);
            (config.connect_timeout, config.request_timeout) = (connect, request);
            ConfiguredPsp::Stripe(StripePsp::new(config).expect("HTTP client"))
        }
        Provider::Omise => {
            let mut config = OmiseConfig::new(secret).with_base_url(base_url);
            (config.connect_timeout, config.request_timeout) = (connect, request);
            ConfiguredPsp::Omise(OmisePsp::new(config).expect("HTTP client"))
        }
        Provider::TwoC2p => {
            let mut config = TwoC2pConfig::new(base_url, DEFAULT_TWOC2P_MERCHANT_ID, secret);
            (config.connect_timeout, config.request_timeout) = (connect, request);
            ConfiguredPsp::TwoC2p(TwoC2pPsp::new(config).expect("HTTP client"))
        }
        Provider::Square => {
            let mut config = SquareConfig::new(secret).with_base_url(base_url);
            (config.connect_timeout, config.request_timeout) = (connect, request);
            ConfiguredPsp::Square(SquarePsp::new(config).expect("HTTP client"))
        }
        Provider::PayPal => {
            let mut config =
                PayPalConfig::new(DEFAULT_PAYPAL_CLIENT_ID, secret).with_base_url(base_url);
            (config.connect_timeout, config.request_timeout) = (connect, request);
            ConfiguredPsp::PayPal(PayPalPsp::new(config).expect("HTTP client"))
        }
    }
}

/// The Stripe adapter over HTTP to `psp` (1 s to connect, 5 s per request).
pub fn stripe_for(psp: &RunningFakePsp) -> StripePsp {
    let mut stripe = StripeConfig::new(psp.base_url(), FAKE_API_KEY);
    stripe.connect_timeout = Duration::from_secs(1);
    stripe.request_timeout = Duration::from_secs(5);
    StripePsp::new(stripe).expect("HTTP client")
}

/// The Omise adapter over HTTP to `psp`, which must speak the Omise face (1 s to connect, 5 s
/// per request).
pub fn omise_for(psp: &RunningFakePsp) -> OmisePsp {
    let mut omise = OmiseConfig::new(FAKE_API_KEY).with_base_url(psp.base_url());
    omise.connect_timeout = Duration::from_secs(1);
    omise.request_timeout = Duration::from_secs(5);
    OmisePsp::new(omise).expect("HTTP client")
}

/// The 2C2P adapter over HTTP to `psp`, which must speak the 2C2P face as [`start_fake_psp`]
/// starts it (merchant `DEFAULT_TWOC2P_MERCHANT_ID`, secret key `FAKE_API_KEY`; 1 s to connect,
/// 5 s per request), with the Payment Maintenance keys the fake generated: it refunds. For an
/// account that settles manually when the fake's is one (`twoc2p_manual_settlement`), as a
/// deployment states it with `TWOC2P_SETTLEMENT=manual`.
pub fn twoc2p_for(psp: &RunningFakePsp) -> TwoC2pPsp {
    let mut config = twoc2p_config(psp).with_maintenance(twoc2p_maintenance_for(psp));
    config.manual_settlement = psp.twoc2p_manual_settlement();
    TwoC2pPsp::new(config).expect("HTTP client")
}

/// [`twoc2p_for`] without the maintenance keys: 2C2P refunds are not supported.
pub fn twoc2p_without_refunds_for(psp: &RunningFakePsp) -> TwoC2pPsp {
    TwoC2pPsp::new(twoc2p_config(psp)).expect("HTTP client")
}

fn twoc2p_config(psp: &RunningFakePsp) -> TwoC2pConfig {
    let mut twoc2p = TwoC2pConfig::new(psp.base_url(), DEFAULT_TWOC2P_MERCHANT_ID, FAKE_API_KEY);
    twoc2p.connect_timeout = Duration::from_secs(1);
    twoc2p.request_timeout = Duration::from_secs(5);
    twoc2p
}

/// The 2C2P maintenance API of `psp` (its action URL) with the keys it generated.
pub fn twoc2p_maintenance_for(
    psp: &RunningFakePsp,
) -> payonce::adapters::psp::twoc2p::MaintenanceConfig {
    let keys = psp.twoc2p_keys().expect("the 2C2P face's maintenance keys");
    payonce::adapters::psp::twoc2p::MaintenanceConfig {
        action_url: keys.action_url,
        merchant_private_key: keys
            .merchant_private_key_pkcs8
            .expect("the merchant's key, generated by the fake"),
        twoc2p_public_key: keys.twoc2p_public_key_spki,
    }
}

/// The Square adapter over HTTP to `psp`, which must speak the Square face (1 s to connect, 5 s
/// per request; Square's main location).
pub fn square_for(psp: &RunningFakePsp) -> SquarePsp {
    let mut square = SquareConfig::new(FAKE_API_KEY).with_base_url(psp.base_url());
    square.connect_timeout = Duration::from_secs(1);
    square.request_timeout = Duration::from_secs(5);
    SquarePsp::new(square).expect("HTTP client")
}

/// The PayPal adapter over HTTP to `psp`, which must speak the PayPal face (its client id, the
/// shared secret; 1 s to connect, 5 s per request).
pub fn paypal_for(psp: &RunningFakePsp) -> PayPalPsp {
    let mut paypal =
        PayPalConfig::new(DEFAULT_PAYPAL_CLIENT_ID, FAKE_API_KEY).with_base_url(psp.base_url());
    paypal.connect_timeout = Duration::from_secs(1);
    paypal.request_timeout = Duration::from_secs(5);
    PayPalPsp::new(paypal).expect("HTTP client")
}

/// The notification URL the receivers of the Square tests verify against (the fake signs over
/// the URL it posts to: tests that verify point it here or sign themselves).
pub const SQUARE_NOTIFICATION_URL: &str = "http://127.0.0.1/webhooks/square";

/// The webhook secret of the `stripe` provider in tests.
pub const STRIPE_WEBHOOK_SECRET: &str = "whsec_test_stripe_payonce";

/// The webhook schemes of a stack on `provider`'s face: the receiver's (verifying) providers, the
/// processor's (reading) providers, and the provider name the face's webhooks arrive under.
///
/// - Stripe: [`webhook_providers`] (`fake` with the fake's secret, and `stripe`) for the
///   receiver, read-only Stripe schemes under the same names for the processor; deliveries
///   arrive under `fake`.
/// - Omise and 2C2P: exactly what a deployment with `PSP=omise` / `PSP=2c2p` builds
///   (`webhook_providers_for`, `webhook_parsers_for`) from the secrets the fake shares (Omise: its
///   base64 webhook secret; 2C2P: the merchant id and secret key, which also reads the
///   processor's notifications); deliveries arrive under `omise` / `2c2p`.
pub fn webhook_schemes(provider: Provider) -> (Providers, Providers, &'static str) {
    let kind = match provider {
        Provider::PayPal => panic!("PayPal's receiver needs the running fake: webhook_schemes_of"),
        Provider::Stripe => {
            let parsers = Providers::new()
                .with(ParseOnlyWebhooks::stripe("stripe"))
                .with(ParseOnlyWebhooks::stripe("fake"));
            return (webhook_providers(), parsers, "fake");
        }
        Provider::Omise => PspKind::Omise,
        Provider::TwoC2p => PspKind::TwoC2p,
        Provider::Square => PspKind::Square,
    };
    let secrets = PspSecrets {
        secret_key: Some(FAKE_API_KEY.into()),
        merchant_id: Some(DEFAULT_TWOC2P_MERCHANT_ID.into()),
        webhook_secrets: vec![DEFAULT_OMISE_WEBHOOK_SECRET.into()],
        signature_key: Some(DEFAULT_SQUARE_SIGNATURE_KEY.into()),
        notification_url: Some(SQUARE_NOTIFICATION_URL.into()),
        ..PspSecrets::default()
    };
    (
        webhook_providers_for(kind, &secrets).expect("the face's webhook providers"),
        webhook_parsers_for(kind, Some(&secrets)).expect("the face's webhook parsers"),
        kind.name(),
    )
}

/// [`webhook_schemes`] for the running fake `psp`: PayPal's receiver fetches the certificate the
/// fake serves at its own loopback origin (the only origin it allows; a sandbox's rule), with
/// the fake's webhook id and test certificate name.
pub fn webhook_schemes_of(psp: &RunningFakePsp) -> (Providers, Providers, &'static str) {
    if psp.provider() == Provider::TwoC2p && psp.twoc2p_manual_settlement() {
        // What a deployment with `TWOC2P_SETTLEMENT=manual` builds: approvals are
        // authorizations, for the receiver and the processor alike.
        let scheme = || {
            payonce::adapters::psp::twoc2p_webhook::TwoC2pNotifications::new(
                DEFAULT_TWOC2P_MERCHANT_ID,
                FAKE_API_KEY,
            )
            .expect("the face's merchant and key")
            .with_provider(PspKind::TwoC2p.name())
            .settling_manually(true)
        };
        return (
            Providers::new().with(scheme()),
            Providers::new().with(scheme()),
            PspKind::TwoC2p.name(),
        );
    }
    if psp.provider() != Provider::PayPal {
        return webhook_schemes(psp.provider());
    }
    let fetch =
        payonce::adapters::psp::HttpCertFetch::new(Duration::from_secs(3)).expect("HTTP client");
    let receiver = payonce::adapters::psp::PayPalWebhooks::with_origins(
        DEFAULT_PAYPAL_WEBHOOK_ID,
        Arc::new(fetch),
        &[psp.base_url().trim_end_matches('/')],
        ".paypal.example",
    )
    .expect("the fake's webhook id and origin");
    (
        Providers::new().with(receiver),
        Providers::new().with(ParseOnlyWebhooks::paypal("paypal")),
        "paypal",
    )
}

/// `stripe` and `fake`, both with the Stripe scheme.
pub fn webhook_providers() -> Providers {
    Providers::new()
        .with(StripeWebhooks::new(
            "stripe",
            vec![STRIPE_WEBHOOK_SECRET.into()],
        ))
        .with(StripeWebhooks::new(
            "fake",
            vec![DEFAULT_WEBHOOK_SECRET.into()],
        ))
}

/// A response, with its JSON body parsed.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers, lowercase names.
    pub headers: BTreeMap<String, String>,
    /// Body text.
    pub body: String,
    /// Body as JSON (`Null` if it is not JSON).
    pub json: Value,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The problem `type`, for problem+json answers.
    pub fn problem_type(&self) -> &str {
        self.json["type"].as_str().unwrap_or("")
    }
}

impl From<Response<Body>> for Reply {
    fn from(response: Response<Body>) -> Self {
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let body = String::from_utf8_lossy(response.body().as_ref()).into_owned();
        let json = serde_json::from_str(&body).unwrap_or(Value::Null);
        Self {
            status,
            headers,
            body,
            json,
        }
    }
}

/// An API Gateway HTTP API (payload 2.0) event, as Lambda delivers it: `sub` goes into the JWT
/// authorizer's claims (none: no authorizer context, as for a missing token); the token carries
/// no scope.
pub fn api_event(
    method: &str,
    path: &str,
    sub: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Request {
    scoped_api_event(method, path, sub, &[], headers, body)
}

/// [`api_event`] for a token carrying `scopes`: API Gateway's JWT authorizer puts the token's
/// `scope` claim, split on spaces, in `requestContext.authorizer.jwt.scopes` (and the claim
/// itself among the claims).
pub fn scoped_api_event(
    method: &str,
    path: &str,
    sub: Option<&str>,
    scopes: &[&str],
    headers: &[(&str, &str)],
    body: &str,
) -> Request {
    let mut header_map = serde_json::Map::new();
    header_map.insert("content-type".into(), json!("application/json"));
    for (name, value) in headers {
        header_map.insert(name.to_ascii_lowercase(), json!(value));
    }
    let mut context = json!({
        "accountId": "123456789012",
        "apiId": "payonce",
        "domainName": "payonce.example.com",
        "domainPrefix": "payonce",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "payonce-tests"},
        "requestId": format!("req-{}", uuid::Uuid::new_v4().simple()),
        "routeKey": format!("{method} {path}"),
        "stage": "$default",
        "time": "29/Nov/2026:10:00:00 +0000",
        "timeEpoch": 1_796_000_000_000_i64,
    });
    if let Some(sub) = sub {
        let mut claims = json!({"sub": sub, "iss": "https://issuer.example.com"});
        if !scopes.is_empty() {
            claims["scope"] = json!(scopes.join(" "));
        }
        let scopes = (!scopes.is_empty()).then(|| scopes.to_vec());
        context["authorizer"] = json!({"jwt": {"claims": claims, "scopes": scopes}});
    }
    let event = json!({
        "version": "2.0",
        "routeKey": format!("{method} {path}"),
        "rawPath": path,
        "rawQueryString": "",
        "headers": header_map,
        "requestContext": context,
        "body": body,
        "isBase64Encoded": false,
    });
    lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway v2 event")
}

/// The payment view a COMPLETED record stores.
pub fn completed_view(record: &IdempotencyRecord) -> PaymentView {
    match &record.state {
        RecordState::Completed { result } => {
            serde_json::from_str(result).expect("the stored result is a payment view")
        }
        other => panic!("expected a COMPLETED record, got {other:?}"),
    }
}
