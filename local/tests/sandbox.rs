//! Starts `payonce-local` as a process and runs the README walkthrough over HTTP: create an
//! order, pay, a double-click storm, a lost response settled by the webhook, a duplicate
//! webhook, a decline and a retry, the refund route's scope gate — checking statuses, bodies and
//! the fake PSP's charges (one per payment). Once per PSP
//! (`--psp stripe|omise|2c2p|square|paypal`), each on the embedded store and on DynamoDB Local;
//! webhooks for another provider are answered 404. 2C2P refunds through its Payment Maintenance
//! API with the fake's test keys (a refund status read `RS`, then the refund `R`, in the fake's
//! action log); run with `--no-2c2p-refunds` (or `PAYONCE_LOCAL_2C2P_REFUNDS=disabled`) its
//! sandbox answers 409 `refund-not-supported` past the scope gate. Square has no redirect for 3-D Secure (a card that
//! needs it is refused) and captures whole; its captures and cancels take no idempotency key, and
//! its refunds start pending. PayPal's webhooks are signed with an RSA key the test gives the
//! sandbox (`PAYONCE_LOCAL_PAYPAL_SIGNING_KEY`) and verified with the certificate the sandbox
//! fetches from its fake, and only from there; a buyer's approval at PayPal (3-D Secure, or
//! `payment_method: "paypal"`) is captured by reconcile; its voids take no key.

use base64::Engine as _;
use payonce::adapters::psp::twoc2p_webhook::sign_token;
use payonce_fake_psp::{
    sign_omise_webhook, sign_paypal_webhook, sign_square_webhook, sign_webhook, PayPalSigner,
    DEFAULT_API_KEY, DEFAULT_PAYPAL_CLIENT_ID, PAYPAL_AUTH_ALGO, PAYPAL_CERT_PATH,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_payonce-local");

/// The PSPs the sandbox runs, as `--psp` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Psp {
    Stripe,
    Omise,
    TwoC2p,
    Square,
    PayPal,
}

/// The webhook secret the test sets for the Stripe sandbox.
const STRIPE_SECRET: &str = "whsec_sandbox_test";
/// The (decoded) webhook key the test sets, base64-encoded, for the Omise sandbox.
const OMISE_KEY: &[u8] = b"payonce-local-sandbox-test-key";
/// The merchant secret key the test sets for the 2C2P sandbox.
const TWOC2P_SECRET_KEY: &str = "payonce-local-sandbox-test-2c2p-merchant-secret-key";
/// The merchant id the test sets for the 2C2P sandbox.
const TWOC2P_MERCHANT_ID: &str = "PAYONCESANDBOX7";
/// The webhook subscription's signature key the test sets for the Square sandbox.
const SQUARE_SIGNATURE_KEY: &str = "payonce-local-sandbox-test-square-signature-key";
/// The webhook (subscription) id the test sets for the PayPal sandbox: signed into every
/// delivery, never read from one.
const PAYPAL_WEBHOOK_ID: &str = "PAYONCETESTWH0042";

/// The RSA key the test gives every PayPal sandbox (through a PEM file), so that it can sign
/// deliveries the sandbox verifies with the certificate its fake serves for that key.
fn paypal_signer() -> &'static PayPalSigner {
    static SIGNER: std::sync::OnceLock<PayPalSigner> = std::sync::OnceLock::new();
    SIGNER.get_or_init(|| PayPalSigner::generate().expect("an RSA key"))
}

impl Psp {
    fn name(self) -> &'static str {
        match self {
            Psp::Stripe => "stripe",
            Psp::Omise => "omise",
            Psp::TwoC2p => "2c2p",
            Psp::Square => "square",
            Psp::PayPal => "paypal",
        }
    }

    /// The webhook route of the sandbox running this PSP.
    fn provider(self) -> &'static str {
        match self {
            Psp::Stripe => "fake",
            Psp::Omise => "omise",
            Psp::TwoC2p => "2c2p",
            Psp::Square => "square",
            Psp::PayPal => "paypal",
        }
    }

    /// The webhook secret variable and the value the test gives it.
    fn secret_env(self) -> (&'static str, String) {
        match self {
            Psp::Stripe => (
                "PAYONCE_LOCAL_STRIPE_WEBHOOK_SECRET",
                STRIPE_SECRET.to_owned(),
            ),
            Psp::Omise => (
                "PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET",
                base64::engine::general_purpose::STANDARD.encode(OMISE_KEY),
            ),
            Psp::TwoC2p => (
                "PAYONCE_LOCAL_2C2P_SECRET_KEY",
                TWOC2P_SECRET_KEY.to_owned(),
            ),
            Psp::Square => (
                "PAYONCE_LOCAL_SQUARE_SIGNATURE_KEY",
                SQUARE_SIGNATURE_KEY.to_owned(),
            ),
            Psp::PayPal => (
                "PAYONCE_LOCAL_PAYPAL_WEBHOOK_ID",
                PAYPAL_WEBHOOK_ID.to_owned(),
            ),
        }
    }

    /// The merchant id variable and the value the test gives it (2C2P only).
    fn merchant_env(self) -> Option<(&'static str, String)> {
        match self {
            Psp::Stripe | Psp::Omise | Psp::Square | Psp::PayPal => None,
            Psp::TwoC2p => Some((
                "PAYONCE_LOCAL_2C2P_MERCHANT_ID",
                TWOC2P_MERCHANT_ID.to_owned(),
            )),
        }
    }
}

struct Sandbox {
    child: Child,
    kind: Psp,
    /// Whether the sandbox refunds on its PSP (all but 2C2P run without its refunds).
    refunds: bool,
    /// 2C2P: whether its account settles manually (`--2c2p-manual-settlement`).
    manual_settlement: bool,
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
    fn start(kind: Psp, extra: &[&str], env: &[(&str, String)]) -> Self {
        let port = free_port().to_string();
        let started = Instant::now();
        let (secret_var, secret) = kind.secret_env();
        let mut command = Command::new(BIN);
        command
            .args(["--port", &port, "--psp", kind.name()])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env(secret_var, &secret)
            .envs(kind.merchant_env());
        // PayPal: the test's signing key, in a file the sandbox reads at start; and reconcile
        // every second, since it is what captures an order the buyer approved (once the payment
        // is 30 s old), where the other PSPs' webhooks settle such a payment.
        let key_file = (kind == Psp::PayPal).then(|| {
            let path = std::env::temp_dir().join(format!("payonce-local-test-paypal-{port}.pem"));
            std::fs::write(&path, paypal_signer().private_key_pem().unwrap()).unwrap();
            command
                .env("PAYONCE_LOCAL_PAYPAL_SIGNING_KEY", &path)
                .args(["--reconcile-every-seconds", "1"]);
            path
        });
        let mut child = command
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
        // The key was read at start; the file is not needed any more.
        if let Some(path) = key_file {
            std::fs::remove_file(path).unwrap();
        }
        println!(
            "payonce-local --psp {} ready in {} ms (process start to banner){}",
            kind.name(),
            started.elapsed().as_millis(),
            if extra.contains(&"--dynamodb-endpoint") {
                ", with DynamoDB Local and moto"
            } else {
                ""
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
        // The banner names the PSP and the secret's variable, and never prints a secret set.
        assert_eq!(field("PSP"), kind.name(), "{banner:?}");
        let webhooks = banner
            .iter()
            .find(|l| l.trim_start().starts_with("webhooks"))
            .unwrap();
        assert!(
            webhooks.contains(&format!("/webhooks/{}", kind.provider()))
                && webhooks.contains(secret_var),
            "{webhooks}"
        );
        assert!(
            !banner.iter().any(|l| l.contains(&secret)),
            "a secret that was set is never printed: {banner:?}"
        );
        if kind == Psp::PayPal {
            // The key given, and where its certificate is served: the fake PSP's own origin.
            let psp = field("fake PSP");
            assert!(
                webhooks.contains("PAYONCE_LOCAL_PAYPAL_SIGNING_KEY, set")
                    && webhooks.contains(&format!("{psp}{PAYPAL_CERT_PATH}")),
                "{webhooks}"
            );
        }
        // 2C2P: whether it refunds, through the fake's action URL with the fake's test keys.
        let refunds = kind != Psp::TwoC2p
            || !(extra.contains(&"--no-2c2p-refunds")
                || env
                    .iter()
                    .any(|(k, v)| *k == "PAYONCE_LOCAL_2C2P_REFUNDS" && v == "disabled"));
        let refunds_line = banner
            .iter()
            .find(|l| l.trim_start().starts_with("refunds "));
        match (kind, refunds_line) {
            (Psp::TwoC2p, Some(line)) if refunds => {
                let action = format!(
                    "{}/2C2PFrontend/PaymentAction/2.0/action",
                    field("fake PSP")
                );
                assert!(
                    line.contains("on:") && line.contains(&action) && line.contains("test keys"),
                    "{line}"
                );
            }
            (Psp::TwoC2p, Some(line)) => assert!(
                line.contains("off:") && line.contains("refund-not-supported"),
                "{line}"
            ),
            (Psp::TwoC2p, None) => panic!("the 2C2P banner says whether it refunds: {banner:?}"),
            (_, line) => assert!(line.is_none(), "{line:?}"),
        }
        // 2C2P: whether its account settles manually, so that capture "manual" works.
        let manual_settlement = kind == Psp::TwoC2p
            && (extra.contains(&"--2c2p-manual-settlement")
                || env
                    .iter()
                    .any(|(k, v)| *k == "PAYONCE_LOCAL_2C2P_SETTLEMENT" && v == "manual"));
        let settlement_line = banner
            .iter()
            .find(|l| l.trim_start().starts_with("settlement "));
        match (kind, settlement_line) {
            (Psp::TwoC2p, Some(line)) => assert!(
                line.contains(if manual_settlement {
                    "manual:"
                } else {
                    "automatic:"
                }),
                "{line}"
            ),
            (Psp::TwoC2p, None) => panic!("the 2C2P banner says how it settles: {banner:?}"),
            (_, line) => assert!(line.is_none(), "{line:?}"),
        }
        if let Some((merchant_var, merchant_id)) = kind.merchant_env() {
            assert!(
                webhooks.contains(merchant_var) && webhooks.contains("set"),
                "{webhooks}"
            );
            assert!(
                !banner.iter().any(|l| l.contains(&merchant_id)),
                "a merchant id that was set is never printed: {banner:?}"
            );
        }
        Self {
            child,
            kind,
            refunds,
            manual_settlement,
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

    async fn refunds(&self) -> Vec<Value> {
        self.http
            .get(format!("{}/_fake/refunds", self.psp))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The fake 2C2P's Payment Maintenance calls, each as `(processType, invoiceNo,
    /// actionAmount, respCode)`.
    async fn twoc2p_actions(&self) -> Vec<(String, String, String, String)> {
        let actions: Vec<Value> = self
            .http
            .get(format!("{}/_fake/2c2p/actions", self.psp))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        actions
            .iter()
            // A settle is a capture (an account that settles manually), not a refund's call.
            .filter(|a| a["processType"] != "S")
            .map(|a| {
                let text = |name: &str| a[name].as_str().unwrap_or_default().to_owned();
                assert_eq!(a["httpStatus"], 200, "{a}");
                (
                    text("processType"),
                    text("invoiceNo"),
                    text("actionAmount"),
                    text("respCode"),
                )
            })
            .collect()
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

/// A sandbox whose test failed before [`Sandbox::stop`] is killed, not left serving.
impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

async fn walkthrough(sandbox: &Sandbox) {
    let token = sandbox.token("alice", 3600);

    // The demo page's configuration: the PSP, and what its checkout can offer.
    let config: Value = sandbox
        .http
        .get(format!("{}/_sandbox/config", sandbox.api))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let offers = |method: &str| {
        config["payment_methods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == method)
    };
    let kind = sandbox.kind;
    assert_eq!(
        (
            config["psp"].as_str(),
            config["manual_capture"].as_bool(),
            offers("pm_card_threeDSecure2Required"),
            offers("paypal")
        ),
        (
            Some(kind.name()),
            Some(kind != Psp::TwoC2p),
            matches!(kind, Psp::Stripe | Psp::Omise | Psp::PayPal),
            kind == Psp::PayPal
        ),
        "{config}"
    );
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
            .filter(|c| c["payment_id"] == pid && c["outcome"] == "succeeded")
            .count()
    };
    assert_eq!(count(&sandbox.charges().await, payment_id), 1);

    // 3. A lost response: 202, then the PSP's webhook settles it; the retry shows the outcome.
    // (2C2P by design: its adapter follows every Do Payment with a Payment Inquiry, which reads
    // the charge whose answer was lost, so the payment succeeds at once; the backend
    // notification still arrives, and is delivered again in 3b. Square too: its adapter sends a
    // create whose answer was lost once more under the same key, Square answers the one payment
    // again, and the charge path completes it; 3b delivers its `payment.updated` again. And
    // PayPal: the order create is sent again under its `PayPal-Request-Id`, PayPal answers the
    // order it made, captured; 3b delivers its `PAYMENT.CAPTURE.COMPLETED` again.)
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
    let settled = if matches!(sandbox.kind, Psp::TwoC2p | Psp::Square | Psp::PayPal) {
        assert_eq!(
            (status, pending["status"].as_str()),
            (201, Some("succeeded")),
            "{pending}"
        );
        let (status, replayed, headers) = sandbox
            .post(
                "/payments",
                &token,
                Some("walk-2"),
                pay(&lost_order, "pm_fake_lost_response"),
            )
            .await;
        assert_eq!((status, &replayed), (201, &pending));
        assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
        pending
    } else {
        settled_by_the_webhook(sandbox, &token, &lost_order, status, &pending, &headers).await
    };
    assert_eq!(settled["status"], "succeeded");
    let settled_id = settled["payment_id"].as_str().unwrap();
    assert_eq!(count(&sandbox.charges().await, settled_id), 1);

    // 3b. The PSP delivers the settling event twice more: acknowledged each time, applied once.
    duplicate_webhook(sandbox, &token, settled_id).await;
    assert_eq!(count(&sandbox.charges().await, settled_id), 1);

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
    let charges = sandbox.charges().await;
    assert!(
        charges.iter().all(|c| c["provider"] == sandbox.kind.name()),
        "the fake PSP speaks the sandbox's PSP: {charges:?}"
    );
    let succeeded = charges
        .iter()
        .filter(|c| c["outcome"] == "succeeded")
        .count();
    assert_eq!(succeeded, 3, "three orders, three charges");
    for pid in [
        payment_id,
        settled_id,
        retried["payment_id"].as_str().unwrap(),
    ] {
        assert_eq!(count(&charges, pid), 1, "one charge for {pid}: {charges:?}");
    }
    let failed = charges.iter().filter(|c| c["outcome"] == "failed").count();
    assert_eq!(
        (failed, charges.len()),
        (1, 4),
        "one declined charge, nothing else: {charges:?}"
    );

    // 5. Refunds need the payments:refund scope: a customer's token is refused at the gateway,
    // before the refund function runs; a staff token passes the gate.
    refund_gate(sandbox, &token, payment_id).await;

    // 6. 3-D Secure and capture later: each answer of the checkout flows.
    customer_action(sandbox, &token).await;
    capture_later(sandbox, &token).await;
}

/// A new order of 3000 JPY for `token`'s user; its id.
async fn new_order(sandbox: &Sandbox, token: &str) -> String {
    let body =
        json!({"currency": "jpy", "items": [{"sku": "A1", "quantity": 2, "unit_amount": 1500}]});
    let (status, order, _) = sandbox.post("/orders", token, None, body).await;
    assert_eq!(status, 201, "{order}");
    order["order_id"].as_str().unwrap().to_owned()
}

/// The order's `payment_state`, as the API reads it.
async fn payment_state(sandbox: &Sandbox, token: &str, order_id: &str) -> String {
    let order: Value = sandbox
        .http
        .get(format!("{}/orders/{order_id}", sandbox.api))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    order["payment_state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The fake PSP's charges for `payment_id`.
async fn charges_of(sandbox: &Sandbox, payment_id: &str) -> Vec<Value> {
    let charges = sandbox.charges().await;
    charges
        .into_iter()
        .filter(|c| c["payment_id"] == payment_id)
        .collect()
}

/// Sends the payment `body` under `key` again until its answer's status is `until` (the PSP's
/// webhook has moved the payment); that answer.
async fn replay_until(
    sandbox: &Sandbox,
    token: &str,
    key: &str,
    body: &Value,
    until: u16,
) -> Value {
    replay_within(sandbox, token, key, body, until, Duration::from_secs(20)).await
}

/// [`replay_until`], giving up after `within`.
async fn replay_within(
    sandbox: &Sandbox,
    token: &str,
    key: &str,
    body: &Value,
    until: u16,
    within: Duration,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, answer, _) = sandbox
            .post("/payments", token, Some(key), body.clone())
            .await;
        if status == until {
            return answer;
        }
        assert!(Instant::now() < deadline, "still {status}: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Posts `result` on the fake PSP's authentication page at `url`: 303 back to the return URL.
async fn answer_page(sandbox: &Sandbox, url: &str, result: &str) {
    let answer = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("result={result}"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 303, "{url}");
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(&sandbox.api), "{location}");
}

/// The answers of a payment that asks the customer to act: a `return_url` off the checkout
/// origins (400, nothing written), no `return_url` (402 `authentication-required`), one
/// (202 `requires_action`, replayed from the store), a failed challenge (402
/// `authentication-failed`, the order free), and a completed one (201, one charge). Square has
/// no redirect to offer: [`square_verification_required`]. On PayPal a failed challenge leaves
/// the order waiting: [`paypal_approvals`].
async fn customer_action(sandbox: &Sandbox, token: &str) {
    let order = new_order(sandbox, token).await;
    let return_url = format!("{}/?order={order}", sandbox.api);
    let three_ds = |return_url: Option<&str>| {
        let mut body = json!({"order_id": order, "order_version": 1,
            "payment_method": "pm_card_threeDSecure2Required"});
        if let Some(url) = return_url {
            body["return_url"] = json!(url);
        }
        body
    };
    let before = sandbox.charges().await.len();

    // A return URL on another origin: 400, nothing written, nothing sent (the key is free).
    let foreign = three_ds(Some("https://elsewhere.example/return"));
    let (status, refused, _) = sandbox
        .post("/payments", token, Some("action-1"), foreign)
        .await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (400, Some("/problems/return-url-not-allowed")),
        "{refused}"
    );
    assert_eq!(sandbox.charges().await.len(), before);
    assert_eq!(payment_state(sandbox, token, &order).await, "unpaid");

    // No return URL: 402 authentication-required, the order free, the replay from the store.
    // (Omise refuses such a charge with `invalid_charge`, a code that does not say why: a
    // refusal, 402 payment-failed.)
    let (status, required, _) = sandbox
        .post("/payments", token, Some("action-1"), three_ds(None))
        .await;
    let expected = match sandbox.kind {
        Psp::Omise => "/problems/payment-failed",
        _ => "/problems/authentication-required",
    };
    assert_eq!(
        (status, required["type"].as_str()),
        (402, Some(expected)),
        "{}: {required}",
        sandbox.kind.name()
    );
    let seen = sandbox.charges().await.len();
    assert!(seen <= before + 1, "at most the one failed charge");
    if sandbox.kind == Psp::Square {
        // Square made the payment and failed it (CARD_DECLINED_VERIFICATION_REQUIRED): exactly
        // that one failed charge, nothing charged.
        assert_eq!(seen, before + 1);
        let made = charges_of(sandbox, required["payment_id"].as_str().unwrap()).await;
        assert_eq!(
            (
                made.len(),
                made[0]["outcome"].as_str(),
                made[0]["status"].as_str()
            ),
            (1, Some("failed"), Some("FAILED")),
            "{made:?}"
        );
    }
    let (status, again, _) = sandbox
        .post("/payments", token, Some("action-1"), three_ds(None))
        .await;
    assert_eq!(
        (status, again["type"].as_str()),
        (402, required["type"].as_str())
    );
    assert_eq!(sandbox.charges().await.len(), seen);
    assert_eq!(payment_state(sandbox, token, &order).await, "unpaid");

    // With one: 202 requires_action, where to send the customer and until when; the replay
    // answers the same from the store; the order is held.
    let body = three_ds(Some(&return_url));
    let (status, waiting, headers) = sandbox
        .post("/payments", token, Some("action-2"), body.clone())
        .await;
    if sandbox.kind == Psp::Square {
        square_verification_required(sandbox, token, &order, (status, &waiting, &headers)).await;
        return;
    }
    assert_eq!(
        (
            status,
            waiting["status"].as_str(),
            waiting["next_action"]["type"].as_str()
        ),
        (202, Some("requires_action"), Some("redirect")),
        "{waiting}"
    );
    assert!(headers.get("retry-after").is_some());
    assert!(waiting["next_action"]["expires_at"].as_i64().unwrap() > 0);
    let url = waiting["next_action"]["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&sandbox.psp), "{url}");
    let payment_id = waiting["payment_id"].as_str().unwrap().to_owned();
    let seen = sandbox.charges().await.len();
    let (status, replayed, headers) = sandbox
        .post("/payments", token, Some("action-2"), body.clone())
        .await;
    assert_eq!((status, &replayed), (202, &waiting));
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(
        sandbox.charges().await.len(),
        seen,
        "a replay sends nothing"
    );
    assert_eq!(
        charges_of(sandbox, &payment_id).await[0]["outcome"],
        "pending"
    );

    // The customer fails the challenge: 402 authentication-failed on the return page, the order
    // free again.
    answer_page(sandbox, &url, "fail").await;
    if sandbox.kind == Psp::PayPal {
        paypal_approvals(sandbox, token, (&order, &body, &waiting)).await;
        return;
    }
    let failed = replay_until(sandbox, token, "action-2", &body, 402).await;
    assert_eq!(
        failed["type"], "/problems/authentication-failed",
        "{failed}"
    );
    assert_eq!(payment_state(sandbox, token, &order).await, "unpaid");

    // Another attempt completes it: 201 on the return page, one charge, the order paid.
    let (status, waiting, _) = sandbox
        .post("/payments", token, Some("action-3"), body.clone())
        .await;
    assert_eq!(status, 202, "{waiting}");
    let url = waiting["next_action"]["url"].as_str().unwrap().to_owned();
    answer_page(sandbox, &url, "complete").await;
    let paid = replay_until(sandbox, token, "action-3", &body, 201).await;
    assert_eq!(paid["status"], "succeeded", "{paid}");
    let paid_id = paid["payment_id"].as_str().unwrap();
    let charges = charges_of(sandbox, paid_id).await;
    assert_eq!(
        (charges.len(), charges[0]["outcome"].as_str()),
        (1, Some("succeeded"))
    );
    assert_eq!(payment_state(sandbox, token, &order).await, "paid");
}

/// Square with a `return_url`: Square runs buyer verification in its browser SDK before the
/// payment and has no redirect for payonce to follow, so a card that needs it is refused at once
/// (CARD_DECLINED_VERIFICATION_REQUIRED), which the adapter reads as authentication required,
/// as without a `return_url`. But this payment has a `return_url`, and the domain reads
/// "authentication required" on a payment with somewhere to bring the customer back as a failed
/// authentication (a rule for 2C2P, whose `0004` answers both): 402 `authentication-failed`,
/// not the `authentication-required` docs/deploy.md names, whose advice (pay again with a
/// `return_url`) could not help here. No `next_action`; stored and replayed; one failed charge;
/// the order free. Another card then pays it (201, one charge, the order paid).
async fn square_verification_required(
    sandbox: &Sandbox,
    token: &str,
    order: &str,
    (status, refused, headers): (u16, &Value, &reqwest::header::HeaderMap),
) {
    assert_eq!(
        (status, refused["type"].as_str()),
        (402, Some("/problems/authentication-failed")),
        "{refused}"
    );
    assert!(
        refused.get("next_action").is_none(),
        "no redirect: {refused}"
    );
    assert!(headers.get("idempotent-replayed").is_none());
    let payment_id = refused["payment_id"].as_str().unwrap().to_owned();
    let made = charges_of(sandbox, &payment_id).await;
    assert_eq!(
        (
            made.len(),
            made[0]["outcome"].as_str(),
            made[0]["status"].as_str()
        ),
        (1, Some("failed"), Some("FAILED")),
        "{made:?}"
    );
    let seen = sandbox.charges().await.len();
    let body = json!({"order_id": order, "order_version": 1,
        "payment_method": "pm_card_threeDSecure2Required",
        "return_url": format!("{}/?order={order}", sandbox.api)});
    let (status, replayed, headers) = sandbox
        .post("/payments", token, Some("action-2"), body.clone())
        .await;
    assert_eq!((status, &replayed), (402, refused));
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(
        sandbox.charges().await.len(),
        seen,
        "a replay sends nothing"
    );
    assert_eq!(payment_state(sandbox, token, order).await, "unpaid");

    // A card that needs no verification pays the order, the return_url notwithstanding.
    let mut body = body;
    body["payment_method"] = json!("pm_card_visa");
    let (status, paid, _) = sandbox
        .post("/payments", token, Some("action-3"), body)
        .await;
    assert_eq!(
        (status, paid["status"].as_str()),
        (201, Some("succeeded")),
        "{paid}"
    );
    let charges = charges_of(sandbox, paid["payment_id"].as_str().unwrap()).await;
    assert_eq!(
        (charges.len(), charges[0]["outcome"].as_str()),
        (1, Some("succeeded")),
        "{charges:?}"
    );
    assert_eq!(sandbox.charges().await.len(), seen + 1);
    assert_eq!(payment_state(sandbox, token, order).await, "paid");
}

/// PayPal after a failed challenge: PayPal sends the buyer back to the `cancel_url` and the order
/// stays as it was, waiting (the page can be answered again), so the payment is still 202
/// `requires_action`, replayed from the store. `payment_method: "paypal"` (no card: the buyer
/// approves at PayPal) has nowhere to send the buyer without a `return_url`: 402
/// `authentication-required`, as the card without one, and nothing sent; with one, 202
/// `requires_action` to the same page. The buyer
/// completes both: each order is approved (`CHECKOUT.ORDER.APPROVED`, which only says the order
/// waits for payonce's capture), and reconcile captures each under the key derived from its
/// payment once the payment is 30 s old: 201, one capture, both orders paid.
async fn paypal_approvals(
    sandbox: &Sandbox,
    token: &str,
    (order, body, waiting): (&str, &Value, &Value),
) {
    let url = waiting["next_action"]["url"].as_str().unwrap();
    let payment_id = waiting["payment_id"].as_str().unwrap();
    let (status, still, headers) = sandbox
        .post("/payments", token, Some("action-2"), body.clone())
        .await;
    assert_eq!((status, &still), (202, waiting), "{still}");
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    let made = charges_of(sandbox, payment_id).await;
    assert_eq!(
        (made.len(), made[0]["status"].as_str()),
        (1, Some("PAYER_ACTION_REQUIRED")),
        "{made:?}"
    );

    // The buyer approves at PayPal: without a return_url, refused before anything is sent.
    let approving = new_order(sandbox, token).await;
    let return_url = format!("{}/?order={approving}", sandbox.api);
    let buyer = |return_url: Option<&str>| {
        let mut body = json!({"order_id": approving, "order_version": 1,
            "payment_method": "paypal"});
        if let Some(url) = return_url {
            body["return_url"] = json!(url);
        }
        body
    };
    let before = sandbox.charges().await.len();
    let (status, refused, _) = sandbox
        .post("/payments", token, Some("buyer-1"), buyer(None))
        .await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (402, Some("/problems/authentication-required")),
        "{refused}"
    );
    assert_eq!(sandbox.charges().await.len(), before, "nothing sent");
    assert_eq!(payment_state(sandbox, token, &approving).await, "unpaid");
    let buyer_body = buyer(Some(&return_url));
    let (status, asked, _) = sandbox
        .post("/payments", token, Some("buyer-2"), buyer_body.clone())
        .await;
    assert_eq!(
        (
            status,
            asked["status"].as_str(),
            asked["next_action"]["type"].as_str()
        ),
        (202, Some("requires_action"), Some("redirect")),
        "{asked}"
    );
    let buyer_url = asked["next_action"]["url"].as_str().unwrap();
    assert!(buyer_url.starts_with(&sandbox.psp), "{buyer_url}");
    let buyer_id = asked["payment_id"].as_str().unwrap();
    let made = charges_of(sandbox, buyer_id).await;
    assert_eq!(
        (
            made.len(),
            made[0]["outcome"].as_str(),
            made[0]["payment_method"].as_str()
        ),
        (1, Some("pending"), Some("paypal")),
        "{made:?}"
    );

    // Both complete at PayPal's page and come back to the checkout; reconcile captures each.
    answer_page(sandbox, url, "complete").await;
    answer_page(sandbox, buyer_url, "complete").await;
    let within = Duration::from_secs(90);
    let paid = replay_within(sandbox, token, "action-2", body, 201, within).await;
    let bought = replay_within(sandbox, token, "buyer-2", &buyer_body, 201, within).await;
    for (answer, id) in [(&paid, payment_id), (&bought, buyer_id)] {
        assert_eq!(
            (answer["status"].as_str(), answer["payment_id"].as_str()),
            (Some("succeeded"), Some(id)),
            "{answer}"
        );
        let charges = charges_of(sandbox, id).await;
        assert_eq!(
            (
                charges.len(),
                charges[0]["outcome"].as_str(),
                charges[0]["captures"].as_array().map(Vec::len)
            ),
            (1, Some("succeeded"), Some(1)),
            "{charges:?}"
        );
        assert_eq!(
            charges[0]["captures"][0]["idempotency_key"],
            format!("payonce-capture-{id}"),
            "{charges:?}"
        );
    }
    assert_eq!(payment_state(sandbox, token, order).await, "paid");
    assert_eq!(payment_state(sandbox, token, &approving).await, "paid");
}

/// Sends a capture (`amount`, or all when `None`) or a cancel of `payment_id` with `token`.
async fn operate(
    sandbox: &Sandbox,
    token: &str,
    payment_id: &str,
    operation: &str,
    key: &str,
    amount: Option<i64>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = sandbox
        .http
        .post(format!("{}/payments/{payment_id}/{operation}", sandbox.api))
        .bearer_auth(token)
        .header("idempotency-key", key);
    if let Some(amount) = amount {
        request = request.json(&json!({ "amount": amount }));
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

/// `capture: "manual"`: 201 `authorized` holding the order (409 `order-already-authorized` to
/// another attempt), a capture by staff (201, replayed, then 409 `payment-not-capturable`, and
/// 409 `capture-exceeds-authorized` past the authorization), a cancel (200, the order free;
/// then 409 `payment-not-cancelable`), each under the key derived from the payment. On 2C2P,
/// 409 `capture-not-supported` and nothing sent, unless its account settles manually: then as
/// the others, through a settle and a void, with no `capture_before` (2C2P states none). Omise,
/// Square and 2C2P capture whole: a partial capture is refused before anything is sent. Square's complete and cancel take no key: the
/// fake records them under none.
async fn capture_later(sandbox: &Sandbox, token: &str) {
    let staff = sandbox.token_with("staff", &["--scope", "payments:capture"]);
    let order = new_order(sandbox, token).await;
    let manual = |order: &str, key_card: &str| json!({"order_id": order, "order_version": 1, "payment_method": key_card, "capture": "manual"});
    let before = sandbox.charges().await.len();
    let (status, authorized, _) = sandbox
        .post(
            "/payments",
            token,
            Some("later-1"),
            manual(&order, "pm_card_visa"),
        )
        .await;
    if sandbox.kind == Psp::TwoC2p && !sandbox.manual_settlement {
        assert_eq!(
            (status, authorized["type"].as_str()),
            (409, Some("/problems/capture-not-supported")),
            "{authorized}"
        );
        assert_eq!(sandbox.charges().await.len(), before, "nothing sent");
        assert_eq!(payment_state(sandbox, token, &order).await, "unpaid");
        return;
    }
    assert_eq!(
        (
            status,
            authorized["status"].as_str(),
            authorized["amount_capturable"].as_i64()
        ),
        (201, Some("authorized"), Some(3000)),
        "{authorized}"
    );
    if sandbox.kind == Psp::TwoC2p {
        assert!(authorized["capture_before"].is_null(), "{authorized}");
    } else {
        assert!(authorized["capture_before"].as_i64().unwrap() > 0);
    }
    let payment_id = authorized["payment_id"].as_str().unwrap().to_owned();
    assert_eq!(payment_state(sandbox, token, &order).await, "authorized");
    let (status, held, _) = sandbox
        .post(
            "/payments",
            token,
            Some("later-2"),
            manual(&order, "pm_card_mastercard"),
        )
        .await;
    assert_eq!(
        (status, held["type"].as_str()),
        (409, Some("/problems/order-already-authorized")),
        "{held}"
    );
    let charges = charges_of(sandbox, &payment_id).await;
    assert_eq!(
        (charges.len(), charges[0]["outcome"].as_str()),
        (1, Some("authorized"))
    );
    assert_eq!(sandbox.charges().await.len(), before + 1);

    // More than the authorization: 409, nothing sent. The customer's own token: 403.
    let (status, exceeds, _) =
        operate(sandbox, &staff, &payment_id, "capture", "cap-0", Some(3001)).await;
    assert_eq!(
        (status, exceeds["type"].as_str()),
        (409, Some("/problems/capture-exceeds-authorized")),
        "{exceeds}"
    );
    if matches!(sandbox.kind, Psp::Omise | Psp::Square | Psp::TwoC2p) {
        // Part of it, where the PSP captures only the whole authorization: 400 invalid-request
        // naming what may be captured (the API document lists it under 400; docs/deploy.md's
        // Square part says 409), nothing sent.
        let (status, partial, _) =
            operate(sandbox, &staff, &payment_id, "capture", "cap-0", Some(1000)).await;
        assert_eq!(
            (
                status,
                partial["type"].as_str(),
                partial["amount_capturable"].as_i64()
            ),
            (400, Some("/problems/invalid-request"), Some(3000)),
            "{partial}"
        );
        let charge = &charges_of(sandbox, &payment_id).await[0];
        assert_eq!(
            (
                charge["outcome"].as_str(),
                charge["captures"].as_array().map(Vec::len)
            ),
            (Some("authorized"), Some(0)),
            "{charge}"
        );
        assert_eq!(payment_state(sandbox, token, &order).await, "authorized");
    }
    let (status, _, _) = operate(sandbox, token, &payment_id, "capture", "cap-1", None).await;
    assert_eq!(status, 403);
    // Staff capture it (all of it: Omise and Square capture whole): 201, replayed, then nothing
    // left.
    let (status, captured, _) =
        operate(sandbox, &staff, &payment_id, "capture", "cap-1", None).await;
    assert_eq!(
        (
            status,
            captured["status"].as_str(),
            captured["amount_captured"].as_i64()
        ),
        (201, Some("succeeded"), Some(3000)),
        "{captured}"
    );
    let (status, replayed, headers) =
        operate(sandbox, &staff, &payment_id, "capture", "cap-1", None).await;
    assert_eq!((status, &replayed), (201, &captured));
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    let (status, twice, _) = operate(sandbox, &staff, &payment_id, "capture", "cap-2", None).await;
    assert_eq!(
        (status, twice["type"].as_str()),
        (409, Some("/problems/payment-not-capturable")),
        "{twice}"
    );
    assert_eq!(payment_state(sandbox, token, &order).await, "paid");
    let charge = &charges_of(sandbox, &payment_id).await[0];
    // Square's CompletePayment and CancelPayment take no idempotency key: at most once comes
    // from the payment's claim alone (the fake records the call under no key).
    let derived = match sandbox.kind {
        Psp::Square => Value::Null,
        _ => json!(format!("payonce-capture-{payment_id}")),
    };
    assert_eq!(
        (
            charge["outcome"].as_str(),
            charge["captures"].as_array().map(Vec::len)
        ),
        (Some("succeeded"), Some(1)),
        "{charge}"
    );
    assert_eq!(
        charge["captures"][0]["idempotency_key"], derived,
        "{charge}"
    );
    assert_eq!(charge["captures"][0]["amount"], 3000, "{charge}");

    // Another authorization, canceled by staff: 200, the order free, then 409.
    let order = new_order(sandbox, token).await;
    let (status, authorized, _) = sandbox
        .post(
            "/payments",
            token,
            Some("later-3"),
            manual(&order, "pm_card_visa"),
        )
        .await;
    assert_eq!(status, 201, "{authorized}");
    let payment_id = authorized["payment_id"].as_str().unwrap().to_owned();
    let (status, canceled, _) =
        operate(sandbox, &staff, &payment_id, "cancel", "can-1", None).await;
    assert_eq!(
        (status, canceled["status"].as_str()),
        (200, Some("canceled")),
        "{canceled}"
    );
    assert_eq!(payment_state(sandbox, token, &order).await, "unpaid");
    let (status, again, _) = operate(sandbox, &staff, &payment_id, "cancel", "can-2", None).await;
    assert_eq!(
        (status, again["type"].as_str()),
        (409, Some("/problems/payment-not-cancelable")),
        "{again}"
    );
    let charge = &charges_of(sandbox, &payment_id).await[0];
    assert_eq!(
        (
            charge["outcome"].as_str(),
            charge["cancels"].as_array().map(Vec::len)
        ),
        (Some("canceled"), Some(1)),
        "{charge}"
    );
    // PayPal's void takes no `PayPal-Request-Id` either.
    let derived = match sandbox.kind {
        Psp::Square | Psp::PayPal => Value::Null,
        _ => json!(format!("payonce-cancel-{payment_id}")),
    };
    assert_eq!(charge["cancels"][0]["idempotency_key"], derived, "{charge}");
}

/// The lost response's first answer, 202 `processing`, then retries until the PSP's webhook has
/// settled the payment: its 201.
async fn settled_by_the_webhook(
    sandbox: &Sandbox,
    token: &str,
    lost_order: &Value,
    status: u16,
    pending: &Value,
    headers: &reqwest::header::HeaderMap,
) -> Value {
    let pay = |order: &Value, pm: &str| json!({"order_id": order["order_id"], "order_version": 1, "payment_method": pm});
    assert_eq!(
        (status, pending["status"].as_str()),
        (202, Some("processing")),
        "{pending}"
    );
    assert!(headers.get("retry-after").is_some());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body, _) = sandbox
            .post(
                "/payments",
                token,
                Some("walk-2"),
                pay(lost_order, "pm_fake_lost_response"),
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
    }
}

/// The charge `payment_id` was settled by, as the fake PSP's own API returns it (a Stripe
/// PaymentIntent, an Omise charge, a Square Payment, the capture of a PayPal order), or for 2C2P
/// the claims of its approval as a backend notification carries them (the fake's inquiry view:
/// invoice, amount, `tranRef`).
async fn provider_object(sandbox: &Sandbox, payment_id: &str) -> Value {
    let charges = sandbox.charges().await;
    let charge = charges
        .iter()
        .find(|c| c["payment_id"] == payment_id && c["outcome"] == "succeeded")
        .unwrap_or_else(|| panic!("a succeeded charge for {payment_id}: {charges:?}"));
    let id = charge["id"].as_str().unwrap();
    if sandbox.kind == Psp::TwoC2p {
        assert_eq!(charge["currency"], "jpy", "{charge}");
        return twoc2p_claims(
            charge["invoice_no"].as_str().unwrap(),
            id,
            &charge["amount"].to_string(),
        );
    }
    let request = match sandbox.kind {
        Psp::Stripe => sandbox
            .http
            .get(format!("{}/v1/payment_intents/{id}", sandbox.psp))
            .bearer_auth(DEFAULT_API_KEY),
        Psp::Omise => sandbox
            .http
            .get(format!("{}/charges/{id}", sandbox.psp))
            .basic_auth(DEFAULT_API_KEY, Some("")),
        Psp::Square => sandbox
            .http
            .get(format!("{}/v2/payments/{id}", sandbox.psp))
            .bearer_auth(DEFAULT_API_KEY),
        // The order's capture, as `PAYMENT.CAPTURE.COMPLETED` carries it.
        Psp::PayPal => {
            let capture = &charge["object"]["purchase_units"][0]["payments"]["captures"][0];
            sandbox
                .http
                .get(format!(
                    "{}/v2/payments/captures/{}",
                    sandbox.psp,
                    capture["id"].as_str().unwrap()
                ))
                .bearer_auth(paypal_access_token(sandbox).await)
        }
        Psp::TwoC2p => unreachable!("answered above"),
    };
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let object: Value = response.json().await.unwrap();
    if sandbox.kind == Psp::PayPal {
        // Completed, ours by its custom_id, naming its order.
        assert_eq!(
            (
                object["status"].as_str(),
                object["custom_id"].as_str(),
                object["supplementary_data"]["related_ids"]["order_id"].as_str()
            ),
            (Some("COMPLETED"), Some(payment_id), Some(id)),
            "{object}"
        );
        return object;
    }
    if sandbox.kind != Psp::Square {
        return object;
    }
    // `{"payment": {…}}`: completed, ours by its reference_id.
    let payment = object["payment"].clone();
    assert_eq!(
        (payment["status"].as_str(), payment["reference_id"].as_str()),
        (Some("COMPLETED"), Some(payment_id)),
        "{object}"
    );
    payment
}

/// An access token from the fake PayPal (client credentials: its default client id, and the
/// sandbox's API key as the secret).
async fn paypal_access_token(sandbox: &Sandbox) -> String {
    let answer: Value = sandbox
        .http
        .post(format!("{}/v1/oauth2/token", sandbox.psp))
        .basic_auth(DEFAULT_PAYPAL_CLIENT_ID, Some(DEFAULT_API_KEY))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["access_token"].as_str().unwrap().to_owned()
}

/// `epoch_s` as RFC 3339 in UTC, to the second (PayPal's `PAYPAL-TRANSMISSION-TIME`).
fn rfc3339(epoch_s: i64) -> String {
    // Days to the civil date (Howard Hinnant's `civil_from_days`).
    let (days, secs) = (epoch_s.div_euclid(86_400), epoch_s.rem_euclid(86_400));
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// PayPal's delivery headers for `body`, sent at `sent_s`, signed by `signer` for the webhook id
/// `webhook_id`, naming the certificate at `cert_url`.
fn paypal_headers(
    signer: &PayPalSigner,
    webhook_id: &str,
    cert_url: &str,
    sent_s: i64,
    body: &str,
) -> Vec<(&'static str, String)> {
    let transmission_id = format!("sandbox-test-{}", uuid_suffix());
    let time = rfc3339(sent_s);
    let signature =
        sign_paypal_webhook(signer, &transmission_id, &time, webhook_id, body.as_bytes());
    vec![
        ("paypal-transmission-id", transmission_id),
        ("paypal-transmission-time", time),
        ("paypal-transmission-sig", signature),
        ("paypal-cert-url", cert_url.to_owned()),
        ("paypal-auth-algo", PAYPAL_AUTH_ALGO.to_owned()),
    ]
}

/// A PayPal `PAYMENT.CAPTURE.COMPLETED` event `event_id` about the capture `capture`.
fn paypal_capture_event(event_id: &str, capture: &Value) -> String {
    json!({"id": event_id, "event_version": "1.0", "create_time": "2026-01-01T00:00:00Z",
        "resource_type": "capture", "resource_version": "2.0",
        "event_type": "PAYMENT.CAPTURE.COMPLETED", "summary": "Payment completed",
        "resource": capture})
    .to_string()
}

/// The claims of a 2C2P approval of invoice `invoice_no` (JPY `amount`, major units = minor),
/// charge `tran_ref`, for the test's merchant.
fn twoc2p_claims(invoice_no: &str, tran_ref: &str, amount: &str) -> Value {
    json!({"merchantID": TWOC2P_MERCHANT_ID, "invoiceNo": invoice_no, "amount": amount,
        "currencyCode": "JPY", "tranRef": tran_ref, "channelCode": "CC",
        "transactionDateTime": "20260101000000", "respCode": "0000", "respDesc": "Success"})
}

/// A signed event of `kind`'s format about `object` (a success), with its signature headers;
/// a Square event is signed for the notification URL of `sandbox`, a PayPal one with the test's
/// key for its webhook id, naming the certificate on `sandbox`'s fake PSP.
fn signed_event(
    kind: Psp,
    sandbox: &Sandbox,
    event_id: &str,
    object: &Value,
) -> (String, Vec<(&'static str, String)>) {
    let api = &sandbox.api;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    match kind {
        Psp::Stripe => {
            let body =
                json!({"id": event_id, "object": "event", "type": "payment_intent.succeeded",
                "livemode": false, "created": now, "data": {"object": object}})
                .to_string();
            let signature = sign_webhook(STRIPE_SECRET, now as i64, body.as_bytes());
            (body, vec![("stripe-signature", signature)])
        }
        Psp::Omise => {
            let body = json!({"object": "event", "id": event_id, "key": "charge.complete",
                "livemode": false, "data": object})
            .to_string();
            let timestamp = now.to_string();
            let signature = sign_omise_webhook(OMISE_KEY, &timestamp, body.as_bytes());
            (
                body,
                vec![
                    ("omise-signature", signature),
                    ("omise-signature-timestamp", timestamp),
                ],
            )
        }
        // 2C2P sends no event id (the dedup key is read from the claims) and no header: the
        // body's JWT is signed with the merchant secret key.
        Psp::TwoC2p => {
            let _ = event_id;
            let body = json!({"payload": sign_token(TWOC2P_SECRET_KEY, object)}).to_string();
            (body, Vec::new())
        }
        // Square's `payment.updated` carries the Payment (`data.object.payment`); its signature
        // covers the subscription's notification URL, the sandbox's own webhook route, then the
        // body. Square signs no timestamp.
        Psp::Square => {
            let body = json!({"merchant_id": "PAYONCEFAKESQ", "type": "payment.updated",
                "event_id": event_id,
                "created_at": object.get("updated_at").cloned()
                    .unwrap_or_else(|| json!("2026-01-01T00:00:00.000Z")),
                "data": {"type": "payment", "id": object["id"],
                    "object": {"payment": object}}})
            .to_string();
            let url = format!("{api}/webhooks/{}", kind.provider());
            let signature = sign_square_webhook(SQUARE_SIGNATURE_KEY, &url, body.as_bytes());
            (body, vec![("x-square-hmacsha256-signature", signature)])
        }
        // PayPal's `PAYMENT.CAPTURE.COMPLETED` carries the capture; its signature covers the
        // transmission id and time, our webhook id and the body's CRC-32, by the key of the
        // certificate `PAYPAL-CERT-URL` names.
        Psp::PayPal => {
            let body = paypal_capture_event(event_id, object);
            let cert_url = format!("{}{PAYPAL_CERT_PATH}", sandbox.psp);
            let headers = paypal_headers(
                paypal_signer(),
                PAYPAL_WEBHOOK_ID,
                &cert_url,
                now as i64,
                &body,
            );
            (body, headers)
        }
    }
}

async fn post_webhook(
    sandbox: &Sandbox,
    provider: &str,
    (body, headers): &(String, Vec<(&'static str, String)>),
) -> u16 {
    let mut request = sandbox
        .http
        .post(format!("{}/webhooks/{provider}", sandbox.api))
        .header("content-type", "application/json")
        .body(body.clone());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Delivers the success of `payment_id` twice more under one event id: both acknowledged, the
/// payment still succeeded once, and no new charge.
async fn duplicate_webhook(sandbox: &Sandbox, token: &str, payment_id: &str) {
    let object = provider_object(sandbox, payment_id).await;
    let event_id = match sandbox.kind {
        Psp::Stripe => "evt_sandbox_duplicate_1",
        Psp::Omise => "evnt_test_sandbox_duplicate_1",
        Psp::TwoC2p => "unused",
        Psp::Square => "5d0c2a8e-3f41-4b6a-9c1e-7a2b9f0d4e61",
        Psp::PayPal => "WH-2SANDBOXDUPLICAT-1SANDBOXDUPLICAT",
    };
    let event = signed_event(sandbox.kind, sandbox, event_id, &object);
    for _ in 0..2 {
        assert_eq!(
            post_webhook(sandbox, sandbox.kind.provider(), &event).await,
            200
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let details: Value = sandbox
        .http
        .get(format!("{}/payments/{payment_id}", sandbox.api))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(details["status"], "succeeded", "{details}");
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
    if !sandbox.refunds {
        twoc2p_refunds_not_supported(sandbox, &staff, &refunds, payment_id).await;
        return;
    }
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
    assert!(
        sandbox.refunds().await.is_empty(),
        "none of these reached the PSP"
    );
    if sandbox.kind == Psp::TwoC2p {
        assert_eq!(
            sandbox.twoc2p_actions().await,
            [],
            "nor 2C2P's maintenance API"
        );
    }

    // A refund by staff: exactly one refund at the PSP, of that amount, under our refund id.
    // (Square's refunds start pending: 202, then its refund.updated webhook completes it and
    // the replay answers 201.)
    let body = json!({"amount": 1000});
    let (status, refunded, headers) = sandbox
        .post(&refunds, &staff, Some("refund-3"), body.clone())
        .await;
    let expected = match sandbox.kind {
        Psp::Square => (202, Some("pending")),
        _ => (201, Some("succeeded")),
    };
    assert_eq!(
        (status, refunded["status"].as_str()),
        expected,
        "{refunded}"
    );
    let refunded = if status == 202 {
        assert!(headers.get("retry-after").is_some());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, answer, _) = sandbox
                .post(&refunds, &staff, Some("refund-3"), body.clone())
                .await;
            if status == 201 {
                break answer;
            }
            assert_eq!(status, 202, "{answer}");
            assert!(Instant::now() < deadline, "still pending: {answer}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        refunded
    };
    assert_eq!(
        (
            refunded["status"].as_str(),
            refunded["amount"].as_i64(),
            refunded["payment_id"].as_str()
        ),
        (Some("succeeded"), Some(1000), Some(payment_id)),
        "{refunded}"
    );
    let at_the_psp = sandbox.refunds().await;
    assert_eq!(at_the_psp.len(), 1, "{at_the_psp:?}");
    // 2C2P's refunds carry none of our ids: the fake keeps the `idempotencyID` payonce sent (our
    // refund id and the action, `-R`) as the refund's `idempotency_key`, and the refund is ours
    // by its own reference.
    let our_id = match sandbox.kind {
        Psp::TwoC2p => serde_json::Value::from(
            at_the_psp[0]["idempotency_key"]
                .as_str()
                .and_then(|key| key.strip_suffix("-R"))
                .unwrap_or_default(),
        ),
        _ => at_the_psp[0]["refund_id"].clone(),
    };
    assert_eq!(
        (
            at_the_psp[0]["outcome"].as_str(),
            at_the_psp[0]["amount"].as_i64(),
            our_id.as_str(),
            at_the_psp[0]["payment_id"].as_str()
        ),
        (
            Some("succeeded"),
            Some(1000),
            refunded["refund_id"].as_str(),
            Some(payment_id)
        ),
        "{at_the_psp:?}"
    );
    if sandbox.kind == Psp::TwoC2p {
        // The refund status read (`RS`), then the refund (`R`) of the settled payment, each of
        // its invoice (the payment's id without its prefix), in major units (JPY has no minor
        // unit); nothing else.
        assert_eq!(
            at_the_psp[0]["id"], refunded["provider_refund_id"],
            "{at_the_psp:?}"
        );
        let invoice = payment_id.trim_start_matches("pay_").to_owned();
        let call = |process: &str, amount: &str| {
            (
                process.to_owned(),
                invoice.clone(),
                amount.to_owned(),
                "00".to_owned(),
            )
        };
        // The status carries the transaction's amount (the payment's 3000), the refund its own.
        assert_eq!(
            sandbox.twoc2p_actions().await,
            [call("RS", "3000"), call("R", "1000")]
        );
    }
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
            details["amount_refunded"].as_i64(),
            details["amount_refund_pending"].as_i64()
        ),
        (Some("partially_refunded"), Some(1000), Some(0)),
        "{details}"
    );
}

/// 2C2P without its refunds (`--no-2c2p-refunds`), past the scope gate: every refund is answered
/// 409 `refund-not-supported` before anything is claimed or looked up (2C2P's refunds need its
/// Payment Maintenance API); nothing refunded, no maintenance call.
async fn twoc2p_refunds_not_supported(
    sandbox: &Sandbox,
    staff: &str,
    refunds: &str,
    payment_id: &str,
) {
    for (path, key, body) in [
        (refunds, "refund-1", json!({"amount": 1000})),
        (refunds, "refund-2", json!({})),
        (
            "/payments/pay_00000000000000000000000000000000/refunds",
            "refund-unknown",
            json!({}),
        ),
    ] {
        let (status, refused, headers) = sandbox.post(path, staff, Some(key), body).await;
        assert_eq!(
            (status, refused["type"].as_str()),
            (409, Some("/problems/refund-not-supported")),
            "{path}: {refused}"
        );
        assert_eq!(
            headers.get("content-type").unwrap(),
            "application/problem+json"
        );
        assert!(headers.get("x-request-id").is_some());
    }
    let details: Value = sandbox
        .http
        .get(format!("{}/payments/{payment_id}", sandbox.api))
        .bearer_auth(staff)
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
    assert!(sandbox.refunds().await.is_empty(), "nothing refunded");
    assert_eq!(sandbox.twoc2p_actions().await, [], "no maintenance call");
}

async fn on_the_embedded_store(kind: Psp) {
    let sandbox = Sandbox::start(kind, &[], &[]);
    walkthrough(&sandbox).await;
    sandbox.stop();
}

async fn on_dynamodb_local_and_moto(kind: Psp) {
    let endpoint = std::env::var("PAYONCE_TEST_DYNAMODB_ENDPOINT")
        .expect("run through scripts/test (DynamoDB Local)");
    let sqs = std::env::var("PAYONCE_TEST_SQS_ENDPOINT").expect("run through scripts/test (moto)");
    let suffix = uuid_suffix();
    let sandbox = Sandbox::start(
        kind,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_the_embedded_store() {
    on_the_embedded_store(Psp::Stripe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_omise_on_the_embedded_store() {
    on_the_embedded_store(Psp::Omise).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_2c2p_on_the_embedded_store() {
    on_the_embedded_store(Psp::TwoC2p).await;
}

/// 2C2P as a deployment with `TwoC2pRefunds=disabled`: `--no-2c2p-refunds`, or
/// `PAYONCE_LOCAL_2C2P_REFUNDS=disabled`; the banner says refunds are off, and each refund past
/// the scope gate is answered 409 `refund-not-supported`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2c2p_sandbox_without_refunds_answers_409() {
    let by_flag = Sandbox::start(Psp::TwoC2p, &["--no-2c2p-refunds"], &[]);
    let by_env = Sandbox::start(
        Psp::TwoC2p,
        &[],
        &[("PAYONCE_LOCAL_2C2P_REFUNDS", "disabled".to_owned())],
    );
    for sandbox in [by_flag, by_env] {
        assert!(!sandbox.refunds);
        let token = sandbox.token("alice", 3600);
        let order = new_order(&sandbox, &token).await;
        let (status, paid, _) = sandbox
            .post(
                "/payments",
                &token,
                Some("pay-1"),
                json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"}),
            )
            .await;
        assert_eq!(
            (status, paid["status"].as_str()),
            (201, Some("succeeded")),
            "{paid}"
        );
        refund_gate(&sandbox, &token, paid["payment_id"].as_str().unwrap()).await;
        sandbox.stop();
    }
}

/// 2C2P as a deployment with `TwoC2pSettlement=manual`, on an account the fake settles manually
/// too: the whole walkthrough (its automatic payments settled by payonce at once), and capture
/// later through a settle and a void.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_a_2c2p_account_that_settles_manually() {
    let sandbox = Sandbox::start(Psp::TwoC2p, &["--2c2p-manual-settlement"], &[]);
    assert!(sandbox.manual_settlement && sandbox.refunds);
    walkthrough(&sandbox).await;
    sandbox.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_square_on_the_embedded_store() {
    on_the_embedded_store(Psp::Square).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_paypal_on_the_embedded_store() {
    on_the_embedded_store(Psp::PayPal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_dynamodb_local_and_moto() {
    on_dynamodb_local_and_moto(Psp::Stripe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_omise_on_dynamodb_local_and_moto() {
    on_dynamodb_local_and_moto(Psp::Omise).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_2c2p_on_dynamodb_local_and_moto() {
    on_dynamodb_local_and_moto(Psp::TwoC2p).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_square_on_dynamodb_local_and_moto() {
    on_dynamodb_local_and_moto(Psp::Square).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_on_paypal_on_dynamodb_local_and_moto() {
    on_dynamodb_local_and_moto(Psp::PayPal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_for_another_provider_get_404() {
    let all = [
        Psp::Stripe,
        Psp::Omise,
        Psp::TwoC2p,
        Psp::Square,
        Psp::PayPal,
    ];
    for kind in all {
        let sandbox = Sandbox::start(kind, &[], &[]);
        let (own, others): (&[&str], &[&str]) = match kind {
            Psp::Stripe => (&["fake", "stripe"], &["omise", "2c2p", "square", "paypal"]),
            Psp::Omise => (&["omise"], &["fake", "stripe", "2c2p", "square", "paypal"]),
            Psp::TwoC2p => (&["2c2p"], &["fake", "stripe", "omise", "square", "paypal"]),
            Psp::Square => (&["square"], &["fake", "stripe", "omise", "2c2p", "paypal"]),
            Psp::PayPal => (&["paypal"], &["fake", "stripe", "omise", "2c2p", "square"]),
        };
        // Each format's correctly signed event, about no payment of ours.
        let object = |id: &str| match kind {
            Psp::Stripe => json!({"id": id, "object": "payment_intent", "amount": 3000,
                "currency": "jpy", "status": "succeeded", "livemode": false, "metadata": {}}),
            Psp::Omise => json!({"id": id, "object": "charge", "amount": 3000,
                "currency": "JPY", "status": "successful", "livemode": false, "metadata": {}}),
            Psp::TwoC2p => twoc2p_claims("INVNOTOURS1", "7654321", "3000"),
            // A payment taken another way on the account: no reference_id of ours.
            Psp::Square => json!({"id": id, "status": "COMPLETED",
                "amount_money": {"amount": 3000, "currency": "JPY"}}),
            // A capture of an order made another way: no custom_id of ours.
            Psp::PayPal => json!({"id": id, "status": "COMPLETED",
                "amount": {"currency_code": "JPY", "value": "3000"}}),
        };
        let mine = signed_event(kind, &sandbox, "evt_other_1", &object("pi_other_1"));
        // The other formats' signed events: the 2C2P one (a JWT body, no header) too.
        let theirs: Vec<_> = all
            .into_iter()
            .filter(|other| *other != kind)
            .map(|other| {
                let object = match other {
                    Psp::TwoC2p => twoc2p_claims("INVNOTOURS2", "1234567", "3000"),
                    Psp::Stripe | Psp::Omise | Psp::Square | Psp::PayPal => {
                        json!({"id": "x", "object": "charge", "metadata": {}})
                    }
                };
                signed_event(other, &sandbox, "evt_other_2", &object)
            })
            .collect();
        for provider in others {
            for event in std::iter::once(&mine).chain(&theirs) {
                assert_eq!(
                    post_webhook(&sandbox, provider, event).await,
                    404,
                    "--psp {}: /webhooks/{provider}",
                    kind.name()
                );
            }
        }
        for provider in own {
            // The route exists: the other formats' signatures are refused, its own accepted.
            for event in &theirs {
                assert_eq!(
                    post_webhook(&sandbox, provider, event).await,
                    400,
                    "--psp {}: /webhooks/{provider}",
                    kind.name()
                );
            }
            assert_eq!(
                post_webhook(&sandbox, provider, &mine).await,
                200,
                "--psp {}: /webhooks/{provider}",
                kind.name()
            );
        }
        if kind == Psp::PayPal {
            paypal_certificate_rules(&sandbox).await;
        }
        sandbox.stop();
    }
}

/// The PayPal sandbox verifies a delivery with the certificate its fake PSP serves, fetched
/// from the fake's own origin and nowhere else: the same event is refused 401 when another key
/// signed it, when it names a certificate anywhere else (never fetched), when it was signed for
/// another webhook id, or when its transmission time is stale; signed as the fake signs, 200.
async fn paypal_certificate_rules(sandbox: &Sandbox) {
    let capture = json!({"id": "3C679366HH908993F", "status": "COMPLETED",
        "amount": {"currency_code": "JPY", "value": "3000"}});
    let body = paypal_capture_event("WH-1SANDBOXCERTRULE-2SANDBOXCERTRULE", &capture);
    let fake_cert = format!("{}{PAYPAL_CERT_PATH}", sandbox.psp);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let stranger = PayPalSigner::generate().unwrap();
    for (what, signer, webhook_id, cert_url, sent_s) in [
        (
            "another key",
            &stranger,
            PAYPAL_WEBHOOK_ID,
            fake_cert.clone(),
            now_s,
        ),
        (
            "PayPal's own host",
            paypal_signer(),
            PAYPAL_WEBHOOK_ID,
            format!("https://api.paypal.com{PAYPAL_CERT_PATH}"),
            now_s,
        ),
        (
            "the sandbox's own origin",
            paypal_signer(),
            PAYPAL_WEBHOOK_ID,
            format!("{}{PAYPAL_CERT_PATH}", sandbox.api),
            now_s,
        ),
        (
            "another webhook id",
            paypal_signer(),
            "PAYONCEOTHERWH001",
            fake_cert.clone(),
            now_s,
        ),
        (
            "ten minutes ago",
            paypal_signer(),
            PAYPAL_WEBHOOK_ID,
            fake_cert.clone(),
            now_s - 600,
        ),
    ] {
        let headers = paypal_headers(signer, webhook_id, &cert_url, sent_s, &body);
        assert_eq!(
            post_webhook(sandbox, "paypal", &(body.clone(), headers)).await,
            401,
            "{what}"
        );
    }
    let headers = paypal_headers(paypal_signer(), PAYPAL_WEBHOOK_ID, &fake_cert, now_s, &body);
    assert_eq!(post_webhook(sandbox, "paypal", &(body, headers)).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problem_types_resolve_to_their_pages_and_the_document_is_served() {
    let sandbox = Sandbox::start(Psp::Stripe, &[], &[]);
    let get = |path: &str| sandbox.http.get(format!("{}{path}", sandbox.api)).send();

    // WHEN the document is fetched, with no token
    let served = get("/openapi.json").await.unwrap();
    // THEN it is the committed docs/openapi.json, byte for byte but for the payment method's
    // pattern, narrowed to the sandbox's PSP
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "application/json");
    let committed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json"),
    )
    .unwrap();
    let stripe_pattern = r#""pattern": "^pm_[A-Za-z0-9_]{1,252}$""#;
    assert_eq!(
        served.text().await.unwrap(),
        committed.replacen(
            r#""pattern": "^[A-Za-z0-9+/=_.:-]{4,2048}$""#,
            stripe_pattern,
            1
        )
    );

    // WHEN the API answers a problem (a payment without its Idempotency-Key)
    let token = sandbox.token("alice", 600);
    let (status, problem, headers) = sandbox
        .post(
            "/payments",
            &token,
            None,
            json!({"order_id": "ord_1", "order_version": 1, "payment_method": "pm_card_visa"}),
        )
        .await;
    // THEN its instance is the request id, and its relative type resolves to a page saying
    // what it means and what to do
    assert_eq!(status, 400);
    assert_eq!(
        problem["instance"].as_str(),
        headers["x-request-id"].to_str().ok()
    );
    let page = get(problem["type"].as_str().unwrap()).await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let page = page.text().await.unwrap();
    assert!(
        page.contains("Idempotency-Key header required") && page.contains("What to do"),
        "{page}"
    );

    // AND so does every problem type's, from the one table
    for kind in payonce::http::ProblemType::ALL {
        let page = get(&kind.uri()).await.unwrap();
        assert_eq!(page.status(), 200, "{}", kind.uri());
        assert_eq!(page.text().await.unwrap(), kind.page());
    }
    // AND an unknown slug, or a method no route has, is API Gateway's own 404, as in AWS (not
    // the function's 405: API Gateway never passes such a request on)
    assert_eq!(
        get("/problems/no-such-problem").await.unwrap().status(),
        404
    );
    for (method, path) in [
        ("POST", "/openapi.json"),
        ("DELETE", "/orders"),
        ("PUT", "/payments/pay_1"),
    ] {
        let answer = sandbox
            .http
            .request(method.parse().unwrap(), format!("{}{path}", sandbox.api))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 404, "{method} {path}");
        assert!(
            answer.headers().contains_key("apigw-requestid"),
            "{method} {path}"
        );
        assert_eq!(
            answer.json::<Value>().await.unwrap(),
            json!({"message": "Not Found"}),
            "{method} {path}"
        );
    }

    // AND a development token is minted for a user of the declared shape, `demo-user` when
    // none is asked, and a malformed user is refused, never replaced
    let minted = |path: &'static str| async move {
        let answer = get(path).await.unwrap();
        (
            answer.status().as_u16(),
            answer.json::<Value>().await.unwrap(),
        )
    };
    let (status, bob) = minted("/_sandbox/token?user=bob_1").await;
    assert_eq!((status, bob["user"].as_str()), (200, Some("bob_1")));
    let (status, default) = minted("/_sandbox/token").await;
    assert_eq!((status, default["user"].as_str()), (200, Some("demo-user")));
    for malformed in ["/_sandbox/token?user=%C3%91", "/_sandbox/token?user="] {
        let (status, problem) = minted(malformed).await;
        assert_eq!(
            (status, problem["type"].as_str()),
            (400, Some("/problems/invalid-request")),
            "{malformed}: {problem}"
        );
    }
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

/// `--help` prints both commands' usage and succeeds; an unknown flag is refused with exit
/// status 2, naming it.
#[test]
fn help_is_printed_and_an_unknown_flag_refused() {
    let help = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: payonce-local [OPTIONS]")
            && text.contains("--port <PORT>")
            && text.contains("token"),
        "{text}"
    );
    let token_help = std::process::Command::new(BIN)
        .args(["token", "--help"])
        .output()
        .unwrap();
    assert!(token_help.status.success());
    let text = String::from_utf8_lossy(&token_help.stdout);
    assert!(
        text.contains("Usage: payonce-local token [OPTIONS] <USER>") && text.contains("--scope"),
        "{text}"
    );
    let bogus = std::process::Command::new(BIN)
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(bogus.status.code(), Some(2), "{bogus:?}");
    assert!(
        String::from_utf8_lossy(&bogus.stderr).contains("unexpected argument '--bogus'"),
        "{bogus:?}"
    );
}
