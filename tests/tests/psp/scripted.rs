//! A [`PspTransport`] that answers from a script, one entry per call, and records every call.

use async_trait::async_trait;
use payonce::adapters::psp::transport::{CallFailure, PspTransport, WireCall, WireReply};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// What one call gets.
pub type Step = Result<WireReply, CallFailure>;

/// Answers each call with the next step of its script; a call past the end is a test bug.
#[derive(Debug, Default)]
pub struct ScriptedTransport {
    script: Mutex<VecDeque<Step>>,
    calls: Mutex<Vec<WireCall>>,
}

impl ScriptedTransport {
    /// A transport that answers `steps`, in order.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            script: Mutex::new(steps.into_iter().collect()),
            calls: Mutex::default(),
        }
    }

    /// Every call made so far, in order.
    pub fn calls(&self) -> Vec<WireCall> {
        self.calls.lock().unwrap().clone()
    }

    /// Steps not used yet.
    pub fn left(&self) -> usize {
        self.script.lock().unwrap().len()
    }
}

#[async_trait]
impl PspTransport for ScriptedTransport {
    async fn send(&self, call: &WireCall, _timeout: Duration) -> Result<WireReply, CallFailure> {
        self.calls.lock().unwrap().push(call.clone());
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| panic!("no scripted answer left for {call:?}"))
    }
}

/// A Stripe error answer.
pub fn error(status: u16, kind: &str, code: Option<&str>, param: Option<&str>) -> Step {
    let body =
        json!({"error": {"type": kind, "code": code, "param": param, "message": "scripted"}});
    Ok(WireReply {
        status,
        body: body.to_string().into_bytes(),
    })
}

/// 409 `idempotency_key_in_use`: a request with the key is still running at Stripe.
pub fn key_in_use() -> Step {
    error(
        409,
        "idempotency_error",
        Some("idempotency_key_in_use"),
        None,
    )
}

/// 429 `rate_limit`.
pub fn rate_limited() -> Step {
    error(429, "invalid_request_error", Some("rate_limit"), None)
}

/// 401: our secret key refused.
pub fn unauthorized() -> Step {
    error(401, "invalid_request_error", None, None)
}

/// No connection could be made.
pub fn refused_connection() -> Step {
    Err(CallFailure::NotConnected(
        "scripted: connection refused".into(),
    ))
}

/// A PaymentIntent answered with 200.
pub fn intent(id: &str, status: &str) -> Step {
    Ok(WireReply {
        status: 200,
        body: json!({"id": id, "object": "payment_intent", "status": status})
            .to_string()
            .into_bytes(),
    })
}
