//! Starts `payonce-local` as a process and runs the README walkthrough over HTTP: create an
//! order, pay, a double-click storm, a lost response settled by the webhook, a decline and a
//! retry, the refund route's scope gate — checking statuses, bodies and the fake PSP's
//! charges. Once on the embedded store, once on DynamoDB Local.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_payonce-local");

struct Sandbox {
    child: Child,
    api: String,
    psp: String,
    http: reqwest::Client,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sandbox {
    fn start(extra: &[&str], env: &[(&str, String)]) -> Self {
        let port = free_port().to_string();
        let started = Instant::now();
        let mut child = Command::new(BIN)
            .args(["--port", &port])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start payonce-local");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut banner = Vec::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the sandbox prints its banner");
            let done = line.starts_with("Press Ctrl-C");
            banner.push(line);
            if done {
                break;
            }
        }
        println!(
            "payonce-local ready in {} ms (process start to banner){}",
            started.elapsed().as_millis(),
            if extra.is_empty() {
                ""
            } else {
                ", with DynamoDB Local and moto"
            }
        );
        let field = |name: &str| {
            banner
                .iter()
                .find_map(|l| {
                    l.trim_start()
                        .strip_prefix(name)
                        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
                })
                .unwrap()
        };
        assert!(banner[0].starts_with("payonce sandbox ready"), "{banner:?}");
        Self {
            child,
            api: field("API"),
            psp: field("fake PSP"),
            http: reqwest::Client::new(),
        }
    }

    fn token(&self, user: &str, ttl: i64) -> String {
        self.token_with(user, &["--ttl-seconds", &ttl.to_string()])
    }

    /// `payonce-local token <user> <extra...>`.
    fn token_with(&self, user: &str, extra: &[&str]) -> String {
        let out = Command::new(BIN)
            .args(["token", user])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    async fn post(
        &self,
        path: &str,
        token: &str,
        key: Option<&str>,
        body: Value,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut request = self
            .http
            .post(format!("{}{path}", self.api))
            .bearer_auth(token)
            .json(&body);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (
            status,
            response.json().await.unwrap_or(Value::Null),
            headers,
        )
    }

    async fn charges(&self) -> Vec<Value> {
        self.http
            .get(format!("{}/_fake/charges", self.psp))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    fn stop(mut self) {
        Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "graceful shutdown on Ctrl-C: {status:?}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the sandbox did not stop on Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

async fn walkthrough(sandbox: &Sandbox) {
    let token = sandbox.token("alice", 3600);
    let order_body =
        json!({"currency": "jpy", "items": [{"sku": "A1", "quantity": 2, "unit_amount": 1500}]});

    // Identity: API Gateway's JWT authorizer, played by the sandbox.
    let anonymous = sandbox
        .http
        .post(format!("{}/orders", sandbox.api))
        .json(&order_body)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let expired = sandbox.token("alice", -10);
    assert_eq!(
        sandbox
            .post("/orders", &expired, None, order_body.clone())
            .await
            .0,
        401
    );
    let parts: Vec<&str> = token.split('.').collect();
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.", parts[1]);
    assert_eq!(
        sandbox
            .post("/orders", &none, None, order_body.clone())
            .await
            .0,
        401,
        "alg none is refused"
    );

    // 1. Create an order and pay it.
    let (status, order, _) = sandbox
        .post("/orders", &token, None, order_body.clone())
        .await;
    assert_eq!(status, 201, "{order}");
    let pay = |order: &Value, pm: &str| json!({"order_id": order["order_id"], "order_version": 1, "payment_method": pm});
    let (status, paid, headers) = sandbox
        .post(
            "/payments",
            &token,
            Some("walk-1"),
            pay(&order, "pm_card_visa"),
        )
        .await;
    assert_eq!(
        (status, paid["status"].as_str()),
        (201, Some("succeeded")),
        "{paid}"
    );
    assert!(headers.get("x-request-id").is_some());

    // 2. A double-click storm on the same key: one charge.
    let storm: Vec<_> = (0..20)
        .map(|_| {
            let (api, token, body) = (
                sandbox.api.clone(),
                token.clone(),
                pay(&order, "pm_card_visa"),
            );
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(format!("{api}/payments"))
                    .bearer_auth(token)
                    .header("idempotency-key", "walk-1")
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
            })
        })
        .collect();
    for task in storm {
        let response = task.await.unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(
            response.headers().get("idempotent-replayed").unwrap(),
            "true"
        );
    }
    let payment_id = paid["payment_id"].as_str().unwrap();
    let count = |charges: &[Value], pid: &str| {
        charges
            .iter()
            .filter(|c| c["metadata"]["payment_id"] == pid && c["status"] == "succeeded")
            .count()
    };
    assert_eq!(count(&sandbox.charges().await, payment_id), 1);

    // 3. A lost response: 202, then the PSP's webhook settles it; the retry shows the outcome.
    let (_, lost_order, _) = sandbox
        .post("/orders", &token, None, order_body.clone())
        .await;
    let (status, pending, headers) = sandbox
        .post(
            "/payments",
            &token,
            Some("walk-2"),
            pay(&lost_order, "pm_fake_lost_response"),
        )
        .await;
    assert_eq!(
        (status, pending["status"].as_str()),
        (202, Some("processing")),
        "{pending}"
    );
    assert!(headers.get("retry-after").is_some());
    let deadline = Instant::now() + Duration::from_secs(15);
    let settled = loop {
        let (status, body, _) = sandbox
            .post(
                "/payments",
                &token,
                Some("walk-2"),
                pay(&lost_order, "pm_fake_lost_response"),
            )
            .await;
        if status == 201 {
            break body;
        }
        assert_eq!(status, 202);
        assert!(
            Instant::now() < deadline,
            "the webhook never settled the payment"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(settled["status"], "succeeded");
    assert_eq!(
        count(
            &sandbox.charges().await,
            settled["payment_id"].as_str().unwrap()
        ),
        1
    );

    // 4. A decline, then another card.
    let (_, third, _) = sandbox.post("/orders", &token, None, order_body).await;
    let (status, declined, _) = sandbox
        .post(
            "/payments",
            &token,
            Some("walk-3"),
            pay(&third, "pm_card_visa_chargeDeclined"),
        )
        .await;
    assert_eq!(
        (status, declined["type"].as_str()),
        (402, Some("/problems/card-declined")),
        "{declined}"
    );
    let (status, retried, _) = sandbox
        .post(
            "/payments",
            &token,
            Some("walk-4"),
            pay(&third, "pm_card_mastercard"),
        )
        .await;
    assert_eq!(status, 201, "{retried}");
    let succeeded = sandbox
        .charges()
        .await
        .iter()
        .filter(|c| c["status"] == "succeeded")
        .count();
    assert_eq!(succeeded, 3, "three orders, three charges");

    // 5. Refunds need the payments:refund scope: a customer's token is refused at the gateway,
    // before the refund function runs; a staff token passes the gate.
    refund_gate(sandbox, &token, payment_id).await;
}

async fn refund_gate(sandbox: &Sandbox, customer: &str, payment_id: &str) {
    let refunds = format!("/payments/{payment_id}/refunds");
    let (status, refused, headers) = sandbox
        .post(
            &refunds,
            customer,
            Some("refund-1"),
            json!({"amount": 1000}),
        )
        .await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (403, Some("/problems/insufficient-scope")),
        "{refused}"
    );
    assert_eq!(refused["status"], 403);
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/problem+json"
    );
    assert!(headers.get("x-request-id").is_some());
    let staff = sandbox.token_with("bob", &["--scope", "payments:refund"]);
    let other_scope = sandbox.token_with("carol", &["--scope", "payments:read"]);
    assert_eq!(
        sandbox
            .post(&refunds, &other_scope, Some("refund-1"), json!({}))
            .await
            .0,
        403,
        "another scope is not the refund scope"
    );
    assert_eq!(
        sandbox
            .post(&refunds, "not-a-token", Some("refund-1"), json!({}))
            .await
            .0,
        401,
        "the JWT is checked before the scope"
    );
    // Past the gate, the refund function answers (none of these reaches the PSP).
    let (status, unknown, headers) = sandbox
        .post(
            "/payments/pay_00000000000000000000000000000000/refunds",
            &staff,
            Some("refund-unknown"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, unknown["type"].as_str()),
        (404, Some("/problems/not-found")),
        "{unknown}"
    );
    assert!(headers.get("x-request-id").is_some());
    let (status, too_much, _) = sandbox
        .post(&refunds, &staff, Some("refund-2"), json!({"amount": 3001}))
        .await;
    assert_eq!(
        (status, too_much["type"].as_str()),
        (409, Some("/problems/refund-exceeds-remaining")),
        "{too_much}"
    );
    assert_eq!(too_much["remaining_amount"], 3000);
    let (status, no_key, _) = sandbox
        .post(&refunds, &staff, None, json!({"amount": 1000}))
        .await;
    assert_eq!(
        (status, no_key["type"].as_str()),
        (400, Some("/problems/idempotency-key-missing")),
        "{no_key}"
    );
    // Only POST is routed: API Gateway has no other route on the path.
    let listed = sandbox
        .http
        .get(format!("{}{refunds}", sandbox.api))
        .bearer_auth(&staff)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 404);
    // A staff token may read any user's payment, with its refunds.
    let details: Value = sandbox
        .http
        .get(format!("{}/payments/{payment_id}", sandbox.api))
        .bearer_auth(&staff)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            details["status"].as_str(),
            details["amount_refunded"].as_i64()
        ),
        (Some("succeeded"), Some(0)),
        "{details}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_the_embedded_store() {
    let sandbox = Sandbox::start(&[], &[]);
    walkthrough(&sandbox).await;
    sandbox.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_dynamodb_local_and_moto() {
    let endpoint = std::env::var("PAYONCE_TEST_DYNAMODB_ENDPOINT")
        .expect("run through scripts/test (DynamoDB Local)");
    let sqs = std::env::var("PAYONCE_TEST_SQS_ENDPOINT").expect("run through scripts/test (moto)");
    let suffix = uuid_suffix();
    let sandbox = Sandbox::start(
        &["--dynamodb-endpoint", &endpoint, "--sqs-endpoint", &sqs],
        &[
            ("PAYONCE_IDEMPOTENCY_TABLE", format!("local-idem-{suffix}")),
            ("PAYONCE_PAYMENTS_TABLE", format!("local-pay-{suffix}")),
            ("PAYONCE_WEBHOOK_QUEUE", format!("local-webhooks-{suffix}")),
        ],
    );
    walkthrough(&sandbox).await;
    sandbox.stop();
}

fn uuid_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}
