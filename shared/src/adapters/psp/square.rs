//! Square's Payments and Refunds API (`Square-Version` pinned): the charge, its completion, its
//! cancel, the fence, lookups and refunds, and what each answer says.
//!
//! Sources: Square's published API specification (`square/connect-api-specification`,
//! `api.json`, release 2025-08-20) and the pages it links; where Square documents nothing the
//! rule says UNCONFIRMED and what this adapter does so that nothing relies on it.
//!
//! **Two steps, money only at the second.** Every charge is created with `autocomplete: false`
//! (`POST /v2/payments`): Square *approves* it (`APPROVED`, the card authorized) and moves no
//! money until it is completed (`POST /v2/payments/{id}/complete`). The charge path stores the
//! payment's id first and completes only then ([`crate::service`]'s charge and reconcile), so a
//! completed Square payment always has its id stored with payonce. That is what makes the fence
//! a proof.
//!
//! **The fence: cancel by idempotency key** (`POST /v2/payments/cancel`): "If no payment with
//! the specified idempotency key is found, no action is taken and the endpoint returns
//! successfully"; an approved payment made with the key is voided. After a success nothing made
//! under the key can move money: it is at most approved (a create still in flight at Square that
//! lands later is approved only), and payonce completes only a payment whose id it stored, which
//! it never does for an attempt it gave up. ([`Fence::Voided`].) Any refusal of the fence
//! (UNCONFIRMED what Square answers for a completed payment) proves nothing.
//!
//! **Keys.** Square takes the key in the body and at most 45 characters, fewer than
//! `payonce-charge-<payment_id>`: the charge key is `poc-<32 hex of the payment id>`, a refund's
//! `por-<32 hex>-<n>` ([`charge_key`], [`refund_key`]). Same key and same body replays the first
//! answer; same key and another body is `IDEMPOTENCY_KEY_REUSED`. Square publishes no retention
//! for keys: nothing here relies on a replay past a day (reconcile's fence window).
//!
//! **No lookup by our reference.** `reference_id` carries our payment id (≤ 40 characters), but
//! ListPayments cannot filter on it and lags: a payment is looked up by its id only
//! ([`Psp::lookup_payment`]), and one whose id was never stored is not found.
//!
//! **Errors** are `{"errors":[{category, code, detail?, field?}]}`, keyed on category and code,
//! never on the HTTP status alone; a decline is a 400 that also carries the `FAILED` payment.

use super::keyed::{self, credentials_refused, NoAnswer, Sent};
use super::square_webhook::{payment_settlement, refund_settlement};
use super::transport::{CallFailure, HttpTransport, PspTransport, WireBody, WireCall, WireReply};
use super::twoc2p_ids::invoice_no_for;
use crate::domain::{OperationKind, Payment, RefundSettlement, Settlement};
use crate::ports::{
    ChargeRequest, CheckedAmount, Fence, OperationOutcome, OperationRequest, Psp, PspError,
    PspLookup, PspOutcome, RefundOutcome, RefundRequest, AUTHENTICATION_REQUIRED_CODE,
};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

/// Square's production API.
pub const SQUARE_API_BASE: &str = "https://connect.squareup.com";

/// Square's sandbox API.
pub const SQUARE_SANDBOX_BASE: &str = "https://connect.squareupsandbox.com";

/// The API version every call pins (`Square-Version`).
pub const SQUARE_VERSION: &str = "2025-08-20";

/// The longest idempotency key Square takes (CreatePayment, CancelPaymentByIdempotencyKey,
/// RefundPayment).
pub const MAX_KEY_LEN: usize = 45;

/// The least time left for the charge's one re-send of a create whose answer was lost.
const RESEND_AT_LEAST: Duration = Duration::from_secs(1);

/// The most refunds Square allows on one payment: the most a refund lookup reads.
const MAX_REFUNDS_PER_PAYMENT: usize = 20;

/// Square's decline code for a card that needs the buyer verified (SCA), which Square runs in
/// the browser before the payment (`verification_token`): payonce has no redirect to offer.
pub const VERIFICATION_REQUIRED: &str = "CARD_DECLINED_VERIFICATION_REQUIRED";

/// The 32 hex digits a key is made of: those of our payment id (`pay_<32 hex>`), or, for an id
/// of another form, the first 16 bytes of its SHA-256.
fn key_stem(payment_id: &str) -> String {
    invoice_no_for(payment_id).unwrap_or_else(|| {
        use sha2::{Digest, Sha256};
        hex::encode(&Sha256::digest(payment_id.as_bytes())[..16])
    })
}

/// The idempotency key of the charge of `payment_id`: `poc-<32 hex>`, 36 characters.
pub fn charge_key(payment_id: &str) -> String {
    format!("poc-{}", key_stem(payment_id))
}

/// The idempotency key of refund `number` of `payment_id`: `por-<32 hex>-<number>`; `None` if it
/// would pass Square's 45 characters (a number of more than 8 characters, which payonce never
/// makes).
pub fn refund_key(payment_id: &str, number: &str) -> Option<String> {
    Some(format!("por-{}-{number}", key_stem(payment_id))).filter(|key| key.len() <= MAX_KEY_LEN)
}

/// The Square key of a refund request: [`refund_key`] of the number its payonce key ends in
/// (`payonce-refund-<payment_id>-<n>`); for a key of another form (never made by payonce), `por-`
/// and 32 hex digits of its SHA-256. Either way a pure function of the request.
fn request_refund_key(request: &RefundRequest) -> String {
    let prefix = format!("payonce-refund-{}-", request.payment_id);
    request
        .idempotency_key
        .strip_prefix(&prefix)
        .and_then(|number| refund_key(&request.payment_id, number))
        .unwrap_or_else(|| {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(request.idempotency_key.as_bytes());
            format!("por-{}", hex::encode(&digest[..16]))
        })
}

/// How to reach Square.
#[derive(Clone)]
pub struct SquareConfig {
    /// The access token (`Authorization: Bearer …`; never logged).
    pub access_token: String,
    /// The location payments are taken at; Square's main location when `None`.
    pub location_id: Option<String>,
    /// API base URL (tests point it at the fake PSP).
    pub base_url: String,
    /// The provider name stored on payments.
    pub provider_name: String,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for SquareConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquareConfig")
            .field("access_token", &"<redacted>")
            .field("location_id", &self.location_id)
            .field("base_url", &self.base_url)
            .field("provider_name", &self.provider_name)
            .finish_non_exhaustive()
    }
}

impl SquareConfig {
    /// Square production with `access_token` and the adapters' default timeouts.
    pub fn new(access_token: impl Into<String>) -> Self {
        Self {
            access_token: access_token.into(),
            location_id: None,
            base_url: SQUARE_API_BASE.to_owned(),
            provider_name: "square".to_owned(),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// The same, at another base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The same, at location `location_id`.
    pub fn with_location(mut self, location_id: Option<String>) -> Self {
        self.location_id = location_id;
        self
    }
}

/// The Square adapter: builds the Payments and Refunds calls and classifies their answers.
///
/// Its proof that a key was never used: **cancel by idempotency key** ([`Fence::Voided`]); see
/// the module docs for why it holds.
#[derive(Clone)]
pub struct SquarePsp<T = HttpTransport> {
    transport: T,
    provider_name: String,
    /// `Bearer <access token>` (never logged).
    authorization: String,
    location_id: Option<String>,
    request_timeout: Duration,
}

impl<T: std::fmt::Debug> std::fmt::Debug for SquarePsp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquarePsp")
            .field("transport", &self.transport)
            .field("provider_name", &self.provider_name)
            .field("authorization", &"<redacted>")
            .field("location_id", &self.location_id)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl SquarePsp<HttpTransport> {
    /// Square (or the fake PSP speaking its format) over HTTPS at `config.base_url`.
    pub fn new(config: SquareConfig) -> Result<Self, reqwest::Error> {
        let transport = HttpTransport::new(
            config.base_url,
            config.connect_timeout,
            config.request_timeout,
        )?;
        Ok(Self::with_transport(
            transport,
            config.provider_name,
            config.access_token,
            config.location_id,
            config.request_timeout,
        ))
    }
}

/// Whether `id` can be a Square object id and so be put in a path as it is (Square's ids are
/// letters and digits; refund ids join two with `_`).
fn is_object_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether an error status can carry a definitive refusal: a 4xx that is neither our
/// credentials nor a busy answer.
fn is_client_error(status: u16) -> bool {
    (400..500).contains(&status) && !matches!(status, 401 | 403 | 409 | 429)
}

/// The `{category, code}` pairs of an answer's `errors`.
fn errors_of(body: &Value) -> Vec<(String, String)> {
    body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| {
                    (
                        e["category"].as_str().unwrap_or("").to_owned(),
                        e["code"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Codes that leave a create's outcome unknown whatever else is said: Square asks for a retry
/// under the same key (`TEMPORARY_ERROR`, rate limits, its own failures), or the key or the card
/// token was already used — maybe by an earlier call of ours whose answer was lost.
const UNKNOWN_CODES: [&str; 12] = [
    "TEMPORARY_ERROR",
    "IDEMPOTENCY_KEY_REUSED",
    "CARD_TOKEN_USED",
    "SOURCE_USED",
    "CONFLICT",
    "RATE_LIMITED",
    "INTERNAL_SERVER_ERROR",
    "SERVICE_UNAVAILABLE",
    "GATEWAY_TIMEOUT",
    "BAD_GATEWAY",
    "REQUEST_TIMEOUT",
    // Generic and undocumented in detail: never a refusal on a guess.
    "BAD_REQUEST",
];

/// Codes that refuse the payment method itself: nothing was charged. `NOT_FOUND` is the token
/// ("Card nonce not found"; a create names no other object but the location, configuration).
const REJECTED_CODES: [&str; 7] = [
    "NOT_FOUND",
    "INVALID_CARD_DATA",
    "INVALID_CARD",
    "UNSUPPORTED_SOURCE_TYPE",
    "UNSUPPORTED_CARD_BRAND",
    "CARD_NOT_SUPPORTED",
    "CARD_TOKEN_EXPIRED",
];

/// Codes that refuse the request for a reason every re-send repeats (it is a pure function of
/// the attempt): nothing was charged, nor will be.
const REFUSED_CODES: [&str; 12] = [
    "VALUE_TOO_LOW",
    "VALUE_TOO_HIGH",
    "VALUE_TOO_LONG",
    "VALUE_TOO_SHORT",
    "AMOUNT_TOO_HIGH",
    "UNSUPPORTED_CURRENCY",
    "INVALID_VALUE",
    "MISSING_REQUIRED_PARAMETER",
    "UNKNOWN_BODY_PARAMETER",
    "INVALID_LOCATION",
    "LOCATION_MISMATCH",
    "CARD_PROCESSING_NOT_ENABLED",
];

impl<T: PspTransport> SquarePsp<T> {
    /// The adapter over any transport, storing `provider_name` on payments and authenticating
    /// every call with `access_token`, taking payments at `location_id` (Square's main location
    /// when `None`).
    pub fn with_transport(
        transport: T,
        provider_name: impl Into<String>,
        access_token: impl AsRef<str>,
        location_id: Option<String>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            transport,
            provider_name: provider_name.into(),
            authorization: format!("Bearer {}", access_token.as_ref()),
            location_id,
            request_timeout,
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// A call to Square's API: authenticated and version pinned; Square takes keys in bodies.
    fn call(&self, method: &'static str, path: String, body: Option<Value>) -> WireCall {
        WireCall {
            method,
            path,
            query: Vec::new(),
            headers: vec![
                ("Authorization".to_owned(), self.authorization.clone()),
                ("Square-Version".to_owned(), SQUARE_VERSION.to_owned()),
            ],
            body: body.map_or(WireBody::Empty, |body| WireBody::Json(body.to_string())),
        }
    }

    /// `POST /v2/payments` under [`charge_key`]: `source_id` (the token as the client gave it),
    /// `amount_money` (minor units and the upper-case code, as Square writes both),
    /// `autocomplete: false` whatever the capture (money moves only when payonce completes a
    /// payment whose id it stored), `accept_partial_authorization: false` (never less than
    /// asked), `reference_id` our payment id, and the configured location. A pure function of
    /// the request, so every re-send is byte-identical (serde_json writes keys in order).
    fn charge_call(&self, request: &ChargeRequest) -> WireCall {
        let mut body = json!({
            "idempotency_key": charge_key(&request.payment_id),
            "source_id": request.payment_method,
            "amount_money": money(request.amount, request.currency),
            "autocomplete": false,
            "accept_partial_authorization": false,
            "reference_id": request.payment_id,
        });
        if let Some(location) = &self.location_id {
            body["location_id"] = json!(location);
        }
        self.call("POST", "/v2/payments".to_owned(), Some(body))
    }

    /// `POST /v2/refunds` under [`refund_key`]: the Square payment, `amount_money`, and our
    /// refund id as `reason` (≤ 192 characters), which the refund lookup matches.
    fn refund_call(&self, request: &RefundRequest, key: String) -> WireCall {
        let body = json!({
            "idempotency_key": key,
            "payment_id": request.provider_payment_id,
            "amount_money": money(request.amount, request.currency),
            "reason": request.refund_id,
        });
        self.call("POST", "/v2/refunds".to_owned(), Some(body))
    }

    /// A call that is not a create, within `timeout`: any failure is a [`PspError`].
    async fn plain(&self, call: WireCall, timeout: Duration) -> Result<WireReply, PspError> {
        self.transport
            .send(&call, timeout.min(self.request_timeout))
            .await
            .map_err(|failure| PspError {
                reason: match failure {
                    CallFailure::NotConnected(reason) | CallFailure::AfterConnect(reason) => reason,
                },
            })
    }

    /// `GET {path}`: the object under `field` (`payment`, `refund`) of a 200.
    async fn retrieve(
        &self,
        path: String,
        field: &str,
        timeout: Duration,
    ) -> Result<Value, PspError> {
        let reply = self
            .plain(self.call("GET", path.clone(), None), timeout)
            .await?;
        if matches!(reply.status, 401 | 403) {
            // A token that charges but cannot read leaves every unknown outcome unknown.
            return Err(PspError {
                reason: credentials_refused(reply.status),
            });
        }
        if reply.status != 200 {
            return Err(PspError {
                reason: format!("GET {path} answered {}", reply.status),
            });
        }
        let body: Value = serde_json::from_slice(&reply.body).map_err(|e| PspError {
            reason: format!("unreadable answer to GET {path}: {e}"),
        })?;
        match body.get(field) {
            Some(object) if object.is_object() => Ok(object.clone()),
            _ => Err(PspError {
                reason: format!("GET {path} answered no {field}"),
            }),
        }
    }

    /// Our payment `provider_payment_id`, checked to be `payment_id`'s (its `reference_id`).
    async fn retrieve_payment(
        &self,
        provider_payment_id: &str,
        payment_id: &str,
        timeout: Duration,
    ) -> Result<Value, PspError> {
        if !is_object_id(provider_payment_id) {
            return Err(PspError {
                reason: format!("{provider_payment_id:?} is not a Square payment id"),
            });
        }
        let payment = self
            .retrieve(
                format!("/v2/payments/{provider_payment_id}"),
                "payment",
                timeout,
            )
            .await?;
        if payment["reference_id"].as_str() != Some(payment_id) {
            return Err(PspError {
                reason: format!(
                    "Square payment {provider_payment_id} is not for {payment_id} (reference_id {:?})",
                    payment["reference_id"]
                ),
            });
        }
        Ok(payment)
    }

    /// Completes or cancels the approved payment `request` names. Neither takes a key: each is
    /// one state change of the payment, so a re-send meets what the first did. A refusal is read
    /// against the payment: one that moved meanwhile is what Square says, one that did not is a
    /// refusal.
    async fn operate_payment(
        &self,
        request: &OperationRequest,
        timeout: Duration,
    ) -> OperationOutcome {
        let id = request.provider_payment_id.as_str();
        if !is_object_id(id) {
            return OperationOutcome::NotSent {
                reason: format!("{id:?} is not a Square payment id: nothing sent"),
            };
        }
        let (action, body) = match request.kind {
            OperationKind::Capture => ("complete", Some(json!({}))),
            OperationKind::Cancel => ("cancel", None),
        };
        let call = self.call("POST", format!("/v2/payments/{id}/{action}"), body);
        let Sent { reply, retried, .. } = match keyed::send_with_busy_retries(
            &self.transport,
            &call,
            timeout,
            self.request_timeout,
        )
        .await
        {
            Ok(sent) => sent,
            Err(NoAnswer::NotSent(reason)) => return OperationOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => return OperationOutcome::Unknown { reason },
        };
        if matches!(reply.status, 401 | 403) {
            let reason = credentials_refused(reply.status);
            return if retried {
                OperationOutcome::Unknown { reason }
            } else {
                OperationOutcome::NotSent { reason }
            };
        }
        let body: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        if (200..300).contains(&reply.status) && body["payment"].is_object() {
            return match payment_settlement(&body["payment"]).filter(ends_operation) {
                Some(settlement) => OperationOutcome::Answered(settlement),
                None => OperationOutcome::Unknown {
                    reason: format!(
                        "the payment is {} after its {action}",
                        body["payment"]["status"].as_str().unwrap_or("<no status>")
                    ),
                },
            };
        }
        if !is_client_error(reply.status) {
            return OperationOutcome::Unknown {
                reason: format!("PSP answered {} to the {action}", reply.status),
            };
        }
        // Refused: read the payment. One that completed, was canceled or lapsed meanwhile (an
        // earlier call of ours, the lapse) answers; one still approved is a refusal.
        let code = errors_of(&body)
            .into_iter()
            .map(|(_, code)| code)
            .next()
            .unwrap_or_else(|| "BAD_REQUEST".to_owned());
        let payment = match self
            .plain(
                self.call("GET", format!("/v2/payments/{id}"), None),
                timeout,
            )
            .await
        {
            Ok(reply) if reply.status == 200 => serde_json::from_slice::<Value>(&reply.body)
                .ok()
                .map(|body| body["payment"].clone()),
            _ => None,
        };
        match payment.as_ref().and_then(payment_settlement) {
            Some(settlement) if ends_operation(&settlement) => {
                OperationOutcome::Answered(settlement)
            }
            Some(_) => OperationOutcome::Refused { code },
            None => OperationOutcome::Unknown {
                reason: format!(
                    "Square refused the {action} ({code}) and the payment could not be read"
                ),
            },
        }
    }

    /// Our refund `refund_id` among the refunds of Square payment `provider_payment_id` (its
    /// `refund_ids`, each read: Square lists no refund's reason on the payment), matched by
    /// `reason`; several → the strongest word.
    async fn find_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<RefundSettlement>, PspError> {
        if !is_object_id(provider_payment_id) {
            return Err(PspError {
                reason: format!("{provider_payment_id:?} is not a Square payment id"),
            });
        }
        let left = || {
            deadline.map_or(self.request_timeout, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            })
        };
        let payment = self
            .retrieve(
                format!("/v2/payments/{provider_payment_id}"),
                "payment",
                left(),
            )
            .await?;
        let ids: Vec<&str> = payment["refund_ids"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if ids.len() > MAX_REFUNDS_PER_PAYMENT {
            return Err(PspError {
                reason: format!(
                    "Square payment {provider_payment_id} lists {} refunds, more than Square allows",
                    ids.len()
                ),
            });
        }
        let mut found: Vec<RefundSettlement> = Vec::new();
        for id in ids {
            if !is_object_id(id) {
                return Err(PspError {
                    reason: format!("{id:?} is not a Square refund id"),
                });
            }
            let refund = self
                .retrieve(format!("/v2/refunds/{id}"), "refund", left())
                .await?;
            if refund["reason"].as_str() == Some(refund_id) {
                if let Some(settlement) = refund_settlement(&refund) {
                    found.push(settlement);
                }
            }
        }
        Ok(found.into_iter().max_by_key(refund_rank))
    }
}

/// Square's money object: minor units and the upper-case ISO code.
fn money(amount: i64, currency: crate::domain::Currency) -> Value {
    json!({"amount": amount, "currency": currency.as_str().to_ascii_uppercase()})
}

/// Whether a payment's word ends a completion or cancel: completed, or canceled.
fn ends_operation(settlement: &Settlement) -> bool {
    matches!(
        settlement,
        Settlement::Captured { .. } | Settlement::Succeeded { .. } | Settlement::Canceled { .. }
    )
}

/// How strong a refund's word is, when several carry our refund id: succeeded, then pending,
/// then failed.
fn refund_rank(settlement: &RefundSettlement) -> u8 {
    match settlement {
        RefundSettlement::Succeeded { .. } => 3,
        RefundSettlement::Pending { .. } => 2,
        RefundSettlement::Failed { .. } => 1,
        RefundSettlement::Canceled => 0,
    }
}

/// What a payment Square holds says to a lookup: `COMPLETED` → captured (for what it says);
/// `APPROVED` → authorized (a payment asked to capture at once is completed next, by whoever
/// finds it so); `PENDING` → pending; `CANCELED` → canceled (voided on request, or lapsed);
/// `FAILED` → declined (a card needing verification with payonce's authentication code).
fn lookup_of(payment: &Value) -> Result<PspLookup, PspError> {
    let Some(id) = payment["id"].as_str() else {
        return Err(PspError {
            reason: "a Square payment of ours has no id".into(),
        });
    };
    let id = id.to_owned();
    let amount = checked_amount(payment);
    Ok(match payment_settlement(payment) {
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
        Some(Settlement::Canceled { reason, .. }) => PspLookup::Canceled {
            provider_payment_id: id,
            reason: Some(reason),
        },
        Some(Settlement::AuthenticationRequired { .. }) => PspLookup::Declined {
            provider_payment_id: id,
            decline_code: AUTHENTICATION_REQUIRED_CODE.to_owned(),
            amount,
        },
        Some(Settlement::Declined { decline_code, .. }) => PspLookup::Declined {
            provider_payment_id: id,
            decline_code,
            amount,
        },
        _ => PspLookup::Pending {
            provider_payment_id: id,
        },
    })
}

/// A Square payment's `amount_money`, as payonce checks amounts.
pub(crate) fn checked_amount(object: &Value) -> Option<CheckedAmount> {
    Some(CheckedAmount {
        minor: object["amount_money"]["amount"].as_i64()?,
        currency: object["amount_money"]["currency"]
            .as_str()?
            .to_ascii_lowercase(),
    })
}

/// Classifies a payment answered 2xx to a create: `APPROVED` → authorized (what payonce asked
/// for: completing it is the next step); `COMPLETED` → approved; `FAILED` → declined; `PENDING`
/// and anything else → unknown (settled later: the webhook names the payment).
fn classify_payment(payment: &Value) -> PspOutcome {
    let id = payment["id"].as_str().map(str::to_owned);
    match payment_settlement(payment) {
        Some(Settlement::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        }) => PspOutcome::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        },
        Some(
            Settlement::Captured {
                provider_payment_id,
                ..
            }
            | Settlement::Succeeded {
                provider_payment_id,
            },
        ) => PspOutcome::Approved {
            provider_payment_id,
        },
        Some(Settlement::Declined {
            provider_payment_id,
            decline_code,
        }) => PspOutcome::Declined {
            provider_payment_id,
            decline_code,
        },
        Some(Settlement::AuthenticationRequired {
            provider_payment_id,
        }) => PspOutcome::AuthenticationRequired {
            provider_payment_id,
        },
        Some(Settlement::Pending {
            provider_payment_id,
        }) => PspOutcome::Pending {
            provider_payment_id,
        },
        _ => PspOutcome::Unknown {
            reason: format!(
                "Square payment {} is {}",
                id.as_deref().unwrap_or("<no id>"),
                payment["status"].as_str().unwrap_or("<no status>")
            ),
        },
    }
}

/// Classifies an error answer to a create by its errors' categories and codes (several may come
/// at once): any code that leaves it unknown wins; then a decline (`PAYMENT_METHOD_ERROR`, with
/// the `FAILED` payment's id where Square sends it; a card needing verification is
/// authentication required); then a refused payment method; then a refusal every re-send
/// repeats; anything else is unknown. Only a 4xx that is not busy or our credentials can be
/// definitive.
fn classify_error(status: u16, body: &Value) -> PspOutcome {
    let errors = errors_of(body);
    let codes: Vec<&str> = errors.iter().map(|(_, code)| code.as_str()).collect();
    let unknown = |why: &str| PspOutcome::Unknown {
        reason: format!("PSP answered {status} {}{why}", codes.join(",")),
    };
    if !is_client_error(status) || codes.is_empty() {
        return unknown("");
    }
    if codes.iter().any(|code| UNKNOWN_CODES.contains(code)) {
        if codes.contains(&"CARD_TOKEN_USED") || codes.contains(&"IDEMPOTENCY_KEY_REUSED") {
            tracing::warn!(
                status,
                codes = %codes.join(","),
                "Square says the key or the token was used, maybe by an earlier call under this key; the outcome is unknown"
            );
        }
        return unknown("");
    }
    let provider_payment_id = body["payment"]["id"].as_str().map(str::to_owned);
    if codes.contains(&VERIFICATION_REQUIRED) {
        return PspOutcome::AuthenticationRequired {
            provider_payment_id,
        };
    }
    if let Some((_, code)) = errors
        .iter()
        .find(|(category, _)| category == "PAYMENT_METHOD_ERROR")
    {
        return PspOutcome::Declined {
            provider_payment_id,
            decline_code: code.clone(),
        };
    }
    if codes.iter().any(|code| REJECTED_CODES.contains(code)) {
        return PspOutcome::Rejected {
            message: body["errors"][0]["detail"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("the payment method was rejected ({})", codes[0])),
        };
    }
    if codes.iter().all(|code| REFUSED_CODES.contains(code)) {
        return PspOutcome::Refused {
            code: codes[0].to_owned(),
        };
    }
    tracing::error!(
        status,
        codes = %codes.join(","),
        "Square error codes this adapter does not know; the outcome is unknown"
    );
    unknown("")
}

/// Classifies the last answer to a create (not yet considering earlier answers).
fn classify_charge(reply: &WireReply) -> PspOutcome {
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
        return match body.get("payment") {
            Some(payment) if payment.is_object() => classify_payment(payment),
            _ => PspOutcome::Unknown {
                reason: format!("PSP answered {} without a payment", reply.status),
            },
        };
    }
    classify_error(reply.status, &body)
}

/// Classifies the last answer to a refund create: a refund → what it says; a `REFUND_ERROR` or
/// another definitive refusal → failed: nothing was refunded, and a byte-identical re-send under
/// the key replays the first answer (Square keeps keys; reconcile re-sends a refund only while
/// the PSP is sure to remember them), so an earlier call of ours that refunded would have been
/// answered with its refund, not refused — as on Stripe; 401/403 → not sent (alarm) unless an
/// earlier call under the key was answered; anything else → unknown.
fn classify_refund(Sent { reply, retried, .. }: Sent) -> RefundOutcome {
    if matches!(reply.status, 401 | 403) {
        let reason = credentials_refused(reply.status);
        return if retried {
            RefundOutcome::Unknown { reason }
        } else {
            RefundOutcome::NotSent { reason }
        };
    }
    let body: Value = match serde_json::from_slice(&reply.body) {
        Ok(body) => body,
        Err(error) => {
            return RefundOutcome::Unknown {
                reason: format!("unreadable PSP answer ({}): {error}", reply.status),
            }
        }
    };
    if (200..300).contains(&reply.status) {
        return match body.get("refund").and_then(refund_settlement) {
            Some(settlement) => RefundOutcome::Answered(settlement),
            None => RefundOutcome::Unknown {
                reason: format!("PSP answered {} without a readable refund", reply.status),
            },
        };
    }
    let errors = errors_of(&body);
    let codes: Vec<&str> = errors.iter().map(|(_, code)| code.as_str()).collect();
    // "A refund is already pending" may be ours: never a refusal.
    let refusal = !codes.is_empty()
        && !codes.iter().any(|code| UNKNOWN_CODES.contains(code))
        && !codes.contains(&"REFUND_ALREADY_PENDING")
        && errors.iter().all(|(category, code)| {
            category == "REFUND_ERROR"
                || category == "PAYMENT_METHOD_ERROR"
                || REFUSED_CODES.contains(&code.as_str())
                || code == "NOT_FOUND"
        });
    if refusal && is_client_error(reply.status) {
        return RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: body["refund"]["id"].as_str().map(str::to_owned),
            code: codes[0].to_owned(),
        });
    }
    RefundOutcome::Unknown {
        reason: format!("PSP answered {} {}", reply.status, codes.join(",")),
    }
}

#[async_trait]
impl<T: PspTransport> Psp for SquarePsp<T> {
    fn name(&self) -> &str {
        &self.provider_name
    }

    fn kind(&self) -> crate::domain::PspKind {
        crate::domain::PspKind::Square
    }

    /// `POST /v2/payments` (`autocomplete: false`), retrying busy answers (409, 429) with the
    /// answered rule of every keyed create. An approved payment answers
    /// [`PspOutcome::Authorized`]: the caller stores its id, then completes it
    /// ([`Psp::operate`] with a capture) unless the payment is captured later by staff.
    ///
    /// A create whose answer is lost after connecting is sent again at once, byte for byte under
    /// its key, while time is left: Square answers the first call's payment again (or, if the
    /// first never landed, makes the one payment now), so the attempt learns its payment's id
    /// without waiting for a webhook and reconcile — Square has no lookup by our reference.
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let call = self.charge_call(request);
        let started = Instant::now();
        let mut lost_once = false;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let Sent { reply, retried, .. } = match keyed::send_with_busy_retries(
                &self.transport,
                &call,
                left,
                self.request_timeout,
            )
            .await
            {
                Ok(sent) => sent,
                // Only the first call can prove nothing was sent.
                Err(NoAnswer::NotSent(reason)) if !lost_once => {
                    return PspOutcome::NotSent { reason }
                }
                Err(NoAnswer::NotSent(reason) | NoAnswer::Unknown(reason)) => {
                    let again =
                        !lost_once && timeout.saturating_sub(started.elapsed()) >= RESEND_AT_LEAST;
                    if again {
                        tracing::warn!(payment_id = %request.payment_id, %reason, "the create's answer was lost; sending it again under its key");
                        lost_once = true;
                        continue;
                    }
                    return PspOutcome::Unknown { reason };
                }
            };
            return match classify_charge(&reply) {
                // Credentials refused after an earlier answer (or a lost call): the key may be
                // known.
                PspOutcome::NotSent { reason } if retried || lost_once => {
                    PspOutcome::Unknown { reason }
                }
                outcome => outcome,
            };
        }
    }

    /// Square cannot look a payment up by our reference (ListPayments neither filters on
    /// `reference_id` nor is current): not found, without a call. [`Psp::lookup_payment`]
    /// looks up a payment whose Square id is stored.
    async fn lookup(&self, _payment_id: &str) -> Result<PspLookup, PspError> {
        Ok(PspLookup::NotFound)
    }

    /// `GET /v2/payments/{id}` once the id is stored (checked to be ours by its
    /// `reference_id`); without it, not found (never proof: the fence is).
    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        let Some(id) = payment.provider_payment_id.as_deref() else {
            return Ok(PspLookup::NotFound);
        };
        let found = self
            .retrieve_payment(id, &payment.payment_id, self.request_timeout)
            .await?;
        lookup_of(&found)
    }

    /// `POST /v2/payments/cancel` with the charge's key: a success voided whatever the key made
    /// (or found nothing), and nothing made under it can move money since payonce completes
    /// only what it stored ([`Fence::Voided`]). A refusal (UNCONFIRMED what Square answers for a
    /// completed payment; payonce never completes one whose id it did not store) or any other
    /// failure proves nothing: the attempt is looked at again, and alarms past its bound.
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        let call = self.call(
            "POST",
            "/v2/payments/cancel".to_owned(),
            Some(json!({"idempotency_key": charge_key(&request.payment_id)})),
        );
        let reply = self.plain(call, self.request_timeout).await?;
        if matches!(reply.status, 401 | 403) {
            return Err(PspError {
                reason: credentials_refused(reply.status),
            });
        }
        let body: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        // Only Square's own answer proves: a JSON object without errors.
        if reply.status == 200 && body.is_object() && errors_of(&body).is_empty() {
            return Ok(Fence::Voided);
        }
        let codes: Vec<String> = errors_of(&body).into_iter().map(|(_, code)| code).collect();
        if is_client_error(reply.status) {
            // A payment under the key that is no longer approved (canceled or failed): none is
            // ever completed without its id stored, and reconcile fences only an attempt with
            // none, so it gives the attempt up once past the fence window.
            tracing::warn!(
                payment_id = %request.payment_id,
                status = reply.status,
                codes = %codes.join(","),
                "Square refused to cancel by this attempt's key; reconcile gives it up once past the fence window"
            );
        }
        Err(PspError {
            reason: format!(
                "cancel by idempotency key answered {} {}",
                reply.status,
                codes.join(",")
            ),
        })
    }

    /// Never meaningful for Square: reconcile cancels only the unconfirmed charge a
    /// [`Fence::NeverRan`] created, and this adapter's fence creates none. Refused without a
    /// call (a cancel of a payment is [`Psp::operate`]).
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        Err(PspError {
            reason: format!(
                "Square payments are canceled only through operate: {provider_payment_id} left as it is"
            ),
        })
    }

    /// Every payment is created `autocomplete: false` and completed only under the id payonce
    /// stored (`service::complete`); one never completed Square cancels when its delay (7 days
    /// for a card not present) lapses.
    fn moves_money_only_under_a_stored_id(&self) -> bool {
        true
    }

    /// Square completes the whole approved amount (changing it first is another call, with its
    /// own races): captures are whole.
    fn captures_partially(&self) -> bool {
        false
    }

    /// A capture completes the approved payment (`POST /v2/payments/{id}/complete`); a cancel
    /// voids it (`POST /v2/payments/{id}/cancel`). Neither takes a key.
    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        self.operate_payment(request, timeout).await
    }

    /// `POST /v2/refunds` under [`refund_key`]. A first send posts at once; a re-send (an earlier
    /// call under the key may have reached Square: a takeover) looks for our refund first, as
    /// reconcile does, so that a key Square forgot (it publishes no retention) cannot make a
    /// second refund nor turn a refusal caused by our own earlier refund into a failure.
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        if !is_object_id(&request.provider_payment_id) {
            return RefundOutcome::NotSent {
                reason: format!(
                    "{:?} is not a Square payment id: nothing sent",
                    request.provider_payment_id
                ),
            };
        }
        let started = Instant::now();
        if request.resend {
            match self
                .find_refund(
                    &request.provider_payment_id,
                    &request.refund_id,
                    Some(started + timeout),
                )
                .await
            {
                Ok(Some(settlement)) => return RefundOutcome::Answered(settlement),
                Ok(None) => {}
                Err(error) => {
                    return RefundOutcome::NotSent {
                        reason: format!(
                            "the payment's refunds could not be read, so the refund was not sent again: {}",
                            error.reason
                        ),
                    }
                }
            }
        }
        let left = timeout.saturating_sub(started.elapsed());
        let key = request_refund_key(request);
        let call = self.refund_call(request, key);
        match keyed::send_with_busy_retries(&self.transport, &call, left, self.request_timeout)
            .await
        {
            Ok(sent) => classify_refund(sent),
            Err(NoAnswer::NotSent(reason)) => RefundOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => RefundOutcome::Unknown { reason },
        }
    }

    /// Reads the payment's `refund_ids` and each refund, and answers the one whose `reason` is
    /// our refund id.
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.find_refund(provider_payment_id, refund_id, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::psp::transport::scripted::{
        after_connect, not_connected, reply, Scripted, Step,
    };
    use crate::domain::{CancellationReason, CaptureMethod, Currency};

    const TOKEN: &str = "EAAAl_scripted_token";
    const PAY: &str = "pay_0123456789abcdef0123456789abcdef";
    const SQ: &str = "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY";
    const KEY: &str = "poc-0123456789abcdef0123456789abcdef";

    fn scripted(steps: impl IntoIterator<Item = Step>) -> SquarePsp<Scripted> {
        SquarePsp::with_transport(
            Scripted::new(steps),
            "square",
            TOKEN,
            Some("L88917AVBK2S5".into()),
            Duration::from_secs(10),
        )
    }

    fn request() -> ChargeRequest {
        ChargeRequest {
            payment_id: PAY.into(),
            amount: 1000,
            currency: Currency::Usd,
            payment_method: "cnon:card-nonce-ok".into(),
            idempotency_key: format!("payonce-charge-{PAY}"),
            return_url: None,
            capture: CaptureMethod::Automatic,
            earlier_may_run: false,
        }
    }

    /// A payment as Square writes it (the shape of the spec's CreatePaymentResponse example).
    fn payment(status: &str) -> Value {
        let card_status = match status {
            "APPROVED" | "PENDING" => "AUTHORIZED",
            "COMPLETED" => "CAPTURED",
            "CANCELED" => "VOIDED",
            _ => "FAILED",
        };
        json!({
            "id": SQ,
            "created_at": "2026-12-01T10:00:00.000Z",
            "updated_at": "2026-12-01T10:00:00.500Z",
            "amount_money": {"amount": 1000, "currency": "USD"},
            "approved_money": {"amount": if status == "FAILED" { 0 } else { 1000 }, "currency": "USD"},
            "total_money": {"amount": 1000, "currency": "USD"},
            "status": status,
            "delay_action": "CANCEL",
            "delay_duration": "PT168H",
            "delayed_until": "2026-12-08T10:00:00.000Z",
            "source_type": "CARD",
            "card_details": {"status": card_status, "card": {"card_brand": "VISA", "last_4": "1111"}},
            "location_id": "L88917AVBK2S5",
            "reference_id": PAY,
            "version_token": "v1",
        })
    }

    fn errors(category: &str, code: &str) -> Value {
        json!({"errors": [{"category": category, "code": code, "detail": format!("Authorization error: '{code}'")}]})
    }

    fn declined(code: &str) -> Value {
        let mut failed = payment("FAILED");
        failed["card_details"]["errors"] = errors("PAYMENT_METHOD_ERROR", code)["errors"].clone();
        let mut body = errors("PAYMENT_METHOD_ERROR", code);
        body["payment"] = failed;
        body
    }

    async fn charge_with(steps: Vec<Step>) -> (PspOutcome, Vec<WireCall>) {
        let psp = scripted(steps);
        let outcome = psp.create_charge(&request(), Duration::from_secs(10)).await;
        (outcome, psp.transport().calls())
    }

    #[test]
    fn keys_are_derived_from_the_payment_and_fit_squares_45_characters() {
        assert_eq!(charge_key(PAY), KEY);
        assert_eq!(
            refund_key(PAY, "1").as_deref(),
            Some("por-0123456789abcdef0123456789abcdef-1")
        );
        assert_eq!(
            refund_key(PAY, "dup").as_deref(),
            Some("por-0123456789abcdef0123456789abcdef-dup")
        );
        assert!(refund_key(PAY, "123456789").is_none(), "46 characters");
        // An id of another form still has a fixed-length key of its own.
        let other = charge_key("pay_1");
        assert_eq!(other.len(), 36);
        assert_ne!(other, charge_key("pay_2"));
        for key in [charge_key(PAY), charge_key("pay_1")] {
            assert!(key.len() <= MAX_KEY_LEN);
        }
    }

    #[tokio::test]
    async fn a_charge_is_created_approved_only_as_a_pure_function_of_the_request() {
        // GIVEN Square approves the payment
        let (outcome, calls) =
            charge_with(vec![reply(200, json!({"payment": payment("APPROVED")}))]).await;
        // THEN the answer is an authorization, to be stored then completed
        assert_eq!(
            outcome,
            PspOutcome::Authorized {
                provider_payment_id: SQ.into(),
                amount_capturable: 1000,
                capture_before_ms: crate::logging::epoch_ms_of_rfc3339("2026-12-08T10:00:00.000Z"),
            }
        );
        // AND exactly one create was sent: bearer token, pinned version, the key in the body,
        // autocomplete false, our payment id as reference, no partial authorization
        assert_eq!(calls.len(), 1);
        let call = &calls[0];
        assert_eq!((call.method, call.path.as_str()), ("POST", "/v2/payments"));
        assert_eq!(
            call.header("Authorization"),
            Some("Bearer EAAAl_scripted_token")
        );
        assert_eq!(call.header("Square-Version"), Some(SQUARE_VERSION));
        assert_eq!(call.header("Idempotency-Key"), None);
        let WireBody::Json(body) = &call.body else {
            panic!("a JSON body: {call:?}")
        };
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            body,
            json!({
                "idempotency_key": KEY,
                "source_id": "cnon:card-nonce-ok",
                "amount_money": {"amount": 1000, "currency": "USD"},
                "autocomplete": false,
                "accept_partial_authorization": false,
                "reference_id": PAY,
                "location_id": "L88917AVBK2S5",
            })
        );
        // AND a manual capture sends the very same request: Square's approval is the
        // authorization either way
        let mut manual = request();
        manual.capture = CaptureMethod::Manual;
        let psp = scripted([
            reply(200, json!({"payment": payment("APPROVED")})),
            reply(200, json!({"payment": payment("APPROVED")})),
        ]);
        psp.create_charge(&request(), Duration::from_secs(10)).await;
        psp.create_charge(&manual, Duration::from_secs(10)).await;
        let sent = psp.transport().calls();
        assert_eq!(sent[0], sent[1], "every re-send is byte-identical");
    }

    #[tokio::test]
    async fn answers_map_to_outcome_classes_by_category_and_code() {
        let unknown = |outcome: &PspOutcome| matches!(outcome, PspOutcome::Unknown { .. });
        // A decline: 400 with the FAILED payment, its id kept.
        let (outcome, _) = charge_with(vec![reply(400, declined("GENERIC_DECLINE"))]).await;
        assert_eq!(
            outcome,
            PspOutcome::Declined {
                provider_payment_id: Some(SQ.into()),
                decline_code: "GENERIC_DECLINE".into()
            }
        );
        // Several errors at once: the decline's category decides.
        let mut both = declined("CVV_FAILURE");
        both["errors"] = json!([
            {"category": "PAYMENT_METHOD_ERROR", "code": "GENERIC_DECLINE"},
            {"category": "PAYMENT_METHOD_ERROR", "code": "CVV_FAILURE"},
        ]);
        let (outcome, _) = charge_with(vec![reply(400, both)]).await;
        assert!(
            matches!(outcome, PspOutcome::Declined { ref decline_code, .. } if decline_code == "GENERIC_DECLINE")
        );
        // A card that needs the buyer verified: authentication required, never a decline.
        let (outcome, _) = charge_with(vec![reply(400, declined(VERIFICATION_REQUIRED))]).await;
        assert_eq!(
            outcome,
            PspOutcome::AuthenticationRequired {
                provider_payment_id: Some(SQ.into())
            }
        );
        // The token: rejected; the request: refused.
        let (outcome, _) = charge_with(vec![reply(
            404,
            errors("INVALID_REQUEST_ERROR", "NOT_FOUND"),
        )])
        .await;
        assert!(
            matches!(outcome, PspOutcome::Rejected { .. }),
            "{outcome:?}"
        );
        let (outcome, _) = charge_with(vec![reply(
            400,
            errors("INVALID_REQUEST_ERROR", "UNSUPPORTED_CURRENCY"),
        )])
        .await;
        assert_eq!(
            outcome,
            PspOutcome::Refused {
                code: "UNSUPPORTED_CURRENCY".into()
            }
        );
        // Unknown: Square asks for a retry, the key or token was used, a code not known, a
        // generic bad request, a 5xx, an unreadable body, a 2xx without a payment, PENDING.
        for (status, body) in [
            (400, errors("PAYMENT_METHOD_ERROR", "TEMPORARY_ERROR")),
            (
                400,
                errors("INVALID_REQUEST_ERROR", "IDEMPOTENCY_KEY_REUSED"),
            ),
            (400, errors("INVALID_REQUEST_ERROR", "CARD_TOKEN_USED")),
            (400, errors("INVALID_REQUEST_ERROR", "SOMETHING_NEW")),
            (400, errors("INVALID_REQUEST_ERROR", "BAD_REQUEST")),
            (500, errors("API_ERROR", "INTERNAL_SERVER_ERROR")),
            (503, json!("<html>")),
            (200, json!({})),
        ] {
            let (outcome, _) = charge_with(vec![reply(status, body.clone())]).await;
            assert!(unknown(&outcome), "{status} {body}: {outcome:?}");
        }
        // An undecided payment: pending, its id kept (Square cannot be asked by our reference).
        let (outcome, _) =
            charge_with(vec![reply(200, json!({"payment": payment("PENDING")}))]).await;
        assert_eq!(
            outcome,
            PspOutcome::Pending {
                provider_payment_id: SQ.into()
            }
        );
        // A completed payment (never asked for, but read right) is approved.
        let (outcome, _) =
            charge_with(vec![reply(200, json!({"payment": payment("COMPLETED")}))]).await;
        assert_eq!(
            outcome,
            PspOutcome::Approved {
                provider_payment_id: SQ.into()
            }
        );
    }

    #[tokio::test]
    async fn credentials_and_connections_follow_the_answered_rule() {
        // Our credentials refused: not sent (alarm)...
        let (outcome, _) = charge_with(vec![reply(
            401,
            errors("AUTHENTICATION_ERROR", "UNAUTHORIZED"),
        )])
        .await;
        assert!(matches!(outcome, PspOutcome::NotSent { .. }), "{outcome:?}");
        // ...but unknown once an earlier call under the key was answered (a 429 retried).
        let (outcome, calls) = charge_with(vec![
            reply(429, errors("RATE_LIMIT_ERROR", "RATE_LIMITED")),
            reply(401, errors("AUTHENTICATION_ERROR", "UNAUTHORIZED")),
        ])
        .await;
        assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
        assert_eq!(calls.len(), 2);
        // No connection: not sent; after connecting: unknown.
        let (outcome, _) = charge_with(vec![not_connected()]).await;
        assert!(matches!(outcome, PspOutcome::NotSent { .. }));
        let (outcome, calls) = charge_with(vec![after_connect(), after_connect()]).await;
        assert!(matches!(outcome, PspOutcome::Unknown { .. }));
        assert_eq!(calls.len(), 2, "a lost answer is asked for once more");
        // A lost answer, then the re-send's answer: Square's replay of the one payment.
        let (outcome, calls) = charge_with(vec![
            after_connect(),
            reply(200, json!({"payment": payment("APPROVED")})),
        ])
        .await;
        assert!(
            matches!(outcome, PspOutcome::Authorized { .. }),
            "{outcome:?}"
        );
        assert_eq!(calls[0], calls[1], "byte for byte under the same key");
        // A lost answer, then no connection: unknown, never not sent (the first may have landed).
        let (outcome, _) = charge_with(vec![after_connect(), not_connected()]).await;
        assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
        let (outcome, _) = charge_with(vec![
            after_connect(),
            reply(401, errors("AUTHENTICATION_ERROR", "UNAUTHORIZED")),
        ])
        .await;
        assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
        // Rate limited twice, then approved: the same request each time.
        let (outcome, calls) = charge_with(vec![
            reply(429, errors("RATE_LIMIT_ERROR", "RATE_LIMITED")),
            reply(429, errors("RATE_LIMIT_ERROR", "RATE_LIMITED")),
            reply(200, json!({"payment": payment("APPROVED")})),
        ])
        .await;
        assert!(matches!(outcome, PspOutcome::Authorized { .. }));
        assert!(calls.windows(2).all(|pair| pair[0] == pair[1]));
    }

    fn held(payment_id: &str, provider_payment_id: Option<&str>) -> Payment {
        let mut held =
            crate::domain::payment::test_payment(crate::domain::PaymentStatus::Processing, None);
        held.payment_id = payment_id.into();
        held.provider_payment_id = provider_payment_id.map(str::to_owned);
        held
    }

    #[tokio::test]
    async fn a_payment_is_looked_up_by_its_stored_id_only_and_must_be_ours() {
        // GIVEN no Square id stored: not found, and nothing asked (Square cannot search by ours)
        let psp = scripted([]);
        assert_eq!(
            psp.lookup_payment(&held(PAY, None)).await.unwrap(),
            PspLookup::NotFound
        );
        assert_eq!(psp.lookup(PAY).await.unwrap(), PspLookup::NotFound);
        assert!(psp.transport().calls().is_empty());
        // GIVEN the id stored: GET by id, each status read
        let cases = [
            ("APPROVED", "authorized"),
            ("COMPLETED", "captured"),
            ("PENDING", "pending"),
            ("CANCELED", "canceled"),
            ("FAILED", "declined"),
        ];
        for (status, read) in cases {
            let psp = scripted([reply(200, json!({"payment": payment(status)}))]);
            let found = psp.lookup_payment(&held(PAY, Some(SQ))).await.unwrap();
            let kind = match found {
                PspLookup::Authorized { .. } => "authorized",
                PspLookup::Captured {
                    amount_captured: 1000,
                    ..
                } => "captured",
                PspLookup::Pending { .. } => "pending",
                PspLookup::Canceled {
                    reason: Some(CancellationReason::Requested),
                    ..
                } => "canceled",
                PspLookup::Declined { .. } => "declined",
                ref other => panic!("{status}: {other:?}"),
            };
            assert_eq!(kind, read, "{status}");
            let calls = psp.transport().calls();
            assert_eq!(
                (calls[0].method, calls[0].path.as_str()),
                ("GET", &*format!("/v2/payments/{SQ}"))
            );
        }
        // AND a payment for another reference is not ours: an error, never a word about ours
        let mut foreign = payment("COMPLETED");
        foreign["reference_id"] = json!("pay_ffffffffffffffffffffffffffffffff");
        let psp = scripted([reply(200, json!({"payment": foreign}))]);
        assert!(psp.lookup_payment(&held(PAY, Some(SQ))).await.is_err());
        // AND a lapsed approval reads expired, a canceled one requested
        let mut lapsed = payment("CANCELED");
        lapsed["card_details"]["card_payment_timeline"] =
            json!({"voided_at": "2026-12-08T10:00:00.000Z"});
        let psp = scripted([reply(200, json!({"payment": lapsed}))]);
        assert!(matches!(
            psp.lookup_payment(&held(PAY, Some(SQ))).await.unwrap(),
            PspLookup::Canceled {
                reason: Some(CancellationReason::Expired),
                ..
            }
        ));
    }

    #[tokio::test]
    async fn the_fence_cancels_by_the_charge_key_and_only_a_success_proves() {
        // GIVEN Square answers the cancel by key with {}
        let psp = scripted([reply(200, json!({}))]);
        // THEN the key is voided: nothing under it can move money
        assert_eq!(psp.fence(&request()).await.unwrap(), Fence::Voided);
        let calls = psp.transport().calls();
        assert_eq!(
            (calls[0].method, calls[0].path.as_str()),
            ("POST", "/v2/payments/cancel")
        );
        assert_eq!(
            calls[0].body,
            WireBody::Json(json!({"idempotency_key": KEY}).to_string())
        );
        // AND a refusal (a completed payment under the key), our credentials, a 5xx or no
        // connection prove nothing
        for step in [
            reply(400, errors("INVALID_REQUEST_ERROR", "BAD_REQUEST")),
            reply(401, errors("AUTHENTICATION_ERROR", "UNAUTHORIZED")),
            reply(500, errors("API_ERROR", "INTERNAL_SERVER_ERROR")),
            reply(200, errors("API_ERROR", "INTERNAL_SERVER_ERROR")),
            // A 200 that is not Square's answer (a proxy's page, nothing) proves nothing.
            reply(200, json!("<html>")),
            reply(200, Value::Null),
            not_connected(),
        ] {
            let psp = scripted([step]);
            assert!(psp.fence(&request()).await.is_err());
        }
        // AND the port's cancel is refused without a call
        let psp = scripted([]);
        assert!(psp.cancel(SQ).await.is_err());
        assert!(psp.transport().calls().is_empty());
    }

    fn operation(kind: OperationKind) -> OperationRequest {
        OperationRequest {
            kind,
            payment_id: PAY.into(),
            provider_payment_id: SQ.into(),
            amount: None,
            payment_amount: 1000,
            capture: crate::domain::CaptureMethod::Manual,
            currency: Currency::Usd,
            idempotency_key: kind.psp_key(PAY),
        }
    }

    #[tokio::test]
    async fn a_completion_or_cancel_posts_once_and_reads_a_refusal_against_the_payment() {
        // Complete: COMPLETED answers captured.
        let psp = scripted([reply(200, json!({"payment": payment("COMPLETED")}))]);
        let outcome = psp
            .operate(&operation(OperationKind::Capture), Duration::from_secs(5))
            .await;
        assert_eq!(
            outcome,
            OperationOutcome::Answered(Settlement::Captured {
                provider_payment_id: SQ.into(),
                amount_captured: 1000
            })
        );
        let calls = psp.transport().calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].path, format!("/v2/payments/{SQ}/complete"));
        assert_eq!(calls[0].body, WireBody::Json("{}".into()));
        // Cancel: CANCELED answers canceled on request.
        let psp = scripted([reply(200, json!({"payment": payment("CANCELED")}))]);
        let outcome = psp
            .operate(&operation(OperationKind::Cancel), Duration::from_secs(5))
            .await;
        assert_eq!(
            outcome,
            OperationOutcome::Answered(Settlement::Canceled {
                provider_payment_id: Some(SQ.into()),
                reason: CancellationReason::Requested
            })
        );
        assert_eq!(
            psp.transport().calls()[0].path,
            format!("/v2/payments/{SQ}/cancel")
        );
        // A refused completion of a payment completed meanwhile (our lost earlier call) answers
        // from the payment; of one still approved, a refusal; unreadable, unknown.
        let refused = || reply(400, errors("INVALID_REQUEST_ERROR", "BAD_REQUEST"));
        let psp = scripted([
            refused(),
            reply(200, json!({"payment": payment("COMPLETED")})),
        ]);
        assert!(matches!(
            psp.operate(&operation(OperationKind::Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::Answered(Settlement::Captured { .. })
        ));
        let psp = scripted([
            refused(),
            reply(200, json!({"payment": payment("APPROVED")})),
        ]);
        assert_eq!(
            psp.operate(&operation(OperationKind::Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::Refused {
                code: "BAD_REQUEST".into()
            }
        );
        let psp = scripted([refused(), after_connect()]);
        assert!(matches!(
            psp.operate(&operation(OperationKind::Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::Unknown { .. }
        ));
        // Transport failures: not sent before connecting, unknown after.
        let psp = scripted([not_connected()]);
        assert!(matches!(
            psp.operate(&operation(OperationKind::Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::NotSent { .. }
        ));
        let psp = scripted([after_connect()]);
        assert!(matches!(
            psp.operate(&operation(OperationKind::Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::Unknown { .. }
        ));
        assert!(!scripted([]).captures_partially());
    }

    fn refund_request(resend: bool) -> RefundRequest {
        RefundRequest {
            refund_id: "rfd_0123456789abcdef0123456789abcdef_1".into(),
            payment_id: PAY.into(),
            provider_payment_id: SQ.into(),
            amount: 400,
            currency: Currency::Usd,
            reason: None,
            idempotency_key: format!("payonce-refund-{PAY}-1"),
            resend,
            provider_refund_id: None,
            captured: 0,
        }
    }

    fn refund(id: &str, status: &str, reason: &str) -> Value {
        json!({"id": id, "status": status, "amount_money": {"amount": 400, "currency": "USD"},
            "payment_id": SQ, "reason": reason, "created_at": "2026-12-01T11:00:00.000Z"})
    }

    #[tokio::test]
    async fn a_refund_posts_under_its_short_key_and_a_refusal_is_final() {
        let ours = "rfd_0123456789abcdef0123456789abcdef_1";
        let psp = scripted([reply(
            200,
            json!({"refund": refund("R_1", "PENDING", ours)}),
        )]);
        let outcome = psp
            .create_refund(&refund_request(false), Duration::from_secs(5))
            .await;
        assert_eq!(
            outcome,
            RefundOutcome::Answered(RefundSettlement::Pending {
                provider_refund_id: "R_1".into()
            })
        );
        let call = &psp.transport().calls()[0];
        assert_eq!((call.method, call.path.as_str()), ("POST", "/v2/refunds"));
        let WireBody::Json(body) = &call.body else {
            panic!()
        };
        assert_eq!(
            serde_json::from_str::<Value>(body).unwrap(),
            json!({"idempotency_key": "por-0123456789abcdef0123456789abcdef-1", "payment_id": SQ,
                "amount_money": {"amount": 400, "currency": "USD"}, "reason": ours})
        );
        // A refusal is final, on a re-send too: Square replays an earlier call's refund under
        // the key rather than refuse it.
        let too_much = || reply(400, errors("REFUND_ERROR", "REFUND_AMOUNT_INVALID"));
        for resend in [false, true] {
            // (A re-send looks first: the payment shows no refund of ours.)
            let look = reply(200, json!({"payment": payment("COMPLETED")}));
            let steps = if resend {
                vec![look, too_much()]
            } else {
                vec![too_much()]
            };
            let psp = scripted(steps);
            assert_eq!(
                psp.create_refund(&refund_request(resend), Duration::from_secs(5))
                    .await,
                RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: "REFUND_AMOUNT_INVALID".into()
                })
            );
        }
        // A re-send (an earlier call may have reached Square) looks for our refund first: one
        // found answers without posting again...
        let mut with_refund = payment("COMPLETED");
        with_refund["refund_ids"] = json!(["R_1"]);
        let psp = scripted([
            reply(200, json!({"payment": with_refund.clone()})),
            reply(200, json!({"refund": refund("R_1", "COMPLETED", ours)})),
        ]);
        assert_eq!(
            psp.create_refund(&refund_request(true), Duration::from_secs(5))
                .await,
            RefundOutcome::Answered(RefundSettlement::Succeeded {
                provider_refund_id: "R_1".into()
            })
        );
        assert!(psp
            .transport()
            .calls()
            .iter()
            .all(|call| call.method == "GET"));
        // ...none found posts; a look that fails sends nothing.
        let psp = scripted([
            reply(200, json!({"payment": payment("COMPLETED")})),
            reply(200, json!({"refund": refund("R_2", "PENDING", ours)})),
        ]);
        assert!(matches!(
            psp.create_refund(&refund_request(true), Duration::from_secs(5))
                .await,
            RefundOutcome::Answered(RefundSettlement::Pending { .. })
        ));
        assert_eq!(psp.transport().calls()[1].method, "POST");
        let psp = scripted([after_connect()]);
        assert!(matches!(
            psp.create_refund(&refund_request(true), Duration::from_secs(5))
                .await,
            RefundOutcome::NotSent { .. }
        ));
        // Unknown: a key reused, a refund already pending (maybe ours), a 5xx.
        for step in [
            reply(400, errors("REFUND_ERROR", "REFUND_ALREADY_PENDING")),
            reply(
                400,
                errors("INVALID_REQUEST_ERROR", "IDEMPOTENCY_KEY_REUSED"),
            ),
            reply(500, errors("API_ERROR", "INTERNAL_SERVER_ERROR")),
        ] {
            let psp = scripted([step]);
            assert!(matches!(
                psp.create_refund(&refund_request(false), Duration::from_secs(5))
                    .await,
                RefundOutcome::Unknown { .. }
            ));
        }
        // Statuses: COMPLETED succeeded, REJECTED and FAILED failed.
        for (status, expected) in [
            (
                "COMPLETED",
                RefundSettlement::Succeeded {
                    provider_refund_id: "R_1".into(),
                },
            ),
            (
                "REJECTED",
                RefundSettlement::Failed {
                    provider_refund_id: Some("R_1".into()),
                    code: "rejected".into(),
                },
            ),
            (
                "FAILED",
                RefundSettlement::Failed {
                    provider_refund_id: Some("R_1".into()),
                    code: "failed".into(),
                },
            ),
        ] {
            let psp = scripted([reply(200, json!({"refund": refund("R_1", status, ours)}))]);
            assert_eq!(
                psp.create_refund(&refund_request(false), Duration::from_secs(5))
                    .await,
                RefundOutcome::Answered(expected)
            );
        }
    }

    #[tokio::test]
    async fn a_refund_lookup_reads_each_refund_of_the_payment_and_matches_our_reason() {
        let ours = "rfd_0123456789abcdef0123456789abcdef_1";
        let mut with_refunds = payment("COMPLETED");
        with_refunds["refund_ids"] = json!(["R_0", "R_1"]);
        let psp = scripted([
            reply(200, json!({"payment": with_refunds.clone()})),
            reply(
                200,
                json!({"refund": refund("R_0", "COMPLETED", "rfd_other_1")}),
            ),
            reply(200, json!({"refund": refund("R_1", "COMPLETED", ours)})),
        ]);
        assert_eq!(
            psp.lookup_refund(SQ, ours).await.unwrap(),
            Some(RefundSettlement::Succeeded {
                provider_refund_id: "R_1".into()
            })
        );
        let paths: Vec<String> = psp
            .transport()
            .calls()
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert_eq!(
            paths,
            [
                format!("/v2/payments/{SQ}"),
                "/v2/refunds/R_0".into(),
                "/v2/refunds/R_1".into()
            ]
        );
        // None of ours: none; a refund that cannot be read: an error, never "none".
        let psp = scripted([reply(200, json!({"payment": payment("COMPLETED")}))]);
        assert_eq!(psp.lookup_refund(SQ, ours).await.unwrap(), None);
        let psp = scripted([
            reply(200, json!({"payment": with_refunds})),
            after_connect(),
        ]);
        assert!(psp.lookup_refund(SQ, ours).await.is_err());
    }

    #[test]
    fn the_token_never_shows_in_debug() {
        let psp = scripted([]);
        assert!(!format!("{psp:?}").contains(TOKEN));
        assert!(!format!("{:?}", SquareConfig::new(TOKEN)).contains(TOKEN));
    }
}
