//! The HTTP side: one shared connection pool, HS256 tokens as the sandbox verifies them, signed
//! webhooks as the fake PSP signs them, and a recorder that keeps every request's latency and
//! answer class.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The routes the report is broken down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// `POST /orders`.
    CreateOrder,
    /// `POST /payments`.
    Charge,
    /// `GET /payments/{id}`.
    GetPayment,
    /// `POST /payments/{id}/refunds`.
    Refund,
    /// `POST /webhooks/fake` (our re-posted events; the fake PSP's own deliveries are not
    /// counted here).
    Webhook,
}

impl Endpoint {
    /// Every endpoint, in report order.
    pub const ALL: [Endpoint; 5] = [
        Endpoint::CreateOrder,
        Endpoint::Charge,
        Endpoint::Refund,
        Endpoint::GetPayment,
        Endpoint::Webhook,
    ];

    /// The route as API Gateway would name it.
    pub fn route(self) -> &'static str {
        match self {
            Endpoint::CreateOrder => "POST /orders",
            Endpoint::Charge => "POST /payments",
            Endpoint::GetPayment => "GET /payments/{id}",
            Endpoint::Refund => "POST /payments/{id}/refunds",
            Endpoint::Webhook => "POST /webhooks/fake",
        }
    }
}

/// One request as the client saw it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Which route.
    pub endpoint: Endpoint,
    /// When it was due (scheduled arrival or actual send), seconds since the run started.
    pub due_s: f64,
    /// From due to the whole answer read, in ms; `None` when the client dropped it on purpose.
    pub latency_ms: Option<f64>,
    /// `201`, `409 idempotency-key-in-use`, `transport error`, `dropped by the client`.
    pub class: String,
}

/// Every sample of a run.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Recorder {
    fn push(&self, sample: Sample) {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sample);
    }

    /// A copy of the samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// An answer: status (0 when no HTTP answer came), body, problem type and `Retry-After`.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// HTTP status, 0 for a transport error or a dropped request.
    pub status: u16,
    /// The JSON body (`null` when there was none).
    pub body: Value,
    /// `Retry-After`, in seconds.
    pub retry_after_s: Option<u64>,
}

impl Answer {
    /// The problem type without its `/problems/` prefix, for problem answers.
    pub fn problem(&self) -> Option<&str> {
        self.body
            .get("type")
            .and_then(Value::as_str)
            .map(|t| t.rsplit('/').next().unwrap_or(t))
    }

    /// The answer's class in the report.
    pub fn class(&self) -> String {
        match (self.status, self.problem()) {
            (0, _) => "transport error".into(),
            (status, Some(problem)) => format!("{status} {problem}"),
            (status, None) => status.to_string(),
        }
    }

    /// `payment_id` of a payment or of a problem that names one.
    pub fn payment_id(&self) -> Option<&str> {
        self.body.get("payment_id").and_then(Value::as_str)
    }
}

/// The sandbox's API, as one client machine with many users.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    /// The API's base URL.
    pub base: String,
    /// Where samples go.
    pub recorder: Recorder,
    /// When the run started (samples' time zero).
    pub started: Instant,
    /// The webhook signing secret (Stripe scheme).
    pub webhook_secret: String,
}

/// How a request is sent.
pub struct Call<'a> {
    /// Which route, for the report.
    pub endpoint: Endpoint,
    /// `GET` or `POST`.
    pub method: reqwest::Method,
    /// Path and query.
    pub path: String,
    /// `Authorization: Bearer`.
    pub token: Option<&'a str>,
    /// `Idempotency-Key`.
    pub key: Option<&'a str>,
    /// JSON body.
    pub body: Option<&'a Value>,
    /// When the request was due: latency counts from here, so a late send is the system's delay,
    /// not hidden (no coordinated omission).
    pub due: Instant,
    /// Drop the request after this long, as a client that loses the connection does.
    pub drop_after: Option<Duration>,
}

impl Api {
    /// A client for `base`.
    pub fn new(base: &str, webhook_secret: &str) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(35))
            .pool_max_idle_per_host(1024)
            .build()?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            recorder: Recorder::default(),
            started: Instant::now(),
            webhook_secret: webhook_secret.to_owned(),
        })
    }

    /// Sends `call` and records it.
    pub async fn send(&self, call: Call<'_>) -> Answer {
        let mut request = self
            .http
            .request(call.method, format!("{}{}", self.base, call.path));
        if let Some(token) = call.token {
            request = request.bearer_auth(token);
        }
        if let Some(key) = call.key {
            request = request.header("idempotency-key", key);
        }
        if let Some(body) = call.body {
            request = request.json(body);
        }
        self.finish(call.endpoint, call.due, call.drop_after, request)
            .await
    }

    /// Posts `event` to the webhook route, signed as the fake PSP signs (Stripe scheme).
    pub async fn post_webhook(&self, event: &Value, now_s: i64, due: Instant) -> Answer {
        let body = event.to_string();
        let request = self
            .http
            .post(format!("{}/webhooks/fake", self.base))
            .header("content-type", "application/json")
            .header(
                "stripe-signature",
                stripe_signature(&self.webhook_secret, now_s, body.as_bytes()),
            )
            .body(body);
        self.finish(Endpoint::Webhook, due, None, request).await
    }

    async fn finish(
        &self,
        endpoint: Endpoint,
        due: Instant,
        drop_after: Option<Duration>,
        request: reqwest::RequestBuilder,
    ) -> Answer {
        let exchange = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let retry_after_s = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let bytes = response.bytes().await?;
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Ok::<_, reqwest::Error>(Answer {
                status,
                body,
                retry_after_s,
            })
        };
        let (answer, latency_ms, class) = match drop_after {
            Some(after) => match tokio::time::timeout(after, exchange).await {
                Err(_) => (
                    Answer {
                        status: 0,
                        body: Value::Null,
                        retry_after_s: None,
                    },
                    None,
                    "dropped by the client".to_owned(),
                ),
                Ok(result) => Self::answer(result, due),
            },
            None => Self::answer(exchange.await, due),
        };
        self.recorder.push(Sample {
            endpoint,
            due_s: due.saturating_duration_since(self.started).as_secs_f64(),
            latency_ms,
            class,
        });
        answer
    }

    fn answer(
        result: Result<Answer, reqwest::Error>,
        due: Instant,
    ) -> (Answer, Option<f64>, String) {
        let latency_ms = Some(due.elapsed().as_secs_f64() * 1000.0);
        match result {
            Ok(answer) => {
                let class = answer.class();
                (answer, latency_ms, class)
            }
            Err(_) => (
                Answer {
                    status: 0,
                    body: Value::Null,
                    retry_after_s: None,
                },
                latency_ms,
                "transport error".into(),
            ),
        }
    }

    /// A GET outside the measured run (setup, audit): not recorded.
    pub async fn get_json(&self, url: &str, token: Option<&str>) -> Result<(u16, Value), String> {
        let mut request = self.http.get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .json()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        Ok((status, body))
    }
}

/// An HS256 token as `payonce-local token <user> [--scope ...]` mints it.
pub fn token(secret: &str, user: &str, now_s: i64, ttl_s: i64, scope: Option<&str>) -> String {
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "typ": "JWT"}).to_string());
    let mut claims = json!({"sub": user, "iat": now_s, "exp": now_s + ttl_s, "iss": "payonce-local", "aud": "payonce"});
    if let Some(scope) = scope {
        claims["scope"] = Value::String(scope.to_owned());
    }
    let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    format!(
        "{input}.{}",
        URL_SAFE_NO_PAD.encode(hmac(secret, input.as_bytes()))
    )
}

/// `Stripe-Signature: t=<now>,v1=<hex HMAC-SHA256(secret, "<now>.<body>")>`.
pub fn stripe_signature(secret: &str, now_s: i64, body: &[u8]) -> String {
    let signed = [now_s.to_string().as_bytes(), b".", body].concat();
    format!("t={now_s},v1={}", hex::encode(hmac(secret, &signed)))
}

fn hmac(secret: &str, data: &[u8]) -> Vec<u8> {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        unreachable!("HMAC takes keys of any length")
    };
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// Now, in epoch seconds.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
