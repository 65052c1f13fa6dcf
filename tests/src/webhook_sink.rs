//! A stand-in for the webhook endpoint: an HTTP server on loopback that the fake PSP delivers
//! its signed events to, keeping each body (verified against the fake's secret) so a test can
//! hand exactly the PSP's own events to the processor, when and as often as it chooses.

use payonce::adapters::psp::StripeWebhooks;
use payonce::clock::{Clock, SystemClock};
use payonce::ports::WebhookScheme;
use payonce_fake_psp::DEFAULT_WEBHOOK_SECRET;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The events the fake PSP delivered, in arrival order.
pub struct WebhookSink {
    url: String,
    bodies: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookSink {
    /// Listens on a free loopback port; every delivery is verified with the Stripe scheme and
    /// the fake's secret (a body that does not verify is answered 400 and not kept).
    pub async fn start() -> Self {
        Self::listen(Some(StripeWebhooks::new(
            "fake",
            vec![DEFAULT_WEBHOOK_SECRET.into()],
        )))
        .await
    }

    /// Listens on a free loopback port and keeps every body as it came: for a face whose body
    /// carries its own signature (2C2P's notification JWT), which the processor verifies.
    pub async fn start_keeping_all() -> Self {
        Self::listen(None).await
    }

    async fn listen(scheme: Option<StripeWebhooks>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!(
            "http://{}/webhooks/fake",
            listener.local_addr().expect("local address")
        );
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        let scheme = Arc::new(scheme);
        let app = axum::Router::new().route(
            "/webhooks/fake",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (kept, scheme) = (kept.clone(), scheme.clone());
                    async move {
                        let mut map = lambda_http::http::HeaderMap::new();
                        if let Some(signature) = headers
                            .get("stripe-signature")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                        {
                            map.insert("stripe-signature", signature);
                        }
                        if scheme.as_ref().as_ref().is_some_and(|scheme| {
                            scheme.verify(&map, &body, SystemClock.now_s()).is_err()
                        }) {
                            return axum::http::StatusCode::BAD_REQUEST;
                        }
                        kept.lock()
                            .expect("sink lock")
                            .push(String::from_utf8_lossy(&body).into_owned());
                        axum::http::StatusCode::OK
                    }
                },
            ),
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            bodies,
            server,
        }
    }

    /// Where the fake PSP should deliver.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Every body received so far.
    pub fn bodies(&self) -> Vec<String> {
        self.bodies.lock().expect("sink lock").clone()
    }

    /// The bodies received so far whose event satisfies `wanted`.
    pub fn matching(&self, wanted: impl Fn(&Value) -> bool) -> Vec<String> {
        self.bodies()
            .into_iter()
            .filter(|body| serde_json::from_str::<Value>(body).is_ok_and(|event| wanted(&event)))
            .collect()
    }

    /// Waits (up to 10 s) until `count` received events satisfy `wanted`; returns them all.
    pub async fn wait_for(&self, count: usize, wanted: impl Fn(&Value) -> bool) -> Vec<String> {
        for _ in 0..200 {
            let found = self.matching(&wanted);
            if found.len() >= count {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "fewer than {count} matching webhooks arrived; received: {:#?}",
            self.bodies()
                .iter()
                .map(|b| event_summary(b))
                .collect::<Vec<_>>()
        )
    }
}

impl Drop for WebhookSink {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// `type` and the object's id, for messages.
pub fn event_summary(body: &str) -> String {
    let event: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    format!(
        "{} {}",
        event["type"].as_str().unwrap_or("?"),
        event["data"]["object"]["id"].as_str().unwrap_or("?")
    )
}

/// Whether `event` is of type `kind` and its object is the PSP object `object_id`.
pub fn is_event(event: &Value, kind: &str, object_id: &str) -> bool {
    event["type"] == kind && event["data"]["object"]["id"] == object_id
}
