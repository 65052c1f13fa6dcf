//! Stripe PaymentIntents, classified into payonce's outcome classes (approved, declined,
//! rejected, refused, not sent, unknown). The calls go through a [`StripeTransport`]: HTTPS in
//! production and against the fake PSP, the in-process PSP model in the simulation, so the
//! classification is the same code everywhere.

use crate::mutations::{self, Mutation};
use crate::ports::{ChargeRequest, Fence, Psp, PspError, PspLookup, PspOutcome};
use async_trait::async_trait;
use serde::Deserialize;
use std::time::Duration;

/// Settings of the Stripe adapter.
#[derive(Clone)]
pub struct StripeConfig {
    /// API base URL, `https://api.stripe.com` in production; the fake PSP's URL in tests.
    pub base_url: String,
    /// Secret API key (from Secrets Manager or SSM; never logged).
    pub api_key: String,
    /// Limit for establishing a connection (a failure here means "not sent").
    pub connect_timeout: Duration,
    /// Upper bound of one request; the charge path lowers it to the time the invocation has left.
    pub request_timeout: Duration,
    /// Name stored on payments (`stripe`, or `fake` for the fake PSP).
    pub provider_name: String,
}

impl std::fmt::Debug for StripeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("provider_name", &self.provider_name)
            .finish()
    }
}

impl StripeConfig {
    /// Defaults for `api_key` against `base_url`: 3 s to connect, 10 s per request.
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: api_key.into(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
            provider_name: "stripe".into(),
        }
    }
}

/// One request to Stripe's API, as the adapter builds it; a [`StripeTransport`] carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeCall {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The path under the API base, e.g. `/v1/payment_intents`.
    pub path: String,
    /// Query parameters (search).
    pub query: Vec<(String, String)>,
    /// Form parameters of a `POST`.
    pub form: Vec<(String, String)>,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
}

/// What Stripe answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeReply {
    /// HTTP status.
    pub status: u16,
    /// The body as received.
    pub body: Vec<u8>,
}

/// Why a call got no answer. The difference decides whether a charge may have happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// No connection was made (DNS, refused, connect timeout, TLS handshake): this call cannot
    /// have reached Stripe.
    NotConnected(String),
    /// The connection was made, then the call failed (timeout, reset, cut answer): Stripe may
    /// have applied it.
    AfterConnect(String),
}

/// Carries [`StripeCall`]s to Stripe: HTTPS in production ([`HttpTransport`]); the simulation
/// carries them to its in-process PSP model through a network fault layer.
#[async_trait]
pub trait StripeTransport: Send + Sync {
    /// Sends `call`, giving up after `timeout`.
    async fn send(&self, call: &StripeCall, timeout: Duration) -> Result<StripeReply, CallFailure>;
}

/// Stripe over HTTPS (reqwest + rustls), authenticated with the secret key.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    http: reqwest::Client,
    base_url: String,
    api_key: String,
}

impl HttpTransport {
    /// Builds the HTTP client once (at start-up, outside the handler).
    pub fn new(config: &StripeConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .build()?;
        Ok(Self {
            http,
            base_url: config.base_url.clone(),
            api_key: config.api_key.clone(),
        })
    }
}

#[async_trait]
impl StripeTransport for HttpTransport {
    async fn send(&self, call: &StripeCall, timeout: Duration) -> Result<StripeReply, CallFailure> {
        let url = format!("{}{}", self.base_url, call.path);
        let mut request = match call.method {
            "GET" => self.http.get(url),
            _ => self.http.post(url).form(&call.form),
        }
        .bearer_auth(&self.api_key)
        .timeout(timeout);
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        if let Some(key) = &call.idempotency_key {
            request = request.header("Idempotency-Key", key);
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
        Ok(StripeReply {
            status,
            body: body.to_vec(),
        })
    }
}

/// The Stripe adapter: builds the PaymentIntents calls and classifies their answers.
#[derive(Debug, Clone)]
pub struct StripePsp<T = HttpTransport> {
    transport: T,
    provider_name: String,
    request_timeout: Duration,
}

/// How often a 409 `idempotency_key_in_use` or a 429 is retried before the outcome is unknown.
const BUSY_RETRIES: u32 = 2;
/// Pause before such a retry.
const BUSY_PAUSE: Duration = Duration::from_millis(300);

impl StripePsp<HttpTransport> {
    /// Stripe (or the fake PSP) over HTTPS at `config.base_url`.
    pub fn new(config: StripeConfig) -> Result<Self, reqwest::Error> {
        let transport = HttpTransport::new(&config)?;
        Ok(Self::with_transport(
            transport,
            config.provider_name,
            config.request_timeout,
        ))
    }
}

impl<T: StripeTransport> StripePsp<T> {
    /// The adapter over any transport, storing `provider_name` on payments.
    pub fn with_transport(
        transport: T,
        provider_name: impl Into<String>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            transport,
            provider_name: provider_name.into(),
            request_timeout,
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// `POST /v1/payment_intents` under the request's key. The parameters are a pure function
    /// of the attempt, so every retry under a key is byte-identical. `confirm` is false only
    /// for fencing, and then no confirm-only parameter is sent: Stripe refuses
    /// `error_on_requires_action` (and `off_session`, `return_url`, `mandate`...) without
    /// `confirm=true` (API reference, "Create a PaymentIntent").
    async fn post_intent(
        &self,
        request: &ChargeRequest,
        confirm: bool,
        timeout: Duration,
    ) -> Result<StripeReply, CallFailure> {
        let mut form = vec![
            ("amount".to_owned(), request.amount.to_string()),
            ("currency".to_owned(), request.currency.as_str().to_owned()),
            ("payment_method".to_owned(), request.payment_method.clone()),
            ("confirm".to_owned(), confirm.to_string()),
        ];
        if confirm || mutations::active(Mutation::FenceWithConfirmOnlyParameter) {
            form.push(("error_on_requires_action".to_owned(), "true".to_owned()));
        }
        form.extend([
            (
                "automatic_payment_methods[enabled]".to_owned(),
                "true".to_owned(),
            ),
            (
                "automatic_payment_methods[allow_redirects]".to_owned(),
                "never".to_owned(),
            ),
            (
                "metadata[payment_id]".to_owned(),
                request.payment_id.clone(),
            ),
        ]);
        let call = StripeCall {
            method: "POST",
            path: "/v1/payment_intents".to_owned(),
            query: Vec::new(),
            form,
            idempotency_key: Some(request.idempotency_key.clone()),
        };
        self.transport
            .send(&call, timeout.min(self.request_timeout))
            .await
    }

    /// A call that is not a charge: any failure is a [`PspError`].
    async fn plain(&self, call: StripeCall) -> Result<StripeReply, PspError> {
        self.transport
            .send(&call, self.request_timeout)
            .await
            .map_err(|failure| PspError {
                reason: match failure {
                    CallFailure::NotConnected(reason) | CallFailure::AfterConnect(reason) => reason,
                },
            })
    }
}

#[derive(Debug, Deserialize)]
struct PaymentIntent {
    id: String,
    status: String,
    #[serde(default)]
    last_payment_error: Option<ErrorDetail>,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize, Default)]
struct ErrorDetail {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
    #[serde(default)]
    param: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    payment_intent: Option<Box<PaymentIntent>>,
}

#[derive(Debug, Deserialize)]
struct SearchResult {
    data: Vec<PaymentIntent>,
}

/// Classifies a PaymentIntent the PSP returned with 200. Only `succeeded` and a declined
/// `requires_payment_method` are final; `processing`, `requires_action`, `requires_capture` and
/// the rest are not (PaymentIntent lifecycle, "How PaymentIntents work"), so the outcome is
/// unknown and a webhook or reconcile settles it.
fn classify_intent(intent: PaymentIntent) -> PspOutcome {
    match intent.status.as_str() {
        "succeeded" => PspOutcome::Approved {
            provider_payment_id: intent.id,
        },
        "requires_payment_method" => PspOutcome::Declined {
            decline_code: intent
                .last_payment_error
                .and_then(|e| e.decline_code.or(e.code))
                .unwrap_or_else(|| "generic_decline".into()),
            provider_payment_id: Some(intent.id),
        },
        other => PspOutcome::Unknown {
            reason: format!("payment intent {} is {other}", intent.id),
        },
    }
}

/// What a PaymentIntent found by a lookup says about our attempt: every status that is not
/// final and not canceled is *pending*, never "not found".
fn lookup_of(intent: PaymentIntent) -> PspLookup {
    match intent.status.as_str() {
        "succeeded" => PspLookup::Succeeded {
            provider_payment_id: intent.id,
        },
        "requires_payment_method" if intent.last_payment_error.is_some() => PspLookup::Declined {
            decline_code: intent
                .last_payment_error
                .and_then(|e| e.decline_code.or(e.code))
                .unwrap_or_else(|| "generic_decline".into()),
            provider_payment_id: intent.id,
        },
        "canceled" => PspLookup::Canceled {
            provider_payment_id: intent.id,
        },
        // payonce creates with `confirm=true`, so an unconfirmed intent under its key can only
        // be a fence whose cancel did not happen: as if nothing were found, which fences again
        // (the PSP replays the fence's intent) and then cancels it.
        "requires_confirmation" => PspLookup::NotFound,
        _ => PspLookup::Pending {
            provider_payment_id: intent.id,
        },
    }
}

/// Classifies an error answer by status and Stripe error type (API reference, "Errors").
fn classify_error(status: u16, body: &[u8]) -> PspOutcome {
    let detail = serde_json::from_slice::<ErrorBody>(body)
        .map(|b| b.error)
        .unwrap_or_default();
    match (status, detail.kind.as_str()) {
        (402, "card_error") => PspOutcome::Declined {
            decline_code: detail
                .decline_code
                .or(detail.code)
                .unwrap_or_else(|| "generic_decline".into()),
            provider_payment_id: detail.payment_intent.map(|pi| pi.id),
        },
        (400, "invalid_request_error") if detail.param.as_deref() == Some("payment_method") => {
            PspOutcome::Rejected {
                message: detail
                    .message
                    .unwrap_or_else(|| "the payment method was rejected".into()),
            }
        }
        // Any other validation error is as final: Stripe stores nothing under the key for most
        // of them, and a re-send (byte-identical) would be refused the same way.
        (400, "invalid_request_error") if !mutations::active(Mutation::RefusalIsUnknown) => {
            PspOutcome::Refused {
                code: detail
                    .code
                    .unwrap_or_else(|| "invalid_request_error".into()),
            }
        }
        (401 | 403, _) => {
            tracing::error!(
                status,
                alarm = "psp-credentials",
                "the PSP refused our credentials"
            );
            PspOutcome::NotSent {
                reason: format!("the PSP refused our credentials ({status})"),
            }
        }
        // 400 idempotency_error (the key was used with other parameters, e.g. after a fence),
        // 409, 429 and 5xx: the outcome is unknown.
        _ => PspOutcome::Unknown {
            reason: format!(
                "PSP answered {status} {} {}",
                detail.kind,
                detail.code.unwrap_or_default()
            ),
        },
    }
}

#[async_trait]
impl<T: StripeTransport> Psp for StripePsp<T> {
    fn name(&self) -> &str {
        &self.provider_name
    }

    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let started = tokio::time::Instant::now();
        let mut busy = 0;
        // Once any call of this loop got an answer (a 409 or 429), a later connection failure
        // no longer proves the PSP never saw the key.
        let mut answered = false;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let reply = match self.post_intent(request, true, left).await {
                Ok(reply) => reply,
                Err(CallFailure::NotConnected(reason)) if !answered => {
                    return PspOutcome::NotSent { reason }
                }
                Err(CallFailure::NotConnected(reason) | CallFailure::AfterConnect(reason)) => {
                    return PspOutcome::Unknown { reason }
                }
            };
            answered = true;
            if reply.status == 200 {
                return match serde_json::from_slice::<PaymentIntent>(&reply.body) {
                    Ok(intent) => classify_intent(intent),
                    Err(error) => PspOutcome::Unknown {
                        reason: format!("unreadable PSP answer: {error}"),
                    },
                };
            }
            if matches!(reply.status, 409 | 429)
                && busy < BUSY_RETRIES
                && started.elapsed() + BUSY_PAUSE * 2 < timeout
            {
                busy += 1;
                tokio::time::sleep(BUSY_PAUSE).await;
                continue;
            }
            return match classify_error(reply.status, &reply.body) {
                // Credentials refused after an earlier answer: the key may be known.
                PspOutcome::NotSent { reason } if busy > 0 => PspOutcome::Unknown { reason },
                outcome => outcome,
            };
        }
    }

    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        let reply = self
            .plain(StripeCall {
                method: "GET",
                path: "/v1/payment_intents/search".to_owned(),
                query: vec![(
                    "query".to_owned(),
                    format!("metadata['payment_id']:'{payment_id}'"),
                )],
                form: Vec::new(),
                idempotency_key: None,
            })
            .await?;
        if reply.status != 200 {
            return Err(PspError {
                reason: format!("search answered {}", reply.status),
            });
        }
        let found: SearchResult = serde_json::from_slice(&reply.body).map_err(|e| PspError {
            reason: e.to_string(),
        })?;
        // One key per attempt means one intent; should there be more, the strongest word wins:
        // succeeded, then pending (may still charge), then declined, then canceled.
        let rank = |lookup: &PspLookup| match lookup {
            PspLookup::Succeeded { .. } => 4,
            PspLookup::Pending { .. } => 3,
            PspLookup::Declined { .. } => 2,
            PspLookup::Canceled { .. } => 1,
            PspLookup::NotFound => 0,
        };
        Ok(found
            .data
            .into_iter()
            .map(lookup_of)
            .max_by_key(rank)
            .unwrap_or(PspLookup::NotFound))
    }

    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        let reply = self
            .post_intent(request, false, self.request_timeout)
            .await
            .map_err(|failure| PspError {
                reason: format!("fencing failed: {failure:?}"),
            })?;
        let detail = serde_json::from_slice::<ErrorBody>(&reply.body)
            .map(|b| b.error)
            .unwrap_or_default();
        let kind = detail.kind;
        match (reply.status, kind.as_str()) {
            (200, _) => {
                let intent: PaymentIntent =
                    serde_json::from_slice(&reply.body).map_err(|e| PspError {
                        reason: e.to_string(),
                    })?;
                if intent.status == "requires_confirmation" {
                    Ok(Fence::NeverRan {
                        provider_payment_id: intent.id,
                    })
                } else {
                    // A replayed answer of the original request: the key was used.
                    Ok(Fence::KeyUsed)
                }
            }
            (400, "idempotency_error") => Ok(Fence::KeyUsed),
            // Stripe's idempotency layer compares a known key's parameters before the endpoint
            // validates them ("Idempotent requests"), so a validation refusal means the key holds
            // no saved request, or one refused the same way: either way nothing was charged.
            // Only a refusal of a parameter the original request carried alike says anything
            // about it; one of the fence's own parameters is our error.
            (400, "invalid_request_error")
                if !mutations::active(Mutation::RefusalIsUnknown)
                    && matches!(
                        detail.param.as_deref(),
                        Some("amount" | "currency" | "payment_method")
                    ) =>
            {
                Ok(Fence::Refused {
                    payment_method: detail.param.as_deref() == Some("payment_method"),
                })
            }
            (409, _) => Ok(Fence::InFlight),
            (status, _) => Err(PspError {
                reason: format!("fencing answered {status} {kind}"),
            }),
        }
    }

    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        let reply = self
            .plain(StripeCall {
                method: "POST",
                path: format!("/v1/payment_intents/{provider_payment_id}/cancel"),
                query: Vec::new(),
                form: vec![("cancellation_reason".to_owned(), "abandoned".to_owned())],
                idempotency_key: None,
            })
            .await?;
        let intent_status = serde_json::from_slice::<serde_json::Value>(&reply.body)
            .ok()
            .and_then(|v| {
                v["error"]["payment_intent"]["status"]
                    .as_str()
                    .map(str::to_owned)
            });
        // Already cancelled (a concurrent run got there first) is as good as cancelled.
        if reply.status == 200 || intent_status.as_deref() == Some("canceled") {
            return Ok(());
        }
        Err(PspError {
            reason: format!("cancel answered {}", reply.status),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_answers_map_to_outcome_classes() {
        let declined = br#"{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","payment_intent":{"id":"pi_9","status":"requires_payment_method"}}}"#;
        assert_eq!(
            classify_error(402, declined),
            PspOutcome::Declined {
                provider_payment_id: Some("pi_9".into()),
                decline_code: "insufficient_funds".into()
            }
        );
        let rejected = br#"{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_method","message":"No such PaymentMethod"}}"#;
        assert_eq!(
            classify_error(400, rejected),
            PspOutcome::Rejected {
                message: "No such PaymentMethod".into()
            }
        );
        assert!(matches!(
            classify_error(401, b"{}"),
            PspOutcome::NotSent { .. }
        ));
        assert!(matches!(
            classify_error(403, b""),
            PspOutcome::NotSent { .. }
        ));
        for status in [500, 502, 503, 409, 429] {
            assert!(
                matches!(classify_error(status, b"{}"), PspOutcome::Unknown { .. }),
                "{status}"
            );
        }
        let too_small = br#"{"error":{"type":"invalid_request_error","code":"amount_too_small","param":"amount"}}"#;
        assert_eq!(
            classify_error(400, too_small),
            PspOutcome::Refused {
                code: "amount_too_small".into()
            }
        );
        let idem = br#"{"error":{"type":"idempotency_error"}}"#;
        assert!(matches!(
            classify_error(400, idem),
            PspOutcome::Unknown { .. }
        ));
    }
}
