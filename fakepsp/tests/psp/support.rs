//! Shared helpers: starting a PSP, building Stripe-style requests, a webhook receiver.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use payonce_fake_psp::{sign_webhook, FakePsp, FakePspConfig, RunningFakePsp, DEFAULT_API_KEY};
use serde_json::Value;
use tokio::sync::mpsc;

/// Where tests bind: any free port on loopback.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A PSP with the default configuration.
pub async fn start() -> RunningFakePsp {
    start_with(FakePspConfig::default()).await
}

/// A PSP with the given configuration.
pub async fn start_with(config: FakePspConfig) -> RunningFakePsp {
    FakePsp::start(config, loopback())
        .await
        .expect("fake PSP starts")
}

/// A plain client (no timeout beyond the test's own).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client builds")
}

/// The form of a confirmed create request for `payment_id`, in Stripe's bracket syntax.
pub fn charge_form(token: &str, payment_id: &str) -> Vec<(String, String)> {
    [
        ("amount", "3000"),
        ("currency", "jpy"),
        ("payment_method", token),
        ("confirm", "true"),
        ("error_on_requires_action", "true"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
        ("metadata[payment_id]", payment_id),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// `POST /v1/payment_intents` with the default API key and an optional idempotency key.
pub async fn create(
    client: &reqwest::Client,
    psp: &RunningFakePsp,
    form: &[(String, String)],
    key: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let mut request = client
        .post(format!("{}/v1/payment_intents", psp.base_url()))
        .bearer_auth(DEFAULT_API_KEY)
        .form(form);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await
}

/// An authenticated GET of a `/v1` path.
pub async fn get(client: &reqwest::Client, psp: &RunningFakePsp, path: &str) -> reqwest::Response {
    client
        .get(format!("{}{path}", psp.base_url()))
        .bearer_auth(DEFAULT_API_KEY)
        .send()
        .await
        .expect("GET answered")
}

/// Status, `Idempotent-Replayed` and JSON body of a response.
pub async fn read(response: reqwest::Response) -> (u16, bool, Value) {
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = response.json().await.expect("JSON body");
    (status, replayed, body)
}

/// One webhook delivery as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The parsed event.
    pub event: Value,
    /// Whether `Stripe-Signature` matched `sign_webhook(secret, t, body)`.
    pub signature_valid: bool,
    /// Whether `Content-Type` was `application/json`.
    pub json_content_type: bool,
}

impl Delivery {
    /// The event id.
    pub fn id(&self) -> &str {
        self.event["id"].as_str().unwrap_or_default()
    }

    /// The event type.
    pub fn kind(&self) -> &str {
        self.event["type"].as_str().unwrap_or_default()
    }
}

#[derive(Clone)]
struct ReceiverState {
    secret: String,
    /// Answer 500 to this many requests before accepting (to exercise retries).
    fail_first: Arc<Mutex<u32>>,
    deliveries: mpsc::UnboundedSender<Delivery>,
}

/// A tiny local webhook endpoint that checks signatures the way payonce must.
pub struct Receiver {
    /// The URL to give the PSP.
    pub url: String,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver verifying with `secret` that refuses its first `fail_first` requests.
    pub async fn start(secret: &str, fail_first: u32) -> Self {
        let (tx, deliveries) = mpsc::unbounded_channel();
        let state = ReceiverState {
            secret: secret.to_owned(),
            fail_first: Arc::new(Mutex::new(fail_first)),
            deliveries: tx,
        };
        let app = Router::new()
            .route("/webhooks", post(receive))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(loopback())
            .await
            .expect("receiver binds");
        let url = format!(
            "http://{}/webhooks",
            listener.local_addr().expect("receiver address")
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            deliveries,
            server,
        }
    }

    /// The next delivery, or `None` if none arrives within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<Delivery> {
        tokio::time::timeout(within, self.deliveries.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next delivery; fails the test if none arrives within 5 s (a generous bound for a
    /// loaded machine: deliveries normally take milliseconds).
    pub async fn next(&mut self) -> Delivery {
        self.next_within(Duration::from_secs(5))
            .await
            .expect("a webhook delivery")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    {
        let mut fail_first = state.fail_first.lock().expect("lock");
        if *fail_first > 0 {
            *fail_first -= 1;
            return StatusCode::INTERNAL_SERVER_ERROR;
        }
    }
    let header = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let timestamp = header
        .split(',')
        .find_map(|part| part.strip_prefix("t="))
        .and_then(|t| t.parse::<i64>().ok());
    let signature_valid =
        timestamp.is_some_and(|t| sign_webhook(&state.secret, t, &body) == header);
    let json_content_type = headers
        .get("content-type")
        .is_some_and(|v| v == "application/json");
    let event = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = state.deliveries.send(Delivery {
        event,
        signature_valid,
        json_content_type,
    });
    StatusCode::OK
}
