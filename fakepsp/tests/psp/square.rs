//! The Square face over real HTTP: bearer authentication and `Square-Version`, the connection
//! cut of a lost response, webhooks signed with `x-square-hmacsha256-signature` over the
//! notification URL, the inspection endpoint, the binary's `--provider square`. The face's
//! rules themselves are tested on the model (`square` module).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use payonce_fake_psp::{
    sign_square_webhook, FakePspConfig, Provider, RunningFakePsp, DEFAULT_API_KEY,
    DEFAULT_SQUARE_SIGNATURE_KEY,
};
use serde_json::{json, Value};

use crate::support::{client, loopback, start_with};

/// A Square request as an adapter makes it: the bearer token and a pinned `Square-Version`.
fn square(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
) -> reqwest::RequestBuilder {
    client
        .request(method, url)
        .bearer_auth(token)
        .header("Square-Version", "2025-08-20")
}

/// `POST /v2/payments` of USD 30.00 with `source_id`, for payonce payment `reference_id`.
async fn create(
    client: &reqwest::Client,
    base_url: &str,
    token: &str,
    key: &str,
    source_id: &str,
    autocomplete: bool,
) -> reqwest::Result<reqwest::Response> {
    square(
        client,
        reqwest::Method::POST,
        format!("{base_url}/v2/payments"),
        token,
    )
    .json(&json!({
        "idempotency_key": key,
        "source_id": source_id,
        "amount_money": {"amount": 3000, "currency": "USD"},
        "autocomplete": autocomplete,
        "reference_id": format!("pay_{key}"),
    }))
    .send()
    .await
}

async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// One delivery: the event, and whether its Square signature verified over the URL it was
/// subscribed with.
#[derive(Clone, Debug)]
struct Delivery {
    event: Value,
    signature_valid: bool,
}

#[derive(Clone)]
struct Sink {
    signature_key: String,
    notification_url: Arc<Mutex<String>>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl Sink {
    /// The deliveries once `count` have arrived (or what arrived within 5 s).
    async fn wait_for(&self, count: usize) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        for _ in 0..100 {
            deliveries = self
                .deliveries
                .lock()
                .map(|d| d.clone())
                .unwrap_or_default();
            if deliveries.len() >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        deliveries
    }
}

async fn receive(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers
        .get("x-square-hmacsha256-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let url = sink
        .notification_url
        .lock()
        .map(|url| url.clone())
        .unwrap_or_default();
    let signature_valid = signature == sign_square_webhook(&sink.signature_key, &url, &body);
    let event = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Ok(mut deliveries) = sink.deliveries.lock() {
        deliveries.push(Delivery {
            event,
            signature_valid,
        });
    }
    StatusCode::OK
}

/// A receiver at `/webhooks/square` verifying with `signature_key`: its URL and what it saw.
async fn receiver(signature_key: &str) -> (String, Sink, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(loopback())
        .await
        .expect("bind");
    let url = format!(
        "http://{}/webhooks/square",
        listener.local_addr().expect("addr")
    );
    let sink = Sink {
        signature_key: signature_key.to_owned(),
        notification_url: Arc::new(Mutex::new(url.clone())),
        deliveries: Arc::default(),
    };
    let app = Router::new()
        .route("/webhooks/square", post(receive))
        .with_state(sink.clone());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, sink, server)
}

#[tokio::test]
async fn the_square_face_speaks_bearer_auth_and_signs_its_webhooks_over_the_notification_url() {
    // GIVEN a Square face delivering to a receiver that verifies with the default key
    let (url, sink, server) = receiver(DEFAULT_SQUARE_SIGNATURE_KEY).await;
    let psp: RunningFakePsp = start_with(FakePspConfig {
        webhook_url: Some(url),
        ..FakePspConfig::square()
    })
    .await;
    assert_eq!(psp.provider(), Provider::Square);
    let client = client();
    let base_url = psp.base_url();

    // WHEN a payment is approved and completed, and a request comes with a wrong token
    let (status, created) = status_and_json(
        create(
            &client,
            &base_url,
            DEFAULT_API_KEY,
            "k1",
            "pm_card_visa",
            false,
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["payment"]["status"], "APPROVED");
    let id = created["payment"]["id"].as_str().unwrap_or_default();
    let (status, completed) = status_and_json(
        square(
            &client,
            reqwest::Method::POST,
            format!("{base_url}/v2/payments/{id}/complete"),
            DEFAULT_API_KEY,
        )
        .json(&json!({}))
        .send()
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(
        (status, completed["payment"]["status"].as_str()),
        (200, Some("COMPLETED"))
    );
    let (status, refused) = status_and_json(
        create(&client, &base_url, "EAAAwrong", "k2", "pm_card_visa", true)
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(
        (status, refused["errors"][0]["code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );

    // THEN payment.created and payment.updated arrive, each signed over the receiver's URL
    let deliveries = sink.wait_for(2).await;
    server.abort();
    let kinds: Vec<&str> = deliveries
        .iter()
        .map(|d| d.event["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["payment.created", "payment.updated"]);
    for delivery in &deliveries {
        assert!(delivery.signature_valid, "{:?}", delivery.event);
        assert_eq!(delivery.event["data"]["id"], id);
    }
    assert_eq!(
        deliveries[1].event["data"]["object"]["payment"],
        completed["payment"]
    );

    // AND the inspection endpoint lists the payment with Square's object
    let listed: Value = client
        .get(format!("{base_url}/_fake/charges"))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    let entry = &listed[0];
    for (field, expected) in [
        ("provider", "square"),
        ("id", id),
        ("status", "COMPLETED"),
        ("outcome", "succeeded"),
        ("currency", "usd"),
        ("payment_id", "pay_k1"),
        ("idempotency_key", "k1"),
        ("capture_method", "manual"),
    ] {
        assert_eq!(entry[field], expected, "{field}: {entry}");
    }
    assert_eq!(entry["object"], completed["payment"]);
    assert_eq!(psp.requests_seen(), 3);
}

#[tokio::test]
async fn a_lost_response_pays_then_cuts_the_connection_and_the_key_replays() {
    let psp = start_with(FakePspConfig::square()).await;
    let client = client();
    let base_url = psp.base_url();
    // WHEN the answer to a create is lost
    let lost = create(
        &client,
        &base_url,
        DEFAULT_API_KEY,
        "k",
        "pm_fake_lost_response",
        true,
    )
    .await
    .expect_err("no HTTP response at all");
    // THEN the payment was made, and the retry under the key replays it
    assert!(lost.status().is_none(), "{lost:?}");
    assert_eq!(psp.succeeded_charges_for("pay_k"), 1);
    let response = create(
        &client,
        &base_url,
        DEFAULT_API_KEY,
        "k",
        "pm_fake_lost_response",
        true,
    )
    .await
    .expect("answered");
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let (status, replayed) = status_and_json(response).await;
    assert_eq!(
        (status, replayed["payment"]["status"].as_str()),
        (200, Some("COMPLETED"))
    );
    assert_eq!(replayed["payment"]["id"], psp.charges()[0].id.as_str());
    assert_eq!(psp.charges().len(), 1);
}

#[tokio::test]
async fn the_binary_serves_the_square_face_signing_with_the_webhook_secret_flag() {
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // GIVEN the binary with --provider square, a receiver and its signature key
    let (url, sink, server) = receiver("square-key-from-flag").await;
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_payonce-fake-psp"))
            .args(["--provider", "square", "--addr", "127.0.0.1:0"])
            .args(["--api-key", "EAAAfromflag"])
            .args(["--webhook-url", &url])
            .args(["--webhook-secret", "square-key-from-flag"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("binary starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout piped");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader task")
    .expect("a start-up line");
    let base_url = line
        .trim_end()
        .strip_prefix("fake PSP listening on ")
        .expect("announces its URL")
        .to_owned();
    // WHEN a payment is made with the flag's token
    let (status, created) = status_and_json(
        create(
            &client(),
            &base_url,
            "EAAAfromflag",
            "k",
            "cnon:card-nonce-ok",
            true,
        )
        .await
        .expect("answered"),
    )
    .await;
    // THEN it is COMPLETED, and payment.created arrives signed with the flag's key
    assert_eq!(
        (status, created["payment"]["status"].as_str()),
        (200, Some("COMPLETED"))
    );
    let deliveries = sink.wait_for(1).await;
    server.abort();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].event["type"], "payment.created");
    assert!(deliveries[0].signature_valid);
}
