//! What one arrival does: a client's flow, from creating the order to its last answer. Each flow
//! keeps the last answer its client(s) got for every key, for the audit.

use crate::client::{now_s, Answer, Api, Call, Endpoint};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The scenarios of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// New order, then one payment.
    Pay,
    /// A payment, then 1–4 retries with the same key (replays).
    Retries,
    /// Two identical requests at once (one key).
    DoubleClick,
    /// Two tabs with different keys on one order, at once: one attempt may win.
    NewTab,
    /// The decline test card, then one retry with the same key.
    Decline,
    /// The client drops the connection 0.1–3 ms into the request (unless answered by then), then
    /// retries with the same key.
    LostClient,
    /// The PSP charges and its answer is lost (`pm_fake_lost_response`): 202, settled by the
    /// webhook or reconcile; the client polls, then retries with the same key.
    LostPsp,
    /// A payment, then its `payment_intent.succeeded` event posted three times, signed.
    WebhookX3,
    /// A payment, then a refund by staff (full or partial) and a retry of the refund's key.
    Refund,
}

impl Scenario {
    /// Every scenario with its default weight.
    pub const DEFAULT_MIX: [(Scenario, u32); 9] = [
        (Scenario::Pay, 30),
        (Scenario::Retries, 12),
        (Scenario::DoubleClick, 10),
        (Scenario::NewTab, 10),
        (Scenario::Decline, 8),
        (Scenario::LostClient, 8),
        (Scenario::LostPsp, 4),
        (Scenario::WebhookX3, 6),
        (Scenario::Refund, 12),
    ];

    /// Its name in `--mix` and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Pay => "pay",
            Scenario::Retries => "retries",
            Scenario::DoubleClick => "double-click",
            Scenario::NewTab => "new-tab",
            Scenario::Decline => "decline",
            Scenario::LostClient => "lost-client",
            Scenario::LostPsp => "lost-psp",
            Scenario::WebhookX3 => "webhook-x3",
            Scenario::Refund => "refund",
        }
    }

    /// The scenario called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::DEFAULT_MIX
            .iter()
            .map(|(s, _)| *s)
            .find(|s| s.name() == name)
    }
}

/// An order as the flow created it.
#[derive(Debug, Clone)]
pub struct Order {
    /// `ord_...`.
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// The version paid for.
    pub version: i64,
}

/// One client's key for a charge, the request it sends under it, and the last answer it got.
#[derive(Debug, Clone)]
pub struct ChargeKey {
    /// The `Idempotency-Key`.
    pub key: String,
    /// The request body.
    pub body: Value,
    /// The last answer the client got under this key.
    pub last: Answer,
}

/// A staff client's refund key and its last answer.
#[derive(Debug, Clone)]
pub struct RefundKey {
    /// The `Idempotency-Key`.
    pub key: String,
    /// The payment refunded.
    pub payment_id: String,
    /// The request body.
    pub body: Value,
    /// The last answer.
    pub last: Answer,
}

/// What one arrival did.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Which scenario.
    pub scenario: Scenario,
    /// The user's index (its token is `Driver::tokens[user]`).
    pub user: usize,
    /// The order, once created.
    pub order: Option<Order>,
    /// Every client key used for a charge (two for a double click: two clients, one key).
    pub charges: Vec<ChargeKey>,
    /// Every refund key.
    pub refunds: Vec<RefundKey>,
}

/// Everything a flow needs.
#[derive(Clone)]
pub struct Driver {
    /// The API.
    pub api: Api,
    /// A token per user.
    pub tokens: Vec<String>,
    /// A staff token (`payments:refund`).
    pub staff: String,
    /// How long a client keeps retrying a key that is in use or unanswered.
    pub give_up_after: Duration,
}

/// Approves.
const VISA: &str = "pm_card_visa";
/// Declines (`generic_decline`).
const DECLINED: &str = "pm_card_visa_chargeDeclined";
/// Charges, then the PSP's answer is lost.
const LOST: &str = "pm_fake_lost_response";

impl Driver {
    /// Runs `scenario` for arrival `n`, due at `due`; `rng` draws its choices (seeded per arrival).
    pub async fn run(
        &self,
        scenario: Scenario,
        n: u64,
        due: Instant,
        mut rng: fastrand::Rng,
    ) -> Flow {
        let user = rng.usize(..self.tokens.len());
        let mut flow = Flow {
            scenario,
            user,
            order: None,
            charges: Vec::new(),
            refunds: Vec::new(),
        };
        let Some(order) = self.create_order(user, rng.i64(1..=4), due).await else {
            return flow;
        };
        flow.order = Some(order.clone());
        let key = |tab: u32| format!("load-{n}-{tab}");
        let body = |pm: &str| json!({"order_id": order.id, "order_version": order.version, "payment_method": pm});
        let now = Instant::now;
        match scenario {
            Scenario::Pay => flow
                .charges
                .push(self.pay(user, key(0), body(VISA), now(), None).await),
            Scenario::Retries => {
                let mut state = self.pay(user, key(0), body(VISA), now(), None).await;
                for _ in 0..rng.u32(1..=4) {
                    state = self.pay(user, state.key, state.body, now(), None).await;
                }
                flow.charges.push(state);
            }
            Scenario::DoubleClick => {
                let (a, b) = tokio::join!(
                    self.pay(user, key(0), body(VISA), now(), None),
                    self.pay(user, key(0), body(VISA), now(), None)
                );
                flow.charges.extend([a, b]);
            }
            Scenario::NewTab => {
                let (a, b) = tokio::join!(
                    self.pay(user, key(0), body(VISA), now(), None),
                    self.pay(user, key(1), body(VISA), now(), None)
                );
                flow.charges.extend([a, b]);
            }
            Scenario::Decline => {
                let state = self.pay(user, key(0), body(DECLINED), now(), None).await;
                flow.charges
                    .push(self.pay(user, state.key, state.body, now(), None).await);
            }
            Scenario::LostClient => {
                let drop_after = Duration::from_micros(rng.u64(100..=3_000));
                let state = self
                    .pay(user, key(0), body(VISA), now(), Some(drop_after))
                    .await;
                flow.charges
                    .push(self.pay(user, state.key, state.body, now(), None).await);
            }
            Scenario::LostPsp => {
                let state = self.pay(user, key(0), body(LOST), now(), None).await;
                if let Some(payment_id) = state.last.payment_id().map(str::to_owned) {
                    self.poll_until_settled(user, &payment_id).await;
                }
                flow.charges
                    .push(self.pay(user, state.key, state.body, now(), None).await);
            }
            Scenario::WebhookX3 => {
                let state = self.pay(user, key(0), body(VISA), now(), None).await;
                if state.last.status == 201 {
                    let event = succeeded_event(&state.last.body, n);
                    for _ in 0..3 {
                        self.api.post_webhook(&event, now_s(), now()).await;
                    }
                }
                flow.charges.push(state);
            }
            Scenario::Refund => {
                let state = self.pay(user, key(0), body(VISA), now(), None).await;
                if let (201, Some(payment_id)) = (state.last.status, state.last.payment_id()) {
                    let amount = if rng.bool() {
                        Some(order.amount / 2)
                    } else {
                        None
                    };
                    let refund_body = match amount {
                        Some(amount) => {
                            json!({"amount": amount, "reason": "requested_by_customer"})
                        }
                        None => json!({"reason": "requested_by_customer"}),
                    };
                    let mut refund = self
                        .refund(
                            format!("load-{n}-refund"),
                            payment_id.to_owned(),
                            refund_body,
                            now(),
                        )
                        .await;
                    refund = self
                        .refund(refund.key, refund.payment_id, refund.body, now())
                        .await;
                    flow.refunds.push(refund);
                }
                flow.charges.push(state);
            }
        }
        flow
    }

    async fn create_order(&self, user: usize, quantity: i64, due: Instant) -> Option<Order> {
        let body = json!({"currency": "jpy", "items": [{"sku": "A1", "quantity": quantity, "unit_amount": 1500}]});
        let answer = self
            .api
            .send(Call {
                endpoint: Endpoint::CreateOrder,
                method: Method::POST,
                path: "/orders".into(),
                token: Some(&self.tokens[user]),
                key: None,
                body: Some(&body),
                due,
                drop_after: None,
            })
            .await;
        (answer.status == 201).then(|| Order {
            id: answer.body["order_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            amount: answer.body["amount"].as_i64().unwrap_or_default(),
            version: answer.body["version"].as_i64().unwrap_or(1),
        })
    }

    /// `POST /payments` under `key`, as the checkout's key manager does: on 409 in use, wait
    /// `Retry-After`; on no answer or a 5xx, back off and resend the same key; stop at a final
    /// answer (or after `give_up_after`). `drop_after`: the first request is dropped after this.
    pub async fn pay(
        &self,
        user: usize,
        key: String,
        body: Value,
        due: Instant,
        mut drop_after: Option<Duration>,
    ) -> ChargeKey {
        let started = Instant::now();
        let mut due = due;
        let mut backoff = Duration::from_millis(100);
        loop {
            let last = self
                .api
                .send(Call {
                    endpoint: Endpoint::Charge,
                    method: Method::POST,
                    path: "/payments".into(),
                    token: Some(&self.tokens[user]),
                    key: Some(&key),
                    body: Some(&body),
                    due,
                    drop_after: drop_after.take(),
                })
                .await;
            let retry = match (last.status, last.problem()) {
                (409, Some("idempotency-key-in-use")) => Some(
                    Duration::from_secs(last.retry_after_s.unwrap_or(1))
                        .min(Duration::from_secs(2)),
                ),
                (0 | 500..=599, _) => Some(backoff),
                _ => None,
            };
            match retry {
                Some(wait) if started.elapsed() < self.give_up_after => {
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    due = Instant::now();
                }
                _ => return ChargeKey { key, body, last },
            }
        }
    }

    /// `POST /payments/{id}/refunds` under `key` with the staff token, retried like [`Self::pay`].
    pub async fn refund(
        &self,
        key: String,
        payment_id: String,
        body: Value,
        due: Instant,
    ) -> RefundKey {
        let started = Instant::now();
        let mut due = due;
        loop {
            let last = self
                .api
                .send(Call {
                    endpoint: Endpoint::Refund,
                    method: Method::POST,
                    path: format!("/payments/{payment_id}/refunds"),
                    token: Some(&self.staff),
                    key: Some(&key),
                    body: Some(&body),
                    due,
                    drop_after: None,
                })
                .await;
            let retry = matches!(
                (last.status, last.problem()),
                (409, Some("idempotency-key-in-use")) | (0 | 500..=599, _)
            );
            if !retry || started.elapsed() >= self.give_up_after {
                return RefundKey {
                    key,
                    payment_id,
                    body,
                    last,
                };
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            due = Instant::now();
        }
    }

    /// `GET /payments/{id}` every 500 ms until it is no longer `processing` (bounded).
    async fn poll_until_settled(&self, user: usize, payment_id: &str) {
        let started = Instant::now();
        while started.elapsed() < self.give_up_after {
            let answer = self
                .api
                .send(Call {
                    endpoint: Endpoint::GetPayment,
                    method: Method::GET,
                    path: format!("/payments/{payment_id}"),
                    token: Some(&self.tokens[user]),
                    key: None,
                    body: None,
                    due: Instant::now(),
                    drop_after: None,
                })
                .await;
            if answer.status == 200 && answer.body["status"] != "processing" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A `payment_intent.succeeded` event for the payment in a 201 answer, as the fake PSP words it
/// (one event id, so the copies are duplicates of one delivery).
pub fn succeeded_event(payment: &Value, n: u64) -> Value {
    json!({
        "id": format!("evt_load_{n}"),
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": now_s(),
        "api_version": "2024-10-28.acacia",
        "livemode": false,
        "data": {"object": {
            "id": payment["provider_payment_id"],
            "object": "payment_intent",
            "amount": payment["amount"],
            "amount_received": payment["amount"],
            "currency": payment["currency"],
            "status": "succeeded",
            "livemode": false,
            "metadata": {"payment_id": payment["payment_id"]},
        }},
        "request": {"id": null, "idempotency_key": null},
    })
}
