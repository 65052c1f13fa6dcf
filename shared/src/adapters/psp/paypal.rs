//! PayPal's Orders v2 and Payments v2 (OAuth 2 client credentials): the charge (an order), its
//! capture or authorization, voids, refunds and lookups, and what each answer says.
//!
//! Sources: PayPal's published OpenAPI specifications (`paypal/paypal-rest-api-specifications`,
//! `checkout_orders_v2.json`, `payments_payment_v2.json`) and the developer pages they link;
//! what they do not confirm is marked UNCONFIRMED and nothing relies on it.
//!
//! **A charge is an order.** `POST /v2/checkout/orders` under `PayPal-Request-Id:
//! payonce-charge-<payment_id>` with one purchase unit (`custom_id` and `invoice_id` our payment
//! id) and the payment method: a vaulted card (`card.vault_id`; the sandbox's `pm_…` tokens are
//! vault ids), a vaulted PayPal wallet (`paypal_vault:<id>`), or `paypal` — the buyer approves
//! at PayPal (the `payer-action` link is the action payonce hands the browser). PayPal may
//! charge a vaulted source in the create itself (order `COMPLETED` with its capture, which may
//! be **declined**) or leave the order `CREATED`/`APPROVED` for a second call (both observed;
//! which one is UNCONFIRMED): an order waiting for our capture answers
//! [`PspOutcome::Authorized`], and the caller stores the order id, then captures it
//! (`POST /v2/checkout/orders/{id}/capture` under `payonce-capture-<payment_id>`; PayPal
//! captures an order at most once: `ORDER_ALREADY_CAPTURED`). `capture: "manual"` creates with
//! intent `AUTHORIZE` and authorizes at once (`…/authorize`), only with a vaulted source.
//!
//! **No lookup by our reference, keys for 6 hours.** Orders are looked up by id only
//! ([`Psp::lookup_payment`]); PayPal keeps Orders request ids 6 hours and answers a re-send
//! under one with the latest state of what the first made. So a create whose answer was lost is
//! sent again at once, and reconcile sends it again later ([`Fence::Resend`]), always within the
//! window ([`Psp::charge_keys_kept`]); past it, an attempt whose order id was never stored waits
//! for an operator (its order, never captured by payonce, lapses after 3 hours). The account's
//! "unique invoice id" rule (`DUPLICATE_INVOICE_ID`) is a second guard: a create refused so was
//! preceded by one of ours, and is unknown.
//!
//! Errors are `{name, message, debug_id, details[]{issue, …}}`: read by `issue`. A 401 is our
//! token: it is fetched again and the identical request re-sent once (a 401 is not-sent).

use super::keyed::{self, credentials_refused, NoAnswer, Sent};
use super::paypal_events::{
    authorization_of, capture_of, capture_settlement, money, order_payment_id, order_settlement,
    payer_action_url, refund_settlement, refunds_of,
};
use super::transport::{CallFailure, HttpTransport, PspTransport, WireBody, WireCall, WireReply};
use crate::domain::{OperationKind, Payment, RefundSettlement, Settlement};
use crate::ports::{
    ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspError, PspLookup, PspOutcome,
    RefundOutcome, RefundRequest,
};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// PayPal's production API.
pub const PAYPAL_API_BASE: &str = "https://api-m.paypal.com";

/// PayPal's sandbox API.
pub const PAYPAL_SANDBOX_BASE: &str = "https://api-m.sandbox.paypal.com";

/// How long PayPal keeps an Orders API request id ("The server stores keys for 6 hours").
pub const ORDER_KEYS_KEPT: Duration = Duration::from_secs(6 * 3600);

/// A token is fetched again this long before PayPal says it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(300);

/// The least time left for the charge's one re-send of a create whose answer was lost.
const RESEND_AT_LEAST: Duration = Duration::from_secs(1);

/// The payment method that asks the buyer to approve at PayPal (no vaulted source).
pub const BUYER_APPROVES: &str = "paypal";

/// How to reach PayPal.
#[derive(Clone)]
pub struct PayPalConfig {
    /// The REST app's client id.
    pub client_id: String,
    /// Its secret (never logged).
    pub client_secret: String,
    /// API base URL (tests point it at the fake PSP).
    pub base_url: String,
    /// The provider name stored on payments.
    pub provider_name: String,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for PayPalConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayPalConfig")
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("base_url", &self.base_url)
            .field("provider_name", &self.provider_name)
            .finish_non_exhaustive()
    }
}

impl PayPalConfig {
    /// PayPal production with these credentials and the adapters' default timeouts.
    pub fn new(client_id: impl Into<String>, client_secret: impl Into<String>) -> Self {
        Self {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            base_url: PAYPAL_API_BASE.to_owned(),
            provider_name: "paypal".to_owned(),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// The same, at another base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }
}

/// An OAuth access token and when to stop using it.
#[derive(Clone)]
struct Token {
    value: String,
    until: Instant,
}

/// Why no token could be had.
enum TokenError {
    /// The token call made no connection: nothing was sent.
    NotConnected(String),
    /// PayPal refused our client credentials (alarm).
    Refused(String),
    /// Anything else (a failure after connecting, an unreadable answer).
    Failed(String),
}

/// The PayPal adapter: OAuth tokens, the Orders and Payments calls, and their classification.
///
/// Its proof that a key was never used: **none** — but PayPal answers a re-send under the key
/// with what the key made while it keeps keys ([`Fence::Resend`]), which is what reconcile does.
pub struct PayPalPsp<T = HttpTransport> {
    transport: T,
    provider_name: String,
    /// `Basic base64(client_id:client_secret)` for the token call (never logged).
    basic: String,
    token: Mutex<Option<Token>>,
    request_timeout: Duration,
}

impl<T: std::fmt::Debug> std::fmt::Debug for PayPalPsp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayPalPsp")
            .field("transport", &self.transport)
            .field("provider_name", &self.provider_name)
            .field("credentials", &"<redacted>")
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl PayPalPsp<HttpTransport> {
    /// PayPal (or the fake PSP speaking its format) over HTTPS at `config.base_url`.
    pub fn new(config: PayPalConfig) -> Result<Self, reqwest::Error> {
        let transport = HttpTransport::new(
            config.base_url,
            config.connect_timeout,
            config.request_timeout,
        )?;
        Ok(Self::with_transport(
            transport,
            config.provider_name,
            &config.client_id,
            &config.client_secret,
            config.request_timeout,
        ))
    }
}

/// Whether `id` can be a PayPal object id and so be put in a path as it is.
fn is_object_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether an error status can carry a definitive refusal.
fn is_client_error(status: u16) -> bool {
    (400..500).contains(&status) && !matches!(status, 401 | 403 | 409 | 429)
}

/// The `issue`s of an error answer (and its `name`, for one without details).
fn issues_of(body: &Value) -> Vec<String> {
    let mut issues: Vec<String> = body["details"]
        .as_array()
        .map(|details| {
            details
                .iter()
                .filter_map(|d| d["issue"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if issues.is_empty() {
        if let Some(name) = body["name"].as_str() {
            issues.push(name.to_owned());
        }
    }
    issues
}

/// Issues that decline the payment: nothing was charged.
const DECLINE_ISSUES: [&str; 8] = [
    "INSTRUMENT_DECLINED",
    "TRANSACTION_REFUSED",
    "PAYER_CANNOT_PAY",
    "PAYMENT_SOURCE_DECLINED_BY_PROCESSOR",
    "PAYMENT_SOURCE_CANNOT_BE_USED",
    "MAX_NUMBER_OF_PAYMENT_ATTEMPTS_EXCEEDED",
    "PAYER_ACCOUNT_RESTRICTED",
    "PAYER_ACCOUNT_LOCKED_OR_CLOSED",
];

/// Issues that refuse the payment method itself.
const REJECTED_ISSUES: [&str; 3] = [
    "TOKEN_ID_NOT_FOUND",
    "MISMATCHED_VAULT_ID_TO_PAYMENT_SOURCE",
    "INVALID_RESOURCE_ID",
];

/// Issues that refuse the request for a reason every re-send repeats.
const REFUSED_ISSUES: [&str; 12] = [
    "DECIMAL_PRECISION",
    "DECIMALS_NOT_SUPPORTED",
    "CANNOT_BE_ZERO_OR_NEGATIVE",
    "MAX_VALUE_EXCEEDED",
    "INVALID_CURRENCY_CODE",
    "CURRENCY_NOT_SUPPORTED",
    "UNSUPPORTED_INTENT",
    "AUTH_CAPTURE_NOT_ENABLED",
    "INVALID_PARAMETER_VALUE",
    "MISSING_REQUIRED_PARAMETER",
    "INVALID_STRING_LENGTH",
    "INVALID_PARAMETER_SYNTAX",
];

/// What the client's payment method asks PayPal for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source<'a> {
    /// A vaulted card (`card_vault:<id>`, or a bare id such as the sandbox's `pm_…`).
    Card(&'a str),
    /// A vaulted PayPal wallet (`paypal_vault:<id>`).
    Wallet(&'a str),
    /// `paypal`: the buyer approves at PayPal.
    Buyer,
}

fn source_of(payment_method: &str) -> Source<'_> {
    if payment_method == BUYER_APPROVES {
        Source::Buyer
    } else if let Some(id) = payment_method.strip_prefix("paypal_vault:") {
        Source::Wallet(id)
    } else {
        Source::Card(
            payment_method
                .strip_prefix("card_vault:")
                .unwrap_or(payment_method),
        )
    }
}

impl<T: PspTransport> PayPalPsp<T> {
    /// The adapter over any transport, storing `provider_name` on payments, getting tokens with
    /// the REST app's `client_id` and `client_secret`.
    pub fn with_transport(
        transport: T,
        provider_name: impl Into<String>,
        client_id: &str,
        client_secret: &str,
        request_timeout: Duration,
    ) -> Self {
        let credentials = format!("{client_id}:{client_secret}");
        Self {
            transport,
            provider_name: provider_name.into(),
            basic: format!(
                "Basic {}",
                super::b64::encode(credentials.as_bytes(), super::b64::Alphabet::Standard)
            ),
            token: Mutex::new(None),
            request_timeout,
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// A token to call with: the one kept while it lasts, else a new one
    /// (`POST /v1/oauth2/token`, client credentials).
    async fn token(&self, timeout: Duration) -> Result<String, TokenError> {
        let now = Instant::now();
        if let Some(token) = self
            .token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|token| token.until > now)
        {
            return Ok(token.value.clone());
        }
        let call = WireCall {
            method: "POST",
            path: "/v1/oauth2/token".to_owned(),
            query: Vec::new(),
            headers: vec![("Authorization".to_owned(), self.basic.clone())],
            body: WireBody::Form(vec![(
                "grant_type".to_owned(),
                "client_credentials".to_owned(),
            )]),
        };
        let reply = match self
            .transport
            .send(&call, timeout.min(self.request_timeout))
            .await
        {
            Ok(reply) => reply,
            Err(CallFailure::NotConnected(reason)) => return Err(TokenError::NotConnected(reason)),
            Err(CallFailure::AfterConnect(reason)) => return Err(TokenError::Failed(reason)),
        };
        if matches!(reply.status, 401 | 403) {
            return Err(TokenError::Refused(credentials_refused(reply.status)));
        }
        let body: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        let (Some(value), Some(expires_in)) =
            (body["access_token"].as_str(), body["expires_in"].as_u64())
        else {
            return Err(TokenError::Failed(format!(
                "the token call answered {} without a token",
                reply.status
            )));
        };
        let lasts = Duration::from_secs(expires_in).saturating_sub(TOKEN_MARGIN);
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(Token {
            value: value.to_owned(),
            until: Instant::now() + lasts,
        });
        Ok(value.to_owned())
    }

    /// Forgets the token (PayPal refused it).
    fn forget_token(&self) {
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// A REST call: `Prefer: return=representation`, under `request_id` if given, JSON `body`.
    fn call(
        method: &'static str,
        path: String,
        request_id: Option<&str>,
        body: Option<Value>,
    ) -> WireCall {
        let mut headers = vec![("Prefer".to_owned(), "return=representation".to_owned())];
        if let Some(id) = request_id {
            headers.push(("PayPal-Request-Id".to_owned(), id.to_owned()));
        }
        WireCall {
            method,
            path,
            query: Vec::new(),
            headers,
            body: body.map_or(WireBody::Empty, |body| WireBody::Json(body.to_string())),
        }
    }

    /// `call` with our token: a 401 (the token expired or was revoked) fetches a new one and
    /// sends the identical request again, once. Keyed calls go through the busy retries and the
    /// answered rule ([`keyed::send_with_busy_retries`]).
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<Sent, NoAnswer> {
        let started = Instant::now();
        let mut refreshed = false;
        let mut answered_before = false;
        let mut in_progress_before = false;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let token = match self.token(left).await {
                Ok(token) => token,
                Err(TokenError::NotConnected(reason) | TokenError::Refused(reason))
                    if !answered_before =>
                {
                    return Err(NoAnswer::NotSent(reason))
                }
                Err(TokenError::Failed(reason)) if !answered_before => {
                    // Only the token call failed: the request itself was never sent.
                    return Err(NoAnswer::NotSent(reason));
                }
                Err(
                    TokenError::NotConnected(reason)
                    | TokenError::Refused(reason)
                    | TokenError::Failed(reason),
                ) => return Err(NoAnswer::Unknown(reason)),
            };
            let mut authorized = call.clone();
            authorized
                .headers
                .insert(0, ("Authorization".to_owned(), format!("Bearer {token}")));
            let left = timeout.saturating_sub(started.elapsed());
            let sent = keyed::send_with_busy_retries(
                &self.transport,
                &authorized,
                left,
                self.request_timeout,
            )
            .await;
            let sent = match sent {
                Err(NoAnswer::NotSent(reason)) if answered_before => {
                    return Err(NoAnswer::Unknown(reason))
                }
                other => other?,
            };
            if sent.reply.status == 401 && !refreshed {
                // Our token, not the request: a 401 is not-sent; the identical request again.
                self.forget_token();
                refreshed = true;
                answered_before |= sent.retried;
                in_progress_before |= sent.in_progress;
                continue;
            }
            return Ok(Sent {
                retried: sent.retried || answered_before,
                in_progress: sent.in_progress || in_progress_before,
                reply: sent.reply,
            });
        }
    }

    /// A plain (unkeyed) read within `timeout`: any failure is a [`PspError`].
    async fn read(&self, path: String, timeout: Duration) -> Result<WireReply, PspError> {
        match self
            .send(&Self::call("GET", path, None, None), timeout)
            .await
        {
            Ok(Sent { reply, .. }) => Ok(reply),
            Err(NoAnswer::NotSent(reason) | NoAnswer::Unknown(reason)) => Err(PspError { reason }),
        }
    }

    /// The order `order_id` (`GET /v2/checkout/orders/{id}`); `None` when PayPal knows none.
    async fn order(&self, order_id: &str, timeout: Duration) -> Result<Option<Value>, PspError> {
        if !is_object_id(order_id) {
            return Err(PspError {
                reason: format!("{order_id:?} is not a PayPal order id"),
            });
        }
        let reply = self
            .read(format!("/v2/checkout/orders/{order_id}"), timeout)
            .await?;
        match reply.status {
            200 => serde_json::from_slice(&reply.body)
                .map(Some)
                .map_err(|e| PspError {
                    reason: format!("unreadable order: {e}"),
                }),
            404 => Ok(None),
            status => Err(PspError {
                reason: format!("GET order {order_id} answered {status}"),
            }),
        }
    }

    /// The create's body: a pure function of the request, so every re-send is identical.
    /// A request that cannot be sent is answered without a call: a manual capture with no
    /// vaulted source is refused; a buyer's approval with nowhere to send the buyer back is
    /// answered as a card that needs authentication without one is: "authentication required"
    /// (nothing was, or could be, charged).
    fn order_request(request: &ChargeRequest, manual: bool) -> Result<Value, PspOutcome> {
        let intent = if manual { "AUTHORIZE" } else { "CAPTURE" };
        let back = request
            .return_url
            .as_ref()
            .map(|url| json!({"return_url": url, "cancel_url": url}));
        let payment_source = match source_of(&request.payment_method) {
            Source::Buyer if manual => {
                return Err(PspOutcome::Refused {
                    code: "paypal_manual_capture_needs_vault".to_owned(),
                })
            }
            Source::Buyer => {
                let Some(mut context) = back else {
                    return Err(PspOutcome::AuthenticationRequired {
                        provider_payment_id: None,
                    });
                };
                context["user_action"] = json!("PAY_NOW");
                json!({"paypal": {"experience_context": context}})
            }
            Source::Card(id) | Source::Wallet(id) => {
                let kind = if matches!(source_of(&request.payment_method), Source::Wallet(_)) {
                    "paypal"
                } else {
                    "card"
                };
                let mut source = json!({"vault_id": id});
                // A vaulted card may still need 3-D Secure: with somewhere to come back to, the
                // buyer is sent to act; a manual capture offers no such detour.
                if let (Some(context), false) = (back, manual) {
                    source["experience_context"] = context;
                }
                json!({ kind: source })
            }
        };
        Ok(json!({
            "intent": intent,
            "purchase_units": [{
                "custom_id": request.payment_id,
                "invoice_id": request.payment_id,
                "amount": money(request.amount, request.currency),
            }],
            "payment_source": payment_source,
        }))
    }

    /// `POST /v2/checkout/orders/{id}/authorize` under `payonce-authorize-<payment_id>`: the
    /// authorization of an order created with intent `AUTHORIZE` (no money moves).
    async fn authorize(
        &self,
        order_id: &str,
        payment_id: &str,
        timeout: Duration,
    ) -> Result<Sent, NoAnswer> {
        let call = Self::call(
            "POST",
            format!("/v2/checkout/orders/{order_id}/authorize"),
            Some(&format!("payonce-authorize-{payment_id}")),
            Some(json!({})),
        );
        self.send(&call, timeout).await
    }

    /// Classifies the answer to a create (or to its authorization).
    fn classify_create(request: &ChargeRequest, manual: bool, reply: &WireReply) -> PspOutcome {
        if matches!(reply.status, 401 | 403) {
            return PspOutcome::NotSent {
                reason: credentials_refused(reply.status),
            };
        }
        let body: Value = match serde_json::from_slice(&reply.body) {
            Ok(body) => body,
            Err(error) => {
                return PspOutcome::Unknown {
                    reason: format!("unreadable PSP answer ({}): {error}", reply.status),
                }
            }
        };
        if (200..300).contains(&reply.status) {
            return Self::classify_order(request, manual, &body);
        }
        let issues = issues_of(&body);
        let unknown = || PspOutcome::Unknown {
            reason: format!("PSP answered {} {}", reply.status, issues.join(",")),
        };
        if !is_client_error(reply.status) {
            return unknown();
        }
        let has = |list: &[&str]| issues.iter().any(|i| list.contains(&i.as_str()));
        if has(&["DUPLICATE_INVOICE_ID", "PAYPAL_REQUEST_ID_PREVIOUSLY_USED"]) {
            // Our payment id was already used on an order, by an earlier call of ours.
            tracing::warn!(status = reply.status, issues = %issues.join(","), "PayPal says this attempt's order or request id was used before; the outcome is unknown");
            return unknown();
        }
        if has(&["PAYER_ACTION_REQUIRED"]) {
            return PspOutcome::AuthenticationRequired {
                provider_payment_id: None,
            };
        }
        if let Some(issue) = issues.iter().find(|i| DECLINE_ISSUES.contains(&i.as_str())) {
            return PspOutcome::Declined {
                provider_payment_id: None,
                decline_code: issue.clone(),
            };
        }
        if has(&REJECTED_ISSUES) {
            return PspOutcome::Rejected {
                message: body["message"]
                    .as_str()
                    .unwrap_or("the payment method was rejected")
                    .to_owned(),
            };
        }
        if !issues.is_empty() && issues.iter().all(|i| REFUSED_ISSUES.contains(&i.as_str())) {
            return PspOutcome::Refused {
                code: issues[0].clone(),
            };
        }
        tracing::error!(status = reply.status, issues = %issues.join(","), "PayPal issues this adapter does not know; the outcome is unknown");
        unknown()
    }

    /// What an order answered to a create says.
    fn classify_order(request: &ChargeRequest, manual: bool, order: &Value) -> PspOutcome {
        let Some(id) = order["id"].as_str().map(str::to_owned) else {
            return PspOutcome::Unknown {
                reason: "PayPal answered an order without an id".into(),
            };
        };
        if order_payment_id(order).as_deref() != Some(request.payment_id.as_str()) {
            return PspOutcome::Unknown {
                reason: format!("PayPal order {id} is not for {}", request.payment_id),
            };
        }
        if let Some(url) = payer_action_url(order) {
            return if request.return_url.is_some() && !manual {
                PspOutcome::ActionRequired {
                    provider_payment_id: id,
                    redirect_url: url,
                }
            } else {
                PspOutcome::AuthenticationRequired {
                    provider_payment_id: Some(id),
                }
            };
        }
        match order_settlement(order) {
            Some(Settlement::Captured {
                provider_payment_id,
                ..
            }) => PspOutcome::Approved {
                provider_payment_id,
            },
            Some(Settlement::Authorized {
                provider_payment_id,
                amount_capturable,
                capture_before_ms,
            }) => PspOutcome::Authorized {
                provider_payment_id,
                amount_capturable,
                capture_before_ms,
            },
            Some(Settlement::Declined {
                provider_payment_id,
                decline_code,
            }) => PspOutcome::Declined {
                provider_payment_id,
                decline_code,
            },
            Some(Settlement::Pending {
                provider_payment_id,
            }) => PspOutcome::Pending {
                provider_payment_id,
            },
            _ => PspOutcome::Unknown {
                reason: format!(
                    "PayPal order {id} is {}",
                    order["status"].as_str().unwrap_or("<no status>")
                ),
            },
        }
    }

    /// Captures the approved order (the charge's second step): `POST …/capture` under the key.
    async fn capture_order(
        &self,
        request: &OperationRequest,
        timeout: Duration,
    ) -> OperationOutcome {
        let id = &request.provider_payment_id;
        let call = Self::call(
            "POST",
            format!("/v2/checkout/orders/{id}/capture"),
            Some(&request.idempotency_key),
            Some(json!({})),
        );
        let sent = match self.send(&call, timeout).await {
            Ok(sent) => sent,
            Err(NoAnswer::NotSent(reason)) => return OperationOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => return OperationOutcome::Unknown { reason },
        };
        self.read_operation(request, sent, timeout).await
    }

    /// Captures (part of) the order's authorization, authorizing an approved order first; or
    /// voids the authorization.
    async fn operate_authorization(
        &self,
        request: &OperationRequest,
        timeout: Duration,
    ) -> OperationOutcome {
        let started = Instant::now();
        let left = || timeout.saturating_sub(started.elapsed());
        let order = match self.order(&request.provider_payment_id, left()).await {
            Ok(Some(order)) => order,
            Ok(None) => {
                return OperationOutcome::Refused {
                    code: "order_not_found".into(),
                }
            }
            Err(error) => {
                return OperationOutcome::NotSent {
                    reason: error.reason,
                }
            }
        };
        if let Some(done) = settled(&order) {
            return OperationOutcome::Answered(done);
        }
        let authorization = match authorization_of(&order) {
            Some(authorization) => authorization.clone(),
            None if request.kind == OperationKind::Capture
                && order["intent"].as_str() == Some("AUTHORIZE")
                && order_settlement(&order).is_some() =>
            {
                // Approved, not yet authorized: authorize, then capture what it holds.
                match self
                    .authorize(&request.provider_payment_id, &request.payment_id, left())
                    .await
                {
                    Ok(Sent { reply, .. }) if (200..300).contains(&reply.status) => {
                        let order: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
                        match authorization_of(&order) {
                            Some(authorization) => authorization.clone(),
                            None => {
                                return OperationOutcome::Unknown {
                                    reason: "the authorization answered none".into(),
                                }
                            }
                        }
                    }
                    Ok(Sent { reply, .. }) => {
                        return OperationOutcome::Refused {
                            code: issues_of(
                                &serde_json::from_slice(&reply.body).unwrap_or_default(),
                            )
                            .into_iter()
                            .next()
                            .unwrap_or_else(|| format!("authorize_{}", reply.status)),
                        }
                    }
                    Err(NoAnswer::NotSent(reason)) => return OperationOutcome::NotSent { reason },
                    Err(NoAnswer::Unknown(reason)) => return OperationOutcome::Unknown { reason },
                }
            }
            None => {
                // An order waiting for its buyer cannot be voided at PayPal (it lapses by
                // itself), nor captured before it is approved.
                return OperationOutcome::Refused {
                    code: format!(
                        "order_{}",
                        order["status"]
                            .as_str()
                            .unwrap_or("unknown")
                            .to_ascii_lowercase()
                    ),
                };
            }
        };
        let Some(authorization_id) = authorization["id"].as_str().filter(|id| is_object_id(id))
        else {
            return OperationOutcome::Unknown {
                reason: "an authorization without a usable id".into(),
            };
        };
        let call = match (request.kind, request.amount) {
            (OperationKind::Capture, amount) => Self::call(
                "POST",
                format!("/v2/payments/authorizations/{authorization_id}/capture"),
                Some(&request.idempotency_key),
                Some(match amount {
                    Some(amount) => {
                        json!({"amount": money(amount, request.currency), "final_capture": true})
                    }
                    None => json!({"final_capture": true}),
                }),
            ),
            (OperationKind::Cancel, _) => Self::call(
                "POST",
                format!("/v2/payments/authorizations/{authorization_id}/void"),
                None,
                None,
            ),
        };
        let sent = match self.send(&call, left()).await {
            Ok(sent) => sent,
            Err(NoAnswer::NotSent(reason)) => return OperationOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => return OperationOutcome::Unknown { reason },
        };
        self.read_operation(request, sent, left()).await
    }

    /// Reads a capture's or void's answer: a success is what it did; a refusal is read against
    /// the order (one that moved meanwhile answers), else a refusal — but the order capture
    /// refused as a decline (`INSTRUMENT_DECLINED`…) is the charge's decline.
    async fn read_operation(
        &self,
        request: &OperationRequest,
        Sent {
            reply,
            retried,
            in_progress,
        }: Sent,
        timeout: Duration,
    ) -> OperationOutcome {
        let order_id = request.provider_payment_id.clone();
        if matches!(reply.status, 401 | 403) {
            let reason = credentials_refused(reply.status);
            return if retried {
                OperationOutcome::Unknown { reason }
            } else {
                OperationOutcome::NotSent { reason }
            };
        }
        let body: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        if (200..300).contains(&reply.status) {
            let said = match request.kind {
                // A void answers 204 (nothing) or the authorization.
                OperationKind::Cancel => Some(Settlement::Canceled {
                    provider_payment_id: Some(order_id),
                    reason: crate::domain::CancellationReason::Requested,
                }),
                // An order capture answers the order; an authorization capture the capture.
                OperationKind::Capture if body["purchase_units"].is_array() => {
                    order_settlement(&body)
                }
                OperationKind::Capture => capture_settlement(&body, order_id),
            };
            return match said {
                Some(settlement) if ends_operation(&settlement) => {
                    OperationOutcome::Answered(settlement)
                }
                _ => OperationOutcome::Unknown {
                    reason: format!("PayPal answered {} without a final word", reply.status),
                },
            };
        }
        if !is_client_error(reply.status) {
            return OperationOutcome::Unknown {
                reason: format!(
                    "PSP answered {} {}",
                    reply.status,
                    issues_of(&body).join(",")
                ),
            };
        }
        let issue = issues_of(&body)
            .into_iter()
            .next()
            .unwrap_or_else(|| format!("http_{}", reply.status));
        // The order's own capture (the charge's second step) refused as a decline: nothing was
        // captured, and nothing will be (a vaulted source has no buyer to pick another one; a
        // buyer's order is left to lapse), so the payment is declined rather than retried.
        let declined = request.kind == OperationKind::Capture
            && request.amount.is_none()
            && DECLINE_ISSUES.contains(&issue.as_str());
        // Unless PayPal said a capture under the key was still being processed (409): its
        // refusal of ours says nothing of what that one does.
        if declined && in_progress {
            return OperationOutcome::Unknown {
                reason: format!(
                    "PayPal refused the capture ({issue}) while another under its key ran"
                ),
            };
        }
        match self.order(&request.provider_payment_id, timeout).await {
            Ok(Some(order)) => match settled(&order) {
                Some(settlement) => OperationOutcome::Answered(settlement),
                None if declined => OperationOutcome::Answered(Settlement::Declined {
                    provider_payment_id: Some(order_id),
                    decline_code: issue,
                }),
                None => OperationOutcome::Refused { code: issue },
            },
            Ok(None) => OperationOutcome::Refused { code: issue },
            Err(error) => OperationOutcome::Unknown {
                reason: format!(
                    "PayPal refused ({issue}) and the order could not be read: {}",
                    error.reason
                ),
            },
        }
    }

    /// Our refund `refund_id` on order `order_id`, the order read ([`our_refund`]).
    async fn find_refund(
        &self,
        order_id: &str,
        refund_id: &str,
        timeout: Duration,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let order = self
            .order(order_id, timeout)
            .await?
            .ok_or_else(|| PspError {
                reason: format!("PayPal knows no order {order_id}"),
            })?;
        Ok(our_refund(&order, refund_id))
    }
}

/// Our refund `refund_id` among the order's refunds (by `custom_id`): the strongest word.
fn our_refund(order: &Value, refund_id: &str) -> Option<RefundSettlement> {
    refunds_of(order)
        .into_iter()
        .filter(|refund| refund["custom_id"].as_str() == Some(refund_id))
        .filter_map(refund_settlement)
        .max_by_key(refund_rank)
}

/// What an order says once nothing more can be done to it: captured, declined, or canceled.
fn settled(order: &Value) -> Option<Settlement> {
    order_settlement(order)
        .filter(|s| ends_operation(s) || matches!(s, Settlement::Declined { .. }))
}

/// Whether a word ends a capture or void.
fn ends_operation(settlement: &Settlement) -> bool {
    matches!(
        settlement,
        Settlement::Captured { .. }
            | Settlement::Succeeded { .. }
            | Settlement::Canceled { .. }
            | Settlement::Declined { .. }
    )
}

fn refund_rank(settlement: &RefundSettlement) -> u8 {
    match settlement {
        RefundSettlement::Succeeded { .. } => 3,
        RefundSettlement::Pending { .. } => 2,
        RefundSettlement::Failed { .. } => 1,
        RefundSettlement::Canceled => 0,
    }
}

/// What an order found by a lookup says.
fn lookup_of(order: &Value) -> Result<PspLookup, PspError> {
    let Some(id) = order["id"].as_str().map(str::to_owned) else {
        return Err(PspError {
            reason: "a PayPal order of ours has no id".into(),
        });
    };
    if let Some(url) = payer_action_url(order) {
        return Ok(PspLookup::ActionRequired {
            provider_payment_id: id,
            redirect_url: url,
        });
    }
    let amount = super::paypal_events::order_amount(order);
    Ok(match order_settlement(order) {
        Some(Settlement::Captured {
            provider_payment_id,
            amount_captured,
        }) => PspLookup::Captured {
            provider_payment_id,
            amount_captured,
            amount,
        },
        Some(Settlement::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        }) => PspLookup::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        },
        Some(Settlement::Declined { decline_code, .. }) => PspLookup::Declined {
            provider_payment_id: id,
            decline_code,
            amount,
        },
        Some(Settlement::Canceled { reason, .. }) => PspLookup::Canceled {
            provider_payment_id: id,
            reason: Some(reason),
        },
        _ => PspLookup::Pending {
            provider_payment_id: id,
        },
    })
}

#[async_trait]
impl<T: PspTransport> Psp for PayPalPsp<T> {
    fn name(&self) -> &str {
        &self.provider_name
    }

    fn kind(&self) -> crate::domain::PspKind {
        crate::domain::PspKind::PayPal
    }

    /// PayPal keeps Orders request ids 6 hours.
    fn charge_keys_kept(&self) -> Duration {
        ORDER_KEYS_KEPT
    }

    /// `POST /v2/checkout/orders` (see the module docs). A manual capture authorizes the order
    /// at once when PayPal left it waiting for us. A create whose answer was lost is sent again
    /// at once under its request id: PayPal answers with what the first made.
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let manual = request.capture == crate::domain::CaptureMethod::Manual;
        let body = match Self::order_request(request, manual) {
            Ok(body) => body,
            Err(unsendable) => return unsendable,
        };
        let call = Self::call(
            "POST",
            "/v2/checkout/orders".to_owned(),
            Some(&request.idempotency_key),
            Some(body),
        );
        let started = Instant::now();
        let mut lost_once = false;
        let outcome = loop {
            let left = timeout.saturating_sub(started.elapsed());
            let Sent {
                reply,
                retried,
                in_progress,
            } = match self.send(&call, left).await {
                Ok(sent) => sent,
                Err(NoAnswer::NotSent(reason)) if !lost_once => {
                    return PspOutcome::NotSent { reason }
                }
                Err(NoAnswer::NotSent(reason) | NoAnswer::Unknown(reason)) => {
                    if !lost_once && timeout.saturating_sub(started.elapsed()) >= RESEND_AT_LEAST {
                        tracing::warn!(payment_id = %request.payment_id, %reason, "the order create's answer was lost; sending it again under its request id");
                        lost_once = true;
                        continue;
                    }
                    return PspOutcome::Unknown { reason };
                }
            };
            if (lost_once || request.earlier_may_run || in_progress)
                && !(200..300).contains(&reply.status)
            {
                // PayPal may fail a request sent under an id whose first request still runs
                // ("might fail the second request"), ours just now, a lapsed holder's, or one
                // PayPal itself said was still being processed (a 409 we waited out): only an
                // order answered is a word about it.
                break PspOutcome::Unknown {
                    reason: format!(
                        "PayPal answered {} to the create sent again while the first may still run",
                        reply.status
                    ),
                };
            }
            break match Self::classify_create(request, manual, &reply) {
                PspOutcome::NotSent { reason } if retried || lost_once => {
                    PspOutcome::Unknown { reason }
                }
                outcome => outcome,
            };
        };
        // A manual capture's order left waiting for us (not yet authorized): authorize it now.
        match outcome {
            PspOutcome::Authorized {
                provider_payment_id,
                capture_before_ms: None,
                ..
            } if manual => {
                let left = timeout.saturating_sub(started.elapsed());
                match self
                    .authorize(&provider_payment_id, &request.payment_id, left)
                    .await
                {
                    // A decline of the authorization is about this order, which its answer
                    // may not name: a payment already read authorized (an approval webhook
                    // first) must not stay so.
                    // Refused after PayPal said an authorize under the id still ran (409): that one
                    // may authorize; only its answer, or reconcile's look, decides.
                    Ok(Sent {
                        reply,
                        in_progress: true,
                        ..
                    }) if !(200..300).contains(&reply.status) => PspOutcome::Unknown {
                        reason: format!(
                            "PayPal answered {} to the authorize while another under its id ran",
                            reply.status
                        ),
                    },
                    Ok(Sent { reply, .. }) => {
                        match Self::classify_create(request, manual, &reply) {
                            PspOutcome::Declined {
                                provider_payment_id: None,
                                decline_code,
                            } => PspOutcome::Declined {
                                provider_payment_id: Some(provider_payment_id),
                                decline_code,
                            },
                            outcome => outcome,
                        }
                    }
                    Err(NoAnswer::NotSent(reason) | NoAnswer::Unknown(reason)) => {
                        PspOutcome::Unknown { reason }
                    }
                }
            }
            outcome => outcome,
        }
    }

    /// PayPal cannot be asked about our reference: not found, without a call.
    async fn lookup(&self, _payment_id: &str) -> Result<PspLookup, PspError> {
        Ok(PspLookup::NotFound)
    }

    /// `GET /v2/checkout/orders/{id}` once the order id is stored (checked to be ours by its
    /// `custom_id`). An order PayPal does not know was never captured nor authorized (those are
    /// kept; an order nobody approved lapses after 3 hours, and what PayPal answers for one then
    /// is UNCONFIRMED): canceled, nothing can move money under it.
    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        let Some(id) = payment.provider_payment_id.as_deref() else {
            return Ok(PspLookup::NotFound);
        };
        match self.order(id, self.request_timeout).await? {
            Some(order) => {
                if order_payment_id(&order).as_deref() != Some(payment.payment_id.as_str()) {
                    return Err(PspError {
                        reason: format!("PayPal order {id} is not for {}", payment.payment_id),
                    });
                }
                lookup_of(&order)
            }
            // An order waiting for its buyer (an approval, 3-D Secure) that PayPal no longer
            // knows lapsed before the buyer finished. For any other payment the order may hold
            // money: PayPal forgetting it (another account's credentials, a sandbox/live
            // mix-up) is an error to alarm on, never a cancel.
            None if payment.status == crate::domain::PaymentStatus::RequiresAction => {
                Ok(PspLookup::Canceled {
                    provider_payment_id: id.to_owned(),
                    reason: None,
                })
            }
            None => Err(PspError {
                reason: format!(
                    "PayPal knows no order {id}, which {} holds: the credentials may be another account's",
                    payment.payment_id
                ),
            }),
        }
    }

    /// PayPal offers no proof that a request id was never used, but answers a re-send under it
    /// with what it made, while it keeps it (6 hours): [`Fence::Resend`], without a call.
    async fn fence(&self, _request: &ChargeRequest) -> Result<Fence, PspError> {
        Ok(Fence::Resend)
    }

    /// Never meaningful for PayPal (no fence creates anything): refused without a call.
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        Err(PspError {
            reason: format!(
                "PayPal orders are never canceled this way: {provider_payment_id} left as it is"
            ),
        })
    }

    /// A capture without an amount is the charge's second step (the approved order captured);
    /// with one, a staff capture of the authorization. A cancel voids the authorization.
    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        if !is_object_id(&request.provider_payment_id) {
            return OperationOutcome::NotSent {
                reason: format!(
                    "{:?} is not a PayPal order id: nothing sent",
                    request.provider_payment_id
                ),
            };
        }
        match (request.kind, request.amount) {
            (OperationKind::Capture, None) => self.capture_order(request, timeout).await,
            _ => self.operate_authorization(request, timeout).await,
        }
    }

    /// `POST /v2/payments/captures/{capture_id}/refund` under the refund's key (Payments v2
    /// keeps it 45 days), the order's capture read first; our refund id as `custom_id` and
    /// `invoice_id`. A refusal of a first send is final: a re-send under the key answers the
    /// refund it made. A re-send (an earlier call under the key may have reached PayPal) first
    /// looks for our refund among the order's, so that a key PayPal no longer keeps cannot make a
    /// second refund; a refusal of it is read against the order again and is otherwise unknown,
    /// never a failure (the earlier call may still be running).
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        let started = Instant::now();
        let order = match self.order(&request.provider_payment_id, timeout).await {
            Ok(Some(order)) => order,
            Ok(None) => {
                return RefundOutcome::NotSent {
                    reason: format!("PayPal knows no order {}", request.provider_payment_id),
                }
            }
            Err(error) => {
                return RefundOutcome::NotSent {
                    reason: format!(
                        "the order could not be read, so no refund was sent: {}",
                        error.reason
                    ),
                }
            }
        };
        if request.resend {
            if let Some(settlement) = our_refund(&order, &request.refund_id) {
                return RefundOutcome::Answered(settlement);
            }
        }
        let Some(capture_id) = capture_of(&order)
            .and_then(|capture| capture["id"].as_str())
            .filter(|id| is_object_id(id))
        else {
            return RefundOutcome::Answered(RefundSettlement::Failed {
                provider_refund_id: None,
                code: "no_capture".into(),
            });
        };
        let call = Self::call(
            "POST",
            format!("/v2/payments/captures/{capture_id}/refund"),
            Some(&request.idempotency_key),
            Some(json!({
                "amount": money(request.amount, request.currency),
                "custom_id": request.refund_id,
                "invoice_id": request.refund_id,
            })),
        );
        let left = timeout.saturating_sub(started.elapsed());
        let Sent {
            reply,
            retried,
            in_progress,
        } = match self.send(&call, left).await {
            Ok(sent) => sent,
            Err(NoAnswer::NotSent(reason)) => return RefundOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => return RefundOutcome::Unknown { reason },
        };
        if matches!(reply.status, 401 | 403) {
            let reason = credentials_refused(reply.status);
            return if retried {
                RefundOutcome::Unknown { reason }
            } else {
                RefundOutcome::NotSent { reason }
            };
        }
        let body: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        if (200..300).contains(&reply.status) {
            return match refund_settlement(&body) {
                Some(settlement) => RefundOutcome::Answered(settlement),
                None => RefundOutcome::Unknown {
                    reason: format!("PayPal answered {} without a readable refund", reply.status),
                },
            };
        }
        let issues = issues_of(&body);
        // Our refund id is the invoice id: PayPal refusing it as used names a refund of ours.
        let ours_exists = issues
            .iter()
            .any(|i| i == "PAYPAL_REQUEST_ID_PREVIOUSLY_USED" || i == "DUPLICATE_INVOICE_ID");
        // A refusal after PayPal said a request under the key was still being processed (409)
        // is read as a re-send's: that request may be making the refund.
        let resend = request.resend || in_progress;
        if is_client_error(reply.status) && !issues.is_empty() && !ours_exists && !resend {
            return RefundOutcome::Answered(RefundSettlement::Failed {
                provider_refund_id: None,
                code: issues[0].clone(),
            });
        }
        if is_client_error(reply.status) && (ours_exists || resend) {
            // A refusal of a re-send may be caused by our own earlier refund, which PayPal may
            // not list yet while it runs: our refund if the order shows it, else unknown (the
            // refund stays pending for reconcile), never a failure.
            let left = timeout.saturating_sub(started.elapsed());
            if let Ok(Some(settlement)) = self
                .find_refund(&request.provider_payment_id, &request.refund_id, left)
                .await
            {
                return RefundOutcome::Answered(settlement);
            }
        }
        RefundOutcome::Unknown {
            reason: format!("PSP answered {} {}", reply.status, issues.join(",")),
        }
    }

    /// Reads the order and answers the refund whose `custom_id` is ours.
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.find_refund(provider_payment_id, refund_id, self.request_timeout)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::psp::transport::scripted::{after_connect, reply, Scripted, Step};
    use crate::domain::{CaptureMethod, Currency};

    const PAY: &str = "pay_0123456789abcdef0123456789abcdef";
    const ORDER: &str = "5O190127TN364715T";
    const REFUND: &str = "rfd_0123456789abcdef0123456789abcdef_1";

    fn scripted(steps: impl IntoIterator<Item = Step>) -> PayPalPsp<Scripted> {
        let token = reply(
            200,
            json!({"access_token": "A21AA-scripted", "token_type": "Bearer", "expires_in": 32400}),
        );
        PayPalPsp::with_transport(
            Scripted::new(std::iter::once(token).chain(steps)),
            "paypal",
            "client",
            "secret",
            Duration::from_secs(10),
        )
    }

    fn issue(status: u16, issue: &str) -> Step {
        reply(
            status,
            json!({"name": "UNPROCESSABLE_ENTITY", "debug_id": "0a1b2c3d4e5f6",
                   "details": [{"issue": issue}]}),
        )
    }

    /// A completed order of ours, its capture of 30.00, and these refunds.
    fn captured_order(refunds: Value) -> Value {
        json!({"id": ORDER, "status": "COMPLETED", "intent": "CAPTURE",
            "purchase_units": [{"custom_id": PAY, "invoice_id": PAY,
                "amount": {"currency_code": "USD", "value": "30.00"},
                "payments": {
                    "captures": [{"id": "2GG279541U471931P", "status": "COMPLETED",
                        "amount": {"currency_code": "USD", "value": "30.00"}, "custom_id": PAY}],
                    "refunds": refunds}}]})
    }

    fn charge() -> ChargeRequest {
        ChargeRequest {
            payment_id: PAY.into(),
            amount: 3000,
            currency: Currency::Usd,
            payment_method: "pm_card_visa".into(),
            idempotency_key: format!("payonce-charge-{PAY}"),
            return_url: None,
            capture: CaptureMethod::Automatic,
            earlier_may_run: false,
        }
    }

    fn refund(resend: bool) -> RefundRequest {
        RefundRequest {
            refund_id: REFUND.into(),
            payment_id: PAY.into(),
            provider_payment_id: ORDER.into(),
            amount: 1000,
            currency: Currency::Usd,
            reason: None,
            idempotency_key: format!("payonce-refund-{PAY}-1"),
            resend,
            provider_refund_id: None,
            captured: 0,
        }
    }

    #[tokio::test]
    async fn a_refusal_of_the_create_sent_again_after_a_lost_answer_or_by_a_takeover_is_unknown() {
        // PayPal "might fail the second request" sent under an id whose first still runs: a
        // refusal of the re-send says nothing of what the first made.
        for refusal in [
            issue(422, "INSTRUMENT_DECLINED"),
            issue(422, "TRANSACTION_REFUSED"),
            issue(400, "INVALID_REQUEST"),
            issue(422, "PAYER_ACTION_REQUIRED"),
        ] {
            // GIVEN a create whose answer is lost, and a re-send PayPal refuses
            let paypal = scripted([after_connect(), refusal]);
            // WHEN the charge is made
            let outcome = paypal
                .create_charge(&charge(), Duration::from_secs(10))
                .await;
            // THEN its outcome is unknown, after the create and one re-send under one id
            assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
            let calls = paypal.transport().calls();
            let creates: Vec<Option<String>> = calls
                .iter()
                .filter(|c| c.path == "/v2/checkout/orders")
                .map(|c| {
                    c.headers
                        .iter()
                        .find(|(name, _)| name.eq_ignore_ascii_case("paypal-request-id"))
                        .map(|(_, value)| value.clone())
                })
                .collect();
            assert_eq!(creates, vec![Some(charge().idempotency_key); 2]);
        }
        // AND a takeover's send, whose lapsed holder's create may still run at PayPal, reads a
        // refusal the same way: unknown, after its one create
        for refusal in [
            issue(422, "INSTRUMENT_DECLINED"),
            issue(422, "TRANSACTION_REFUSED"),
            issue(422, "PAYER_ACTION_REQUIRED"),
        ] {
            let paypal = scripted([refusal]);
            let takeover = ChargeRequest {
                earlier_may_run: true,
                ..charge()
            };
            let outcome = paypal
                .create_charge(&takeover, Duration::from_secs(10))
                .await;
            assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
            let creates = paypal
                .transport()
                .calls()
                .iter()
                .filter(|c| c.path == "/v2/checkout/orders")
                .count();
            assert_eq!(creates, 1);
        }
        // AND a refusal after PayPal said a request under the id was still being processed (a
        // 409 waited out) is unknown; after a 429 (rate limited: nothing taken) it decides
        let in_progress = issue(409, "DUPLICATE_REQUEST_ID");
        let paypal = scripted([in_progress, issue(422, "INSTRUMENT_DECLINED")]);
        let outcome = paypal
            .create_charge(&charge(), Duration::from_secs(10))
            .await;
        assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
        let paypal = scripted([
            issue(429, "RATE_LIMIT_REACHED"),
            issue(422, "INSTRUMENT_DECLINED"),
        ]);
        let outcome = paypal
            .create_charge(&charge(), Duration::from_secs(10))
            .await;
        assert!(
            matches!(outcome, PspOutcome::Declined { .. }),
            "{outcome:?}"
        );
        // AND a decline answering a first send is still a decline
        let paypal = scripted([issue(422, "INSTRUMENT_DECLINED")]);
        assert!(matches!(
            paypal
                .create_charge(&charge(), Duration::from_secs(10))
                .await,
            PspOutcome::Declined { .. }
        ));
    }

    #[tokio::test]
    async fn an_order_capture_declined_after_paypal_said_another_capture_ran_is_unknown() {
        let capture = OperationRequest {
            kind: OperationKind::Capture,
            payment_id: PAY.into(),
            provider_payment_id: ORDER.into(),
            amount: None,
            payment_amount: 3000,
            capture: CaptureMethod::Automatic,
            currency: Currency::Usd,
            idempotency_key: OperationKind::Capture.psp_key(PAY),
        };
        // GIVEN PayPal answering 409 (a capture under the key still being processed), then a
        // decline
        let paypal = scripted([
            issue(409, "DUPLICATE_REQUEST_ID"),
            issue(422, "INSTRUMENT_DECLINED"),
        ]);
        // THEN the capture's outcome is unknown, never the payment's decline
        let outcome = paypal.operate(&capture, Duration::from_secs(10)).await;
        assert!(
            matches!(outcome, OperationOutcome::Unknown { .. }),
            "{outcome:?}"
        );
        // AND without the 409, the order read still open, it is the decline
        let open = json!({"id": ORDER, "status": "APPROVED", "intent": "CAPTURE",
            "purchase_units": [{"custom_id": PAY,
                "amount": {"currency_code": "USD", "value": "30.00"}}]});
        let paypal = scripted([issue(422, "INSTRUMENT_DECLINED"), reply(200, open)]);
        let outcome = paypal.operate(&capture, Duration::from_secs(10)).await;
        assert!(
            matches!(
                outcome,
                OperationOutcome::Answered(Settlement::Declined { .. })
            ),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_refusal_of_a_refund_sent_again_is_read_against_the_order_never_a_failure() {
        let ours = json!([{"id": "1JU08902781691411", "status": "COMPLETED", "custom_id": REFUND,
            "amount": {"currency_code": "USD", "value": "10.00"}}]);
        // GIVEN a refund sent again, not yet listed on the order, refused by PayPal while the
        // first may still run; the order read again then lists it
        let paypal = scripted([
            reply(200, captured_order(json!([]))),
            issue(422, "REFUND_AMOUNT_EXCEEDED"),
            reply(200, captured_order(ours.clone())),
        ]);
        // THEN the refund is ours, succeeded
        assert_eq!(
            paypal
                .create_refund(&refund(true), Duration::from_secs(10))
                .await,
            RefundOutcome::Answered(RefundSettlement::Succeeded {
                provider_refund_id: "1JU08902781691411".into()
            })
        );
        // GIVEN the same, but the order read again still does not list it
        let paypal = scripted([
            reply(200, captured_order(json!([]))),
            issue(422, "REFUND_AMOUNT_EXCEEDED"),
            reply(200, captured_order(json!([]))),
        ]);
        // THEN it is unknown (pending for reconcile), not failed
        assert!(matches!(
            paypal
                .create_refund(&refund(true), Duration::from_secs(10))
                .await,
            RefundOutcome::Unknown { .. }
        ));
        // AND a first send refused after PayPal said a refund under its key still ran (409) is
        // read as a re-send's: unknown while the order does not list it, never a failure
        let paypal = scripted([
            reply(200, captured_order(json!([]))),
            issue(409, "DUPLICATE_REQUEST_ID"),
            issue(422, "REFUND_AMOUNT_EXCEEDED"),
            reply(200, captured_order(json!([]))),
        ]);
        assert!(matches!(
            paypal
                .create_refund(&refund(false), Duration::from_secs(10))
                .await,
            RefundOutcome::Unknown { .. }
        ));
        // AND PayPal refusing our refund id as an invoice id already used is never a failure,
        // even on a first send
        let paypal = scripted([
            reply(200, captured_order(json!([]))),
            issue(422, "DUPLICATE_INVOICE_ID"),
            reply(200, captured_order(json!([]))),
        ]);
        assert!(matches!(
            paypal
                .create_refund(&refund(false), Duration::from_secs(10))
                .await,
            RefundOutcome::Unknown { .. }
        ));
        // AND a first send's refusal is final, without another read
        let paypal = scripted([
            reply(200, captured_order(json!([]))),
            issue(422, "REFUND_AMOUNT_EXCEEDED"),
        ]);
        assert_eq!(
            paypal
                .create_refund(&refund(false), Duration::from_secs(10))
                .await,
            RefundOutcome::Answered(RefundSettlement::Failed {
                provider_refund_id: None,
                code: "REFUND_AMOUNT_EXCEEDED".into()
            })
        );
        assert_eq!(paypal.transport().calls().len(), 3);
    }
}
