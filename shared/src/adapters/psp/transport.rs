//! Carrying a call to a PSP, for every provider adapter: the adapter builds a [`WireCall`] (its
//! path, query, headers — authentication and idempotency key included — and body), a
//! [`PspTransport`] carries it and says either what the PSP answered ([`WireReply`]) or why it
//! did not answer ([`CallFailure`]): no connection was made, or the call failed after connecting.
//! That difference decides whether a charge may have happened, so it is drawn here, once.
//!
//! HTTPS in production and against the fake PSP ([`HttpTransport`]); the simulation carries the
//! calls to its in-process PSP model through a network fault layer. The transport knows nothing
//! of any provider: the adapters classify the answers, the same code everywhere.

use crate::xray::{Subsegment, XRay};
use async_trait::async_trait;
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use std::time::{Duration, SystemTime};

/// One HTTP request to a PSP, as an adapter builds it.
#[derive(Clone, PartialEq, Eq)]
pub struct WireCall {
    /// The HTTP method, e.g. `GET` or `POST`.
    pub method: &'static str,
    /// The path under the API base, e.g. `/v1/payment_intents`.
    pub path: String,
    /// Query parameters, URL-encoded in this order.
    pub query: Vec<(String, String)>,
    /// Headers, sent in this order: the adapter's authentication, idempotency key and the like.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: WireBody,
}

/// The body of a [`WireCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireBody {
    /// No body.
    Empty,
    /// Parameters sent `application/x-www-form-urlencoded`, in this order.
    Form(Vec<(String, String)>),
    /// The exact bytes to send as `application/json`.
    Json(String),
    /// The exact bytes to send as `text/plain` (2C2P's maintenance tokens).
    Text(String),
}

impl WireCall {
    /// The value of the first header called `name` (compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Whether a header carries a credential, never to be shown.
fn secret_header(name: &str) -> bool {
    name.eq_ignore_ascii_case("authorization") || name.eq_ignore_ascii_case("proxy-authorization")
}

/// As derived, but credentials (`Authorization`) are redacted: calls appear in logs and panics.
impl std::fmt::Debug for WireCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if secret_header(name) {
                    "<redacted>"
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("WireCall")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("headers", &headers)
            .field("body", &self.body)
            .finish()
    }
}

/// What the PSP answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireReply {
    /// HTTP status.
    pub status: u16,
    /// The body as received.
    pub body: Vec<u8>,
}

/// Why a call got no answer. The difference decides whether a charge may have happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// No connection was made (DNS, refused, connect timeout, TLS handshake): this call cannot
    /// have reached the PSP.
    NotConnected(String),
    /// The connection was made, then the call failed (timeout, reset, cut or unreadable
    /// answer): the PSP may have applied it.
    AfterConnect(String),
}

/// Carries [`WireCall`]s to a PSP: HTTPS in production ([`HttpTransport`]); the simulation
/// carries them to its in-process PSP model through a network fault layer.
#[async_trait]
pub trait PspTransport: Send + Sync {
    /// Sends `call`, giving up after `timeout`.
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure>;
}

/// A PSP over HTTPS (reqwest + rustls). It adds nothing of its own: authentication and
/// idempotency headers come with each call.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    http: reqwest::Client,
    base_url: String,
    xray: XRay,
}

impl HttpTransport {
    /// Builds the HTTP client once (at start-up, outside the handler) for the API at
    /// `base_url`: `connect_timeout` to establish a connection (a failure there means "not
    /// sent"), `request_timeout` as the upper bound of one request.
    pub fn new(
        base_url: impl Into<String>,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .build()?;
        Ok(Self {
            http,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            xray: XRay::from_env(),
        })
    }

    /// Records each call with `xray` instead of the process's recorder.
    pub fn with_xray(mut self, xray: XRay) -> Self {
        self.xray = xray;
        self
    }

    /// The host calls go to: the name of their X-Ray subsegments.
    fn host(&self) -> &str {
        let rest = self
            .base_url
            .split_once("://")
            .map_or(self.base_url.as_str(), |(_, rest)| rest);
        rest.split(['/', '?']).next().unwrap_or(rest)
    }

    /// The API base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

#[async_trait]
impl PspTransport for HttpTransport {
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure> {
        if !self.xray.is_on() {
            return self.send_untraced(call, timeout).await;
        }
        let start = SystemTime::now();
        let reply = self.send_untraced(call, timeout).await;
        self.xray.record(&Subsegment {
            name: self.host().to_owned(),
            namespace: "remote",
            start,
            end: SystemTime::now(),
            aws: None,
            // The path only: a query or a body may carry tokens.
            request: Some((
                call.method.to_owned(),
                format!("{}{}", self.base_url, call.path),
            )),
            status: reply.as_ref().ok().map(|reply| reply.status),
        });
        reply
    }
}

impl HttpTransport {
    async fn send_untraced(
        &self,
        call: &WireCall,
        timeout: Duration,
    ) -> Result<WireReply, CallFailure> {
        let method = reqwest::Method::from_bytes(call.method.as_bytes()).map_err(|error| {
            CallFailure::NotConnected(format!("no valid HTTP method {:?}: {error}", call.method))
        })?;
        let url = format!("{}{}", self.base_url, call.path);
        let mut request = self.http.request(method, url);
        request = match &call.body {
            WireBody::Empty => request,
            WireBody::Form(form) => request.form(form),
            WireBody::Json(json) => request
                .header(CONTENT_TYPE, "application/json")
                .body(json.clone()),
            WireBody::Text(text) => request
                .header(CONTENT_TYPE, "text/plain")
                .body(text.clone()),
        };
        for (name, value) in &call.headers {
            request = match HeaderValue::from_str(value) {
                Ok(mut value) if secret_header(name) => {
                    value.set_sensitive(true);
                    request.header(name.as_str(), value)
                }
                // An invalid value is kept by the builder and fails the send, as before.
                _ => request.header(name.as_str(), value.as_str()),
            };
        }
        request = request.timeout(timeout);
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        let response = request.send().await.map_err(|error| {
            if error.is_connect() {
                CallFailure::NotConnected(format!("no connection to the PSP: {error}"))
            } else {
                CallFailure::AfterConnect(format!("the PSP call failed after connecting: {error}"))
            }
        })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|error| {
            CallFailure::AfterConnect(format!("the PSP answer was cut: {error}"))
        })?;
        Ok(WireReply {
            status,
            body: body.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> WireCall {
        WireCall {
            method: "POST",
            path: "/v1/things".into(),
            query: Vec::new(),
            headers: vec![
                ("Authorization".into(), "Bearer sk_secret".into()),
                ("Idempotency-Key".into(), "key-1".into()),
            ],
            body: WireBody::Form(vec![("a".into(), "1".into())]),
        }
    }

    #[test]
    fn headers_are_found_whatever_their_case() {
        let call = call();
        assert_eq!(call.header("idempotency-key"), Some("key-1"));
        assert_eq!(call.header("AUTHORIZATION"), Some("Bearer sk_secret"));
        assert_eq!(call.header("Content-Type"), None);
    }

    #[test]
    fn credentials_never_appear_in_debug_output() {
        let shown = format!("{:?}", call());
        assert!(!shown.contains("sk_secret"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("key-1"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_connected() {
        // Nothing listens on port 9 of the loopback: the connection is refused.
        let transport = HttpTransport::new(
            "http://127.0.0.1:9/",
            Duration::from_secs(1),
            Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!(transport.base_url(), "http://127.0.0.1:9");
        let failure = transport
            .send(&call(), Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(
            matches!(failure, CallFailure::NotConnected(_)),
            "{failure:?}"
        );
    }
}

/// A transport that answers each call with the next step of a script and records every call:
/// the unit tests of every adapter use it.
#[cfg(test)]
pub(crate) mod scripted {
    use super::{CallFailure, PspTransport, WireCall, WireReply};
    use async_trait::async_trait;
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

    /// One scripted answer.
    pub(crate) type Step = Result<WireReply, CallFailure>;

    /// Answers each call with the next step and records every call.
    #[derive(Debug, Default)]
    pub(crate) struct Scripted {
        steps: Mutex<VecDeque<Step>>,
        calls: Mutex<Vec<WireCall>>,
    }

    impl Scripted {
        /// A transport answering with `steps`, in order.
        pub(crate) fn new(steps: impl IntoIterator<Item = Step>) -> Self {
            Self {
                steps: Mutex::new(steps.into_iter().collect()),
                calls: Mutex::default(),
            }
        }

        /// Every call sent so far.
        pub(crate) fn calls(&self) -> Vec<WireCall> {
            self.calls.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl PspTransport for Scripted {
        async fn send(&self, call: &WireCall, _timeout: Duration) -> Step {
            self.calls.lock().unwrap().push(call.clone());
            self.steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| panic!("no scripted answer left for {call:?}"))
        }
    }

    /// An answer with `status` and a JSON body.
    pub(crate) fn reply(status: u16, body: serde_json::Value) -> Step {
        Ok(WireReply {
            status,
            body: body.to_string().into_bytes(),
        })
    }

    /// No connection was made.
    pub(crate) fn not_connected() -> Step {
        Err(CallFailure::NotConnected("scripted: refused".into()))
    }

    /// The connection was made, then the answer was lost.
    pub(crate) fn after_connect() -> Step {
        Err(CallFailure::AfterConnect("scripted: cut".into()))
    }
}
