//! Stripe PaymentIntents and Refunds, classified into payonce's outcome classes (approved,
//! declined, rejected, refused, not sent, unknown; for refunds: answered, not sent, unknown).
//! The adapter builds each call whole — Stripe's bearer authentication and `Idempotency-Key`
//! included — and a [`PspTransport`] carries it: HTTPS in production and against the fake PSP,
//! the in-process PSP model in the simulation, so the classification is the same code everywhere.

use super::keyed::{self, credentials_refused, NoAnswer, Sent};
use super::transport::{CallFailure, HttpTransport, PspTransport, WireBody, WireCall, WireReply};
use crate::domain::{CaptureMethod, RefundSettlement};
use crate::mutations::{self, Mutation};
use crate::ports::{
    ChargeRequest, CheckedAmount, Fence, OperationOutcome, OperationRequest, Psp, PspError,
    PspLookup, PspOutcome, RefundOutcome, RefundRequest, AUTHENTICATION_REQUIRED_CODE,
};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
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

/// The Stripe adapter: builds the PaymentIntents and Refunds calls and classifies their answers.
#[derive(Clone)]
pub struct StripePsp<T = HttpTransport> {
    transport: T,
    provider_name: String,
    /// `Bearer <secret key>`, sent on every call (never logged).
    authorization: String,
    request_timeout: Duration,
}

impl<T: std::fmt::Debug> std::fmt::Debug for StripePsp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripePsp")
            .field("transport", &self.transport)
            .field("provider_name", &self.provider_name)
            .field("authorization", &"<redacted>")
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// How many refunds one page of a refund list asks for ("List all refunds": 1 to 100).
const REFUND_PAGE_LIMIT: u32 = 100;
/// How many pages of a charge's refunds a lookup reads before it gives up (1000 refunds).
const REFUND_PAGES_MAX: usize = 10;

impl StripePsp<HttpTransport> {
    /// Stripe (or the fake PSP) over HTTPS at `config.base_url`.
    pub fn new(config: StripeConfig) -> Result<Self, reqwest::Error> {
        let transport = HttpTransport::new(
            config.base_url,
            config.connect_timeout,
            config.request_timeout,
        )?;
        Ok(Self::with_transport(
            transport,
            config.provider_name,
            config.api_key,
            config.request_timeout,
        ))
    }
}

impl<T: PspTransport> StripePsp<T> {
    /// The adapter over any transport, storing `provider_name` on payments and authenticating
    /// every call with the secret `api_key`.
    pub fn with_transport(
        transport: T,
        provider_name: impl Into<String>,
        api_key: impl AsRef<str>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            transport,
            provider_name: provider_name.into(),
            authorization: format!("Bearer {}", api_key.as_ref()),
            request_timeout,
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// A call to Stripe's API: authenticated with the secret key, under `idempotency_key` if
    /// given (creates only; Stripe ignores it on `GET`).
    pub(super) fn call(
        &self,
        method: &'static str,
        path: String,
        query: Vec<(String, String)>,
        body: WireBody,
        idempotency_key: Option<&str>,
    ) -> WireCall {
        let mut headers = vec![("Authorization".to_owned(), self.authorization.clone())];
        if let Some(key) = idempotency_key {
            headers.push(("Idempotency-Key".to_owned(), key.to_owned()));
        }
        WireCall {
            method,
            path,
            query,
            headers,
            body,
        }
    }

    /// `POST /v1/payment_intents` under the request's key. The parameters are a pure function
    /// of the attempt, so every retry under a key is byte-identical. `confirm` is false only
    /// for fencing, and then no confirm-only parameter is sent: Stripe refuses
    /// `error_on_requires_action` and `return_url` (and `off_session`, `mandate`...) without
    /// `confirm=true` (API reference, "Create a PaymentIntent").
    ///
    /// With a `return_url` the PSP may ask the customer to authenticate (`requires_action`,
    /// `next_action.redirect_to_url`); without one, `error_on_requires_action` fails such a
    /// payment at once. `capture_method=manual` only authorizes (`requires_capture`), and then
    /// the charge is expanded for its `capture_before`.
    fn intent_call(&self, request: &ChargeRequest, confirm: bool) -> WireCall {
        let mut form = vec![
            ("amount".to_owned(), request.amount.to_string()),
            ("currency".to_owned(), request.currency.as_str().to_owned()),
            ("payment_method".to_owned(), request.payment_method.clone()),
            ("confirm".to_owned(), confirm.to_string()),
        ];
        let confirm_only = confirm || mutations::active(Mutation::FenceWithConfirmOnlyParameter);
        match &request.return_url {
            Some(url) if confirm_only => form.push(("return_url".to_owned(), url.clone())),
            Some(_) => {}
            None if confirm_only => {
                form.push(("error_on_requires_action".to_owned(), "true".to_owned()))
            }
            None => {}
        }
        if request.capture == CaptureMethod::Manual {
            form.push(("capture_method".to_owned(), "manual".to_owned()));
            form.push(("expand[]".to_owned(), "latest_charge".to_owned()));
        }
        form.push((
            "automatic_payment_methods[enabled]".to_owned(),
            "true".to_owned(),
        ));
        if request.return_url.is_none() {
            // No payment method that redirects: there is nowhere to come back to.
            form.push((
                "automatic_payment_methods[allow_redirects]".to_owned(),
                "never".to_owned(),
            ));
        }
        form.push((
            "metadata[payment_id]".to_owned(),
            request.payment_id.clone(),
        ));
        self.call(
            "POST",
            "/v1/payment_intents".to_owned(),
            Vec::new(),
            WireBody::Form(form),
            Some(&request.idempotency_key),
        )
    }

    /// `POST /v1/refunds` under the request's key: `payment_intent`, `amount`, `reason` (if
    /// given) and our ids as metadata — a pure function of the request, so every re-send under
    /// its key is byte-identical. Nothing else: Stripe refuses unknown parameters, and the
    /// currency is the charge's.
    fn refund_call(&self, request: &RefundRequest) -> WireCall {
        let mut form = vec![
            (
                "payment_intent".to_owned(),
                request.provider_payment_id.clone(),
            ),
            ("amount".to_owned(), request.amount.to_string()),
        ];
        if let Some(reason) = request.reason {
            form.push(("reason".to_owned(), reason.as_str().to_owned()));
        }
        form.extend([
            ("metadata[refund_id]".to_owned(), request.refund_id.clone()),
            (
                "metadata[payment_id]".to_owned(),
                request.payment_id.clone(),
            ),
        ]);
        self.call(
            "POST",
            "/v1/refunds".to_owned(),
            Vec::new(),
            WireBody::Form(form),
            Some(&request.idempotency_key),
        )
    }

    /// Sends a keyed create (`call` carries an `Idempotency-Key`), within `timeout` in all,
    /// retrying a 409 `idempotency_key_in_use` or a 429 up to [`keyed::BUSY_RETRIES`] times
    /// while the time allows. Once any call got an answer, a later connection failure no longer
    /// proves Stripe never saw the key: it is [`NoAnswer::Unknown`], as is any failure after
    /// connecting. (Shared with the Omise adapter: [`keyed::send_with_busy_retries`].)
    async fn send_with_busy_retries(
        &self,
        call: &WireCall,
        timeout: Duration,
    ) -> Result<Sent, NoAnswer> {
        keyed::send_with_busy_retries(&self.transport, call, timeout, self.request_timeout).await
    }

    /// [`Self::send_with_busy_retries`], for the operations' module.
    pub(super) async fn send_keyed(
        &self,
        call: &WireCall,
        timeout: Duration,
    ) -> Result<Sent, NoAnswer> {
        self.send_with_busy_retries(call, timeout).await
    }

    /// A call that is not a charge: any failure is a [`PspError`].
    async fn plain(&self, call: WireCall) -> Result<WireReply, PspError> {
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
pub(super) struct PaymentIntent {
    pub(super) id: String,
    pub(super) status: String,
    #[serde(default)]
    pub(super) amount: Option<i64>,
    /// What was captured (of a succeeded intent).
    #[serde(default)]
    pub(super) amount_received: Option<i64>,
    /// Of a canceled intent: why (`requested_by_customer`, `abandoned`, `automatic`...).
    #[serde(default)]
    pub(super) cancellation_reason: Option<String>,
    /// `automatic` or `manual`.
    #[serde(default)]
    pub(super) capture_method: Option<String>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    last_payment_error: Option<ErrorDetail>,
    /// While `requires_action`: where the customer goes.
    #[serde(default)]
    next_action: Option<IntentNextAction>,
    /// While `requires_capture`: what may be captured.
    #[serde(default)]
    pub(super) amount_capturable: Option<i64>,
    /// The charge: its id, or the object when expanded (`expand[]=latest_charge`).
    #[serde(default)]
    latest_charge: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct IntentNextAction {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    redirect_to_url: Option<RedirectToUrl>,
}

#[derive(Debug, Deserialize)]
struct RedirectToUrl {
    url: String,
}

impl PaymentIntent {
    /// The redirect of a `requires_action` intent, if it is one.
    pub(super) fn redirect_url(&self) -> Option<&str> {
        self.next_action
            .as_ref()
            .filter(|action| action.kind == "redirect_to_url")
            .and_then(|action| action.redirect_to_url.as_ref())
            .map(|redirect| redirect.url.as_str())
            .filter(|url| url.starts_with("https://") || url.starts_with("http://"))
    }

    /// When the authorization lapses (epoch milliseconds): the expanded charge's
    /// `payment_method_details.card.capture_before`, where present.
    pub(super) fn capture_before_ms(&self) -> Option<i64> {
        self.latest_charge
            .as_ref()?
            .pointer("/payment_method_details/card/capture_before")?
            .as_i64()
            .map(|s| s.saturating_mul(1000))
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct ErrorBody {
    pub(super) error: ErrorDetail,
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct ErrorDetail {
    #[serde(rename = "type", default)]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) code: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
    #[serde(default)]
    param: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    pub(super) payment_intent: Option<Box<PaymentIntent>>,
}

#[derive(Debug, Deserialize)]
struct SearchResult {
    data: Vec<PaymentIntent>,
}

/// The part of a Refund ("The Refund object") payonce reads.
#[derive(Debug, Deserialize)]
pub(crate) struct StripeRefund {
    id: String,
    /// `pending`, `requires_action`, `succeeded`, `failed` or `canceled` (nullable).
    #[serde(default)]
    status: Option<String>,
    /// Why it failed, once it has.
    #[serde(default)]
    failure_reason: Option<String>,
    /// Read field by field: a missing or odd metadata never makes a Refund unreadable.
    #[serde(default)]
    metadata: serde_json::Value,
}

/// A page of `GET /v1/refunds`.
#[derive(Debug, Deserialize)]
struct RefundList {
    data: Vec<StripeRefund>,
    #[serde(default)]
    has_more: bool,
}

impl StripeRefund {
    /// Our refund id, from `metadata.refund_id`.
    pub(crate) fn refund_id(&self) -> Option<&str> {
        self.metadata["refund_id"].as_str()
    }

    /// What the Refund says: `succeeded`; `failed` (with its `failure_reason`) and `canceled`
    /// are failures; `pending`, `requires_action` and any status not known here (or none) leave
    /// it not final yet.
    pub(crate) fn settlement(self) -> RefundSettlement {
        match self.status.as_deref() {
            Some("succeeded") => RefundSettlement::Succeeded {
                provider_refund_id: self.id,
            },
            Some("failed") => RefundSettlement::Failed {
                provider_refund_id: Some(self.id),
                code: self.failure_reason.unwrap_or_else(|| "failed".into()),
            },
            Some("canceled") => RefundSettlement::Failed {
                provider_refund_id: Some(self.id),
                code: "canceled".into(),
            },
            _ => RefundSettlement::Pending {
                provider_refund_id: self.id,
            },
        }
    }
}

/// How strong a word on a refund is, when more than one Refund carries our id.
fn refund_rank(settlement: &RefundSettlement) -> u8 {
    match settlement {
        RefundSettlement::Succeeded { .. } => 3,
        RefundSettlement::Pending { .. } => 2,
        RefundSettlement::Failed { .. } => 1,
        RefundSettlement::Canceled => 0,
    }
}

/// Classifies the last answer to a refund create.
fn classify_refund(Sent { reply, retried, .. }: Sent) -> RefundOutcome {
    if reply.status == 200 {
        return match serde_json::from_slice::<StripeRefund>(&reply.body) {
            Ok(refund) => RefundOutcome::Answered(refund.settlement()),
            Err(error) => RefundOutcome::Unknown {
                reason: format!("unreadable PSP answer: {error}"),
            },
        };
    }
    let detail = serde_json::from_slice::<ErrorBody>(&reply.body)
        .map(|b| b.error)
        .unwrap_or_default();
    match (reply.status, detail.kind.as_str()) {
        // Refused for good (`charge_already_refunded`, more than is left, `charge_not_refundable`,
        // `resource_missing`...): nothing was refunded, and a byte-identical re-send under the
        // key is refused alike or replays this answer.
        (400, "invalid_request_error") => RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: detail
                .code
                .unwrap_or_else(|| "invalid_request_error".into()),
        }),
        (401 | 403, _) => {
            let reason = credentials_refused(reply.status);
            if retried {
                // An earlier call under the key was answered: it may be known.
                RefundOutcome::Unknown { reason }
            } else {
                RefundOutcome::NotSent { reason }
            }
        }
        // 400 idempotency_error, 409, 429 and 5xx: the outcome is unknown.
        (status, kind) => RefundOutcome::Unknown {
            reason: format!(
                "PSP answered {status} {kind} {}",
                detail.code.unwrap_or_default()
            ),
        },
    }
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
        "requires_action" if intent.redirect_url().is_some() => PspOutcome::ActionRequired {
            redirect_url: intent.redirect_url().unwrap_or_default().to_owned(),
            provider_payment_id: intent.id,
        },
        "requires_capture" => PspOutcome::Authorized {
            amount_capturable: intent
                .amount_capturable
                .or(intent.amount)
                .unwrap_or_default(),
            capture_before_ms: intent.capture_before_ms(),
            provider_payment_id: intent.id,
        },
        "requires_payment_method"
            if intent
                .last_payment_error
                .as_ref()
                .is_some_and(|e| e.code.as_deref() == Some(AUTHENTICATION_REQUIRED_CODE)) =>
        {
            PspOutcome::AuthenticationRequired {
                provider_payment_id: Some(intent.id),
            }
        }
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
    let amount = intent
        .amount
        .zip(intent.currency.as_deref())
        .map(|(minor, currency)| CheckedAmount {
            minor,
            currency: currency.to_ascii_lowercase(),
        });
    match intent.status.as_str() {
        // A manual capture's success states what was captured (`amount_received`).
        "succeeded" if intent.capture_method.as_deref() == Some("manual") => {
            match intent.amount_received {
                Some(amount_captured) => PspLookup::Captured {
                    provider_payment_id: intent.id,
                    amount_captured,
                    amount,
                },
                None => PspLookup::Succeeded {
                    provider_payment_id: intent.id,
                    amount,
                },
            }
        }
        "succeeded" => PspLookup::Succeeded {
            provider_payment_id: intent.id,
            amount,
        },
        "requires_payment_method" if intent.last_payment_error.is_some() => PspLookup::Declined {
            decline_code: intent
                .last_payment_error
                .and_then(|e| e.decline_code.or(e.code))
                .unwrap_or_else(|| "generic_decline".into()),
            provider_payment_id: intent.id,
            amount,
        },
        "canceled" => PspLookup::Canceled {
            reason: intent
                .cancellation_reason
                .as_deref()
                .map(|reason| super::stripe_operations::cancellation_reason(Some(reason))),
            provider_payment_id: intent.id,
        },
        // Waiting for the customer, or authorized: what a create's answer would have said, for
        // an attempt whose answer was lost.
        "requires_action" if intent.redirect_url().is_some() => PspLookup::ActionRequired {
            redirect_url: intent.redirect_url().unwrap_or_default().to_owned(),
            provider_payment_id: intent.id,
        },
        "requires_capture" => PspLookup::Authorized {
            amount_capturable: intent
                .amount_capturable
                .or(intent.amount)
                .unwrap_or_default(),
            capture_before_ms: intent.capture_before_ms(),
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
        (402, "card_error") if detail.code.as_deref() == Some(AUTHENTICATION_REQUIRED_CODE) => {
            PspOutcome::AuthenticationRequired {
                provider_payment_id: detail.payment_intent.map(|pi| pi.id),
            }
        }
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
        (401 | 403, _) => PspOutcome::NotSent {
            reason: credentials_refused(status),
        },
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
impl<T: PspTransport> Psp for StripePsp<T> {
    fn name(&self) -> &str {
        &self.provider_name
    }

    fn kind(&self) -> crate::domain::PspKind {
        crate::domain::PspKind::Stripe
    }

    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let call = self.intent_call(request, true);
        let Sent { reply, retried, .. } = match self.send_with_busy_retries(&call, timeout).await {
            Ok(sent) => sent,
            Err(NoAnswer::NotSent(reason)) => return PspOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => return PspOutcome::Unknown { reason },
        };
        if reply.status == 200 {
            return match serde_json::from_slice::<PaymentIntent>(&reply.body) {
                Ok(intent) => classify_intent(intent),
                Err(error) => PspOutcome::Unknown {
                    reason: format!("unreadable PSP answer: {error}"),
                },
            };
        }
        match classify_error(reply.status, &reply.body) {
            // Credentials refused after an earlier answer: the key may be known.
            PspOutcome::NotSent { reason } if retried => PspOutcome::Unknown { reason },
            outcome => outcome,
        }
    }

    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        self.operate_intent(request, timeout).await
    }

    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        let call = self.refund_call(request);
        match self.send_with_busy_retries(&call, timeout).await {
            Ok(sent) => classify_refund(sent),
            Err(NoAnswer::NotSent(reason)) => RefundOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => RefundOutcome::Unknown { reason },
        }
    }

    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let mut starting_after: Option<String> = None;
        let mut ours: Vec<RefundSettlement> = Vec::new();
        for _ in 0..REFUND_PAGES_MAX {
            let mut query = vec![
                ("payment_intent".to_owned(), provider_payment_id.to_owned()),
                ("limit".to_owned(), REFUND_PAGE_LIMIT.to_string()),
            ];
            if let Some(last) = &starting_after {
                query.push(("starting_after".to_owned(), last.clone()));
            }
            let reply = self
                .plain(self.call(
                    "GET",
                    "/v1/refunds".to_owned(),
                    query,
                    WireBody::Empty,
                    None,
                ))
                .await?;
            if reply.status != 200 {
                return Err(PspError {
                    reason: format!("refund list answered {}", reply.status),
                });
            }
            let page: RefundList = serde_json::from_slice(&reply.body).map_err(|e| PspError {
                reason: e.to_string(),
            })?;
            let last = page.data.last().map(|refund| refund.id.clone());
            ours.extend(
                page.data
                    .into_iter()
                    .filter(|refund| refund.refund_id() == Some(refund_id))
                    .map(StripeRefund::settlement),
            );
            match last {
                Some(last) if page.has_more => starting_after = Some(last),
                // One key per refund means one Refund; should there be more (a re-send after
                // Stripe forgot the key), the strongest word wins: succeeded, then pending (may
                // still succeed), then failed. Lists go newest first: the newest wins a tie.
                _ => return Ok(ours.into_iter().rev().max_by_key(refund_rank)),
            }
        }
        // Not found in the pages read is no proof that it is not there.
        Err(PspError {
            reason: format!(
                "more than {} refunds of {provider_payment_id}: the lookup gave up",
                REFUND_PAGES_MAX * REFUND_PAGE_LIMIT as usize
            ),
        })
    }

    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        let reply = self
            .plain(self.call(
                "GET",
                "/v1/payment_intents/search".to_owned(),
                vec![(
                    "query".to_owned(),
                    format!("metadata['payment_id']:'{payment_id}'"),
                )],
                WireBody::Empty,
                None,
            ))
            .await?;
        if reply.status != 200 {
            return Err(PspError {
                reason: format!("search answered {}", reply.status),
            });
        }
        let found: SearchResult = serde_json::from_slice(&reply.body).map_err(|e| PspError {
            reason: e.to_string(),
        })?;
        // One key per attempt means one intent; should there be more, the strongest word wins.
        Ok(found
            .data
            .into_iter()
            .map(lookup_of)
            .max_by_key(PspLookup::strength)
            .unwrap_or(PspLookup::NotFound))
    }

    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        let reply = self
            .transport
            .send(&self.intent_call(request, false), self.request_timeout)
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
            .plain(self.call(
                "POST",
                format!("/v1/payment_intents/{provider_payment_id}/cancel"),
                Vec::new(),
                WireBody::Form(vec![(
                    "cancellation_reason".to_owned(),
                    "abandoned".to_owned(),
                )]),
                None,
            ))
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
    use crate::domain::{Currency, RefundReason};
    use serde_json::json;

    use crate::adapters::psp::transport::scripted::{
        after_connect, not_connected, reply, Scripted, Step,
    };

    /// The secret key the scripted adapters authenticate with.
    const API_KEY: &str = "sk_test_scripted";

    fn scripted(steps: impl IntoIterator<Item = Step>) -> StripePsp<Scripted> {
        StripePsp::with_transport(
            Scripted::new(steps),
            "stripe",
            API_KEY,
            Duration::from_secs(10),
        )
    }

    fn calls(psp: &StripePsp<Scripted>) -> Vec<WireCall> {
        psp.transport().calls()
    }

    fn error(status: u16, kind: &str, code: Option<&str>, param: Option<&str>) -> Step {
        reply(
            status,
            json!({"error": {"type": kind, "code": code, "param": param, "message": "scripted"}}),
        )
    }

    fn key_in_use() -> Step {
        error(
            409,
            "idempotency_error",
            Some("idempotency_key_in_use"),
            None,
        )
    }

    fn rate_limited() -> Step {
        error(429, "rate_limit_error", Some("rate_limit"), None)
    }

    /// A Refund as Stripe serialises it ("The Refund object", as the fake PSP's model does).
    fn refund_object(id: &str, status: &str, refund_id: Option<&str>) -> serde_json::Value {
        let metadata = match refund_id {
            Some(refund_id) => json!({"refund_id": refund_id, "payment_id": "pay_1"}),
            None => json!({}),
        };
        let mut refund = json!({
            "id": id,
            "object": "refund",
            "amount": 300,
            "currency": "jpy",
            "payment_intent": "pi_1",
            "charge": "ch_1",
            "status": status,
            "reason": "requested_by_customer",
            "metadata": metadata,
            "created": 1_730_000_000,
            "receipt_number": null,
        });
        if status == "failed" {
            refund["failure_reason"] = "expired_or_canceled_card".into();
        }
        refund
    }

    fn refund_page(refunds: Vec<serde_json::Value>, has_more: bool) -> Step {
        reply(
            200,
            json!({"object": "list", "data": refunds, "has_more": has_more, "url": "/v1/refunds"}),
        )
    }

    fn refund_request(reason: Option<RefundReason>) -> RefundRequest {
        RefundRequest {
            refund_id: "rfd_1_1".into(),
            payment_id: "pay_1".into(),
            provider_payment_id: "pi_1".into(),
            amount: 300,
            currency: Currency::Jpy,
            reason,
            idempotency_key: "payonce-refund-pay_1-1".into(),
            resend: false,
            provider_refund_id: None,
            captured: 0,
        }
    }

    async fn refund_with(steps: Vec<Step>) -> (RefundOutcome, usize) {
        let psp = scripted(steps);
        let outcome = psp
            .create_refund(
                &refund_request(Some(RefundReason::RequestedByCustomer)),
                Duration::from_secs(10),
            )
            .await;
        (outcome, calls(&psp).len())
    }

    fn answered(provider_refund_id: Option<&str>, code: &str) -> RefundOutcome {
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: provider_refund_id.map(str::to_owned),
            code: code.into(),
        })
    }

    #[tokio::test]
    async fn a_refund_sends_only_what_stripe_accepts_and_every_resend_is_identical() {
        let psp = scripted([
            key_in_use(),
            reply(200, refund_object("re_1", "succeeded", Some("rfd_1_1"))),
        ]);
        let outcome = psp
            .create_refund(
                &refund_request(Some(RefundReason::Duplicate)),
                Duration::from_secs(10),
            )
            .await;
        assert_eq!(
            outcome,
            RefundOutcome::Answered(RefundSettlement::Succeeded {
                provider_refund_id: "re_1".into()
            })
        );
        let form = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let expected = WireCall {
            method: "POST",
            path: "/v1/refunds".into(),
            query: Vec::new(),
            headers: form(&[
                ("Authorization", "Bearer sk_test_scripted"),
                ("Idempotency-Key", "payonce-refund-pay_1-1"),
            ]),
            body: WireBody::Form(form(&[
                ("payment_intent", "pi_1"),
                ("amount", "300"),
                ("reason", "duplicate"),
                ("metadata[refund_id]", "rfd_1_1"),
                ("metadata[payment_id]", "pay_1"),
            ])),
        };
        assert_eq!(calls(&psp), vec![expected.clone(), expected]);

        // Without a reason, no `reason` parameter at all.
        let psp = scripted([reply(
            200,
            refund_object("re_1", "pending", Some("rfd_1_1")),
        )]);
        psp.create_refund(&refund_request(None), Duration::from_secs(10))
            .await;
        assert_eq!(
            calls(&psp)[0].body,
            WireBody::Form(form(&[
                ("payment_intent", "pi_1"),
                ("amount", "300"),
                ("metadata[refund_id]", "rfd_1_1"),
                ("metadata[payment_id]", "pay_1"),
            ]))
        );
    }

    #[tokio::test]
    async fn refund_objects_map_to_settlements() {
        let object = |status: &str| reply(200, refund_object("re_7", status, Some("rfd_1_1")));
        let pending = RefundOutcome::Answered(RefundSettlement::Pending {
            provider_refund_id: "re_7".into(),
        });
        assert_eq!(
            refund_with(vec![object("succeeded")]).await,
            (
                RefundOutcome::Answered(RefundSettlement::Succeeded {
                    provider_refund_id: "re_7".into()
                }),
                1
            )
        );
        assert_eq!(
            refund_with(vec![object("pending")]).await,
            (pending.clone(), 1)
        );
        assert_eq!(
            refund_with(vec![object("requires_action")]).await,
            (pending, 1)
        );
        assert_eq!(
            refund_with(vec![object("failed")]).await,
            (answered(Some("re_7"), "expired_or_canceled_card"), 1)
        );
        let mut no_reason = refund_object("re_7", "failed", Some("rfd_1_1"));
        no_reason["failure_reason"] = serde_json::Value::Null;
        assert_eq!(
            refund_with(vec![reply(200, no_reason)]).await,
            (answered(Some("re_7"), "failed"), 1)
        );
        assert_eq!(
            refund_with(vec![object("canceled")]).await,
            (answered(Some("re_7"), "canceled"), 1)
        );
    }

    #[tokio::test]
    async fn refund_error_answers_map_to_outcome_classes() {
        // Refused for good: nothing was refunded.
        let refused = [
            (
                Some("charge_already_refunded"),
                None,
                "charge_already_refunded",
            ),
            (Some("charge_not_refundable"), None, "charge_not_refundable"),
            (
                Some("resource_missing"),
                Some("payment_intent"),
                "resource_missing",
            ),
            // More than is left: Stripe names `amount` and sends no code.
            (None, Some("amount"), "invalid_request_error"),
        ];
        for (code, param, expected) in refused {
            assert_eq!(
                refund_with(vec![error(400, "invalid_request_error", code, param)]).await,
                (answered(None, expected), 1),
                "{code:?}"
            );
        }
        // Unknown: the key was used with other parameters, a server error, an unreadable 200.
        assert_eq!(
            refund_with(vec![error(400, "idempotency_error", None, None)]).await,
            (
                RefundOutcome::Unknown {
                    reason: "PSP answered 400 idempotency_error ".into()
                },
                1
            )
        );
        assert_eq!(
            refund_with(vec![error(500, "api_error", Some("api_error"), None)]).await,
            (
                RefundOutcome::Unknown {
                    reason: "PSP answered 500 api_error api_error".into()
                },
                1
            )
        );
        assert_eq!(
            refund_with(vec![Ok(WireReply {
                status: 200,
                body: b"<html>".to_vec()
            })])
            .await,
            (
                RefundOutcome::Unknown {
                    reason: "unreadable PSP answer: expected value at line 1 column 1".into()
                },
                1
            )
        );
        // Our credentials refused before anything else answered: not sent.
        for status in [401, 403] {
            assert_eq!(
                refund_with(vec![error(status, "invalid_request_error", None, None)]).await,
                (
                    RefundOutcome::NotSent {
                        reason: format!("the PSP refused our credentials ({status})")
                    },
                    1
                )
            );
        }
    }

    #[tokio::test]
    async fn busy_refund_answers_are_retried_twice_then_unknown() {
        let succeeded = RefundOutcome::Answered(RefundSettlement::Succeeded {
            provider_refund_id: "re_1".into(),
        });
        let object = || reply(200, refund_object("re_1", "succeeded", Some("rfd_1_1")));
        assert_eq!(
            refund_with(vec![key_in_use(), rate_limited(), object()]).await,
            (succeeded, 3)
        );
        assert_eq!(
            refund_with(vec![key_in_use(), key_in_use(), key_in_use()]).await,
            (
                RefundOutcome::Unknown {
                    reason: "PSP answered 409 idempotency_error idempotency_key_in_use".into()
                },
                3
            )
        );
        assert_eq!(
            refund_with(vec![rate_limited(), rate_limited(), rate_limited()]).await,
            (
                RefundOutcome::Unknown {
                    reason: "PSP answered 429 rate_limit_error rate_limit".into()
                },
                3
            )
        );
        // A refusal after a busy answer is still a refusal.
        assert_eq!(
            refund_with(vec![
                key_in_use(),
                error(
                    400,
                    "invalid_request_error",
                    Some("charge_already_refunded"),
                    None
                )
            ])
            .await,
            (answered(None, "charge_already_refunded"), 2)
        );
    }

    #[tokio::test]
    async fn credentials_refused_after_a_busy_refund_answer_are_unknown() {
        assert_eq!(
            refund_with(vec![
                key_in_use(),
                error(401, "invalid_request_error", None, None)
            ])
            .await,
            (
                RefundOutcome::Unknown {
                    reason: "the PSP refused our credentials (401)".into()
                },
                2
            )
        );
    }

    #[tokio::test]
    async fn a_refund_that_never_connected_was_not_sent_unless_something_answered_before() {
        assert_eq!(
            refund_with(vec![not_connected()]).await,
            (
                RefundOutcome::NotSent {
                    reason: "scripted: refused".into()
                },
                1
            )
        );
        assert_eq!(
            refund_with(vec![after_connect()]).await,
            (
                RefundOutcome::Unknown {
                    reason: "scripted: cut".into()
                },
                1
            )
        );
        assert_eq!(
            refund_with(vec![rate_limited(), not_connected()]).await,
            (
                RefundOutcome::Unknown {
                    reason: "scripted: refused".into()
                },
                2
            )
        );
    }

    #[tokio::test]
    async fn the_charge_path_keeps_its_busy_retries_and_answered_rule() {
        let request = ChargeRequest {
            payment_id: "pay_1".into(),
            amount: 300,
            currency: Currency::Jpy,
            payment_method: "pm_card_visa".into(),
            idempotency_key: "payonce-charge-pay_1".into(),
            return_url: None,
            capture: crate::domain::CaptureMethod::Automatic,
            earlier_may_run: false,
        };
        let charge = |steps: Vec<Step>| {
            let request = request.clone();
            async move {
                let psp = scripted(steps);
                let outcome = psp.create_charge(&request, Duration::from_secs(10)).await;
                let calls = calls(&psp);
                assert!(calls.windows(2).all(|pair| pair[0] == pair[1]), "{calls:?}");
                (outcome, calls.len())
            }
        };
        let intent = reply(200, json!({"id": "pi_1", "status": "succeeded"}));
        assert_eq!(
            charge(vec![key_in_use(), rate_limited(), intent]).await,
            (
                PspOutcome::Approved {
                    provider_payment_id: "pi_1".into()
                },
                3
            )
        );
        assert_eq!(
            charge(vec![error(401, "invalid_request_error", None, None)]).await,
            (
                PspOutcome::NotSent {
                    reason: "the PSP refused our credentials (401)".into()
                },
                1
            )
        );
        assert_eq!(
            charge(vec![
                key_in_use(),
                error(401, "invalid_request_error", None, None)
            ])
            .await,
            (
                PspOutcome::Unknown {
                    reason: "the PSP refused our credentials (401)".into()
                },
                2
            )
        );
        assert_eq!(
            charge(vec![not_connected()]).await,
            (
                PspOutcome::NotSent {
                    reason: "scripted: refused".into()
                },
                1
            )
        );
        assert_eq!(
            charge(vec![key_in_use(), not_connected()]).await,
            (
                PspOutcome::Unknown {
                    reason: "scripted: refused".into()
                },
                2
            )
        );
    }

    #[tokio::test]
    async fn a_refund_lookup_lists_the_charge_refunds_page_by_page() {
        let psp = scripted([
            refund_page(
                vec![
                    refund_object("re_4", "succeeded", Some("rfd_1_2")),
                    refund_object("re_3", "succeeded", None),
                ],
                true,
            ),
            refund_page(
                vec![
                    refund_object("re_2", "pending", Some("rfd_1_1")),
                    refund_object("re_1", "succeeded", Some("rfd_1_0")),
                ],
                false,
            ),
        ]);
        assert_eq!(
            psp.lookup_refund("pi_1", "rfd_1_1").await.unwrap(),
            Some(RefundSettlement::Pending {
                provider_refund_id: "re_2".into()
            })
        );
        let query = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let list = |q: Vec<(String, String)>| WireCall {
            method: "GET",
            path: "/v1/refunds".into(),
            query: q,
            headers: vec![(
                "Authorization".to_owned(),
                "Bearer sk_test_scripted".to_owned(),
            )],
            body: WireBody::Empty,
        };
        assert_eq!(
            calls(&psp),
            vec![
                list(query(&[("payment_intent", "pi_1"), ("limit", "100")])),
                list(query(&[
                    ("payment_intent", "pi_1"),
                    ("limit", "100"),
                    ("starting_after", "re_3")
                ])),
            ]
        );
    }

    #[tokio::test]
    async fn a_refund_lookup_reads_failures_and_prefers_the_strongest_word() {
        let psp = scripted([refund_page(
            vec![refund_object("re_2", "failed", Some("rfd_1_1"))],
            false,
        )]);
        assert_eq!(
            psp.lookup_refund("pi_1", "rfd_1_1").await.unwrap(),
            Some(RefundSettlement::Failed {
                provider_refund_id: Some("re_2".into()),
                code: "expired_or_canceled_card".into()
            })
        );
        // Two Refunds with our id (a re-send after Stripe forgot the key): one succeeded.
        let psp = scripted([refund_page(
            vec![
                refund_object("re_2", "failed", Some("rfd_1_1")),
                refund_object("re_1", "succeeded", Some("rfd_1_1")),
            ],
            false,
        )]);
        assert_eq!(
            psp.lookup_refund("pi_1", "rfd_1_1").await.unwrap(),
            Some(RefundSettlement::Succeeded {
                provider_refund_id: "re_1".into()
            })
        );
    }

    #[tokio::test]
    async fn a_refund_lookup_finds_none_or_fails_but_never_guesses() {
        let psp = scripted([refund_page(
            vec![refund_object("re_1", "succeeded", Some("rfd_1_2"))],
            false,
        )]);
        assert_eq!(psp.lookup_refund("pi_1", "rfd_1_1").await.unwrap(), None);
        let psp = scripted([refund_page(Vec::new(), false)]);
        assert_eq!(psp.lookup_refund("pi_1", "rfd_1_1").await.unwrap(), None);

        let psp = scripted([error(500, "api_error", None, None)]);
        assert_eq!(
            psp.lookup_refund("pi_1", "rfd_1_1")
                .await
                .unwrap_err()
                .reason,
            "refund list answered 500"
        );
        let psp = scripted([not_connected()]);
        assert_eq!(
            psp.lookup_refund("pi_1", "rfd_1_1")
                .await
                .unwrap_err()
                .reason,
            "scripted: refused"
        );
        // Ten full pages without ours, and more to come: no proof it is not there.
        let psp = scripted((0..10).map(|page| {
            refund_page(
                vec![refund_object(&format!("re_{page}"), "succeeded", None)],
                true,
            )
        }));
        assert_eq!(
            psp.lookup_refund("pi_1", "rfd_1_1")
                .await
                .unwrap_err()
                .reason,
            "more than 1000 refunds of pi_1: the lookup gave up"
        );
        assert_eq!(calls(&psp).len(), 10);
    }

    #[tokio::test]
    async fn every_call_carries_the_key_and_only_creates_carry_an_idempotency_key() {
        let request = ChargeRequest {
            payment_id: "pay_1".into(),
            amount: 300,
            currency: Currency::Jpy,
            payment_method: "pm_card_visa".into(),
            idempotency_key: "payonce-charge-pay_1".into(),
            return_url: None,
            capture: crate::domain::CaptureMethod::Automatic,
            earlier_may_run: false,
        };
        let psp = scripted([
            reply(200, json!({"id": "pi_1", "status": "succeeded"})),
            reply(
                200,
                json!({"id": "pi_1", "status": "requires_confirmation"}),
            ),
            reply(200, json!({"id": "pi_1", "status": "canceled"})),
            reply(200, json!({"data": []})),
            reply(200, refund_object("re_1", "succeeded", Some("rfd_1_1"))),
            refund_page(Vec::new(), false),
        ]);
        psp.create_charge(&request, Duration::from_secs(10)).await;
        psp.fence(&request).await.unwrap();
        psp.cancel("pi_1").await.unwrap();
        psp.lookup("pay_1").await.unwrap();
        psp.create_refund(&refund_request(None), Duration::from_secs(10))
            .await;
        psp.lookup_refund("pi_1", "rfd_1_1").await.unwrap();
        let headers: Vec<_> = calls(&psp)
            .iter()
            .map(|call| {
                (
                    call.method,
                    call.header("authorization").map(str::to_owned),
                    call.header("idempotency-key").map(str::to_owned),
                )
            })
            .collect();
        let bearer = || Some("Bearer sk_test_scripted".to_owned());
        assert_eq!(
            headers,
            vec![
                ("POST", bearer(), Some("payonce-charge-pay_1".to_owned())),
                ("POST", bearer(), Some("payonce-charge-pay_1".to_owned())),
                ("POST", bearer(), None),
                ("GET", bearer(), None),
                ("POST", bearer(), Some("payonce-refund-pay_1-1".to_owned())),
                ("GET", bearer(), None),
            ]
        );
        // The key shows neither in the adapter nor in its calls.
        let shown = format!("{psp:?} {:?}", calls(&psp));
        assert!(!shown.contains(API_KEY), "{shown}");
    }

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

    fn form_of(call: &WireCall) -> Vec<(String, String)> {
        match &call.body {
            WireBody::Form(form) => form.clone(),
            other => panic!("not a form: {other:?}"),
        }
    }

    fn names(form: &[(String, String)]) -> Vec<&str> {
        form.iter().map(|(name, _)| name.as_str()).collect()
    }

    #[test]
    fn a_return_url_and_manual_capture_are_sent_only_where_stripe_takes_them() {
        let psp = scripted([]);
        let request = ChargeRequest {
            payment_id: "pay_1".into(),
            amount: 300,
            currency: Currency::Jpy,
            payment_method: "pm_card_threeDSecure2Required".into(),
            idempotency_key: "payonce-charge-pay_1".into(),
            return_url: Some("https://shop.example/return".into()),
            capture: CaptureMethod::Manual,
            earlier_may_run: false,
        };
        // The confirmed create: the return URL instead of error_on_requires_action, redirects
        // allowed, manual capture with the charge expanded.
        let confirmed = form_of(&psp.intent_call(&request, true));
        assert!(confirmed.contains(&("return_url".into(), "https://shop.example/return".into())));
        assert!(confirmed.contains(&("capture_method".into(), "manual".into())));
        assert!(confirmed.contains(&("expand[]".into(), "latest_charge".into())));
        for absent in [
            "error_on_requires_action",
            "automatic_payment_methods[allow_redirects]",
        ] {
            assert!(!names(&confirmed).contains(&absent), "{absent}");
        }
        // The fence: no confirm-only parameter at all, capture_method still (it is not one).
        let fence = form_of(&psp.intent_call(&request, false));
        assert!(!names(&fence).contains(&"return_url"));
        assert!(!names(&fence).contains(&"error_on_requires_action"));
        assert!(fence.contains(&("capture_method".into(), "manual".into())));
        // A one-step charge is sent as before.
        let plain = ChargeRequest {
            return_url: None,
            capture: CaptureMethod::Automatic,
            ..request
        };
        let form = form_of(&psp.intent_call(&plain, true));
        assert!(form.contains(&("error_on_requires_action".into(), "true".into())));
        assert!(form.contains(&(
            "automatic_payment_methods[allow_redirects]".into(),
            "never".into()
        )));
        for absent in ["return_url", "capture_method", "expand[]"] {
            assert!(!names(&form).contains(&absent), "{absent}");
        }
    }

    #[test]
    fn intents_that_ask_for_action_or_are_authorized_map_to_their_outcomes() {
        let intent = |value: serde_json::Value| -> PaymentIntent {
            serde_json::from_value(value).expect("an intent")
        };
        assert_eq!(
            classify_intent(intent(json!({
                "id": "pi_1", "status": "requires_action",
                "next_action": {"type": "redirect_to_url",
                    "redirect_to_url": {"url": "https://hooks.stripe.com/3d_secure_2/pi_1", "return_url": "https://shop.example/r"}}
            }))),
            PspOutcome::ActionRequired {
                provider_payment_id: "pi_1".into(),
                redirect_url: "https://hooks.stripe.com/3d_secure_2/pi_1".into()
            }
        );
        // An action payonce cannot hand to a browser is not one it can wait on: unknown.
        assert!(matches!(
            classify_intent(intent(json!({
                "id": "pi_1", "status": "requires_action",
                "next_action": {"type": "use_stripe_sdk"}
            }))),
            PspOutcome::Unknown { .. }
        ));
        assert_eq!(
            classify_intent(intent(json!({
                "id": "pi_2", "status": "requires_capture", "amount": 3000, "amount_capturable": 3000,
                "latest_charge": {"id": "ch_2", "payment_method_details": {"card": {"capture_before": 1_700_604_800}}}
            }))),
            PspOutcome::Authorized {
                provider_payment_id: "pi_2".into(),
                amount_capturable: 3000,
                capture_before_ms: Some(1_700_604_800_000)
            }
        );
        assert_eq!(
            classify_intent(intent(json!({
                "id": "pi_3", "status": "requires_capture", "amount": 500, "latest_charge": "ch_3"
            }))),
            PspOutcome::Authorized {
                provider_payment_id: "pi_3".into(),
                amount_capturable: 500,
                capture_before_ms: None
            }
        );
        let needs_auth = br#"{"error":{"type":"card_error","code":"authentication_required","decline_code":"authentication_required","payment_intent":{"id":"pi_4","status":"requires_payment_method"}}}"#;
        assert_eq!(
            classify_error(402, needs_auth),
            PspOutcome::AuthenticationRequired {
                provider_payment_id: Some("pi_4".into())
            }
        );
    }
}
