//! Stripe PaymentIntents over HTTPS (reqwest + rustls), classified into the outcome classes
//! of SPEC §5. Also speaks to the fake PSP, which implements the same wire subset.

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

/// The Stripe adapter.
#[derive(Debug, Clone)]
pub struct StripePsp {
    http: reqwest::Client,
    config: StripeConfig,
}

/// How often a 409 `idempotency_key_in_use` or a 429 is retried before the outcome is unknown.
const BUSY_RETRIES: u32 = 2;
/// Pause before such a retry.
const BUSY_PAUSE: Duration = Duration::from_millis(300);

impl StripePsp {
    /// Builds the HTTP client once (at start-up, outside the handler).
    pub fn new(config: StripeConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .build()?;
        Ok(Self { http, config })
    }

    /// POST /v1/payment_intents under the request's key; `confirm` is false only for fencing.
    async fn post_intent(
        &self,
        request: &ChargeRequest,
        confirm: bool,
        timeout: Duration,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let form = [
            ("amount", request.amount.to_string()),
            ("currency", request.currency.as_str().to_owned()),
            ("payment_method", request.payment_method.clone()),
            ("confirm", confirm.to_string()),
            ("error_on_requires_action", "true".into()),
            ("automatic_payment_methods[enabled]", "true".into()),
            ("automatic_payment_methods[allow_redirects]", "never".into()),
            ("metadata[payment_id]", request.payment_id.clone()),
        ];
        self.http
            .post(format!("{}/v1/payment_intents", self.config.base_url))
            .bearer_auth(&self.config.api_key)
            .header("Idempotency-Key", &request.idempotency_key)
            .timeout(timeout.min(self.config.request_timeout))
            .form(&form)
            .send()
            .await
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

/// Classifies a PaymentIntent the PSP returned with 200.
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

/// Classifies an error answer by status and Stripe error type.
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
        (401 | 403, _) => {
            tracing::error!(status, "the PSP refused our credentials");
            PspOutcome::NotSent {
                reason: format!("the PSP refused our credentials ({status})"),
            }
        }
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
impl Psp for StripePsp {
    fn name(&self) -> &str {
        &self.config.provider_name
    }

    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let started = std::time::Instant::now();
        let mut busy = 0;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let response = match self.post_intent(request, true, left).await {
                Ok(response) => response,
                Err(error) if error.is_connect() => {
                    return PspOutcome::NotSent {
                        reason: format!("no connection to the PSP: {error}"),
                    }
                }
                Err(error) => {
                    return PspOutcome::Unknown {
                        reason: format!("the PSP call failed after connecting: {error}"),
                    }
                }
            };
            let status = response.status().as_u16();
            let body = match response.bytes().await {
                Ok(body) => body,
                Err(error) => {
                    return PspOutcome::Unknown {
                        reason: format!("the PSP answer was cut: {error}"),
                    }
                }
            };
            if status == 200 {
                return match serde_json::from_slice::<PaymentIntent>(&body) {
                    Ok(intent) => classify_intent(intent),
                    Err(error) => PspOutcome::Unknown {
                        reason: format!("unreadable PSP answer: {error}"),
                    },
                };
            }
            if matches!(status, 409 | 429)
                && busy < BUSY_RETRIES
                && started.elapsed() + BUSY_PAUSE * 2 < timeout
            {
                busy += 1;
                tokio::time::sleep(BUSY_PAUSE).await;
                continue;
            }
            return classify_error(status, &body);
        }
    }

    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        let query = format!("metadata['payment_id']:'{payment_id}'");
        let response = self
            .http
            .get(format!(
                "{}/v1/payment_intents/search",
                self.config.base_url
            ))
            .bearer_auth(&self.config.api_key)
            .query(&[("query", query)])
            .send()
            .await
            .map_err(|e| PspError {
                reason: e.to_string(),
            })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| PspError {
            reason: e.to_string(),
        })?;
        if !status.is_success() {
            return Err(PspError {
                reason: format!("search answered {status}"),
            });
        }
        let found: SearchResult = serde_json::from_slice(&body).map_err(|e| PspError {
            reason: e.to_string(),
        })?;
        // A succeeded intent wins over any other for the same attempt.
        let mut best = PspLookup::NotFound;
        for intent in found.data {
            let this = match classify_intent(intent) {
                PspOutcome::Approved {
                    provider_payment_id,
                } => {
                    return Ok(PspLookup::Succeeded {
                        provider_payment_id,
                    })
                }
                PspOutcome::Declined {
                    provider_payment_id: Some(id),
                    decline_code,
                } => PspLookup::Declined {
                    provider_payment_id: id,
                    decline_code,
                },
                _ => continue,
            };
            best = this;
        }
        Ok(best)
    }

    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        let response = self
            .post_intent(request, false, self.config.request_timeout)
            .await
            .map_err(|e| PspError {
                reason: e.to_string(),
            })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| PspError {
            reason: e.to_string(),
        })?;
        let kind = serde_json::from_slice::<ErrorBody>(&body)
            .map(|b| b.error.kind)
            .unwrap_or_default();
        match (status, kind.as_str()) {
            (200, _) => {
                let intent: PaymentIntent =
                    serde_json::from_slice(&body).map_err(|e| PspError {
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
            (409, _) => Ok(Fence::InFlight),
            _ => Err(PspError {
                reason: format!("fencing answered {status} {kind}"),
            }),
        }
    }

    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        let response = self
            .http
            .post(format!(
                "{}/v1/payment_intents/{provider_payment_id}/cancel",
                self.config.base_url
            ))
            .bearer_auth(&self.config.api_key)
            .form(&[("cancellation_reason", "abandoned")])
            .send()
            .await
            .map_err(|e| PspError {
                reason: e.to_string(),
            })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| PspError {
            reason: e.to_string(),
        })?;
        let intent_status = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v["error"]["payment_intent"]["status"]
                    .as_str()
                    .map(str::to_owned)
            });
        // Already cancelled (a concurrent run got there first) is as good as cancelled.
        if status.is_success() || intent_status.as_deref() == Some("canceled") {
            return Ok(());
        }
        Err(PspError {
            reason: format!("cancel answered {status}"),
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
        let idem = br#"{"error":{"type":"idempotency_error"}}"#;
        assert!(matches!(
            classify_error(400, idem),
            PspOutcome::Unknown { .. }
        ));
    }
}
